/*
 * A read after free, for tests/c/memcheck.sh: under valgrind, memcheck must
 * report it when kennel is built with -Dvalgrind. The program also proves
 * that kennel (not valgrind's own malloc) served the block.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kennel.h"

int main(void) {
    /* Correct uses first: memcheck must report nothing for them (a block
       freed and handed out again, cleared by calloc, grown by realloc,
       aligned, huge). */
    for (int round = 0; round < 3; round++) {
        char *a = malloc(100);
        a[99] = 1;
        free(a);
        char *z = calloc(1, 100);
        char *r = realloc(z, 5000);
        if (r[99] != 0) return 3;
        char *al = aligned_alloc(256, 256);
        al[255] = (char)r[0];
        char *h = calloc(1, 3 << 20);
        h[(3 << 20) - 1] = al[255];
        free(h);
        free(al);
        free(r);
    }
    char *p = malloc(40);
    for (int i = 0; i < 40; i++) p[i] = (char)i;
    struct kn_stats s;
    kn_stats(&s);
    if (s.blocks_live == 0) {
        printf("kennel did not serve malloc\n");
        return 2;
    }
    free(p);
    volatile char c = p[10]; /* the fault */
    (void)c;
    printf("kennel served %zu live blocks\n", s.blocks_live);
    return 0;
}
