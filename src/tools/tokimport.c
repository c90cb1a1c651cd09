/* pcrfs tools — importing token grids (see tokimport.h; tokimport_int.h says how
 * the import is split): the options, the in-memory tree and its numbering, and pass 2,
 * which writes every grid into shards.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "progress.h"
#include "tokimport_int.h"
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

bool tokimport_option(struct tokimport_opts *o, int c, const char *arg)
{
    static const char *const coders[] = {"auto", "huffman", "zstd-dict", NULL};
    static const enum pcr_tok_coder coder_of[] = {PCR_TOK_AUTO, PCR_TOK_HUFFMAN, PCR_TOK_ZSTD_DICT};
    char msg[512];
    unsigned w = 0;

    switch (c) {
    case TOKIMPORT_OPT_TOKENS:
        o->npy_dir = arg;
        return true;
    case TOKIMPORT_OPT_SEIT:
        o->seit_data = arg;
        return true;
    case TOKIMPORT_OPT_SEIT_INDEX:
        o->seit_index = arg;
        return true;
    case TOKIMPORT_OPT_SEIT_LABELS:
        o->seit_labels = arg;
        return true;
    case TOKIMPORT_OPT_SEIT_NAMES:
        o->seit_names = arg;
        return true;
    case TOKIMPORT_OPT_SEIT_SHAPE:
        if (parse_shape(arg, &o->seit_h, &o->seit_w) < 0) {
            pcr_opt_msg(msg, sizeof(msg), "--seit-shape", arg,
                        "want HxW or N (N x N), sides 1..%u, at most %u tokens", PCR_TOK_MAX_SIDE,
                        PCR_TOK_MAX_TOKENS);
            tool_usage_error("%s", msg);
        }
        return true;
    case TOKIMPORT_OPT_CODEBOOK:
        o->codebook = arg;
        return true;
    case TOKIMPORT_OPT_CODER:
        tool_opt_check(pcr_opt_word("--tok-coder", arg, coders, &w, msg, sizeof(msg)), msg);
        o->coder = coder_of[w];
        return true;
    case TOKIMPORT_OPT_PER_SHARD:
        o->per_shard = (unsigned)tool_opt_uint("--tok-per-shard", arg, 1, 1u << 20);
        return true;
    }
    return false;
}

bool tokimport_enabled(const struct tokimport_opts *o)
{
    if (o->npy_dir && o->seit_data)
        tool_usage_error("--tokens and --seit cannot be used together");
    if (o->seit_data && !o->seit_labels)
        tool_usage_error("--seit needs --seit-labels FILE");
    if (!o->seit_data && (o->seit_labels || o->seit_names || o->seit_index || o->seit_h))
        tool_usage_error("--seit-labels, --seit-names, --seit-index and --seit-shape apply "
                         "only with --seit");
    if (!o->npy_dir && !o->seit_data && (o->codebook || o->coder || o->per_shard))
        tool_usage_error("--codebook, --tok-coder and --tok-per-shard need --tokens or --seit");
    return o->npy_dir || o->seit_data;
}

void tokimport_usage(FILE *f)
{
    fprintf(f,
            "Token grids (served as tokens/.../NAME.tok, NumPy <u2 (H, W) arrays):\n"
            "      --tokens DIR      a tree of per-image .npy files (any depth, integer\n"
            "                        dtype, values 0..65535); DIR/a/x.npy -> tokens/a/x.tok\n"
            "      --seit DATA       SeiT's release format: DATA (*data.bin[.gz]) and the\n"
            "                        index.npy[.gz] beside it; tokens 0..509, read as\n"
            "                        SeiT's own reader does\n"
            "      --seit-labels FILE  one label per line (required with --seit)\n"
            "      --seit-names FILE   one relative path per line: a/x.JPEG -> tokens/a/x.tok\n"
            "                        (default: tokens/LABEL/K.tok)\n"
            "      --seit-index FILE the index file, if not beside DATA\n"
            "      --seit-shape HxW  grid shape of the SeiT data (default 32x32)\n"
            "      --codebook FILE   a [K, D] float .npy, served as /.pcrfs/codebook.npy\n"
            "      --tok-coder C     auto (default: the smaller on held-out grids),\n"
            "                        huffman or zstd-dict\n"
            "      --tok-per-shard N grids per token shard (default %u)\n",
            TOKIMPORT_PER_SHARD);
}

/* ---- helpers ---------------------------------------------------------------------- */

static void push(uint64_t **v, uint64_t *n, uint64_t *cap, uint64_t x)
{
    if (*n == *cap)
        *v = tool_grow(*v, cap, 4, sizeof(**v));
    (*v)[(*n)++] = x;
}

uint64_t ti_new_dir(struct tokimport *t, uint64_t parent, const char *name, const char *rel)
{
    struct tdir *d;

    if (t->ndirs == t->dircap)
        t->dirs = tool_grow(t->dirs, &t->dircap, 64, sizeof(*t->dirs));
    d = &t->dirs[t->ndirs];
    memset(d, 0, sizeof(*d));
    d->name = tool_xstrdup(name);
    d->rel = rel ? tool_xstrdup(rel) : NULL;
    d->parent = parent;
    if (t->ndirs)
        push(&t->dirs[parent].kids, &t->dirs[parent].nkids, &t->dirs[parent].kidcap, t->ndirs);
    return t->ndirs++;
}

struct tfile *ti_new_file(struct tokimport *t, uint64_t dir, char *name)
{
    struct tfile *f;

    if (t->nfiles == t->filecap)
        t->files = tool_grow(t->files, &t->filecap, 256, sizeof(*t->files));
    f = &t->files[t->nfiles];
    memset(f, 0, sizeof(*f));
    f->dir = dir;
    f->name = name;
    push(&t->dirs[dir].files, &t->dirs[dir].nfiles, &t->dirs[dir].filecap, t->nfiles);
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
    if (stem + 4 > 255)
        return NULL;
    out = tool_xmalloc(stem + 5);
    memcpy(out, base, stem);
    memcpy(out + stem, ".tok", 5);
    return out;
}

/* DIR/REL/NAME of an .npy source, escaped for display (valid until the next call). */
const char *ti_npy_path(struct tokimport *t, const char *rel, const char *name)
{
    tool_buf_reset(&t->path);
    tool_buf_add(&t->path, t->o.npy_dir, strlen(t->o.npy_dir));
    if (rel && rel[0]) {
        tool_buf_add(&t->path, "/", 1);
        tool_buf_add(&t->path, rel, strlen(rel));
    }
    if (name) {
        tool_buf_add(&t->path, "/", 1);
        tool_buf_add(&t->path, name, strlen(name));
    }
    return tool_escaped(&t->esc, t->path.s);
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
    snprintf(head, sizeof(head), "SeiT image %" PRIu64 " (", f->seit);
    tool_buf_reset(&t->path);
    tool_buf_add(&t->path, head, strlen(head));
    tool_escape(&t->path, name, strlen(name));
    tool_buf_add(&t->path, ")", 1);
    return t->path.s;
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
    tool_err("%s", line);
}

void ti_skipped(struct tokimport *t, const char *what, const char *why)
{
    if (t->skipped++ < MAX_REPORTED)
        tool_warn("skipped %s: %s", what, why);
}

int ti_read_grid(struct tokimport *t, const struct tfile *f, int *dfd, uint64_t *cur,
                 uint16_t *grid, size_t cap, unsigned *h, unsigned *w)
{
    if (t->seit) {
        char err[1024];

        if (pcr_seit_grid(t->seit, f->seit, grid, err, sizeof(err)) < 0) {
            ti_bad(t, "%s: %s", tool_escaped(&t->esc, t->o.seit_data), err);
            return -1;
        }
        pcr_seit_shape(t->seit, h, w);
        return 0;
    }
    if (f->dir != *cur) {
        if (*dfd >= 0)
            close(*dfd);
        *cur = f->dir;
        *dfd = tool_open_rel(t->rootfd, t->dirs[*cur].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

    tool_buf_reset(&t->path);
    tool_buf_add(&t->path, "tokens", 6);
    for (uint64_t x = d; x != 0 && n < 256; x = t->dirs[x].parent)
        chain[n++] = x;
    while (n--) {
        tool_buf_add(&t->path, "/", 1);
        tool_escape(&t->path, t->dirs[chain[n]].name, strlen(t->dirs[chain[n]].name));
    }
    if (name) {
        tool_buf_add(&t->path, "/", 1);
        tool_escape(&t->path, name, strlen(name));
    }
    return t->path.s;
}

/* Two entries of one directory with the same final name. */
static void clash(struct tokimport *t, uint64_t d, const char *name, const char *a, const char *b)
{
    char *where = tool_xstrdup(tok_path(t, d, name));

    ti_bad(t, "%s: two entries would have this name: %s and %s", where, a, b);
    free(where);
}

static const char *dup_desc(struct tokimport *t, const struct tfile *f, char *buf, size_t len)
{
    snprintf(buf, len, "%s", ti_src_desc(t, f));
    return buf;
}

/* Number the tree breadth-first (pcrfs/writer.h); two entries of one directory with
 * the same final name are bad items. */
void ti_number_tree(struct tokimport *t)
{
    uint64_t nd = 1, nf = 0, q;
    char a[4200], b[4200];

    t->dorder = tool_xmalloc(t->ndirs * sizeof(*t->dorder));
    t->forder = tool_xmalloc((t->nfiles ? t->nfiles : 1) * sizeof(*t->forder));
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
    uint64_t nshards, bytes = ti_tokens_dir_bytes(pcr_writer_tmpdir(w), &nshards);
    uint64_t blobs = bytes - nshards * PCR_TOKSHARD_HEADER;
    size_t model_len = 0;
    int rc;

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
        tool_err("writing the token shards: %s",
                 pcr_writer_error(w)[0] ? pcr_writer_error(w) : strerror(-rc));
        return -1;
    }
    return 0;
}

int tokimport_write(struct tokimport *t, struct pcr_writer *w)
{
    struct pcr_tok_item *items = tool_xmalloc(t->o.per_shard * sizeof(*items));
    size_t poolcap = t->total_tokens < SHARD_TOKENS ? (size_t)t->total_tokens : SHARD_TOKENS;
    uint16_t *pool;
    uint64_t k, cur = UINT64_MAX, done_bytes = 0;
    size_t used = 0;
    unsigned n = 0;
    int dfd = -1, rc;

    /* a grid never exceeds PCR_TOK_MAX_TOKENS <= SHARD_TOKENS, so one always fits */
    pool = tool_xmalloc((poolcap ? poolcap : 1) * sizeof(*pool));
    rc = pcr_writer_set_tok_model(w, t->model);
    if (rc == 0)
        rc = write_dirs(t, w);
    if (rc < 0) {
        tool_err("writing the token tree: %s",
                 pcr_writer_error(w)[0] ? pcr_writer_error(w) : strerror(-rc));
        rc = -1;
        goto out;
    }
    progress_start(t->o.progress, t->nfiles, t->total_bytes);
    for (k = 0; k < t->nfiles; k++) {
        struct tfile *f = &t->files[t->forder[k]];
        size_t need = (size_t)f->h * f->w;
        unsigned h = 0, wd = 0;

        if (*t->stop) {
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
        progress_update(k + 1, done_bytes, false);
    }
    if (flush_shard(w, items, n) < 0) {
        rc = -1;
        goto out;
    }
    progress_update(t->nfiles, done_bytes, true);
    if (t->codebook && pcr_writer_set_blob(w, "codebook", t->codebook, t->codebook_len) < 0) {
        tool_err("writing the codebook: %s", pcr_writer_error(w));
        rc = -1;
        goto out;
    }
    rc = write_meta(t, w);
    if (rc < 0) {
        tool_err("writing the token metadata: %s", pcr_writer_error(w));
        rc = -1;
    }
out:
    progress_finish();
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
    tool_buf_free(&t->esc);
    tool_buf_free(&t->path);
    free(t);
}
