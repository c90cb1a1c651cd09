/* pcrfs — the daemon's own nodes (view 0, inode.h): the mount root, /.pcrfs and its
 * files info, stats, level (-o level=K), codebook.npy, records, and the views'
 * control files (refurb_skipped with -o refurb=R: the files refurb/ leaves out,
 * "PATH<TAB>REASON" lines; src/lib/view/refurb.c).
 *
 * Their bytes: info and codebook.npy are fixed at mount (control.c renders info);
 * stats is a snapshot per lookup (inode.h; the ring below); level is the dynamic
 * view's current level, read and written here. ops.c's handlers pass requests for
 * view 0 on to the functions below (declared in fs.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"
#include "inode.h"

#define LEVEL_XATTR "user.pcrfs.level"

bool pcrfs_is_level_file(const struct pcrfs *fs, uint64_t ino)
{
    return pcr_views_dynamic(fs->views) && ino == ino_make(VIEW_SELF, true, SELF_FILE_LEVEL);
}

bool pcrfs_may_control(const struct pcrfs *fs, fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);

    return ctx && (ctx->uid == 0 || ctx->uid == fs->uid);
}

/* The current level as /.pcrfs/level shows it: "K\n". */
static size_t level_render(const struct pcrfs *fs, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%u\n", pcr_views_level_now(fs->views));

    return n > 0 ? (size_t)n : 0;
}

static void set_level(struct pcrfs *fs, unsigned k)
{
    unsigned old = k;

    if (pcr_views_set_level(fs->views, k, &old) == 0 && old != k && fs->debug)
        fprintf(stderr, "pcrfs: dynamic/: level %u -> %u\n", old, k);
}

/* ---- /.pcrfs/stats snapshots (inode.h) ---------------------------------------------
 * At most PCRFS_MAX_SNAPS alive, in a ring indexed by generation: finding one is an
 * index, not a search, and taking a new one replaces the one taken PCRFS_MAX_SNAPS
 * lookups before it if the kernel still holds that (its node then answers ESTALE).
 * One mutex, held only to swap pointers and copy at most one read's bytes. */

/* Render a snapshot for a new node, with one lookup counted. @return 0 and *ino. */
static int snap_new(struct pcrfs *fs, uint64_t *ino)
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
    free(old);
    *ino = ino_make(VIEW_SELF, true, SELF_FILE_STAT | (sn->gen << SELF_GEN_SHIFT));
    return *ino ? 0 : -EOVERFLOW;
}

/* Under snap_lock: the live snapshot of node @ino, or NULL (forgotten or evicted). */
static struct stat_snap *snap_find(struct pcrfs *fs, uint64_t ino)
{
    uint64_t gen = ino_split(ino).id >> SELF_GEN_SHIFT;
    struct stat_snap *sn = fs->snaps[gen % PCRFS_MAX_SNAPS];

    return sn && sn->gen == gen ? sn : NULL;
}

/* Copy a slice of the snapshot out (@size 0: none), with its length: a FORGET or a
 * new lookup in another worker may free it as soon as the lock is released. */
static int snap_read(struct pcrfs *fs, uint64_t ino, char *buf, size_t size, off_t off,
                     size_t *outlen, size_t *len)
{
    struct stat_snap *sn;
    size_t n = 0;

    pthread_mutex_lock(&fs->snap_lock);
    sn = snap_find(fs, ino);
    if (sn && (uint64_t)off < sn->len && size) {
        n = sn->len - (size_t)off < size ? sn->len - (size_t)off : size;
        memcpy(buf, sn->data + off, n);
    }
    if (sn && len)
        *len = sn->len;
    pthread_mutex_unlock(&fs->snap_lock);
    if (outlen)
        *outlen = n;
    return sn ? 0 : -ESTALE;
}

void pcrfs_self_forget(struct pcrfs *fs, uint64_t ino, uint64_t nlookup)
{
    struct stat_snap *sn;

    if (!ino_is_stats(ino))
        return; /* every other node is stateless (inode.h) */
    pthread_mutex_lock(&fs->snap_lock);
    sn = snap_find(fs, ino);
    if (sn && sn->nlookup > nlookup) {
        sn->nlookup -= nlookup;
        sn = NULL;
    } else if (sn) {
        fs->snaps[sn->gen % PCRFS_MAX_SNAPS] = NULL;
    }
    pthread_mutex_unlock(&fs->snap_lock);
    free(sn);
}

void pcrfs_self_free(struct pcrfs *fs)
{
    size_t i;

    for (i = 0; i < PCRFS_MAX_SNAPS; i++) {
        free(fs->snaps[i]);
        fs->snaps[i] = NULL;
    }
    free(fs->records);
    fs->records = NULL;
}

/* ---- /.pcrfs/records -----------------------------------------------------------------
 * The image tree's files grouped by record, for samplers that read record by record
 * (the Python module's RecordSampler): a line "FIRST COUNT RECORD" per run of file
 * ids FIRST..FIRST+COUNT-1 in one record, in id order, after a comment line. A
 * file's id is its inode number's low 55 bits in every scan view (inode.h). */

struct records_buf {
    char *p;
    size_t len, cap;
};

static int records_line(void *ctx, const struct pcr_record_run *run)
{
    struct records_buf *b = ctx;
    char line[80];
    int n = snprintf(line, sizeof(line), "%llu %llu %llu\n", (unsigned long long)run->first,
                     (unsigned long long)run->count, (unsigned long long)run->record);

    if (b->len + (size_t)n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        char *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, line, (size_t)n);
    b->len += (size_t)n;
    return 0;
}

/* The rendered file, made on first use. @return 0, -ENOMEM, -EIO. */
static int records_get(struct pcrfs *fs, const char **data, size_t *len)
{
    static const char head[] = "# first count record (pcrfs(1), /.pcrfs/records)\n";
    int rc = 0;

    pthread_mutex_lock(&fs->records_lock);
    if (!fs->records) {
        struct records_buf b = {.p = malloc(4096), .len = sizeof(head) - 1, .cap = 4096};
        rc = b.p ? 0 : -ENOMEM;
        if (rc == 0) {
            memcpy(b.p, head, sizeof(head) - 1);
            rc = pcr_store_record_runs(fs->store, records_line, &b);
        }
        if (rc == 0) {
            fs->records = b.p;
            fs->records_len = b.len;
        } else {
            free(b.p); /* the library logged why the index could not be read */
        }
    }
    *data = fs->records;
    *len = fs->records_len;
    pthread_mutex_unlock(&fs->records_lock);
    return rc < 0 ? (rc == -ENOMEM ? rc : -EIO) : 0;
}

/* ---- names and attributes ------------------------------------------------------------ */

/* /.pcrfs in listing order; "level" only with -o level=K, "codebook.npy" only when
 * the store has one; then the control files of the views in use (pcr_views_ctl(),
 * ids SELF_FILE_VIEW_CTL on). */
static const struct {
    const char *name;
    uint64_t id;
} ctl_files[] = {
    {"info", SELF_FILE_INFO},
    {"stats", SELF_FILE_STAT},
    {"level", SELF_FILE_LEVEL},
    {"codebook.npy", SELF_FILE_CODEBOOK},
    {"records", SELF_FILE_RECORDS},
};
#define NCTL (sizeof(ctl_files) / sizeof(ctl_files[0]))

static bool ctl_present(const struct pcrfs *fs, uint64_t id)
{
    return (id != SELF_FILE_LEVEL || pcr_views_dynamic(fs->views)) &&
           (id != SELF_FILE_CODEBOOK || fs->codebook);
}

/* A view's control file: id SELF_FILE_VIEW_CTL + its position. @return 0 and its
 * bytes; -ENOENT none such. */
static int view_ctl(const struct pcrfs *fs, uint64_t id, const char **name, const char **data,
                    size_t *len)
{
    if (id < SELF_FILE_VIEW_CTL || id - SELF_FILE_VIEW_CTL >= PCR_VIEWS_ROOT_MAX)
        return -ENOENT;
    return pcr_views_ctl(fs->views, (unsigned)(id - SELF_FILE_VIEW_CTL), name, data, len);
}

int pcrfs_self_lookup(struct pcrfs *fs, uint64_t dir, const char *name, uint64_t *ino)
{
    size_t i;

    *ino = 0;
    if (dir == SELF_DIR_ROOT) {
        const struct pcr_view *v = pcr_views_root_lookup(fs->views, name);

        if (strcmp(name, ".pcrfs") == 0)
            *ino = ino_make(VIEW_SELF, false, SELF_DIR_CTL);
        else if (v)
            *ino = ino_make(v->number, false, PCR_ROOT_DIR);
        return 0;
    }
    /* a hint, not a name: the records read next (pcr_store_prefetch_text()), taken
     * by a lookup because the mount is read-only (no write reaches the daemon);
     * answered as a miss that the kernel does not keep (ops.c) */
    if (dir == SELF_DIR_PREFETCH)
        return pcr_store_prefetch_text(fs->store, name, strlen(name));
    if (dir != SELF_DIR_CTL)
        return -ENOENT;
    if (strcmp(name, "prefetch") == 0)
        *ino = ino_make(VIEW_SELF, false, SELF_DIR_PREFETCH);
    for (uint64_t id = SELF_FILE_VIEW_CTL;; id++) {
        const char *cname, *data;
        size_t len;

        if (view_ctl(fs, id, &cname, &data, &len) != 0)
            break;
        if (strcmp(name, cname) == 0)
            *ino = ino_make(VIEW_SELF, true, id);
    }
    for (i = 0; i < NCTL; i++) {
        if (strcmp(name, ctl_files[i].name) != 0 || !ctl_present(fs, ctl_files[i].id))
            continue;
        if (ctl_files[i].id == SELF_FILE_STAT)
            return snap_new(fs, ino); /* op_lookup forgets it if the reply fails */
        *ino = ino_make(VIEW_SELF, true, ctl_files[i].id);
    }
    return 0;
}

int pcrfs_self_dirent(const struct pcrfs *fs, uint64_t dir, uint64_t pos, const char **name,
                      uint64_t *ino)
{
    const struct pcr_view *v;
    const char *data;
    size_t i, len;

    if (dir == SELF_DIR_ROOT) {
        if ((v = pcr_views_root(fs->views, pos > UINT_MAX ? UINT_MAX : (unsigned)pos)) != NULL) {
            *name = v->name;
            *ino = ino_make(v->number, false, PCR_ROOT_DIR);
            return 0;
        }
        if (pos != fs->views->nroot)
            return -ENOENT;
        *name = ".pcrfs";
        *ino = ino_make(VIEW_SELF, false, SELF_DIR_CTL);
        return 0;
    }
    if (dir != SELF_DIR_CTL)
        return -ENOENT; /* prefetch/ lists nothing */
    for (i = 0; i < NCTL; i++) {
        if (!ctl_present(fs, ctl_files[i].id))
            continue;
        if (pos-- == 0) {
            *name = ctl_files[i].name;
            /* stats: gen 0, a st_ino and no node (ops.c lists it without one) */
            *ino = ino_make(VIEW_SELF, true, ctl_files[i].id);
            return 0;
        }
    }
    if (pos-- == 0) {
        *name = "prefetch";
        *ino = ino_make(VIEW_SELF, false, SELF_DIR_PREFETCH);
        return 0;
    }
    if (pos >= PCR_VIEWS_ROOT_MAX || view_ctl(fs, SELF_FILE_VIEW_CTL + pos, name, &data, &len))
        return -ENOENT;
    *ino = ino_make(VIEW_SELF, true, SELF_FILE_VIEW_CTL + pos);
    return 0;
}

int pcrfs_self_stat(struct pcrfs *fs, uint64_t ino, struct stat *st)
{
    struct ino_parts p = ino_split(ino);
    const char *name, *data;
    char buf[16];
    size_t len;
    int rc;

    if (!p.is_file && p.id == SELF_DIR_ROOT) {
        pcrfs_stat_dir(fs, st, ino, fs->views->nroot + 1); /* + .pcrfs */
    } else if (!p.is_file && p.id == SELF_DIR_CTL) {
        pcrfs_stat_dir(fs, st, ino, 1); /* prefetch/ */
    } else if (!p.is_file && p.id == SELF_DIR_PREFETCH) {
        pcrfs_stat_dir(fs, st, ino, 0);
        st->st_mode = S_IFDIR | 0500; /* hints from the mounting user (and root) */
    } else if (p.is_file && p.id == SELF_FILE_INFO) {
        pcrfs_stat_file(fs, st, ino, fs->info_len);
    } else if (p.is_file && p.id == SELF_FILE_CODEBOOK && fs->codebook) {
        pcrfs_stat_file(fs, st, ino, fs->codebook_len);
    } else if (p.is_file && p.id == SELF_FILE_RECORDS) {
        const char *data;
        rc = records_get(fs, &data, &len);
        if (rc)
            return rc;
        pcrfs_stat_file(fs, st, ino, len);
    } else if (p.is_file && view_ctl(fs, p.id, &name, &data, &len) == 0) {
        pcrfs_stat_file(fs, st, ino, len);
    } else if (ino_is_stats(ino)) {
        rc = snap_read(fs, ino, NULL, 0, 0, NULL, &len);
        if (rc)
            return rc;
        /* st_ino is the file's, not the node's: one file, however many snapshots */
        pcrfs_stat_file(fs, st, ino_make(VIEW_SELF, true, SELF_FILE_STAT), len);
    } else if (pcrfs_is_level_file(fs, ino)) {
        pcrfs_stat_file(fs, st, ino, level_render(fs, buf, sizeof(buf)));
        st->st_mode = S_IFREG | 0644; /* the mounting user may write it */
    } else {
        return -ENOENT;
    }
    return 0;
}

bool pcrfs_self_immutable(const struct pcrfs *fs, uint64_t ino)
{
    struct ino_parts p = ino_split(ino);
    const char *name, *data;
    size_t len;

    return p.view == VIEW_SELF && p.is_file &&
           (p.id == SELF_FILE_INFO || (p.id == SELF_FILE_CODEBOOK && fs->codebook) ||
            p.id == SELF_FILE_RECORDS || view_ctl(fs, p.id, &name, &data, &len) == 0 ||
            ino_is_stats(ino));
}

static void slice(const char *data, size_t len, char *buf, size_t size, off_t off, size_t *outlen)
{
    size_t n = 0;

    if ((uint64_t)off < len) {
        n = len - (size_t)off < size ? len - (size_t)off : size;
        memcpy(buf, data + off, n);
    }
    *outlen = n;
}

int pcrfs_self_read(struct pcrfs *fs, uint64_t ino, char *buf, size_t size, off_t off,
                    size_t *outlen)
{
    struct ino_parts p = ino_split(ino);
    const char *name, *data;
    size_t len;
    char now[16];

    if (p.view == VIEW_SELF && p.is_file && p.id == SELF_FILE_INFO)
        slice(fs->info, fs->info_len, buf, size, off, outlen);
    else if (p.view == VIEW_SELF && p.is_file && p.id == SELF_FILE_CODEBOOK && fs->codebook)
        slice(fs->codebook, fs->codebook_len, buf, size, off, outlen);
    else if (p.view == VIEW_SELF && p.is_file && p.id == SELF_FILE_RECORDS) {
        int rc = records_get(fs, &data, &len);
        if (rc)
            return rc;
        slice(data, len, buf, size, off, outlen);
    }
    else if (p.view == VIEW_SELF && p.is_file && view_ctl(fs, p.id, &name, &data, &len) == 0)
        slice(data, len, buf, size, off, outlen);
    else if (pcrfs_is_level_file(fs, ino))
        slice(now, level_render(fs, now, sizeof(now)), buf, size, off, outlen);
    else if (ino_is_stats(ino))
        return snap_read(fs, ino, buf, size, off, outlen, NULL);
    else
        return -EBADF;
    return 0;
}

/* ---- writing the level -------------------------------------------------------------
 *
 * One rule for every write (pcrfs(1), CONTROL FILES): a value ("K" or "full"),
 * optionally followed by one newline, and nothing else: no NUL, no white space,
 * no second line. A write is checked whole before anything is applied, so it is
 * applied whole or not at all: "8\n\n\n" or "7\nxyz\n" fail with EINVAL and the
 * level stays as it was.
 * The bytes written through one open file since the last applied value are one
 * stream, whatever the offsets (O_APPEND, or a second write(2) after a partial
 * value): a value is applied when its newline arrives (`echo 5 >`: at the write),
 * or, without one, when the file is closed: close(2) sends FLUSH and waits for it,
 * so `printf 10 >` and "1" then "0" in two writes both give level 10 before close
 * returns. A write that cannot be (part of) a value fails with EINVAL at once and
 * drops what was pending; a value still incomplete at close fails close. */

/* The value in a write (or an xattr value): its length without the one trailing
 * newline allowed, or -1 if it holds a NUL or a newline anywhere else. */
static ssize_t level_value_len(const char *buf, size_t size)
{
    size_t n = size > 0 && buf[size - 1] == '\n' ? size - 1 : size;

    if (memchr(buf, '\n', n) || memchr(buf, '\0', n))
        return -1;
    return (ssize_t)n;
}

/* Can @s still grow into a level? */
static bool level_prefix(const struct pcrfs *fs, const char *s, size_t len)
{
    unsigned k = 0;
    size_t i;

    if (len <= 4 && memcmp(s, "full", len) == 0)
        return true;
    if (len > 3)
        return false;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        k = k * 10 + (unsigned)(s[i] - '0');
    }
    return k <= fs->levels;
}

/* Apply the pending value and forget it. Under open_lock. */
static int level_apply(struct pcrfs *fs, struct level_write *lw)
{
    unsigned k = pcr_view_parse_level(fs->levels, lw->buf, lw->len);

    lw->len = 0;
    if (!k)
        return -EINVAL;
    set_level(fs, k);
    return 0;
}

int pcrfs_level_write(struct pcrfs *fs, struct level_write *lw, const char *buf, size_t size)
{
    ssize_t n = level_value_len(buf, size);
    int rc = 0;

    pthread_mutex_lock(&fs->open_lock);
    if (n < 0 || (size_t)n > sizeof(lw->buf) - lw->len) {
        lw->len = 0;
        rc = -EINVAL;
    } else {
        memcpy(lw->buf + lw->len, buf, (size_t)n);
        lw->len += (size_t)n;
        if ((size_t)n < size) /* the newline: the value is complete */
            rc = level_apply(fs, lw);
        else if (!level_prefix(fs, lw->buf, lw->len)) {
            lw->len = 0;
            rc = -EINVAL;
        }
    }
    pthread_mutex_unlock(&fs->open_lock);
    return rc;
}

int pcrfs_level_close(struct pcrfs *fs, struct level_write *lw)
{
    int rc = 0;

    pthread_mutex_lock(&fs->open_lock);
    if (lw->len > 0)
        rc = level_apply(fs, lw);
    lw->len = 0;
    pthread_mutex_unlock(&fs->open_lock);
    return rc;
}

/* ---- user.pcrfs.level ----------------------------------------------------------------
 *
 * On dynamic/ and /.pcrfs/level: setxattr sets the level, getxattr reads it ("5"),
 * listxattr lists it. Without -o level=K no node has an attribute, and the first
 * getxattr (listxattr) is answered ENOSYS: the kernel then answers every later one
 * on the mount itself, with EOPNOTSUPP, as if there were no handler (ls -l, cp -a
 * and Python's shutil.copy2 cost no round trip per file). With it, each request
 * reaches the daemon (the kernel has no other way to learn that one node has an
 * attribute): any other user.* name is ENODATA and any other namespace EOPNOTSUPP,
 * which ls(1) takes as "no SELinux labels or ACLs here" and stops asking for. */

static bool has_level_xattr(const struct pcrfs *fs, uint64_t ino)
{
    return pcr_views_dynamic(fs->views) &&
           (ino == ino_make(PCR_VIEW_DYN, false, PCR_ROOT_DIR) || pcrfs_is_level_file(fs, ino));
}

int pcrfs_level_setxattr(struct pcrfs *fs, fuse_req_t req, uint64_t ino, const char *name,
                         const char *value, size_t size)
{
    ssize_t n;
    unsigned k;

    if (!has_level_xattr(fs, ino) || strcmp(name, LEVEL_XATTR) != 0)
        return -EROFS;
    if (!pcrfs_may_control(fs, req))
        return -EPERM;
    /* the same rule as a write to /.pcrfs/level: one value, one trailing newline */
    n = level_value_len(value, size);
    k = n < 0 ? 0 : pcr_view_parse_level(fs->levels, value, (size_t)n);
    if (!k)
        return -EINVAL;
    set_level(fs, k);
    return 0;
}

int pcrfs_level_getxattr(struct pcrfs *fs, uint64_t ino, const char *name, char *buf, size_t len,
                         size_t *outlen)
{
    int n;

    if (!pcr_views_dynamic(fs->views))
        return -ENOSYS;
    if (!has_level_xattr(fs, ino) || strcmp(name, LEVEL_XATTR) != 0)
        return strncmp(name, "user.", 5) == 0 ? -ENODATA : -EOPNOTSUPP;
    n = snprintf(buf, len, "%u", pcr_views_level_now(fs->views));
    if (n <= 0 || (size_t)n >= len)
        return -EIO;
    *outlen = (size_t)n;
    return 0;
}

int pcrfs_level_listxattr(struct pcrfs *fs, uint64_t ino, const char **list, size_t *len)
{
    if (!pcr_views_dynamic(fs->views))
        return -ENOSYS;
    *list = has_level_xattr(fs, ino) ? LEVEL_XATTR : "";
    *len = has_level_xattr(fs, ino) ? sizeof(LEVEL_XATTR) : 0; /* with its NUL */
    return 0;
}
