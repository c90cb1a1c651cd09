/* pcrfs — data refurbishing: partially augmented samples, each reused r times.
 *
 * Refurbishing (Revamper, Lee et al., USENIX ATC 2021) moves the expensive part of
 * data augmentation out of the training loop: each image is decoded, randomly
 * cropped and resized once (its "partial augmentation"), and the result is served
 * for r consecutive epochs before a fresh one replaces it. Eviction is balanced: in
 * every epoch after the first, about N/r of the N samples change, never all at once.
 *
 * This module is the library side of the refurb/ view (see doc/REFURB.md for the
 * exact semantics, which this header states briefly):
 *   - a counter-based RNG keyed by (seed, sample, version): a version's crop is the
 *     same whatever thread computes it, in whatever order;
 *   - torchvision's RandomResizedCrop.get_params, reproduced step by step;
 *   - a decoder that uses libjpeg-turbo's DCT scaling and partial decoding, then
 *     Pillow's antialiased bilinear resize of the crop to S x S, then the flip;
 *   - the balanced schedule as pure functions, O(1) memory for any N;
 *   - a context with a bounded cache of prepared samples (RAM or a local directory)
 *     and background worker threads.
 * No FUSE here: the view opens a context, calls pcr_refurb_get() when a file is
 * opened and pcr_refurb_schedule() to prepare the next pass ahead.
 */
#ifndef PCRFS_REFURB_H
#define PCRFS_REFURB_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Configuration ------------------------------------------------------------ */

/* The largest output side S accepted (a 4096 x 4096 PPM is 48 MiB). */
#define PCR_REFURB_MAX_SIZE 4096u

struct pcr_refurb_conf {
    unsigned size;    /* S: the output is S x S RGB; default 224 */
    double scale[2];  /* RandomResizedCrop's scale range; default (0.08, 1.0) */
    double ratio[2];  /* its aspect-ratio range; default (3/4, 4/3) */
    bool flip;        /* horizontal flip with p = 0.5; default true */
    bool dct_scaling; /* decode at the smallest M/8 that keeps the crop >= S x S;
                       * default true (false: always full size, Pillow-exact) */
    bool partial;     /* decode only the rows and columns the resample reads;
                       * default true (false: decode everything, same output) */
    uint64_t seed;    /* the run's seed; default 0 */
};

/* Fill @c with the defaults above. */
void pcr_refurb_conf_default(struct pcr_refurb_conf *c);

/* @return 0, or -EINVAL if @c is unusable: size outside 1..PCR_REFURB_MAX_SIZE, a
 * range with lo > hi, a scale outside (0, 1] or a ratio <= 0, or a NaN. */
int pcr_refurb_conf_check(const struct pcr_refurb_conf *c);

/* ---- Deterministic randomness ------------------------------------------------- */

/* A SplitMix64 generator. Its start state is a hash of (seed, sample, version,
 * stream); draw n of a stream is SplitMix64's n-th output from that state. */
struct pcr_refurb_rng {
    uint64_t state;
};

enum { PCR_REFURB_STREAM_CROP = 0, PCR_REFURB_STREAM_FLIP = 1 };

void pcr_refurb_rng_init(struct pcr_refurb_rng *r, uint64_t seed, uint64_t sample, uint64_t version,
                         unsigned stream);
uint64_t pcr_refurb_rng_next(struct pcr_refurb_rng *r);

/* ---- The crop ------------------------------------------------------------------ */

struct pcr_refurb_params {
    unsigned top, left;     /* the crop box in the image (torchvision's i, j) */
    unsigned height, width; /* its size (h, w); always inside the image, >= 1 */
    bool flip;              /* mirrored left-right after the resize */
    bool fallback;          /* none of the 10 tries fitted: the centre crop */
};

/* The crop and flip of version @version of sample @sample, for an image of
 * @width x @height pixels: torchvision's RandomResizedCrop.get_params (10 tries of
 * area * U(scale) and exp(U(log ratio)), w = round(sqrt(area * ar)), h =
 * round(sqrt(area / ar)) with Python's round-half-even, accepted if 0 < w <= W and
 * 0 < h <= H, then top = U{0..H-h}, left = U{0..W-w}; else the centre crop with the
 * ratio clamped), on the CROP stream; the flip is the first draw of the FLIP stream.
 * @return 0; -EINVAL (zero-sized image, bad @c). */
int pcr_refurb_params(unsigned width, unsigned height, const struct pcr_refurb_conf *c,
                      uint64_t sample, uint64_t version, struct pcr_refurb_params *out);

/* ---- Rendering one sample ------------------------------------------------------ */

/* The exact size of a sample's file: "P6\nS S\n255\n" then S*S*3 bytes. */
size_t pcr_refurb_ppm_size(unsigned size);

/* What pcr_refurb_render() did. */
struct pcr_refurb_info {
    unsigned width, height;          /* the image's size */
    unsigned components;             /* 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK */
    unsigned scale_num;              /* M: decoded at M/8 (8 = full size) */
    struct pcr_refurb_params params; /* the crop, in full-size pixels */
    unsigned warnings;               /* libjpeg warnings (corrupt data) tolerated */
};

/* Render version @version of sample @sample from the JPEG bytes @jpeg (the image
 * at whatever level the caller chose): decode with DCT scaling (if enabled), crop,
 * resize to S x S with Pillow's antialiased bilinear filter, flip, and write the
 * PPM into @ppm, which must hold pcr_refurb_ppm_size(c->size) bytes. Gray images
 * become RGB by copying the plane; CMYK and YCCK become RGB as Pillow converts
 * Adobe (inverted) CMYK. libjpeg warnings (corrupt or truncated data) are tolerated
 * and counted, as Pillow tolerates them; errors fail the call.
 * @return 0; -EINVAL (not a JPEG libjpeg can decode, bad @c; reason in @why);
 *         -ENOMEM. Thread-safe; untrusted input never crashes it or exits. */
int pcr_refurb_render(const struct pcr_refurb_conf *c, const uint8_t *jpeg, size_t len,
                      uint64_t sample, uint64_t version, uint8_t *ppm, struct pcr_refurb_info *info,
                      char *why, size_t whylen);

/* The same with an explicit crop (no RNG; @p->fallback is ignored) and an explicit
 * decode scale: @scale_num 1..8 forces M/8 (clamped so the crop stays >= 1 pixel),
 * 0 picks it as pcr_refurb_render() does. For tests and tools. */
int pcr_refurb_render_params(const struct pcr_refurb_conf *c, const uint8_t *jpeg, size_t len,
                             const struct pcr_refurb_params *p, unsigned scale_num, uint8_t *ppm,
                             struct pcr_refurb_info *info, char *why, size_t whylen);

/* ---- The balanced schedule ----------------------------------------------------- */

/* A fixed pseudo-random permutation of [0, @n) keyed by @seed, in O(1) memory: a
 * 4-round Feistel network over the smallest even-bit domain >= n, cycle-walked.
 * @return perm(@i) for i < n (i itself if n <= 1 or i >= n). */
uint64_t pcr_refurb_perm(uint64_t n, uint64_t seed, uint64_t i);
/* Its inverse: pcr_refurb_perm_inv(n, seed, pcr_refurb_perm(n, seed, i)) == i. */
uint64_t pcr_refurb_perm_inv(uint64_t n, uint64_t seed, uint64_t v);

/* Sample @i's phase p_i = perm(i) mod @r, in [0, r). */
uint64_t pcr_refurb_phase(uint64_t n, uint64_t seed, unsigned r, uint64_t i);

/* The version a sample of phase @phase serves at its @nopen-th open (0-based):
 * floor((nopen + phase) / r). It changes exactly at the opens where
 * (nopen + phase) mod r == 0; version 0 lives r - phase opens, every later one r. */
static inline uint64_t pcr_refurb_version(uint64_t nopen, uint64_t phase, unsigned r)
{
    return r ? (nopen + phase) / r : nopen;
}

/* True if the sample's content at open @nopen is a version it has not served yet
 * (always true at open 0). */
static inline bool pcr_refurb_is_fresh(uint64_t nopen, uint64_t phase, unsigned r)
{
    return nopen == 0 || r <= 1 || (nopen + phase) % r == 0;
}

/* How many of @n samples get a fresh version at pass @pass (>= 1; a pass opens each
 * sample once, so a sample's nopen is the pass number): ceil(n/r) or floor(n/r). */
uint64_t pcr_refurb_fresh_count(uint64_t n, unsigned r, uint64_t pass);

/* The @k-th (0-based, k < fresh_count) sample that gets a fresh version at @pass,
 * in increasing order of perm(i); O(1) work and memory per call. */
uint64_t pcr_refurb_fresh_nth(uint64_t n, uint64_t seed, unsigned r, uint64_t pass, uint64_t k);

/* ---- The context: cache and workers -------------------------------------------- */

/* Fetch sample @sample's JPEG bytes: *buf a malloc()ed buffer the library free()s.
 * Called from worker threads and from pcr_refurb_get() callers at once: it must be
 * thread-safe. @return 0 or a negative errno (passed on to the caller of get). */
typedef int (*pcr_refurb_load_fn)(void *arg, uint64_t sample, uint8_t **buf, size_t *len);

struct pcr_refurb_opts {
    struct pcr_refurb_conf conf;
    unsigned threads;      /* background workers; 0: prepare only on demand */
    uint64_t cache_bytes;  /* bound on prepared bytes kept; 0: 256 MiB */
    const char *cache_dir; /* NULL: keep prepared samples in RAM; else a private
                            * directory is made inside it (removed at close) */
};

struct pcr_refurb_stats {
    uint64_t prepared; /* samples rendered (workers and on demand) */
    uint64_t hits;     /* gets served from a prepared sample */
    uint64_t waits;    /* gets that waited for a job already running */
    uint64_t ondemand; /* gets that rendered the sample themselves */
    uint64_t failed;   /* renders that failed (load or decode) */
    uint64_t evicted;  /* prepared samples dropped to stay within the bound */
    uint64_t dropped;  /* superseded versions and cancelled jobs removed */
    uint64_t queued;   /* jobs waiting now */
    uint64_t cached;   /* prepared samples held now */
};

struct pcr_refurb;

/* @return 0 and *out; -EINVAL (bad options), -ENOMEM, or the errno of making the
 * cache directory or starting a thread. */
int pcr_refurb_open(const struct pcr_refurb_opts *o, pcr_refurb_load_fn load, void *arg,
                    struct pcr_refurb **out);
/* Stop the workers (the job running in each finishes), free everything, remove the
 * cache directory. NULL is fine. */
void pcr_refurb_close(struct pcr_refurb *r);

/* The prepared bytes of (@sample, @version), rendering them in the caller's thread
 * if no worker has (a job still queued is taken over; one running is waited for).
 * *buf is a malloc()ed copy of pcr_refurb_ppm_size(S) bytes the caller free()s.
 * Never returns a version other than @version. Versions older than @version of the
 * same sample are dropped from the cache (they are never served again).
 * @return 0; the load callback's error; -EINVAL (undecodable); -ENOMEM; -EIO. */
int pcr_refurb_get(struct pcr_refurb *r, uint64_t sample, uint64_t version, uint8_t **buf,
                   size_t *len);

/* Versions of @sample up to and including @version will not be asked for again
 * (the caller's schedule says so: the last open of @version was served): drop
 * them now rather than at the next get, so that the cache holds about one version
 * per sample instead of two for the samples about to change. A version still being
 * rendered or copied out is dropped when that ends. */
void pcr_refurb_release(struct pcr_refurb *r, uint64_t sample, uint64_t version);

/* Queue (@sample, @version) for a worker, unless it is prepared, queued or running.
 * @return 0 (queued, or already there); -ENOBUFS when the jobs outstanding already
 * fill the cache bound (scheduling more would evict the earlier ones); -EPIPE when
 * the context has no worker threads; -EAGAIN when the work queue has stopped (the
 * workers are all started by pcr_refurb_open(), which fails with -EAGAIN when
 * one cannot be). */
int pcr_refurb_schedule(struct pcr_refurb *r, uint64_t sample, uint64_t version);

/* Wait until (@sample, @version) is prepared, at most @timeout_ms milliseconds.
 * @return 0 when prepared; -ETIMEDOUT; -ENOENT if it is neither prepared, queued
 * nor running; the job's error if it failed. */
int pcr_refurb_wait(struct pcr_refurb *r, uint64_t sample, uint64_t version, unsigned timeout_ms);

void pcr_refurb_get_stats(struct pcr_refurb *r, struct pcr_refurb_stats *out);

#ifdef __cplusplus
}
#endif
#endif
