// Counts the process's pthread mutex acquisitions, for SessionBenchmark --locks: preloaded
// (LD_PRELOAD), it stands in for pthread_mutex_lock and pthread_mutex_trylock, counts each call
// and passes it on. SwiftNIO's locks (NIOLock, NIOLockedValueBox, an event loop's task queue,
// promises' callbacks) are pthread mutexes; the Swift runtime's own locks are not counted.
// Built by the Makefile's bench target with the Swift toolchain's clang:
//
//   clang -shared -fPIC -O2 -o .build/release/liblockcounter.so Benchmarks/LockCounter/lockcounter.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

static atomic_ullong acquisitions;
static int (*next_lock)(pthread_mutex_t *);
static int (*next_trylock)(pthread_mutex_t *);

// Found on first use: other libraries' constructors lock before this one's would run.
int pthread_mutex_lock(pthread_mutex_t *mutex) {
    if (!next_lock) next_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    atomic_fetch_add_explicit(&acquisitions, 1, memory_order_relaxed);
    return next_lock(mutex);
}

int pthread_mutex_trylock(pthread_mutex_t *mutex) {
    if (!next_trylock) next_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    atomic_fetch_add_explicit(&acquisitions, 1, memory_order_relaxed);
    return next_trylock(mutex);
}

/// The acquisitions so far; SessionBenchmark finds it with dlsym.
unsigned long long multipeer_lock_acquisitions(void) {
    return atomic_load_explicit(&acquisitions, memory_order_relaxed);
}
