/* pcrfs — the record-prefix cache of the object-storage backend.
 *
 * PCR's property: one sequential read of a record's prefix holds every image of
 * the record at level K. advise() (called by the store when a reader goes record by
 * record, or was told the next records: store/read.c) queues the prefix as parts
 * (about PREFIX_PARTS of them, of at most http_part_size bytes); up to http_connections
 * part GETs run at once (one work queue, common/workq.h, one job per part), each
 * written as it arrives into the record's cache file at its own offset, and every
 * read inside the prefix is then a
 * pread() of that file. One stream to S3 carries tens of MB/s; many parts at once
 * are what fills a node's link (issue 19). A reader waits only for the parts that
 * hold its bytes, and within a part only for the bytes it needs (streaming); a
 * queued part a reader waits for goes before every part fetched ahead. Readers of
 * one record never fetch it twice.
 *
 * Demand first. Parts queued by advise() are prefetch (background jobs of the
 * queue): they hold at most N - 1 of the N connections (at N = 1 one starts only
 * while no reader's part waits), and go a bounded depth ahead, counted in parts
 * (PREFETCH_SLOT_PARTS), not records.
 * Order. Objects advised one at a time are fetched one after another (a scan in
 * order reads them so); objects advised together (advise_many(): the records of
 * one window of the sampler, read side by side in its shuffled order) part by part
 * across them, A0 B0 ... H0 A1 B1 ..., so every record's next bytes arrive at the
 * rate its reads need them. Before, A0..A5 came before B0 and H's first part waited
 * behind A's last (BENCHMARKS.md §22: a window read at ~8 connections' worth
 * whatever the connections). Prefetch never evicts what was fetched ahead and not
 * read yet, nor what was read lately (PREFETCH_EVICT_AGE): a deep hint waits for
 * room in the cache instead of pushing out the records being read; a reader's own
 * part may evict anything at rest.
 * A read waits for parts in flight and for parts that have not started only while
 * each starts when one part in flight ends (demand parts, before every prefetch
 * part, at most N of them queued; at N = 1: one); a read that would wait for more
 * GETs its own bytes (lookup()). Before, at 1-4 connections the sampler's
 * hints filled every connection and the readers' parts queued behind each other:
 * 0.0-0.5 MB/s where the connections carried 2-8.
 *
 * Files. One per record object, created unlinked in the cache directory: nothing
 * outlives the mount, two mounts of one store never share or corrupt a file, and a
 * crash leaves no garbage. The cache is bounded (cache_size): a part's bytes are
 * reserved when it is queued, and whole objects are evicted, least recently used
 * first, never one being read or with parts in flight. A prefix larger than the
 * cache is not fetched at all (its reads are direct GETs). A part that an earlier
 * advise() asked for and that was evicted is fetched again on the next miss inside
 * it (a second epoch), after a failed fetch only once the backend's timeout passed.
 * A miss outside what was advised is not the cache's: the reader GETs just its own
 * ranges (no read amplification, issue 19).
 *
 * Failure. A cache file that cannot be created or written (directory unwritable,
 * disk full) drops that part: its readers read with GETs of their own, correct and
 * slower, and the condition is logged once. A part that fails on the network fails
 * the reads waiting for it with its error (they would only wait again). Every wait
 * is bounded: a reader waits for its bytes until the deadline of its operation
 * (http_deadline(): 2 x the timeout, longer while the server throttles), then fails
 * with ETIMEDOUT while the fetch goes on for the next reader.
 *
 * Throttling. A throttling answer (503 SlowDown, 429) to any request halves the
 * number of part GETs that may run at once (down to 1; http_cache_throttled(),
 * pcr_workq_limit()); each part that met none, once the server stopped throttling,
 * adds one back, up to http_connections (additive increase, multiplicative
 * decrease, as TCP does), so a throttling server sees fewer requests, not the same
 * number retried. Counted in the stats (fetch_concurrency, concurrency_cuts).
 *
 * Healing. The parts that hold bytes which failed the store's checksum are
 * dropped (http_cache_drop(), a range) and fetched again by the next read inside
 * them; the rest of the record stays.
 *
 * One mutex guards all cache state; it is never held during a transfer or a file
 * read, only to update parts and lists.
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
#include "common/workq.h"
#include "backend/httpcache.h"

#define MAX_PARTS 65536 /* per object: a larger object gets larger parts */
/* How far prefetch goes: at most this many parts queued or in flight per
 * background slot (N - 1 of the N connections; at N = 1, one), from as many records
 * as that takes: one running and one waiting to start when it ends keep every slot
 * busy. Counted in records (8, or more while under 2 parts per connection), the
 * depth followed the size of a prefix, not the connections: whole records were
 * queued, e.g. 8 records of full/ (6-11 parts of 8 MiB each) at 2 connections, their
 * bytes reserved in the cache long before a connection could take them (issue 19).
 * A part advised beyond it waits its turn (first advised, first fetched; a record
 * started goes on where it stopped). */
#define PREFETCH_SLOT_PARTS 2
/* Reads of the cache after which an object read no more may be evicted by
 * prefetch: the records of a window being read are read every few reads (8 of them
 * side by side: about every 8th), the ones of a window read to its end stop. */
#define PREFETCH_EVICT_AGE 1024
/* A prefix is fetched in this many parts, as far as their bounds allow (at most
 * http_part_size, at least an eighth of it: a larger prefix gets more parts, a
 * smaller one fewer): the parts of one record run side by side, so a record
 * arrives in 1/8 of the time one connection would take, and a window of the sampler
 * (8 records) spreads over up to 64 connections whatever the level. With whole
 * 8 MiB parts, a scan5/ prefix (~14 MB of a 43 MB record) was 2 parts: a window
 * held 16 connections, each part took 4.2 s at 2 MB/s, and 64 connections read a
 * 0.9 GB view at 0.68x their limit where 2 MiB parts gave 0.82x (BENCHMARKS.md §22,
 * "epoch"). GETs per image stay PREFIX_PARTS / images per record: 0.016 at 512,
 * 0.008 at ImageNet's 1,024. */
#define PREFIX_PARTS 8

enum { PART_IDLE, PART_QUEUED, PART_FETCHING };

/* One part of an object: [off, off + len), a job of the work queue. Only what was
 * asked of it is fetched (a prefix may end inside a part): [off + got, off + want). */
struct http_part {
    struct pcr_job job; /* first: the job is the part */
    struct http_cache *c;
    struct pcr_object *o;
    uint64_t off, len;
    uint64_t got;  /* [off, off + got) is in the cache file */
    uint64_t want; /* queued or fetching: up to off + want */
    uint64_t held; /* bytes of the cache's limit reserved for it */
    int state;
    bool demand; /* queued or fetching because a reader waits for it (else prefetch) */
};

struct http_cache {
    struct http_transport *hb; /* the transport its fetches go through (httpxfer.h) */
    char dir[4096];
    uint64_t limit, used;
    pthread_mutex_t lock;
    pthread_cond_t progress; /* bytes arrived or a part ended (CLOCK_MONOTONIC) */
    struct pcr_workq q;      /* the part GETs: hb->nconn threads */
    struct pcr_object *objs; /* every open object */
    unsigned waiters;
    unsigned demand_queued; /* demand parts queued, not yet started */
    unsigned bg_parts;      /* prefetch parts queued or in flight */
    uint64_t defer_seq;     /* orders the objects whose prefetch waits for a turn */
    uint64_t reads;         /* reads served so far (the age PREFETCH_EVICT_AGE counts) */
    bool cache_wait;        /* prefetch waits for room in the cache (see reserve()) */
    unsigned allowed;       /* part GETs that may run at once (throttling) */
    uint64_t cut_at;        /* ms: when allowed was last halved */
    bool stop;
    uint64_t tick;
    int logged_file, logged_write, logged_fetch; /* said once */
};

static void publish(struct http_cache *c)
{
    __atomic_store_n(&c->hb->st.cache_bytes, c->used, __ATOMIC_RELAXED);
    __atomic_store_n(&c->hb->st.fetch_concurrency, c->allowed, __ATOMIC_RELAXED);
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

/* Move part @p to @state, fetched because a reader waits for it (@demand) or ahead
 * of the readers (prefetch), keeping the counts the rules of the queue read: the
 * object's busy parts, the cache's demand parts waiting for a connection and its
 * prefetch parts, the depth prefetch_room() reads (under the lock). */
static void part_set(struct http_cache *c, struct http_part *p, int state, bool demand)
{
    struct pcr_object *o = p->o;
    bool was = p->state != PART_IDLE, is = state != PART_IDLE;
    bool was_bg = was && !p->demand, is_bg = is && !demand;
    bool was_dq = p->state == PART_QUEUED && p->demand, is_dq = state == PART_QUEUED && demand;

    if (is && !was)
        o->busy++;
    else if (was && !is)
        o->busy--;
    if (is_dq && !was_dq)
        c->demand_queued++;
    else if (was_dq && !is_dq)
        c->demand_queued--;
    if (is_bg && !was_bg)
        c->bg_parts++;
    else if (was_bg && !is_bg)
        c->bg_parts--;
    p->state = state;
    p->demand = is && demand;
}

/* Whether one more part may be queued as prefetch (under the lock). */
static bool prefetch_room(const struct http_cache *c)
{
    unsigned slots = c->hb->nconn > 1 ? c->hb->nconn - 1 : 1;

    return c->bg_parts < PREFETCH_SLOT_PARTS * slots;
}

/* Drop @o's parts (under the lock; none queued or in flight). An evicted object
 * is also @forget-ten: what was advised is fetched again only when the store
 * advises it again (a reader going record by record), not on any miss. */
static void drop(struct http_cache *c, struct pcr_object *o, bool forget)
{
    if (forget) {
        o->advised = 0;
        o->deferred = 0;
    }
    c->used -= o->held;
    o->held = 0;
    for (unsigned i = 0; i < o->nparts; i++) {
        part_set(c, &o->parts[i], PART_IDLE, false);
        o->parts[i].got = o->parts[i].want = o->parts[i].held = 0;
    }
    if (o->fd >= 0)
        close(o->fd);
    o->fd = -1;
    publish(c);
}

/* Whether prefetch may evict @p: read since it was advised, and not lately (under
 * the lock). */
static bool stale(const struct http_cache *c, const struct pcr_object *p)
{
    return p->read_at && c->reads - p->read_at >= PREFETCH_EVICT_AGE;
}

/* Make room for @need more bytes of @o, evicting least recently used objects that
 * nobody reads or fetches; for prefetch (@ahead) only stale() ones. @return whether
 * there is room (under the lock). */
static bool reserve(struct http_cache *c, struct pcr_object *o, uint64_t need, bool ahead)
{
    if (need > c->limit)
        return false;
    while (c->used + need > c->limit) {
        struct pcr_object *victim = NULL;
        for (struct pcr_object *p = c->objs; p; p = p->cnext)
            if (p != o && p->held && !p->users && !p->busy && (!ahead || stale(c, p)) &&
                (!victim || p->lru < victim->lru))
                victim = p;
        if (!victim)
            return false;
        drop(c, victim, true);
        http_count(&c->hb->st.evictions, 1);
    }
    c->used += need;
    o->held += need;
    publish(c);
    return true;
}

/* A part that ended gives back what it reserved beyond the bytes it has (under the
 * lock). */
static void part_end(struct http_cache *c, struct http_part *p)
{
    uint64_t extra = p->held - p->got;

    part_set(c, p, PART_IDLE, false);
    p->want = p->got;
    p->held = p->got;
    c->used -= extra;
    p->o->held -= extra;
    publish(c);
}

static void part_run(struct pcr_job *j);

/* A part's GET, as the transport's callbacks see it (httpxfer.c calls them from the
 * transfer's thread and knows nothing of the cache). */
struct part_fetch {
    struct http_req r; /* its got: the bytes written before this call's */
    struct http_part *p;
};

static void fetch_progress(void *arg, uint64_t n)
{
    struct part_fetch *f = arg;
    http_cache_progress(f->p->c, f->p->o, f->r.fd_off + f->r.got, n);
}

static void fetch_throttled(void *arg)
{
    http_cache_throttled(((struct part_fetch *)arg)->p->c);
}

/* No reader will want the part: its object is being closed or the cache freed (the
 * mount ends). Its GET is aborted then, not waited out: a trickling or hung server
 * held a daemon's exit for 2 x http_timeout per record (tens of seconds). */
static bool fetch_cancelled(void *arg)
{
    const struct http_part *p = ((struct part_fetch *)arg)->p;

    return __atomic_load_n(&p->o->closing, __ATOMIC_RELAXED) ||
           __atomic_load_n(&p->c->stop, __ATOMIC_RELAXED);
}

/* How many bytes of part @p a range ending at @end needs. */
static uint64_t part_need(const struct http_part *p, uint64_t end)
{
    return (end < p->off + p->len ? end : p->off + p->len) - p->off;
}

/* The part size of an object whose first @end bytes are asked for: @end in
 * PREFIX_PARTS parts, at most http_part_size, at least an eighth of it (and 64 kB). */
static uint64_t part_size_for(const struct http_cache *c, uint64_t end)
{
    uint64_t ps = c->hb->part_size, lo = ps / 8;
    uint64_t want = (end + PREFIX_PARTS - 1) / PREFIX_PARTS;

    if (lo < PCR_HTTP_PART_SIZE_MIN)
        lo = PCR_HTTP_PART_SIZE_MIN; /* (part_size is at least that: http_xfer_init()) */
    return want < lo ? lo : want > ps ? ps : want;
}

/* @o's parts, set up on first use for its first @end bytes (under the lock).
 * @return 0 or -ENOMEM. */
static int parts_of(struct http_cache *c, struct pcr_object *o, uint64_t end)
{
    uint64_t ps;

    if (o->parts)
        return 0;
    if (o->size == 0)
        return -ENOMEM;
    ps = part_size_for(c, end < o->size ? end : o->size);
    if (o->size / ps >= MAX_PARTS)
        ps = o->size / (MAX_PARTS - 1);
    o->psize = ps;
    o->nparts = (unsigned)((o->size + ps - 1) / ps);
    o->parts = calloc(o->nparts, sizeof(*o->parts));
    if (!o->parts) {
        o->nparts = 0;
        return -ENOMEM;
    }
    for (unsigned i = 0; i < o->nparts; i++) {
        struct http_part *p = &o->parts[i];
        p->job.run = part_run;
        p->job.owner = o;
        p->c = c;
        p->o = o;
        p->off = (uint64_t)i * ps;
        p->len = p->off + ps <= o->size ? ps : o->size - p->off;
    }
    return 0;
}

enum { ASK_OK, ASK_ROOM, ASK_FAIL };

/* Have part @p's first @need bytes fetched: a queued or running part asks for more,
 * an idle one is queued if the cache can hold it, for a reader that waits for it
 * (@demand: a foreground job of the queue, which runs before every background one,
 * demand parts first come first served) or as prefetch (a background job: at most
 * N - 1 of them run, workq.h). A queued prefetch part a reader now waits for
 * becomes a demand part. @return ASK_OK (the bytes are in the cache or on their
 * way), ASK_ROOM (no room in the cache) or ASK_FAIL (under the lock). */
static int part_ask(struct http_cache *c, struct http_part *p, uint64_t need, bool demand)
{
    if (p->got >= need)
        return ASK_OK;
    if (c->stop)
        return ASK_FAIL;
    if (p->held < need) {
        if (!reserve(c, p->o, need - p->held, !demand))
            return ASK_ROOM;
        p->held = need;
    }
    if (p->want < need)
        p->want = need; /* a running GET that ends short of it is queued again */
    if (p->state != PART_IDLE) {
        if (demand && !p->demand) {
            part_set(c, p, p->state, true);
            /* (a running one is not pushed: the queue would run it again) */
            if (p->state == PART_QUEUED && pcr_workq_push(&c->q, &p->job, false))
                http_count(&c->hb->st.front_pushes, 1);
        }
        return ASK_OK;
    }
    part_set(c, p, PART_QUEUED, demand);
    if (!(demand ? pcr_workq_push(&c->q, &p->job, false) : pcr_workq_push_bg(&c->q, &p->job))) {
        part_end(c, p);
        return ASK_FAIL;
    }
    return ASK_OK;
}

/* The most objects one turn of prefetch_next() interleaves (a larger group goes on
 * in the next turn). */
#define GROUP_MAX 256

/* Queue as prefetch the parts of the objects @g[0..n) (one group, in their order)
 * that hold what was advised of them and are not cached, part by part across the
 * objects, as far as the prefetch depth and the cache go: the rest waits, keeping
 * each object's turn (under the lock). */
static void prefetch_group(struct http_cache *c, struct pcr_object **g, unsigned n)
{
    uint64_t turn[GROUP_MAX];
    unsigned most = 0;

    for (unsigned i = 0; i < n; i++) {
        turn[i] = g[i]->deferred;
        g[i]->deferred = 0;
        /* after a failed fetch, the misses inside the prefix fetch it again, later */
        if (http_now_ms() < g[i]->retry_after)
            g[i] = NULL;
        else if (g[i]->nparts > most)
            most = g[i]->nparts;
    }
    for (unsigned k = 0; k < most; k++) {
        for (unsigned i = 0; i < n; i++) {
            struct pcr_object *o = g[i];
            if (!o || k >= o->nparts || o->parts[k].off >= o->advised)
                continue;
            struct http_part *p = &o->parts[k];
            uint64_t need = part_need(p, o->advised);
            int how = ASK_ROOM;
            if (p->state != PART_IDLE || p->got >= need || prefetch_room(c))
                how = part_ask(c, p, need, false);
            if (how == ASK_FAIL) {
                g[i] = NULL; /* the rest direct */
            } else if (how == ASK_ROOM) {
                /* (an object done is only looked at again: nothing to queue) */
                c->cache_wait = prefetch_room(c);
                for (unsigned j = 0; j < n; j++)
                    if (g[j])
                        g[j]->deferred = turn[j];
                return;
            }
        }
    }
}

/* Room for prefetch (a part ended, an object advised, read or closed): the objects
 * advised that wait for their turn go on, first advised first, a group at a time
 * (under the lock). */
static void prefetch_next(struct http_cache *c)
{
    c->cache_wait = false;
    while (!c->stop && prefetch_room(c) && !c->cache_wait) {
        struct pcr_object *first = NULL, *g[GROUP_MAX];
        unsigned n = 0;
        for (struct pcr_object *p = c->objs; p; p = p->cnext)
            if (p->deferred && (!first || p->deferred < first->deferred))
                first = p;
        if (!first)
            return;
        /* its group in turn order (insertion into the few kept) */
        for (struct pcr_object *p = c->objs; p; p = p->cnext) {
            unsigned at;
            if (!p->deferred || p->group != first->group)
                continue;
            for (at = n; at > 0 && g[at - 1]->deferred > p->deferred; at--)
                ;
            if (at == GROUP_MAX)
                continue;
            if (n == GROUP_MAX)
                n--; /* the last turn drops out: it comes in a later turn */
            for (unsigned k = n; k > at; k--)
                g[k] = g[k - 1];
            g[at] = p;
            n++;
        }
        prefetch_group(c, g, n);
    }
}

/* The job: one ranged GET of the part into the object's cache file. */
static void part_run(struct pcr_job *j)
{
    struct http_part *p = (struct http_part *)j;
    struct http_cache *c = p->c;
    struct http_transport *hb = c->hb;
    struct pcr_object *o = p->o;
    int ret;

    pthread_mutex_lock(&c->lock);
    if (p->state != PART_QUEUED) {
        /* a stray run: a reader pushed the part again in the moment a worker
         * took it (the queue then runs it again once this run ends), and it ended
         * meanwhile. Before this check that run sent a GET of nothing left, which
         * is len 0, i.e. the whole object, and wrote it at the part's offset: the
         * checksum mismatch seen once with 64 KiB parts (issue 19) */
        pthread_mutex_unlock(&c->lock);
        return;
    }
    ret = 0;
    if (p->want <= p->got)
        goto end; /* nothing left to fetch: never a GET of length 0 */
    if (o->fd < 0) {
        o->fd = cache_file(c);
        if (o->fd < 0) {
            if (!c->logged_file++)
                pcr_log(PCR_LOG_WARN, "cache %s: %s; reading with a GET per range instead", c->dir,
                        strerror(-o->fd));
            o->fd = -1;
            o->fetch_err = -EROFS;
            o->retry_after = http_now_ms() + (uint64_t)hb->timeout_ms;
            ret = -EROFS;
            goto end;
        }
    }
    part_set(c, p, PART_FETCHING, p->demand);
    uint64_t from = p->off + p->got, to = p->off + p->want;
    pthread_mutex_unlock(&c->lock);

    struct part_fetch f = {.p = p};
    f.r = (struct http_req){.url = o->url,
                            .off = from,
                            .len = to - from,
                            .expect = o->size,
                            .if_match = o->etag,
                            .fd = o->fd,
                            .fd_off = from,
                            .on_progress = fetch_progress,
                            .on_throttled = fetch_throttled,
                            .cancelled = fetch_cancelled,
                            .arg = &f};
    struct http_req *rq = &f.r;
    http_count(&hb->st.prefix_fetches, 1);
    ret = http_perform(hb, rq, 1);
    http_count(&hb->st.fetch_bytes, rq->got);

    pthread_mutex_lock(&c->lock);
    if (!rq->nthrottled && c->allowed < hb->nconn && !http_throttling(hb)) {
        c->allowed++; /* cut by http_cache_throttled() meanwhile: one back */
        pcr_workq_limit(&c->q, c->allowed);
    }
    if (ret == -ENOSPC || ret == -EROFS) {
        if (!c->logged_write++)
            pcr_log(PCR_LOG_WARN, "cache %s: %s; reading with a GET per range instead", c->dir,
                    ret == -ENOSPC ? "file system full" : "cannot write");
    } else if (ret && ret != -ECANCELED && !c->logged_fetch++) {
        char why[160];
        http_describe(rq, why, sizeof(why));
        pcr_log(PCR_LOG_ERR, "%s: fetching bytes %llu-%llu: %s", o->url, (unsigned long long)from,
                (unsigned long long)to, why);
    }
    if (!ret && p->got < to - p->off)
        p->got = to - p->off;
end:
    if (ret) {
        o->fetch_err = ret;
        o->retry_after = http_now_ms() + (uint64_t)hb->timeout_ms;
    } else if (p->want > p->got && !c->stop && !o->closing) {
        /* asked for more while it ran: queued again, still busy (a reader's part
         * before the prefetch) */
        part_set(c, p, PART_QUEUED, p->demand);
        o->fetch_gen++;
        if (p->demand ? pcr_workq_push(&c->q, &p->job, false) : pcr_workq_push_bg(&c->q, &p->job)) {
            pthread_cond_broadcast(&c->progress);
            pthread_mutex_unlock(&c->lock);
            return;
        }
    }
    part_end(c, p);
    o->fetch_gen++;
    prefetch_next(c);
    pthread_cond_broadcast(&c->progress);
    pthread_mutex_unlock(&c->lock);
}

int http_cache_new(struct http_transport *hb, const char *dir, uint64_t limit,
                   struct http_cache **out)
{
    struct http_cache *c = calloc(1, sizeof(*c));
    int ret;

    if (!c)
        return -ENOMEM;
    if (snprintf(c->dir, sizeof(c->dir), "%s", dir) >= (int)sizeof(c->dir)) {
        free(c);
        return -ENAMETOOLONG;
    }
    ret = pcr_workq_init(&c->q, hb->nconn);
    if (ret) {
        free(c);
        return ret;
    }
    c->hb = hb;
    c->limit = limit;
    c->allowed = hb->nconn;
    __atomic_store_n(&hb->st.fetch_concurrency, c->allowed, __ATOMIC_RELAXED);
    pthread_mutex_init(&c->lock, NULL);
    pcr_cond_init_monotonic(&c->progress);
    __atomic_store_n(&hb->st.cache_limit, limit, __ATOMIC_RELAXED);
    *out = c;
    return 0;
}

void http_cache_stop(struct http_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    __atomic_store_n(&c->stop, true, __ATOMIC_RELAXED); /* (read by fetch_cancelled()) */
    pthread_cond_broadcast(&c->progress);
    pthread_mutex_unlock(&c->lock);
    /* running parts are aborted together (fetch_cancelled()), each within about a
     * second of a hung server; one object at a time (http_cache_remove()) that was
     * a second per record with parts in flight */
    pcr_workq_free(&c->q);
}

void http_cache_free(struct http_cache *c)
{
    if (!c)
        return;
    http_cache_stop(c); /* (again: nothing left to do after a store's stop()) */
    while (c->objs)
        http_cache_remove(c, c->objs);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->progress);
    free(c);
}

void http_cache_add(struct http_cache *c, struct pcr_object *o)
{
    pthread_mutex_lock(&c->lock);
    o->fd = -1;
    o->parts = NULL;
    o->nparts = 0;
    o->busy = 0;
    o->deferred = 0;
    o->group = 0;
    o->read_at = 0;
    o->closing = false;
    o->cprev = NULL;
    o->cnext = c->objs;
    if (c->objs)
        c->objs->cprev = o;
    c->objs = o;
    pthread_mutex_unlock(&c->lock);
}

void http_cache_remove(struct http_cache *c, struct pcr_object *o)
{
    /* queued parts dropped, running ones aborted and waited for (their GETs see
     * closing within about a second: fetch_cancelled(); none queues its part
     * again); without the cache's lock, which they take */
    pthread_mutex_lock(&c->lock);
    __atomic_store_n(&o->closing, true, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->lock);
    if (!c->stop)
        pcr_workq_cancel(&c->q, o);
    pthread_mutex_lock(&c->lock);
    drop(c, o, true);
    free(o->parts);
    o->parts = NULL;
    o->nparts = 0;
    if (o->cprev)
        o->cprev->cnext = o->cnext;
    else if (c->objs == o)
        c->objs = o->cnext;
    if (o->cnext)
        o->cnext->cprev = o->cprev;
    o->cprev = o->cnext = NULL;
    prefetch_next(c);
    pthread_mutex_unlock(&c->lock);
}

/* Advice of [0, @end) of @o in group @group (under the lock). */
static void advise_one(struct http_cache *c, struct pcr_object *o, uint64_t end, uint64_t group)
{
    /* a prefix the cache cannot hold whole is read directly: fetched part by part
     * it would evict its own first parts before they are read */
    if (end > c->limit || parts_of(c, o, end) != 0)
        return;
    if (end > o->advised)
        o->advised = end;
    o->lru = ++c->tick;
    o->read_at = 0; /* to be read: not evicted by prefetch until it was */
    /* in turn: an object advised before it and still waiting for room goes first
     * (its parts from 0 on: the store advises whole prefixes) */
    if (!o->deferred) {
        o->deferred = ++c->defer_seq;
        o->group = group ? group : o->deferred;
    }
}

int http_cache_advise(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    pthread_mutex_lock(&c->lock);
    advise_one(c, o, off + len, 0);
    prefetch_next(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int http_cache_advise_many(struct http_cache *c, struct pcr_object *const *o, const uint64_t *len,
                           size_t n)
{
    pthread_mutex_lock(&c->lock);
    uint64_t group = c->defer_seq + 1; /* the first one's turn names the group */
    for (size_t i = 0; i < n; i++)
        if (len[i])
            advise_one(c, o[i], len[i], group);
    prefetch_next(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

void http_cache_progress(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t n)
{
    pthread_mutex_lock(&c->lock);
    /* only bytes inside one part, written by its own GET (a stray GET of the
     * whole object once indexed past the last part: issue 19) */
    if (o->parts && o->psize && off / o->psize < o->nparts) {
        struct http_part *p = &o->parts[off / o->psize];
        if (p->state == PART_FETCHING && off + n <= p->off + p->len && off + n - p->off > p->got)
            p->got = off + n - p->off; /* a retried GET writes the same bytes again */
    }
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

/* The parts of an object under ranges, in order: for (struct part_iter it =
 * parts_under(o, r, n); part_next(&it);) sees it.p, each part that holds bytes of
 * @r[0..n), with it.end the end of its range and it.need the bytes of it.p that
 * range needs (a part under two ranges comes twice). */
struct part_iter {
    const struct pcr_object *o;
    const struct pcr_range *r;
    unsigned n, k, i;
    struct http_part *p;
    uint64_t end, need;
};

static struct part_iter parts_under(const struct pcr_object *o, const struct pcr_range *r,
                                    unsigned n)
{
    struct part_iter it = {.o = o, .r = r, .n = o->parts ? n : 0, .i = UINT32_MAX};

    return it;
}

static bool part_next(struct part_iter *it)
{
    const struct pcr_object *o = it->o;

    for (; it->k < it->n; it->k++, it->i = UINT32_MAX) {
        const struct pcr_range *r = &it->r[it->k];
        uint64_t end = r->off + r->len;
        if (!r->len)
            continue;
        it->i = it->i == UINT32_MAX ? (unsigned)(r->off / o->psize) : it->i + 1;
        if (it->i < o->nparts && o->parts[it->i].off < end) {
            it->p = &o->parts[it->i];
            it->end = end;
            it->need = part_need(it->p, end);
            return true;
        }
    }
    return false;
}

enum { HAVE, WAIT, DIRECT };

/* Whether the ranges @r[0..n) of @o are in the cache file (HAVE), on their way
 * (WAIT), or to be read directly (DIRECT: the ranges in the cache are served from
 * it, the others with GETs of their own) (under the lock). One read's ranges are
 * looked at together: a file of full/ has bytes in every group, so in most parts of
 * its record (issue 19). The read waits for parts being fetched (its bytes come in
 * order) and for parts that have not started only while each of them starts when
 * one part in flight ends: they become demand parts, which run before every
 * prefetch part, and the demand parts queued, theirs included, are at most the
 * connections (at one connection: one). Such a part was queued as prefetch, or advised and not
 * queued (evicted, failed, dropped after a checksum mismatch, beyond the prefetch depth). A read
 * that would wait for more GETs its own bytes instead, as does one outside what was advised. */
static int lookup(struct http_cache *c, struct pcr_object *o, const struct pcr_range *r, unsigned n)
{
    const struct http_part *last = NULL;
    bool advised = http_now_ms() >= o->retry_after, waiting = false;
    unsigned fresh = 0; /* parts that would become demand parts */

    if (!o->parts)
        return DIRECT;
    for (struct part_iter it = parts_under(o, r, n); part_next(&it);) {
        const struct http_part *p = it.p;
        if (p->got >= it.need || p->state == PART_FETCHING ||
            (p->state == PART_QUEUED && p->demand) || p == last)
            continue;
        if (!(p->state == PART_QUEUED || (advised && it.end <= o->advised)))
            return DIRECT;
        last = p; /* (the ranges come in order: a part shared is counted once) */
        fresh++;
    }
    if (fresh && c->demand_queued + fresh > c->allowed)
        return DIRECT;
    for (struct part_iter it = parts_under(o, r, n); part_next(&it);) {
        struct http_part *p = it.p;
        if (p->got >= it.need)
            continue;
        if (part_ask(c, p, p->want > it.need ? p->want : it.need, true) != ASK_OK)
            return DIRECT;
        waiting = true;
    }
    return waiting ? WAIT : HAVE;
}

/* Whether range @r of @o is whole in the cache file (under the lock). */
static bool have(const struct pcr_object *o, const struct pcr_range *r)
{
    if (!o->parts || o->fd < 0)
        return false;
    for (struct part_iter it = parts_under(o, r, 1); part_next(&it);)
        if (it.p->got < it.need)
            return false;
    return true;
}

/* Whether a part under @r[0..n) failed and is held off until retry_after: its
 * readers fail with its error rather than wait again (under the lock). */
static bool failed(const struct pcr_object *o, const struct pcr_range *r, unsigned n)
{
    if (!o->fetch_err || http_now_ms() >= o->retry_after)
        return false;
    for (struct part_iter it = parts_under(o, r, n); part_next(&it);)
        if (it.p->state == PART_IDLE && it.p->got < it.need)
            return true;
    return false;
}

int http_cache_read(struct http_cache *c, struct pcr_object *o, const struct pcr_range *r,
                    unsigned n, bool *hit)
{
    struct http_transport *hb = c->hb;
    uint64_t since = http_now_ms();
    /* local bytes only (pcr_backend_op_begin_local()): what the cache holds now; no
     * wait, and nothing asked of the server (lookup() makes parts demand parts) */
    bool local = pcr_backend_op_local();
    size_t len = 0;
    int ret = 0, fd;

    for (unsigned k = 0; k < n; k++) {
        hit[k] = false;
        len += r[k].len;
    }
    pthread_mutex_lock(&c->lock);
    while (!local) {
        int how = c->stop ? DIRECT : lookup(c, o, r, n);
        if (how != WAIT)
            break;
        uint64_t gen = o->fetch_gen;
        c->waiters++;
        pcr_cond_wait_ms(&c->progress, &c->lock, 100);
        c->waiters--;
        if (o->fetch_gen != gen && failed(o, r, n)) {
            ret = o->fetch_err;
            pthread_mutex_unlock(&c->lock);
            /* a cache that cannot be written is no reason to fail: read directly */
            return ret == -ENOSPC || ret == -EROFS || ret == -ENOMEM ? 0 : ret;
        }
        /* one deadline for the reader's operation, however the fetch goes (a
         * trickling server keeps it "progressing" for ever); longer while the
         * server throttles */
        if (http_now_ms() >= http_deadline(hb, len, since)) {
            pthread_mutex_unlock(&c->lock);
            return -ETIMEDOUT;
        }
    }
    /* what is in the cache is read from it, the rest directly */
    for (unsigned k = 0; k < n; k++)
        hit[k] = have(o, &r[k]);
    fd = o->fd;
    o->users++;
    o->lru = ++c->tick;
    o->read_at = ++c->reads;
    /* prefetch waiting for room: the objects no longer read may make some */
    if (!local && c->cache_wait && c->reads % 64 == 0)
        prefetch_next(c);
    pthread_mutex_unlock(&c->lock);
    for (unsigned k = 0; k < n; k++)
        if (hit[k] && pread_all(fd, r[k].buf, r[k].len, r[k].off) != 0)
            hit[k] = false; /* a cache file that fails: ask the server */
    pthread_mutex_lock(&c->lock);
    o->users--;
    pthread_mutex_unlock(&c->lock);
    return 0;
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
        pcr_workq_limit(&c->q, c->allowed);
        http_count(&c->hb->st.concurrency_cuts, 1);
        publish(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void http_cache_drop(struct http_cache *c, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct pcr_range r = {.off = off, .len = (size_t)len};
    bool any = false;

    pthread_mutex_lock(&c->lock);
    /* the parts at rest under the bad bytes are forgotten and fetched again into
     * their place; the rest of the object stays (before: the whole object, a record
     * prefix of up to 100 MB fetched again for one bad block). A part on its way is
     * left alone. A reader preading a forgotten part meanwhile gets the old bytes or
     * the new, and its own check decides. */
    for (struct part_iter it = parts_under(o, &r, 1); part_next(&it);) {
        struct http_part *p = it.p;
        if (p->state != PART_IDLE || !p->held)
            continue;
        c->used -= p->held;
        o->held -= p->held;
        p->held = p->got = p->want = 0;
        any = true;
    }
    if (any) {
        o->retry_after = 0;
        http_count(&c->hb->st.refetches, 1);
        publish(c);
    }
    pthread_mutex_unlock(&c->lock);
}
