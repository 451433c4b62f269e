/* What the C workloads share: command line, a small random generator,
 * checked allocation and a failure exit. Each workload is one C file built
 * with `gcc -O2 -pthread` and run under LD_PRELOAD for each allocator, so
 * it must call malloc and free exactly as an ordinary C program does. */
#ifndef KENNEL_BENCH_C_H
#define KENNEL_BENCH_C_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_options {
    int threads;  /* worker threads; 2 by default (the reference machine's cores) */
    double scale; /* multiplies the amount of work; 1.0 runs 1-3 s under glibc */
};

/* A wrong result is a failed benchmark: the driver sees the status. */
static inline void bench_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void bench_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "CHECK FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(3);
}

static inline void bench_oom(size_t size) {
    fprintf(stderr, "out of memory (%zu bytes)\n", size);
    exit(4);
}

static inline struct bench_options bench_parse(int argc, char **argv) {
    struct bench_options o = {2, 1.0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            o.threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
            o.scale = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--scale X]\n", argv[0]);
            exit(2);
        }
    }
    if (o.threads < 1 || o.threads > 256 || !(o.scale > 0)) {
        fprintf(stderr, "%s: threads must be 1-256 and scale positive\n", argv[0]);
        exit(2);
    }
    return o;
}

/* n scaled by the --scale factor, at least 1. */
static inline size_t bench_scaled(const struct bench_options *o, double n) {
    double v = n * o->scale;
    return v < 1 ? 1 : (size_t)v;
}

/* xorshift64*: fast, good enough for choosing sizes and slots, and the same
 * sequence for every allocator. */
struct bench_rng {
    uint64_t state;
};

static inline struct bench_rng bench_rng_init(uint64_t seed) {
    struct bench_rng r = {seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull};
    if (r.state == 0) r.state = 1;
    return r;
}

static inline uint64_t bench_next(struct bench_rng *r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi]. */
static inline size_t bench_range(struct bench_rng *r, size_t lo, size_t hi) {
    return lo + (size_t)(bench_next(r) % (hi - lo + 1));
}

/* A 64-bit word at any byte address (blocks' stamps and sizes). */
static inline void bench_store64(unsigned char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

static inline uint64_t bench_load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void *bench_malloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL) bench_oom(size);
    return p;
}

static inline void *bench_calloc(size_t count, size_t size) {
    void *p = calloc(count, size);
    if (p == NULL) bench_oom(count * size);
    return p;
}

static inline void *bench_realloc(void *old, size_t size) {
    void *p = realloc(old, size);
    if (p == NULL) bench_oom(size);
    return p;
}

/* A zero the compiler cannot see: with a constant 0, gcc turns
 * malloc + memset(0) into calloc, and the workloads that mix the two
 * would measure calloc twice. */
static volatile int bench_zero = 0;

static inline void bench_start_threads(int n, void *(*fn)(void *), void *args, size_t arg_size, pthread_t *ids) {
    for (int i = 0; i < n; i++) {
        if (pthread_create(&ids[i], NULL, fn, (char *)args + (size_t)i * arg_size) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(5);
        }
    }
}

static inline void bench_join_threads(int n, pthread_t *ids) {
    for (int i = 0; i < n; i++) pthread_join(ids[i], NULL);
}

#endif
