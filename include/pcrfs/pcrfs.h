/* pcrfs — the store as a library: the tree a pcrfs mount shows, without FUSE
 * (libpcrfs.so, pcrfs(3)). The one header for users; link with `pkg-config --libs
 * pcrfs`.
 *
 * Paths are the paths under a mount's root: "scan5/<class>/<file>", "full/...",
 * "tokens/...", "q95/...", and the views the options add (dynamic/, mix/,
 * refurb/); "" (or "/") is the root, which lists the views. The bytes, names and
 * sizes are those a mount of the same store with the same options serves.
 *
 * Every function returns 0 (or a byte count) on success and a negative errno on
 * failure; pcrfs_errmsg() then says what went wrong in one line (per thread).
 * A store is thread-safe: any number of threads may call any function on it at
 * once, but pcrfs_close(). It is safe across fork(): the first call in a child
 * reopens the store there (new descriptors, connections and worker threads; the
 * parent's are left alone), so a DataLoader's forked workers can keep using the
 * parent's handle.
 */
#ifndef PCRFS_PCRFS_H
#define PCRFS_PCRFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PCRFS_API __attribute__((visibility("default")))
#else
#define PCRFS_API
#endif

/* The library's version, "MAJOR.MINOR.PATCH"; the soname carries MAJOR. */
PCRFS_API const char *pcrfs_version(void);

typedef struct pcrfs_store pcrfs_store;
typedef struct pcrfs_file pcrfs_file;

/* Open the store at @path_or_url (a directory, or s3://, http://, https://) with
 * @options, a NULL-ended array of "NAME=VALUE" strings (NULL: none), the -o options
 * of pcrfs(1) that are not about the kernel: level=K, quality=T1:T2:..|none,
 * mix=LO-HI, mix_mean=, mix_seed=, refurb=R and refurb_*=, bwlimit=RATE,
 * readahead=kernel|record, and for object storage cache=DIR, cache_size=SIZE,
 * http_timeout=SECS, http_retries=N, http_part_size=SIZE, http_connections=N.
 * Values are checked as pcrfs(1) checks them.
 * @return 0 and *out; -EINVAL a bad option or value; the errors of opening a store
 *         (-ENOENT, -ENOTDIR, -ENOTSUP, -EIO, -ENOMEM). */
PCRFS_API int pcrfs_open(const char *path_or_url, const char *const *options, pcrfs_store **out);
/* Close @s (NULL: nothing). No other call on it may be running. */
PCRFS_API void pcrfs_close(pcrfs_store *s);

/* The last failure's message on this thread ("" if none). */
PCRFS_API const char *pcrfs_errmsg(void);

struct pcrfs_stat {
    uint64_t size;    /* bytes a whole read returns (a mount's st_size); 0 for directories */
    uint64_t file_id; /* the store's file id (a mount's inode number's low 55 bits), 0 for
                       * directories */
    uint32_t is_dir;  /* 1 for a directory */
    uint32_t reserved;
};

/* The node at @path. @return 0; -ENOENT; -ENOTDIR a file in the middle of @path. */
PCRFS_API int pcrfs_stat(pcrfs_store *s, const char *path, struct pcrfs_stat *st);

/* Entry number *@pos (start at 0) of directory @path, in a mount's listing order
 * (without "." and ".."), its name in @name (@namelen bytes; 256 always do) and
 * whether it is a directory; *@pos then names the next one.
 * @return 1 an entry; 0 the end; -ENOENT, -ENOTDIR, -ENAMETOOLONG (@namelen). */
PCRFS_API int pcrfs_readdir(pcrfs_store *s, const char *path, uint64_t *pos, char *name,
                            size_t namelen, int *is_dir);

/* Read up to @len bytes of file @path at @off into @buf: one open, read, close (for
 * mix/ and refurb/, each call is an open: pcrfs(3)).
 * @return the bytes read (fewer only at the end of the file), or -errno (-EISDIR,
 *         -ENOENT, -EIO a damaged record). */
PCRFS_API ssize_t pcrfs_read(pcrfs_store *s, const char *path, void *buf, size_t len, uint64_t off);

/* An open file: reads of it see one version (the level it was opened at, refurb/'s
 * sample version), whatever changes meanwhile. */
PCRFS_API int pcrfs_file_open(pcrfs_store *s, const char *path, pcrfs_file **out);
PCRFS_API int64_t pcrfs_file_size(const pcrfs_file *f);
PCRFS_API ssize_t pcrfs_file_read(pcrfs_file *f, void *buf, size_t len, uint64_t off);
PCRFS_API void pcrfs_file_close(pcrfs_file *f);

/* Which record file @path lies in (1..number of records) and its file id: what a
 * sampler needs to read a dataset record by record.
 * @return 0; -ENOENT; -EISDIR; -ENODATA a file that is in no image record
 *         (tokens/). */
PCRFS_API int pcrfs_record(pcrfs_store *s, const char *path, uint64_t *record, uint64_t *file_id);

/* The reader is about to read records @records[0..n) (1..number of records, as
 * pcrfs_record() gives them): they are fetched ahead at the level last read (named
 * before any file was read: at the level of the first one read) (a
 * store in object storage: into its cache as parts, within cache_size; a local
 * store opened with readahead=record: as readahead), while the current record is
 * read. Whole or nothing: an id out of range fails the call (-EINVAL) before
 * anything is fetched. A mount's /.pcrfs/prefetch does the same (pcrfs(1)).
 * @return 0; -EINVAL. */
PCRFS_API int pcrfs_prefetch(pcrfs_store *s, const uint64_t *records, size_t n);

/* The store's levels L (scan1/ .. scanL/). */
PCRFS_API unsigned pcrfs_levels(pcrfs_store *s);

/* dynamic/ (option level=K): set the level it serves to new opens.
 * @return 0; -EINVAL not a level; -ENOENT no dynamic/. */
PCRFS_API int pcrfs_set_level(pcrfs_store *s, unsigned level);

/* The JSON a mount's /.pcrfs/info and /.pcrfs/stats hold (malloc()ed, the caller
 * frees it). @return its length, or -ENOMEM. */
PCRFS_API ssize_t pcrfs_info_json(pcrfs_store *s, char **out);
PCRFS_API ssize_t pcrfs_stats_json(pcrfs_store *s, char **out);

/* ---- Serving the tree: what a filesystem daemon needs (pcrfs(3)) ----------------
 *
 * The calls above take paths; a daemon that serves the tree to a kernel (pcrfs(1))
 * works on nodes instead. Every directory and file of the tree has a node number:
 * the root (PCRFS_NODE_ROOT), the views and everything under them, and /.pcrfs with
 * its control files. A number is a pure function of what it names (the same across
 * lookups, opens of the store and processes), never 0, and stays valid while the
 * store is open; a daemon may hand it to the kernel as the inode number. A file of
 * dynamic/ or mix/ has one number per level it can be served at: its name leads to
 * another node when the level changes (PCRFS_NODE_NAME_MOVES). */
#define PCRFS_NODE_ROOT UINT64_C(1)

/* The node of /.pcrfs/stats changes its bytes at every read: a daemon that must
 * give a kernel fixed bytes per node gives each snapshot a number of its own, the
 * node's number with a generation 1..PCRFS_NODE_GEN_MAX in the bits from
 * PCRFS_NODE_GEN_SHIFT up, which are 0 in the number of every PCRFS_NODE_SNAPSHOT
 * node. */
#define PCRFS_NODE_GEN_SHIFT 8
#define PCRFS_NODE_GEN_MAX   ((UINT64_C(1) << (55 - PCRFS_NODE_GEN_SHIFT)) - 1)

/* Node flags: what it is, and what a kernel may cache of it. */
#define PCRFS_NODE_DIR         0x001u /* a directory */
#define PCRFS_NODE_WRITABLE    0x002u /* a control file that takes writes (/.pcrfs/level) */
#define PCRFS_NODE_VOLATILE    0x004u /* bytes and size change with what is written: cache none */
#define PCRFS_NODE_SNAPSHOT    0x008u /* bytes rendered at each read (/.pcrfs/stats) */
#define PCRFS_NODE_NAME_MOVES  0x010u /* a file whose name may lead elsewhere at the next lookup */
#define PCRFS_NODE_NO_LISTINGS 0x020u /* a directory whose listing must not be cached */
#define PCRFS_NODE_PAGES       0x040u /* a file whose bytes may be cached across opens */
#define PCRFS_NODE_DIRECT      0x080u /* a file whose bytes differ per open (refurb/): no cache */
#define PCRFS_NODE_FIXED       0x100u /* a control file whose bytes never change (info, ...) */
#define PCRFS_NODE_CONTROL     0x200u /* a node of /.pcrfs (or the root): not of a view */
/* a directory whose lookups are hints (/.pcrfs/prefetch): a miss must not be cached
 * (the same name comes again), and only the mounting user may look up in it */
#define PCRFS_NODE_HINTS 0x400u

struct pcrfs_node_attr {
    uint64_t size;     /* a file's bytes (for a SNAPSHOT node: a render's, now) */
    uint64_t parent;   /* a directory's parent node (the root's: the root) */
    uint64_t nsubdirs; /* a directory's subdirectories (its link count is 2 + this) */
    uint32_t flags;    /* PCRFS_NODE_* */
    uint32_t reserved;
};

/* Store-wide facts a daemon decides its mount by (pcrfs_features()). */
#define PCRFS_FEATURE_NEEDS_OPEN 0x1u /* a view changes state per open: never read without one */
#define PCRFS_FEATURE_WRITABLE   0x2u /* a control file takes writes (dynamic/'s level) */
#define PCRFS_FEATURE_XATTRS     0x4u /* some node has extended attributes */

/* Open as pcrfs_open() does; with PCRFS_OPEN_DEFER_START the views' worker threads
 * are not started until pcrfs_start(), so that a daemon can fork (detach) in
 * between: the process that calls pcrfs_start() then owns the store (no reopen).
 * @return as pcrfs_open(), but a store that cannot be opened never gives -EINVAL:
 *         -EINVAL is a usage error (an option, or one the store cannot serve), a
 *         malformed store -EBADMSG. */
#define PCRFS_OPEN_DEFER_START 0x1u
PCRFS_API int pcrfs_open_ex(const char *path_or_url, const char *const *options, unsigned flags,
                            pcrfs_store **out);
PCRFS_API int pcrfs_start(pcrfs_store *s);
PCRFS_API unsigned pcrfs_features(pcrfs_store *s);
/* The store's build time (Unix seconds): every node's times under a mount. */
PCRFS_API int64_t pcrfs_mtime(pcrfs_store *s);
/* Nodes over every view, plus the root, /.pcrfs and its files (statfs(2)'s files). */
PCRFS_API uint64_t pcrfs_node_count(pcrfs_store *s);

/* @name in directory @dir. @return 1 and *@node; 0 no such name (an answer, which a
 * kernel may cache); -ENOTDIR @dir a file; -ENOENT @dir not a node; -EIO. */
PCRFS_API int pcrfs_node_lookup(pcrfs_store *s, uint64_t dir, const char *name, uint64_t *node);
/* @return 0; -ENOENT not a node; -EIO (a size that cannot be known is an error). */
PCRFS_API int pcrfs_node_stat(pcrfs_store *s, uint64_t node, struct pcrfs_node_attr *a);
/* The entry at position >= *@pos (from 0, without "." and "..") of directory @dir:
 * its name (@namelen bytes; 256 always do), node and whether it is a directory;
 * *@pos then names the next one (a view that leaves entries out skips them, so
 * positions are stable offsets). @return 1 an entry; 0 the end; -ENOTDIR, -ENOENT,
 * -ENAMETOOLONG, -EIO. */
PCRFS_API int pcrfs_node_readdir(pcrfs_store *s, uint64_t dir, uint64_t *pos, char *name,
                                 size_t namelen, uint64_t *node, int *is_dir);
/* Read file @node without an open (views whose opens change nothing, and control
 * files): a read at offset 0 counts as an open in the stats. @return bytes, -errno. */
PCRFS_API ssize_t pcrfs_node_read(pcrfs_store *s, uint64_t node, void *buf, size_t len,
                                  uint64_t off);
/* For a daemon that hands files to a kernel's page cache before they are read
 * (pcrfs(1), -o push): the next file a reader going record by record will want, read
 * whole into @buf (@cap bytes; larger files are skipped) from bytes that are local
 * already (the page cache of a local store, the cache of one in object storage),
 * never with a read of its own from the disk or a server. Its candidates: when
 * pcrfs_node_read() opens (offset 0) a file of scanK/ or full/ whose record is being
 * read ahead (a hint, -o readahead=record, a reader seen going record by record), the
 * files of its directory in that record that no reader opened yet in this visit of
 * the record. Each is handed once per visit and is not counted as read.
 * @return 1 and *@node, *@len; 0 nothing to hand; -EAGAIN candidates whose bytes
 *         are not local yet (call again soon); -EINVAL no store; -EIO it could not
 *         be reopened in a forked child. */
PCRFS_API int pcrfs_node_ahead(pcrfs_store *s, uint64_t *node, void *buf, size_t cap, size_t *len);
/* Open file @node for reading (@for_write 0) or, a WRITABLE node, for writing.
 * Reads through the handle (pcrfs_file_read) see what its open chose (mix/'s pass,
 * refurb/'s version). @return 0; -EISDIR; -EROFS; -ENOENT; -EIO a damaged record. */
PCRFS_API int pcrfs_node_open(pcrfs_store *s, uint64_t node, int for_write, pcrfs_file **out);
/* The PCRFS_NODE_* flags of an open file's node (what its attributes say, without
 * computing a size). */
PCRFS_API unsigned pcrfs_file_flags(const pcrfs_file *f);
/* Writes to a WRITABLE node are one stream per handle: a value (e.g. "5" or "full"),
 * at most one newline after it, applied whole when its newline arrives or at
 * pcrfs_file_flush() (and pcrfs_file_close()); anything else fails with -EINVAL and
 * applies nothing (pcrfs(1), CONTROL FILES). @return @len or -errno. */
PCRFS_API ssize_t pcrfs_file_write(pcrfs_file *f, const void *buf, size_t len);
PCRFS_API int pcrfs_file_flush(pcrfs_file *f);

/* Extended attributes (user.pcrfs.level on dynamic/ and /.pcrfs/level, refurb/'s).
 * get: the value's length (copied if @len allows), -ERANGE, -ENODATA, -EOPNOTSUPP,
 * -ENOSYS no node of this store has any; list: the NUL-separated names' length, the
 * same way. set: 0; -EROFS not an attribute that can be set there; -EINVAL a bad
 * value; with @value NULL only whether it could be set there (0 or -EROFS), for a
 * daemon that checks who asks in between. */
PCRFS_API ssize_t pcrfs_node_getxattr(pcrfs_store *s, uint64_t node, const char *name, void *buf,
                                      size_t len);
PCRFS_API ssize_t pcrfs_node_listxattr(pcrfs_store *s, uint64_t node, char *buf, size_t len);
PCRFS_API int pcrfs_node_setxattr(pcrfs_store *s, uint64_t node, const char *name,
                                  const void *value, size_t len);

/* /.pcrfs/stats with @head (members, each line ending ",\n", e.g. a daemon's uptime)
 * first, or NULL. @return its length, or -ENOMEM. */
PCRFS_API ssize_t pcrfs_stats_json_ex(pcrfs_store *s, const char *head, char **out);

/* ---- Inspecting a store: what pcrinfo(1) shows (pcrfs(3)) --------------------------
 *
 * Structs that the caller fills in or the library fills out begin with a `size`
 * member the caller sets to sizeof(the struct) it was compiled with: a later
 * library adds members at the end and fills in only the ones the caller knows. */

/* pcrfs_summary() renders one JSON object (pcrinfo --json) instead of the text. */
#define PCRFS_SUMMARY_JSON 0x1u
/* At most this many thresholds of pcrfs_summary_args (besides 0.90, 0.95, 0.99). */
#define PCRFS_SUMMARY_MAX_THRESHOLDS 16

struct pcrfs_summary_args {
    uint32_t size;            /* sizeof(struct pcrfs_summary_args) */
    uint32_t flags;           /* PCRFS_SUMMARY_* */
    const double *thresholds; /* more rows of the per-image table, each in (0, 1] */
    size_t nthresholds;       /* how many (0..PCRFS_SUMMARY_MAX_THRESHOLDS) */
    uint64_t measured;        /* out: JPEGs with a per-level MS-SSIM (mkpcrfs --quality);
                               * 0: there is no per-image table, the thresholds did nothing */
};

/* The store's summary as pcrinfo(1) prints it (malloc()ed, NUL-terminated, the
 * caller frees it): format, levels, files, records, verbatim files and why, bytes
 * of the source and of the store, mean bytes per JPEG at each level, the per-image
 * MS-SSIM table of a store built with mkpcrfs --quality, and the token part.
 * Reads every file's row of the index: O(files). The text is for people (its
 * layout may change); programs read the JSON (@a NULL: the text, no thresholds).
 * A store in object storage has no local files to measure: -ENOTSUP.
 * @return its length; -EINVAL a bad argument; -ENOTSUP; -EIO; -ENOMEM. */
PCRFS_API ssize_t pcrfs_summary(pcrfs_store *s, struct pcrfs_summary_args *a, char **out);

/* Kinds of stored file. */
#define PCRFS_KIND_JPEG     1 /* a progressive JPEG served by scans */
#define PCRFS_KIND_VERBATIM 2 /* stored as it was: the same bytes at every level */
#define PCRFS_KIND_TOKENS   3 /* a token grid (tokens/), served as an NPY array */
/* The most levels a store has (pcrfs(5)). */
#define PCRFS_MAX_LEVELS 64

struct pcrfs_file_facts {
    uint32_t size;        /* sizeof(struct pcrfs_file_facts), set by the caller */
    uint32_t kind;        /* PCRFS_KIND_* */
    uint64_t file_id;     /* the store's file id (of the token tree for tokens/) */
    uint64_t record;      /* the record that holds it (1..) */
    uint64_t source_size; /* bytes of the source file */
    uint64_t checksum;    /* XXH64 of the bytes served at the top level */
    uint32_t chunks;      /* its chunks: the scans, and the trailer if any */
    uint32_t levels;      /* its tree's levels L: entries of level_size */
    uint32_t width;       /* a JPEG's width and height (a token grid's W and H), */
    uint32_t height;      /* else 0 */
    uint32_t components;  /* a JPEG's colour components, else 0 */
    uint32_t reserved;
    /* [K - 1]: the bytes served at level K (1..levels) */
    uint64_t level_size[PCRFS_MAX_LEVELS];
};

/* The store's files in file-id order, the image files first and then the token
 * files: file number *@pos (start at 0) in *@f (f->size set) and its path from the
 * store's root, as the source tree named it (token files as "tokens/PATH.tok", the
 * name a mount shows), raw bytes, in @path (@pathlen bytes); *@pos then names the
 * next one, also after -EIO, so that a caller can go on past a damaged row.
 * @return 1 a file; 0 the end; -ENAMETOOLONG @pathlen too small (*@pos unchanged:
 *         call again with more); -EIO (pcrfs_errmsg() names the file); -EINVAL. */
PCRFS_API int pcrfs_file_next(pcrfs_store *s, uint64_t *pos, char *path, size_t pathlen,
                              struct pcrfs_file_facts *f);
/* The facts of the file at @path of the tree (scanK/..., full/..., tokens/..., any
 * view that serves a stored file). @return 0; -ENOENT; -ENOTDIR; -EISDIR; -EINVAL. */
PCRFS_API int pcrfs_file_facts(pcrfs_store *s, const char *path, struct pcrfs_file_facts *f);

struct pcrfs_verify_result {
    uint32_t size;        /* sizeof(struct pcrfs_verify_result), set by the caller */
    uint32_t level;       /* the level the image files were read at (L) */
    uint64_t files;       /* image files checked */
    uint64_t decoded;     /* JPEGs among them that decoded as the index says */
    uint64_t token_files; /* token files checked */
    uint64_t failures;    /* files that failed */
    uint32_t tokens;      /* 1: the store has a token tree */
    uint32_t reserved;
};
/* Called by pcrfs_verify() after each file, in the calling thread: its path (as
 * pcrfs_file_next() gives it; "" when even that could not be read), NULL or why it
 * failed (one line, e.g. "checksum ..., the index says ..."), and the files done of
 * @total. A nonzero return stops the verification (-ECANCELED). */
typedef int (*pcrfs_verify_fn)(const char *path, const char *failure, uint64_t done, uint64_t total,
                               void *ctx);
/* Read every file at its top level (image files at L, token files) straight from
 * the records, check its size and its checksum against the index, and decode every
 * JPEG and compare its dimensions with the index's. @fn (or NULL) hears of each
 * file; @r (or NULL) gets the counts.
 * @return 0 every file is sound; -EBADMSG some file failed (pcrfs_errmsg(): the
 *         first, "PATH: why"); -ECANCELED; -EINVAL; -ENOMEM. */
PCRFS_API int pcrfs_verify(pcrfs_store *s, pcrfs_verify_fn fn, void *ctx,
                           struct pcrfs_verify_result *r);

/* pcrfs_fidelity() renders one JSON object (pcrinfo --fidelity --json) instead of
 * the text. */
#define PCRFS_FIDELITY_JSON 0x1u

struct pcrfs_fidelity_args {
    uint32_t size;    /* sizeof(struct pcrfs_fidelity_args) */
    uint32_t flags;   /* PCRFS_FIDELITY_* */
    uint64_t sample;  /* JPEGs to sample, 1..100000 (0: 300) */
    uint64_t seed;    /* of the sample: the same seed picks the same images anywhere */
    double threshold; /* in (0, 1] (0: 0.95): the recommended level's mean MS-SSIM */
    uint32_t jobs;    /* threads, 1..256 (0: 1) */
    uint32_t reserved;
    /* Every ~100 ms and once at the end (@final 1), in the calling thread: images
     * and their top-level bytes done of the sample's. NULL: none. */
    void (*progress)(uint64_t done, uint64_t total, uint64_t done_bytes, uint64_t total_bytes,
                     int final, void *ctx);
    /* Each image that failed (not counted), in sample order after the last
     * progress: its path (NULL if unknown) and file id, the level and why. */
    void (*failure)(const char *path, uint64_t file_id, unsigned level, const char *why, void *ctx);
    void *ctx;
    uint64_t failures; /* out: images that failed */
};

/* Measure what each level costs and keeps, as pcrinfo --fidelity prints it (the
 * report malloc()ed into *@out, text or JSON): a seeded sample of the store's JPEGs,
 * each read at every level; per level the mean and lowest luma MS-SSIM against the
 * top level, the mean bytes, the mean CPU time of a full decode, and the lowest
 * level whose mean MS-SSIM reaches the threshold. Takes about 0.5 s of CPU per
 * Mpixel of image, shared by a->jobs threads; images over 48 Mpixels are left out.
 * An image that fails is reported (a->failure, a->failures) and the call goes on.
 * @return the report's length; -EINVAL a bad argument; -ENOMEM. */
PCRFS_API ssize_t pcrfs_fidelity(pcrfs_store *s, struct pcrfs_fidelity_args *a, char **out);

/* ---- Options, for a command line that passes them on (pcrfs(1)'s -o) ---- */

#define PCRFS_OPT_PATH   0x1u /* its value is a path (make it absolute before a chdir) */
#define PCRFS_OPT_REMOTE 0x2u /* only for a store in object storage */
#define PCRFS_OPT_WRITE  0x4u /* given, a control file takes writes (level=K) */
/* The @i-th option pcrfs_open() takes (from 0), and its flags. NULL: past the end. */
PCRFS_API const char *pcrfs_option(unsigned i, unsigned *flags);
/* Check one option as pcrfs_open() would (what needs the store aside). @return 0;
 * -EINVAL a bad value (pcrfs_errmsg()); -ENOENT not an option; -ENOMEM. */
PCRFS_API int pcrfs_option_check(const char *name, const char *value);
/* The lines of the views' options for a --help (static). */
PCRFS_API const char *pcrfs_options_help(void);

/* Is @path_or_url in object storage? 0 no; 1 yes; 2 yes, and it holds credentials
 * (user:password@): never print it. */
PCRFS_API int pcrfs_is_remote(const char *path_or_url);

/* ---- Building a store (pcrfs(3), BUILDING A STORE; mkpcrfs(1) is a client) ------
 *
 * Options are "NAME=VALUE" strings (NULL-ended array; NULL: none), mkpcrfs(1)'s
 * build options by their long names with '_' for '-': jobs=N, per_record=N,
 * force=1, scans=default|fast|FILE, drop_markers=1, quality=0|1, created=SECONDS
 * (the store's time; default now), and the token options tokens=DIR, seit=DATA,
 * seit_index=, seit_labels=, seit_names=, seit_shape=HxW, codebook=FILE,
 * tok_coder=, tok_per_shard=N; a part of a planned build takes plan=PLAN and
 * part=I/N (and jobs, force). Messages name them as mkpcrfs(1) does ("--jobs=0:
 * ..."). Every message of a build (each bad input, each file stored verbatim) goes
 * to the pcrfs_set_log() hook, errors at level 0 and warnings at level 1;
 * pcrfs_errmsg() then holds the first error. A failed or cancelled build leaves
 * nothing behind (the store is written in a temporary directory beside @out and
 * renamed into place at the end). A process runs one build at a time; a build
 * that runs out of memory fails with -ENOMEM like any other failure (it never
 * exits the process). */

/* The stages a build goes through, in this order (a stage may be absent). */
#define PCRFS_BUILD_WALK        1 /* the source tree is read: total 0, done = files so far */
#define PCRFS_BUILD_TOKENS_READ 2 /* token grids read, checked, trained on */
#define PCRFS_BUILD_TRANSCODE   3 /* images transcoded and written */
#define PCRFS_BUILD_TOKENS      4 /* token grids written */
#define PCRFS_BUILD_MERGE       5 /* parts made into one store */
#define PCRFS_BUILD_COMMIT      6 /* the last chance to cancel: then it is renamed into place */

struct pcrfs_build_progress {
    unsigned stage;              /* PCRFS_BUILD_* */
    int final;                   /* 1: the stage's last call (done == total) */
    uint64_t done, total;        /* files (grids, parts) done and to do (0: not known yet) */
    uint64_t bytes, total_bytes; /* their source bytes */
};

/* What a build made, for a caller's report. */
struct pcrfs_build_result {
    uint64_t files, dirs; /* source files and directories (of the whole plan for a part) */
    uint64_t bytes;       /* their source bytes */
    uint64_t records;     /* records of the store (or of the plan) */
    unsigned per_record, jobs;
    uint64_t part, nparts;         /* a part: part I of N (else 0, 0) */
    uint64_t first_file, end_file; /* a part: its files [first_file, end_file) from 0 */
    char plan_id[32];              /* a plan or a part: the plan's identity; else "" */
};

/* @size is sizeof(struct pcrfs_build_cb) (members may be added at the end). Any
 * function may be NULL. @progress is called in the calling thread, often (at
 * least every 100 ms while images are transcoded); a nonzero return cancels the
 * build, which then fails with -ECANCELED. @result is called once, on success,
 * before the call returns. */
struct pcrfs_build_cb {
    size_t size;
    int (*progress)(const struct pcrfs_build_progress *p, void *ctx);
    void (*result)(const struct pcrfs_build_result *r, void *ctx);
};

/* Build the store @out from the image tree @src (NULL: no images, a store of
 * tokens only, which needs tokens= or seit=); with plan= and part=, @src is NULL
 * and @out is the part's directory. @return 0; -EINVAL a bad option or value (a
 * usage error: nothing was read); -EEXIST @out exists (force=1 replaces a pcrfs
 * store); -ENOTDIR @out is something else; -ECANCELED cancelled; -EBUSY another
 * build runs in this process; -ENOMEM out of memory; -EIO (or another errno) the
 * build failed (its messages went to the log hook). */
PCRFS_API int pcrfs_build(const char *src, const char *out, const char *const *options,
                          const struct pcrfs_build_cb *cb, void *ctx);
/* Walk @src and write the plan @plan of a build on many machines (mkpcrfs(1),
 * --plan): the build options are fixed in it, a part takes none. @return as
 * pcrfs_build(). */
PCRFS_API int pcrfs_build_plan(const char *src, const char *plan, const char *const *options,
                               const struct pcrfs_build_cb *cb, void *ctx);
/* Make the store @out of the @n part directories @parts, all parts of one plan
 * (record files are hard-linked on one file system, copied otherwise). Options:
 * force=1. @return as pcrfs_build(). */
PCRFS_API int pcrfs_merge(const char *out, const char *const *parts, size_t n,
                          const char *const *options, const struct pcrfs_build_cb *cb, void *ctx);
/* Check the build option @name with @value as pcrfs_build() would. @return 0;
 * -EINVAL a bad value (pcrfs_errmsg()); -ENOENT not a build option. */
PCRFS_API int pcrfs_build_option_check(const char *name, const char *value);
/* Check @options together (each value, and that they go together: seit= needs
 * seit_labels=, ...) without building. @return 0; -EINVAL (pcrfs_errmsg()). */
PCRFS_API int pcrfs_build_check(const char *const *options);

/* Where the library's messages go (by default nowhere): @fn gets each one, levels
 * 0 error, 1 warning, 2 info, 3 debug, up to @max_level. Call once, before any other
 * call. */
typedef void (*pcrfs_log_fn)(int level, const char *msg, void *ctx);
PCRFS_API void pcrfs_set_log(pcrfs_log_fn fn, void *ctx, int max_level);

#ifdef __cplusplus
}
#endif
#endif
