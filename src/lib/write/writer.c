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
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "format/record.h"
#include "write/writer_internal.h"

#define WBUF_SIZE (1 << 20)

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

/* The marker a build writes first into its temporary directory. A directory
 * beside the target that only looks like ".NAME.tmp.PID" may be a user's: the
 * marker, its owner and the PID in its name together say it is a build's, and
 * the boot id with the process start time say whether that build is still
 * running (a PID alone may since have been reused). */
#define MARKER       ".pcrfs-build"
#define MARKER_MAGIC "pcrfs build temporary directory v1"
#define MARKER_MAX   512

/* This boot's id, or "" when the kernel does not say. */
static void boot_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

    buf[0] = '\0';
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* The start time of process @pid in clock ticks since boot (field 22 of
 * /proc/PID/stat, after the parenthesised name, which may hold spaces), or 0. */
static unsigned long long proc_start(long pid)
{
    char path[64], buf[1024], *p;
    unsigned long long t = 0;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    f = fopen(path, "re");
    if (!f)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    /* the kernel's own line; field 22 fits in unsigned long long:
     * NOLINTNEXTLINE(cert-err34-c) */
    if (!p || sscanf(p + 1,
                     " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                     "%*d %*d %llu",
                     &t) != 1)
        return 0;
    return t;
}

/* Write the marker into the new temporary directory (w->tmpfd). */
static int write_marker(struct pcr_writer *w)
{
    char boot[64], text[MARKER_MAX];
    int fd, n, ret = 0;

    boot_id(boot, sizeof(boot));
    n = snprintf(text, sizeof(text), "%s\npid %ld\nboot %s\nstart %llu\n", MARKER_MAGIC,
                 (long)getpid(), boot[0] ? boot : "-", proc_start((long)getpid()));
    fd = openat(w->tmpfd, MARKER, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    if (write(fd, text, (size_t)n) != n)
        ret = errno ? -errno : -EIO;
    if (close(fd) != 0 && !ret)
        ret = -errno;
    return ret;
}

/* Is @name (in w->parentfd, named ".NAME.tmp.@pid") the temporary directory of a
 * build of ours that is no longer running? Only a directory owned by us, holding
 * a marker owned by us that names the same PID, and whose process is gone: ended
 * (ESRCH), from an earlier boot, or its PID reused by a process started at
 * another time. Anything else beside the store is left alone. */
static bool stale_build(struct pcr_writer *w, const char *name, long pid)
{
    char text[MARKER_MAX], boot[64], mboot[64] = "";
    unsigned long long mstart = 0;
    long mpid = 0;
    struct stat st;
    ssize_t n;
    int dfd, fd;
    bool ours;

    if (fstatat(w->parentfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
        return false;
    dfd = openat(w->parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return false;
    fd = openat(dfd, MARKER, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0)
        return false;
    n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()
            ? read(fd, text, sizeof(text) - 1)
            : -1;
    close(fd);
    if (n <= 0)
        return false;
    text[n] = '\0';
    /* glibc's sscanf() saturates a number that overflows, and a wrong pid or start
     * only makes the marker not ours: NOLINTNEXTLINE(cert-err34-c) */
    ours = sscanf(text, MARKER_MAGIC "\npid %ld\nboot %63s\nstart %llu\n", &mpid, mboot, &mstart) ==
               3 &&
           mpid == pid;
    if (!ours)
        return false;
    boot_id(boot, sizeof(boot));
    if (boot[0] && strcmp(boot, mboot) != 0)
        return true; /* every process of an earlier boot is gone */
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return true;
    /* alive: the same build only if it started when the marker says */
    return mstart && proc_start(pid) != mstart;
}

/* Remove the temporary directories of builds of the same target that were killed
 * (stale_build()); a concurrent build's, and anything not a build's, stay. */
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
        const char *digits = e->d_name + pl;
        char *end;
        long pid;

        if (strncmp(e->d_name, prefix, pl) != 0 || digits[0] < '1' || digits[0] > '9')
            continue;
        errno = 0;
        pid = strtol(digits, &end, 10);
        if (errno || *end || pid <= 0 || pid == getpid() || !stale_build(w, e->d_name, pid))
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

/* May a store be created at @path: nothing there, or (with @force) a store?
 * @return 0 or a negative errno with a reason in @err. */
static int check_target(const char *path, bool force, char *err, size_t errlen)
{
    struct stat sb;

    if (stat(path, &sb) != 0) {
        int e = errno;

        if (e == ENOENT && lstat(path, &sb) == 0) {
            pcr_errf(err, errlen, "%s: a symbolic link to nothing; not replacing it", path);
            return -ENOTDIR;
        }
        if (e == ENOENT)
            return 0;
        pcr_errf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    if (!force) {
        pcr_errf(err, errlen, "%s: already exists (use --force to replace a store)", path);
        return -EEXIST;
    }
    if (!S_ISDIR(sb.st_mode) || is_store(path) != 1) {
        pcr_errf(err, errlen, "%s: exists and is not a pcrfs store; not replacing it", path);
        return S_ISDIR(sb.st_mode) ? -EINVAL : -ENOTDIR;
    }
    return 0;
}

/* Create the temporary index.db with the build's first meta keys. */
static int create_index(struct pcr_writer *w, const struct pcr_writer_opts *opts, char *err,
                        size_t errlen)
{
    char *ipath, v[32], now[32];
    int ret;

    if (asprintf(&ipath, "%s/index.db", w->tmppath) < 0)
        return -ENOMEM;
    ret = pcr_index_create(ipath, &w->idx, w->err, sizeof(w->err));
    free(ipath);
    if (ret) {
        pcr_errf(err, errlen, "%s/index.db: %s", w->tmppath, strerror(-ret));
        return ret;
    }
    snprintf(v, sizeof(v), "%u", opts->levels);
    snprintf(now, sizeof(now), "%lld", (long long)(opts->created > 0 ? opts->created : time(NULL)));
    if ((ret = pcr_index_put_meta(w->idx, "levels", v)) ||
        (ret = pcr_index_put_meta(w->idx, "script",
                                  opts->script ? opts->script : "libjpeg-default")) ||
        (ret = pcr_index_put_meta(w->idx, "created", now)) ||
        (ret = pcr_index_put_meta(w->idx, "format_version", "1")))
        pcr_errf(err, errlen, "%s/index.db: %s", w->tmppath, strerror(-ret));
    return ret;
}

int pcr_writer_create(const char *path, const struct pcr_writer_opts *opts, struct pcr_writer **out,
                      char *err, size_t errlen)
{
    struct pcr_writer *w;
    char *tmp1 = NULL, *tmp2 = NULL, *base, *resolved = NULL;
    struct stat lst;
    int ret;

    if (!path || !*path || !opts || opts->levels < 1 || opts->levels > PCR_MAX_LEVELS) {
        pcr_errf(err, errlen, "invalid writer arguments");
        return -EINVAL;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    /* --force on a symbolic link to a store replaces the store it points to (built
     * beside it, on its file system, swapped in atomically); the link stays. */
    if (opts->force && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) &&
        (resolved = realpath(path, NULL)) != NULL)
        path = resolved;
    w->parentfd = w->tmpfd = w->recfd = w->wfd = w->tokfd = -1;
    w->force = opts->force;
    w->levels = opts->levels;
    w->part = opts->part;
    w->part_first = opts->part_first_file;
    w->part_files = opts->part_files;
    if (opts->part) {
        w->t[PCR_TREE_IMAGES].nfiles = opts->part_first_file;
        w->t[PCR_TREE_IMAGES].nrecs = opts->part_first_record;
    }
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
    ret = check_target(path, opts->force, err, errlen);
    if (ret)
        goto fail;
    remove_stale(w, base);
    if (mkdirat(w->parentfd, w->tmpname, 0755) != 0) {
        ret = -errno;
        pcr_errf(err, errlen, "%s: %s", w->tmppath, strerror(errno));
        goto fail;
    }
    w->tmpfd = openat(w->parentfd, w->tmpname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* the marker before any content: what a killed build leaves is then recognised */
    if (w->tmpfd < 0 || (ret = write_marker(w)) < 0 || mkdirat(w->tmpfd, "records", 0755) != 0 ||
        (w->recfd = openat(w->tmpfd, "records", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        ret = ret < 0 ? ret : -errno;
        pcr_errf(err, errlen, "%s: %s", w->tmppath, strerror(-ret));
        goto fail_rm;
    }
    ret = create_index(w, opts, err, errlen);
    if (ret)
        goto fail_rm;
    free(tmp1);
    free(tmp2);
    free(resolved);
    *out = w;
    return 0;
fail_rm:
    pcr_index_close(w->idx);
    w->idx = NULL;
    rm_tree(w->parentfd, w->tmpname, 0);
fail:
    free(tmp1);
    free(tmp2);
    free(resolved);
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

int writer_index_error(struct pcr_writer *w, int ret)
{
    pcr_errf(w->err, sizeof(w->err), "index: %s", pcr_index_errmsg(w->idx));
    return ret;
}

int pcr_writer_set_meta(struct pcr_writer *w, const char *key, const char *value)
{
    int ret = pcr_index_put_meta(w->idx, key, value);

    return ret ? writer_index_error(w, ret) : 0;
}

int pcr_writer_set_blob(struct pcr_writer *w, const char *key, const void *data, size_t len)
{
    int ret = pcr_index_put_blob(w->idx, key, data, len);

    return ret ? writer_index_error(w, ret) : 0;
}

bool writer_name_ok(const char *n)
{
    size_t l = strlen(n);
    return l > 0 && l <= 255 && !strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

int writer_check_order(struct wtree *t, uint64_t dir, const char *name)
{
    if (dir < t->last_dir || (dir == t->last_dir && strcmp(t->last_name, name) >= 0))
        return -EINVAL;
    t->last_dir = dir;
    snprintf(t->last_name, sizeof(t->last_name), "%s", name);
    return 0;
}

int writer_add_dir(struct pcr_writer *w, enum pcr_index_tree tree, const struct pcr_dir_row *row)
{
    struct wtree *t = &w->t[tree];
    struct pcr_index_dir d;
    int ret;

    if (row->id != t->ndirs + 1 || (row->id == PCR_ROOT_DIR) != (row->name[0] == '\0') ||
        (row->id != PCR_ROOT_DIR && (!writer_name_ok(row->name) || row->parent >= row->id)) ||
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
    if (ret)
        return writer_index_error(w, ret);
    t->ndirs++;
    t->files_declared += row->nfiles;
    return 0;
}

int pcr_writer_add_dir(struct pcr_writer *w, const struct pcr_dir_row *row)
{
    return writer_add_dir(w, PCR_TREE_IMAGES, row);
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
        !writer_name_ok(it->name))
        return -EINVAL;
    if (it->kind == PCR_KIND_VERBATIM)
        return (it->len == 0 || it->data || it->read) && !it->trailer && !it->quality ? 0 : -EINVAL;
    for (unsigned k = 0; it->quality && k + 1 < w->levels; k++)
        if (!(it->quality[k] >= 0.0 && it->quality[k] <= 1.0)) /* NaN fails too */
            return -EINVAL;
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

/* Check each item's numbering, order and chunk table. @return the number of chunk
 * groups of their record (the most chunks of any item), or 0 (w->err set). */
static unsigned check_record(struct pcr_writer *w, const struct pcr_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_IMAGES];
    unsigned ngroups = 0;

    for (unsigned i = 0; i < n; i++) {
        unsigned nc;

        if (check_item(w, &items[i], t->nfiles + 1 + i) ||
            writer_check_order(t, items[i].dir, items[i].name)) {
            pcr_errf(w->err, sizeof(w->err), "file %llu (%s): bad numbering or chunk table",
                     (unsigned long long)items[i].id, items[i].name ? items[i].name : "?");
            return 0;
        }
        nc = item_nchunks(&items[i]);
        if (nc > ngroups)
            ngroups = nc;
    }
    return ngroups;
}

/* Group g holds chunk g of every item that has one, in slot order, after the
 * header: its offset is goff[g], and goff[ngroups] the record's size. */
static void group_offsets(const struct pcr_item *items, unsigned n, unsigned ngroups,
                          uint64_t *goff)
{
    uint64_t pos = PCR_RECORD_HDR;

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
}

/* What the writer learnt of a file it fetched itself (pcr_item.read): its
 * checksum and block sums, for its index row. */
struct streamed {
    uint64_t checksum;
    uint8_t *sums;
    size_t sums_len;
};

static bool item_streamed(const struct pcr_item *it)
{
    return it->kind == PCR_KIND_VERBATIM && !it->data && it->read && it->len > 0;
}

/* Fetch streamed item @it piece by piece into the record, summing on the way. */
static int stream_item(struct pcr_writer *w, const struct pcr_item *it, struct streamed *out)
{
    struct pcr_xxh64 h;
    uint8_t *piece = malloc(PCR_WRITER_PIECE);
    int ret = 0;

    out->sums = malloc(4 * pcr_sum_blocks(it->len) + 4);
    out->sums_len = 0;
    if (!piece || !out->sums) {
        free(piece);
        return -ENOMEM;
    }
    pcr_xxh64_init(&h);
    for (uint64_t off = 0; off < it->len && !ret; off += PCR_WRITER_PIECE) {
        /* pieces are whole sum blocks, so the sums are those of the whole file */
        size_t n = it->len - off < PCR_WRITER_PIECE ? (size_t)(it->len - off) : PCR_WRITER_PIECE;

        ret = it->read(it->read_arg, off, piece, n);
        if (!ret) {
            pcr_xxh64_update(&h, piece, n);
            out->sums_len += pcr_sums_put(piece, n, out->sums + out->sums_len);
            ret = wput(w, piece, n);
        }
    }
    out->checksum = pcr_xxh64_final(&h);
    free(piece);
    return ret;
}

/* Write records/@name (header, then the groups) and fdatasync() it. */
static int write_record(struct pcr_writer *w, const char *name, const struct pcr_item *items,
                        unsigned n, unsigned ngroups, uint64_t size, struct streamed *st)
{
    uint8_t hdr[PCR_RECORD_HDR];
    int ret;

    w->wfd = openat(w->recfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->wfd < 0)
        return -errno;
    w->wlen = 0;
    pcr_record_hdr_encode(
        &(struct pcr_record_hdr){
            .version = PCR_RECORD_VERSION, .ngroups = ngroups, .nimages = n, .size = size},
        hdr);
    ret = wput(w, hdr, sizeof(hdr));
    for (unsigned g = 0; !ret && g < ngroups; g++)
        for (unsigned i = 0; !ret && i < n; i++) {
            const uint8_t *p;
            size_t l;
            if (g == 0 && item_streamed(&items[i]))
                ret = stream_item(w, &items[i], &st[i]);
            else if (item_chunk(&items[i], g, &p, &l))
                ret = wput(w, p, l);
        }
    if (!ret)
        ret = wflush(w);
    if (!ret && fdatasync(w->wfd) != 0)
        ret = -errno;
    if (!ret && close(w->wfd) != 0)
        ret = -errno;
    else if (ret)
        close(w->wfd);
    w->wfd = -1;
    return ret;
}

/* The index row of @it, in slot @slot of record @rec: its chunk table (offsets
 * inside their groups: gpos[g] is where group g's next chunk goes, advanced here)
 * and the block sums of its chunks. */
static int put_image_file(struct pcr_writer *w, const struct pcr_item *it, uint64_t rec,
                          unsigned slot, uint64_t *gpos, const struct streamed *st)
{
    uint8_t cblob[PCR_MAX_CHUNKS * 20], qblob[2 * PCR_MAX_LEVELS];
    unsigned nc = item_nchunks(it);
    size_t qlen = 0;
    size_t clen = 0, slen = 0;
    uint8_t *sums = malloc(4 * (pcr_sum_blocks(it->len) + nc));
    int ret;

    if (!sums) {
        pcr_errf(w->err, sizeof(w->err), "out of memory");
        return -ENOMEM;
    }
    for (unsigned g = 0; g < nc; g++) {
        const uint8_t *p = NULL;
        size_t l = 0;
        if (item_streamed(it)) {
            l = it->len;
            if (st->sums_len) /* memcpy() from NULL is undefined, even of 0 bytes */
                memcpy(sums + slen, st->sums, st->sums_len);
            slen += st->sums_len;
        } else {
            item_chunk(it, g, &p, &l);
            slen += pcr_sums_put(p, l, sums + slen);
        }
        clen += pcr_varint_put(cblob + clen, gpos[g]);
        clen += pcr_varint_put(cblob + clen, l);
        gpos[g] += l;
    }
    /* MS-SSIM rounded down to a multiple of 1/60000, a u16 (pcrfs(5)): a threshold
     * of four decimals is a multiple too, so rounding never moves a value across it */
    for (unsigned k = 0; it->quality && k + 1 < w->levels; k++) {
        unsigned q = (unsigned)floor(it->quality[k] * PCR_QUALITY_SCALE);
        qblob[qlen++] = (uint8_t)q;
        qblob[qlen++] = (uint8_t)(q >> 8);
    }
    ret = pcr_index_put_file(
        w->idx, PCR_TREE_IMAGES,
        &(struct pcr_index_file){
            .id = (int64_t)it->id,
            .dir = (int64_t)it->dir,
            .name = (const uint8_t *)it->name,
            .namelen = strlen(it->name),
            .kind = it->kind,
            .record = (int64_t)rec,
            .slot = slot,
            .nchunks = nc,
            .chunks = cblob,
            .chunks_len = clen,
            .size = (int64_t)it->len,
            .width = it->kind == PCR_KIND_JPEG ? it->info.width : 0,
            .height = it->kind == PCR_KIND_JPEG ? it->info.height : 0,
            .components = it->kind == PCR_KIND_JPEG ? it->info.components : 0,
            .src_size = (int64_t)it->src_size,
            .checksum = item_streamed(it) ? st->checksum : pcr_xxh64(it->data, it->len),
            .note = it->note,
            .trailer = it->kind == PCR_KIND_JPEG && it->trailer ? 1 : 0,
            .sums = sums,
            .sums_len = slen,
            .quality = qblob,
            .quality_len = qlen,
        });
    free(sums);
    return ret ? writer_index_error(w, ret) : 0;
}

int pcr_writer_add_record(struct pcr_writer *w, const struct pcr_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_IMAGES];
    uint8_t gblob[(PCR_MAX_CHUNKS + 1) * 10];
    uint64_t goff[PCR_MAX_CHUNKS + 1], gpos[PCR_MAX_CHUNKS] = {0};
    struct streamed *st;
    unsigned ngroups;
    size_t glen = 0;
    char name[32];
    int ret;

    if (n == 0)
        return -EINVAL;
    ngroups = check_record(w, items, n);
    if (ngroups == 0)
        return -EINVAL;
    group_offsets(items, n, ngroups, goff);
    st = calloc(n, sizeof(*st));
    if (!st)
        return -ENOMEM;

    t->nrecs++;
    pcr_record_name(t->nrecs, name);
    ret = write_record(w, name, items, n, ngroups, goff[ngroups], st);
    if (ret) {
        pcr_errf(w->err, sizeof(w->err), "writing %s/records/%s: %s", w->tmppath, name,
                 strerror(-ret));
        goto out;
    }

    for (unsigned g = 0; g <= ngroups; g++)
        glen += pcr_varint_put(gblob + glen, goff[g]);
    ret = pcr_index_put_record(w->idx, PCR_TREE_IMAGES,
                               &(struct pcr_index_record){.id = (int64_t)t->nrecs,
                                                          .name = name,
                                                          .size = (int64_t)goff[ngroups],
                                                          .nimages = n,
                                                          .groups = gblob,
                                                          .groups_len = glen});
    if (ret) {
        ret = writer_index_error(w, ret);
        goto out;
    }
    for (unsigned i = 0; !ret && i < n; i++)
        ret = put_image_file(w, &items[i], t->nrecs, i, gpos, &st[i]);
    if (!ret)
        t->nfiles += n;
out:
    for (unsigned i = 0; i < n; i++)
        free(st[i].sums);
    free(st);
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
    bool complete =
        w->part ? ti->nfiles - w->part_first == w->part_files : ti->files_declared == ti->nfiles;
    if (ti->ndirs == 0 || !complete || tt->files_declared != tt->nfiles) {
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
    /* The marker goes before the store is checked and renamed: it is no part of it. */
    if (unlinkat(w->tmpfd, MARKER, 0) != 0 || (ret = sync_dir(w->tmpfd))) {
        ret = ret ? ret : -errno;
        pcr_errf(err, errlen, "%s/%s: %s", w->tmppath, MARKER, strerror(-ret));
        goto fail;
    }
    /* What leaves the writer must pass the reader's validation (a part is checked
     * as a whole store once merged). */
    ret = w->part ? 0 : pcr_store_open(w->tmppath, &check, err, errlen);
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
