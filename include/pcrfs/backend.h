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

#include <stdbool.h>
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
    /* Open every record when the store is opened and hold it until close (cheap
     * local opens that pin the files, so a store rebuilt under a mount keeps
     * serving what was mounted); 0: open each object on first use (an open is a
     * network request). */
    int hold_open;
    /* Open object @name ("records/000001.pcr": one directory level and a file name,
     * neither followed if it is a symbolic link).
     * @return 0 and *out; -ENOENT, -ENOTDIR, -ELOOP (a symlink), -EINVAL (not a
     *         regular file), -EMFILE/-ENFILE (out of descriptors: not damage, may be
     *         retried), -ENOMEM, -EIO. */
    int (*open)(struct pcr_backend *b, const char *name, struct pcr_object **out);
    /* Read every range completely (the ranges may come in any order and must not
     * overlap their buffers). A range past the end of the object is an error.
     * @return 0; -ENODATA (a range lies past the end: the object was truncated),
     *         -EIO (a failed read), -ETIMEDOUT, -ENOMEM; -EAGAIN in an operation
     *         that takes local bytes only (pcr_backend_op_begin_local()) when a range
     *         is not all local. */
    int (*read)(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r, unsigned n);
    /* Optional (may be NULL): the reader is about to read [@off, @off + @len) of
     * @o in order — a record's scan groups up to the level it reads. The POSIX
     * backend, when asked to (pcr_backend_posix_readahead()), queues the range and
     * returns at once; a thread of its own passes it to the kernel as
     * posix_fadvise WILLNEED pieces (one call over the whole range would be cut
     * to the device's readahead size), at most 16 MB ahead of the disk. An
     * object-storage backend fetches the range into its cache as parts over many
     * connections, so that the following reads of every file of the record are
     * local. Called when the store sees a reader go through the record in order or
     * was told the record comes next (pcr_store_prefetch()), again after the bytes
     * were evicted; never for a reader that is not going record by record (its
     * reads fetch just their bytes). @return 0 or a negative errno (the reads that
     * follow report their own errors). */
    int (*advise)(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len);
    /* Optional (may be NULL): advise() of [0, @len[i]) of each of the @n objects @o,
     * which the reader reads side by side (the records of one window of a sampler,
     * named in one hint), not one after another: an object-storage backend fetches
     * their parts interleaved, the first part of each, then the second of each...,
     * after those of earlier advice. Without it the store calls advise() for each in
     * turn. @return 0 or a negative errno, as advise(). */
    int (*advise_many)(struct pcr_backend *b, struct pcr_object *const *o, const uint64_t *len,
                       size_t n);
    /* The object's size in bytes, as found at open. */
    uint64_t (*size)(struct pcr_backend *b, const struct pcr_object *o);
    void (*close)(struct pcr_backend *b, struct pcr_object *o);
    void (*destroy)(struct pcr_backend *b);
    /* Optional: forget the bytes of @o in [@off, @off + @len) this backend keeps (a
     * cache whose bytes failed the store's checksum there): the next read of them
     * asks the source again; the rest stays. */
    void (*drop)(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len);
    /* Optional: every object is about to be closed and the backend destroyed (the
     * store closes): stop fetching ahead and abort the transfers in flight, all at
     * once, so that the close() calls that follow do not each wait for their own.
     * Nothing but close() and destroy() is called after it. */
    void (*stop)(struct pcr_backend *b);
    /* A record whose open or read failed on the network (a dead or trickling
     * server) is held as failing this long (ms): its other files fail at once with
     * EIO, then the next use probes it again. 0: never held (local files). */
    unsigned fail_hold_ms;
};

/* The start (ms, CLOCK_MONOTONIC) of what the calling thread is doing for a reader
 * (one read, one open: pcr_handle_read() and its siblings), 0 outside one: every
 * request an object-storage backend makes for it shares one deadline counted from
 * there. The store brackets each such operation with pcr_backend_op_begin() and
 * pcr_backend_op_end() (nested pairs keep the outer start). (backend/opstart.c) */
uint64_t pcr_backend_op_start(void);
void pcr_backend_op_begin(void);
void pcr_backend_op_end(void);
/* An operation that may read only bytes local already (a page cache, a backend's
 * cache): read() then answers -EAGAIN where it would wait on a disk or a server, and
 * reads nothing from the source. pcr_backend_op_local(): is the calling thread in
 * one? (Files handed ahead to a kernel, store/ahead.c.) */
void pcr_backend_op_begin_local(void);
bool pcr_backend_op_local(void);

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
 * kernel's own readahead serves sequential files; on, a record's advised prefix
 * comes in as one sequential stream, read by the backend's readahead thread,
 * which is started on the first advice and joined by destroy()). */
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

/* ---- Stores in object storage (backend/http*.c, store/remote.c) ----
 *
 * A store copied as is into a bucket ("s3://BUCKET/PREFIX") or served by any web
 * server that answers Range requests ("https://HOST/PATH", "http://..."): objects
 * are opened with HEAD (size, ETag) and read with ranged GETs, several ranges of a
 * read in parallel over a pool of kept-alive connections. Each request has a hard
 * deadline and is retried on 5xx, timeouts and broken connections, all of one
 * reader's operation within 2 x the timeout (pcr_backend_op_start()); throttling
 * answers (503 SlowDown, 429) within a 30 s budget, after Retry-After or a backoff
 * with full jitter seeded per process. So a dead or slow server fails the reads of
 * its files (-EIO, -ETIMEDOUT) in bounded time, never hangs them, and the store
 * then fails the other files of that record at once for fail_hold_ms. advise() fetches the record
 * prefix a level needs into an on-disk cache (LRU by record prefix) as 8 parts (of at most
 * part_size, at least an eighth of it) over
 * many connections (connections), from which the reads of every file of the record are then
 * served; readers of a prefix being fetched wait for
 * those bytes instead of asking again. A cache that cannot be written falls back to direct GETs
 * (logged once).
 *
 * s3:// URLs are signed (AWS SigV4) with credentials from the AWS default chain
 * (backend/creds.c: the environment, web identity via STS, the shared files'
 * profile with credential_process, container credentials, EC2 instance metadata
 * IMDSv2), renewed before they expire and after an ExpiredToken answer; the
 * endpoint is o->endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's
 * endpoint_url (path-style addressing), else AWS's virtual-hosted addresses; the
 * region o->region, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else
 * us-east-1. https is verified against o->ca_bundle, AWS_CA_BUNDLE or the
 * profile's ca_bundle, else the system's CAs. A URL with user-info is refused.
 * Without credentials, and for http(s):// URLs, requests are anonymous. pcrfs(1),
 * ENVIRONMENT, is the user's description. */

struct pcr_store;

struct pcr_http_opts {
    const char *cache_dir; /* NULL: $XDG_CACHE_HOME/pcrfs, ~/.cache/pcrfs, or
                              /var/cache/pcrfs for root; a subdirectory per URL */
    uint64_t cache_size;   /* bytes of record prefixes kept on disk; 0: the smaller
                              of 1 GiB and 10 % of the cache's file system */
    unsigned timeout_ms;   /* deadline of one request (a stalled transfer); 0: 10 s */
    int retries;           /* retries of a failed request; < 0: 3 */
    /* s3:// (each NULL: the environment, then the profile's config, then AWS's) */
    const char *endpoint; /* S3-compatible server, "https://HOST[:PORT]" */
    const char *region;
    const char *profile;   /* of the shared files (then the environment's keys are
                              not used) */
    const char *ca_bundle; /* PEM CA certificates for https (also http(s):// URLs) */
    uint64_t part_size;    /* most bytes of one GET of a prefix fetch (at least
                              PCR_HTTP_PART_SIZE_MIN); 0: 8 MiB */
    unsigned connections;  /* part GETs in flight at once; 0: 32 */
};

/* Whether @s names a store in object storage (s3://, http://, https://). */
int pcr_url_is_remote(const char *s);
/* Whether the URL @s has user-info ("user:password@host"): such a URL is refused
 * (pcr_backend_http() says why without repeating it), and a caller must not print
 * it either. */
int pcr_url_has_userinfo(const char *s);

/* The backend for the store at @url. @o may be NULL (defaults).
 * @return 0 and *out; -EINVAL a malformed URL or credentials file (message in
 *         @err), -ENOMEM. Nothing is sent to the server yet. */
int pcr_backend_http(const char *url, const struct pcr_http_opts *o, struct pcr_backend **out,
                     char *err, size_t errlen);

/* A remote store's index.db as a local file (pcr_backend_http_fetch_index()). */
struct pcr_http_index {
    char path[4300]; /* the local copy */
    char dir[4200];  /* the store's cache directory; "" when there is none */
    bool temp;       /* a temporary copy: unlink it once opened */
    bool cached;     /* a copy an earlier mount fetched, used as it was */
};

/* Bring index.db of @b's store (from pcr_backend_http()) to a local file: into the
 * cache directory of @o (made private to the user, refused when another user could
 * change it), again only when the server's size or ETag changed, else into a
 * temporary file; then start the record-prefix cache in that directory. @again: a
 * second try after a copy did not open as an index (counted in the stats).
 * @return 0 and *@ix; on failure a one-line message in @err, the directories this
 *         call made removed, and -EPERM (an untrusted cache), -ENOENT, -EACCES,
 *         -EIO, -ETIMEDOUT, -EINVAL, -ENOTSUP, -ENOSPC, -ENOMEM. (backend/httpstore.c) */
int pcr_backend_http_fetch_index(struct pcr_backend *b, const struct pcr_http_opts *o, bool again,
                                 struct pcr_http_index *ix, char *err, size_t errlen);
/* Remove the cached copy @ix (and its recorded hash): the next fetch gets it again. */
void pcr_backend_http_forget_index(const struct pcr_http_index *ix);

/* Open the store at @url: index.db is fetched once into the cache directory (again
 * only when its size or ETag changed), then opened and validated like a local
 * store's; the tree is served from it without the network.
 * @return 0 and *out; on failure a one-line message in @err ("s3://b/p: access
 *         denied (HTTP 403 ...)") and -ENOENT (no store there), -EACCES, -EIO,
 *         -ETIMEDOUT, -EINVAL (not a store), -ENOTSUP, -ENOMEM. (store/remote.c) */
int pcr_store_open_url(const char *url, const struct pcr_http_opts *o, struct pcr_store **out,
                       char *err, size_t errlen);

/* Open a store whose index is the local file @index_path and whose records come
 * from @b; the store owns @b from then on (also when this fails). @name names the
 * store in messages and in pcr_store_open_tokens(). (store/store.c) */
int pcr_store_open_backend(const char *name, const char *index_path, struct pcr_backend *b,
                           struct pcr_store **out, char *err, size_t errlen);

/* The options of how a store is read, as pcrfs(1) takes them with -o and pcrfs(3)
 * with pcrfs_open(): bwlimit=, readahead=, and for a store in object storage cache=,
 * cache_size=, http_timeout=, http_retries=, http_part_size=, http_connections=,
 * endpoint=, region=, profile=, ca_bundle=. One parser (store/opts.c) for both, so
 * the limits and the messages live in one place. */
struct pcr_store_opts {
    uint64_t bwlimit;          /* bytes/s (0: none): pcr_store_set_bwlimit() */
    int readahead_record;      /* readahead=record: pcr_store_set_readahead() */
    char *cache;               /* cache=DIR as given (owned; NULL: the default) */
    uint64_t cache_size;       /* 0: the library's default */
    double http_timeout;       /* seconds (0: the library's default) */
    int http_retries;          /* -1: the library's default */
    uint64_t http_part_size;   /* 0: the library's default */
    unsigned http_connections; /* 0: the library's default */
    /* endpoint=, region=, profile=, ca_bundle= as given, non-empty (owned; NULL: not
     * given); what they may hold is checked when the store is opened (url.c) */
    char *endpoint, *region, *profile, *ca_bundle;
};
/* The bounds of http_part_size= and http_connections=: store/opts.c refuses a value
 * outside them, and the object-storage backend relies on them (the smallest part it
 * cuts a prefix into, the size of its handle pool). */
#define PCR_HTTP_PART_SIZE_MIN   UINT64_C(64000) /* "64k" */
#define PCR_HTTP_CONNECTIONS_MAX 256
#define PCR_STORE_OPTS_INIT                                                                        \
    {                                                                                              \
        .http_retries = -1                                                                         \
    }

/* Take option @name with value @val into @o when it is one of the above.
 * @return 0 taken, 1 not one of these options, -1 a bad value (one line in @msg, as
 *         util/optparse.h writes it), -ENOMEM. */
int pcr_store_opt(struct pcr_store_opts *o, const char *name, const char *val, char *msg,
                  size_t len);
/* Whether option @name (one of the above) only means something for a store in
 * object storage. */
int pcr_store_opt_remote_only(const char *name);
/* @o's object-storage part into @ho (cache_dir points into @o). */
void pcr_store_opts_http(const struct pcr_store_opts *o, struct pcr_http_opts *ho);
/* bwlimit= and readahead= applied to the open store @s. */
void pcr_store_opts_apply(const struct pcr_store_opts *o, struct pcr_store *s);
void pcr_store_opts_free(struct pcr_store_opts *o);

/* Counters of every object-storage backend of the process, summed. */
struct pcr_http_stats {
    uint64_t requests;          /* HTTP requests sent (HEAD and GET, retries included) */
    uint64_t gets;              /* GETs of record bytes: part fetches and direct reads */
    uint64_t prefix_fetches;    /* of which part GETs of prefix fetches (advise) */
    uint64_t bytes;             /* body bytes received */
    uint64_t retries;           /* requests sent again after a failure */
    uint64_t errors;            /* requests that failed for good */
    uint64_t timeouts;          /* attempts that hit their deadline */
    uint64_t cache_hits;        /* ranges read from the prefix cache */
    uint64_t cache_misses;      /* ranges read with a GET of their own */
    uint64_t cache_bytes;       /* bytes of record prefixes in the cache now */
    uint64_t cache_limit;       /* its limit (0: no cache) */
    uint64_t evictions;         /* record prefixes dropped to make room */
    uint64_t throttled;         /* throttling answers (503 SlowDown, 429) */
    uint64_t backoff_ms;        /* time spent waiting before retries */
    uint64_t fetch_concurrency; /* part GETs allowed at once now (http_connections;
                                   fewer while the server throttles) */
    uint64_t concurrency_cuts;  /* times that number was halved for throttling */
    uint64_t refetches;         /* cached prefixes dropped after a checksum mismatch and
                                   fetched again */
    uint64_t index_refetches;   /* cached index.db copies that failed verification and
                                   were fetched again */
    uint64_t fetch_bytes;       /* of bytes: those of part GETs into the cache */
    uint64_t direct_bytes;      /* of bytes: those of direct reads (GETs of their own) */
    uint64_t front_pushes;      /* queued parts moved to the front for a waiting reader */
};
/* @return 0 and *out; -ENOENT no object-storage backend is open. */
int pcr_http_stats(struct pcr_http_stats *out);
/* The credentials of the s3:// store as a JSON object: {"source": "web identity
 * (role ARN)", "expires": "2026-01-02T03:04:05Z" or null, "renewals": N,
 * "renewal_failures": N}; never a key or token. @return 0; -ENOENT none open. */
int pcr_http_creds_json(char *out, size_t len);

static inline void pcr_backend_destroy(struct pcr_backend *b)
{
    if (b)
        b->ops->destroy(b);
}

#ifdef __cplusplus
}
#endif
#endif
