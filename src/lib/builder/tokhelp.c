/* pcrfs build — the token import's helpers (see tokimport_int.h): the in-memory
 * tree, names and messages. A leaf: it calls nothing else of the import, so the
 * source readers (tokimport_npy.c, tokimport_seit.c) and the import itself
 * (tokimport.c) all build on it without calling each other in a circle.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "builder/tokimport_int.h"

int ti_nomem(struct tokimport *t)
{
    return pcr_bld_nomem(t->o.rep);
}

bool ti_out_of_memory(const struct tokimport *t)
{
    return t->o.rep && __atomic_load_n(&t->o.rep->nomem, __ATOMIC_RELAXED);
}

/* @return 0 or -ENOMEM (@v as it was). */
static int push(uint64_t **v, uint64_t *n, uint64_t *cap, uint64_t x)
{
    if (*n == *cap) {
        uint64_t *g = pcr_try_grow(*v, cap, 4, sizeof(**v));

        if (!g)
            return -ENOMEM;
        *v = g;
    }
    (*v)[(*n)++] = x;
    return 0;
}

uint64_t ti_new_dir(struct tokimport *t, uint64_t parent, const char *name, const char *rel)
{
    struct tdir *d;

    if (t->ndirs == t->dircap) {
        struct tdir *g = pcr_try_grow(t->dirs, &t->dircap, 64, sizeof(*t->dirs));

        if (!g) {
            ti_nomem(t);
            return UINT64_MAX;
        }
        t->dirs = g;
    }
    d = &t->dirs[t->ndirs];
    memset(d, 0, sizeof(*d));
    d->parent = parent;
    d->name = pcr_try_strdup(name);
    d->rel = rel ? pcr_try_strdup(rel) : NULL;
    if (!d->name || (rel && !d->rel) ||
        (t->ndirs &&
         push(&t->dirs[parent].kids, &t->dirs[parent].nkids, &t->dirs[parent].kidcap, t->ndirs))) {
        free(d->name);
        free(d->rel);
        ti_nomem(t);
        return UINT64_MAX;
    }
    return t->ndirs++;
}

struct tfile *ti_new_file(struct tokimport *t, uint64_t dir, char *name)
{
    struct tfile *f;

    if (t->nfiles == t->filecap) {
        struct tfile *g = pcr_try_grow(t->files, &t->filecap, 256, sizeof(*t->files));

        if (!g) {
            free(name);
            ti_nomem(t);
            return NULL;
        }
        t->files = g;
    }
    if (push(&t->dirs[dir].files, &t->dirs[dir].nfiles, &t->dirs[dir].filecap, t->nfiles)) {
        free(name);
        ti_nomem(t);
        return NULL;
    }
    f = &t->files[t->nfiles];
    memset(f, 0, sizeof(*f));
    f->dir = dir;
    f->name = name;
    t->nfiles++;
    return f;
}

/* FNV-1a over the shape and the values: a grid read twice must give the same. */
uint64_t ti_grid_hash(const uint16_t *g, unsigned h, unsigned w)
{
    uint64_t x = 0xcbf29ce484222325ull;
    size_t n = (size_t)h * w;

    x = (x ^ h) * 0x100000001b3ull;
    x = (x ^ w) * 0x100000001b3ull;
    for (size_t i = 0; i < n; i++)
        x = (x ^ g[i]) * 0x100000001b3ull;
    return x;
}

/* The final name of a source name: its last extension (if any; leading dots do not
 * start one, as in Python's os.path.splitext) replaced by ".tok". NULL if too long. */
char *ti_tok_name(const char *base)
{
    const char *p = base, *dot;
    size_t stem;
    char *out;

    while (*p == '.')
        p++;
    dot = strrchr(p, '.');
    stem = dot ? (size_t)(dot - base) : strlen(base);
    if (stem + 4 > 255) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    out = pcr_try_malloc(stem + 5);
    if (!out) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(out, base, stem);
    memcpy(out + stem, ".tok", 5);
    return out;
}

/* DIR/REL/NAME of an .npy source, escaped for display (valid until the next call):
 * piece by piece, which gives the text escaping it whole would ("/" is never part
 * of a multibyte character), and cannot fail (sbuf.h). */
const char *ti_npy_path(struct tokimport *t, const char *rel, const char *name)
{
    pcr_sbuf_reset(&t->esc);
    pcr_escape(&t->esc, t->o.npy_dir, strlen(t->o.npy_dir));
    if (rel && rel[0]) {
        pcr_escape(&t->esc, "/", 1);
        pcr_escape(&t->esc, rel, strlen(rel));
    }
    if (name) {
        pcr_escape(&t->esc, "/", 1);
        pcr_escape(&t->esc, name, strlen(name));
    }
    return t->esc.s ? t->esc.s : PCR_ESCAPE_NOMEM;
}

/* The source of a --tokens file: its name with ".tok" back to ".npy". */
const char *ti_npy_name(const struct tfile *f, char *buf, size_t len)
{
    size_t n = strlen(f->name);

    snprintf(buf, len, "%.*s.npy", (int)(n - 4), f->name);
    return buf;
}

/* Where a file's grid comes from, for messages (valid until the next call). */
const char *ti_src_desc(struct tokimport *t, const struct tfile *f)
{
    char name[8192], head[64];

    if (!t->seit)
        return ti_npy_path(t, t->dirs[f->dir].rel, ti_npy_name(f, name, sizeof(name)));
    if (pcr_seit_name(t->seit, f->seit, name, sizeof(name)) < 0)
        name[0] = '\0';
    /* the fixed parts are printable ASCII, which escaping keeps as it is */
    snprintf(head, sizeof(head), "SeiT image %" PRIu64 " (", f->seit);
    pcr_sbuf_reset(&t->path);
    pcr_escape(&t->path, head, strlen(head));
    pcr_escape(&t->path, name, strlen(name));
    pcr_escape(&t->path, ")", 1);
    return t->path.s ? t->path.s : PCR_ESCAPE_NOMEM;
}

/* One bad item: reported while few, counted always. */
void ti_bad(struct tokimport *t, const char *fmt, ...)
{
    char line[4096];
    va_list ap;

    if (t->bad++ >= MAX_REPORTED)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    pcr_bld_err("%s", line);
}

void ti_skipped(struct tokimport *t, const char *what, const char *why)
{
    if (t->skipped++ < MAX_REPORTED)
        pcr_bld_warn("skipped %s: %s", what, why);
}
