/* pcrfs — what each level costs and keeps: pcrfs_fidelity()
 * (include/pcrfs/pcrfs.h), what pcrinfo --fidelity prints (see below). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "api_internal.h"
#include "pcrfs/fidelity.h"
#include "pcrfs/jpeg.h"
#include "util/json.h"

#define FID_SAMPLE    300 /* default sample */
#define FID_MAX       100000
#define FID_THRESHOLD 0.95 /* PCR: levels with MS-SSIM >= 0.95 keep accuracy */
#define MAX_JOBS      256

/* MS-SSIM holds two double-precision pyramids of an image per thread (about 21 bytes
 * a pixel): images larger than this are left out of --fidelity (and counted). */
#define FID_MAX_PIXELS (48u << 20)

/* ---- MS-SSIM, bytes and decode time per level ----
 *
 * A seeded sample of the store's JPEGs (splitmix64 driving a partial Fisher-Yates
 * shuffle of the file ids, so the same seed picks the same images on any machine
 * and any number of threads), each read at every level through the library. For
 * each level: the luma MS-SSIM against the highest level (pcrfs/fidelity.h), the
 * bytes served, and the CPU time of a complete libjpeg decode to RGB, the work a
 * data loader does per image (thread CPU time, so other load on the machine does
 * not inflate it). Per-image results are summed in sample order: the output does
 * not depend on the number of threads, except the times.
 */

struct fid_image {
    uint64_t id;
    unsigned scales; /* MS-SSIM scales its size allows */
    bool failed;     /* a level did not read or decode: not counted */
    bool too_large;  /* over FID_MAX_PIXELS: left out */
    unsigned level;  /* the level that failed */
    char why[256];   /* what failed */
    double *ssim;    /* [1..L] */
    double *dec;     /* [1..L], seconds */
    uint64_t *bytes; /* [1..L] */
    uint64_t size;   /* at level L, as the index gives it: the progress bar's weight */
};

struct fidelity {
    struct pcr_store *s;
    unsigned L;
    struct fid_image *img;
    size_t n;
    atomic_size_t next;           /* next image a worker takes */
    atomic_size_t done;           /* images finished (measured, failed or left out) */
    atomic_uint_fast64_t done_sz; /* their fid_image.size, for the progress bar */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));

    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double thread_cpu(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read @f at @level into *buf (grown as needed). @return bytes, or a negative errno. */
static ssize_t read_level(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                          uint8_t **buf, size_t *cap)
{
    uint64_t size = pcr_file_size(f, level);
    ssize_t got;

    if (size > SIZE_MAX / 2)
        return -EFBIG;
    if (size + 1 > *cap) {
        uint8_t *p = realloc(*buf, (size_t)size + 1);

        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = (size_t)size + 1;
    }
    got = pcr_store_read(s, f, level, *buf, (size_t)size + 1, 0);
    if (got >= 0 && (uint64_t)got != size)
        return -EIO;
    return got;
}

/* Decode level @k (@n bytes at @p) in full, timed into im->dec[k] (what a reader
 * pays), then as luma into *@luma (malloc()ed). @return 0 or a negative errno. */
static int fid_decode(struct fid_image *im, unsigned k, const uint8_t *p, size_t n, uint8_t **luma,
                      unsigned *w, unsigned *h)
{
    double t = thread_cpu();
    int rc = pcr_jpeg_decode(p, n, NULL, NULL, NULL, im->why, sizeof(im->why));

    im->dec[k] = thread_cpu() - t;
    if (rc == 0)
        rc = pcr_jpeg_decode_luma(p, n, luma, w, h, im->why, sizeof(im->why));
    return rc;
}

/* Level @k failed with @rc: keep the library's reason, else say strerror(). */
static void fid_failed_at(struct fid_image *im, unsigned k, int rc)
{
    if (!im->why[0])
        snprintf(im->why, sizeof(im->why), "%s", strerror(-rc));
    im->level = k;
}

static void fid_one(struct fidelity *fx, struct fid_image *im, uint8_t **buf, size_t *cap,
                    uint8_t **full, size_t *fullcap)
{
    const struct pcr_file *f;
    struct pcr_msssim_ref *ref = NULL;
    uint8_t *luma = NULL;
    unsigned w, h, L = fx->L, k;
    ssize_t nfull, n;
    int rc;

    if (pcr_store_file(fx->s, im->id, &f) == 0) {
        struct pcr_file_info fi;

        pcr_file_info(f, &fi);
        if ((uint64_t)fi.width * fi.height > FID_MAX_PIXELS) {
            im->too_large = true;
            return;
        }
    }
    if ((rc = pcr_store_file(fx->s, im->id, &f)) < 0 ||
        (nfull = read_level(fx->s, f, L, full, fullcap)) < 0) {
        if (rc == 0)
            rc = (int)nfull;
        snprintf(im->why, sizeof(im->why), "read: %s", strerror(-rc));
        im->level = L;
        goto fail;
    }
    rc = fid_decode(im, L, *full, (size_t)nfull, &luma, &w, &h);
    if (rc == 0)
        rc = pcr_msssim_ref_new(luma, w, h, w, &ref);
    free(luma);
    luma = NULL;
    if (rc < 0) {
        fid_failed_at(im, L, rc);
        goto fail;
    }
    im->scales = pcr_msssim_ref_scales(ref);
    im->ssim[L] = 1.0;
    im->bytes[L] = (uint64_t)nfull;
    for (k = 1; k < L; k++) {
        unsigned lw, lh;

        n = read_level(fx->s, f, k, buf, cap);
        if (n < 0) {
            snprintf(im->why, sizeof(im->why), "read: %s", strerror((int)-n));
            im->level = k;
            goto fail;
        }
        im->bytes[k] = (uint64_t)n;
        if (n == nfull && memcmp(*buf, *full, (size_t)n) == 0) {
            /* This image has at most k scans: level k is the full image. */
            im->ssim[k] = 1.0;
            im->dec[k] = im->dec[L];
            continue;
        }
        rc = fid_decode(im, k, *buf, (size_t)n, &luma, &lw, &lh);
        if (rc == 0)
            rc = pcr_msssim_compare(ref, luma, lw, lh, lw, &im->ssim[k]);
        free(luma);
        luma = NULL;
        if (rc < 0) {
            fid_failed_at(im, k, rc);
            goto fail;
        }
    }
    pcr_msssim_ref_free(ref);
    return;
fail:
    pcr_msssim_ref_free(ref);
    im->failed = true;
}

static void *fid_worker(void *arg)
{
    struct fidelity *fx = arg;
    uint8_t *buf = NULL, *full = NULL;
    size_t cap = 0, fullcap = 0, i;

    while ((i = atomic_fetch_add(&fx->next, 1)) < fx->n) {
        fid_one(fx, &fx->img[i], &buf, &cap, &full, &fullcap);
        atomic_fetch_add(&fx->done_sz, fx->img[i].size);
        atomic_fetch_add(&fx->done, 1);
    }
    free(buf);
    free(full);
    return NULL;
}

static int cmp_id(const void *a, const void *b)
{
    const struct fid_image *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

/* Pick up to @want JPEG ids. @return how many, or -ENOMEM (the message set). */
static ssize_t fid_sample(struct pcr_store *s, size_t want, uint64_t seed, struct fid_image *img,
                          uint64_t *njpeg_seen, bool *all)
{
    uint64_t nfiles = pcr_store_nfiles(s), i, rng = seed;
    uint64_t *ids;
    size_t got = 0;

    *njpeg_seen = 0;
    *all = true;
    ids = nfiles <= SIZE_MAX / sizeof(*ids) ? malloc((size_t)(nfiles ? nfiles : 1) * sizeof(*ids))
                                            : NULL;
    if (!ids)
        return api_fail(-ENOMEM, "out of memory for the ids of %" PRIu64 " files", nfiles);
    for (i = 0; i < nfiles; i++)
        ids[i] = i + 1;
    /* Draw files in a seeded random order until @want JPEGs are found: on a big
     * store only about @want files are looked at. */
    for (i = 0; i < nfiles && got < want; i++) {
        uint64_t r = splitmix64(&rng);
        uint64_t j = i + (uint64_t)(((unsigned __int128)r * (nfiles - i)) >> 64);
        uint64_t t = ids[i];
        const struct pcr_file *f;
        struct pcr_file_info fi;

        ids[i] = ids[j];
        ids[j] = t;
        if (pcr_store_file(s, ids[i], &f) < 0)
            continue;
        pcr_file_info(f, &fi);
        if (fi.kind == PCR_KIND_JPEG) {
            img[got].size = pcr_file_size(f, pcr_store_levels(s));
            img[got++].id = ids[i];
            (*njpeg_seen)++;
        }
    }
    if (i < nfiles)
        *all = false; /* stopped early: the JPEG count below is a lower bound */
    free(ids);
    qsort(img, got, sizeof(*img), cmp_id); /* read in store order */
    return (ssize_t)got;
}

/* What the sample measured, summed over the images that did not fail. */
struct fid_totals {
    const char *script; /* meta "script" */
    unsigned L, reduced, large, recommended;
    size_t ok, failures;
    uint64_t njpeg;
    bool all; /* every JPEG was counted */
    double *sum_ssim, *min_ssim, *sum_dec, *sum_bytes;
};

static void fid_print_json(const struct fid_totals *r, const struct pcrfs_fidelity_args *a, FILE *f)
{
    unsigned L = r->L, k;
    size_t ok = r->ok;

    fprintf(f, "{\"script\":");
    if (r->script[0])
        pcr_json_fquote(f, r->script);
    else
        fputs("null", f);
    fprintf(f,
            ",\"levels\":%u,\"metric\":\"ms-ssim\",\"channel\":\"luma\",\"scales\":%d,"
            "\"jpeg\":%" PRIu64 ",\"jpeg_counted\":%s,\"sample\":%zu,\"seed\":%" PRIu64
            ",\"threshold\":%.6g,\"failures\":%zu,\"reduced_scales\":%u,\"too_large\":%u,"
            "\"table\":[",
            L, PCR_MSSSIM_SCALES, r->njpeg, r->all ? "true" : "false", ok, a->seed, a->threshold,
            r->failures, r->reduced, r->large);
    for (k = 1; ok && k <= L; k++) {
        fprintf(f,
                "%s{\"level\":%u,\"msssim\":%.6f,\"msssim_min\":%.6f,\"mean_bytes\":%.3f,"
                "\"ratio_to_full\":%.6f,\"decode_ms\":%.4f}",
                k > 1 ? "," : "", k, r->sum_ssim[k] / (double)ok, r->min_ssim[k],
                r->sum_bytes[k] / (double)ok,
                r->sum_bytes[L] > 0 ? r->sum_bytes[k] / r->sum_bytes[L] : 0.0,
                1e3 * r->sum_dec[k] / (double)ok);
    }
    fprintf(f, "],\"recommended\":");
    if (ok)
        fprintf(f, "%u}\n", r->recommended);
    else
        fprintf(f, "null}\n");
}

static void fid_print_text(const struct fid_totals *r, const struct pcrfs_fidelity_args *a, FILE *f)
{
    unsigned L = r->L, k;
    size_t ok = r->ok;

    fprintf(f,
            "fidelity      %zu of %s%" PRIu64 " JPEGs (seed %" PRIu64
            "): luma MS-SSIM of each level against level %u\n",
            ok, r->all ? "" : "more than ", r->njpeg, a->seed, L);
    fprintf(f, "              script %s; decode = CPU time of a full libjpeg decode to RGB\n",
            r->script[0] ? r->script : "?");
    if (r->reduced)
        fprintf(f, "              %u image%s smaller than %d px used fewer than %d scales\n",
                r->reduced, r->reduced == 1 ? "" : "s",
                PCR_MSSSIM_WINDOW << (PCR_MSSSIM_SCALES - 1), PCR_MSSSIM_SCALES);
    if (r->large)
        fprintf(f, "              %u image%s over %u Mpixels left out\n", r->large,
                r->large == 1 ? "" : "s", FID_MAX_PIXELS >> 20);
    if (r->failures)
        fprintf(f, "              %zu image%s failed (see the messages above)\n", r->failures,
                r->failures == 1 ? "" : "s");
    fprintf(f, "\nlevel  MS-SSIM     min  mean bytes  ratio to full  decode ms\n");
    if (!ok)
        fprintf(f, "    -  no JPEG in this store\n");
    for (k = 1; ok && k <= L; k++)
        fprintf(f, "%5u  %7.4f  %6.4f  %10.0f  %13.3f  %9.3f\n", k, r->sum_ssim[k] / (double)ok,
                r->min_ssim[k], r->sum_bytes[k] / (double)ok,
                r->sum_bytes[L] > 0 ? r->sum_bytes[k] / r->sum_bytes[L] : 0.0,
                1e3 * r->sum_dec[k] / (double)ok);
    if (ok)
        fprintf(f, "\nrecommended   level %u: the lowest whose mean MS-SSIM >= %g\n",
                r->recommended, a->threshold);
}

/* Tell @a's failure callback of image @im, by its path where it has one. */
static void fid_tell_failure(struct pcr_store *s, const struct pcrfs_fidelity_args *a,
                             const struct fid_image *im)
{
    size_t cap = 256;
    char *path = NULL;
    ssize_t n = -ENAMETOOLONG;

    while (n == -ENAMETOOLONG && cap <= ((size_t)1 << 24)) {
        char *p = realloc(path, cap);

        if (!p)
            break;
        path = p;
        n = pcr_store_path(s, im->id, path, cap);
        cap *= 2;
    }
    a->failure(n >= 0 ? path : NULL, im->id, im->level, im->why, a->ctx);
    free(path);
}

/* The sums over the images that did not fail into @r (whose arrays are zeroed), and
 * the failures told to @a. */
static void fid_sum(const struct fidelity *fx, const struct pcrfs_fidelity_args *a,
                    struct fid_totals *r)
{
    unsigned L = fx->L, k;

    for (k = 1; k <= L; k++)
        r->min_ssim[k] = 1.0;
    for (size_t i = 0; i < fx->n; i++) {
        const struct fid_image *im = &fx->img[i];

        if (im->too_large) {
            r->large++;
            continue;
        }
        if (im->failed) {
            if (a->failure)
                fid_tell_failure(fx->s, a, im);
            r->failures++;
            continue;
        }
        r->ok++;
        if (im->scales < PCR_MSSSIM_SCALES)
            r->reduced++;
        for (k = 1; k <= L; k++) {
            r->sum_ssim[k] += im->ssim[k];
            if (im->ssim[k] < r->min_ssim[k])
                r->min_ssim[k] = im->ssim[k];
            r->sum_dec[k] += im->dec[k];
            r->sum_bytes[k] += (double)im->bytes[k];
        }
    }
    /* The lowest level whose mean reaches the threshold; L always does (1.0). */
    r->recommended = L;
    for (k = 1; r->ok && k <= L; k++) {
        if (r->sum_ssim[k] / (double)r->ok >= a->threshold) {
            r->recommended = k;
            break;
        }
    }
}

/* Measure the sample of @fx with @a->jobs threads (this one if none starts),
 * telling @a's progress callback. */
static void fid_run(struct fidelity *fx, const struct pcrfs_fidelity_args *a)
{
    pthread_t tids[MAX_JOBS];
    unsigned t, started = 0;
    uint64_t total_sz = 0;

    for (size_t i = 0; i < fx->n; i++)
        total_sz += fx->img[i].size;
    for (t = 0; t < a->jobs && t < MAX_JOBS && (t == 0 || t < fx->n); t++) {
        if (pthread_create(&tids[t], NULL, fid_worker, fx) != 0)
            break;
        started++;
    }
    /* A sample of large images takes minutes: the caller hears how far it is. The
     * workers end when the sample is done. */
    if (a->progress)
        a->progress(0, fx->n, 0, total_sz, 0, a->ctx);
    while (started && atomic_load(&fx->done) < fx->n) {
        struct timespec tick = {0, 100 * 1000 * 1000};

        if (a->progress)
            a->progress(atomic_load(&fx->done), fx->n, atomic_load(&fx->done_sz), total_sz, 0,
                        a->ctx);
        nanosleep(&tick, NULL);
    }
    if (!started)
        fid_worker(fx);
    for (t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (a->progress)
        a->progress(atomic_load(&fx->done), fx->n, atomic_load(&fx->done_sz), total_sz, 1, a->ctx);
}

static void fid_free(struct fidelity *fx, struct fid_totals *r)
{
    for (size_t i = 0; fx->img && i < fx->n; i++) {
        free(fx->img[i].ssim);
        free(fx->img[i].dec);
        free(fx->img[i].bytes);
    }
    free(fx->img);
    free(r->sum_ssim);
    free(r->min_ssim);
    free(r->sum_dec);
    free(r->sum_bytes);
}

ssize_t pcrfs_fidelity(pcrfs_store *s, struct pcrfs_fidelity_args *a, char **out)
{
    struct fidelity fx = {0};
    struct fid_totals r = {0};
    struct pcrfs_fidelity_args args;
    char script[128] = "", *buf = NULL;
    struct inst *in;
    size_t len = 0;
    ssize_t n;
    FILE *f;
    int rc;

    PCRFS_INST(in, s);
    if (!a || !out ||
        a->size < offsetof(struct pcrfs_fidelity_args, failures) + sizeof(a->failures))
        return api_fail(-EINVAL, "pcrfs_fidelity: bad arguments");
    args = *a;
    args.sample = args.sample ? args.sample : FID_SAMPLE;
    args.threshold = args.threshold != 0 ? args.threshold : FID_THRESHOLD;
    args.jobs = args.jobs ? args.jobs : 1;
    if (args.sample > FID_MAX || !(args.threshold > 0 && args.threshold <= 1) ||
        args.jobs > MAX_JOBS || (args.flags & ~PCRFS_FIDELITY_JSON))
        return api_fail(-EINVAL,
                        "pcrfs_fidelity: want a sample of 1..%d, a threshold in (0, 1] and "
                        "1..%d jobs",
                        FID_MAX, MAX_JOBS);
    fx.s = in->store;
    fx.L = pcr_store_levels(in->store);
    if (pcr_store_meta(fx.s, "script", script, sizeof(script)) < 0)
        script[0] = '\0';
    fx.img = calloc((size_t)args.sample, sizeof(*fx.img));
    r.sum_ssim = calloc(fx.L + 1, sizeof(double));
    r.min_ssim = calloc(fx.L + 1, sizeof(double));
    r.sum_dec = calloc(fx.L + 1, sizeof(double));
    r.sum_bytes = calloc(fx.L + 1, sizeof(double));
    rc = fx.img && r.sum_ssim && r.min_ssim && r.sum_dec && r.sum_bytes ? 0 : -ENOMEM;
    n = rc ? rc : fid_sample(fx.s, (size_t)args.sample, args.seed, fx.img, &r.njpeg, &r.all);
    if (n < 0) {
        fid_free(&fx, &r);
        return api_fail((int)n, "out of memory");
    }
    fx.n = (size_t)n;
    for (size_t i = 0; i < fx.n && rc == 0; i++) {
        fx.img[i].ssim = calloc(fx.L + 1, sizeof(double));
        fx.img[i].dec = calloc(fx.L + 1, sizeof(double));
        fx.img[i].bytes = calloc(fx.L + 1, sizeof(uint64_t));
        if (!fx.img[i].ssim || !fx.img[i].dec || !fx.img[i].bytes)
            rc = -ENOMEM;
    }
    if (rc == 0) {
        fid_run(&fx, &args);
        r.script = script;
        r.L = fx.L;
        fid_sum(&fx, &args, &r);
        a->failures = r.failures;
        if ((f = open_memstream(&buf, &len)) != NULL) {
            if (args.flags & PCRFS_FIDELITY_JSON)
                fid_print_json(&r, &args, f);
            else
                fid_print_text(&r, &args, f);
            rc = ferror(f) ? -ENOMEM : 0;
            if (fclose(f) != 0)
                rc = -ENOMEM;
        } else
            rc = -ENOMEM;
    }
    fid_free(&fx, &r);
    if (rc < 0) {
        free(buf);
        return api_fail(rc, "out of memory");
    }
    *out = buf;
    return (ssize_t)len;
}
