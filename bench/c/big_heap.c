/* Random replacement in a large heap: 400,000 live blocks of 16 B to 1 KiB
 * (three quarters up to 128 B), about 80 MB, far more than the caches hold.
 * Each step picks a slot at random, reads the block's first and last words
 * (as a program reads an object's fields before it frees it), frees it and
 * puts a new block of a random size there, writing its first and last
 * words. What it measures is what the allocator adds to the cache misses
 * of a program whose heap does not fit in the cache: small_mix does the
 * same in a heap of a few megabytes. --threads is accepted and ignored.
 *
 * Checks: every block carries its slot's stamp at both ends, checked
 * before it is freed; every block made is freed once. */
#include "bench.h"

#define SLOTS 400000
#define STEPS 4e6 /* at scale 1 */
#define SMALL_MAX_BYTES 128
#define BLOCK_MAX_BYTES 1024
#define BLOCK_MIN_BYTES 16

struct slot {
    unsigned char *block;
    size_t size;
};

static void make_block(struct slot *s, struct bench_rng *rng, uint64_t stamp) {
    s->size = (bench_next(rng) & 3) ? bench_range(rng, BLOCK_MIN_BYTES, SMALL_MAX_BYTES)
                                    : bench_range(rng, SMALL_MAX_BYTES + 1, BLOCK_MAX_BYTES);
    s->block = bench_malloc(s->size);
    bench_store64(s->block, stamp);
    bench_store64(s->block + s->size - 8, stamp);
}

static void check_and_free(struct slot *s, uint64_t stamp) {
    if (bench_load64(s->block) != stamp || bench_load64(s->block + s->size - 8) != stamp)
        bench_fail("big_heap: block %p of %zu bytes changed", (void *)s->block, s->size);
    free(s->block);
    s->block = NULL;
}

/* A slot's stamp: the slot and how many times it was filled. */
static uint64_t stamp_of(size_t slot, uint64_t generation) { return (generation << 32) ^ slot ^ 0x5bd1e995u; }

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    size_t steps = bench_scaled(&o, STEPS);
    struct slot *slots = bench_calloc(SLOTS, sizeof *slots);
    uint32_t *generations = bench_calloc(SLOTS, sizeof *generations);
    struct bench_rng rng = bench_rng_init(0xb16);
    size_t allocations = 0, frees = 0;
    for (size_t i = 0; i < SLOTS; i++) {
        make_block(&slots[i], &rng, stamp_of(i, 0));
        allocations++;
    }
    for (size_t step = 0; step < steps; step++) {
        size_t i = (size_t)(bench_next(&rng) % SLOTS);
        check_and_free(&slots[i], stamp_of(i, generations[i]));
        frees++;
        generations[i]++;
        make_block(&slots[i], &rng, stamp_of(i, generations[i]));
        allocations++;
    }
    for (size_t i = 0; i < SLOTS; i++) {
        check_and_free(&slots[i], stamp_of(i, generations[i]));
        frees++;
    }
    if (allocations != frees) bench_fail("big_heap: %zu allocations, %zu frees", allocations, frees);
    free(generations);
    free(slots);
    printf("big_heap: %zu steps, %zu allocations, ok\n", steps, allocations);
    return 0;
}
