#ifndef MULTIPEER_CGNUTLS_SHIM_H
#define MULTIPEER_CGNUTLS_SHIM_H

#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#include <string.h>

// gnutls_malloc and gnutls_free are mutable C globals (function pointers), which
// Swift 6 strict concurrency rejects; call them through these wrappers instead.
static inline void *multipeer_gnutls_malloc(size_t size) { return gnutls_malloc(size); }
static inline void multipeer_gnutls_free(void *pointer) { gnutls_free(pointer); }

// Overwrites memory in a way the optimiser may not elide (used to zero key bytes).
static inline void multipeer_secure_zero(void *pointer, size_t size) {
    volatile unsigned char *p = (volatile unsigned char *)pointer;
    while (size--) { *p++ = 0; }
}

#endif
