/* pcrfs — the record-prefix cache of the object-storage backend.
 *
 * PCR's property: one sequential read of a record's prefix holds every image of
 * the record at level K. advise() (called by the store once per record and larger
 * level) queues a fetch of [cached, prefix) of the record; a fetch thread brings it
 * in ONE ranged GET, written as it arrives into a cache file of the record, and
 * every read inside the prefix is then a pread() of that file. A reader whose range
 * is still on its way waits for exactly those bytes (streaming: the first image of
 * a record is served after its own bytes, not after the whole prefix), so readers
 * of one record never fetch it twice.
 *
 * Files. One per record object, created unlinked in the cache directory: nothing
 * outlives the mount, two mounts of one store never share or corrupt a file, and a
 * crash leaves no garbage. The cache is bounded (cache_size): whole record prefixes
 * are evicted, least recently used first; a prefix that an earlier advise() asked
 * for and that was evicted is fetched again on the next miss inside it (a second
 * epoch), after a failed fetch only once the backend's timeout has passed.
 *
 * Failure. A cache file that cannot be created or written (directory unwritable,
 * disk full) drops that fetch: its readers read with GETs of their own, correct
 * and slower, and the condition is logged once. A fetch that fails on the network
 * fails the reads waiting for it with its error (they would only wait again).
 * Every wait is bounded: a reader waits for its bytes until the deadline of its
 * operation (http_deadline(): 2 x the timeout, longer while the server throttles),
 * then fails with ETIMEDOUT while the fetch goes on for the next reader.
 *
 * Throttling. A throttling answer (503 SlowDown, 429) to any request halves the
 * number of fetches that may run at once (down to 1; http_cache_throttled()); each
 * fetch that met none, once the server stopped throttling, adds one back, up to
 * FETCH_THREADS (additive increase, multiplicative decrease, as TCP does), so a
 * throttling server sees fewer requests, not the same number retried. Counted in
 * the stats (fetch_concurrency, concurrency_cuts).
 *
 * Healing. A prefix whose bytes failed the store's checksum is dropped
 * (http_cache_drop()) and fetched again by the next read inside it.
 *
 * One mutex guards all cache state; it is never held during a transfer or a file
 * read, only to update offsets and lists.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "backend/httpcache.h"

#define FETCH_THREADS 4

struct http_cache {
    struct http_transport *hb; /* the transport its fetches go through (httpxfer.h) */
    char dir[4096];
    uint64_t limit, used;
    pthread_mutex_t lock;
    pthread_cond_t progress; /* bytes arrived or a fetch ended */
    pthread_cond_t work;     /* the queue has an object */
    struct pcr_object *qhead, *qtail;
    struct pcr_object *objs; /* every open object */
    pthread_t threads[FETCH_THREADS];
    unsigned nthreads, waiters;
    unsigned active, allowed; /* fetches running; how many may (throttling) */
    uint64_t cut_at;          /* ms: when allowed was last halved */
    bool stop;
    uint64_t tick;
    int logged_file, logged_write, logged_fetch; /* said once */
};

static void publish(struct http_cache *c)
{
    __atomic_store_n(&c->hb->st.cache_bytes, c->used, __ATOMIC_RELAXED);
    __atomic_store_n(&c->hb->st.fetch_concurrency, c->allowed, __ATOMIC_RELAXED);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, m, &ts);
}

/* An unlinked file in the cache directory. */
static int cache_file(struct http_cache *c)
{
    char path[4200];
    int fd = open(c->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd >= 0 ? fd : -errno;
    /* a file system without O_TMPFILE: a named file, unlinked at once */
    snprintf(path, sizeof(path), "%s/rec.XXXXXX", c->dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    unlink(path);
    return fd;
}

/* Drop @o's prefix (under the lock). */
static void drop(struct http_cache *c, struct pcr_object *o)
{
    c->used -= o->held;
    o->held = 0;
    o->cached = 0;
    o->want = 0;
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    publish(c);
}

/* Make room for @o to hold @end bytes, evicting least recently used prefixes that
 * nobody reads or fetches. @return whether there is room (under the lock). */
static bool reserve(struct http_cache *c, struct pcr_object *o, uint64_t end)
{
    uint64_t need = end > o->held ? end - o->held : 0;

    if (need > c->limit)
        return false;
    while (c->used + need > c->limit) {
        struct pcr_object *victim = NULL;
        for (struct pcr_object *p = c->objs; p; p = p->cnext)
            if (p != o && p->held && !p->users && !p->fetching && !p->queued &&
                (!victim || p->lru < victim->lru))
                victim = p;
        if (!victim)
            return false;
        drop(c, victim);
        http_count(&c->hb->st.evictions, 1);
    }
    c->used += need;
    o->held += need;
    publish(c);
    return true;
}

static void enqueue(struct http_cache *c, struct pcr_object *o)
{
    o->queued = true;
    o->qnext = NULL;
    if (c->qtail)
        c->qtail->qnext = o;
    else
        c->qhead = o;
    c->qtail = o;
    pthread_cond_signal(&c->work);
}

/* What a fetch's request reports to: the transport calls these (httpxfer.c). */
struct fetch_sink {
    struct http_cache *c;
    struct pcr_object *o;
};

static void fetch_progress(void *arg, uint64_t n)
{
    struct fetch_sink *s = arg;
    http_cache_progress(s->c, s->o, n);
}

static void fetch_throttled(void *arg)
{
    http_cache_throttled(((struct fetch_sink *)arg)->c);
}

/* The fetch of [o->cached, o->want), with the lock held on entry and exit. */
static void fetch(struct http_cache *c, struct pcr_object *o)
{
    struct http_transport *hb = c->hb;
    uint64_t from = o->cached, to = o->want;
    int ret;

    if (!reserve(c, o, to)) {
        o->want = o->cached; /* larger than the cache can hold: read directly */
        o->retry_after = http_now_ms() + (uint64_t)hb->timeout_ms;
        return;
    }
    if (o->fd < 0) {
        o->fd = cache_file(c);
        if (o->fd < 0) {
            if (!c->logged_file++)
                pcr_log(PCR_LOG_WARN, "cache %s: %s; reading with a GET per range instead",
                        c->dir, strerror(-o->fd));
            o->fd = -1;
            c->used -= o->held - o->cached;
            o->held = o->cached;
            o->want = o->cached;
            o->retry_after = http_now_ms() + (uint64_t)hb->timeout_ms;
            publish(c);
            return;
        }
    }
    o->fetching = true;
    c->active++;
    pthread_mutex_unlock(&c->lock);

    struct fetch_sink sink = {c, o};
    struct http_req r = {.url = o->url, .off = from, .len = to - from, .expect = o->size,
                         .if_match = o->etag, .fd = o->fd, .fd_off = from,
                         .on_progress = fetch_progress, .on_throttled = fetch_throttled,
                         .arg = &sink};
    http_count(&hb->st.prefix_fetches, 1);
    ret = http_perform(hb, &r, 1);

    pthread_mutex_lock(&c->lock);
    c->active--;
    if (!r.nthrottled && c->allowed < FETCH_THREADS && !http_throttling(hb))
        c->allowed++; /* cut by http_cache_throttled() meanwhile: one back */
    o->fetching = false;
    o->fetch_gen++;
    o->fetch_err = ret;
    if (ret == -ENOSPC || ret == -EROFS) {
        if (!c->logged_write++)
            pcr_log(PCR_LOG_WARN, "cache %s: %s; reading with a GET per range instead",
                    c->dir, ret == -ENOSPC ? "file system full" : "cannot write");
    } else if (ret && !c->logged_fetch++) {
        char why[160];
        http_describe(&r, why, sizeof(why));
        pcr_log(PCR_LOG_ERR, "%s: fetching bytes %llu-%llu: %s", o->url,
                (unsigned long long)from, (unsigned long long)to, why);
    }
    if (ret) {
        o->want = o->cached;
        o->retry_after = http_now_ms() + (uint64_t)hb->timeout_ms;
    }
    c->used -= o->held - o->cached;
    o->held = o->cached;
    publish(c);
}

static void *fetch_thread(void *arg)
{
    struct http_cache *c = arg;

    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        struct pcr_object *o = c->qhead;
        if (!o || c->active >= c->allowed) {
            /* nothing to do, or as many fetches running as the server takes now
             * (a fetch that ends signals work) */
            if (o)
                timed_wait(&c->work, &c->lock, 1000);
            else
                pthread_cond_wait(&c->work, &c->lock);
            continue;
        }
        c->qhead = o->qnext;
        if (!c->qhead)
            c->qtail = NULL;
        o->queued = false;
        if (o->want > o->cached)
            fetch(c, o);
        if (o->want > o->cached && !o->queued && !c->stop)
            enqueue(c, o); /* advise() asked for more meanwhile */
        pthread_cond_broadcast(&c->progress);
        pthread_cond_broadcast(&c->work); /* a slot is free again */
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int http_cache_new(struct http_transport *hb, const char *dir, uint64_t limit,
                   struct http_cache **out)
{
    struct http_cache *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    if (snprintf(c->dir, sizeof(c->dir), "%s", dir) >= (int)sizeof(c->dir)) {
        free(c);
        return -ENAMETOOLONG;
    }
    c->hb = hb;
    c->limit = limit;
    c->allowed = FETCH_THREADS;
    __atomic_store_n(&hb->st.fetch_concurrency, c->allowed, __ATOMIC_RELAXED);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->progress, NULL);
    pthread_cond_init(&c->work, NULL);
    __atomic_store_n(&hb->st.cache_limit, limit, __ATOMIC_RELAXED);
    *out = c;
    return 0;
}

void http_cache_free(struct http_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_broadcast(&c->work);
    pthread_cond_broadcast(&c->progress);
    pthread_mutex_unlock(&c->lock);
    for (unsigned i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    while (c->objs)
        http_cache_remove(c, c->objs);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->progress);
    pthread_cond_destroy(&c->work);
    free(c);
}

void http_cache_add(struct http_cache *c, struct pcr_object *o)
{
    pthread_mutex_lock(&c->lock);
    o->fd = -1;
    o->cprev = NULL;
    o->cnext = c->objs;
    if (c->objs)
        c->objs->cprev = o;
    c->objs = o;
    pthread_mutex_unlock(&c->lock);
}

void http_cache_remove(struct http_cache *c, struct pcr_object *o)
{
    pthread_mutex_lock(&c->lock);
    if (o->queued) {
        struct pcr_object **p = &c->qhead, *prev = NULL;
        while (*p && *p != o)
            prev = *p, p = &(*p)->qnext;
        if (*p)
            *p = o->qnext;
        if (c->qtail == o)
            c->qtail = prev;
        o->queued = false;
    }
    /* a fetch still running ends within its deadline */
    while (o->fetching)
        timed_wait(&c->progress, &c->lock, 1000);
    drop(c, o);
    if (o->cprev)
        o->cprev->cnext = o->cnext;
    else if (c->objs == o)
        c->objs = o->cnext;
    if (o->cnext)
        o->cnext->cprev = o->cprev;
    o->cprev = o->cnext = NULL;
    pthread_mutex_unlock(&c->lock);
}

/* Start the fetch threads on first use, not at open: a daemon forks after opening
 * its store, and threads do not survive fork(). (under the lock) */
static void start_threads(struct http_cache *c)
{
    while (c->nthreads < FETCH_THREADS &&
           pthread_create(&c->threads[c->nthreads], NULL, fetch_thread, c) == 0)
        c->nthreads++;
}

int http_cache_advise(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len)
{
    uint64_t end = off + len;

    pthread_mutex_lock(&c->lock);
    if (end > o->advised)
        o->advised = end;
    /* after a failed fetch, the misses inside the prefix fetch it again, later */
    if (!c->stop && end > o->want && end > o->cached && http_now_ms() >= o->retry_after) {
        if (o->want < o->cached)
            o->want = o->cached;
        o->want = end;
        o->lru = ++c->tick;
        if (!o->queued && !o->fetching) {
            start_threads(c);
            if (c->nthreads)
                enqueue(c, o);
            else
                o->want = o->cached;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

void http_cache_progress(struct http_cache *c, struct pcr_object *o, uint64_t n)
{
    pthread_mutex_lock(&c->lock);
    o->cached += n;
    if (c->waiters)
        pthread_cond_broadcast(&c->progress);
    pthread_mutex_unlock(&c->lock);
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t got = pread(fd, p, len, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -EIO;
        p += got;
        len -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

int http_cache_read(struct http_cache *c, struct pcr_object *o, uint64_t off, size_t len,
                    void *buf)
{
    struct http_transport *hb = c->hb;
    uint64_t end = off + len, need = end > o->cached ? end - o->cached : 0;
    uint64_t since = http_now_ms();
    int ret;

    pthread_mutex_lock(&c->lock);
    for (;;) {
        if (o->fd >= 0 && end <= o->cached) {
            int fd = o->fd;
            o->users++;
            o->lru = ++c->tick;
            pthread_mutex_unlock(&c->lock);
            ret = pread_all(fd, buf, len, off);
            pthread_mutex_lock(&c->lock);
            o->users--;
            pthread_mutex_unlock(&c->lock);
            return ret == 0 ? 1 : 0; /* a cache file that fails: ask the server */
        }
        if (c->stop || !((o->queued || o->fetching) && end <= o->want)) {
            /* a prefix advised before and evicted (or failed): fetch it again */
            uint64_t now = http_now_ms();
            if (!c->stop && end <= o->advised && o->advised > o->cached && !o->queued &&
                !o->fetching && now >= o->retry_after && c->nthreads) {
                o->want = o->advised;
                enqueue(c, o);
                continue;
            }
            pthread_mutex_unlock(&c->lock);
            return 0;
        }
        uint64_t gen = o->fetch_gen;
        c->waiters++;
        timed_wait(&c->progress, &c->lock, 100);
        c->waiters--;
        if (o->fetch_gen != gen && o->fetch_err && end > o->cached) {
            ret = o->fetch_err;
            pthread_mutex_unlock(&c->lock);
            /* a cache that cannot be written is no reason to fail: read directly */
            return ret == -ENOSPC || ret == -EROFS || ret == -ENOMEM ? 0 : ret;
        }
        /* one deadline for the reader's operation, however the fetch goes (a
         * trickling server keeps it "progressing" for ever); longer while the
         * server throttles */
        if (end > o->cached && http_now_ms() >= http_deadline(hb, need, since)) {
            pthread_mutex_unlock(&c->lock);
            return -ETIMEDOUT;
        }
    }
}

void http_cache_throttled(struct http_cache *c)
{
    uint64_t now = http_now_ms();

    pthread_mutex_lock(&c->lock);
    /* at most one cut per 500 ms: a burst of answers to requests sent together is
     * one signal, not several */
    if (c->allowed > 1 && now - c->cut_at >= 500) {
        c->allowed /= 2;
        c->cut_at = now;
        http_count(&c->hb->st.concurrency_cuts, 1);
        publish(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void http_cache_drop(struct http_cache *c, struct pcr_object *o)
{
    pthread_mutex_lock(&c->lock);
    /* a fetch in flight writes into the file: only an idle prefix is dropped (the
     * one that failed was complete, so it is idle unless refetched already) */
    if (!o->fetching && !o->queued && !o->users && o->cached) {
        drop(c, o);
        o->retry_after = 0;
        http_count(&c->hb->st.refetches, 1);
    }
    pthread_mutex_unlock(&c->lock);
}
