// net-impair: forwards every Ethernet frame between two interfaces, dropping a share of them at
// random and holding each for a random time, both directions independently: what
// `tc qdisc add dev X root netem loss L% delay D J` would do, for kernels without netem (this
// machine's). The multi-host fault suite puts it between a host's link and the bridge.
//
//   net-impair IFACE_A IFACE_B LOSS_PERCENT DELAY_MS JITTER_MS [PEER_MAC]
//
// Each frame is dropped with probability LOSS_PERCENT/100, or sent on after DELAY_MS +- JITTER_MS
// (uniform), so frames can be reordered, as with netem. With PEER_MAC (aa:bb:cc:dd:ee:ff), only
// the frames to or from that Ethernet address are: one path of the host's, the others forwarded
// at once (ARP and neighbour discovery broadcasts among them). Frames travel with their virtio-net
// header (PACKET_VNET_HDR), so segmentation offload passes through unharmed.
//
// SIGUSR1 holds every frame impaired, both ways: nothing is lost (up to 65,536 frames), nothing goes on.
// SIGUSR2 lets what was held go at once, in the order it came, and forwarding goes on as before:
// turmoil's `hold` and `release`, SimulatedWorld.hold's twin. Runs until SIGINT or SIGTERM;
// prints what it forwarded, dropped and held when it ends.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { maximum_frame = 65536 + sizeof(struct virtio_net_hdr), maximum_queued = 65536 };

struct frame {
    uint64_t due;  // nanoseconds, CLOCK_MONOTONIC
    uint64_t order;  // of arrival: frames due at once go in the order they came
    int out;
    size_t length;
    unsigned char *bytes;
};

// A binary min-heap of frames by due time.
static struct frame queue[maximum_queued];
static size_t queued;

static int before(const struct frame *a, const struct frame *b) {
    return a->due < b->due || (a->due == b->due && a->order < b->order);
}

static void push(struct frame frame) {
    size_t index = queued++;
    while (index > 0 && before(&frame, &queue[(index - 1) / 2])) {
        queue[index] = queue[(index - 1) / 2];
        index = (index - 1) / 2;
    }
    queue[index] = frame;
}

static struct frame pop(void) {
    struct frame top = queue[0], last = queue[--queued];
    size_t index = 0;
    for (;;) {
        size_t child = 2 * index + 1;
        if (child >= queued) break;
        if (child + 1 < queued && before(&queue[child + 1], &queue[child])) child++;
        if (!before(&queue[child], &last)) break;
        queue[index] = queue[child];
        index = child;
    }
    if (queued > 0) queue[index] = last;
    return top;
}

static uint64_t now(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (uint64_t)time.tv_sec * 1000000000u + (uint64_t)time.tv_nsec;
}

static uint64_t random_state;

static double uniform(void) {  // [0, 1), xorshift64*
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return (double)((random_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static volatile sig_atomic_t stopping, holding;
static void stop(int signal) { (void)signal; stopping = 1; }
static void hold(int signal) { holding = signal == SIGUSR1; }

static int open_interface(const char *name) {
    unsigned index = if_nametoindex(name);
    if (index == 0) {
        fprintf(stderr, "net-impair: no interface %s\n", name);
        exit(2);
    }
    int descriptor = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    int on = 1;
    struct sockaddr_ll address = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)index};
    struct packet_mreq promiscuous = {.mr_ifindex = (int)index, .mr_type = PACKET_MR_PROMISC};
    if (descriptor < 0 || setsockopt(descriptor, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0
        || bind(descriptor, (struct sockaddr *)&address, sizeof address) != 0
        || setsockopt(descriptor, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promiscuous, sizeof promiscuous) != 0) {
        fprintf(stderr, "net-impair: cannot open %s: %s\n", name, strerror(errno));
        exit(2);
    }
    return descriptor;
}

int main(int argc, char **argv) {
    unsigned char peer[6];
    int onePath = argc == 7;
    if ((argc != 6 && argc != 7)
        || (onePath
            && sscanf(argv[6], "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &peer[0], &peer[1], &peer[2], &peer[3], &peer[4], &peer[5])
                != 6)) {
        fprintf(stderr, "usage: net-impair IFACE_A IFACE_B LOSS_PERCENT DELAY_MS JITTER_MS [PEER_MAC]\n");
        return 64;
    }
    int sockets[2] = {open_interface(argv[1]), open_interface(argv[2])};
    double loss = atof(argv[3]) / 100;
    double delay = atof(argv[4]) * 1e6, jitter = atof(argv[5]) * 1e6;
    random_state = now() | 1;
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGUSR1, hold);
    signal(SIGUSR2, hold);
    unsigned long forwarded = 0, dropped = 0, held = 0, heldBefore = 0, arrived = 0;
    int wasHolding = 0;
    static unsigned char buffer[maximum_frame];

    while (!stopping) {
        if (holding != wasHolding) {
            wasHolding = holding;
            if (holding) printf("net-impair: holding\n");
            else printf("net-impair: released %lu frames held\n", held - heldBefore);
            heldBefore = held;
            fflush(stdout);
        }
        // (Holding, it looks every 50 ms: a release that came just before poll() waits no longer.)
        int timeout = holding ? 50 : -1;
        if (queued > 0 && !holding) {
            uint64_t current = now();
            timeout = queue[0].due <= current ? 0 : (int)((queue[0].due - current) / 1000000) + 1;
        }
        struct pollfd watched[2] = {{.fd = sockets[0], .events = POLLIN}, {.fd = sockets[1], .events = POLLIN}};
        if (poll(watched, 2, timeout) < 0 && errno != EINTR) break;
        for (int side = 0; side < 2; side++) {
            if (!(watched[side].revents & POLLIN)) continue;
            for (;;) {
                struct sockaddr_ll from;
                socklen_t length = sizeof from;
                ssize_t count = recvfrom(sockets[side], buffer, sizeof buffer, 0, (struct sockaddr *)&from, &length);
                if (count < 0) break;
                if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own sends, seen again
                // (After the virtio-net header, the Ethernet header: destination, then source.)
                const unsigned char *ethernet = buffer + sizeof(struct virtio_net_hdr);
                int impaired = !onePath
                    || ((size_t)count >= sizeof(struct virtio_net_hdr) + 12
                        && (memcmp(ethernet, peer, 6) == 0 || memcmp(ethernet + 6, peer, 6) == 0));
                if (!impaired) {
                    if (send(sockets[1 - side], buffer, (size_t)count, 0) >= 0) forwarded++;
                    continue;
                }
                if (uniform() < loss || queued == maximum_queued) {
                    dropped++;
                    continue;
                }
                double wait = delay + (2 * uniform() - 1) * jitter;
                struct frame frame = {
                    .due = now() + (uint64_t)(wait > 0 ? wait : 0),
                    .order = arrived++,
                    .out = sockets[1 - side],
                    .length = (size_t)count,
                };
                if (holding) held++;
                frame.bytes = malloc(frame.length);
                if (!frame.bytes) continue;
                memcpy(frame.bytes, buffer, frame.length);
                push(frame);
            }
        }
        // (Released, what was held is all due: it goes at once, in order.)
        for (uint64_t current = now(); !holding && queued > 0 && queue[0].due <= current;) {
            struct frame frame = pop();
            if (send(frame.out, frame.bytes, frame.length, 0) >= 0) forwarded++;
            free(frame.bytes);
        }
    }
    printf("net-impair: forwarded %lu frames, dropped %lu, held %lu\n", forwarded, dropped, held);
    return 0;
}
