/* pcrfs — the store's tree: the directory table, checked whole at open, and each
 * directory's files, loaded and validated on first use (see state.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/tokens.h"
#include "store/state.h"

#define ARENA_BLOCK (256 * 1024)

static const struct dirfiles empty_dir = {0};

/* ---- small helpers ---- */

static void *arena_alloc(struct pcr_store *s, size_t n)
{
    struct arena_block *b = s->arena;

    n = (n + 7) & ~(size_t)7;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->next = s->arena;
        b->used = 0;
        b->cap = cap;
        s->arena = b;
    }
    b->used += n;
    return b->data + b->used - n;
}

static char *arena_str(struct pcr_store *s, const void *p, size_t n)
{
    char *c = arena_alloc(s, n + 1);
    if (c) {
        if (n)
            memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

/* Make room for element @n of an array filled as rows arrive, so that memory follows
 * the rows an index holds, never a count or an id it merely claims (one row with id
 * 2^24 must not cost gigabytes). */
int store_grow(void *arrp, uint64_t *cap, uint64_t n, size_t hdr, size_t elem)
{
    void **arr = arrp, *p;
    uint64_t c;

    if (n < *cap)
        return 0;
    c = *cap ? *cap * 2 : 64;
    p = realloc(*arr, hdr + c * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* A name the kernel can serve and that cannot escape or collide: 1..255 bytes,
 * no '/' or NUL, not "." or "..". */
static bool name_ok(const uint8_t *p, size_t n)
{
    if (!p || n == 0 || n > MAX_NAME)
        return false;
    if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
        return false;
    return memchr(p, '/', n) == NULL && memchr(p, '\0', n) == NULL;
}

/* Byte order of names, as the builder sorts them. */
static int namecmp(const char *a, const char *b)
{
    return strcmp(a, b); /* NUL-free names: strcmp is memcmp order */
}

/* ---- open: directories ---- */

struct dirload {
    struct pcr_store *s;
    uint64_t max, cap; /* max(id) in the table; room in s->dirs */
    char *err;
    size_t errlen;
};

static int load_dir(void *ctx, const struct pcr_index_dir *row)
{
    struct dirload *dl = ctx;
    struct pcr_store *s = dl->s;
    struct dir *d;
    uint64_t id = (uint64_t)row->id;

    /* Rows come by id and must be 1..D: a hole or a duplicate id (possible in a table
     * without a primary key) would leave an entry nobody filled. */
    if (row->id != (int64_t)s->ndirs + 1 || id > dl->max) {
        pcr_errf(dl->err, dl->errlen, "index: directory ids are not contiguous (%lld after %llu)",
                 (long long)row->id, (unsigned long long)s->ndirs);
        return -EINVAL;
    }
    if (store_grow(&s->dirs, &dl->cap, s->ndirs, 0, sizeof(*s->dirs)))
        return -ENOMEM;
    d = &s->dirs[s->ndirs++];
    memset(d, 0, sizeof(*d));
    if (row->parent < 1 || row->first_child < 0 || row->nsubdirs < 0 || row->first_file < 0 ||
        row->nfiles < 0 || (uint64_t)row->nsubdirs > dl->max || (uint64_t)row->nfiles > s->nfiles) {
        pcr_errf(dl->err, dl->errlen, "index: directory %llu has negative or huge counts",
                 (unsigned long long)id);
        return -EINVAL;
    }
    d->parent = (uint64_t)row->parent;
    d->first_child = (uint64_t)row->first_child;
    d->nsubdirs = (uint64_t)row->nsubdirs;
    d->first_file = (uint64_t)row->first_file;
    d->nfiles = (uint64_t)row->nfiles;
    if (id == PCR_ROOT_DIR) {
        if (row->namelen != 0 || d->parent != PCR_ROOT_DIR) {
            pcr_errf(dl->err, dl->errlen, "index: the root directory row is malformed");
            return -EINVAL;
        }
        d->name = "";
    } else {
        /* Breadth-first numbering puts every parent before its children, so
         * "parent < id" rules out every cycle, a directory its own ancestor included. */
        if (d->parent >= id) {
            pcr_errf(dl->err, dl->errlen,
                     "index: directory %llu has parent %llu (must come before it): a loop?",
                     (unsigned long long)id, (unsigned long long)d->parent);
            return -EINVAL;
        }
        if (!name_ok(row->name, row->namelen)) {
            pcr_errf(dl->err, dl->errlen,
                     "index: directory %llu has an empty, '.', '..' or '/'-containing name",
                     (unsigned long long)id);
            return -EINVAL;
        }
        d->name = arena_str(s, row->name, row->namelen);
        if (!d->name)
            return -ENOMEM;
    }
    return 0;
}

/* Check the tree shape the readers rely on; see writer.h for the numbering. */
static int check_tree(struct pcr_store *s, char *err, size_t errlen)
{
    uint64_t prev_end = 1, nf = 0;

    for (uint64_t id = 1; id <= s->ndirs; id++) {
        struct dir *d = &s->dirs[id - 1];
        if (d->nsubdirs && (d->first_child < 2 || d->first_child > s->ndirs ||
                            d->nsubdirs > s->ndirs - d->first_child + 1)) {
            pcr_errf(err, errlen, "index: directory %llu has children out of range",
                     (unsigned long long)id);
            return -EINVAL;
        }
        for (uint64_t c = 0; c < d->nsubdirs; c++) {
            struct dir *ch = &s->dirs[d->first_child + c - 1];
            if (ch->parent != id) {
                pcr_errf(err, errlen, "index: directory %llu lists a child of another",
                         (unsigned long long)id);
                return -EINVAL;
            }
            if (c && namecmp(s->dirs[d->first_child + c - 2].name, ch->name) >= 0) {
                pcr_errf(err, errlen,
                         "index: directory %llu has duplicate or unsorted subdirectory names",
                         (unsigned long long)id);
                return -EINVAL;
            }
        }
        if (id != PCR_ROOT_DIR) {
            struct dir *p = &s->dirs[d->parent - 1];
            if (id < p->first_child || id >= p->first_child + p->nsubdirs) {
                pcr_errf(err, errlen, "index: directory %llu is not listed by its parent",
                         (unsigned long long)id);
                return -EINVAL;
            }
        }
        if (d->nfiles) {
            if (d->first_file < prev_end || d->first_file > s->nfiles ||
                d->nfiles > s->nfiles - d->first_file + 1) {
                pcr_errf(err, errlen,
                         "index: directory %llu has a file range that overlaps "
                         "another or runs past the files",
                         (unsigned long long)id);
                return -EINVAL;
            }
            prev_end = d->first_file + d->nfiles;
            nf++;
        }
    }
    s->fdirs = malloc((nf ? nf : 1) * sizeof(*s->fdirs));
    if (!s->fdirs)
        return -ENOMEM;
    for (uint64_t id = 1; id <= s->ndirs; id++)
        if (s->dirs[id - 1].nfiles)
            s->fdirs[s->nfdirs++] = id;
    return 0;
}

/* ---- lazy loading of a directory's files ---- */

struct fileload {
    struct pcr_store *s;
    uint64_t dirid;
    struct dir *d;
    struct dirfiles *df;
    uint64_t cap; /* room in df->f[] */
};

/* Decode and bounds-check a chunk table against its record. @return the bytes
 * served at level L, or 0 with *why set. */
static uint64_t check_chunks(const struct rec *r, const uint8_t *p, size_t len, unsigned n,
                             uint64_t *nsums, const char **why)
{
    uint64_t off, l, total = 0;
    size_t pos = 0, k;

    for (unsigned i = 0; i < n; i++) {
        k = pcr_varint_get(p + pos, len - pos, &off);
        if (!k) {
            *why = "chunk table truncated";
            return 0;
        }
        pos += k;
        k = pcr_varint_get(p + pos, len - pos, &l);
        if (!k) {
            *why = "chunk table truncated";
            return 0;
        }
        pos += k;
        if (r->valid) {
            if (i >= r->ngroups || off > r->goff[i + 1] - r->goff[i] ||
                l > r->goff[i + 1] - r->goff[i] - off) {
                *why = "chunk runs past its scan group";
                return 0;
            }
        } else if (l > (1ULL << 40)) {
            *why = "chunk length out of range";
            return 0;
        }
        total += l;
        *nsums += pcr_sum_blocks(l);
    }
    if (pos != len) {
        *why = "chunk table has trailing bytes";
        return 0;
    }
    *why = NULL;
    return total;
}

static int load_file(void *ctx, const struct pcr_index_file *row)
{
    struct fileload *fl = ctx;
    struct pcr_store *s = fl->s;
    struct dirfiles *df = fl->df;
    struct pcr_file *f, *prev = df->n ? &df->f[df->n - 1] : NULL;
    const char *why = NULL;
    char *name;
    uint64_t total, nsums = 0;

    if (df->n >= fl->d->nfiles)
        return 0;
    if (prev && (uint64_t)row->id <= prev->id)
        why = "duplicate file id"; /* one id, two entries: the inode scheme needs one */
    else if (row->dir != (int64_t)fl->dirid)
        why = "belongs to another directory";
    else if (!name_ok(row->name, row->namelen))
        why = "empty, '.', '..' or '/'-containing name";
    else if (s->tree == PCR_TREE_IMAGES
                 ? row->kind != PCR_KIND_JPEG && row->kind != PCR_KIND_VERBATIM
                 : row->kind != PCR_KIND_TOKENS)
        why = "unknown kind";
    else if (row->nchunks < 1 || row->nchunks > PCR_MAX_CHUNKS ||
             (row->kind != PCR_KIND_JPEG && row->nchunks != 1))
        why = "chunk count out of range";
    else if (row->kind == PCR_KIND_TOKENS &&
             (row->width < 1 || row->height < 1 || row->width > PCR_TOK_MAX_SIDE ||
              row->height > PCR_TOK_MAX_SIDE ||
              (uint64_t)row->width * (uint64_t)row->height > PCR_TOK_MAX_TOKENS))
        why = "token grid shape out of range";
    else if (row->record < 1 || (uint64_t)row->record > s->nrecs)
        why = "no such record";
    else if (row->chunks_len == 0 || row->chunks_len > UINT16_MAX)
        why = "bad chunk table";
    if (why)
        goto reject;
    total = check_chunks(&s->recs[row->record - 1], row->chunks, row->chunks_len,
                         (unsigned)row->nchunks, &nsums, &why);
    if (why)
        goto reject;
    if (row->trailer != 0 &&
        (row->trailer != 1 || row->kind != PCR_KIND_JPEG || row->nchunks < 2)) {
        why = "bad trailer flag";
        goto reject;
    }
    if (row->sums_len != 4 * nsums || (nsums && !row->sums)) {
        why = "checksum table does not match its chunks";
        goto reject;
    }
    /* a JPEG's table has one entry per level below the top, or none at all */
    if (row->quality_len != 0 && (row->kind != PCR_KIND_JPEG || !row->quality ||
                                  row->quality_len != 2 * ((size_t)s->levels - 1))) {
        why = "quality table does not match the store's levels";
        goto reject;
    }
    for (size_t i = 0; i < row->quality_len; i += 2)
        if ((row->quality[i] | (unsigned)row->quality[i + 1] << 8) > PCR_QUALITY_SCALE) {
            why = "quality value above 1";
            goto reject;
        }
    if (row->kind == PCR_KIND_JPEG)
        total += 2;
    if (row->kind == PCR_KIND_TOKENS) {
        /* the chunk is the encoded blob; what is served is the NPY file */
        if (total > MAX_TOK_BLOB) {
            why = "token blob too large";
            goto reject;
        }
        total = pcr_npy_grid_size((unsigned)row->height, (unsigned)row->width);
    }
    if ((int64_t)total != row->size) {
        why = "size disagrees with its chunks";
        goto reject;
    }
    name = arena_str(s, row->name, row->namelen);
    if (!name)
        return -ENOMEM;
    if (prev && namecmp(prev->name, name) >= 0) {
        why = "duplicate or unsorted name";
        goto reject;
    }
    {
        /* a file may not shadow a subdirectory of the same name */
        struct dir *d = fl->d;
        uint64_t lo = 0, hi = d->nsubdirs;
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            int c = namecmp(s->dirs[d->first_child + mid - 1].name, name);
            if (c == 0) {
                why = "same name as a subdirectory";
                goto reject;
            }
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    if (store_grow(&fl->df, &fl->cap, df->n, sizeof(*df), sizeof(df->f[0])))
        return -ENOMEM;
    df = fl->df;
    f = &df->f[df->n];
    f->id = (uint64_t)row->id;
    f->dir = fl->dirid;
    f->name = name;
    f->chunks = (const uint8_t *)arena_str(s, row->chunks, row->chunks_len);
    f->chunks_len = (uint16_t)row->chunks_len;
    f->sums = (const uint8_t *)arena_str(s, row->sums, row->sums_len);
    f->trailer = (uint8_t)row->trailer;
    f->damaged = 0;
    f->served = 0;
    f->note = NULL;
    if (row->note && row->note[0]) {
        size_t nl = strnlen(row->note, MAX_NOTE);
        f->note = arena_str(s, row->note, nl);
    }
    f->quality = NULL;
    if (row->quality_len) {
        f->quality = (const uint8_t *)arena_str(s, row->quality, row->quality_len);
        if (!f->quality)
            return -ENOMEM;
    }
    if (!f->chunks || !f->sums)
        return -ENOMEM;
    f->size_full = total;
    f->src_size = row->src_size > 0 ? (uint64_t)row->src_size : 0;
    f->checksum = row->checksum;
    f->record = (uint32_t)row->record;
    f->width = row->width > 0 && row->width <= UINT32_MAX ? (uint32_t)row->width : 0;
    f->height = row->height > 0 && row->height <= UINT32_MAX ? (uint32_t)row->height : 0;
    f->components = row->components > 0 && row->components <= 4 ? (uint8_t)row->components : 0;
    f->kind = (uint8_t)row->kind;
    f->nchunks = (uint8_t)row->nchunks;
    f->levels = (uint8_t)s->levels;
    df->n++;
    return 0;
reject:
    pcr_log(PCR_LOG_ERR, "index: file %lld of directory %llu rejected: %s", (long long)row->id,
            (unsigned long long)fl->dirid, why);
    return 0;
}

static const struct dirfiles *dir_files(struct pcr_store *s, uint64_t id, int *err)
{
    struct dir *d = &s->dirs[id - 1];
    struct dirfiles *df = __atomic_load_n(&d->files, __ATOMIC_ACQUIRE);
    int ret;

    if (df)
        return df;
    pthread_mutex_lock(&s->lock);
    df = d->files;
    if (!df && d->nfiles == 0) {
        df = (struct dirfiles *)&empty_dir;
        __atomic_store_n(&d->files, df, __ATOMIC_RELEASE);
    } else if (!df) {
        struct fileload fl = {.s = s, .dirid = id, .d = d};
        /* sized by the rows found, not by nfiles (an index can claim 2^40) */
        fl.cap = d->nfiles < 1024 ? d->nfiles : 1024;
        fl.df = malloc(sizeof(*df) + fl.cap * sizeof(struct pcr_file));
        if (!fl.df) {
            ret = -ENOMEM;
        } else {
            fl.df->n = 0;
            ret = pcr_index_load_files(s->idx, s->tree, (int64_t)d->first_file, (int64_t)d->nfiles,
                                       load_file, &fl);
        }
        if (ret) {
            pcr_log(PCR_LOG_ERR, "index: cannot load directory %llu: %s", (unsigned long long)id,
                    ret == -EIO ? pcr_index_errmsg(s->idx) : strerror(-ret));
            free(fl.df);
            *err = ret == -ENOMEM ? -ENOMEM : -EIO;
        } else {
            if (fl.df->n < d->nfiles)
                pcr_log(PCR_LOG_ERR, "index: directory %llu: %llu of %llu files usable",
                        (unsigned long long)id, (unsigned long long)fl.df->n,
                        (unsigned long long)d->nfiles);
            df = fl.df;
            pcr_count(&s->stats.dirs_loaded, 1);
            pcr_count(&s->stats.files_loaded, df->n);
            __atomic_store_n(&d->files, df, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return df;
}

/* ---- per-level fidelity (pcrfs(5): files.quality) ---- */

int pcr_file_quality(const struct pcr_file *f, unsigned level, double *ssim)
{
    const uint8_t *q;

    if (level < 1)
        return -EINVAL;
    if (!f->quality)
        return -ENOENT;
    if (level >= f->levels) {
        *ssim = 1.0; /* the top level is the image itself */
        return 0;
    }
    q = f->quality + 2 * (level - 1);
    *ssim = (double)(q[0] | (unsigned)q[1] << 8) / PCR_QUALITY_SCALE;
    return 0;
}

unsigned pcr_file_level_for(const struct pcr_file *f, double threshold)
{
    double v;

    /* the same comparison a caller of pcr_file_quality() makes, so the two agree */
    for (unsigned k = 1; f->quality && k < f->levels; k++)
        if (pcr_file_quality(f, k, &v) == 0 && v >= threshold)
            return k;
    return f->levels;
}

/* ---- tree queries ---- */

int pcr_store_dir(struct pcr_store *s, uint64_t id, struct pcr_dirinfo *out)
{
    const struct dir *d;

    if (id < 1 || id > s->ndirs)
        return -ENOENT;
    d = &s->dirs[id - 1];
    out->id = id;
    out->parent = d->parent;
    out->nsubdirs = d->nsubdirs;
    out->nfiles = d->nfiles;
    out->name = d->name;
    return 0;
}

int pcr_store_lookup(struct pcr_store *s, uint64_t id, const char *name, struct pcr_node *out)
{
    const struct dir *d;
    const struct dirfiles *df;
    uint64_t lo, hi;
    int err = -EIO;

    if (id < 1 || id > s->ndirs)
        return -ENOENT;
    d = &s->dirs[id - 1];
    for (lo = 0, hi = d->nsubdirs; lo < hi;) {
        uint64_t mid = (lo + hi) / 2;
        int c = namecmp(s->dirs[d->first_child + mid - 1].name, name);
        if (c == 0) {
            out->is_dir = true;
            out->id = d->first_child + mid;
            return 0;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    df = dir_files(s, id, &err);
    if (!df)
        return err;
    for (lo = 0, hi = df->n; lo < hi;) {
        uint64_t mid = (lo + hi) / 2;
        int c = namecmp(df->f[mid].name, name);
        if (c == 0) {
            out->is_dir = false;
            out->id = df->f[mid].id;
            return 0;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -ENOENT;
}

int pcr_store_readdir(struct pcr_store *s, uint64_t id, uint64_t pos, struct pcr_dirent *out)
{
    const struct dir *d;
    const struct dirfiles *df;
    int err = -EIO;

    if (id < 1 || id > s->ndirs)
        return -ENOENT;
    d = &s->dirs[id - 1];
    if (pos < d->nsubdirs) {
        out->name = s->dirs[d->first_child + pos - 1].name;
        out->node.is_dir = true;
        out->node.id = d->first_child + pos;
        return 0;
    }
    df = dir_files(s, id, &err);
    if (!df)
        return err;
    pos -= d->nsubdirs;
    if (pos >= df->n)
        return -ENOENT;
    out->name = df->f[pos].name;
    out->node.is_dir = false;
    out->node.id = df->f[pos].id;
    return 0;
}

int pcr_store_file(struct pcr_store *s, uint64_t id, const struct pcr_file **out)
{
    const struct dirfiles *df;
    uint64_t lo = 0, hi = s->nfdirs, dirid;
    int err = -EIO;

    if (id < 1 || id > s->nfiles || s->nfdirs == 0)
        return -ENOENT;
    /* the directory whose range holds @id: the last with first_file <= id */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (s->dirs[s->fdirs[mid] - 1].first_file <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -ENOENT;
    dirid = s->fdirs[lo - 1];
    if (id >= s->dirs[dirid - 1].first_file + s->dirs[dirid - 1].nfiles)
        return -ENOENT;
    df = dir_files(s, dirid, &err);
    if (!df)
        return err;
    for (lo = 0, hi = df->n; lo < hi;) {
        uint64_t mid = (lo + hi) / 2;
        if (df->f[mid].id == id) {
            *out = &df->f[mid];
            return 0;
        }
        if (df->f[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -ENOENT;
}

ssize_t pcr_store_path(struct pcr_store *s, uint64_t id, char *buf, size_t len)
{
    const struct pcr_file *f;
    const char *parts[PATH_MAX / 2];
    size_t np = 0, n = 0;
    uint64_t d;
    int ret = pcr_store_file(s, id, &f);

    if (ret)
        return ret;
    parts[np++] = f->name;
    for (d = f->dir; d != PCR_ROOT_DIR && np < PCR_ARRAY_SIZE(parts); d = s->dirs[d - 1].parent)
        parts[np++] = s->dirs[d - 1].name;
    if (d != PCR_ROOT_DIR)
        return -ENAMETOOLONG;
    while (np--) {
        size_t l = strlen(parts[np]);
        if (n + l + 1 > len) /* the name and its '/' or final NUL */
            return -ENAMETOOLONG;
        memcpy(buf + n, parts[np], l);
        n += l;
        buf[n++] = np ? '/' : '\0';
    }
    return (ssize_t)(n - 1);
}

/* Load the directory table (ids 1..@max) and check the tree's shape. */
int store_load_dirs(struct pcr_store *s, uint64_t max, char *err, size_t errlen)
{
    struct dirload dl = {.s = s, .max = max, .err = err, .errlen = errlen};
    int ret = pcr_index_load_dirs(s->idx, s->tree, load_dir, &dl);

    if (ret == 0 && s->ndirs != dl.max) {
        pcr_errf(err, errlen, "%s: index directory ids are not contiguous", s->path);
        ret = -EINVAL;
    }
    if (ret == -EIO)
        pcr_errf(err, errlen, "%s: index is damaged: %s", s->path, pcr_index_errmsg(s->idx));
    if (ret == 0)
        ret = check_tree(s, err, errlen);
    return ret;
}

void store_free_tree(struct pcr_store *s)
{
    for (uint64_t i = 0; s->dirs && i < s->ndirs; i++)
        if (s->dirs[i].files != &empty_dir)
            free(s->dirs[i].files);
    while (s->arena) {
        struct arena_block *b = s->arena;
        s->arena = b->next;
        free(b);
    }
    free(s->dirs);
    free(s->fdirs);
}

/* ---- record membership ---- */

struct runs {
    const struct pcr_store *s;
    struct pcr_record_run run; /* being built; count 0 = none */
    int (*cb)(void *ctx, const struct pcr_record_run *run);
    void *ctx;
};

static int run_row(void *ctx, int64_t id, int64_t record)
{
    struct runs *r = ctx;
    int ret = 0;

    if (id < 1 || (uint64_t)id > r->s->nfiles || record < 1 || (uint64_t)record > r->s->nrecs)
        return 0;
    if (r->run.count && r->run.record == (uint64_t)record &&
        r->run.first + r->run.count == (uint64_t)id) {
        r->run.count++;
        return 0;
    }
    if (r->run.count)
        ret = r->cb(r->ctx, &r->run);
    r->run = (struct pcr_record_run){(uint64_t)id, 1, (uint64_t)record};
    return ret;
}

int pcr_store_record_runs(struct pcr_store *s,
                          int (*cb)(void *ctx, const struct pcr_record_run *run), void *ctx)
{
    struct runs r = {.s = s, .cb = cb, .ctx = ctx};
    int ret = pcr_index_file_records(s->idx, s->tree, run_row, &r);

    if (ret == 0 && r.run.count)
        ret = cb(ctx, &r.run);
    return ret;
}
