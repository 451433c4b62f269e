/*
 * Conformance of kennel's C interface: every exported function, with the
 * edge cases the C standard and glibc define (size 0, SIZE_MAX, overflow,
 * every alignment from 1 B to 1 MiB, invalid alignments, realloc across
 * classes and in and out of huge sizes, usable sizes).
 *
 * Linked against libkennel, so the standard names resolve to kennel; the
 * kn_ names are checked too, and kn_stats proves kennel served the memory.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fatal_check.h"
#include "kennel.h"

/* C23; glibc 2.36's headers do not declare them yet. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* Alignments the compiler must not see as constants (it rejects the
   invalid ones at compile time). */
static volatile size_t three = 3, zero = 0, twenty_four = 24;
/* Sizes the compiler must not see either: it may fold a call like
   malloc(SIZE_MAX) to NULL without making it, and errno with it. */
static volatile size_t size_max = SIZE_MAX, two = 2, two_to_33 = (size_t)1 << 33;
/* And a result that is only compared with NULL may be deleted along with
   its call (LLVM does): failures go through this volatile sink. */
static void *volatile sink;
#define FAILS_WITH(call, code) ((sink = (call)) == NULL && errno == (code))

static int aligned(const void *p, size_t alignment) {
    return ((uintptr_t)p & (alignment - 1)) == 0;
}

/* The pattern covers every byte of the first 64 KiB and every 4093rd byte
   after: the same positions whatever the length, so that any prefix of a
   filled block can be checked after realloc. */
static size_t next_position(size_t i) {
    return i < 65536 ? i + 1 : i + 4093;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i = next_position(i)) p[i] = (unsigned char)(seed + i);
}

static int intact(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i = next_position(i))
        if (p[i] != (unsigned char)(seed + i)) return 0;
    return 1;
}

/* Sizes across every class and into huge ones. */
static const size_t sizes[] = {
    0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257,
    500, 1000, 1023, 1024, 1025, 2000, 4095, 4096, 4097, 8191, 8192, 8193, 10000, 32768, 65535, 65536,
    65537, 100000, 262144, 500000, 1048575, 1048576, 1048577, 2000000, 4194304, 10000000, 40000000,
};
#define SIZE_COUNT (sizeof(sizes) / sizeof(sizes[0]))

static void test_malloc_free(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b);
    free(a);
    free(b);
    free(NULL);
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        CHECK(p != NULL);
        CHECK(aligned(p, 16));
        CHECK(malloc_usable_size(p) >= n);
        fill(p, n, (unsigned)i);
        CHECK(intact(p, n, (unsigned)i));
        free(p);
    }
    CHECK(malloc_usable_size(NULL) == 0);
}

static void test_out_of_memory(void) {
    errno = 0;
    CHECK(FAILS_WITH(malloc(size_max), ENOMEM));
    errno = 0;
    CHECK(FAILS_WITH(malloc(size_max / 2), ENOMEM));
    errno = 0;
    CHECK(FAILS_WITH(calloc(size_max, two), ENOMEM));
    errno = 0;
    CHECK(FAILS_WITH(calloc(two_to_33, two_to_33), ENOMEM));
    errno = 0;
    CHECK(FAILS_WITH(aligned_alloc(64, size_max - 10), ENOMEM));
    unsigned char *p = malloc(100);
    fill(p, 100, 3);
    errno = 0;
    CHECK(FAILS_WITH(realloc(p, size_max), ENOMEM));
    CHECK(intact(p, 100, 3)); /* the original is untouched */
    errno = 0;
    CHECK(FAILS_WITH(reallocarray(p, size_max / 4, 8), ENOMEM));
    CHECK(intact(p, 100, 3));
    void *q = NULL;
    CHECK(posix_memalign(&q, 64, size_max - 100) == ENOMEM && q == NULL);
    free(p);
}

/* The address space in use, from /proc/self/status (VmSize, in KiB). */
/* A figure of /proc/self/status, in bytes: "VmSize:" (what RLIMIT_AS
   counts) or "VmData:" (private writable mappings: what RLIMIT_DATA
   counts). */
static size_t status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    size_t kib = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) kib = (size_t)atol(line + n);
    fclose(f);
    CHECK(kib > 0);
    return kib << 10;
}

/* Under a limit on address space (RLIMIT_AS, or a full 32-bit space), an
   allocation the OS refuses must first have kennel unmap what it keeps
   mapped for reuse: a freed huge block's cached mapping, empty segments.
   Before, only the shared pool was unmapped, and malloc returned NULL with
   40 + 40 MiB of freed memory still mapped. In a child: the limit is the
   process's. */
static void test_address_space_limit(void) {
    const size_t mib = (size_t)1 << 20;
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        size_t limit = status_bytes("VmSize:") + 600 * mib;
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
        unsigned char *live = malloc(300 * mib);
        if (live == NULL) _exit(3);
        memset(live, 1, 300 * mib);
        unsigned char *freed = malloc(40 * mib);
        if (freed == NULL) _exit(4);
        memset(freed, 2, 40 * mib);
        free(freed);
        unsigned char *blocks[40];
        for (int i = 0; i < 40; i++) {
            blocks[i] = malloc(mib);
            if (blocks[i] == NULL) _exit(5);
            memset(blocks[i], 3, mib);
        }
        for (int i = 0; i < 40; i++) free(blocks[i]);
        unsigned char *big = malloc(270 * mib);
        if (big == NULL) _exit(6);
        memset(big, 4, 270 * mib);
        free(big);
        _exit(live[300 * mib - 1] == 1 ? 0 : 7);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "address space limit: child status %d\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Under RLIMIT_DATA, which counts writable memory only: the hardened
   library makes a freed large block inaccessible, which takes it out of
   the count, and other blocks may then take its room. Opening the block
   again (to hand it out, or to give its page back) is then refused, and
   kennel aborted ("cannot make a released page accessible again"), where
   it must report out of memory and go on. Fill the limit with large
   blocks, free some (guarded), fill the room with small ones, free all,
   and allocate large blocks again: each one handed out must be writable.
   Whether the room is taken depends on where the limit falls in a
   segment's 4 MiB: one child per MiB of it (before the fix, three of the
   four aborted). In children: the limit is the process's. */
static void data_limit_child(size_t extra_mib) {
    enum { large_bytes = 200000, large_max = 4096, small_bytes = 1000, small_max = 1 << 20 };
    static void *large[large_max];
    static void *small[small_max];
    size_t limit = status_bytes("VmData:") + (extra_mib << 20);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_DATA, &rl) != 0) _exit(2);
    int n_large = 0, n_small = 0;
    while (n_large < large_max && (large[n_large] = malloc(large_bytes)) != NULL) memset(large[n_large++], 1, large_bytes);
    if (n_large < 128 || n_large == large_max) _exit(3);
    for (int i = 0; i < 64; i++) free(large[--n_large]);
    while (n_small < small_max && (small[n_small] = malloc(small_bytes)) != NULL) memset(small[n_small++], 2, small_bytes);
    if (n_small == small_max) _exit(4);
    for (int i = 0; i < n_small; i++) free(small[i]);
    for (int i = 0; i < n_large; i++) free(large[i]);
    int again = 0;
    while (again < 64 && (large[again] = malloc(large_bytes)) != NULL) memset(large[again++], 3, large_bytes);
    if (again < 64) _exit(5);
    for (int i = 0; i < again; i++) free(large[i]);
    _exit(0);
}

static void test_data_limit(void) {
    for (size_t extra_mib = 64; extra_mib < 68; extra_mib++) {
        fflush(NULL);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) data_limit_child(extra_mib);
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "data limit +%zu MiB: child status %d\n", extra_mib, status);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void test_calloc(void) {
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        size_t n = sizes[i];
        /* Dirty a block of the same size first, so calloc may get it back. */
        unsigned char *d = malloc(n);
        memset(d, 0xee, n);
        free(d);
        unsigned char *p = calloc(1, n);
        CHECK(p != NULL && aligned(p, 16));
        for (size_t j = 0; j < n; j += (n > 65536 ? 511 : 1)) CHECK(p[j] == 0);
        if (n) CHECK(p[n - 1] == 0);
        free(p);
    }
    int *v = calloc(1000, sizeof(int));
    for (int i = 0; i < 1000; i++) CHECK(v[i] == 0);
    free(v);
    void *z = calloc(0, 5);
    CHECK(z != NULL);
    free(z);
}

/* Bytes of [p, p + n) that are resident (mincore). */
static size_t resident_bytes_of(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t pages = ((uintptr_t)p + n - start + page - 1) / page;
    static unsigned char vec[(1 << 20) / 4096 + 2];
    CHECK(pages <= sizeof vec);
    /* Memory unmapped since is not resident. */
    if (mincore((void *)start, pages * page, vec) != 0) {
        CHECK(errno == ENOMEM);
        return 0;
    }
    size_t resident = 0;
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
    return resident * page;
}

/* The fast library: a large calloc that the program touches sparsely
   costs what it touches. Memory never used (or purged since) is zero
   already and is not cleared; memory that was used is. (The hardened
   library clears every block, and checks it on reuse.) */
static void test_calloc_sparse(void) {
    enum { count = 32, size = 1 << 20, stride = 4096 };
    static unsigned char *blocks[count];
    /* Free memory left by the tests before goes back (all but 1 MiB). */
    kn_release_thread_memory();
    size_t resident = 0;
    for (int i = 0; i < count; i++) {
        blocks[i] = calloc(1, size);
        CHECK(blocks[i] != NULL);
        blocks[i][0] = 1;
        blocks[i][size - 1] = 1;
        resident += resident_bytes_of(blocks[i], size);
    }
    CHECK(resident < (size_t)count * size / 4);
    for (int i = 0; i < count; i++) {
        for (size_t j = 1; j < size - 1; j++) CHECK(blocks[i][j] == 0);
        /* Dirty the whole block, so the next calloc of its memory must clear it. */
        memset(blocks[i], 0xa5, size);
        free(blocks[i]);
    }
    for (int i = 0; i < count; i++) {
        size_t n = size - (size_t)(i % 5) * stride;
        blocks[i] = calloc(1, n);
        CHECK(blocks[i] != NULL);
        for (size_t j = 0; j < n; j++) CHECK(blocks[i][j] == 0);
    }
    for (int i = 0; i < count; i++) free(blocks[i]);
}

/* The fast library: a calloc built from a freed huge block's cached
   mapping faults in no more of it than a fresh mapping would, past what
   it writes (up to 32 MiB where the program writes its huge blocks whole,
   which the tests before may have shown). Its old pages were cleared by
   writing them all, so a calloc after a huge block freed unwritten made
   them resident (1 GiB: 113 MiB, 4 GiB: 450 MiB, and after 1 TiB the OOM
   killer), though nothing had touched them. */
static void test_calloc_over_freed_huge(void) {
    const size_t mib = (size_t)1 << 20, size = 1024 * mib, dirty = 64 * mib;
    kn_release_thread_memory();
    unsigned char *p = malloc(size);
    if (p == NULL) return; /* a machine too small to map it: nothing to test */
    p[0] = 1;
    free(p);
    unsigned char *c = calloc(1, size);
    CHECK(c != NULL);
    CHECK(resident_bytes_of(c + 40 * mib, mib) == 0);
    for (size_t j = 0; j < size; j += mib) CHECK(c[j] == 0);
    /* Dirty its first 64 MiB: the next calloc over its memory clears them. */
    memset(c, 0x5a, dirty);
    free(c);
    c = calloc(1, size);
    CHECK(c != NULL);
    for (size_t j = 0; j < dirty; j++) CHECK(c[j] == 0);
    for (size_t j = dirty; j < size; j += mib) CHECK(c[j] == 0);
    free(c);
    kn_release_thread_memory();
}

/* Under the kernel's default overcommit heuristic, a block larger than
   memory and swap together is refused, as glibc's malloc refuses it: the
   program is told (NULL, ENOMEM), not killed when it writes the block. It
   had succeeded (MAP_NORESERVE skips the heuristic). */
static void test_larger_than_memory(void) {
    if (sizeof(size_t) < 8) return;
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    if (f == NULL) return;
    int mode = -1;
    CHECK(fscanf(f, "%d", &mode) == 1);
    fclose(f);
    if (mode != 0) return;
    struct sysinfo info;
    CHECK(sysinfo(&info) == 0);
    size_t memory = ((size_t)info.totalram + (size_t)info.totalswap) * info.mem_unit;
    size_t size = 2 * memory + ((size_t)1 << 30);
    errno = 0;
    CHECK(FAILS_WITH(malloc(size), ENOMEM));
    errno = 0;
    CHECK(FAILS_WITH(calloc(1, size), ENOMEM));
    void *q = NULL;
    CHECK(posix_memalign(&q, (size_t)1 << 21, size) == ENOMEM && q == NULL);
}

/* malloc_trim gives the calling thread's free memory back: blocks written
   whole and freed are no longer resident after it, and a second call finds
   nothing to give back (the fast library; the hardened one keeps freed
   blocks in a quarantine first). */
static void test_malloc_trim(int fast) {
    enum { count = 64, size = 256 << 10 };
    static unsigned char *blocks[count];
    for (int i = 0; i < count; i++) {
        blocks[i] = malloc(size);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0x5a, size);
    }
    for (int i = 0; i < count; i++) free(blocks[i]);
    CHECK(malloc_trim(0) == 1);
    size_t resident = 0;
    for (int i = 0; i < count; i++) resident += resident_bytes_of(blocks[i], size);
    CHECK(resident < (size_t)count * size / 4);
    if (fast) CHECK(malloc_trim(0) == 0);
    CHECK(kn_malloc_trim(0) == 0 || !fast);
}

static void test_realloc(void) {
    /* realloc(NULL, n) is malloc(n). */
    unsigned char *p = realloc(NULL, 10);
    CHECK(p != NULL);
    fill(p, 10, 1);
    size_t have = 10;
    /* Grow through every class into huge sizes, then shrink back. */
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        size_t n = sizes[i] ? sizes[i] : 1;
        unsigned char *q = realloc(p, n);
        CHECK(q != NULL && aligned(q, 16));
        CHECK(intact(q, have < n ? have : n, 1));
        fill(q, n, 1);
        p = q;
        have = n;
    }
    for (size_t i = SIZE_COUNT; i-- > 0;) {
        size_t n = sizes[i] ? sizes[i] : 1;
        unsigned char *q = realloc(p, n);
        CHECK(q != NULL);
        CHECK(intact(q, n, 1));
        p = q;
        have = n;
    }
    /* Growing within the block's class stays in place. */
    unsigned char *a = malloc(100);
    CHECK(realloc(a, malloc_usable_size(a)) == a);
    /* A large block that cannot grow in place (a neighbour follows it) moves,
       its pages or a copy, keeping its contents; the neighbour keeps its. */
    unsigned char *l = malloc(600 << 10), *next = malloc(600 << 10);
    fill(l, 600 << 10, 4);
    fill(next, 600 << 10, 5);
    l = realloc(l, 1500 << 10);
    CHECK(l != NULL && intact(l, 600 << 10, 4) && intact(next, 600 << 10, 5));
    fill(l, 1500 << 10, 6);
    CHECK(intact(l, 1500 << 10, 6));
    free(next);
    free(l);
    /* A huge block grows in place or moves its pages, keeping contents. */
    unsigned char *h = malloc(3 << 20);
    fill(h, 3 << 20, 9);
    h = realloc(h, 30 << 20);
    CHECK(h != NULL && intact(h, 3 << 20, 9));
    h = realloc(h, 2 << 20);
    CHECK(h != NULL && intact(h, 2 << 20, 9));
    free(h);
    /* realloc(p, 0) frees p and returns NULL, as in glibc. */
    CHECK((sink = realloc(a, 0)) == NULL);
    free(p);
    unsigned char *r = reallocarray(NULL, 10, 10);
    CHECK(r != NULL && malloc_usable_size(r) >= 100);
    free(r);
}

/* The process's kernel mappings (VMAs), from /proc/self/maps; -1 where
   it cannot be read. */
static int mapping_count(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) return -1;
    int lines = 0, c;
    while ((c = fgetc(f)) != EOF) lines += c == '\n';
    fclose(f);
    return lines;
}

/* A large block that moves by its kernel pages leaves a kernel mapping of
   its own where it lands (two more for its segment's mapping), until its
   segment is unmapped; the process may hold only vm.max_map_count of them
   (65,530 by default), past which mmap fails. kennel moves at most 1,024
   such blocks (Heap.moved_blocks_max) and copies the rest. Unbounded, this
   loop added two mappings per block, 6,000 for 3,000 blocks. Stops once
   the count stays put (no moves at all: hardened, or a kernel that cannot). */
static void test_moves_bounded(void) {
    enum { blocks_max = 3000, mappings_added_max = 2 * 1024 + 64 };
    static unsigned char *kept[blocks_max];
    const int before = mapping_count();
    if (before < 0) return;
    int count = 0, last = before, flat = 0;
    while (count < blocks_max && flat < 64) {
        unsigned char *l = malloc(600 << 10), *next = malloc(600 << 10);
        CHECK(l != NULL && next != NULL);
        l[0] = (unsigned char)count;
        l = realloc(l, 1200 << 10);
        CHECK(l != NULL && l[0] == (unsigned char)count);
        free(next);
        kept[count++] = l;
        if (count % 8 != 0) continue;
        const int now = mapping_count();
        CHECK(now - before <= mappings_added_max);
        flat = now == last ? flat + 8 : 0;
        last = now;
    }
    for (int i = 0; i < count; i++) free(kept[i]);
}

/* A block moved in and grown again spans the mapping its move made and
   the memory it grew into. Moved again in one call, each would arrive as a
   mapping of its own while the move counted once, and the kernel moves
   them one at a time, so a refusal could leave part moved: kennel moves
   such a block one kernel mapping at a time, each counted. Each buffer
   here grows through eight classes, with a small block allocated after
   each step: moved whole, 1,000 of them added 2,176 mappings where the
   bound allows 2,112; piece by piece, 1,521. */
static void test_moves_chained(void) {
    enum { buffers = 1000, steps = 8, mappings_added_max = 2 * 1024 + 64 };
    static unsigned char *kept[buffers];
    static unsigned char *blockers[buffers * steps];
    const int before = mapping_count();
    if (before < 0) return;
    int blocked = 0;
    for (int i = 0; i < buffers; i++) {
        size_t len = 600 << 10;
        unsigned char *b = malloc(len);
        CHECK(b != NULL);
        b[0] = (unsigned char)i;
        b[len - 1] = (unsigned char)(i + 1);
        for (int s = 0; s < steps; s++) {
            blockers[blocked] = malloc(64 << 10);
            CHECK(blockers[blocked] != NULL);
            blocked++;
            size_t grown = len + len / 8;
            b = realloc(b, grown);
            CHECK(b != NULL && b[0] == (unsigned char)i && b[len - 1] == (unsigned char)(i + 1));
            b[len - 1] = 0;
            len = grown;
            b[len - 1] = (unsigned char)(i + 1);
        }
        kept[i] = b;
        if (i % 16 == 0) CHECK(mapping_count() - before <= mappings_added_max);
    }
    CHECK(mapping_count() - before <= mappings_added_max);
    for (int i = 0; i < buffers; i++) free(kept[i]);
    for (int i = 0; i < blocked; i++) free(blockers[i]);
}

/* After a block moved its pages away (realloc that could not grow in
   place), its old page's record of touched memory leaves them out. Kept
   for its size and handed out again, the program's writes to it went
   unrecorded, and a calloc set up there later skipped clearing them: it
   returned the bytes of an earlier block past its first 4 KiB. */
static void test_calloc_after_move(void) {
    enum { len = 600000, fence_len = 700000, zeroed_len = 500000 };
    unsigned char *a = NULL, *fence = NULL, *stale[8];
    int n = 0;
    /* A block with a block of another size right after it. */
    for (; n < 8; n++) {
        a = malloc(len);
        fence = malloc(fence_len);
        CHECK(a != NULL && fence != NULL);
        if (fence == a + 655360) break;
        stale[n] = a;
        free(fence);
    }
    for (int i = 0; i < n; i++) free(stale[i]);
    if (n == 8) return; /* another layout: nothing to test */
    memset(a, 'a', len);
    unsigned char *grown = realloc(a, 2 * len);
    CHECK(grown != NULL && grown[len - 1] == 'a');
    unsigned char *b = malloc(len);
    CHECK(b != NULL);
    memset(b, 'B', len);
    free(b);
    unsigned char *b2 = malloc(len), *b3 = malloc(len);
    CHECK(b2 != NULL && b3 != NULL);
    memset(b2, 'C', len);
    free(b2);
    unsigned char *z = calloc(1, zeroed_len);
    CHECK(z != NULL);
    for (size_t i = 0; i < zeroed_len; i++) CHECK(z[i] == 0);
    free(z);
    free(b3);
    free(grown);
    free(fence);
}

/* Under mlockall the kernel refuses MADV_DONTNEED, and purged memory kept
   its bytes, where kennel counts on it reading back as zeroes: calloc over
   a purged large block returned its old bytes (fast library), and the
   hardened one aborted a valid program for a write after free when small
   blocks were set up there. Purges of locked memory now drop it with
   MADV_DONTNEED_LOCKED (Linux 5.18), or zero it. In a child: the lock is
   the process's. */
static void test_locked_memory(void) {
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        setrlimit(RLIMIT_MEMLOCK, &rl);
        if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) _exit(0); /* not allowed here: nothing to test */
        enum { big = 200000 };
        unsigned char *p = malloc(big);
        if (p == NULL) _exit(3);
        memset(p, 0xAA, big);
        free(p);
        /* Other large sizes (past the hardened quarantine), then every
           free page back to its segment, purged. */
        for (int i = 0; i < 40; i++) {
            unsigned char *q = malloc(big + (size_t)(i + 1) * 70000);
            if (q == NULL) _exit(3);
            memset(q, 1, 16);
            free(q);
        }
        malloc_trim(0);
        /* calloc where a freed, purged block was (its first 16 bytes hold
           kennel's own words in the fast library). */
        for (int round = 0; round < 8; round++) {
            size_t n = 100000 + (size_t)round * 37000;
            unsigned char *old = malloc(n), *keep = malloc(50000);
            if (old == NULL || keep == NULL) _exit(3);
            memset(old, 0xAA, n);
            free(old);
            malloc_trim(0);
            unsigned char *z = calloc(1, n);
            if (z == NULL) _exit(3);
            for (size_t i = 0; i < n; i++)
                if (z[i] != 0) _exit(4);
            free(z);
            free(keep);
        }
        /* Small blocks over the purged memory (the hardened zero check). */
        for (int i = 0; i < 20000; i++)
            if (malloc(1000) == NULL) _exit(3);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "locked memory: child status %d\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A move asks the kernel for the moved length on top of what the process
   maps, after it has unmapped the destination: a process over its
   address-space limit (one lowered below what it maps) had the move
   refused with a hole where the new block lay, and kennel's copy into it
   crashed (SIGSEGV). Under such a limit kennel copies, and a refused move
   maps its destination again. In a child: the limit is the process's. */
static void test_move_over_limit(void) {
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        enum { len = 600 << 10, tries = 16 };
        unsigned char *blocks[tries], *blockers[tries];
        for (int i = 0; i < tries; i++) {
            blocks[i] = malloc(len);
            blockers[i] = malloc(len);
            if (blocks[i] == NULL || blockers[i] == NULL) _exit(3);
            memset(blocks[i], i + 1, len);
        }
        /* Room in the heap's segments for the grown blocks, so that they
           need no new mapping. */
        unsigned char *room[tries];
        for (int i = 0; i < tries; i++) room[i] = malloc(2 * len);
        for (int i = 0; i < tries; i++) free(room[i]);
        size_t limit = status_bytes("VmSize:") - ((size_t)1 << 20);
        struct rlimit rl = {limit, RLIM_INFINITY};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
        for (int i = 0; i < tries; i++) {
            unsigned char *grown = realloc(blocks[i], 2 * len - 4096);
            unsigned char *b = grown != NULL ? grown : blocks[i];
            for (size_t j = 0; j < len; j += 4096)
                if (b[j] != (unsigned char)(i + 1)) _exit(4);
            free(b);
            free(blockers[i]);
        }
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "move over the address-space limit: child status %d\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_alignment(void) {
    for (size_t a = 1; a <= ((size_t)1 << 20); a *= 2) {
        const size_t lens[] = {1, a, 3 * a + 1, 100000};
        for (size_t i = 0; i < 4; i++) {
            size_t n = lens[i];
            unsigned char *p = aligned_alloc(a, n);
            CHECK(p != NULL && aligned(p, a) && aligned(p, 16));
            CHECK(malloc_usable_size(p) >= n);
            fill(p, n, 5);
            CHECK(intact(p, n, 5));
            free(p);
            void *q = NULL;
            if (a >= sizeof(void *)) {
                errno = 1234;
                CHECK(posix_memalign(&q, a, n) == 0 && aligned(q, a));
                CHECK(errno == 1234); /* success leaves errno alone */
                memset(q, 0x5a, n);
                q = realloc(q, n + 1000); /* realloc keeps max_align_t alignment */
                CHECK(q != NULL && aligned(q, 16));
                free(q);
            }
            p = memalign(a, n);
            CHECK(p != NULL && aligned(p, a));
            free_aligned_sized(p, a, n);
        }
    }
    long page = sysconf(_SC_PAGESIZE);
    void *v = valloc(10);
    CHECK(v && aligned(v, (size_t)page));
    free(v);
    void *pv = pvalloc(10);
    CHECK(pv && aligned(pv, (size_t)page) && malloc_usable_size(pv) >= (size_t)page);
    free(pv);
    pv = pvalloc(0);
    CHECK(pv && malloc_usable_size(pv) >= (size_t)page);
    free(pv);
    /* Invalid alignments. */
    void *q = (void *)1;
    CHECK(posix_memalign(&q, 0, 8) == EINVAL && q == (void *)1);
    CHECK(posix_memalign(&q, 3, 8) == EINVAL);
    CHECK(posix_memalign(&q, 4, 8) == EINVAL); /* not a multiple of sizeof(void *) */
    CHECK(posix_memalign(&q, 24, 8) == EINVAL);
    errno = 0;
    CHECK(FAILS_WITH(aligned_alloc(three, 16), EINVAL));
    errno = 0;
    CHECK(FAILS_WITH(aligned_alloc(zero, 16), EINVAL));
    /* memalign rounds a non-power-of-two alignment up, like glibc. */
    void *m = memalign(twenty_four, 100);
    CHECK(m && aligned(m, 32));
    free(m);
}

static void test_sized_and_prefixed(void) {
    free_sized(malloc(10), 10);
    free_aligned_sized(aligned_alloc(64, 128), 64, 128);
    unsigned char *p = kn_malloc(50);
    CHECK(p && kn_malloc_usable_size(p) >= 50);
    p = kn_realloc(p, 5000);
    CHECK(p);
    kn_free(p);
    int *c = kn_calloc(10, sizeof(int));
    CHECK(c && c[9] == 0);
    kn_free_sized(c, 10 * sizeof(int));
    void *q;
    CHECK(kn_posix_memalign(&q, 256, 10) == 0 && aligned(q, 256));
    kn_free(q);
    q = kn_aligned_alloc(4096, 4096);
    CHECK(q && aligned(q, 4096));
    kn_free(q);
    q = kn_memalign(128, 1);
    CHECK(q && aligned(q, 128));
    kn_free(q);
    q = kn_valloc(1);
    kn_free(q);
    q = kn_pvalloc(1);
    kn_free(q);
    q = kn_reallocarray(NULL, 4, 4);
    kn_free_aligned_sized(q, 16, 16);
}

/* glibc's internal names, which kennel exports too: a block from any of
   them must be kennel's (kn_malloc_usable_size and free abort on a
   foreign one), and __libc_free must take kennel's blocks. */
void *__libc_malloc(size_t size);
void __libc_free(void *ptr);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *ptr, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
int __posix_memalign(void **ptr, size_t alignment, size_t size);
void cfree(void *ptr);
struct mallinfo __libc_mallinfo(void);
int __libc_mallopt(int param, int value);

static void test_glibc_internal_names(void) {
    unsigned char *p = __libc_malloc(100);
    CHECK(p && kn_malloc_usable_size(p) >= 100);
    fill(p, 100, 7);
    p = __libc_realloc(p, 5000);
    CHECK(p && intact(p, 100, 7));
    free(p);
    int *c = __libc_calloc(10, sizeof(int));
    CHECK(c && c[9] == 0);
    cfree(c);
    void *q = malloc(64);
    __libc_free(q);
    q = __libc_memalign(256, 10);
    CHECK(q && aligned(q, 256) && kn_malloc_usable_size(q) >= 10);
    free(q);
    q = __libc_valloc(1);
    CHECK(q && aligned(q, 4096));
    free(q);
    q = __libc_pvalloc(1);
    CHECK(q && aligned(q, 4096));
    free(q);
    CHECK(__posix_memalign(&q, 64, 100) == 0 && aligned(q, 64));
    CHECK(kn_malloc_usable_size(q) >= 100);
    free(q);
    CHECK(__posix_memalign(&q, three, 100) == EINVAL);
    /* kennel's figures, not those of glibc's unused arena. */
    void *live = malloc(1 << 20);
    CHECK(live != NULL);
    struct mallinfo info = __libc_mallinfo();
    CHECK(info.uordblks >= 1 << 20);
    free(live);
    CHECK(__libc_mallopt(M_TRIM_THRESHOLD, 1 << 20) == mallopt(M_TRIM_THRESHOLD, 1 << 20));
}

static void test_served_by_kennel(void) {
    struct kn_stats before, after;
    kn_stats(&before);
    void *big = malloc(80 << 20); /* a huge block: new, or built from cached mappings */
    kn_stats(&after);
    CHECK(after.huge_count == before.huge_count + 1);
    CHECK(after.huge_bytes >= before.huge_bytes + (80 << 20));
    CHECK(after.mapped_bytes >= 80 << 20);
    CHECK(after.heap_count >= 1);
    free(big);
    kn_release_thread_memory();
}

int main(int argc, char **argv) {
    CHECK(argc == 2 && (strcmp(argv[1], "fast") == 0 || strcmp(argv[1], "secure") == 0));
    test_calloc_after_move(); /* first: its sizes' pages must be their classes' only ones */
    test_malloc_free();
    test_out_of_memory();
    test_address_space_limit();
    test_data_limit();
    test_calloc();
    int fast = strcmp(argv[1], "fast") == 0;
    if (fast) test_calloc_sparse();
    if (fast) test_calloc_over_freed_huge();
    test_larger_than_memory();
    test_malloc_trim(fast);
    test_realloc();
    test_moves_bounded();
    test_moves_chained();
    test_move_over_limit();
    test_locked_memory();
    test_alignment();
    test_sized_and_prefixed();
    test_glibc_internal_names();
    test_served_by_kennel();
    printf("conformance: all checks passed\n");
    return 0;
}
