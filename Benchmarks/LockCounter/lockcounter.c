// Counts the process's pthread mutex acquisitions and the bytes it copies, for SessionBenchmark
// --locks: preloaded (LD_PRELOAD), it stands in for pthread_mutex_lock and pthread_mutex_trylock,
// and for memcpy and memmove (and their fortified forms), counts each call and passes it on.
// SwiftNIO's locks (NIOLock, NIOLockedValueBox, an event loop's task queue, promises' callbacks)
// are pthread mutexes; the Swift runtime's own locks are not counted. Copies: the bytes of every
// call of at least MULTIPEER_COPY_MINIMUM (256) bytes, so that the headers, lengths and small
// values copied around a message stay out and its payload's copies are what is counted (Swift's
// copyMemory, ByteBuffer's writes, Data's, GnuTLS's own copies into and out of its records);
// a copy the compiler made inline, without a call, is not seen.
//
// Where the locks are taken: with MULTIPEER_LOCK_SITES=FILE, every 16th acquisition's call stack
// (its innermost 7 frames) is counted, and at exit the stacks taken more than 100 times in the
// sample go to FILE, each with its estimated count (the sample's times 16), as raw addresses;
// Benchmarks/LockCounter/sites.py names them (llvm-symbolizer, swift demangle).
// Built by the Makefile's bench target with the Swift toolchain's clang:
//
//   clang -shared -fPIC -O2 -fno-builtin -o .build/release/liblockcounter.so Benchmarks/LockCounter/lockcounter.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MULTIPEER_COPY_MINIMUM 256

static atomic_ullong acquisitions;
static atomic_ullong copied;
static int (*next_lock)(pthread_mutex_t *);
static int (*next_trylock)(pthread_mutex_t *);
typedef void *(*copier)(void *, const void *, size_t);
static copier next_memcpy, next_memmove;
static _Thread_local int resolving;

// MULTIPEER_LOCK_SITES: the sampled call stacks, in an open-addressed table under a lock of its
// own (not counted; a sample taken while one is being taken on the same thread is skipped).
#define SITE_DEPTH 7
#define SITE_SLOTS 4096
#define SITE_EVERY 16
struct site {
    void *frames[SITE_DEPTH];
    int depth;
    unsigned long long samples;
};
static struct site sites[SITE_SLOTS];
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *sites_path;  // read once the library is loaded: no sample before
static _Thread_local int sampling;

static void sample_site(unsigned long long acquisition) {
    if (acquisition % SITE_EVERY || sampling) return;
    sampling = 1;
    void *frames[SITE_DEPTH + 2];
    int depth = backtrace(frames, SITE_DEPTH + 2) - 2;  // without this function and the lock's
    if (!next_lock) next_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (depth > 0) {
        unsigned long hash = 0;
        for (int i = 0; i < depth; i++) hash = hash * 31 + (unsigned long)frames[i + 2];
        next_lock(&sites_lock);
        for (unsigned i = 0; i < SITE_SLOTS; i++) {
            struct site *slot = &sites[(hash + i) % SITE_SLOTS];
            if (slot->samples == 0) {
                memcpy(slot->frames, frames + 2, depth * sizeof(void *));
                slot->depth = depth;
                slot->samples = 1;
                break;
            }
            if (slot->depth == depth && !memcmp(slot->frames, frames + 2, depth * sizeof(void *))) {
                slot->samples++;
                break;
            }
        }
        pthread_mutex_unlock(&sites_lock);
    }
    sampling = 0;
}

static void count_acquisition(pthread_mutex_t *mutex) {
    unsigned long long acquisition = atomic_fetch_add_explicit(&acquisitions, 1, memory_order_relaxed);
    if (sites_path && mutex != &sites_lock) sample_site(acquisition);
}

__attribute__((constructor)) static void read_sites_path(void) { sites_path = getenv("MULTIPEER_LOCK_SITES"); }

__attribute__((destructor)) static void write_sites(void) {
    if (!sites_path) return;
    sampling = 1;
    FILE *file = fopen(sites_path, "w");
    if (!file) return;
    fprintf(file, "acquisitions %llu\n", (unsigned long long)atomic_load(&acquisitions));
    for (int i = 0; i < SITE_SLOTS; i++) {
        if (sites[i].samples <= 100) continue;
        fprintf(file, "site %llu\n", sites[i].samples * SITE_EVERY);
        char **names = backtrace_symbols(sites[i].frames, sites[i].depth);
        for (int j = 0; names && j < sites[i].depth; j++) fprintf(file, "  %s\n", names[j]);
        free(names);
    }
    fclose(file);
}

// Found on first use: other libraries' constructors lock before this one's would run.
int pthread_mutex_lock(pthread_mutex_t *mutex) {
    if (!next_lock) next_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    count_acquisition(mutex);
    return next_lock(mutex);
}

int pthread_mutex_trylock(pthread_mutex_t *mutex) {
    if (!next_trylock) next_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    count_acquisition(mutex);
    return next_trylock(mutex);
}

// While dlsym finds the next memcpy (it may copy on the way), bytes are moved one at a time,
// back to front where the target lies above the source.
static void *slow_move(void *target, const void *source, size_t count) {
    volatile unsigned char *to = target;
    const volatile unsigned char *from = source;
    if (to > from) {
        while (count--) to[count] = from[count];
    } else {
        for (size_t index = 0; index < count; index++) to[index] = from[index];
    }
    return target;
}

static copier resolve(copier *next, const char *name) {
    if (*next) return *next;
    if (resolving) return slow_move;
    resolving = 1;
    copier found = (copier)dlsym(RTLD_NEXT, name);
    resolving = 0;
    if (found) *next = found;
    return found ? found : slow_move;
}

static void count_copy(size_t count) {
    if (count >= MULTIPEER_COPY_MINIMUM) atomic_fetch_add_explicit(&copied, count, memory_order_relaxed);
}

void *memcpy(void *target, const void *source, size_t count) {
    count_copy(count);
    return resolve(&next_memcpy, "memcpy")(target, source, count);
}

void *memmove(void *target, const void *source, size_t count) {
    count_copy(count);
    return resolve(&next_memmove, "memmove")(target, source, count);
}

void *__memcpy_chk(void *target, const void *source, size_t count, size_t target_length) {
    if (count > target_length) __builtin_trap();
    return memcpy(target, source, count);
}

void *__memmove_chk(void *target, const void *source, size_t count, size_t target_length) {
    if (count > target_length) __builtin_trap();
    return memmove(target, source, count);
}

/// The acquisitions so far; SessionBenchmark finds it with dlsym.
unsigned long long multipeer_lock_acquisitions(void) {
    return atomic_load_explicit(&acquisitions, memory_order_relaxed);
}

/// The bytes copied so far in calls of at least MULTIPEER_COPY_MINIMUM bytes.
unsigned long long multipeer_bytes_copied(void) {
    return atomic_load_explicit(&copied, memory_order_relaxed);
}
