/*
 * Misuse from C must not be survived silently: each case below runs in a
 * child process, which must die of SIGABRT after printing one line on
 * stderr that names the offending pointer.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

static int failures;
static char static_buffer[64];
static void *volatile the_pointer; /* what the child passes */

/* The child names the pointer on stderr before misusing it; stderr is
   unbuffered, so this allocates nothing. */
static void announce(void) {
    fprintf(stderr, "pointer %p\n", the_pointer);
}

typedef void (*misuse_fn)(void);

static void free_stack(void) {
    char local[32];
    the_pointer = local;
    announce();
    free(the_pointer);
}

static void free_static(void) {
    the_pointer = static_buffer + 16;
    announce();
    free(the_pointer);
}

static void free_interior(void) {
    char *p = malloc(100);
    the_pointer = p + 16;
    announce();
    free(the_pointer);
}

static void free_interior_huge(void) {
    char *p = malloc(3 << 20);
    the_pointer = p + 4096;
    announce();
    free(the_pointer);
}

static void double_free(void) {
    void *p = malloc(40);
    the_pointer = p;
    announce();
    free(p);
    free(p);
}

static void double_free_later(void) {
    void *p = malloc(200), *q = malloc(200), *r = malloc(200);
    the_pointer = p;
    announce();
    free(p);
    free(q);
    free(r);
    free(p);
}

static void double_free_huge(void) {
    void *p = malloc(5 << 20);
    the_pointer = p;
    announce();
    free(p);
    free(p);
}

static void realloc_invalid(void) {
    char local[16];
    the_pointer = local;
    announce();
    void *r = realloc(the_pointer, 100);
    (void)r;
}

static void usable_size_invalid(void) {
    the_pointer = (void *)0x1000;
    announce();
    (void)malloc_usable_size(the_pointer);
}

/* Runs `fn` in a child; passes if the child aborts and its stderr names
   the pointer. */
static void expect_abort(const char *name, misuse_fn fn) {
    int pipefd[2];
    if (pipe(pipefd) != 0) abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn();
        /* Reaching here means the misuse went unnoticed. */
        fprintf(stderr, "returned normally\n");
        _exit(0);
    }
    close(pipefd[1]);
    char out[1024];
    ssize_t n = 0, r;
    while ((r = read(pipefd[0], out + n, sizeof(out) - 1 - (size_t)n)) > 0) n += r;
    out[n] = 0;
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    int aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
    /* kennel's line must name the pointer the child announced. */
    char announced[64] = "";
    const char *line = strstr(out, "pointer ");
    if (line) sscanf(line, "pointer %63s", announced);
    const char *message = strstr(out, "kennel: ");
    int named = message != NULL && announced[0] != 0 && strstr(message, announced) != NULL;
    if (aborted && named) {
        printf("ok    %-22s %s", name, message);
    } else {
        printf("FAIL  %-22s status %d, stderr: %s\n", name, status, out);
        failures++;
    }
}

int main(void) {
    expect_abort("free(stack)", free_stack);
    expect_abort("free(static)", free_static);
    expect_abort("free(interior)", free_interior);
    expect_abort("free(interior huge)", free_interior_huge);
    expect_abort("double free", double_free);
    expect_abort("double free later", double_free_later);
    expect_abort("double free huge", double_free_huge);
    expect_abort("realloc(invalid)", realloc_invalid);
    expect_abort("usable_size(invalid)", usable_size_invalid);
    if (failures) {
        printf("misuse: %d case(s) not caught\n", failures);
        return 1;
    }
    printf("misuse: every case aborted with a message\n");
    return 0;
}
