/* pcrfs — the bottom of the object-storage backend: store URLs (url.c), response
 * header lines (httphdr.c) and the transport (httpxfer.c): libcurl handles and
 * their pool, requests with retries, backoff and one deadline, throttling
 * detection, credentials applied per request (creds.h). Calls nothing above it:
 * what a layer above must hear of a transfer (progress, throttling) it passes
 * down as callbacks in struct http_req.
 *
 * Every byte from the server is untrusted: status lines, header values and body
 * lengths are checked against what was asked before anything is used, and errors
 * become negative errno values once, in httpxfer.c (req_result()).
 */
#ifndef PCRFS_HTTPXFER_H
#define PCRFS_HTTPXFER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>
#include "pcrfs/backend.h"
#include "backend/httpbase.h"

#define HTTP_MAX_URL             2048
#define HTTP_MAX_ETAG            130 /* S3's are 34 bytes; anything longer is refused */
#define HTTP_MAX_RANGE           (1ULL << 40)
#define HTTP_MAX_CONNECTIONS     256 /* -o http_connections: the largest (store/opts.c) */
#define HTTP_DEFAULT_CONNECTIONS 32
#define HTTP_DEFAULT_PART_SIZE   (8ULL << 20)

/* ---- url.c ---- */

/* Where a store lives and how requests to it are signed. */
struct http_target {
    char base[HTTP_MAX_URL];    /* URL of the store directory, no trailing '/' */
    char display[HTTP_MAX_URL]; /* the URL as the user wrote it, for messages */
    bool s3;                    /* s3:// (an error body is S3's XML) */
    bool sign;                  /* SigV4 with the credentials below */
    char region[64];
    char sigv4[96];           /* "aws:amz:REGION:s3" */
    struct http_creds *creds; /* s3://: the provider chain's state (creds.h) */
    char *ca_bundle;          /* CA certificates for https, or NULL: the system's */
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

/* ---- httpxfer.c: the transport ---- */

#define HTTP_MAX_BATCH 256 /* requests in one http_perform() */

struct http_transport;

/* One request. A GET's body goes to @buf (exactly @len bytes) or, with @fd >= 0, to
 * that file at @fd_off onwards (the cache), reporting progress to @on_progress.
 * The callbacks are how a layer above hears of the transfer: the transport calls
 * them and knows nothing of who is behind @arg. */
struct http_req {
    const char *url;
    bool head;
    uint64_t off, len;    /* GET: the range; len 0 = the whole object (@expect bytes) */
    uint64_t expect;      /* whole-object GET: its size from HEAD */
    const char *if_match; /* an ETag the object must still have, or NULL */
    uint8_t *buf;
    int fd;
    uint64_t fd_off;
    /* @n more bytes written to @fd (in the transfer's thread), or NULL */
    void (*on_progress)(void *arg, uint64_t n);
    /* an answer was 503 or 429 (after the attempt, before the backoff), or NULL */
    void (*on_throttled)(void *arg);
    void *arg;
    long timeout_ms; /* 0: the backend's */
    /* results */
    long status;
    uint64_t got, size; /* body bytes received; HEAD: Content-Length */
    char etag[HTTP_MAX_ETAG + 1];
    char code[64]; /* an S3 error code from the XML body ("NoSuchBucket") */
    int err;       /* negative errno of the last attempt */
    bool retryable;
    bool tls_failed;              /* the server's certificate was refused */
    bool cred_retried;            /* sent again after ExpiredToken & co. (once) */
    uint64_t cred_gen;            /* which set of credentials signed it (creds.h) */
    char errbuf[CURL_ERROR_SIZE]; /* libcurl's reason */
    bool throttled;               /* the last answer was 503 or 429 (SlowDown, TooManyRequests) */
    unsigned nthrottled;          /* throttling answers over all attempts */
    uint64_t retry_after_ms;      /* the last answer's Retry-After (0: none) */
    /* private */
    CURL *h;
    struct curl_slist *hdrs;
    bool has_crange, bad_hdr, crange_ok;
    uint64_t cr_a, cr_b, cr_total;
    char body[512]; /* the start of an error body */
    size_t nbody;
    int werr;    /* why the body was refused (negative errno) */
    long cap_ms; /* this attempt's share of the deadline (0: none) */
    struct http_transport *tp;
};

/* The transport of one store: where requests go, how they are signed, the pooled
 * connections and the counters. Knows nothing of the layers above. */
struct http_transport {
    struct http_target t;
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL *pool[HTTP_MAX_CONNECTIONS]; /* idle easy handles, reused (and their connections) */
    unsigned npool;
    unsigned nconn;     /* part GETs in flight at once (-o http_connections): the pool
                           and the connection cache hold that many and more */
    uint64_t part_size; /* bytes of one part GET (-o http_part_size), for the cache */
    long timeout_ms;
    unsigned retries;
    struct pcr_http_stats st; /* relaxed atomics; every layer counts here */
    uint64_t throttle_until;  /* ms (monotonic): the server throttled; its waits are
                                 the longer throttling budget until then (atomic) */
};

/* Perform @n requests, in parallel, each retried on 5xx, 429, timeouts and broken
 * connections (tp->retries times; throttling answers, 503 and 429, within the
 * throttling budget instead) with exponential backoff and full jitter, honouring
 * Retry-After, all within one deadline (http_deadline()).
 * @return 0 if all succeeded, else the first request's error (each has its own in
 * ->err). */
int http_perform(struct http_transport *tp, struct http_req *r, unsigned n);
/* Set up @tp (its target already set): timeout, retries, connections and part
 * size from @o, the shared connection cache. @return 0; -ENOMEM (undone by http_xfer_fini()). */
int http_xfer_init(struct http_transport *tp, const struct pcr_http_opts *o);
void http_xfer_fini(struct http_transport *tp);
/* The deadline (ms, monotonic) of the current operation for a wait that needs
 * @bytes from the server: the start of the caller's operation
 * (pcr_backend_op_start(), else @since, when the wait began) plus 2 x the timeout
 * (plus 1 s per 256 KiB beyond 4 MiB); while the server throttles, plus the
 * throttling budget instead. */
uint64_t http_deadline(struct http_transport *tp, uint64_t bytes, uint64_t since);
/* Whether the server answered with throttling recently (the longer budget holds). */
bool http_throttling(struct http_transport *tp);

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

#endif
