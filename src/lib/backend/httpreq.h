/* pcrfs — one request of the object-storage transport (struct http_req: what a
 * layer above asks, what comes back), and the parser of its response header lines
 * (httphdr.c), below the transport (httpxfer.h, which includes this): the parser
 * fills a request and calls nothing. Private to src/lib/backend.
 */
#ifndef PCRFS_HTTPREQ_H
#define PCRFS_HTTPREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <curl/curl.h>

#define HTTP_MAX_ETAG 130 /* S3's are 34 bytes; anything longer is refused */

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
    /* whether the layer above no longer wants the request (its object is being
     * closed, the mount ends), or NULL: asked as the transfer progresses (libcurl's
     * progress callback: with every few bytes, and about once a second while none
     * come), it aborts the transfer with -ECANCELED, and no attempt or backoff
     * follows; an exit need not wait out a trickling or hung GET */
    bool (*cancelled)(void *arg);
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

/* ---- httphdr.c ---- */

/* One response header line (@n bytes, CRLF included or not) into @r: a status line
 * starts a new response; Content-Range, ETag and Retry-After are parsed, anything
 * else ignored. Never reads past @n; every value is checked. */
void http_header_line(struct http_req *r, const char *data, size_t n);
/* The largest Retry-After honoured (a longer one is cut to this, then to the
 * deadline) */
#define HTTP_RETRY_AFTER_MAX_MS 60000u

#endif
