/* pcrfs — the record-prefix cache of the object-storage backend (httpcache.c):
 * above the transport (httpxfer.h), below the backend's functions (http.c).
 */
#ifndef PCRFS_HTTPCACHE_H
#define PCRFS_HTTPCACHE_H

#include "backend/httpxfer.h"

/* The open object: a record or a token shard. */
struct pcr_object {
    char url[HTTP_MAX_URL];
    char etag[HTTP_MAX_ETAG + 1]; /* "" when the server gave none (or a weak one) */
    uint64_t size;
    bool whole; /* fetched whole into the cache on first read */
    /* cache state: under the cache's lock (httpcache.c) */
    int fd;                  /* cache file (unlinked), or -1 */
    uint64_t psize;          /* bytes of one part (the last one may be shorter) */
    struct http_part *parts; /* [nparts], allocated on first use, or NULL */
    unsigned nparts;
    unsigned busy;                    /* parts queued or being fetched */
    uint64_t deferred;                /* advised, its prefetch waiting for a turn: order */
    uint64_t group;                   /* the advice it was deferred by (objects advised
                                         together share it: their parts interleave) */
    uint64_t read_at;                 /* the cache's read count at its last read; 0: not
                                         read since advised (prefetch does not evict it) */
    bool closing;                     /* http_cache_remove() runs: no part queued again */
    uint64_t held;                    /* bytes of the cache's limit reserved for this object */
    uint64_t advised;                 /* the largest end advise() asked for */
    int fetch_err;                    /* the last failed part's error, for its waiters */
    uint64_t fetch_gen;               /* counts finished part fetches */
    uint64_t retry_after;             /* no refetch before this (ms, monotonic) after a failure */
    unsigned users;                   /* readers preading fd: not evicted meanwhile */
    uint64_t lru;                     /* last use (a counter) */
    struct pcr_object *cprev, *cnext; /* the cache's list of objects */
};

/* ---- httpcache.c ---- */

struct http_cache;
/* A cache of record prefixes of @tp's store in files under @dir (created if needed), at
 * most @limit bytes, fetched as parts of tp->part_size over tp->nconn connections.
 * @return 0; a negative errno (then the backend runs without one). */
int http_cache_new(struct http_transport *tp, const char *dir, uint64_t limit,
                   struct http_cache **out);
void http_cache_free(struct http_cache *c);
/* Abort every part GET in flight, drop the queued ones and wait for the fetch threads
 * to end: the closes that follow wait for nothing (a store closing: unmount). */
void http_cache_stop(struct http_cache *c);
void http_cache_add(struct http_cache *c, struct pcr_object *o);
void http_cache_remove(struct http_cache *c, struct pcr_object *o);
/* advise(): queue the parts of @o that hold [off, off + len) and are not cached. */
int http_cache_advise(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len);
/* advise_many(): the prefixes [0, len[i]) of the @n objects @o, read side by side:
 * their parts are queued interleaved (the first of each, then the second...), after
 * those of earlier advice. */
int http_cache_advise_many(struct http_cache *c, struct pcr_object *const *o, const uint64_t *len,
                           size_t n);
/* Serve the ranges @r[0..n) of one read from the cache, waiting for fetches in
 * flight that bring them (and for at most one part that has not started); @hit[k]
 * says whether @r[k] was served (the others: read them directly). In an operation
 * that takes local bytes only (pcr_backend_op_begin_local()) it serves what the
 * cache holds now, without waiting or asking for a part. @return 0, or a negative
 * errno (the fetch that was to bring them failed, the deadline passed). */
int http_cache_read(struct http_cache *c, struct pcr_object *o, const struct pcr_range *r,
                    unsigned n, bool *hit);
/* A part fetch wrote @n more bytes at offset @off of the object into the cache file
 * (through its request's on_progress). */
void http_cache_progress(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t n);
/* The server answered with throttling: fewer part fetches at once (through the
 * on_throttled of the cache's fetches and of the backend's own requests). */
void http_cache_throttled(struct http_cache *c);
/* Forget the cached bytes of @o in [off, off + len) (they failed a check): the
 * parts that hold them, unless on their way; the next read fetches them again. */
void http_cache_drop(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len);

#endif
