#define _GNU_SOURCE
#include "baseline.h"

#include <gnutls/gnutls.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    gnutls_session_t session;  // NULL for plain TCP
} endpoint;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int send_all(endpoint *e, const uint8_t *data, size_t length) {
    while (length > 0) {
        ssize_t n = e->session ? gnutls_record_send(e->session, data, length) : send(e->fd, data, length, 0);
        if (n < 0) {
            if (e->session && (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)) continue;
            return -1;
        }
        data += n;
        length -= (size_t)n;
    }
    return 0;
}

static int recv_all(endpoint *e, uint8_t *data, size_t length) {
    while (length > 0) {
        ssize_t n = e->session ? gnutls_record_recv(e->session, data, length) : recv(e->fd, data, length, 0);
        if (n <= 0) {
            if (e->session && (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)) continue;
            return -1;
        }
        data += n;
        length -= (size_t)n;
    }
    return 0;
}

// Frames as on our wire: type and length (big-endian UInt32 each), then the value.
static int send_frame(endpoint *e, uint8_t *buffer, size_t payload) {
    uint32_t header[2] = {htonl(4), htonl((uint32_t)payload)};
    memcpy(buffer, header, 8);
    return send_all(e, buffer, 8 + payload);
}

static int recv_frame(endpoint *e, uint8_t *buffer, size_t capacity) {
    uint32_t header[2];
    if (recv_all(e, (uint8_t *)header, 8) != 0) return -1;
    size_t length = ntohl(header[1]);
    if (length > capacity) return -1;
    return recv_all(e, buffer, length);
}

typedef struct {
    const baseline_config *config;
    int listen_fd;
    size_t payload;
    int count;
    int mode;  // 0 ping-pong echo, 1 throughput sink
    int status;
    gnutls_psk_server_credentials_t server_credentials;
} server_args;

static int setup_tls(endpoint *e, const baseline_config *config, int server, void *credentials) {
    if (!config->use_tls) { e->session = NULL; return 0; }
    if (gnutls_init(&e->session, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_TICKETS) < 0) return -1;
    if (gnutls_priority_set_direct(e->session, config->priorities, NULL) < 0) return -1;
    if (gnutls_credentials_set(e->session, GNUTLS_CRD_PSK, credentials) < 0) return -1;
    gnutls_transport_set_int(e->session, e->fd);
    int status;
    do { status = gnutls_handshake(e->session); } while (status < 0 && !gnutls_error_is_fatal(status));
    return status < 0 ? -1 : 0;
}

static void teardown(endpoint *e) {
    if (e->session) { gnutls_bye(e->session, GNUTLS_SHUT_WR); gnutls_deinit(e->session); }
    close(e->fd);
}

static const baseline_config *current_config;  // read by the server's key callback

static int server_key(gnutls_session_t session, const char *username, gnutls_datum_t *key) {
    (void)session; (void)username;
    key->data = gnutls_malloc(current_config->key_length);
    memcpy(key->data, current_config->key, current_config->key_length);
    key->size = (unsigned)current_config->key_length;
    return 0;
}

static void *server_main(void *raw) {
    server_args *args = raw;
    endpoint e = {accept(args->listen_fd, NULL, NULL), NULL};
    int one = 1;
    setsockopt(e.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    size_t capacity = args->payload + 8;
    uint8_t *buffer = malloc(capacity);
    args->status = -1;
    if (e.fd >= 0 && setup_tls(&e, args->config, 1, args->server_credentials) == 0) {
        args->status = 0;
        for (int i = 0; i < args->count && args->status == 0; i++) {
            if (recv_frame(&e, buffer + 8, args->payload) != 0) args->status = -1;
            else if (args->mode == 0 && send_frame(&e, buffer, args->payload) != 0) args->status = -1;
        }
        uint8_t done = 1;
        if (args->mode == 1 && args->status == 0 && send_all(&e, &done, 1) != 0) args->status = -1;
    }
    free(buffer);
    teardown(&e);
    return NULL;
}

static int run(const baseline_config *config, size_t payload, int count, int mode, double *rtt_ns, double *seconds, char *error) {
    current_config = config;
    int listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (bind(listen_fd, (struct sockaddr *)&address, length) != 0 || listen(listen_fd, 1) != 0 ||
        getsockname(listen_fd, (struct sockaddr *)&address, &length) != 0) {
        snprintf(error, 256, "cannot listen on loopback");
        close(listen_fd);
        return -1;
    }
    gnutls_psk_server_credentials_t server_credentials = NULL;
    gnutls_psk_client_credentials_t client_credentials = NULL;
    if (config->use_tls) {
        gnutls_datum_t key = {(unsigned char *)config->key, (unsigned)config->key_length};
        gnutls_psk_allocate_server_credentials(&server_credentials);
        gnutls_psk_set_server_credentials_function(server_credentials, server_key);
        gnutls_psk_allocate_client_credentials(&client_credentials);
        gnutls_psk_set_client_credentials(client_credentials, config->identity, &key, GNUTLS_PSK_KEY_RAW);
    }
    server_args args = {config, listen_fd, payload, count, mode, -1, server_credentials};
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    cpu_set_t caller_cores, core;
    pthread_getaffinity_np(pthread_self(), sizeof caller_cores, &caller_cores);
    if (config->spread) {
        CPU_ZERO(&core);
        CPU_SET(1, &core);
        pthread_attr_setaffinity_np(&attributes, sizeof core, &core);
        CPU_ZERO(&core);
        CPU_SET(0, &core);
        pthread_setaffinity_np(pthread_self(), sizeof core, &core);
    }
    pthread_t server;
    pthread_create(&server, &attributes, server_main, &args);
    pthread_attr_destroy(&attributes);

    endpoint e = {socket(AF_INET, SOCK_STREAM, 0), NULL};
    int one = 1;
    setsockopt(e.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int status = connect(e.fd, (struct sockaddr *)&address, sizeof address);
    if (status == 0) status = setup_tls(&e, config, 0, client_credentials);
    uint8_t *buffer = calloc(1, payload + 8);
    if (status == 0) {
        double start = now_ns();
        for (int i = 0; i < count && status == 0; i++) {
            double before = mode == 0 ? now_ns() : 0;
            status = send_frame(&e, buffer, payload);
            if (mode == 0 && status == 0) {
                status = recv_frame(&e, buffer + 8, payload);
                rtt_ns[i] = now_ns() - before;
            }
        }
        uint8_t done;
        if (mode == 1 && status == 0) status = recv_all(&e, &done, 1);
        if (seconds) *seconds = (now_ns() - start) / 1e9;
    }
    free(buffer);
    teardown(&e);
    pthread_join(server, NULL);
    if (config->spread) pthread_setaffinity_np(pthread_self(), sizeof caller_cores, &caller_cores);
    close(listen_fd);
    if (server_credentials) gnutls_psk_free_server_credentials(server_credentials);
    if (client_credentials) gnutls_psk_free_client_credentials(client_credentials);
    if (status != 0 || args.status != 0) {
        snprintf(error, 256, "the %s baseline failed (client %d, server %d)", config->use_tls ? "GnuTLS" : "TCP", status, args.status);
        return -1;
    }
    return 0;
}

int baseline_pingpong(const baseline_config *config, size_t payload, int iterations, double *rtt_ns, char *error) {
    return run(config, payload, iterations, 0, rtt_ns, NULL, error);
}

int baseline_throughput(const baseline_config *config, size_t payload, int count, double *seconds, char *error) {
    return run(config, payload, count, 1, NULL, seconds, error);
}
