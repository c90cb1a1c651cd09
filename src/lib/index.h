/* pcrfs — the index module: the only code that speaks SQL (see pcrfs(5)).
 *
 * Rows come back through callbacks whose pointers are valid only during the call;
 * the caller validates every value (the index is untrusted input). One connection,
 * serialised by a mutex inside: loading happens once per directory, never per read.
 */
#ifndef PCRFS_INDEX_H
#define PCRFS_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PCR_INDEX_APP_ID  0x50435246 /* "PCRF" in PRAGMA application_id */
#define PCR_INDEX_VERSION 1          /* PRAGMA user_version */

struct pcr_index;

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
    const char *note; /* NULL when none */
};

typedef int (*pcr_index_dir_cb)(void *ctx, const struct pcr_index_dir *row);
typedef int (*pcr_index_record_cb)(void *ctx, const struct pcr_index_record *row);
typedef int (*pcr_index_file_cb)(void *ctx, const struct pcr_index_file *row);

/* Reading. @return 0 or a negative errno, message in @err (see pcr_store_open). */
int pcr_index_open(const char *path, struct pcr_index **out, char *err, size_t errlen);
/* Writing: create a new database with the schema, inside one open transaction. */
int pcr_index_create(const char *path, struct pcr_index **out, char *err, size_t errlen);
void pcr_index_close(struct pcr_index *idx);

ssize_t pcr_index_meta(struct pcr_index *idx, const char *key, char *buf, size_t len);
int64_t pcr_index_max_id(struct pcr_index *idx, const char *table); /* "files"/"dirs"; <0 error */

/* Each loader stops at the first callback returning non-zero and returns that value;
 * -EIO if SQLite fails (corrupt database), 0 when all rows were seen. */
int pcr_index_load_dirs(struct pcr_index *idx, pcr_index_dir_cb cb, void *ctx);
int pcr_index_load_records(struct pcr_index *idx, pcr_index_record_cb cb, void *ctx);
/* Files with first <= id < first + count, in id order. */
int pcr_index_load_files(struct pcr_index *idx, int64_t first, int64_t count,
                         pcr_index_file_cb cb, void *ctx);

int pcr_index_put_meta(struct pcr_index *idx, const char *key, const char *value);
int pcr_index_put_dir(struct pcr_index *idx, const struct pcr_index_dir *row);
int pcr_index_put_record(struct pcr_index *idx, const struct pcr_index_record *row);
int pcr_index_put_file(struct pcr_index *idx, const struct pcr_index_file *row);
/* COMMIT the writer's transaction. */
int pcr_index_commit(struct pcr_index *idx, char *err, size_t errlen);

/* The last SQLite error message of this connection. */
const char *pcr_index_errmsg(struct pcr_index *idx);

#endif
