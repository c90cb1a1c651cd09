/* pcrfs — the index module (see index.h): with schema.c and conn.c, the only code
 * that speaks SQL; the top of its three floors (conn.h).
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
#include "common/internal.h"
#include "format/index.h"
#include "format/conn.h"
#include "format/schema.h"

#define DIRS_SQL(t)                                                                                \
    "SELECT id, parent, name, first_child, nsubdirs, first_file, nfiles FROM " t "dirs"            \
    " ORDER BY id"
#define RECORDS_SQL(t) "SELECT id, name, size, nimages, groups FROM " t "records ORDER BY id"
#define FILES_SQL(t)                                                                               \
    "SELECT id, dir, name, kind, record, slot, nchunks, chunks, size, width, height,"              \
    " components, src_size, checksum, note, trailer, sums, quality FROM " t "files"                \
    " WHERE id >= ?1 AND id < ?2"                                                                  \
    " ORDER BY id"
#define PUT_DIR_SQL(t)    "INSERT INTO " t "dirs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
#define PUT_RECORD_SQL(t) "INSERT INTO " t "records VALUES (?1, ?2, ?3, ?4, ?5)"
#define PUT_FILE_SQL(t)                                                                            \
    "INSERT INTO " t "files VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"       \
    " ?14, ?15, ?16, ?17, ?18)"

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
    memcpy(p, query, strlen(query) + 1); /* u has room for it */
    return u;
}

/* The reader's SELECTs list the columns of their table in order, so that a row can
 * be checked against the reference by position (index_bad_column()). */
static int stmt_table(int i)
{
    return i >= ST_FILES     ? T_TREE(T_FILES, i - ST_FILES)
           : i >= ST_RECORDS ? T_TREE(T_RECORDS, i - ST_RECORDS)
                             : T_TREE(T_DIRS, i - ST_DIRS);
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
    /* SQLite takes an empty file for an empty database: say what it is instead */
    if (sb.st_size == 0) {
        pcr_errf(err, errlen, "%s: an empty file (0 bytes), not a pcrfs index", path);
        return -EINVAL;
    }
    if (index_ref_init() != 0) {
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
    rc = sqlite3_open_v2(uri, &idx->db,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        pcr_errf(err, errlen, "%s: cannot open: %s", path,
                 idx->db ? sqlite3_errmsg(idx->db) : sqlite3_errstr(rc));
        ret = sql_errno(rc) ? sql_errno(rc) : -EIO;
        goto fail;
    }
    if (index_harden(idx) != 0) {
        pcr_errf(err, errlen, "%s: SQLite refused a safety setting", path);
        ret = -EIO;
        goto fail;
    }
    app = index_pragma_int(idx, "PRAGMA application_id", &rc);
    if (rc != SQLITE_OK) {
        pcr_errf(err, errlen, "%s: not a pcrfs index (%s)", path, pcr_index_errmsg(idx));
        ret = -EINVAL;
        goto fail;
    }
    if (app != PCR_INDEX_APP_ID) {
        pcr_errf(err, errlen, "%s: not a pcrfs index (an SQLite database of another kind)", path);
        ret = -EINVAL;
        goto fail;
    }
    ver = index_pragma_int(idx, "PRAGMA user_version", &rc);
    if (rc != SQLITE_OK || ver != PCR_INDEX_VERSION) {
        pcr_errf(err, errlen, "%s: store format version %lld; this pcrfs reads version %d", path,
                 (long long)ver, PCR_INDEX_VERSION);
        ret = -ENOTSUP;
        goto fail;
    }
    ret = index_check_schema(idx, idx->why, sizeof(idx->why));
    if (ret) {
        pcr_errf(err, errlen, "%s: %s", path, idx->why);
        goto fail;
    }
    for (int i = 0; i < (int)PCR_ARRAY_SIZE(reader_sql); i++) {
        if ((i == ST_BLOB && !idx->has_blobs) ||
            (optional_stmt(i) && i != ST_BLOB && !idx->has_tokens))
            continue;
        rc = index_prepare(idx, reader_sql[i], SQLITE_PREPARE_PERSISTENT, &idx->st[i]);
        if (rc == SQLITE_OK && i >= ST_DIRS && !index_select_matches(idx->st[i], stmt_table(i)))
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
    rc = index_prepare(idx, sql, 0, &st);
    while (rc == SQLITE_OK && (rc = index_step(idx, st)) == SQLITE_ROW)
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
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        goto fail;
    snprintf(sql, sizeof(sql),
             "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA application_id=%d;"
             " PRAGMA user_version=%d;",
             PCR_INDEX_APP_ID, PCR_INDEX_VERSION);
    rc = sqlite3_exec(idx->db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(idx->db, pcr_index_schema, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(idx->db, "BEGIN", NULL, NULL, NULL);
    for (int i = ST_PUT_META; rc == SQLITE_OK && i < ST_COUNT; i++)
        rc = sqlite3_prepare_v3(idx->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &idx->st[i],
                                NULL);
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
    rc = index_step(idx, st);
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

    if (strcmp(table, "files") != 0 && strcmp(table, "dirs") != 0 && strcmp(table, "records") != 0)
        return -EINVAL;
    if (tree == PCR_TREE_TOKENS && !idx->has_tokens)
        return 0;
    snprintf(sql, sizeof(sql), "SELECT coalesce(max(id), 0) FROM %s%s",
             tree == PCR_TREE_TOKENS ? "tok_" : "", table);
    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    v = index_pragma_int(idx, sql, &rc);
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
    int c = index_bad_column(st, t);
    char what[96];

    if (c < 0)
        return 0;
    index_describe_bad(st, t, c, what, sizeof(what));
    snprintf(idx->why, sizeof(idx->why), "table %s: row %lld: %s", table_names[t],
             (long long)sqlite3_column_int64(st, 0), what);
    return -EIO;
}

/* The loop every loader runs, under the lock: bind @range (first, first + count)
 * if given, step @st under the work bound, check each row's storage classes against
 * table @t (a bad dirs or records row refuses the whole load; a bad file row is
 * dropped and logged, the rest of the directory is served), then decode it with
 * @row, which calls the loader's callback. A table that is absent (the optional
 * token tree) has no rows. @return as the loaders (index.h). */
static int each_row(struct pcr_index *idx, sqlite3_stmt *st, int t, const int64_t *range,
                    int (*row)(sqlite3_stmt *st, void *arg), void *arg)
{
    bool drop_bad = range != NULL; /* the file tables are the ranged ones */
    int rc, cbret = 0, bad;

    if (!st)
        return 0;
    pthread_mutex_lock(&idx->lock);
    if (range) {
        sqlite3_bind_int64(st, 1, range[0]);
        sqlite3_bind_int64(st, 2, range[0] + range[1]);
    }
    idx->why[0] = '\0';
    while ((rc = index_step(idx, st)) == SQLITE_ROW) {
        if (drop_bad && (bad = index_bad_column(st, t)) >= 0) {
            char what[96];
            index_describe_bad(st, t, bad, what, sizeof(what));
            pcr_log(PCR_LOG_ERR, "index: %s %lld rejected: %s",
                    t == T_TREE(T_FILES, PCR_TREE_TOKENS) ? "token file" : "file",
                    (long long)sqlite3_column_int64(st, 0), what);
            continue;
        }
        if (!drop_bad && (cbret = refuse_row(idx, st, t)) != 0)
            break;
        if ((cbret = row(st, arg)) != 0)
            break;
    }
    rc = end_select(st, rc, cbret);
    pthread_mutex_unlock(&idx->lock);
    return rc;
}

struct dir_arg {
    pcr_index_dir_cb cb;
    void *ctx;
};

static int dir_row(sqlite3_stmt *st, void *arg)
{
    struct dir_arg *a = arg;
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
    return a->cb(a->ctx, &d);
}

int pcr_index_load_dirs(struct pcr_index *idx, enum pcr_index_tree tree, pcr_index_dir_cb cb,
                        void *ctx)
{
    struct dir_arg a = {cb, ctx};

    return each_row(idx, idx->st[ST_DIRS + tree], T_TREE(T_DIRS, tree), NULL, dir_row, &a);
}

struct record_arg {
    pcr_index_record_cb cb;
    void *ctx;
};

static int record_row(sqlite3_stmt *st, void *arg)
{
    struct record_arg *a = arg;
    const char *name = (const char *)sqlite3_column_text(st, 1);
    struct pcr_index_record r = {
        .id = sqlite3_column_int64(st, 0),
        .name = name ? name : "",
        .size = sqlite3_column_int64(st, 2),
        .nimages = sqlite3_column_int64(st, 3),
        .groups = sqlite3_column_blob(st, 4),
        .groups_len = (size_t)sqlite3_column_bytes(st, 4),
    };
    return a->cb(a->ctx, &r);
}

int pcr_index_load_records(struct pcr_index *idx, enum pcr_index_tree tree, pcr_index_record_cb cb,
                           void *ctx)
{
    struct record_arg a = {cb, ctx};

    return each_row(idx, idx->st[ST_RECORDS + tree], T_TREE(T_RECORDS, tree), NULL, record_row, &a);
}

struct file_arg {
    pcr_index_file_cb cb;
    void *ctx;
};

static int file_row(sqlite3_stmt *st, void *arg)
{
    struct file_arg *a = arg;
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
        .quality = sqlite3_column_blob(st, 17),
        .quality_len = (size_t)sqlite3_column_bytes(st, 17),
    };
    return a->cb(a->ctx, &f);
}

int pcr_index_load_files(struct pcr_index *idx, enum pcr_index_tree tree, int64_t first,
                         int64_t count, pcr_index_file_cb cb, void *ctx)
{
    struct file_arg a = {cb, ctx};
    const int64_t range[2] = {first, count};

    return each_row(idx, idx->st[ST_FILES + tree], T_TREE(T_FILES, tree), range, file_row, &a);
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
    sqlite3_bind_blob(st, 18, f->quality_len ? (const void *)f->quality : "", (int)f->quality_len,
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

int pcr_index_get_blob(struct pcr_index *idx, const char *key, size_t max, void **data, size_t *len)
{
    sqlite3_stmt *st = idx->st[ST_BLOB];
    int rc, ret = -ENOENT;

    if (!st)
        return -ENOENT;
    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = index_step(idx, st);
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

/* Step @sql to its end on the reader's connection, handing each row to @row (which
 * skips rows of unexpected types, returning 0). @return 0, the first non-zero @row
 * value, or -EIO. */
static int each_row_of(struct pcr_index *idx, const char *sql,
                       int (*row)(sqlite3_stmt *st, void *arg), void *arg)
{
    sqlite3_stmt *st = NULL;
    int rc, cbret = 0;

    pthread_mutex_lock(&idx->lock);
    idx->why[0] = '\0';
    rc = index_prepare(idx, sql, 0, &st);
    if (rc == SQLITE_OK) {
        while ((rc = index_step(idx, st)) == SQLITE_ROW)
            if ((cbret = row(st, arg)) != 0)
                break;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&idx->lock);
    if (cbret)
        return cbret;
    return rc == SQLITE_DONE ? 0 : -EIO;
}

struct id_record_arg {
    int (*cb)(void *ctx, int64_t id, int64_t record);
    void *ctx;
};

static int id_record_row(sqlite3_stmt *st, void *arg)
{
    struct id_record_arg *a = arg;

    /* the schema is exact, but a crafted row may still hold another type */
    if (sqlite3_column_type(st, 0) != SQLITE_INTEGER ||
        sqlite3_column_type(st, 1) != SQLITE_INTEGER)
        return 0;
    return a->cb(a->ctx, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1));
}

int pcr_index_file_records(struct pcr_index *idx, enum pcr_index_tree tree,
                           int (*cb)(void *ctx, int64_t id, int64_t record), void *ctx)
{
    struct id_record_arg a = {cb, ctx};

    if (tree == PCR_TREE_TOKENS && !idx->has_tokens)
        return 0;
    return each_row_of(idx,
                       tree == PCR_TREE_TOKENS ? "SELECT id, record FROM tok_files ORDER BY id"
                                               : "SELECT id, record FROM files ORDER BY id",
                       id_record_row, &a);
}

/* Meta keys and blobs: TEXT keys with TEXT (meta) or BLOB (blobs) values; the
 * writer never makes others. */
struct kv_arg {
    bool blob;
    int (*meta)(void *ctx, const char *key, const char *value);
    int (*data)(void *ctx, const char *key, const void *data, size_t len);
    void *ctx;
};

static int kv_row(sqlite3_stmt *st, void *arg)
{
    struct kv_arg *a = arg;
    const char *key = (const char *)sqlite3_column_text(st, 0);

    if (sqlite3_column_type(st, 0) != SQLITE_TEXT ||
        sqlite3_column_type(st, 1) != (a->blob ? SQLITE_BLOB : SQLITE_TEXT))
        return 0;
    if (!a->blob)
        return a->meta(a->ctx, key, (const char *)sqlite3_column_text(st, 1));
    const void *v = sqlite3_column_blob(st, 1);
    return a->data(a->ctx, key, v ? v : "", (size_t)sqlite3_column_bytes(st, 1));
}

int pcr_index_each_meta(struct pcr_index *idx,
                        int (*cb)(void *ctx, const char *key, const char *value), void *ctx)
{
    struct kv_arg a = {.blob = false, .meta = cb, .ctx = ctx};

    return each_row_of(idx, "SELECT key, value FROM meta ORDER BY key", kv_row, &a);
}

int pcr_index_each_blob(struct pcr_index *idx,
                        int (*cb)(void *ctx, const char *key, const void *data, size_t len),
                        void *ctx)
{
    struct kv_arg a = {.blob = true, .data = cb, .ctx = ctx};

    if (!idx->st[ST_BLOB])
        return 0; /* no blob table: no blobs */
    return each_row_of(idx, "SELECT key, value FROM blobs ORDER BY key", kv_row, &a);
}
