/* pcrfs — reading a directory's entries ahead of its LOOKUPs (-o dirahead=yes, the
 * default with -o readahead=record; pcrfs(1), -o dirahead).
 *
 * A fresh mount read from a list of files (no listing first) costs the reader one
 * LOOKUP round trip per file before its READ: two requests, four wake-ups. The kernel
 * takes names ahead of their lookups from one place only, a READDIRPLUS reply. So
 * when a file is looked up in a directory not yet listed this way, the directory is
 * queued, and one thread of the daemon lists it through the mount itself
 * (getdents64): its READDIRPLUS requests are answered with every entry's attributes
 * (ops.c, do_readdir), the kernel enters them all, and the reader's next files in
 * that directory need no LOOKUP. One request brings tens of entries, where each
 * LOOKUP it saves is a round trip of its own.
 *
 * What this changes for everyone else: the connection asks for READDIRPLUS, but a
 * listing by anyone but this thread is answered as -o readdirplus= says (by default
 * names only: entries without a node, which the kernel lists and does not enter), so
 * a names-only walk stays a names-only walk (ops.c). The thread opens directories
 * without the kernel's listing cache (op_opendir), so it neither reads a listing
 * cached before nor drops it.
 *
 * The paths: every directory a reader reaches was looked up by name on the way
 * (pcrfs_dirahead_note_dir), so its name and parent are kept here, bounded by
 * DA_DIRS_MAX; the root is FUSE_ROOT_ID.
 *
 * It never blocks a request: the handlers only queue (a full queue drops the
 * directory, which is then listed at a later lookup). It stops when the session ends:
 * closing /dev/fuse fails the request it may be waiting for (pcrfs_dirahead_stop()).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"
#include "fs.h"

#define DA_DIRS_MAX   (1u << 18) /* directories remembered: ImageNet's views have ~10,000 */
#define DA_QUEUE      PCRFS_DA_QUEUE
#define DA_DEPTH      64 /* path components from the root at most */
#define DA_TREE_CLONE 1u /* open_tree(2)'s OPEN_TREE_CLONE (linux/mount.h) */

enum { DA_NEW, DA_QUEUED, DA_DONE };

struct da_dir {
    fuse_ino_t ino, parent;
    unsigned char state;
    char name[]; /* in @parent */
};

/* Open addressing by inode number; the table grows by doubling (under da->lock). */
static size_t da_slot(const struct dirahead *da, fuse_ino_t ino)
{
    size_t mask = da->cap - 1, i = (size_t)(ino * 0x9e3779b97f4a7c15ull) & mask;

    while (da->tab[i] && da->tab[i]->ino != ino)
        i = (i + 1) & mask;
    return i;
}

static int da_grow(struct dirahead *da)
{
    size_t ncap = da->cap ? da->cap * 2 : 1024, oldcap = da->cap;
    struct da_dir **old = da->tab, **tab = calloc(ncap, sizeof(struct da_dir *));

    if (!tab)
        return -ENOMEM;
    da->tab = tab;
    da->cap = ncap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i])
            da->tab[da_slot(da, old[i]->ino)] = old[i];
    free(old);
    return 0;
}

void pcrfs_dirahead_note_dir(struct pcrfs *fs, fuse_ino_t parent, const char *name, fuse_ino_t ino)
{
    struct dirahead *da = &fs->dirahead;
    size_t len = strlen(name), i;
    struct da_dir *d;

    if (!da->on || ino == FUSE_ROOT_ID)
        return;
    pthread_mutex_lock(&da->lock);
    if (da->n >= DA_DIRS_MAX || ((da->n + 1) * 2 > da->cap && da_grow(da) != 0))
        goto out;
    i = da_slot(da, ino);
    if (da->tab[i] || !(d = malloc(sizeof(*d) + len + 1)))
        goto out; /* known (a name never moves where entries are cached) */
    d->ino = ino;
    d->parent = parent;
    d->state = DA_NEW;
    memcpy(d->name, name, len + 1);
    da->tab[i] = d;
    da->n++;
out:
    pthread_mutex_unlock(&da->lock);
}

static void *da_main(void *arg);

void pcrfs_dirahead_note_file(struct pcrfs *fs, fuse_ino_t parent)
{
    struct dirahead *da = &fs->dirahead;
    struct da_dir *d = NULL;
    unsigned char *state;

    if (!da->on)
        return;
    pthread_mutex_lock(&da->lock);
    if (parent == FUSE_ROOT_ID) {
        state = &da->root_state;
    } else {
        if (!da->cap || !(d = da->tab[da_slot(da, parent)]))
            goto out; /* not reached by a lookup (or past DA_DIRS_MAX) */
        state = &d->state;
    }
    if (*state != DA_NEW || da->stop || da->qlen == DA_QUEUE)
        goto out;
    if (!da->started) {
        if (pcrfs_daemon_thread(&da->thread, da_main, fs) != 0) {
            da->stop = true; /* no thread: nothing is read ahead */
            goto out;
        }
        da->started = true;
    }
    *state = DA_QUEUED;
    da->queue[(da->qhead + da->qlen++) % DA_QUEUE] = parent;
    pthread_cond_signal(&da->cond);
out:
    pthread_mutex_unlock(&da->lock);
}

bool pcrfs_dirahead_is_lister(struct pcrfs *fs, fuse_req_t req)
{
    const struct fuse_ctx *ctx;
    pid_t tid = atomic_load_explicit(&fs->dirahead.tid, memory_order_relaxed);

    return tid && (ctx = fuse_req_ctx(req)) && ctx->pid == tid;
}

/* a/b/c (or "." for the root) for directory @ino into @buf (PATH_MAX), under
 * da->lock. @return 0, or -1 when a component is not known (or the path too long). */
static int da_path(struct pcrfs *fs, fuse_ino_t ino, char *buf)
{
    struct dirahead *da = &fs->dirahead;
    const struct da_dir *chain[DA_DEPTH];
    unsigned n = 0;
    size_t used = 0;

    while (ino != FUSE_ROOT_ID) {
        const struct da_dir *d = da->tab[da_slot(da, ino)];
        if (!d || n == DA_DEPTH)
            return -1;
        chain[n++] = d;
        ino = d->parent;
    }
    buf[0] = '.';
    buf[1] = '\0';
    while (n--) {
        size_t len = strlen(chain[n]->name);
        if (used + 1 + len >= PATH_MAX)
            return -1;
        if (used)
            buf[used++] = '/';
        memcpy(buf + used, chain[n]->name, len + 1);
        used += len;
    }
    return 0;
}

/* A detached copy of the mount (open_tree(2), OPEN_TREE_CLONE): a directory opened
 * through it holds the copy, not the mount, so a `fusermount3 -u` meanwhile succeeds
 * (the superblock, and with it the session, ends when the listing closes the
 * directory). Measured: 3 of 20 unmounts right after a first read failed with EBUSY
 * while the listing held the directory open through the mount itself. It needs
 * CAP_SYS_ADMIN; without it (an ordinary user's mount) the mount's own path is opened,
 * with that window (pcrfs(1), -o dirahead). @return an fd, or -1. */
static int da_clone(struct dirahead *da, const char *mountpoint)
{
#ifdef SYS_open_tree
    if (!da->no_clone) {
        int fd = (int)syscall(SYS_open_tree, AT_FDCWD, mountpoint, DA_TREE_CLONE | O_CLOEXEC);
        if (fd >= 0)
            return fd;
        da->no_clone = errno == EPERM || errno == ENOSYS || errno == EINVAL;
    }
#else
    (void)mountpoint;
    da->no_clone = true;
#endif
    return -1;
}

/* List directory @rel of the mount (device @dev) through the kernel. @return the
 * entries read, or -1. */
static long da_list(struct pcrfs *fs, const char *rel, dev_t dev)
{
    char buf[32768] __attribute__((aligned(8)));
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    struct stat sb;
    long entries = 0, n;
    int fd, tree = da_clone(&fs->dirahead, fs->mountpoint);

    if (tree >= 0) {
        fd = openat(tree, rel, flags);
        close(tree); /* the directory holds the copy now */
    } else {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", fs->mountpoint, rel) >= sizeof(path))
            return -1;
        fd = open(path, flags);
    }
    if (fd < 0)
        return -1;
    /* this mount's, not what a mount over one of the path's directories shows */
    if (fstat(fd, &sb) != 0 || sb.st_dev != dev) {
        close(fd);
        return -1;
    }
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
        for (long off = 0; off < n; entries++)
            off += ((const struct dirent64 *)(const void *)(buf + off))->d_reclen;
    close(fd);
    return n < 0 ? -1 : entries;
}

static void *da_main(void *arg)
{
    struct pcrfs *fs = arg;
    struct dirahead *da = &fs->dirahead;
    char *path = malloc(PATH_MAX);
    struct stat root;
    bool have_root = false;

    atomic_store_explicit(&da->tid, (pid_t)syscall(SYS_gettid), memory_order_relaxed);
    pthread_mutex_lock(&da->lock);
    for (;;) {
        fuse_ino_t ino;
        int ok;
        long got;

        while (!da->stop && da->qlen == 0)
            pthread_cond_wait(&da->cond, &da->lock);
        if (da->stop || !path)
            break;
        ino = da->queue[da->qhead];
        da->qhead = (da->qhead + 1) % DA_QUEUE;
        da->qlen--;
        ok = da_path(fs, ino, path) == 0;
        pthread_mutex_unlock(&da->lock);
        /* the mount's device, once: a GETATTR of its root, answered by the loop */
        if (ok && !have_root)
            have_root = stat(fs->mountpoint, &root) == 0;
        got = ok && have_root ? da_list(fs, path, root.st_dev) : -1;
        if (got < 0) {
            atomic_fetch_add_explicit(&da->failed, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&da->listed, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&da->entries, (uint64_t)got, memory_order_relaxed);
        }
        pthread_mutex_lock(&da->lock);
        /* listed (or not listable): a directory is tried once per mount */
        if (ino == FUSE_ROOT_ID)
            da->root_state = DA_DONE;
        else if (da->tab[da_slot(da, ino)])
            da->tab[da_slot(da, ino)]->state = DA_DONE;
    }
    pthread_mutex_unlock(&da->lock);
    free(path);
    return NULL;
}

void pcrfs_dirahead_init(struct pcrfs *fs, bool on)
{
    struct dirahead *da = &fs->dirahead;

    memset(da, 0, sizeof(*da));
    da->on = on;
    pthread_mutex_init(&da->lock, NULL);
    pthread_cond_init(&da->cond, NULL);
}

void pcrfs_dirahead_stop(struct pcrfs *fs)
{
    struct dirahead *da = &fs->dirahead;

    pthread_mutex_lock(&da->lock);
    da->stop = true;
    pthread_cond_broadcast(&da->cond);
    pthread_mutex_unlock(&da->lock);
    if (da->started)
        pthread_join(da->thread, NULL);
    da->started = false;
    for (size_t i = 0; i < da->cap; i++)
        free(da->tab[i]);
    free(da->tab);
    da->tab = NULL;
    da->cap = da->n = 0;
}
