#ifndef MULTIPEER_BASELINE_H
#define MULTIPEER_BASELINE_H

#include <stddef.h>
#include <stdint.h>

// The baselines our link is measured against: the same TLV frames over a loopback TCP
// connection between two threads with blocking sockets, either in plain TCP or inside
// GnuTLS with the priority string and PSK our link uses. Written in plain C, so the gap
// between these figures and ours is the cost of SwiftNIO, Swift concurrency and our code.

typedef struct {
    int use_tls;                 // 0: plain TCP, 1: GnuTLS TLS 1.3 ECDHE-PSK
    const char *priorities;      // GnuTLS priority string (used when use_tls)
    const char *identity;        // PSK identity
    const uint8_t *key;          // PSK bytes
    size_t key_length;
    int spread;                  // 1: the client thread on core 0 and the server thread on core 1
                                 // for the run (0: wherever the scheduler puts them)
} baseline_config;

// Ping-pong: `iterations` round trips of a frame with `payload` bytes of value, echoed by the
// server. Writes each round trip's duration in nanoseconds to `rtt_ns` (room for `iterations`).
// Returns 0, or -1 with a message in `error` (room for 256 bytes).
int baseline_pingpong(const baseline_config *config, size_t payload, int iterations, double *rtt_ns, char *error);

// One-way throughput: `count` frames with `payload` bytes each, client to server; the server
// answers one byte when it has read them all. Writes the elapsed seconds to `seconds`.
int baseline_throughput(const baseline_config *config, size_t payload, int count, double *seconds, char *error);

#endif
