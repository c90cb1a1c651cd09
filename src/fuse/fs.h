/* pcrfs — the FUSE driver's shared state (not installed).
 *
 * main.c parses the command line, opens the store and its views (the library's
 * src/lib/view/view.h) and runs the session; ops.c holds the low-level handlers;
 * pcrfsdir.c the daemon's own nodes (the root's .pcrfs and its files); control.c
 * the /.pcrfs files' JSON around the library's. Everything below is written once
 * before the session starts and only read afterwards, except what the views keep
 * (counters, the dynamic level, mix/'s passes) and what the locks named below guard.
 */
#ifndef PCRFS_FUSE_FS_H
#define PCRFS_FUSE_FS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <fuse_lowlevel.h>

#include "inode.h"
#include "pcrfs/store.h"
#include "view/view.h"

/* A snapshot of /.pcrfs/stats, taken when the name was looked up and kept while the
 * kernel holds its node, or until PCRFS_MAX_SNAPS newer ones have been taken
 * (inode.h). */
struct stat_snap {
    uint64_t gen;     /* its node's generation (inode.h) */
    uint64_t nlookup; /* lookups the kernel has not forgotten yet */
    size_t len;
    char data[]; /* len bytes */
};

/* The most snapshots alive at once: each held descriptor of /.pcrfs/stats pins one,
 * so without a bound any user of an allow_other mount could grow the daemon by a few
 * kB per descriptor. 256 x (1.5-18 kB: stats for 1..64 levels, counters of up to
 * 20 digits) is at most 4.6 MB, about 0.5 MB for a 10-level store. */
#define PCRFS_MAX_SNAPS 256

/* Bytes written to /.pcrfs/level through one open file since its last newline, not
 * yet applied (pcrfsdir.c, "Writing the level"). */
struct level_write {
    size_t len;
    char buf[16];
};

/* An open file (fi->fh) when the kernel sends OPEN: a view's file with the state its
 * open handler returned, or /.pcrfs/level open for writing. Listed on
 * pcrfs.open_files; see ops.c. */
struct open_file {
    struct open_file *prev, *next; /* under pcrfs.open_lock */
    const struct pcr_view *v;      /* NULL for /.pcrfs/level */
    void *state;                   /* v->ops->open()'s */
    struct level_write *lw;        /* /.pcrfs/level open for writing; open_lock */
};

struct pcrfs {
    struct pcr_store *store;
    struct pcr_store *tokstore; /* the token tree (tokens/), NULL if the store has none */
    const void *codebook;       /* /.pcrfs/codebook.npy (owned by store), or NULL */
    size_t codebook_len;
    const char *store_path; /* absolute, for /.pcrfs/info */
    unsigned levels;        /* L */
    double timeout;         /* entry, attr and negative-entry timeout, s */
    bool keep_cache;        /* open files with FOPEN_KEEP_CACHE (default) */
    bool want_no_open;      /* let the kernel skip OPEN if it can (ops.c, op_init) */
    atomic_bool no_open;    /* it can: every OPEN is answered ENOSYS, reads have no fh */
    atomic_uint_fast64_t last_err_ino; /* no_open: the last inode whose READ failed */
    bool debug;             /* -d: debug messages */
    uint64_t bwlimit;       /* bytes/s from records, 0 = none (-o bwlimit=) */
    uid_t uid;              /* every node is owned by the mounting user */
    gid_t gid;
    int64_t mtime;                         /* every node's times: the store's build time */
    int64_t started;                       /* CLOCK_MONOTONIC seconds at mount, for stats */
    struct fuse_conn_info_opts *conn_opts; /* -o max_readahead=... etc. (libfuse's) */
    bool readdirplus_opt;                  /* -o readdirplus= given: conn_opts decide */
    /* the kernel's readahead for the mount's files, kB (0: leave it; bdi.c), set by the
     * first LOOKUP or GETATTR (ops.c, first_request) */
    unsigned read_ahead_kb;
    bool read_ahead_given;  /* -o read_ahead_kb= given: say when it cannot be set */
    atomic_bool read_ahead_set;
    const char *mountpoint; /* absolute */
    char *info;                            /* /.pcrfs/info, rendered once */
    size_t info_len;
    struct pcr_views *views; /* the root's view directories (the library's) */
    pthread_mutex_t open_lock;                   /* guards open_files */
    struct open_file open_files;                 /* list head (ops.c) */
    /* /.pcrfs/records, rendered on first use (one pass over the index's file table)
     * and kept: the store does not change while mounted. */
    pthread_mutex_t records_lock;
    char *records;
    size_t records_len;
    pthread_mutex_t snap_lock;                   /* guards snaps and snap_gen */
    struct stat_snap *snaps[PCRFS_MAX_SNAPS];    /* generation g lives in [g % MAX] */
    uint64_t snap_gen;                           /* the last generation handed out */
};

/* bdi.c: set the kernel's readahead for the files of the fuse mount at @mountpoint
 * (absolute) to @kb. @return 0; -ENOENT no such mount; -EACCES etc. (not root). */
int pcrfs_set_read_ahead(const char *mountpoint, unsigned kb);

/* help.c: the usage line (to @out) and --help (to stdout). */
void pcrfs_usage(FILE *out);
void pcrfs_help(void);

/* control.c */

/* Render /.pcrfs/info into fs->info. @return 0 or -ENOMEM. */
int pcrfs_info_render(struct pcrfs *fs);
/* Render /.pcrfs/stats now into a malloc()ed buffer. @return 0 or -ENOMEM. */
int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len);

/* The view of node @p, or NULL if @p is not a node of a store view. */
static inline const struct pcr_view *view_of(const struct pcrfs *fs, struct ino_parts p)
{
    return pcr_views_get(fs->views, p.view, p.is_file);
}

static inline void pcrfs_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* pcrfsdir.c: the nodes of view 0 (inode.h), which the handlers in ops.c pass on.
 * Each returns 0 or a negative errno, like ops.c's workers. */
bool pcrfs_is_level_file(const struct pcrfs *fs, uint64_t ino);
/* The mounting user or root (a dynamic mount has no default_permissions). */
bool pcrfs_may_control(const struct pcrfs *fs, fuse_req_t req);
/* @name in directory @dir (SELF_DIR_ROOT: the views and .pcrfs; SELF_DIR_CTL).
 * *ino 0 if absent; a stats snapshot is taken and counted as looked up. */
int pcrfs_self_lookup(struct pcrfs *fs, uint64_t dir, const char *name, uint64_t *ino);
int pcrfs_self_stat(struct pcrfs *fs, uint64_t ino, struct stat *st);
/* Entry @pos (from 0, after "." and "..") of directory @dir. -ENOENT past the end. */
int pcrfs_self_dirent(const struct pcrfs *fs, uint64_t dir, uint64_t pos, const char **name,
                      uint64_t *ino);
/* Is @ino a file of view 0 that never changes (info, codebook.npy, a stats node)? */
bool pcrfs_self_immutable(const struct pcrfs *fs, uint64_t ino);
/* A slice of a file of view 0, in @buf (@size bytes, the thread's buffer). */
int pcrfs_self_read(struct pcrfs *fs, uint64_t ino, char *buf, size_t size, off_t off,
                    size_t *outlen);
/* The stats node @ino was forgotten @nlookup times. */
void pcrfs_self_forget(struct pcrfs *fs, uint64_t ino, uint64_t nlookup);
void pcrfs_self_free(struct pcrfs *fs);
/* /.pcrfs/level open for writing: a write, and close (FLUSH or RELEASE). */
int pcrfs_level_write(struct pcrfs *fs, struct level_write *lw, const char *buf, size_t size);
int pcrfs_level_close(struct pcrfs *fs, struct level_write *lw);
/* user.pcrfs.level: set (@return -EROFS where there is none), get ("5", -ENODATA),
 * list. With no such node on the mount, -ENOSYS. */
int pcrfs_level_setxattr(struct pcrfs *fs, fuse_req_t req, uint64_t ino, const char *name,
                         const char *value, size_t size);
int pcrfs_level_getxattr(struct pcrfs *fs, uint64_t ino, const char *name, char *buf,
                         size_t len, size_t *outlen);
int pcrfs_level_listxattr(struct pcrfs *fs, uint64_t ino, const char **list, size_t *len);

/* ops.c */
extern const struct fuse_lowlevel_ops pcrfs_ops;
/* The attributes of any node, as GETATTR answers them. */
int pcrfs_node_stat(struct pcrfs *fs, fuse_ino_t ino, struct stat *st);
/* tlsbuf.c: the calling thread's buffer, at least @size bytes. NULL: out of memory. */
char *pcrfs_tls_buf(size_t size);
/* attr.c: attributes of a directory with @nsubdirs subdirectories, of a file of @size
 * bytes (st_blksize PCRFS_BLKSIZE: ops.c says why). */
#define PCRFS_BLKSIZE (1u << 20)
void pcrfs_stat_dir(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t nsubdirs);
void pcrfs_stat_file(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t size);
/* tlsbuf.c: free the calling thread's buffer (libfuse's workers free theirs on exit; the
 * main thread of a single-threaded loop calls this). */
void pcrfs_ops_thread_done(void);
/* Close the files the kernel left open (its RELEASE may not arrive before the session
 * ends) and free the stats snapshots it did not forget. Only once the session loop
 * has returned. */
void pcrfs_ops_close_all(struct pcrfs *fs);

/* writes.c: the handlers of requests that would write (pcrfs_ops lists them). */
void pcrfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                      struct fuse_file_info *fi);
void pcrfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void pcrfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void pcrfs_op_remove(fuse_req_t req, fuse_ino_t parent, const char *name);
void pcrfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void pcrfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                     const char *newname, unsigned int flags);
void pcrfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void pcrfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     struct fuse_file_info *fi);
void pcrfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                       size_t size, int flags);
void pcrfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void pcrfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void pcrfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
void pcrfs_op_access(fuse_req_t req, fuse_ino_t ino, int mask);

#endif
