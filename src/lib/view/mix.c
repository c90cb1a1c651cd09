/* pcrfs — mix/ (option mix=LO-HI): a level drawn per (image, pass) (view.h).
 *
 * mix/ mirrors the image tree; each open of a file serves it at a level drawn from
 * LO..HI for that (file, pass), where the pass is how many times the file has been
 * opened in mix/ before. The draw is a pure function of (seed, file id, pass), so a
 * run is repeatable for a seed, and the k-th epoch of a loader that opens every file
 * once per epoch sees the k-th draw of every file. How an open file keeps its level:
 * the dynamic/ mechanism (PCR_LEVEL_CURRENT), with the level drawn per file instead
 * of set for the mount: a lookup in mix/ names the level of the file's next open,
 * and the open, which counts the pass, serves the level its view number names.
 *
 * The distribution (pcrfs(1), "THE MIX VIEW"): uniform on LO..HI, or with
 * mix_mean=M the distribution of largest entropy on LO..HI with mean M,
 * p(k) proportional to exp(lambda * k), lambda found by bisection.
 *
 * The draw. The n-th open (from 0) of file id i serves the level k whose interval
 * [below[k-1], below[k]) of the 64-bit integers holds
 *
 *     u = h(h(h(seed) ^ i) ^ n),   h = SplitMix64's finaliser (pcrfs(1)),
 *
 * where below[k] is 2^64 times the probability of a level <= k. So draws are
 * independent of the order files are opened in and of other files' opens, and a
 * test or a user can recompute every one of them from the seed (tests do, in
 * Python). The counter n is per file (4 bytes each, one array for the store's file
 * ids), taken with one atomic increment when an open of mix/ succeeds: a loader
 * that opens every file once per epoch sees draw n in epoch n. Two opens of one
 * file that race (two workers, the same file, the same pass) both serve the level
 * of the draw they looked up and consume two draws; each served level is still a
 * draw of the distribution. The counters live in the process that opened the
 * views (the daemon, or a program using the library: pcrfs(3)), from pass 0.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/optparse.h"
#include "view/view.h"

/* The options as given (checked, or NULL). */
struct mix_args {
    char *range, *mean, *seed;
};

struct mix {
    unsigned lo, hi; /* levels, 1 <= lo <= hi <= L */
    double mean;     /* the distribution's mean (given, or (lo+hi)/2 uniform) */
    bool uniform;    /* no mix_mean */
    uint64_t seed;
    double p[PCR_MAX_LEVELS + 1];       /* [k] probability of level k (0 outside lo..hi) */
    uint64_t below[PCR_MAX_LEVELS + 1]; /* [k]: a draw u < below[k] picks a level <= k */
    uint64_t nfiles;                    /* the store's; passes has nfiles + 1 slots */
    _Atomic uint32_t *passes;           /* [file id] -> opens in mix/ so far */
    atomic_uint_fast64_t served[PCR_MAX_LEVELS + 1]; /* [k] opens served at level k */
};

static uint64_t h64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static unsigned mix_draw(const struct mix *m, uint64_t id, uint64_t pass)
{
    uint64_t u = h64(h64(h64(m->seed) ^ id) ^ pass);
    unsigned k;

    for (k = m->lo; k < m->hi; k++)
        if (u < m->below[k])
            return k;
    return m->hi;
}

/* The level of the next open of file @id (PCR_LEVEL_CURRENT). */
static unsigned mix_next(const struct pcr_view *v, uint64_t id)
{
    const struct mix *m = v->state;
    uint64_t pass = id >= 1 && id <= m->nfiles
                        ? atomic_load_explicit(&m->passes[id], memory_order_acquire)
                        : 0; /* not a file of the store: never opened */

    return mix_draw(m, id, pass);
}

/* An open: the store's, then the file's next open is its next pass. */
static int mix_open(const struct pcr_view *v, const struct pcr_file *f, void **state)
{
    struct mix *m = v->state;
    struct pcr_file_info fi;
    unsigned level = v->level;
    int rc = pcr_view_store_open(v, f, state);

    if (rc)
        return rc;
    pcr_file_info(f, &fi);
    if (fi.id >= 1 && fi.id <= m->nfiles)
        atomic_fetch_add_explicit(&m->passes[fi.id], 1, memory_order_acq_rel);
    if (level <= PCR_MAX_LEVELS)
        atomic_fetch_add_explicit(&m->served[level], 1, memory_order_relaxed);
    return 0;
}

static const struct pcr_view_file_ops mix_ops = {
    .lookup = pcr_view_store_lookup,
    .readdir = pcr_view_store_readdir,
    .size = pcr_view_store_size,
    .open = mix_open,
    .read = pcr_view_store_read,
    .close = pcr_view_store_close,
};

/* ---- the distribution ------------------------------------------------------------- */

/* Mean of p(k) ~ exp(lam * (k - lo)) on lo..hi, and the weights into @w. */
static double tilted_mean(unsigned lo, unsigned hi, double lam, double *w)
{
    double sum = 0, mean = 0, top = lam > 0 ? lam * (hi - lo) : 0; /* no overflow */
    unsigned k;

    for (k = lo; k <= hi; k++) {
        w[k] = exp(lam * (k - lo) - top);
        sum += w[k];
        mean += k * w[k];
    }
    for (k = lo; k <= hi; k++)
        w[k] /= sum;
    return mean / sum;
}

/* The distribution of largest entropy on lo..hi with mean @mean (lo < mean < hi):
 * the tilted mean grows with lambda, so bisection finds it. */
static void set_weights(struct mix *m)
{
    unsigned k;

    memset(m->p, 0, sizeof(m->p));
    if (m->uniform || m->lo == m->hi) {
        for (k = m->lo; k <= m->hi; k++)
            m->p[k] = 1.0 / (m->hi - m->lo + 1);
    } else {
        double a = -60, b = 60, w[PCR_MAX_LEVELS + 1];
        int i;

        for (i = 0; i < 200; i++) {
            double c = (a + b) / 2;

            if (tilted_mean(m->lo, m->hi, c, w) < m->mean)
                a = c;
            else
                b = c;
        }
        tilted_mean(m->lo, m->hi, (a + b) / 2, m->p);
    }
    /* below[k] = 2^64 * P(level <= k); the top level takes what rounding leaves */
    double cum = 0;
    for (k = m->lo; k <= m->hi; k++) {
        cum += m->p[k];
        m->below[k] = k == m->hi || cum >= 1.0 ? UINT64_MAX : (uint64_t)ldexp(cum, 64);
    }
}

/* "LO-HI": the syntax of both levels. @return 0, or -1 with one line in @msg. */
static int check_range(const char *val, char *msg, size_t len)
{
    const char *dash = strchr(val, '-');
    char lo[16];
    uint32_t k;

    if (dash && (size_t)(dash - val) < sizeof(lo)) {
        memcpy(lo, val, (size_t)(dash - val));
        lo[dash - val] = '\0';
        if (pcr_opt_level("mix", lo, &k, NULL, 0) == 0 &&
            pcr_opt_level("mix", dash + 1, &k, NULL, 0) == 0)
            return 0;
    }
    pcr_opt_msg(msg, len, "mix", val, "want LO-HI, two levels (1..L or full) with LO <= HI");
    return -1;
}

static int mix_opt(void *args, const char *name, const char *val, char *msg, size_t len)
{
    struct mix_args *a = args;
    char **slot;
    uint64_t seed;
    double mean;
    int rc;

    if (!strcmp(name, "mix")) {
        slot = &a->range;
        rc = check_range(val, msg, len);
    } else if (!strcmp(name, "mix_mean")) {
        slot = &a->mean; /* its range needs LO and HI: mix_init */
        rc = pcr_opt_real(name, val, 1, PCR_MAX_LEVELS, 0, NULL, &mean, msg, len);
    } else if (!strcmp(name, "mix_seed")) {
        slot = &a->seed;
        rc = pcr_opt_uint(name, val, 0, UINT64_MAX, NULL, &seed, msg, len);
    } else {
        pcr_opt_msg(msg, len, name, val, "not a mix option");
        return -1;
    }
    if (rc)
        return -1;
    free(*slot); /* the last one given counts */
    *slot = strdup(val);
    return *slot ? 0 : -ENOMEM;
}

static int mix_init(struct pcr_views *vs, const void *args, void **state, char *err, size_t errlen)
{
    const struct mix_args *a = args;
    struct mix *m;
    const char *dash;
    unsigned lo, hi;
    uint64_t seed = 0;
    double mean = 0;
    *state = NULL;
    if (!a)
        return 0;
    if (!a->range) {
        if (a->mean || a->seed) {
            snprintf(err, errlen, "mix_mean= and mix_seed= need -o mix=LO-HI");
            return -EINVAL;
        }
        return 0;
    }
    /* the syntax was checked as the options came (mix_opt): here the ranges
     * that need the store */
    dash = strchr(a->range, '-');
    lo = dash ? pcr_view_parse_level(vs->levels, a->range, (size_t)(dash - a->range)) : 0;
    hi = dash ? pcr_view_parse_level(vs->levels, dash + 1, strlen(dash + 1)) : 0;
    if (!lo || !hi || lo > hi) {
        pcr_opt_msg(err, errlen, "mix", a->range,
                    "want LO-HI, two levels of this store (1..%u or full) with LO <= HI",
                    vs->levels);
        return -EINVAL;
    }
    /* files of level K are view number PCR_VIEW_MIX + K: 8 bits */
    if (PCR_VIEW_MIX + vs->levels >= PCR_VIEW_NUMBERS) {
        snprintf(err, errlen, "mix=: a store of %u levels has too many for mix/ (at most %u)",
                 vs->levels, PCR_VIEW_NUMBERS - 1 - PCR_VIEW_MIX);
        return -EINVAL;
    }
    if (a->seed && pcr_opt_uint("mix_seed", a->seed, 0, UINT64_MAX, NULL, &seed, err, errlen) != 0)
        return -EINVAL;
    if (a->mean && pcr_opt_real("mix_mean", a->mean, lo, hi, PCR_OPT_GT_MIN | PCR_OPT_LT_MAX, NULL,
                                &mean, err, errlen) != 0)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->lo = lo;
    m->hi = hi;
    m->seed = seed;
    m->uniform = !a->mean;
    m->mean = a->mean ? mean : (lo + hi) / 2.0;
    set_weights(m);
    m->nfiles = pcr_store_nfiles(vs->store);
    /* untouched pages of a calloc'ed array cost no memory: a pass touches them */
    m->passes = calloc(m->nfiles + 1, sizeof(*m->passes));
    if (!m->passes) {
        free(m);
        return -ENOMEM;
    }
    *state = m;
    return 0;
}

static void mix_free(void *state)
{
    struct mix *m = state;

    free(m->passes);
    free(m);
}

static void mix_args_free(void *args)
{
    struct mix_args *a = args;

    free(a->range);
    free(a->mean);
    free(a->seed);
}

/* ---- info and stats --------------------------------------------------------- */

static void mix_info_json(const void *state, struct pcr_json *b)
{
    const struct mix *m = state;
    unsigned k;

    if (!m) {
        pcr_json_puts(b, "null");
        return;
    }
    pcr_json_printf(b,
                    "{\"lo\": %u, \"hi\": %u, \"seed\": %llu, \"mean\": %.6f, "
                    "\"uniform\": %s, \"p\": [",
                    m->lo, m->hi, (unsigned long long)m->seed, m->mean,
                    m->uniform ? "true" : "false");
    for (k = m->lo; k <= m->hi; k++)
        pcr_json_printf(b, "%s%.9f", k > m->lo ? ", " : "", m->p[k]);
    pcr_json_puts(b, "]}");
}

/* The histogram of the levels served: "served": {"3": opens, ...} over lo..hi. */
static void mix_stats_json(const struct pcr_view *v, struct pcr_json *b)
{
    const struct mix *m = v->state;
    unsigned k;

    pcr_json_puts(b, ", \"served\": {");
    for (k = m->lo; k <= m->hi; k++)
        pcr_json_printf(
            b, "%s\"%u\": %llu", k > m->lo ? ", " : "", k,
            (unsigned long long)atomic_load_explicit(&m->served[k], memory_order_relaxed));
    pcr_json_puts(b, "}");
}

static unsigned mix_count(const struct pcr_views *vs, const void *state)
{
    (void)vs;
    return state != NULL;
}

static const char *const mix_opts[] = {"mix", "mix_mean", "mix_seed", NULL};

const struct pcr_view_desc pcr_view_mix = {
    .help = "    -o mix=LO-HI           add mix/: every open of a file serves a level drawn\n"
            "                           from LO..HI (1..L or full) for that file and pass\n"
            "                           (its n-th open), fixed while it is open\n"
            "    -o mix_mean=M          draw with mean M (LO < M < HI; the distribution of\n"
            "                           largest entropy) instead of uniformly\n"
            "    -o mix_seed=N          the draws' seed (0..2^64-1, default 0): the same\n"
            "                           seed, the same levels pass after pass\n",
    .name = "mix",
    .opts = mix_opts,
    .args_size = sizeof(struct mix_args),
    .level_rule = PCR_LEVEL_CURRENT,
    .tree = PCR_TREE_IMAGES,
    /* as dynamic/: a name or a listing would carry the number of an old draw */
    .cache = {.names = false, .listings = false, .pages = true},
    .needs_open = true, /* an open counts the file's pass */
    .view_stats = true,
    .json_key = "mix",
    .ops = &mix_ops,
    .opt = mix_opt,
    .args_free = mix_args_free,
    .init = mix_init,
    .free = mix_free,
    .count = mix_count,
    .number = PCR_VIEW_MIX,
    .file_level = mix_next,
    .view_stats_json = mix_stats_json,
    .info_json = mix_info_json,
};
