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
 * request in bounded time. Failures that may pass (5xx, 429, timeouts, broken
 * connections) are retried with exponential backoff, a bounded number of times.
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
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/http_internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_RETRIES    3
#define MAX_RETRIES        20
#define MERGE_GAP          (64u * 1024)       /* ranges closer than this: one GET */
#define MERGE_MAX          (8u * 1024 * 1024) /* ... of at most this many bytes */
#define SLOW_RATE          (256u * 1024)      /* bytes/s a large request may take */
#define BACKOFF_MS         100
#define BACKOFF_MAX_MS     2000
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

static bool parse_u64(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;

    if (!isdigit((unsigned char)*s))
        return false;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *out = v;
    return true;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ctx)
{
    struct http_req *r = ctx;
    size_t n = size * nitems, k;
    char line[256];

    k = n < sizeof(line) - 1 ? n : sizeof(line) - 1;
    memcpy(line, data, k);
    line[k] = '\0';
    while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n'))
        line[--k] = '\0';
    if (!strncmp(line, "HTTP/", 5)) {
        /* a new response (after a 100 Continue, say): forget the last one's headers */
        const char *sp = strchr(line, ' ');
        uint64_t st = 0;
        r->status = 0;
        if (sp && (sp++, parse_u64(&sp, &st)) && st < 1000)
            r->status = (long)st;
        r->has_crange = r->bad_hdr = false;
        r->etag[0] = '\0';
        r->nbody = 0;
        return n;
    }
    if (!strncasecmp(line, "content-range:", 14)) {
        const char *p = line + 14;
        while (*p == ' ')
            p++;
        r->has_crange = true;
        if (strncasecmp(p, "bytes ", 6) != 0) {
            r->bad_hdr = true;
            return n;
        }
        p += 6;
        if (!parse_u64(&p, &r->cr_a) || *p++ != '-' || !parse_u64(&p, &r->cr_b) ||
            *p++ != '/')
            r->bad_hdr = true;
        else if (*p == '*')
            r->cr_total = UINT64_MAX;
        else if (!parse_u64(&p, &r->cr_total))
            r->bad_hdr = true;
    } else if (!strncasecmp(line, "etag:", 5)) {
        const char *p = line + 5;
        size_t len;
        while (*p == ' ')
            p++;
        len = strlen(p);
        r->etag[0] = '\0';
        if (len <= HTTP_MAX_ETAG) {
            for (size_t i = 0; i < len; i++)
                if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
                    return n; /* not a token: ignored */
            memcpy(r->etag, p, len + 1);
        }
    }
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
            http_cache_progress(r->hb->cache, r->o, n);
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
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_SHARE, hb->share);
    http_handle_defaults(h);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, hb->timeout_ms);
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

int http_perform(struct http_backend *hb, struct http_req *r, unsigned n)
{
    struct http_req *todo[MAX_BATCH];
    unsigned ntodo;
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
    }
    for (unsigned attempt = 0;; attempt++) {
        ntodo = 0;
        for (unsigned i = 0; i < n; i++) {
            struct http_req *q = &r[i];
            if (q->err == 0 || (q->err != -EINPROGRESS && !q->retryable))
                continue;
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
        for (unsigned i = 0; i < ntodo; i++) {
            curl_slist_free_all(todo[i]->hdrs);
            todo[i]->hdrs = NULL;
            handle_put(hb, todo[i]->h);
            todo[i]->h = NULL;
            if (todo[i]->err && todo[i]->retryable && attempt >= hb->retries)
                todo[i]->retryable = false; /* out of retries: final */
            if (todo[i]->err && token_expired(todo[i]) && !todo[i]->cred_retried &&
                hb->t.sign) {
                /* renewed at once and tried again once, whatever the retry count */
                todo[i]->cred_retried = todo[i]->retryable = true;
                renew = true;
                renew_gen = todo[i]->cred_gen;
            }
            again |= todo[i]->err && todo[i]->retryable;
        }
        if (!again)
            break;
        if (renew) {
            renew = false;
            http_creds_expired(hb->t.creds, renew_gen);
            continue;
        }
        /* 100 ms, 200 ms, ... 2 s, with jitter so that clients do not retry in step */
        uint64_t ms = (uint64_t)BACKOFF_MS << (attempt < 5 ? attempt : 5);
        ms = ms > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms;
        sleep_ms(ms / 2 + (uint64_t)rand() % (ms / 2 + 1));
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
    unsigned first, count; /* ranges [first, first + count) of the sorted list */
};

static int cmp_range(const void *a, const void *b)
{
    const struct pcr_range *x = *(const struct pcr_range *const *)a;
    const struct pcr_range *y = *(const struct pcr_range *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Read ranges with GETs of their own: neighbours closer than MERGE_GAP share one
 * GET (one round trip instead of two costs less than the gap's bytes), the GETs go
 * out in parallel. */
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
        if (s && rg[i]->off >= s->off + s->len && rg[i]->off - (s->off + s->len) < MERGE_GAP &&
            end - s->off <= MERGE_MAX) {
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
