/* pcrfs — the index module: the only code that speaks SQL (see pcrfs(5)).
 *
 * Rows come back through callbacks whose pointers are valid only during the call;
 * the caller validates every value (the index is untrusted input). One connection,
 * serialised by a mutex inside: loading happens once per directory, never per read.
 */
#ifndef PCRFS_INDEX_H
#define PCRFS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PCR_INDEX_APP_ID  0x50435246 /* "PCRF" in PRAGMA application_id */
#define PCR_INDEX_VERSION 2          /* PRAGMA user_version (2: trailer, sums, quality) */
/* Every reader statement runs under a work bound (PCR_INDEX_STEP_BUDGET, conn.h). */

struct pcr_index;

/* The two trees an index holds: images (dirs/records/files) and tokens
 * (tok_dirs/tok_records/tok_files, same columns). */
enum pcr_index_tree {
    PCR_TREE_IMAGES = 0,
    PCR_TREE_TOKENS = 1,
};

struct pcr_index_dir {
    int64_t id, parent, first_child, nsubdirs, first_file, nfiles;
    const uint8_t *name;
    size_t namelen;
};

struct pcr_index_record {
    int64_t id, size, nimages;
    const char *name;
    const uint8_t *groups; /* varints: ngroups+1 absolute offsets */
    size_t groups_len;
};

struct pcr_index_file {
    int64_t id, dir, kind, record, slot, nchunks, size;
    const uint8_t *name;
    size_t namelen;
    const uint8_t *chunks; /* varints: (offset in group, length) per chunk */
    size_t chunks_len;
    int64_t width, height, components, src_size;
    uint64_t checksum;
    const char *note;    /* NULL when none */
    int64_t trailer;     /* 1: the last chunk is the bytes after the image's EOI */
    const uint8_t *sums; /* u32 LE per PCR_SUM_BLOCK block of each chunk (pcrfs(5)) */
    size_t sums_len;
    const uint8_t *quality; /* u16 LE per level 1..L-1: floor(MS-SSIM * 60000), or empty */
    size_t quality_len;
};

typedef int (*pcr_index_dir_cb)(void *ctx, const struct pcr_index_dir *row);
typedef int (*pcr_index_record_cb)(void *ctx, const struct pcr_index_record *row);
typedef int (*pcr_index_file_cb)(void *ctx, const struct pcr_index_file *row);

/* Reading. The schema must be exactly the one pcrfs(5) documents (tables only, the
 * declared columns and types, no view, trigger, index or generated column; the token
 * tables all or none); otherwise -EINVAL with a message naming the difference.
 * @return 0 or a negative errno, message in @err (see pcr_store_open). */
int pcr_index_open(const char *path, struct pcr_index **out, char *err, size_t errlen);
/* Writing: create a new database with the schema, inside one open transaction. */
int pcr_index_create(const char *path, struct pcr_index **out, char *err, size_t errlen);
void pcr_index_close(struct pcr_index *idx);

/* Meta value @key into @buf (cut to @len - 1, NUL-terminated). @return its length;
 * -ENOENT absent; -EINVAL not TEXT; -EIO. */
ssize_t pcr_index_meta(struct pcr_index *idx, const char *key, char *buf, size_t len);
/* max(id) of "files", "dirs" or "records" of @tree (0 if empty or absent); <0 error. */
int64_t pcr_index_max_id(struct pcr_index *idx, enum pcr_index_tree tree, const char *table);
/* Whether the index has the token tables (older or hand-made indexes may not). */
bool pcr_index_has_tokens(struct pcr_index *idx);
/* A copy (malloc) of blob @key, at most @max bytes.
 * @return 0; -ENOENT absent; -EFBIG larger than @max; -EINVAL not a BLOB; -ENOMEM; -EIO. */
int pcr_index_get_blob(struct pcr_index *idx, const char *key, size_t max, void **data,
                       size_t *len);

/* Each loader stops at the first callback returning non-zero and returns that value;
 * -EIO if SQLite fails (corrupt database), a statement runs past its work bound, or
 * (dirs, records) a row holds a value of another type than its column's; 0 when all
 * rows were seen. pcr_index_errmsg() says which. A files row holding a value of
 * another type is dropped with a log line ("file N rejected: column kind holds
 * TEXT, want INTEGER") and the callback never sees it. */
int pcr_index_load_dirs(struct pcr_index *idx, enum pcr_index_tree tree, pcr_index_dir_cb cb,
                        void *ctx);
int pcr_index_load_records(struct pcr_index *idx, enum pcr_index_tree tree, pcr_index_record_cb cb,
                           void *ctx);
/* Files with first <= id < first + count, in id order. */
int pcr_index_load_files(struct pcr_index *idx, enum pcr_index_tree tree, int64_t first,
                         int64_t count, pcr_index_file_cb cb, void *ctx);

/* Every file's (id, record) of @tree in id order, in one pass over the file table
 * (each row resets the work bound). Rows whose values are not integers are skipped.
 * @return 0, the first non-zero callback value, or -EIO. */
int pcr_index_file_records(struct pcr_index *idx, enum pcr_index_tree tree,
                           int (*cb)(void *ctx, int64_t id, int64_t record), void *ctx);

/* Every meta key (TEXT values only) and every blob, in key order, for copying an
 * index into another (a merge of parts). @return 0, the first non-zero callback
 * value, or -EIO. */
int pcr_index_each_meta(struct pcr_index *idx,
                        int (*cb)(void *ctx, const char *key, const char *value), void *ctx);
int pcr_index_each_blob(struct pcr_index *idx,
                        int (*cb)(void *ctx, const char *key, const void *data, size_t len),
                        void *ctx);

int pcr_index_put_meta(struct pcr_index *idx, const char *key, const char *value);
int pcr_index_put_blob(struct pcr_index *idx, const char *key, const void *data, size_t len);
int pcr_index_put_dir(struct pcr_index *idx, enum pcr_index_tree tree,
                      const struct pcr_index_dir *row);
int pcr_index_put_record(struct pcr_index *idx, enum pcr_index_tree tree,
                         const struct pcr_index_record *row);
int pcr_index_put_file(struct pcr_index *idx, enum pcr_index_tree tree,
                       const struct pcr_index_file *row);
/* COMMIT the writer's transaction. */
int pcr_index_commit(struct pcr_index *idx, char *err, size_t errlen);

/* Why the last call failed: a check of this module, else SQLite's last message. */
const char *pcr_index_errmsg(struct pcr_index *idx);

/* Step @sql (one statement) to its end on the reader's connection, discarding rows,
 * under the same limits and work bound as every reader statement: how the tests show
 * that a query computing without end is stopped. @return 0; -EIO (errmsg says why). */
int pcr_index_run_bounded(struct pcr_index *idx, const char *sql);

#endif
