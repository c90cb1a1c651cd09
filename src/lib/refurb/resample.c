/* pcrfs — Pillow's antialiased bilinear resample, one axis at a time.
 *
 * torchvision's RandomResizedCrop on a PIL image ends in Image.resize((S, S),
 * BILINEAR), which is Pillow's separable convolution: a triangle filter whose
 * support grows with the downscale factor (so a downscale averages every input
 * pixel instead of skipping some), horizontal pass first, each pass rounded to 8
 * bits. We compute the same coefficients in the same order and precision, so with
 * the same decoded pixels the output is the same bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include "refurb/refurb_internal.h"

static double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

int rf_axis_init(struct rf_axis *a, unsigned insize, float in0, float in1, unsigned outsize)
{
    /* Pillow divides a float difference: (double)(in1 - in0) / outSize. */
    double scale = (double)(in1 - in0) / outsize;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale; /* the triangle's support is 1 */
    double *w;

    a->out = outsize;
    a->ksize = (unsigned)ceil(support) * 2 + 1;
    a->bounds = malloc(sizeof(int) * 2 * outsize);
    a->kk = malloc(sizeof(int32_t) * (size_t)a->ksize * outsize);
    w = malloc(sizeof(double) * a->ksize);
    if (!a->bounds || !a->kk || !w) {
        free(w);
        rf_axis_free(a);
        return -ENOMEM;
    }
    for (unsigned xx = 0; xx < outsize; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5); /* truncation, as Pillow */
        int xmax = (int)(center + support + 0.5);
        int32_t *k = a->kk + (size_t)xx * a->ksize;

        if (xmin < 0)
            xmin = 0;
        if (xmax > (int)insize)
            xmax = (int)insize;
        xmax -= xmin;
        if (xmax > (int)a->ksize) /* cannot happen; keeps the writes in bounds */
            xmax = (int)a->ksize;
        for (int x = 0; x < xmax; x++) {
            w[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        for (int x = 0; x < (int)a->ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            /* normalize_coeffs_8bpc: round half away from zero */
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RF_PRECISION))
                         : (int32_t)(0.5 + v * (1 << RF_PRECISION));
        }
        a->bounds[2 * xx] = xmin;
        a->bounds[2 * xx + 1] = xmax < 0 ? 0 : xmax;
    }
    free(w);
    return 0;
}

void rf_axis_free(struct rf_axis *a)
{
    free(a->bounds);
    free(a->kk);
    a->bounds = NULL;
    a->kk = NULL;
}

void rf_axis_span(const struct rf_axis *a, unsigned *first, unsigned *last)
{
    /* Both ends grow monotonically with the output index. */
    *first = (unsigned)a->bounds[0];
    *last = (unsigned)(a->bounds[2 * (a->out - 1)] + a->bounds[2 * (a->out - 1) + 1]);
}

void rf_axis_shift(struct rf_axis *a, unsigned delta)
{
    for (unsigned i = 0; i < a->out; i++)
        a->bounds[2 * i] -= (int)delta;
}

/* Pillow's clip8: the sum carries RF_PRECISION fraction bits and starts at one half. */
static inline uint8_t clip8(int32_t v)
{
    v >>= RF_PRECISION;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

void rf_hpass(const struct rf_axis *a, const uint8_t *in, uint8_t *out)
{
    for (unsigned xx = 0; xx < a->out; xx++) {
        const int32_t *k = a->kk + (size_t)xx * a->ksize;
        const uint8_t *p = in + 3 * (size_t)a->bounds[2 * xx];
        int n = a->bounds[2 * xx + 1];
        int32_t s0 = 1 << (RF_PRECISION - 1), s1 = s0, s2 = s0;

        for (int x = 0; x < n; x++, p += 3) {
            s0 += p[0] * k[x];
            s1 += p[1] * k[x];
            s2 += p[2] * k[x];
        }
        out[3 * xx] = clip8(s0);
        out[3 * xx + 1] = clip8(s1);
        out[3 * xx + 2] = clip8(s2);
    }
}

void rf_vpass(const struct rf_axis *a, const uint8_t *in, size_t stride, unsigned first,
              unsigned width, uint8_t *out, int32_t *acc)
{
    size_t rowlen = 3 * (size_t)width;

    for (unsigned yy = 0; yy < a->out; yy++) {
        const int32_t *k = a->kk + (size_t)yy * a->ksize;
        const uint8_t *row = in + (size_t)(a->bounds[2 * yy] - (int)first) * stride;
        int n = a->bounds[2 * yy + 1];
        uint8_t *o = out + (size_t)yy * rowlen;

        /* Row by row, so the inner loop runs over contiguous bytes; integer sums
         * in another order are the same sums as Pillow's. */
        for (size_t x = 0; x < rowlen; x++)
            acc[x] = 1 << (RF_PRECISION - 1);
        for (int y = 0; y < n; y++) {
            const uint8_t *r = row + (size_t)y * stride;
            int32_t ky = k[y];
            for (size_t x = 0; x < rowlen; x++)
                acc[x] += r[x] * ky;
        }
        for (size_t x = 0; x < rowlen; x++)
            o[x] = clip8(acc[x]);
    }
}
