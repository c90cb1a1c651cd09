/* libFuzzer target for the store reader: the input describes the rows of an index
 * (directories, records, files), a record file, and a list of corruptions; the
 * target writes them with SQLite into a fresh index.db next to a few record files,
 * opens the store and walks all of it: readdir, lookup of every name (and of names
 * that must not exist), pcr_store_file, pcr_store_path, and reads of every file at
 * every level, whole and at random offsets, into buffers of the exact size.
 *
 * Most inputs start from a consistent tree (the description is shaped so that a
 * random byte string is a valid store) and the corruptions then set single columns
 * to hostile values: NULLs, negatives, 2^k±1, text, blobs, bad names, bad varint
 * tables. So both sides of every check in store.c are reached, not only refusals.
 *
 * Beyond "no crash, no sanitizer report", it traps on broken contracts:
 *   - a failed open without a message, or a message that is not one line;
 *   - a log line carrying control characters (they come from the index);
 *   - readdir listing a name that lookup does not find (or finds as another node);
 *   - a path that does not resolve back to its file;
 *   - a handle size that disagrees with pcr_file_size, a read returning other than
 *     min(len, size - off) bytes, reads at an offset disagreeing with the whole read,
 *     a JPEG level that is not FF D9-terminated or not a prefix of the next level.
 *
 * In schema mode (flags & 8) the tables themselves are mutated (see mutate_schema):
 * a store must then be refused at open, quickly, with a one-line message.
 *
 * Input layout (every read past the end yields 0; see gen_* below):
 *   flags, levels, records, the record file "000009.pcr", dirs, files, corruptions,
 *   [app id, version], [schema mode: token tables + count, mutations].
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sqlite3.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/log.h"
#include "pcrfs/store.h"
#include "common/internal.h"
#include "format/index.h"
#include "format/schema.h"
#include "format/record.h"

#define TRAP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_index: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define MAX_DIRS  16
#define MAX_FILES 32
#define MAX_RECS  6
#define MAX_ROWS  (MAX_FILES + 4) /* room for duplicated rows */

/* ---- reading the input ---- */

struct in {
    const uint8_t *p;
    size_t n;
};

static uint8_t u8(struct in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t u64(struct in *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)u8(in) << (8 * i);
    return v;
}

/* ---- SQL values ---- */

enum vtype { V_NULL, V_INT, V_REAL, V_TEXT, V_BLOB };

struct val {
    enum vtype t;
    int64_t i;
    double r;
    uint16_t len;
    uint8_t b[301]; /* TEXT or BLOB bytes, NUL-terminated for convenience */
};

static void set_int(struct val *v, int64_t i)
{
    v->t = V_INT;
    v->i = i;
}

static void set_bytes(struct val *v, enum vtype t, const void *p, size_t n)
{
    if (n > sizeof(v->b) - 1)
        n = sizeof(v->b) - 1;
    v->t = t;
    v->len = (uint16_t)n;
    memcpy(v->b, p, n);
    v->b[n] = '\0';
}

static void set_varints(struct val *v, const uint64_t *x, unsigned n)
{
    uint8_t b[sizeof(v->b) - 1];
    size_t len = 0;
    for (unsigned i = 0; i < n && len + 10 <= sizeof(b); i++)
        len += pcr_varint_put(b + len, x[i]);
    set_bytes(v, V_BLOB, b, len);
}

/* Names a hostile index would try, and a few that collide with generated ones. */
static const struct {
    const char *s;
    size_t n;
} odd_names[] = {
    {"", 0},     {".", 1},   {"..", 2},    {"a/b", 3},  {"/", 1},
    {"a\0b", 3}, {"d00", 3}, {"d01", 3},   {"f00", 3},  {"f01", 3},
    {"\xff", 1}, {"x\n", 2}, {"f00\0", 4}, {"../x", 4}, {"/etc/passwd", 11},
};

static const char *const rec_names[] = {
    "000001.pcr", "000002.pcr", "000003.pcr", "000009.pcr", "missing.pcr", "../x", "/etc/passwd",
    "",           "sub",        "link.pcr",   "fifo.pcr",   ".hidden",     "a\nb", "a\x1b[2J",
};
#define NREC_NAMES (sizeof(rec_names) / sizeof(rec_names[0]))

/* A hostile replacement for @v (whose current value it may build on). */
static void gen_value(struct in *in, struct val *v)
{
    uint8_t tag = u8(in) % 18, k;
    int64_t cur = v->t == V_INT ? v->i : 0;

    switch (tag) {
    case 0:
        v->t = V_NULL;
        break;
    case 1:
        set_int(v, u8(in));
        break;
    case 2:
        set_int(v, -(int64_t)u8(in));
        break;
    case 3:
        set_int(v, (int64_t)u64(in));
        break;
    case 4:
        k = u8(in); /* 2^(k%64) - 1, + 0, + 1 or + 2 */
        set_int(v, (int64_t)((1ULL << (k % 64)) + (uint64_t)((k >> 6) & 3) - 1));
        break;
    case 5:
        set_int(v, INT64_MAX);
        break;
    case 6:
        set_int(v, INT64_MIN);
        break;
    case 7: {
        static const char *texts[] = {"abc",  "10", "-1", "1e3",
                                      "0x10", " 5", "",   "18446744073709551616"};
        const char *t = texts[u8(in) % 8];
        set_bytes(v, V_TEXT, t, strlen(t));
        break;
    }
    case 8: {
        uint8_t n = u8(in) % 40, b[40];
        for (unsigned i = 0; i < n; i++)
            b[i] = u8(in);
        set_bytes(v, V_BLOB, b, n);
        break;
    }
    case 9:
        v->t = V_REAL;
        v->r = (double)(int8_t)u8(in) * 0.75;
        break;
    case 10:
        set_int(v, (int64_t)((uint64_t)cur + 1)); /* wraps at INT64_MAX, as a crafter would */
        break;
    case 11:
        set_int(v, (int64_t)((uint64_t)cur - 1));
        break;
    case 12: {
        k = u8(in);
        if (k == 255) { /* 256 bytes: one more than a name may have */
            uint8_t b[256];
            memset(b, 'n', sizeof(b));
            set_bytes(v, V_BLOB, b, sizeof(b));
        } else {
            set_bytes(v, V_BLOB, odd_names[k % PCR_ARRAY_SIZE(odd_names)].s,
                      odd_names[k % PCR_ARRAY_SIZE(odd_names)].n);
        }
        break;
    }
    case 13: { /* a varint table: group offsets or (offset, length) pairs */
        uint64_t x[70];
        unsigned n = u8(in) % 70;
        for (unsigned i = 0; i < n; i++) {
            uint8_t b = u8(in);
            if (b < 240)
                x[i] = b;
            else if (b < 250) /* around the first group offset */
                x[i] = PCR_RECORD_HDR + (uint64_t)(b - 240);
            else /* the largest values a varint holds */
                x[i] = UINT64_MAX - (uint64_t)(b - 250);
        }
        set_varints(v, x, n);
        break;
    }
    case 14:
        set_int(v, 0);
        break;
    case 15:
        set_int(v, 1);
        break;
    case 16: {
        const char *t = rec_names[u8(in) % NREC_NAMES];
        set_bytes(v, V_TEXT, t, strlen(t));
        break;
    }
    case 17: /* a blob cut or extended by one byte (varint tables, names) */
        if (v->t == V_BLOB && v->len > 0 && (u8(in) & 1))
            v->len--;
        else if (v->t == V_BLOB && v->len < sizeof(v->b) - 1)
            v->b[v->len++] = u8(in);
        break;
    }
}

/* ---- the fixture: a store directory with record files, made once ---- */

struct recfile {
    const char *name;
    unsigned ngroups;
    uint64_t goff[PCR_MAX_CHUNKS + 1];
    uint64_t nimages;
};

static char root[256], store[300], recdir[320], idxpath[320];
static struct recfile fixed[3] = {
    {"000001.pcr", 4, {0}, 3},
    {"000002.pcr", 1, {0}, 2},
    {"000003.pcr", 18, {0}, 1},
};
static struct recfile rec9 = {"000009.pcr", 0, {0}, 0};

/* The bytes of the fixture's record files past their header. */
static uint8_t rec_byte(const struct recfile *r, uint64_t off)
{
    return (uint8_t)(off * 31 + (uint8_t)r->name[5]);
}

static void write_record(const char *dir, const struct recfile *r, const struct pcr_record_hdr *h,
                         uint64_t len)
{
    char path[400];
    uint8_t hdr[PCR_RECORD_HDR], *b = malloc(len > PCR_RECORD_HDR ? len : PCR_RECORD_HDR);
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, r->name);
    pcr_record_hdr_encode(h, hdr);
    memcpy(b, hdr, len < PCR_RECORD_HDR ? len : PCR_RECORD_HDR);
    for (uint64_t o = PCR_RECORD_HDR; o < len; o++)
        b[o] = rec_byte(r, o);
    unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, b, len) != (ssize_t)len)
        TRAP("cannot write %s", path);
    close(fd);
    free(b);
}

static void fixture(void)
{
    static const unsigned gsize[3][18] = {
        {40, 24, 16, 8},
        {64},
        {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4},
    };
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char path[400];

    snprintf(root, sizeof(root), "%s/pcrfs-fuzz-index-%d", base, (int)getpid());
    snprintf(store, sizeof(store), "%s/store", root);
    snprintf(recdir, sizeof(recdir), "%s/records", store);
    snprintf(idxpath, sizeof(idxpath), "%s/index.db", store);
    if (mkdir(root, 0755) || mkdir(store, 0755) || mkdir(recdir, 0755))
        TRAP("cannot create %s", root);
    for (int i = 0; i < 3; i++) {
        struct recfile *r = &fixed[i];
        uint64_t pos = PCR_RECORD_HDR;
        for (unsigned g = 0; g < r->ngroups; g++) {
            r->goff[g] = pos;
            pos += gsize[i][g];
        }
        r->goff[r->ngroups] = pos;
        write_record(recdir, r,
                     &(struct pcr_record_hdr){.version = PCR_RECORD_VERSION,
                                              .ngroups = r->ngroups,
                                              .nimages = r->nimages,
                                              .size = pos},
                     pos);
    }
    /* names in records/ that are there but are not record files */
    snprintf(path, sizeof(path), "%s/sub", recdir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/link.pcr", recdir);
    if (symlink("000001.pcr", path))
        TRAP("symlink");
    /* "fifo.pcr" is deliberately absent: a FIFO blocks open() in a reader without
     * O_NONBLOCK, which stalls the fuzzer instead of failing; the unit test covers it */
}

/* ---- the rows ---- */

enum { D_ID, D_PARENT, D_NAME, D_FCHILD, D_NSUB, D_FFILE, D_NFILES, D_NCOL };
enum { R_ID, R_NAME, R_SIZE, R_NIMAGES, R_GROUPS, R_NCOL };
enum {
    F_ID,
    F_DIR,
    F_NAME,
    F_KIND,
    F_RECORD,
    F_SLOT,
    F_NCHUNKS,
    F_CHUNKS,
    F_SIZE,
    F_WIDTH,
    F_HEIGHT,
    F_COMPONENTS,
    F_SRC_SIZE,
    F_CHECKSUM,
    F_NOTE,
    F_TRAILER,
    F_SUMS,
    F_QUALITY,
    F_NCOL
};

struct table {
    const char *name;
    unsigned ncol, nrows;
    struct val rows[MAX_ROWS][F_NCOL];
};

static struct table tdirs = {"dirs", D_NCOL, 0, {{{0}}}};
static struct table trecs = {"records", R_NCOL, 0, {{{0}}}};
static struct table tfiles = {"files", F_NCOL, 0, {{{0}}}};

/* ---- the schema: pcrfs(5)'s, or one a hostile index would try ----
 * Each table is a list of (name, declaration) pairs; in schema mode (flags & 8) the
 * input mutates them (types, names, generated columns, defaults, collations, keys,
 * views, triggers, indexes, partial token tables...). Every mutation makes a schema
 * other than pcrfs(5)'s, so a store that opens after one is a finding, and so is
 * one that hangs (libFuzzer's -timeout): a view over an unbounded recursive query
 * used to make the reader spin forever. */

struct coldef {
    char name[24], decl[96];
};

struct tabdef {
    const char *name;
    bool without_rowid, absent, view;
    unsigned ncol;
    struct coldef col[24];
    char extra[512]; /* statements after the table: triggers, indexes, views */
};

static const struct tabdef ref_tables[4] = {
    {"meta", true, false, false, 2, {{"key", "TEXT PRIMARY KEY"}, {"value", "TEXT NOT NULL"}}, ""},
    {"dirs",
     false,
     false,
     false,
     7,
     {{"id", "INTEGER PRIMARY KEY"},
      {"parent", "INTEGER NOT NULL"},
      {"name", "BLOB NOT NULL"},
      {"first_child", "INTEGER NOT NULL"},
      {"nsubdirs", "INTEGER NOT NULL"},
      {"first_file", "INTEGER NOT NULL"},
      {"nfiles", "INTEGER NOT NULL"}},
     ""},
    {"records",
     false,
     false,
     false,
     5,
     {{"id", "INTEGER PRIMARY KEY"},
      {"name", "TEXT NOT NULL"},
      {"size", "INTEGER NOT NULL"},
      {"nimages", "INTEGER NOT NULL"},
      {"groups", "BLOB NOT NULL"}},
     ""},
    {"files",
     false,
     false,
     false,
     18,
     {{"id", "INTEGER PRIMARY KEY"},
      {"dir", "INTEGER NOT NULL"},
      {"name", "BLOB NOT NULL"},
      {"kind", "INTEGER NOT NULL"},
      {"record", "INTEGER NOT NULL"},
      {"slot", "INTEGER NOT NULL"},
      {"nchunks", "INTEGER NOT NULL"},
      {"chunks", "BLOB NOT NULL"},
      {"size", "INTEGER NOT NULL"},
      {"width", "INTEGER NOT NULL"},
      {"height", "INTEGER NOT NULL"},
      {"components", "INTEGER NOT NULL"},
      {"src_size", "INTEGER NOT NULL"},
      {"checksum", "INTEGER NOT NULL"},
      {"note", "TEXT"},
      {"trailer", "INTEGER NOT NULL"},
      {"sums", "BLOB NOT NULL"},
      {"quality", "BLOB NOT NULL"}},
     ""},
};

static struct tabdef tables[4];
static char schema_extra[1024]; /* statements after all tables */
static bool schema_changed;     /* the schema is no longer pcrfs(5)'s */
static char schema_used[8192];
static bool with_tokens; /* the token tables are made (complete) */ /* what write_index() ran, for
                                                                       the report of a finding */

static const char token_tables[] = PCR_INDEX_TOKEN_TABLES;

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (n < len)
        vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

/* Replace the type (first word, or none) of a declaration, keeping the constraints. */
static bool set_type(struct coldef *c, const char *type)
{
    char rest[96];
    const char *sp = strchr(c->decl, ' ');
    bool had_type = c->decl[0] && strncmp(c->decl, "PRIMARY", 7) && strncmp(c->decl, "NOT", 3);
    size_t oldlen = had_type ? (sp ? (size_t)(sp - c->decl) : strlen(c->decl)) : 0;

    if (strlen(type) == oldlen && !strncmp(c->decl, type, oldlen))
        return false;
    snprintf(rest, sizeof(rest), "%s", c->decl + oldlen);
    snprintf(c->decl, sizeof(c->decl), "%s%s", type, rest);
    return true;
}

/* One mutation of the schema, from the input. */
static void mutate_schema(struct in *in)
{
    static const char *const types[] = {"TEXT",    "BLOB", "INT",     "REAL",    "ANY",
                                        "NUMERIC", "",     "INTEGER", "integer", "VARCHAR(9)"};
    static const char *const gen[] = {"1", "printf('%.99c', 'x')", "id + 1", "X'00'", "NULL"};
    uint8_t op = u8(in) % 15, k8 = u8(in);
    struct tabdef *t = &tables[u8(in) % 4];
    unsigned k = t->ncol ? k8 % t->ncol : 0;
    struct coldef *c = &t->col[k];
    bool pk = strstr(c->decl, "PRIMARY KEY") != NULL;

    switch (op) {
    case 0:
        schema_changed |= set_type(c, types[u8(in) % PCR_ARRAY_SIZE(types)]);
        break;
    case 1:
        append(c->name, sizeof(c->name), "x");
        schema_changed = true;
        break;
    case 2:
        if (t->ncol > 1) {
            memmove(c, c + 1, (t->ncol - k - 1) * sizeof(*c));
            t->ncol--;
            schema_changed = true;
        }
        break;
    case 3:
        if (t->ncol < PCR_ARRAY_SIZE(t->col)) {
            memmove(c + 1, c, (t->ncol - k) * sizeof(*c));
            t->ncol++;
            snprintf(c->name, sizeof(c->name), "extra%u", k);
            snprintf(c->decl, sizeof(c->decl), "%s", types[u8(in) % PCR_ARRAY_SIZE(types)]);
            schema_changed = true;
        }
        break;
    case 4: /* a generated column (never the key: SQLite refuses that) */
        if (!pk) {
            char *sp = strchr(c->decl, ' ');
            if (sp)
                *sp = '\0';
            append(c->decl, sizeof(c->decl), " GENERATED ALWAYS AS (%s) %s",
                   gen[u8(in) % PCR_ARRAY_SIZE(gen)], u8(in) & 1 ? "STORED" : "VIRTUAL");
            schema_changed = true;
        }
        break;
    case 5: /* NOT NULL added or removed (a key column's shows either way) */
        if (!pk) {
            char *nn = strstr(c->decl, " NOT NULL");
            if (nn)
                memmove(nn, nn + 9, strlen(nn + 9) + 1);
            else
                append(c->decl, sizeof(c->decl), " NOT NULL");
            schema_changed = true;
        }
        break;
    case 6:
        append(c->decl, sizeof(c->decl), " DEFAULT %d", (int8_t)u8(in));
        schema_changed = true;
        break;
    case 7:
        append(c->decl, sizeof(c->decl), " COLLATE %s", u8(in) & 1 ? "NOCASE" : "RTRIM");
        schema_changed = true;
        break;
    case 8:
        t->without_rowid = !t->without_rowid;
        schema_changed = true;
        break;
    case 9: /* the table becomes a view over its data, or over an endless query */
        t->view = true;
        schema_changed = true;
        break;
    case 10:
        t->absent = true;
        schema_changed = true;
        break;
    case 11: /* a descending key is no rowid alias: an index appears (in a WITHOUT ROWID
              * table it changes nothing a reader sees, so it is not tried there) */
        if (pk && !t->without_rowid && !strstr(c->decl, "DESC")) {
            append(c->decl, sizeof(c->decl), " DESC");
            schema_changed = true;
        }
        break;
    case 12: {
        static const char *const extras[] = {
            "CREATE TRIGGER tr_%s AFTER INSERT ON %s BEGIN SELECT 1; END;",
            "CREATE INDEX ix_%s ON %s(rowid);",
            "CREATE VIEW v_%s AS SELECT * FROM %s;",
            "CREATE TABLE x_%s AS SELECT * FROM %s;",
        };
        /* ix_ on rowid is not valid SQL: then the index is simply absent */
        unsigned e = u8(in) % PCR_ARRAY_SIZE(extras);
        if (e == 1)
            append(t->extra, sizeof(t->extra), "CREATE INDEX ix_%s_%u ON %s(%s);", t->name, k,
                   t->name, c->name);
        else
            append(t->extra, sizeof(t->extra), extras[e], t->name, t->name);
        schema_changed = true;
        break;
    }
    case 13: /* some of the token tables: all or none is the rule */
        if (with_tokens)
            append(schema_extra, sizeof(schema_extra), "DROP TABLE %s;",
                   u8(in) & 1 ? "tok_dirs" : "tok_files");
        else
            append(
                schema_extra, sizeof(schema_extra), "%s",
                u8(in) & 1
                    ? "CREATE TABLE tok_dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL,"
                      " name BLOB NOT NULL, first_child INTEGER NOT NULL, nsubdirs INTEGER NOT "
                      "NULL,"
                      " first_file INTEGER NOT NULL, nfiles INTEGER NOT NULL);"
                    : "CREATE TABLE tok_records(id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                      " size INTEGER NOT NULL, nimages INTEGER NOT NULL, groups BLOB NOT NULL);");
        schema_changed = true;
        break;
    case 14:
        append(schema_extra, sizeof(schema_extra), "ANALYZE;");
        schema_changed = true;
        break;
    }
}

/* Whether the mutations left a schema other than pcrfs(5)'s (two toggles of one
 * flag, a type set back, cancel out). */
static bool tables_differ(void)
{
    if (schema_extra[0])
        return true;
    for (int i = 0; i < 4; i++) {
        const struct tabdef *t = &tables[i], *r = &ref_tables[i];
        if (t->without_rowid != r->without_rowid || t->absent || t->view || t->extra[0] ||
            t->ncol != r->ncol)
            return true;
        /* SQLite reports a declared type in upper case ("integer" is INTEGER to it
         * and to the reader): only the declaration's case is not a difference */
        for (unsigned c = 0; c < t->ncol; c++)
            if (strcmp(t->col[c].name, r->col[c].name) ||
                strcasecmp(t->col[c].decl, r->col[c].decl))
                return true;
    }
    return false;
}

/* CREATE statements for @t into @sql. */
static void table_sql(const struct tabdef *t, char *sql, size_t len)
{
    sql[0] = '\0';
    if (t->absent)
        return;
    append(sql, len, "CREATE TABLE %s%s(", t->name, t->view ? "_data" : "");
    for (unsigned c = 0; c < t->ncol; c++)
        append(sql, len, "%s%s %s", c ? ", " : "", t->col[c].name, t->col[c].decl);
    append(sql, len, ")%s;", t->without_rowid ? " WITHOUT ROWID" : "");
    if (t->view && !strcmp(t->name, "files"))
        append(sql, len,
               "CREATE VIEW files AS WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL"
               " SELECT k + 1 FROM n) SELECT k AS id, f.dir, f.name, f.kind, f.record,"
               " f.slot, f.nchunks, f.chunks, f.size, f.width, f.height, f.components,"
               " f.src_size, f.checksum, f.note, f.trailer, f.sums, f.quality"
               " FROM n, files_data f"
               " WHERE f.id = 1;");
    else if (t->view)
        append(sql, len, "CREATE VIEW %s AS SELECT * FROM %s_data;", t->name, t->name);
    append(sql, len, "%s", t->extra);
}

static void bind(sqlite3_stmt *st, int col, const struct val *v)
{
    switch (v->t) {
    case V_NULL:
        sqlite3_bind_null(st, col);
        break;
    case V_INT:
        sqlite3_bind_int64(st, col, v->i);
        break;
    case V_REAL:
        sqlite3_bind_double(st, col, v->r);
        break;
    case V_TEXT:
        sqlite3_bind_text(st, col, (const char *)v->b, v->len, SQLITE_STATIC);
        break;
    case V_BLOB:
        sqlite3_bind_blob(st, col, v->len ? (const void *)v->b : "", v->len, SQLITE_STATIC);
        break;
    }
}

static void insert_rows(sqlite3 *db, const struct table *t, const struct tabdef *def)
{
    char sql[256];
    size_t n = (size_t)snprintf(sql, sizeof(sql), "INSERT INTO %s%s VALUES (", t->name,
                                def->view ? "_data" : "");
    sqlite3_stmt *st = NULL;

    for (unsigned c = 0; c < t->ncol; c++)
        n += (size_t)snprintf(sql + n, sizeof(sql) - n, c ? ",?" : "?");
    snprintf(sql + n, sizeof(sql) - n, ")");
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        if (!schema_changed)
            TRAP("prepare %s: %s", sql, sqlite3_errmsg(db));
        return; /* a mutated table takes other rows: it stays empty */
    }
    for (unsigned r = 0; r < t->nrows; r++) {
        for (unsigned c = 0; c < t->ncol; c++)
            bind(st, (int)c + 1, &t->rows[r][c]);
        sqlite3_step(st); /* a constraint violation just drops the row */
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    sqlite3_finalize(st);
}

static void write_index(int64_t app_id, int64_t version, const char *levels, bool tokens)
{
    sqlite3 *db = NULL;
    char sql[4096];

    unlink(idxpath);
    if (sqlite3_open(idxpath, &db) != SQLITE_OK)
        TRAP("sqlite3_open: %s", sqlite3_errmsg(db));
    snprintf(sql, sizeof(sql),
             "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA application_id=%lld;"
             " PRAGMA user_version=%lld; BEGIN;",
             (long long)app_id, (long long)version);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        TRAP("pragmas: %s", sqlite3_errmsg(db));
    schema_used[0] = '\0';
    for (int t = 0; t < 4; t++) {
        /* a mutation SQLite refuses (a generated key...) leaves the table out */
        table_sql(&tables[t], sql, sizeof(sql));
        append(schema_used, sizeof(schema_used), "%s", sql);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK && !schema_changed)
            TRAP("schema: %s: %s", sql, sqlite3_errmsg(db));
    }
    if (tokens && sqlite3_exec(db, token_tables, NULL, NULL, NULL) != SQLITE_OK)
        TRAP("token tables: %s", sqlite3_errmsg(db));
    if (levels) {
        sqlite3_stmt *st = NULL;
        sqlite3_prepare_v2(db, "INSERT INTO meta VALUES ('levels', ?1)", -1, &st, NULL);
        sqlite3_bind_text(st, 1, levels, -1, SQLITE_STATIC);
        sqlite3_step(st);
        sqlite3_finalize(st);
    }
    sqlite3_exec(db, "INSERT INTO meta VALUES ('created', '1700000000')", NULL, NULL, NULL);
    insert_rows(db, &tdirs, &tables[1]);
    insert_rows(db, &trecs, &tables[2]);
    insert_rows(db, &tfiles, &tables[3]);
    sqlite3_exec(db, schema_extra, NULL, NULL, NULL); /* after the rows: ANALYZE */
    append(schema_used, sizeof(schema_used), "%s%s", tokens ? "(token tables)" : "", schema_extra);
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        TRAP("commit: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* ---- generating a consistent store from the input ---- */

static const struct recfile *rec_for_name(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, fixed[i].name))
            return &fixed[i];
    return !strcmp(name, rec9.name) ? &rec9 : &fixed[0]; /* others: any plausible table */
}

/* The record file 000009.pcr: its groups, then a header that may lie, then a length
 * that may not match. @return the length to truncate it to after the open, or 0. */
static uint64_t gen_record9(struct in *in)
{
    uint8_t flags = u8(in);
    uint64_t pos = PCR_RECORD_HDR, len;
    struct pcr_record_hdr h;

    rec9.ngroups = 1 + u8(in) % 8;
    rec9.nimages = 1 + u8(in) % 4;
    for (unsigned g = 0; g < rec9.ngroups; g++) {
        rec9.goff[g] = pos;
        pos += u8(in) % 64;
    }
    rec9.goff[rec9.ngroups] = pos;
    h = (struct pcr_record_hdr){.version = PCR_RECORD_VERSION,
                                .ngroups = rec9.ngroups,
                                .nimages = rec9.nimages,
                                .size = pos};
    if (flags & 1)
        h.version = u8(in);
    if (flags & 2)
        h.ngroups ^= 1u << (u8(in) % 32);
    if (flags & 4)
        h.nimages ^= 1ULL << (u8(in) % 64);
    if (flags & 8)
        h.size ^= 1ULL << (u8(in) % 64);
    len = pos;
    if (flags & 16)
        len = u8(in) % (pos + 8); /* shorter or longer than it says */
    write_record(recdir, &rec9, &h, len);
    if (flags & 32) { /* bad magic */
        char path[400];
        int fd;
        snprintf(path, sizeof(path), "%s/%s", recdir, rec9.name);
        fd = open(path, O_WRONLY);
        if (fd >= 0 && len > 0) {
            if (pwrite(fd, "X", 1, 0) != 1)
                TRAP("pwrite");
        }
        if (fd >= 0)
            close(fd);
    }
    return flags & 64 ? u8(in) % (pos + 1) + 1 : 0;
}

static void gen_records(struct in *in, unsigned nrec)
{
    trecs.nrows = nrec;
    for (unsigned i = 0; i < nrec; i++) {
        struct val *row = trecs.rows[i];
        uint8_t pick = u8(in);
        /* record i+1 is usually the matching fixed file (1,2,3 then 9), else any name */
        const char *name =
            pick < 200 ? (i < 3 ? fixed[i].name : rec9.name) : rec_names[pick % NREC_NAMES];
        const struct recfile *r = rec_for_name(name);
        set_int(&row[R_ID], i + 1);
        set_bytes(&row[R_NAME], V_TEXT, name, strlen(name));
        set_int(&row[R_SIZE], (int64_t)r->goff[r->ngroups]);
        set_int(&row[R_NIMAGES], (int64_t)r->nimages);
        set_varints(&row[R_GROUPS], r->goff, r->ngroups + 1);
    }
}

/* Directories in breadth-first order: parents never decrease, so children are
 * contiguous; names "dNN" sorted within their parent. */
static unsigned gen_dirs(struct in *in, unsigned ndirs, uint64_t parent[])
{
    unsigned nchild[MAX_DIRS + 1] = {0};

    parent[1] = 1;
    for (unsigned k = 2; k <= ndirs; k++) {
        uint64_t p = k == 2 ? 1 : parent[k - 1] + u8(in) % 3;
        parent[k] = p < k ? p : k - 1;
    }
    tdirs.nrows = ndirs;
    for (unsigned k = 1; k <= ndirs; k++) {
        struct val *row = tdirs.rows[k - 1];
        char name[8];
        uint64_t first = 0, n = 0;
        for (unsigned c = 2; c <= ndirs; c++)
            if (parent[c] == k && c != 1) {
                if (!n)
                    first = c;
                n++;
            }
        set_int(&row[D_ID], k);
        set_int(&row[D_PARENT], (int64_t)parent[k]);
        snprintf(name, sizeof(name), "d%02u", k == 1 ? 0 : nchild[parent[k]]++);
        set_bytes(&row[D_NAME], V_BLOB, name, k == 1 ? 0 : 3);
        set_int(&row[D_FCHILD], (int64_t)first);
        set_int(&row[D_NSUB], (int64_t)n);
        set_int(&row[D_FFILE], 0);
        set_int(&row[D_NFILES], 0);
    }
    return ndirs;
}

/* @qlen: the bytes of a quality table for the store's levels (2 per level below the
 * top), or 0 when the levels are not a plain number. */
static void gen_files(struct in *in, unsigned nfiles, unsigned ndirs, unsigned nrec, unsigned qlen)
{
    unsigned dir = 1, idx = 0;
    char prefix = 'f'; /* 'd' makes files collide with the subdirectories "dNN" */

    tfiles.nrows = nfiles;
    for (unsigned i = 0; i < nfiles; i++) {
        struct val *row = tfiles.rows[i];
        struct val *d;
        unsigned step = u8(in) % 4;
        char name[8];
        uint64_t rec = 1 + u8(in) % nrec, v[2 * PCR_MAX_CHUNKS], size = 0;
        const struct recfile *r;
        unsigned kind = u8(in) & 1 ? PCR_KIND_JPEG : PCR_KIND_VERBATIM, nchunks;

        if (step == 3 && dir < ndirs) { /* move on to a later directory */
            uint8_t b = u8(in);
            dir += 1 + b % (ndirs - dir);
            idx = 0;
            prefix = b & 128 ? 'd' : 'f';
        }
        d = tdirs.rows[dir - 1];
        if (d[D_NFILES].i == 0)
            set_int(&d[D_FFILE], i + 1);
        set_int(&d[D_NFILES], d[D_NFILES].i + 1);

        r = rec_for_name((const char *)trecs.rows[rec - 1][R_NAME].b);
        nchunks = kind == PCR_KIND_JPEG ? 1 + u8(in) % r->ngroups : 1;
        uint8_t sums[4 * PCR_MAX_CHUNKS], bytes[256];
        size_t nsums = 0;
        for (unsigned c = 0; c < nchunks; c++) {
            uint64_t gs = r->goff[c + 1] - r->goff[c];
            v[2 * c] = u8(in) % (gs + 1);
            v[2 * c + 1] = u8(in) % (gs - v[2 * c] + 1);
            size += v[2 * c + 1];
            /* format 2: the checksum of each chunk (groups are < 256 bytes: one block) */
            for (uint64_t o = 0; o < v[2 * c + 1]; o++)
                bytes[o] = rec_byte(r, r->goff[c] + v[2 * c] + o);
            nsums += pcr_sums_put(bytes, v[2 * c + 1], sums + nsums);
        }
        snprintf(name, sizeof(name), "%c%02u", prefix, idx++);
        set_int(&row[F_ID], i + 1);
        set_int(&row[F_DIR], dir);
        set_bytes(&row[F_NAME], V_BLOB, name, 3);
        set_int(&row[F_KIND], kind);
        set_int(&row[F_RECORD], (int64_t)rec);
        set_int(&row[F_SLOT], i);
        set_int(&row[F_NCHUNKS], nchunks);
        set_varints(&row[F_CHUNKS], v, 2 * nchunks);
        set_int(&row[F_SIZE], (int64_t)(size + (kind == PCR_KIND_JPEG ? 2 : 0)));
        set_int(&row[F_WIDTH], 8);
        set_int(&row[F_HEIGHT], 8);
        set_int(&row[F_COMPONENTS], 3);
        set_int(&row[F_SRC_SIZE], (int64_t)size);
        set_int(&row[F_CHECKSUM], 0);
        if (kind == PCR_KIND_VERBATIM)
            set_bytes(&row[F_NOTE], V_TEXT, "not a JPEG", 10);
        else
            row[F_NOTE].t = V_NULL;
        set_int(&row[F_TRAILER], 0);
        set_bytes(&row[F_SUMS], V_BLOB, sums, nsums);
        /* format 2: half the JPEGs carry a quality table, its values anywhere in u16
         * (above 60000 the row must be refused) */
        uint8_t q[2 * PCR_MAX_LEVELS];
        unsigned nq = kind == PCR_KIND_JPEG && (u8(in) & 1) ? qlen : 0;
        for (unsigned k = 0; k < nq; k++)
            q[k] = u8(in);
        set_bytes(&row[F_QUALITY], V_BLOB, q, nq);
    }
}

/* One corruption: a column set to a hostile value, a row deleted, or a row duplicated. */
static void corrupt(struct in *in)
{
    struct table *tabs[3] = {&tdirs, &trecs, &tfiles};
    struct table *t = tabs[u8(in) % 3];
    uint8_t op = u8(in);
    unsigned r;

    if (t->nrows == 0)
        return;
    r = u8(in) % t->nrows;
    if (op < 224) {
        gen_value(in, &t->rows[r][op % t->ncol]);
    } else if (op < 240) {
        memmove(&t->rows[r], &t->rows[r + 1], (t->nrows - r - 1) * sizeof(t->rows[0]));
        t->nrows--;
    } else if (t->nrows < MAX_ROWS) {
        memcpy(&t->rows[t->nrows++], &t->rows[r], sizeof(t->rows[0]));
        if (op & 1) /* the copy under another name */
            gen_value(in, &t->rows[t->nrows - 1][t == &tfiles  ? F_NAME
                                                 : t == &tdirs ? D_NAME
                                                               : R_NAME]);
    }
}

/* ---- exercising the store ---- */

static int log_lines;

static void log_hook(enum pcr_log_level level, const char *msg, void *ctx)
{
    (void)level;
    (void)ctx;
    for (const char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            TRAP("log line with a control character: %s", msg);
    log_lines++;
}

static uint32_t rng;
static uint32_t next_rnd(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

/* The quality table (pcrfs(5)): all levels below the top or none; values in [0, 1];
 * pcr_file_level_for() the lowest level reaching a threshold, else the top. */
static void check_quality(const struct pcr_file *f, const struct pcr_file_info *info,
                          unsigned levels)
{
    double q[PCR_MAX_LEVELS + 2], v;
    bool has = pcr_file_quality(f, 1, &v) == 0;

    if (pcr_file_quality(f, 0, &v) != -EINVAL)
        TRAP("quality of level 0");
    if (has && info->kind != PCR_KIND_JPEG)
        TRAP("file %llu: a quality table on a file of kind %d", (unsigned long long)info->id,
             (int)info->kind);
    for (unsigned k = 1; k <= levels + 1; k++) {
        int rc = pcr_file_quality(f, k, &q[k]);
        if (has ? rc != 0 || !(q[k] >= 0 && q[k] <= 1) || (k >= levels && q[k] != 1.0)
                : rc != -ENOENT)
            TRAP("file %llu level %u: quality %d %g", (unsigned long long)info->id, k, rc, q[k]);
    }
    for (int i = 0; i < 4; i++) {
        double t = i == 0 ? 1.0 : (double)(next_rnd() % 60001) / 60000;
        unsigned want = levels, got = pcr_file_level_for(f, t);
        for (unsigned k = 1; has && k < levels; k++)
            if (q[k] >= t) {
                want = k;
                break;
            }
        if (got != want)
            TRAP("file %llu: level for %g is %u, want %u", (unsigned long long)info->id, t, got,
                 want);
    }
}

static void read_file(struct pcr_store *s, const struct pcr_file *f)
{
    unsigned levels = pcr_store_levels(s);
    uint8_t *prev = NULL;
    size_t prevlen = 0;
    struct pcr_file_info info;

    pcr_file_info(f, &info);
    if (info.nchunks < 1 || info.nchunks > PCR_MAX_CHUNKS)
        TRAP("file %llu has %u chunks", (unsigned long long)info.id, info.nchunks);
    uint64_t sum = info.kind == PCR_KIND_JPEG ? 2 : 0;
    for (unsigned i = 0; i < info.nchunks; i++)
        sum += pcr_file_chunk_len(f, i);
    if (sum != pcr_file_size(f, levels) || pcr_file_chunk_len(f, info.nchunks) != 0)
        TRAP("file %llu: chunk lengths disagree with its size", (unsigned long long)info.id);
    check_quality(f, &info, levels);
    {
        uint8_t b[16];
        unsigned lvl = next_rnd() % (levels + 2);
        uint64_t off = next_rnd() % (sum + 2), lsize = pcr_file_size(f, lvl);
        ssize_t n = pcr_store_read(s, f, lvl, b, sizeof(b), off);
        uint64_t avail = off < lsize ? lsize - off : 0;
        if (n < 0 ? n != -EIO : (uint64_t)n != (avail < sizeof(b) ? avail : sizeof(b)))
            TRAP("pcr_store_read returned %zd", n);
    }
    for (unsigned level = 0; level <= levels + 1; level++) {
        struct pcr_handle *h;
        uint64_t size = pcr_file_size(f, level);
        uint8_t *buf, *part;
        ssize_t n;

        if (pcr_handle_open(s, f, level, &h) != 0)
            break; /* the record is bad: every level fails alike */
        if (pcr_handle_size(h) != size)
            TRAP("handle size %llu != file size %llu", (unsigned long long)pcr_handle_size(h),
                 (unsigned long long)size);
        if (size > (1 << 16))
            TRAP("file %llu: size %llu from records of at most 1 kB", (unsigned long long)info.id,
                 (unsigned long long)size);
        buf = malloc(size ? size : 1);
        part = malloc(size + 1);
        n = pcr_handle_read(h, buf, size, 0);
        if (n == (ssize_t)size) {
            if (info.kind == PCR_KIND_JPEG &&
                (size < 2 || buf[size - 2] != 0xFF || buf[size - 1] != 0xD9))
                TRAP("level %u of a JPEG does not end with FF D9", level);
            if (prev && info.kind == PCR_KIND_JPEG &&
                (prevlen > size || memcmp(prev, buf, prevlen - 2)))
                TRAP("level %u does not extend level %u", level, level - 1);
            if (prev && info.kind == PCR_KIND_VERBATIM &&
                (prevlen != size || memcmp(prev, buf, size)))
                TRAP("a verbatim file differs between levels");
            for (int k = 0; k < 8; k++) {
                uint64_t off = next_rnd() % (size + 3), len = next_rnd() % (size + 2);
                uint64_t want = off >= size ? 0 : len < size - off ? len : size - off;
                ssize_t m = pcr_handle_read(h, part, len > size + 1 ? size + 1 : len, off);
                if (m != (ssize_t)want && m != -EIO)
                    TRAP("read(%llu, %llu) = %zd, want %llu", (unsigned long long)off,
                         (unsigned long long)len, m, (unsigned long long)want);
                if (m > 0 && memcmp(part, buf + off, (size_t)m))
                    TRAP("read at %llu differs from the whole read", (unsigned long long)off);
            }
            free(prev);
            prev = buf;
            prevlen = size;
        } else {
            if (n != -EIO)
                TRAP("read of %llu bytes returned %zd", (unsigned long long)size, n);
            free(buf);
        }
        if (pcr_handle_read(h, part, 1, size) != 0)
            TRAP("read at the end returned data");
        free(part);
        pcr_handle_close(h);
    }
    free(prev);
}

static void walk(struct pcr_store *s)
{
    uint64_t stack[MAX_ROWS * 2], visited = 0;
    unsigned sp = 0;
    static const char *absent[] = {"", ".", "..", "d00/f00", "/", "zz"};

    stack[sp++] = PCR_ROOT_DIR;
    while (sp > 0 && visited++ < 4 * MAX_ROWS) {
        uint64_t d = stack[--sp];
        struct pcr_dirinfo di;
        struct pcr_dirent de;
        struct pcr_node node;

        if (pcr_store_dir(s, d, &di) != 0)
            TRAP("listed directory %llu has no info", (unsigned long long)d);
        for (size_t i = 0; i < PCR_ARRAY_SIZE(absent); i++) {
            int r = pcr_store_lookup(s, d, absent[i], &node);
            if (r == 0 && i < 5)
                TRAP("lookup of \"%s\" succeeded", absent[i]);
        }
        for (uint64_t pos = 0; pos < 4 * MAX_ROWS; pos++) {
            int r = pcr_store_readdir(s, d, pos, &de);
            if (r == -ENOENT || r == -EIO || r == -ENOMEM)
                break;
            if (r != 0)
                TRAP("readdir returned %d", r);
            if (pcr_store_lookup(s, d, de.name, &node) != 0 || node.is_dir != de.node.is_dir ||
                node.id != de.node.id)
                TRAP("readdir lists \"%s\" which lookup does not find", de.name);
            if (!de.name[0] || !strcmp(de.name, ".") || !strcmp(de.name, "..") ||
                strchr(de.name, '/') || strlen(de.name) > 255)
                TRAP("readdir lists a bad name \"%s\"", de.name);
            if (de.node.is_dir) {
                if (pcr_store_dir(s, de.node.id, &di) != 0 || di.parent != d)
                    TRAP("subdirectory %llu has another parent", (unsigned long long)de.node.id);
                if (sp < PCR_ARRAY_SIZE(stack))
                    stack[sp++] = de.node.id;
                continue;
            }
            const struct pcr_file *f;
            struct pcr_file_info info;
            char path[4096];
            if (pcr_store_file(s, de.node.id, &f) != 0)
                TRAP("listed file %llu not found by id", (unsigned long long)de.node.id);
            pcr_file_info(f, &info);
            if (info.dir != d || strcmp(info.name, de.name))
                TRAP("file %llu: name or directory disagree", (unsigned long long)info.id);
            ssize_t len = pcr_store_path(s, info.id, path, sizeof(path));
            if (len < 0 || (size_t)len != strlen(path))
                TRAP("path of file %llu: %zd", (unsigned long long)info.id, len);
            {
                char small[6];
                ssize_t l2 = pcr_store_path(s, info.id, small, sizeof(small));
                if (l2 != (len < (ssize_t)sizeof(small) ? len : -ENAMETOOLONG) ||
                    (l2 >= 0 && strcmp(small, path)))
                    TRAP("path into a short buffer: %zd", l2);
            }
            /* resolve the path back to the same file */
            node.is_dir = true;
            node.id = PCR_ROOT_DIR;
            for (char *save, *part = strtok_r(path, "/", &save); part;
                 part = strtok_r(NULL, "/", &save))
                if (pcr_store_lookup(s, node.id, part, &node) != 0)
                    TRAP("path component %s not found", part);
            if (node.is_dir || node.id != info.id)
                TRAP("path of file %llu resolves elsewhere", (unsigned long long)info.id);
            read_file(s, f);
        }
    }
    {
        char b[8];
        ssize_t n = pcr_store_meta(s, "levels", b, sizeof(b));
        if (n < 0 || strlen(b) != (size_t)(n < 7 ? n : 7))
            TRAP("meta levels: %zd", n);
        (void)pcr_store_mtime(s);
        (void)pcr_store_nrecords(s);
    }
    /* ids just outside the ranges */
    const struct pcr_file *f;
    uint64_t nf = pcr_store_nfiles(s);
    struct pcr_dirinfo di;
    if (pcr_store_file(s, 0, &f) == 0 || pcr_store_file(s, nf + 1, &f) == 0 ||
        pcr_store_file(s, UINT64_MAX, &f) == 0)
        TRAP("a file id out of range was found");
    if (pcr_store_dir(s, 0, &di) == 0 || pcr_store_dir(s, pcr_store_ndirs(s) + 1, &di) == 0)
        TRAP("a directory id out of range was found");
    /* every id in range, listed or not: a rejected row stays rejected */
    for (uint64_t id = 1; id <= nf && id <= 4 * MAX_ROWS; id++)
        if (pcr_store_file(s, id, &f) == 0)
            read_file(s, f);
}

/* Remove the fixture: everything in it has a known name. */
static void cleanup(void)
{
    static const char *const names[] = {"000001.pcr", "000002.pcr", "000003.pcr", "000009.pcr",
                                        "link.pcr"};
    char path[400];

    for (size_t i = 0; i < PCR_ARRAY_SIZE(names); i++) {
        snprintf(path, sizeof(path), "%s/%s", recdir, names[i]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/sub", recdir);
    rmdir(path);
    snprintf(path, sizeof(path), "%s.off", recdir);
    rename(path, recdir);
    rmdir(recdir);
    unlink(idxpath);
    rmdir(store);
    rmdir(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fixture();
    atexit(cleanup);
    pcr_log_set_hook(log_hook, NULL, PCR_LOG_DEBUG);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct in in = {data, size};
    uint8_t flags = u8(&in), lv = u8(&in);
    char levels[24], err[512], path[400];
    const char *lvp = levels;
    struct pcr_store *s = NULL;
    uint64_t parent[MAX_DIRS + 1], cut;
    int ret;

    rng = 0x9e3779b9u;
    schema_changed = false;
    for (size_t i = 0; i < size; i++)
        rng = rng * 31 + data[i];
    log_lines = 0;

    if ((flags & 7) == 7) {
        /* the rest of the input is index.db itself: not SQLite, empty, truncated... */
        int fd;
        unlink(idxpath);
        if (in.n == 1 && in.p[0] == 'N')
            goto no_index; /* no index.db at all */
        fd = open(idxpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, in.p, in.n) != (ssize_t)in.n)
            TRAP("write index");
        close(fd);
    no_index:
        cut = 0;
    } else {
        if (lv < 240)
            snprintf(levels, sizeof(levels), "%u", 1 + lv % PCR_MAX_LEVELS);
        else if (lv == 240)
            lvp = NULL;
        else
            snprintf(levels, sizeof(levels), "%s",
                     (const char *[]){"0", "65", "abc", "", "10 ", "-1", "1e1", "99999999999", "64",
                                      "1", "10", "18446744073709551617", "0x0a", "+5",
                                      "10\n"}[lv - 241]);
        cut = gen_record9(&in);
        unsigned nrec = 1 + u8(&in) % MAX_RECS;
        unsigned ndirs = 1 + u8(&in) % MAX_DIRS;
        unsigned nfiles = u8(&in) % (MAX_FILES + 1);
        gen_records(&in, nrec);
        gen_dirs(&in, ndirs, parent);
        gen_files(&in, nfiles, ndirs, nrec, lv < 240 ? 2 * (lv % PCR_MAX_LEVELS) : 0);
        for (unsigned n = u8(&in) % 16; n > 0; n--)
            corrupt(&in);
        /* rarely: another application id or format version */
        int64_t app = flags & 16 && u8(&in) < 16 ? 0x50435247 : 0x50435246;
        int64_t ver = flags & 32 && u8(&in) < 16 ? 1 + 2 * (u8(&in) & 1) : PCR_INDEX_VERSION;
        memcpy(tables, ref_tables, sizeof(tables));
        schema_extra[0] = '\0';
        schema_changed = false;
        bool tokens = with_tokens = false;
        if (flags & 8) { /* schema mode: the token tables, then mutations */
            uint8_t m = u8(&in);
            tokens = with_tokens = m & 1;
            for (unsigned n = (m >> 1) % 6; n > 0; n--)
                mutate_schema(&in);
            schema_changed = tables_differ();
        }
        write_index(app, ver, lvp, tokens);
    }
    if (flags & 64) {
        snprintf(path, sizeof(path), "%s.off", recdir);
        rename(recdir, path);
    }

    strcpy(err, "\x01unset");
    ret = pcr_store_open(store, &s, err, sizeof(err));
    if (ret == 0 && schema_changed)
        TRAP("a schema other than pcrfs(5)'s was accepted: %s", schema_used);
    if (ret != 0) {
        if (ret > 0 || s != NULL)
            TRAP("open failed with %d but set *out", ret);
        if (err[0] == '\x01' || err[0] == '\0' || strchr(err, '\n'))
            TRAP("open failed with %d without a one-line message: \"%s\"", ret, err);
    } else {
        walk(s);
        if (cut && (flags & 128)) {
            /* the record shrinks under the open store, after its first open: reads
             * past the cut must fail with EIO, the rest keep working */
            snprintf(path, sizeof(path), "%s/%s", recdir, rec9.name);
            if (truncate(path, (off_t)(cut - 1)) != 0)
                TRAP("truncate");
            walk(s);
        }
        struct pcr_stats st;
        pcr_store_stats(s, &st);
        if (st.errors && log_lines == 0)
            TRAP("%llu errors and not one log line", (unsigned long long)st.errors);
        pcr_store_close(s);
    }
    if (flags & 64) {
        snprintf(path, sizeof(path), "%s.off", recdir);
        rename(path, recdir);
    }
    return 0;
}
