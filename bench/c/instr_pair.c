/* `c-instr_pair <pairs>`: the C fast path for `make bench-instr`. A ring
 * of 64 live blocks: each step frees the oldest block and mallocs a new
 * one, of sizes from 16 B to 1 KiB (mostly small, from a fixed table so
 * the loop itself costs a few instructions). The driver counts the
 * instructions executed inside malloc and free under callgrind, for runs
 * of n and 2n pairs, so start-up costs cancel out. Not a timed workload.
 *
 * Checks: each block's first byte survives until it is freed. */
#include "bench.h"

#define LIVE_BLOCKS 64
#define SIZE_TABLE 256 /* a power of two */

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <pairs>\n", argv[0]);
        return 2;
    }
    size_t pairs = strtoull(argv[1], NULL, 10);
    size_t sizes[SIZE_TABLE];
    struct bench_rng rng = bench_rng_init(0x1257);
    for (size_t i = 0; i < SIZE_TABLE; i++) {
        /* Three quarters up to 128 B, the rest up to 1 KiB. */
        sizes[i] = (bench_next(&rng) & 3) ? bench_range(&rng, 16, 128) : bench_range(&rng, 129, 1024);
    }
    unsigned char *ring[LIVE_BLOCKS];
    for (size_t i = 0; i < LIVE_BLOCKS; i++) {
        ring[i] = bench_malloc(sizes[i % SIZE_TABLE]);
        ring[i][0] = (unsigned char)i;
    }
    for (size_t i = LIVE_BLOCKS; i < pairs + LIVE_BLOCKS; i++) {
        unsigned char **slot = &ring[i % LIVE_BLOCKS];
        if ((*slot)[0] != (unsigned char)(i - LIVE_BLOCKS)) bench_fail("instr_pair: block %p changed", (void *)*slot);
        free(*slot);
        *slot = malloc(sizes[i % SIZE_TABLE]);
        if (*slot == NULL) bench_oom(sizes[i % SIZE_TABLE]);
        (*slot)[0] = (unsigned char)i;
    }
    for (size_t i = 0; i < LIVE_BLOCKS; i++) free(ring[i]);
    printf("metric pairs %zu\n", pairs);
    return 0;
}
