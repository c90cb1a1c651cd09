/* pcrfs — lossless transcoding to progressive JPEG, and full decoding (see pcrfs/jpeg.h).
 *
 * The transcode is `jpegtran -progressive -copy all` done in-process with libjpeg:
 * the DCT coefficients are read (jpeg_read_coefficients) and written again with
 * libjpeg's default progressive scan script (or a script from scanscript.c, as
 * `jpegtran -scans FILE -copy all` would), so no pixel is ever recomputed. We use
 * the libjpeg API rather than TurboJPEG's tjTransform() because the latter refuses
 * images whose subsampling it cannot name (e.g. 4:1:1 with odd factors, or CMYK with
 * unusual factors), and every such file would then be stored verbatim.
 *
 * Failure policy: anything libjpeg does not read cleanly fails the call. libjpeg
 * "recovers" from corrupt or truncated data with a warning and zero-filled
 * coefficients; a transcode of that would not be the source image, so a warning is
 * treated as an error and the caller stores the source bytes verbatim instead.
 *
 * libjpeg's default error handler prints and calls exit(); ours records the message
 * and longjmp()s back to the entry point. Every libjpeg call runs inside a *_run()
 * helper whose only state lives in a context struct reached by pointer, so nothing
 * the error path reads is a local modified between setjmp() and longjmp().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <jpeglib.h>
#include <jerror.h>
#include "pcrfs/jpeg.h"
#include "common/internal.h"
#include "jpeg/mpf.h"

/* libjpeg holds the whole coefficient image in memory while transcoding (and while
 * decoding a progressive file). Its memory manager refuses virtual arrays beyond
 * max_memory_to_use (it has no backing store), so this caps what a 1 kB hostile
 * header claiming 65500x65500 can make us allocate. 2 GiB of coefficients is a
 * ~350-megapixel 4:4:4 colour image; the fuzz build lowers it to keep runs fast. */
#ifndef PCR_JPEG_MAX_MEMORY
#define PCR_JPEG_MAX_MEMORY (2048L << 20)
#endif

/* The libjpeg error manager: remembers the first error or warning and jumps out. */
struct jerr {
    struct jpeg_error_mgr pub; /* must be first: libjpeg sees only this */
    jmp_buf jb;                /* where error_exit/emit_message jump to */
    int code;                  /* libjpeg msg_code of the failure */
    bool warning;              /* the failure was a warning (corrupt data) */
    char msg[JMSG_LENGTH_MAX]; /* libjpeg's formatted message */
};

static void jerr_exit(j_common_ptr c)
{
    struct jerr *e = (struct jerr *)c->err;

    e->code = c->err->msg_code;
    e->warning = false;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void jerr_emit(j_common_ptr c, int level)
{
    struct jerr *e = (struct jerr *)c->err;

    if (level >= 0)
        return; /* trace messages */
    e->code = c->err->msg_code;
    e->warning = true;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void jerr_output(j_common_ptr c)
{
    (void)c; /* the library never prints */
}

static void jerr_init(struct jerr *e)
{
    jpeg_std_error(&e->pub);
    e->pub.error_exit = jerr_exit;
    e->pub.emit_message = jerr_emit;
    e->pub.output_message = jerr_output;
}

/* Turn the recorded libjpeg failure into our return code and one-line reason. */
static int jerr_reason(const struct jerr *e, char *why, size_t whylen)
{
    static const char corrupt[] = "Corrupt JPEG data: ";

    switch (e->code) {
    case JERR_OUT_OF_MEMORY:
        pcr_errf(why, whylen, "out of memory");
        return -ENOMEM;
    case JERR_NO_BACKING_STORE:
        pcr_errf(why, whylen, "image too large (needs more than %ld MiB of coefficients)",
                 (long)(PCR_JPEG_MAX_MEMORY >> 20));
        return -EINVAL;
    }
    if (e->warning) {
        const char *m = e->msg;
        /* Many libjpeg warnings already start with our prefix; say it once. */
        if (strncasecmp(m, corrupt, sizeof(corrupt) - 1) == 0)
            m += sizeof(corrupt) - 1;
        pcr_errf(why, whylen, "corrupt JPEG data: %s", m);
    } else {
        pcr_errf(why, whylen, "%s", e->msg);
    }
    return -EINVAL;
}

/* The start of every entry point: clear the reason, then the checks done before
 * libjpeg sees the bytes. @return 0 or -EINVAL with a reason. */
static int quick_reject(const uint8_t *buf, size_t len, char *why, size_t whylen)
{
    pcr_errf(why, whylen, "%s", "");
    if (len == 0) {
        pcr_errf(why, whylen, "empty file");
        return -EINVAL;
    }
    if (!buf || len < 2 || buf[0] != 0xFF || buf[1] != 0xD8) {
        pcr_errf(why, whylen, "not a JPEG");
        return -EINVAL;
    }
    return 0;
}

static void limit_memory(j_common_ptr c)
{
    c->mem->max_memory_to_use = PCR_JPEG_MAX_MEMORY;
}

/* Create a decompressor that reports to @e, with our memory cap; *@made tells the
 * caller's clean-up to destroy it. Like every libjpeg call, it may longjmp() to
 * e->jb: call it (and open_decompress()) only under the caller's setjmp(). */
static void create_decompress(struct jpeg_decompress_struct *d, struct jerr *e, bool *made)
{
    d->err = &e->pub;
    jpeg_create_decompress(d);
    *made = true;
    limit_memory((j_common_ptr)d);
}

/* create_decompress() on buf[0..len), and read the header. */
static void open_decompress(struct jpeg_decompress_struct *d, struct jerr *e, bool *made,
                            const uint8_t *buf, size_t len)
{
    create_decompress(d, e, made);
    jpeg_mem_src(d, buf, (unsigned long)len);
    jpeg_read_header(d, TRUE);
}

/* ------------------------------------------------------------------------------ */
/* Growable memory destination.
 *
 * Not jpeg_mem_dest(): when it grows its buffer it frees the one it handed back
 * through *outbuffer and keeps the new one in a private struct, so after an error
 * longjmp() mid-write the live buffer is unreachable and leaks. Here we own it. */

struct memdst {
    struct jpeg_destination_mgr pub; /* must be first */
    uint8_t *buf;                    /* malloc()ed output, owned by the caller */
    size_t cap;                      /* bytes allocated at buf */
    size_t len;                      /* bytes written, valid after term */
};

static void memdst_init(j_compress_ptr c)
{
    struct memdst *d = (struct memdst *)c->dest;

    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

/* Called when the buffer is full: double it and go on after the old end. */
static boolean memdst_grow(j_compress_ptr c)
{
    struct memdst *d = (struct memdst *)c->dest;
    size_t ncap = d->cap * 2;
    uint8_t *nbuf = realloc(d->buf, ncap);

    if (!nbuf)
        ERREXIT1(c, JERR_OUT_OF_MEMORY, 0);
    d->pub.next_output_byte = nbuf + d->cap;
    d->pub.free_in_buffer = ncap - d->cap;
    d->buf = nbuf;
    d->cap = ncap;
    return TRUE;
}

static void memdst_term(j_compress_ptr c)
{
    struct memdst *d = (struct memdst *)c->dest;

    d->len = d->cap - d->pub.free_in_buffer;
}

/* ------------------------------------------------------------------------------ */
/* Transcoding */

struct transcode {
    struct jerr err;
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct jpeg_decompress_struct probe; /* decoder set up on the output */
    struct memdst out;
    bool src_made, dst_made, probe_made; /* jpeg_create_*() completed: destroy needed */
    const struct pcr_scripts *scripts;   /* NULL: libjpeg's default script */
    jpeg_scan_info scans[PCR_MAX_SCANS]; /* the script handed to libjpeg, if any */
    size_t src_end;                      /* offset one past the source's EOI */
};

enum { RUN_OK, RUN_LIBJPEG, RUN_INCOMPLETE };

/* A progressive source whose scans do not bring every coefficient to full precision
 * is a valid JPEG, but libjpeg decodes it with inter-block smoothing (it guesses the
 * missing AC bits). The transcode has every bit (the missing ones as zeros), so it
 * would decode without smoothing: different pixels. Such files are kept verbatim. */
static bool incomplete_progression(const struct jpeg_decompress_struct *src)
{
    if (!src->progressive_mode || !src->coef_bits)
        return false;
    for (int ci = 0; ci < src->num_components; ci++)
        for (int k = 0; k < DCTSIZE2; k++)
            if (src->coef_bits[ci][k] != 0)
                return true;
    return false;
}

static bool has_prefix(const struct jpeg_marker_struct *m, const char *id, unsigned n)
{
    return m->data_length >= n && memcmp(m->data, id, n) == 0;
}

/* Write the saved APPn/COM markers after SOI, in source order. libjpeg has already
 * written its own JFIF APP0 (YCbCr and gray output) or Adobe APP14 (RGB, CMYK,
 * YCCK output) when write_JFIF_header / write_Adobe_marker is set, so the source's
 * copy of that one marker is skipped, as jpegtran does; two JFIF headers would
 * make the file invalid. Everything else (EXIF, ICC, XMP, COM, ...) is copied. */
static void copy_markers(struct transcode *t)
{
    for (jpeg_saved_marker_ptr m = t->src.marker_list; m; m = m->next) {
        if (t->dst.write_JFIF_header && m->marker == JPEG_APP0 && has_prefix(m, "JFIF", 5))
            continue;
        if (t->dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && has_prefix(m, "Adobe", 5))
            continue;
        jpeg_write_marker(&t->dst, m->marker, m->data, m->data_length);
    }
}

/* Give libjpeg the script for this image's class, or its own default. Called after
 * jpeg_copy_critical_parameters(), which resets the scan script. */
static void set_scan_script(struct transcode *t)
{
    const struct pcr_script *sc = NULL;
    enum pcr_script_class cls;

    cls =
        pcr_script_class_of((unsigned)t->dst.num_components, t->dst.jpeg_color_space == JCS_YCbCr);
    if (t->scripts && cls < PCR_CLASS_COUNT)
        sc = &t->scripts->by_class[cls];
    if (!sc || sc->nscans == 0 || sc->nscans > PCR_MAX_SCANS) {
        /* Exactly what jpegtran -progressive does: the bytes stay identical. */
        jpeg_simple_progression(&t->dst);
        return;
    }
    for (unsigned i = 0; i < sc->nscans; i++) {
        const struct pcr_scan *s = &sc->scan[i];

        memset(&t->scans[i], 0, sizeof(t->scans[i]));
        t->scans[i].comps_in_scan = s->ncomps;
        for (unsigned j = 0; j < s->ncomps && j < 4; j++)
            t->scans[i].component_index[j] = s->comp[j];
        t->scans[i].Ss = s->ss;
        t->scans[i].Se = s->se;
        t->scans[i].Ah = s->ah;
        t->scans[i].Al = s->al;
    }
    t->dst.scan_info = t->scans;
    t->dst.num_scans = (int)sc->nscans;
    /* libjpeg optimizes the Huffman tables of progressive scans by itself; a
     * multi-scan sequential script would otherwise get the standard tables. */
    t->dst.optimize_coding = TRUE;
}

static int transcode_run(struct transcode *t, const uint8_t *buf, size_t len, bool keep_markers)
{
    jvirt_barray_ptr *coef;

    if (setjmp(t->err.jb))
        return RUN_LIBJPEG;

    create_decompress(&t->src, &t->err, &t->src_made);
    t->dst.err = &t->err.pub;
    jpeg_create_compress(&t->dst);
    t->dst_made = true;
    limit_memory((j_common_ptr)&t->dst);

    jpeg_mem_src(&t->src, buf, (unsigned long)len);
    if (keep_markers) {
        jpeg_save_markers(&t->src, JPEG_COM, 0xFFFF);
        for (int i = 0; i < 16; i++)
            jpeg_save_markers(&t->src, JPEG_APP0 + i, 0xFFFF);
    }
    jpeg_read_header(&t->src, TRUE);
    coef = jpeg_read_coefficients(&t->src);
    /* jpeg_read_coefficients() returns once the EOI is read (a missing EOI is a
     * warning, hence a failure), and libjpeg reads no further: what is left in
     * the memory source is exactly the bytes after the EOI (the trailer). */
    t->src_end = len - t->src.src->bytes_in_buffer;
    if (incomplete_progression(&t->src))
        return RUN_INCOMPLETE;

    jpeg_copy_critical_parameters(&t->src, &t->dst);
    set_scan_script(t);
    t->out.pub.init_destination = memdst_init;
    t->out.pub.empty_output_buffer = memdst_grow;
    t->out.pub.term_destination = memdst_term;
    t->dst.dest = &t->out.pub;
    jpeg_write_coefficients(&t->dst, coef);
    if (keep_markers)
        copy_markers(t);
    jpeg_finish_compress(&t->dst);
    jpeg_finish_decompress(&t->src);
    return RUN_OK;
}

/* Some frames libjpeg can transcode coefficient by coefficient but not decode to
 * pixels (e.g. sampling factors that need "fractional" upsampling); storing them
 * progressive would serve files no reader can open. Setting up a decoder on the
 * output in buffered-image mode builds the same upsampler, colour converter and IDCT
 * that djpeg would, and fails exactly where djpeg fails, without decoding any scan
 * (its cost is below the noise of tests/bench/bench_transform over ds1k, < 0.5%). */
static int probe_run(struct transcode *t)
{
    if (setjmp(t->err.jb))
        return RUN_LIBJPEG;

    open_decompress(&t->probe, &t->err, &t->probe_made, t->out.buf, t->out.len);
    t->probe.buffered_image = TRUE;
    jpeg_start_decompress(&t->probe);
    return RUN_OK;
}

int pcr_jpeg_transcode(const uint8_t *src, size_t len, const struct pcr_transcode_opts *opts,
                       uint8_t **out, size_t *outlen, struct pcr_jpeg_info *info, char *why,
                       size_t whylen)
{
    struct transcode t;
    struct pcr_split split;
    int rc, run;

    *out = NULL;
    *outlen = 0;
    if (info)
        info->trailer = 0;
    rc = quick_reject(src, len, why, whylen);
    if (rc)
        return rc;

    memset(&t, 0, sizeof(t));
    jerr_init(&t.err);
    t.scripts = opts ? opts->scripts : NULL;
    /* The progressive output is usually a little smaller than the source (its
     * Huffman tables are optimized); the slack covers headers of tiny files. */
    t.out.cap = len + len / 8 + 4096;
    t.out.buf = malloc(t.out.cap);
    if (!t.out.buf) {
        pcr_errf(why, whylen, "out of memory");
        return -ENOMEM;
    }

    run = transcode_run(&t, src, len, !(opts && opts->drop_markers));
    if (run == RUN_OK)
        run = probe_run(&t);
    if (run == RUN_OK && info) {
        info->width = t.src.image_width;
        info->height = t.src.image_height;
        info->components = (unsigned)t.src.num_components;
    }
    if (run == RUN_LIBJPEG)
        rc = jerr_reason(&t.err, why, whylen);
    else if (run == RUN_INCOMPLETE) {
        pcr_errf(why, whylen, "progressive JPEG with incomplete scans (decoded with smoothing)");
        rc = -EINVAL;
    }
    if (t.probe_made)
        jpeg_destroy_decompress(&t.probe);
    if (t.dst_made)
        jpeg_destroy_compress(&t.dst);
    if (t.src_made)
        jpeg_destroy_decompress(&t.src);
    if (rc) {
        free(t.out.buf);
        return rc;
    }

    /* Callers index the output by pcr_jpeg_split(); make sure it will split. */
    rc = pcr_jpeg_split(t.out.buf, t.out.len, &split);
    if (rc) {
        pcr_errf(why, whylen, "transcoded output does not split into scans (%s)",
                 rc == -E2BIG ? "too many scans" : "bad structure");
        free(t.out.buf);
        return -EINVAL;
    }
    if (t.src_end < len) {
        /* The trailer is stored as one more chunk, so the scans must leave room. */
        if (split.nchunks >= PCR_MAX_CHUNKS) {
            pcr_errf(why, whylen, "too many scans to keep the %zu bytes after EOI",
                     len - t.src_end);
            rc = -EINVAL;
        } else {
            rc = pcr_mpf_patch(src, t.src_end, len, t.out.buf, t.out.len, why, whylen);
        }
        if (rc) {
            free(t.out.buf);
            return rc;
        }
    }
    if (info)
        info->trailer = len - t.src_end;
    *out = t.out.buf;
    *outlen = t.out.len;
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* Decoding: pcr_jpeg_decode() (all components) and pcr_jpeg_decode_luma() (the
 * fidelity measures, pcrfs/fidelity.h) share the state, the set-up, the row loop
 * and the epilogue below; they differ in what they ask libjpeg for and keep. */

struct decode {
    struct jerr err;
    struct jpeg_decompress_struct d;
    bool made;      /* jpeg_create_decompress() completed */
    uint8_t *pix;   /* the image the caller gets, or NULL */
    uint8_t *rows;  /* scratch rows: pixels discarded, or CMYK before luma */
    size_t npix;    /* bytes at pix (the size refused, for DEC_TOOBIG) */
    size_t trailer; /* bytes after the EOI */
};

enum { DEC_OK, DEC_LIBJPEG, DEC_NOMEM, DEC_TOOBIG };
enum { DEC_BATCH = 16 }; /* rows per jpeg_read_scanlines() call */

/* Allocate the caller's image of @n bytes. The same cap as libjpeg's own buffers:
 * a small hostile header must not make us reserve tens of GiB. */
static int decode_alloc_image(struct decode *t, size_t n)
{
    t->npix = n;
    if (n > (size_t)PCR_JPEG_MAX_MEMORY)
        return DEC_TOOBIG;
    t->pix = malloc(n ? n : 1);
    return t->pix ? DEC_OK : DEC_NOMEM;
}

/* Allocate DEC_BATCH scratch rows of @stride bytes. */
static int decode_alloc_rows(struct decode *t, size_t stride)
{
    t->rows = malloc(stride * DEC_BATCH);
    return t->rows ? DEC_OK : DEC_NOMEM;
}

/* Read the next batch of rows (at most DEC_BATCH) of @stride bytes each: into the
 * scratch rows when @scratch, else straight into the image at their place.
 * @return the number of rows read; @rows[] points at them. */
static JDIMENSION decode_batch(struct decode *t, bool scratch, size_t stride,
                               JSAMPROW rows[DEC_BATCH])
{
    JDIMENSION y = t->d.output_scanline;
    JDIMENSION n = t->d.output_height - y;

    if (n > DEC_BATCH)
        n = DEC_BATCH;
    for (JDIMENSION i = 0; i < n; i++)
        rows[i] = scratch ? t->rows + i * stride : t->pix + (size_t)(y + i) * stride;
    return jpeg_read_scanlines(&t->d, rows, n);
}

/* The common epilogue: turn @run into our return code and reason, and free all
 * that the caller has not taken (it sets t->pix to NULL when it takes it). */
static int decode_end(struct decode *t, int run, char *why, size_t whylen)
{
    int rc = 0;

    if (run == DEC_TOOBIG) {
        pcr_errf(why, whylen, "image too large (%zu bytes of pixels, more than %ld MiB)", t->npix,
                 (long)(PCR_JPEG_MAX_MEMORY >> 20));
        rc = -EINVAL;
    } else if (run == DEC_NOMEM) {
        pcr_errf(why, whylen, "out of memory");
        rc = -ENOMEM;
    } else if (run != DEC_OK) {
        rc = jerr_reason(&t->err, why, whylen);
    }
    if (t->made)
        jpeg_destroy_decompress(&t->d);
    free(t->pix);
    free(t->rows);
    return rc;
}

static int decode_run(struct decode *t, const uint8_t *buf, size_t len, bool keep_pixels)
{
    JSAMPROW rows[DEC_BATCH];
    size_t stride;
    int rc;

    if (setjmp(t->err.jb))
        return DEC_LIBJPEG;

    open_decompress(&t->d, &t->err, &t->made, buf, len);
    jpeg_start_decompress(&t->d);

    /* JDIMENSION is 32 bits and libjpeg caps each side at 65500 and components at
     * 10, so these products fit in a 64-bit size_t. */
    stride = (size_t)t->d.output_width * (size_t)t->d.output_components;
    if (keep_pixels)
        rc = decode_alloc_image(t, stride * t->d.output_height);
    else
        rc = decode_alloc_rows(t, stride);
    if (rc != DEC_OK)
        return rc;
    while (t->d.output_scanline < t->d.output_height)
        decode_batch(t, !keep_pixels, stride, rows);
    jpeg_finish_decompress(&t->d);
    t->trailer = t->d.src->bytes_in_buffer; /* libjpeg stops reading at the EOI */
    return DEC_OK;
}

int pcr_jpeg_decode(const uint8_t *buf, size_t len, uint8_t **pixels, size_t *npixels,
                    struct pcr_jpeg_info *info, char *why, size_t whylen)
{
    struct decode t;
    int rc, run;

    if (pixels)
        *pixels = NULL;
    if (npixels)
        *npixels = 0;
    rc = quick_reject(buf, len, why, whylen);
    if (rc)
        return rc;

    memset(&t, 0, sizeof(t));
    jerr_init(&t.err);
    run = decode_run(&t, buf, len, pixels != NULL);
    if (run == DEC_OK) {
        if (info) {
            info->width = t.d.image_width;
            info->height = t.d.image_height;
            info->components = (unsigned)t.d.num_components;
            info->trailer = t.trailer;
        }
        if (pixels) {
            *pixels = t.pix;
            t.pix = NULL;
            if (npixels)
                *npixels = t.npix;
        }
    }
    return decode_end(&t, run, why, whylen);
}

/* ------------------------------------------------------------------------------ */
/* Luma decoding.
 *
 * libjpeg converts YCbCr, RGB and gray to gray itself, and for YCbCr it then skips
 * the chroma IDCT and upsampling, so the luma of a photo costs less than its RGB.
 * It has no CMYK->gray conversion: those are decoded as CMYK and converted here. */

/* Inverted (Adobe) CMYK, as libjpeg returns it (255 = no ink), to BT.601 luma of the
 * RGB it stands for: R = C*K/255, G = M*K/255, B = Y*K/255. Integer arithmetic:
 * deterministic everywhere. */
static uint8_t cmyk_luma(const JSAMPLE *p)
{
    unsigned k = p[3];
    unsigned y = (299u * p[0] + 587u * p[1] + 114u * p[2]) * k; /* <= 1000 * 255 * 255 */

    return (uint8_t)((y + 1000u * 255u / 2) / (1000u * 255u));
}

static int luma_run(struct decode *t, const uint8_t *buf, size_t len)
{
    JSAMPROW rows[DEC_BATCH];
    bool cmyk;
    size_t w;
    int rc;

    if (setjmp(t->err.jb))
        return DEC_LIBJPEG;

    open_decompress(&t->d, &t->err, &t->made, buf, len);
    cmyk = t->d.jpeg_color_space == JCS_CMYK || t->d.jpeg_color_space == JCS_YCCK;
    /* Anything else libjpeg cannot make gray fails in jpeg_start_decompress(). */
    t->d.out_color_space = cmyk ? JCS_CMYK : JCS_GRAYSCALE;
    jpeg_start_decompress(&t->d);

    w = t->d.output_width;
    rc = decode_alloc_image(t, w * t->d.output_height);
    if (rc == DEC_OK && cmyk)
        rc = decode_alloc_rows(t, w * (size_t)t->d.output_components);
    if (rc != DEC_OK)
        return rc;
    while (t->d.output_scanline < t->d.output_height) {
        JDIMENSION y = t->d.output_scanline;
        JDIMENSION n;

        if (!cmyk) {
            decode_batch(t, false, w, rows);
            continue;
        }
        n = decode_batch(t, true, w * (size_t)t->d.output_components, rows);
        for (JDIMENSION i = 0; i < n; i++)
            for (size_t x = 0; x < w; x++)
                t->pix[(size_t)(y + i) * w + x] = cmyk_luma(rows[i] + 4 * x);
    }
    jpeg_finish_decompress(&t->d);
    return DEC_OK;
}

int pcr_jpeg_decode_luma(const uint8_t *buf, size_t len, uint8_t **luma, unsigned *width,
                         unsigned *height, char *why, size_t whylen)
{
    struct decode t;
    int rc, run;

    *luma = NULL;
    *width = *height = 0;
    rc = quick_reject(buf, len, why, whylen);
    if (rc)
        return rc;

    memset(&t, 0, sizeof(t));
    jerr_init(&t.err);
    run = luma_run(&t, buf, len);
    if (run == DEC_OK) {
        *luma = t.pix;
        *width = t.d.output_width;
        *height = t.d.output_height;
        t.pix = NULL;
    }
    return decode_end(&t, run, why, whylen);
}
