/* pcrfs — the store writer's private state, shared by its two files:
 *   writer.c    create, abort and finish (the temporary directory, the atomic
 *               rename), meta keys, the image tree and its records;
 *   tokwriter.c the token tree: the model, the shards and their index rows.
 * Both check the numbering they are handed the same way (writer_name_ok,
 * writer_check_order) and keep their counts in struct wtree, one per tree.
 */
#ifndef PCRFS_WRITER_INTERNAL_H
#define PCRFS_WRITER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/writer.h"
#include "format/index.h"

/* What has been added to one tree so far. */
struct wtree {
    uint64_t ndirs, nfiles, nrecs; /* added so far */
    uint64_t files_declared;       /* sum of nfiles over the directories */
    uint64_t last_dir;             /* directory of the last file added, and its name: */
    char last_name[256];           /* names must increase within a directory */
};

struct pcr_writer {
    char *path;                 /* the target */
    char *parent;               /* its directory */
    char *tmpname;              /* ".NAME.tmp.PID", inside parent */
    char *tmppath;              /* parent/tmpname */
    int parentfd, tmpfd, recfd; /* directory fds */
    struct pcr_index *idx;
    bool force;
    unsigned levels;
    bool part;                         /* a part (pcr_writer_opts.part): */
    uint64_t part_first;               /* its files' ids follow this one, */
    uint64_t part_files;               /* and it holds this many */
    struct wtree t[2];                 /* [PCR_TREE_IMAGES], [PCR_TREE_TOKENS] */
    const struct pcr_tok_model *model; /* encodes token grids (pcr_writer_set_tok_model) */
    int tokfd;                         /* tokens/ directory, created on first use */
    uint8_t *wbuf;                     /* record write buffer */
    size_t wlen;
    int wfd;
    char err[512];
};

/* A valid entry name: 1..255 bytes, no '/', not "." or "..". */
bool writer_name_ok(const char *n);
/* Files come grouped by directory, in directory order, sorted by name within one:
 * check that @dir/@name comes after the last file of @t and remember it.
 * @return 0 or -EINVAL. */
int writer_check_order(struct wtree *t, uint64_t dir, const char *name);
/* Add directory @row to @tree, checking its numbering. @return 0 or a negative
 * errno (w->err set). */
int writer_add_dir(struct pcr_writer *w, enum pcr_index_tree tree, const struct pcr_dir_row *row);
/* Set w->err to the index's last error message; @return @ret. */
int writer_index_error(struct pcr_writer *w, int ret);

#endif
