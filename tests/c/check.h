/* The C++ tests' one check: prints "ok" or "FAIL" with the line, and counts
 * failures for the program's exit status. */
#ifndef KENNEL_TESTS_CHECK_H
#define KENNEL_TESTS_CHECK_H

#include <cstdio>

static int failures;

#define CHECK(what, cond)                                                      \
    do {                                                                       \
        if (cond) {                                                            \
            std::printf("ok    %s\n", what);                                   \
        } else {                                                               \
            std::printf("FAIL  %s (line %d)\n", what, __LINE__);               \
            failures++;                                                        \
        }                                                                      \
    } while (0)

#endif
