/* pcrfs — reading a store (see pcrfs/store.h): opening and closing it, the record
 * table, and the records held open from mount to unmount. The ownership essay is in
 * state.h; the tree is in tree.c and the read path in read.c.
 */
#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/tokens.h"
#include "format/record.h"
#include "store/state.h"

/* ---- the record table ---- */

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
    if (store_grow(&s->recs, &rl->cap, s->nrecs, 0, sizeof(*s->recs)))
        return -ENOMEM;
    r = &s->recs[s->nrecs++];
    memset(r, 0, sizeof(*r));
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

/* Errors that say nothing about the record itself (a timeout, a failed request):
 * they fail this use only. */
static bool transient(int err)
{
    return err == -EIO || err == -ETIMEDOUT || err == -EAGAIN || err == -ECONNREFUSED ||
           err == -ECONNRESET || err == -EHOSTUNREACH || err == -ENETUNREACH;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int store_rec_gate(struct pcr_store *s, struct rec *r)
{
    uint64_t until = __atomic_load_n(&r->fail_until, __ATOMIC_ACQUIRE), now;

    if (!until)
        return 0;
    now = mono_ms();
    /* past the hold: the first caller re-arms it and probes, the rest fail at once */
    if (now >= until &&
        __atomic_compare_exchange_n(&r->fail_until, &until, now + s->base->ops->fail_hold_ms, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    pcr_count(&s->stats.held_fails, 1);
    return -EIO;
}

void store_rec_failed(struct pcr_store *s, struct rec *r)
{
    unsigned hold = s->base->ops->fail_hold_ms;

    if (hold)
        __atomic_store_n(&r->fail_until, mono_ms() + hold, __ATOMIC_RELEASE);
}

void store_rec_ok(struct rec *r)
{
    if (__atomic_load_n(&r->fail_until, __ATOMIC_RELAXED))
        __atomic_store_n(&r->fail_until, 0, __ATOMIC_RELEASE);
}

static const char *open_error(int err)
{
    return err == -EINVAL ? "not a regular file" : strerror(-err);
}

int store_open_record(struct pcr_store *s, struct rec *r)
{
    struct pcr_object *o = NULL;
    struct pcr_backend *b = s->base;
    char name[96];
    const char *why = NULL;
    int ret = 0;

    pthread_mutex_lock(&s->rec_lock);
    if (__atomic_load_n(&r->obj, __ATOMIC_ACQUIRE) || r->state == REC_BAD)
        goto out;
    if (!r->valid) {
        why = "its index row is invalid";
    } else {
        snprintf(name, sizeof(name), "%s/%s", s->subdir, r->name);
        ret = b->ops->open(b, name, &o);
        if (ret == -EMFILE || ret == -ENFILE) {
            /* out of descriptors is not damage: fail this open, retry later */
            pthread_mutex_unlock(&s->rec_lock);
            pcr_log(PCR_LOG_ERR, "record %s: %s (raise the open-file limit)", r->name,
                    strerror(-ret));
            return ret;
        }
        if (transient(ret)) {
            /* nor is a server that did not answer: the next use after the hold asks
             * again */
            store_rec_failed(s, r);
            pthread_mutex_unlock(&s->rec_lock);
            if (!__atomic_exchange_n(&r->warned, 1, __ATOMIC_RELAXED))
                pcr_log(PCR_LOG_ERR, "record %s: %s (tried again on next use)", r->name,
                        strerror(-ret));
            return -EIO;
        }
        if (ret)
            why = open_error(ret);
        else if (b->ops->size(b, o) != r->size)
            why = b->ops->size(b, o) < r->size ? "truncated" : "longer than the index says";
        if (why && !ret && b->ops->fail_hold_ms) {
            /* object storage: a HEAD that disagrees (an object being replaced, a
             * proxy's answer) is asked again after the hold, so the mount heals
             * when the object does; each disagreement is logged */
            pcr_log(PCR_LOG_ERR,
                    "record %s: %s (HEAD says %llu bytes, the index %llu); "
                    "asked again in %u s",
                    r->name, why, (unsigned long long)b->ops->size(b, o),
                    (unsigned long long)r->size, b->ops->fail_hold_ms / 1000);
            b->ops->close(b, o);
            store_rec_failed(s, r);
            pthread_mutex_unlock(&s->rec_lock);
            return -EIO;
        }
    }
    if (why) {
        pcr_log(PCR_LOG_ERR, "record %s: %s; its files fail with EIO", r->name, why);
        if (o)
            b->ops->close(b, o);
        __atomic_store_n(&r->state, REC_BAD, __ATOMIC_RELEASE);
        ret = -EIO;
    } else {
        __atomic_store_n(&r->obj, o, __ATOMIC_RELEASE);
    }
out:
    pthread_mutex_unlock(&s->rec_lock);
    return ret;
}

/* Open every record now and hold it until close: a store rebuilt in place (mkpcrfs
 * --force swaps the directory and removes the old one) keeps serving the files that
 * were mounted, because unlinked files live on while open. Headers are checked on
 * first use (read.c), so this costs one open per record and no reads. Out of
 * descriptors, the rest are opened on first use instead (and a rebuild could then
 * fail their reads): say so once. */
/* Descriptors this process may still open under its soft RLIMIT_NOFILE, less
 * PCR_STORE_FD_RESERVE for what its program needs besides the records (FUSE's
 * /dev/fuse and its clones, the index, logs, sockets, cache files): holding every
 * record up to the limit would leave the mount itself none. UINT64_MAX: no limit
 * known. */
static uint64_t fd_budget(void)
{
    struct rlimit rl;
    DIR *d;
    struct dirent *de;
    long long used = -1; /* the listing's own descriptor */

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        (d = opendir("/proc/self/fd")) == NULL)
        return UINT64_MAX;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            used++;
    closedir(d);
    if ((long long)rl.rlim_cur - used <= PCR_STORE_FD_RESERVE)
        return 0;
    return (uint64_t)((long long)rl.rlim_cur - used - PCR_STORE_FD_RESERVE);
}

static void hold_records(struct pcr_store *s)
{
    uint64_t budget, i;
    int ret = 0;

    if (!s->base->ops->hold_open)
        return; /* opening is a request of its own (object storage): on first use */
    budget = fd_budget();
    for (i = 0; i < s->nrecs && i < budget; i++) {
        ret = store_open_record(s, &s->recs[i]);
        if (ret == -EMFILE || ret == -ENFILE)
            break;
    }
    if (i < s->nrecs)
        pcr_log(PCR_LOG_WARN,
                "%s: %llu of %llu records held open (open-file limit %s, %d kept for the "
                "program); the others open on first use, and a rebuild of the store under "
                "this mount can fail them",
                s->path, (unsigned long long)i, (unsigned long long)s->nrecs,
                ret ? "reached" : "near", PCR_STORE_FD_RESERVE);
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

/* Load and validate one tree of the index (directories, records), then open its
 * records. */
static int load_tree(struct pcr_store *s, char *err, size_t errlen)
{
    const char *path = s->path;
    int64_t n, ndirs;
    int ret = -EINVAL;

    ndirs = pcr_index_max_id(s->idx, s->tree, "dirs");
    if (ndirs < 1 || (uint64_t)ndirs > MAX_IDS) {
        pcr_errf(err, errlen, "%s: index has %s directory table", path,
                 ndirs < 0    ? "an unreadable"
                 : ndirs == 0 ? "an empty"
                              : "an oversized");
        return ret;
    }
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

    /* dirs[] and recs[] grow with the rows loaded (see store_grow()); ndirs and nrecs
     * count them, so pcr_store_close() is right at any point of a failed open */
    ret = store_load_dirs(s, (uint64_t)ndirs, err, errlen);
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
        return ret == -ENOMEM ? ret : ret == -EIO ? -EINVAL : ret;
    }
    hold_records(s);
    return 0;
}

/* The directory of this tree's objects must be a real directory of the store, not a
 * symbolic link to somewhere else. */
static int check_subdir(const char *path, const char *sub, char *err, size_t errlen)
{
    char *p = NULL;
    struct stat sb;
    int ret = 0;

    if (asprintf(&p, "%s/%s", path, sub) < 0)
        return -ENOMEM;
    if (lstat(p, &sb) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", p, strerror(errno));
    } else if (S_ISLNK(sb.st_mode)) {
        ret = -ENOTDIR;
        pcr_errf(err, errlen, "%s: a symbolic link (a store's %s/ must be a directory in it)", p,
                 sub);
    } else if (!S_ISDIR(sb.st_mode)) {
        ret = -ENOTDIR;
        pcr_errf(err, errlen, "%s: %s", p, strerror(ENOTDIR));
    }
    free(p);
    return ret;
}

static struct pcr_store *store_alloc(void)
{
    static uint64_t generation;
    struct pcr_store *s = calloc(1, sizeof(*s));

    if (s) {
        s->gen = __atomic_add_fetch(&generation, 1, __ATOMIC_RELAXED);
        pthread_mutex_init(&s->lock, NULL);
        pthread_mutex_init(&s->rec_lock, NULL);
        pthread_mutex_init(&s->ahead_lock, NULL);
        for (unsigned i = 0; i < PCR_CARRY_SLOTS; i++)
            pthread_mutex_init(&s->carry[i].lock, NULL);
    }
    return s;
}

/* What every store open does once its index is open and its backend set: the level
 * count, the build time, the tree, the records, the codebook. */
static int open_rest(struct pcr_store *s, char *err, size_t errlen)
{
    char buf[32];
    int ret;

    s->levels = meta_uint(s, "levels", PCR_MAX_LEVELS, 0);
    if (s->levels < 1) {
        pcr_errf(err, errlen, "%s: index has no valid level count", s->path);
        return -EINVAL;
    }
    if (pcr_index_meta(s->idx, "created", buf, sizeof(buf)) > 0)
        s->mtime = strtoll(buf, NULL, 10);
    ret = load_tree(s, err, errlen);
    if (ret)
        return ret;
    /* the codebook imported with tokens, served as /.pcrfs/codebook.npy */
    ret = pcr_index_get_blob(s->idx, "codebook", MAX_CODEBOOK, &s->codebook, &s->codebook_len);
    if (ret && ret != -ENOENT) {
        pcr_errf(err, errlen, "%s: cannot read the codebook: %s", s->path, strerror(-ret));
        return ret;
    }
    return 0;
}

int pcr_store_open(const char *path, struct pcr_store **out, char *err, size_t errlen)
{
    struct pcr_store *s;
    char *ipath = NULL;
    int ret;

    s = store_alloc();
    if (!s) {
        pcr_errf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    s->subdir = "records";
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
    if (ret == 0)
        ret = check_subdir(path, "records", err, errlen);
    if (ret == 0) {
        ret = pcr_backend_posix(path, &s->base);
        if (ret)
            pcr_errf(err, errlen, "%s: %s", path, strerror(-ret));
    }
    if (ret)
        goto fail;
    s->be = s->base;
    ret = open_rest(s, err, errlen);
    if (ret)
        goto fail;
    free(ipath);
    *out = s;
    return 0;
fail:
    free(ipath);
    pcr_store_close(s);
    return ret;
}

/* A store whose records come from @b (object storage) and whose index is the local
 * copy @ipath: pcr_store_open() without the directory checks. */
int pcr_store_open_backend(const char *name, const char *ipath, struct pcr_backend *b,
                           struct pcr_store **out, char *err, size_t errlen)
{
    struct pcr_store *s = store_alloc();
    int ret = -ENOMEM;

    if (!s || !(s->path = strdup(name))) {
        pcr_errf(err, errlen, "%s: out of memory", name);
        pcr_backend_destroy(b);
        goto fail;
    }
    s->subdir = "records";
    s->base = s->be = b;
    ret = pcr_index_open(ipath, &s->idx, err, errlen);
    if (ret == 0)
        ret = open_rest(s, err, errlen);
    if (ret)
        goto fail;
    *out = s;
    return 0;
fail:
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
    /* (a store in object storage has no directories to check) */
    ret = s->base->ops->hold_open ? check_subdir(s->path, "tokens", err, errlen) : 0;
    if (ret)
        return ret == -ENOMEM ? ret : -EINVAL;
    t = store_alloc();
    if (!t)
        return -ENOMEM;
    t->idx = s->idx;
    t->parent = s;
    t->tree = PCR_TREE_TOKENS;
    t->subdir = "tokens";
    t->levels = 1;
    t->mtime = s->mtime;
    t->path = s->path;
    t->base = s->base;
    t->be = __atomic_load_n(&s->be, __ATOMIC_ACQUIRE);
    t->shim = NULL;
    ret = pcr_index_get_blob(s->idx, "tok_model", MAX_CODEBOOK, &blob, &bloblen);
    if (ret == 0)
        ret = pcr_tok_model_load(blob, bloblen, &t->model, err, errlen);
    else
        pcr_errf(err, errlen, "the token model cannot be read: %s", strerror(-ret));
    free(blob);
    if (ret == 0)
        ret = load_tree(t, err, errlen);
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
    /* (no backend: the open failed before it existed, e.g. a 0-byte index.db; then
     * no record was opened either) */
    if (s->base) {
        /* the backend's transfers stop at once, not one record's close at a time (a
         * store in object storage whose server hangs: ~1 s per record with parts in
         * flight) */
        if (!s->parent && s->base->ops->stop)
            s->base->ops->stop(s->base);
        for (uint64_t i = 0; s->recs && i < s->nrecs; i++)
            if (s->recs[i].obj)
                s->base->ops->close(s->base, s->recs[i].obj);
    }
    store_free_tree(s);
    if (!s->parent) {
        pcr_index_close(s->idx);
        pcr_backend_destroy(s->shim);
        pcr_backend_destroy(s->base);
        free(s->path);
    }
    pcr_tok_model_free(s->model);
    free(s->codebook);
    free(s->recs);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->rec_lock);
    store_ahead_free(s);
    pthread_mutex_destroy(&s->ahead_lock);
    for (unsigned i = 0; i < PCR_CARRY_SLOTS; i++) {
        pthread_mutex_destroy(&s->carry[i].lock);
        free(s->carry[i].data);
    }
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

/* The shim goes in front of the base backend once and stays (its objects are the
 * base's, so records already open need nothing); a token tree opened later reads
 * through it too. Call before reads start, as the driver does at mount. */
void pcr_store_set_bwlimit(struct pcr_store *s, uint64_t bytes_per_sec)
{
    if (s->parent)
        s = s->parent;
    if (!s->shim) {
        if (!bytes_per_sec || pcr_backend_bwlimit(s->base, bytes_per_sec, &s->shim) != 0)
            return;
        __atomic_store_n(&s->be, s->shim, __ATOMIC_RELEASE);
        return;
    }
    pcr_backend_bwlimit_set(s->shim, bytes_per_sec);
}

void pcr_store_set_readahead(struct pcr_store *s, bool on)
{
    if (s->parent)
        s = s->parent;
    __atomic_store_n(&s->readahead, on, __ATOMIC_RELAXED);
    pcr_backend_posix_readahead(s->base, on);
}

void pcr_store_stats(const struct pcr_store *s, struct pcr_stats *out)
{
    const uint64_t *src = (const uint64_t *)&s->stats;
    uint64_t *dst = (uint64_t *)out;

    for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
