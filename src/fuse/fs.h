/* pcrfs — the FUSE driver's shared state (not installed).
 *
 * main.c parses the command line, opens the store and runs the session; ops.c holds
 * the low-level handlers; control.c renders the /.pcrfs files. Everything below is
 * written once before the session starts and only read afterwards, except the
 * per-view counters, which are relaxed atomics.
 */
#ifndef PCRFS_FUSE_FS_H
#define PCRFS_FUSE_FS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/types.h>
#include <fuse_lowlevel.h>

#include "pcrfs/store.h"

/* Views are numbered 1..L (scanK) and L+1 (full); see inode.h. Counters have one
 * more slot, L+2, for dynamic/ (whose inodes use views VIEW_DYN + K). */
#define PCRFS_MAX_VIEWS (PCR_MAX_LEVELS + 3)

/* Counters kept by the driver, per view: the library counts per level and cannot
 * tell full/ from scanL/, which serve the same level. */
struct view_counters {
    atomic_uint_fast64_t opens;  /* successful opens; with no_open, READs at offset 0 */
    atomic_uint_fast64_t reads;  /* READ requests answered with data or EOF */
    atomic_uint_fast64_t bytes;  /* bytes returned to the kernel */
    atomic_uint_fast64_t errors; /* opens and reads that failed (EIO) */
};

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
 * yet applied (ops.c, "Writing the level"). */
struct level_write {
    size_t len;
    char buf[16];
};

/* An open file (fi->fh) when the kernel sends OPEN: the library's handle for a view's
 * file. Listed on pcrfs.open_files; see ops.c. */
struct open_file {
    struct open_file *prev, *next; /* under pcrfs.open_lock */
    struct pcr_handle *h;
    struct level_write *lw; /* /.pcrfs/level open for writing (h is NULL); open_lock */
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
    char *info;                            /* /.pcrfs/info, rendered once */
    size_t info_len;
    /* The dynamic view (-o level=K; see ops.c). dynamic is written once at mount;
     * level_now is the level dynamic/ serves to new lookups, changed by a write to
     * /.pcrfs/level or setxattr user.pcrfs.level; switches counts the changes. */
    bool dynamic;
    atomic_uint level_now;
    atomic_uint_fast64_t switches;
    struct view_counters views[PCRFS_MAX_VIEWS]; /* [1..L+1], [L+2] dynamic; [0] unused */
    struct view_counters tok_view;               /* tokens/ (VIEW_TOKENS) */
    pthread_mutex_t open_lock;                   /* guards open_files */
    struct open_file open_files;                 /* list head (ops.c) */
    pthread_mutex_t snap_lock;                   /* guards snaps and snap_gen */
    struct stat_snap *snaps[PCRFS_MAX_SNAPS];    /* generation g lives in [g % MAX] */
    uint64_t snap_gen;                           /* the last generation handed out */
};

/* control.c */

/* Render /.pcrfs/info into fs->info. @return 0 or -ENOMEM. */
int pcrfs_info_render(struct pcrfs *fs);
/* Render a snapshot of /.pcrfs/stats into a malloc()ed buffer.
 * @return 0 and *out / *len; -ENOMEM. */
int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len);
/* Parse a level as /.pcrfs/level, -o level= and user.pcrfs.level take it: "K"
 * (1..L, decimal, no sign) or "full", optionally followed by white space (echo's
 * newline). @return the level, or 0 if @s is not one. */
unsigned pcrfs_parse_level(const struct pcrfs *fs, const char *s, size_t len);

/* ops.c */
extern const struct fuse_lowlevel_ops pcrfs_ops;
/* Free the calling thread's read buffer (libfuse's workers free theirs on exit; the
 * main thread of a single-threaded loop calls this). */
void pcrfs_ops_thread_done(void);
/* Close the files the kernel left open (its RELEASE may not arrive before the session
 * ends) and free the stats snapshots it did not forget. Only once the session loop
 * has returned. */
void pcrfs_ops_close_all(struct pcrfs *fs);

#endif
