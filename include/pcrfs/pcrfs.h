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
 * http_timeout=SECS, http_retries=N. Values are checked as pcrfs(1) checks them.
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
 * pcrfs_record() gives them): they are fetched ahead at the level last read (a
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

#ifdef __cplusplus
}
#endif
#endif
