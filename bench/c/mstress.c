/* A multi-threaded stress of short-lived block sets: rounds of new threads
 * (the threads of one round end before the next round starts). Each thread
 * allocates sets of blocks of random sizes; it hands about half of them to
 * the next round's threads through a shared array, and frees the others
 * itself a little later. It takes, checks and frees the sets the previous
 * round left. So memory allocated by a thread is freed after the thread
 * has ended, and every round starts with fresh threads: an allocator that
 * gives a dead thread's memory back to the OS and maps it again for the
 * next round pays for it here.
 *
 * Checks: every block carries its set's stamp, index and size; every set
 * taken is checked whole before it is freed, and the number of sets freed
 * must equal the number made. */
#include <stdatomic.h>

#include "bench.h"

#define SLOTS 1024           /* sets in flight between two rounds */
#define KEPT_SETS 8          /* sets a thread frees itself, oldest first */
#define SET_BLOCKS_MAX 64
#define ROUNDS 60.0          /* at scale 1 */
#define STEPS_PER_THREAD 1200

struct set {
    uint64_t stamp;
    size_t count;
    size_t sizes[SET_BLOCKS_MAX];
    unsigned char *blocks[SET_BLOCKS_MAX];
};

/* Round r deposits into slots[r % 2] and takes from slots[(r + 1) % 2],
 * which round r - 1 filled. */
static _Atomic(struct set *) slots[2][SLOTS];

struct worker {
    int round;
    int id;
    size_t made;
    size_t freed;
};

/* 60% 8-64 B, 30% to 512 B, 9% to 4 KiB, 1% to 64 KiB. */
static size_t block_size(struct bench_rng *rng) {
    uint64_t r = bench_next(rng) % 100;
    if (r < 60) return bench_range(rng, 8, 64);
    if (r < 90) return bench_range(rng, 65, 512);
    if (r < 99) return bench_range(rng, 513, 4096);
    return bench_range(rng, 4097, 65536);
}

static uint64_t block_tag(const struct set *s, size_t i) { return s->stamp ^ ((uint64_t)i << 48) ^ s->sizes[i]; }

/* The tag's low bytes go at the start of the block, its lowest byte also
 * at the end; the start never covers the last byte. */
static size_t head_bytes(size_t size) { return size - 1 < sizeof(uint64_t) ? size - 1 : sizeof(uint64_t); }

static struct set *make_set(struct bench_rng *rng) {
    struct set *s = bench_malloc(sizeof *s);
    s->stamp = bench_next(rng) & 0x0000ffffffffffffull;
    s->count = bench_range(rng, 1, SET_BLOCKS_MAX);
    for (size_t i = 0; i < s->count; i++) {
        size_t size = block_size(rng);
        s->sizes[i] = size;
        s->blocks[i] = bench_malloc(size);
        uint64_t tag = block_tag(s, i);
        memcpy(s->blocks[i], &tag, head_bytes(size));
        s->blocks[i][size - 1] = (unsigned char)tag;
    }
    return s;
}

static void free_set(struct set *s) {
    if (s->count == 0 || s->count > SET_BLOCKS_MAX) bench_fail("mstress: set %p has %zu blocks", (void *)s, s->count);
    for (size_t i = 0; i < s->count; i++) {
        size_t size = s->sizes[i];
        uint64_t tag = block_tag(s, i), seen = 0;
        memcpy(&seen, s->blocks[i], head_bytes(size));
        uint64_t mask = head_bytes(size) < sizeof tag ? (1ull << (8 * head_bytes(size))) - 1 : ~0ull;
        if (seen != (tag & mask) || s->blocks[i][size - 1] != (unsigned char)tag) bench_fail("mstress: block %zu of set %p changed", i, (void *)s);
        free(s->blocks[i]);
    }
    free(s);
}

static void *work(void *arg) {
    struct worker *w = arg;
    struct bench_rng rng = bench_rng_init(((uint64_t)w->round << 16) + (uint64_t)w->id + 0x5e7);
    _Atomic(struct set *) *mine = slots[w->round % 2];
    _Atomic(struct set *) *theirs = slots[(w->round + 1) % 2];
    struct set *kept[KEPT_SETS] = {0};
    size_t kept_next = 0;
    for (size_t step = 0; step < STEPS_PER_THREAD; step++) {
        /* acq_rel: the exchange hands a set over between threads; its
         * contents must be visible to the taker (acquire) and this
         * thread's writes to a set it deposits must be published (release). */
        struct set *old = atomic_exchange_explicit(&theirs[bench_range(&rng, 0, SLOTS - 1)], NULL, memory_order_acq_rel);
        if (old != NULL) {
            free_set(old);
            w->freed++;
        }
        struct set *s = make_set(&rng);
        w->made++;
        if (bench_next(&rng) & 1) {
            old = atomic_exchange_explicit(&mine[bench_range(&rng, 0, SLOTS - 1)], s, memory_order_acq_rel);
        } else {
            old = kept[kept_next];
            kept[kept_next] = s;
            kept_next = (kept_next + 1) % KEPT_SETS;
        }
        if (old != NULL) {
            free_set(old);
            w->freed++;
        }
    }
    for (size_t i = 0; i < KEPT_SETS; i++) {
        if (kept[i] != NULL) {
            free_set(kept[i]);
            w->freed++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    int n = o.threads;
    size_t rounds = bench_scaled(&o, ROUNDS);
    struct worker *workers = bench_calloc((size_t)n, sizeof *workers);
    pthread_t *ids = bench_calloc((size_t)n, sizeof *ids);
    size_t made = 0, freed = 0;
    for (size_t r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++) workers[i] = (struct worker){.round = (int)r, .id = i};
        bench_start_threads(n, work, workers, sizeof workers[0], ids);
        bench_join_threads(n, ids);
        for (int i = 0; i < n; i++) {
            made += workers[i].made;
            freed += workers[i].freed;
        }
    }
    for (int a = 0; a < 2; a++) {
        for (size_t i = 0; i < SLOTS; i++) {
            struct set *s = atomic_load_explicit(&slots[a][i], memory_order_relaxed);
            if (s != NULL) {
                free_set(s);
                freed++;
            }
        }
    }
    if (made != freed) bench_fail("mstress: %zu sets made, %zu freed", made, freed);
    printf("mstress: %zu rounds of %d threads, %zu sets, ok\n", rounds, n, made);
    free(workers);
    free(ids);
    return 0;
}
