/* pcrfs — the low-level FUSE handlers.
 *
 * Each handler decodes its arguments, calls one worker that returns 0 or a negative
 * errno, and sends exactly one reply. Workers never reply. Inode numbers are
 * computed, not stored (see inode.h), so there is no inode table and no lock on the
 * lookup, getattr, readdir or read paths. Every inode is a node of the library
 * (pcrfs(3)), which names, sizes and reads it and says in its flags what a
 * kernel may cache of it; the daemon adds only the stats snapshots (inode.h).
 *
 * What the kernel is told, and why (the store is immutable for the life of the mount):
 *   - entry, attribute and negative-entry timeouts of fs->timeout (a day by default):
 *     after the first walk, lookups and stats never leave the kernel (a view's
 *     descriptor may keep the names of its files uncached: dynamic/);
 *   - FOPEN_KEEP_CACHE on every open file (a view's cache.pages): the page cache
 *     survives close/open, so a second epoch over a dataset that fits in RAM does no
 *     FUSE reads at all
 *     (measured, full/, 4 readers: 21-28 k files/s warm with it, 5-7 k without);
 *   - readdirplus off (plain READDIR: names, types and inode numbers) unless asked
 *     for with -o readdirplus=yes|auto. What ImageFolder, os.walk and find do is a
 *     names-only walk (d_type, no stat), and READDIRPLUS makes the kernel build an
 *     inode and a dentry for every entry whether or not anyone looks at it. Measured
 *     on the 1.28 M-file store, cold, two runs at load 3-4 and 9-11 (BENCHMARKS.md,
 *     "Listing at ImageNet scale"): `find scan5` 555 and 429 k entries/s without it,
 *     232 and 179 k/s with "yes", 252 and 195 k/s with "auto" (local ext4, same
 *     names: 553 and 370 k/s); ImageFolder(scan5) 1.00x and 1.09x the time on local
 *     disk without it, 2.2x and 2.9x with "yes", 2.1x and 2.5x with "auto"; daemon
 *     CPU 1.55 s without, 1.65-1.8 s with. The price: the first stat or open of each
 *     file is a LOOKUP round trip (os.stat of random files after ImageFolder: 65 and
 *     26 k/s without, 173 and 91 k/s with), and `ls -l` of a cold
 *     directory costs one LOOKUP per entry (5000 files: `ls -lR` 0.31-0.49 s against
 *     0.08-0.12 s). A training epoch pays that LOOKUP once per file per mount,
 *     inside its workers, next to a decode that costs milliseconds;
 *   - FOPEN_CACHE_DIR on directories (a view's cache.listings): a second listing is
 *     served by the kernel;
 *   - FOPEN_NOFLUSH: nothing is ever written (but /.pcrfs/level), so close() costs no
 *     FLUSH round trip;
 *   - st_blksize of 1 MiB: cp, tar and Python's buffered I/O size their reads from it.
 *     Measured (strace -c, 400 warm opens of scan1): CPython makes the same system
 *     calls at 64 KiB, 128 KiB and 1 MiB (its buffer is allocated, not touched, for
 *     a whole-file read); at 4 KiB Pillow makes 0.5 more read(2) per image. cat and
 *     cp (coreutils 9.1) read max(128 KiB, st_blksize) at a time: 1 MiB read(2)s
 *     here, and the kernel's READs follow its readahead either way (a cold `cat` of
 *     full/, 2000 files: 2082 READs at st_blksize 128 KiB and at 1 MiB alike).
 *     Nothing measured favours a smaller value, so 1 MiB stays;
 *     st_blocks is the real size in 512-byte units so `du` agrees with `du -b`.
 *
 * The dynamic view (-o level=K). dynamic/ serves the library's current level, which a
 * write to /.pcrfs/level (or setxattr user.pcrfs.level on dynamic/) changes while
 * the mount is in use. How it stays exact without invalidating anything is told in
 * inode.h: a file's inode names its level, lookups in dynamic/ hand out the current
 * level's inode with an entry timeout of 0, and an open file keeps the level of the
 * inode it was opened through, so a read never mixes levels, whatever switches
 * happen while it runs. Costs against a scanK/ view: one LOOKUP per open of a file
 * (the kernel revalidates the name), directory listings not cached by the kernel.
 * Everything else keeps the timeouts and caching above; in particular a file's pages
 * are kept across opens at one level (not across a switch and back: inode.h).
 * Such a mount is not read-only (the kernel would refuse the control write itself),
 * and not default_permissions (the kernel would answer EACCES, not EROFS, to writes
 * by other users than root): every other write reaches the daemon and fails with
 * EROFS (writes.c), access(2) is answered by pcrfs_op_access (writes.c), and only the mounting user
 * (or root) may change the level.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon.h"
#include "fs.h"
#include "inode.h"

#define NAMEBUF 512 /* a name (255 bytes) with room to spare */

static struct pcrfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- attributes ------------------------------------------------------------------ */

/* The level file changes under the reader: its size is that of what it holds now,
 * and the kernel must not cache it. (A stats snapshot never changes: inode.h.) */
static double attr_timeout(const struct pcrfs *fs, unsigned flags)
{
    return flags & PCRFS_NODE_VOLATILE ? 0.0 : fs->timeout;
}

/* How long the kernel may keep a name -> node: not at all for a file whose name moves
 * (a view's cache.names: dynamic/, mix/) nor for /.pcrfs/stats, where each lookup
 * takes a new snapshot (inode.h). */
static double entry_timeout(const struct pcrfs *fs, unsigned flags)
{
    return flags & (PCRFS_NODE_NAME_MOVES | PCRFS_NODE_SNAPSHOT) ? 0.0 : fs->timeout;
}

/* ---- names ------------------------------------------------------------------------ */

/* A miss is an answer, not an error: it is returned as a negative entry (ino 0) so
 * the kernel caches it for the entry timeout, and probing for absent files (as
 * loaders that look for optional sidecar files do) stays in the kernel. */
static int do_lookup(struct pcrfs *fs, fuse_ino_t parent, const char *name,
                     struct fuse_entry_param *e, unsigned *pflags)
{
    uint64_t node = 0, ino;
    unsigned flags;
    int rc;

    memset(e, 0, sizeof(*e));
    *pflags = 0;
    rc = pcrfs_node_lookup(fs->store, pcrfs_ino_node(&fs->snaps, parent), name, &node);
    if (rc < 0)
        return rc;
    e->entry_timeout = fs->timeout; /* also for a miss: names do not depend on the level */
    if (rc == 0) {
        struct pcrfs_node_attr pa;
        /* a hint taken (/.pcrfs/prefetch): the next one with the same name must come
         * here too, not meet a cached miss */
        if (pcrfs_node_stat(fs->store, pcrfs_ino_node(&fs->snaps, parent), &pa) == 0 &&
            (pa.flags & PCRFS_NODE_HINTS))
            e->entry_timeout = 0;
        return 0;
    }
    ino = node;
    if (node == fs->snaps.stats_node) {
        rc = pcrfs_stats_snap(fs, &ino); /* op_lookup forgets it if the reply fails */
        if (rc)
            return rc;
    }
    rc = pcrfs_node_attr(fs, ino, &e->attr, &flags);
    if (rc)
        return rc;
    e->ino = ino;
    e->entry_timeout = entry_timeout(fs, flags);
    e->attr_timeout = attr_timeout(fs, flags);
    *pflags = flags;
    return 0;
}

/* Directory @ino: 0 and its parent; -ENOTDIR, -ENOENT, ... */
static int check_dir(struct pcrfs *fs, fuse_ino_t ino, struct pcrfs_node_attr *a)
{
    int rc;

    if (pcrfs_ino_is_snap(&fs->snaps, ino))
        return -ENOTDIR;
    rc = pcrfs_node_stat(fs->store, ino, a);
    if (rc)
        return rc;
    return a->flags & PCRFS_NODE_DIR ? 0 : -ENOTDIR;
}

/* Entry *@pidx of directory @dir (parent @parent): 0 is ".", 1 is "..", then the
 * children; a view that leaves entries out returns the next one it lists and moves
 * *@pidx to it (so the offsets the kernel resumes at stay the library's positions).
 * @namebuf (NAMEBUF bytes) holds the name.
 * @return 0; -ENOENT past the end; -EIO and friends from the store. */
static int dir_entry(struct pcrfs *fs, fuse_ino_t dir, uint64_t parent, uint64_t *pidx,
                     const char **name, uint64_t *child, bool *is_dir, char *namebuf)
{
    uint64_t idx = *pidx, pos;
    int rc, d = 1;

    *is_dir = true;
    if (idx == 0) {
        *name = ".";
        *child = dir;
        return 0;
    }
    if (idx == 1) {
        *name = "..";
        *child = parent;
        return 0;
    }
    pos = idx - 2;
    rc = pcrfs_node_readdir(fs->store, dir, &pos, namebuf, NAMEBUF, child, &d);
    if (rc == 0)
        return -ENOENT;
    if (rc < 0)
        return rc;
    *pidx = pos + 1; /* the entry's index (pos names the next one) */
    *name = namebuf;
    *is_dir = d != 0;
    return 0;
}

/* Fill up to @size bytes of directory entries starting at entry @off into the
 * thread's buffer. Each entry's offset is the index of the next one, so the kernel
 * resumes exactly where a full buffer stopped. */
static int do_readdir(struct pcrfs *fs, fuse_req_t req, fuse_ino_t dir, size_t size, off_t off,
                      bool plus, const char **out, size_t *outlen)
{
    struct fuse_entry_param e;
    struct pcrfs_node_attr da;
    char namebuf[NAMEBUF];
    const char *name;
    uint64_t child;
    size_t used = 0, need;
    uint64_t idx;
    unsigned flags;
    bool is_dir, names_only = false;
    char *buf;
    int rc;

    if (off < 0)
        return -EINVAL;
    rc = check_dir(fs, dir, &da);
    if (rc)
        return rc;
    buf = pcrfs_tls_buf(size);
    if (!buf)
        return -ENOMEM;
    /* With -o dirahead the kernel asks READDIRPLUS of every listing; only the
     * directory reader's (dirahead.c) and those -o readdirplus= asks for ("auto": the
     * first batch, as the kernel's own auto does) get the attributes, the others the
     * names alone, as plain READDIR would */
    if (plus && fs->dirahead.on && !pcrfs_dirahead_is_lister(fs, req) &&
        !(fs->readdirplus == RDP_YES || (fs->readdirplus == RDP_AUTO && off == 0)))
        names_only = true;
    for (idx = (uint64_t)off;; idx++) {
        rc = dir_entry(fs, dir, da.parent, &idx, &name, &child, &is_dir, namebuf);
        if (rc == -ENOENT)
            break;
        if (rc) {
            if (used)
                break; /* send what we have; the error comes back on the next call */
            return rc;
        }
        memset(&e, 0, sizeof(e));
        if (plus && (names_only || child == fs->snaps.stats_node)) {
            /* no node (ino 0): the kernel then just lists the name, and a stat of
             * it is a LOOKUP (for the stats node one that takes a snapshot: inode.h) */
            e.attr.st_ino = child;
            e.attr.st_mode = is_dir ? S_IFDIR | 0555 : S_IFREG | 0444;
            need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)(idx + 1));
        } else if (plus) {
            rc = pcrfs_node_attr(fs, child, &e.attr, &flags);
            if (rc) {
                if (used)
                    break;
                return rc;
            }
            e.ino = child;
            e.entry_timeout = entry_timeout(fs, flags);
            e.attr_timeout = attr_timeout(fs, flags);
            need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)(idx + 1));
        } else {
            e.attr.st_ino = child;
            e.attr.st_mode = is_dir ? S_IFDIR : S_IFREG;
            need = fuse_add_direntry(req, buf + used, size - used, name, &e.attr, (off_t)(idx + 1));
        }
        if (need > size - used)
            break;
        used += need;
    }
    *out = buf;
    *outlen = used;
    return 0;
}

/* ---- files ------------------------------------------------------------------------
 *
 * No OPEN (the default on read-only mounts). Measured warm (page cache full; 5000
 * images, tests/bench/read_tree.py, 2 cores): with an OPEN per open(2), whole-file
 * reads ran at 21-29 k files/s, 0.4-0.6x plain local files; with no OPEN at all
 * 60-104 k files/s, 0.6-0.9x. So when the kernel offers FUSE_CAP_NO_OPEN_SUPPORT
 * the first OPEN is answered ENOSYS: the kernel then never sends OPEN (nor, after
 * the first ENOSYS to FLUSH, FLUSH) on this connection and opens every file as if
 * with FOPEN_KEEP_CACHE. Reads then come with fh 0 and are served from the inode
 * alone: pcrfs_node_read() (for the store's views a pread at the view's level, no
 * allocation). Consequences:
 *   - a damaged record fails the read with EIO, not the open;
 *   - "opens" in /.pcrfs/stats counts READs at offset 0, i.e. files whose first
 *     bytes came from the daemon (files served from the page cache are not seen);
 *   - a token file is decoded on every READ (3-7 us per 32x32 grid); the decode is
 *     deterministic, so a file read in pieces is consistent;
 *   - the dynamic view's guarantee holds unchanged: the level is the inode's;
 *   - /.pcrfs/stats is a new inode per lookup (inode.h), so caching cannot stale it.
 * Only OPEN can refuse a write-mode open (EROFS) before any write, and an
 * O_TRUNC open with atomic_o_trunc would zero the kernel's size of a file without
 * asking: so mounts that are not "ro" (-o rw, -o level=K) keep OPEN, as do -o open
 * and -o nokeep_cache (no-open always keeps the cache), and stores with a view whose
 * opens change state (PCRFS_FEATURE_NEEDS_OPEN). See main.c.
 *
 * With OPEN, an open file is a struct open_file in fi->fh: the library's handle
 * (pcrfs_node_open()), which holds what the open chose (mix/'s pass, refurb/'s
 * version) or the pending bytes of /.pcrfs/level open for writing (a stats snapshot
 * needs nothing: fh 0). Open files are also kept on a list, because the kernel does
 * not always send RELEASE before the session ends (close(2) queues it in the
 * background, so SIGTERM right after a close, or an unmount, can overtake it):
 * pcrfs_ops_close_all() closes what is left once the loop has stopped. The list
 * costs one uncontended lock per open and per release, never one per read.
 */
static void of_link(struct pcrfs *fs, struct open_file *of)
{
    pthread_mutex_lock(&fs->open_lock);
    of->prev = &fs->open_files;
    of->next = fs->open_files.next;
    of->next->prev = of;
    fs->open_files.next = of;
    pthread_mutex_unlock(&fs->open_lock);
}

static void of_unlink_free(struct pcrfs *fs, struct open_file *of)
{
    pthread_mutex_lock(&fs->open_lock);
    of->prev->next = of->next;
    of->next->prev = of->prev;
    pthread_mutex_unlock(&fs->open_lock);
    pcrfs_file_close(of->f); /* applies a value written without a newline */
    free(of);
}

void pcrfs_ops_close_all(struct pcrfs *fs)
{
    struct open_file *of;

    while ((of = fs->open_files.next) != &fs->open_files)
        of_unlink_free(fs, of);
    pcrfs_snaps_free(&fs->snaps);
}

static int do_open(struct pcrfs *fs, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    bool for_write = (fi->flags & O_ACCMODE) != O_RDONLY;
    struct open_file *of;
    int rc;

    if (atomic_load_explicit(&fs->no_open, memory_order_relaxed))
        return -ENOSYS; /* never again: see "No OPEN" above */
    fi->noflush = 1;
    fi->fh = 0;
    if (pcrfs_ino_is_snap(&fs->snaps, ino)) {
        if (for_write || (fi->flags & O_TRUNC))
            return -EROFS;
        fi->keep_cache = 1;
        return 0;
    }
    of = calloc(1, sizeof(*of));
    if (!of)
        return -ENOMEM;
    rc = pcrfs_node_open(fs->store, ino, for_write, &of->f); /* counts the open or its EIO */
    if (rc) {
        free(of);
        return rc;
    }
    of->flags = pcrfs_file_flags(of->f);
    /* /.pcrfs/level is written in place: O_TRUNC is what `echo K >` asks, nothing to
     * truncate; every other file refuses it */
    if ((fi->flags & O_TRUNC) && !(of->flags & PCRFS_NODE_WRITABLE))
        rc = -EROFS;
    else if (for_write && !pcrfs_may_control(fs, req))
        rc = -EACCES;
    if (rc) {
        pcrfs_file_close(of->f);
        free(of);
        return rc;
    }
    if (of->flags & PCRFS_NODE_FIXED) {
        fi->keep_cache = 1;
    } else if (of->flags & PCRFS_NODE_CONTROL) {
        fi->direct_io = 1; /* the level: its size changes with the level */
        if (for_write)
            fi->noflush = 0; /* a value without a newline is applied by close(2): FLUSH */
    } else {
        fi->keep_cache = fs->keep_cache && (of->flags & PCRFS_NODE_PAGES);
        fi->direct_io = (of->flags & PCRFS_NODE_DIRECT) != 0; /* refurb/: per open bytes */
    }
    of_link(fs, of);
    fi->fh = (uintptr_t)of;
    return 0;
}

static int do_read(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, size_t size,
                   off_t off, const char **out, size_t *outlen)
{
    const struct open_file *of = (const struct open_file *)(uintptr_t)fi->fh;
    ssize_t n;
    char *buf;

    if (off < 0)
        return -EINVAL;
    buf = pcrfs_tls_buf(size ? size : 1);
    if (!buf)
        return -ENOMEM;
    *out = buf;
    if (pcrfs_ino_is_snap(&fs->snaps, ino))
        return pcrfs_snaps_read(&fs->snaps, ino, buf, size, (uint64_t)off, outlen, NULL);
    if (of)
        n = pcrfs_file_read(of->f, buf, size, (uint64_t)off);
    else
        n = pcrfs_node_read(fs->store, ino, buf, size, (uint64_t)off); /* No OPEN */
    if (n < 0)
        return (int)n;
    *outlen = (size_t)n;
    return 0;
}

/* Only /.pcrfs/level is ever open for writing (see do_open). */
static int do_write(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, const char *buf,
                    size_t size)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;
    ssize_t n;

    (void)fs, (void)ino;
    if (!of || !(of->flags & PCRFS_NODE_WRITABLE))
        return -EROFS;
    n = pcrfs_file_write(of->f, buf, size);
    return n < 0 ? (int)n : 0;
}

static void do_release(struct pcrfs *fs, struct fuse_file_info *fi)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;

    if (of)
        of_unlink_free(fs, of);
}

/* ---- handlers --------------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct pcrfs *fs = userdata;

    /* Data never changes, so there is nothing for the kernel to invalidate when it
     * sees attributes: auto_inval_data would only add attribute checks to reads. */
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    /* Listings: plain READDIR unless -o readdirplus= says otherwise (see "readdirplus
     * off" above). libfuse's readdirplus=yes|auto only ever clear bits, so when the
     * option is given both bits are offered here and the option then takes away what
     * it does not want. */
    conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
    if (fs->readdirplus != RDP_UNSET && (conn->capable & FUSE_CAP_READDIRPLUS))
        conn->want |= FUSE_CAP_READDIRPLUS | (conn->capable & FUSE_CAP_READDIRPLUS_AUTO);
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    /* `echo K > .pcrfs/level`: O_TRUNC comes with the OPEN, no SETATTR after it */
    if ((fs->features & PCRFS_FEATURE_WRITABLE) && (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC))
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    /* No OPEN: see "No OPEN" above; the kernel says whether it understands the ENOSYS
     * (Linux >= 4.19), nothing needs to be asked for. */
    if (fs->want_no_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT))
        atomic_store_explicit(&fs->no_open, true, memory_order_relaxed);
    /* the user's -o options (readdirplus=, max_readahead=, ...) have the last word */
    if (fs->conn_opts)
        fuse_apply_conn_info_opts(fs->conn_opts, conn);
    if (!(conn->want & FUSE_CAP_READDIRPLUS)) /* readdirplus=no leaves "auto" offered */
        conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    /* -o dirahead: READDIRPLUS for every listing, the attributes only where wanted
     * (do_readdir); without it from the kernel nothing can be read ahead */
    if (fs->dirahead.on && (conn->capable & FUSE_CAP_READDIRPLUS)) {
        conn->want |= FUSE_CAP_READDIRPLUS;
        conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    } else {
        fs->dirahead.on = false;
    }
    /* the kernel's first request: the mount serves, the waiting parent may exit 0 */
    pcrfs_daemon_ready();
}

/* The kernel's readahead for the mount's files (bdi.c) can only be set once INIT has
 * been answered (its reply sets it), so the first LOOKUP or GETATTR does it: no
 * file is read before its name is looked up. */
static void first_request(struct pcrfs *fs)
{
    int rc;

    /* a plain load first: after the first request this is all a lookup pays */
    if (!fs->read_ahead_kb || atomic_load_explicit(&fs->read_ahead_set, memory_order_relaxed) ||
        atomic_exchange_explicit(&fs->read_ahead_set, true, memory_order_relaxed))
        return;
    rc = pcrfs_set_read_ahead(fs->mountpoint, fs->read_ahead_kb);
    if (rc && (fs->read_ahead_given || fs->debug))
        fuse_log(FUSE_LOG_WARNING, "pcrfs: read_ahead_kb=%u: %s (the kernel's readahead stays)\n",
                 fs->read_ahead_kb, strerror(-rc));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int rc;

    struct pcrfs *fs = fs_of(req);
    unsigned flags;

    bool ahead;

    first_request(fs);
    rc = do_lookup(fs, parent, name, &e, &flags);
    ahead = rc == 0 && e.ino && e.entry_timeout > 0 && fs->dirahead.on;
    /* a directory's name before the reply: once the kernel has it, a lookup inside it
     * can reach another thread before this one goes on */
    if (ahead && (flags & PCRFS_NODE_DIR))
        pcrfs_dirahead_note_dir(fs, parent, name, e.ino);
    if (rc)
        fuse_reply_err(req, -rc);
    else if (fuse_reply_entry(req, &e) != 0)
        pcrfs_snaps_forget(&fs->snaps, e.ino, 1); /* the kernel did not take it */
    else if (ahead && (flags & PCRFS_NODE_PAGES))
        pcrfs_dirahead_note_file(fs, parent); /* after the reply: the reader goes on */
}

/* Only stats nodes have anything to forget (inode.h). */
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    pcrfs_snaps_forget(&fs_of(req)->snaps, ino, nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    unsigned flags = 0;
    struct stat st;
    int rc;

    first_request(fs);
    rc = pcrfs_node_attr(fs, ino, &st, &flags);
    (void)fi;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, attr_timeout(fs, flags));
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs_node_attr a;
    int rc = check_dir(fs_of(req), ino, &a);

    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* e.g. a cached listing of dynamic/ would carry the inodes of an old level */
    if (!(a.flags & PCRFS_NODE_NO_LISTINGS)) {
        /* the directory reader (dirahead.c) wants READDIRPLUS, not the cached listing,
         * and must not drop it either */
        fi->cache_readdir = !pcrfs_dirahead_is_lister(fs_of(req), req);
        fi->keep_cache = 1;
    }
    fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    const char *buf = NULL;
    size_t len = 0;
    int rc = do_readdir(fs_of(req), req, ino, size, off, false, &buf, &len);

    (void)fi;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, len);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    const char *buf = NULL;
    size_t len = 0;
    int rc = do_readdir(fs_of(req), req, ino, size, off, true, &buf, &len);

    (void)fi;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, len);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int rc = do_open(fs_of(req), req, ino, fi);

    if (rc)
        fuse_reply_err(req, -rc);
    else if (fuse_reply_open(req, fi) == -ENOENT)
        do_release(fs_of(req), fi); /* the opener was interrupted: no RELEASE will come */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    const char *buf = NULL;
    size_t len = 0;
    struct pcrfs *fs = fs_of(req);
    int rc = do_read(fs, ino, fi, size, off, &buf, &len);

    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, len);
    if (off == 0 && rc == 0)
        pcrfs_push_kick(fs); /* after the reply: a reader opened a file (push.c) */
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    int rc = do_write(fs_of(req), ino, fi, buf, size);

    (void)off;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
}

/* Sent only for /.pcrfs/level open for writing (every other open file has
 * FOPEN_NOFLUSH). With no OPEN there is no FOPEN_NOFLUSH: the first FLUSH is
 * answered ENOSYS, after which the kernel never sends one again (and such a mount is
 * read-only: no level file is open for writing). */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;
    int rc = 0;

    (void)ino;
    if (atomic_load_explicit(&fs->no_open, memory_order_relaxed))
        rc = -ENOSYS;
    else if (of && (of->flags & PCRFS_NODE_WRITABLE))
        rc = pcrfs_file_flush(of->f);
    fuse_reply_err(req, -rc);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    do_release(fs_of(req), fi);
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs sv;

    (void)ino;
    memset(&sv, 0, sizeof(sv));
    sv.f_bsize = PCRFS_BLKSIZE;
    sv.f_frsize = PCRFS_BLKSIZE;
    sv.f_files = pcrfs_node_count(fs_of(req)->store);
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

/* No ioctl handler. CPython's buffered open() calls isatty() on every file, a TCGETS
 * that FUSE forwards to the daemon as a FUSE_IOCTL round trip; libfuse answers
 * ENOSYS, which the kernel turns into ENOTTY on every call (fs/fuse/ioctl.c,
 * fuse_send_ioctl(); unlike OPEN or FLUSH it remembers nothing), so no answer from
 * here can spare the round trip, and ENOSYS is the cheapest one (an ENOTTY handler
 * measured the same). The round trip is two wake-ups: with reader and daemon pinned
 * (taskset, os.isatty() x 500, 60 rounds, load 4-7) 4.3 us median on the same CPU,
 * 125 us on the other (this VM halts idle vCPUs at once: haltpoll.guest_halt_poll_ns
 * =0), 31 us unpinned. The scheduler chooses: the kernel's wake-up of a /dev/fuse
 * reader is not a sync one, so an idle CPU is preferred to the caller's, and a quiet
 * machine pays most: 74 us and 28 + 21 us of CPU (caller + daemon) per isatty() at
 * load 3-4, 14.5 us and 2.2 + 2.6 us at load 7-8. Warm, it is the only request a
 * Python loader sends (bench/pyloader.py:
 * 1.00 daemon wake-ups per file for open().read() and torchvision's Pillow loader,
 * 0.00 for buffering=0 and pcrfs.pil_loader). See pcrfs(1), "Python loaders".
 *
 * getxattr/listxattr: only dynamic mounts have an attribute; elsewhere the first
 * ENOSYS makes the kernel answer EOPNOTSUPP itself from then on. access: only without
 * default_permissions (dynamic mounts). forget: only stats snapshots (inode.h). No
 * releasedir: a directory handle holds nothing. flush: only /.pcrfs/level open for
 * writing; with no OPEN, the first is answered ENOSYS and the kernel stops sending
 * FLUSH (there is no FOPEN_NOFLUSH to do it). */
const struct fuse_lowlevel_ops pcrfs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .getattr = op_getattr,
    .setattr = pcrfs_op_setattr,
    .mknod = pcrfs_op_mknod,
    .mkdir = pcrfs_op_mkdir,
    .unlink = pcrfs_op_remove,
    .rmdir = pcrfs_op_remove,
    .symlink = pcrfs_op_symlink,
    .rename = pcrfs_op_rename,
    .link = pcrfs_op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .statfs = op_statfs,
    .setxattr = pcrfs_op_setxattr,
    .getxattr = pcrfs_op_getxattr,
    .listxattr = pcrfs_op_listxattr,
    .removexattr = pcrfs_op_removexattr,
    .access = pcrfs_op_access,
    .create = pcrfs_op_create,
};
