/*
 * A read after free, for tests/c/memcheck.sh: under valgrind, memcheck must
 * report it when kennel is built with -Dvalgrind. The program also proves
 * that kennel (not valgrind's own malloc) served the block.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kennel.h"

int main(void) {
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
