/* The synthetic store of the unit tests that need one (test_store.c, test_views.c):
 * a tree of JPEG-like and verbatim files written through the writer API, whose bytes
 * at every level the tests know (expected()). */
#ifndef PCRFS_TEST_SYNTH_H
#define PCRFS_TEST_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/store.h"
#include "pcrfs/writer.h"

#define LEVELS 10
#define NFILES 8

/* The synthetic tree: dirs 1 "" {a, b}, 2 "a", 3 "b" {c}, 4 "c". */
struct tfile {
    const char *path;
    uint64_t dir;
    const char *name;
    int kind;
    unsigned nchunks; /* JPEG */
    size_t len;
    uint8_t *data;
    struct pcr_split split;
};

extern struct tfile files[NFILES];

/* The tests' pseudo-random numbers (one sequence, the same in every run). */
uint32_t rnd(void);
/* Fill files[] with their bytes (deterministic). */
void make_data(void);
/* The bytes of @t at @level (malloc()ed, *@len of them). */
uint8_t *expected(const struct tfile *t, unsigned level, size_t *len);
/* Write the store at @path, @per_record files a record (@force: replace one).
 * @return 0 or -errno with a message in @err. */
int build(const char *path, bool force, unsigned per_record, char *err, size_t errlen);
/* Look up @path ("a/b") from the root. @return 0 or -errno. */
int resolve(struct pcr_store *s, const char *path, struct pcr_node *node);

#endif
