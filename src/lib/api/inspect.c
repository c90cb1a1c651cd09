/* pcrfs — the store's files one by one, what the index says of each, and a check
 * of every file against it: pcrfs_file_next(), pcrfs_file_facts() and
 * pcrfs_verify() (include/pcrfs/pcrfs.h), what pcrinfo --list and --verify show.
 *
 * They walk the stored files by file id (the image tree, then the token tree), not
 * the views: a file appears once, whatever views serve it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api_internal.h"
#include "pcrfs/checksum.h"
#include "pcrfs/jpeg.h"

/* "tokens/": the prefix of the token tree's paths (the name a mount shows). */
#define TOK_PREFIX     "tokens/"
#define TOK_PREFIX_LEN (sizeof(TOK_PREFIX) - 1)

/* The tree file number @pos lies in (the image tree, then the token tree), and
 * the file's id in it. @return false past the end. */
static bool locate(const struct inst *in, uint64_t pos, struct pcr_store **t, uint64_t *id,
                   bool *tokens)
{
    uint64_t n = pcr_store_nfiles(in->store);

    *tokens = pos >= n;
    if (!*tokens) {
        *t = in->store;
        *id = pos + 1;
        return true;
    }
    if (!in->tokstore || pos - n >= pcr_store_nfiles(in->tokstore))
        return false;
    *t = in->tokstore;
    *id = pos - n + 1;
    return true;
}

/* The facts of @f (of tree @t) into @out, as much of it as out->size has room for. */
static void facts_of(struct pcr_store *t, const struct pcr_file *f, struct pcrfs_file_facts *out)
{
    struct pcrfs_file_facts x = {.size = out->size};
    struct pcr_file_info fi;
    size_t room = out->size < sizeof(x) ? out->size : sizeof(x);

    pcr_file_info(f, &fi);
    x.kind = (uint32_t)fi.kind;
    x.file_id = fi.id;
    x.record = fi.record;
    x.source_size = fi.src_size;
    x.checksum = fi.checksum;
    x.chunks = fi.nchunks;
    x.levels = pcr_store_levels(t);
    x.width = fi.width;
    x.height = fi.height;
    x.components = fi.components;
    for (unsigned k = 1; k <= x.levels && k <= PCRFS_MAX_LEVELS; k++)
        x.level_size[k - 1] = pcr_file_size(f, k);
    memcpy(out, &x, room);
}

/* The members every caller of a facts struct must have room for. */
#define FACTS_MIN offsetof(struct pcrfs_file_facts, level_size)

/* The path of file @id of @t (under TOK_PREFIX for the token tree) into @buf.
 * @return its length, or -errno (-ENAMETOOLONG: @len too small). */
static ssize_t path_of(struct pcr_store *t, uint64_t id, bool tokens, char *buf, size_t len)
{
    size_t pre = tokens ? TOK_PREFIX_LEN : 0;
    ssize_t n;

    if (len <= pre)
        return -ENAMETOOLONG;
    memcpy(buf, TOK_PREFIX, pre);
    n = pcr_store_path(t, id, buf + pre, len - pre);
    return n < 0 ? n : n + (ssize_t)pre;
}

int pcrfs_file_next(pcrfs_store *s, uint64_t *pos, char *path, size_t pathlen,
                    struct pcrfs_file_facts *f)
{
    const struct pcr_file *pf;
    struct pcr_store *t;
    struct inst *in;
    uint64_t id;
    bool tokens;
    ssize_t n;
    int rc;

    PCRFS_INST(in, s);
    if (!pos || !path || !f || f->size < FACTS_MIN)
        return api_fail(-EINVAL, "pcrfs_file_next: bad arguments");
    if (!locate(in, *pos, &t, &id, &tokens))
        return 0;
    n = path_of(t, id, tokens, path, pathlen);
    if (n == -ENAMETOOLONG)
        return api_fail(-ENAMETOOLONG, "pcrfs_file_next: a path longer than the buffer");
    (*pos)++;
    rc = n < 0 ? (int)n : pcr_store_file(t, id, &pf);
    if (rc < 0)
        return api_fail(rc == -ENOMEM ? rc : -EIO, "%sfile %" PRIu64 ": %s",
                        tokens ? TOK_PREFIX : "", id, strerror(-rc));
    facts_of(t, pf, f);
    return 1;
}

int pcrfs_file_facts(pcrfs_store *s, const char *path, struct pcrfs_file_facts *f)
{
    const struct pcr_view *v;
    const struct pcr_file *pf;
    struct inst *in;
    int rc;

    if (!path || !f || f->size < FACTS_MIN)
        return api_fail(-EINVAL, "pcrfs_file_facts: bad arguments");
    rc = api_file_at(s, path, &in, &v, &pf);
    if (rc)
        return rc;
    facts_of(v->store, pf, f);
    return 0;
}

/* ---- pcrfs_verify() ------------------------------------------------------------------ */

struct verify {
    pcrfs_verify_fn fn;
    void *ctx;
    struct pcrfs_verify_result r;
    uint64_t done, total;
    uint8_t *buf; /* the file being checked, one byte more than its size */
    size_t cap;
    char *path; /* its path (pcrfs_file_next()'s form) */
    size_t pathcap;
    char why[512];
    char first[1024]; /* the first failure, "PATH: why" */
    bool stop;        /* the callback asked to stop */
    bool oom;
};

/* The file at x->path failed: @fmt says why. */
static void failed(struct verify *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(struct verify *x, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(x->why, sizeof(x->why), fmt, ap);
    va_end(ap);
    if (!x->r.failures++)
        snprintf(x->first, sizeof(x->first), "%s%s%s", x->path, x->path[0] ? ": " : "", x->why);
}

/* Make room for @n bytes in @x->buf. @return false: out of memory. */
static bool room(struct verify *x, size_t n)
{
    uint8_t *p;

    if (n <= x->cap)
        return true;
    if (!(p = realloc(x->buf, n)))
        return false;
    x->buf = p;
    x->cap = n;
    return true;
}

/* Check file @id of @t (read at @level): @return true if it is sound (a failure
 * recorded otherwise). */
static bool verify_file(struct verify *x, struct pcr_store *t, uint64_t id, unsigned level,
                        bool *decoded)
{
    const struct pcr_file *f;
    struct pcr_file_info fi;
    struct pcr_jpeg_info ji;
    uint64_t size, sum;
    char why[480] = "";
    ssize_t got;
    int e;

    *decoded = false;
    if ((e = pcr_store_file(t, id, &f)) < 0) {
        failed(x, "%s", strerror(-e));
        return false;
    }
    pcr_file_info(f, &fi);
    size = pcr_file_size(f, level);
    if (size > SIZE_MAX / 2) {
        failed(x, "size %" PRIu64 " out of range", size);
        return false;
    }
    if (!room(x, (size_t)size + 1)) {
        failed(x, "out of memory for %" PRIu64 " bytes", size);
        return false;
    }
    /* Ask for one byte more than the index says: a read that returns it would
     * mean the size is wrong. */
    got = pcr_store_read(t, f, level, x->buf, (size_t)size + 1, 0);
    if (got < 0) {
        failed(x, "read: %s", strerror((int)-got));
        return false;
    }
    if ((uint64_t)got != size) {
        failed(x, "read %zd bytes, the index says %" PRIu64, got, size);
        return false;
    }
    sum = pcr_xxh64(x->buf, (size_t)got);
    if (sum != fi.checksum) {
        failed(x, "checksum %016" PRIx64 ", the index says %016" PRIx64, sum, fi.checksum);
        return false;
    }
    if (fi.kind != PCR_KIND_JPEG)
        return true;
    e = pcr_jpeg_decode(x->buf, (size_t)got, NULL, NULL, &ji, why, sizeof(why));
    if (e < 0) {
        failed(x, "does not decode: %s", why[0] ? why : strerror(-e));
        return false;
    }
    if (ji.width != fi.width || ji.height != fi.height || ji.components != fi.components) {
        failed(x, "decodes as %ux%u, %u components; the index says %ux%u, %u", ji.width, ji.height,
               ji.components, fi.width, fi.height, fi.components);
        return false;
    }
    *decoded = true;
    return true;
}

/* Every file of tree @t (@tokens: the token tree) at its top level. */
static void verify_tree(struct verify *x, struct pcr_store *t, bool tokens)
{
    unsigned level = pcr_store_levels(t);
    uint64_t n = pcr_store_nfiles(t);

    for (uint64_t id = 1; id <= n && !x->stop && !x->oom; id++) {
        bool ok, decoded;
        ssize_t len;

        while ((len = path_of(t, id, tokens, x->path, x->pathcap)) == -ENAMETOOLONG) {
            /* a new buffer, not realloc(): path_of() writes it whole again */
            char *p = x->pathcap < SIZE_MAX / 2 ? malloc(x->pathcap * 2) : NULL;

            if (!p) {
                x->oom = true;
                return;
            }
            free(x->path);
            x->path = p;
            x->pathcap *= 2;
        }
        x->why[0] = '\0';
        if (len < 0) {
            /* no path to name it by: "" and the file's number in the reason */
            x->path[0] = '\0';
            failed(x, "%sfile %" PRIu64 ": %s", tokens ? TOK_PREFIX : "", id, strerror((int)-len));
            ok = false;
        } else {
            ok = verify_file(x, t, id, level, &decoded);
        }
        if (tokens)
            x->r.token_files++;
        else {
            x->r.files++;
            x->r.decoded += ok && decoded;
        }
        x->done++;
        if (x->fn && x->fn(x->path, ok ? NULL : x->why, x->done, x->total, x->ctx) != 0)
            x->stop = true;
    }
}

int pcrfs_verify(pcrfs_store *s, pcrfs_verify_fn fn, void *ctx, struct pcrfs_verify_result *r)
{
    struct verify x = {.fn = fn, .ctx = ctx, .pathcap = 4096};
    struct inst *in;
    int rc = 0;

    PCRFS_INST(in, s);
    if (r && r->size < offsetof(struct pcrfs_verify_result, reserved))
        return api_fail(-EINVAL, "pcrfs_verify: bad arguments");
    x.path = malloc(x.pathcap);
    if (!x.path)
        return api_fail(-ENOMEM, "out of memory");
    x.r.level = pcr_store_levels(in->store);
    x.r.tokens = in->tokstore != NULL;
    x.total = pcr_store_nfiles(in->store) + (in->tokstore ? pcr_store_nfiles(in->tokstore) : 0);
    verify_tree(&x, in->store, false);
    /* the token tree too: each .tok file decoded and checked like any file */
    if (in->tokstore)
        verify_tree(&x, in->tokstore, true);
    if (x.oom)
        rc = api_fail(-ENOMEM, "out of memory");
    else if (x.stop)
        rc = api_fail(-ECANCELED, "pcrfs_verify: stopped by the caller");
    else if (x.r.failures)
        rc = api_fail(-EBADMSG, "%s", x.first);
    if (r) {
        size_t n = r->size < sizeof(x.r) ? r->size : sizeof(x.r);

        x.r.size = r->size;
        memcpy(r, &x.r, n);
    }
    free(x.buf);
    free(x.path);
    return rc;
}
