/* pcrfs — the FUSE driver's shared state (not installed).
 *
 * The driver is a client of the library's public API (include/pcrfs/pcrfs.h, the
 * only header of the library it includes): the tree, its names, sizes, bytes,
 * control files and attributes are the library's nodes (pcrfs(3), SERVING THE
 * TREE). What it keeps is what only a kernel needs: the inode numbers and the
 * stats snapshots (inode.h), what the kernel may cache (ops.c), who may write the
 * control files (control.c), and the command line and the daemon's life (main.c,
 * daemon.c). Calls run one way, top down: main.c -> ops.c -> writes.c ->
 * control.c, attr.c -> inode.c, with tlsbuf.c, bdi.c, daemon.c, mountcheck.c and
 * help.c as leaves. Everything below is written once before the session starts and
 * only read afterwards, except what the locks named below guard.
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
#include "pcrfs/pcrfs.h"

/* An open file (fi->fh) when the kernel sends OPEN: the library's handle (a view's
 * file with the state its open chose, or a control file, open for writing or not).
 * Listed on pcrfs.open_files; see ops.c. */
struct open_file {
    struct open_file *prev, *next; /* under pcrfs.open_lock */
    pcrfs_file *f;
    unsigned flags; /* pcrfs_file_flags() */
};

/* -o readdirplus=: not given (plain READDIR), no, yes, auto. */
enum { RDP_UNSET = -1, RDP_NO, RDP_YES, RDP_AUTO };

/* dirahead.c: a directory's entries read ahead of its LOOKUPs (-o dirahead=). */
struct da_dir;
#define PCRFS_DA_QUEUE 1024
struct dirahead {
    bool on;              /* set before the session starts */
    _Atomic pid_t tid;    /* the listing thread's, once it runs (ops.c tells its requests) */
    pthread_mutex_t lock; /* everything below but the counters */
    pthread_cond_t cond;  /* queue not empty, or stop */
    struct da_dir **tab;  /* directories reached by a lookup, by inode number */
    size_t cap, n;
    unsigned char root_state;
    fuse_ino_t queue[PCRFS_DA_QUEUE]; /* directories waiting to be listed */
    unsigned qhead, qlen;
    pthread_t thread;
    bool started, stop;
    bool no_clone; /* open_tree(2) refused: list through the mount's path (dirahead.c) */
    _Atomic uint64_t listed, entries, failed; /* for /.pcrfs/stats */
};

/* push.c: files handed to the kernel's page cache before they are read (-o push=). */
struct push {
    bool on;              /* set before the session starts */
    pthread_mutex_t lock; /* started, thread; the condition's */
    pthread_cond_t cond;  /* kicked, or stop */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool kicked;                             /* a reader opened a file since */
    _Atomic uint64_t files, bytes, unknown, failed; /* for /.pcrfs/stats */
};

struct pcrfs {
    pcrfs_store *store;
    unsigned features;   /* pcrfs_features() */
    double timeout;      /* entry, attr and negative-entry timeout, s */
    bool keep_cache;     /* open files with FOPEN_KEEP_CACHE (default) */
    bool want_no_open;   /* let the kernel skip OPEN if it can (ops.c, op_init) */
    atomic_bool no_open; /* it can: every OPEN is answered ENOSYS, reads have no fh */
    bool debug;          /* -d: debug messages */
    uid_t uid;           /* every node is owned by the mounting user */
    gid_t gid;
    int64_t mtime;                         /* every node's times: the store's build time */
    int64_t started;                       /* CLOCK_MONOTONIC seconds at mount, for stats */
    struct fuse_conn_info_opts *conn_opts; /* -o max_readahead=... etc. (libfuse's) */
    /* the kernel's readahead for the mount's files, kB (0: leave it; bdi.c), set by the
     * first LOOKUP or GETATTR (ops.c, first_request) */
    unsigned read_ahead_kb;
    bool read_ahead_given; /* -o read_ahead_kb= given: say when it cannot be set */
    atomic_bool read_ahead_set;
    const char *mountpoint;      /* absolute */
    pthread_mutex_t open_lock;   /* guards open_files */
    struct open_file open_files; /* list head (ops.c) */
    struct snaps snaps;          /* /.pcrfs/stats snapshots (inode.h) */
    int readdirplus;             /* -o readdirplus=: RDP_* (given: conn_opts decide) */
    struct dirahead dirahead;    /* dirahead.c */
    struct push push;            /* push.c */
    struct fuse_session *se;     /* set before the session is mounted */
};

/* dirahead.c: init before the session (@on: -o dirahead=); the lookup handler notes
 * each directory it finds (@name in @parent) and each directory a file was found in;
 * ops.c answers the lister's requests with attributes; stop after
 * fuse_session_unmount() (which fails a request the thread still waits for), before
 * the store is closed. */
void pcrfs_dirahead_init(struct pcrfs *fs, bool on);
void pcrfs_dirahead_note_dir(struct pcrfs *fs, fuse_ino_t parent, const char *name, fuse_ino_t ino);
void pcrfs_dirahead_note_file(struct pcrfs *fs, fuse_ino_t parent);
bool pcrfs_dirahead_is_lister(struct pcrfs *fs, fuse_req_t req);
void pcrfs_dirahead_stop(struct pcrfs *fs);

/* push.c: init before the session (@on: -o push=); a reader's READ at offset 0
 * kicks the thread (which starts at the first); stop after fuse_session_unmount(),
 * before the store is closed. */
void pcrfs_push_init(struct pcrfs *fs, bool on);
void pcrfs_push_kick(struct pcrfs *fs);
void pcrfs_push_stop(struct pcrfs *fs);

/* bdi.c: set the kernel's readahead for the files of the fuse mount at @mountpoint
 * (absolute) to @kb. @return 0; -ENOENT no such mount; -EACCES etc. (not root). */
int pcrfs_set_read_ahead(const char *mountpoint, unsigned kb);

/* help.c: the usage line (to @out) and --help (to stdout). */
void pcrfs_usage(FILE *out);
void pcrfs_help(void);

/* control.c: /.pcrfs/stats as the daemon shows it (the library's, with the
 * daemon's uptime and no_open first), a new snapshot of it as a lookup hands it
 * out (*@ino), and whether the request comes from the mounting user or root (a
 * dynamic mount has no default_permissions). */
int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len);
int pcrfs_stats_snap(struct pcrfs *fs, uint64_t *ino);
bool pcrfs_may_control(const struct pcrfs *fs, fuse_req_t req);

/* ops.c */
extern const struct fuse_lowlevel_ops pcrfs_ops;
/* tlsbuf.c: the calling thread's buffer, at least @size bytes. NULL: out of memory. */
char *pcrfs_tls_buf(size_t size);
/* attr.c: attributes of a directory with @nsubdirs subdirectories, of a file of @size
 * bytes (st_blksize PCRFS_BLKSIZE: ops.c says why). */
#define PCRFS_BLKSIZE (1u << 20)
void pcrfs_stat_dir(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t nsubdirs);
void pcrfs_stat_file(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t size);
/* attr.c: the attributes of any inode, as GETATTR answers them, and its node's flags
 * (PCRFS_NODE_*; NULL: not wanted). */
int pcrfs_node_attr(struct pcrfs *fs, fuse_ino_t ino, struct stat *st, unsigned *flags);
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
