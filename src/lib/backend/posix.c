/* pcrfs — the POSIX record backend: local files (and NFS) under the store directory.
 * The only code in the library that opens or preads a record file.
 *
 * Readahead (-o readahead=record). advise() queues the range and returns; one thread
 * of the backend's work queue (common/workq.h), started on the first advice, passes
 * each queued range to the kernel in order, as WILLNEED pieces, keeping at most
 * RA_INFLIGHT bytes submitted and not yet read from the disk. So a reader's thread
 * never waits on the submission (100 MB of WILLNEED took 12-27 ms, single calls up to
 * 13 ms, on a queue the advice itself had filled), and a read of bytes the advice has
 * not reached yet waits behind at most RA_INFLIGHT of readahead, not behind every
 * prefix advised before it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>
#include "pcrfs/backend.h"
#include "common/workq.h"

#define MAX_SUBDIRS 4 /* records/, tokens/: the directories objects live in */

struct posix_backend {
    struct pcr_backend base;
    int root; /* O_PATH fd of the store directory */
    pthread_mutex_t lock;
    struct {
        char name[16];
        int fd; /* O_PATH fd, or -errno if it could not be opened */
    } sub[MAX_SUBDIRS];
    unsigned nsub;
    int readahead; /* pass advise() to the kernel (atomic) */
    /* One thread: the objects' ranges are advised one after another, in the order
     * they were first advised, so the record read first reaches the disk first. */
    struct pcr_workq ra;
    pthread_mutex_t ra_lock; /* every object's ra_off, ra_end */
    uint64_t ra_piece;       /* bytes per WILLNEED: ra_piece_size() */
};

struct pcr_object {
    int fd;
    uint64_t size;
    struct posix_backend *pb;
    /* Readahead: [ra_off, ra_end) still to advise, under pb->ra_lock. One job per
     * object: the store advises a record's prefix in growing steps, each starting
     * where the last ended, and such a step extends the range in place, queued or
     * running, rather than waiting behind every other record's advice. */
    struct pcr_job ra_job;
    uint64_t ra_off, ra_end;
    int closing; /* close() waits for the job: stop at the next piece (atomic) */
    /* a read-only map of the whole object, only to ask mincore(2) which pages are
     * cached (read_local()); mapped at the first such read (atomic; NULL: not yet) */
    void *map;
};

/* The O_PATH fd of subdirectory @name of the store, opened once. A symbolic link is
 * refused (O_NOFOLLOW): the store's records must lie inside the store. */
static int subdir(struct posix_backend *pb, const char *name, size_t len)
{
    int fd = -ENOENT;

    if (len == 0 || len >= sizeof(pb->sub[0].name))
        return -ENOENT;
    pthread_mutex_lock(&pb->lock);
    for (unsigned i = 0; i < pb->nsub; i++)
        if (strlen(pb->sub[i].name) == len && !memcmp(pb->sub[i].name, name, len)) {
            fd = pb->sub[i].fd;
            goto out;
        }
    char buf[16];
    memcpy(buf, name, len);
    buf[len] = '\0';
    fd = openat(pb->root, buf, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        fd = errno == ENOTDIR ? -ELOOP : -errno; /* a symlink gives ENOTDIR here */
        struct stat sb;
        if (fd == -ELOOP && fstatat(pb->root, buf, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISLNK(sb.st_mode))
            fd = -ENOTDIR;
        if (fd == -EMFILE || fd == -ENFILE)
            goto out; /* not remembered: may work later */
    }
    if (pb->nsub < MAX_SUBDIRS) {
        snprintf(pb->sub[pb->nsub].name, sizeof(pb->sub[0].name), "%s", buf);
        pb->sub[pb->nsub++].fd = fd;
    }
out:
    pthread_mutex_unlock(&pb->lock);
    return fd;
}

static int posix_open(struct pcr_backend *b, const char *name, struct pcr_object **out)
{
    struct posix_backend *pb = (struct posix_backend *)b;
    const char *slash = strchr(name, '/');
    struct pcr_object *o;
    struct stat sb;
    int dfd, fd, ret;

    if (!slash || strchr(slash + 1, '/') || !slash[1])
        return -EINVAL;
    dfd = subdir(pb, name, (size_t)(slash - name));
    if (dfd < 0)
        return dfd;
    /* O_NONBLOCK: a FIFO planted in records/ would block open() until a writer came;
     * it is refused just below instead */
    fd = openat(dfd, slash + 1, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &sb) != 0) {
        ret = -errno;
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        ret = -EINVAL;
        goto fail;
    }
    if (fcntl(fd, F_SETFL, 0) != 0) {
        ret = -errno;
        goto fail;
    }
    o = malloc(sizeof(*o));
    if (!o) {
        ret = -ENOMEM;
        goto fail;
    }
    *o = (struct pcr_object){.fd = fd, .size = (uint64_t)sb.st_size, .pb = pb};
    *out = o;
    return 0;
fail:
    close(fd);
    return ret;
}

static int read_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t got = pread(fd, buf, len, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return errno == ENOMEM ? -ENOMEM : -EIO;
        if (got == 0)
            return -ENODATA; /* truncated under us */
        buf += got;
        len -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

/* A read of several ranges (a full/ file: one chunk per scan group, the groups far
 * apart in the record) whose bytes are not all in the page cache: read what is
 * cached without waiting (RWF_NOWAIT), ask the kernel for all the rest at once
 * (WILLNEED), then read it. The disk then gets the missing ranges together instead
 * of one after the other, each behind the previous one's latency. Warm, this costs
 * nothing: every range is served by its NOWAIT read. @return 0 or -errno. */
#define NOWAIT_RANGES 80  /* more than a plan has (read.c, MAX_SEGS) */
static int nowait_broken; /* RWF_NOWAIT refused (EOPNOTSUPP): plain reads (atomic) */

/* Range @r with RWF_NOWAIT: whether it came whole from the page cache. A kernel or
 * file system without it (tmpfs, some FUSE) sets nowait_broken. */
static bool pread_nowait(int fd, const struct pcr_range *r)
{
    struct iovec iov = {.iov_base = r->buf, .iov_len = r->len};
    ssize_t got;

    do
        got = preadv2(fd, &iov, 1, (off_t)r->off, RWF_NOWAIT);
    while (got < 0 && errno == EINTR);
    if (got < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS))
        __atomic_store_n(&nowait_broken, 1, __ATOMIC_RELAXED);
    return got == (ssize_t)r->len; /* (EAGAIN, or only part cached: false) */
}

static int read_scattered(int fd, const struct pcr_range *r, unsigned n)
{
    unsigned char miss[NOWAIT_RANGES];
    unsigned i, nmiss = 0;

    for (i = 0; i < n; i++) {
        miss[i] = !pread_nowait(fd, &r[i]);
        if (miss[i] && __atomic_load_n(&nowait_broken, __ATOMIC_RELAXED))
            return 1; /* the caller reads plainly */
        nmiss += miss[i];
    }
    if (nmiss > 1)
        for (i = 0; i < n; i++)
            if (miss[i])
                (void)posix_fadvise(fd, (off_t)r[i].off, (off_t)r[i].len, POSIX_FADV_WILLNEED);
    for (i = 0; i < n; i++)
        if (miss[i]) {
            int rc = read_full(fd, r[i].buf, r[i].len, r[i].off);
            if (rc)
                return rc;
        }
    return 0;
}

/* Whether every page of @r[0..n) is in the page cache (mincore(2) over a map of the
 * object that is never touched). Asked before the read because a read that misses,
 * even with RWF_NOWAIT, starts the kernel's readahead there: a read of its own. */
static bool cached(struct pcr_object *o, const struct pcr_range *r, unsigned n)
{
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[256];
    uint8_t *map = __atomic_load_n(&o->map, __ATOMIC_ACQUIRE);

    if (!map) {
        void *m = o->size ? mmap(NULL, o->size, PROT_READ, MAP_SHARED, o->fd, 0) : MAP_FAILED;
        void *none = NULL;

        if (m == MAP_FAILED)
            return false;
        if (!__atomic_compare_exchange_n(&o->map, &none, m, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            munmap(m, o->size); /* another reader mapped it first */
            m = none;
        }
        map = m;
    }
    for (unsigned i = 0; i < n; i++) {
        uint64_t at = r[i].off & ~(page - 1), end = r[i].off + r[i].len;

        if (!r[i].len)
            continue;
        if (end > o->size)
            return false;
        while (at < end) {
            uint64_t pages = (end - at + page - 1) / page;
            if (pages > sizeof(vec))
                pages = sizeof(vec);
            if (mincore(map + at, pages * page < o->size - at ? pages * page : o->size - at, vec) !=
                0)
                return false;
            for (uint64_t k = 0; k < pages; k++)
                if (!(vec[k] & 1))
                    return false;
            at += pages * page;
        }
    }
    return true;
}

/* Every range from the page cache, or -EAGAIN, with no read from the disk: the pages
 * are asked for first (cached()), then read with RWF_NOWAIT (evicted in between: a
 * miss, -EAGAIN). A file system without RWF_NOWAIT is read plainly: its pages were
 * just seen cached. */
static int read_local(struct pcr_object *o, const struct pcr_range *r, unsigned n)
{
    if (!cached(o, r, n))
        return -EAGAIN;
    for (unsigned i = 0; i < n; i++) {
        if (pread_nowait(o->fd, &r[i]))
            continue;
        if (!__atomic_load_n(&nowait_broken, __ATOMIC_RELAXED))
            return -EAGAIN; /* evicted since, or only part of it */
        int rc = read_full(o->fd, r[i].buf, r[i].len, r[i].off);
        if (rc)
            return rc;
    }
    return 0;
}

static int posix_read(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r,
                      unsigned n)
{
    (void)b;
    if (pcr_backend_op_local())
        return read_local(o, r, n);
    if (n > 1 && n <= NOWAIT_RANGES && !__atomic_load_n(&nowait_broken, __ATOMIC_RELAXED)) {
        int rc = read_scattered(o->fd, r, n);
        if (rc <= 0)
            return rc;
    }
    for (unsigned i = 0; i < n; i++) {
        int rc = read_full(o->fd, r[i].buf, r[i].len, r[i].off);
        if (rc)
            return rc;
    }
    return 0;
}

/* The kernel caps one POSIX_FADV_WILLNEED (and readahead(2)) at max(read_ahead_kb,
 * max_sectors_kb) of the device, silently (force_page_cache_ra()): one call over a
 * 100 MB record prefix read its first 8 MB on a disk with read_ahead_kb 8192, 128 kB
 * with the kernel's default. So a range is advised in pieces of the store's device's
 * cap as sysfs gives it (ra_piece_size()), at least RA_PIECE_MIN, the default
 * read_ahead_kb (which no device's cap is below unless readahead was turned down),
 * and at most RA_PIECE_MAX: a quarter of RA_INFLIGHT, so that the disk still has
 * pieces queued while the thread waits. Larger pieces are fewer calls (50 instead
 * of 1,600 for two 100 MB prefixes) and fewer one-byte waits on the thread that
 * shares the cores with the readers (BENCHMARKS.md §13 has the A/B). */
#define RA_PIECE_MIN (128u << 10)
#define RA_PIECE_MAX (4u << 20)
/* Bytes of advice submitted ahead of what the disk has delivered: enough to keep a
 * disk's queue full (a 1.4 GB/s virtual disk reads 16 MB in 12 ms), little enough that
 * a reader's own read of bytes not yet advised is not queued behind whole prefixes. */
#define RA_INFLIGHT (16u << 20)

/* A number in kB from a sysfs file, or 0. */
static uint64_t sysfs_kb(const char *fmt, unsigned maj, unsigned min)
{
    char path[96], buf[32];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), fmt, maj, min);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strtoull(buf, NULL, 10);
}

/* The WILLNEED piece for the device of the store directory @root: the kernel's cap
 * on one call, max(read_ahead_kb, max_sectors_kb), from the block device's queue (a
 * partition's is its disk's) or, for NFS and other file systems without one, the
 * bdi's read_ahead_kb alone (a lower bound of the cap); clamped to
 * [RA_PIECE_MIN, RA_PIECE_MAX]. */
static uint64_t ra_piece_size(int root)
{
    static const char *const dirs[] = {"/sys/dev/block/%u:%u/queue/",
                                       "/sys/dev/block/%u:%u/../queue/"};
    uint64_t kb = 0;
    struct stat sb;

    if (fstat(root, &sb) != 0)
        return RA_PIECE_MIN;
    for (unsigned i = 0; i < 2 && kb == 0; i++) {
        char fmt[64];
        uint64_t ms;
        snprintf(fmt, sizeof(fmt), "%sread_ahead_kb", dirs[i]);
        kb = sysfs_kb(fmt, major(sb.st_dev), minor(sb.st_dev));
        snprintf(fmt, sizeof(fmt), "%smax_sectors_kb", dirs[i]);
        ms = sysfs_kb(fmt, major(sb.st_dev), minor(sb.st_dev));
        if (ms > kb)
            kb = ms;
    }
    if (kb == 0)
        kb = sysfs_kb("/sys/class/bdi/%u:%u/read_ahead_kb", major(sb.st_dev), minor(sb.st_dev));
    if (kb > RA_PIECE_MAX >> 10)
        return RA_PIECE_MAX;
    return kb << 10 < RA_PIECE_MIN ? RA_PIECE_MIN : kb << 10;
}

/* Advise [off, end) of @o in pieces. After each piece past the first RA_INFLIGHT
 * bytes, wait until the byte RA_INFLIGHT before the end of what was submitted has
 * arrived: a one-byte read blocks until the kernel has read its page (and costs a
 * page-cache lookup when it is there; WILLNEED pages carry no readahead marker, so
 * the read starts no readahead of its own). With @grow (the queue's job), the end is
 * read again before each piece: advice given meanwhile extends it. Stops early when
 * @o is being closed. */
static void ra_issue(struct pcr_object *o, uint64_t off, uint64_t end, bool grow)
{
    struct posix_backend *pb = o->pb;
    uint64_t start = off;
    bool stop = false;
    char byte;

    for (;;) {
        if (grow) {
            pthread_mutex_lock(&pb->ra_lock);
            end = o->ra_end;
            /* done, failed or closing: nothing left, so the next advice pushes again */
            o->ra_off = stop ? end : off;
            pthread_mutex_unlock(&pb->ra_lock);
        }
        if (stop || off >= end || __atomic_load_n(&o->closing, __ATOMIC_RELAXED))
            return;
        uint64_t n = end - off < pb->ra_piece ? end - off : pb->ra_piece;
        /* advice only: the reads report their own errors */
        stop = posix_fadvise(o->fd, (off_t)off, (off_t)n, POSIX_FADV_WILLNEED) != 0;
        off += n;
        if (!stop && off - start > RA_INFLIGHT)
            (void)!pread(o->fd, &byte, 1, (off_t)(off - RA_INFLIGHT - 1));
    }
}

static void ra_run(struct pcr_job *j)
{
    struct pcr_object *o = (struct pcr_object *)((char *)j - offsetof(struct pcr_object, ra_job));
    uint64_t off;

    pthread_mutex_lock(&o->pb->ra_lock);
    off = o->ra_off;
    pthread_mutex_unlock(&o->pb->ra_lock);
    ra_issue(o, off, off, true);
}

static int posix_advise(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct posix_backend *pb = (struct posix_backend *)b;
    uint64_t end;
    bool queued;

    if (!__atomic_load_n(&pb->readahead, __ATOMIC_RELAXED) || len == 0)
        return 0;
    if (off > o->size)
        return 0;
    if (len > o->size - off)
        len = o->size - off;
    end = off + len;
    pthread_mutex_lock(&pb->ra_lock);
    if (o->ra_off < o->ra_end && off <= o->ra_end) {
        /* a growing prefix (or advice inside the range): the job still to come or
         * running reads ra_end again before each piece */
        if (end > o->ra_end)
            o->ra_end = end;
        end = 0;
    } else if (o->ra_off >= o->ra_end) {
        o->ra_off = off;
        o->ra_end = end;
    } else {
        /* a range beyond the one in progress: the same job goes on to it, advising
         * the gap too (the store never does this: its advice grows a prefix) */
        o->ra_end = end;
        end = 0;
    }
    pthread_mutex_unlock(&pb->ra_lock);
    if (end == 0)
        return 0;
    o->ra_job.run = ra_run;
    o->ra_job.owner = o;
    queued = pcr_workq_push(&pb->ra, &o->ra_job, false);
    if (!queued) {
        /* no thread: advise here, still in pieces */
        pthread_mutex_lock(&pb->ra_lock);
        o->ra_off = o->ra_end = 0;
        pthread_mutex_unlock(&pb->ra_lock);
        ra_issue(o, off, end, false);
    }
    return 0;
}

void pcr_backend_posix_readahead(struct pcr_backend *b, int on)
{
    struct posix_backend *pb = (struct posix_backend *)b;

    if (b->ops->open == posix_open)
        __atomic_store_n(&pb->readahead, on, __ATOMIC_RELAXED);
}

static uint64_t posix_size(struct pcr_backend *b, const struct pcr_object *o)
{
    (void)b;
    return o->size;
}

static void posix_close(struct pcr_backend *b, struct pcr_object *o)
{
    if (o) {
        /* drop @o's queued advice and wait until the readahead thread let go of it */
        __atomic_store_n(&o->closing, 1, __ATOMIC_RELAXED);
        pcr_workq_cancel(&((struct posix_backend *)b)->ra, o);
        if (o->map)
            munmap(o->map, o->size);
        close(o->fd);
        free(o);
    }
}

static void posix_destroy(struct pcr_backend *b)
{
    struct posix_backend *pb = (struct posix_backend *)b;

    pcr_workq_free(&pb->ra); /* no job left: every object was closed first */
    pthread_mutex_destroy(&pb->ra_lock);
    for (unsigned i = 0; i < pb->nsub; i++)
        if (pb->sub[i].fd >= 0)
            close(pb->sub[i].fd);
    close(pb->root);
    pthread_mutex_destroy(&pb->lock);
    free(pb);
}

static const struct pcr_backend_ops posix_ops = {
    .name = "posix",
    .hold_open = 1,
    .open = posix_open,
    .read = posix_read,
    .advise = posix_advise,
    .size = posix_size,
    .close = posix_close,
    .destroy = posix_destroy,
};

int pcr_backend_posix(const char *root, struct pcr_backend **out)
{
    struct posix_backend *pb = calloc(1, sizeof(*pb));
    int ret;

    if (!pb)
        return -ENOMEM;
    pb->root = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pb->root < 0) {
        ret = -errno;
        free(pb);
        return ret;
    }
    ret = pcr_workq_init(&pb->ra, 1);
    if (ret) {
        close(pb->root);
        free(pb);
        return ret;
    }
    pb->ra_piece = ra_piece_size(pb->root);
    pb->base.ops = &posix_ops;
    pthread_mutex_init(&pb->lock, NULL);
    pthread_mutex_init(&pb->ra_lock, NULL);
    *out = &pb->base;
    return 0;
}
