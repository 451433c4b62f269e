/*
 * Multi-threaded stress of kennel's C interface: more threads than cores
 * pass blocks to each other through locked inboxes, so most frees happen on
 * a thread other than the allocating one; blocks are grown with realloc on
 * the way; every block's contents are checked before it is freed. A second
 * phase starts and ends many short-lived threads that leave blocks behind.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kennel.h"

#define THREADS 8
#define INBOX 512

struct message {
    unsigned char *block;
    size_t size;
    unsigned seed;
};

struct inbox {
    pthread_mutex_t lock;
    struct message items[INBOX];
    int count;
};

static struct inbox inboxes[THREADS];
static long operations = 200000;
static volatile int failed;

static uint64_t next_random(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static void fill(struct message m) {
    for (size_t i = 0; i < m.size; i += (m.size > 8192 ? 1021 : 1)) m.block[i] = (unsigned char)(m.seed + i);
}

static int intact(struct message m) {
    for (size_t i = 0; i < m.size; i += (m.size > 8192 ? 1021 : 1))
        if (m.block[i] != (unsigned char)(m.seed + i)) return 0;
    return 1;
}

static void consume(struct message m) {
    if (!intact(m)) {
        fprintf(stderr, "block %p of %zu bytes corrupted\n", (void *)m.block, m.size);
        failed = 1;
    }
    free(m.block);
}

static int try_put(int target, struct message m) {
    struct inbox *box = &inboxes[target];
    pthread_mutex_lock(&box->lock);
    int ok = box->count < INBOX;
    if (ok) box->items[box->count++] = m;
    pthread_mutex_unlock(&box->lock);
    return ok;
}

static void drain(int id) {
    struct message local[INBOX];
    struct inbox *box = &inboxes[id];
    pthread_mutex_lock(&box->lock);
    int n = box->count;
    memcpy(local, box->items, (size_t)n * sizeof(local[0]));
    box->count = 0;
    pthread_mutex_unlock(&box->lock);
    for (int i = 0; i < n; i++) consume(local[i]);
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t state = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
    for (long i = 0; i < operations && !failed; i++) {
        uint64_t r = next_random(&state);
        size_t size = (r % 100 == 0) ? 4096 + r % 300000 : 1 + r % 600;
        if (r % 5000 == 0) size = (2u << 20) + r % 100000;
        struct message m = {malloc(size), size, (unsigned)r};
        if (!m.block) {
            failed = 1;
            break;
        }
        fill(m);
        if (r % 7 == 0) { /* grow it on the way: contents must survive */
            size_t bigger = m.size * 2 + 10;
            unsigned char *g = realloc(m.block, bigger);
            if (!g) {
                failed = 1;
                break;
            }
            m.block = g;
            if (!intact(m)) {
                fprintf(stderr, "realloc lost the contents of %zu bytes\n", m.size);
                failed = 1;
            }
            m.size = bigger;
            fill(m);
        }
        int target = (int)((r >> 32) % THREADS);
        while (!try_put(target, m)) {
            drain(id);
            target = (target + 1) % THREADS;
        }
        if (i % 32 == 0) drain(id);
    }
    return NULL;
}

/* Phase two: short-lived threads leave blocks for later threads. */
static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static struct message left[256];

static void *short_lived(void *arg) {
    uint64_t state = (uint64_t)(intptr_t)arg * 7919 + 1;
    for (int i = 0; i < 16; i++) {
        uint64_t r = next_random(&state);
        struct message m = {malloc(16 + r % 3000), 16 + r % 3000, (unsigned)r};
        fill(m);
        if (i % 4) {
            consume(m);
            continue;
        }
        pthread_mutex_lock(&left_lock);
        struct message old = left[r % 256];
        left[r % 256] = m;
        pthread_mutex_unlock(&left_lock);
        if (old.block) consume(old);
    }
    return NULL;
}

/* Phase three: fork while other threads allocate; the child must be able
   to allocate, from its own thread and from new ones. */
static volatile int spinning = 1;

static void *spinner(void *arg) {
    uint64_t state = (uint64_t)(intptr_t)arg + 99;
    void *held[64] = {0};
    while (spinning) {
        uint64_t r = next_random(&state);
        free(held[r % 64]);
        held[r % 64] = malloc(1 + r % 5000);
    }
    for (int i = 0; i < 64; i++) free(held[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        char *p = malloc(1 + (size_t)i % 3000);
        p[0] = 1;
        free(p);
    }
    return NULL;
}

static int fork_while_allocating(void) {
    pthread_t spinners[2];
    for (int i = 0; i < 2; i++) pthread_create(&spinners[i], NULL, spinner, (void *)(intptr_t)i);
    int bad = 0;
    for (int round = 0; round < 20; round++) {
        usleep(2000);
        pid_t pid = fork();
        if (pid == 0) {
            pthread_t t[2];
            for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, child_thread, NULL);
            child_thread(NULL);
            for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork round %d: child status %d\n", round, status);
            bad = 1;
        }
    }
    spinning = 0;
    for (int i = 0; i < 2; i++) pthread_join(spinners[i], NULL);
    return bad;
}

/* Phase four: realloc moves huge blocks (mremap) while other threads map
   and unmap their own; the kernel hands a just-vacated range straight to the
   next mapping, whose blocks must stay valid for free(). Sizes above kennel's
   64 MiB huge cache, so every free unmaps; only first pages are touched. */
#define RACE_BYTES ((size_t)72 << 20)

static void *huge_mover(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000 && !failed; i++) {
        unsigned char *p = malloc(RACE_BYTES);
        unsigned char *q = malloc(RACE_BYTES); /* blocks growth in place */
        if (!p || !q) {
            failed = 1;
            break;
        }
        p[0] = 0x5a;
        unsigned char *g = realloc(p, 2 * RACE_BYTES);
        if (!g || g[0] != 0x5a) {
            fprintf(stderr, "huge realloc lost its block\n");
            failed = 1;
        }
        free(q);
        free(g);
    }
    return NULL;
}

static void *huge_churner(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000 && !failed; i++) {
        unsigned char *p = malloc(RACE_BYTES);
        if (!p) {
            failed = 1;
            break;
        }
        p[0] = 1;
        free(p);
    }
    return NULL;
}

static void huge_moves_racing_maps(void) {
    pthread_t t[4];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, huge_mover, NULL);
    for (int i = 2; i < 4; i++) pthread_create(&t[i], NULL, huge_churner, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) operations = atol(argv[1]);
    for (int i = 0; i < THREADS; i++) pthread_mutex_init(&inboxes[i].lock, NULL);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < THREADS; i++) drain(i);

    struct kn_stats before;
    kn_stats(&before);
    for (int wave = 0; wave < 1000; wave++) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, short_lived, (void *)(intptr_t)(wave * 4 + i));
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < 256; i++)
        if (left[i].block) consume(left[i]);
    struct kn_stats after;
    kn_stats(&after);
    if (after.heap_count > before.heap_count + 16) {
        fprintf(stderr, "heaps grew from %zu to %zu over 4000 threads\n", before.heap_count, after.heap_count);
        failed = 1;
    }
    if (fork_while_allocating()) failed = 1;
    huge_moves_racing_maps();
    if (failed) return 1;
    printf("stress: %d threads x %ld operations, 4000 short-lived threads, 20 forks, huge moves racing fresh maps, all blocks intact (%zu heaps)\n", THREADS,
           operations, after.heap_count);
    return 0;
}
