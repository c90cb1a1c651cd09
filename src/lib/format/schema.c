/* pcrfs — the index connection's limits, the schema and the exact-schema check (see
 * schema.h): what an untrusted index.db may make SQLite do, and the rule that it
 * holds exactly the tables pcrfs(5) documents.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "format/schema.h"

const char pcr_index_schema[] =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, name BLOB NOT NULL,"
    " first_child INTEGER NOT NULL, nsubdirs INTEGER NOT NULL,"
    " first_file INTEGER NOT NULL, nfiles INTEGER NOT NULL);"
    "CREATE TABLE records(id INTEGER PRIMARY KEY, name TEXT NOT NULL, size INTEGER NOT NULL,"
    " nimages INTEGER NOT NULL, groups BLOB NOT NULL);"
    "CREATE TABLE files(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, name BLOB NOT NULL,"
    " kind INTEGER NOT NULL, record INTEGER NOT NULL, slot INTEGER NOT NULL,"
    " nchunks INTEGER NOT NULL, chunks BLOB NOT NULL, size INTEGER NOT NULL,"
    " width INTEGER NOT NULL, height INTEGER NOT NULL, components INTEGER NOT NULL,"
    " src_size INTEGER NOT NULL, checksum INTEGER NOT NULL, note TEXT,"
    " trailer INTEGER NOT NULL, sums BLOB NOT NULL, quality BLOB NOT NULL);" PCR_INDEX_TOKEN_TABLES;

/* ---- the connection: what an untrusted database may make SQLite do ---- */

static const struct {
    int id, value;
} limits[] = {
    {SQLITE_LIMIT_LENGTH, 512 << 20}, /* one value or row: a codebook (256 MiB) fits */
    {SQLITE_LIMIT_SQL_LENGTH, 16384}, /* a schema entry or one of our statements */
    {SQLITE_LIMIT_COLUMN, 64},
    {SQLITE_LIMIT_EXPR_DEPTH, 64},
    {SQLITE_LIMIT_COMPOUND_SELECT, 4},
    {SQLITE_LIMIT_VDBE_OP, 25000},
    {SQLITE_LIMIT_FUNCTION_ARG, 8},
    {SQLITE_LIMIT_ATTACHED, 0},
    {SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 64},
    {SQLITE_LIMIT_VARIABLE_NUMBER, 32},
    {SQLITE_LIMIT_TRIGGER_DEPTH, 1},
    {SQLITE_LIMIT_WORKER_THREADS, 0},
};

/* Before the first statement: the schema is untrusted, so none of its SQL (views,
 * triggers, defaults) may call functions with side effects, views and triggers are
 * off altogether, no extension can be loaded, the schema cannot be written, and
 * every statement is bounded (index_progress(), conn.c). */
int index_harden(struct pcr_index *idx)
{
    static const struct {
        int op, on;
    } opts[] = {
        {SQLITE_DBCONFIG_DEFENSIVE, 1},
        {SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0},
        {SQLITE_DBCONFIG_ENABLE_VIEW, 0},
        {SQLITE_DBCONFIG_ENABLE_TRIGGER, 0},
        {SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0},
        {SQLITE_DBCONFIG_ENABLE_FKEY, 0},
    };
    int got;

    for (size_t i = 0; i < PCR_ARRAY_SIZE(opts); i++)
        if (sqlite3_db_config(idx->db, opts[i].op, opts[i].on, &got) != SQLITE_OK ||
            got != opts[i].on)
            return -EIO;
    for (size_t i = 0; i < PCR_ARRAY_SIZE(limits); i++)
        sqlite3_limit(idx->db, limits[i].id, limits[i].value);
    sqlite3_progress_handler(idx->db, PROGRESS_PERIOD, index_progress, idx);
    return 0;
}

/* ---- the exact schema ----
 * A reader accepts only what the writer makes: the tables of @pcr_index_schema, nothing else.
 * A view or a generated column runs SQL of the index's choosing on every read, and a
 * column declared with another type lets values through that the checks in store.c
 * do not expect (a TEXT id compares unlike an INTEGER one). The reference is @schema
 * itself, parsed once into an in-memory database; the index's parsed schema is
 * compared with it through sqlite_schema and PRAGMA table_xinfo, which read no
 * table rows, so this costs the same for any size of store. */

#define MAX_COLS 20

static struct ref_table {
    bool without_rowid;
    int ncol;
    struct ref_col {
        char name[16], type[8];
        int notnull, pk;
        int storage; /* what every value must be: SQLITE_INTEGER, _TEXT or _BLOB */
    } col[MAX_COLS];
} ref[T_COUNT];
static bool ref_ok;
static pthread_once_t ref_once = PTHREAD_ONCE_INIT;

static bool is_without_rowid(sqlite3 *db, const char *table)
{
    /* only a rowid table has a column "rowid" (none of ours is named so) */
    return sqlite3_table_column_metadata(db, "main", table, "rowid", NULL, NULL, NULL, NULL,
                                         NULL) != SQLITE_OK;
}

static void ref_init(void)
{
    sqlite3 *db = NULL;
    bool ok = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
              sqlite3_exec(db, pcr_index_schema, NULL, NULL, NULL) == SQLITE_OK;

    for (int t = 0; ok && t < T_COUNT; t++) {
        struct ref_table *r = &ref[t];
        sqlite3_stmt *st = NULL;
        char sql[64];

        snprintf(sql, sizeof(sql), "PRAGMA main.table_xinfo(%s)", table_names[t]);
        ok = sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK;
        while (ok && sqlite3_step(st) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 1);
            const char *type = (const char *)sqlite3_column_text(st, 2);
            struct ref_col *c = &r->col[r->ncol];
            ok = r->ncol < MAX_COLS && name && type && strlen(name) < sizeof(c->name) &&
                 strlen(type) < sizeof(c->type);
            if (!ok)
                break;
            memcpy(c->name, name, strlen(name) + 1); /* both measured above */
            memcpy(c->type, type, strlen(type) + 1);
            c->notnull = sqlite3_column_int(st, 3);
            c->pk = sqlite3_column_int(st, 5);
            c->storage = !strcmp(type, "INTEGER") ? SQLITE_INTEGER
                         : !strcmp(type, "TEXT")  ? SQLITE_TEXT
                         : !strcmp(type, "BLOB")  ? SQLITE_BLOB
                                                  : 0;
            ok = c->storage != 0;
            r->ncol++;
        }
        sqlite3_finalize(st);
        r->without_rowid = is_without_rowid(db, table_names[t]);
        ok = ok && r->ncol > 0;
    }
    sqlite3_close(db);
    ref_ok = ok;
}

int index_ref_init(void)
{
    return pthread_once(&ref_once, ref_init) == 0 && ref_ok ? 0 : -EIO;
}

static int table_index(const char *name)
{
    for (int t = 0; t < T_COUNT; t++)
        if (!strcmp(name, table_names[t]))
            return t;
    return -1;
}

static const char *text_col(sqlite3_stmt *st, int i)
{
    const char *v = (const char *)sqlite3_column_text(st, i);
    return v ? v : "";
}

/* The columns of table @t, one by one, against the reference: name, declared type,
 * NOT NULL, primary key, no default, not generated or hidden, binary collation. */
static void check_table(struct pcr_index *idx, int t, char *why, size_t len)
{
    const struct ref_table *r = &ref[t];
    const char *tn = table_names[t];
    sqlite3_stmt *st = NULL;
    char sql[64];
    int n = 0, rc;

    if (is_without_rowid(idx->db, tn) != r->without_rowid) {
        snprintf(why, len, "table %s: is %sa WITHOUT ROWID table, want %s", tn,
                 r->without_rowid ? "not " : "", r->without_rowid ? "one" : "a rowid table");
        return;
    }
    snprintf(sql, sizeof(sql), "PRAGMA main.table_xinfo(%s)", tn);
    rc = index_prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && !why[0] && (rc = index_step(idx, st)) == SQLITE_ROW) {
        const char *name = text_col(st, 1), *type = text_col(st, 2), *coll = NULL;
        int notnull = sqlite3_column_int(st, 3), pk = sqlite3_column_int(st, 5), autoinc = 0;
        const struct ref_col *c = &r->col[n++];

        if (n > r->ncol) {
            snprintf(why, len, "table %s: column %d is %.40s %.40s, want only %d columns", tn, n,
                     name, type[0] ? type : "(no type)", r->ncol);
        } else if (strcmp(name, c->name) != 0 || strcmp(type, c->type) != 0) {
            snprintf(why, len, "table %s: column %d is %.40s %.40s, want %s %s", tn, n, name,
                     type[0] ? type : "(no type)", c->name, c->type);
        } else if (sqlite3_column_int(st, 6) != 0) {
            snprintf(why, len, "table %s: column %d (%s) is generated or hidden", tn, n, name);
        } else if (notnull != c->notnull) {
            snprintf(why, len, "table %s: column %d (%s) is %s, want %s", tn, n, name,
                     notnull ? "NOT NULL" : "nullable", c->notnull ? "NOT NULL" : "nullable");
        } else if (pk != c->pk) {
            snprintf(why, len, "table %s: column %d (%s) is %sthe primary key, want %s", tn, n,
                     name, pk ? "" : "not ", c->pk ? "it" : "not");
        } else if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
            snprintf(why, len, "table %s: column %d (%s) has a default value", tn, n, name);
        } else if (sqlite3_table_column_metadata(idx->db, "main", tn, name, NULL, &coll, NULL, NULL,
                                                 &autoinc) != SQLITE_OK ||
                   !coll || strcmp(coll, "BINARY") != 0 || autoinc) {
            snprintf(why, len, "table %s: column %d (%s) has collation %.40s%s, want BINARY", tn, n,
                     name, coll ? coll : "?", autoinc ? " or AUTOINCREMENT" : "");
        }
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (!why[0] && rc != SQLITE_DONE)
        snprintf(why, len, "table %s: cannot read its columns: %s", tn, pcr_index_errmsg(idx));
    else if (!why[0] && n < r->ncol)
        snprintf(why, len, "table %s: has %d columns, want %d (no %s)", tn, n, r->ncol,
                 r->col[n].name);
}

/* One entry of sqlite_schema: acceptable only as one of our tables, exactly. */
static void check_entry(sqlite3_stmt *st, bool present[T_COUNT], char *why, size_t len)
{
    const char *type = text_col(st, 0), *name = text_col(st, 1), *on = text_col(st, 2);
    const char *sql = text_col(st, 4);
    int t = table_index(name);

    if (!strcmp(type, "table") && t >= 0) {
        /* the text is what SQLite parsed: "CREATE VIRTUAL TABLE" or a view under a
         * type of "table" would be something else; a real table has a root page */
        if (strncmp(sql, "CREATE TABLE ", 13) != 0 || sqlite3_column_int64(st, 3) <= 0)
            snprintf(why, len, "%s is not a plain table (%.40s)", name, sql);
        else
            present[t] = true;
    } else if (t >= 0) {
        snprintf(why, len, "%s is a %.20s, not a table", name, type);
    } else if (!strcmp(type, "trigger") || !strcmp(type, "index")) {
        snprintf(why, len, "has a%s %s %.40s on %.40s", type[0] == 'i' ? "n" : "", type, name, on);
    } else {
        snprintf(why, len, "has a %.20s %.40s that pcrfs(5) does not define", type, name);
    }
}

/* The whole schema: each entry, the required tables, the token tables all or none.
 * Sets idx->has_tokens and idx->has_blobs. @return 0 or -EINVAL with @why set. */
int index_check_schema(struct pcr_index *idx, char *why, size_t len)
{
    static const char sql[] = "SELECT type, name, tbl_name, rootpage, sql FROM main.sqlite_schema";
    bool present[T_COUNT] = {false};
    sqlite3_stmt *st = NULL;
    int rc, ntok;

    why[0] = '\0';
    rc = index_prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && !why[0] && (rc = index_step(idx, st)) == SQLITE_ROW) {
        check_entry(st, present, why, len);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (!why[0] && rc != SQLITE_DONE)
        snprintf(why, len, "cannot read its schema: %s", pcr_index_errmsg(idx));
    for (int t = T_META; !why[0] && t <= T_FILES; t++)
        if (!present[t])
            snprintf(why, len, "has no table %s", table_names[t]);
    ntok = present[T_TOK_DIRS] + present[T_TOK_RECORDS] + present[T_TOK_FILES];
    if (!why[0] && ntok != 0 && ntok != 3)
        snprintf(why, len,
                 "has only %d of the token tables tok_dirs, tok_records, tok_files "
                 "(all or none)",
                 ntok);
    for (int t = 0; !why[0] && t < T_COUNT; t++)
        if (present[t])
            check_table(idx, t, why, len);
    idx->has_tokens = ntok == 3;
    idx->has_blobs = present[T_BLOBS];
    return why[0] ? -EINVAL : 0;
}

bool index_select_matches(sqlite3_stmt *st, int t)
{
    if (sqlite3_column_count(st) != ref[t].ncol)
        return false;
    for (int c = 0; c < ref[t].ncol; c++)
        if (strcmp(sqlite3_column_name(st, c), ref[t].col[c].name) != 0)
            return false;
    return true;
}

/* The storage class of each column of a row, against its declared type: SQLite keeps
 * whatever a crafted file holds (TEXT in an INTEGER column, a REAL, a NULL under NOT
 * NULL), and sqlite3_column_int64() would quietly convert it. @return the first bad
 * column, or -1. */
int index_bad_column(sqlite3_stmt *st, int t)
{
    for (int c = 0; c < ref[t].ncol; c++) {
        int have = sqlite3_column_type(st, c);
        if (have != ref[t].col[c].storage && !(have == SQLITE_NULL && !ref[t].col[c].notnull))
            return c;
    }
    return -1;
}

static const char *storage_name(int type)
{
    switch (type) {
    case SQLITE_INTEGER:
        return "INTEGER";
    case SQLITE_FLOAT:
        return "REAL";
    case SQLITE_TEXT:
        return "TEXT";
    case SQLITE_BLOB:
        return "BLOB";
    default:
        return "NULL";
    }
}

/* "column name holds TEXT, want BLOB" for row @st of table @t. */
void index_describe_bad(sqlite3_stmt *st, int t, int c, char *buf, size_t len)
{
    snprintf(buf, len, "column %s holds %s, want %s", ref[t].col[c].name,
             storage_name(sqlite3_column_type(st, c)), storage_name(ref[t].col[c].storage));
}
