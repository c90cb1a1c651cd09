/* A store for the unit tests, written through the writer API from a table of files
 * whose bytes at every level the tests know (tstore_expected()): the one builder of
 * synth.c's tree (test_store.c, test_views.c) and test_crafted.c's. */
#ifndef PCRFS_TEST_TSTORE_H
#define PCRFS_TEST_TSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/store.h"
#include "pcrfs/writer.h"

#define LEVELS 10 /* of every test store */

struct tfile {
    const char *path;
    uint64_t dir;
    const char *name;
    int kind;
    unsigned nchunks; /* JPEG */
    size_t len;
    uint8_t *data;
    struct pcr_split split;
    const double *quality; /* LEVELS - 1 MS-SSIM values, or NULL */
};

/* What to write: its directories, its files (ids 1.. in order), how many a record. */
struct tstore {
    const struct pcr_dir_row *dirs;
    size_t ndirs;
    const struct tfile *files;
    size_t nfiles;
    unsigned per_record; /* 1..8 */
    bool force;          /* replace a store at the path */
};

/* The bytes of @t at @level, per pcrfs(5) (malloc()ed, *@len of them). */
uint8_t *tstore_expected(const struct tfile *t, unsigned level, size_t *len);
/* Look up @path ("a/b") from the root of @s. @return 0 or -errno. */
int tstore_resolve(struct pcr_store *s, const char *path, struct pcr_node *node);
/* Write @st at @path. @return 0 or -errno with a message in @err. */
int tstore_write(const char *path, const struct tstore *st, char *err, size_t errlen);

#endif
