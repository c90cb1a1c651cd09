/* pcrfs build — what the parts of the build pipeline share (not installed; the
 * interface is pcrfs_build(), pcrfs_build_plan() and pcrfs_merge() of
 * include/pcrfs/pcrfs.h, in src/lib/api/build.c; run.c orders the phases).
 *
 * Three phases:
 *  1. Walk SRC (walk.h) and number the tree the way pcrfs/writer.h requires
 *     (directories in BFS order with each directory's children contiguous and sorted
 *     by name, files grouped by directory and sorted).
 *  2. Transcode with -j worker threads (and, with --quality, measure each
 *     JPEG's MS-SSIM at every level in the same worker: pcr_quality_measure()).
 *     Workers claim file ids in increasing order
 *     and put results into a ring of slots; the main thread takes the slots in id
 *     order, record by record, and hands each full record to the writer. The
 *     store's bytes therefore depend on nothing but SRC and the options recorded in
 *     it, never on -j or on timing. A worker may not claim a file more than two
 *     records ahead of the record being written: that bounds memory to three
 *     records of images whatever the speed of the disk.
 *  3. Record the build options, commit (the writer renames the temporary
 *     directory into place), then open the new store and print its summary with the
 *     same code as pcrinfo (the caller: mkpcrfs).
 * A planned build (plan.h) splits this: --plan runs phase 1 and writes the tree
 * down; --part reads it back instead of walking and runs phases 2 and 3 over its
 * range of records [fbegin, fend) with a part writer; --merge (merge.c) makes the
 * store of all the parts, which is the store phases 1-3 make in one process.
 * Token grids (--tokens, --seit; tokimport.h) are read, checked and trained on
 * before phase 1, so that a bad token input fails before any image is transcoded,
 * and written to the store between phases 2 and 3. With tokens SRC may be left
 * out: the image tree is then its root alone.
 */
#ifndef PCRFS_BUILD_INTERNAL_H
#define PCRFS_BUILD_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/pcrfs.h"
#include "pcrfs/writer.h"
#include "util/fsio.h"
#include "util/sbuf.h"
#include "util/xalloc.h"

/* Where a build reports to: the caller's callbacks, the cancel flag every loop
 * polls (set when the progress callback returns nonzero), and whether memory ran
 * out (any thread; the build then returns -ENOMEM). */
struct pcr_bld_report {
    const struct pcrfs_build_cb *cb; /* NULL: nothing to call */
    void *ctx;
    volatile sig_atomic_t cancel;
    int nomem; /* set once, atomically (pcr_bld_set_nomem()) */
};

/* Tell the caller where stage @stage stands (see struct pcrfs_build_progress).
 * @return nonzero if the build is cancelled (now or before). */
int pcr_bld_progress(struct pcr_bld_report *r, unsigned stage, uint64_t done, uint64_t total,
                     uint64_t bytes, uint64_t total_bytes, bool final);
/* A message of the build to the log hook: an error (the first one of this thread
 * is kept for pcrfs_errmsg(): pcr_bld_first_error()), a warning. */
void pcr_bld_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pcr_bld_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Out of memory in the build reporting to @r: it returns -ENOMEM (unless it failed
 * otherwise before: struct build's err) and says "out of memory" once. @return -1,
 * the value the phases return when they failed (reported). pcr_bld_set_nomem()
 * only sets the flag, for a worker thread, whose message goes through the build's
 * first worker failure (build.c); @return true the first time. Both ignore a NULL
 * @r (an option check, which builds nothing). */
int pcr_bld_nomem(struct pcr_bld_report *r);
bool pcr_bld_set_nomem(struct pcr_bld_report *r);
/* Forget this thread's first error; the first error since ("" if none). */
void pcr_bld_clear_error(void);
const char *pcr_bld_first_error(void);

struct dnode {
    uint64_t parent; /* id of the parent (the root: 1) */
    char *name;      /* "" for the root */
    char *rel;       /* path relative to SRC, "" for the root */
    uint64_t first_child, nsubdirs;
    uint64_t first_file, nfiles;
};

struct fnode {
    uint64_t dir; /* id of its directory */
    char *name;
    /* As the walk (or the plan) saw it: a file that differs when it is read has
     * changed since (an error in a planned build, else re-read). */
    uint64_t size;
    int64_t mtime_ns;
};

/* One file's result, filled by a worker, consumed by the main thread. */
struct slot {
    bool done; /* under b->lock */
    enum pcr_kind kind;
    uint8_t *data; /* malloc()ed: the progressive JPEG or the source bytes */
    size_t len;
    uint64_t src_size;
    struct pcr_split split;    /* JPEG only */
    struct pcr_jpeg_info info; /* JPEG only */
    char note[256];            /* VERBATIM: why; JPEG: why it has no quality table */
    bool changed;              /* kept changing while read: stored as last read */
    bool streamed;             /* VERBATIM, data NULL: the writer fetches it (stream_read) */
    int64_t mtime_ns;          /* streamed: its mtime when it was looked at */
    bool has_quality;          /* JPEG: quality[] holds levels 1..L-1 */
    double quality[PCR_MAX_LEVELS];
};

/* A streamed file while the writer fetches it (build.c, stream_read()). */
struct stream {
    const struct build *b;
    char *rel;
    int fd;
    uint64_t size;
    int64_t mtime_ns;
    bool changed;
    char msg[512]; /* why it failed */
};

struct build {
    const char *src, *store;
    int srcfd;
    unsigned jobs, per_record;
    bool force, drop_markers;
    struct pcr_bld_report *rep;
    bool quality; /* measure each JPEG's MS-SSIM per level (--quality / --no-quality) */
    struct pcr_scripts scripts; /* --scans: what every JPEG is transcoded with */
    char *scans_text;           /* a --scans FILE's text (NULL for a preset), for a plan */
    char *src_owned;            /* src when it came from a plan (freed with the build) */
    int64_t created;            /* meta "created": SOURCE_DATE_EPOCH, a plan's, or 0 (now) */

    /* A planned build (plan.h): the token options as given, the plan's identity,
     * and (a part) the files [fbegin, fend) it builds; a whole build has 0, nfiles. */
    struct {
        int code;
        char *value;
    } * tokopts;
    unsigned ntokopts;
    bool planned;
    char plan_id[32];
    uint64_t fbegin, fend;

    struct dnode *dirs;
    uint64_t ndirs, dircap;
    struct fnode *files;
    uint64_t nfiles, filecap;
    uint64_t total_bytes, skipped;
    uint64_t unmeasured; /* JPEGs left without a quality table although asked */
    /* Directories never to enter: the temporary store and the existing store, when
     * STORE lies inside SRC. */
    struct {
        dev_t dev;
        ino_t ino;
        bool store; /* STORE itself (say so), else the temporary directory */
    } exclude[2];
    unsigned nexclude;

    struct pcr_writer *w;

    /* The pipeline. */
    pthread_mutex_t lock;
    pthread_cond_t space_cv; /* the writer moved on: workers may claim more */
    pthread_cond_t done_cv;  /* a slot is done, or a worker failed */
    struct slot *slots;
    uint64_t nslots;
    uint64_t next; /* next file index (0-based) to claim */
    uint64_t wrec; /* record the main thread is collecting */
    bool stop;     /* interrupted or failed: workers leave */
    bool failed;
    char errmsg[1024]; /* first worker failure */
    int err;           /* what the build returns when it fails, if not -EIO (-EEXIST...) */
};

/* Phase 1: the tree, into b->dirs and b->files. @return 0; -1 failed (reported). */
int build_walk(struct build *b);
/* The directory rows, to the writer. @return 0 or a negative errno. */
int build_add_dirs(struct build *b);
/* Phase 2. @return 0; -1 failed (message printed); -2 interrupted. */
int build_transcode(struct build *b);
/* The build options as meta keys. @return 0 or a negative errno. */
int build_set_meta(struct build *b);
void build_free(struct build *b);
/* pcrfs_merge(): make b->store of the part directories @dirs (merge.c).
 * @return 0 or -1 (reported; nothing was written). */
int merge_run(struct build *b, const char *const *dirs, unsigned n);
/* The modification time of @st in nanoseconds since the epoch. */
int64_t build_mtime_ns(const struct stat *st);

#endif
