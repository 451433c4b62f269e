/*
 * Misuse from C, fault by fault: usage `faults secure` (linked with
 * libkennel-secure) or `faults fast` (linked with libkennel).
 *
 * Each fault runs in a child process. Under the hardened library the child
 * must stop: abort() after one line on stderr that names the fault and the
 * pointer the child announced, or die of SIGSEGV where the fault is an
 * access to memory kennel has unmapped. Under the fast library each fault
 * has its own expectation: caught the same way, harmless (the child runs
 * to its end), or not run at all because it is undefined behaviour that
 * the fast library does not survive (the reason it is a hardening).
 * Last, C++'s operator new called from this C program, which has no C++
 * runtime: failing, the throwing form aborts with a line naming the size,
 * and the nothrow form returns NULL.
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
static int hardened; /* linked with libkennel-secure */
static void *volatile the_pointer; /* what the child names */
static const char *self_path;

/* The child names the pointer on stderr before the fault; stderr is
   unbuffered, so this allocates nothing. */
static void announce(void *p) {
    the_pointer = p;
    fprintf(stderr, "pointer %p\n", p);
}

/* ---- Double frees ------------------------------------------------------ */

static void double_free(void) {
    void *p = malloc(40);
    announce(p);
    free(p);
    free(p);
}

static void double_free_later(void) {
    void *p = malloc(200), *q = malloc(200), *r = malloc(200);
    announce(p);
    free(p);
    free(q);
    free(r);
    free(p);
}

static void double_free_huge(void) {
    void *p = malloc(5 << 20);
    announce(p);
    free(p);
    free(p);
}

/* A large block that could not grow in place moved its pages to the new
   block (Linux, fast library): the old one was freed with them gone, and
   must still be known as freed. The neighbour keeps it from growing. */
static void double_free_after_moving_realloc(void) {
    /* Pairs of blocks until the first of a pair cannot grow in place. */
    for (int i = 0; i < 16; i++) {
        char *p = malloc(600 << 10), *neighbour = malloc(600 << 10);
        if (p == NULL || neighbour == NULL) abort();
        memset(p, 7, 600 << 10);
        char *q = realloc(p, 1500 << 10);
        if (q == NULL) abort();
        if (q == p) continue; /* grew in place: leaked, as the pair */
        announce(p);
        free(p);
        return;
    }
}

static void double_free_after_reuse(void) {
    char *p = malloc(64);
    free(p);
    char *q = malloc(64); /* most likely p again */
    free(q);
    announce(p);
    free(p);
}

/* A double free after a write after free cleared the block's second word
   (where the fast library keeps its freed mark): the hardened library's
   live bits lie outside the block. */
static void double_free_mark_overwritten(void) {
    char *p = malloc(64);
    announce(p);
    free(p);
    memset(p + 8, 0, 8);
    free(p);
}

static void *free_it(void *p) {
    free(p);
    return NULL;
}

static void double_free_two_threads(void) {
    char *p = malloc(80);
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
    announce(p);
    free(p);
}

/* Two threads free the same block at the same moment: exactly one of the
   two frees must see the other's. */
static pthread_barrier_t race_barrier;
static void *race_free(void *p) {
    pthread_barrier_wait(&race_barrier);
    free(p);
    return NULL;
}

static void double_free_racing(void) {
    for (int round = 0; round < 1000; round++) {
        char *p = malloc(32 + (size_t)round % 64);
        announce(p);
        pthread_barrier_init(&race_barrier, NULL, 2);
        pthread_t t;
        pthread_create(&t, NULL, race_free, p);
        race_free(p);
        pthread_join(t, NULL);
        pthread_barrier_destroy(&race_barrier);
    }
}

/* ---- Invalid pointers -------------------------------------------------- */

static char static_buffer[64];

static void free_stack(void) {
    char local[32];
    announce(local);
    free(the_pointer);
}

static void free_static(void) {
    announce(static_buffer + 16);
    free(the_pointer);
}

static void free_interior(void) {
    char *p = malloc(100);
    announce(p + 16);
    free(p + 16);
}

/* An interior pointer into a block already freed: the pointer is no
   block's, whatever the block's state (it was named a double free). */
static void free_interior_of_freed(void) {
    char *p = malloc(100);
    char *keep = malloc(100);
    free(p);
    announce(p + 16);
    free(p + 16);
    free(keep);
}

static void free_interior_huge(void) {
    char *p = malloc(3 << 20);
    announce(p + 4096);
    free(p + 4096);
}

static void realloc_invalid(void) {
    char local[16];
    announce(local);
    void *r = realloc(the_pointer, 100);
    (void)r;
}

static void realloc_freed(void) {
    char *p = malloc(64);
    free(p);
    announce(p);
    void *r = realloc(p, 100);
    (void)r;
}

static void usable_size_invalid(void) {
    announce((void *)0x1000);
    (void)malloc_usable_size(the_pointer);
}

static void free_misaligned(void) {
    char *p = malloc(64);
    announce(p + 1);
    free(p + 1);
}

static void free_never_handed_out(void) {
    /* 3000-byte blocks: a fresh page links one block at a time, so five
       blocks further on lies a block kennel never handed out. */
    char *p = malloc(3000);
    size_t block = malloc_usable_size(p);
    announce(p + 5 * block);
    free(p + 5 * block);
}

static void free_foreign_mapping(void) {
    char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    announce(m + 64);
    free(m + 64);
}

static void free_huge_middle(void) {
    char *p = malloc(6 << 20);
    announce(p + (5 << 20));
    free(p + (5 << 20));
}

static void free_linked_never_handed_out(void) {
    /* A fresh page links a 4 KiB run of small blocks into its free list at
       once: the block after the first one handed out is free and was never
       handed out. (Hardened, the canary's bytes lie between: the pointer is
       inside the first block.) */
    char *p = malloc(48);
    announce(p + malloc_usable_size(p));
    free(p + malloc_usable_size(p));
}

/* An over-aligned block is handed out at an address inside its block. */
static void free_interior_aligned_block(void) {
    char *p = aligned_alloc(8192, 100);
    announce(p + 16);
    free(p + 16);
}

/* The page that holds an over-aligned block holds plain ones of the same
   class too (8192 + 100 bytes and 9000 bytes: one class): their interior
   pointers are no over-aligned blocks. */
static void free_interior_in_aligned_page(void) {
    char *a = aligned_alloc(8192, 100);
    char *q = malloc(9000);
    if (a == NULL || q == NULL) _exit(2);
    announce(q + 100);
    free(q + 100);
}

static void double_free_aligned(void) {
    char *p = aligned_alloc(8192, 100);
    free(p);
    announce(p);
    free(p);
}

/* The address just past a segment of pages (segments are 4 MiB, aligned
   to their size): the map is asked about the byte below it, which is the
   segment's. */
static void free_past_segment(void) {
    char *p = malloc(100);
    char *past = (char *)(((uintptr_t)p & ~(uintptr_t)((4 << 20) - 1)) + (4 << 20));
    announce(past);
    free(past);
}

/* A SIGSEGV that another thread or process sends: the hardened library's
   guard handler must not swallow it. */
static void raise_segv(void) {
    raise(SIGSEGV);
}

/* A SIGSEGV handler the program installs after the library's, and that
   passes faults it does not own to the handler it replaced (as signal
   chaining in language runtimes does): a fault nobody owns must still end
   the program. The hardened library's handler relied on SA_RESETHAND,
   which only the kernel's call applies: both handlers returned and the
   access faulted again, for ever (cut short here with exit status 42). */
static struct sigaction chained_previous;
static volatile sig_atomic_t chained_hits;
static void chaining_handler(int sig, siginfo_t *info, void *context) {
    if (++chained_hits > 3) _exit(42);
    if (chained_previous.sa_flags & SA_SIGINFO) {
        chained_previous.sa_sigaction(sig, info, context);
    } else if (chained_previous.sa_handler == SIG_DFL) {
        sigaction(SIGSEGV, &chained_previous, NULL);
    } else if (chained_previous.sa_handler != SIG_IGN) {
        chained_previous.sa_handler(sig);
    }
}

static void chained_segv(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = chaining_handler;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &chained_previous) != 0) _exit(3);
    *(volatile int *)16 = 1;
}

/* ---- The same after a free into the same segment ------------------------

   The fast library remembers the segment each thread last freed into and
   checks a pointer into it without the segment map, fused with the free
   itself: every fault must be caught the same way there. warm() makes the
   remembered segment the one of the blocks that follow. */

static void warm(size_t size) { free(malloc(size)); }

static void free_interior_warm(void) {
    warm(100);
    free_interior();
}

static void free_misaligned_warm(void) {
    warm(64);
    free_misaligned();
}

static void free_never_handed_out_warm(void) {
    warm(3000);
    free_never_handed_out();
}

static void free_linked_never_handed_out_warm(void) {
    warm(48);
    free_linked_never_handed_out();
}

static void free_static_warm(void) {
    warm(100);
    free_static();
}

static void double_free_warm(void) {
    warm(40);
    double_free();
}

static void double_free_two_threads_warm(void) {
    warm(80);
    double_free_two_threads();
}

/* The fast free also checks, without the generic path, a pointer into
   another segment of the thread's own heap than the one it freed into
   last (check.freeableInHeap): `early` lies in one segment, and the
   thread has just freed into a later one. */
static char *in_an_earlier_segment(size_t size) {
    char *early = malloc(size);
    if (early == NULL) abort();
    /* 2 KiB blocks until one lies 4 MiB or more away (segments are 4 MiB). */
    for (int i = 0; i < 16384; i++) {
        char *later = malloc(2048);
        if (later == NULL) abort();
        if ((size_t)(later > early ? later - early : early - later) >= (4u << 20)) {
            free(later);
            return early;
        }
    }
    abort();
}

static void double_free_earlier_segment(void) {
    char *p = in_an_earlier_segment(40);
    free(p);
    warm(2048); /* the later segment is remembered again */
    announce(p);
    free(p);
}

static void free_interior_earlier_segment(void) {
    char *p = in_an_earlier_segment(100);
    announce(p + 16);
    free(p + 16);
}

/* A page of several 64 KiB slices (blocks of 40000 bytes): a fresh page
   hands its blocks out in address order, so 64 KiB past the first block
   lies the middle of the second, in the page's second slice. The third
   starts there too: its free must pass. */
static void free_interior_second_slice(void) {
    char *blocks[4];
    for (int i = 0; i < 4; i++) blocks[i] = malloc(40000);
    free(blocks[3]);
    free(blocks[2]); /* a valid block past the page's first slice */
    char *p = blocks[0] + (64 << 10) + 16;
    if (p >= blocks[1] + malloc_usable_size(blocks[1]) || p <= blocks[1]) {
        fprintf(stderr, "blocks not in address order\n");
        _exit(2);
    }
    announce(p);
    free(p);
}

/* A slice kennel does not use: the next to last of the block's segment
   (kennel's segments are 4 MiB, aligned to their size, and pages are taken
   from the first slices), which a child this young has not used. */
static void free_unused_slice(void) {
    char *p = malloc(100);
    warm(100);
    char *unused = (char *)((uintptr_t)p & ~(uintptr_t)((4 << 20) - 1)) + 62 * (64 << 10) + 256;
    announce(unused);
    free(unused);
}

/* Not a double free: another thread frees a block, its owner hands it out
   again, and then frees it. */
static void free_after_remote_free_and_reuse(void) {
    warm(48);
    char *p = malloc(48);
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
    /* The owner takes the other thread's frees back when its own list of
       the page runs dry. */
    for (int i = 0; i < 100000; i++) {
        char *q = malloc(48);
        if (q == p) {
            memset(q, 0, 48);
            free(q);
            return;
        }
    }
    fprintf(stderr, "the block did not come back\n");
    _exit(2);
}

/* ---- Corrupted free lists ---------------------------------------------- */

static void write_after_free(void) {
    char *keep = malloc(72);
    char *p = malloc(72);
    announce(p);
    free(p);
    memset(p, 'A', 16); /* the link and the mark */
    char *a = malloc(72); /* p itself */
    char *b = malloc(72); /* follows p's link */
    fprintf(stderr, "allocated %p %p\n", (void *)a, (void *)b);
    /* Hardened, p waits in the quarantine: its size is allocated and freed
       until p comes back. */
    for (int i = 0; i < 100000; i++) free(malloc(72));
    free(keep);
}

/* A write after free into a block's first word, which the zero check skips
   (the free-list link goes there): the quarantine, which cleared the word,
   finds it written when the block leaves. */
static void write_after_free_first_word(void) {
    static char elsewhere[256];
    char *target = elsewhere + 64;
    char *keep = malloc(72);
    char *p = malloc(72);
    announce(p);
    free(p);
    memcpy(p, &target, sizeof target);
    for (int i = 0; i < 100000; i++) free(malloc(72));
    free(keep);
}

/* Two of `count` blocks of one size where the second lies right above
   the first (hardened, 8 bytes of canary lie between them); exits the
   child when there are none. Returns the distance between them. */
static size_t adjacent_pair(char **blocks, int count, int *victim, int *neighbour) {
    size_t step = malloc_usable_size(blocks[0]) + (hardened ? 8 : 0);
    for (int i = 0; i < count; i++)
        for (int j = 0; j < count; j++)
            if (blocks[j] == blocks[i] + step) {
                *victim = i;
                *neighbour = j;
                return step;
            }
    fprintf(stderr, "no adjacent blocks\n");
    _exit(2);
}

/* An overflow off the end of one block into the next, which is free: the
   overwritten link is caught when that block is handed out. */
static void overflow_into_free_block(void) {
    enum { count = 64, size = 96 };
    char *blocks[count];
    for (int i = 0; i < count; i++) blocks[i] = malloc(size);
    int victim, neighbour;
    adjacent_pair(blocks, count, &victim, &neighbour);
    for (int i = 0; i < count; i++)
        if (i != victim) free(blocks[i]);
    announce(blocks[neighbour]);
    memset(blocks[victim] + malloc_usable_size(blocks[victim]), 'B', 24); /* 24 bytes too many */
    for (int i = 0; i < count; i++) blocks[i] = malloc(size);
    /* Hardened, the neighbour waits in the quarantine: see write_after_free. */
    for (int i = 0; i < 100000; i++) free(malloc(size));
}

/* An out-of-bounds write past a block's canary into the free-list link of
   its upper neighbour, which is free and back on its page's list (out of
   the quarantine): the link's encoding catches it when the list is
   followed. Only the link is written; the zero check covers the rest. */
static void write_into_free_link(void) {
    enum { count = 64, size = 96 };
    char *blocks[count];
    for (int i = 0; i < count; i++) blocks[i] = malloc(size);
    int victim, neighbour;
    size_t step = adjacent_pair(blocks, count, &victim, &neighbour);
    announce(blocks[neighbour]);
    free(blocks[neighbour]);
    /* Blocks of another size through the quarantine until the neighbour
       has left it (each free lets one of 64 go, at random). */
    for (int i = 0; i < 5000; i++) free(malloc(40));
    memset(blocks[victim] + step, 'B', 8);
    for (int i = 0; i < 100000; i++) free(malloc(size));
}

static void overflow_into_guard_page(void) {
    char *p = malloc(3 << 20);
    /* Hardened, the block's canary lies between it and the guard page. */
    size_t end = malloc_usable_size(p) + (hardened ? 8 : 0);
    announce(p + end);
    memset(p + end, 'C', 4096);
}

/* A run of writes from a medium block (blocks of 8-64 KiB share pages of
   512 KiB) as long as its page: hardened, the page ends in a guard page,
   which the run meets wherever in the page the block lies. Without it the
   run would go on through the next page. */
static void overflow_medium_page(void) {
    char *p = malloc(40 << 10);
    if (p == NULL) abort();
    announce(p);
    for (volatile char *q = p; q < p + (512 << 10); q++) *q = 'M';
}

/* A run of writes from a small block on a slice whose small page ends in a
   guard (every sixteenth slice of a segment) to the end of the slice:
   hardened, it meets the guard. Small blocks are taken until one lies on
   such a slice. Without it the run would go on into the next slice. */
static void overflow_small_page(void) {
    enum { segment_bytes = 4 << 20, slice_bytes = 64 << 10, interval = 16 };
    for (int i = 0; i < (1 << 20); i++) {
        char *p = malloc(48);
        if (p == NULL) abort();
        uintptr_t offset = (uintptr_t)p % segment_bytes;
        uintptr_t slice = offset / slice_bytes;
        if (slice % interval != interval - 1 || slice == segment_bytes / slice_bytes - 1) continue;
        announce(p);
        for (volatile char *q = p; q < p + (slice_bytes - offset % slice_bytes); q++) *q = 'S';
        return;
    }
}

/* A run of writes below the first blocks of a segment, towards its header
   (the page metadata): hardened, a guard page lies between them. Small
   blocks are taken until one lies in the segment's first 64 KiB. */
static void underflow_into_segment_header(void) {
    enum { segment_bytes = 4 << 20, first_slice_bytes = 64 << 10 };
    char *first = NULL;
    for (int i = 0; i < 300000 && first == NULL; i++) {
        char *p = malloc(64);
        if (((uintptr_t)p & (segment_bytes - 1)) < first_slice_bytes) first = p;
    }
    if (first == NULL) abort();
    announce(first);
    uintptr_t base = (uintptr_t)first & ~(uintptr_t)(segment_bytes - 1);
    for (volatile char *q = first - 1; (uintptr_t)q >= base + 4096; q--) *q = 'U';
}

/* A run of writes below a huge block, towards its mapping's header:
   hardened, a guard page lies between them. */
static void underflow_into_huge_header(void) {
    enum { segment_bytes = 4 << 20 };
    char *p = malloc(3 << 20);
    if (p == NULL) abort();
    announce(p);
    uintptr_t base = ((uintptr_t)p - 1) & ~(uintptr_t)(segment_bytes - 1);
    for (volatile char *q = p - 1; (uintptr_t)q >= base + 4096; q--) *q = 'U';
}

/* ---- Use after free of a huge block: the mapping is gone (hardened) or
   cached for reuse (fast, where the read is harmless). -------------------- */

static void read_after_free_huge(void) {
    volatile char *p = malloc(8 << 20);
    p[4096] = 7;
    free((void *)p);
    announce((void *)p);
    if (p[4096] == 0x55) fprintf(stderr, "unlikely\n");
}

/* Writing into the slack after the requested bytes: C programs may use the
   whole usable size, so neither library objects. */
static void write_into_slack(void) {
    char *p = malloc(100);
    announce(p);
    memset(p, 1, malloc_usable_size(p));
    free(p);
}

/* ---- Canaries, zeroing, quarantine, guarded large blocks, malloc(0) ----- */

/* One byte past what malloc_usable_size promises: the block's canary. */
static void overflow_one_byte(void) {
    char *p = malloc(100);
    announce(p);
    p[malloc_usable_size(p)] ^= 0x5a; /* changes the byte, whatever the canary holds */
    free(p);
}

static void overflow_then_realloc(void) {
    char *p = malloc(40);
    announce(p);
    p[malloc_usable_size(p)] ^= 0x5a;
    void *r = realloc(p, 4000);
    (void)r;
}

/* One byte before a block: the canary at the end of the block below it,
   caught when that one is freed. */
static void underflow_one_byte(void) {
    enum { count = 64, size = 96 };
    char *blocks[count];
    for (int i = 0; i < count; i++) blocks[i] = malloc(size);
    size_t step = malloc_usable_size(blocks[0]) + (hardened ? 8 : 0);
    for (int i = 0; i < count; i++)
        for (int j = 0; j < count; j++)
            if (blocks[j] + step == blocks[i]) {
                announce(blocks[j]);
                blocks[i][-1] ^= 0x5a;
                free(blocks[j]);
                return;
            }
    fprintf(stderr, "no adjacent blocks\n");
    _exit(2);
}

/* Before a block, its block below left alone: the bytes just below a small
   or medium block are always a canary (the end of the block below, which
   a page's first block, never handed out, has too), checked when the
   block itself is freed or reallocated. */
static void underflow_own(size_t size, size_t bytes, int by_realloc) {
    char *keep = malloc(size); /* the page stays set up */
    char *p = malloc(size);
    announce(p);
    memset(p - bytes, 0x41, bytes);
    if (by_realloc) p = realloc(p, 2 * size);
    free(p);
    free(keep);
}

/* The first block of a small page that is not its segment's first: it
   starts the page's 64 KiB slice. The hardened library never hands it out
   (its canary guards the second block's start), and a free of it is no
   block's free. */
static void free_reserved_first_block(void) {
    for (int i = 0; i < 4000; i++) {
        char *p = malloc(48);
        uintptr_t slice = (uintptr_t)p & ~(uintptr_t)0xffff;
        if (slice == ((uintptr_t)p & ~(uintptr_t)0x3fffff) || slice == (uintptr_t)p) continue;
        announce((void *)slice);
        free((void *)slice);
        return;
    }
    fprintf(stderr, "no small page past a segment's first slice\n");
    _exit(2);
}

/* A large block's page begins with a guard: the write faults. */
static void underflow_large(void) {
    char *keep = malloc(100);
    char *p = malloc(200000);
    p[-1] = 0x41;
    free(p);
    free(keep);
}

static void underflow_small_own_free(void) { underflow_own(48, 1, 0); }
static void underflow_medium_own_free(void) { underflow_own(16384, 32, 0); }
static void underflow_then_realloc(void) { underflow_own(200, 8, 1); }

/* Eight bytes before a block whose block below was never handed out and
   spans two kernel pages: they land where that block's canary will go,
   past the first kernel page, the only one checked when a block is handed
   out for the first time; the canary written then hid them for good. */
static void underflow_into_fresh_block(void) {
    enum { count_max = 400, size = 1200 };
    static char *blocks[count_max];
    size_t step = 0;
    for (int n = 0; n < count_max; n++) {
        char *b = blocks[n] = malloc(size);
        if (step == 0) step = malloc_usable_size(b) + (hardened ? 8 : 0);
        char *below = b - step;
        int handed = 0, is_block = 0;
        for (int j = 0; j < n; j++) {
            handed |= blocks[j] == below;
            /* A block of the same page at or below it: it is a block too. */
            is_block |= blocks[j] <= below && ((uintptr_t)blocks[j] >> 16) == ((uintptr_t)below >> 16);
        }
        /* Never handed out, and its canary's place past its first kernel page. */
        if (handed || !is_block || ((uintptr_t)below >> 12) == ((uintptr_t)(b - 8) >> 12)) continue;
        announce(below);
        memset(b - 8, 0x41, 8);
        for (int k = 0; k < 4096; k++)
            if (malloc(size) == below) _exit(0);
        _exit(3);
    }
    fprintf(stderr, "no fresh block below\n");
    _exit(2);
}

/* A write far past a freed block's first words, then the block's size
   allocated and freed until the block comes back. */
static void write_after_free_deep(void) {
    char *keep = malloc(200);
    char *p = malloc(200);
    announce(p);
    free(p);
    p[150] = 1;
    for (int i = 0; i < 100000; i++) free(malloc(200));
    free(keep);
}

/* A large block (above 64 KiB) freed: its pages past the first are gone. */
static void write_after_free_large(void) {
    char *p = malloc(256 << 10);
    memset(p, 1, 256 << 10);
    free(p);
    announce(p);
    ((volatile char *)p)[128 << 10] = 2;
}

static void read_after_free_large(void) {
    char *p = malloc(256 << 10);
    memset(p, 1, 256 << 10);
    free(p);
    announce(p);
    if (((volatile char *)p)[200 << 10] == 0x55) fprintf(stderr, "unlikely\n");
}

/* The same, after the program allocated that size again: hardened, the
   freed block waits in the quarantine, still guarded, and the new one is
   another; the fast library hands the same block out again. */
static void write_after_free_large_reused(void) {
    char *p = malloc(256 << 10);
    memset(p, 1, 256 << 10);
    free(p);
    char *q = malloc(256 << 10);
    memset(q, 2, 256 << 10);
    announce(p);
    ((volatile char *)p)[128 << 10] = 3;
    free(q);
}

/* malloc(0): unique pointers that free and realloc accept. */
static void zero_size_blocks(void) {
    void *p = malloc(0), *q = malloc(0), *c = calloc(0, 8);
    if (p == NULL || q == NULL || c == NULL || p == q || p == c || (hardened && malloc_usable_size(p) != 0)) abort();
    free(q);
    free(c);
    char *r = realloc(p, 10);
    if (r == NULL) abort();
    memset(r, 1, 10);
    free(r);
}

/* Hardened, malloc(0) addresses repeat after 4 Mi of them (a 64 MiB region,
   16 bytes apart): one still live is skipped, so freeing both is fine. */
static void zero_size_wrap(void) {
    void *first = malloc(0);
    for (size_t i = 0; i < ((size_t)64 << 20) / 16 + 16; i++) {
        void *p = malloc(0);
        if (p == first) abort();
        free(p);
    }
    free(first);
}

static void double_free_zero_size(void) {
    void *p = malloc(0);
    free(p);
    announce(p);
    free(p);
}

static void realloc_freed_zero_size(void) {
    void *p = malloc(0);
    free(p);
    announce(p);
    free(realloc(p, 10));
}

static void read_zero_size(void) {
    volatile char *p = malloc(0);
    announce((void *)p);
    if (p[0] == 0x55) fprintf(stderr, "unlikely\n");
}

/* ---- C++'s operators in a program without a C++ runtime ----------------- */

/* kennel exports operator new and delete under their mangled names; a C
   program has no new-handler and no std::bad_alloc. */
void *_Znwm(size_t size);
void *_ZnwmRKSt9nothrow_t(size_t size, const void *nothrow);
void _ZdlPvm(void *ptr, size_t size);

static void new_without_runtime(void) {
    volatile size_t impossible = SIZE_MAX / 2;
    _Znwm(impossible);
}

static void nothrow_new_without_runtime(void) {
    volatile size_t impossible = SIZE_MAX / 2;
    char tag = 0;
    if (_ZnwmRKSt9nothrow_t(impossible, &tag) != NULL) abort();
    void *p = _ZnwmRKSt9nothrow_t(100, &tag);
    if (p == NULL || malloc_usable_size(p) < 100) abort();
    _ZdlPvm(p, 100);
}

/* ---- The table ---------------------------------------------------------- */

enum outcome {
    ABORT_NAMING, /* abort() after a kennel line naming the pointer */
    ABORT_SAYING, /* abort() after a kennel line with the message */
    SEGV,         /* killed by SIGSEGV */
    CLEAN,        /* ran to its end, exit 0 */
    NOT_RUN,      /* undefined behaviour the library does not survive */
};

struct fault {
    const char *name;
    void (*run)(void);
    enum outcome secure, fast;
    const char *message;        /* expected in kennel's line (ABORT_NAMING) */
    const char *secure_message; /* the same under libkennel-secure, if it differs */
};

static const struct fault faults[] = {
    {"free(stack)", free_stack, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"free(static)", free_static, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"free(interior)", free_interior, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(interior of a freed block)", free_interior_of_freed, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(interior huge)", free_interior_huge, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"realloc(invalid)", realloc_invalid, ABORT_NAMING, ABORT_NAMING, "realloc(): invalid pointer", NULL},
    {"realloc(freed)", realloc_freed, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"malloc_usable_size(invalid)", usable_size_invalid, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"double free", double_free, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"double free later", double_free_later, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    /* The hardened library has given the mapping back: no trace is left. */
    {"double free huge", double_free_huge, ABORT_NAMING, ABORT_NAMING, "double free", "not allocated by kennel"},
    {"double free after reuse", double_free_after_reuse, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"double free after a moving realloc", double_free_after_moving_realloc, ABORT_NAMING, ABORT_NAMING, "freed twice", "double free"},
    {"double free, two threads", double_free_two_threads, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"double free, mark overwritten", double_free_mark_overwritten, ABORT_NAMING, NOT_RUN, "double free", NULL},
    {"double free, racing", double_free_racing, ABORT_NAMING, NOT_RUN, "double free", NULL},
    {"free(misaligned)", free_misaligned, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(never handed out)", free_never_handed_out, ABORT_NAMING, ABORT_NAMING, "not a block kennel handed out", NULL},
    {"free(foreign mapping)", free_foreign_mapping, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"free(huge middle)", free_huge_middle, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"free(linked, never handed out)", free_linked_never_handed_out, ABORT_NAMING, ABORT_NAMING, "never handed out", "middle of a block"},
    {"free(interior of aligned block)", free_interior_aligned_block, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(interior, aligned page)", free_interior_in_aligned_page, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"double free of aligned block", double_free_aligned, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"free(just past a segment)", free_past_segment, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"SIGSEGV sent by raise()", raise_segv, SEGV, SEGV, NULL, NULL},
    {"a foreign fault through a handler that chains to the library's", chained_segv, SEGV, SEGV, NULL, NULL},
    {"free(interior), warm", free_interior_warm, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(misaligned), warm", free_misaligned_warm, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(never handed out), warm", free_never_handed_out_warm, ABORT_NAMING, ABORT_NAMING, "not a block kennel handed out", NULL},
    {"free(linked, never handed out), warm", free_linked_never_handed_out_warm, ABORT_NAMING, ABORT_NAMING, "never handed out", "middle of a block"},
    {"free(static), warm", free_static_warm, ABORT_NAMING, ABORT_NAMING, "not allocated by kennel", NULL},
    {"double free, warm", double_free_warm, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"double free, earlier segment", double_free_earlier_segment, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"free interior, earlier segment", free_interior_earlier_segment, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"double free, 2 threads, warm", double_free_two_threads_warm, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"free(interior, second slice)", free_interior_second_slice, ABORT_NAMING, ABORT_NAMING, "middle of a block", NULL},
    {"free(unused slice)", free_unused_slice, ABORT_NAMING, ABORT_NAMING, "in memory kennel does not use", NULL},
    {"free after remote free+reuse", free_after_remote_free_and_reuse, CLEAN, CLEAN, NULL, NULL},
    /* Hardened, the block's first word is lost in the quarantine (a link
       is written there when the block leaves it); the zeroing check sees
       the rest. */
    {"write after free", write_after_free, ABORT_NAMING, NOT_RUN, "corrupted free list", "write after free"},
    {"write after free, first word", write_after_free_first_word, ABORT_NAMING, NOT_RUN, "written at offset 0", NULL},
    {"write into a free block's link", write_into_free_link, ABORT_NAMING, NOT_RUN, "corrupted free list", NULL},
    {"overflow into a free block", overflow_into_free_block, ABORT_NAMING, NOT_RUN, "corrupted free list", "write after free"},
    {"overflow into guard page", overflow_into_guard_page, ABORT_NAMING, NOT_RUN, "guard page", NULL},
    {"overflow of a medium page", overflow_medium_page, ABORT_SAYING, NOT_RUN, "heap overflow: access to the guard page", NULL},
    {"overflow of a small page", overflow_small_page, ABORT_SAYING, NOT_RUN, "heap overflow: access to the guard page", NULL},
    {"underflow into a segment header", underflow_into_segment_header, ABORT_SAYING, NOT_RUN, "heap overflow: access to the guard page", NULL},
    {"underflow into a huge header", underflow_into_huge_header, ABORT_SAYING, NOT_RUN, "heap overflow: access to the guard page", NULL},
    {"read after free (huge)", read_after_free_huge, SEGV, CLEAN, NULL, NULL},
    {"write into slack", write_into_slack, CLEAN, CLEAN, NULL, NULL},
    {"overflow by one byte", overflow_one_byte, ABORT_NAMING, NOT_RUN, "canary", NULL},
    {"overflow, then realloc", overflow_then_realloc, ABORT_NAMING, NOT_RUN, "canary", NULL},
    {"underflow by one byte", underflow_one_byte, ABORT_NAMING, CLEAN, "canary", NULL},
    {"underflow into a block never handed out", underflow_into_fresh_block, ABORT_NAMING, NOT_RUN, "write after free", NULL},
    {"underflow, caught at its own free", underflow_small_own_free, ABORT_NAMING, NOT_RUN, "free(): heap underflow", NULL},
    {"underflow by 32 bytes (medium)", underflow_medium_own_free, ABORT_NAMING, NOT_RUN, "free(): heap underflow", NULL},
    {"underflow, then realloc", underflow_then_realloc, ABORT_NAMING, NOT_RUN, "realloc(): heap underflow", NULL},
    {"underflow below a large block", underflow_large, ABORT_SAYING, NOT_RUN, "heap overflow: access to the guard page", NULL},
    {"free of a page's unused first block", free_reserved_first_block, ABORT_NAMING, NOT_RUN, "not a block kennel handed out", NULL},
    {"write after free, deep", write_after_free_deep, ABORT_NAMING, CLEAN, "write after free", NULL},
    {"write after free (large)", write_after_free_large, ABORT_NAMING, CLEAN, "use after free", NULL},
    {"read after free (large)", read_after_free_large, ABORT_NAMING, CLEAN, "use after free", NULL},
    {"write after free, reused (large)", write_after_free_large_reused, ABORT_NAMING, CLEAN, "use after free", NULL},
    {"malloc(0): unique, freeable", zero_size_blocks, CLEAN, CLEAN, NULL, NULL},
    {"malloc(0) after its addresses wrap", zero_size_wrap, CLEAN, CLEAN, NULL, NULL},
    {"double free of malloc(0)", double_free_zero_size, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"realloc of a freed malloc(0)", realloc_freed_zero_size, ABORT_NAMING, ABORT_NAMING, "double free", NULL},
    {"read of a malloc(0) block", read_zero_size, ABORT_NAMING, CLEAN, "zero-size block", NULL},
    {"operator new, no C++ runtime", new_without_runtime, ABORT_SAYING, ABORT_SAYING,
     "operator new(9223372036854775807 bytes, aligned to 16) failed, and no C++ runtime is loaded to throw std::bad_alloc", NULL},
    {"nothrow new, no C++ runtime", nothrow_new_without_runtime, CLEAN, CLEAN, NULL, NULL},
};

static const char *outcome_name[] = {"abort naming the pointer", "abort with a message", "SIGSEGV", "clean exit", "not run"};

/* Runs one fault in a child and reports whether it ended as `expected`;
   `out` receives the child's stderr and `status` its wait status. */
static int try_fault(const struct fault *f, enum outcome expected, const char *expected_message, char out[4096], int *status) {
    int pipefd[2];
    if (pipe(pipefd) != 0) abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        f->run();
        _exit(0);
    }
    close(pipefd[1]);
    ssize_t n = 0, r;
    while (n < 4096 - 1 && (r = read(pipefd[0], out + n, 4096 - 1 - (size_t)n)) > 0) n += r;
    out[n] = 0;
    close(pipefd[0]);
    waitpid(pid, status, 0);

    /* The last pointer the child announced. */
    char announced[64] = "";
    for (const char *line = strstr(out, "pointer "); line; line = strstr(line + 1, "pointer ")) sscanf(line, "pointer %63s", announced);
    const char *message = strstr(out, "kennel: ");
    switch (expected) {
    case ABORT_NAMING:
        return WIFSIGNALED(*status) && WTERMSIG(*status) == SIGABRT && message && announced[0] &&
               strstr(message, announced) && strstr(message, expected_message);
    case ABORT_SAYING: return WIFSIGNALED(*status) && WTERMSIG(*status) == SIGABRT && message && strstr(message, expected_message);
    case SEGV: return WIFSIGNALED(*status) && WTERMSIG(*status) == SIGSEGV;
    case CLEAN: return WIFEXITED(*status) && WEXITSTATUS(*status) == 0 && !message;
    case NOT_RUN: break;
    }
    return 0;
}

static void run_fault(const struct fault *f, enum outcome expected, const char *expected_message) {
    if (expected == NOT_RUN) {
        printf("skip  %-28s (undefined behaviour this library does not survive)\n", f->name);
        return;
    }
    char out[4096];
    int status;
    if (try_fault(f, expected, expected_message, out, &status)) {
        int aborted = expected == ABORT_NAMING || expected == ABORT_SAYING;
        printf("ok    %-28s %s", f->name, aborted ? strstr(out, "kennel: ") : "");
        if (!aborted) printf("%s\n", outcome_name[expected]);
    } else {
        printf("FAIL  %-28s expected %s; status 0x%x, stderr:\n%s\n", f->name, outcome_name[expected], status, out);
        failures++;
    }
}

/* ---- Properties of the hardened library --------------------------------- */

/* In `without FEATURE` mode, set for the properties FEATURE makes. */
static int property_inverted;

/* A property's verdict, counted: it must hold, or with `property_inverted`
   must not. Returns the line's prefix. */
static const char *verdict(int held) {
    int ok = property_inverted ? !held : held;
    if (!ok) failures++;
    return ok ? "ok  " : "FAIL";
}

/* A fresh page hands out blocks in random order: count how often the next
   block is the neighbour above the last one. */
static void check_order(int hardened) {
    enum { count = 40, size = 120 };
    char *blocks[count];
    for (int i = 0; i < count; i++) blocks[i] = malloc(size);
    /* Hardened, the 8 bytes of a block's canary lie past its usable size. */
    size_t step = malloc_usable_size(blocks[0]) + (hardened ? 8 : 0);
    int ascending = 0;
    for (int i = 1; i < count; i++) ascending += blocks[i] == blocks[i - 1] + step;
    for (int i = 0; i < count; i++) free(blocks[i]);
    /* In order: 39 of 39. Shuffled: about one in 40. */
    int ok = hardened ? ascending < 10 : ascending > 30;
    printf("%s  %-28s %d of %d blocks follow their predecessor\n", verdict(ok), "block order", ascending, count - 1);
}

/* The hardened library zeroes freed blocks past their link, which
   supersedes KENNEL_FILL_FREED=1 (read at load: run in a fresh process,
   where it would fill them with 0xdf). */
static int fill_child(void) {
    unsigned char *p = malloc(256);
    memset(p, 0x11, 256);
    free(p);
    for (int i = 8; i < 256; i++)
        if (p[i] != 0) return 1;
    return 0;
}

static void check_fill(void) {
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {(char *)self_path, "fill-child", NULL};
        char *envp[] = {"KENNEL_FILL_FREED=1", NULL};
        execve(self_path, argv, envp);
        _exit(3);
    }
    int status;
    waitpid(pid, &status, 0);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("%s  %-28s freed blocks read as zero, with KENNEL_FILL_FREED=1 too\n", verdict(ok), "zeroed freed blocks");
}

/* A freed block is not the next one handed out (hardened: it waits in the
   quarantine); the fast library reuses it at once. */
static void check_quarantine(void) {
    char *keep = malloc(48);
    int reused = 0;
    for (int i = 0; i < 100; i++) {
        char *a = malloc(48);
        free(a);
        char *b = malloc(48);
        reused += a == b;
        free(b);
    }
    free(keep);
    int ok = hardened ? reused == 0 : reused > 90;
    printf("%s  %-28s %d of 100 freed blocks handed out again at once\n", verdict(ok), "quarantine", reused);
    /* Large blocks (above 64 KiB) wait too, in a ring of their own. */
    reused = 0;
    for (int i = 0; i < 40; i++) {
        char *a = malloc(256 << 10);
        free(a);
        char *b = malloc(256 << 10);
        reused += a == b;
        free(b);
    }
    ok = hardened ? reused == 0 : reused > 36;
    printf("%s  %-28s %d of 40 freed large blocks handed out again at once\n", verdict(ok), "quarantine (large)", reused);
}

/* ---- Each detection's feature ------------------------------------------ */

/* `faults without FEATURE`, linked with libkennel-secure built without one
   hardening feature (config.zig's name): every fault runs with the hardened
   library's expectation, and the ones listed here for FEATURE must then be
   missed, or their tests above could pass without it. A fault another
   feature also stops is not listed. The other faults' outcomes are printed
   for the record. */
struct need {
    const char *fault;
    const char *feature;
};

static const struct need needs[] = {
    {"double free huge", "guard_pages"}, /* its mapping is gone: "not allocated" */
    {"double free after a moving realloc", "quarantine"},
    {"double free, mark overwritten", "check_frees"},
    {"free(linked, never handed out)", "canary"},
    {"free(linked, never handed out), warm", "canary"},
    {"write after free, first word", "quarantine"},
    {"write into a free block's link", "encode_lists"},
    {"overflow into a free block", "canary"},
    {"overflow into guard page", "guard_pages"},
    {"overflow of a medium page", "guard_pages"},
    {"overflow of a small page", "guard_pages"},
    {"underflow into a segment header", "guard_pages"},
    {"underflow into a huge header", "guard_pages"},
    {"read after free (huge)", "guard_pages"},
    {"overflow by one byte", "canary"},
    {"overflow, then realloc", "canary"},
    {"underflow by one byte", "canary"},
    {"underflow into a block never handed out", "canary"},
    {"underflow, caught at its own free", "canary"},
    {"underflow by 32 bytes (medium)", "canary"},
    {"underflow, then realloc", "canary"},
    {"underflow below a large block", "guard_pages"},
    {"free of a page's unused first block", "canary"},
    {"write after free, deep", "zero_freed"},
    {"write after free (large)", "guard_freed_large"},
    {"read after free (large)", "guard_freed_large"},
    {"write after free, reused (large)", "guard_freed_large"},
    {"write after free, reused (large)", "quarantine"},
    {"malloc(0): unique, freeable", "zero_size"},
    {"read of a malloc(0) block", "zero_size"},
};

static int run_without(const char *feature) {
    int listed = 0;
    /* A name that matches no fault (a fault renamed) would list nothing. */
    for (size_t j = 0; j < sizeof(needs) / sizeof(needs[0]); j++) {
        int found = 0;
        for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) found |= strcmp(needs[j].fault, faults[i].name) == 0;
        if (!found) {
            printf("FAIL  the list of features names a fault that does not exist: %s\n", needs[j].fault);
            failures++;
        }
    }
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        const struct fault *f = &faults[i];
        if (f->secure == NOT_RUN) continue;
        int needed = 0;
        for (size_t j = 0; j < sizeof(needs) / sizeof(needs[0]); j++)
            needed |= strcmp(needs[j].fault, f->name) == 0 && strcmp(needs[j].feature, feature) == 0;
        listed += needed;
        char out[4096];
        int status;
        int stopped = try_fault(f, f->secure, f->secure_message ? f->secure_message : f->message, out, &status);
        if (needed && stopped) {
            printf("FAIL  %-28s handled as the hardened library does, without %s: its test cannot fail without it\n", f->name, feature);
            failures++;
        } else {
            printf("%s  %-28s %s without %s\n", needed ? "ok  " : "    ", f->name, stopped ? "still handled" : "missed", feature);
        }
    }
    /* The properties a feature makes must not hold without it. */
    property_inverted = 1;
    if (strcmp(feature, "randomize") == 0) check_order(1), listed++;
    if (strcmp(feature, "quarantine") == 0) check_quarantine(), listed++;
    if (strcmp(feature, "zero_freed") == 0) check_fill(), listed++;
    if (listed == 0) {
        printf("FAIL  no fault or property is listed for %s: nothing shows that its tests need it\n", feature);
        failures++;
    }
    printf("faults (without %s): %d listed, %d failure(s)\n", feature, listed, failures);
    return failures != 0;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && strcmp(argv[1], "fill-child") == 0) return fill_child();
    if (argc > 2 && strcmp(argv[1], "without") == 0) {
        hardened = 1;
        return run_without(argv[2]);
    }
    if (argc < 2 || (strcmp(argv[1], "secure") != 0 && strcmp(argv[1], "fast") != 0)) {
        fprintf(stderr, "usage: %s secure|fast\n", argv[0]);
        return 2;
    }
    hardened = strcmp(argv[1], "secure") == 0;
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
        run_fault(&faults[i], hardened ? faults[i].secure : faults[i].fast,
                  hardened && faults[i].secure_message ? faults[i].secure_message : faults[i].message);
    check_order(hardened);
    check_quarantine();
    if (hardened) check_fill();
    if (failures) {
        printf("faults (%s): %d failure(s)\n", argv[1], failures);
        return 1;
    }
    printf("faults (%s): every fault handled as expected\n", argv[1]);
    return 0;
}
