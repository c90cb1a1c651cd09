/* pcrfs — the POSIX record backend: local files (and NFS) under the store directory.
 * The only code in the library that opens or preads a record file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/backend.h"

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
};

struct pcr_object {
    int fd;
    uint64_t size;
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
    o->fd = fd;
    o->size = (uint64_t)sb.st_size;
    *out = o;
    return 0;
fail:
    close(fd);
    return ret;
}

static int posix_read(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r,
                      unsigned n)
{
    (void)b;
    for (unsigned i = 0; i < n; i++) {
        uint8_t *buf = r[i].buf;
        size_t len = r[i].len;
        uint64_t off = r[i].off;

        while (len > 0) {
            ssize_t got = pread(o->fd, buf, len, (off_t)off);
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
    }
    return 0;
}

/* The kernel caps one POSIX_FADV_WILLNEED (and readahead(2)) at max(read_ahead_kb,
 * max_sectors_kb) of the device, silently (force_page_cache_ra()): one call over a
 * 100 MB record prefix read its first 8 MB on a disk with read_ahead_kb 8192, 128 kB
 * with the kernel's default. So a range is advised in pieces no larger than the
 * default read_ahead_kb, which no device's cap is below unless readahead was turned
 * down. */
#define ADVISE_PIECE (128u << 10)

static int posix_advise(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct posix_backend *pb = (struct posix_backend *)b;

    if (!__atomic_load_n(&pb->readahead, __ATOMIC_RELAXED))
        return 0;
    while (len > 0) {
        uint64_t n = len < ADVISE_PIECE ? len : ADVISE_PIECE;
        int ret = posix_fadvise(o->fd, (off_t)off, (off_t)n, POSIX_FADV_WILLNEED);
        if (ret)
            return -ret;
        off += n;
        len -= n;
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
    (void)b;
    if (o) {
        close(o->fd);
        free(o);
    }
}

static void posix_destroy(struct pcr_backend *b)
{
    struct posix_backend *pb = (struct posix_backend *)b;

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

    if (!pb)
        return -ENOMEM;
    pb->root = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pb->root < 0) {
        int ret = -errno;
        free(pb);
        return ret;
    }
    pb->base.ops = &posix_ops;
    pthread_mutex_init(&pb->lock, NULL);
    *out = &pb->base;
    return 0;
}
