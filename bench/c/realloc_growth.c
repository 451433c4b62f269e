/* Buffers grown with realloc, the two ways C code grows them: strings
 * appended to a few bytes at a time with realloc to the exact new length
 * (80 B to 16 KiB final), and vectors whose capacity doubles from 16 bytes
 * when full (2 KiB to 2 MiB final). Each round a thread grows 240 strings
 * and 16 vectors side by side (one append to each in turn, so a block's
 * neighbour is usually another live buffer and cannot always be grown in
 * place), checks them and frees them. Threads work independently.
 *
 * Checks: every appended byte is a function of the buffer and its offset;
 * each buffer is checked whole after it has grown, before it is freed. */
#include "bench.h"

#define STRINGS 240
#define STRING_MIN_BYTES 80
#define STRING_MAX_BYTES 16384
#define STRING_APPEND_MAX_BYTES 64
#define VECTORS 16
#define VECTOR_MIN_BYTES 2048
#define VECTOR_MAX_BYTES (2u << 20)
#define VECTOR_APPEND_BYTES 256 /* one push of a batch of elements */
#define VECTOR_START_BYTES 16
#define ROUNDS 30.0 /* at scale 1, over all threads */

struct buffer {
    unsigned char *bytes;
    size_t len, cap, target;
    unsigned seed;
    int vector; /* capacity doubles; a string's capacity is its length */
};

struct worker {
    int id;
    size_t rounds;
    size_t reallocs;
};

/* The byte at `offset` of the buffer seeded `seed`. */
static unsigned char content(unsigned seed, size_t offset) { return (unsigned char)(seed + offset * 7 + (offset >> 8)); }

static void fill_bytes(unsigned char *dst, unsigned seed, size_t offset, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = content(seed, offset + i);
}

/* Appends one piece; returns 1 if the buffer was reallocated. */
static int append(struct buffer *b, struct bench_rng *rng) {
    size_t n = b->vector ? VECTOR_APPEND_BYTES : bench_range(rng, 1, STRING_APPEND_MAX_BYTES);
    if (n > b->target - b->len) n = b->target - b->len;
    int grown = 0;
    if (b->len + n > b->cap) {
        size_t cap = b->vector ? (b->cap ? 2 * b->cap : VECTOR_START_BYTES) : b->len + n;
        while (cap < b->len + n) cap *= 2;
        b->bytes = bench_realloc(b->bytes, cap);
        b->cap = cap;
        grown = 1;
    }
    fill_bytes(b->bytes + b->len, b->seed, b->len, n);
    b->len += n;
    return grown;
}

static void check(const struct buffer *b) {
    for (size_t i = 0; i < b->len; i++) {
        if (b->bytes[i] != content(b->seed, i)) bench_fail("realloc_growth: byte %zu of a %zu-byte %s changed", i, b->len, b->vector ? "vector" : "string");
    }
}

static void *work(void *arg) {
    struct worker *w = arg;
    struct bench_rng rng = bench_rng_init(0x9e0000u + (uint64_t)w->id);
    struct buffer buffers[STRINGS + VECTORS];
    for (size_t round = 0; round < w->rounds; round++) {
        for (size_t i = 0; i < STRINGS + VECTORS; i++) {
            int vector = i >= STRINGS;
            buffers[i] = (struct buffer){
                .vector = vector,
                .seed = (unsigned)bench_next(&rng),
                .target = vector ? bench_range(&rng, VECTOR_MIN_BYTES, VECTOR_MAX_BYTES) : bench_range(&rng, STRING_MIN_BYTES, STRING_MAX_BYTES),
            };
        }
        size_t growing = STRINGS + VECTORS;
        while (growing > 0) {
            growing = 0;
            for (size_t i = 0; i < STRINGS + VECTORS; i++) {
                struct buffer *b = &buffers[i];
                if (b->len == b->target) continue;
                w->reallocs += (size_t)append(b, &rng);
                growing += b->len < b->target;
            }
        }
        for (size_t i = 0; i < STRINGS + VECTORS; i++) {
            check(&buffers[i]);
            free(buffers[i].bytes);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    int n = o.threads;
    size_t total = bench_scaled(&o, ROUNDS);
    struct worker *workers = bench_calloc((size_t)n, sizeof *workers);
    pthread_t *ids = bench_calloc((size_t)n, sizeof *ids);
    for (int i = 0; i < n; i++) {
        workers[i].id = i;
        workers[i].rounds = total / (size_t)n + ((size_t)i < total % (size_t)n);
    }
    bench_start_threads(n, work, workers, sizeof workers[0], ids);
    bench_join_threads(n, ids);
    size_t reallocs = 0;
    for (int i = 0; i < n; i++) reallocs += workers[i].reallocs;
    printf("realloc_growth: %zu rounds on %d threads, %zu reallocs, ok\n", total, n, reallocs);
    free(workers);
    free(ids);
    return 0;
}
