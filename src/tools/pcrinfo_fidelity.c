/* pcrinfo --fidelity (see below). */
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
#include "pcrfs/fidelity.h"
#include "pcrfs/jpeg.h"
#include "pcrinfo.h"
#include "progress.h"
#include "util/json.h"

/* MS-SSIM holds two double-precision pyramids of an image per thread (about 21 bytes
 * a pixel): images larger than this are left out of --fidelity (and counted). */
#define FID_MAX_PIXELS (48u << 20)

/* ---- --fidelity: MS-SSIM, bytes and decode time per level ----
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

/* Pick up to @want JPEG ids. @return how many, or -1 (message printed). */
static ssize_t fid_sample(struct pcr_store *s, size_t want, uint64_t seed, struct fid_image *img,
                          uint64_t *njpeg_seen, bool *all)
{
    uint64_t nfiles = pcr_store_nfiles(s), i, rng = seed;
    uint64_t *ids;
    size_t got = 0;

    *njpeg_seen = 0;
    *all = true;
    if (nfiles > SIZE_MAX / sizeof(*ids)) {
        tool_err("too many files");
        return -1;
    }
    ids = malloc((size_t)(nfiles ? nfiles : 1) * sizeof(*ids));
    if (!ids) {
        tool_err("out of memory");
        return -1;
    }
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
    const char *script;
    unsigned L, reduced, large, recommended;
    size_t ok, failures;
    uint64_t njpeg;
    bool all; /* every JPEG was counted */
    double *sum_ssim, *min_ssim, *sum_dec, *sum_bytes;
};

static void fid_print_json(const struct fid_totals *r, const struct fid_args *a)
{
    unsigned L = r->L, k;
    size_t ok = r->ok;

    printf("{\"script\":");
    if (r->script[0])
        pcr_json_fquote(stdout, r->script);
    else
        fputs("null", stdout);
    printf(",\"levels\":%u,\"metric\":\"ms-ssim\",\"channel\":\"luma\",\"scales\":%d,"
           "\"jpeg\":%" PRIu64 ",\"jpeg_counted\":%s,\"sample\":%zu,\"seed\":%" PRIu64
           ",\"threshold\":%.6g,\"failures\":%zu,\"reduced_scales\":%u,\"too_large\":%u,"
           "\"table\":[",
           L, PCR_MSSSIM_SCALES, r->njpeg, r->all ? "true" : "false", ok, a->seed, a->threshold,
           r->failures, r->reduced, r->large);
    for (k = 1; ok && k <= L; k++) {
        printf("%s{\"level\":%u,\"msssim\":%.6f,\"msssim_min\":%.6f,\"mean_bytes\":%.3f,"
               "\"ratio_to_full\":%.6f,\"decode_ms\":%.4f}",
               k > 1 ? "," : "", k, r->sum_ssim[k] / (double)ok, r->min_ssim[k],
               r->sum_bytes[k] / (double)ok,
               r->sum_bytes[L] > 0 ? r->sum_bytes[k] / r->sum_bytes[L] : 0.0,
               1e3 * r->sum_dec[k] / (double)ok);
    }
    printf("],\"recommended\":");
    if (ok)
        printf("%u}\n", r->recommended);
    else
        printf("null}\n");
}

static void fid_print_text(const struct fid_totals *r, const struct fid_args *a)
{
    unsigned L = r->L, k;
    size_t ok = r->ok;

    printf("fidelity      %zu of %s%" PRIu64 " JPEGs (seed %" PRIu64
           "): luma MS-SSIM of each level against level %u\n",
           ok, r->all ? "" : "more than ", r->njpeg, a->seed, L);
    printf("              script %s; decode = CPU time of a full libjpeg decode to RGB\n",
           r->script[0] ? r->script : "?");
    if (r->reduced)
        printf("              %u image%s smaller than %d px used fewer than %d scales\n",
               r->reduced, r->reduced == 1 ? "" : "s", PCR_MSSSIM_WINDOW << (PCR_MSSSIM_SCALES - 1),
               PCR_MSSSIM_SCALES);
    if (r->large)
        printf("              %u image%s over %u Mpixels left out\n", r->large,
               r->large == 1 ? "" : "s", FID_MAX_PIXELS >> 20);
    if (r->failures)
        printf("              %zu image%s failed (see the messages above)\n", r->failures,
               r->failures == 1 ? "" : "s");
    printf("\nlevel  MS-SSIM     min  mean bytes  ratio to full  decode ms\n");
    if (!ok)
        printf("    -  no JPEG in this store\n");
    for (k = 1; ok && k <= L; k++)
        printf("%5u  %7.4f  %6.4f  %10.0f  %13.3f  %9.3f\n", k, r->sum_ssim[k] / (double)ok,
               r->min_ssim[k], r->sum_bytes[k] / (double)ok,
               r->sum_bytes[L] > 0 ? r->sum_bytes[k] / r->sum_bytes[L] : 0.0,
               1e3 * r->sum_dec[k] / (double)ok);
    if (ok)
        printf("\nrecommended   level %u: the lowest whose mean MS-SSIM >= %g\n", r->recommended,
               a->threshold);
}

int do_fidelity(struct pcr_store *s, const struct fid_args *a)
{
    struct fidelity fx = {.s = s, .L = pcr_store_levels(s)};
    unsigned L = fx.L, k, t, started = 0, reduced = 0, large = 0, recommended;
    size_t i, ok = 0, failures = 0;
    uint64_t njpeg = 0, total_sz;
    pthread_t tids[MAX_JOBS];
    double *sum_ssim, *min_ssim, *sum_dec, *sum_bytes;
    char script[128] = "";
    bool all;
    ssize_t n;

    if (pcr_store_meta(s, "script", script, sizeof(script)) < 0)
        script[0] = '\0';
    fx.img = calloc(a->sample ? a->sample : 1, sizeof(*fx.img));
    sum_ssim = calloc(L + 1, sizeof(double));
    min_ssim = calloc(L + 1, sizeof(double));
    sum_dec = calloc(L + 1, sizeof(double));
    sum_bytes = calloc(L + 1, sizeof(double));
    if (!fx.img || !sum_ssim || !min_ssim || !sum_dec || !sum_bytes)
        tool_oom();
    n = fid_sample(s, a->sample, a->seed, fx.img, &njpeg, &all);
    if (n < 0) {
        free(fx.img);
        free(sum_ssim);
        free(min_ssim);
        free(sum_dec);
        free(sum_bytes);
        return 1;
    }
    fx.n = (size_t)n;
    for (i = 0; i < fx.n; i++) {
        fx.img[i].ssim = calloc(L + 1, sizeof(double));
        fx.img[i].dec = calloc(L + 1, sizeof(double));
        fx.img[i].bytes = calloc(L + 1, sizeof(uint64_t));
        if (!fx.img[i].ssim || !fx.img[i].dec || !fx.img[i].bytes)
            tool_oom();
    }
    for (i = 0, total_sz = 0; i < fx.n; i++)
        total_sz += fx.img[i].size;
    for (t = 0; t < a->jobs && t < MAX_JOBS && (t == 0 || t < fx.n); t++) {
        if (pthread_create(&tids[t], NULL, fid_worker, &fx) != 0)
            break;
        started++;
    }
    /* The progress line (on a terminal, as mkpcrfs's build shows it): a sample of
     * large images takes minutes. The workers end when the sample is done. */
    progress_start(a->progress && started, fx.n, total_sz);
    while (started && atomic_load(&fx.done) < fx.n) {
        struct timespec tick = {0, 100 * 1000 * 1000};

        progress_update(atomic_load(&fx.done), atomic_load(&fx.done_sz), false);
        nanosleep(&tick, NULL);
    }
    progress_update(atomic_load(&fx.done), atomic_load(&fx.done_sz), true);
    progress_finish();
    if (!started)
        fid_worker(&fx);
    for (t = 0; t < started; t++)
        pthread_join(tids[t], NULL);

    for (k = 1; k <= L; k++)
        min_ssim[k] = 1.0;
    for (i = 0; i < fx.n; i++) {
        struct fid_image *im = &fx.img[i];

        if (im->too_large) {
            large++;
            continue;
        }
        if (im->failed) {
            struct tool_buf path = {0}, esc = {0};

            if (file_path(s, im->id, &path) == 0) {
                tool_escape(&esc, path.s, path.len);
                tool_err("%s: level %u: %s", esc.s, im->level, im->why);
            } else {
                tool_err("file %" PRIu64 ": level %u: %s", im->id, im->level, im->why);
            }
            tool_buf_free(&path);
            tool_buf_free(&esc);
            failures++;
            continue;
        }
        ok++;
        if (im->scales < PCR_MSSSIM_SCALES)
            reduced++;
        for (k = 1; k <= L; k++) {
            sum_ssim[k] += im->ssim[k];
            if (im->ssim[k] < min_ssim[k])
                min_ssim[k] = im->ssim[k];
            sum_dec[k] += im->dec[k];
            sum_bytes[k] += (double)im->bytes[k];
        }
    }
    /* The lowest level whose mean reaches the threshold; L always does (1.0). */
    recommended = L;
    for (k = 1; ok && k <= L; k++) {
        if (sum_ssim[k] / (double)ok >= a->threshold) {
            recommended = k;
            break;
        }
    }

    {
        struct fid_totals r = {.script = script,
                               .L = L,
                               .reduced = reduced,
                               .large = large,
                               .recommended = recommended,
                               .ok = ok,
                               .failures = failures,
                               .njpeg = njpeg,
                               .all = all,
                               .sum_ssim = sum_ssim,
                               .min_ssim = min_ssim,
                               .sum_dec = sum_dec,
                               .sum_bytes = sum_bytes};

        if (a->json)
            fid_print_json(&r, a);
        else
            fid_print_text(&r, a);
    }
    for (i = 0; i < fx.n; i++) {
        free(fx.img[i].ssim);
        free(fx.img[i].dec);
        free(fx.img[i].bytes);
    }
    free(fx.img);
    free(sum_ssim);
    free(min_ssim);
    free(sum_dec);
    free(sum_bytes);
    return failures ? 1 : 0;
}
