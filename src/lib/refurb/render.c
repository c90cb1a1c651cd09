/* pcrfs — rendering one refurbished sample: decode, crop, resize, flip, PPM.
 *
 * The reference is torchvision on a PIL image: Image.open().convert('RGB'), then
 * RandomResizedCrop (crop + resize((S, S), BILINEAR)), then RandomHorizontalFlip.
 * We do the same work in less time in two ways, neither changing the reference's
 * definition:
 *   - DCT scaling: libjpeg-turbo can run a reduced IDCT and return the image at
 *     M/8 of its size for a fraction of the cost. We pick the smallest M for which
 *     the crop is still at least S x S, so the final resize is still a downscale
 *     and keeps its antialiasing; the crop box is mapped to the scaled image in
 *     fractional coordinates (Pillow's resample takes a float box). With M = 8
 *     (dct_scaling off, or a crop smaller than S) the output is Pillow's, byte for
 *     byte, on the same decoded pixels.
 *   - Partial decoding: only the columns (jpeg_crop_scanline) and rows
 *     (jpeg_skip_scanlines, then stopping early) that the resample reads are
 *     decoded. libjpeg's fancy upsampling treats the edges of a cropped row as
 *     image edges, so the decoded span is widened by one pixel on each side where
 *     the image goes on; the pixels we use are then those of a full decode.
 * The horizontal pass runs as rows arrive, so no decoded crop is ever held whole.
 *
 * Errors longjmp() back to render_run(), whose state lives in a struct reached by
 * pointer (nothing the error path reads is a local changed after setjmp()).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>
#include "pcrfs/refurb.h"
#include "common/internal.h"
#include "refurb/refurb_internal.h"

/* The cap on libjpeg's own memory (the coefficient image of a progressive file):
 * what a small hostile header can make us allocate. As in the jpeg module. */
#ifndef PCR_REFURB_MAX_MEMORY
#define PCR_REFURB_MAX_MEMORY (2048L << 20)
#endif

enum { BATCH = 16 }; /* rows per jpeg_read_scanlines() call */

struct rerr {
    struct jpeg_error_mgr pub; /* must be first: libjpeg sees only this */
    jmp_buf jb;
    unsigned warnings;
    char msg[JMSG_LENGTH_MAX];
};

static void rerr_exit(j_common_ptr c)
{
    struct rerr *e = (struct rerr *)c->err;

    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void rerr_emit(j_common_ptr c, int level)
{
    /* Warnings (level -1: corrupt data, premature end) are tolerated, as Pillow
     * tolerates them: libjpeg goes on with what it has. Trace messages: ignored. */
    if (level < 0)
        ((struct rerr *)c->err)->warnings++;
}

static void rerr_output(j_common_ptr c)
{
    (void)c; /* the library never prints */
}

struct render {
    struct rerr err;
    struct jpeg_decompress_struct d;
    bool made;
    const struct pcr_refurb_conf *conf;
    struct pcr_refurb_params p; /* the crop, full-size pixels */
    bool draw;                  /* draw p from (sample, version) once the size is known */
    uint64_t sample, version;
    unsigned forced_m; /* 0: choose */
    unsigned m;        /* the scale used */
    bool partial;      /* crop and skip: conf->partial, and libjpeg will not smooth */
    struct rf_axis ax, ay;
    uint8_t *rows; /* BATCH decoded rows, output_width * components each */
    uint8_t *rgb;  /* one row converted from CMYK */
    uint8_t *tmp;  /* horizontally resampled rows, S * 3 each */
    int32_t *acc;  /* vertical pass scratch */
    uint8_t *out;  /* S * S * 3 */
    int status;    /* 0, or a negative errno decided outside libjpeg */
    char why[96];
};

/* The scale M/8 to decode at: the smallest keeping the crop >= S x S, i.e.
 * w * M / 8 >= S and h * M / 8 >= S. */
static unsigned pick_scale(const struct render *t)
{
    unsigned s = t->conf->size, m;

    if (t->forced_m) {
        m = t->forced_m > 8 ? 8 : t->forced_m;
        /* keep at least one pixel of crop in each direction */
        while (m < 8 && (t->p.width * m < 8 || t->p.height * m < 8))
            m++;
        return m;
    }
    if (!t->conf->dct_scaling)
        return 8;
    m = (8 * s + t->p.width - 1) / t->p.width;
    if ((8 * s + t->p.height - 1) / t->p.height > m)
        m = (8 * s + t->p.height - 1) / t->p.height;
    return m < 1 ? 1 : m > 8 ? 8 : m;
}

/* Pillow's CMYK;I unpacking + cmyk2rgb: libjpeg gives inverted (Adobe) CMYK,
 * Pillow inverts it back and computes R = nk - c * nk / 255 with nk = 255 - k. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t n)
{
    for (size_t x = 0; x < n; x++, in += 4, out += 3) {
        int nk = in[3];
        for (int c = 0; c < 3; c++) {
            int tmp = (255 - in[c]) * nk + 128;
            int v = nk - (((tmp >> 8) + tmp) >> 8);
            out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* libjpeg's block smoothing (a progressive image whose coefficients are not all
 * complete: a level below the top) estimates each block's low AC coefficients
 * from its neighbours' DC values. With jpeg_crop_scanline() or
 * jpeg_skip_scanlines() it no longer sees the same neighbours, and the pixels
 * change (measured: up to 36 levels off near the crop). So partial decoding is
 * used only when no coefficient is incomplete, i.e. when libjpeg cannot smooth.
 * Valid after jpeg_start_decompress(), which has read every scan by then. */
static bool may_smooth(const struct jpeg_decompress_struct *d)
{
    if (!d->progressive_mode || !d->do_block_smoothing || !d->coef_bits)
        return false;
    for (int c = 0; c < d->num_components; c++)
        for (int k = 0; k < DCTSIZE2; k++)
            if (d->coef_bits[c][k] != 0) /* -1: never sent; > 0: bits still missing */
                return true;
    return false;
}

/* Set up both resample axes over the scaled image, and the span they read:
 * columns [*c0, *c1) and rows [*r0, *r1) of the scaled image. The axes' indexes
 * are then relative to (c0, r0). */
static int plan(struct render *t, unsigned *c0, unsigned *c1, unsigned *r0, unsigned *r1)
{
    unsigned s = t->conf->size, ow = t->d.output_width, oh = t->d.output_height;
    double f = t->m / 8.0;
    double fx0 = t->p.left * f, fx1 = (t->p.left + t->p.width) * f;
    double fy0 = t->p.top * f, fy1 = (t->p.top + t->p.height) * f;
    unsigned x0 = (unsigned)floor(fx0), y0 = (unsigned)floor(fy0);
    unsigned x1 = (unsigned)ceil(fx1), y1 = (unsigned)ceil(fy1);
    unsigned first, last;

    if (x1 > ow)
        x1 = ow;
    if (y1 > oh)
        y1 = oh;
    if (x0 >= x1 || y0 >= y1)
        return -EINVAL;
    /* The region [x0, x1) x [y0, y1) plays the part of Pillow's cropped image;
     * with M = 8 it is the crop itself and the box is (0, 0, w, h). */
    if (rf_axis_init(&t->ax, x1 - x0, (float)(fx0 - x0), (float)(fx1 - x0), s) ||
        rf_axis_init(&t->ay, y1 - y0, (float)(fy0 - y0), (float)(fy1 - y0), s))
        return -ENOMEM;
    rf_axis_span(&t->ax, &first, &last);
    rf_axis_shift(&t->ax, first);
    *c0 = x0 + first;
    *c1 = x0 + last;
    rf_axis_span(&t->ay, &first, &last);
    rf_axis_shift(&t->ay, first);
    *r0 = y0 + first;
    *r1 = y0 + last;
    return 0;
}

static int render_run(struct render *t, const uint8_t *buf, size_t len)
{
    unsigned s = t->conf->size, c0, c1, r0, r1, comps;
    JDIMENSION xoff, xw;
    JSAMPROW rowp[BATCH];
    size_t stride;

    if (setjmp(t->err.jb))
        return -EINVAL;
    t->d.err = &t->err.pub;
    jpeg_create_decompress(&t->d);
    t->made = true;
    t->d.mem->max_memory_to_use = PCR_REFURB_MAX_MEMORY;
    jpeg_mem_src(&t->d, buf, (unsigned long)len);
    jpeg_read_header(&t->d, TRUE);

    if (t->draw && pcr_refurb_params(t->d.image_width, t->d.image_height, t->conf, t->sample,
                                     t->version, &t->p) != 0) {
        pcr_errf(t->why, sizeof(t->why), "no crop for a %ux%u image", t->d.image_width,
                 t->d.image_height);
        return t->status = -EINVAL;
    }
    if (t->p.width < 1 || t->p.height < 1 || t->p.left + t->p.width > t->d.image_width ||
        t->p.top + t->p.height > t->d.image_height || t->p.left + t->p.width < t->p.left ||
        t->p.top + t->p.height < t->p.top) {
        pcr_errf(t->why, sizeof(t->why), "crop box outside the %ux%u image", t->d.image_width,
                 t->d.image_height);
        return t->status = -EINVAL;
    }
    t->m = pick_scale(t);
    t->d.scale_num = t->m;
    t->d.scale_denom = 8;
    if (t->d.jpeg_color_space == JCS_CMYK || t->d.jpeg_color_space == JCS_YCCK)
        t->d.out_color_space = JCS_CMYK;
    else
        t->d.out_color_space = JCS_RGB; /* from gray too: the plane copied thrice */
    jpeg_start_decompress(&t->d);
    comps = (unsigned)t->d.output_components;

    if ((t->status = plan(t, &c0, &c1, &r0, &r1)) != 0) {
        pcr_errf(t->why, sizeof(t->why), "%s",
                 t->status == -ENOMEM ? "out of memory" : "empty crop");
        return t->status;
    }
    /* One more pixel each side where the image goes on: fancy upsampling treats
     * a cropped row's ends as image edges (libjpeg.txt, partial decompression). */
    xoff = c0 > 0 ? c0 - 1 : 0;
    xw = (c1 < t->d.output_width ? c1 + 1 : c1) - xoff;
    t->partial = t->conf->partial && !may_smooth(&t->d);
    if (!t->partial) {
        xoff = 0;
        xw = t->d.output_width;
    } else if (xoff > 0 || xw < t->d.output_width) {
        jpeg_crop_scanline(&t->d, &xoff, &xw); /* moves xoff left to an iMCU edge */
    }
    stride = (size_t)t->d.output_width * comps;
    t->rows = malloc(stride * BATCH);
    t->rgb = comps == 4 ? malloc(3 * (size_t)(c1 - c0)) : NULL;
    t->tmp = malloc(3 * (size_t)s * (r1 - r0));
    t->acc = malloc(sizeof(int32_t) * 3 * s);
    if (!t->rows || (comps == 4 && !t->rgb) || !t->tmp || !t->acc) {
        pcr_errf(t->why, sizeof(t->why), "out of memory");
        return t->status = -ENOMEM;
    }
    if (comps != 3 && comps != 4) { /* cannot happen with the colour spaces asked */
        pcr_errf(t->why, sizeof(t->why), "unexpected %u output components", comps);
        return t->status = -EINVAL;
    }
    if (r0 > 0 && t->partial)
        jpeg_skip_scanlines(&t->d, r0);
    while (t->d.output_scanline < r1) {
        JDIMENSION y = t->d.output_scanline, n = r1 - y;
        if (n > BATCH)
            n = BATCH;
        for (JDIMENSION i = 0; i < n; i++)
            rowp[i] = t->rows + i * stride;
        n = jpeg_read_scanlines(&t->d, rowp, n);
        if (n == 0) {
            pcr_errf(t->why, sizeof(t->why), "decoder returned no rows");
            return t->status = -EIO;
        }
        for (JDIMENSION i = 0; i < n; i++) {
            if (y + i < r0)
                continue; /* not skipped (partial off): decoded and dropped */
            const uint8_t *px = rowp[i] + (size_t)(c0 - xoff) * comps;
            if (comps == 4) { /* convert only the span the resample reads */
                cmyk_to_rgb(px, t->rgb, c1 - c0);
                px = t->rgb;
            }
            rf_hpass(&t->ax, px, t->tmp + (size_t)(y + i - r0) * 3 * s);
        }
    }
    /* Rows after r1 are never decoded: jpeg_destroy_decompress() abandons them,
     * unless partial decoding is off (then decoded, to measure what it saves). */
    while (!t->partial && t->d.output_scanline < t->d.output_height)
        jpeg_read_scanlines(&t->d, rowp, 1);
    rf_vpass(&t->ay, t->tmp, 3 * (size_t)s, 0, s, t->out, t->acc);
    return 0;
}

static void flip_rows(uint8_t *px, unsigned s)
{
    for (unsigned y = 0; y < s; y++) {
        uint8_t *a = px + (size_t)y * 3 * s, *b = a + 3 * (size_t)(s - 1);
        for (; a < b; a += 3, b -= 3) {
            uint8_t t0 = a[0], t1 = a[1], t2 = a[2];
            a[0] = b[0], a[1] = b[1], a[2] = b[2];
            b[0] = t0, b[1] = t1, b[2] = t2;
        }
    }
}

size_t pcr_refurb_ppm_size(unsigned size)
{
    char hdr[48];
    int n = snprintf(hdr, sizeof(hdr), "P6\n%u %u\n255\n", size, size);

    return (size_t)n + 3 * (size_t)size * size;
}

static int render(const struct pcr_refurb_conf *c, const uint8_t *jpeg, size_t len,
                  const struct pcr_refurb_params *p, bool draw, uint64_t sample, uint64_t version,
                  unsigned forced_m, uint8_t *ppm, struct pcr_refurb_info *info, char *why,
                  size_t whylen)
{
    struct render *t;
    int hdr, rc;

    pcr_errf(why, whylen, "%s", "");
    if (info)
        memset(info, 0, sizeof(*info));
    if (pcr_refurb_conf_check(c)) {
        pcr_errf(why, whylen, "bad refurbishing configuration");
        return -EINVAL;
    }
    if (!jpeg || len < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) {
        pcr_errf(why, whylen, "not a JPEG");
        return -EINVAL;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    jpeg_std_error(&t->err.pub);
    t->err.pub.error_exit = rerr_exit;
    t->err.pub.emit_message = rerr_emit;
    t->err.pub.output_message = rerr_output;
    t->conf = c;
    t->forced_m = forced_m;
    hdr = snprintf((char *)ppm, 48, "P6\n%u %u\n255\n", c->size, c->size);
    t->out = ppm + hdr;
    if (p)
        t->p = *p;
    t->draw = draw;
    t->sample = sample;
    t->version = version;
    rc = render_run(t, jpeg, len);
    if (rc == 0 && t->p.flip)
        flip_rows(t->out, c->size);
    if (rc == 0) {
        if (info) {
            info->width = t->d.image_width;
            info->height = t->d.image_height;
            info->components = (unsigned)t->d.num_components;
            info->scale_num = t->m;
            info->params = t->p;
            info->warnings = t->err.warnings;
        }
    } else if (t->status) {
        rc = t->status;
        pcr_errf(why, whylen, "%s", t->why);
    } else {
        pcr_errf(why, whylen, "%s", t->err.msg);
    }
    if (t->made)
        jpeg_destroy_decompress(&t->d);
    rf_axis_free(&t->ax);
    rf_axis_free(&t->ay);
    free(t->rows);
    free(t->rgb);
    free(t->tmp);
    free(t->acc);
    free(t);
    return rc;
}

int pcr_refurb_render(const struct pcr_refurb_conf *c, const uint8_t *jpeg, size_t len,
                      uint64_t sample, uint64_t version, uint8_t *ppm, struct pcr_refurb_info *info,
                      char *why, size_t whylen)
{
    return render(c, jpeg, len, NULL, true, sample, version, 0, ppm, info, why, whylen);
}

int pcr_refurb_render_params(const struct pcr_refurb_conf *c, const uint8_t *jpeg, size_t len,
                             const struct pcr_refurb_params *p, unsigned scale_num, uint8_t *ppm,
                             struct pcr_refurb_info *info, char *why, size_t whylen)
{
    if (!p)
        return -EINVAL;
    return render(c, jpeg, len, p, false, 0, 0, scale_num, ppm, info, why, whylen);
}
