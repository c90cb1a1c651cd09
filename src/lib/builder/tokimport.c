/* pcrfs build — importing token grids (see tokimport.h; tokimport_int.h says how
 * the import is split): the options, the in-memory tree and its numbering, and pass 2,
 * which writes every grid into shards.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "builder/tokimport_int.h"
#include "util/optparse.h"

/* ---- options --------------------------------------------------------------------- */

/* "HxW" or "N" (N x N). @return 0 or -1. */
static int parse_shape(const char *s, unsigned *h, unsigned *w)
{
    uint64_t a, b;
    const char *x = strchr(s, 'x');
    char num[32];

    if (!x) {
        if (pcr_opt_uint("", s, 1, PCR_TOK_MAX_SIDE, NULL, &a, NULL, 0) < 0)
            return -1;
        b = a;
    } else {
        if ((size_t)(x - s) >= sizeof(num))
            return -1;
        memcpy(num, s, (size_t)(x - s));
        num[x - s] = '\0';
        if (pcr_opt_uint("", num, 1, PCR_TOK_MAX_SIDE, NULL, &a, NULL, 0) < 0 ||
            pcr_opt_uint("", x + 1, 1, PCR_TOK_MAX_SIDE, NULL, &b, NULL, 0) < 0)
            return -1;
    }
    if (a * b > PCR_TOK_MAX_TOKENS)
        return -1;
    *h = (unsigned)a;
    *w = (unsigned)b;
    return 0;
}

int tokimport_option(struct tokimport_opts *o, int c, const char *arg, char *msg, size_t len)
{
    static const char *const coders[] = {"auto", "huffman", "zstd-dict", NULL};
    static const enum pcr_tok_coder coder_of[] = {PCR_TOK_AUTO, PCR_TOK_HUFFMAN, PCR_TOK_ZSTD_DICT};
    uint64_t v = 0;
    unsigned w = 0;

    switch (c) {
    case TOKIMPORT_OPT_TOKENS:
        o->npy_dir = arg;
        return 1;
    case TOKIMPORT_OPT_SEIT:
        o->seit_data = arg;
        return 1;
    case TOKIMPORT_OPT_SEIT_INDEX:
        o->seit_index = arg;
        return 1;
    case TOKIMPORT_OPT_SEIT_LABELS:
        o->seit_labels = arg;
        return 1;
    case TOKIMPORT_OPT_SEIT_NAMES:
        o->seit_names = arg;
        return 1;
    case TOKIMPORT_OPT_SEIT_SHAPE:
        if (parse_shape(arg, &o->seit_h, &o->seit_w) < 0) {
            pcr_opt_msg(msg, len, "--seit-shape", arg,
                        "want HxW or N (N x N), sides 1..%u, at most %u tokens", PCR_TOK_MAX_SIDE,
                        PCR_TOK_MAX_TOKENS);
            return -1;
        }
        return 1;
    case TOKIMPORT_OPT_CODEBOOK:
        o->codebook = arg;
        return 1;
    case TOKIMPORT_OPT_CODER:
        if (pcr_opt_word("--tok-coder", arg, coders, &w, msg, len) != 0)
            return -1;
        o->coder = coder_of[w];
        return 1;
    case TOKIMPORT_OPT_PER_SHARD:
        if (pcr_opt_uint("--tok-per-shard", arg, 1, 1u << 20, NULL, &v, msg, len) != 0)
            return -1;
        o->per_shard = (unsigned)v;
        return 1;
    }
    return 0;
}

int tokimport_check(const struct tokimport_opts *o, char *msg, size_t len)
{
    const char *why = NULL;

    if (o->npy_dir && o->seit_data)
        why = "--tokens and --seit cannot be used together";
    else if (o->seit_data && !o->seit_labels)
        why = "--seit needs --seit-labels FILE";
    else if (!o->seit_data && (o->seit_labels || o->seit_names || o->seit_index || o->seit_h))
        why = "--seit-labels, --seit-names, --seit-index and --seit-shape apply only with --seit";
    else if (!o->npy_dir && !o->seit_data && (o->codebook || o->coder || o->per_shard))
        why = "--codebook, --tok-coder and --tok-per-shard need --tokens or --seit";
    if (why) {
        snprintf(msg, len, "%s", why);
        return -1;
    }
    return 0;
}

bool tokimport_enabled(const struct tokimport_opts *o)
{
    return o->npy_dir || o->seit_data;
}

int ti_read_grid(struct tokimport *t, const struct tfile *f, int *dfd, uint64_t *cur,
                 uint16_t *grid, size_t cap, unsigned *h, unsigned *w)
{
    if (t->seit) {
        char err[1024];

        if (pcr_seit_grid(t->seit, f->seit, grid, err, sizeof(err)) < 0) {
            ti_bad(t, "%s: %s", pcr_escaped(&t->esc, t->o.seit_data), err);
            return -1;
        }
        pcr_seit_shape(t->seit, h, w);
        return 0;
    }
    if (f->dir != *cur) {
        if (*dfd >= 0)
            close(*dfd);
        *cur = f->dir;
        *dfd = pcr_open_rel(t->rootfd, t->dirs[*cur].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (*dfd < 0)
            ti_bad(t, "cannot open directory %s: %s", ti_npy_path(t, t->dirs[*cur].rel, NULL),
                   strerror(errno));
    }
    if (*dfd < 0)
        return -1;
    return ti_load_npy(t, *dfd, f, grid, cap, h, w);
}

/* ---- numbering -------------------------------------------------------------------- */

static int cmp_dir_idx(const void *a, const void *b, void *ctx)
{
    const struct tdir *d = ctx;

    return strcmp(d[*(const uint64_t *)a].name, d[*(const uint64_t *)b].name);
}

static int cmp_file_idx(const void *a, const void *b, void *ctx)
{
    const struct tfile *f = ctx;

    return strcmp(f[*(const uint64_t *)a].name, f[*(const uint64_t *)b].name);
}

/* tokens/PATH of directory @d (+ "/NAME"), escaped, into t->path (for messages). */
static const char *tok_path(struct tokimport *t, uint64_t d, const char *name)
{
    uint64_t chain[256];
    unsigned n = 0;

    /* "tokens" and "/" are printable ASCII, which escaping keeps: all of it goes
     * through pcr_escape(), which cannot fail (sbuf.h) */
    pcr_sbuf_reset(&t->path);
    pcr_escape(&t->path, "tokens", 6);
    for (uint64_t x = d; x != 0 && n < 256; x = t->dirs[x].parent)
        chain[n++] = x;
    while (n--) {
        pcr_escape(&t->path, "/", 1);
        pcr_escape(&t->path, t->dirs[chain[n]].name, strlen(t->dirs[chain[n]].name));
    }
    if (name) {
        pcr_escape(&t->path, "/", 1);
        pcr_escape(&t->path, name, strlen(name));
    }
    return t->path.s ? t->path.s : PCR_ESCAPE_NOMEM;
}

/* Two entries of one directory with the same final name. */
static void clash(struct tokimport *t, uint64_t d, const char *name, const char *a, const char *b)
{
    /* @a and @b are copies: t->path holds only this */
    ti_bad(t, "%s: two entries would have this name: %s and %s", tok_path(t, d, name), a, b);
}

static const char *dup_desc(struct tokimport *t, const struct tfile *f, char *buf, size_t len)
{
    snprintf(buf, len, "%s", ti_src_desc(t, f));
    return buf;
}

/* Number the tree breadth-first (pcrfs/writer.h); two entries of one directory with
 * the same final name are bad items. */
int ti_number_tree(struct tokimport *t)
{
    uint64_t nd = 1, nf = 0, q;
    char a[4200], b[4200];

    t->dorder = pcr_try_malloc(t->ndirs * sizeof(*t->dorder));
    t->forder = pcr_try_malloc((t->nfiles ? t->nfiles : 1) * sizeof(*t->forder));
    if (!t->dorder || !t->forder)
        return ti_nomem(t); /* tokimport_free() frees either */
    t->dorder[0] = 0;
    t->dirs[0].id = 1;
    for (q = 0; q < nd; q++) {
        uint64_t di = t->dorder[q], i, j;
        struct tdir *d = &t->dirs[di];

        if (d->nkids > 1)
            qsort_r(d->kids, d->nkids, sizeof(*d->kids), cmp_dir_idx, t->dirs);
        if (d->nfiles > 1)
            qsort_r(d->files, d->nfiles, sizeof(*d->files), cmp_file_idx, t->files);
        for (i = 1; i < d->nfiles; i++) {
            const struct tfile *x = &t->files[d->files[i - 1]], *y = &t->files[d->files[i]];

            if (strcmp(x->name, y->name) == 0)
                clash(t, di, y->name, dup_desc(t, x, a, sizeof(a)), dup_desc(t, y, b, sizeof(b)));
        }
        /* A subdirectory and a file of the same name (a directory "x.tok"). */
        for (i = 0, j = 0; i < d->nkids && j < d->nfiles;) {
            const char *dn = t->dirs[d->kids[i]].name, *fn = t->files[d->files[j]].name;
            int c = strcmp(dn, fn);

            if (c == 0) {
                snprintf(a, sizeof(a), "a directory");
                clash(t, di, fn, a, dup_desc(t, &t->files[d->files[j]], b, sizeof(b)));
            }
            if (c <= 0)
                i++;
            else
                j++;
        }
        d->first_child = nd + 1;
        for (i = 0; i < d->nkids; i++) {
            t->dirs[d->kids[i]].id = nd + 1;
            t->dorder[nd++] = d->kids[i];
        }
        d->first_file = nf + 1;
        for (i = 0; i < d->nfiles; i++)
            t->forder[nf++] = d->files[i];
    }
    return 0;
}

/* ---- pass 2 ------------------------------------------------------------------------ */

static int set_meta_fmt(struct pcr_writer *w, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int set_meta_fmt(struct pcr_writer *w, const char *key, const char *fmt, ...)
{
    char v[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(v, sizeof(v), fmt, ap);
    va_end(ap);
    return pcr_writer_set_meta(w, key, v);
}

static int write_meta(struct tokimport *t, struct pcr_writer *w)
{
    const struct pcr_tok_train_report *r = &t->rep;
    char dir[PATH_MAX];
    uint64_t nshards, bytes, blobs;
    size_t model_len = 0;
    int rc;

    snprintf(dir, sizeof(dir), "%s/tokens", pcr_writer_tmpdir(w));
    bytes = pcr_dir_bytes(dir, &nshards);
    blobs = bytes - nshards * PCR_TOKSHARD_HEADER;

    pcr_tok_model_blob(t->model, &model_len);
    if ((rc = set_meta_fmt(w, "tok_source", "%s:%s", t->o.npy_dir ? "npy" : "seit",
                           t->o.npy_dir ? t->o.npy_dir : t->o.seit_data)) < 0 ||
        (rc = set_meta_fmt(w, "tok_grids", "%" PRIu64, r->grids)) < 0 ||
        (rc = set_meta_fmt(w, "tok_tokens", "%" PRIu64, r->tokens)) < 0 ||
        (rc = set_meta_fmt(w, "tok_symbols", "%u", r->symbols)) < 0 ||
        (rc = set_meta_fmt(w, "tok_max_value", "%u", r->max_value)) < 0 ||
        (rc = set_meta_fmt(w, "tok_entropy_bits", "%.4f", r->entropy)) < 0 ||
        (rc = set_meta_fmt(w, "tok_huffman_bits", "%.4f", r->huffman_bits)) < 0 ||
        (rc = set_meta_fmt(w, "tok_bits_per_token", "%.4f",
                           r->tokens ? 8.0 * (double)blobs / (double)r->tokens : 0.0)) < 0 ||
        (rc = set_meta_fmt(w, "tok_heldout_grids", "%u", r->heldout_grids)) < 0 ||
        (rc = set_meta_fmt(w, "tok_heldout_huffman_bytes", "%" PRIu64, r->huffman_bytes)) < 0 ||
        (rc = set_meta_fmt(w, "tok_heldout_zstd_bytes", "%" PRIu64, r->zstd_bytes)) < 0 ||
        (rc = set_meta_fmt(w, "tok_model_bytes", "%zu", model_len)) < 0 ||
        (rc = set_meta_fmt(w, "tok_coder_asked", "%s", pcr_tok_coder_name(t->o.coder))) < 0)
        return rc;
    if (t->o.codebook)
        rc = set_meta_fmt(w, "tok_codebook_source", "%s", t->o.codebook);
    return rc;
}

static int write_dirs(struct tokimport *t, struct pcr_writer *w)
{
    for (uint64_t q = 0; q < t->ndirs; q++) {
        const struct tdir *d = &t->dirs[t->dorder[q]];
        struct pcr_dir_row row = {
            .id = q + 1,
            .parent = q == 0 ? PCR_ROOT_DIR : t->dirs[d->parent].id,
            .name = d->name,
            .first_child = d->first_child,
            .nsubdirs = d->nkids,
            .first_file = d->first_file,
            .nfiles = d->nfiles,
        };
        int rc = pcr_writer_add_tok_dir(w, &row);

        if (rc < 0)
            return rc;
    }
    return 0;
}

static int flush_shard(struct pcr_writer *w, const struct pcr_tok_item *items, unsigned n)
{
    int rc;

    if (!n)
        return 0;
    rc = pcr_writer_add_tok_shard(w, items, n);
    if (rc < 0) {
        pcr_bld_err("writing the token shards: %s",
                    pcr_writer_error(w)[0] ? pcr_writer_error(w) : strerror(-rc));
        return -1;
    }
    return 0;
}

int tokimport_write(struct tokimport *t, struct pcr_writer *w)
{
    struct pcr_tok_item *items = pcr_try_malloc(t->o.per_shard * sizeof(*items));
    size_t poolcap = t->total_tokens < SHARD_TOKENS ? (size_t)t->total_tokens : SHARD_TOKENS;
    uint16_t *pool;
    uint64_t k, cur = UINT64_MAX, done_bytes = 0;
    size_t used = 0;
    unsigned n = 0;
    int dfd = -1, rc;

    /* a grid never exceeds PCR_TOK_MAX_TOKENS <= SHARD_TOKENS, so one always fits */
    pool = items ? pcr_try_malloc((poolcap ? poolcap : 1) * sizeof(*pool)) : NULL;
    if (!pool) {
        free(items);
        return ti_nomem(t);
    }
    rc = pcr_writer_set_tok_model(w, t->model);
    if (rc == 0)
        rc = write_dirs(t, w);
    if (rc < 0) {
        pcr_bld_err("writing the token tree: %s",
                    pcr_writer_error(w)[0] ? pcr_writer_error(w) : strerror(-rc));
        rc = -1;
        goto out;
    }
    pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS, 0, t->nfiles, 0, t->total_bytes, false);
    for (k = 0; k < t->nfiles; k++) {
        struct tfile *f = &t->files[t->forder[k]];
        size_t need = (size_t)f->h * f->w;
        unsigned h = 0, wd = 0;

        if (t->o.rep->cancel) {
            rc = -2;
            goto out;
        }
        if (n == t->o.per_shard || used + need > poolcap) {
            if (flush_shard(w, items, n) < 0) {
                rc = -1;
                goto out;
            }
            n = 0;
            used = 0;
        }
        if (ti_read_grid(t, f, &dfd, &cur, pool + used, need, &h, &wd) < 0) {
            rc = -1;
            goto out;
        }
        if (h != f->h || wd != f->w || ti_grid_hash(pool + used, h, wd) != f->hash) {
            ti_bad(t,
                   "%s: changed while mkpcrfs was reading it (the model was trained on the "
                   "old grid)",
                   ti_src_desc(t, f));
            rc = -1;
            goto out;
        }
        items[n++] = (struct pcr_tok_item){
            .id = k + 1,
            .dir = t->dirs[f->dir].id,
            .name = f->name,
            .grid = pool + used,
            .h = h,
            .w = wd,
        };
        used += need;
        done_bytes += f->size;
        pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS, k + 1, t->nfiles, done_bytes, t->total_bytes,
                         false);
    }
    if (flush_shard(w, items, n) < 0) {
        rc = -1;
        goto out;
    }
    pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS, t->nfiles, t->nfiles, done_bytes, t->total_bytes,
                     true);
    if (t->codebook && pcr_writer_set_blob(w, "codebook", t->codebook, t->codebook_len) < 0) {
        pcr_bld_err("writing the codebook: %s", pcr_writer_error(w));
        rc = -1;
        goto out;
    }
    rc = write_meta(t, w);
    if (rc < 0) {
        pcr_bld_err("writing the token metadata: %s", pcr_writer_error(w));
        rc = -1;
    }
out:
    if (dfd >= 0)
        close(dfd);
    free(pool);
    free(items);
    return rc;
}

uint64_t tokimport_count(const struct tokimport *t)
{
    return t ? t->nfiles : 0;
}

void tokimport_free(struct tokimport *t)
{
    uint64_t i;

    if (!t)
        return;
    for (i = 0; i < t->ndirs; i++) {
        free(t->dirs[i].name);
        free(t->dirs[i].rel);
        free(t->dirs[i].kids);
        free(t->dirs[i].files);
    }
    free(t->dirs);
    for (i = 0; i < t->nfiles; i++) {
        free(t->files[i].name);
    }
    free(t->files);
    free(t->dorder);
    free(t->forder);
    free(t->buf);
    free(t->grid);
    free(t->codebook);
    pcr_tok_model_free(t->model);
    pcr_seit_close(t->seit);
    if (t->rootfd >= 0)
        close(t->rootfd);
    pcr_sbuf_free(&t->esc);
    pcr_sbuf_free(&t->path);
    free(t);
}
