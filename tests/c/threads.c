/*
 * As many threads as the OS allows: 20,000 threads alive at the same time
 * (held at a gate), each calling malloc, must all be served. Each thread
 * then frees the block of another thread and ends. A second wave of as
 * many threads must reuse what the first left (heaps and segments), and
 * every block must be back at the end (kn_stats).
 *
 * If the OS refuses a thread (a lower thread or memory-map limit than this
 * machine's), the threads already started still finish and are checked (a
 * NULL from malloc is always a failure), then the test skips with a note.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kennel.h"

#define THREADS 20000
#define STACK_BYTES (64 * 1024)

struct slot {
    unsigned char *block;
    size_t size;
};

static struct slot slots[THREADS];
static pthread_t threads[THREADS];

/* The gate: threads arrive, then wait until main opens it. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_arrived = PTHREAD_COND_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;
static int arrived, open_, spawned;
static int nulls, corrupted;

/* Threads per wave: THREADS, or fewer where the kernel's limit on mappings
 * (a stack and its guard, and a kennel segment, per thread) is lower. */
static int thread_count = THREADS;

static int map_count_max(void) {
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    int max = 65530;
    if (f) {
        if (fscanf(f, "%d", &max) != 1) max = 65530;
        fclose(f);
    }
    return max;
}

static size_t size_of(int id) { return 16 + (size_t)(id % 64) * 8; }

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    size_t size = size_of(id);
    unsigned char *block = malloc(size);
    if (block) memset(block, (unsigned char)id, size);
    slots[id] = (struct slot){block, size};

    pthread_mutex_lock(&gate_lock);
    if (!block) nulls++;
    arrived++;
    pthread_cond_signal(&gate_arrived);
    while (!open_) pthread_cond_wait(&gate_opened, &gate_lock);
    int count = spawned;
    pthread_mutex_unlock(&gate_lock);

    /* Free the block of another thread (it may have ended already). */
    int other = (id + 1) % count;
    struct slot s = slots[other];
    if (s.block) {
        for (size_t i = 0; i < s.size; i++) {
            if (s.block[i] != (unsigned char)other) {
                pthread_mutex_lock(&gate_lock);
                corrupted++;
                pthread_mutex_unlock(&gate_lock);
                break;
            }
        }
        free(s.block);
    }
    return NULL;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Resident bytes of the process, from /proc/self/statm. */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (size_t)resident * 4096;
}

/* Runs one wave; returns how many threads it started (thread_count unless the OS
 * refused one; `refusal` then holds the error). */
static int wave(const char *name, int wanted, int *refusal) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    memset(slots, 0, sizeof(slots));
    arrived = 0;
    open_ = 0;
    nulls = 0;
    corrupted = 0;
    *refusal = 0;
    size_t resident_before = resident_bytes();
    double start = now_seconds();
    int count = 0;
    for (; count < wanted; count++) {
        int rc = pthread_create(&threads[count], &attr, worker, (void *)(intptr_t)count);
        if (rc != 0) {
            *refusal = rc;
            break;
        }
    }
    pthread_mutex_lock(&gate_lock);
    spawned = count;
    while (arrived < count) pthread_cond_wait(&gate_arrived, &gate_lock);
    double started = now_seconds();
    size_t resident_all = resident_bytes();
    /* Every thread is alive here, holding its block. */
    open_ = 1;
    pthread_cond_broadcast(&gate_opened);
    pthread_mutex_unlock(&gate_lock);
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
    pthread_attr_destroy(&attr);
    if (name) printf("threads: %s: %d threads alive at once, started in %.2f s (%.1f us each), %.1f KiB resident per thread\n", name, count,
           started - start, (started - start) * 1e6 / (count ? count : 1),
           (double)(resident_all - resident_before) / 1024.0 / (count ? count : 1));
    return count;
}

int main(void) {
    int failed = 0;
    int allowed = (map_count_max() - 4096) / 3;
    if (allowed < thread_count) {
        printf("threads: vm.max_map_count allows %d threads here, not %d\n", allowed, thread_count);
        thread_count = allowed;
    }
    struct kn_stats before, first, second;
    int refusal;
    /* glibc keeps the stacks of ended threads for reuse, up to 40 MiB, each
     * with its thread's DTV, which it allocated with calloc: fill that cache
     * first, so that blocks live compare exactly. */
    printf("threads: waves of %d threads with %d KiB stacks\n", thread_count, STACK_BYTES / 1024); /* stdout's buffer, too */
    wave(NULL, 1000, &refusal);
    kn_stats(&before);
    int count = wave("first wave", thread_count, &refusal);
    if (nulls > 0 || corrupted > 0) {
        printf("FAIL  threads: %d of %d threads got NULL from malloc, %d blocks corrupted\n", nulls, count, corrupted);
        return 1;
    }
    if (count < thread_count) {
        printf("skip  threads: the OS refused thread %d of %d (%s): this machine allows fewer threads (see ulimit -u, "
               "kernel.threads-max, kernel.pid_max); the %d started were all served\n",
               count + 1, thread_count, strerror(refusal), count);
        return 0;
    }
    kn_stats(&first);
    if (first.blocks_live != before.blocks_live) {
        printf("FAIL  threads: %zu blocks live after the first wave, %zu before\n", first.blocks_live, before.blocks_live);
        failed = 1;
    }
    if (first.heap_count < (size_t)thread_count) {
        printf("FAIL  threads: %zu heaps for %d threads alive at once\n", first.heap_count, thread_count);
        failed = 1;
    }
    count = wave("second wave", thread_count, &refusal);
    if (nulls > 0 || corrupted > 0) {
        printf("FAIL  threads: second wave: %d of %d threads got NULL from malloc, %d blocks corrupted\n", nulls, count, corrupted);
        return 1;
    }
    if (count < thread_count) {
        printf("skip  threads: the OS refused thread %d of %d of the second wave (%s)\n", count + 1, thread_count, strerror(refusal));
        return failed;
    }
    kn_stats(&second);
    if (second.blocks_live != before.blocks_live) {
        printf("FAIL  threads: %zu blocks live after the second wave, %zu before\n", second.blocks_live, before.blocks_live);
        failed = 1;
    }
    printf("threads: heaps %zu -> %zu, mapped %zu -> %zu MiB, committed %zu -> %zu MiB\n", first.heap_count, second.heap_count,
           first.mapped_bytes >> 20, second.mapped_bytes >> 20, first.committed_bytes >> 20, second.committed_bytes >> 20);
    /* The second wave runs on the first wave's heaps and segments, those
     * that moved between heaps included (through the pool, see "crowd" in
     * tests/threads.zig): without the pool it mapped a fifth more, without
     * any reuse as much as the first. */
    if (second.heap_count > first.heap_count + (size_t)thread_count / 100) {
        printf("FAIL  threads: heaps grew from %zu to %zu in the second wave\n", first.heap_count, second.heap_count);
        failed = 1;
    }
    if (second.mapped_bytes > first.mapped_bytes + (first.mapped_bytes - before.mapped_bytes) / 16) {
        printf("FAIL  threads: mapped bytes grew from %zu to %zu in the second wave\n", first.mapped_bytes, second.mapped_bytes);
        failed = 1;
    }
    if (failed) return 1;
    printf("threads: 2 waves of %d threads alive at once, every malloc served, %zu heaps, %zu MiB mapped\n", thread_count, second.heap_count,
           second.mapped_bytes >> 20);
    return 0;
}
