/* pcrfs tools — importing token grids (see tokimport.h).
 *
 * Both sources are first turned into the same in-memory tree (struct tdir / tfile,
 * in discovery order), then numbered once the way pcrfs/writer.h wants it: a
 * breadth-first pass that sorts each directory's subdirectories and files by their
 * *final* names. Sorting after the renaming matters: replacing ".npy" by ".tok"
 * can change the byte order of two names ("a.npy" < "a.o.npy" but "a.o.tok" <
 * "a.tok"), and SeiT names arrive in any order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "progress.h"
#include "tokimport.h"
#include "tool.h"
#include "util/json.h"

#define MAX_REPORTED 20         /* bad items (and skipped files) listed one by one */
#define SHARD_TOKENS (1u << 24) /* tokens held in memory for one shard: 32 MiB */
/* A PCR_TOK_MAX_TOKENS grid of 8-byte integers plus a generous header, as the
 * library's own pcr_npy_load_grid() allows. */
#define MAX_NPY_BYTES ((size_t)PCR_TOK_MAX_TOKENS * 8 + (1u << 20))
/* The reader refuses a codebook blob larger than this (src/lib/store/), so the
 * builder must too. */
#define MAX_CODEBOOK_BYTES ((size_t)256 << 20)

struct tdir {
    char *name;      /* "" for the root */
    char *rel;       /* --tokens: path relative to DIR ("" for the root) */
    uint64_t parent; /* index of the parent (the root: 0, itself) */
    dev_t dev;       /* --tokens: identity, to detect symlink loops */
    ino_t ino;
    uint64_t *kids; /* indices of the subdirectories */
    uint64_t nkids, kidcap;
    uint64_t *files; /* indices of the files */
    uint64_t nfiles, filecap;
    uint64_t id;                      /* final id (1 = root) */
    uint64_t first_child, first_file; /* final ids */
};

struct tfile {
    uint64_t dir;  /* index of its directory */
    char *name;    /* final name, "x.tok" (--tokens: the source is "x.npy") */
    uint64_t seit; /* --seit: the image number */
    uint64_t size; /* source bytes (for the progress bar) */
    unsigned h, w; /* from pass 1 */
    uint64_t hash; /* of the grid read in pass 1, to catch a file changed since */
};

struct tokimport {
    struct tokimport_opts o;     /* as given, per_shard defaulted */
    volatile sig_atomic_t *stop; /* set by the caller's signal handler */
    int rootfd;                  /* --tokens DIR, else -1 */
    struct pcr_seit *seit;       /* --seit, else NULL */
    struct tdir *dirs;           /* [0] is the root; in discovery order */
    uint64_t ndirs, dircap;
    struct tfile *files; /* in discovery order (--tokens: grouped by directory) */
    uint64_t nfiles, filecap;
    uint64_t *dorder;      /* final directory id - 1 -> index in dirs */
    uint64_t *forder;      /* final file id - 1 -> index in files */
    uint64_t total_bytes;  /* source bytes of all grids (progress bar) */
    uint64_t total_tokens; /* sum of H*W (sizes the shard buffer) */
    uint64_t bad, skipped; /* items reported as bad / skipped so far */
    struct {               /* directories never entered (STORE, its temp dir) */
        dev_t dev;
        ino_t ino;
        bool store; /* STORE itself: say so */
    } skip[2];
    unsigned nskip;
    uint8_t *buf; /* an .npy file being read */
    size_t bufcap;
    uint16_t *grid;                  /* pass 1: the grid being read */
    struct pcr_tok_model *model;     /* trained in pass 1 */
    struct pcr_tok_train_report rep; /* what training saw (meta keys) */
    uint8_t *codebook;               /* --codebook file's bytes */
    size_t codebook_len;
    struct tool_buf esc, path; /* message buffers */
};

/* ---- options --------------------------------------------------------------------- */

static int parse_shape(const char *s, unsigned *h, unsigned *w)
{
    unsigned long long a, b;
    const char *x = strchr(s, 'x');
    char num[32];

    if (!x) {
        if (tool_parse_uint(s, 1, PCR_TOK_MAX_SIDE, &a) < 0)
            return -1;
        b = a;
    } else {
        if ((size_t)(x - s) >= sizeof(num))
            return -1;
        memcpy(num, s, (size_t)(x - s));
        num[x - s] = '\0';
        if (tool_parse_uint(num, 1, PCR_TOK_MAX_SIDE, &a) < 0 ||
            tool_parse_uint(x + 1, 1, PCR_TOK_MAX_SIDE, &b) < 0)
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
    unsigned long long v;

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
        if (parse_shape(arg, &o->seit_h, &o->seit_w) < 0)
            tool_usage_error("invalid --seit-shape '%s' (HxW or N, sides 1..%u, at most %u "
                             "tokens)",
                             arg, PCR_TOK_MAX_SIDE, PCR_TOK_MAX_TOKENS);
        return true;
    case TOKIMPORT_OPT_CODEBOOK:
        o->codebook = arg;
        return true;
    case TOKIMPORT_OPT_CODER:
        if (strcmp(arg, "auto") == 0)
            o->coder = PCR_TOK_AUTO;
        else if (strcmp(arg, "huffman") == 0)
            o->coder = PCR_TOK_HUFFMAN;
        else if (strcmp(arg, "zstd-dict") == 0)
            o->coder = PCR_TOK_ZSTD_DICT;
        else
            tool_usage_error("invalid --tok-coder '%s' (auto, huffman or zstd-dict)", arg);
        return true;
    case TOKIMPORT_OPT_PER_SHARD:
        if (tool_parse_uint(arg, 1, 1u << 20, &v) < 0)
            tool_usage_error("invalid --tok-per-shard '%s' (1..%u)", arg, 1u << 20);
        o->per_shard = (unsigned)v;
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
            "                        index.npy[.gz] beside it\n"
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

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        tool_oom();
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);

    if (!p)
        tool_oom();
    return p;
}

static void push(uint64_t **v, uint64_t *n, uint64_t *cap, uint64_t x)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *v = xrealloc(*v, *cap * sizeof(**v));
    }
    (*v)[(*n)++] = x;
}

static uint64_t new_dir(struct tokimport *t, uint64_t parent, const char *name, const char *rel)
{
    struct tdir *d;

    if (t->ndirs == t->dircap) {
        t->dircap = t->dircap ? t->dircap * 2 : 64;
        t->dirs = xrealloc(t->dirs, t->dircap * sizeof(*t->dirs));
    }
    d = &t->dirs[t->ndirs];
    memset(d, 0, sizeof(*d));
    d->name = xstrdup(name);
    d->rel = rel ? xstrdup(rel) : NULL;
    d->parent = parent;
    if (t->ndirs)
        push(&t->dirs[parent].kids, &t->dirs[parent].nkids, &t->dirs[parent].kidcap, t->ndirs);
    return t->ndirs++;
}

static struct tfile *new_file(struct tokimport *t, uint64_t dir, char *name)
{
    struct tfile *f;

    if (t->nfiles == t->filecap) {
        t->filecap = t->filecap ? t->filecap * 2 : 256;
        t->files = xrealloc(t->files, t->filecap * sizeof(*t->files));
    }
    f = &t->files[t->nfiles];
    memset(f, 0, sizeof(*f));
    f->dir = dir;
    f->name = name;
    push(&t->dirs[dir].files, &t->dirs[dir].nfiles, &t->dirs[dir].filecap, t->nfiles);
    t->nfiles++;
    return f;
}

/* FNV-1a over the shape and the values: a grid read twice must give the same. */
static uint64_t grid_hash(const uint16_t *g, unsigned h, unsigned w)
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
static char *tok_name(const char *base)
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
    out = xrealloc(NULL, stem + 5);
    memcpy(out, base, stem);
    memcpy(out + stem, ".tok", 5);
    return out;
}

/* DIR/REL/NAME of an .npy source, escaped for display (valid until the next call). */
static const char *npy_path(struct tokimport *t, const char *rel, const char *name)
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
static const char *npy_name(const struct tfile *f, char *buf, size_t len)
{
    size_t n = strlen(f->name);

    snprintf(buf, len, "%.*s.npy", (int)(n - 4), f->name);
    return buf;
}

/* Where a file's grid comes from, for messages (valid until the next call). */
static const char *src_desc(struct tokimport *t, const struct tfile *f)
{
    char name[8192], head[64];

    if (!t->seit)
        return npy_path(t, t->dirs[f->dir].rel, npy_name(f, name, sizeof(name)));
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
static void bad(struct tokimport *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bad(struct tokimport *t, const char *fmt, ...)
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

static void skipped(struct tokimport *t, const char *what, const char *why)
{
    if (t->skipped++ < MAX_REPORTED)
        tool_warn("skipped %s: %s", what, why);
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
    char *where = xstrdup(tok_path(t, d, name));

    bad(t, "%s: two entries would have this name: %s and %s", where, a, b);
    free(where);
}

static const char *dup_desc(struct tokimport *t, const struct tfile *f, char *buf, size_t len)
{
    snprintf(buf, len, "%s", src_desc(t, f));
    return buf;
}

/* Number the tree breadth-first (pcrfs/writer.h); two entries of one directory with
 * the same final name are bad items. */
static void number_tree(struct tokimport *t)
{
    uint64_t nd = 1, nf = 0, q;
    char a[4200], b[4200];

    t->dorder = xrealloc(NULL, t->ndirs * sizeof(*t->dorder));
    t->forder = xrealloc(NULL, (t->nfiles ? t->nfiles : 1) * sizeof(*t->forder));
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

/* ---- --tokens DIR: the walk ------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_npy(const char *name)
{
    size_t n = strlen(name);

    /* "x.npy" with a non-empty stem; ".npy" alone is a hidden file, not a grid */
    return n > 4 && strcmp(name + n - 4, ".npy") == 0;
}

static bool on_path(const struct tokimport *t, uint64_t d, dev_t dev, ino_t ino)
{
    for (;;) {
        if (t->dirs[d].dev == dev && t->dirs[d].ino == ino)
            return true;
        if (d == 0)
            return false;
        d = t->dirs[d].parent;
    }
}

static int walk_dir(struct tokimport *t, uint64_t d)
{
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    struct dirent *de;
    DIR *dir;
    int fd, dfd;

    fd = tool_open_rel(t->rootfd, t->dirs[d].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(dir = fdopendir(fd))) {
        int e = errno;

        if (fd >= 0)
            close(fd);
        bad(t, "cannot open directory %s: %s", npy_path(t, t->dirs[d].rel, NULL), strerror(e));
        return 0;
    }
    while ((errno = 0, de = readdir(dir)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = xrealloc(names, cap * sizeof(*names));
        }
        names[n++] = xstrdup(de->d_name);
    }
    if (errno)
        bad(t, "reading directory %s: %s", npy_path(t, t->dirs[d].rel, NULL), strerror(errno));
    if (n)
        qsort(names, n, sizeof(*names), cmp_str);
    dfd = dirfd(dir);
    for (i = 0; i < n; i++) {
        struct stat st, lst;
        const char *rel = t->dirs[d].rel;
        char *sub;
        unsigned k;

        if (*t->stop)
            break;
        if (fstatat(dfd, names[i], &st, 0) < 0) {
            int e = errno;

            if ((e == ENOENT || e == ELOOP) &&
                fstatat(dfd, names[i], &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
                skipped(t, npy_path(t, rel, names[i]),
                        e == ENOENT ? "dangling symbolic link"
                                    : "too many levels of symbolic links");
            else
                bad(t, "cannot stat %s: %s", npy_path(t, rel, names[i]), strerror(e));
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            bool excluded = false;

            for (k = 0; k < t->nskip; k++) {
                if (t->skip[k].dev == st.st_dev && t->skip[k].ino == st.st_ino) {
                    if (t->skip[k].store)
                        tool_warn("not entering %s: it is STORE", npy_path(t, rel, names[i]));
                    excluded = true;
                }
            }
            if (excluded)
                continue;
            if (on_path(t, d, st.st_dev, st.st_ino)) {
                skipped(t, npy_path(t, rel, names[i]),
                        "symbolic link loop (a directory that contains it)");
                continue;
            }
            if (rel[0]) {
                sub = xrealloc(NULL, strlen(rel) + strlen(names[i]) + 2);
                sprintf(sub, "%s/%s", rel, names[i]);
            } else {
                sub = xstrdup(names[i]);
            }
            uint64_t c = new_dir(t, d, names[i], sub);

            free(sub);
            t->dirs[c].dev = st.st_dev;
            t->dirs[c].ino = st.st_ino;
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            skipped(t, npy_path(t, rel, names[i]), "not a regular file");
            continue;
        }
        if (!ends_npy(names[i])) {
            skipped(t, npy_path(t, rel, names[i]), "not a .npy file");
            continue;
        }
        /* x.npy -> x.tok: same length, renamed in place and handed over */
        memcpy(names[i] + strlen(names[i]) - 3, "tok", 3);
        struct tfile *f = new_file(t, d, names[i]);

        names[i] = NULL;
        f->size = (uint64_t)st.st_size;
        t->total_bytes += f->size;
    }
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dir);
    return 0;
}

static int npy_walk(struct tokimport *t)
{
    struct stat st;

    t->rootfd = open(t->o.npy_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->rootfd < 0 || fstat(t->rootfd, &st) < 0) {
        tool_err("--tokens %s: %s", tool_escaped(&t->esc, t->o.npy_dir), strerror(errno));
        return -1;
    }
    new_dir(t, 0, "", "");
    t->dirs[0].dev = st.st_dev;
    t->dirs[0].ino = st.st_ino;
    /* The array is the queue: subdirectories are appended as their parent is read. */
    for (uint64_t d = 0; d < t->ndirs && !*t->stop; d++)
        walk_dir(t, d);
    if (t->skipped > MAX_REPORTED)
        tool_warn("skipped %" PRIu64 " more entries of %s that are not .npy files",
                  t->skipped - MAX_REPORTED, tool_escaped(&t->esc, t->o.npy_dir));
    return *t->stop ? -2 : 0;
}

/* Read the .npy of @f (in the open directory @dfd) into @grid (@cap tokens).
 * @return 0; -1 bad (reported). */
static int load_npy(struct tokimport *t, int dfd, const struct tfile *f, uint16_t *grid, size_t cap,
                    unsigned *h, unsigned *w)
{
    struct pcr_npy a;
    struct stat st;
    char why[512], name[300];
    size_t len = 0;
    int fd, rc;

    fd = tool_open_noatime(dfd, npy_name(f, name, sizeof(name)), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        bad(t, "%s: %s", src_desc(t, f), strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > MAX_NPY_BYTES) {
        close(fd);
        bad(t, "%s: %" PRIu64 " bytes, too large for a token grid of at most %u tokens",
            src_desc(t, f), (uint64_t)st.st_size, PCR_TOK_MAX_TOKENS);
        return -1;
    }
    /* One byte more than the size, to see a file that grew. */
    if ((size_t)st.st_size + 1 > t->bufcap) {
        t->bufcap = (size_t)st.st_size + 1;
        t->buf = xrealloc(t->buf, t->bufcap);
    }
    for (;;) {
        ssize_t r = read(fd, t->buf + len, t->bufcap - len);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;

            close(fd);
            bad(t, "%s: read: %s", src_desc(t, f), strerror(e));
            return -1;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len == t->bufcap) {
            close(fd);
            bad(t, "%s: the file grew while it was read", src_desc(t, f));
            return -1;
        }
    }
    close(fd);
    rc = pcr_npy_parse(t->buf, len, &a, why, sizeof(why));
    if (rc == 0)
        rc = pcr_npy_to_grid(&a, grid, cap, h, w, why, sizeof(why));
    if (rc) {
        bad(t, "%s: %s", src_desc(t, f),
            rc == -E2BIG ? "more tokens than it had when it was first read" : why);
        return -1;
    }
    return 0;
}

/* ---- --seit ------------------------------------------------------------------------ */

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
    char *const *names = ctx;

    return strcmp(names[*(const uint64_t *)a], names[*(const uint64_t *)b]);
}

/* Labels that DatasetFolder would not reproduce: it numbers classes by sorted
 * top-level directory, so the class index equals SeiT's label only if each class
 * directory holds one label and the labels go 0, 1, 2, ... in directory order.
 * Only a warning: the grids are imported either way. */
static void check_labels(struct tokimport *t, char **names, const uint64_t *order, uint64_t n)
{
    uint64_t i = 0, cls = 0, mixed = 0, renumbered = 0;
    char first_mixed[300] = "", first_renum[300] = "";

    while (i < n) {
        const char *nm = names[order[i]], *slash = strchr(nm, '/');
        size_t clen = slash ? (size_t)(slash - nm) : 0;
        struct pcr_seit_item it;
        uint64_t label, j;
        bool one = true;

        pcr_seit_item(t->seit, order[i], &it);
        label = it.label;
        for (j = i + 1; j < n; j++) {
            const char *m = names[order[j]];

            if (!clen || strncmp(m, nm, clen + 1) != 0)
                break;
            pcr_seit_item(t->seit, order[j], &it);
            if (it.label != label)
                one = false;
        }
        if (clen) {
            if (!one && mixed++ == 0)
                snprintf(first_mixed, sizeof(first_mixed), "%.*s", (int)clen, nm);
            else if (one && label != cls && renumbered++ == 0)
                snprintf(first_renum, sizeof(first_renum),
                         "'%.*s' is class %" PRIu64 " but has SeiT label %" PRIu64, (int)clen, nm,
                         cls, label);
            cls++;
        }
        i = j;
    }
    if (mixed)
        tool_warn("%s: %" PRIu64 " class directories hold images of several labels (the "
                  "first: '%s'); DatasetFolder's labels will differ from SeiT's",
                  tool_escaped(&t->esc, t->o.seit_names), mixed, first_mixed);
    else if (renumbered)
        tool_warn("%s: DatasetFolder numbers classes by directory name: %s (%" PRIu64
                  " classes differ)",
                  tool_escaped(&t->esc, t->o.seit_names), first_renum, renumbered);
}

static int seit_tree(struct tokimport *t)
{
    struct pcr_seit_paths paths = {.data = t->o.seit_data,
                                   .index = t->o.seit_index,
                                   .labels = t->o.seit_labels,
                                   .names = t->o.seit_names};
    struct pcr_seit_opts so = {.h = t->o.seit_h, .w = t->o.seit_w};
    char err[1024] = "", buf[8192];
    uint64_t n, i, *order;
    char **names;
    /* The directories along the previous name: names sorted in byte order keep every
     * directory's entries together, so each directory is created once. */
    struct {
        const char *comp;
        size_t len;
        uint64_t dir;
    } stack[256];
    unsigned depth = 0;
    int rc;

    rc = pcr_seit_open(&paths, &so, &t->seit, err, sizeof(err));
    if (rc) {
        tool_err("%s", err[0] ? err : strerror(-rc));
        return -1;
    }
    n = pcr_seit_count(t->seit);
    names = xrealloc(NULL, (n ? n : 1) * sizeof(*names));
    order = xrealloc(NULL, (n ? n : 1) * sizeof(*order));
    for (i = 0; i < n; i++) {
        struct pcr_seit_item it;

        if (pcr_seit_name(t->seit, i, buf, sizeof(buf)) < 0) {
            bad(t, "SeiT image %" PRIu64 ": name too long", i);
            buf[0] = '\0';
        }
        names[i] = xstrdup(buf);
        order[i] = i;
        pcr_seit_item(t->seit, i, &it);
        t->total_bytes += it.length;
    }
    if (n > 1)
        qsort_r(order, n, sizeof(*order), cmp_name_idx, names);
    new_dir(t, 0, "", NULL);
    for (i = 0; i < n && !t->bad; i++) {
        const char *nm = names[order[i]], *p = nm, *slash;
        unsigned level = 0;
        uint64_t dir = 0;
        char *tn;

        /* follow or create the directories of this name */
        while ((slash = strchr(p, '/')) != NULL) {
            size_t len = (size_t)(slash - p);

            if (level == 256) {
                bad(t, "SeiT image %" PRIu64 ": more than 256 directory levels", order[i]);
                break;
            }
            if (len > 255) {
                bad(t, "SeiT image %" PRIu64 ": a directory name longer than 255 bytes", order[i]);
                break;
            }
            if (level < depth && stack[level].len == len &&
                memcmp(stack[level].comp, p, len) == 0) {
                dir = stack[level].dir;
            } else {
                char comp[256];

                memcpy(comp, p, len);
                comp[len] = '\0';
                dir = new_dir(t, dir, comp, NULL);
                stack[level].comp = p;
                stack[level].len = len;
                stack[level].dir = dir;
                depth = level + 1;
            }
            level++;
            p = slash + 1;
        }
        if (t->bad)
            break;
        /* the stack now holds exactly this name's directories */
        depth = level;
        tn = tok_name(p);
        if (!tn) {
            bad(t, "SeiT image %" PRIu64 ": the name '%s' is too long with .tok", order[i],
                tool_escaped(&t->esc, p));
            break;
        }
        new_file(t, dir, tn)->seit = order[i];
    }
    if (!t->bad && t->o.seit_names)
        check_labels(t, names, order, n);
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(order);
    return 0;
}

/* ---- pass 1 ------------------------------------------------------------------------ */

static int train(struct tokimport *t, struct pcr_tok_trainer *tr)
{
    uint64_t i, done_bytes = 0;
    uint64_t cur = UINT64_MAX, *by_image = NULL;
    int dfd = -1, rc = 0;

    /* SeiT images in file order: the data is read sequentially and messages come in
     * image order. (Files of a --tokens tree are already grouped by directory.) */
    if (t->seit) {
        by_image = xrealloc(NULL, (t->nfiles ? t->nfiles : 1) * sizeof(*by_image));
        for (i = 0; i < t->nfiles; i++)
            by_image[t->files[i].seit] = i;
    }
    progress_start(t->o.progress, t->nfiles, t->total_bytes);
    for (i = 0; i < t->nfiles; i++) {
        struct tfile *f = &t->files[by_image ? by_image[i] : i];
        unsigned h, w;

        if (*t->stop) {
            rc = -2;
            break;
        }
        if (t->seit) {
            char err[1024];
            struct pcr_seit_item it;

            pcr_seit_item(t->seit, f->seit, &it);
            f->size = it.length;
            if (pcr_seit_grid(t->seit, f->seit, t->grid, err, sizeof(err)) < 0) {
                bad(t, "%s: %s", tool_escaped(&t->esc, t->o.seit_data), err);
                continue;
            }
            pcr_seit_shape(t->seit, &h, &w);
        } else {
            if (f->dir != cur) {
                if (dfd >= 0)
                    close(dfd);
                cur = f->dir;
                dfd = tool_open_rel(t->rootfd, t->dirs[cur].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0)
                    bad(t, "cannot open directory %s: %s", npy_path(t, t->dirs[cur].rel, NULL),
                        strerror(errno));
            }
            if (dfd < 0 || load_npy(t, dfd, f, t->grid, PCR_TOK_MAX_TOKENS, &h, &w) < 0)
                continue;
        }
        f->h = h;
        f->w = w;
        f->hash = grid_hash(t->grid, h, w);
        t->total_tokens += (uint64_t)h * w;
        if (!t->bad && pcr_tok_trainer_add(tr, t->grid, h, w) < 0)
            tool_oom();
        done_bytes += f->size;
        progress_update(i + 1, done_bytes, false);
    }
    if (dfd >= 0)
        close(dfd);
    free(by_image);
    if (rc == 0)
        progress_update(t->nfiles, done_bytes, true);
    progress_finish();
    return rc;
}

/* Read and check --codebook: first alone (@min_entries 0, before the long pass),
 * then against the largest token value (the bytes are already loaded). */
static int load_codebook(struct tokimport *t, uint64_t min_entries)
{
    const char *path = t->o.codebook;
    struct pcr_npy a;
    struct stat st;
    char why[512];
    size_t len = 0;
    int fd;

    if (t->codebook) {
        if (pcr_npy_parse(t->codebook, t->codebook_len, &a, why, sizeof(why)) < 0 ||
            pcr_npy_check_codebook(&a, min_entries, why, sizeof(why)) < 0) {
            tool_err("--codebook %s: %s", tool_escaped(&t->esc, path), why);
            return -1;
        }
        return 0;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        tool_err("--codebook %s: %s", tool_escaped(&t->esc, path), strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_CODEBOOK_BYTES) {
        close(fd);
        tool_err("--codebook %s: %s", tool_escaped(&t->esc, path),
                 S_ISREG(st.st_mode) ? "larger than 256 MiB" : "not a regular file");
        return -1;
    }
    t->codebook = xrealloc(NULL, (size_t)st.st_size + 1);
    for (;;) {
        ssize_t r = read(fd, t->codebook + len, (size_t)st.st_size + 1 - len);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;

            close(fd);
            tool_err("--codebook %s: read: %s", tool_escaped(&t->esc, path), strerror(e));
            return -1;
        }
        if (r == 0 || (len += (size_t)r) > (size_t)st.st_size)
            break;
    }
    close(fd);
    if (len > (size_t)st.st_size) {
        tool_err("--codebook %s: the file grew while it was read", tool_escaped(&t->esc, path));
        return -1;
    }
    t->codebook_len = len;
    if (pcr_npy_parse(t->codebook, len, &a, why, sizeof(why)) < 0 ||
        pcr_npy_check_codebook(&a, min_entries, why, sizeof(why)) < 0) {
        tool_err("--codebook %s: %s", tool_escaped(&t->esc, path), why);
        return -1;
    }
    return 0;
}

int tokimport_scan(const struct tokimport_opts *o, volatile sig_atomic_t *stop,
                   struct tokimport **out)
{
    static volatile sig_atomic_t never;
    struct tokimport *t = calloc(1, sizeof(*t));
    struct pcr_tok_train_opts to = {0};
    struct pcr_tok_trainer *tr = NULL;
    const char *src;
    char err[1024] = "";
    int rc;

    if (!t)
        tool_oom();
    *out = NULL;
    t->o = *o;
    if (!t->o.per_shard)
        t->o.per_shard = TOKIMPORT_PER_SHARD;
    t->stop = stop ? stop : &never;
    t->rootfd = -1;
    for (unsigned k = 0; k < 2; k++) {
        struct stat st;

        if (o->skip[k] && stat(o->skip[k], &st) == 0 && S_ISDIR(st.st_mode)) {
            t->skip[t->nskip].dev = st.st_dev;
            t->skip[t->nskip].ino = st.st_ino;
            t->skip[t->nskip++].store = k == 0;
        }
    }
    rc = o->codebook ? load_codebook(t, 0) : 0;
    if (rc == 0)
        rc = o->npy_dir ? npy_walk(t) : seit_tree(t);
    if (rc == 0)
        number_tree(t);
    src = o->npy_dir ? o->npy_dir : o->seit_data;
    if (rc == 0 && t->bad == 0 && t->nfiles == 0) {
        tool_err("%s: no token grid found%s", tool_escaped(&t->esc, src),
                 o->npy_dir ? " (no .npy file)" : "");
        rc = -1;
    }
    if (rc == 0) {
        t->grid = xrealloc(NULL, (size_t)PCR_TOK_MAX_TOKENS * sizeof(*t->grid));
        to.coder = o->coder;
        if (pcr_tok_trainer_new(&to, &tr) < 0)
            tool_oom();
        rc = train(t, tr);
    }
    if (rc == 0 && t->bad) {
        if (t->bad > MAX_REPORTED)
            tool_err("... and %" PRIu64 " more", t->bad - MAX_REPORTED);
        tool_err("%" PRIu64 " bad token %s in %s%s", t->bad, t->bad == 1 ? "input" : "inputs",
                 tool_escaped(&t->esc, src),
                 /* every image failing is the sign of a wrong shape */
                 t->seit && !o->seit_h && t->bad == t->nfiles
                     ? " (SeiT grids are taken as 32x32: see --seit-shape)"
                     : "");
        rc = -1;
    }
    if (rc == 0) {
        rc = pcr_tok_trainer_finish(tr, &t->model, &t->rep, err, sizeof(err));
        tr = NULL;
        if (rc < 0) {
            tool_err("training the token model: %s", err[0] ? err : strerror(-rc));
            rc = -1;
        }
    }
    if (tr)
        pcr_tok_trainer_free(tr);
    if (rc == 0 && o->codebook)
        rc = load_codebook(t, (uint64_t)t->rep.max_value + 1);
    if (rc == 0 && *t->stop)
        rc = -2;
    if (rc < 0) {
        tokimport_free(t);
        return rc == -2 ? -2 : -1;
    }
    free(t->grid);
    t->grid = NULL;
    *out = t;
    return 0;
}

/* ---- pass 2 ------------------------------------------------------------------------ */

/* A number from the meta table (NAN if absent or not a number: never trusted). */
static void meta_num(struct pcr_store *s, const char *key, double *out)
{
    char buf[64], *end;

    *out = NAN;
    if (pcr_store_meta(s, key, buf, sizeof(buf)) > 0) {
        double v = strtod(buf, &end);

        if (*end == '\0' && isfinite(v) && v >= 0)
            *out = v;
    }
}

/* Bytes and number of the files in STORE/tokens/: the shards (also of a store being
 * written, from its temporary directory). */
static uint64_t tokens_dir_bytes(const char *path, uint64_t *nfiles)
{
    char dir[PATH_MAX];
    struct dirent *de;
    struct stat st;
    uint64_t sum = 0;
    DIR *d;

    *nfiles = 0;
    snprintf(dir, sizeof(dir), "%s/tokens", path);
    d = opendir(dir);
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            sum += (uint64_t)st.st_size;
            (*nfiles)++;
        }
    }
    closedir(d);
    return sum;
}

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
    uint64_t nshards, bytes = tokens_dir_bytes(pcr_writer_tmpdir(w), &nshards);
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
    struct pcr_tok_item *items = xrealloc(NULL, t->o.per_shard * sizeof(*items));
    size_t poolcap = t->total_tokens < SHARD_TOKENS ? (size_t)t->total_tokens : SHARD_TOKENS;
    uint16_t *pool;
    uint64_t k, cur = UINT64_MAX, done_bytes = 0;
    size_t used = 0;
    unsigned n = 0;
    int dfd = -1, rc;

    /* a grid never exceeds PCR_TOK_MAX_TOKENS <= SHARD_TOKENS, so one always fits */
    pool = xrealloc(NULL, (poolcap ? poolcap : 1) * sizeof(*pool));
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
        if (t->seit) {
            char err[1024];

            if (pcr_seit_grid(t->seit, f->seit, pool + used, err, sizeof(err)) < 0) {
                bad(t, "%s: %s", tool_escaped(&t->esc, t->o.seit_data), err);
                rc = -1;
                goto out;
            }
            pcr_seit_shape(t->seit, &h, &wd);
        } else {
            if (f->dir != cur) {
                if (dfd >= 0)
                    close(dfd);
                cur = f->dir;
                dfd = tool_open_rel(t->rootfd, t->dirs[cur].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0) {
                    bad(t, "cannot open directory %s: %s", npy_path(t, t->dirs[cur].rel, NULL),
                        strerror(errno));
                    rc = -1;
                    goto out;
                }
            }
            if (load_npy(t, dfd, f, pool + used, need, &h, &wd) < 0) {
                rc = -1;
                goto out;
            }
        }
        if (h != f->h || wd != f->w || grid_hash(pool + used, h, wd) != f->hash) {
            bad(t,
                "%s: changed while mkpcrfs was reading it (the model was trained on the "
                "old grid)",
                src_desc(t, f));
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
    if (t->codebook &&
        (rc = pcr_writer_set_blob(w, "codebook", t->codebook, t->codebook_len)) < 0) {
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

/* ---- the token part of the store summary ------------------------------------------ */

static void meta_str(struct pcr_store *s, const char *key, char *buf, size_t len)
{
    if (pcr_store_meta(s, key, buf, len) < 0)
        buf[0] = '\0';
}

int toksum_compute(struct pcr_store *s, const char *path, struct toksum *ts, char *err,
                   size_t errlen)
{
    struct pcr_store *t = NULL;
    uint64_t nfiles;
    const void *cb;
    size_t cblen;
    int rc;

    memset(ts, 0, sizeof(*ts));
    if (pcr_store_codebook(s, &cb, &cblen) == 0) {
        struct pcr_npy a;
        char why[256];

        ts->codebook = true;
        ts->codebook_bytes = cblen;
        if (pcr_npy_parse(cb, cblen, &a, why, sizeof(why)) == 0 && a.ndim == 2) {
            ts->cb_k = a.shape[0];
            ts->cb_d = a.shape[1];
            snprintf(ts->cb_dtype, sizeof(ts->cb_dtype), "%s", a.descr);
        }
    }
    rc = pcr_store_open_tokens(s, &t, err, errlen);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return rc;
    ts->present = true;
    ts->grids = pcr_store_nfiles(t);
    ts->dirs = pcr_store_ndirs(t);
    ts->shards = pcr_store_nrecords(t);
    for (uint64_t id = 1; id <= ts->grids; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;

        rc = pcr_store_file(t, id, &f);
        if (rc < 0) {
            snprintf(err, errlen, "%s: token file %" PRIu64 ": %s", path, id, strerror(-rc));
            pcr_store_close(t);
            return rc;
        }
        pcr_file_info(f, &fi);
        ts->tokens += (uint64_t)fi.width * fi.height;
        ts->blob_bytes += fi.src_size;
        ts->served_bytes += pcr_file_size(f, 1);
        if (id == 1 || fi.height < ts->min_h || (fi.height == ts->min_h && fi.width < ts->min_w)) {
            ts->min_h = fi.height;
            ts->min_w = fi.width;
        }
        if (id == 1 || fi.height > ts->max_h || (fi.height == ts->max_h && fi.width > ts->max_w)) {
            ts->max_h = fi.height;
            ts->max_w = fi.width;
        }
    }
    pcr_store_close(t);
    meta_str(s, "tok_coder", ts->coder, sizeof(ts->coder));
    meta_num(s, "tok_entropy_bits", &ts->entropy);
    meta_num(s, "tok_model_bytes", &ts->model_bytes);
    meta_str(s, "tok_source", ts->source, sizeof(ts->source));
    ts->shard_bytes = tokens_dir_bytes(path, &nfiles);
    return 0;
}

void toksum_print_text(const struct toksum *ts, FILE *f)
{
    char h1[32], h2[32];

    if (!ts->present)
        return;
    fprintf(f,
            "tokens        %" PRIu64 " grid%s in %" PRIu64 " director%s, %" PRIu64
            " shard%s, coder %s\n",
            ts->grids, ts->grids == 1 ? "" : "s", ts->dirs, ts->dirs == 1 ? "y" : "ies", ts->shards,
            ts->shards == 1 ? "" : "s", ts->coder[0] ? ts->coder : "?");
    if (ts->min_h == ts->max_h && ts->min_w == ts->max_w)
        fprintf(f, "token grids   %ux%u", ts->min_h, ts->min_w);
    else
        fprintf(f, "token grids   %ux%u to %ux%u", ts->min_h, ts->min_w, ts->max_h, ts->max_w);
    fprintf(f, ", %.1f bytes/grid, %.3f bits/token",
            ts->grids ? (double)ts->blob_bytes / (double)ts->grids : 0.0,
            ts->tokens ? 8.0 * (double)ts->blob_bytes / (double)ts->tokens : 0.0);
    if (!isnan(ts->entropy))
        fprintf(f, " (order-0 entropy %.3f)", ts->entropy);
    fprintf(f, "\ntoken bytes   %" PRIu64 " (%s) in shards", ts->shard_bytes,
            tool_human_bytes(ts->shard_bytes, h1, sizeof(h1)));
    if (!isnan(ts->model_bytes))
        fprintf(f, " + %.0f of model", ts->model_bytes);
    fprintf(f, "; %" PRIu64 " (%s) served\n", ts->served_bytes,
            tool_human_bytes(ts->served_bytes, h2, sizeof(h2)));
    if (ts->codebook)
        fprintf(f,
                "codebook      %" PRIu64 " x %" PRIu64 " %s, %" PRIu64
                " bytes (/.pcrfs/codebook.npy)\n",
                ts->cb_k, ts->cb_d, ts->cb_dtype[0] ? ts->cb_dtype : "?", ts->codebook_bytes);
    else
        fprintf(f, "codebook      none\n");
}

/* A measured number, null if absent. */
static void json_num(FILE *f, double v)
{
    struct pcr_json j;

    pcr_json_init(&j, f);
    pcr_json_double(&j, v, 4);
}

void toksum_print_json(const struct toksum *ts, FILE *f)
{
    if (!ts->present) {
        fputs(",\"tokens\":null", f);
        return;
    }
    fprintf(f,
            ",\"tokens\":{\"grids\":%" PRIu64 ",\"dirs\":%" PRIu64 ",\"shards\":%" PRIu64
            ",\"tokens\":%" PRIu64 ",\"blob_bytes\":%" PRIu64 ",\"shard_bytes\":%" PRIu64
            ",\"served_bytes\":%" PRIu64 ",\"min_shape\":[%u,%u],\"max_shape\":[%u,%u]"
            ",\"bytes_per_grid\":%.3f,\"bits_per_token\":%.4f,\"entropy_bits\":",
            ts->grids, ts->dirs, ts->shards, ts->tokens, ts->blob_bytes, ts->shard_bytes,
            ts->served_bytes, ts->min_h, ts->min_w, ts->max_h, ts->max_w,
            ts->grids ? (double)ts->blob_bytes / (double)ts->grids : 0.0,
            ts->tokens ? 8.0 * (double)ts->blob_bytes / (double)ts->tokens : 0.0);
    json_num(f, ts->entropy);
    fputs(",\"model_bytes\":", f);
    json_num(f, ts->model_bytes);
    fputs(",\"coder\":", f);
    pcr_json_fquote(f, ts->coder);
    fputs(",\"source\":", f);
    pcr_json_fquote(f, ts->source);
    fputs(",\"codebook\":", f);
    if (ts->codebook) {
        fprintf(f, "{\"entries\":%" PRIu64 ",\"dim\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"dtype\":",
                ts->cb_k, ts->cb_d, ts->codebook_bytes);
        pcr_json_fquote(f, ts->cb_dtype);
        fputc('}', f);
    } else
        fputs("null", f);
    fputs("}", f);
}
