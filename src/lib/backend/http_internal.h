/* pcrfs — the object-storage backend's files, in layers; each calls only the ones
 * below it, and each header includes only the one below (README.md):
 *   httpstore.c  index.db into the local cache (../store/remote.c opens the store)
 *   http.c       the backend's functions (pcr_backend_ops)          (this header)
 *   httpstats.c  the process's list of transports, for pcr_http_stats()
 *                                                                   (httpstats.h)
 *   httpcache.c  the record-prefix cache (advise): parts fetched over many
 *                connections (httpcache.h)
 *   httpxfer.c   the transport: libcurl handles and their pool, requests, retries,
 *                deadlines, throttling; httphdr.c its header lines; url.c the
 *                store's URL, endpoint, region and CA bundle           (httpxfer.h)
 *   creds.c      AWS credentials: the default chain and refresh         (creds.h)
 *   httpbase.c   the leaf: clock, handle defaults                     (httpbase.h)
 */
#ifndef PCRFS_HTTP_INTERNAL_H
#define PCRFS_HTTP_INTERNAL_H

#include "backend/httpcache.h"
#include "backend/httpstats.h"

/* ---- http.c ---- */

/* The backend: the pcr_backend_ops of http.c over a transport and a cache. */
struct http_backend {
    struct pcr_backend base;
    struct http_transport x;     /* requests, connections, counters */
    struct http_cache *cache;    /* NULL: no prefix cache */
    struct http_stats_entry reg; /* on the process's list, for pcr_http_stats() */
    /* direct range GETs in flight (readers' own, outside the cache's parts): at most
     * x.nconn at once, so -o http_connections bounds them too */
    pthread_mutex_t direct_lock;
    pthread_cond_t direct_free; /* CLOCK_MONOTONIC */
    unsigned direct_inflight;
};

/* ---- httpstore.c ---- */

/* The default cache directory: $XDG_CACHE_HOME/pcrfs, ~/.cache/pcrfs, or
 * /var/cache/pcrfs for root. */
int http_default_cache_dir(char *out, size_t len);

#endif
