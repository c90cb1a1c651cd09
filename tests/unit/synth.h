/* The synthetic store of the unit tests that need one (test_store.c, test_views.c):
 * a tree of JPEG-like and verbatim files, written by tstore.c, whose bytes at every
 * level the tests know (tstore_expected()). */
#ifndef PCRFS_TEST_SYNTH_H
#define PCRFS_TEST_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/store.h"
#include "tstore.h"

#define NFILES 8

/* The synthetic tree: dirs 1 "" {a, b}, 2 "a", 3 "b" {c}, 4 "c". */
extern struct tfile files[NFILES];

/* The tests' pseudo-random numbers (one sequence, the same in every run). */
uint32_t rnd(void);
/* Fill files[] with their bytes (deterministic). */
void make_data(void);
/* Write the store at @path, @per_record files a record (@force: replace one).
 * @return 0 or -errno with a message in @err. */
int build(const char *path, bool force, unsigned per_record, char *err, size_t errlen);

#endif
