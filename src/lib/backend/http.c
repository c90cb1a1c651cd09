/* pcrfs — the object-storage backend (see pcrfs/backend.h): HEAD to open, ranged
 * GETs to read, over libcurl.
 *
 * Connections. Easy handles are pooled and share one connection cache and DNS cache
 * (a CURLSH with a lock per data type, held only for cache bookkeeping inside
 * libcurl, never during a transfer), so requests from every FUSE worker reuse
 * kept-alive connections and a slow request never blocks the others.
 *
 * Deadlines. Every attempt has a hard time limit (CURLOPT_TIMEOUT_MS: the backend's
 * timeout, plus time for the bytes of a large prefix at 256 KiB/s) and a stall
 * limit (no byte for the timeout's length), so a dead, hung or slow server fails a
 * request in bounded time. Failures that may pass (5xx, timeouts, broken
 * connections) are retried with exponential backoff, a bounded number of times,
 * and all attempts together within ONE deadline: 2 x the timeout from the start of
 * the reader's operation (pcr_backend_op_start(): a read(2) that opens a record,
 * reads its header and its bytes waits that long in total, not per request).
 *
 * Throttling. 503 (SlowDown) and 429 are the server asking for less, not failing:
 * they are retried within a longer budget (THROTTLE_BUDGET_MS from the operation's
 * start), after Retry-After when the answer gives one, else after a backoff with
 * full jitter (uniform in [0, base x 2^attempt], AWS's advice) drawn from a
 * generator seeded per process, so that the daemons of a cluster do not retry in
 * step. The prefix cache also lowers its fetch concurrency meanwhile (httpcache.c).
 *
 * Checks. The status, Content-Range and the body's length must be exactly what was
 * asked; a server that ignores Range, sends more or fewer bytes, or another range
 * fails the request (and the read, with EIO), never shifts bytes into a reader's
 * buffer. Every error becomes a negative errno in req_result(), and only there.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/http_internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_RETRIES    3
#define MAX_RETRIES        20
#define MERGE_GAP          (64u * 1024)       /* ranges closer than this: one GET, */
#define MERGE_WASTE        8                  /* ... if the gaps stay under 1/8 of it */
#define MERGE_MAX          (8u * 1024 * 1024) /* ... of at most this many bytes */
#define SLOW_RATE          (256u * 1024)      /* bytes/s a large request may take */
#define BACKOFF_MS         100
#define BACKOFF_MAX_MS     2000
#define THROTTLE_BACKOFF_MAX_MS 5000
#define THROTTLE_BUDGET_MS 30000 /* throttling answers: retried this long (pcrfs(1)) */
#define MIN_ATTEMPT_MS     50    /* less left of the deadline: no new attempt */
#define HTTP_FAIL_HOLD_MS  5000  /* a record that failed: its files fail at once this
                                    long, then it is probed again (pcrfs(1)) */
#define MAX_BATCH          256
#define WHOLE_MAX          (64u * 1024 * 1024)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_backend *registry;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

uint64_t http_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- jitter: a generator seeded per process ---- */

static pthread_once_t rng_once = PTHREAD_ONCE_INIT;
static uint64_t rng_state;

static void rng_seed(void)
{
    uint64_t s = 0;
    struct timespec ts;

    if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != (ssize_t)sizeof(s)) {
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec;
    }
    __atomic_store_n(&rng_state, s ^ ((uint64_t)getpid() << 32), __ATOMIC_RELAXED);
}

/* A uniform number in [0, @n] (splitmix64 over a shared counter; the pid is mixed
 * in, so a daemon forked after the first draw still has its own sequence). */
static uint64_t rng_upto(uint64_t n)
{
    uint64_t z;

    pthread_once(&rng_once, rng_seed);
    z = __atomic_add_fetch(&rng_state, 0x9e3779b97f4a7c15ULL, __ATOMIC_RELAXED) ^
        ((uint64_t)getpid() << 20);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return n == UINT64_MAX ? z : z % (n + 1);
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- the shared connection cache ---- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    struct http_backend *hb = ctx;
    (void)h;
    (void)access;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&hb->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    struct http_backend *hb = ctx;
    (void)h;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&hb->share_lock[data]);
}

static CURL *handle_get(struct http_backend *hb)
{
    CURL *h = NULL;

    pthread_mutex_lock(&hb->pool_lock);
    if (hb->npool)
        h = hb->pool[--hb->npool];
    pthread_mutex_unlock(&hb->pool_lock);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

static void handle_put(struct http_backend *hb, CURL *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&hb->pool_lock);
    if (hb->npool < PCR_ARRAY_SIZE(hb->pool)) {
        hb->pool[hb->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&hb->pool_lock);
    if (h)
        curl_easy_cleanup(h);
}

/* ---- callbacks: untrusted bytes ---- */

static size_t on_header(char *data, size_t size, size_t nitems, void *ctx)
{
    size_t n = size * nitems;

    http_header_line(ctx, data, n);
    return n;
}

/* Whether the response's status and Content-Range are exactly what was asked: a
 * ranged GET wants 206 with our range (or 200 when the range is the whole object,
 * as some servers answer), a whole-object GET 200. */
static bool range_ok(const struct http_req *r)
{
    if (!r->len)
        return r->status == 200;
    if (r->status == 200)
        return r->off == 0 && r->expect == r->len;
    return r->status == 206 && r->has_crange && !r->bad_hdr && r->cr_a == r->off &&
           r->cr_b == r->off + r->len - 1 &&
           (!r->expect || r->cr_total == UINT64_MAX || r->cr_total == r->expect);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct http_req *r = ctx;
    size_t n = size * nmemb;
    uint64_t want = r->len ? r->len : r->expect;

    if (r->status < 200 || r->status > 299) {
        /* an error document: keep its start for the message */
        size_t k = sizeof(r->body) - 1 - r->nbody;
        if (k > n)
            k = n;
        memcpy(r->body + r->nbody, data, k);
        r->nbody += k;
        r->body[r->nbody] = '\0';
        return n;
    }
    if (r->got == 0 && !range_ok(r)) {
        r->werr = -EPROTO; /* another range than asked: not a byte of it is kept */
        return 0;
    }
    if (r->got + n > want) {
        r->werr = -EPROTO; /* more bytes than asked: never written anywhere */
        return 0;
    }
    if (r->fd >= 0) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = pwrite(r->fd, data + done, n - done,
                               (off_t)(r->fd_off + r->got + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                r->werr = w < 0 && errno == ENOSPC ? -ENOSPC : -EROFS;
                return 0;
            }
            done += (size_t)w;
        }
        if (r->o && r->hb->cache)
            http_cache_progress(r->hb->cache, r->o, r->fd_off + r->got, n);
    } else {
        memcpy(r->buf + r->got, data, n);
    }
    r->got += n;
    http_count(&r->hb->st.bytes, n);
    return n;
}

/* ---- one request ---- */

void http_handle_defaults(CURL *h)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* no Authorization to another host */
    curl_easy_setopt(h, CURLOPT_USERAGENT, "pcrfs/" PCR_VERSION);
}

static int req_setup(struct http_backend *hb, struct http_req *r)
{
    const struct http_target *t = &hb->t;
    long timeout = r->timeout_ms ? r->timeout_ms : hb->timeout_ms;
    uint64_t bytes = r->len ? r->len : r->expect;
    char hdr[HTTP_MAX_ETAG + 64];
    struct curl_slist *l = NULL;
    CURL *h = r->h;

    r->status = 0;
    r->nbody = 0;
    r->werr = 0;
    r->has_crange = r->bad_hdr = false;
    r->etag[0] = r->code[0] = '\0';
    if (bytes > 4u * 1024 * 1024)
        timeout += (long)(bytes / SLOW_RATE * 1000u);
    if (r->cap_ms && timeout > r->cap_ms)
        timeout = r->cap_ms; /* what is left of the deadline */
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_SHARE, hb->share);
    /* the shared connection cache closes the oldest idle connection once it holds
     * more than this (libcurl's default: 5): room for every part GET in flight and
     * the readers' own GETs, or each part would open a new connection */
    curl_easy_setopt(h, CURLOPT_MAXCONNECTS, (long)hb->nconn + 16L);
    http_handle_defaults(h);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout < hb->timeout_ms ? timeout : hb->timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, hb->timeout_ms >= 2000 ? hb->timeout_ms / 1000 : 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    r->errbuf[0] = '\0';
    if (t->ca_bundle)
        curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_bundle);
    if (r->head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (t->sign) {
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, t->sigv4);
        /* libcurl before 8.x signs but does not send the payload hash S3 requires */
        l = curl_slist_append(l, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (!l)
            return -ENOMEM;
        /* key, secret and session token: one consistent set, copied by libcurl */
        if (http_creds_apply(t->creds, h, &l, &r->cred_gen) != 0)
            goto oom;
    }
    if (!r->head && r->len) {
        snprintf(hdr, sizeof(hdr), "Range: bytes=%llu-%llu", (unsigned long long)r->off,
                 (unsigned long long)(r->off + r->len - 1));
        struct curl_slist *l2 = curl_slist_append(l, hdr);
        if (!l2)
            goto oom;
        l = l2;
    }
    if (r->if_match && r->if_match[0]) {
        snprintf(hdr, sizeof(hdr), "If-Match: %s", r->if_match);
        struct curl_slist *l2 = curl_slist_append(l, hdr);
        if (!l2)
            goto oom;
        l = l2;
    }
    r->hdrs = l;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    return 0;
oom:
    curl_slist_free_all(l);
    return -ENOMEM;
}

/* S3's <Code>...</Code> from an error document, letters and digits only. */
static void error_code(struct http_req *r)
{
    const char *p = strstr(r->body, "<Code>");
    size_t k = 0;

    r->code[0] = '\0';
    if (!p)
        return;
    for (p += 6; k + 1 < sizeof(r->code) && (isalnum((unsigned char)*p) || *p == '.'); p++)
        r->code[k++] = *p;
    r->code[k] = '\0';
}

/* The one place a transfer's outcome becomes an errno. */
static int req_result(struct http_backend *hb, struct http_req *r, CURLcode cc)
{
    uint64_t want = r->len ? r->len : r->expect;

    r->retryable = false;
    error_code(r);
    if (cc != CURLE_OK && r->werr) {
        r->retryable = false;
        return r->err = r->werr == -EPROTO ? -EIO : r->werr;
    }
    switch (cc) {
    case CURLE_OK:
        break;
    case CURLE_OPERATION_TIMEDOUT:
        http_count(&hb->st.timeouts, 1);
        r->retryable = true;
        return r->err = -ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
        return r->err = -ENOMEM;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        /* not a dead host: a certificate nobody here trusts. Not retried. */
        r->tls_failed = true;
        return r->err = -EIO;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        r->retryable = true;
        return r->err = -EIO;
    default:
        return r->err = -EIO;
    }
    if (r->status == 429 || r->status >= 500) {
        r->retryable = true;
        return r->err = -EIO;
    }
    if (r->status == 404 || r->status == 410)
        return r->err = -ENOENT;
    if (r->status == 401 || r->status == 403)
        return r->err = -EACCES;
    if (r->status == 412)
        return r->err = -ESTALE; /* replaced since it was opened */
    if (r->status == 416)
        return r->err = -ENODATA;
    if (r->head) {
        curl_off_t cl = -1;
        if (r->status != 200 ||
            curl_easy_getinfo(r->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK ||
            cl < 0)
            return r->err = -EIO;
        r->size = (uint64_t)cl;
        return r->err = 0;
    }
    if (!range_ok(r))
        return r->err = -EIO;
    if (r->got != want) {
        r->retryable = r->got < want; /* cut short: as a broken connection */
        return r->err = -EIO;
    }
    return r->err = 0;
}

void http_describe(const struct http_req *r, char *out, size_t len)
{
    const char *what;

    switch (r->err) {
    case -ENOENT:
        what = !strcmp(r->code, "NoSuchBucket") ? "no such bucket" : "not found";
        break;
    case -EACCES:
        what = "access denied";
        break;
    case -ETIMEDOUT:
        what = "timed out";
        break;
    case -ESTALE:
        what = "the object changed since it was opened";
        break;
    default:
        if (r->tls_failed) {
            /* libcurl's reason names what failed: the issuer ("self-signed
             * certificate in certificate chain", "unable to get local issuer
             * certificate") or the name ("no alternative certificate subject name
             * matches target host name 'HOST'") */
            const char *host = r->url ? strstr(r->url, "://") : NULL;
            host = host ? host + 3 : "";
            snprintf(out, len, "TLS certificate verification failed for %.*s: %s (give the CA "
                     "with -o ca_bundle=FILE or AWS_CA_BUNDLE)", (int)strcspn(host, "/"), host,
                     r->errbuf[0] ? r->errbuf : "untrusted certificate");
            return;
        }
        what = r->status >= 300 ? "request failed"
               : r->status ? "unexpected answer (wrong length or range)"
                           : "cannot connect or connection lost";
    }
    if (r->status >= 300 && r->code[0])
        snprintf(out, len, "%s (HTTP %ld %s)", what, r->status, r->code);
    else if (r->status >= 300)
        snprintf(out, len, "%s (HTTP %ld)", what, r->status);
    else
        snprintf(out, len, "%s", what);
}

/* One attempt at every request in @r[0..n) that is not done, in parallel. */
static void perform_once(struct http_backend *hb, struct http_req **r, unsigned n)
{
    CURLM *m;
    int running = 0;

    for (unsigned i = 0; i < n; i++)
        http_count(&hb->st.requests, 1);
    if (n == 1) {
        req_result(hb, r[0], curl_easy_perform(r[0]->h));
        return;
    }
    m = curl_multi_init();
    if (!m) {
        for (unsigned i = 0; i < n; i++)
            r[i]->err = -ENOMEM;
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        curl_easy_setopt(r[i]->h, CURLOPT_PRIVATE, r[i]);
        r[i]->err = -EINPROGRESS;
        if (curl_multi_add_handle(m, r[i]->h) != CURLM_OK)
            r[i]->err = -ENOMEM;
    }
    /* ends: every handle has a hard deadline (req_setup) */
    for (;;) {
        CURLMsg *msg;
        int left;
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        while ((msg = curl_multi_info_read(m, &left))) {
            struct http_req *q = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&q);
            if (q)
                req_result(hb, q, msg->data.result);
        }
        if (!running)
            break;
        if (curl_multi_poll(m, NULL, 0, 1000, NULL) != CURLM_OK)
            break;
    }
    for (unsigned i = 0; i < n; i++) {
        curl_multi_remove_handle(m, r[i]->h);
        if (r[i]->err == -EINPROGRESS) {
            r[i]->err = -EIO;
            r[i]->retryable = true;
        }
    }
    curl_multi_cleanup(m);
}

/* S3's answers to a request signed with credentials that expired or were revoked
 * while it was in flight. */
static bool token_expired(const struct http_req *r)
{
    return (r->status == 400 || r->status == 403) &&
           (!strcmp(r->code, "ExpiredToken") || !strcmp(r->code, "InvalidToken") ||
            !strcmp(r->code, "TokenRefreshRequired"));
}

static uint64_t op_start_or(uint64_t now)
{
    uint64_t start = pcr_backend_op_start();
    return start && start <= now ? start : now;
}

static uint64_t allowance(uint64_t bytes)
{
    return bytes > 4u * 1024 * 1024 ? bytes / SLOW_RATE * 1000u : 0;
}

bool http_throttling(struct http_backend *hb)
{
    return __atomic_load_n(&hb->throttle_until, __ATOMIC_RELAXED) > http_now_ms();
}

uint64_t http_deadline(struct http_backend *hb, uint64_t bytes, uint64_t since)
{
    uint64_t start = op_start_or(since);
    uint64_t end = start + 2u * (uint64_t)hb->timeout_ms + allowance(bytes);

    if (http_throttling(hb) && end < start + THROTTLE_BUDGET_MS + allowance(bytes))
        end = start + THROTTLE_BUDGET_MS + allowance(bytes);
    return end;
}

/* How long to wait before the next attempt of @q (its @attempt-th failure). */
static uint64_t backoff(const struct http_req *q, unsigned attempt)
{
    uint64_t cap = q->throttled ? THROTTLE_BACKOFF_MAX_MS : BACKOFF_MAX_MS;
    uint64_t ms = (uint64_t)BACKOFF_MS << (attempt < 6 ? attempt : 6);

    if (q->throttled && q->retry_after_ms)
        /* the server said when; a little jitter on top keeps clients apart */
        return q->retry_after_ms + rng_upto(BACKOFF_MS);
    return rng_upto(ms < cap ? ms : cap); /* full jitter */
}

int http_perform(struct http_backend *hb, struct http_req *r, unsigned n)
{
    struct http_req *todo[MAX_BATCH];
    unsigned ntodo, tries[MAX_BATCH] = {0};
    uint64_t bytes = 0, now = http_now_ms(), start = op_start_or(now);
    uint64_t renew_gen = 0;
    bool renew = false;
    int ret = 0;

    if (n > MAX_BATCH)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++) {
        r[i].hb = hb;
        r[i].got = 0;
        r[i].h = NULL;
        r[i].hdrs = NULL;
        r[i].err = -EINPROGRESS; /* not tried yet */
        r[i].cred_retried = r[i].tls_failed = false;
        r[i].throttled = false;
        r[i].nthrottled = 0;
        r[i].retry_after_ms = 0;
        bytes += r[i].len ? r[i].len : r[i].expect;
    }
    /* one deadline for all attempts: 2 x the timeout from the operation's start;
     * once the server throttles, the throttling budget */
    uint64_t end = start + 2u * (uint64_t)hb->timeout_ms + allowance(bytes);
    uint64_t tend = start + THROTTLE_BUDGET_MS + allowance(bytes);
    /* the server throttled (this operation's earlier request, say its HEAD, or
     * another's): this request gets the throttling budget too, or it would find the
     * operation's short deadline spent before its first attempt */
    bool throttled = http_throttling(hb);
    if (tend < end)
        tend = end;
    for (unsigned attempt = 0;; attempt++) {
        uint64_t until = throttled ? tend : end;
        now = http_now_ms();
        ntodo = 0;
        for (unsigned i = 0; i < n; i++) {
            struct http_req *q = &r[i];
            if (q->err == 0 || (q->err != -EINPROGRESS && !q->retryable))
                continue;
            if (now + MIN_ATTEMPT_MS > until) {
                /* out of time: the last answer stands */
                if (q->err == -EINPROGRESS)
                    q->err = -ETIMEDOUT;
                q->retryable = false;
                continue;
            }
            if (q->err != -EINPROGRESS) {
                /* a retry: a file sink keeps what arrived and asks for the rest */
                if (q->fd >= 0 && q->len && q->got > 0 && q->got < q->len) {
                    q->off += q->got;
                    q->len -= q->got;
                    q->fd_off += q->got;
                }
                q->got = 0;
                http_count(&hb->st.retries, 1);
            }
            q->cap_ms = (long)(until - now);
            q->h = handle_get(hb);
            if (!q->h || req_setup(hb, q) != 0) {
                handle_put(hb, q->h);
                q->h = NULL;
                q->err = -ENOMEM;
                q->retryable = false;
                continue;
            }
            if (!q->head)
                http_count(&hb->st.gets, 1);
            todo[ntodo++] = q;
        }
        if (ntodo)
            perform_once(hb, todo, ntodo);
        bool again = false;
        uint64_t wait = 0;
        for (unsigned i = 0; i < ntodo; i++) {
            struct http_req *q = todo[i];
            curl_slist_free_all(q->hdrs);
            q->hdrs = NULL;
            handle_put(hb, q->h);
            q->h = NULL;
            q->throttled = q->err && (q->status == 503 || q->status == 429);
            if (q->throttled) {
                q->nthrottled++;
                throttled = true;
                http_count(&hb->st.throttled, 1);
                if (hb->cache)
                    http_cache_throttled(hb->cache);
            } else if (q->err && token_expired(q) && !q->cred_retried && hb->t.sign) {
                /* renewed at once and tried again once, whatever the retry count */
                q->cred_retried = q->retryable = true;
                renew = true;
                renew_gen = q->cred_gen;
            } else if (q->err && q->retryable && tries[q - r]++ >= hb->retries) {
                q->retryable = false; /* out of retries: final */
            }
            if (q->err && q->retryable) {
                uint64_t w = q->cred_retried && renew ? 0 : backoff(q, attempt);
                again = true;
                wait = w > wait ? w : wait;
            }
        }
        if (!again)
            break;
        if (renew) {
            /* new credentials now, then the retry at once (no backoff: the server
             * did not fail, our credentials did) */
            renew = false;
            http_creds_expired(hb->t.creds, renew_gen);
            if (!wait)
                continue;
        }
        now = http_now_ms();
        if (throttled) {
            /* the cache's fetches and readers see it: longer waits, fewer fetches */
            uint64_t t = now + wait + THROTTLE_BACKOFF_MAX_MS;
            if (t > __atomic_load_n(&hb->throttle_until, __ATOMIC_RELAXED))
                __atomic_store_n(&hb->throttle_until, t, __ATOMIC_RELAXED);
        }
        if (now + wait + MIN_ATTEMPT_MS > (throttled ? tend : end)) {
            /* no time for another attempt after the wait: fail now, not later */
            for (unsigned i = 0; i < n; i++)
                r[i].retryable = false;
            break;
        }
        http_count(&hb->st.backoff_ms, wait);
        sleep_ms(wait);
    }
    for (unsigned i = 0; i < n; i++) {
        if (r[i].err && !ret)
            ret = r[i].err;
        if (r[i].err && r[i].err != -ENOSPC && r[i].err != -EROFS) /* not the server's */
            http_count(&hb->st.errors, 1);
    }
    return ret;
}

/* ---- the backend's functions ---- */

static int http_open(struct pcr_backend *b, const char *name, struct pcr_object **out)
{
    struct http_backend *hb = (struct http_backend *)b;
    struct pcr_object *o = calloc(1, sizeof(*o));
    struct http_req r = {.head = true, .fd = -1};
    int ret;

    if (!o)
        return -ENOMEM;
    ret = http_object_url(&hb->t, name, o->url, sizeof(o->url));
    if (ret) {
        free(o);
        return ret == -EINVAL ? -ENOENT : -EINVAL;
    }
    r.url = o->url;
    ret = http_perform(hb, &r, 1);
    if (ret) {
        char why[160];
        http_describe(&r, why, sizeof(why));
        /* the store says which record and why its files fail; the HTTP side here */
        pcr_log(ret == -ENOENT ? PCR_LOG_DEBUG : PCR_LOG_ERR, "%s: %s", o->url, why);
        free(o);
        return ret == -ENOENT || ret == -ENOMEM ? ret : -EIO;
    }
    o->size = r.size;
    /* a weak ETag cannot be used with If-Match (strong comparison never matches) */
    if (r.etag[0] && strncmp(r.etag, "W/", 2) != 0)
        memcpy(o->etag, r.etag, sizeof(o->etag));
    o->fd = -1;
    /* Token shards (tokens/) get no advice from the store, whose files are ~1 kB
     * blobs read one per file: a shard is worth one GET whole on first use rather
     * than a GET per file. Records are fetched by the prefix a level needs. */
    o->whole = !strncmp(name, "tokens/", 7) && o->size <= WHOLE_MAX;
    if (hb->cache)
        http_cache_add(hb->cache, o);
    *out = o;
    return 0;
}

struct span {
    uint64_t off, len;
    uint64_t gaps; /* bytes in it that no range asked for */
    unsigned first, count; /* ranges [first, first + count) of the sorted list */
};

static int cmp_range(const void *a, const void *b)
{
    const struct pcr_range *x = *(const struct pcr_range *const *)a;
    const struct pcr_range *y = *(const struct pcr_range *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Read ranges with GETs of their own: neighbours closer than MERGE_GAP share one
 * GET (one round trip instead of two costs less than the gap's bytes) while the
 * gaps stay a small part of what the GET brings (a file's scans lie in every group
 * of its record: merged freely, one small image would bring most of the record,
 * 150x its bytes), the GETs go out in parallel. */
static int read_direct(struct http_backend *hb, struct pcr_object *o, const struct pcr_range **rg,
                       unsigned n)
{
    struct http_req req[MAX_BATCH];
    struct span sp[MAX_BATCH];
    uint8_t *tmp[MAX_BATCH] = {0};
    unsigned ns = 0;
    int ret;

    qsort(rg, n, sizeof(*rg), cmp_range);
    for (unsigned i = 0; i < n; i++) {
        struct span *s = ns ? &sp[ns - 1] : NULL;
        uint64_t end = rg[i]->off + rg[i]->len;
        uint64_t gap = s ? rg[i]->off - (s->off + s->len) : 0;
        if (s && rg[i]->off >= s->off + s->len && gap < MERGE_GAP && end - s->off <= MERGE_MAX &&
            (s->gaps + gap) * MERGE_WASTE <= end - s->off) {
            s->gaps += gap;
            s->len = end - s->off;
            s->count++;
        } else {
            sp[ns++] = (struct span){.off = rg[i]->off, .len = rg[i]->len, .first = i, .count = 1};
        }
    }
    for (unsigned i = 0; i < ns; i++) {
        uint8_t *buf = rg[sp[i].first]->buf;
        if (sp[i].count > 1 && !(buf = tmp[i] = malloc(sp[i].len))) {
            ret = -ENOMEM;
            goto out;
        }
        req[i] = (struct http_req){.url = o->url, .off = sp[i].off, .len = sp[i].len,
                                   .expect = o->size, .if_match = o->etag, .buf = buf,
                                   .fd = -1};
    }
    ret = http_perform(hb, req, ns);
    if (ret) {
        char why[160];
        http_describe(&req[0], why, sizeof(why));
        for (unsigned i = 0; i < ns; i++)
            if (req[i].err) {
                http_describe(&req[i], why, sizeof(why));
                break;
            }
        pcr_log(PCR_LOG_DEBUG, "%s: GET failed: %s", o->url, why);
        goto out;
    }
    for (unsigned i = 0; i < ns; i++)
        http_count(&hb->st.direct_bytes, sp[i].len);
    for (unsigned i = 0; i < ns; i++)
        for (unsigned k = 0; tmp[i] && k < sp[i].count; k++) {
            const struct pcr_range *x = rg[sp[i].first + k];
            memcpy(x->buf, tmp[i] + (x->off - sp[i].off), x->len);
        }
out:
    for (unsigned i = 0; i < ns; i++)
        free(tmp[i]);
    return ret;
}

static int http_read(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r,
                     unsigned n)
{
    struct http_backend *hb = (struct http_backend *)b;
    const struct pcr_range *miss[MAX_BATCH];
    unsigned nmiss = 0;
    int ret;

    for (unsigned i = 0; i < n; i++) {
        if (r[i].off > o->size || r[i].len > o->size - r[i].off)
            return -ENODATA;
        if (r[i].len == 0)
            continue;
        if (hb->cache && o->whole)
            http_cache_advise(hb->cache, o, 0, o->size);
        ret = hb->cache ? http_cache_read(hb->cache, o, r[i].off, r[i].len, r[i].buf) : 0;
        if (ret < 0)
            return ret == -ETIMEDOUT || ret == -ENOMEM ? ret : -EIO;
        if (ret > 0) {
            http_count(&hb->st.cache_hits, 1);
            continue;
        }
        http_count(&hb->st.cache_misses, 1);
        if (nmiss == MAX_BATCH) {
            ret = read_direct(hb, o, miss, nmiss);
            if (ret)
                goto fail;
            nmiss = 0;
        }
        miss[nmiss++] = &r[i];
    }
    ret = nmiss ? read_direct(hb, o, miss, nmiss) : 0;
    if (!ret)
        return 0;
fail:
    return ret == -ETIMEDOUT || ret == -ENOMEM || ret == -ENODATA ? ret : -EIO;
}

static int http_advise(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct http_backend *hb = (struct http_backend *)b;

    if (!hb->cache || off > o->size)
        return 0;
    if (len > o->size - off)
        len = o->size - off;
    return http_cache_advise(hb->cache, o, off, len);
}

static uint64_t http_size(struct pcr_backend *b, const struct pcr_object *o)
{
    (void)b;
    return o->size;
}

static void http_close(struct pcr_backend *b, struct pcr_object *o)
{
    struct http_backend *hb = (struct http_backend *)b;

    if (!o)
        return;
    if (hb->cache)
        http_cache_remove(hb->cache, o);
    free(o);
}

static void http_drop(struct pcr_backend *b, struct pcr_object *o)
{
    struct http_backend *hb = (struct http_backend *)b;

    if (hb->cache && o)
        http_cache_drop(hb->cache, o);
}

static void http_destroy(struct pcr_backend *b)
{
    struct http_backend *hb = (struct http_backend *)b;

    pthread_mutex_lock(&registry_lock);
    for (struct http_backend **p = &registry; *p; p = &(*p)->next)
        if (*p == hb) {
            *p = hb->next;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    http_cache_free(hb->cache);
    for (unsigned i = 0; i < hb->npool; i++)
        curl_easy_cleanup(hb->pool[i]);
    if (hb->share)
        curl_share_cleanup(hb->share);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&hb->share_lock[i]);
    pthread_mutex_destroy(&hb->pool_lock);
    http_target_free(&hb->t);
    free(hb);
}

static const struct pcr_backend_ops http_ops = {
    .name = "http",
    .open = http_open,
    .read = http_read,
    .advise = http_advise,
    .size = http_size,
    .close = http_close,
    .destroy = http_destroy,
    .drop = http_drop,
    .fail_hold_ms = HTTP_FAIL_HOLD_MS,
};

int pcr_backend_http(const char *url, const struct pcr_http_opts *o, struct pcr_backend **out,
                     char *err, size_t errlen)
{
    struct http_backend *hb;
    int ret;

    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        pcr_errf(err, errlen, "libcurl: %s", curl_easy_strerror(global_rc));
        return -ENOMEM;
    }
    hb = calloc(1, sizeof(*hb));
    if (!hb)
        return -ENOMEM;
    ret = http_target_init(&hb->t, url, o, err, errlen);
    if (ret) {
        free(hb);
        return ret;
    }
    hb->base.ops = &http_ops;
    hb->timeout_ms = o && o->timeout_ms ? (long)o->timeout_ms : DEFAULT_TIMEOUT_MS;
    hb->retries = !o || o->retries < 0 ? DEFAULT_RETRIES
                  : o->retries > MAX_RETRIES ? MAX_RETRIES : (unsigned)o->retries;
    hb->nconn = o && o->connections ? o->connections : HTTP_DEFAULT_CONNECTIONS;
    if (hb->nconn > HTTP_MAX_CONNECTIONS)
        hb->nconn = HTTP_MAX_CONNECTIONS;
    hb->part_size = o && o->part_size ? o->part_size : HTTP_DEFAULT_PART_SIZE;
    pthread_mutex_init(&hb->pool_lock, NULL);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&hb->share_lock[i], NULL);
    hb->share = curl_share_init();
    if (!hb->share || curl_share_setopt(hb->share, CURLSHOPT_LOCKFUNC, share_lock) ||
        curl_share_setopt(hb->share, CURLSHOPT_UNLOCKFUNC, share_unlock) ||
        curl_share_setopt(hb->share, CURLSHOPT_USERDATA, hb) ||
        curl_share_setopt(hb->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) ||
        curl_share_setopt(hb->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS)) {
        http_destroy(&hb->base);
        pcr_errf(err, errlen, "libcurl: cannot share connections");
        return -ENOMEM;
    }
    pthread_mutex_lock(&registry_lock);
    hb->next = registry;
    registry = hb;
    pthread_mutex_unlock(&registry_lock);
    *out = &hb->base;
    return 0;
}

int pcr_http_creds_json(char *out, size_t len)
{
    int ret = -ENOENT;

    pthread_mutex_lock(&registry_lock);
    for (struct http_backend *hb = registry; hb; hb = hb->next)
        if (hb->t.creds) {
            http_creds_json(hb->t.creds, out, len);
            ret = 0;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return ret;
}

int pcr_http_stats(struct pcr_http_stats *out)
{
    int ret = -ENOENT;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&registry_lock);
    for (struct http_backend *hb = registry; hb; hb = hb->next) {
        const uint64_t *src = (const uint64_t *)&hb->st;
        uint64_t *dst = (uint64_t *)out;
        for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
            dst[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
        ret = 0;
    }
    pthread_mutex_unlock(&registry_lock);
    return ret;
}
