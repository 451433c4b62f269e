/* Large buffers replaced at random: about 20 live buffers of 5 to 25 MiB
 * (split among the threads), each replacement frees one and allocates a
 * new one of another random size, zero-filled (calloc or malloc + memset,
 * half each) and then touched on every page, the way a program holding
 * decoded images or I/O buffers does. What it measures is mostly the
 * kernel's work: whether freed huge blocks are unmapped and faulted in
 * again, or kept and reused for the next size.
 *
 * Checks: every new buffer reads as zero (sampled on every page, after the
 * page is touched, so the check adds no fault), and every page's stamp is
 * intact when the buffer is freed. */
#include "bench.h"

#define BUFFERS_LIVE 20
#define BUFFER_MIN_BYTES (5u << 20)
#define BUFFER_MAX_BYTES (25u << 20)
#define PAGE_BYTES 4096u
#define REPLACEMENTS 400.0 /* at scale 1, over all threads */

struct buffer {
    unsigned char *bytes;
    size_t size;
    uint64_t stamp;
};

struct worker {
    int id;
    int buffers;
    size_t replacements;
};

static void fill(struct buffer *b, struct bench_rng *rng) {
    b->size = bench_range(rng, BUFFER_MIN_BYTES, BUFFER_MAX_BYTES);
    b->stamp = bench_next(rng) | 1;
    if (bench_next(rng) & 1) {
        b->bytes = bench_calloc(1, b->size);
    } else {
        b->bytes = bench_malloc(b->size);
        memset(b->bytes, bench_zero, b->size);
    }
    for (size_t off = 0; off + 16 <= b->size; off += PAGE_BYTES) {
        bench_store64(b->bytes + off, b->stamp ^ off);
        if (bench_load64(b->bytes + off + 8) != 0) bench_fail("large_buffers: byte %zu of a new %zu-byte buffer is not zero", off + 8, b->size);
    }
    bench_store64(b->bytes + b->size - 8, b->stamp);
}

static void release(struct buffer *b) {
    for (size_t off = 0; off + 16 <= b->size; off += PAGE_BYTES) {
        if (bench_load64(b->bytes + off) != (b->stamp ^ off)) bench_fail("large_buffers: page at %zu of a %zu-byte buffer changed", off, b->size);
    }
    if (bench_load64(b->bytes + b->size - 8) != b->stamp) bench_fail("large_buffers: tail of a %zu-byte buffer changed", b->size);
    free(b->bytes);
    b->bytes = NULL;
}

static void *work(void *arg) {
    struct worker *w = arg;
    struct bench_rng rng = bench_rng_init(0x1a6e0000u + (uint64_t)w->id);
    struct buffer live[BUFFERS_LIVE];
    for (int i = 0; i < w->buffers; i++) fill(&live[i], &rng);
    for (size_t r = 0; r < w->replacements; r++) {
        struct buffer *b = &live[bench_range(&rng, 0, (size_t)w->buffers - 1)];
        release(b);
        fill(b, &rng);
    }
    for (int i = 0; i < w->buffers; i++) release(&live[i]);
    return NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    int threads = o.threads > BUFFERS_LIVE ? BUFFERS_LIVE : o.threads;
    size_t total = bench_scaled(&o, REPLACEMENTS);
    struct worker workers[BUFFERS_LIVE];
    pthread_t ids[BUFFERS_LIVE];
    for (int i = 0; i < threads; i++) {
        workers[i].id = i;
        workers[i].buffers = BUFFERS_LIVE / threads + (i < BUFFERS_LIVE % threads);
        workers[i].replacements = total / (size_t)threads + ((size_t)i < total % (size_t)threads);
    }
    bench_start_threads(threads, work, workers, sizeof workers[0], ids);
    bench_join_threads(threads, ids);
    printf("large_buffers: %d threads, %zu replacements, ok\n", threads, total);
    return 0;
}
