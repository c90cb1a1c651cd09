/* pcrfs — dynamic/ (option level=K): the image tree at a level that a client
 * changes while it is in use (view.h; the FUSE driver's /.pcrfs/level and
 * user.pcrfs.level write it through pcr_views_set_level(), views.c).
 *
 * An open file keeps the level it was opened at: its directory is number
 * PCR_VIEW_DYN and its files PCR_VIEW_DYN + K, K the level current when the name
 * was looked up (PCR_LEVEL_CURRENT; the essay is src/fuse/inode.h's).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/optparse.h"
#include "view/view.h"

struct dyn_args {
    char *level; /* as given, checked */
};

struct dyn {
    atomic_uint level_now;         /* the level new lookups get */
    atomic_uint_fast64_t switches; /* changes so far */
};

static const char *const dyn_opts[] = {"level", NULL};

static int dyn_opt(void *args, const char *name, const char *val, char *msg, size_t len)
{
    struct dyn_args *a = args;
    uint32_t k;

    /* the range needs the store: dyn_init */
    if (pcr_opt_level(name, val, &k, msg, len) != 0)
        return -1;
    free(a->level); /* the last one given counts */
    a->level = strdup(val);
    return a->level ? 0 : -ENOMEM;
}

static void dyn_args_free(void *args)
{
    free(((struct dyn_args *)args)->level);
}

static int dyn_init(struct pcr_views *vs, const void *args, void **state, char *err, size_t errlen)
{
    const struct dyn_args *a = args;
    struct dyn *d;
    unsigned k;

    *state = NULL;
    if (!a || !a->level)
        return 0;
    k = pcr_view_parse_level(vs->levels, a->level, strlen(a->level));
    if (!k) {
        snprintf(err, errlen, "level=%s: want a level of this store: 1..%u or full", a->level,
                 vs->levels);
        return -EINVAL;
    }
    d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    atomic_store(&d->level_now, k);
    *state = d;
    return 0;
}

static unsigned dyn_count(const struct pcr_views *vs, const void *state)
{
    (void)vs;
    return state != NULL;
}

static unsigned dyn_file_level(const struct pcr_view *v, uint64_t id)
{
    const struct dyn *d = v->state;

    (void)id;
    return atomic_load_explicit(&d->level_now, memory_order_acquire);
}

static void dyn_stats(const struct pcr_view *v, struct pcr_json *b)
{
    struct dyn *d = v->state;

    pcr_json_printf(b, ", \"level\": %u, \"switches\": %llu", dyn_file_level(v, 0),
                    (unsigned long long)atomic_load_explicit(&d->switches, memory_order_relaxed));
}

const struct pcr_view_desc pcr_view_dynamic = {
    .help = "    -o level=K             add dynamic/, serving level K (1..L or full) until\n"
            "                           another is written to .pcrfs/level (echo 5 >\n"
            "                           MNT/.pcrfs/level) or set with setfattr -n\n"
            "                           user.pcrfs.level -v 5 MNT/dynamic; such a mount is\n"
            "                           not \"ro\" (every other write still fails with EROFS)\n",
    .name = "dynamic",
    .opts = dyn_opts,
    .args_size = sizeof(struct dyn_args),
    .level_rule = PCR_LEVEL_CURRENT,
    .tree = PCR_TREE_IMAGES,
    /* a cached name or listing would carry the number of an old level; pages stay
     * right: they belong to a level's number (and go with it) */
    .cache = {.names = false, .listings = false, .pages = true},
    .needs_write = true,
    .view_stats = true,
    .opt = dyn_opt,
    .args_free = dyn_args_free,
    .init = dyn_init,
    .free = free,
    .count = dyn_count,
    .number = PCR_VIEW_DYN,
    .file_level = dyn_file_level,
    .view_stats_json = dyn_stats,
};

unsigned pcr_view_dyn_level(const void *state)
{
    const struct dyn *d = state;

    return atomic_load_explicit(&d->level_now, memory_order_acquire);
}

void pcr_view_dyn_set(void *state, unsigned k, unsigned *old)
{
    struct dyn *d = state;
    unsigned was = atomic_exchange_explicit(&d->level_now, k, memory_order_acq_rel);

    if (was != k)
        atomic_fetch_add_explicit(&d->switches, 1, memory_order_relaxed);
    if (old)
        *old = was;
}
