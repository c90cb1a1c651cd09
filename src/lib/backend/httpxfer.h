/* pcrfs — the bottom of the object-storage backend: store URLs (url.c) and the
 * transport (httpxfer.c; one request and its header lines: httpreq.h): libcurl
 * handles and their pool, requests with retries, backoff and one deadline,
 * throttling detection, credentials applied per request (creds.h). Calls nothing above it:
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
#include "backend/httpreq.h"

#define HTTP_MAX_URL             2048
#define HTTP_MAX_RANGE           (1ULL << 40)
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

/* The transport of one store: where requests go, how they are signed, the pooled
 * connections and the counters. Knows nothing of the layers above. */
struct http_transport {
    struct http_target t;
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_lock;
    CURL *pool[PCR_HTTP_CONNECTIONS_MAX]; /* idle easy handles, reused (and their connections) */
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

/* A one-line reason for a failed request, for messages: "access denied (HTTP 403
 * InvalidAccessKeyId)". */
void http_describe(const struct http_req *r, char *out, size_t len);

#endif
