/* pcrfs — merging the parts of a planned build into one store (see pcrfs/writer.h,
 * pcr_writer_add_part(), and mkpcrfs(1), "Building on many machines").
 *
 * A part is what a part writer (pcr_writer_opts.part) leaves: a directory shaped
 * like a store whose index holds the whole directory tree, the part's own records
 * and files (numbered where the plan puts them), the build's meta keys and the
 * part keys; the first part also holds the token tree. The merge copies the index
 * rows as they are and links the record files, so the store it makes holds exactly
 * the rows and bytes a one-machine build writes with the same calls; it trusts
 * nothing of a part: every row goes through the writer's numbering checks, every
 * record file must be a regular file of the size its row says, and the finished
 * store passes the reader's validation (pcr_writer_finish()).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"
#include "format/record.h"
#include "write/writer_internal.h"

/* Meta keys a merge does not take from the first part: the part's own, and the
 * counts pcr_writer_finish() writes for the whole store. */
static bool merge_skips_key(const char *key)
{
    static const char *const own[] = {"files", "dirs", "records", "tokens"};

    if (strncmp(key, "part.", 5) == 0)
        return true;
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (strcmp(key, own[i]) == 0)
            return true;
    return false;
}

static int part_key(struct pcr_index *idx, const char *key, uint64_t max, uint64_t *out)
{
    char buf[32], *end;
    ssize_t n = pcr_index_meta(idx, key, buf, sizeof(buf));

    if (n < 0)
        return (int)n;
    if (n == 0 || (size_t)n >= sizeof(buf) || buf[0] < '0' || buf[0] > '9')
        return -EINVAL;
    errno = 0;
    *out = strtoull(buf, &end, 10);
    return errno || *end || *out > max ? -EINVAL : 0;
}

static int open_part_index(const char *dir, struct pcr_index **idx, char *err, size_t errlen)
{
    char *path;
    int ret;

    if (asprintf(&path, "%s/index.db", dir) < 0)
        return -ENOMEM;
    if (access(path, F_OK) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: not a part of a planned build (no index.db)", dir);
        free(path);
        return ret;
    }
    ret = pcr_index_open(path, idx, err, errlen);
    free(path);
    return ret;
}

static int read_info(struct pcr_index *idx, const char *dir, struct pcr_part_info *p, char *err,
                     size_t errlen)
{
    static const uint64_t big = (uint64_t)1 << 53;
    uint64_t levels = 0;
    ssize_t n;

    memset(p, 0, sizeof(*p));
    n = pcr_index_meta(idx, "part.plan", p->plan, sizeof(p->plan));
    if (n == -ENOENT) {
        pcr_errf(err, errlen, "%s: a store, not a part of a planned build", dir);
        return -ENOENT;
    }
    if (n <= 0 || (size_t)n >= sizeof(p->plan) || part_key(idx, "part.index", big, &p->index) ||
        part_key(idx, "part.count", big, &p->count) ||
        part_key(idx, "part.first_file", big, &p->first_file) ||
        part_key(idx, "part.files", big, &p->files) ||
        part_key(idx, "part.first_record", big, &p->first_record) ||
        part_key(idx, "part.records", big, &p->records) ||
        part_key(idx, "levels", PCR_MAX_LEVELS, &levels) || p->index < 1 || p->index > p->count ||
        levels < 1) {
        pcr_errf(err, errlen, "%s: part keys missing or malformed", dir);
        return -EINVAL;
    }
    p->levels = (unsigned)levels;
    return 0;
}

void pcr_part_range(uint64_t nfiles, uint64_t per_record, uint64_t index, uint64_t count,
                    struct pcr_part_info *out)
{
    uint64_t nrec = (nfiles + per_record - 1) / per_record;
    /* 128-bit products: nrec * index may pass 64 bits for huge plans */
    uint64_t rlo = (uint64_t)((unsigned __int128)nrec * (index - 1) / count);
    uint64_t rhi = (uint64_t)((unsigned __int128)nrec * index / count);
    uint64_t flo = rlo * per_record, fhi = rhi * per_record < nfiles ? rhi * per_record : nfiles;

    out->index = index;
    out->count = count;
    out->first_record = rlo;
    out->records = rhi - rlo;
    out->first_file = flo;
    out->files = fhi > flo ? fhi - flo : 0;
}

int pcr_part_read_info(const char *dir, struct pcr_part_info *info, char *err, size_t errlen)
{
    struct pcr_index *idx = NULL;
    int ret = open_part_index(dir, &idx, err, errlen);

    if (ret == 0)
        ret = read_info(idx, dir, info, err, errlen);
    pcr_index_close(idx);
    return ret;
}

/* ---- copying rows ---- */

struct merge {
    struct pcr_writer *w;
    struct pcr_index *src;
    const char *dir;
    int srcfd, dstfd; /* records/ (or tokens/) of the part and of the new store */
    enum pcr_index_tree tree;
    uint64_t nrecs, nfiles; /* rows copied so far of this part */
    char *err;
    size_t errlen;
};

static int copy_meta(void *ctx, const char *key, const char *value)
{
    struct merge *m = ctx;

    if (merge_skips_key(key))
        return 0;
    return pcr_writer_set_meta(m->w, key, value);
}

static int copy_blob(void *ctx, const char *key, const void *data, size_t len)
{
    struct merge *m = ctx;

    return pcr_writer_set_blob(m->w, key, data, len);
}

static int copy_dir(void *ctx, const struct pcr_index_dir *d)
{
    struct merge *m = ctx;
    char name[256];
    struct pcr_dir_row row;

    if (d->namelen >= sizeof(name) || (d->namelen && memchr(d->name, '\0', d->namelen))) {
        pcr_errf(m->err, m->errlen, "%s: directory %" PRId64 ": bad name", m->dir, d->id);
        return -EINVAL;
    }
    if (d->namelen)
        memcpy(name, d->name, d->namelen);
    name[d->namelen] = '\0';
    row = (struct pcr_dir_row){.id = (uint64_t)d->id,
                               .parent = (uint64_t)d->parent,
                               .name = name,
                               .first_child = (uint64_t)d->first_child,
                               .nsubdirs = (uint64_t)d->nsubdirs,
                               .first_file = (uint64_t)d->first_file,
                               .nfiles = (uint64_t)d->nfiles};
    return writer_add_dir(m->w, m->tree, &row);
}

/* Copy @n bytes of @in into @out: copy_file_range() where the kernel has it. */
static int copy_bytes(int in, int out, uint64_t n)
{
    static char buf[1 << 16];

    while (n > 0) {
        ssize_t k = copy_file_range(in, NULL, out, NULL, n, 0);

        if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP))
            break; /* fall back to read/write from here */
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        n -= (uint64_t)k;
    }
    while (n > 0) {
        ssize_t k = read(in, buf, n < sizeof(buf) ? n : sizeof(buf));

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO; /* shorter than its size said */
        for (ssize_t off = 0; off < k;) {
            ssize_t o = write(out, buf + off, (size_t)(k - off));

            if (o < 0 && errno == EINTR)
                continue;
            if (o < 0)
                return -errno;
            off += o;
        }
        n -= (uint64_t)k;
    }
    return 0;
}

/* Bring the part's file @name (@size bytes) into the store: a hard link when both
 * are on one file system, else a copy (synced, as the writer syncs what it writes). */
static int take_file(struct merge *m, const char *name, int64_t size)
{
    struct stat st;
    int in, out, ret;

    in = openat(m->srcfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (in < 0 || fstat(in, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != size) {
        ret = in < 0 ? -errno : -EINVAL;
        pcr_errf(m->err, m->errlen, "%s: %s: %s", m->dir, name,
                 ret == -EINVAL ? "not a regular file of the size its index says" : strerror(-ret));
        if (in >= 0)
            close(in);
        return ret;
    }
    if (linkat(m->srcfd, name, m->dstfd, name, 0) == 0) {
        close(in);
        return 0;
    }
    if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
        ret = -errno;
        pcr_errf(m->err, m->errlen, "linking %s/%s into the store: %s", m->dir, name,
                 strerror(errno));
        close(in);
        return ret;
    }
    out = openat(m->dstfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ret = out < 0 ? -errno : copy_bytes(in, out, (uint64_t)size);
    if (!ret && fdatasync(out) != 0)
        ret = -errno;
    if (out >= 0 && close(out) != 0 && !ret)
        ret = -errno;
    close(in);
    if (ret)
        pcr_errf(m->err, m->errlen, "copying %s/%s into the store: %s", m->dir, name,
                 strerror(-ret));
    return ret;
}

static int copy_record(void *ctx, const struct pcr_index_record *r)
{
    struct merge *m = ctx;
    struct wtree *t = &m->w->t[m->tree];
    char want[32];
    int ret;

    if (m->tree == PCR_TREE_IMAGES)
        pcr_record_name((uint64_t)r->id, want);
    else
        snprintf(want, sizeof(want), "%06llu.tks", (unsigned long long)r->id);
    if ((uint64_t)r->id != t->nrecs + 1 || strcmp(r->name, want) != 0 || r->size < 0) {
        pcr_errf(m->err, m->errlen, "%s: record %" PRId64 " (%s) out of order or misnamed", m->dir,
                 r->id, r->name);
        return -EINVAL;
    }
    ret = take_file(m, r->name, r->size);
    if (ret)
        return ret;
    ret = pcr_index_put_record(m->w->idx, m->tree, r);
    if (ret)
        return writer_index_error(m->w, ret);
    t->nrecs++;
    m->nrecs++;
    return 0;
}

static int copy_file_row(void *ctx, const struct pcr_index_file *f)
{
    struct merge *m = ctx;
    struct wtree *t = &m->w->t[m->tree];
    int ret;

    /* every record a file names is this part's (copied before its files) */
    if ((uint64_t)f->id != t->nfiles + 1 || f->record < 1 || (uint64_t)f->record > t->nrecs ||
        (uint64_t)f->record <= t->nrecs - m->nrecs) {
        pcr_errf(m->err, m->errlen, "%s: file %" PRId64 " out of order or in another part's record",
                 m->dir, f->id);
        return -EINVAL;
    }
    ret = pcr_index_put_file(m->w->idx, m->tree, f);
    if (ret)
        return writer_index_error(m->w, ret);
    t->nfiles++;
    m->nfiles++;
    return 0;
}

/* Records and files of one tree of the part; records/ or tokens/ open as m->srcfd. */
static int copy_tree(struct merge *m, enum pcr_index_tree tree, int64_t first_file)
{
    int ret;

    m->tree = tree;
    m->nrecs = m->nfiles = 0;
    ret = pcr_index_load_records(m->src, tree, copy_record, m);
    if (!ret)
        ret = pcr_index_load_files(m->src, tree, first_file, INT64_MAX - first_file, copy_file_row,
                                   m);
    return ret;
}

static int open_sub(struct pcr_writer *w, struct merge *m, const char *sub, int *dst)
{
    int fd = openat(AT_FDCWD, m->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), ret = 0;

    m->srcfd = fd < 0 ? -1 : openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (m->srcfd < 0)
        ret = -errno;
    if (fd >= 0)
        close(fd);
    if (!ret && *dst < 0) {
        if ((mkdirat(w->tmpfd, sub, 0755) != 0 && errno != EEXIST) ||
            (*dst = openat(w->tmpfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            ret = -errno;
    }
    m->dstfd = *dst;
    if (ret)
        pcr_errf(m->err, m->errlen, "%s/%s: %s", m->dir, sub, strerror(-ret));
    return ret;
}

int pcr_writer_add_part(struct pcr_writer *w, const char *dir, bool first, char *err, size_t errlen)
{
    struct merge m = {.w = w, .dir = dir, .srcfd = -1, .dstfd = -1, .err = err, .errlen = errlen};
    struct pcr_part_info info;
    struct wtree *ti = &w->t[PCR_TREE_IMAGES];
    int ret;

    err[0] = '\0';
    ret = open_part_index(dir, &m.src, err, errlen);
    if (!ret)
        ret = read_info(m.src, dir, &info, err, errlen);
    if (ret)
        goto out;
    if (info.first_file != ti->nfiles || info.first_record != ti->nrecs ||
        (first && (ti->ndirs || info.index != 1))) {
        pcr_errf(err, errlen,
                 "%s: part %" PRIu64 " of %" PRIu64 " does not follow the parts before it", dir,
                 info.index, info.count);
        ret = -EINVAL;
        goto out;
    }
    if (first) {
        m.tree = PCR_TREE_IMAGES;
        ret = pcr_index_each_meta(m.src, copy_meta, &m);
        if (!ret)
            ret = pcr_index_each_blob(m.src, copy_blob, &m);
        if (!ret)
            ret = pcr_index_load_dirs(m.src, PCR_TREE_IMAGES, copy_dir, &m);
        if (!ret && pcr_index_has_tokens(m.src)) {
            m.tree = PCR_TREE_TOKENS;
            ret = pcr_index_load_dirs(m.src, PCR_TREE_TOKENS, copy_dir, &m);
            if (!ret && w->t[PCR_TREE_TOKENS].files_declared > 0) {
                ret = open_sub(w, &m, "tokens", &w->tokfd);
                if (!ret)
                    ret = copy_tree(&m, PCR_TREE_TOKENS, 1);
                close(m.srcfd);
                m.srcfd = -1;
            }
        }
        if (ret)
            goto out;
    }
    ret = open_sub(w, &m, "records", &w->recfd);
    if (!ret)
        ret = copy_tree(&m, PCR_TREE_IMAGES, (int64_t)info.first_file + 1);
    if (!ret && (m.nrecs != info.records || m.nfiles != info.files)) {
        pcr_errf(err, errlen,
                 "%s: holds %" PRIu64 " records and %" PRIu64 " files; its keys say %" PRIu64
                 " and %" PRIu64,
                 dir, m.nrecs, m.nfiles, info.records, info.files);
        ret = -EINVAL;
    }
out:
    if (ret && !err[0])
        pcr_errf(err, errlen, "%s: %s", dir,
                 w->err[0] ? w->err
                 : m.src   ? pcr_index_errmsg(m.src)
                           : strerror(-ret));
    if (m.srcfd >= 0)
        close(m.srcfd);
    pcr_index_close(m.src);
    return ret;
}
