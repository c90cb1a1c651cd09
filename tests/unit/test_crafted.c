/* Unit test of the reader against crafted stores (issue #5): every index row, record
 * file and store layout a hostile or damaged store can present. Each case starts from
 * a valid store built with the writer, breaks one thing with SQL or on disk, and
 * asserts the exact outcome: the store refused at open with a message naming the
 * problem, or opened with exactly the bad entries missing (and a log line saying
 * why), or the bad record's files failing with EIO while every other file still
 * reads the right bytes at every level. Run it under ASan or valgrind: the point is
 * also that no case reads out of bounds. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sqlite3.h>
#include "pcrfs/log.h"
#include "pcrfs/store.h"
#include "pcrfs/writer.h"
#include "common/internal.h"
#include "format/index.h"
#include "format/record.h"
#include "check.h"
#include "tstore.h"

/* ---- the base store ----
 * dirs: 1 "" {a, b}, 2 "a", 3 "b" {c}, 4 "c"; three files per record, so record 1
 * holds files 1-3 (root and a/), record 2 files 4-6 (a/), record 3 files 7-8 (b/c/). */
/* Per-level MS-SSIM of files 1 (r1.JPEG) and 7 (c1.JPEG), levels 1..LEVELS-1; the
 * other JPEGs have none. Not increasing on purpose: pcr_file_level_for() must take
 * the lowest level reaching a threshold, not assume an order. 0.95 is stored as
 * exactly 57000/60000, 0.94999 rounds down below 0.95. */
static const double quality1[LEVELS - 1] = {0.5, 0.94999, 0.95, 0.9, 0.97, 0.99, 0.985, 0.999, 1.0};
static const double quality7[LEVELS - 1] = {0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95};

static struct tfile files[] = {
    {"r1.JPEG", 1, "r1.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}, quality1},
    {"r2.bin", 1, "r2.bin", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
    {"a/a1.JPEG", 2, "a1.JPEG", PCR_KIND_JPEG, 6, 0, NULL, {0}, NULL},
    {"a/a2.JPEG", 2, "a2.JPEG", PCR_KIND_JPEG, 18, 0, NULL, {0}, NULL},
    {"a/a3.JPEG", 2, "a3.JPEG", PCR_KIND_JPEG, 1, 0, NULL, {0}, NULL},
    {"a/a4.bin", 2, "a4.bin", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
    {"b/c/c1.JPEG", 4, "c1.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}, quality7},
    {"b/c/c2.bin", 4, "c2.bin", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
};
#define NFILES     (sizeof(files) / sizeof(files[0]))
#define NDIRS      4
#define PER_REC    3
#define REC_OF(id) (((id)-1) / PER_REC + 1)

static const struct pcr_dir_row base_dirs[NDIRS] = {
    {1, 1, "", 2, 2, 1, 2},
    {2, 1, "a", 0, 0, 3, 4},
    {3, 1, "b", 4, 1, 0, 0},
    {4, 3, "c", 0, 0, 7, 2},
};

static const struct tstore base_store = {base_dirs, NDIRS, files, NFILES, PER_REC, false};

enum want {
    OK,   /* listed, and every level reads the right bytes */
    GONE, /* its row was rejected: not listed, lookup and pcr_store_file fail */
    BAD,  /* listed with its size, but reads fail with EIO (its record is bad) */
};

static char tmpdir[256], base[300];

static uint32_t rnd_state = 4242;
static uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

static void make_data(void)
{
    for (size_t i = 0; i < NFILES; i++) {
        struct tfile *t = &files[i];
        size_t n = 0;
        if (t->kind == PCR_KIND_VERBATIM) {
            t->len = 50 + rnd() % 700;
            t->data = malloc(t->len);
            for (size_t k = 0; k < t->len; k++)
                t->data[k] = (uint8_t)rnd();
            continue;
        }
        t->split.nchunks = t->nchunks;
        t->data = malloc(PCR_MAX_CHUNKS * 400 + 2);
        for (unsigned c = 0; c < t->nchunks; c++) {
            size_t l = 1 + rnd() % 300;
            for (size_t k = 0; k < l; k++)
                t->data[n + k] = (uint8_t)rnd();
            n += l;
            t->split.end[c] = n;
        }
        t->data[n++] = 0xFF;
        t->data[n++] = 0xD9;
        t->len = n;
    }
}

/* ---- the log hook: every line of a case, to assert on ---- */

static char logbuf[1 << 16];
static size_t loglen;
static int log_unsafe; /* lines carrying a newline or another control character */

static void log_hook(enum pcr_log_level level, const char *msg, void *ctx)
{
    (void)ctx;
    for (const char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            fprintf(stderr, "unsafe log line: %s\n", msg);
            log_unsafe++;
            break;
        }
    int n = snprintf(logbuf + loglen, sizeof(logbuf) - loglen, "%d %s\n", (int)level, msg);
    if (n > 0 && (size_t)n < sizeof(logbuf) - loglen)
        loglen += (size_t)n;
}

static void log_reset(void)
{
    loglen = 0;
    logbuf[0] = '\0';
}

static int log_count(const char *phrase)
{
    int n = 0;
    for (const char *p = logbuf; (p = strstr(p, phrase)); p++)
        n++;
    return n;
}

/* ---- shell and SQL helpers ---- */

static void run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    CHECK(system(cmd) == 0, "command failed: %s", cmd);
}

/* A fresh copy of the base store, named after the case. */
static const char *clone(const char *name)
{
    static char path[400];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    run("rm -rf '%s' && cp -a '%s' '%s'", path, base, path);
    return path;
}

static void discard(const char *path)
{
    run("rm -rf '%s'", path);
}

static void sql(const char *store, const char *fmt, ...)
{
    char path[512], *q = malloc(1 << 16), *msg = NULL;
    sqlite3 *db = NULL;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(q, 1 << 16, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/index.db", store);
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, q, NULL, NULL, &msg);
    CHECK(rc == SQLITE_OK, "sql '%.200s': %s", q, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    sqlite3_close(db);
    free(q);
}

/* One BLOB column of one row. @return its length, or -1. */
static long sql_blob(const char *store, const char *q, uint8_t *out, size_t cap)
{
    char path[512];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long n = -1;

    snprintf(path, sizeof(path), "%s/index.db", store);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        (size_t)sqlite3_column_bytes(st, 0) <= cap) {
        n = sqlite3_column_bytes(st, 0);
        if (n)
            memcpy(out, sqlite3_column_blob(st, 0), (size_t)n);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    CHECK(n >= 0, "query %s", q);
    return n;
}

/* Hex for an SQL X'..' literal; four rotating buffers so one call can use several. */
static const char *hex(const void *p, size_t n)
{
    static char bufs[4][4096];
    static int k;
    char *b = bufs[k++ & 3];
    for (size_t i = 0; i < n && i < 2047; i++)
        sprintf(b + 2 * i, "%02X", ((const uint8_t *)p)[i]);
    b[2 * (n < 2047 ? n : 2047)] = '\0';
    return b;
}

static unsigned varints_get(const uint8_t *p, size_t len, uint64_t *v, unsigned max)
{
    unsigned n = 0;
    size_t k;
    while (len && n < max && (k = pcr_varint_get(p, len, &v[n]))) {
        p += k;
        len -= k;
        n++;
    }
    return n;
}

static size_t varints_put(const uint64_t *v, unsigned n, uint8_t *out)
{
    size_t len = 0;
    for (unsigned i = 0; i < n; i++)
        len += pcr_varint_put(out + len, v[i]);
    return len;
}

/* The group table of record @rec, decoded. */
static unsigned get_groups(const char *store, unsigned rec, uint64_t *goff)
{
    uint8_t b[1024];
    char q[128];
    snprintf(q, sizeof(q), "SELECT groups FROM records WHERE id = %u", rec);
    long n = sql_blob(store, q, b, sizeof(b));
    return n > 0 ? varints_get(b, (size_t)n, goff, PCR_MAX_CHUNKS + 2) : 0;
}

static void put_groups(const char *store, unsigned rec, const uint64_t *goff, unsigned n)
{
    uint8_t b[1024];
    size_t len = varints_put(goff, n, b);
    sql(store, "UPDATE records SET groups = X'%s' WHERE id = %u", hex(b, len), rec);
}

/* The chunk table of file @id as 2*nchunks values (offset, length, ...). */
static unsigned get_chunks(const char *store, unsigned id, uint64_t *v)
{
    uint8_t b[2048];
    char q[128];
    snprintf(q, sizeof(q), "SELECT chunks FROM files WHERE id = %u", id);
    long n = sql_blob(store, q, b, sizeof(b));
    return n > 0 ? varints_get(b, (size_t)n, v, 2 * PCR_MAX_CHUNKS + 2) : 0;
}

static void put_chunks(const char *store, unsigned id, const uint64_t *v, unsigned n)
{
    uint8_t b[2048];
    size_t len = varints_put(v, n, b);
    sql(store, "UPDATE files SET chunks = X'%s' WHERE id = %u", hex(b, len), id);
}

static void rec_path(const char *store, unsigned rec, char *out, size_t len)
{
    snprintf(out, len, "%s/records/%06u.pcr", store, rec);
}

static void xor_byte(const char *path, off_t off, uint8_t mask)
{
    uint8_t b = 0;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0 && pread(fd, &b, 1, off) == 1, "read %s", path);
    b ^= mask;
    CHECK(fd >= 0 && pwrite(fd, &b, 1, off) == 1, "patch %s", path);
    if (fd >= 0)
        close(fd);
}

static void patch_file(const char *path, off_t off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, p, n, off) == (ssize_t)n, "patch %s", path);
    if (fd >= 0)
        close(fd);
}

/* ---- opening and checking ---- */

static struct pcr_store *open_ok(const char *store, const char *label)
{
    char err[512] = "<no message>";
    struct pcr_store *s = NULL;
    int ret = pcr_store_open(store, &s, err, sizeof(err));

    CHECK(ret == 0 && s, "%s: open failed: %d %s", label, ret, err);
    return ret ? NULL : s;
}

/* The store must be refused with @want and a message containing @phrase. */
static void refused(const char *store, int want, const char *phrase, const char *label)
{
    char err[512] = "<no message>";
    struct pcr_store *s = NULL;
    int ret = pcr_store_open(store, &s, err, sizeof(err));

    CHECK(ret == want, "%s: open returned %d, want %d (%s)", label, ret, want, err);
    CHECK(strstr(err, phrase) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err, phrase);
    CHECK(ret == 0 || s == NULL, "%s: *out set on failure", label);
    if (ret == 0)
        pcr_store_close(s);
}

/* Every level of @t read through @f, whole and at random offsets, into buffers of the
 * exact size so that an overrun shows under ASan/valgrind. */
static void check_bytes(struct pcr_store *s, const struct pcr_file *f, const struct tfile *t,
                        const char *label)
{
    for (unsigned level = 1; level <= LEVELS + 1; level++) {
        size_t elen;
        uint8_t *e = tstore_expected(t, level, &elen), *buf = malloc(elen + 1);
        ssize_t n;

        CHECK(pcr_file_size(f, level) == elen, "%s: %s level %u size %llu want %zu", label, t->path,
              level, (unsigned long long)pcr_file_size(f, level), elen);
        n = pcr_store_read(s, f, level, buf, elen, 0);
        CHECK(n == (ssize_t)elen && !memcmp(buf, e, elen), "%s: %s level %u: read %zd", label,
              t->path, level, n);
        for (int k = 0; k < 10; k++) {
            size_t off = rnd() % (elen + 3), len = rnd() % (elen + 1);
            size_t want = off >= elen ? 0 : (len < elen - off ? len : elen - off);
            n = pcr_store_read(s, f, level, buf, len > elen + 1 ? elen + 1 : len, off);
            CHECK(n == (ssize_t)want && (want == 0 || !memcmp(buf, e + off, want)),
                  "%s: %s level %u off %zu len %zu: %zd", label, t->path, level, off, len, n);
        }
        free(buf);
        free(e);
    }
}

/* The whole tree against @want: present/absent, names, paths, sizes, bytes or EIO,
 * and readdir listing exactly the present entries, each found again by lookup. */
static void check_store(struct pcr_store *s, const enum want want[NFILES], const char *label)
{
    char pbuf[512];
    uint64_t nlisted[NDIRS + 1] = {0};

    for (size_t i = 0; i < NFILES; i++) {
        const struct tfile *t = &files[i];
        const struct pcr_file *f = NULL;
        struct pcr_node node;
        int ret = tstore_resolve(s, t->path, &node);

        if (want[i] == GONE) {
            CHECK(ret == -ENOENT, "%s: %s should be gone: %d", label, t->path, ret);
            CHECK(pcr_store_file(s, i + 1, &f) == -ENOENT, "%s: file %zu should be gone", label,
                  i + 1);
            continue;
        }
        nlisted[t->dir]++;
        CHECK(ret == 0 && !node.is_dir && node.id == i + 1, "%s: lookup %s: %d", label, t->path,
              ret);
        ret = pcr_store_file(s, i + 1, &f);
        CHECK(ret == 0, "%s: file %zu: %d", label, i + 1, ret);
        if (ret)
            continue;
        struct pcr_file_info info;
        pcr_file_info(f, &info);
        CHECK(!strcmp(info.name, t->name) && info.dir == t->dir, "%s: file %zu is %s", label, i + 1,
              info.name);
        CHECK(pcr_store_path(s, i + 1, pbuf, sizeof(pbuf)) == (ssize_t)strlen(t->path) &&
                  !strcmp(pbuf, t->path),
              "%s: path of %s", label, t->path);
        if (want[i] == OK) {
            check_bytes(s, f, t, label);
        } else {
            uint8_t buf[16];
            CHECK(pcr_file_size(f, LEVELS) == t->len, "%s: %s size from the index", label, t->path);
            CHECK(pcr_store_read(s, f, 1, buf, sizeof(buf), 0) == -EIO &&
                      pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0) == -EIO,
                  "%s: %s should fail with EIO", label, t->path);
        }
    }
    for (uint64_t d = 1; d <= NDIRS; d++) {
        struct pcr_dirent de;
        uint64_t pos = 0, nsub = base_dirs[d - 1].nsubdirs;
        for (; pcr_store_readdir(s, d, pos, &de) == 0; pos++) {
            struct pcr_node n;
            CHECK(pcr_store_lookup(s, d, de.name, &n) == 0 && n.is_dir == de.node.is_dir &&
                      n.id == de.node.id,
                  "%s: readdir entry %s of %llu not found by lookup", label, de.name,
                  (unsigned long long)d);
        }
        CHECK(pos == nsub + nlisted[d], "%s: directory %llu lists %llu entries, want %llu", label,
              (unsigned long long)d, (unsigned long long)pos,
              (unsigned long long)(nsub + nlisted[d]));
    }
}

static void want_all(enum want w[NFILES], enum want v)
{
    for (size_t i = 0; i < NFILES; i++)
        w[i] = v;
}

/* ---- A: the whole store is refused ---- */

struct refusal {
    const char *label;
    const char *sql; /* run on a clone of the base store */
    int ret;
    const char *phrase;
};

static const struct refusal refusals[] = {
    {"app-id-foreign", "PRAGMA application_id = 305419896", -EINVAL, "not a pcrfs index"},
    {"app-id-zero", "PRAGMA application_id = 0", -EINVAL, "not a pcrfs index"},
    {"version-3", "PRAGMA user_version = 3", -ENOTSUP, "store format version 3"},
    {"version-1", "PRAGMA user_version = 1", -ENOTSUP, "store format version 1"},
    {"version-0", "PRAGMA user_version = 0", -ENOTSUP, "store format version 0"},
    {"version-neg", "PRAGMA user_version = -1", -ENOTSUP, "store format version -1"},
    {"no-dirs-table", "DROP TABLE dirs", -EINVAL, "index.db: has no table dirs"},
    {"no-files-table", "DROP TABLE files", -EINVAL, "index.db: has no table files"},
    {"no-records-table", "DROP TABLE records", -EINVAL, "index.db: has no table records"},
    {"no-meta-table", "DROP TABLE meta", -EINVAL, "index.db: has no table meta"},
    {"files-column-renamed", "ALTER TABLE files RENAME COLUMN chunks TO c", -EINVAL,
     "index.db: table files: column 8 is c BLOB, want chunks BLOB"},
    {"levels-missing", "DELETE FROM meta WHERE key = 'levels'", -EINVAL, "no valid level count"},
    {"levels-0", "UPDATE meta SET value = '0' WHERE key = 'levels'", -EINVAL,
     "no valid level count"},
    {"levels-65", "UPDATE meta SET value = '65' WHERE key = 'levels'", -EINVAL,
     "no valid level count"},
    {"levels-neg", "UPDATE meta SET value = '-1' WHERE key = 'levels'", -EINVAL,
     "no valid level count"},
    {"levels-text", "UPDATE meta SET value = '10 scans' WHERE key = 'levels'", -EINVAL,
     "no valid level count"},
    {"levels-huge", "UPDATE meta SET value = '18446744073709551617' WHERE key = 'levels'", -EINVAL,
     "no valid level count"},
    {"dirs-empty", "DELETE FROM dirs", -EINVAL, "an empty directory table"},
    {"dir-id-huge", "UPDATE dirs SET id = 1099511627777 WHERE id = 4", -EINVAL,
     "an oversized directory table"},
    {"dir-ids-gap", "UPDATE dirs SET id = 7 WHERE id = 4", -EINVAL, "not contiguous"},
    /* one sparse id must cost neither a huge allocation nor a message-less failure */
    {"dir-id-2^40", "UPDATE dirs SET id = 1099511627776 WHERE id = 4", -EINVAL,
     "directory ids are not contiguous"},
    {"record-ids-gap", "UPDATE records SET id = 100000 WHERE id = 3", -EINVAL,
     "record ids are not contiguous"},
    {"record-id-2^32", "UPDATE records SET id = 4294967296 WHERE id = 3", -EINVAL,
     "record ids are not contiguous"},
    /* a directory that is its own ancestor, directly or through a cycle */
    {"dir-own-parent", "UPDATE dirs SET parent = 2 WHERE id = 2", -EINVAL, "a loop?"},
    {"dir-own-parent-leaf", "UPDATE dirs SET parent = 4 WHERE id = 4", -EINVAL, "a loop?"},
    {"dir-cycle", "UPDATE dirs SET parent = 4 WHERE id = 3", -EINVAL, "a loop?"},
    {"dir-parent-later", "UPDATE dirs SET parent = 4 WHERE id = 2", -EINVAL, "a loop?"},
    {"dir-parent-0", "UPDATE dirs SET parent = 0 WHERE id = 4", -EINVAL, "negative or huge counts"},
    {"dir-parent-neg", "UPDATE dirs SET parent = -3 WHERE id = 4", -EINVAL,
     "negative or huge counts"},
    {"dir-parent-huge", "UPDATE dirs SET parent = 9223372036854775807 WHERE id = 4", -EINVAL,
     "a loop?"},
    {"dir-nsubdirs-neg", "UPDATE dirs SET nsubdirs = -1 WHERE id = 1", -EINVAL,
     "negative or huge counts"},
    {"dir-nsubdirs-huge", "UPDATE dirs SET nsubdirs = 4611686018427387904 WHERE id = 1", -EINVAL,
     "negative or huge counts"},
    {"dir-nfiles-neg", "UPDATE dirs SET nfiles = -2 WHERE id = 2", -EINVAL,
     "negative or huge counts"},
    {"dir-nfiles-huge", "UPDATE dirs SET nfiles = 4611686018427387904 WHERE id = 2", -EINVAL,
     "negative or huge counts"},
    {"dir-nfiles-int-min", "UPDATE dirs SET nfiles = -9223372036854775808 WHERE id = 2", -EINVAL,
     "negative or huge counts"},
    {"dir-first-file-neg", "UPDATE dirs SET first_file = -5 WHERE id = 2", -EINVAL,
     "negative or huge counts"},
    {"dir-first-child-neg", "UPDATE dirs SET first_child = -1 WHERE id = 3", -EINVAL,
     "negative or huge counts"},
    {"root-children-past-end", "UPDATE dirs SET first_child = 10 WHERE id = 1", -EINVAL,
     "children out of range"},
    {"root-lists-itself", "UPDATE dirs SET first_child = 1 WHERE id = 1", -EINVAL,
     "children out of range"},
    {"dir-children-huge",
     "UPDATE dirs SET first_child = 9223372036854775807, nsubdirs = 2 WHERE id = 1", -EINVAL,
     "children out of range"},
    {"root-too-many-children", "UPDATE dirs SET nsubdirs = 4 WHERE id = 1", -EINVAL,
     "children out of range"},
    {"root-lists-grandchild", "UPDATE dirs SET nsubdirs = 3 WHERE id = 1", -EINVAL,
     "lists a child of another"},
    {"two-parents", "UPDATE dirs SET first_child = 2, nsubdirs = 1 WHERE id = 3", -EINVAL,
     "lists a child of another"},
    {"dir-unlisted", "UPDATE dirs SET nsubdirs = 0 WHERE id = 3", -EINVAL,
     "is not listed by its parent"},
    {"dir-names-duplicate", "UPDATE dirs SET name = X'61' WHERE id = 3", -EINVAL,
     "duplicate or unsorted subdirectory names"},
    {"dir-names-unsorted", "UPDATE dirs SET name = X'7A' WHERE id = 2", -EINVAL,
     "duplicate or unsorted subdirectory names"},
    {"dir-name-empty", "UPDATE dirs SET name = X'' WHERE id = 4", -EINVAL, "'/'-containing name"},
    {"dir-name-dot", "UPDATE dirs SET name = CAST('.' AS BLOB) WHERE id = 4", -EINVAL,
     "'/'-containing name"},
    {"dir-name-dotdot", "UPDATE dirs SET name = CAST('..' AS BLOB) WHERE id = 4", -EINVAL,
     "'/'-containing name"},
    {"dir-name-slash", "UPDATE dirs SET name = CAST('x/y' AS BLOB) WHERE id = 4", -EINVAL,
     "'/'-containing name"},
    {"dir-name-abs", "UPDATE dirs SET name = CAST('/etc' AS BLOB) WHERE id = 4", -EINVAL,
     "'/'-containing name"},
    {"dir-name-nul", "UPDATE dirs SET name = X'630064' WHERE id = 4", -EINVAL,
     "'/'-containing name"},
    {"dir-name-256", "UPDATE dirs SET name = CAST(printf('%.256c', 'x') AS BLOB) WHERE id = 4",
     -EINVAL, "'/'-containing name"},
    /* values of another type than their column's: refused before any rule sees them
     * (SQLite would convert them: 0 to "0", '5' to 5) */
    {"dir-name-int", "UPDATE dirs SET name = 0 WHERE id = 3", -EINVAL,
     "table dirs: row 3: column name holds INTEGER, want BLOB"},
    {"dir-name-text", "UPDATE dirs SET name = 'c' WHERE id = 4", -EINVAL,
     "table dirs: row 4: column name holds TEXT, want BLOB"},
    {"dir-parent-text", "UPDATE dirs SET parent = '3x' WHERE id = 4", -EINVAL,
     "table dirs: row 4: column parent holds TEXT, want INTEGER"},
    {"dir-nfiles-real", "UPDATE dirs SET nfiles = 2.5 WHERE id = 4", -EINVAL,
     "table dirs: row 4: column nfiles holds REAL, want INTEGER"},
    {"dir-first-file-blob", "UPDATE dirs SET first_file = X'07' WHERE id = 4", -EINVAL,
     "table dirs: row 4: column first_file holds BLOB, want INTEGER"},
    {"record-name-blob", "UPDATE records SET name = CAST(name AS BLOB) WHERE id = 2", -EINVAL,
     "table records: row 2: column name holds BLOB, want TEXT"},
    {"record-size-text", "UPDATE records SET size = 'big' WHERE id = 1", -EINVAL,
     "table records: row 1: column size holds TEXT, want INTEGER"},
    {"root-named", "UPDATE dirs SET name = CAST('r' AS BLOB) WHERE id = 1", -EINVAL,
     "root directory row is malformed"},
    {"root-parent-2", "UPDATE dirs SET parent = 2 WHERE id = 1", -EINVAL,
     "root directory row is malformed"},
    {"files-overlap-dirs", "UPDATE dirs SET first_file = 5 WHERE id = 4", -EINVAL,
     "overlaps another or runs past"},
    {"files-overlap-root", "UPDATE dirs SET first_file = 2 WHERE id = 2", -EINVAL,
     "overlaps another or runs past"},
    {"files-past-end", "UPDATE dirs SET nfiles = 3 WHERE id = 4", -EINVAL,
     "overlaps another or runs past"},
    {"files-from-0", "UPDATE dirs SET first_file = 0 WHERE id = 1", -EINVAL,
     "overlaps another or runs past"},
    {"files-huge-start", "UPDATE dirs SET first_file = 9223372036854775807 WHERE id = 4", -EINVAL,
     "overlaps another or runs past"},
    {"file-id-huge", "UPDATE files SET id = 2199023255552 WHERE id = 8", -EINVAL, "file table"},
    {"record-id-huge", "UPDATE records SET id = 8589934592 WHERE id = 3", -EINVAL, "record table"},
    /* Rows the writer never makes but SQLite accepts: ids 0 and negative. The store is
     * refused with a message (never an empty or stale one). */
    {"dir-id-0", "INSERT INTO dirs VALUES (0, 1, X'7A', 0, 0, 0, 0)", -EINVAL,
     "directory ids are not contiguous"},
    {"dir-id-neg", "INSERT INTO dirs VALUES (-7, 1, X'7A', 0, 0, 0, 0)", -EINVAL,
     "directory ids are not contiguous"},
    {"record-id-0",
     "INSERT INTO records SELECT 0, name, size, nimages, groups FROM records WHERE id = 1", -EINVAL,
     "record ids are not contiguous"},
    {"record-id-neg",
     "INSERT INTO records SELECT -5, name, size, nimages, groups FROM records WHERE id = 1",
     -EINVAL, "record ids are not contiguous"},
};

static void test_refusals(void)
{
    for (size_t i = 0; i < PCR_ARRAY_SIZE(refusals); i++) {
        const struct refusal *r = &refusals[i];
        const char *p = clone(r->label);
        sql(p, "%s", r->sql);
        refused(p, r->ret, r->phrase, r->label);
        discard(p);
    }
}

/* Stores that are not stores at all, or whose pieces are of the wrong type. */
static void test_not_a_store(void)
{
    char path[600];
    const char *p;
    FILE *fp;

    p = clone("index-empty");
    snprintf(path, sizeof(path), "%s/index.db", p);
    CHECK(truncate(path, 0) == 0, "truncate");
    refused(p, -EINVAL, "not a pcrfs index", "index-empty");
    discard(p);

    p = clone("index-text");
    snprintf(path, sizeof(path), "%s/index.db", p);
    fp = fopen(path, "w");
    for (int i = 0; fp && i < 500; i++)
        fputs("this is not an SQLite database, it is a text file\n", fp);
    if (fp)
        fclose(fp);
    refused(p, -EINVAL, "not a pcrfs index", "index-text");
    discard(p);

    /* the SQLite header survives but every page after it is garbage */
    p = clone("index-garbled");
    snprintf(path, sizeof(path), "%s/index.db", p);
    {
        struct stat sb;
        uint8_t junk[4096];
        memset(junk, 0xA5, sizeof(junk));
        CHECK(stat(path, &sb) == 0, "stat");
        for (off_t off = 4096; off < sb.st_size; off += (off_t)sizeof(junk))
            patch_file(path, off, junk, sizeof(junk));
    }
    {
        char err[512] = "<no message>";
        struct pcr_store *s = NULL;
        int ret = pcr_store_open(p, &s, err, sizeof(err));
        CHECK(ret == -EINVAL && strstr(err, "index"), "index-garbled: %d %s", ret, err);
        if (!ret)
            pcr_store_close(s);
    }
    discard(p);

    p = clone("index-is-dir");
    snprintf(path, sizeof(path), "%s/index.db", p);
    CHECK(unlink(path) == 0 && mkdir(path, 0755) == 0, "index-is-dir setup");
    refused(p, -EINVAL, "not a regular file", "index-is-dir");
    discard(p);

    p = clone("no-index");
    snprintf(path, sizeof(path), "%s/index.db", p);
    CHECK(unlink(path) == 0, "unlink");
    refused(p, -ENOENT, "no index.db", "no-index");
    discard(p);

    snprintf(path, sizeof(path), "%s/does-not-exist", tmpdir);
    refused(path, -ENOENT, "No such file or directory", "no-such-path");

    snprintf(path, sizeof(path), "%s/plain-file", tmpdir);
    fp = fopen(path, "w");
    if (fp)
        fclose(fp);
    refused(path, -ENOTDIR, "Not a directory", "store-is-a-file");
    unlink(path);

    p = clone("no-records-dir");
    run("rm -rf '%s/records'", p);
    refused(p, -ENOENT, "records", "no-records-dir");
    discard(p);

    p = clone("records-is-file");
    run("rm -rf '%s/records' && touch '%s/records'", p, p);
    refused(p, -ENOTDIR, "records", "records-is-file");
    discard(p);
}

/* A dirs table without a primary key (typeless columns, no uniqueness): a duplicate
 * id would leave a hole in the numbering. Refused for its schema before any row is
 * read. */
static void test_loose_dirs(void)
{
    const char *p = clone("loose-dirs");
    sql(p, "CREATE TABLE d2(id, parent, name, first_child, nsubdirs, first_file, nfiles);"
           "INSERT INTO d2 VALUES (1, 1, X'', 2, 1, 1, 2), (2, 1, X'61', 0, 0, 3, 4),"
           " (2, 1, X'61', 0, 0, 3, 4), (4, 2, X'7A', 0, 0, 0, 0);"
           "DROP TABLE dirs; ALTER TABLE d2 RENAME TO dirs;");
    refused(p, -EINVAL, "index.db: table dirs: column 1 is id (no type), want id INTEGER",
            "loose-dirs-duplicate-id");
    discard(p);

    p = clone("loose-dirs-text-id");
    sql(p, "CREATE TABLE d2(id, parent, name, first_child, nsubdirs, first_file, nfiles);"
           "INSERT INTO d2 SELECT * FROM dirs; INSERT INTO d2 VALUES ('x', 1, X'7A', 0, 0, 0, 0);"
           "DROP TABLE dirs; ALTER TABLE d2 RENAME TO dirs;");
    refused(p, -EINVAL, "index.db: table dirs: column 1 is id (no type), want id INTEGER",
            "loose-dirs-text-id");
    discard(p);

    p = clone("loose-records");
    sql(p, "CREATE TABLE r2(id, name, size, nimages, groups); INSERT INTO r2 SELECT * FROM records;"
           " INSERT INTO r2 SELECT * FROM records WHERE id = 2;"
           "DROP TABLE records; ALTER TABLE r2 RENAME TO records;");
    refused(p, -EINVAL, "index.db: table records: column 1 is id (no type), want id INTEGER",
            "loose-records-duplicate-id");
    discard(p);
}

/* ---- B: one record is bad; only its files fail ---- */

static void expect_record_bad(const char *p, unsigned rec, const char *open_phrase,
                              const char *read_phrase, const char *label)
{
    enum want w[NFILES];
    struct pcr_store *s;

    log_reset();
    s = open_ok(p, label);
    if (!s)
        return;
    if (open_phrase)
        CHECK(log_count(open_phrase) == 1, "%s: log lacks \"%s\": %s", label, open_phrase, logbuf);
    for (size_t i = 0; i < NFILES; i++)
        w[i] = REC_OF(i + 1) == rec ? BAD : OK;
    check_store(s, w, label);
    if (read_phrase)
        CHECK(log_count(read_phrase) == 1, "%s: want one log line \"%s\": %s", label, read_phrase,
              logbuf);
    struct pcr_stats st;
    pcr_store_stats(s, &st);
    CHECK(st.errors > 0, "%s: errors not counted", label);
    pcr_store_close(s);
}

static void test_group_tables(void)
{
    uint64_t g[PCR_MAX_CHUNKS + 2], size;
    unsigned n;
    const char *p;

    struct {
        const char *label;
        int how;
    } cases[] = {
        {"groups-decreasing", 0},    {"groups-past-size", 1}, {"groups-first-0", 2},
        {"groups-first-31", 3},      {"groups-trailing", 4},  {"groups-empty", 5},
        {"groups-one", 6},           {"groups-65", 7},        {"groups-huge", 8},
        {"groups-short-of-size", 9},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        p = clone(cases[c].label);
        n = get_groups(p, 2, g);
        size = n > 0 ? g[n - 1] : 0; /* n 0: the CHECK below fails, no g[-1] */
        CHECK(n == 19 && g[0] == PCR_RECORD_HDR, "record 2 has 18 groups (%u)", n);
        switch (cases[c].how) {
        case 0: /* two groups swapped: offsets decrease */
            g[5] = g[6] + 1;
            put_groups(p, 2, g, n);
            break;
        case 1:
            g[n - 1] = size + 100;
            put_groups(p, 2, g, n);
            break;
        case 2:
            g[0] = 0;
            put_groups(p, 2, g, n);
            break;
        case 3:
            g[0] = 31;
            put_groups(p, 2, g, n);
            break;
        case 4: /* a varint cut short at the end */
            sql(p, "UPDATE records SET groups = CAST(groups || X'80' AS BLOB) WHERE id = 2");
            break;
        case 5:
            sql(p, "UPDATE records SET groups = X'' WHERE id = 2");
            break;
        case 6:
            put_groups(p, 2, g, 1);
            break;
        case 7: /* 65 groups: more than any JPEG has chunks */
            for (unsigned i = 0; i <= 65; i++)
                g[i] = i < 65 ? PCR_RECORD_HDR : size;
            put_groups(p, 2, g, 66);
            break;
        case 8:
            g[3] = UINT64_MAX;
            put_groups(p, 2, g, n);
            break;
        case 9: /* the last offset is not the file size */
            g[n - 1] = size - 1;
            put_groups(p, 2, g, n);
            break;
        }
        expect_record_bad(p, 2, "has a bad group table", "its index row is invalid",
                          cases[c].label);
        discard(p);
    }

    /* a file of a record whose group table is bad is still range-checked */
    p = clone("groups-bad-chunk-huge");
    n = get_groups(p, 2, g);
    g[5] = 0;
    put_groups(p, 2, g, n);
    {
        uint64_t v[4] = {0, 1ULL << 41};
        put_chunks(p, 5, v, 2);
        sql(p, "UPDATE files SET size = %llu WHERE id = 5", (1ULL << 41) + 2);
    }
    log_reset();
    struct pcr_store *s = open_ok(p, "groups-bad-chunk-huge");
    if (s) {
        enum want w[NFILES] = {OK, OK, OK, BAD, GONE, BAD, OK, OK};
        check_store(s, w, "groups-bad-chunk-huge");
        CHECK(log_count("file 5 of directory 2 rejected: chunk length out of range") == 1,
              "groups-bad-chunk-huge log: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);
}

static void test_record_rows(void)
{
    struct {
        const char *label, *set, *open_phrase;
    } cases[] = {
        {"rec-name-dotdot", "name = '../x'", "record 2 has a bad name or size"},
        {"rec-name-abs", "name = '/etc/passwd'", "record 2 has a bad name or size"},
        {"rec-name-empty", "name = ''", "record 2 has a bad name or size"},
        {"rec-name-hidden", "name = '.000002.pcr'", "record 2 has a bad name or size"},
        {"rec-name-dot", "name = '.'", "record 2 has a bad name or size"},
        {"rec-name-slash", "name = 'records/000002.pcr'", "record 2 has a bad name or size"},
        {"rec-name-space", "name = '000002 .pcr'", "record 2 has a bad name or size"},
        {"rec-name-long", "name = printf('%.65c', 'a')", "record 2 has a bad name or size"},
        {"rec-name-nul-first", "name = CAST(X'002E2E2F78' AS TEXT)",
         "record 2 has a bad name or size"},
        /* a name that would write a second line (or a terminal escape) into the log */
        {"rec-name-newline", "name = 'x' || char(10) || 'fake: all good' || char(27) || '[2J'",
         "record 2 has a bad name or size"},
        {"rec-size-small", "size = 31", "record 2 has a bad name or size"},
        {"rec-size-neg", "size = -1", "record 2 has a bad name or size"},
        {"rec-size-huge", "size = 9223372036854775807", "record 000002.pcr has a bad group table"},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        const char *p = clone(cases[c].label);
        sql(p, "UPDATE records SET %s WHERE id = 2", cases[c].set);
        expect_record_bad(p, 2, cases[c].open_phrase, "its index row is invalid", cases[c].label);
        discard(p);
    }

    /* '../x' exists and is a perfect copy of record 2: still never opened */
    const char *p = clone("rec-escape-target");
    run("cp '%s/records/000002.pcr' '%s/x'", p, p);
    sql(p, "UPDATE records SET name = '../x' WHERE id = 2");
    expect_record_bad(p, 2, "record 2 has a bad name or size", "its index row is invalid",
                      "rec-escape-target");
    discard(p);

    /* record 2's row names record 1's file: caught by size or header */
    p = clone("rec-name-other");
    sql(p, "UPDATE records SET name = '000001.pcr' WHERE id = 2");
    expect_record_bad(p, 2, NULL, "record 000001.pcr:", "rec-name-other");
    discard(p);

    /* the index's image count disagrees with the header */
    p = clone("rec-nimages");
    sql(p, "UPDATE records SET nimages = 4 WHERE id = 2");
    expect_record_bad(p, 2, NULL, "header disagrees with the index", "rec-nimages");
    discard(p);
}

static void test_record_files(void)
{
    char rp[600], other[700];
    const char *p;
    uint8_t b[8];

    struct {
        const char *label;
        off_t off;
        uint8_t mask;
        const char *phrase;
    } hdr[] = {
        {"hdr-magic", 0, 0x20, "bad magic (not a pcrfs record)"},
        {"hdr-magic-end", 7, 0x01, "bad magic (not a pcrfs record)"},
        {"hdr-version", 8, 0x03, "header disagrees with the index"},
        {"hdr-version-high", 11, 0x80, "header disagrees with the index"},
        {"hdr-ngroups", 12, 0x01, "header disagrees with the index"},
        {"hdr-nimages", 16, 0x01, "header disagrees with the index"},
        {"hdr-size", 24, 0x01, "header disagrees with the index"},
        {"hdr-size-high", 31, 0x80, "header disagrees with the index"},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(hdr); c++) {
        p = clone(hdr[c].label);
        rec_path(p, 2, rp, sizeof(rp));
        xor_byte(rp, hdr[c].off, hdr[c].mask);
        expect_record_bad(p, 2, NULL, hdr[c].phrase, hdr[c].label);
        discard(p);
    }

    p = clone("rec-missing");
    rec_path(p, 2, rp, sizeof(rp));
    CHECK(unlink(rp) == 0, "unlink");
    expect_record_bad(p, 2, NULL, "No such file or directory", "rec-missing");
    discard(p);

    p = clone("rec-empty");
    rec_path(p, 2, rp, sizeof(rp));
    CHECK(truncate(rp, 0) == 0, "truncate");
    expect_record_bad(p, 2, NULL, "truncated", "rec-empty");
    discard(p);

    p = clone("rec-short");
    rec_path(p, 2, rp, sizeof(rp));
    CHECK(truncate(rp, 100) == 0, "truncate");
    expect_record_bad(p, 2, NULL, "truncated", "rec-short");
    discard(p);

    p = clone("rec-long");
    rec_path(p, 2, rp, sizeof(rp));
    memset(b, 0, sizeof(b));
    {
        struct stat sb;
        CHECK(stat(rp, &sb) == 0, "stat");
        patch_file(rp, sb.st_size, b, sizeof(b));
    }
    expect_record_bad(p, 2, NULL, "longer than the index says", "rec-long");
    discard(p);

    p = clone("rec-is-dir");
    rec_path(p, 2, rp, sizeof(rp));
    CHECK(unlink(rp) == 0 && mkdir(rp, 0755) == 0, "rec-is-dir setup");
    expect_record_bad(p, 2, NULL, "not a regular file", "rec-is-dir");
    discard(p);

    /* a symlink, even to a perfect copy inside records/, is not followed */
    p = clone("rec-symlink");
    rec_path(p, 2, rp, sizeof(rp));
    snprintf(other, sizeof(other), "%s/records/copy.pcr", p);
    CHECK(rename(rp, other) == 0 && symlink("copy.pcr", rp) == 0, "rec-symlink setup");
    expect_record_bad(p, 2, NULL, "record 000002.pcr: Too many levels of symbolic links",
                      "rec-symlink");
    discard(p);

    /* a FIFO must fail like any non-file, not block the reader (and its lock) forever;
     * run in a child with an alarm so a hang is a failed check, not a stuck test */
    p = clone("rec-fifo");
    rec_path(p, 2, rp, sizeof(rp));
    CHECK(unlink(rp) == 0 && mkfifo(rp, 0644) == 0, "rec-fifo setup");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct pcr_store *s;
        const struct pcr_file *f;
        uint8_t buf[16];
        alarm(5);
        log_reset();
        if (pcr_store_open(p, &s, NULL, 0) != 0 || pcr_store_file(s, 4, &f) != 0)
            _exit(3);
        ssize_t n = pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0);
        int ok = n == -EIO && log_count("record 000002.pcr: not a regular file") == 1;
        pcr_store_close(s);
        _exit(ok ? 0 : 4);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "rec-fifo: %s %d (a record that is a FIFO must give EIO, not block)",
          WIFSIGNALED(status) ? "killed by signal" : "exit status",
          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    discard(p);

    /* truncated after the store opened and after the record was checked, right after
     * scan group 0: what lies before the cut is still served, any read past it fails
     * with EIO (logged once for the record), and the other records keep serving */
    p = clone("rec-truncated-later");
    rec_path(p, 2, rp, sizeof(rp));
    uint64_t g[PCR_MAX_CHUNKS + 2];
    CHECK(get_groups(p, 2, g) == 19, "record 2 groups");
    log_reset();
    struct pcr_store *s = open_ok(p, "rec-truncated-later");
    if (s) {
        const struct pcr_file *f4;
        uint8_t buf[16384];
        size_t elen;
        CHECK(pcr_store_file(s, 4, &f4) == 0, "file 4");
        CHECK(pcr_store_read(s, f4, LEVELS, buf, sizeof(buf), 0) == (ssize_t)files[3].len,
              "read before truncation");
        CHECK(truncate(rp, (off_t)g[1]) == 0, "truncate");
        for (unsigned level = 2; level <= LEVELS; level++)
            CHECK(pcr_store_read(s, f4, level, buf, sizeof(buf), 0) == -EIO,
                  "level %u of file 4 after truncation gives EIO", level);
        uint8_t *e = tstore_expected(&files[3], 1, &elen);
        CHECK(pcr_store_read(s, f4, 1, buf, sizeof(buf), 0) == (ssize_t)elen &&
                  !memcmp(buf, e, elen),
              "level 1 of file 4 lies before the cut: still served");
        free(e);
        /* files 5 and 6 have one chunk each, in group 0: whole */
        for (size_t i = 0; i < NFILES; i++) {
            const struct pcr_file *f;
            if (i == 3)
                continue;
            CHECK(pcr_store_file(s, i + 1, &f) == 0, "file %zu", i + 1);
            check_bytes(s, f, &files[i], "rec-truncated-later");
        }
        CHECK(log_count("record 000002.pcr: truncated at offset") == 1,
              "logged once per record: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);

    /* a NUL inside the record name: the name ends there, so it cannot leave records/;
     * here what is left is the record's own name and it is served */
    p = clone("rec-name-nul-inside");
    sql(p, "UPDATE records SET name = CAST(X'3030303030322E706372002F2E2E2F78' AS TEXT)"
           " WHERE id = 2");
    log_reset();
    s = open_ok(p, "rec-name-nul-inside");
    if (s) {
        enum want w[NFILES];
        want_all(w, OK);
        check_store(s, w, "rec-name-nul-inside");
        pcr_store_close(s);
    }
    discard(p);
}

/* ---- C: one file row is bad; only that file is missing ---- */

struct rowcase {
    const char *label;
    unsigned id; /* the file whose row is changed */
    const char *set;
    const char *why;
};

static const struct rowcase rowcases[] = {
    {"name-empty", 5, "name = X''", "empty, '.', '..' or '/'-containing name"},
    {"name-dot", 8, "name = CAST('.' AS BLOB)", "empty, '.', '..' or '/'-containing name"},
    {"name-dotdot", 8, "name = CAST('..' AS BLOB)", "empty, '.', '..' or '/'-containing name"},
    {"name-slash", 5, "name = CAST('a3/x' AS BLOB)", "empty, '.', '..' or '/'-containing name"},
    {"name-abs", 1, "name = CAST('/etc/passwd' AS BLOB)",
     "empty, '.', '..' or '/'-containing name"},
    {"name-up", 8, "name = CAST('../../etc' AS BLOB)", "empty, '.', '..' or '/'-containing name"},
    {"name-nul", 5, "name = X'61330041'", "empty, '.', '..' or '/'-containing name"},
    {"name-nul-end", 5, "name = X'613300'", "empty, '.', '..' or '/'-containing name"},
    {"name-256", 6, "name = CAST(printf('%.256c', 'z') AS BLOB)",
     "empty, '.', '..' or '/'-containing name"},
    {"name-duplicate", 4, "name = CAST('a1.JPEG' AS BLOB)", "duplicate or unsorted name"},
    {"name-unsorted", 4, "name = CAST('a0' AS BLOB)", "duplicate or unsorted name"},
    {"name-shadows-dir", 1, "name = CAST('a' AS BLOB)", "same name as a subdirectory"},
    {"name-shadows-dir-b", 1, "name = CAST('b' AS BLOB)", "same name as a subdirectory"},
    {"kind-0", 3, "kind = 0", "unknown kind"},
    {"kind-3", 3, "kind = 3", "unknown kind"},
    {"kind-neg", 3, "kind = -1", "unknown kind"},
    {"nchunks-0", 3, "nchunks = 0", "chunk count out of range"},
    {"nchunks-65", 4, "nchunks = 65", "chunk count out of range"},
    {"nchunks-neg", 4, "nchunks = -1", "chunk count out of range"},
    {"nchunks-huge", 4, "nchunks = 4294967297", "chunk count out of range"},
    {"nchunks-verbatim-2", 6, "nchunks = 2", "chunk count out of range"},
    {"nchunks-fewer", 7, "nchunks = 9", "chunk table has trailing bytes"},
    {"nchunks-more", 7, "nchunks = 11", "chunk table truncated"},
    {"record-0", 3, "record = 0", "no such record"},
    {"record-past", 3, "record = 4", "no such record"},
    {"record-neg", 3, "record = -1", "no such record"},
    {"record-huge", 3, "record = 4294967297", "no such record"},
    {"chunks-empty", 6, "chunks = X''", "bad chunk table"},
    {"chunks-64k", 6, "chunks = zeroblob(70000)", "bad chunk table"},
    {"chunks-overlong-varint", 6, "chunks = X'FFFFFFFFFFFFFFFFFFFF7F00'", "chunk table truncated"},
    {"chunks-cut-varint", 6, "chunks = X'0080'", "chunk table truncated"},
    {"size-plus-1", 1, "size = size + 1", "size disagrees with its chunks"},
    {"size-minus-1", 2, "size = size - 1", "size disagrees with its chunks"},
    {"size-neg", 2, "size = -1", "size disagrees with its chunks"},
    {"size-huge", 7, "size = 9223372036854775807", "size disagrees with its chunks"},
    {"size-jpeg-no-eoi", 7, "size = size - 2", "size disagrees with its chunks"},
    {"size-verbatim-kind", 7, "kind = 2", "chunk count out of range"},
    /* the quality table: none, or one u16 per level below the top (pcrfs(5)) */
    {"quality-short", 1, "quality = substr(quality, 1, 16)",
     "quality table does not match the store's levels"},
    {"quality-long", 1, "quality = CAST(quality || X'0000' AS BLOB)",
     "quality table does not match the store's levels"},
    {"quality-odd", 7, "quality = X'00'", "quality table does not match the store's levels"},
    {"quality-added-short", 3, "quality = X'1027'",
     "quality table does not match the store's levels"},
    {"quality-huge", 3, "quality = zeroblob(70000)",
     "quality table does not match the store's levels"},
    {"quality-verbatim", 2, "quality = zeroblob(18)",
     "quality table does not match the store's levels"},
    {"quality-above-1", 7, "quality = CAST(substr(quality, 1, 16) || X'61EA' AS BLOB)",
     "quality value above 1"},
    {"quality-max-u16", 1, "quality = CAST(X'FFFF' || substr(quality, 3) AS BLOB)",
     "quality value above 1"},
    {"dir-other", 5, "dir = 1", "belongs to another directory"},
    {"dir-neg", 5, "dir = -2", "belongs to another directory"},
};

static void test_file_rows(void)
{
    for (size_t c = 0; c < PCR_ARRAY_SIZE(rowcases); c++) {
        const struct rowcase *rc = &rowcases[c];
        const char *p = clone(rc->label);
        unsigned dir = (unsigned)files[rc->id - 1].dir;
        char phrase[256], usable[128];
        enum want w[NFILES];

        sql(p, "UPDATE files SET %s WHERE id = %u", rc->set, rc->id);
        log_reset();
        struct pcr_store *s = open_ok(p, rc->label);
        if (s) {
            want_all(w, OK);
            w[rc->id - 1] = GONE;
            check_store(s, w, rc->label);
            snprintf(phrase, sizeof(phrase), "file %u of directory %u rejected: %s", rc->id, dir,
                     rc->why);
            CHECK(log_count(phrase) == 1, "%s: want log \"%s\", got: %s", rc->label, phrase,
                  logbuf);
            snprintf(usable, sizeof(usable), "directory %u: %llu of %llu files usable", dir,
                     (unsigned long long)base_dirs[dir - 1].nfiles - 1,
                     (unsigned long long)base_dirs[dir - 1].nfiles);
            CHECK(log_count(usable) == 1, "%s: want log \"%s\", got: %s", rc->label, usable,
                  logbuf);
            pcr_store_close(s);
        }
        discard(p);
    }
}

/* Chunk tables whose offsets or lengths leave their group (or the record). */
static void test_chunk_ranges(void)
{
    uint64_t g[PCR_MAX_CHUNKS + 2], v[2 * PCR_MAX_CHUNKS + 2];

    for (int how = 0; how < 8; how++) {
        static const char *labels[] = {
            "chunk-off-past-group",   "chunk-len-past-group", "chunk-off-max",
            "chunk-len-max",          "chunk-wraps",          "chunk-past-record",
            "chunk-more-than-groups", "chunk-next-group",
        };
        const char *p = clone(labels[how]);
        unsigned id = 7, n, ng; /* c1.JPEG, 10 chunks, record 3 (10 groups) */
        uint64_t gsize;

        ng = get_groups(p, 3, g) - 1;
        n = get_chunks(p, id, v);
        CHECK(n == 20 && ng == 10, "chunk table of file 7 (%u, %u)", n, ng);
        gsize = g[4] - g[3]; /* chunk 3 lies in group 3 */
        switch (how) {
        case 0:
            v[6] = gsize + 1;
            break;
        case 1:
            v[7] = gsize - v[6] + 1;
            break;
        case 2:
            v[6] = UINT64_MAX;
            break;
        case 3:
            v[7] = UINT64_MAX;
            break;
        case 4: /* offset + length wraps around to a small number */
            v[6] = 1ULL << 63;
            v[7] = 1ULL << 63;
            break;
        case 5: /* the last chunk runs past the end of the record */
            v[19] = g[ng] - g[ng - 1] - v[18] + 5;
            break;
        case 6: /* an 11th chunk: the record has only 10 groups */
            v[20] = 0;
            v[21] = 0;
            n = 22;
            sql(p, "UPDATE files SET nchunks = 11 WHERE id = %u", id);
            break;
        case 7: /* exactly the bytes of the next group: outside its own */
            v[6] = gsize;
            break;
        }
        /* keep the size consistent so only the range rule can reject the row */
        uint64_t total = 2;
        for (unsigned i = 1; i < n; i += 2)
            total += v[i];
        put_chunks(p, id, v, n);
        sql(p, "UPDATE files SET size = %lld WHERE id = %u", (long long)total, id);
        log_reset();
        struct pcr_store *s = open_ok(p, labels[how]);
        if (s) {
            enum want w[NFILES];
            want_all(w, OK);
            w[id - 1] = GONE;
            check_store(s, w, labels[how]);
            CHECK(log_count("file 7 of directory 4 rejected: chunk runs past its scan group") == 1,
                  "%s: log: %s", labels[how], logbuf);
            pcr_store_close(s);
        }
        discard(p);
    }

    /* A zero-length chunk at the very end of its group is inside it: accepted, and
     * served as nothing. */
    const char *p = clone("chunk-empty-at-end");
    get_groups(p, 3, g);
    get_chunks(p, 7, v);
    uint64_t old = v[19];
    v[18] = g[10] - g[9];
    v[19] = 0;
    put_chunks(p, 7, v, 20);
    sql(p, "UPDATE files SET size = size - %llu WHERE id = 7", (unsigned long long)old);
    /* the empty chunk has no checksum blocks: drop the old last chunk's one */
    sql(p, "UPDATE files SET sums = substr(sums, 1, length(sums) - 4) WHERE id = 7");
    log_reset();
    struct pcr_store *s = open_ok(p, "chunk-empty-at-end");
    if (s) {
        const struct pcr_file *f;
        uint8_t buf[8192];
        size_t elen;
        uint8_t *e = tstore_expected(&files[6], LEVELS, &elen);
        CHECK(pcr_store_file(s, 7, &f) == 0, "file 7 accepted");
        /* level L is chunks 0..8 + an empty chunk 9 + FF D9 */
        ssize_t nr = pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0);
        size_t want = files[6].split.end[8];
        CHECK(nr == (ssize_t)(want + 2) && !memcmp(buf, e, want) && buf[want] == 0xFF &&
                  buf[want + 1] == 0xD9,
              "empty last chunk: %zd", nr);
        free(e);
        CHECK(loglen == 0, "nothing logged: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);

    /* Two files whose chunks overlap, their block checksums copied too: the reader
     * cannot see it without loading every file of the record, and it is harmless for
     * safety (the bytes are inside the record, bounds-checked): file 6 is served file
     * 5's bytes, which its full-file checksum in the index exposes to a verifier.
     * This pins down that nothing worse happens. */
    p = clone("chunks-overlap");
    get_chunks(p, 5, v);
    put_chunks(p, 6, v, 2);
    sql(p, "UPDATE files SET size = %llu WHERE id = 6", (unsigned long long)v[1]);
    sql(p, "UPDATE files SET sums = (SELECT sums FROM files WHERE id = 5) WHERE id = 6");
    log_reset();
    s = open_ok(p, "chunks-overlap");
    if (s) {
        const struct pcr_file *f;
        uint8_t *buf = malloc(v[1]);
        CHECK(pcr_store_file(s, 6, &f) == 0, "overlapping file accepted");
        CHECK(pcr_store_read(s, f, LEVELS, buf, v[1], 0) == (ssize_t)v[1] &&
                  !memcmp(buf, files[4].data, v[1]),
              "overlapping file serves the bytes it points at");
        free(buf);
        pcr_store_close(s);
    }
    discard(p);

    /* The same overlap with file 6's own block checksums: its blocks do not match the
     * bytes it now points at, so every read of it fails with EIO (logged once), and
     * file 5 still serves. */
    p = clone("chunks-overlap-sums");
    get_chunks(p, 5, v);
    put_chunks(p, 6, v, 2);
    sql(p, "UPDATE files SET size = %llu WHERE id = 6", (unsigned long long)v[1]);
    log_reset();
    s = open_ok(p, "chunks-overlap-sums");
    if (s) {
        const struct pcr_file *f;
        uint8_t *buf = malloc(v[1]);
        CHECK(pcr_store_file(s, 6, &f) == 0, "overlapping file accepted");
        CHECK(pcr_store_read(s, f, LEVELS, buf, v[1], 0) == -EIO, "checksum mismatch: EIO");
        CHECK(pcr_store_read(s, f, LEVELS, buf, 1, 0) == -EIO, "again: EIO");
        char want[1100];
        ssize_t wn = pcr_store_path(s, 6, want, 1024);
        /* named by its path in the store, not "file 6" */
        CHECK(wn > 0 && !strchr(want, ' '), "file 6 has a path");
        snprintf(want + (wn > 0 ? wn : 0), sizeof(want) - (size_t)(wn > 0 ? wn : 0),
                 ": checksum mismatch");
        CHECK(log_count(want) == 1, "logged once by path: %s", logbuf);
        CHECK(pcr_store_file(s, 5, &f) == 0 &&
                  pcr_store_read(s, f, LEVELS, buf, v[1], 0) == (ssize_t)v[1] &&
                  !memcmp(buf, files[4].data, v[1]),
              "file 5 still served");
        free(buf);
        pcr_store_close(s);
    }
    discard(p);
}

/* Rows the writer never makes, accepted safely: harmless geometry is zeroed. */
static void test_odd_values(void)
{
    const char *p = clone("odd-values");
    sql(p, "UPDATE files SET width = -1, height = 4294967296, components = 9, src_size = -5,"
           " note = printf('%%.5000c', 'n') WHERE id = 6;"
           "UPDATE files SET note = NULL WHERE id = 2;"
           "UPDATE meta SET value = 'soon' WHERE key = 'created';");
    log_reset();
    struct pcr_store *s = open_ok(p, "odd-values");
    if (s) {
        enum want w[NFILES];
        const struct pcr_file *f;
        struct pcr_file_info info;
        want_all(w, OK);
        check_store(s, w, "odd-values");
        CHECK(pcr_store_file(s, 6, &f) == 0, "file 6");
        pcr_file_info(f, &info);
        CHECK(info.width == 0 && info.height == 0 && info.components == 0 && info.src_size == 0,
              "out-of-range geometry zeroed: %u %u %u %llu", info.width, info.height,
              info.components, (unsigned long long)info.src_size);
        CHECK(strlen(info.note) == 512, "note cut to 512 bytes: %zu", strlen(info.note));
        CHECK(pcr_store_file(s, 2, &f) == 0, "file 2");
        pcr_file_info(f, &info);
        CHECK(info.note && info.note[0] == '\0', "NULL note is \"\"");
        CHECK(pcr_store_mtime(s) == 0, "unparsable created: %lld", (long long)pcr_store_mtime(s));
        CHECK(loglen == 0, "nothing logged: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);

    /* a missing file row inside its directory's range: the rest is served */
    p = clone("file-row-missing");
    sql(p, "DELETE FROM files WHERE id = 4");
    log_reset();
    s = open_ok(p, "file-row-missing");
    if (s) {
        enum want w[NFILES];
        want_all(w, OK);
        w[3] = GONE;
        check_store(s, w, "file-row-missing");
        CHECK(log_count("directory 2: 3 of 4 files usable") == 1, "log: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);

    /* a 255-byte directory name is legal */
    p = clone("dir-name-255");
    sql(p, "UPDATE dirs SET name = CAST(printf('%%.255c', 'z') AS BLOB) WHERE id = 4");
    s = open_ok(p, "dir-name-255");
    if (s) {
        char path[600], want[600], z[256];
        struct pcr_node n;
        memset(z, 'z', 255);
        z[255] = '\0';
        snprintf(path, sizeof(path), "b/%s/c1.JPEG", z);
        CHECK(tstore_resolve(s, path, &n) == 0 && n.id == 7, "lookup through a 255-byte name");
        CHECK(pcr_store_path(s, 7, want, sizeof(want)) == (ssize_t)strlen(path) &&
                  !strcmp(want, path),
              "path through a 255-byte name");
        CHECK(pcr_store_path(s, 7, want, 100) == -ENAMETOOLONG, "short buffer");
        pcr_store_close(s);
    }
    discard(p);
}

/* A directory whose range claims 2^39 files but holds two rows: served, and its
 * loading costs memory for the two rows, not for the claim. */
static void test_sparse_files(void)
{
    const char *p = clone("files-sparse");
    sql(p, "UPDATE files SET id = 549755813888 WHERE id = 8;"
           "UPDATE dirs SET nfiles = 549755813888 - 6 WHERE id = 4;");
    log_reset();
    struct pcr_store *s = open_ok(p, "files-sparse");
    if (s) {
        struct pcr_node n;
        const struct pcr_file *f;
        struct pcr_dirent de;
        char buf[64];
        CHECK(pcr_store_nfiles(s) == 549755813888ULL, "nfiles");
        CHECK(tstore_resolve(s, "b/c/c2.bin", &n) == 0 && n.id == 549755813888ULL, "lookup c2.bin");
        CHECK(pcr_store_file(s, 549755813888ULL, &f) == 0, "file 2^39");
        if (pcr_store_file(s, 549755813888ULL, &f) == 0)
            check_bytes(s, f, &files[7], "files-sparse");
        CHECK(pcr_store_file(s, 7, &f) == 0, "file 7");
        if (pcr_store_file(s, 7, &f) == 0)
            check_bytes(s, f, &files[6], "files-sparse");
        CHECK(pcr_store_file(s, 8, &f) == -ENOENT && pcr_store_file(s, 1ULL << 38, &f) == -ENOENT,
              "ids in the gap");
        CHECK(pcr_store_readdir(s, 4, 1, &de) == 0 && !strcmp(de.name, "c2.bin") &&
                  pcr_store_readdir(s, 4, 2, &de) == -ENOENT,
              "readdir of the sparse directory");
        CHECK(pcr_store_path(s, 549755813888ULL, buf, sizeof(buf)) == 10 &&
                  !strcmp(buf, "b/c/c2.bin"),
              "path");
        CHECK(log_count("directory 4: 2 of 549755813882 files usable") == 1, "log: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);
}

/* A files table without a primary key holding the same id twice (one file id must
 * never stand for two entries: the FUSE layer derives inode numbers from it):
 * refused for its schema (CREATE TABLE AS declares id INT). */
static void test_loose_files(void)
{
    const char *p = clone("loose-files");
    sql(p, "CREATE TABLE f2 AS SELECT * FROM files;"
           "INSERT INTO f2 SELECT id, dir, CAST('a1x.JPEG' AS BLOB), kind, record, slot, nchunks,"
           " chunks, size, width, height, components, src_size, checksum, note, trailer, sums,"
           " quality FROM files WHERE id = 3;"
           "DROP TABLE files; ALTER TABLE f2 RENAME TO files;");
    refused(p, -EINVAL, "index.db: table files: column 1 is id INT, want id INTEGER",
            "loose-files");
    discard(p);
}

/* ---- D: schemas other than pcrfs(5)'s ----
 * A view, a generated column or a trigger runs SQL of the index's choosing; a column
 * declared with another type lets values through that compare unlike integers. Each
 * such store is refused at open, within seconds (a view over an unbounded recursive
 * query made the reader spin forever before the schema was checked): every case runs
 * under alarm(), so a regression fails here instead of hanging the suite. */

static const char *alarm_label = "";

static void on_alarm(int sig)
{
    static const char msg[] = "FAIL test_crafted: a case did not finish in time: ";
    (void)sig;
    if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, alarm_label, strlen(alarm_label)) < 0 ||
        write(2, "\n", 1) < 0)
        _exit(3);
    _exit(3);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* refused(), and within 5 s (alarm after 30). */
static void refused_soon(const char *store, int want, const char *phrase, const char *label)
{
    double t0 = now_s();

    alarm_label = label;
    alarm(30);
    refused(store, want, phrase, label);
    alarm(0);
    CHECK(now_s() - t0 < 5.0, "%s: refusal took %.1f s", label, now_s() - t0);
}

/* Recreate @table from its own CREATE statement with @from replaced by @to, copying
 * the rows (columns @cols, or all). */
static void recreate(const char *store, const char *table, const char *from, const char *to,
                     const char *cols)
{
    char q[256], def[4096], head[64], *at, *out = malloc(8192);
    uint8_t raw[4096];
    long n;

    snprintf(q, sizeof(q), "SELECT sql FROM sqlite_schema WHERE name = '%s'", table);
    n = sql_blob(store, q, raw, sizeof(raw) - 1);
    memcpy(def, raw, n > 0 ? (size_t)n : 0);
    def[n > 0 ? n : 0] = '\0';
    snprintf(head, sizeof(head), "CREATE TABLE %s(", table);
    at = strstr(def, from);
    CHECK(at && !strncmp(def, head, strlen(head)), "%s: no \"%s\" in %s", table, from, def);
    if (!at || strncmp(def, head, strlen(head)) != 0) {
        free(out);
        return;
    }
    snprintf(out, 8192, "CREATE TABLE %s_new(%.*s%s%s;", table, (int)(at - def - strlen(head)),
             def + strlen(head), to, at + strlen(from));
    sql(store,
        "%s INSERT INTO %s_new%s%s%s SELECT %s FROM %s; DROP TABLE %s;"
        " ALTER TABLE %s_new RENAME TO %s;",
        out, table, cols ? "(" : "", cols ? cols : "", cols ? ")" : "", cols ? cols : "*", table,
        table, table, table);
    free(out);
}

#define FILES_NO_NOTE                                                                              \
    "id, dir, name, kind, record, slot, nchunks, chunks, size, width, height, components,"         \
    " src_size, checksum, trailer, sums, quality"
#define RECURSIVE "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n)"
#define FILES_ROW                                                                                  \
    " 1 AS dir, CAST('x' AS BLOB) AS name, 2 AS kind, 1 AS record, 0 AS slot, 1 AS nchunks,"       \
    " X'0000' AS chunks, 0 AS size, 0 AS width, 0 AS height, 0 AS components, 0 AS src_size,"      \
    " 0 AS checksum, NULL AS note, 0 AS trailer, X'' AS sums, X'' AS quality"

struct schemacase {
    const char *label;
    const char *sql; /* run on a clone of the base store; NULL: see recreate below */
    const char *table, *from, *to, *cols;
    const char *phrase;
};

static const struct schemacase schemacases[] = {
    /* the red team's finding: pcrfs and pcrinfo spun at 100% CPU at open */
    {"files-view-recursive",
     "DROP TABLE files; CREATE VIEW files AS " RECURSIVE " SELECT k AS id," FILES_ROW " FROM n;",
     NULL, NULL, NULL, NULL, "index.db: files is a view, not a table"},
    {"dirs-view-recursive",
     "DROP TABLE dirs; CREATE VIEW dirs AS " RECURSIVE " SELECT k AS id, 1 AS parent,"
     " X'' AS name, 0 AS first_child, 0 AS nsubdirs, 0 AS first_file, 0 AS nfiles FROM n;",
     NULL, NULL, NULL, NULL, "index.db: dirs is a view, not a table"},
    /* ... and, as a column, the first ls of a directory spun holding the store lock */
    {"files-view-column",
     "ALTER TABLE files RENAME TO files_t; CREATE VIEW files AS SELECT id, dir, name, kind,"
     " record, slot, nchunks, chunks, size, width, height, components, src_size, checksum,"
     " (" RECURSIVE " SELECT max(k) FROM n) AS note, trailer, sums, quality FROM files_t;",
     NULL, NULL, NULL, NULL, "index.db: has a table files_t that pcrfs(5) does not define"},
    {"files-generated-note", NULL, "files", "note TEXT,",
     "note TEXT GENERATED ALWAYS AS (printf('%.9999c', 'n')) VIRTUAL,", FILES_NO_NOTE,
     "index.db: table files: column 15 (note) is generated or hidden"},
    {"files-generated-extra",
     "ALTER TABLE files ADD COLUMN g INTEGER GENERATED ALWAYS AS (id + 1) VIRTUAL", NULL, NULL,
     NULL, NULL, "index.db: table files: column 19 is g INTEGER, want only 18 columns"},
    {"trigger", "CREATE TRIGGER t AFTER INSERT ON files BEGIN SELECT 1; END", NULL, NULL, NULL,
     NULL, "index.db: has a trigger t on files"},
    {"extra-index", "CREATE INDEX files_by_name ON files(name)", NULL, NULL, NULL, NULL,
     "index.db: has an index files_by_name on files"},
    {"extra-table", "CREATE TABLE extra(x)", NULL, NULL, NULL, NULL,
     "index.db: has a table extra that pcrfs(5) does not define"},
    {"extra-view", "CREATE VIEW v AS SELECT 1", NULL, NULL, NULL, NULL,
     "index.db: has a view v that pcrfs(5) does not define"},
    {"analyzed", "ANALYZE", NULL, NULL, NULL, NULL,
     "index.db: has a table sqlite_stat1 that pcrfs(5) does not define"},
    {"files-id-desc", NULL, "files", "id INTEGER PRIMARY KEY", "id INTEGER PRIMARY KEY DESC", NULL,
     "index.db: has an index sqlite_autoindex_files_1 on files"},
    {"files-size-text", NULL, "files", "size INTEGER", "size TEXT", NULL,
     "index.db: table files: column 9 is size TEXT, want size INTEGER"},
    {"dirs-name-text", NULL, "dirs", "name BLOB", "name TEXT", NULL,
     "index.db: table dirs: column 3 is name TEXT, want name BLOB"},
    {"records-nimages-any", NULL, "records", "nimages INTEGER", "nimages", NULL,
     "index.db: table records: column 4 is nimages (no type), want nimages INTEGER"},
    {"dirs-parent-nullable", NULL, "dirs", "parent INTEGER NOT NULL", "parent INTEGER", NULL,
     "index.db: table dirs: column 2 (parent) is nullable, want NOT NULL"},
    {"files-kind-default", NULL, "files", "kind INTEGER NOT NULL",
     "kind INTEGER NOT NULL DEFAULT 1", NULL,
     "index.db: table files: column 4 (kind) has a default value"},
    {"meta-nocase", NULL, "meta", "key TEXT PRIMARY KEY", "key TEXT COLLATE NOCASE PRIMARY KEY",
     NULL, "index.db: table meta: column 1 (key) has collation NOCASE, want BINARY"},
    {"meta-rowid", NULL, "meta", ") WITHOUT ROWID", ")", NULL,
     "index.db: has an index sqlite_autoindex_meta_1 on meta"},
    {"dirs-without-rowid", NULL, "dirs", "nfiles INTEGER NOT NULL)",
     "nfiles INTEGER NOT NULL) WITHOUT ROWID", NULL,
     "index.db: table dirs: is a WITHOUT ROWID table, want a rowid table"},
    {"dirs-extra-column", "ALTER TABLE dirs ADD COLUMN extra INTEGER", NULL, NULL, NULL, NULL,
     "index.db: table dirs: column 8 is extra INTEGER, want only 7 columns"},
    {"files-no-note", "ALTER TABLE files DROP COLUMN note", NULL, NULL, NULL, NULL,
     "index.db: table files: column 15 is trailer INTEGER, want note TEXT"},
    {"files-no-sums", "ALTER TABLE files DROP COLUMN sums", NULL, NULL, NULL, NULL,
     "index.db: table files: column 17 is quality BLOB, want sums BLOB"},
    /* an index of format 2 written before the quality column existed */
    {"files-no-quality", "ALTER TABLE files DROP COLUMN quality", NULL, NULL, NULL, NULL,
     "index.db: table files: has 17 columns, want 18 (no quality)"},
    {"files-quality-text", NULL, "files", "quality BLOB", "quality TEXT", NULL,
     "index.db: table files: column 18 is quality TEXT, want quality BLOB"},
    {"tok-files-no-quality", "ALTER TABLE tok_files DROP COLUMN quality", NULL, NULL, NULL, NULL,
     "index.db: table tok_files: has 17 columns, want 18 (no quality)"},
    {"tok-partial", "DROP TABLE tok_files", NULL, NULL, NULL, NULL,
     "index.db: has only 2 of the token tables"},
    {"tok-one", "DROP TABLE tok_files; DROP TABLE tok_records", NULL, NULL, NULL, NULL,
     "index.db: has only 1 of the token tables"},
    {"tok-dirs-text", NULL, "tok_dirs", "nfiles INTEGER", "nfiles TEXT", NULL,
     "index.db: table tok_dirs: column 7 is nfiles TEXT, want nfiles INTEGER"},
    {"blobs-typed", NULL, "blobs", "value BLOB", "value TEXT", NULL,
     "index.db: table blobs: column 2 is value TEXT, want value BLOB"},
};

static void test_schemas(void)
{
    signal(SIGALRM, on_alarm);
    for (size_t c = 0; c < PCR_ARRAY_SIZE(schemacases); c++) {
        const struct schemacase *sc = &schemacases[c];
        const char *p = clone(sc->label);
        if (sc->sql)
            sql(p, "%s", sc->sql);
        else
            recreate(p, sc->table, sc->from, sc->to, sc->cols);
        refused_soon(p, -EINVAL, sc->phrase, sc->label);
        discard(p);
    }

    /* The red team's collision: id declared TEXT, and a row whose id is text that
     * sorts inside directory 4's range ['7', '9') as text but is file 70 as a number:
     * without the schema check it was served in b/c/ from outside its id range. */
    const char *p = clone("files-id-text");
    recreate(p, "files", "id INTEGER PRIMARY KEY", "id TEXT", NULL);
    sql(p, "INSERT INTO files SELECT '70', dir, CAST('c3.bin' AS BLOB), kind, record, slot,"
           " nchunks, chunks, size, width, height, components, src_size, checksum, note, trailer,"
           " sums, quality FROM files WHERE id = '8'");
    refused_soon(p, -EINVAL, "index.db: table files: column 1 is id TEXT, want id INTEGER",
                 "files-id-text");
    discard(p);

    /* no token tables at all (and no blobs): a plain store, served */
    p = clone("no-token-tables");
    sql(p, "DROP TABLE tok_dirs; DROP TABLE tok_records; DROP TABLE tok_files; DROP TABLE blobs");
    log_reset();
    struct pcr_store *s = open_ok(p, "no-token-tables");
    if (s) {
        enum want w[NFILES];
        want_all(w, OK);
        check_store(s, w, "no-token-tables");
        CHECK(loglen == 0, "no-token-tables logged: %s", logbuf);
        pcr_store_close(s);
    }
    discard(p);
}

/* Values of another type than their column's, in file rows: each such row is dropped
 * like any other bad row (SQLite would have converted 'jpeg' to 0, '4x' to 4). */
static void test_file_types(void)
{
    static const struct {
        const char *label;
        unsigned id;
        const char *set, *column, *have, *want;
    } cases[] = {
        {"file-kind-text", 3, "kind = 'jpeg'", "kind", "TEXT", "INTEGER"},
        {"file-dir-text", 7, "dir = '4x'", "dir", "TEXT", "INTEGER"},
        {"file-name-text", 5, "name = 'a3.JPEG'", "name", "TEXT", "BLOB"},
        {"file-size-real", 1, "size = size + 0.5", "size", "REAL", "INTEGER"},
        {"file-checksum-blob", 2, "checksum = X'01'", "checksum", "BLOB", "INTEGER"},
        {"file-note-blob", 6, "note = X'6E6F7465'", "note", "BLOB", "TEXT"},
        {"file-chunks-text", 8, "chunks = 'xx'", "chunks", "TEXT", "BLOB"},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        const char *p = clone(cases[c].label);
        unsigned id = cases[c].id, dir = (unsigned)files[id - 1].dir;
        char phrase[160], usable[96];
        enum want w[NFILES];

        sql(p, "UPDATE files SET %s WHERE id = %u", cases[c].set, id);
        log_reset();
        struct pcr_store *s = open_ok(p, cases[c].label);
        if (s) {
            want_all(w, OK);
            w[id - 1] = GONE;
            check_store(s, w, cases[c].label);
            snprintf(phrase, sizeof(phrase), "index: file %u rejected: column %s holds %s, want %s",
                     id, cases[c].column, cases[c].have, cases[c].want);
            CHECK(log_count(phrase) == 1, "%s: want log \"%s\", got: %s", cases[c].label, phrase,
                  logbuf);
            snprintf(usable, sizeof(usable), "directory %u: %llu of %llu files usable", dir,
                     (unsigned long long)base_dirs[dir - 1].nfiles - 1,
                     (unsigned long long)base_dirs[dir - 1].nfiles);
            CHECK(log_count(usable) == 1, "%s: want log \"%s\", got: %s", cases[c].label, usable,
                  logbuf);
            pcr_store_close(s);
        }
        discard(p);
    }

    const char *p;
    /* NULL under NOT NULL: SQLite refuses to write it, a crafted file holds it */
    static const struct {
        const char *label, *table, *column, *decl, *where;
        unsigned file; /* 0: a dirs/records row, the store is refused */
        const char *phrase;
    } nulls[] = {
        {"file-sums-null", "files", "sums", "sums BLOB NOT NULL", "id = 4", 4,
         "index: file 4 rejected: column sums holds NULL, want BLOB"},
        {"file-trailer-null", "files", "trailer", "trailer INTEGER NOT NULL", "id = 1", 1,
         "index: file 1 rejected: column trailer holds NULL, want INTEGER"},
        {"dir-nsubdirs-null", "dirs", "nsubdirs", "nsubdirs INTEGER NOT NULL", "id = 3", 0,
         "table dirs: row 3: column nsubdirs holds NULL, want INTEGER"},
        {"record-groups-null", "records", "groups", "groups BLOB NOT NULL", "id = 3", 0,
         "table records: row 3: column groups holds NULL, want BLOB"},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(nulls); c++) {
        const char *p = clone(nulls[c].label);
        char loose[64];
        snprintf(loose, sizeof(loose), "%s %s", nulls[c].column, strchr(nulls[c].decl, ' ') + 1);
        *strstr(loose, " NOT NULL") = '\0';
        sql(p,
            "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, '%s',"
            " '%s') WHERE name = '%s'",
            nulls[c].decl, loose, nulls[c].table);
        sql(p, "UPDATE %s SET %s = NULL WHERE %s", nulls[c].table, nulls[c].column, nulls[c].where);
        sql(p,
            "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, '%s',"
            " '%s') WHERE name = '%s'",
            loose, nulls[c].decl, nulls[c].table);
        log_reset();
        if (!nulls[c].file) {
            refused(p, -EINVAL, nulls[c].phrase, nulls[c].label);
            discard(p);
            continue;
        }
        struct pcr_store *s = open_ok(p, nulls[c].label);
        if (s) {
            enum want w[NFILES];
            want_all(w, OK);
            w[nulls[c].file - 1] = GONE;
            check_store(s, w, nulls[c].label);
            CHECK(log_count(nulls[c].phrase) == 1, "%s: want log \"%s\", got: %s", nulls[c].label,
                  nulls[c].phrase, logbuf);
            pcr_store_close(s);
        }
        discard(p);
    }

    p = clone("meta-levels-blob");
    sql(p, "UPDATE meta SET value = CAST('10' AS BLOB) WHERE key = 'levels'");
    refused(p, -EINVAL, "no valid level count", "meta-levels-blob");
    discard(p);

    p = clone("codebook-text");
    sql(p, "INSERT INTO blobs VALUES ('codebook', 'not a blob')");
    refused(p, -EINVAL, "cannot read the codebook", "codebook-text");
    discard(p);
}

/* The work bound itself (a schema that passes the checks cannot express an endless
 * query, so it is driven directly): an endless query on the reader's connection stops
 * with -EIO within seconds, and one that returns each of its 3 million rows quickly
 * is never stopped, however long it runs in all. */
/* How much slower than native this process runs: valgrind (its preload library in
 * LD_PRELOAD) runs SQLite's VM some 20-50x slower, so the wall-clock guards of the
 * work-bound case stretch by this much (the bound itself counts instructions). */
static double slowdown(void)
{
    const char *pre = getenv("LD_PRELOAD");

    return pre && strstr(pre, "vgpreload") ? 50.0 : 1.0;
}

static void test_work_bound(void)
{
    char err[512];
    struct pcr_index *idx = NULL;
    char path[400];
    double t0;

    snprintf(path, sizeof(path), "%s/index.db", base);
    CHECK(pcr_index_open(path, &idx, err, sizeof(err)) == 0, "open index: %s", err);
    if (!idx)
        return;
    alarm_label = "work-bound";
    alarm((unsigned)(60 * slowdown()));
    t0 = now_s();
    CHECK(pcr_index_run_bounded(idx, RECURSIVE " SELECT count(*) FROM n") == -EIO,
          "an endless query was not stopped");
    CHECK(now_s() - t0 < 3.0 * slowdown(), "the endless query ran %.1f s", now_s() - t0);
    CHECK(strstr(pcr_index_errmsg(idx), "ran past its work bound") != NULL, "errmsg: %s",
          pcr_index_errmsg(idx));
    CHECK(pcr_index_run_bounded(idx, "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1"
                                     " FROM n WHERE k < 3000000) SELECT k FROM n") == 0,
          "a long query that returns rows was stopped: %s", pcr_index_errmsg(idx));
    /* views are off on the reader's connection whatever the schema says */
    CHECK(pcr_index_run_bounded(idx, "SELECT * FROM sqlite_schema") == 0, "schema readable");
    alarm(0);
    pcr_index_close(idx);
}

/* Deep trees: every walk up the parents ends, and paths too long fail cleanly. */
static void test_deep(void)
{
    const unsigned depths[] = {1500, 2100};

    for (size_t k = 0; k < 2; k++) {
        unsigned depth = depths[k];
        char label[64];
        snprintf(label, sizeof(label), "deep-%u", depth);
        const char *p = clone(label);
        sql(p,
            "DELETE FROM dirs; DELETE FROM files WHERE id <> 2;"
            "UPDATE files SET id = 1, dir = %u WHERE id = 2;"
            "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < %u)"
            " INSERT INTO dirs SELECT k, max(k - 1, 1), CASE k WHEN 1 THEN X'' ELSE X'64' END,"
            " CASE WHEN k < %u THEN k + 1 ELSE 0 END, CASE WHEN k < %u THEN 1 ELSE 0 END,"
            " CASE WHEN k = %u THEN 1 ELSE 0 END, CASE WHEN k = %u THEN 1 ELSE 0 END FROM n;",
            depth, depth, depth, depth, depth, depth);
        struct pcr_store *s = open_ok(p, label);
        if (!s) {
            discard(p);
            continue;
        }
        char *path = malloc(2 * depth + 16), *out = malloc(4 * depth + 16);
        size_t n = 0;
        for (unsigned i = 1; i < depth; i++) {
            path[n++] = 'd';
            path[n++] = '/';
        }
        memcpy(path + n, "r2.bin", sizeof("r2.bin")); /* 2 * depth + 16 bytes hold it */
        struct pcr_node node;
        const struct pcr_file *f;
        CHECK(tstore_resolve(s, path, &node) == 0 && node.id == 1, "%s: lookup", label);
        CHECK(pcr_store_file(s, 1, &f) == 0, "%s: file", label);
        if (depth < 2000) {
            CHECK(pcr_store_path(s, 1, out, 4 * depth + 16) == (ssize_t)strlen(path) &&
                      !strcmp(out, path),
                  "%s: path", label);
            check_bytes(s, f, &files[1], label);
        } else {
            CHECK(pcr_store_path(s, 1, out, 4 * depth + 16) == -ENAMETOOLONG,
                  "%s: path deeper than the walk limit", label);
        }
        CHECK(pcr_store_path(s, 1, out, 64) == -ENAMETOOLONG, "%s: short buffer", label);
        free(path);
        free(out);
        pcr_store_close(s);
        discard(p);
    }
}

/* Queries with ids and names out of range on a good store. */
static void test_api_bounds(void)
{
    struct pcr_store *s = open_ok(base, "api-bounds");
    struct pcr_node n;
    struct pcr_dirent de;
    struct pcr_dirinfo di;
    const struct pcr_file *f;
    char buf[64];

    if (!s)
        return;
    const char *names[] = {"", ".", "..", "a/", "/a", "a/a1.JPEG"};
    for (size_t i = 0; i < PCR_ARRAY_SIZE(names); i++)
        CHECK(pcr_store_lookup(s, 1, names[i], &n) == -ENOENT, "lookup \"%s\"", names[i]);
    CHECK(pcr_store_lookup(s, 0, "a", &n) == -ENOENT &&
              pcr_store_lookup(s, UINT64_MAX, "a", &n) == -ENOENT,
          "lookup in bad dirs");
    CHECK(pcr_store_readdir(s, 0, 0, &de) == -ENOENT && pcr_store_readdir(s, 5, 0, &de) == -ENOENT,
          "readdir of bad dirs");
    CHECK(pcr_store_readdir(s, 1, UINT64_MAX, &de) == -ENOENT, "readdir at a huge position");
    CHECK(pcr_store_dir(s, 0, &di) == -ENOENT && pcr_store_dir(s, 5, &di) == -ENOENT, "dir ids");
    CHECK(pcr_store_file(s, 0, &f) == -ENOENT && pcr_store_file(s, 9, &f) == -ENOENT &&
              pcr_store_file(s, UINT64_MAX, &f) == -ENOENT,
          "file ids");
    CHECK(pcr_store_path(s, 0, buf, sizeof(buf)) == -ENOENT, "path of file 0");
    /* "a/a1.JPEG" is 9 bytes: 10 hold it with its NUL, 9 do not */
    CHECK(pcr_store_path(s, 3, buf, 10) == 9 && !strcmp(buf, "a/a1.JPEG"),
          "path into a buffer of exactly its size");
    CHECK(pcr_store_path(s, 3, buf, 9) == -ENAMETOOLONG, "path into a buffer one too short");
    CHECK(pcr_store_path(s, 1, buf, 8) == 7 && !strcmp(buf, "r1.JPEG"), "one-component path");
    CHECK(pcr_store_meta(s, "no-such-key", buf, sizeof(buf)) == -ENOENT, "meta");
    CHECK(pcr_store_file(s, 1, &f) == 0, "file 1");
    CHECK(pcr_store_read(s, f, LEVELS, buf, sizeof(buf), UINT64_MAX) == 0, "read at 2^64-1");
    CHECK(pcr_store_read(s, f, 0, buf, 0, 0) == 0, "empty read");
    pcr_store_close(s);
}

/* The per-level MS-SSIM the writer was given comes back through the public API,
 * rounded down to 1/PCR_QUALITY_SCALE, and pcr_file_level_for() picks the lowest
 * level reaching a threshold. */
static void test_quality(void)
{
    struct pcr_store *s = open_ok(base, "quality");
    const struct pcr_file *f1, *f2, *f3, *f7;
    double q;
    char err[512];

    if (!s)
        return;
    CHECK(pcr_store_file(s, 1, &f1) == 0 && pcr_store_file(s, 2, &f2) == 0 &&
              pcr_store_file(s, 3, &f3) == 0 && pcr_store_file(s, 7, &f7) == 0,
          "quality: files");
    for (unsigned k = 1; k < LEVELS; k++) {
        double want = floor(quality1[k - 1] * PCR_QUALITY_SCALE) / PCR_QUALITY_SCALE;
        CHECK(pcr_file_quality(f1, k, &q) == 0 && q == want, "file 1 level %u: %.9f want %.9f", k,
              q, want);
        CHECK(fabs(q - quality1[k - 1]) < 1.0 / PCR_QUALITY_SCALE, "file 1 level %u: step", k);
        want = floor(quality7[k - 1] * PCR_QUALITY_SCALE) / PCR_QUALITY_SCALE;
        CHECK(pcr_file_quality(f7, k, &q) == 0 && q == want, "file 7 level %u: %.9f", k, q);
    }
    CHECK(pcr_file_quality(f1, 3, &q) == 0 && q == 0.95, "0.95 is stored exactly: %.17g", q);
    CHECK(pcr_file_quality(f1, 2, &q) == 0 && q < 0.95, "0.94999 stays below 0.95: %.17g", q);
    CHECK(pcr_file_quality(f1, LEVELS, &q) == 0 && q == 1.0, "top level is 1");
    CHECK(pcr_file_quality(f1, LEVELS + 5, &q) == 0 && q == 1.0, "past the top is 1");
    CHECK(pcr_file_quality(f1, 0, &q) == -EINVAL, "level 0");
    CHECK(pcr_file_quality(f2, 1, &q) == -ENOENT, "verbatim: no table");
    CHECK(pcr_file_quality(f3, 1, &q) == -ENOENT && pcr_file_quality(f3, LEVELS, &q) == -ENOENT,
          "JPEG built without a table");

    static const struct {
        double t;
        unsigned f1, f7;
    } cases[] = {
        {0.0, 1, 1},       {0.5, 1, 4},        {0.9, 2, 8},         {0.94998, 2, 9},
        {0.94999, 3, 9},   {0.95, 3, 9},       {0.96, 5, LEVELS},   {0.985, 6, LEVELS},
        {0.99, 6, LEVELS}, {0.995, 8, LEVELS}, {0.9999, 9, LEVELS}, {1.0, 9, LEVELS},
    };
    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        CHECK(pcr_file_level_for(f1, cases[c].t) == cases[c].f1, "file 1, %g: level %u want %u",
              cases[c].t, pcr_file_level_for(f1, cases[c].t), cases[c].f1);
        CHECK(pcr_file_level_for(f7, cases[c].t) == cases[c].f7, "file 7, %g: level %u want %u",
              cases[c].t, pcr_file_level_for(f7, cases[c].t), cases[c].f7);
        CHECK(pcr_file_level_for(f2, cases[c].t) == LEVELS &&
                  pcr_file_level_for(f3, cases[c].t) == LEVELS,
              "no table, %g: the top level", cases[c].t);
    }
    pcr_store_close(s);

    /* the writer takes values in [0, 1] only, for JPEGs only */
    static const double bad[][LEVELS - 1] = {
        {0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0, 1.0001},
        {-0.01, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0, 1.0},
        {0.5, NAN, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0, 1.0},
    };
    for (size_t b = 0; b <= PCR_ARRAY_SIZE(bad); b++) {
        char path[400];
        struct pcr_writer *w = NULL;
        struct pcr_writer_opts o = {.levels = LEVELS, .script = "test"};
        struct tfile *t = &files[b < PCR_ARRAY_SIZE(bad) ? 0 : 1];
        struct pcr_item it = {
            .id = 1,
            .dir = 1,
            .name = t->name,
            .kind = t->kind,
            .data = t->data,
            .len = t->len,
            .split = t->kind == PCR_KIND_JPEG ? &t->split : NULL,
            .src_size = t->len,
            .quality = b < PCR_ARRAY_SIZE(bad) ? bad[b] : quality1,
        };
        snprintf(path, sizeof(path), "%s/quality-bad-%zu", tmpdir, b);
        CHECK(pcr_writer_create(path, &o, &w, err, sizeof(err)) == 0 &&
                  pcr_writer_add_dir(w, &(struct pcr_dir_row){1, 1, "", 0, 0, 1, 1}) == 0,
              "writer for quality case %zu: %s", b, err);
        if (w) {
            CHECK(pcr_writer_add_record(w, &it, 1) == -EINVAL, "quality case %zu accepted", b);
            pcr_writer_abort(w);
        }
    }
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-crafted-XXXXXX", err[512];

    pcr_log_set_hook(log_hook, NULL, PCR_LOG_DEBUG);
    make_data();
    if (!mkdtemp(tmpl))
        return 2;
    snprintf(tmpdir, sizeof(tmpdir), "%s", tmpl);
    snprintf(base, sizeof(base), "%s/base", tmpdir);
    if (tstore_write(base, &base_store, err, sizeof(err)) != 0) {
        fprintf(stderr, "cannot build the base store: %s\n", err);
        return 2;
    }
    /* the base store itself must be served whole, silently */
    log_reset();
    struct pcr_store *s = open_ok(base, "base");
    if (s) {
        enum want w[NFILES];
        want_all(w, OK);
        check_store(s, w, "base");
        CHECK(loglen == 0, "base store logged: %s", logbuf);
        pcr_store_close(s);
    }

    test_refusals();
    test_not_a_store();
    test_loose_dirs();
    test_group_tables();
    test_record_rows();
    test_record_files();
    test_file_rows();
    test_chunk_ranges();
    test_odd_values();
    test_loose_files();
    test_schemas();
    test_file_types();
    test_work_bound();
    test_sparse_files();
    test_deep();
    test_api_bounds();
    test_quality();

    CHECK(log_unsafe == 0, "%d log lines carried control characters from the index", log_unsafe);
    run("rm -rf '%s'", tmpdir);
    for (size_t i = 0; i < NFILES; i++)
        free(files[i].data);
    return check_done("crafted");
}
