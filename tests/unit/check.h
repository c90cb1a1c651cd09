/* A minimal check harness for the unit tests: one line per failed check, a count
 * at the end, exit status 1 if anything failed. */
#ifndef PCRFS_TEST_CHECK_H
#define PCRFS_TEST_CHECK_H

#include <stdio.h>

static int check_failed, check_run;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        check_run++;                                                                               \
        if (!(cond)) {                                                                             \
            check_failed++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static inline int check_done(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_run, check_failed);
    return check_failed ? 1 : 0;
}

#endif
