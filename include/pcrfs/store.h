/* pcrfs — reading a store.
 *
 * A store is a directory: index.db (SQLite, the tree and every offset) and
 * records/ *.pcr (the scan groups). See pcrfs(5). This module knows nothing of FUSE:
 * the FUSE driver, the inspector and the tests all read through it.
 *
 * Levels. A store has L levels (pcr_store_levels(), 10 for libjpeg's default script).
 * Level K (1 <= K < L) of a JPEG serves scan chunks 0..min(K, nscans)-1 followed by
 * FF D9; level L serves every scan chunk (also for CMYK images with 18 scans) + FF D9,
 * then the bytes that followed the source's EOI, if any (the trailer chunk).
 * A verbatim file serves its bytes unchanged at every level.
 *
 * Ids. Directories are numbered 1..ndirs (PCR_ROOT_DIR is the root), files
 * 1..nfiles; the two ranges are independent. Every name and pointer returned stays
 * valid until pcr_store_close(). All functions are thread-safe.
 */
#ifndef PCRFS_STORE_H
#define PCRFS_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCR_ROOT_DIR   1
#define PCR_MAX_LEVELS 64

enum pcr_kind {
    PCR_KIND_JPEG = 1,     /* progressive JPEG split into scan chunks */
    PCR_KIND_VERBATIM = 2, /* stored as is (one chunk), served identically everywhere */
    PCR_KIND_TOKENS = 3,   /* a token grid, served as an NPY <u2 (H, W) array */
};

struct pcr_store;
struct pcr_file;
struct pcr_handle;

/* Descriptors a store leaves free under RLIMIT_NOFILE when it holds its records open
 * (local stores hold every record open from open to close, up to the limit): what
 * the program around it needs besides (FUSE's /dev/fuse, the index, logs, sockets,
 * cache files). Records beyond the budget open on first use. */
#define PCR_STORE_FD_RESERVE 32

/* Open a store read-only and validate its index (format, version, directory table,
 * record table). Files are loaded lazily, a directory at a time, so the cost of
 * opening does not grow with the number of files.
 *
 * @return 0 and *out; on failure a one-line message in @err and
 *         -ENOENT  no such directory or no index.db in it;
 *         -ENOTDIR the path (or its records/) is not a directory;
 *         -EINVAL  not a pcrfs store, or its index is corrupt or inconsistent;
 *         -ENOTSUP a format version this library does not read;
 *         -ENOMEM, -EIO.
 */
int pcr_store_open(const char *path, struct pcr_store **out, char *err, size_t errlen);
void pcr_store_close(struct pcr_store *s);

/* The token tree of @s as a store of its own: every tree and file call works on it
 * (levels 1; its files are PCR_KIND_TOKENS, decoded from their ~1 kB blobs when a
 * handle is opened and served as NPY v1.0 <u2 (H, W) arrays). Close it before @s.
 * @return 0; -ENOENT the store holds no tokens; -EINVAL a damaged token tree or
 *         model (message in @err); -ENOMEM. */
int pcr_store_open_tokens(struct pcr_store *s, struct pcr_store **out, char *err, size_t errlen);

/* The codebook NPY file imported with the tokens (served as /.pcrfs/codebook.npy).
 * @return 0 and the bytes, valid until close; -ENOENT none. */
int pcr_store_codebook(struct pcr_store *s, const void **data, size_t *len);

unsigned pcr_store_levels(const struct pcr_store *s); /* L, 1..PCR_MAX_LEVELS */
uint64_t pcr_store_nfiles(const struct pcr_store *s);
uint64_t pcr_store_ndirs(const struct pcr_store *s);
uint64_t pcr_store_nrecords(const struct pcr_store *s);
int64_t pcr_store_mtime(const struct pcr_store *s); /* build time, seconds since epoch */

/* A build option or fact recorded in the index ("script", "per_record", ...).
 * @return the value's length (copied NUL-terminated, truncated to @len-1), or
 *         -ENOENT if the key is absent. */
ssize_t pcr_store_meta(struct pcr_store *s, const char *key, char *buf, size_t len);

struct pcr_dirinfo {
    uint64_t id, parent; /* the root is its own parent */
    uint64_t nsubdirs, nfiles;
    const char *name; /* "" for the root */
};
/* @return 0, -ENOENT (no such directory). */
int pcr_store_dir(struct pcr_store *s, uint64_t dir, struct pcr_dirinfo *out);

struct pcr_node {
    bool is_dir;
    uint64_t id; /* a directory id or a file id */
};
/* Find @name in directory @dir. Loads the directory on first use.
 * @return 0; -ENOENT no such entry or directory; -EIO the index could not be read. */
int pcr_store_lookup(struct pcr_store *s, uint64_t dir, const char *name, struct pcr_node *out);

struct pcr_dirent {
    const char *name;
    struct pcr_node node;
};
/* Entry number @pos of @dir: subdirectories first, then files, each by name
 * (byte order). O(1) once the directory is loaded.
 * @return 0; -ENOENT past the end or no such directory; -EIO. */
int pcr_store_readdir(struct pcr_store *s, uint64_t dir, uint64_t pos, struct pcr_dirent *out);

/* @return 0 and *out; -ENOENT no such file; -EIO the index could not be read. */
int pcr_store_file(struct pcr_store *s, uint64_t id, const struct pcr_file **out);

/* Exact size of the file at @level (1..L; larger means L), from the index alone. */
uint64_t pcr_file_size(const struct pcr_file *f, unsigned level);

struct pcr_file_info {
    uint64_t id, dir;
    const char *name;
    enum pcr_kind kind;
    unsigned nchunks;                   /* chunks: the scans, and the trailer if any */
    uint64_t trailer;                   /* bytes after the EOI served at level L, or 0 */
    unsigned width, height, components; /* 0 for verbatim files */
    uint64_t record;                    /* record id */
    uint64_t src_size;                  /* size of the source file */
    uint64_t checksum;                  /* XXH64 of the bytes served at level L */
    const char *note;                   /* why it is verbatim, or "" */
};
void pcr_file_info(const struct pcr_file *f, struct pcr_file_info *out);
/* Length of chunk @i (0-based, < nchunks). */
uint64_t pcr_file_chunk_len(const struct pcr_file *f, unsigned i);

/* Per-image fidelity. `mkpcrfs --quality` measures, for each JPEG, the luma MS-SSIM
 * (pcrfs/fidelity.h) of every level K < L against the top level L and stores it
 * rounded down to a multiple of 1/PCR_QUALITY_SCALE (pcrfs(5), files.quality), so a
 * reader can serve each image at the lowest level that looks close enough to it.
 * 60000 makes every threshold with at most four decimals (0.9, 0.95, 0.99, 0.9975)
 * a multiple of the step: "stored >= t" is then exactly "measured >= t".
 * The table is absent for verbatim files, token files, JPEGs built without
 * --quality, and JPEGs too large to measure. */
#define PCR_QUALITY_SCALE 60000

/* The stored MS-SSIM of @f at @level into *ssim (level L and above: exactly 1).
 * @return 0; -EINVAL level 0; -ENOENT @f has no table. */
int pcr_file_quality(const struct pcr_file *f, unsigned level, double *ssim);
/* The lowest level K whose stored MS-SSIM >= @threshold (as pcr_file_quality()
 * returns it); L if no level below L reaches it or @f has no table. */
unsigned pcr_file_level_for(const struct pcr_file *f, double threshold);

/* "dir/sub/name" relative to the store root, into @buf.
 * @return the length, or -ENAMETOOLONG (@buf too small), -ENOENT. */
ssize_t pcr_store_path(struct pcr_store *s, uint64_t file, char *buf, size_t len);

/* Open @f at @level for reading: opens and validates its record on first use
 * (magic, version, size); no SQL, and no allocation beyond one small handle.
 * @return 0; -EIO its record is missing or damaged (logged once per record);
 *         -ENOMEM. */
int pcr_handle_open(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                    struct pcr_handle **out);
uint64_t pcr_handle_size(const struct pcr_handle *h);
/* Read up to @len bytes at @off: exactly min(len, size - off) bytes, 0 at or past
 * the end. Reads from the record only the bytes of the chunks asked for.
 * Thread-safe: one handle may be read from several threads at once.
 * @return bytes read, or -EIO (the record is truncated or unreadable; logged). */
ssize_t pcr_handle_read(struct pcr_handle *h, void *buf, size_t len, uint64_t off);
void pcr_handle_close(struct pcr_handle *h);

/* Open, read and close in one call (for tools; the driver keeps handles). */
ssize_t pcr_store_read(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                       size_t len, uint64_t off);

/* pcr_store_read() without allocating (except for token files, decoded whole per
 * call): for readers that keep no handle, such as the FUSE driver when the kernel
 * sends no OPEN. A read at offset 0 is counted as an open in pcr_stats.
 * @return bytes read (as pcr_handle_read()), or -EIO. */
ssize_t pcr_store_pread(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                        size_t len, uint64_t off);

/* Limit the bytes read from record files, all threads together, to @bytes_per_sec
 * (0 lifts the limit): the bandwidth shim of pcrfs/backend.h put in front of the
 * store's backend. It emulates slow storage the way PCR's own experiments throttled
 * reads, so that the effect of reading fewer bytes per image can be measured on a
 * fast local disk. Call it before reads start. */
void pcr_store_set_bwlimit(struct pcr_store *s, uint64_t bytes_per_sec);

/* A run of files with consecutive ids that lie in one record. */
struct pcr_record_run {
    uint64_t first, count; /* file ids first .. first + count - 1 */
    uint64_t record;       /* record id, 1..pcr_store_nrecords() */
};
/* The files of @s grouped by record, in file-id order: what a sampler needs to read
 * a dataset record by record (PCR's one sequential read per record). One pass over
 * the index's file table (about half a second for 1.28 M files), not cached; ids
 * and records out of range are left out.
 * @return 0, the first non-zero callback value, -EIO (the index could not be read),
 *         -ENOMEM. */
int pcr_store_record_runs(struct pcr_store *s,
                          int (*cb)(void *ctx, const struct pcr_record_run *run), void *ctx);

/* Record-ordered readahead for local stores: on, a record that a reader goes
 * through in order (a few of its files opened one after another in file-id order),
 * or that pcr_store_prefetch() named, is read as its scan groups up to the level
 * read (posix_fadvise WILLNEED): one sequential prefix. Off by default. (Stores in
 * object storage always fetch such records into their cache, as parts.) */
void pcr_store_set_readahead(struct pcr_store *s, bool on);
/* The reader is about to read records @records[0..n) (ids 1..pcr_store_nrecords(),
 * as pcr_store_record_runs() gives them): their prefixes at the level last read
 * (named before any file was read: at the level of the first one read) are fetched
 * ahead (object storage: into the cache, within its size; local stores with
 * readahead on: WILLNEED), while the current record is read. Whole or nothing: an
 * id out of range fails the call before anything is fetched.
 * @return 0; -EINVAL an id out of range. */
int pcr_store_prefetch(struct pcr_store *s, const uint64_t *records, size_t n);
/* pcr_store_prefetch() of a hint as text (a name looked up in a mount's
 * /.pcrfs/prefetch/, pcrfs(1)): at most PCR_PREFETCH_MAX decimal record ids split
 * by commas, spaces or newlines. Whole or nothing. @return 0; -EINVAL anything
 * else. */
#define PCR_PREFETCH_MAX 256
int pcr_store_prefetch_text(struct pcr_store *s, const char *buf, size_t len);

/* Files handed ahead (store/ahead.c; pcrfs_node_ahead()). A reader opened @f at
 * @level, through what the caller calls @tag (a view): if @f's record is read ahead
 * that far, the files of @f's directory in that record that no reader opened become
 * candidates. */
void pcr_store_ahead_note(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                          unsigned tag);
/* The next candidate whose bytes are local already, read into @buf (@cap bytes; a
 * larger file is skipped) without any read from the disk or a server: its id, size
 * and tag. @return 1 one; 0 none; -EAGAIN candidates whose bytes are not local yet
 * (ask again soon: the readahead brings them). */
int pcr_store_ahead_next(struct pcr_store *s, void *buf, size_t cap, uint64_t *id, size_t *len,
                         unsigned *tag);

/* Counters since open, for /.pcrfs/stats. level[K] counts reads at level K
 * (1..L); bytes are bytes read from record files. */
struct pcr_stats {
    uint64_t dirs_loaded, files_loaded;
    uint64_t errors; /* EIO returned to a caller */
    struct {
        uint64_t opens, reads, bytes;
    } level[PCR_MAX_LEVELS + 1];
    uint64_t held_fails; /* EIO at once: the record failed on the network just
                            before (object storage; see pcrfs(1)) */
    uint64_t heals;      /* reads whose bytes failed the checksum, served after
                            the backend fetched them again */
    uint64_t advised;    /* record prefixes asked for ahead of their reader (a
                            readahead, a cache's fetch): read.c, advise() */
};
void pcr_store_stats(const struct pcr_store *s, struct pcr_stats *out);

#ifdef __cplusplus
}
#endif
#endif
