/* pcrfs — record backends: where the bytes of record files come from.
 *
 * The store reads record files (records/NNNNNN.pcr, tokens/NNNNNN.tks) only through
 * this interface, never with open()/pread() of its own: a backend opens an object by
 * its name relative to the store, reads a list of byte ranges of it in one call, and
 * tells its size. One implementation reads local files (POSIX, also NFS); a shim
 * wraps any backend to limit its bandwidth; an object-storage backend is another
 * implementation of the same table. It is shaped like SQLite's VFS: a struct of
 * function pointers chosen at open, and shims that wrap another backend.
 *
 * Errors are negative errno values. Every function may be called from several
 * threads at once, on the same object too, except destroy(). An object stays
 * valid until close(); a backend until destroy(), after every object is closed.
 */
#ifndef PCRFS_BACKEND_H
#define PCRFS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct pcr_backend;
struct pcr_object; /* an open object; its layout belongs to the backend */

/* One range of a read: @len bytes at offset @off of the object into @buf. */
struct pcr_range {
    uint64_t off;
    size_t len;
    void *buf;
};

struct pcr_backend_ops {
    const char *name; /* "posix", "bwlimit", ... (for messages and stats) */
    /* Open object @name ("records/000001.pcr": one directory level and a file name,
     * neither followed if it is a symbolic link).
     * @return 0 and *out; -ENOENT, -ENOTDIR, -ELOOP (a symlink), -EINVAL (not a
     *         regular file), -EMFILE/-ENFILE (out of descriptors: not damage, may be
     *         retried), -ENOMEM, -EIO. */
    int (*open)(struct pcr_backend *b, const char *name, struct pcr_object **out);
    /* Read every range completely (the ranges may come in any order and must not
     * overlap their buffers). A range past the end of the object is an error.
     * @return 0; -ENODATA (a range lies past the end: the object was truncated),
     *         -EIO (a failed read), -ETIMEDOUT, -ENOMEM. */
    int (*read)(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r,
                unsigned n);
    /* Optional (may be NULL): the reader is about to read [@off, @off + @len) of
     * @o in order — a record's scan groups up to the level it reads. The POSIX
     * backend passes it to the kernel (posix_fadvise WILLNEED) when asked to; an
     * object-storage backend fetches the whole range in one request into its
     * cache, so that the following reads of every file of the record are local.
     * Called at most once per (record, larger prefix). @return 0 or a negative
     * errno (the reads that follow report their own errors). */
    int (*advise)(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len);
    /* The object's size in bytes, as found at open. */
    uint64_t (*size)(struct pcr_backend *b, const struct pcr_object *o);
    void (*close)(struct pcr_backend *b, struct pcr_object *o);
    void (*destroy)(struct pcr_backend *b);
};

/* Every backend starts with this; the rest of its struct is its own. */
struct pcr_backend {
    const struct pcr_backend_ops *ops;
};

/* Local files under directory @root (the store directory). Only regular files are
 * opened, without following symbolic links in the object name, and without
 * blocking on a FIFO planted where a record should be.
 * @return 0; -ENOENT, -ENOTDIR, -ENOMEM. */
int pcr_backend_posix(const char *root, struct pcr_backend **out);
/* Whether the POSIX backend passes advise() on to the kernel (default off: the
 * kernel's own readahead serves sequential files; on, a record read in record
 * order comes in as one sequential stream per scan group). */
void pcr_backend_posix_readahead(struct pcr_backend *b, int on);

/* A shim that limits the bytes read through @inner, all threads together, to
 * @bytes_per_sec (a token bucket with a burst of 1/8 s of traffic), as PCR's own
 * experiments throttled reads to emulate slow storage. Objects are @inner's own,
 * so a shim may be put in front of a backend whose objects are already open.
 * The shim does not own @inner: destroy @inner after the shim.
 * @return 0; -ENOMEM. */
int pcr_backend_bwlimit(struct pcr_backend *inner, uint64_t bytes_per_sec,
                        struct pcr_backend **out);
/* Change the rate of a shim made by pcr_backend_bwlimit() (0: no limit). */
void pcr_backend_bwlimit_set(struct pcr_backend *shim, uint64_t bytes_per_sec);

static inline void pcr_backend_destroy(struct pcr_backend *b)
{
    if (b)
        b->ops->destroy(b);
}

#ifdef __cplusplus
}
#endif
#endif
