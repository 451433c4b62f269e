/* Cross-thread frees in batches: producer threads allocate blocks of mixed
 * small and medium sizes, 1000 to a batch, and hand each full batch
 * through a bounded queue to consumer threads, which check and free every
 * block (a pipeline stage that builds messages for another to consume).
 * --threads N runs N producers and N consumers. Every block is freed by a
 * thread other than the one that allocated it; an allocator that returns
 * the freed pages to the OS between batches pays for it in page faults.
 *
 * Checks: every block carries its size and sequence number at the start
 * and a tag byte at the end; the consumers check both and the count of
 * blocks freed. */
#include "bench.h"

#define BATCH_BLOCKS 1000
#define QUEUE_BATCHES 16   /* bounds the memory in flight */
#define BATCHES 10000.0    /* at scale 1, over all producers */

struct batch {
    size_t count;
    unsigned char *blocks[BATCH_BLOCKS];
    size_t sizes[BATCH_BLOCKS];
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    struct batch *ring[QUEUE_BATCHES];
    size_t head, tail; /* tail - head batches are queued */
    int producers_left;
} queue = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0, 0};

struct worker {
    int id;
    size_t batches; /* producers: to make; consumers: made, counted on exit */
    size_t blocks;  /* consumers: blocks checked and freed */
};

static void push(struct batch *b) {
    pthread_mutex_lock(&queue.lock);
    while (queue.tail - queue.head == QUEUE_BATCHES) pthread_cond_wait(&queue.not_full, &queue.lock);
    queue.ring[queue.tail++ % QUEUE_BATCHES] = b;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
}

/* NULL once every producer is done and the queue is empty. */
static struct batch *pop(void) {
    pthread_mutex_lock(&queue.lock);
    while (queue.tail == queue.head && queue.producers_left > 0) pthread_cond_wait(&queue.not_empty, &queue.lock);
    struct batch *b = NULL;
    if (queue.tail != queue.head) {
        b = queue.ring[queue.head++ % QUEUE_BATCHES];
        pthread_cond_signal(&queue.not_full);
    }
    pthread_mutex_unlock(&queue.lock);
    return b;
}

/* Mostly small, some medium: 70% 16-128 B, 22% to 1 KiB, 6% to 8 KiB, 2%
 * to 32 KiB. */
static size_t block_size(struct bench_rng *rng) {
    uint64_t r = bench_next(rng) % 100;
    if (r < 70) return bench_range(rng, 16, 128);
    if (r < 92) return bench_range(rng, 129, 1024);
    if (r < 98) return bench_range(rng, 1025, 8192);
    return bench_range(rng, 8193, 32768);
}

static uint64_t stamp_of(size_t size, uint64_t seq) { return ((uint64_t)size << 40) ^ seq; }

static void *produce(void *arg) {
    struct worker *w = arg;
    struct bench_rng rng = bench_rng_init(0xba7c0000u + (uint64_t)w->id);
    uint64_t seq = (uint64_t)w->id << 32;
    for (size_t n = 0; n < w->batches; n++) {
        struct batch *b = bench_malloc(sizeof *b);
        b->count = BATCH_BLOCKS;
        for (size_t i = 0; i < BATCH_BLOCKS; i++) {
            size_t size = block_size(&rng);
            unsigned char *p = bench_malloc(size);
            uint64_t stamp = stamp_of(size, seq++);
            memcpy(p, &stamp, sizeof stamp);
            p[size - 1] = (unsigned char)stamp;
            b->blocks[i] = p;
            b->sizes[i] = size;
        }
        push(b);
    }
    pthread_mutex_lock(&queue.lock);
    queue.producers_left--;
    pthread_cond_broadcast(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
    return NULL;
}

static void *consume(void *arg) {
    struct worker *w = arg;
    struct batch *b;
    while ((b = pop()) != NULL) {
        for (size_t i = 0; i < b->count; i++) {
            unsigned char *p = b->blocks[i];
            size_t size = b->sizes[i];
            uint64_t stamp;
            memcpy(&stamp, p, sizeof stamp);
            if ((stamp >> 40) != size || p[size - 1] != (unsigned char)stamp) bench_fail("batch_free: block %p of %zu bytes changed", (void *)p, size);
            free(p);
        }
        w->blocks += b->count;
        w->batches++;
        free(b);
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct bench_options o = bench_parse(argc, argv);
    int n = o.threads;
    size_t total = bench_scaled(&o, BATCHES);
    struct worker *producers = bench_calloc((size_t)n, sizeof *producers);
    struct worker *consumers = bench_calloc((size_t)n, sizeof *consumers);
    pthread_t *ids = bench_calloc(2 * (size_t)n, sizeof *ids);
    queue.producers_left = n;
    for (int i = 0; i < n; i++) {
        producers[i].id = i;
        producers[i].batches = total / (size_t)n + ((size_t)i < total % (size_t)n);
        consumers[i].id = i;
    }
    bench_start_threads(n, consume, consumers, sizeof consumers[0], ids + n);
    bench_start_threads(n, produce, producers, sizeof producers[0], ids);
    bench_join_threads(2 * n, ids);
    size_t batches = 0, blocks = 0;
    for (int i = 0; i < n; i++) {
        batches += consumers[i].batches;
        blocks += consumers[i].blocks;
    }
    if (batches != total || blocks != total * BATCH_BLOCKS) bench_fail("batch_free: %zu batches and %zu blocks freed of %zu batches", batches, blocks, total);
    printf("batch_free: %d producers, %d consumers, %zu blocks, ok\n", n, n, blocks);
    free(producers);
    free(consumers);
    free(ids);
    return 0;
}
