/* pcrfs — the connection to index.db that the index module's files share, and the
 * bound every statement runs under (conn.c); not installed.
 *
 * The module stands in three floors, each calling only below it: index.c (opening,
 * the statements, the rows; format/index.h is its interface to the library) ->
 * schema.c (schema.h: the connection's hardening, the reference schema and the
 * exact-schema check) -> conn.c (this header: the connection's state, its tables,
 * and preparing and stepping a statement under the work bound). This header
 * includes nothing of the floors above it.
 */
#ifndef PCRFS_FORMAT_CONN_H
#define PCRFS_FORMAT_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sqlite3.h>

/* The work bound of every reader statement: SQLite virtual-machine instructions
 * between two rows (or before the first). Legitimate statements use tens per row;
 * see the comment on index_progress() in conn.c and pcrfs(5). */
#define PCR_INDEX_STEP_BUDGET 20000000

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

/* conn.c: statements run under the work bound (see index_progress()). */
#define PROGRESS_PERIOD 1000 /* instructions between two calls of index_progress() */
int index_progress(void *ctx);
int index_step(struct pcr_index *idx, sqlite3_stmt *st);
int index_prepare(struct pcr_index *idx, const char *sql, unsigned flags, sqlite3_stmt **st);
int64_t index_pragma_int(struct pcr_index *idx, const char *sql, int *rc);
/* Why the last call failed: a check of this module, else SQLite's last message.
 * (Declared in format/index.h too, for the library; schema.c includes only this.) */
const char *pcr_index_errmsg(struct pcr_index *idx);

#endif
