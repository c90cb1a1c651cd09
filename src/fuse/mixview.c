/* pcrfs — the mix/ view (-o mix=LO-HI): a level drawn per (image, pass)
 * (mixview.h; the view's row and open are in views.c).
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
 * draw of the distribution. The counters live in the daemon: a remount starts every
 * file at pass 0.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "inode.h"
#include "mixview.h"
#include "util/json.h"
#include "util/optparse.h"

static uint64_t h64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

unsigned pcrfs_mix_draw(const struct mix *m, uint64_t id, uint64_t pass)
{
    uint64_t u = h64(h64(h64(m->seed) ^ id) ^ pass);
    unsigned k;

    for (k = m->lo; k < m->hi; k++)
        if (u < m->below[k])
            return k;
    return m->hi;
}

unsigned pcrfs_mix_next(const struct pcrfs *fs, uint64_t id)
{
    const struct mix *m = fs->mix; /* set: only mix/'s row asks */
    uint64_t pass = id >= 1 && id <= m->nfiles
                        ? atomic_load_explicit(&m->passes[id], memory_order_acquire)
                        : 0; /* not a file of the store: never opened */

    return pcrfs_mix_draw(m, id, pass);
}

void pcrfs_mix_opened(struct pcrfs *fs, const struct pcr_file *f, unsigned level)
{
    struct mix *m = fs->mix;
    struct pcr_file_info fi;

    pcr_file_info(f, &fi);
    if (fi.id >= 1 && fi.id <= m->nfiles)
        atomic_fetch_add_explicit(&m->passes[fi.id], 1, memory_order_acq_rel);
    if (level <= PCR_MAX_LEVELS)
        atomic_fetch_add_explicit(&m->served[level], 1, memory_order_relaxed);
}

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
        m->below[k] = k == m->hi || cum >= 1.0 ? UINT64_MAX
                                                : (uint64_t)ldexp(cum, 64);
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

int pcrfs_mix_opt(struct mix_args *a, const char *name, const char *val, char *msg, size_t len)
{
    char **slot;
    uint64_t seed;
    double mean;
    int rc;

    if (!strcmp(name, "mix")) {
        slot = &a->range;
        rc = check_range(val, msg, len);
    } else if (!strcmp(name, "mix_mean")) {
        slot = &a->mean; /* its range needs LO and HI: pcrfs_mix_init */
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

int pcrfs_mix_init(const struct mix_args *a, struct pcrfs *fs)
{
    struct mix *m;
    const char *dash;
    unsigned lo, hi;
    uint64_t seed = 0;
    double mean = 0;
    char msg[512];

    fs->mix = NULL;
    if (!a->range) {
        if (a->mean || a->seed) {
            fprintf(stderr, "pcrfs: mix_mean= and mix_seed= need -o mix=LO-HI\n");
            return -1;
        }
        return 0;
    }
    /* the syntax was checked as the options came (pcrfs_mix_opt): here the ranges
     * that need the store */
    dash = strchr(a->range, '-');
    lo = dash ? pcrfs_parse_level(fs, a->range, (size_t)(dash - a->range)) : 0;
    hi = dash ? pcrfs_parse_level(fs, dash + 1, strlen(dash + 1)) : 0;
    if (!lo || !hi || lo > hi) {
        pcr_opt_msg(msg, sizeof(msg), "mix", a->range,
                    "want LO-HI, two levels of this store (1..%u or full) with LO <= HI",
                    fs->levels);
        fprintf(stderr, "pcrfs: %s\n", msg);
        return -1;
    }
    /* files of level K are inode view VIEW_MIX + K (inode.h): 8 bits */
    if (VIEW_MIX + fs->levels > 0xff) {
        fprintf(stderr, "pcrfs: mix=: a store of %u levels has too many for mix/ (at most %u)\n",
                fs->levels, 0xff - VIEW_MIX);
        return -1;
    }
    if (a->seed &&
        pcr_opt_uint("mix_seed", a->seed, 0, UINT64_MAX, NULL, &seed, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "pcrfs: %s\n", msg);
        return -1;
    }
    if (a->mean && pcr_opt_real("mix_mean", a->mean, lo, hi, PCR_OPT_GT_MIN | PCR_OPT_LT_MAX, NULL,
                                &mean, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "pcrfs: %s\n", msg);
        return -1;
    }
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->lo = lo;
    m->hi = hi;
    m->seed = seed;
    m->uniform = !a->mean;
    m->mean = a->mean ? mean : (lo + hi) / 2.0;
    set_weights(m);
    m->nfiles = pcr_store_nfiles(fs->store);
    /* untouched pages of a calloc'ed array cost no memory: a pass touches them */
    m->passes = calloc(m->nfiles + 1, sizeof(*m->passes));
    if (!m->passes) {
        free(m);
        return -ENOMEM;
    }
    fs->mix = m;
    return 0;
}

void pcrfs_mix_free(struct pcrfs *fs)
{
    if (fs->mix) {
        free(fs->mix->passes);
        free(fs->mix);
        fs->mix = NULL;
    }
}

/* ---- /.pcrfs/info and stats --------------------------------------------------------- */

void pcrfs_mix_info_json(const struct pcrfs *fs, struct pcr_json *b)
{
    const struct mix *m = fs->mix;
    unsigned k;

    if (!m) {
        pcr_json_puts(b, "null");
        return;
    }
    pcr_json_printf(b, "{\"lo\": %u, \"hi\": %u, \"seed\": %llu, \"mean\": %.6f, "
                       "\"uniform\": %s, \"p\": [",
                    m->lo, m->hi, (unsigned long long)m->seed, m->mean,
                    m->uniform ? "true" : "false");
    for (k = m->lo; k <= m->hi; k++)
        pcr_json_printf(b, "%s%.9f", k > m->lo ? ", " : "", m->p[k]);
    pcr_json_puts(b, "]}");
}

/* The histogram of the levels served: {"3": opens, ...} over lo..hi. */
void pcrfs_mix_stats_json(const struct pcrfs *fs, struct pcr_json *b)
{
    const struct mix *m = fs->mix;
    unsigned k;

    pcr_json_puts(b, "{");
    for (k = m->lo; k <= m->hi; k++)
        pcr_json_printf(b, "%s\"%u\": %llu", k > m->lo ? ", " : "", k,
                        (unsigned long long)atomic_load_explicit(&m->served[k],
                                                                 memory_order_relaxed));
    pcr_json_puts(b, "}");
}
