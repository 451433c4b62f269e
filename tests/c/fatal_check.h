/* The C tests' check that ends the program: prints the failed condition
 * with its line and exits with status 1. */
#ifndef KENNEL_TESTS_FATAL_CHECK_H
#define KENNEL_TESTS_FATAL_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#endif
