/* pcrfs — files handed to the kernel's page cache before they are read (-o push=yes,
 * the default with -o readahead=record; pcrfs(1), -o push).
 *
 * A file the kernel holds costs its reader no round trip to the daemon: 2,000 cached
 * full/ files read in 0.05-0.07 s, against 0.20-0.30 s when each READ comes here,
 * though the record bytes were in memory both times (BENCHMARKS.md, "Files handed
 * ahead"). When the store reads a record ahead, the library knows which files come
 * next and can read them from local bytes only (pcrfs_node_ahead(), pcrfs(3)); this
 * thread puts each into the kernel's page cache of its inode
 * (fuse_lowlevel_notify_store()), so the reader's READ never leaves the kernel.
 *
 * When it works: a reader's READ at offset 0 (an open: the library notes the
 * candidates) wakes the thread; it hands files while there are any; while some wait
 * for bytes not local yet it looks again every PUSH_POLL_MS; with none it sleeps until
 * the next open. The kernel takes the bytes only for an inode it knows (a LOOKUP or a
 * READDIRPLUS entry: -o dirahead gives it the directory's); for others it answers
 * ENOENT and the file is read as before ("unknown" in the stats).
 *
 * The bytes are the node's, whole, and a node's bytes never change (inode.h): what
 * is stored is what a READ would return. The kernel keeps them as it keeps pages
 * read: no OPEN, or FOPEN_KEEP_CACHE (ops.c); under memory pressure it drops them
 * like any page. The page cache then holds a record's bytes twice for a while: as
 * the record file's and as its files'.
 *
 * It never blocks a request: a READ only sets a flag (and signals once). It stops when
 * the session ends (pcrfs_push_stop(), after fuse_session_unmount()).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "daemon.h"
#include "fs.h"

#define PUSH_MAX     (8u << 20) /* the largest file handed (larger: read as before) */
#define PUSH_POLL_MS 2          /* while files wait for their bytes */

static void *push_main(void *arg)
{
    struct pcrfs *fs = arg;
    struct push *p = &fs->push;
    void *buf = malloc(PUSH_MAX);
    bool waiting = false;

    pthread_mutex_lock(&p->lock);
    while (buf) {
        uint64_t node;
        size_t len;
        int rc;

        /* until a reader's open, or PUSH_POLL_MS while files wait for their bytes */
        while (!atomic_load_explicit(&p->stop, memory_order_relaxed) &&
               !atomic_load_explicit(&p->kicked, memory_order_relaxed)) {
            struct timespec ts;

            if (!waiting) {
                pthread_cond_wait(&p->cond, &p->lock);
                continue;
            }
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += PUSH_POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&p->cond, &p->lock, &ts);
            break;
        }
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            break;
        atomic_store_explicit(&p->kicked, false, memory_order_relaxed);
        pthread_mutex_unlock(&p->lock);
        while ((rc = pcrfs_node_ahead(fs->store, &node, buf, PUSH_MAX, &len)) == 1) {
            struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);

            bv.buf[0].mem = buf;
            rc = fuse_lowlevel_notify_store(fs->se, node, 0, &bv, 0);
            if (rc == 0) {
                atomic_fetch_add_explicit(&p->files, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&p->bytes, len, memory_order_relaxed);
            } else if (rc == -ENOENT) {
                atomic_fetch_add_explicit(&p->unknown, 1, memory_order_relaxed);
            } else {
                atomic_fetch_add_explicit(&p->failed, 1, memory_order_relaxed);
                if (rc == -ENODEV || rc == -EBADF)
                    break; /* the session is over */
            }
            if (atomic_load_explicit(&p->stop, memory_order_relaxed))
                break;
        }
        waiting = rc == -EAGAIN;
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    free(buf);
    return NULL;
}

void pcrfs_push_init(struct pcrfs *fs, bool on)
{
    struct push *p = &fs->push;
    pthread_condattr_t ca;

    p->on = on;
    p->started = false;
    atomic_init(&p->stop, false);
    atomic_init(&p->kicked, false);
    atomic_init(&p->files, 0);
    atomic_init(&p->bytes, 0);
    atomic_init(&p->unknown, 0);
    atomic_init(&p->failed, 0);
    pthread_mutex_init(&p->lock, NULL);
    /* the poll's deadline is on CLOCK_MONOTONIC (push_main): a condition on the
     * default clock would take it for a time long past and never sleep */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
}

void pcrfs_push_kick(struct pcrfs *fs)
{
    struct push *p = &fs->push;

    if (!p->on || atomic_exchange_explicit(&p->kicked, true, memory_order_relaxed))
        return; /* off, or the thread has a kick it has not taken yet */
    pthread_mutex_lock(&p->lock);
    if (!p->started && !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
        if (pcrfs_daemon_thread(&p->thread, push_main, fs) == 0)
            p->started = true;
        else /* no thread: nothing is handed ahead */
            atomic_store_explicit(&p->stop, true, memory_order_relaxed);
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

void pcrfs_push_stop(struct pcrfs *fs)
{
    struct push *p = &fs->push;

    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->stop, true, memory_order_relaxed);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (p->started)
        pthread_join(p->thread, NULL);
    p->started = false;
}
