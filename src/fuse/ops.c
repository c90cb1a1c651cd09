/* pcrfs — the low-level FUSE handlers.
 *
 * Each handler decodes its arguments, calls one worker that returns 0 or a negative
 * errno, and sends exactly one reply. Workers never reply. Inode numbers are
 * computed, not stored (see inode.h), so there is no inode table, no lock on the
 * lookup, getattr, readdir or read paths, and no FORGET handler: libfuse answers
 * FORGET itself when the filesystem has none.
 *
 * What the kernel is told, and why (the store is immutable for the life of the mount):
 *   - entry, attribute and negative-entry timeouts of fs->timeout (a day by default):
 *     after the first walk, lookups and stats never leave the kernel;
 *   - FOPEN_KEEP_CACHE on every open file: the page cache survives close/open, so a
 *     second epoch over a dataset that fits in RAM does no FUSE reads at all
 *     (measured, full/, 4 readers: 21-28 k files/s warm with it, 5-7 k without);
 *   - readdirplus, always (not "auto"): one READDIRPLUS answers for the names and the
 *     attributes of a whole directory, so ImageFolder's scandir + open of every file,
 *     `ls -l` and `find` cost no LOOKUP per file. Measured (BENCHMARKS.md, 5000
 *     files): cold `ls -lR` 0.08-0.12 s with it, 0.31-0.49 s without (native disk
 *     0.11-0.15 s); listing + reading scan1/ costs the daemon 22-27 ticks of CPU with
 *     "yes", 27-33 with "auto", 30-47 with "no";
 *   - FOPEN_CACHE_DIR on directories: a second listing is served by the kernel;
 *   - FOPEN_NOFLUSH: nothing is ever written, so close() costs no FLUSH round trip;
 *   - st_blksize of 1 MiB: cp, tar and Python's buffered I/O size their reads from it;
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
 * Everything else keeps the timeouts and caching above; in particular each level's
 * pages stay in the page cache across switches.
 * Such a mount is not read-only (the kernel would refuse the control write itself),
 * and not default_permissions (the kernel would answer EACCES, not EROFS, to writes
 * by other users than root): every other write reaches the daemon and fails with
 * EROFS here, access(2) is answered by op_access, and only the mounting user (or
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

#include "fs.h"
#include "inode.h"

#define PCRFS_BLKSIZE (1u << 20)
#define TLS_BUF_MIN   (128u << 10)
/* scanK, full, [dynamic,] [tokens,] .pcrfs */
#define ROOT_NSUBDIRS(fs) ((fs)->levels + 2 + (fs)->dynamic + ((fs)->tokstore != NULL))

static struct pcrfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static bool view_valid(const struct pcrfs *fs, unsigned view)
{
    return (view >= 1 && view <= fs->levels + 1) || (view == VIEW_TOKENS && fs->tokstore);
}

/* The store a view's ids belong to: tokens/ has its own tree (inode.h). */
static struct pcr_store *view_store(const struct pcrfs *fs, unsigned view)
{
    return view == VIEW_TOKENS ? fs->tokstore : fs->store;
}

/* full/ (view L+1) serves level L; a dynamic/ file VIEW_DYN+K serves level K. */
static unsigned view_level(const struct pcrfs *fs, unsigned view)
{
    if (view == VIEW_TOKENS)
        return 1; /* the token tree's one level */
    if (view > VIEW_DYN)
        return view - VIEW_DYN;
    return view > fs->levels ? fs->levels : view;
}

/* Is @p a node of a store view (scanK/, full/, dynamic/)? */
static bool node_valid(const struct pcrfs *fs, struct ino_parts p)
{
    if (p.view >= VIEW_DYN) {
        if (!fs->dynamic)
            return false;
        if (!p.is_file)
            return p.view == VIEW_DYN;
        return p.view > VIEW_DYN && p.view - VIEW_DYN <= fs->levels;
    }
    return view_valid(fs, p.view);
}

static unsigned dyn_level(const struct pcrfs *fs)
{
    return atomic_load_explicit(&fs->level_now, memory_order_acquire);
}

/* The inode of node @id as a child in view @view: in dynamic/, a file's inode is
 * the one of the level current now (see inode.h). */
static fuse_ino_t child_ino(const struct pcrfs *fs, unsigned view, bool is_file, uint64_t id)
{
    if (view >= VIEW_DYN)
        return ino_make(is_file ? VIEW_DYN + dyn_level(fs) : VIEW_DYN, is_file, id);
    return ino_make(view, is_file, id);
}

/* How long the kernel may keep a name -> @child: dynamic/ files not at all, so a
 * path walk after a switch finds the new level's inode. */
static double entry_timeout(const struct pcrfs *fs, fuse_ino_t child)
{
    struct ino_parts p = ino_split(child);

    /* /.pcrfs/stats neither: each lookup takes a new snapshot (inode.h) */
    return (p.is_file && p.view > VIEW_DYN) || ino_is_stats(child) ? 0.0 : fs->timeout;
}

static struct view_counters *counters(struct pcrfs *fs, unsigned view)
{
    if (view == VIEW_TOKENS)
        return &fs->tok_view;
    return &fs->views[view >= VIEW_DYN ? fs->levels + 2 : view];
}

static bool is_level_file(const struct pcrfs *fs, fuse_ino_t ino)
{
    return fs->dynamic && ino == ino_make(VIEW_SELF, true, SELF_FILE_LEVEL);
}

/* Only the mounting user and root may change the level (the daemon checks: such a
 * mount has no default_permissions). */
static bool may_control(const struct pcrfs *fs, fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);

    return ctx && (ctx->uid == 0 || ctx->uid == fs->uid);
}

/* The current level as /.pcrfs/level shows it: "K\n". */
static size_t level_render(const struct pcrfs *fs, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%u\n", dyn_level(fs));

    return n > 0 ? (size_t)n : 0;
}

static void set_level(struct pcrfs *fs, unsigned k)
{
    unsigned old = atomic_exchange_explicit(&fs->level_now, k, memory_order_acq_rel);

    if (old != k) {
        atomic_fetch_add_explicit(&fs->switches, 1, memory_order_relaxed);
        if (fs->debug)
            fprintf(stderr, "pcrfs: dynamic/: level %u -> %u\n", old, k);
    }
}

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ---- the read buffer --------------------------------------------------------------
 *
 * READ replies are assembled in a buffer that belongs to the worker thread: grown to
 * the largest request seen (the kernel asks at most max_pages at a time, 1 MiB with
 * libfuse 3.14), never shrunk, freed by the key's destructor when libfuse retires the
 * thread. A READ therefore allocates nothing. READDIR replies use it too (a worker
 * handles one request at a time, and the reply is copied out before it returns).
 */
struct tls_buf {
    char *p;
    size_t cap;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static __thread struct tls_buf *tls;

static void tls_free(void *arg)
{
    struct tls_buf *b = arg;

    if (b) {
        free(b->p);
        free(b);
    }
}

static void tls_key_init(void)
{
    if (pthread_key_create(&tls_key, tls_free) != 0)
        abort(); /* only fails when the process is out of keys: nothing to recover */
}

static char *tls_get(size_t size)
{
    struct tls_buf *b = tls;
    size_t cap;
    char *p;

    if (!b) {
        pthread_once(&tls_once, tls_key_init);
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        if (pthread_setspecific(tls_key, b) != 0) {
            free(b);
            return NULL;
        }
        tls = b;
    }
    if (size > b->cap || !b->p) {
        for (cap = b->cap ? b->cap : TLS_BUF_MIN; cap < size; cap *= 2)
            ;
        p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

void pcrfs_ops_thread_done(void)
{
    if (tls) {
        pthread_setspecific(tls_key, NULL);
        tls_free(tls);
        tls = NULL;
    }
}

/* ---- attributes ------------------------------------------------------------------ */

static void stat_common(const struct pcrfs *fs, struct stat *st, fuse_ino_t ino)
{
    st->st_ino = ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_blksize = PCRFS_BLKSIZE;
    st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = (time_t)fs->mtime;
}

static void stat_dir(const struct pcrfs *fs, struct stat *st, fuse_ino_t ino, uint64_t nsubdirs)
{
    stat_common(fs, st, ino);
    st->st_mode = S_IFDIR | 0555;
    /* exact, so find(1)'s leaf optimisation stays correct */
    st->st_nlink = (nlink_t)(2 + nsubdirs);
    /* directories have no bytes of their own: `du -sb` then sums file sizes only */
    st->st_size = 0;
}

static void stat_file(const struct pcrfs *fs, struct stat *st, fuse_ino_t ino, uint64_t size)
{
    stat_common(fs, st, ino);
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = (off_t)size;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
}

/* The level file changes under the reader: its size is that of what it holds now,
 * and the kernel must not cache it. (A stats inode never changes: inode.h.) */
static double attr_timeout(const struct pcrfs *fs, fuse_ino_t ino)
{
    return is_level_file(fs, ino) ? 0.0 : fs->timeout;
}

/* ---- /.pcrfs/stats snapshots (inode.h) ---------------------------------------------
 * At most PCRFS_MAX_SNAPS alive, in a ring indexed by generation: finding one is an
 * index, not a search, and taking a new one replaces the one taken PCRFS_MAX_SNAPS
 * lookups before it if the kernel still holds that (its node then answers ESTALE).
 * One mutex, held only to swap pointers and copy at most one read's bytes. */

static void snap_free(struct stat_snap *sn)
{
    free(sn);
}

/* Render a snapshot for a new node, with one lookup counted. @return 0 and *ino. */
static int snap_new(struct pcrfs *fs, fuse_ino_t *ino)
{
    struct stat_snap *sn, *old;
    char *data;
    size_t len;
    int rc = pcrfs_stats_render(fs, &data, &len);

    if (rc)
        return rc;
    sn = malloc(sizeof(*sn) + len);
    if (!sn) {
        free(data);
        return -ENOMEM;
    }
    memcpy(sn->data, data, len);
    free(data);
    sn->len = len;
    sn->nlookup = 1;
    pthread_mutex_lock(&fs->snap_lock);
    sn->gen = ++fs->snap_gen;
    old = fs->snaps[sn->gen % PCRFS_MAX_SNAPS];
    fs->snaps[sn->gen % PCRFS_MAX_SNAPS] = sn;
    pthread_mutex_unlock(&fs->snap_lock);
    snap_free(old);
    *ino = ino_make(VIEW_SELF, true, SELF_FILE_STAT | (sn->gen << SELF_GEN_SHIFT));
    return *ino ? 0 : -EOVERFLOW;
}

/* Under snap_lock: the live snapshot of node @ino, or NULL (forgotten or evicted). */
static struct stat_snap *snap_find(struct pcrfs *fs, fuse_ino_t ino)
{
    uint64_t gen = ino_split(ino).id >> SELF_GEN_SHIFT;
    struct stat_snap *sn = fs->snaps[gen % PCRFS_MAX_SNAPS];

    return sn && sn->gen == gen ? sn : NULL;
}

static int snap_size(struct pcrfs *fs, fuse_ino_t ino, size_t *len)
{
    struct stat_snap *sn;

    pthread_mutex_lock(&fs->snap_lock);
    sn = snap_find(fs, ino);
    if (sn)
        *len = sn->len;
    pthread_mutex_unlock(&fs->snap_lock);
    return sn ? 0 : -ESTALE;
}

/* Copy a slice of the snapshot into the thread's buffer: a FORGET or a new lookup in
 * another worker may free it as soon as the lock is released. */
static int snap_read(struct pcrfs *fs, fuse_ino_t ino, size_t size, off_t off, const char **out,
                     size_t *outlen)
{
    struct stat_snap *sn;
    size_t n = 0;
    char *buf = tls_get(size ? size : 1);

    if (!buf)
        return -ENOMEM;
    pthread_mutex_lock(&fs->snap_lock);
    sn = snap_find(fs, ino);
    if (sn && (uint64_t)off < sn->len) {
        n = sn->len - (size_t)off < size ? sn->len - (size_t)off : size;
        memcpy(buf, sn->data + off, n);
    }
    pthread_mutex_unlock(&fs->snap_lock);
    *out = buf;
    *outlen = n;
    return sn ? 0 : -ESTALE;
}

static void snap_forget(struct pcrfs *fs, fuse_ino_t ino, uint64_t nlookup)
{
    struct stat_snap *sn;

    pthread_mutex_lock(&fs->snap_lock);
    sn = snap_find(fs, ino);
    if (sn && sn->nlookup > nlookup) {
        sn->nlookup -= nlookup;
        sn = NULL;
    } else if (sn) {
        fs->snaps[sn->gen % PCRFS_MAX_SNAPS] = NULL;
    }
    pthread_mutex_unlock(&fs->snap_lock);
    snap_free(sn);
}

static int self_stat(struct pcrfs *fs, fuse_ino_t ino, struct ino_parts p, struct stat *st)
{
    size_t len;
    int rc;

    if (!p.is_file && p.id == SELF_DIR_ROOT) {
        stat_dir(fs, st, ino, ROOT_NSUBDIRS(fs));
    } else if (!p.is_file && p.id == SELF_DIR_CTL) {
        stat_dir(fs, st, ino, 0);
    } else if (p.is_file && p.id == SELF_FILE_INFO) {
        stat_file(fs, st, ino, fs->info_len);
    } else if (p.is_file && p.id == SELF_FILE_CODEBOOK && fs->codebook) {
        stat_file(fs, st, ino, fs->codebook_len);
    } else if (ino_is_stats(ino)) {
        rc = snap_size(fs, ino, &len);
        if (rc)
            return rc;
        /* st_ino is the file's, not the node's: one file, however many snapshots */
        stat_file(fs, st, ino_make(VIEW_SELF, true, SELF_FILE_STAT), len);
    } else if (p.is_file && p.id == SELF_FILE_LEVEL && fs->dynamic) {
        char buf[16];

        stat_file(fs, st, ino, level_render(fs, buf, sizeof(buf)));
        st->st_mode = S_IFREG | 0644; /* the mounting user may write it */
    } else {
        return -ENOENT;
    }
    return 0;
}

static int node_stat(struct pcrfs *fs, fuse_ino_t ino, struct stat *st)
{
    struct ino_parts p = ino_split(ino);
    const struct pcr_file *f;
    struct pcr_dirinfo di;
    int rc;

    memset(st, 0, sizeof(*st));
    if (p.view == VIEW_SELF)
        return self_stat(fs, ino, p, st);
    if (!node_valid(fs, p))
        return -ENOENT;
    if (p.is_file) {
        rc = pcr_store_file(view_store(fs, p.view), p.id, &f);
        if (rc)
            return rc;
        stat_file(fs, st, ino, pcr_file_size(f, view_level(fs, p.view)));
    } else {
        rc = pcr_store_dir(view_store(fs, p.view), p.id, &di);
        if (rc)
            return rc;
        stat_dir(fs, st, ino, di.nsubdirs);
    }
    return 0;
}

/* ---- names ------------------------------------------------------------------------ */

/* "scanK" with 1 <= K <= L and no leading zero, else 0. */
static unsigned parse_scan(const struct pcrfs *fs, const char *name)
{
    unsigned k = 0;
    const char *c;

    if (strncmp(name, "scan", 4) != 0 || name[4] < '1' || name[4] > '9')
        return 0;
    for (c = name + 4; *c; c++) {
        if (*c < '0' || *c > '9' || k > fs->levels)
            return 0;
        k = k * 10 + (unsigned)(*c - '0');
    }
    return k <= fs->levels ? k : 0;
}

static fuse_ino_t self_lookup(const struct pcrfs *fs, uint64_t dir, const char *name)
{
    unsigned k;

    if (dir == SELF_DIR_ROOT) {
        if (strcmp(name, "full") == 0)
            return ino_make(fs->levels + 1, false, PCR_ROOT_DIR);
        if (strcmp(name, ".pcrfs") == 0)
            return ino_make(VIEW_SELF, false, SELF_DIR_CTL);
        if (fs->dynamic && strcmp(name, "dynamic") == 0)
            return ino_make(VIEW_DYN, false, PCR_ROOT_DIR);
        if (fs->tokstore && strcmp(name, "tokens") == 0)
            return ino_make(VIEW_TOKENS, false, PCR_ROOT_DIR);
        k = parse_scan(fs, name);
        return k ? ino_make(k, false, PCR_ROOT_DIR) : 0;
    }
    if (dir == SELF_DIR_CTL) {
        if (strcmp(name, "info") == 0)
            return ino_make(VIEW_SELF, true, SELF_FILE_INFO);
        if (strcmp(name, "stats") == 0)
            return ino_make(VIEW_SELF, true, SELF_FILE_STAT);
        if (fs->dynamic && strcmp(name, "level") == 0)
            return ino_make(VIEW_SELF, true, SELF_FILE_LEVEL);
        if (fs->codebook && strcmp(name, "codebook.npy") == 0)
            return ino_make(VIEW_SELF, true, SELF_FILE_CODEBOOK);
    }
    return 0;
}

/* A miss is an answer, not an error: it is returned as a negative entry (ino 0) so
 * the kernel caches it for the entry timeout, and probing for absent files (as
 * loaders that look for optional sidecar files do) stays in the kernel. */
static int do_lookup(struct pcrfs *fs, fuse_ino_t parent, const char *name,
                     struct fuse_entry_param *e)
{
    struct ino_parts p = ino_split(parent);
    struct pcr_node node;
    fuse_ino_t ino = 0;
    int rc;

    memset(e, 0, sizeof(*e));
    if (p.is_file)
        return -ENOTDIR;
    if (p.view == VIEW_SELF) {
        if (p.id != SELF_DIR_ROOT && p.id != SELF_DIR_CTL)
            return -ENOENT;
        ino = self_lookup(fs, p.id, name);
        if (ino == ino_make(VIEW_SELF, true, SELF_FILE_STAT)) {
            rc = snap_new(fs, &ino); /* counted as looked up: op_lookup undoes it on failure */
            if (rc)
                return rc;
        }
    } else if (node_valid(fs, p)) {
        rc = pcr_store_lookup(view_store(fs, p.view), p.id, name, &node);
        if (rc == 0) {
            ino = child_ino(fs, p.view, !node.is_dir, node.id);
            if (!ino)
                return -EOVERFLOW;
        } else if (rc != -ENOENT) {
            return rc;
        }
    } else {
        return -ENOENT;
    }
    e->entry_timeout = fs->timeout; /* also for a miss: names do not depend on the level */
    if (!ino)
        return 0;
    rc = node_stat(fs, ino, &e->attr);
    if (rc)
        return rc;
    e->ino = ino;
    e->entry_timeout = entry_timeout(fs, ino);
    e->attr_timeout = attr_timeout(fs, ino);
    return 0;
}

/* Entry @idx of directory @dir: 0 is ".", 1 is "..", then the children. @namebuf
 * holds generated names ("scanK").
 * @return 0; -ENOENT past the end; -EIO and friends from the store. */
static int dir_entry(struct pcrfs *fs, fuse_ino_t dir, uint64_t idx, const char **name,
                     fuse_ino_t *child, char *namebuf, size_t namelen)
{
    struct ino_parts p = ino_split(dir);
    struct pcr_dirinfo di;
    struct pcr_dirent de;
    uint64_t pos;
    int rc;

    if (idx == 0) {
        *name = ".";
        *child = dir;
        return 0;
    }
    if (idx == 1) {
        *name = "..";
        if (p.view == VIEW_SELF || p.id == PCR_ROOT_DIR) {
            *child = FUSE_ROOT_ID;
            return 0;
        }
        rc = pcr_store_dir(view_store(fs, p.view), p.id, &di);
        if (rc)
            return rc;
        *child = ino_make(p.view, false, di.parent);
        return *child ? 0 : -EOVERFLOW;
    }
    pos = idx - 2;
    if (p.view == VIEW_SELF && p.id == SELF_DIR_ROOT) {
        if (pos < fs->levels) {
            snprintf(namebuf, namelen, "scan%u", (unsigned)pos + 1);
            *name = namebuf;
            *child = ino_make((unsigned)pos + 1, false, PCR_ROOT_DIR);
        } else if (pos == fs->levels) {
            *name = "full";
            *child = ino_make(fs->levels + 1, false, PCR_ROOT_DIR);
        } else if (fs->dynamic && pos == fs->levels + 1) {
            *name = "dynamic";
            *child = ino_make(VIEW_DYN, false, PCR_ROOT_DIR);
        } else if (fs->tokstore && pos == fs->levels + 1 + fs->dynamic) {
            *name = "tokens";
            *child = ino_make(VIEW_TOKENS, false, PCR_ROOT_DIR);
        } else if (pos == fs->levels + 1 + fs->dynamic + (fs->tokstore != NULL)) {
            *name = ".pcrfs";
            *child = ino_make(VIEW_SELF, false, SELF_DIR_CTL);
        } else {
            return -ENOENT;
        }
        return 0;
    }
    if (p.view == VIEW_SELF) {
        static const char *const names[] = {"info", "stats", "level", "codebook.npy"};
        static const uint64_t ids[] = {SELF_FILE_INFO, SELF_FILE_STAT, SELF_FILE_LEVEL,
                                       SELF_FILE_CODEBOOK};

        /* "level" only with -o level=K, "codebook.npy" only when the store has one */
        if (pos >= 2 && !fs->dynamic)
            pos++;
        if (pos > 3 || (pos == 3 && !fs->codebook))
            return -ENOENT;
        *name = names[pos];
        *child = ino_make(VIEW_SELF, true, ids[pos]);
        return 0;
    }
    rc = pcr_store_readdir(view_store(fs, p.view), p.id, pos, &de);
    if (rc)
        return rc;
    *name = de.name;
    *child = child_ino(fs, p.view, !de.node.is_dir, de.node.id);
    return *child ? 0 : -EOVERFLOW;
}

static int check_dir(struct pcrfs *fs, fuse_ino_t ino)
{
    struct ino_parts p = ino_split(ino);
    struct pcr_dirinfo di;

    if (p.is_file)
        return -ENOTDIR;
    if (p.view == VIEW_SELF)
        return p.id == SELF_DIR_ROOT || p.id == SELF_DIR_CTL ? 0 : -ENOENT;
    if (!node_valid(fs, p))
        return -ENOENT;
    return pcr_store_dir(view_store(fs, p.view), p.id, &di);
}

/* Fill up to @size bytes of directory entries starting at entry @off into the
 * thread's buffer. Each entry's offset is the index of the next one, so the kernel
 * resumes exactly where a full buffer stopped. */
static int do_readdir(struct pcrfs *fs, fuse_req_t req, fuse_ino_t dir, size_t size, off_t off,
                      bool plus, const char **out, size_t *outlen)
{
    struct fuse_entry_param e;
    char namebuf[32];
    const char *name;
    fuse_ino_t child;
    size_t used = 0, need;
    uint64_t idx;
    char *buf;
    int rc;

    if (off < 0)
        return -EINVAL;
    rc = check_dir(fs, dir);
    if (rc)
        return rc;
    buf = tls_get(size);
    if (!buf)
        return -ENOMEM;
    for (idx = (uint64_t)off;; idx++) {
        rc = dir_entry(fs, dir, idx, &name, &child, namebuf, sizeof(namebuf));
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
            rc = node_stat(fs, child, &e.attr);
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
 * -> pcr_store_pread() at the inode's level (no allocation). Consequences:
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
 * and -o nokeep_cache (no-open always keeps the cache). See main.c.
 *
 * With OPEN, an open file is a struct open_file in fi->fh: the library's handle for a
 * view's file (/.pcrfs/info and stats need nothing: fh 0). Open
 * files are also kept on a list, because the kernel does not always send RELEASE
 * before the session ends (close(2) queues it in the background, so SIGTERM right
 * after a close, or an unmount, can overtake it): pcrfs_ops_close_all() closes what
 * is left once the loop has stopped. The list costs one uncontended lock per open
 * and per release, never one per read.
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
    if (of->h)
        pcr_handle_close(of->h);
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
    size_t i;

    while ((of = fs->open_files.next) != &fs->open_files)
        of_unlink_free(fs, of);
    for (i = 0; i < PCRFS_MAX_SNAPS; i++) {
        snap_free(fs->snaps[i]);
        fs->snaps[i] = NULL;
    }
}

static int do_open(struct pcrfs *fs, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct ino_parts p = ino_split(ino);
    const struct pcr_file *f;
    struct open_file *of;
    int rc;

    if (!p.is_file)
        return -EISDIR;
    if (atomic_load_explicit(&fs->no_open, memory_order_relaxed))
        return -ENOSYS; /* never again: see "No OPEN" above */
    fi->noflush = 1;
    if (is_level_file(fs, ino)) {
        /* Written in place (O_TRUNC is what `echo K >` asks: nothing to truncate). */
        fi->fh = 0;
        fi->direct_io = 1; /* its size changes with the level */
        if ((fi->flags & O_ACCMODE) == O_RDONLY)
            return 0;
        if (!may_control(fs, req))
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
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
        return -EROFS;
    /* info and codebook never change, nor does a stats inode's snapshot */
    if (p.view == VIEW_SELF &&
        (p.id == SELF_FILE_INFO || (p.id == SELF_FILE_CODEBOOK && fs->codebook) ||
         ino_is_stats(ino))) {
        fi->fh = 0;
        fi->keep_cache = 1;
        return 0;
    }
    if (!node_valid(fs, p))
        return -ENOENT;
    of = calloc(1, sizeof(*of));
    if (!of)
        return -ENOMEM;
    /* The level is the inode's: for dynamic/ the one current when the name was
     * looked up, held by this handle until it is closed. */
    rc = pcr_store_file(view_store(fs, p.view), p.id, &f);
    /* a token file is decoded here, whole (about 2 kB): its reads are copies */
    if (rc == 0)
        rc = pcr_handle_open(view_store(fs, p.view), f, view_level(fs, p.view), &of->h);
    if (rc == -EIO)
        count(&counters(fs, p.view)->errors, 1);
    else if (rc == 0)
        count(&counters(fs, p.view)->opens, 1);
    fi->keep_cache = fs->keep_cache;
    if (rc) {
        free(of);
        return rc;
    }
    of_link(fs, of);
    fi->fh = (uintptr_t)of;
    return 0;
}

static void slice(const char *data, size_t len, size_t size, off_t off, const char **out,
                  size_t *outlen)
{
    if ((uint64_t)off >= len) {
        *out = data;
        *outlen = 0;
        return;
    }
    *out = data + off;
    *outlen = len - (size_t)off < size ? len - (size_t)off : size;
}

static int do_read(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, size_t size,
                   off_t off, const char **out, size_t *outlen)
{
    struct ino_parts p = ino_split(ino);
    const struct open_file *of = (const struct open_file *)(uintptr_t)fi->fh;
    ssize_t n;
    char *buf;

    if (off < 0)
        return -EINVAL;
    if (p.view == VIEW_SELF && p.id == SELF_FILE_INFO) {
        slice(fs->info, fs->info_len, size, off, out, outlen);
        return 0;
    }
    if (p.view == VIEW_SELF && p.id == SELF_FILE_CODEBOOK && fs->codebook) {
        slice(fs->codebook, fs->codebook_len, size, off, out, outlen);
        return 0;
    }
    if (is_level_file(fs, ino)) {
        char now[16];
        size_t n = level_render(fs, now, sizeof(now));

        slice(now, n, size, off, out, outlen);
        buf = tls_get(*outlen);
        if (!buf)
            return -ENOMEM;
        memcpy(buf, *out, *outlen);
        *out = buf;
        return 0;
    }
    if (ino_is_stats(ino))
        return snap_read(fs, ino, size, off, out, outlen);
    if (!node_valid(fs, p))
        return -EBADF;
    buf = tls_get(size);
    if (!buf)
        return -ENOMEM;
    if (of) {
        if (!of->h)
            return -EBADF;
        n = pcr_handle_read(of->h, buf, size, (uint64_t)off);
    } else {
        /* No OPEN (see above): no handle either. */
        const struct pcr_file *f;
        int rc = pcr_store_file(view_store(fs, p.view), p.id, &f);

        if (rc)
            return rc;
        n = pcr_store_pread(view_store(fs, p.view), f, view_level(fs, p.view), buf, size,
                            (uint64_t)off);
        if (n >= 0 && off == 0)
            count(&counters(fs, p.view)->opens, 1);
        /* The kernel follows a failed readahead READ with a READ of the same page: one
         * failure of one file, counted once (as the failed open it replaces was). */
        if (n < 0 && atomic_exchange_explicit(&fs->last_err_ino, ino, memory_order_relaxed) == ino)
            return (int)n;
    }
    if (n < 0) {
        count(&counters(fs, p.view)->errors, 1);
        return (int)n;
    }
    count(&counters(fs, p.view)->reads, 1);
    count(&counters(fs, p.view)->bytes, (uint64_t)n);
    *out = buf;
    *outlen = (size_t)n;
    return 0;
}

/* ---- writing the level -------------------------------------------------------------
 *
 * The bytes written through one open file of /.pcrfs/level are one stream, whatever
 * the offsets (O_APPEND, or a second write(2) after a partial value): each line is
 * applied when its newline arrives (`echo 5 >`: at the write, as before), and what
 * follows the last newline when the file is closed: close(2) sends FLUSH and waits
 * for it, so `printf 10 >` and "1" then "0" in two writes both give level 10 before
 * close returns, and no half value is ever applied. A write that cannot be (part of)
 * a level fails with EINVAL at once; a value still incomplete at close fails close. */

static bool level_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\0';
}

/* Can @s (no newline) still grow into a level? */
static bool level_prefix(const struct pcrfs *fs, const char *s, size_t len)
{
    size_t n = len, i;
    unsigned k = 0;

    while (n > 0 && level_ws(s[n - 1]))
        n--;
    if (n == 0)
        return true;
    if (n < len) /* white space ended the value: it must be whole */
        return pcrfs_parse_level(fs, s, len) != 0;
    if (n <= 4 && memcmp(s, "full", n) == 0)
        return true;
    if (n > 3)
        return false;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        k = k * 10 + (unsigned)(s[i] - '0');
    }
    return k <= fs->levels;
}

/* Apply the pending value and forget it. Under open_lock. */
static int level_apply(struct pcrfs *fs, struct level_write *lw)
{
    unsigned k = pcrfs_parse_level(fs, lw->buf, lw->len);

    lw->len = 0;
    if (!k)
        return -EINVAL;
    set_level(fs, k);
    return 0;
}

static int level_write(struct pcrfs *fs, struct level_write *lw, const char *buf, size_t size)
{
    const char *nl;
    size_t n;
    int rc = 0;

    pthread_mutex_lock(&fs->open_lock);
    while (rc == 0 && size > 0) {
        nl = memchr(buf, '\n', size);
        n = nl ? (size_t)(nl - buf) : size;
        if (n > sizeof(lw->buf) - lw->len) {
            lw->len = 0;
            rc = -EINVAL;
            break;
        }
        memcpy(lw->buf + lw->len, buf, n);
        lw->len += n;
        if (!nl)
            break;
        rc = level_apply(fs, lw);
        buf += n + 1, size -= n + 1;
    }
    if (rc == 0 && !level_prefix(fs, lw->buf, lw->len)) {
        lw->len = 0;
        rc = -EINVAL;
    }
    pthread_mutex_unlock(&fs->open_lock);
    return rc;
}

/* At FLUSH (close(2)) and, should none come, RELEASE: apply what is pending. */
static int level_close(struct pcrfs *fs, struct level_write *lw)
{
    size_t n;
    int rc = 0;

    pthread_mutex_lock(&fs->open_lock);
    for (n = lw->len; n > 0 && level_ws(lw->buf[n - 1]); n--)
        ;
    if (n > 0)
        rc = level_apply(fs, lw);
    lw->len = 0;
    pthread_mutex_unlock(&fs->open_lock);
    return rc;
}

/* Only /.pcrfs/level is ever open for writing (with an open_file holding its
 * level_write: see do_open). */
static int do_write(struct pcrfs *fs, fuse_ino_t ino, struct fuse_file_info *fi, const char *buf,
                    size_t size)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;

    if (!is_level_file(fs, ino))
        return -EROFS;
    if (!of || !of->lw)
        return -EBADF;
    return level_write(fs, of->lw, buf, size);
}

static void do_release(struct pcrfs *fs, struct fuse_file_info *fi)
{
    struct open_file *of = (struct open_file *)(uintptr_t)fi->fh;

    if (of && of->lw)
        level_close(fs, of->lw);
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
    if (conn->capable & FUSE_CAP_READDIRPLUS) {
        conn->want |= FUSE_CAP_READDIRPLUS;
        conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    }
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    /* `echo K > .pcrfs/level`: O_TRUNC comes with the OPEN, no SETATTR after it */
    if (fs->dynamic && (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC))
        conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    /* No OPEN: see "No OPEN" above; the kernel says whether it understands the ENOSYS
     * (Linux >= 4.19), nothing needs to be asked for. */
    if (fs->want_no_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT))
        atomic_store_explicit(&fs->no_open, true, memory_order_relaxed);
    /* the user's -o options (readdirplus=, max_readahead=, ...) have the last word */
    if (fs->conn_opts)
        fuse_apply_conn_info_opts(fs->conn_opts, conn);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int rc = do_lookup(fs_of(req), parent, name, &e);

    if (rc)
        fuse_reply_err(req, -rc);
    else if (fuse_reply_entry(req, &e) != 0 && ino_is_stats(e.ino))
        snap_forget(fs_of(req), e.ino, 1); /* the kernel did not take it */
}

/* Only stats inodes have anything to forget (inode.h). */
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    if (ino_is_stats(ino))
        snap_forget(fs_of(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;
    int rc = node_stat(fs, ino, &st);

    (void)fi;
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, attr_timeout(fs, ino));
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    int rc = check_dir(fs_of(req), ino);

    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    /* A cached listing of dynamic/ would carry the inode numbers of an old level. */
    if (ino_split(ino).view != VIEW_DYN) {
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
    else if (is_level_file(fs, ino) && of && of->lw)
        rc = level_close(fs, of->lw);
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
    struct pcrfs *fs = fs_of(req);
    uint64_t views = fs->levels + 1 + fs->dynamic;
    struct statvfs sv;

    (void)ino;
    memset(&sv, 0, sizeof(sv));
    sv.f_bsize = PCRFS_BLKSIZE;
    sv.f_frsize = PCRFS_BLKSIZE;
    sv.f_files = views * (pcr_store_nfiles(fs->store) + pcr_store_ndirs(fs->store)) + 5;
    if (fs->tokstore)
        sv.f_files += pcr_store_nfiles(fs->tokstore) + pcr_store_ndirs(fs->tokstore);
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

/* Every operation that would change the tree. With the default "-o ro" the kernel
 * refuses these itself and they never arrive; they are here for mounts made with
 * "-o rw", where without a handler some would fail with ENOSYS instead of EROFS. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;

    (void)fi;
    /* Truncating /.pcrfs/level to 0 before a write (O_TRUNC on a kernel without
     * atomic_o_trunc) is a no-op; every other change is refused. */
    if (is_level_file(fs, ino) && to_set == FUSE_SET_ATTR_SIZE && attr->st_size == 0) {
        if (!may_control(fs, req)) {
            fuse_reply_err(req, EACCES);
        } else if (node_stat(fs, ino, &st) != 0) {
            fuse_reply_err(req, EIO);
        } else {
            fuse_reply_attr(req, &st, 0.0);
        }
        return;
    }
    fuse_reply_err(req, EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    (void)parent, (void)name, (void)mode, (void)rdev;
    fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EROFS);
}

static void op_remove(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    fuse_reply_err(req, EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link, (void)parent, (void)name;
    fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    (void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
    fuse_reply_err(req, EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    (void)ino, (void)newparent, (void)newname;
    fuse_reply_err(req, EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    fuse_reply_err(req, EROFS);
}

/* The nodes that carry user.pcrfs.level: dynamic/ and /.pcrfs/level. */
#define LEVEL_XATTR "user.pcrfs.level"

static bool has_level_xattr(const struct pcrfs *fs, fuse_ino_t ino)
{
    return fs->dynamic &&
           (ino == ino_make(VIEW_DYN, false, PCR_ROOT_DIR) || is_level_file(fs, ino));
}

/* setxattr user.pcrfs.level=K on dynamic/ (or on /.pcrfs/level) sets the level;
 * every other attribute change is refused. */
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    struct pcrfs *fs = fs_of(req);
    unsigned k;

    (void)flags;
    if (has_level_xattr(fs, ino) && strcmp(name, LEVEL_XATTR) == 0) {
        if (!may_control(fs, req)) {
            fuse_reply_err(req, EPERM);
            return;
        }
        k = pcrfs_parse_level(fs, value, size);
        if (!k) {
            fuse_reply_err(req, EINVAL);
            return;
        }
        set_level(fs, k);
        fuse_reply_err(req, 0);
        return;
    }
    fuse_reply_err(req, EROFS);
}

/* Reading attributes. Without -o level=K no node has one, and the first request is
 * answered ENOSYS: the kernel then answers every later getxattr (listxattr) on the
 * mount itself, with EOPNOTSUPP, as if there were no handler (ls -l, cp -a and
 * Python's shutil.copy2 cost no round trip per file). With it, each request reaches
 * the daemon (the kernel has no other way to learn that one node has an attribute):
 * user.pcrfs.level on the two nodes above is the level ("5"), any other user.*
 * name is ENODATA and any other namespace EOPNOTSUPP, which ls(1) takes as "no
 * SELinux labels on this filesystem" and stops asking for. */
static void reply_xattr(fuse_req_t req, const char *val, size_t len, size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct pcrfs *fs = fs_of(req);
    char val[16];
    int n;

    if (!fs->dynamic)
        fuse_reply_err(req, ENOSYS);
    else if (!has_level_xattr(fs, ino) || strcmp(name, LEVEL_XATTR) != 0)
        fuse_reply_err(req, strncmp(name, "user.", 5) == 0 ? ENODATA : EOPNOTSUPP);
    else if ((n = snprintf(val, sizeof(val), "%u", dyn_level(fs))) > 0)
        reply_xattr(req, val, (size_t)n, size);
    else
        fuse_reply_err(req, EIO);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct pcrfs *fs = fs_of(req);

    if (!fs->dynamic)
        fuse_reply_err(req, ENOSYS);
    else if (has_level_xattr(fs, ino))
        reply_xattr(req, LEVEL_XATTR, sizeof(LEVEL_XATTR), size); /* with its NUL */
    else
        reply_xattr(req, "", 0, size);
}

/* Sent only by mounts without default_permissions (the dynamic view's): the modes
 * say it all (everything readable, directories searchable), and the one writable
 * file is /.pcrfs/level, for its owner; writing anything else is EROFS, as on a
 * read-only mount. */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;
    int rc = node_stat(fs, ino, &st);

    if (rc == 0 && (mask & W_OK))
        rc = !is_level_file(fs, ino) ? -EROFS : may_control(fs, req) ? 0 : -EACCES;
    if (rc == 0 && (mask & X_OK) && !(st.st_mode & S_IXUSR))
        rc = -EACCES;
    fuse_reply_err(req, -rc);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino, (void)name;
    fuse_reply_err(req, EROFS);
}

/* getxattr/listxattr: only dynamic mounts have an attribute; elsewhere the first
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
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_remove,
    .rmdir = op_remove,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .access = op_access,
    .create = op_create,
};
