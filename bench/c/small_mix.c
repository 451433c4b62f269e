/* Single-threaded small blocks, the bulk of what most C programs allocate:
 * sizes from 8 B to 1 KiB, most of them small (40% up to 16 B, 25% to
 * 32 B, ... 2% above 512 B), in a working set of 50,000 slots of which
 * about two thirds hold a live block. Each step picks a slot at random:
 * an empty one gets a new block, a full one has its block checked and
 * freed and, half the time, replaced at once. Frees come in random order,
 * so the free lists are scattered as in a long-running program.
 * --threads is accepted and ignored.
 *
 * Checks: every block is filled with a byte derived from its slot and
 * generation, checked at both ends when it is freed. */
#include "bench.h"

#define SLOTS 50000
#define STEPS 12e6 /* at scale 1 */

struct slot {
    unsigned char *block;
    uint32_t size;
    uint32_t fill;
};

/* Skewed to small: cumulative percentages of the classes up to 16, 32,
 * 64, 128, 256, 512 and 1024 bytes. */
static size_t block_size(struct bench_rng *rng) {
    static const unsigned percent_below[] = {40, 65, 80, 90, 95, 98, 100};
    static const size_t class_max[] = {16, 32, 64, 128, 256, 512, 1024};
    uint64_t r = bench_next(rng);
    unsigned p = (unsigned)(r % 100);
    size_t c = 0;
    while (p >= percent_below[c]) c++;
    size_t lo = c == 0 ? 8 : class_max[c - 1] + 1;
    return lo + (size_t)((r >> 32) % (class_max[c] - lo + 1));
}

static void check_and_free(struct slot *s) {
    unsigned char f = (unsigned char)s->fill;
    if (s->block[0] != f || s->block[s->size - 1] != f || s->block[s->size / 2] != f) bench_fail("small_mix: block %p of %u bytes changed", (void *)s->block, s->size);
    free(s->block);
    s->block = NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    size_t steps = bench_scaled(&o, STEPS);
    struct slot *slots = bench_calloc(SLOTS, sizeof *slots);
    struct bench_rng rng = bench_rng_init(0x5a11);
    uint32_t generation = 0;
    size_t allocations = 0, frees = 0;
    for (size_t step = 0; step < steps; step++) {
        uint64_t r = bench_next(&rng);
        struct slot *s = &slots[(r >> 1) % SLOTS];
        if (s->block != NULL) {
            check_and_free(s);
            frees++;
            if (r & 1) continue;
        }
        s->size = (uint32_t)block_size(&rng);
        s->fill = ++generation;
        s->block = bench_malloc(s->size);
        memset(s->block, (unsigned char)s->fill, s->size);
        allocations++;
    }
    for (size_t i = 0; i < SLOTS; i++) {
        if (slots[i].block != NULL) {
            check_and_free(&slots[i]);
            frees++;
        }
    }
    if (allocations != frees) bench_fail("small_mix: %zu allocations, %zu frees", allocations, frees);
    free(slots);
    printf("small_mix: %zu steps, %zu allocations, ok\n", steps, allocations);
    return 0;
}
