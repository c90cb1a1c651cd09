/* pcrfs — what the index module's two files share (index.c: the statements, schema.c:
 * the connection's limits and the exact-schema check); not installed. */
#ifndef PCRFS_INDEX_INTERNAL_H
#define PCRFS_INDEX_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sqlite3.h>
#include "format/index.h"

/* The schema of format PCR_INDEX_VERSION, as the writer creates it (pcrfs(5)). */
extern const char pcr_index_schema[];

/* Statements per tree are laid out as [base + tree]. */
enum {
    ST_META,
    ST_BLOB,
    ST_DIRS, /* + tree */
    ST_RECORDS = ST_DIRS + 2,
    ST_FILES = ST_RECORDS + 2,
    ST_PUT_META = ST_FILES + 2,
    ST_PUT_BLOB,
    ST_PUT_DIR, /* + tree */
    ST_PUT_RECORD = ST_PUT_DIR + 2,
    ST_PUT_FILE = ST_PUT_RECORD + 2,
    ST_COUNT = ST_PUT_FILE + 2
};

struct pcr_index {
    sqlite3 *db;
    bool has_tokens;            /* the token tables exist */
    bool has_blobs;             /* the blobs table exists */
    pthread_mutex_t lock;       /* one statement runs at a time on @db */
    sqlite3_stmt *st[ST_COUNT]; /* prepared once; NULL when not used in this mode */
    uint64_t ticks;             /* progress callbacks since the last row (see step()) */
    char why[200];              /* what the last reader call refused, when not SQLite */
};

/* The tables of the schema; the token tree's are the image tree's + 3. */
enum {
    T_META,
    T_DIRS,
    T_RECORDS,
    T_FILES,
    T_TOK_DIRS,
    T_TOK_RECORDS,
    T_TOK_FILES,
    T_BLOBS,
    T_COUNT
};
static const char *const table_names[T_COUNT] = {
    "meta", "dirs", "records", "files", "tok_dirs", "tok_records", "tok_files", "blobs",
};
#define T_TREE(t, tree) ((t) + 3 * (int)(tree)) /* dirs/records/files of @tree */

/* index.c: statements run under the work bound (see index_progress()). */
#define PROGRESS_PERIOD 1000 /* instructions between two calls of index_progress() */
int index_progress(void *ctx);
int index_step(struct pcr_index *idx, sqlite3_stmt *st);
int index_prepare(struct pcr_index *idx, const char *sql, unsigned flags, sqlite3_stmt **st);
int64_t index_pragma_int(struct pcr_index *idx, const char *sql, int *rc);

/* schema.c */
/* Defensive mode, no trusted schema, views, triggers or extensions, limits, and the
 * progress handler. @return 0 or -EIO. */
int index_harden(struct pcr_index *idx);
/* Parse the reference schema once (pthread_once). @return 0 or -EIO. */
int index_ref_init(void);
/* The index's schema is exactly the reference. @return 0, or -EINVAL with @why. */
int index_check_schema(struct pcr_index *idx, char *why, size_t len);
/* A reader SELECT lists exactly table @t's columns, in order. */
bool index_select_matches(sqlite3_stmt *st, int t);
/* The first column of the row whose storage class its declared type does not allow,
 * or -1. */
int index_bad_column(sqlite3_stmt *st, int t);
/* "column name holds TEXT, want BLOB" */
void index_describe_bad(sqlite3_stmt *st, int t, int c, char *buf, size_t len);

#endif
