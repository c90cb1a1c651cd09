/* pcrfs — refurbishing's internals shared by its files; not installed. */
#ifndef PCRFS_REFURB_INTERNAL_H
#define PCRFS_REFURB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* One axis of Pillow's separable resample (libImaging/Resample.c), for the
 * bilinear (triangle) filter: for each output index, the first input index, the
 * number of taps and the taps' weights in fixed point (RF_PRECISION fraction
 * bits), exactly as Pillow computes them so the output matches it bit for bit. */
#define RF_PRECISION 22 /* Pillow's PRECISION_BITS: 32 - 8 - 2 */

struct rf_axis {
    unsigned out;   /* output size */
    unsigned ksize; /* taps allocated per output */
    int *bounds;    /* 2 * out: first input index, number of taps */
    int32_t *kk;    /* out * ksize weights */
};

/* Coefficients for resampling the input span [@in0, @in1) of an axis of @insize
 * pixels to @outsize pixels (Pillow's precompute_coeffs + normalize_coeffs_8bpc;
 * the box is float there, and so here). @return 0 or -ENOMEM. */
int rf_axis_init(struct rf_axis *a, unsigned insize, float in0, float in1, unsigned outsize);
void rf_axis_free(struct rf_axis *a);

/* The input indexes an axis reads: [*first, *last). */
void rf_axis_span(const struct rf_axis *a, unsigned *first, unsigned *last);

/* Make the axis's input indexes relative to input index @delta (<= the span's
 * first). */
void rf_axis_shift(struct rf_axis *a, unsigned delta);

/* Horizontal pass over one RGB row: @in points at input pixel 0 of the axis. */
void rf_hpass(const struct rf_axis *a, const uint8_t *in, uint8_t *out);

/* Vertical pass: @in holds RGB rows of @width pixels, @stride bytes apart, its row
 * 0 being input index @first; writes @width x a->out pixels at @out (rows packed).
 * @acc: scratch of 3 * @width int32. */
void rf_vpass(const struct rf_axis *a, const uint8_t *in, size_t stride, unsigned first,
              unsigned width, uint8_t *out, int32_t *acc);

#endif
