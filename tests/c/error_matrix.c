/*
 * Heap errors, class by class and size by size, committed under three
 * allocators: the C library's own malloc (glibc), libkennel and
 * libkennel-secure (LD_PRELOAD). Usage:
 *
 *     error_matrix LIBKENNEL.so LIBKENNEL-SECURE.so
 *
 * Each error runs in a child process of its own (this program again, with
 * the library preloaded), which commits it, then goes on as a program
 * would: it frees what it holds and allocates the same size a few thousand
 * times, so that checks made when a block is freed or handed out again get
 * their chance. The child is *stopped* when it dies of a signal (kennel's
 * abort after its one-line message, a guard page's SIGSEGV, glibc's own
 * aborts), *missed* when it runs to its end. The table goes to stdout.
 *
 * The test fails when the hardened library misses an error it is
 * documented to stop (MUST below: README, Hardened mode), or one the C
 * library's malloc stops, unless the table names that one a known gap
 * (GAP, with the reason beside it). The fast library's column is
 * information: it promises only to stop double and invalid frees.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The sizes every class is tried in: a small block, a medium one (a
   kennel medium page), and a large one (above the C library's mmap
   threshold, and above 64 KiB: kennel guards it when freed). */
static const size_t sizes[] = {32, 16384, 262144};
static const char *const size_names[] = {"32 B", "16 KiB", "256 KiB"};
#define SIZE_COUNT (sizeof sizes / sizeof sizes[0])

/* Allocations of the erring size after the error: more than any
   quarantine holds, so the block comes back and is checked. */
#define CHURN_STEPS 3000

/* Seconds a child may take before it counts as hung (missed). */
#define CHILD_SECONDS_MAX 20

static char *volatile sink; /* keeps the compiler from dropping accesses */

static void churn(size_t size) {
    for (int i = 0; i < CHURN_STEPS; i++) {
        char *q = malloc(size);
        if (q == NULL) abort();
        q[0] = 1;
        sink = q;
        free(q);
    }
}

static char *fresh(size_t size) {
    char *p = malloc(size);
    if (p == NULL) abort();
    memset(p, 7, size);
    return p;
}

/* ---- The errors -------------------------------------------------------- */

static void double_free(size_t size) {
    char *p = fresh(size);
    free(p);
    free(sink = p);
}

/* A free in between: glibc's check of the list's top entry misses it. */
static void double_free_later(size_t size) {
    char *p = fresh(size), *q = fresh(size);
    free(p);
    free(q);
    free(sink = p);
}

static void free_interior(size_t size) {
    char *p = fresh(size);
    free(sink = p + 16);
}

/* Past what malloc_usable_size promises, then the free. */
static void overflow(size_t size, size_t bytes) {
    char *p = fresh(size);
    memset(p + malloc_usable_size(p), 'A', bytes);
    free(sink = p);
    churn(size);
}

static void overflow_1(size_t size) { overflow(size, 1); }
static void overflow_32(size_t size) { overflow(size, 32); }
static void overflow_1mib(size_t size) { overflow(size, 1 << 20); }

static void underflow(size_t size, size_t bytes) {
    char *p = fresh(size);
    memset(p - bytes, 'A', bytes);
    free(sink = p);
    churn(size);
}

static void underflow_1(size_t size) { underflow(size, 1); }
static void underflow_32(size_t size) { underflow(size, 32); }

/* Into the middle of the block, past any free-list link. */
static void write_after_free(size_t size) {
    char *p = fresh(size);
    free(p);
    (sink = p)[size / 2] = 'A';
    churn(size);
}

static void read_after_free(size_t size) {
    char *p = fresh(size);
    free(p);
    char c = (sink = p)[size / 2];
    sink = (char *)(size_t)c;
    churn(size);
}

/* The block is freed, the same size asked for again (an allocator that
   hands the block straight back gives it to this new owner), and the old
   pointer written through. */
static void use_after_free_then_reuse(size_t size) {
    char *p = fresh(size);
    free(p);
    char *q = fresh(size);
    (sink = p)[size / 2] = 'A';
    free(q);
    churn(size);
}

/* What the hardened library promises for an error in one size. */
enum promise {
    MUST, /* stops it */
    FREE, /* promises nothing; must still stop it where glibc does */
    GAP,  /* a known gap: may miss it even where glibc stops it */
};

struct error {
    const char *name;
    void (*commit)(size_t size);
    enum promise secure[SIZE_COUNT];
};

static const struct error errors[] = {
    {"double free", double_free, {MUST, MUST, MUST}},
    {"double free, another free between", double_free_later, {MUST, MUST, MUST}},
    {"free of an interior pointer", free_interior, {MUST, MUST, MUST}},
    {"overflow by 1 byte", overflow_1, {MUST, MUST, MUST}},
    {"overflow by 32 bytes", overflow_32, {MUST, MUST, MUST}},
    {"overflow by 1 MiB", overflow_1mib, {MUST, MUST, MUST}},
    /* A large block (one a page) has below it whatever page the segment
       put there: no canary of its own, and a guard only where the page
       below is medium or large. */
    {"underflow by 1 byte", underflow_1, {MUST, MUST, GAP}},
    {"underflow by 32 bytes", underflow_32, {MUST, MUST, GAP}},
    {"write after free", write_after_free, {MUST, MUST, MUST}},
    /* Blocks up to 64 KiB read zeros after free; larger ones fault. */
    {"read after free", read_after_free, {FREE, FREE, MUST}},
    {"use after free, then reuse", use_after_free_then_reuse, {MUST, MUST, MUST}},
};
#define ERROR_COUNT (sizeof errors / sizeof errors[0])

/* ---- Zero-size blocks (one size) ---------------------------------------- */

static void zero_size_read(size_t size) {
    (void)size;
    sink = malloc(0); /* through the volatile: the compiler knows the size */
    char *p = sink;
    char c = *(volatile char *)p;
    sink = (char *)(size_t)c;
    free(p);
}

static void zero_size_write(size_t size) {
    (void)size;
    sink = malloc(0);
    char *p = sink;
    *(volatile char *)p = 'A';
    free(p);
    churn(16);
}

static const struct error zero_size_errors[] = {
    {"read of a malloc(0) block", zero_size_read, {MUST}},
    {"write to a malloc(0) block", zero_size_write, {MUST}},
};
#define ZERO_SIZE_ERROR_COUNT (sizeof zero_size_errors / sizeof zero_size_errors[0])

/* ---- The parent --------------------------------------------------------- */

enum { GLIBC, FAST, SECURE, ALLOCATOR_COUNT };

/* Runs error `index` (zero-size ones after the others) in `size_index`
   under `preload` (NULL: none); returns the signal that stopped the
   child, 0 if it ran to its end, -1 if it hung or could not run. */
static int run_child(const char *self, const char *preload, int index, int size_index) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        /* No core files for the children that are meant to die. */
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        if (preload) setenv("LD_PRELOAD", preload, 1);
        else unsetenv("LD_PRELOAD");
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        char index_arg[16], size_arg[16];
        snprintf(index_arg, sizeof index_arg, "%d", index);
        snprintf(size_arg, sizeof size_arg, "%d", size_index);
        execl(self, self, "--child", index_arg, size_arg, (char *)NULL);
        _exit(3);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        exit(2);
    }
    if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGALRM ? -1 : WTERMSIG(status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    return -1;
}

static int child(int index, int size_index) {
    alarm(CHILD_SECONDS_MAX);
    const struct error *e = index < (int)ERROR_COUNT ? &errors[index] : &zero_size_errors[index - ERROR_COUNT];
    e->commit(sizes[size_index]);
    return 0;
}

static const char *describe(int result) {
    switch (result) {
    case 0: return "missed";
    case SIGABRT: return "stopped (abort)";
    case SIGSEGV: return "stopped (SIGSEGV)";
    case SIGBUS: return "stopped (SIGBUS)";
    case -1: return "missed (hung or failed)";
    default: return "stopped (signal)";
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child(atoi(argv[2]), atoi(argv[3]));
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBKENNEL.so LIBKENNEL-SECURE.so\n", argv[0]);
        return 2;
    }
    const char *self = "/proc/self/exe";
    char self_path[4096];
    ssize_t n = readlink(self, self_path, sizeof self_path - 1);
    if (n <= 0) {
        perror("readlink");
        return 2;
    }
    self_path[n] = 0;
    const char *preloads[ALLOCATOR_COUNT] = {NULL, argv[1], argv[2]};

    int stopped[ALLOCATOR_COUNT] = {0}, total = 0, failures = 0, gaps = 0;
    printf("| error | size | glibc | kennel | kennel-secure |\n| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < (int)(ERROR_COUNT + ZERO_SIZE_ERROR_COUNT); i++) {
        const struct error *e = i < (int)ERROR_COUNT ? &errors[i] : &zero_size_errors[i - ERROR_COUNT];
        int size_count = i < (int)ERROR_COUNT ? (int)SIZE_COUNT : 1;
        for (int s = 0; s < size_count; s++) {
            int result[ALLOCATOR_COUNT];
            for (int a = 0; a < ALLOCATOR_COUNT; a++) {
                result[a] = run_child(self_path, preloads[a], i, s);
                if (result[a] > 0) stopped[a]++;
            }
            total++;
            printf("| %s | %s | %s | %s | %s |\n", e->name, i < (int)ERROR_COUNT ? size_names[s] : "0 B", describe(result[GLIBC]),
                   describe(result[FAST]), describe(result[SECURE]));
            if (result[SECURE] > 0) continue;
            if (e->secure[s] == MUST || (e->secure[s] == FREE && result[GLIBC] > 0)) {
                fprintf(stderr, "FAIL: %s (%s): the hardened library missed it%s\n", e->name, i < (int)ERROR_COUNT ? size_names[s] : "0 B",
                        result[GLIBC] > 0 ? ", which glibc's malloc stops" : "");
                failures++;
            } else if (e->secure[s] == GAP && result[GLIBC] > 0) {
                gaps++;
            }
        }
    }
    printf("| **stopped** | | **%d of %d** | **%d of %d** | **%d of %d** |\n", stopped[GLIBC], total, stopped[FAST], total, stopped[SECURE], total);
    if (failures) {
        fprintf(stderr, "error_matrix: %d failure(s)\n", failures);
        return 1;
    }
    fprintf(stderr, "error_matrix: the hardened library stopped %d of %d errors (glibc %d, kennel %d); known gaps where glibc stops one: %d\n",
            stopped[SECURE], total, stopped[GLIBC], stopped[FAST], gaps);
    return 0;
}
