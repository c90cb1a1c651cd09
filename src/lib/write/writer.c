/* pcrfs — writing a store (see pcrfs/writer.h and record.h).
 *
 * The writer is deliberately dumb about policy (what to transcode, in what order,
 * with how many threads: the builder decides) and strict about the format: it
 * checks the numbering it is handed, lays each record out as scan groups, and at
 * the end re-opens what it wrote with the store reader, so a store that leaves the
 * writer has passed the same validation a mount applies.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/writer.h"
#include "pcrfs/tokens.h"
#include "format/index.h"
#include "common/internal.h"
#include "format/record.h"

#define WBUF_SIZE (1 << 20)

struct pcr_writer {
    char *path;        /* the target */
    char *parent;      /* its directory */
    char *tmpname;     /* ".NAME.tmp.PID", inside parent */
    char *tmppath;     /* parent/tmpname */
    int parentfd, tmpfd, recfd; /* directory fds */
    struct pcr_index *idx;
    bool force;
    unsigned levels;
    struct wtree {
        uint64_t ndirs, nfiles, nrecs; /* added so far */
        uint64_t files_declared;      /* sum of nfiles over the directories */
        uint64_t last_dir;            /* directory of the last file added, and its name: */
        char last_name[256];          /* names must increase within a directory */
    } t[2];                           /* [PCR_TREE_IMAGES], [PCR_TREE_TOKENS] */
    const struct pcr_tok_model *model; /* encodes token grids (pcr_writer_set_tok_model) */
    int tokfd;                        /* tokens/ directory, created on first use */
    uint8_t *wbuf;                /* record write buffer */
    size_t wlen;
    int wfd;
    char err[512];
};

const char *pcr_writer_error(const struct pcr_writer *w)
{
    return w->err;
}

const char *pcr_writer_tmpdir(const struct pcr_writer *w)
{
    return w->tmppath;
}

/* Remove a directory tree we created (or a verified store): no symlinks followed. */
static int rm_tree(int at, const char *name, int depth)
{
    int fd, ret = 0;
    DIR *d;
    struct dirent *e;

    if (unlinkat(at, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    if (depth > 4)
        return -ELOOP;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -ENOMEM;
    }
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int r = rm_tree(dirfd(d), e->d_name, depth + 1);
        if (r && !ret)
            ret = r;
    }
    closedir(d);
    if (unlinkat(at, name, AT_REMOVEDIR) != 0 && !ret)
        ret = -errno;
    return ret;
}

/* Remove ".NAME.tmp.PID" directories left by builds that were killed: only those
 * whose process is gone, so a concurrent build of the same target is left alone. */
static void remove_stale(struct pcr_writer *w, const char *base)
{
    char prefix[NAME_MAX + 8];
    size_t pl;
    DIR *d;
    struct dirent *e;
    int fd = dup(w->parentfd);

    if (fd < 0 || !(d = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    pl = (size_t)snprintf(prefix, sizeof(prefix), ".%s.tmp.", base);
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid;
        if (strncmp(e->d_name, prefix, pl) != 0)
            continue;
        errno = 0;
        pid = strtol(e->d_name + pl, &end, 10);
        if (errno || *end || pid <= 0 || pid == getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (rm_tree(w->parentfd, e->d_name, 0) == 0)
            pcr_log(PCR_LOG_INFO, "removed %s left by an interrupted build", e->d_name);
    }
    closedir(d);
}

static void writer_free(struct pcr_writer *w)
{
    if (w->wfd >= 0)
        close(w->wfd);
    if (w->recfd >= 0)
        close(w->recfd);
    if (w->tokfd >= 0)
        close(w->tokfd);
    if (w->tmpfd >= 0)
        close(w->tmpfd);
    if (w->parentfd >= 0)
        close(w->parentfd);
    pcr_index_close(w->idx);
    free(w->wbuf);
    free(w->path);
    free(w->parent);
    free(w->tmpname);
    free(w->tmppath);
    free(w);
}

/* Is @path an existing pcrfs store (so that --force may replace it)? */
static int is_store(const char *path)
{
    struct pcr_index *idx;
    char *ip;
    int ret;

    if (asprintf(&ip, "%s/index.db", path) < 0)
        return -ENOMEM;
    ret = pcr_index_open(ip, &idx, NULL, 0);
    free(ip);
    if (ret == 0)
        pcr_index_close(idx);
    return ret == 0 || ret == -ENOTSUP; /* an older format is still a store */
}

int pcr_writer_create(const char *path, const struct pcr_writer_opts *opts,
                      struct pcr_writer **out, char *err, size_t errlen)
{
    struct pcr_writer *w;
    struct stat sb;
    char *tmp1 = NULL, *tmp2 = NULL, *base;
    char *ipath = NULL;
    int ret;

    if (!path || !*path || !opts || opts->levels < 1 || opts->levels > PCR_MAX_LEVELS) {
        pcr_errf(err, errlen, "invalid writer arguments");
        return -EINVAL;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->parentfd = w->tmpfd = w->recfd = w->wfd = w->tokfd = -1;
    w->force = opts->force;
    w->levels = opts->levels;
    w->path = strdup(path);
    tmp1 = strdup(path);
    tmp2 = strdup(path);
    w->wbuf = malloc(WBUF_SIZE);
    if (!w->path || !tmp1 || !tmp2 || !w->wbuf) {
        ret = -ENOMEM;
        goto fail;
    }
    /* strip trailing slashes so "store/" names the directory "store" */
    for (size_t n = strlen(tmp2); n > 1 && tmp2[n - 1] == '/'; n--)
        tmp1[n - 1] = tmp2[n - 1] = '\0';
    w->parent = strdup(dirname(tmp1));
    base = basename(tmp2);
    if (!w->parent || !strcmp(base, "/") || !strcmp(base, ".") || !strcmp(base, "..")) {
        pcr_errf(err, errlen, "%s: not a usable store name", path);
        ret = w->parent ? -EINVAL : -ENOMEM;
        goto fail;
    }
    if (asprintf(&w->tmpname, ".%s.tmp.%ld", base, (long)getpid()) < 0 ||
        asprintf(&w->tmppath, "%s/%s", w->parent, w->tmpname) < 0) {
        w->tmpname = w->tmppath = NULL;
        ret = -ENOMEM;
        goto fail;
    }
    w->parentfd = open(w->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->parentfd < 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", w->parent, strerror(errno));
        goto fail;
    }
    if (stat(path, &sb) == 0) {
        if (!opts->force) {
            pcr_errf(err, errlen, "%s: already exists (use --force to replace a store)", path);
            ret = -EEXIST;
            goto fail;
        }
        if (!S_ISDIR(sb.st_mode) || is_store(path) != 1) {
            pcr_errf(err, errlen, "%s: exists and is not a pcrfs store; not replacing it", path);
            ret = S_ISDIR(sb.st_mode) ? -EINVAL : -ENOTDIR;
            goto fail;
        }
    } else if (errno != ENOENT) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    remove_stale(w, base);
    if (mkdirat(w->parentfd, w->tmpname, 0755) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", w->tmppath, strerror(errno));
        goto fail;
    }
    w->tmpfd = openat(w->parentfd, w->tmpname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->tmpfd < 0 || mkdirat(w->tmpfd, "records", 0755) != 0 ||
        (w->recfd = openat(w->tmpfd, "records", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", w->tmppath, strerror(errno));
        goto fail_rm;
    }
    if (asprintf(&ipath, "%s/index.db", w->tmppath) < 0) {
        ipath = NULL;
        ret = -ENOMEM;
        goto fail_rm;
    }
    ret = pcr_index_create(ipath, &w->idx, w->err, sizeof(w->err));
    free(ipath);
    if (ret) {
        pcr_errf(err, errlen, "%s/index.db: %s", w->tmppath, strerror(-ret));
        goto fail_rm;
    }
    {
        char v[32], now[32];
        snprintf(v, sizeof(v), "%u", opts->levels);
        snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
        if ((ret = pcr_index_put_meta(w->idx, "levels", v)) ||
            (ret = pcr_index_put_meta(w->idx, "script",
                                      opts->script ? opts->script : "libjpeg-default")) ||
            (ret = pcr_index_put_meta(w->idx, "created", now)) ||
            (ret = pcr_index_put_meta(w->idx, "format_version", "1"))) {
            pcr_errf(err, errlen, "%s/index.db: %s", w->tmppath, strerror(-ret));
            goto fail_rm;
        }
    }
    free(tmp1);
    free(tmp2);
    *out = w;
    return 0;
fail_rm:
    pcr_index_close(w->idx);
    w->idx = NULL;
    rm_tree(w->parentfd, w->tmpname, 0);
fail:
    free(tmp1);
    free(tmp2);
    writer_free(w);
    return ret;
}

void pcr_writer_abort(struct pcr_writer *w)
{
    if (!w)
        return;
    if (w->wfd >= 0) {
        close(w->wfd);
        w->wfd = -1;
    }
    pcr_index_close(w->idx);
    w->idx = NULL;
    if (w->parentfd >= 0 && w->tmpname)
        rm_tree(w->parentfd, w->tmpname, 0);
    writer_free(w);
}

int pcr_writer_set_meta(struct pcr_writer *w, const char *key, const char *value)
{
    int ret = pcr_index_put_meta(w->idx, key, value);
    if (ret)
        pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
    return ret;
}

static bool name_ok(const char *n)
{
    size_t l = strlen(n);
    return l > 0 && l <= 255 && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..");
}

static int add_dir(struct pcr_writer *w, enum pcr_index_tree tree, const struct pcr_dir_row *row)
{
    struct wtree *t = &w->t[tree];
    struct pcr_index_dir d;
    int ret;

    if (row->id != t->ndirs + 1 || (row->id == PCR_ROOT_DIR) != (row->name[0] == '\0') ||
        (row->id != PCR_ROOT_DIR && (!name_ok(row->name) || row->parent >= row->id)) ||
        (row->id == PCR_ROOT_DIR && row->parent != PCR_ROOT_DIR)) {
        pcr_errf(w->err, sizeof(w->err), "directory %llu: bad numbering or name",
                 (unsigned long long)row->id);
        return -EINVAL;
    }
    d = (struct pcr_index_dir){
        .id = (int64_t)row->id,
        .parent = (int64_t)row->parent,
        .name = (const uint8_t *)row->name,
        .namelen = strlen(row->name),
        .first_child = (int64_t)row->first_child,
        .nsubdirs = (int64_t)row->nsubdirs,
        .first_file = (int64_t)row->first_file,
        .nfiles = (int64_t)row->nfiles,
    };
    ret = pcr_index_put_dir(w->idx, tree, &d);
    if (ret) {
        pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
        return ret;
    }
    t->ndirs++;
    t->files_declared += row->nfiles;
    return 0;
}

int pcr_writer_add_dir(struct pcr_writer *w, const struct pcr_dir_row *row)
{
    return add_dir(w, PCR_TREE_IMAGES, row);
}

int pcr_writer_add_tok_dir(struct pcr_writer *w, const struct pcr_dir_row *row)
{
    return add_dir(w, PCR_TREE_TOKENS, row);
}

/* ---- record output, through one buffer ---- */

static int wflush(struct pcr_writer *w)
{
    size_t off = 0;

    while (off < w->wlen) {
        ssize_t n = write(w->wfd, w->wbuf + off, w->wlen - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        off += (size_t)n;
    }
    w->wlen = 0;
    return 0;
}

static int wput(struct pcr_writer *w, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t take = WBUF_SIZE - w->wlen;
        if (take > n)
            take = n;
        memcpy(w->wbuf + w->wlen, p, take);
        w->wlen += take;
        p += take;
        n -= take;
        if (w->wlen == WBUF_SIZE) {
            int ret = wflush(w);
            if (ret)
                return ret;
        }
    }
    return 0;
}

/* Chunks of @it: one per scan, plus its trailer (pcrfs(5)); a verbatim file has one. */
static unsigned item_nchunks(const struct pcr_item *it)
{
    return it->kind == PCR_KIND_JPEG ? it->split->nchunks + (it->trailer ? 1 : 0) : 1;
}

/* Chunk @g of @it as (pointer, length); false if it has no such chunk. */
static bool item_chunk(const struct pcr_item *it, unsigned g, const uint8_t **p, size_t *n)
{
    if (it->kind == PCR_KIND_VERBATIM) {
        if (g > 0)
            return false;
        *p = it->data;
        *n = it->len;
        return true;
    }
    if (g == it->split->nchunks && it->trailer) {
        *p = it->data + it->len - it->trailer;
        *n = it->trailer;
        return true;
    }
    if (g >= it->split->nchunks)
        return false;
    size_t start = g ? it->split->end[g - 1] : 0;
    *p = it->data + start;
    *n = it->split->end[g] - start;
    return true;
}

static int check_item(const struct pcr_writer *w, const struct pcr_item *it, uint64_t want)
{
    const struct pcr_split *sp = it->split;

    if (it->id != want || it->dir < 1 || it->dir > w->t[PCR_TREE_IMAGES].ndirs || !it->name ||
        !name_ok(it->name))
        return -EINVAL;
    if (it->kind == PCR_KIND_VERBATIM)
        return (it->len == 0 || it->data) && !it->trailer ? 0 : -EINVAL;
    /* img: the progressive file's length; the trailer follows it */
    size_t img = it->len - it->trailer;
    if (it->kind != PCR_KIND_JPEG || !sp || sp->nchunks < 1 || sp->nchunks > PCR_MAX_CHUNKS ||
        it->len < 4 || it->trailer > it->len - 4 || !it->data ||
        sp->nchunks + (it->trailer ? 1 : 0) > PCR_MAX_CHUNKS ||
        sp->end[sp->nchunks - 1] + 2 != img || it->data[img - 2] != 0xFF ||
        it->data[img - 1] != 0xD9)
        return -EINVAL;
    for (unsigned i = 1; i < sp->nchunks; i++)
        if (sp->end[i] < sp->end[i - 1])
            return -EINVAL;
    return 0;
}

/* Files come grouped by directory, in directory order, sorted by name within one. */
static int check_order(struct wtree *t, uint64_t dir, const char *name)
{
    if (dir < t->last_dir || (dir == t->last_dir && strcmp(t->last_name, name) >= 0))
        return -EINVAL;
    t->last_dir = dir;
    snprintf(t->last_name, sizeof(t->last_name), "%s", name);
    return 0;
}

int pcr_writer_add_record(struct pcr_writer *w, const struct pcr_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_IMAGES];
    uint8_t hdr[PCR_RECORD_HDR], gblob[(PCR_MAX_CHUNKS + 1) * 10];
    uint8_t cblob[PCR_MAX_CHUNKS * 20];
    uint64_t goff[PCR_MAX_CHUNKS + 1], pos;
    unsigned ngroups = 0;
    size_t glen = 0;
    char name[32];
    int ret;

    if (n == 0)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++) {
        if (check_item(w, &items[i], t->nfiles + 1 + i) ||
            check_order(t, items[i].dir, items[i].name)) {
            pcr_errf(w->err, sizeof(w->err), "file %llu (%s): bad numbering or chunk table",
                     (unsigned long long)items[i].id, items[i].name ? items[i].name : "?");
            return -EINVAL;
        }
        unsigned nc = item_nchunks(&items[i]);
        if (nc > ngroups)
            ngroups = nc;
    }
    /* group offsets: group g holds chunk g of every item that has one */
    pos = PCR_RECORD_HDR;
    for (unsigned g = 0; g < ngroups; g++) {
        goff[g] = pos;
        for (unsigned i = 0; i < n; i++) {
            const uint8_t *p;
            size_t l;
            if (item_chunk(&items[i], g, &p, &l))
                pos += l;
        }
    }
    goff[ngroups] = pos;

    t->nrecs++;
    pcr_record_name(t->nrecs, name);
    w->wfd = openat(w->recfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->wfd < 0) {
        ret = -errno;
        goto fail;
    }
    w->wlen = 0;
    pcr_record_hdr_encode(&(struct pcr_record_hdr){.version = PCR_RECORD_VERSION,
                                                   .ngroups = ngroups,
                                                   .nimages = n,
                                                   .size = pos},
                          hdr);
    ret = wput(w, hdr, sizeof(hdr));
    for (unsigned g = 0; !ret && g < ngroups; g++)
        for (unsigned i = 0; !ret && i < n; i++) {
            const uint8_t *p;
            size_t l;
            if (item_chunk(&items[i], g, &p, &l))
                ret = wput(w, p, l);
        }
    if (!ret)
        ret = wflush(w);
    if (!ret && fdatasync(w->wfd) != 0)
        ret = -errno;
    if (!ret && close(w->wfd) != 0)
        ret = -errno;
    w->wfd = -1;
    if (ret)
        goto fail;

    for (unsigned g = 0; g <= ngroups; g++)
        glen += pcr_varint_put(gblob + glen, goff[g]);
    ret = pcr_index_put_record(w->idx, PCR_TREE_IMAGES, &(struct pcr_index_record){.id = (int64_t)t->nrecs,
                                                                  .name = name,
                                                                  .size = (int64_t)pos,
                                                                  .nimages = n,
                                                                  .groups = gblob,
                                                                  .groups_len = glen});
    /* each item's chunk offsets inside their groups, in slot order */
    uint64_t gpos[PCR_MAX_CHUNKS] = {0};
    for (unsigned i = 0; !ret && i < n; i++) {
        const struct pcr_item *it = &items[i];
        unsigned nc = item_nchunks(it);
        size_t clen = 0, slen = 0;
        uint8_t *sums = malloc(4 * (pcr_sum_blocks(it->len) + nc));
        if (!sums) {
            ret = -ENOMEM;
            break;
        }
        for (unsigned g = 0; g < nc; g++) {
            const uint8_t *p = NULL;
            size_t l = 0;
            item_chunk(it, g, &p, &l);
            clen += pcr_varint_put(cblob + clen, gpos[g]);
            clen += pcr_varint_put(cblob + clen, l);
            slen += pcr_sums_put(p, l, sums + slen);
            gpos[g] += l;
        }
        ret = pcr_index_put_file(
            w->idx, PCR_TREE_IMAGES, &(struct pcr_index_file){
                        .id = (int64_t)it->id,
                        .dir = (int64_t)it->dir,
                        .name = (const uint8_t *)it->name,
                        .namelen = strlen(it->name),
                        .kind = it->kind,
                        .record = (int64_t)t->nrecs,
                        .slot = i,
                        .nchunks = nc,
                        .chunks = cblob,
                        .chunks_len = clen,
                        .size = (int64_t)it->len,
                        .width = it->kind == PCR_KIND_JPEG ? it->info.width : 0,
                        .height = it->kind == PCR_KIND_JPEG ? it->info.height : 0,
                        .components = it->kind == PCR_KIND_JPEG ? it->info.components : 0,
                        .src_size = (int64_t)it->src_size,
                        .checksum = pcr_xxh64(it->data, it->len),
                        .note = it->note,
                        .trailer = it->kind == PCR_KIND_JPEG && it->trailer ? 1 : 0,
                        .sums = sums,
                        .sums_len = slen,
                    });
        free(sums);
    }
    if (ret) {
        pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
        return ret;
    }
    t->nfiles += n;
    return 0;
fail:
    if (w->wfd >= 0) {
        close(w->wfd);
        w->wfd = -1;
    }
    pcr_errf(w->err, sizeof(w->err), "writing %s/records/%s: %s", w->tmppath, name,
             strerror(-ret));
    return ret;
}

/* ---- tokens ---- */

int pcr_writer_set_blob(struct pcr_writer *w, const char *key, const void *data, size_t len)
{
    int ret = pcr_index_put_blob(w->idx, key, data, len);
    if (ret)
        pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
    return ret;
}

int pcr_writer_set_tok_model(struct pcr_writer *w, const struct pcr_tok_model *m)
{
    size_t len;
    const void *blob = pcr_tok_model_blob(m, &len);
    int ret = pcr_writer_set_blob(w, "tok_model", blob, len);

    if (!ret)
        ret = pcr_writer_set_meta(w, "tok_coder", pcr_tok_coder_name(pcr_tok_model_coder(m)));
    if (!ret)
        w->model = m;
    return ret;
}

/* Write one token shard (tokens/NNNNNN.tks) and its rows: each grid encoded with the
 * model, each file a one-chunk row whose record is the shard (see pcrfs(5)). */
int pcr_writer_add_tok_shard(struct pcr_writer *w, const struct pcr_tok_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_TOKENS];
    struct pcr_tokshard_writer *sw = NULL;
    uint8_t *blob = NULL, *npy = NULL, gblob[20], cblob[20];
    size_t cap = 0, npycap = 0;
    uint64_t *offs = NULL, *lens = NULL, size = PCR_TOKSHARD_HEADER;
    uint8_t *sb = NULL; /* the blobs' chunk sums, item i's at [soff[i], soff[i + 1]) */
    size_t *soff = NULL, sbcap = 0;
    char name[32], path[PATH_MAX];
    int ret = 0;

    if (!w->model || n == 0) {
        pcr_errf(w->err, sizeof(w->err), "token shard: %s", n ? "no model set" : "empty");
        return -EINVAL;
    }
    for (unsigned i = 0; i < n; i++) {
        const struct pcr_tok_item *it = &items[i];
        if (it->id != t->nfiles + 1 + i || it->dir < 1 || it->dir > t->ndirs || !it->name ||
            !name_ok(it->name) || !it->grid || it->h < 1 || it->w < 1 ||
            it->h > PCR_TOK_MAX_SIDE || it->w > PCR_TOK_MAX_SIDE ||
            (uint64_t)it->h * it->w > PCR_TOK_MAX_TOKENS || check_order(t, it->dir, it->name)) {
            pcr_errf(w->err, sizeof(w->err), "token file %llu (%s): bad numbering or shape",
                     (unsigned long long)it->id, it->name ? it->name : "?");
            return -EINVAL;
        }
    }
    if (w->tokfd < 0) {
        if ((mkdirat(w->tmpfd, "tokens", 0755) != 0 && errno != EEXIST) ||
            (w->tokfd = openat(w->tmpfd, "tokens", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
            ret = -errno;
            pcr_errf(w->err, sizeof(w->err), "%s/tokens: %s", w->tmppath, strerror(errno));
            return ret;
        }
    }
    offs = calloc(n, sizeof(*offs));
    lens = calloc(n, sizeof(*lens));
    soff = calloc(n + 1, sizeof(*soff));
    if (!offs || !lens || !soff) {
        ret = -ENOMEM;
        goto out;
    }
    t->nrecs++;
    snprintf(name, sizeof(name), "%06llu.tks", (unsigned long long)t->nrecs);
    snprintf(path, sizeof(path), "%s/tokens/%s", w->tmppath, name);
    ret = pcr_tokshard_create(path, pcr_tok_model_id(w->model), &sw, w->err, sizeof(w->err));
    for (unsigned i = 0; !ret && i < n; i++) {
        size_t need = pcr_tok_encode_bound(w->model, (size_t)items[i].h * items[i].w);
        ssize_t bl;
        if (need > cap) {
            uint8_t *nb = realloc(blob, need);
            if (!nb) {
                ret = -ENOMEM;
                break;
            }
            blob = nb;
            cap = need;
        }
        bl = pcr_tok_encode(w->model, items[i].grid, items[i].h, items[i].w, blob, cap);
        if (bl <= 0) {
            ret = bl < 0 ? (int)bl : -EINVAL;
            pcr_errf(w->err, sizeof(w->err), "token file %s: cannot encode", items[i].name);
            break;
        }
        if (soff[i] + 4 * pcr_sum_blocks((uint64_t)bl) > sbcap) {
            size_t nc = 2 * sbcap + 4 * pcr_sum_blocks((uint64_t)bl) + 64;
            uint8_t *nb = realloc(sb, nc);
            if (!nb) {
                ret = -ENOMEM;
                break;
            }
            sb = nb;
            sbcap = nc;
        }
        soff[i + 1] = soff[i] + pcr_sums_put(blob, (size_t)bl, sb + soff[i]);
        ret = pcr_tokshard_add(sw, blob, (size_t)bl, &offs[i]);
        lens[i] = (uint64_t)bl;
        size += (uint64_t)bl;
    }
    if (ret) {
        if (sw)
            pcr_tokshard_abort(sw);
        if (!w->err[0])
            pcr_errf(w->err, sizeof(w->err), "writing %s: %s", path, strerror(-ret));
        goto out;
    }
    ret = pcr_tokshard_finish(sw, w->err, sizeof(w->err));
    if (ret)
        goto out;
    size_t gl = pcr_varint_put(gblob, PCR_TOKSHARD_HEADER);
    gl += pcr_varint_put(gblob + gl, size);
    ret = pcr_index_put_record(w->idx, PCR_TREE_TOKENS,
                               &(struct pcr_index_record){.id = (int64_t)t->nrecs,
                                                          .name = name,
                                                          .size = (int64_t)size,
                                                          .nimages = n,
                                                          .groups = gblob,
                                                          .groups_len = gl});
    for (unsigned i = 0; !ret && i < n; i++) {
        const struct pcr_tok_item *it = &items[i];
        size_t nsz = pcr_npy_grid_size(it->h, it->w);
        if (nsz > npycap) {
            uint8_t *nb = realloc(npy, nsz);
            if (!nb) {
                ret = -ENOMEM;
                break;
            }
            npy = nb;
            npycap = nsz;
        }
        pcr_npy_write_grid(it->h, it->w, it->grid, npy, nsz);
        size_t cl = pcr_varint_put(cblob, offs[i] - PCR_TOKSHARD_HEADER);
        cl += pcr_varint_put(cblob + cl, lens[i]);
        ret = pcr_index_put_file(w->idx, PCR_TREE_TOKENS,
                                 &(struct pcr_index_file){
                                     .id = (int64_t)it->id,
                                     .dir = (int64_t)it->dir,
                                     .name = (const uint8_t *)it->name,
                                     .namelen = strlen(it->name),
                                     .kind = PCR_KIND_TOKENS,
                                     .record = (int64_t)t->nrecs,
                                     .slot = i,
                                     .nchunks = 1,
                                     .chunks = cblob,
                                     .chunks_len = cl,
                                     .size = (int64_t)nsz,
                                     .width = it->w,
                                     .height = it->h,
                                     .src_size = (int64_t)lens[i],
                                     .checksum = pcr_xxh64(npy, nsz),
                                     .sums = sb + soff[i],
                                     .sums_len = soff[i + 1] - soff[i],
                                 });
    }
    if (ret)
        pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
    else
        t->nfiles += n;
out:
    free(offs);
    free(lens);
    free(soff);
    free(sb);
    free(blob);
    free(npy);
    return ret;
}

static int sync_dir(int fd)
{
    return fsync(fd) == 0 || errno == EINVAL ? 0 : -errno;
}

int pcr_writer_finish(struct pcr_writer *w, char *err, size_t errlen)
{
    struct pcr_store *check = NULL;
    char v[32];
    int ret, fd;

    struct wtree *ti = &w->t[PCR_TREE_IMAGES], *tt = &w->t[PCR_TREE_TOKENS];
    if (ti->ndirs == 0 || ti->files_declared != ti->nfiles ||
        tt->files_declared != tt->nfiles) {
        pcr_errf(err, errlen,
                 "store numbering incomplete: %llu directories, %llu of %llu files, "
                 "%llu of %llu token files",
                 (unsigned long long)ti->ndirs, (unsigned long long)ti->nfiles,
                 (unsigned long long)ti->files_declared, (unsigned long long)tt->nfiles,
                 (unsigned long long)tt->files_declared);
        ret = -EINVAL;
        goto fail;
    }
    snprintf(v, sizeof(v), "%llu", (unsigned long long)ti->nfiles);
    ret = pcr_index_put_meta(w->idx, "files", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)ti->ndirs);
    if (!ret)
        ret = pcr_index_put_meta(w->idx, "dirs", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)ti->nrecs);
    if (!ret)
        ret = pcr_index_put_meta(w->idx, "records", v);
    snprintf(v, sizeof(v), "%llu", (unsigned long long)tt->nfiles);
    if (!ret)
        ret = pcr_index_put_meta(w->idx, "tokens", v);
    if (!ret)
        ret = pcr_index_commit(w->idx, err, errlen);
    else
        pcr_errf(err, errlen, "index: %s", pcr_index_errmsg(w->idx));
    pcr_index_close(w->idx);
    w->idx = NULL;
    if (ret)
        goto fail;
    fd = openat(w->tmpfd, "index.db", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        ret = -errno;
        if (fd >= 0)
            close(fd);
        pcr_errf(err, errlen, "%s/index.db: %s", w->tmppath, strerror(-ret));
        goto fail;
    }
    close(fd);
    if ((ret = sync_dir(w->recfd)) || (w->tokfd >= 0 && (ret = sync_dir(w->tokfd))) ||
        (ret = sync_dir(w->tmpfd))) {
        pcr_errf(err, errlen, "%s: %s", w->tmppath, strerror(-ret));
        goto fail;
    }
    /* What leaves the writer must pass the reader's validation. */
    ret = pcr_store_open(w->tmppath, &check, err, errlen);
    pcr_store_close(check);
    if (ret)
        goto fail;

    if (w->force) {
        /* Swap atomically, so the target is never missing, then drop the old store
         * (now under the temporary name). */
        if (renameat2(w->parentfd, w->tmpname, AT_FDCWD, w->path, RENAME_EXCHANGE) == 0) {
            rm_tree(w->parentfd, w->tmpname, 0);
            goto done;
        }
        if (errno != ENOENT && errno != EINVAL && errno != ENOSYS) {
            ret = -errno;
            pcr_errf(err, errlen, "%s: %s", w->path, strerror(errno));
            goto fail;
        }
    }
    if (renameat2(w->parentfd, w->tmpname, AT_FDCWD, w->path, RENAME_NOREPLACE) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", w->path,
                 errno == EEXIST ? "appeared during the build; not replaced" : strerror(errno));
        goto fail;
    }
done:
    sync_dir(w->parentfd);
    writer_free(w);
    return 0;
fail:
    pcr_writer_abort(w);
    return ret;
}
