/* pcrfs — the transport of the object-storage backend: libcurl handles and their
 * pool, one request with retries, backoff and one deadline, throttling detection,
 * the checks of each answer, credentials applied per request (httpxfer.h).
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
 * step. A request's on_throttled() tells the layer above (the prefix cache lowers
 * its fetch concurrency meanwhile: httpcache.c).
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
#include "backend/httpxfer.h"

#define DEFAULT_TIMEOUT_MS      10000
#define DEFAULT_RETRIES         3
#define MAX_RETRIES             20
#define SLOW_RATE               (256u * 1024) /* bytes/s a large request may take */
#define BACKOFF_MS              100
#define BACKOFF_MAX_MS          2000
#define THROTTLE_BACKOFF_MAX_MS 5000
#define THROTTLE_BUDGET_MS      30000 /* throttling answers: retried this long (pcrfs(1)) */
#define MIN_ATTEMPT_MS          50    /* less left of the deadline: no new attempt */

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
    struct http_transport *tp = ctx;
    (void)h;
    (void)access;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&tp->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    struct http_transport *tp = ctx;
    (void)h;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&tp->share_lock[data]);
}

static CURL *handle_get(struct http_transport *tp)
{
    CURL *h = NULL;

    pthread_mutex_lock(&tp->pool_lock);
    if (tp->npool)
        h = tp->pool[--tp->npool];
    pthread_mutex_unlock(&tp->pool_lock);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

static void handle_put(struct http_transport *tp, CURL *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&tp->pool_lock);
    if (tp->npool < PCR_ARRAY_SIZE(tp->pool)) {
        tp->pool[tp->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&tp->pool_lock);
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
            ssize_t w = pwrite(r->fd, data + done, n - done, (off_t)(r->fd_off + r->got + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                r->werr = w < 0 && errno == ENOSPC ? -ENOSPC : -EROFS;
                return 0;
            }
            done += (size_t)w;
        }
        if (r->on_progress)
            r->on_progress(r->arg, n);
    } else {
        memcpy(r->buf + r->got, data, n);
    }
    r->got += n;
    http_count(&r->tp->st.bytes, n);
    return n;
}

/* libcurl's progress callback of a request with a cancel hook: nonzero aborts it. */
static int on_xferinfo(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    const struct http_req *r = arg;

    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return r->cancelled(r->arg) ? 1 : 0;
}

/* Whether every request of @r[0..n) was cancelled (none without a cancel hook). */
static bool all_cancelled(const struct http_req *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!r[i].cancelled || !r[i].cancelled(r[i].arg))
            return false;
    return n > 0;
}

/* ---- one request ---- */

static int req_setup(struct http_transport *tp, struct http_req *r)
{
    const struct http_target *t = &tp->t;
    long timeout = r->timeout_ms ? r->timeout_ms : tp->timeout_ms;
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
    curl_easy_setopt(h, CURLOPT_SHARE, tp->share);
    /* the shared connection cache closes the oldest idle connection once it holds
     * more than this (libcurl's default: 5): room for every part GET in flight and
     * the readers' own GETs, or each part would open a new connection */
    curl_easy_setopt(h, CURLOPT_MAXCONNECTS, 2L * (long)tp->nconn + 16L);
    http_handle_defaults(h);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout < tp->timeout_ms ? timeout : tp->timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     tp->timeout_ms >= 2000 ? tp->timeout_ms / 1000 : 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
    r->errbuf[0] = '\0';
    if (r->cancelled) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
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
static int req_result(struct http_transport *tp, struct http_req *r, CURLcode cc)
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
        http_count(&tp->st.timeouts, 1);
        r->retryable = true;
        return r->err = -ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
        return r->err = -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
        return r->err = -ECANCELED; /* its cancel hook: not retried */
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
            curl_easy_getinfo(r->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK || cl < 0)
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
            snprintf(out, len,
                     "TLS certificate verification failed for %.*s: %s (give the CA "
                     "with -o ca_bundle=FILE or AWS_CA_BUNDLE)",
                     (int)strcspn(host, "/"), host,
                     r->errbuf[0] ? r->errbuf : "untrusted certificate");
            return;
        }
        what = r->status >= 300 ? "request failed"
               : r->status      ? "unexpected answer (wrong length or range)"
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
static void perform_once(struct http_transport *tp, struct http_req **r, unsigned n)
{
    CURLM *m;
    int running = 0;

    for (unsigned i = 0; i < n; i++)
        http_count(&tp->st.requests, 1);
    if (n == 1) {
        req_result(tp, r[0], curl_easy_perform(r[0]->h));
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
                req_result(tp, q, msg->data.result);
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

bool http_throttling(struct http_transport *tp)
{
    return __atomic_load_n(&tp->throttle_until, __ATOMIC_RELAXED) > http_now_ms();
}

uint64_t http_deadline(struct http_transport *tp, uint64_t bytes, uint64_t since)
{
    uint64_t start = op_start_or(since);
    uint64_t end = start + 2u * (uint64_t)tp->timeout_ms + allowance(bytes);

    if (http_throttling(tp) && end < start + THROTTLE_BUDGET_MS + allowance(bytes))
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

int http_perform(struct http_transport *tp, struct http_req *r, unsigned n)
{
    struct http_req *todo[HTTP_MAX_BATCH];
    unsigned ntodo, tries[HTTP_MAX_BATCH] = {0};
    uint64_t bytes = 0, now = http_now_ms(), start = op_start_or(now);
    uint64_t renew_gen = 0;
    bool renew = false;
    int ret = 0;

    if (n > HTTP_MAX_BATCH)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++) {
        r[i].tp = tp;
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
    uint64_t end = start + 2u * (uint64_t)tp->timeout_ms + allowance(bytes);
    uint64_t tend = start + THROTTLE_BUDGET_MS + allowance(bytes);
    /* the server throttled (this operation's earlier request, say its HEAD, or
     * another's): this request gets the throttling budget too, or it would find the
     * operation's short deadline spent before its first attempt */
    bool throttled = http_throttling(tp);
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
            if (q->cancelled && q->cancelled(q->arg)) {
                q->err = -ECANCELED;
                q->retryable = false;
                continue;
            }
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
                http_count(&tp->st.retries, 1);
            }
            q->cap_ms = (long)(until - now);
            q->h = handle_get(tp);
            if (!q->h || req_setup(tp, q) != 0) {
                handle_put(tp, q->h);
                q->h = NULL;
                q->err = -ENOMEM;
                q->retryable = false;
                continue;
            }
            if (!q->head)
                http_count(&tp->st.gets, 1);
            todo[ntodo++] = q;
        }
        if (ntodo)
            perform_once(tp, todo, ntodo);
        bool again = false;
        uint64_t wait = 0;
        for (unsigned i = 0; i < ntodo; i++) {
            struct http_req *q = todo[i];
            curl_slist_free_all(q->hdrs);
            q->hdrs = NULL;
            handle_put(tp, q->h);
            q->h = NULL;
            q->throttled = q->err && (q->status == 503 || q->status == 429);
            if (q->throttled) {
                q->nthrottled++;
                throttled = true;
                http_count(&tp->st.throttled, 1);
                if (q->on_throttled)
                    q->on_throttled(q->arg);
            } else if (q->err && token_expired(q) && !q->cred_retried && tp->t.sign) {
                /* renewed at once and tried again once, whatever the retry count */
                q->cred_retried = q->retryable = true;
                renew = true;
                renew_gen = q->cred_gen;
            } else if (q->err && q->retryable && tries[q - r]++ >= tp->retries) {
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
            http_creds_expired(tp->t.creds, renew_gen);
            if (!wait)
                continue;
        }
        now = http_now_ms();
        if (throttled) {
            /* the cache's fetches and readers see it: longer waits, fewer fetches */
            uint64_t t = now + wait + THROTTLE_BACKOFF_MAX_MS;
            if (t > __atomic_load_n(&tp->throttle_until, __ATOMIC_RELAXED))
                __atomic_store_n(&tp->throttle_until, t, __ATOMIC_RELAXED);
        }
        if (now + wait + MIN_ATTEMPT_MS > (throttled ? tend : end)) {
            /* no time for another attempt after the wait: fail now, not later */
            for (unsigned i = 0; i < n; i++)
                r[i].retryable = false;
            break;
        }
        http_count(&tp->st.backoff_ms, wait);
        /* in slices: a backoff (a Retry-After of up to a minute) ends once every
         * request was cancelled */
        for (uint64_t left = wait, s; left && !all_cancelled(r, n); left -= s) {
            s = left < 100 ? left : 100;
            sleep_ms(s);
        }
    }
    for (unsigned i = 0; i < n; i++) {
        if (r[i].err && !ret)
            ret = r[i].err;
        if (r[i].err && r[i].err != -ENOSPC && r[i].err != -EROFS &&
            r[i].err != -ECANCELED) /* not the server's */
            http_count(&tp->st.errors, 1);
    }
    return ret;
}

/* ---- the transport's state ---- */

int http_xfer_init(struct http_transport *tp, const struct pcr_http_opts *o)
{
    tp->timeout_ms = o && o->timeout_ms ? (long)o->timeout_ms : DEFAULT_TIMEOUT_MS;
    tp->retries = !o || o->retries < 0       ? DEFAULT_RETRIES
                  : o->retries > MAX_RETRIES ? MAX_RETRIES
                                             : (unsigned)o->retries;
    tp->nconn = o && o->connections ? o->connections : HTTP_DEFAULT_CONNECTIONS;
    if (tp->nconn > PCR_HTTP_CONNECTIONS_MAX)
        tp->nconn = PCR_HTTP_CONNECTIONS_MAX;
    /* (store/opts.c refuses less; a library caller's smaller size is raised) */
    tp->part_size = o && o->part_size ? o->part_size : HTTP_DEFAULT_PART_SIZE;
    if (tp->part_size < PCR_HTTP_PART_SIZE_MIN)
        tp->part_size = PCR_HTTP_PART_SIZE_MIN;
    pthread_mutex_init(&tp->pool_lock, NULL);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&tp->share_lock[i], NULL);
    tp->share = curl_share_init();
    if (!tp->share || curl_share_setopt(tp->share, CURLSHOPT_LOCKFUNC, share_lock) ||
        curl_share_setopt(tp->share, CURLSHOPT_UNLOCKFUNC, share_unlock) ||
        curl_share_setopt(tp->share, CURLSHOPT_USERDATA, tp) ||
        curl_share_setopt(tp->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) ||
        curl_share_setopt(tp->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS))
        return -ENOMEM;
    return 0;
}

void http_xfer_fini(struct http_transport *tp)
{
    for (unsigned i = 0; i < tp->npool; i++)
        curl_easy_cleanup(tp->pool[i]);
    if (tp->share)
        curl_share_cleanup(tp->share);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&tp->share_lock[i]);
    pthread_mutex_destroy(&tp->pool_lock);
}
