/* pcrfs — the bandwidth-limit shim (see pcrfs/backend.h): a token bucket in front
 * of any backend, for -o bwlimit=RATE.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "pcrfs/backend.h"

struct bw_backend {
    struct pcr_backend base;
    struct pcr_backend *inner;
    uint64_t rate; /* bytes/s, 0 = unlimited (relaxed atomic) */
    uint64_t next; /* when the debt is paid, CLOCK_MONOTONIC ns (under lock) */
    pthread_mutex_t lock;
};

#define BURST_NS 125000000u /* 1/8 s of traffic may be charged in the past */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Charge @n bytes and sleep until the bucket has paid for them. */
static void throttle(struct bw_backend *bw, uint64_t n)
{
    uint64_t rate = __atomic_load_n(&bw->rate, __ATOMIC_RELAXED), now, wake;

    if (!rate)
        return;
    now = now_ns();
    pthread_mutex_lock(&bw->lock);
    if (bw->next + BURST_NS < now)
        bw->next = now - BURST_NS;
    bw->next += (uint64_t)((double)n * 1e9 / (double)rate);
    wake = bw->next;
    pthread_mutex_unlock(&bw->lock);
    if (wake > now) {
        struct timespec ts = {.tv_sec = (time_t)((wake - now) / 1000000000u),
                              .tv_nsec = (long)((wake - now) % 1000000000u)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

static int bw_open(struct pcr_backend *b, const char *name, struct pcr_object **out)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    return bw->inner->ops->open(bw->inner, name, out);
}

static int bw_read(struct pcr_backend *b, struct pcr_object *o, const struct pcr_range *r,
                   unsigned n)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    uint64_t total = 0;

    for (unsigned i = 0; i < n; i++)
        total += r[i].len;
    throttle(bw, total);
    return bw->inner->ops->read(bw->inner, o, r, n);
}

/* Advice passes through uncharged: the bytes are charged when they are read. */
static int bw_advise(struct pcr_backend *b, struct pcr_object *o, uint64_t off, uint64_t len)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    return bw->inner->ops->advise ? bw->inner->ops->advise(bw->inner, o, off, len) : 0;
}

static int bw_advise_many(struct pcr_backend *b, struct pcr_object *const *o, const uint64_t *len,
                          size_t n)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    const struct pcr_backend_ops *in = bw->inner->ops;

    if (in->advise_many)
        return in->advise_many(bw->inner, o, len, n);
    for (size_t i = 0; in->advise && i < n; i++)
        in->advise(bw->inner, o[i], 0, len[i]);
    return 0;
}

static uint64_t bw_size(struct pcr_backend *b, const struct pcr_object *o)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    return bw->inner->ops->size(bw->inner, o);
}

static void bw_close(struct pcr_backend *b, struct pcr_object *o)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    bw->inner->ops->close(bw->inner, o);
}

static void bw_destroy(struct pcr_backend *b)
{
    struct bw_backend *bw = (struct bw_backend *)b;
    pthread_mutex_destroy(&bw->lock);
    free(bw);
}

static const struct pcr_backend_ops bw_ops = {
    .name = "bwlimit",
    .open = bw_open,
    .read = bw_read,
    .advise = bw_advise,
    .advise_many = bw_advise_many,
    .size = bw_size,
    .close = bw_close,
    .destroy = bw_destroy,
};

int pcr_backend_bwlimit(struct pcr_backend *inner, uint64_t bytes_per_sec, struct pcr_backend **out)
{
    struct bw_backend *bw = calloc(1, sizeof(*bw));

    if (!bw)
        return -ENOMEM;
    bw->base.ops = &bw_ops;
    bw->inner = inner;
    bw->rate = bytes_per_sec;
    pthread_mutex_init(&bw->lock, NULL);
    *out = &bw->base;
    return 0;
}

void pcr_backend_bwlimit_set(struct pcr_backend *shim, uint64_t bytes_per_sec)
{
    struct bw_backend *bw = (struct bw_backend *)shim;

    if (shim->ops != &bw_ops)
        return;
    pthread_mutex_lock(&bw->lock);
    bw->next = 0;
    __atomic_store_n(&bw->rate, bytes_per_sec, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&bw->lock);
}
