/* pcrfs — reading a store (see pcrfs/store.h).
 *
 * Ownership and lifetime (the cache essay). Everything a store hands out lives until
 * pcr_store_close(): nothing is ever evicted, because the store is immutable and the
 * kernel above us already caches pages and attributes. What we keep:
 *   - at open: every directory row (dirs[]), every record row (recs[]); both are
 *     small (a directory holds ~1,000 files, a record 1,024) and validated at once,
 *     so a store whose tree is inconsistent is refused before anything is mounted;
 *   - lazily, a directory at a time: its file rows (struct dirfiles), loaded on the
 *     first lookup/readdir/stat that needs them, validated row by row (a bad row is
 *     dropped and logged, the rest of the directory is served), then published with a
 *     release store so readers never take a lock once a directory is loaded;
 *   - lazily, a record at a time: one read-only file descriptor, opened and checked
 *     against the index (magic, version, size) on the first open of one of its files.
 * Names, chunk tables and notes of loaded files live in one arena; handles are the
 * only per-open allocation and belong to whoever opened them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/store.h"
#include "pcrfs/jpeg.h"
#include "pcrfs/tokens.h"
#include "format/index.h"
#include "common/internal.h"
#include "format/record.h"

#define MAX_NAME     255     /* NAME_MAX: longer names cannot be served by the kernel */
#define MAX_NOTE     512
#define MAX_RECORDS  (1ULL << 32)
#define MAX_IDS      (1ULL << 40) /* dir and file ids must fit the inode scheme */
#define ARENA_BLOCK  (256 * 1024)
#define MAX_CODEBOOK (256ULL << 20) /* bytes of codebook NPY kept in memory */
#define MAX_TOK_BLOB (16u << 20)    /* one encoded token grid */

#define FD_UNOPENED -1
#define FD_BAD      -2

struct rec {
    char name[72];
    uint64_t size, nimages;
    unsigned ngroups;
    uint64_t goff[PCR_MAX_CHUNKS + 1]; /* group g is [goff[g], goff[g+1]) */
    bool valid;                        /* the index row itself is consistent */
    int fd;                            /* FD_UNOPENED, FD_BAD or an open fd (atomic) */
    int warned;                        /* a read error was logged (atomic) */
};

struct pcr_file {
    uint64_t id, dir;
    const char *name;
    const uint8_t *chunks; /* validated varint pairs (offset in group, length) */
    const uint8_t *sums;   /* u32 LE per PCR_SUM_BLOCK block of each chunk, in order */
    const char *note;      /* NULL unless verbatim with a reason */
    uint64_t size_full;    /* bytes served at level L, EOI included */
    uint64_t src_size, checksum;
    uint32_t record;       /* index into recs[] + 1 */
    uint32_t width, height;
    uint16_t chunks_len;
    uint8_t kind, nchunks, components, levels;
    uint8_t trailer;       /* 1: the last chunk is served after the EOI, top level only */
};

struct dirfiles {
    uint64_t n;            /* accepted rows, sorted by name and by id */
    struct pcr_file f[];
};

struct dir {
    uint64_t parent, first_child, nsubdirs, first_file, nfiles;
    const char *name;
    struct dirfiles *files; /* NULL until loaded; set once (release/acquire) */
};

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

struct pcr_handle {
    struct pcr_store *s;
    struct rec *r;
    uint8_t *mem;   /* token files: the whole NPY file, decoded at open */
    unsigned level; /* clamped to 1..L, for stats */
    unsigned nseg;
    uint64_t size;
    bool eoi;
    uint64_t toff, tlen; /* the trailer served after the EOI (top level), or 0 */
    struct {
        uint64_t off, len; /* absolute offset in the record */
    } seg[];
};

struct pcr_store {
    struct pcr_index *idx;
    char *path;               /* the store directory, as given */
    enum pcr_index_tree tree; /* which tree of the index this object serves */
    struct pcr_store *parent; /* the image store a token tree belongs to (owns idx) */
    struct pcr_tok_model *model; /* token tree: the decoder of its blobs */
    void *codebook;           /* image store: the codebook NPY bytes, or NULL */
    size_t codebook_len;
    int recdir;               /* O_PATH fd of records/ */
    unsigned levels;
    int64_t mtime;
    uint64_t ndirs, nfiles, nrecs;
    struct dir *dirs;         /* [id - 1] */
    uint64_t *fdirs;          /* ids of directories with files, by first_file */
    uint64_t nfdirs;
    struct rec *recs;         /* [id - 1] */
    pthread_mutex_t lock;     /* serialises loading and record opening */
    struct arena_block *arena;
    struct pcr_stats stats;   /* updated with relaxed atomics */
    uint64_t bw_rate;         /* bytes/s, 0 = unlimited (see pcr_store_set_bwlimit) */
    uint64_t bw_next;         /* token bucket: when the debt is paid, CLOCK_MONOTONIC ns */
    pthread_mutex_t bw_lock;
};

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

static void count(uint64_t *ctr, uint64_t n)
{
    __atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* Make room for element @n of an array filled as rows arrive, so that memory follows
 * the rows an index holds, never a count or an id it merely claims (one row with id
 * 2^24 must not cost gigabytes). */
static int grow(void *arrp, uint64_t *cap, uint64_t n, size_t hdr, size_t elem)
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

/* ---- open: records ---- */

struct recload {
    struct pcr_store *s;
    uint64_t max, cap; /* max(id) in the table; room in s->recs */
    char *err;
    size_t errlen;
};

static int load_record(void *ctx, const struct pcr_index_record *row)
{
    struct recload *rl = ctx;
    struct pcr_store *s = rl->s;
    struct rec *r;
    uint64_t v, prev = 0;
    size_t p = 0, k;
    unsigned n = 0;

    /* The writer numbers records 1..R; rows come by id, so anything else (0, negative,
     * a gap, a duplicate in a table without a primary key) shows here. */
    if (row->id != (int64_t)s->nrecs + 1 || (uint64_t)row->id > rl->max) {
        pcr_errf(rl->err, rl->errlen, "index: record ids are not contiguous (%lld after %llu)",
                 (long long)row->id, (unsigned long long)s->nrecs);
        return -EINVAL;
    }
    if (grow(&s->recs, &rl->cap, s->nrecs, 0, sizeof(*s->recs)))
        return -ENOMEM;
    r = &s->recs[s->nrecs++];
    memset(r, 0, sizeof(*r));
    r->fd = FD_UNOPENED;
    snprintf(r->name, sizeof(r->name), "%s", row->name);
    r->size = (uint64_t)row->size;
    r->nimages = (uint64_t)row->nimages;
    if (!pcr_record_name_ok(row->name) || row->size < PCR_RECORD_HDR) {
        /* the name goes into later log lines: never the index's raw bytes */
        if (!pcr_record_name_ok(row->name))
            snprintf(r->name, sizeof(r->name), "#%lld", (long long)row->id);
        pcr_log(PCR_LOG_ERR, "index: record %lld has a bad name or size; its files fail with EIO",
                (long long)row->id);
        return 0;
    }
    while (p < row->groups_len) {
        k = pcr_varint_get(row->groups + p, row->groups_len - p, &v);
        if (k == 0 || n > PCR_MAX_CHUNKS || v < prev || v > r->size)
            break;
        r->goff[n++] = prev = v;
        p += k;
    }
    if (p != row->groups_len || n < 2 || r->goff[0] != PCR_RECORD_HDR ||
        r->goff[n - 1] != r->size) {
        pcr_log(PCR_LOG_ERR, "index: record %s has a bad group table; its files fail with EIO",
                r->name);
        return 0;
    }
    r->ngroups = n - 1;
    r->valid = true;
    return 0;
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
    if (grow(&s->dirs, &dl->cap, s->ndirs, 0, sizeof(*s->dirs)))
        return -ENOMEM;
    d = &s->dirs[s->ndirs++];
    memset(d, 0, sizeof(*d));
    if (row->parent < 1 || row->first_child < 0 || row->nsubdirs < 0 || row->first_file < 0 ||
        row->nfiles < 0 || (uint64_t)row->nsubdirs > dl->max ||
        (uint64_t)row->nfiles > s->nfiles) {
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
        if (d->nsubdirs &&
            (d->first_child < 2 || d->first_child > s->ndirs ||
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
                pcr_errf(err, errlen, "index: directory %llu has a file range that overlaps "
                         "another or runs past the files", (unsigned long long)id);
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

static unsigned meta_uint(struct pcr_store *s, const char *key, unsigned long long max,
                          unsigned long long dflt)
{
    char buf[32], *end;
    unsigned long long v;

    if (pcr_index_meta(s->idx, key, buf, sizeof(buf)) < 0)
        return (unsigned)dflt;
    errno = 0;
    v = strtoull(buf, &end, 10);
    if (errno || end == buf || *end || v > max)
        return 0;
    return (unsigned)v;
}

/* Load and validate one tree of the index (directories, records) and open the
 * directory holding its record files. */
static int load_tree(struct pcr_store *s, const char *path, char *err, size_t errlen)
{
    const char *sub = s->tree == PCR_TREE_TOKENS ? "tokens" : "records";
    int64_t n;
    int ret = -EINVAL;

    n = pcr_index_max_id(s->idx, s->tree, "dirs");
    if (n < 1 || (uint64_t)n > MAX_IDS) {
        pcr_errf(err, errlen, "%s: index has %s directory table", path,
                 n < 0 ? "an unreadable" : n == 0 ? "an empty" : "an oversized");
        return ret;
    }
    struct dirload dl = {.s = s, .max = (uint64_t)n, .err = err, .errlen = errlen};
    n = pcr_index_max_id(s->idx, s->tree, "files");
    if (n < 0 || (uint64_t)n > MAX_IDS) {
        pcr_errf(err, errlen, "%s: index has %s file table", path,
                 n < 0 ? "an unreadable" : "an oversized");
        return ret;
    }
    s->nfiles = (uint64_t)n;
    n = pcr_index_max_id(s->idx, s->tree, "records");
    if (n < 0 || (uint64_t)n > MAX_RECORDS) {
        pcr_errf(err, errlen, "%s: index has %s record table", path,
                 n < 0 ? "an unreadable" : "an oversized");
        return ret;
    }
    struct recload rl = {.s = s, .max = (uint64_t)n, .err = err, .errlen = errlen};

    /* dirs[] and recs[] grow with the rows loaded (see grow()); ndirs and nrecs count
     * them, so pcr_store_close() is right at any point of a failed open */
    ret = pcr_index_load_dirs(s->idx, s->tree, load_dir, &dl);
    if (ret == 0 && s->ndirs != dl.max) {
        pcr_errf(err, errlen, "%s: index directory ids are not contiguous", path);
        ret = -EINVAL;
    }
    if (ret == -EIO)
        pcr_errf(err, errlen, "%s: index is damaged: %s", path, pcr_index_errmsg(s->idx));
    if (ret == 0)
        ret = check_tree(s, err, errlen);
    if (ret == 0)
        ret = pcr_index_load_records(s->idx, s->tree, load_record, &rl);
    if (ret == 0 && s->nrecs != rl.max) {
        pcr_errf(err, errlen, "%s: index record ids are not contiguous", path);
        ret = -EINVAL;
    }
    if (ret) {
        if (ret == -EIO)
            pcr_errf(err, errlen, "%s: index is damaged: %s", path, pcr_index_errmsg(s->idx));
        if (ret == -ENOMEM)
            pcr_errf(err, errlen, "%s: out of memory loading the index", path);
        ret = ret == -ENOMEM ? ret : ret == -EIO ? -EINVAL : ret;
        return ret;
    }

    char *rpath = NULL;
    if (asprintf(&rpath, "%s/%s", path, sub) < 0)
        return -ENOMEM;
    s->recdir = open(rpath, O_PATH | O_DIRECTORY | O_CLOEXEC);
    free(rpath);
    if (s->recdir < 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s/%s: %s", path, sub, strerror(errno));
        return ret;
    }
    return 0;
}

int pcr_store_open(const char *path, struct pcr_store **out, char *err, size_t errlen)
{
    struct pcr_store *s;
    char *ipath = NULL, buf[32];
    int ret;

    s = calloc(1, sizeof(*s));
    if (!s) {
        pcr_errf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    s->recdir = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->bw_lock, NULL);
    s->path = strdup(path);
    if (!s->path || asprintf(&ipath, "%s/index.db", path) < 0) {
        ipath = NULL;
        ret = -ENOMEM;
        goto fail;
    }
    ret = pcr_index_open(ipath, &s->idx, err, errlen);
    if (ret == -ENOENT) {
        struct stat sb;
        if (stat(path, &sb) != 0)
            pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        else if (!S_ISDIR(sb.st_mode))
            pcr_errf(err, errlen, "%s: not a pcrfs store (not a directory)", path);
        else
            pcr_errf(err, errlen, "%s: not a pcrfs store (no index.db)", path);
    }
    if (ret)
        goto fail;
    ret = -EINVAL;
    s->levels = meta_uint(s, "levels", PCR_MAX_LEVELS, 0);
    if (s->levels < 1) {
        pcr_errf(err, errlen, "%s: index has no valid level count", path);
        goto fail;
    }
    if (pcr_index_meta(s->idx, "created", buf, sizeof(buf)) > 0)
        s->mtime = strtoll(buf, NULL, 10);
    ret = load_tree(s, path, err, errlen);
    if (ret)
        goto fail;
    /* the codebook imported with tokens, served as /.pcrfs/codebook.npy */
    ret = pcr_index_get_blob(s->idx, "codebook", MAX_CODEBOOK, &s->codebook, &s->codebook_len);
    if (ret && ret != -ENOENT) {
        pcr_errf(err, errlen, "%s: cannot read the codebook: %s", path, strerror(-ret));
        goto fail;
    }
    ret = 0;
    free(ipath);
    *out = s;
    return 0;
fail:
    free(ipath);
    pcr_store_close(s);
    return ret;
}

int pcr_store_open_tokens(struct pcr_store *s, struct pcr_store **out, char *err, size_t errlen)
{
    struct pcr_store *t;
    void *blob = NULL;
    size_t bloblen = 0;
    int ret;

    if (s->parent || !pcr_index_has_tokens(s->idx) ||
        pcr_index_max_id(s->idx, PCR_TREE_TOKENS, "dirs") <= 0) {
        pcr_errf(err, errlen, "the store holds no tokens");
        return -ENOENT;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->idx = s->idx;
    t->parent = s;
    t->tree = PCR_TREE_TOKENS;
    t->levels = 1;
    t->mtime = s->mtime;
    t->recdir = -1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->bw_lock, NULL);
    ret = pcr_index_get_blob(s->idx, "tok_model", MAX_CODEBOOK, &blob, &bloblen);
    if (ret == 0)
        ret = pcr_tok_model_load(blob, bloblen, &t->model, err, errlen);
    else
        pcr_errf(err, errlen, "the token model cannot be read: %s", strerror(-ret));
    free(blob);
    if (ret == 0)
        ret = load_tree(t, s->path, err, errlen);
    if (ret) {
        pcr_store_close(t);
        return ret == -ENOMEM ? ret : ret == -ENOENT ? -EINVAL : ret;
    }
    *out = t;
    return 0;
}

int pcr_store_codebook(struct pcr_store *s, const void **data, size_t *len)
{
    if (s->parent)
        s = s->parent;
    if (!s->codebook)
        return -ENOENT;
    *data = s->codebook;
    *len = s->codebook_len;
    return 0;
}

void pcr_store_close(struct pcr_store *s)
{
    if (!s)
        return;
    for (uint64_t i = 0; s->recs && i < s->nrecs; i++)
        if (s->recs[i].fd >= 0)
            close(s->recs[i].fd);
    for (uint64_t i = 0; s->dirs && i < s->ndirs; i++)
        if (s->dirs[i].files != &empty_dir)
            free(s->dirs[i].files);
    while (s->arena) {
        struct arena_block *b = s->arena;
        s->arena = b->next;
        free(b);
    }
    if (s->recdir >= 0)
        close(s->recdir);
    if (!s->parent)
        pcr_index_close(s->idx);
    pcr_tok_model_free(s->model);
    free(s->codebook);
    free(s->path);
    free(s->dirs);
    free(s->fdirs);
    free(s->recs);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->bw_lock);
    free(s);
}

unsigned pcr_store_levels(const struct pcr_store *s)
{
    return s->levels;
}

uint64_t pcr_store_nfiles(const struct pcr_store *s)
{
    return s->nfiles;
}

uint64_t pcr_store_ndirs(const struct pcr_store *s)
{
    return s->ndirs;
}

uint64_t pcr_store_nrecords(const struct pcr_store *s)
{
    return s->nrecs;
}

int64_t pcr_store_mtime(const struct pcr_store *s)
{
    return s->mtime;
}

ssize_t pcr_store_meta(struct pcr_store *s, const char *key, char *buf, size_t len)
{
    return pcr_index_meta(s->idx, key, buf, len);
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
    else if (s->tree == PCR_TREE_IMAGES ? row->kind != PCR_KIND_JPEG &&
                                              row->kind != PCR_KIND_VERBATIM
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
    if (row->trailer != 0 && (row->trailer != 1 || row->kind != PCR_KIND_JPEG ||
                              row->nchunks < 2)) {
        why = "bad trailer flag";
        goto reject;
    }
    if (row->sums_len != 4 * nsums || (nsums && !row->sums)) {
        why = "checksum table does not match its chunks";
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
    if (grow(&fl->df, &fl->cap, df->n, sizeof(*df), sizeof(df->f[0])))
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
    f->note = NULL;
    if (row->note && row->note[0]) {
        size_t nl = strnlen(row->note, MAX_NOTE);
        f->note = arena_str(s, row->note, nl);
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
            ret = pcr_index_load_files(s->idx, s->tree, (int64_t)d->first_file,
                                       (int64_t)d->nfiles, load_file, &fl);
        }
        if (ret) {
            pcr_log(PCR_LOG_ERR, "index: cannot load directory %llu: %s",
                    (unsigned long long)id,
                    ret == -EIO ? pcr_index_errmsg(s->idx) : strerror(-ret));
            free(fl.df);
            *err = ret == -ENOMEM ? -ENOMEM : -EIO;
        } else {
            if (fl.df->n < d->nfiles)
                pcr_log(PCR_LOG_ERR, "index: directory %llu: %llu of %llu files usable",
                        (unsigned long long)id, (unsigned long long)fl.df->n,
                        (unsigned long long)d->nfiles);
            df = fl.df;
            count(&s->stats.dirs_loaded, 1);
            count(&s->stats.files_loaded, df->n);
            __atomic_store_n(&d->files, df, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return df;
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

/* ---- files ---- */

/* Scan chunks served at @level before the EOI: all at the top level, else
 * min(level, nscans); a trailer chunk is never one of them. */
static unsigned chunks_at(const struct pcr_file *f, unsigned level)
{
    unsigned nscans = f->nchunks - f->trailer;

    if (level < 1)
        level = 1;
    if (level >= f->levels || level >= nscans)
        return nscans;
    return level;
}

/* The trailer chunk's absolute offset and length if @level serves it (the top
 * level, after the EOI), else a length of 0. */
static uint64_t trailer_at(const struct pcr_file *f, const struct rec *r, unsigned level,
                           uint64_t *off)
{
    uint64_t len = 0;
    size_t p = 0;

    if (!f->trailer || (level < 1 ? 1 : level) < f->levels)
        return 0;
    for (unsigned i = 0; i < f->nchunks; i++) {
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, off);
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &len);
    }
    *off += r ? r->goff[f->nchunks - 1] : 0;
    return len;
}

uint64_t pcr_file_size(const struct pcr_file *f, unsigned level)
{
    unsigned m = chunks_at(f, level);
    uint64_t v, total = 2;
    size_t p = 0;

    if (f->kind == PCR_KIND_VERBATIM || m == f->nchunks || trailer_at(f, NULL, level, &v))
        return f->size_full;
    for (unsigned i = 0; i < m; i++) {
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &v); /* offset */
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &v);
        total += v;
    }
    return total;
}

uint64_t pcr_file_chunk_len(const struct pcr_file *f, unsigned i)
{
    uint64_t v = 0;
    size_t p = 0;

    if (i >= f->nchunks)
        return 0;
    for (unsigned k = 0; k <= i; k++) {
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &v);
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &v);
    }
    return v;
}

void pcr_file_info(const struct pcr_file *f, struct pcr_file_info *out)
{
    out->id = f->id;
    out->dir = f->dir;
    out->name = f->name;
    out->kind = (enum pcr_kind)f->kind;
    out->nchunks = f->nchunks;
    out->width = f->width;
    out->height = f->height;
    out->components = f->components;
    out->record = f->record;
    out->src_size = f->src_size;
    out->checksum = f->checksum;
    out->note = f->note ? f->note : "";
}

/* ---- records and reading ---- */

/* A token shard's header (see pcrfs/tokens.h) against the index and the model. */
static const char *check_shard_hdr(const struct pcr_store *s, const struct rec *r,
                                   const uint8_t hdr[PCR_RECORD_HDR])
{
    uint64_t v[4] = {0};
    static const int off[4] = {8, 12, 16, 24}, len[4] = {4, 4, 8, 8};

    if (memcmp(hdr, "PCRTOKS\n", 8) != 0)
        return "bad magic (not a pcrfs token shard)";
    for (int i = 0; i < 4; i++)
        for (int k = len[i] - 1; k >= 0; k--)
            v[i] = (v[i] << 8) | hdr[off[i] + k];
    if (v[0] != PCR_TOKSHARD_VERSION || v[1] != r->nimages ||
        v[2] != pcr_tok_model_id(s->model) || v[3] + PCR_TOKSHARD_HEADER != r->size)
        return "header disagrees with the index";
    return NULL;
}

static int record_fd(struct pcr_store *s, struct rec *r)
{
    int fd = __atomic_load_n(&r->fd, __ATOMIC_ACQUIRE);
    uint8_t hdr[PCR_RECORD_HDR];
    struct pcr_record_hdr h;
    struct stat sb;
    const char *why = NULL;

    if (fd >= 0 || fd == FD_BAD)
        return fd >= 0 ? fd : -EIO;
    pthread_mutex_lock(&s->lock);
    fd = r->fd;
    if (fd == FD_UNOPENED) {
        if (!r->valid) {
            why = "its index row is invalid";
        } else if ((fd = openat(s->recdir, r->name,
                                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)) < 0) {
            /* O_NONBLOCK: a FIFO planted in records/ would block open() (with s->lock
             * held) until a writer came; it is refused just below instead */
            if (errno == EMFILE || errno == ENFILE) {
                /* out of descriptors is not damage: fail this open, retry later */
                int e = errno;
                pthread_mutex_unlock(&s->lock);
                pcr_log(PCR_LOG_ERR, "record %s: %s (raise the open-file limit)", r->name,
                        strerror(e));
                return -EIO;
            }
            why = strerror(errno);
        } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            why = "not a regular file";
        } else if (fcntl(fd, F_SETFL, 0) != 0) {
            why = strerror(errno);
        } else if ((uint64_t)sb.st_size != r->size) {
            why = (uint64_t)sb.st_size < r->size ? "truncated" : "longer than the index says";
        } else if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
            why = "cannot read its header";
        } else if (s->tree == PCR_TREE_TOKENS) {
            why = check_shard_hdr(s, r, hdr);
        } else if (pcr_record_hdr_decode(hdr, &h) != 0) {
            why = "bad magic (not a pcrfs record)";
        } else if (h.version != PCR_RECORD_VERSION || h.ngroups != r->ngroups ||
                   h.nimages != r->nimages || h.size != r->size) {
            why = "header disagrees with the index";
        }
        if (why) {
            pcr_log(PCR_LOG_ERR, "record %s: %s; its files fail with EIO", r->name, why);
            if (fd >= 0)
                close(fd);
            fd = FD_BAD;
        }
        __atomic_store_n(&r->fd, fd, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->lock);
    return fd >= 0 ? fd : -EIO;
}

static int read_full(struct pcr_handle *h, uint8_t *buf, size_t len, uint64_t off);

/* A token file is decoded whole at open: the blob (about 1 kB) is read and decoded
 * into the NPY bytes the view serves, so reads are plain copies and a blob that
 * does not decode fails the open (EIO), never a read in the middle of a file. */
static int token_open(struct pcr_store *s, const struct pcr_file *f, struct rec *r,
                      struct pcr_handle **out)
{
    uint64_t off, len;
    size_t p = 0, ntok = (size_t)f->width * f->height;
    uint8_t *blob = NULL;
    uint16_t *grid = NULL;
    struct pcr_handle *h = NULL;
    int ret = -ENOMEM;

    p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &off);
    p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &len);
    blob = malloc(len ? len : 1);
    grid = malloc(ntok * sizeof(*grid));
    h = malloc(sizeof(*h));
    if (!blob || !grid || !h)
        goto out;
    h->s = s;
    h->r = r;
    h->level = 1;
    h->nseg = 0;
    h->eoi = false;
    h->toff = h->tlen = 0;
    h->size = f->size_full;
    h->mem = malloc(h->size);
    if (!h->mem)
        goto out;
    ret = read_full(h, blob, len, r->goff[0] + off);
    if (ret)
        goto out;
    ret = pcr_tok_decode(s->model, blob, len, f->height, f->width, grid);
    if (ret) {
        pcr_log(PCR_LOG_ERR, "token file %llu: its blob does not decode to %ux%u tokens",
                (unsigned long long)f->id, f->height, f->width);
        ret = -EIO;
        goto out;
    }
    if (pcr_npy_write_grid(f->height, f->width, grid, h->mem, h->size) != h->size) {
        ret = -EIO;
        goto out;
    }
    count(&s->stats.level[1].opens, 1);
    *out = h;
    h = NULL;
    ret = 0;
out:
    if (ret == -EIO)
        count(&s->stats.errors, 1);
    if (h)
        free(h->mem);
    free(h);
    free(blob);
    free(grid);
    return ret;
}

int pcr_handle_open(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                    struct pcr_handle **out)
{
    struct rec *r = &s->recs[f->record - 1];
    unsigned m = chunks_at(f, level);
    struct pcr_handle *h;
    uint64_t off, len;
    size_t p = 0;
    int fd = record_fd(s, r);

    if (fd < 0) {
        count(&s->stats.errors, 1);
        return fd;
    }
    if (f->kind == PCR_KIND_TOKENS)
        return token_open(s, f, r, out);
    h = malloc(sizeof(*h) + m * sizeof(h->seg[0]));
    if (!h)
        return -ENOMEM;
    h->s = s;
    h->r = r;
    h->mem = NULL;
    h->level = level < 1 ? 1 : level > s->levels ? s->levels : level;
    h->nseg = m;
    h->eoi = f->kind == PCR_KIND_JPEG;
    h->tlen = trailer_at(f, r, level, &h->toff);
    h->size = (h->eoi ? 2 : 0) + h->tlen;
    for (unsigned i = 0; i < m; i++) {
        /* validated at load: offsets lie inside group i */
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &off);
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &len);
        h->seg[i].off = r->goff[i] + off;
        h->seg[i].len = len;
        h->size += len;
    }
    count(&s->stats.level[h->level].opens, 1);
    *out = h;
    return 0;
}

uint64_t pcr_handle_size(const struct pcr_handle *h)
{
    return h->size;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pcr_store_set_bwlimit(struct pcr_store *s, uint64_t bytes_per_sec)
{
    pthread_mutex_lock(&s->bw_lock);
    s->bw_next = 0;
    __atomic_store_n(&s->bw_rate, bytes_per_sec, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->bw_lock);
}

/* Token bucket: charge @n bytes and sleep until the bucket has paid for them.
 * The debt may start up to 1/8 s in the past, which is the burst allowance. */
static void throttle(struct pcr_store *s, uint64_t n)
{
    uint64_t rate = __atomic_load_n(&s->bw_rate, __ATOMIC_RELAXED), now, wake, burst;

    if (!rate)
        return;
    burst = 125000000u;
    now = now_ns();
    pthread_mutex_lock(&s->bw_lock);
    if (s->bw_next + burst < now)
        s->bw_next = now - burst;
    s->bw_next += (uint64_t)((double)n * 1e9 / (double)rate);
    wake = s->bw_next;
    pthread_mutex_unlock(&s->bw_lock);
    if (wake > now) {
        struct timespec ts = {.tv_sec = (time_t)((wake - now) / 1000000000u),
                              .tv_nsec = (long)((wake - now) % 1000000000u)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

static int read_full(struct pcr_handle *h, uint8_t *buf, size_t len, uint64_t off)
{
    int fd = __atomic_load_n(&h->r->fd, __ATOMIC_ACQUIRE);

    throttle(h->s, len);
    while (len > 0) {
        ssize_t n = pread(fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (!__atomic_exchange_n(&h->r->warned, 1, __ATOMIC_RELAXED))
                pcr_log(PCR_LOG_ERR, "record %s: %s at offset %llu; its files fail with EIO",
                        h->r->name, n < 0 ? strerror(errno) : "truncated",
                        (unsigned long long)off);
            return -EIO;
        }
        buf += n;
        len -= (size_t)n;
        off += (uint64_t)n;
        count(&h->s->stats.level[h->level].bytes, (uint64_t)n);
    }
    return 0;
}

/* @n bytes from offset @at of what follows the scan chunks: FF D9, then the
 * trailer at absolute offset @toff (the caller's size admits it only at the top). */
static int read_tail(struct pcr_handle *h, uint8_t *out, size_t n, uint64_t at, uint64_t toff)
{
    static const uint8_t eoi[2] = {0xFF, 0xD9};

    for (; n > 0 && at < 2; n--)
        *out++ = eoi[at++];
    return n ? read_full(h, out, n, toff + at - 2) : 0;
}

ssize_t pcr_handle_read(struct pcr_handle *h, void *buf, size_t len, uint64_t off)
{
    uint8_t *out = buf;
    uint64_t pos = 0;
    size_t done = 0;

    if (off >= h->size)
        return 0;
    if (len > h->size - off)
        len = (size_t)(h->size - off);
    count(&h->s->stats.level[h->level].reads, 1);
    if (h->mem) {
        memcpy(out, h->mem + off, len);
        return (ssize_t)len;
    }
    for (unsigned i = 0; i < h->nseg && done < len; i++) {
        uint64_t end = pos + h->seg[i].len;
        if (off + done < end) {
            uint64_t in = off + done - pos;
            size_t take = (size_t)(end - (off + done));
            if (take > len - done)
                take = len - done;
            if (read_full(h, out + done, take, h->seg[i].off + in) != 0) {
                count(&h->s->stats.errors, 1);
                return -EIO;
            }
            done += take;
        }
        pos = end;
    }
    if (done < len) { /* the rest lies in the EOI marker and the trailer */
        if (read_tail(h, out + done, len - done, off + done - pos, h->toff) != 0) {
            count(&h->s->stats.errors, 1);
            return -EIO;
        }
        done = len;
    }
    return (ssize_t)done;
}

void pcr_handle_close(struct pcr_handle *h)
{
    if (h)
        free(h->mem);
    free(h);
}

ssize_t pcr_store_read(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                       size_t len, uint64_t off)
{
    struct pcr_handle *h;
    ssize_t n;
    int ret = pcr_handle_open(s, f, level, &h);

    if (ret)
        return ret;
    n = pcr_handle_read(h, buf, len, off);
    pcr_handle_close(h);
    return n;
}

/* pcr_handle_read() without the handle: the chunk table is walked in place, and the
 * handle read_full() wants lives on the stack with no segments. A read at offset 0
 * counts as an open (the FUSE driver's open-less reads have no other first moment). */
ssize_t pcr_store_pread(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                        size_t len, uint64_t off)
{
    struct pcr_handle h = {0};
    struct rec *r;
    uint8_t *out = buf;
    uint64_t pos = 0, coff, clen, size = 0, toff = 0;
    size_t p = 0, done = 0;
    unsigned m;
    int fd;

    if (f->kind == PCR_KIND_TOKENS)
        return pcr_store_read(s, f, level, buf, len, off); /* decoded whole: allocates */
    r = &s->recs[f->record - 1];
    fd = record_fd(s, r);
    if (fd < 0) {
        count(&s->stats.errors, 1);
        return fd;
    }
    m = chunks_at(f, level);
    h.s = s;
    h.r = r;
    h.level = level < 1 ? 1 : level > s->levels ? s->levels : level;
    h.eoi = f->kind == PCR_KIND_JPEG;
    /* the size first, exactly as pcr_handle_open() computes it */
    for (unsigned i = 0; i < m; i++) {
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &coff);
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &clen);
        size += clen;
    }
    size += (h.eoi ? 2 : 0) + trailer_at(f, r, level, &toff);
    if (off == 0)
        count(&s->stats.level[h.level].opens, 1);
    if (off >= size)
        return 0;
    if (len > size - off)
        len = (size_t)(size - off);
    count(&s->stats.level[h.level].reads, 1);
    p = 0;
    for (unsigned i = 0; i < m && done < len; i++) {
        uint64_t end;

        /* validated at load: offsets lie inside group i */
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &coff);
        p += pcr_varint_get(f->chunks + p, f->chunks_len - p, &clen);
        end = pos + clen;
        if (off + done < end) {
            uint64_t in = off + done - pos;
            size_t take = (size_t)(end - (off + done));
            if (take > len - done)
                take = len - done;
            if (read_full(&h, out + done, take, r->goff[i] + coff + in) != 0) {
                count(&s->stats.errors, 1);
                return -EIO;
            }
            done += take;
        }
        pos = end;
    }
    if (done < len) { /* the rest lies in the EOI marker and the trailer */
        if (read_tail(&h, out + done, len - done, off + done - pos, toff) != 0) {
            count(&s->stats.errors, 1);
            return -EIO;
        }
        done = len;
    }
    return (ssize_t)done;
}

void pcr_store_stats(const struct pcr_store *s, struct pcr_stats *out)
{
    const uint64_t *src = (const uint64_t *)&s->stats;
    uint64_t *dst = (uint64_t *)out;

    for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
