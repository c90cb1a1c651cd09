/* pcrfs — the object-storage backend (see pcrfs/backend.h): HEAD to open, ranged
 * GETs to read, the prefix cache behind advise(). The top of src/lib/backend's
 * HTTP layers: requests go through the transport (httpxfer.c), cached prefixes
 * through httpcache.c; the process's list of backends is httpstats.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "backend/http_internal.h"
#include "common/workq.h"

#define MERGE_GAP   (64u * 1024)       /* ranges closer than this: one GET, */
#define MERGE_WASTE 8                  /* ... if the gaps stay under 1/8 of it */
#define MERGE_MAX   (8u * 1024 * 1024) /* ... of at most this many bytes */
#define HTTP_FAIL_HOLD_MS                                                                          \
    5000 /* a record that failed: its files fail at once this                                      \
            long, then it is probed again (pcrfs(1)) */
#define WHOLE_MAX (64u * 1024 * 1024)

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- the backend's functions ---- */

/* A request of the backend was throttled: the prefix cache fetches less (its own
 * fetches report the same through their requests: httpcache.c). */
static void on_throttled(void *arg)
{
    http_cache_throttled(arg);
}

/* What every request of @hb reports to the cache above the transport. */
static void req_hooks(struct http_backend *hb, struct http_req *r)
{
    if (hb->cache) {
        r->on_throttled = on_throttled;
        r->arg = hb->cache;
    }
}

static int http_open(struct pcr_backend *b, const char *name, struct pcr_object **out)
{
    struct http_backend *hb = (struct http_backend *)b;
    struct pcr_object *o = calloc(1, sizeof(*o));
    struct http_req r = {.head = true, .fd = -1};
    int ret;

    if (!o)
        return -ENOMEM;
    ret = http_object_url(&hb->x.t, name, o->url, sizeof(o->url));
    if (ret) {
        free(o);
        return ret == -EINVAL ? -ENOENT : -EINVAL;
    }
    r.url = o->url;
    req_hooks(hb, &r);
    ret = http_perform(&hb->x, &r, 1);
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
    uint64_t gaps;         /* bytes in it that no range asked for */
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
/* Wait for @n (at most the limit, http_connections) slots of direct GETs, within the
 * operation's deadline. @return 0 or -ETIMEDOUT. */
static int direct_take(struct http_backend *hb, unsigned n)
{
    uint64_t deadline = http_deadline(&hb->x, 0, http_now_ms());
    int ret = 0;

    pthread_mutex_lock(&hb->direct_lock);
    while (hb->direct_inflight + n > hb->x.nconn) {
        uint64_t now = http_now_ms();
        if (now >= deadline) {
            ret = -ETIMEDOUT;
            break;
        }
        pcr_cond_wait_ms(&hb->direct_free, &hb->direct_lock, deadline - now);
    }
    if (!ret)
        hb->direct_inflight += n;
    pthread_mutex_unlock(&hb->direct_lock);
    return ret;
}

static void direct_put(struct http_backend *hb, unsigned n)
{
    pthread_mutex_lock(&hb->direct_lock);
    hb->direct_inflight -= n;
    pthread_cond_broadcast(&hb->direct_free);
    pthread_mutex_unlock(&hb->direct_lock);
}

static int read_direct(struct http_backend *hb, struct pcr_object *o, const struct pcr_range **rg,
                       unsigned n)
{
    struct http_req req[HTTP_MAX_BATCH];
    struct span sp[HTTP_MAX_BATCH];
    uint8_t *tmp[HTTP_MAX_BATCH] = {0};
    unsigned ns = 0;
    int ret = 0;

    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, one pointer each */
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
        req[i] = (struct http_req){.url = o->url,
                                   .off = sp[i].off,
                                   .len = sp[i].len,
                                   .expect = o->size,
                                   .if_match = o->etag,
                                   .buf = buf,
                                   .fd = -1};
        req_hooks(hb, &req[i]);
    }
    /* At most http_connections GETs at once, a read's own included: a read of more
     * spans than that sends them in turns. */
    for (unsigned b = 0, k; !ret && b < ns; b += k) {
        k = ns - b < hb->x.nconn ? ns - b : hb->x.nconn;
        if ((ret = direct_take(hb, k)) != 0)
            goto out;
        ret = http_perform(&hb->x, req + b, k);
        direct_put(hb, k);
    }
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
        http_count(&hb->x.st.direct_bytes, sp[i].len);
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
    const struct pcr_range *miss[HTTP_MAX_BATCH];
    bool hit[HTTP_MAX_BATCH] = {false}; /* (set by the cache; without one: none) */
    /* local bytes only (pcr_backend_op_begin_local()): what the cache holds, or
     * -EAGAIN; no GET, no advice, and not counted as a reader's hit or miss */
    bool local = pcr_backend_op_local();
    unsigned nmiss = 0;
    int ret;

    for (unsigned i = 0; i < n; i++) {
        if (r[i].off > o->size || r[i].len > o->size - r[i].off)
            return -ENODATA;
    }
    if (local && !hb->cache)
        return -EAGAIN;
    if (!local && hb->cache && o->whole)
        http_cache_advise(hb->cache, o, 0, o->size);
    /* the ranges of one read go to the cache together: it decides for all of
     * them whether the read waits for parts or GETs its own bytes */
    for (unsigned at = 0; at < n; at += HTTP_MAX_BATCH) {
        unsigned m = n - at < HTTP_MAX_BATCH ? n - at : HTTP_MAX_BATCH;
        ret = hb->cache ? http_cache_read(hb->cache, o, r + at, m, hit) : 0;
        if (ret < 0)
            return ret == -ETIMEDOUT || ret == -ENOMEM ? ret : -EIO;
        for (unsigned i = 0; i < m; i++) {
            if (r[at + i].len == 0)
                continue;
            if (hb->cache && hit[i]) {
                if (!local)
                    http_count(&hb->x.st.cache_hits, 1);
                continue;
            }
            if (local)
                return -EAGAIN;
            http_count(&hb->x.st.cache_misses, 1);
            if (nmiss == HTTP_MAX_BATCH) {
                ret = read_direct(hb, o, miss, nmiss);
                if (ret)
                    goto fail;
                nmiss = 0;
            }
            miss[nmiss++] = &r[at + i];
        }
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

static int http_advise_many(struct pcr_backend *b, struct pcr_object *const *o, const uint64_t *len,
                            size_t n)
{
    struct http_backend *hb = (struct http_backend *)b;
    uint64_t *cut;
    int ret;

    if (!hb->cache || !n)
        return 0;
    cut = malloc(n * sizeof(*cut));
    if (!cut)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        cut[i] = len[i] < o[i]->size ? len[i] : o[i]->size;
    ret = http_cache_advise_many(hb->cache, o, cut, n);
    free(cut);
    return ret;
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

static void http_drop(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct http_backend *hb = (struct http_backend *)b;

    if (hb->cache && o)
        http_cache_drop(hb->cache, o, off, len);
}

static void http_stop(struct pcr_backend *b)
{
    http_cache_stop(((struct http_backend *)b)->cache);
}

static void http_destroy(struct pcr_backend *b)
{
    struct http_backend *hb = (struct http_backend *)b;

    http_stats_unregister(&hb->reg);
    http_cache_free(hb->cache);
    http_xfer_fini(&hb->x);
    http_target_free(&hb->x.t);
    pthread_cond_destroy(&hb->direct_free);
    pthread_mutex_destroy(&hb->direct_lock);
    free(hb);
}

static const struct pcr_backend_ops http_ops = {
    .name = "http",
    .open = http_open,
    .read = http_read,
    .advise = http_advise,
    .advise_many = http_advise_many,
    .size = http_size,
    .close = http_close,
    .destroy = http_destroy,
    .drop = http_drop,
    .stop = http_stop,
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
    pthread_mutex_init(&hb->direct_lock, NULL);
    if (pcr_cond_init_monotonic(&hb->direct_free) != 0) {
        pthread_mutex_destroy(&hb->direct_lock);
        free(hb);
        return -ENOMEM;
    }
    ret = http_target_init(&hb->x.t, url, o, err, errlen);
    if (ret) {
        pthread_cond_destroy(&hb->direct_free);
        pthread_mutex_destroy(&hb->direct_lock);
        free(hb);
        return ret;
    }
    hb->base.ops = &http_ops;
    if (http_xfer_init(&hb->x, o) != 0) {
        http_destroy(&hb->base);
        pcr_errf(err, errlen, "libcurl: cannot share connections");
        return -ENOMEM;
    }
    http_stats_register(&hb->reg, &hb->x);
    *out = &hb->base;
    return 0;
}
