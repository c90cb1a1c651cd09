/* pcrfs — the object-storage backend's private state, shared by its files:
 *   url.c        s3:// and http(s):// URLs: endpoint, region, CA bundle
 *   creds.c      AWS credentials: the default chain and refresh (creds.h)
 *   http.c       libcurl: requests, retries and deadlines, the backend's functions
 *   httphdr.c    response header lines (status, Content-Range, ETag, Retry-After)
 *   httpcache.c  the record-prefix cache (advise): parts fetched over many connections
 *   httpstore.c  index.db into the local cache, and opening a store from a URL
 *
 * Every byte from the server is untrusted: status lines, header values and body
 * lengths are checked against what was asked before anything is used, and errors
 * become negative errno values once, in http.c (req_result()).
 */
#ifndef PCRFS_HTTP_INTERNAL_H
#define PCRFS_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>
#include "pcrfs/backend.h"

#define HTTP_MAX_URL   2048
#define HTTP_MAX_ETAG  130 /* S3's are 34 bytes; anything longer is refused */
#define HTTP_MAX_RANGE (1ULL << 40)
#define HTTP_MAX_CONNECTIONS 256 /* -o http_connections: the largest (store/opts.c) */
#define HTTP_DEFAULT_CONNECTIONS 32
#define HTTP_DEFAULT_PART_SIZE (8ULL << 20)

/* ---- url.c ---- */

/* Where a store lives and how requests to it are signed. */
struct http_target {
    char base[HTTP_MAX_URL]; /* URL of the store directory, no trailing '/' */
    char display[HTTP_MAX_URL]; /* the URL as the user wrote it, for messages */
    bool s3;                 /* s3:// (an error body is S3's XML) */
    bool sign;               /* SigV4 with the credentials below */
    char region[64];
    char sigv4[96];          /* "aws:amz:REGION:s3" */
    struct http_creds *creds; /* s3://: the provider chain's state (creds.h) */
    char *ca_bundle;         /* CA certificates for https, or NULL: the system's */
};

/* Parse @url ("s3://BUCKET[/PREFIX]", "http[s]://HOST[:PORT]/PATH") with the
 * mount's @o (endpoint, region, profile, CA bundle; may be NULL) and find the
 * credentials. @return 0; -EINVAL (message in @err), -ENOMEM. */
int http_target_init(struct http_target *t, const char *url, const struct pcr_http_opts *o,
                     char *err, size_t errlen);
/* Whether @url has user-info ("user:pass@") before its host. */
bool http_url_has_userinfo(const char *url);
/* Where credentials go instead, for the messages that refuse them. */
extern const char http_userinfo_msg[];
void http_target_free(struct http_target *t);
/* The URL of object @name under the store; -ENAMETOOLONG, -EINVAL (a name with
 * characters no store object has). */
int http_object_url(const struct http_target *t, const char *name, char *out, size_t len);

/* ---- http.c ---- */

struct http_backend;

/* One request. A GET's body goes to @buf (exactly @len bytes) or, with @fd >= 0, to
 * that file at @fd_off onwards (the cache), reporting progress to @o. */
struct http_req {
    const char *url;
    bool head;
    uint64_t off, len;   /* GET: the range; len 0 = the whole object (@expect bytes) */
    uint64_t expect;     /* whole-object GET: its size from HEAD */
    const char *if_match; /* an ETag the object must still have, or NULL */
    uint8_t *buf;
    int fd;
    uint64_t fd_off;
    struct pcr_object *o;
    long timeout_ms;     /* 0: the backend's */
    /* results */
    long status;
    uint64_t got, size;  /* body bytes received; HEAD: Content-Length */
    char etag[HTTP_MAX_ETAG + 1];
    char code[64];       /* an S3 error code from the XML body ("NoSuchBucket") */
    int err;             /* negative errno of the last attempt */
    bool retryable;
    bool tls_failed;     /* the server's certificate was refused */
    bool cred_retried;   /* sent again after ExpiredToken & co. (once) */
    uint64_t cred_gen;   /* which set of credentials signed it (creds.h) */
    char errbuf[CURL_ERROR_SIZE]; /* libcurl's reason */
    bool throttled;      /* the last answer was 503 or 429 (SlowDown, TooManyRequests) */
    unsigned nthrottled; /* throttling answers over all attempts */
    uint64_t retry_after_ms; /* the last answer's Retry-After (0: none) */
    /* private */
    CURL *h;
    struct curl_slist *hdrs;
    bool has_crange, bad_hdr, crange_ok;
    uint64_t cr_a, cr_b, cr_total;
    char body[512];      /* the start of an error body */
    size_t nbody;
    int werr;            /* why the body was refused (negative errno) */
    long cap_ms;         /* this attempt's share of the deadline (0: none) */
    struct http_backend *hb;
};

struct http_backend {
    struct pcr_backend base;
    struct http_target t;
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL *pool[HTTP_MAX_CONNECTIONS]; /* idle easy handles, reused (and their connections) */
    unsigned npool;
    unsigned nconn;     /* part GETs in flight at once (-o http_connections) */
    uint64_t part_size; /* bytes of one part GET (-o http_part_size) */
    long timeout_ms;
    unsigned retries;
    struct pcr_http_stats st; /* relaxed atomics */
    struct http_cache *cache; /* NULL: no prefix cache */
    uint64_t throttle_until;  /* ms (monotonic): the server throttled; its waits are
                                 the longer throttling budget until then (atomic) */
    struct http_backend *next; /* the process's list, for pcr_http_stats() */
};

/* Perform @n requests, in parallel, each retried on 5xx, 429, timeouts and broken
 * connections (hb->retries times; throttling answers, 503 and 429, within the
 * throttling budget instead) with exponential backoff and full jitter, honouring
 * Retry-After, all within one deadline (http_deadline()).
 * @return 0 if all succeeded, else the first request's error (each has its own in
 * ->err). */
int http_perform(struct http_backend *hb, struct http_req *r, unsigned n);
/* What every handle of the backend has: no signals, http(s) only, no redirects
 * followed, our User-Agent. */
void http_handle_defaults(CURL *h);
/* The deadline (ms, monotonic) of the current operation for a wait that needs
 * @bytes from the server: the start of the caller's operation
 * (pcr_backend_op_start(), else @since, when the wait began) plus 2 x the timeout
 * (plus 1 s per 256 KiB beyond 4 MiB); while the server throttles, plus the
 * throttling budget instead. */
uint64_t http_deadline(struct http_backend *hb, uint64_t bytes, uint64_t since);
/* Whether the server answered with throttling recently (the longer budget holds). */
bool http_throttling(struct http_backend *hb);

/* ---- httphdr.c ---- */

/* One response header line (@n bytes, CRLF included or not) into @r: a status line
 * starts a new response; Content-Range, ETag and Retry-After are parsed, anything
 * else ignored. Never reads past @n; every value is checked. */
void http_header_line(struct http_req *r, const char *data, size_t n);
/* The largest Retry-After honoured (a longer one is cut to this, then to the
 * deadline) */
#define HTTP_RETRY_AFTER_MAX_MS 60000u
/* A one-line reason for a failed request, for messages: "access denied (HTTP 403
 * InvalidAccessKeyId)". */
void http_describe(const struct http_req *r, char *out, size_t len);
static inline void http_count(uint64_t *ctr, uint64_t n)
{
    __atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* The open object: a record or a token shard. */
struct pcr_object {
    char url[HTTP_MAX_URL];
    char etag[HTTP_MAX_ETAG + 1]; /* "" when the server gave none (or a weak one) */
    uint64_t size;
    bool whole;             /* fetched whole into the cache on first read */
    /* cache state: under the cache's lock (httpcache.c) */
    int fd;                 /* cache file (unlinked), or -1 */
    uint64_t psize;         /* bytes of one part (the last one may be shorter) */
    struct http_part *parts; /* [nparts], allocated on first use, or NULL */
    unsigned nparts;
    unsigned busy;          /* parts queued or being fetched */
    uint64_t held;          /* bytes of the cache's limit reserved for this object */
    uint64_t advised;       /* the largest end advise() asked for */
    int fetch_err;          /* the last failed part's error, for its waiters */
    uint64_t fetch_gen;     /* counts finished part fetches */
    uint64_t retry_after;   /* no refetch before this (ms, monotonic) after a failure */
    unsigned users;         /* readers preading fd: not evicted meanwhile */
    uint64_t lru;           /* last use (a counter) */
    struct pcr_object *cprev, *cnext; /* the cache's list of objects */
};

/* ---- httpcache.c ---- */

struct http_cache;
/* A cache of record prefixes in files under @dir (created if needed), at most
 * @limit bytes. @return 0; a negative errno (then the backend runs without one). */
int http_cache_new(struct http_backend *hb, const char *dir, uint64_t limit,
                   struct http_cache **out);
void http_cache_free(struct http_cache *c);
void http_cache_add(struct http_cache *c, struct pcr_object *o);
void http_cache_remove(struct http_cache *c, struct pcr_object *o);
/* advise(): queue the parts of @o that hold [off, off + len) and are not cached. */
int http_cache_advise(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len);
/* Serve [off, off + len) from the cache (waiting for a fetch in flight that will
 * bring it). @return 1 served, 0 not cached (read it directly), a negative errno
 * (the fetch that was to bring it failed). */
int http_cache_read(struct http_cache *c, struct pcr_object *o, uint64_t off, size_t len,
                    void *buf);
/* A part fetch wrote @n more bytes at offset @off of the object into the cache file. */
void http_cache_progress(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t n);
/* The server answered with throttling: fewer part fetches at once. */
void http_cache_throttled(struct http_cache *c);
/* Forget @o's cached bytes (they failed a check): the next read fetches them again. */
void http_cache_drop(struct http_cache *c, struct pcr_object *o);
uint64_t http_now_ms(void);

/* ---- httpstore.c ---- */

/* The default cache directory: $XDG_CACHE_HOME/pcrfs, ~/.cache/pcrfs, or
 * /var/cache/pcrfs for root. */
int http_default_cache_dir(char *out, size_t len);

#endif
