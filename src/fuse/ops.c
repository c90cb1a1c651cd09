/* pcrfs — the low-level FUSE handlers.
 *
 * Each handler decodes its arguments, calls one worker that returns 0 or a negative
 * errno, and sends exactly one reply. Workers never reply. Inode numbers are
 * computed, not stored (see inode.h), so there is no inode table and no lock on the
 * lookup, getattr, readdir or read paths. A node is either one of a view's (the
 * library's views, src/lib/view/, say how each names, sizes, reads and caches;
 * view_of() finds it) or one of the daemon's own (view 0: pcrfsdir.c).
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
 * The dynamic view (-o level=K). dynamic/ serves the level in fs->level_now, which a
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
 * EROFS (writes.c), access(2) is answered by pcrfs_op_access (writes.c), and only the mounting user (or
 * root) may change the level.
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

#define NAMEBUF       512 /* a view's made-up names (view.h's readdir); "scanK" */

static struct pcrfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- attributes ------------------------------------------------------------------ */

/* The level file changes under the reader: its size is that of what it holds now,
 * and the kernel must not cache it. (A stats inode never changes: inode.h.) */
static double attr_timeout(const struct pcrfs *fs, fuse_ino_t ino)
{
    return pcrfs_is_level_file(fs, ino) ? 0.0 : fs->timeout;
}

int pcrfs_node_stat(struct pcrfs *fs, fuse_ino_t ino, struct stat *st)
{
    struct ino_parts p = ino_split(ino);
    const struct pcr_view *v;
    const struct pcr_file *f;
    struct pcr_dirinfo di;
    int64_t size;
    int rc;

    memset(st, 0, sizeof(*st));
    if (p.view == VIEW_SELF)
        return pcrfs_self_stat(fs, ino, st);
    v = view_of(fs, p);
    if (!v)
        return -ENOENT;
    if (p.is_file) {
        rc = pcr_store_file(v->store, p.id, &f);
        if (rc)
            return rc;
        size = pcr_view_size(v, f);
        if (size < 0)
            return (int)size; /* a size that cannot be known is an error, not 0 */
        pcrfs_stat_file(fs, st, ino, (uint64_t)size);
    } else {
        rc = pcr_store_dir(v->store, p.id, &di);
        if (rc)
            return rc;
        pcrfs_stat_dir(fs, st, ino, di.nsubdirs);
    }
    return 0;
}

/* How long the kernel may keep a name -> @child: a view's cache.names says for its files;
 * /.pcrfs/stats not at all, each lookup takes a new snapshot (inode.h). */
static double entry_timeout(const struct pcrfs *fs, fuse_ino_t child)
{
    struct ino_parts p = ino_split(child);
    const struct pcr_view *v = view_of(fs, p);

    if (v)
        return p.is_file && !v->desc->cache.names ? 0.0 : fs->timeout;
    return ino_is_stats(child) ? 0.0 : fs->timeout;
}

/* ---- names ------------------------------------------------------------------------ */

/* A miss is an answer, not an error: it is returned as a negative entry (ino 0) so
 * the kernel caches it for the entry timeout, and probing for absent files (as
 * loaders that look for optional sidecar files do) stays in the kernel. */
/* The inode of node @id of @v as a child: with PCR_LEVEL_CURRENT a file's is the one
 * of the level current now. 0 if it does not fit. */
static uint64_t child_ino(const struct pcr_view *v, bool is_file, uint64_t id)
{
    return ino_make(pcr_view_child_number(v, is_file, id), is_file, id);
}

static int do_lookup(struct pcrfs *fs, fuse_ino_t parent, const char *name,
                     struct fuse_entry_param *e)
{
    struct ino_parts p = ino_split(parent);
    const struct pcr_view *v;
    struct pcr_node node;
    uint64_t ino = 0;
    int rc;

    memset(e, 0, sizeof(*e));
    if (p.is_file)
        return -ENOTDIR;
    if (p.view == VIEW_SELF) {
        rc = pcrfs_self_lookup(fs, p.id, name, &ino); /* stats: op_lookup undoes a failure */
        if (rc)
            return rc;
    } else if ((v = view_of(fs, p)) != NULL) {
        rc = v->ops->lookup(v, p.id, name, &node);
        if (rc == 0) {
            ino = child_ino(v, !node.is_dir, node.id);
            if (!ino)
                return -EOVERFLOW;
        } else if (rc != -ENOENT) {
            return rc;
        }
    } else {
        return -ENOENT;
    }
    e->entry_timeout = fs->timeout; /* also for a miss: names do not depend on the level */
    if (p.view == VIEW_SELF && p.id == SELF_DIR_PREFETCH)
        e->entry_timeout = 0; /* a hint: the next one with the same name comes here too */
    if (!ino)
        return 0;
    rc = pcrfs_node_stat(fs, ino, &e->attr);
    if (rc)
        return rc;
    e->ino = ino;
    e->entry_timeout = entry_timeout(fs, ino);
    e->attr_timeout = attr_timeout(fs, ino);
    return 0;
}

/* Entry *@pidx of directory @dir: 0 is ".", 1 is "..", then the children; a view
 * that leaves entries out returns the next one it lists and moves *@pidx to it (so
 * the offsets the kernel resumes at stay those of the store). @namebuf (NAMEBUF
 * bytes) holds made-up names.
 * @return 0; -ENOENT past the end; -EIO and friends from the store. */
static int dir_entry(struct pcrfs *fs, fuse_ino_t dir, uint64_t *pidx, const char **name,
                     uint64_t *child, char *namebuf)
{
    uint64_t idx = *pidx, pos;
    struct ino_parts p = ino_split(dir);
    const struct pcr_view *v = view_of(fs, p);
    struct pcr_dirinfo di;
    struct pcr_dirent de;
    int rc;

    if (idx == 0) {
        *name = ".";
        *child = dir;
        return 0;
    }
    if (idx == 1) {
        *name = "..";
        if (!v || p.id == PCR_ROOT_DIR) {
            *child = FUSE_ROOT_ID;
            return 0;
        }
        rc = pcr_store_dir(v->store, p.id, &di);
        if (rc)
            return rc;
        *child = ino_make(p.view, false, di.parent);
        return *child ? 0 : -EOVERFLOW;
    }
    if (!v)
        return pcrfs_self_dirent(fs, p.id, idx - 2, name, child);
    pos = idx - 2;
    rc = v->ops->readdir(v, p.id, &pos, &de, namebuf, NAMEBUF);
    if (rc)
        return rc;
    *pidx = pos + 2; /* a view that leaves entries out skipped ahead */
    *name = de.name;
    *child = child_ino(v, !de.node.is_dir, de.node.id);
    return *child ? 0 : -EOVERFLOW;
}

static int check_dir(struct pcrfs *fs, fuse_ino_t ino)
{
    struct ino_parts p = ino_split(ino);
    const struct pcr_view *v;
    struct pcr_dirinfo di;

    if (p.is_file)
        return -ENOTDIR;
    if (p.view == VIEW_SELF)
        return p.id == SELF_DIR_ROOT || p.id == SELF_DIR_CTL || p.id == SELF_DIR_PREFETCH
                   ? 0
                   : -ENOENT;
    v = view_of(fs, p);
    if (!v)
        return -ENOENT;
    return pcr_store_dir(v->store, p.id, &di);
}

/* Fill up to @size bytes of directory entries starting at entry @off into the
 * thread's buffer. Each entry's offset is the index of the next one, so the kernel
 * resumes exactly where a full buffer stopped. */
static int do_readdir(struct pcrfs *fs, fuse_req_t req, fuse_ino_t dir, size_t size, off_t off,
                      bool plus, const char **out, size_t *outlen)
{
    struct fuse_entry_param e;
    char namebuf[NAMEBUF];
    const char *name;
    uint64_t child;
    size_t used = 0, need;
    uint64_t idx;
    char *buf;
    int rc;

    if (off < 0)
        return -EINVAL;
    rc = check_dir(fs, dir);
    if (rc)
        return rc;
    buf = pcrfs_tls_buf(size);
    if (!buf)
        return -ENOMEM;
    for (idx = (uint64_t)off;; idx++) {
        rc = dir_entry(fs, dir, &idx, &name, &child, namebuf);
        if (rc == -ENOENT)
            break;
        if (rc) {
            if (used)
                break; /* send what we have; the error comes back on the next call */
            return rc;
        }
        memset(&e, 0, sizeof(e));
        if (plus && child == ino_make(VIEW_SELF, true, SELF_FILE_STAT)) {
            /* no node (ino 0): the kernel then just lists the name, and a stat of
             * it is a LOOKUP that takes a snapshot (inode.h) */
            e.attr.st_ino = child;
            e.attr.st_mode = S_IFREG | 0444;
            need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)(idx + 1));
        } else if (plus) {
            rc = pcrfs_node_stat(fs, child, &e.attr);
            if (rc) {
                if (used)
                    break;
                return rc;
            }
            e.ino = child;
            e.entry_timeout = entry_timeout(fs, child);
            e.attr_timeout = attr_timeout(fs, child);
            need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, (off_t)(idx + 1));
        } else {
            e.attr.st_ino = child;
            e.attr.st_mode = ino_split(child).is_file ? S_IFREG : S_IFDIR;
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
 * alone: (view, file id) -> pcr_store_file() (no SQL once the directory is loaded)
 * -> the view's read with no state (for the store's views pcr_store_pread() at the
 * view's level, no allocation). Consequences:
 *   - a damaged record fails the read with EIO, not the open;
 *   - "opens" in /.pcrfs/stats counts READs at offset 0, i.e. files whose first
 *     bytes came from the daemon (files served from the page cache are not seen);
 *   - a token file is decoded on every READ (3-7 us per 32x32 grid); the decode is
 *     deterministic, so a file read in pieces is consistent;
 *   - the dynamic view's guarantee holds unchanged: the level is the inode's;
 *   - /.pcrfs/stats is a new node per lookup (inode.h), so caching cannot stale it.
 * Only OPEN can refuse a write-mode open (EROFS) before any write, and an
 * O_TRUNC open with atomic_o_trunc would zero the kernel's size of a file without
 * asking: so mounts that are not "ro" (-o rw, -o level=K) keep OPEN, as do -o open
 * and -o nokeep_cache (no-open always keeps the cache). See main.c.
 *
 * With OPEN, an open file is a struct open_file in fi->fh: its view and the state
 * the view's open returned (the library's handle, for the store's views), or the
 * pending bytes of /.pcrfs/level open for writing (/.pcrfs/info and stats need
 * nothing: fh 0). Open files are also kept on a list, because the kernel does not
 * always send RELEASE before the session ends (close(2) queues it in the background,
 * so SIGTERM right after a close, or an unmount, can overtake it):
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

static void of_free(struct open_file *of)
{
    if (of->state)
        pcr_view_close(of->v, of->state);
    free(of->lw);
    free(of);
}

static void of_unlink_free(struct pcrfs *fs, struct open_file *of)
{
    pthread_mutex_lock(&fs->open_lock);
    of->prev->next = of->next;
    of->next->prev = of->prev;
    pthread_mutex_unlock(&fs->open_lock);
    of_free(of);
}

void pcrfs_ops_close_all(struct pcrfs *fs)
{
    struct open_file *of;

    while ((of = fs->open_files.next) != &fs->open_files)
        of_unlink_free(fs, of);
    pcrfs_self_free(fs);
}

/* /.pcrfs/level, written in place (O_TRUNC is what `echo K >` asks: nothing to
 * truncate); open for writing it holds the bytes not yet applied (pcrfsdir.c). */
static int open_level(struct pcrfs *fs, fuse_req_t req, struct fuse_file_info *fi)
{
    struct open_file *of;

    fi->fh = 0;
    fi->direct_io = 1; /* its size changes with the level */
    if ((fi->flags & O_ACCMODE) == O_RDONLY)
        return 0;
    if (!pcrfs_may_control(fs, req))
        return -EACCES;
    of = calloc(1, sizeof(*of));
    if (of)
        of->lw = calloc(1, sizeof(*of->lw));
    if (!of || !of->lw) {
        free(of);
        return -ENOMEM;
    }
    of_link(fs, of);
    fi->fh = (uintptr_t)of;
    fi->noflush = 0; /* a value without a newline is applied by close(2): FLUSH */
    return 0;
}

static int do_open(struct pcrfs *fs, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct ino_parts p = ino_split(ino);
    const struct pcr_view *v;
    const struct pcr_file *f;
    struct open_file *of;
    int rc;

    if (!p.is_file)
        return -EISDIR;
    if (atomic_load_explicit(&fs->no_open, memory_order_relaxed))
        return -ENOSYS; /* never again: see "No OPEN" above */
    fi->noflush = 1;
    if (pcrfs_is_level_file(fs, ino))
        return open_level(fs, req, fi);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
        return -EROFS;
    if (pcrfs_self_immutable(fs, ino)) {
        fi->fh = 0;
        fi->keep_cache = 1;
        return 0;
    }
    v = view_of(fs, p);
    if (!v)
        return -ENOENT;
    of = calloc(1, sizeof(*of));
    if (!of)
        return -ENOMEM;
    of->v = v;
    rc = pcr_store_file(v->store, p.id, &f);
    if (rc == 0)
        rc = pcr_view_open(v, f, &of->state); /* counts the open or its EIO */
    fi->keep_cache = fs->keep_cache && v->desc->cache.pages;
    fi->direct_io = v->desc->cache.direct; /* refurb/: every open its own bytes */
    if (rc) {
        free(of);
        return rc;
    }
    of_link(fs, of);
    fi->fh = (uintptr_t)of;
    return 0;
}

static int do_read(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, size_t size,
                   off_t off, const char **out, size_t *outlen)
{
    struct ino_parts p = ino_split(ino);
    const struct open_file *of = (const struct open_file *)(uintptr_t)fi->fh;
    const struct pcr_view *v;
    const struct pcr_file *f;
    ssize_t n;
    char *buf;
    int rc;

    if (off < 0)
        return -EINVAL;
    buf = pcrfs_tls_buf(size ? size : 1);
    if (!buf)
        return -ENOMEM;
    *out = buf;
    if (p.view == VIEW_SELF)
        return pcrfs_self_read(fs, ino, buf, size, off, outlen);
    v = view_of(fs, p);
    if (!v)
        return -EBADF;
    if (of) {
        n = v->ops->read(v, NULL, of->state, buf, size, (uint64_t)off);
    } else {
        rc = pcr_store_file(v->store, p.id, &f);
        if (rc)
            return rc;
        n = v->ops->read(v, f, NULL, buf, size, (uint64_t)off);
        /* No OPEN (see above): an open is a READ at offset 0 */
        if (n >= 0 && off == 0)
            pcrfs_count(&v->ctr->opens, 1);
        /* The kernel follows a failed readahead READ with a READ of the same page: one
         * failure of one file, counted once (as the failed open it replaces was). */
        if (n < 0 && atomic_exchange_explicit(&fs->last_err_ino, ino, memory_order_relaxed) == ino)
            return (int)n;
    }
    if (n < 0) {
        pcrfs_count(&v->ctr->errors, 1);
        return (int)n;
    }
    pcrfs_count(&v->ctr->reads, 1);
    pcrfs_count(&v->ctr->bytes, (uint64_t)n);
    *outlen = (size_t)n;
    return 0;
}

/* Only /.pcrfs/level is ever open for writing (with an open_file holding its
 * level_write: see open_level). */
static int do_write(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, const char *buf,
                    size_t size)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;

    if (!pcrfs_is_level_file(fs, ino))
        return -EROFS;
    if (!of || !of->lw)
        return -EBADF;
    return pcrfs_level_write(fs, of->lw, buf, size);
}

static void do_release(struct pcrfs *fs, struct fuse_file_info *fi)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;

    if (of && of->lw)
        pcrfs_level_close(fs, of->lw);
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
    if (fs->readdirplus_opt && (conn->capable & FUSE_CAP_READDIRPLUS))
        conn->want |= FUSE_CAP_READDIRPLUS |
                      (conn->capable & FUSE_CAP_READDIRPLUS_AUTO);
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    /* `echo K > .pcrfs/level`: O_TRUNC comes with the OPEN, no SETATTR after it */
    if (pcr_views_dynamic(fs->views) && (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC))
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

    first_request(fs_of(req));
    rc = do_lookup(fs_of(req), parent, name, &e);

    if (rc)
        fuse_reply_err(req, -rc);
    else if (fuse_reply_entry(req, &e) != 0)
        pcrfs_self_forget(fs_of(req), e.ino, 1); /* the kernel did not take it */
}

/* Only stats nodes have anything to forget (inode.h). */
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    pcrfs_self_forget(fs_of(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;
    int rc;

    first_request(fs);
    rc = pcrfs_node_stat(fs, ino, &st);
    (void)fi;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, attr_timeout(fs, ino));
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    const struct pcr_view *v = view_of(fs, ino_split(ino));
    int rc = check_dir(fs, ino);

    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* e.g. a cached listing of dynamic/ would carry the inodes of an old level */
    if (!v || v->desc->cache.listings) {
        fi->cache_readdir = 1;
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
    int rc = do_read(fs_of(req), ino, fi, size, off, &buf, &len);

    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, len);
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

    if (atomic_load_explicit(&fs->no_open, memory_order_relaxed))
        rc = -ENOSYS;
    else if (pcrfs_is_level_file(fs, ino) && of && of->lw)
        rc = pcrfs_level_close(fs, of->lw);
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
    sv.f_files = pcr_views_nodes(fs_of(req)->views) + 5; /* + the root, /.pcrfs and its files */
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
