/* pcrfs — the index module (see index.h). The only file that includes <sqlite3.h>.
 *
 * The store is immutable once built, so the reader opens index.db with
 * "immutable=1": SQLite takes no locks and looks for no journal, which also lets a
 * store live on read-only media. The writer needs no journal either: it writes into
 * a temporary directory that is renamed into place only after COMMIT and fsync, so
 * a crash mid-build leaves no store at all rather than a half-written one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include "format/index.h"
#include "common/internal.h"

static const char schema[] =
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
    " trailer INTEGER NOT NULL, sums BLOB NOT NULL);"
    /* The token tree has the same shape: a token file is a one-chunk file whose
     * record is a token shard (see pcrfs(5)). */
    "CREATE TABLE tok_dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, name BLOB NOT NULL,"
    " first_child INTEGER NOT NULL, nsubdirs INTEGER NOT NULL,"
    " first_file INTEGER NOT NULL, nfiles INTEGER NOT NULL);"
    "CREATE TABLE tok_records(id INTEGER PRIMARY KEY, name TEXT NOT NULL, size INTEGER NOT NULL,"
    " nimages INTEGER NOT NULL, groups BLOB NOT NULL);"
    "CREATE TABLE tok_files(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, name BLOB NOT NULL,"
    " kind INTEGER NOT NULL, record INTEGER NOT NULL, slot INTEGER NOT NULL,"
    " nchunks INTEGER NOT NULL, chunks BLOB NOT NULL, size INTEGER NOT NULL,"
    " width INTEGER NOT NULL, height INTEGER NOT NULL, components INTEGER NOT NULL,"
    " src_size INTEGER NOT NULL, checksum INTEGER NOT NULL, note TEXT,"
    " trailer INTEGER NOT NULL, sums BLOB NOT NULL);"
    "CREATE TABLE blobs(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;";

/* Statements per tree are laid out as [base + tree]. */
enum {
    ST_META,
    ST_BLOB,
    ST_DIRS,          /* + tree */
    ST_RECORDS = ST_DIRS + 2,
    ST_FILES = ST_RECORDS + 2,
    ST_PUT_META = ST_FILES + 2,
    ST_PUT_BLOB,
    ST_PUT_DIR,       /* + tree */
    ST_PUT_RECORD = ST_PUT_DIR + 2,
    ST_PUT_FILE = ST_PUT_RECORD + 2,
    ST_COUNT = ST_PUT_FILE + 2
};

#define DIRS_SQL(t)                                                                        \
    "SELECT id, parent, name, first_child, nsubdirs, first_file, nfiles FROM " t "dirs"     \
    " ORDER BY id"
#define RECORDS_SQL(t) "SELECT id, name, size, nimages, groups FROM " t "records ORDER BY id"
#define FILES_SQL(t)                                                                       \
    "SELECT id, dir, name, kind, record, slot, nchunks, chunks, size, width, height,"       \
    " components, src_size, checksum, note, trailer, sums FROM " t "files"                 \
    " WHERE id >= ?1 AND id < ?2"      \
    " ORDER BY id"
#define PUT_DIR_SQL(t) "INSERT INTO " t "dirs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
#define PUT_RECORD_SQL(t) "INSERT INTO " t "records VALUES (?1, ?2, ?3, ?4, ?5)"
#define PUT_FILE_SQL(t)                                                                    \
    "INSERT INTO " t "files VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"\
    " ?14, ?15, ?16, ?17)"

static const char *const reader_sql[] = {
    [ST_META] = "SELECT value FROM meta WHERE key = ?1",
    [ST_BLOB] = "SELECT value FROM blobs WHERE key = ?1",
    [ST_DIRS] = DIRS_SQL(""),
    [ST_DIRS + 1] = DIRS_SQL("tok_"),
    [ST_RECORDS] = RECORDS_SQL(""),
    [ST_RECORDS + 1] = RECORDS_SQL("tok_"),
    [ST_FILES] = FILES_SQL(""),
    [ST_FILES + 1] = FILES_SQL("tok_"),
};

static const char *const writer_sql[] = {
    [ST_PUT_META] = "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
    [ST_PUT_BLOB] = "INSERT OR REPLACE INTO blobs(key, value) VALUES (?1, ?2)",
    [ST_PUT_DIR] = PUT_DIR_SQL(""),
    [ST_PUT_DIR + 1] = PUT_DIR_SQL("tok_"),
    [ST_PUT_RECORD] = PUT_RECORD_SQL(""),
    [ST_PUT_RECORD + 1] = PUT_RECORD_SQL("tok_"),
    [ST_PUT_FILE] = PUT_FILE_SQL(""),
    [ST_PUT_FILE + 1] = PUT_FILE_SQL("tok_"),
};

/* Statements of the token tree and the blob table are optional for a reader: an
 * index without those tables simply has no tokens. */
static bool optional_stmt(int i)
{
    return i == ST_BLOB || i == ST_DIRS + 1 || i == ST_RECORDS + 1 || i == ST_FILES + 1;
}

struct pcr_index {
    sqlite3 *db;
    bool has_tokens;              /* the token tables exist */
    bool has_blobs;               /* the blobs table exists */
    pthread_mutex_t lock;         /* one statement runs at a time on @db */
    sqlite3_stmt *st[ST_COUNT];   /* prepared once; NULL when not used in this mode */
    uint64_t ticks;               /* progress callbacks since the last row (see step()) */
    char why[200];                /* what the last reader call refused, when not SQLite */
};

const char *pcr_index_errmsg(struct pcr_index *idx)
{
    return idx->why[0] ? idx->why : sqlite3_errmsg(idx->db);
}

/* SQLite result code -> negative errno, once, here. */
static int sql_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_FORMAT:
    case SQLITE_SCHEMA:
    case SQLITE_MISMATCH:
    case SQLITE_CONSTRAINT:
        return -EINVAL;
    case SQLITE_READONLY:
    case SQLITE_PERM:
        return -EACCES;
    default:
        return -EIO;
    }
}

/* Build "file:<path>?immutable=1" with the characters URIs reserve escaped. */
static char *uri_for(const char *path, const char *query)
{
    size_t n = strlen(path);
    char *u = malloc(3 * n + strlen(query) + 8), *p;

    if (!u)
        return NULL;
    p = u + sprintf(u, "file:");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == '%' || c == '?' || c == '#' || c < 0x21 || c >= 0x7f)
            p += sprintf(p, "%%%02X", c);
        else
            *p++ = (char)c;
    }
    strcpy(p, query);
    return u;
}

/* ---- bounded work ----
 * Every statement of a reader runs under a progress handler: after
 * PCR_INDEX_STEP_BUDGET virtual-machine instructions without producing a row it is
 * interrupted. A legitimate statement of this module spends a few dozen
 * instructions per row (a rowid range or a scan of a table, each row returned), so
 * the bound is about work between rows, not about the size of a table: loading a
 * million-row table never trips it, while a query that computes without end (a view
 * over a recursive query, were one to get past check_schema()) stops in well under
 * a second and its caller gets -EIO. */
#define PROGRESS_PERIOD 1000 /* instructions between two calls of progress() */

static int progress(void *ctx)
{
    struct pcr_index *idx = ctx;
    return ++idx->ticks > PCR_INDEX_STEP_BUDGET / PROGRESS_PERIOD;
}

/* After a statement stopped: say why if it was the budget. */
static void note_budget(struct pcr_index *idx)
{
    if (idx->ticks > PCR_INDEX_STEP_BUDGET / PROGRESS_PERIOD)
        snprintf(idx->why, sizeof(idx->why),
                 "a query ran past its work bound (%d SQLite instructions without a row)",
                 PCR_INDEX_STEP_BUDGET);
}

static int step(struct pcr_index *idx, sqlite3_stmt *st)
{
    int rc;

    idx->ticks = 0;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        note_budget(idx);
    return rc;
}

/* Preparing may read and parse the schema, which runs statements too. */
static int prepare(struct pcr_index *idx, const char *sql, unsigned flags, sqlite3_stmt **st)
{
    int rc;

    idx->ticks = 0;
    rc = sqlite3_prepare_v3(idx->db, sql, -1, flags, st, NULL);
    if (rc != SQLITE_OK)
        note_budget(idx);
    return rc;
}

static int64_t pragma_int(struct pcr_index *idx, const char *sql, int *rc)
{
    sqlite3_stmt *st = NULL;
    int64_t v = -1;

    *rc = prepare(idx, sql, 0, &st);
    if (*rc == SQLITE_OK) {
        *rc = step(idx, st);
        if (*rc == SQLITE_ROW) {
            v = sqlite3_column_int64(st, 0);
            *rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return v;
}

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
 * every statement is bounded (progress()). */
static int harden(struct pcr_index *idx)
{
    static const struct {
        int op, on;
    } opts[] = {
        {SQLITE_DBCONFIG_DEFENSIVE, 1},          {SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0},
        {SQLITE_DBCONFIG_ENABLE_VIEW, 0},        {SQLITE_DBCONFIG_ENABLE_TRIGGER, 0},
        {SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0}, {SQLITE_DBCONFIG_ENABLE_FKEY, 0},
    };
    int got;

    for (size_t i = 0; i < PCR_ARRAY_SIZE(opts); i++)
        if (sqlite3_db_config(idx->db, opts[i].op, opts[i].on, &got) != SQLITE_OK ||
            got != opts[i].on)
            return -EIO;
    for (size_t i = 0; i < PCR_ARRAY_SIZE(limits); i++)
        sqlite3_limit(idx->db, limits[i].id, limits[i].value);
    sqlite3_progress_handler(idx->db, PROGRESS_PERIOD, progress, idx);
    return 0;
}

/* ---- the exact schema ----
 * A reader accepts only what the writer makes: the tables of @schema, nothing else.
 * A view or a generated column runs SQL of the index's choosing on every read, and a
 * column declared with another type lets values through that the checks in store.c
 * do not expect (a TEXT id compares unlike an INTEGER one). The reference is @schema
 * itself, parsed once into an in-memory database; the index's parsed schema is
 * compared with it through sqlite_schema and PRAGMA table_xinfo, which read no
 * table rows, so this costs the same for any size of store. */

enum { T_META, T_DIRS, T_RECORDS, T_FILES, T_TOK_DIRS, T_TOK_RECORDS, T_TOK_FILES, T_BLOBS, T_COUNT };
static const char *const table_names[T_COUNT] = {
    "meta", "dirs", "records", "files", "tok_dirs", "tok_records", "tok_files", "blobs",
};
#define T_TREE(t, tree) ((t) + 3 * (int)(tree)) /* dirs/records/files of @tree */
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
              sqlite3_exec(db, schema, NULL, NULL, NULL) == SQLITE_OK;

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
            strcpy(c->name, name);
            strcpy(c->type, type);
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
    rc = prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && !why[0] && (rc = step(idx, st)) == SQLITE_ROW) {
        const char *name = text_col(st, 1), *type = text_col(st, 2), *coll = NULL;
        int notnull = sqlite3_column_int(st, 3), pk = sqlite3_column_int(st, 5), autoinc = 0;
        const struct ref_col *c = &r->col[n++];

        if (n > r->ncol) {
            snprintf(why, len, "table %s: column %d is %.40s %.40s, want only %d columns", tn, n,
                     name, type[0] ? type : "(no type)", r->ncol);
        } else if (strcmp(name, c->name) || strcmp(type, c->type)) {
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
        } else if (sqlite3_table_column_metadata(idx->db, "main", tn, name, NULL, &coll, NULL,
                                                 NULL, &autoinc) != SQLITE_OK ||
                   !coll || strcmp(coll, "BINARY") || autoinc) {
            snprintf(why, len, "table %s: column %d (%s) has collation %.40s%s, want BINARY", tn,
                     n, name, coll ? coll : "?", autoinc ? " or AUTOINCREMENT" : "");
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
        if (strncmp(sql, "CREATE TABLE ", 13) || sqlite3_column_int64(st, 3) <= 0)
            snprintf(why, len, "%s is not a plain table (%.40s)", name, sql);
        else
            present[t] = true;
    } else if (t >= 0) {
        snprintf(why, len, "%s is a %.20s, not a table", name, type);
    } else if (!strcmp(type, "trigger") || !strcmp(type, "index")) {
        snprintf(why, len, "has a%s %s %.40s on %.40s", type[0] == 'i' ? "n" : "", type, name,
                 on);
    } else {
        snprintf(why, len, "has a %.20s %.40s that pcrfs(5) does not define", type, name);
    }
}

/* The whole schema: each entry, the required tables, the token tables all or none.
 * Sets idx->has_tokens and idx->has_blobs. @return 0 or -EINVAL with @why set. */
static int check_schema(struct pcr_index *idx, char *why, size_t len)
{
    static const char sql[] = "SELECT type, name, tbl_name, rootpage, sql FROM main.sqlite_schema";
    bool present[T_COUNT] = {false};
    sqlite3_stmt *st = NULL;
    int rc, ntok;

    why[0] = '\0';
    rc = prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && !why[0] && (rc = step(idx, st)) == SQLITE_ROW) {
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
        snprintf(why, len, "has only %d of the token tables tok_dirs, tok_records, tok_files "
                 "(all or none)", ntok);
    for (int t = 0; !why[0] && t < T_COUNT; t++)
        if (present[t])
            check_table(idx, t, why, len);
    idx->has_tokens = ntok == 3;
    idx->has_blobs = present[T_BLOBS];
    return why[0] ? -EINVAL : 0;
}

/* The reader's SELECTs list the columns of their table in order, so that a row can
 * be checked against the reference by position (bad_column()). */
static int stmt_table(int i)
{
    return i >= ST_FILES ? T_TREE(T_FILES, i - ST_FILES)
           : i >= ST_RECORDS ? T_TREE(T_RECORDS, i - ST_RECORDS)
                             : T_TREE(T_DIRS, i - ST_DIRS);
}

static bool select_matches(sqlite3_stmt *st, int t)
{
    if (sqlite3_column_count(st) != ref[t].ncol)
        return false;
    for (int c = 0; c < ref[t].ncol; c++)
        if (strcmp(sqlite3_column_name(st, c), ref[t].col[c].name))
            return false;
    return true;
}

/* The storage class of each column of a row, against its declared type: SQLite keeps
 * whatever a crafted file holds (TEXT in an INTEGER column, a REAL, a NULL under NOT
 * NULL), and sqlite3_column_int64() would quietly convert it. @return the first bad
 * column, or -1. */
static int bad_column(sqlite3_stmt *st, int t)
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
static void describe_bad(sqlite3_stmt *st, int t, int c, char *buf, size_t len)
{
    snprintf(buf, len, "column %s holds %s, want %s", ref[t].col[c].name,
             storage_name(sqlite3_column_type(st, c)), storage_name(ref[t].col[c].storage));
}

static struct pcr_index *index_alloc(void)
{
    struct pcr_index *idx = calloc(1, sizeof(*idx));
    if (idx)
        pthread_mutex_init(&idx->lock, NULL);
    return idx;
}

void pcr_index_close(struct pcr_index *idx)
{
    if (!idx)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(idx->st[i]);
    sqlite3_close(idx->db);
    pthread_mutex_destroy(&idx->lock);
    free(idx);
}

int pcr_index_open(const char *path, struct pcr_index **out, char *err, size_t errlen)
{
    struct pcr_index *idx;
    struct stat sb;
    char *uri;
    int rc, ret;
    int64_t app, ver;

    if (stat(path, &sb) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        return ret;
    }
    if (!S_ISREG(sb.st_mode)) {
        pcr_errf(err, errlen, "%s: not a regular file", path);
        return -EINVAL;
    }
    if (pthread_once(&ref_once, ref_init) != 0 || !ref_ok) {
        pcr_errf(err, errlen, "%s: this SQLite cannot parse the pcrfs schema", path);
        return -EIO;
    }
    idx = index_alloc();
    uri = uri_for(path, "?immutable=1");
    if (!idx || !uri) {
        free(uri);
        pcr_index_close(idx);
        return -ENOMEM;
    }
    rc = sqlite3_open_v2(uri, &idx->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                                            SQLITE_OPEN_NOMUTEX, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        pcr_errf(err, errlen, "%s: cannot open: %s", path,
                 idx->db ? sqlite3_errmsg(idx->db) : sqlite3_errstr(rc));
        ret = sql_errno(rc) ? sql_errno(rc) : -EIO;
        goto fail;
    }
    if (harden(idx) != 0) {
        pcr_errf(err, errlen, "%s: SQLite refused a safety setting", path);
        ret = -EIO;
        goto fail;
    }
    app = pragma_int(idx, "PRAGMA application_id", &rc);
    if (rc != SQLITE_OK) {
        pcr_errf(err, errlen, "%s: not a pcrfs index (%s)", path, pcr_index_errmsg(idx));
        ret = -EINVAL;
        goto fail;
    }
    if (app != PCR_INDEX_APP_ID) {
        pcr_errf(err, errlen, "%s: not a pcrfs index (an SQLite database of another kind)",
                 path);
        ret = -EINVAL;
        goto fail;
    }
    ver = pragma_int(idx, "PRAGMA user_version", &rc);
    if (rc != SQLITE_OK || ver != PCR_INDEX_VERSION) {
        pcr_errf(err, errlen, "%s: store format version %lld; this pcrfs reads version %d",
                 path, (long long)ver, PCR_INDEX_VERSION);
        ret = -ENOTSUP;
        goto fail;
    }
    ret = check_schema(idx, idx->why, sizeof(idx->why));
    if (ret) {
        pcr_errf(err, errlen, "%s: %s", path, idx->why);
        goto fail;
    }
    for (int i = 0; i < (int)PCR_ARRAY_SIZE(reader_sql); i++) {
        if ((i == ST_BLOB && !idx->has_blobs) || (optional_stmt(i) && i != ST_BLOB &&
                                                  !idx->has_tokens))
            continue;
        rc = prepare(idx, reader_sql[i], SQLITE_PREPARE_PERSISTENT, &idx->st[i]);
        if (rc == SQLITE_OK && i >= ST_DIRS && !select_matches(idx->st[i], stmt_table(i)))
            rc = SQLITE_INTERNAL;
        if (rc != SQLITE_OK) {
            pcr_errf(err, errlen, "%s: index is damaged: %s", path, pcr_index_errmsg(idx));
            ret = -EINVAL;
            goto fail;
        }
    }
    *out = idx;
    return 0;
fail:
    pcr_index_close(idx);
    return ret;
}

int pcr_index_run_bounded(struct pcr_index *idx, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int rc;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    rc = prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && (rc = step(idx, st)) == SQLITE_ROW)
        rc = SQLITE_OK;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&idx->lock);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

bool pcr_index_has_tokens(struct pcr_index *idx)
{
    return idx->has_tokens;
}

int pcr_index_create(const char *path, struct pcr_index **out, char *err, size_t errlen)
{
    struct pcr_index *idx = index_alloc();
    char sql[160];
    int rc;

    if (!idx)
        return -ENOMEM;
    rc = sqlite3_open_v2(path, &idx->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc != SQLITE_OK)
        goto fail;
    snprintf(sql, sizeof(sql),
             "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA application_id=%d;"
             " PRAGMA user_version=%d;",
             PCR_INDEX_APP_ID, PCR_INDEX_VERSION);
    rc = sqlite3_exec(idx->db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(idx->db, schema, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(idx->db, "BEGIN", NULL, NULL, NULL);
    for (int i = ST_PUT_META; rc == SQLITE_OK && i < ST_COUNT; i++)
        rc = sqlite3_prepare_v3(idx->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &idx->st[i], NULL);
    if (rc != SQLITE_OK)
        goto fail;
    *out = idx;
    return 0;
fail:
    pcr_errf(err, errlen, "%s: %s", path, idx->db ? sqlite3_errmsg(idx->db) : sqlite3_errstr(rc));
    rc = sql_errno(rc) ? sql_errno(rc) : -EIO;
    pcr_index_close(idx);
    return rc;
}

ssize_t pcr_index_meta(struct pcr_index *idx, const char *key, char *buf, size_t len)
{
    sqlite3_stmt *st = idx->st[ST_META];
    ssize_t ret = -ENOENT;
    int rc;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = step(idx, st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_TEXT) {
        ret = -EINVAL; /* a value the writer never makes: treated as unusable */
    } else if (rc == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        size_t n = v ? (size_t)sqlite3_column_bytes(st, 0) : 0;
        if (len > 0) {
            size_t c = n < len - 1 ? n : len - 1;
            if (c)
                memcpy(buf, v, c);
            buf[c] = '\0';
        }
        ret = (ssize_t)n;
    } else if (rc != SQLITE_DONE) {
        ret = -EIO;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    pthread_mutex_unlock(&idx->lock);
    return ret;
}

int64_t pcr_index_max_id(struct pcr_index *idx, enum pcr_index_tree tree, const char *table)
{
    char sql[80];
    int rc;
    int64_t v;

    if (strcmp(table, "files") != 0 && strcmp(table, "dirs") != 0 &&
        strcmp(table, "records") != 0)
        return -EINVAL;
    if (tree == PCR_TREE_TOKENS && !idx->has_tokens)
        return 0;
    snprintf(sql, sizeof(sql), "SELECT coalesce(max(id), 0) FROM %s%s",
             tree == PCR_TREE_TOKENS ? "tok_" : "", table);
    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    v = pragma_int(idx, sql, &rc);
    pthread_mutex_unlock(&idx->lock);
    return rc == SQLITE_OK ? v : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

/* Finish a SELECT loop: reset the statement, map the last step's result. */
static int end_select(sqlite3_stmt *st, int rc, int cbret)
{
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (cbret)
        return cbret;
    return rc == SQLITE_DONE ? 0 : -EIO;
}

/* A dirs or records row whose values are not of their declared types: the open
 * fails (these tables are loaded whole and trusted afterwards). */
static int refuse_row(struct pcr_index *idx, sqlite3_stmt *st, int t)
{
    int c = bad_column(st, t);
    char what[96];

    if (c < 0)
        return 0;
    describe_bad(st, t, c, what, sizeof(what));
    snprintf(idx->why, sizeof(idx->why), "table %s: row %lld: %s", table_names[t],
             (long long)sqlite3_column_int64(st, 0), what);
    return -EIO;
}

int pcr_index_load_dirs(struct pcr_index *idx, enum pcr_index_tree tree, pcr_index_dir_cb cb,
                        void *ctx)
{
    sqlite3_stmt *st = idx->st[ST_DIRS + tree];
    int rc, cbret = 0;

    if (!st)
        return 0;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    while ((rc = step(idx, st)) == SQLITE_ROW) {
        if ((cbret = refuse_row(idx, st, T_TREE(T_DIRS, tree))) != 0)
            break;
        struct pcr_index_dir d = {
            .id = sqlite3_column_int64(st, 0),
            .parent = sqlite3_column_int64(st, 1),
            .name = sqlite3_column_blob(st, 2),
            .namelen = (size_t)sqlite3_column_bytes(st, 2),
            .first_child = sqlite3_column_int64(st, 3),
            .nsubdirs = sqlite3_column_int64(st, 4),
            .first_file = sqlite3_column_int64(st, 5),
            .nfiles = sqlite3_column_int64(st, 6),
        };
        if ((cbret = cb(ctx, &d)) != 0)
            break;
    }
    rc = end_select(st, rc, cbret);
    pthread_mutex_unlock(&idx->lock);
    return rc;
}

int pcr_index_load_records(struct pcr_index *idx, enum pcr_index_tree tree,
                           pcr_index_record_cb cb, void *ctx)
{
    sqlite3_stmt *st = idx->st[ST_RECORDS + tree];
    int rc, cbret = 0;

    if (!st)
        return 0;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    while ((rc = step(idx, st)) == SQLITE_ROW) {
        if ((cbret = refuse_row(idx, st, T_TREE(T_RECORDS, tree))) != 0)
            break;
        const char *name = (const char *)sqlite3_column_text(st, 1);
        struct pcr_index_record r = {
            .id = sqlite3_column_int64(st, 0),
            .name = name ? name : "",
            .size = sqlite3_column_int64(st, 2),
            .nimages = sqlite3_column_int64(st, 3),
            .groups = sqlite3_column_blob(st, 4),
            .groups_len = (size_t)sqlite3_column_bytes(st, 4),
        };
        if ((cbret = cb(ctx, &r)) != 0)
            break;
    }
    rc = end_select(st, rc, cbret);
    pthread_mutex_unlock(&idx->lock);
    return rc;
}

int pcr_index_load_files(struct pcr_index *idx, enum pcr_index_tree tree, int64_t first,
                         int64_t count, pcr_index_file_cb cb, void *ctx)
{
    sqlite3_stmt *st = idx->st[ST_FILES + tree];
    int rc, cbret = 0, t = T_TREE(T_FILES, tree), bad;

    if (!st)
        return 0;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    sqlite3_bind_int64(st, 1, first);
    sqlite3_bind_int64(st, 2, first + count);
    while ((rc = step(idx, st)) == SQLITE_ROW) {
        if ((bad = bad_column(st, t)) >= 0) {
            /* dropped like any other bad file row: the rest of the directory is served */
            char what[96];
            describe_bad(st, t, bad, what, sizeof(what));
            pcr_log(PCR_LOG_ERR, "index: %s %lld rejected: %s",
                    tree == PCR_TREE_TOKENS ? "token file" : "file",
                    (long long)sqlite3_column_int64(st, 0), what);
            continue;
        }
        struct pcr_index_file f = {
            .id = sqlite3_column_int64(st, 0),
            .dir = sqlite3_column_int64(st, 1),
            .name = sqlite3_column_blob(st, 2),
            .namelen = (size_t)sqlite3_column_bytes(st, 2),
            .kind = sqlite3_column_int64(st, 3),
            .record = sqlite3_column_int64(st, 4),
            .slot = sqlite3_column_int64(st, 5),
            .nchunks = sqlite3_column_int64(st, 6),
            .chunks = sqlite3_column_blob(st, 7),
            .chunks_len = (size_t)sqlite3_column_bytes(st, 7),
            .size = sqlite3_column_int64(st, 8),
            .width = sqlite3_column_int64(st, 9),
            .height = sqlite3_column_int64(st, 10),
            .components = sqlite3_column_int64(st, 11),
            .src_size = sqlite3_column_int64(st, 12),
            .checksum = (uint64_t)sqlite3_column_int64(st, 13),
            .note = (const char *)sqlite3_column_text(st, 14),
            .trailer = sqlite3_column_int64(st, 15),
            .sums = sqlite3_column_blob(st, 16),
            .sums_len = (size_t)sqlite3_column_bytes(st, 16),
        };
        if ((cbret = cb(ctx, &f)) != 0)
            break;
    }
    rc = end_select(st, rc, cbret);
    pthread_mutex_unlock(&idx->lock);
    return rc;
}

/* Run one INSERT whose parameters are bound; map the result. */
static int put_step(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

int pcr_index_put_meta(struct pcr_index *idx, const char *key, const char *value)
{
    sqlite3_stmt *st = idx->st[ST_PUT_META];
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return put_step(st);
}

int pcr_index_put_dir(struct pcr_index *idx, enum pcr_index_tree tree,
                      const struct pcr_index_dir *d)
{
    sqlite3_stmt *st = idx->st[ST_PUT_DIR + tree];
    sqlite3_bind_int64(st, 1, d->id);
    sqlite3_bind_int64(st, 2, d->parent);
    sqlite3_bind_blob(st, 3, d->namelen ? (const void *)d->name : "", (int)d->namelen,
                      SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, d->first_child);
    sqlite3_bind_int64(st, 5, d->nsubdirs);
    sqlite3_bind_int64(st, 6, d->first_file);
    sqlite3_bind_int64(st, 7, d->nfiles);
    return put_step(st);
}

int pcr_index_put_record(struct pcr_index *idx, enum pcr_index_tree tree,
                         const struct pcr_index_record *r)
{
    sqlite3_stmt *st = idx->st[ST_PUT_RECORD + tree];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, r->size);
    sqlite3_bind_int64(st, 4, r->nimages);
    sqlite3_bind_blob(st, 5, r->groups, (int)r->groups_len, SQLITE_STATIC);
    return put_step(st);
}

int pcr_index_put_file(struct pcr_index *idx, enum pcr_index_tree tree,
                       const struct pcr_index_file *f)
{
    sqlite3_stmt *st = idx->st[ST_PUT_FILE + tree];
    sqlite3_bind_int64(st, 1, f->id);
    sqlite3_bind_int64(st, 2, f->dir);
    sqlite3_bind_blob(st, 3, f->name, (int)f->namelen, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, f->kind);
    sqlite3_bind_int64(st, 5, f->record);
    sqlite3_bind_int64(st, 6, f->slot);
    sqlite3_bind_int64(st, 7, f->nchunks);
    sqlite3_bind_blob(st, 8, f->chunks, (int)f->chunks_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, f->size);
    sqlite3_bind_int64(st, 10, f->width);
    sqlite3_bind_int64(st, 11, f->height);
    sqlite3_bind_int64(st, 12, f->components);
    sqlite3_bind_int64(st, 13, f->src_size);
    sqlite3_bind_int64(st, 14, (int64_t)f->checksum);
    if (f->note)
        sqlite3_bind_text(st, 15, f->note, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 15);
    sqlite3_bind_int64(st, 16, f->trailer);
    sqlite3_bind_blob(st, 17, f->sums_len ? (const void *)f->sums : "", (int)f->sums_len,
                      SQLITE_STATIC);
    return put_step(st);
}

int pcr_index_put_blob(struct pcr_index *idx, const char *key, const void *data, size_t len)
{
    sqlite3_stmt *st = idx->st[ST_PUT_BLOB];
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 2, len ? data : "", len, SQLITE_STATIC);
    return put_step(st);
}

int pcr_index_get_blob(struct pcr_index *idx, const char *key, size_t max, void **data,
                       size_t *len)
{
    sqlite3_stmt *st = idx->st[ST_BLOB];
    int rc, ret = -ENOENT;

    if (!st)
        return -ENOENT;
    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = step(idx, st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_BLOB) {
        ret = -EINVAL;
    } else if (rc == SQLITE_ROW) {
        const void *v = sqlite3_column_blob(st, 0);
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        if (n > max) {
            ret = -EFBIG;
        } else if (!(*data = malloc(n ? n : 1))) {
            ret = -ENOMEM;
        } else {
            if (n)
                memcpy(*data, v, n);
            *len = n;
            ret = 0;
        }
    } else if (rc != SQLITE_DONE) {
        ret = -EIO;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    pthread_mutex_unlock(&idx->lock);
    return ret;
}

int pcr_index_commit(struct pcr_index *idx, char *err, size_t errlen)
{
    int rc = sqlite3_exec(idx->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        pcr_errf(err, errlen, "index: %s", sqlite3_errmsg(idx->db));
        return sql_errno(rc) ? sql_errno(rc) : -EIO;
    }
    return 0;
}
