/* A shared table of live blocks, replaced at random by every thread: each
 * step allocates a block of a random size, writes it whole, swaps it into
 * a random slot and frees the block it takes out, which another thread
 * allocated as often as not. Sizes are mostly small, some medium and
 * large: 70% up to 512 bytes, 20% up to 16 KiB, 10% up to 200 KiB, the
 * shape of a server whose requests build buffers and objects that later
 * requests retire. Where larson's blocks are all small, here most of the
 * bytes are in blocks above 64 KiB, each of which the next owner of its
 * slot frees: what it measures is mostly whether that memory is given
 * back and faulted in again.
 *
 * Checks: every block carries its size and a stamp in its first bytes and
 * the stamp again in its last, checked when it is freed; every block made
 * is freed once. */
#include <stdatomic.h>

#include "bench.h"

#define SLOTS 4096
#define STEPS 800000.0 /* at scale 1, over all threads */
#define SMALL_MAX_BYTES 512
#define MEDIUM_MAX_BYTES 16384
#define LARGE_MAX_BYTES 200000
#define HEADER_BYTES 16

struct worker {
    int id;
    size_t steps;
    size_t made;
    size_t freed;
};

static _Atomic(unsigned char *) slots[SLOTS];

static size_t pick_size(struct bench_rng *rng) {
    uint64_t roll = bench_next(rng) % 100;
    size_t max = roll < 70 ? SMALL_MAX_BYTES : roll < 90 ? MEDIUM_MAX_BYTES : LARGE_MAX_BYTES;
    return bench_range(rng, HEADER_BYTES + 8, max);
}

static unsigned char *make_block(struct bench_rng *rng) {
    size_t size = pick_size(rng);
    uint64_t stamp = bench_next(rng) | 1;
    unsigned char *b = bench_malloc(size);
    memset(b, (int)(stamp & 0xff), size);
    bench_store64(b, size);
    bench_store64(b + 8, stamp);
    bench_store64(b + size - 8, stamp);
    return b;
}

static void release_block(unsigned char *b) {
    size_t size = (size_t)bench_load64(b);
    uint64_t stamp = bench_load64(b + 8);
    if (size < HEADER_BYTES + 8 || size > LARGE_MAX_BYTES) bench_fail("slot_swap: a block's size word reads %zu", size);
    if (bench_load64(b + size - 8) != stamp) bench_fail("slot_swap: the tail of a %zu-byte block changed", size);
    if (b[HEADER_BYTES] != (unsigned char)(stamp & 0xff)) bench_fail("slot_swap: the body of a %zu-byte block changed", size);
    free(b);
}

static void *work(void *arg) {
    struct worker *w = arg;
    struct bench_rng rng = bench_rng_init(0x5107u + (uint64_t)w->id);
    for (size_t step = 0; step < w->steps; step++) {
        unsigned char *b = make_block(&rng);
        w->made++;
        /* acq_rel: publishes the new block's contents (release) and takes
         * the old one's, written by another thread (acquire). */
        unsigned char *old = atomic_exchange_explicit(&slots[bench_range(&rng, 0, SLOTS - 1)], b, memory_order_acq_rel);
        if (old != NULL) {
            release_block(old);
            w->freed++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    int n = o.threads;
    size_t steps = bench_scaled(&o, STEPS) / (size_t)n + 1;
    struct worker *workers = bench_calloc((size_t)n, sizeof *workers);
    pthread_t *ids = bench_calloc((size_t)n, sizeof *ids);
    for (int i = 0; i < n; i++) workers[i] = (struct worker){.id = i, .steps = steps};
    bench_start_threads(n, work, workers, sizeof workers[0], ids);
    bench_join_threads(n, ids);
    size_t made = 0, freed = 0;
    for (int i = 0; i < n; i++) {
        made += workers[i].made;
        freed += workers[i].freed;
    }
    for (size_t i = 0; i < SLOTS; i++) {
        unsigned char *b = atomic_load_explicit(&slots[i], memory_order_relaxed);
        if (b != NULL) {
            release_block(b);
            freed++;
        }
    }
    if (made != freed) bench_fail("slot_swap: %zu blocks made, %zu freed", made, freed);
    printf("slot_swap: %d threads, %zu blocks, ok\n", n, made);
    free(workers);
    free(ids);
    return 0;
}
