/* pcrfs — MS-SSIM (see pcrfs/fidelity.h for the definition and its small-image rule).
 *
 * The Gaussian window is separable, so each scale is a horizontal pass (11 taps) over
 * every input row for the five moments x, y, x^2, y^2, xy, and a vertical pass over
 * a ring of the last 11 of those rows; SSIM terms are summed as each output row is
 * finished, so memory is the pyramid plus 55 rows, whatever the image size. All in
 * double: the moments of 8-bit data cancel badly in float (E[x^2] - mu^2 with
 * E[x^2] near 65025).
 *
 * Exactly 1.0 for identical images: with x == y every moment of x equals the one of
 * y bit for bit, so both SSIM ratios have equal numerator and denominator. Compilers
 * that contract a*b+c into fused multiply-adds (GCC does on targets with FMA) could
 * round the two sides differently, so identical inputs are also recognised up
 * front; that is the definition, and it saves the work for levels that hold every
 * scan.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/fidelity.h"

#define WIN   PCR_MSSSIM_WINDOW
#define HALF  (WIN / 2)
#define SIGMA 1.5
#define C1    ((0.01 * 255) * (0.01 * 255))
#define C2    ((0.03 * 255) * (0.03 * 255))

static const double weight[PCR_MSSSIM_SCALES] = {0.0448, 0.2856, 0.3001, 0.2363, 0.1333};

struct plane {
    unsigned w, h;
    double *p; /* w * h samples, row-major */
};

struct pcr_msssim_ref {
    unsigned w, h;
    unsigned scales;                     /* 0..5 */
    struct plane lvl[PCR_MSSSIM_SCALES]; /* the pyramid; lvl[0] only if scales == 0 */
};

static unsigned scales_for(unsigned w, unsigned h)
{
    unsigned m = 0;

    while (m < PCR_MSSSIM_SCALES && w >= WIN && h >= WIN) {
        m++;
        w = (w + 1) / 2;
        h = (h + 1) / 2;
    }
    return m;
}

static void gauss(double g[WIN])
{
    double sum = 0;

    for (int i = 0; i < WIN; i++) {
        int off = i - HALF; /* HALF: the integer centre of an odd window */
        double d = off;
        g[i] = exp(-(d * d) / (2 * SIGMA * SIGMA));
        sum += g[i];
    }
    for (int i = 0; i < WIN; i++)
        g[i] /= sum; /* the 2-D window is the outer product: it sums to 1 too */
}

static int plane_from_bytes(struct plane *pl, const uint8_t *img, unsigned w, unsigned h,
                            size_t stride)
{
    pl->w = w;
    pl->h = h;
    pl->p = malloc((size_t)w * h * sizeof(double));
    if (!pl->p)
        return -ENOMEM;
    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++)
            pl->p[(size_t)y * w + x] = img[(size_t)y * stride + x];
    return 0;
}

/* 2x2 average, decimated; an odd last row/column is averaged with itself. */
static int downsample(const struct plane *in, struct plane *out)
{
    unsigned w = (in->w + 1) / 2, h = (in->h + 1) / 2;

    out->w = w;
    out->h = h;
    out->p = malloc((size_t)w * h * sizeof(double));
    if (!out->p)
        return -ENOMEM;
    for (unsigned y = 0; y < h; y++) {
        const double *r0 = in->p + (size_t)(2 * y) * in->w;
        const double *r1 = 2 * y + 1 < in->h ? r0 + in->w : r0;

        for (unsigned x = 0; x < w; x++) {
            unsigned x0 = 2 * x, x1 = 2 * x + 1 < in->w ? 2 * x + 1 : 2 * x;
            /* in->p is filled whole by its maker; the analyzer assumes that loop empty:
             * NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
            out->p[(size_t)y * w + x] = (r0[x0] + r0[x1] + r1[x0] + r1[x1]) * 0.25;
        }
    }
    return 0;
}

static void pyramid_free(struct plane *lvl, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        free(lvl[i].p);
        lvl[i].p = NULL;
    }
}

/* Levels 0..n-1 (at least level 0) of @img's pyramid. */
static int pyramid(struct plane *lvl, unsigned n, const uint8_t *img, unsigned w, unsigned h,
                   size_t stride)
{
    int rc = plane_from_bytes(&lvl[0], img, w, h, stride);

    for (unsigned i = 1; rc == 0 && i < n; i++)
        rc = downsample(&lvl[i - 1], &lvl[i]);
    if (rc)
        pyramid_free(lvl, n ? n : 1);
    return rc;
}

/* Mean contrast-structure and mean SSIM of @x against @y at one scale (both sides
 * >= WIN), Gaussian window applied "valid". */
static int scale_stats(const struct plane *x, const struct plane *y, double *mcs, double *mssim)
{
    enum { MX, MY, XX, YY, XY, NMOM };
    const unsigned w = x->w, h = x->h, ow = w - (WIN - 1), oh = h - (WIN - 1);
    double g[WIN];
    double *ring, *v;
    double sum_cs = 0, sum_ssim = 0;

    gauss(g);
    /* ring[(row % WIN) * NMOM + m] is the horizontal pass of moment m for an input
     * row: ow values. v: the vertical sums of one output row, NMOM * ow. */
    ring = malloc((size_t)WIN * NMOM * ow * sizeof(double));
    v = malloc((size_t)NMOM * ow * sizeof(double));
    if (!ring || !v) {
        free(ring);
        free(v);
        return -ENOMEM;
    }
    for (unsigned r = 0; r < h; r++) {
        const double *xr = x->p + (size_t)r * w, *yr = y->p + (size_t)r * w;
        double *hr = ring + (size_t)(r % WIN) * NMOM * ow;

        for (unsigned c = 0; c < ow; c++) {
            double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;

            for (unsigned k = 0; k < WIN; k++) {
                double a = xr[c + k], b = yr[c + k], gk = g[k];
                double ga = gk * a, gb = gk * b;

                sx += ga;
                sy += gb;
                sxx += ga * a;
                syy += gb * b;
                sxy += ga * b;
            }
            hr[MX * ow + c] = sx;
            hr[MY * ow + c] = sy;
            hr[XX * ow + c] = sxx;
            hr[YY * ow + c] = syy;
            hr[XY * ow + c] = sxy;
        }
        if (r + 1 < WIN)
            continue;
        /* Output row r - (WIN-1) uses input rows r-WIN+1 .. r. */
        memset(v, 0, (size_t)NMOM * ow * sizeof(double));
        for (unsigned k = 0; k < WIN; k++) {
            const double *src = ring + (size_t)((r + 1 + k) % WIN) * NMOM * ow;
            double gk = g[k];

            for (unsigned i = 0; i < NMOM * ow; i++)
                v[i] += gk * src[i];
        }
        for (unsigned c = 0; c < ow; c++) {
            double mx = v[MX * ow + c], my = v[MY * ow + c];
            double mxx = mx * mx, myy = my * my, mxy = mx * my;
            double vx = v[XX * ow + c] - mxx, vy = v[YY * ow + c] - myy;
            double cov = v[XY * ow + c] - mxy;
            double cs = (2 * cov + C2) / (vx + vy + C2);
            double l = (2 * mxy + C1) / (mxx + myy + C1);

            sum_cs += cs;
            sum_ssim += l * cs;
        }
    }
    free(ring);
    free(v);
    *mcs = sum_cs / ((double)ow * oh);
    *mssim = sum_ssim / ((double)ow * oh);
    return 0;
}

/* SSIM from global statistics (equal weights over the whole image). */
static double global_ssim(const struct plane *x, const struct plane *y)
{
    size_t n = (size_t)x->w * x->h;
    double mx = 0, my = 0, vx = 0, vy = 0, cov = 0;

    for (size_t i = 0; i < n; i++) {
        mx += x->p[i];
        my += y->p[i];
    }
    mx /= (double)n;
    my /= (double)n;
    for (size_t i = 0; i < n; i++) {
        double a = x->p[i] - mx, b = y->p[i] - my;
        vx += a * a;
        vy += b * b;
        cov += a * b;
    }
    vx /= (double)n;
    vy /= (double)n;
    cov /= (double)n;
    return ((2 * mx * my + C1) * (2 * cov + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2));
}

static double clamp01(double v)
{
    return v < 0 ? 0 : v > 1 ? 1 : v;
}

int pcr_msssim_ref_new(const uint8_t *img, unsigned width, unsigned height, size_t stride,
                       struct pcr_msssim_ref **out)
{
    struct pcr_msssim_ref *r;
    int rc;

    *out = NULL;
    if (!img || width == 0 || height == 0 || stride < width)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->w = width;
    r->h = height;
    r->scales = scales_for(width, height);
    rc = pyramid(r->lvl, r->scales ? r->scales : 1, img, width, height, stride);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void pcr_msssim_ref_free(struct pcr_msssim_ref *ref)
{
    if (!ref)
        return;
    pyramid_free(ref->lvl, PCR_MSSSIM_SCALES);
    free(ref);
}

unsigned pcr_msssim_ref_scales(const struct pcr_msssim_ref *ref)
{
    return ref->scales;
}

int pcr_msssim_compare(const struct pcr_msssim_ref *ref, const uint8_t *img, unsigned width,
                       unsigned height, size_t stride, double *out)
{
    struct plane lvl[PCR_MSSSIM_SCALES] = {{0}};
    unsigned m = ref->scales;
    double wsum = 0, result = 1;
    int rc;

    *out = 0;
    if (!img || width != ref->w || height != ref->h || stride < width)
        return -EINVAL;
    rc = pyramid(lvl, m ? m : 1, img, width, height, stride);
    if (rc)
        return rc;
    if (memcmp(lvl[0].p, ref->lvl[0].p, (size_t)width * height * sizeof(double)) == 0) {
        *out = 1.0; /* identical: exactly 1 by definition (see the top of this file) */
        pyramid_free(lvl, m ? m : 1);
        return 0;
    }
    if (m == 0) {
        *out = clamp01(global_ssim(&lvl[0], &ref->lvl[0]));
        pyramid_free(lvl, 1);
        return 0;
    }
    for (unsigned j = 0; j < m; j++)
        wsum += weight[j];
    for (unsigned j = 0; j < m && rc == 0; j++) {
        double mcs, mssim;

        rc = scale_stats(&lvl[j], &ref->lvl[j], &mcs, &mssim);
        if (rc == 0)
            result *= pow(clamp01(j + 1 < m ? mcs : mssim), weight[j] / wsum);
    }
    pyramid_free(lvl, m);
    if (rc)
        return rc;
    *out = clamp01(result);
    return 0;
}

int pcr_msssim(const uint8_t *a, const uint8_t *b, unsigned width, unsigned height, size_t stride,
               double *out, unsigned *scales)
{
    struct pcr_msssim_ref *ref;
    int rc;

    *out = 0;
    rc = pcr_msssim_ref_new(b, width, height, stride, &ref);
    if (rc)
        return rc;
    if (scales)
        *scales = ref->scales;
    rc = pcr_msssim_compare(ref, a, width, height, stride, out);
    pcr_msssim_ref_free(ref);
    return rc;
}
