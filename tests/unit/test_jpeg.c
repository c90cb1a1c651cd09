/* Unit tests for the JPEG module: pcr_jpeg_split(), pcr_jpeg_transcode(),
 * pcr_jpeg_decode().
 *
 * Every fixture is generated here with libjpeg's compression API from synthetic
 * images (gradients plus noise, so blocks have real AC coefficients). Results are
 * checked against libjpeg itself, driven directly by this file (ref_decode), and
 * against an independent byte-at-a-time marker walk (ref_scan), so a bug in the
 * library cannot hide behind the same bug in its checker.
 *
 * Prints one line per check; exits 1 if any check failed.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include "pcrfs/jpeg.h"

static int nfail, npass;

static bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...)
{
    va_list ap;

    printf("%s - ", ok ? "ok" : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    if (ok)
        npass++;
    else
        nfail++;
    return ok;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        perror("malloc");
        exit(2);
    }
    return p;
}

struct buf {
    uint8_t *p;
    size_t len;
};

static struct buf buf_dup(const uint8_t *p, size_t len)
{
    struct buf b = {xmalloc(len), len};
    memcpy(b.p, p, len);
    return b;
}

/* A copy of @b with @ins (n bytes) inserted at offset @at. */
static struct buf buf_insert(struct buf b, size_t at, const void *ins, size_t n)
{
    struct buf r = {xmalloc(b.len + n), b.len + n};
    memcpy(r.p, b.p, at);
    memcpy(r.p + at, ins, n);
    memcpy(r.p + at + n, b.p + at, b.len - at);
    return r;
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic noise, identical on every run */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* ------------------------------------------------------------------------------ */
/* libjpeg driven directly: error manager that counts warnings and longjmps on errors */

struct tjerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
    char msg[JMSG_LENGTH_MAX];
};

static void tjerr_exit(j_common_ptr c)
{
    struct tjerr *e = (struct tjerr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void tjerr_emit(j_common_ptr c, int level)
{
    struct tjerr *e = (struct tjerr *)c->err;
    if (level < 0) {
        if (e->warnings++ == 0)
            c->err->format_message(c, e->msg);
    }
}

static void tjerr_output(j_common_ptr c)
{
    (void)c;
}

/* Reference decode with libjpeg's defaults. @return 0 and the pixels (if @pix),
 * -1 on an error; *warnings and *nscans report what libjpeg saw. */
struct refdec {
    uint8_t *pix;
    size_t npix;
    unsigned w, h, comps;
    int warnings;
    int nscans;
    char msg[JMSG_LENGTH_MAX];
};

static int ref_decode_run(struct jpeg_decompress_struct *d, struct tjerr *e, const struct buf *in,
                          struct refdec *r)
{
    if (setjmp(e->jb))
        return -1;
    jpeg_create_decompress(d);
    jpeg_mem_src(d, in->p, (unsigned long)in->len);
    jpeg_read_header(d, TRUE);
    jpeg_start_decompress(d);
    r->w = d->output_width;
    r->h = d->output_height;
    r->comps = (unsigned)d->output_components;
    size_t stride = (size_t)r->w * r->comps;
    r->npix = stride * r->h;
    r->pix = xmalloc(r->npix);
    while (d->output_scanline < d->output_height) {
        JSAMPROW row = r->pix + (size_t)d->output_scanline * stride;
        jpeg_read_scanlines(d, &row, 1);
    }
    jpeg_finish_decompress(d);
    r->nscans = d->input_scan_number;
    return 0;
}

static int ref_decode(struct buf in, struct refdec *r)
{
    struct jpeg_decompress_struct d;
    struct tjerr e;
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&d, 0, sizeof(d));
    memset(&e, 0, sizeof(e));
    d.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = tjerr_exit;
    e.pub.emit_message = tjerr_emit;
    e.pub.output_message = tjerr_output;
    rc = ref_decode_run(&d, &e, &in, r);
    r->warnings = e.warnings;
    memcpy(r->msg, e.msg, sizeof(r->msg));
    jpeg_destroy_decompress(&d);
    if (rc) {
        free(r->pix);
        r->pix = NULL;
    }
    return rc;
}

/* ------------------------------------------------------------------------------ */
/* Fixtures */

struct fx {
    const char *name;
    unsigned w, h;
    J_COLOR_SPACE in_cs;          /* JCS_RGB, JCS_GRAYSCALE, JCS_CMYK */
    J_COLOR_SPACE jpeg_cs;        /* JCS_UNKNOWN: libjpeg's default for in_cs */
    bool s444;                    /* all components 1x1 (else libjpeg's default 2x2 luma) */
    unsigned restart;             /* restart interval in MCUs */
    bool arith;                   /* arithmetic coding */
    bool progressive;             /* source already progressive */
    bool markers;                 /* add EXIF-like APP1, ICC-like APP2, COM */
    const jpeg_scan_info *script; /* custom scan script, if any */
    int nscript;
    unsigned expect_scans; /* scans after transcode */
};

static uint8_t exif_marker[200], icc_marker[300];
static const char com_marker[] = "pcrfs test comment: keep me";

static void init_markers(void)
{
    uint64_t s = 0x1234;
    memcpy(exif_marker, "Exif\0\0", 6);
    for (size_t i = 6; i < sizeof(exif_marker); i++)
        exif_marker[i] = (uint8_t)rng_next(&s);
    memcpy(icc_marker, "ICC_PROFILE\0\x01\x01", 14);
    for (size_t i = 14; i < sizeof(icc_marker); i++)
        icc_marker[i] = (uint8_t)rng_next(&s);
}

static unsigned cs_components(J_COLOR_SPACE cs)
{
    return cs == JCS_GRAYSCALE ? 1 : cs == JCS_CMYK ? 4 : 3;
}

/* The synthetic image: per-channel gradients in different directions, a few
 * sharp edges, and +-24 noise. */
static uint8_t *make_pixels(const struct fx *f)
{
    unsigned nc = cs_components(f->in_cs);
    uint8_t *px = xmalloc((size_t)f->w * f->h * nc);
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ f->w ^ ((uint64_t)f->h << 20);

    for (unsigned y = 0; y < f->h; y++)
        for (unsigned x = 0; x < f->w; x++)
            for (unsigned c = 0; c < nc; c++) {
                int v;
                switch (c) {
                case 0:
                    v = (int)(x * 255 / (f->w > 1 ? f->w - 1 : 1));
                    break;
                case 1:
                    v = (int)(y * 255 / (f->h > 1 ? f->h - 1 : 1));
                    break;
                case 2:
                    v = (int)((x + y) * 255 / (f->w + f->h));
                    break;
                default:
                    v = 128 + (((x / 16) ^ (y / 16)) & 1) * 64;
                    break;
                }
                if (((x / 37) + (y / 23)) % 5 == 0)
                    v = 255 - v; /* edges */
                v += (int)(rng_next(&s) % 49) - 24;
                px[((size_t)y * f->w + x) * nc + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

static struct buf make_jpeg(const struct fx *f, const uint8_t *px)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *out = NULL;
    unsigned long outlen = 0;
    unsigned nc = cs_components(f->in_cs);

    /* libjpeg's default error handler exits: a fixture that cannot be built is a
     * broken test, not a result. */
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &outlen);
    c.image_width = f->w;
    c.image_height = f->h;
    c.input_components = (int)nc;
    c.in_color_space = f->in_cs;
    jpeg_set_defaults(&c);
    if (f->jpeg_cs != JCS_UNKNOWN)
        jpeg_set_colorspace(&c, f->jpeg_cs);
    jpeg_set_quality(&c, 90, TRUE);
    if (f->s444)
        for (int i = 0; i < c.num_components; i++)
            c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    c.restart_interval = f->restart;
    c.arith_code = f->arith ? TRUE : FALSE;
    if (f->progressive)
        jpeg_simple_progression(&c);
    if (f->script) {
        c.scan_info = f->script;
        c.num_scans = f->nscript;
    }
    jpeg_start_compress(&c, TRUE);
    if (f->markers) {
        jpeg_write_marker(&c, JPEG_APP0 + 1, exif_marker, sizeof(exif_marker));
        jpeg_write_marker(&c, JPEG_APP0 + 2, icc_marker, sizeof(icc_marker));
        jpeg_write_marker(&c, JPEG_COM, (const JOCTET *)com_marker, sizeof(com_marker) - 1);
    }
    size_t stride = (size_t)f->w * nc;
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * stride);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    struct buf b = buf_dup(out, outlen);
    free(out);
    return b;
}

/* ------------------------------------------------------------------------------ */
/* Independent marker walk: byte at a time, no memchr, no shared code. */

#define REF_MAX_SCANS 200

struct scaninfo {
    unsigned n;
    size_t sos[REF_MAX_SCANS];      /* offset of the 0xFF of each SOS marker */
    size_t data_end[REF_MAX_SCANS]; /* first byte after each scan's entropy data */
    size_t eoi;                     /* offset of the EOI's 0xFF */
};

static int ref_scan(const uint8_t *b, size_t len, struct scaninfo *si)
{
    size_t i = 2;

    memset(si, 0, sizeof(*si));
    if (len < 2 || b[0] != 0xFF || b[1] != 0xD8)
        return -1;
    for (;;) {
        if (i >= len || b[i] != 0xFF)
            return -1;
        while (i + 1 < len && b[i + 1] == 0xFF)
            i++;
        if (i + 1 >= len)
            return -1;
        size_t at = i;
        uint8_t m = b[i + 1];
        i += 2;
        if (m == 0xD9) {
            si->eoi = at;
            return 0;
        }
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7))
            continue;
        if (i + 2 > len)
            return -1;
        size_t seg = ((size_t)b[i] << 8) | b[i + 1];
        i += seg;
        if (i > len)
            return -1;
        if (m != 0xDA)
            continue;
        if (si->n >= REF_MAX_SCANS)
            return -1;
        si->sos[si->n] = at;
        for (; i + 1 < len; i++)
            if (b[i] == 0xFF && b[i + 1] != 0x00 && !(b[i + 1] >= 0xD0 && b[i + 1] <= 0xD7))
                break;
        si->data_end[si->n++] = i;
    }
}

/* Check a split against the reference walk and against libjpeg: every prefix of K
 * chunks plus FF D9 must decode without a warning and contain exactly K scans. */
static void check_split_matches(const char *name, struct buf out, const struct pcr_split *sp,
                                bool decode_prefixes)
{
    struct scaninfo si;
    bool ok = ref_scan(out.p, out.len, &si) == 0 && si.n == sp->nchunks;
    check(ok, "%s: reference walk finds %u scans, split %u", name, si.n, sp->nchunks);
    if (!ok)
        return;

    bool bounds = true;
    for (unsigned i = 0; i < sp->nchunks; i++) {
        size_t start = i ? sp->end[i - 1] : 0;
        /* chunk i ends where scan i's data ends, holds its SOS, and starts right
         * after the previous scan's data (chunk 0 at SOI). */
        if (sp->end[i] != si.data_end[i] || si.sos[i] < start || si.sos[i] >= sp->end[i])
            bounds = false;
        if (i > 0 && start != si.data_end[i - 1])
            bounds = false;
    }
    check(bounds && out.p[0] == 0xFF && out.p[1] == 0xD8,
          "%s: chunk boundaries = ends of entropy data, SOS i inside chunk i", name);

    /* concatenation of the chunks + FF D9 reproduces the file */
    uint8_t *cat = xmalloc(out.len);
    size_t n = 0;
    for (unsigned i = 0; i < sp->nchunks; i++) {
        size_t start = i ? sp->end[i - 1] : 0;
        memcpy(cat + n, out.p + start, sp->end[i] - start);
        n += sp->end[i] - start;
    }
    bool cat_ok = n + 2 == out.len;
    if (cat_ok) {
        cat[n++] = 0xFF;
        cat[n++] = 0xD9;
        cat_ok = memcmp(cat, out.p, out.len) == 0 && si.eoi == out.len - 2;
    }
    free(cat);
    check(cat_ok, "%s: chunks || FF D9 == file (%zu bytes)", name, out.len);

    if (!decode_prefixes)
        return;
    bool pre_ok = true;
    for (unsigned k = 1; k <= sp->nchunks && pre_ok; k++) {
        struct buf pre = {xmalloc(sp->end[k - 1] + 2), sp->end[k - 1] + 2};
        struct refdec r;
        char why[256];
        memcpy(pre.p, out.p, sp->end[k - 1]);
        pre.p[pre.len - 2] = 0xFF;
        pre.p[pre.len - 1] = 0xD9;
        if (ref_decode(pre, &r) != 0 || r.warnings || r.nscans != (int)k) {
            printf("# prefix %u: warnings %d scans %d: %s\n", k, r.warnings, r.nscans, r.msg);
            pre_ok = false;
        }
        free(r.pix);
        if (pre_ok && pcr_jpeg_decode(pre.p, pre.len, NULL, NULL, NULL, why, sizeof(why)) != 0) {
            printf("# prefix %u: pcr_jpeg_decode: %s\n", k, why);
            pre_ok = false;
        }
        free(pre.p);
    }
    check(pre_ok, "%s: every prefix of K chunks + FF D9 decodes cleanly with K scans", name);
}

/* ------------------------------------------------------------------------------ */

static size_t count_segments(struct buf b, size_t limit, uint8_t marker, const void *id,
                             size_t idlen)
{
    size_t n = 0;
    for (size_t i = 0; i + 4 + idlen <= limit; i++)
        if (b.p[i] == 0xFF && b.p[i + 1] == marker && memcmp(b.p + i + 4, id, idlen) == 0)
            n++;
    return n;
}

/* Whether the file holds the marker segment FF <m> <len> <data> byte for byte,
 * before @limit. */
static bool has_segment(struct buf b, size_t limit, uint8_t m, const void *data, size_t n)
{
    size_t seg = n + 4;
    for (size_t i = 0; i + seg <= limit; i++)
        if (b.p[i] == 0xFF && b.p[i + 1] == m && b.p[i + 2] == ((n + 2) >> 8) &&
            b.p[i + 3] == ((n + 2) & 0xFF) && memcmp(b.p + i + 4, data, n) == 0)
            return true;
    return false;
}

static bool find_sof(struct buf b, size_t *at, uint8_t *type)
{
    struct scaninfo si;
    if (ref_scan(b.p, b.len, &si) != 0 || si.n == 0)
        return false;
    for (size_t i = 2; i + 1 < si.sos[0]; i++)
        if (b.p[i] == 0xFF && b.p[i + 1] >= 0xC0 && b.p[i + 1] <= 0xCF && b.p[i + 1] != 0xC4 &&
            b.p[i + 1] != 0xC8 && b.p[i + 1] != 0xCC) {
            *at = i;
            *type = b.p[i + 1];
            return true;
        }
    return false;
}

struct result {
    struct buf src, out;
    struct pcr_split sp;
};

/* Transcode a fixture and run every check on it. */
static void run_fixture(const struct fx *f, bool drop, struct result *res)
{
    char name[96], why[256];
    uint8_t *px = make_pixels(f);
    struct buf src = make_jpeg(f, px);
    struct pcr_transcode_opts opts = {.drop_markers = drop};
    struct pcr_jpeg_info info = {0};
    struct buf out = {0};
    struct pcr_split sp = {0};
    struct refdec rs, ro;
    unsigned nc = cs_components(f->in_cs);

    snprintf(name, sizeof(name), "%s%s", f->name, drop ? " (drop_markers)" : "");
    memset(res, 0, sizeof(*res));

    /* Precondition: libjpeg reads the fixture cleanly, close to the synthetic image. */
    bool src_ok = ref_decode(src, &rs) == 0 && rs.warnings == 0 && rs.w == f->w && rs.h == f->h &&
                  rs.comps == nc;
    double mad = 0;
    if (src_ok) {
        for (size_t i = 0; i < rs.npix; i++)
            mad += abs((int)rs.pix[i] - (int)px[i]);
        mad /= (double)rs.npix;
    }
    check(src_ok && mad < 20.0, "%s: fixture %ux%u, %zu bytes, decodes (mean abs error %.2f)", name,
          f->w, f->h, src.len, mad);
    free(px);

    int rc = pcr_jpeg_transcode(src.p, src.len, &opts, &out.p, &out.len, &info, why, sizeof(why));
    if (!check(rc == 0, "%s: transcode rc=%d (%s)", name, rc, why)) {
        free(src.p);
        free(rs.pix);
        return;
    }
    check(info.width == f->w && info.height == f->h && info.components == nc, "%s: info %ux%u c=%u",
          name, info.width, info.height, info.components);

    rc = pcr_jpeg_split(out.p, out.len, &sp);
    check(rc == 0 && sp.nchunks == f->expect_scans, "%s: split rc=%d into %u scans (want %u)", name,
          rc, sp.nchunks, f->expect_scans);
    if (rc == 0)
        check_split_matches(name, out, &sp, f->w * f->h <= 1000000);

    size_t sof;
    uint8_t sof_type = 0;
    bool have_sof = find_sof(out, &sof, &sof_type);
    check(have_sof && sof_type == 0xC2, "%s: output frame is progressive Huffman (SOF 0x%02X)",
          name, sof_type);

    bool out_ok = ref_decode(out, &ro) == 0 && ro.warnings == 0;
    check(out_ok, "%s: output decodes without warnings (libjpeg: %s)", name,
          ro.warnings ? ro.msg : "clean");
    check(out_ok && src_ok && ro.npix == rs.npix && memcmp(ro.pix, rs.pix, rs.npix) == 0,
          "%s: output pixels == source pixels (%zu bytes)", name, rs.npix);

    uint8_t *pp = NULL;
    size_t npp = 0;
    struct pcr_jpeg_info dinfo = {0};
    rc = pcr_jpeg_decode(out.p, out.len, &pp, &npp, &dinfo, why, sizeof(why));
    check(rc == 0 && src_ok && npp == rs.npix && memcmp(pp, rs.pix, npp) == 0 &&
              dinfo.width == f->w && dinfo.height == f->h && dinfo.components == nc,
          "%s: pcr_jpeg_decode of output == libjpeg's pixels of source", name);
    free(pp);
    free(rs.pix);
    free(ro.pix);

    res->src = src;
    res->out = out;
    res->sp = sp;
}

static void free_result(struct result *r)
{
    free(r->src.p);
    free(r->out.p);
}

/* ------------------------------------------------------------------------------ */

static void test_markers(void)
{
    struct fx f = {.name = "markers",
                   .w = 160,
                   .h = 120,
                   .in_cs = JCS_RGB,
                   .markers = true,
                   .expect_scans = 10};
    struct result keep, drop;

    run_fixture(&f, false, &keep);
    run_fixture(&f, true, &drop);
    if (!keep.out.p || !drop.out.p) {
        check(false, "markers: transcodes needed for marker checks");
        goto out;
    }
    size_t h = keep.sp.end[0]; /* markers belong in the header, i.e. chunk 0 */
    check(has_segment(keep.src, keep.src.len, 0xE1, exif_marker, sizeof(exif_marker)),
          "markers: source holds the APP1 (precondition)");
    check(has_segment(keep.out, h, 0xE1, exif_marker, sizeof(exif_marker)),
          "markers: EXIF APP1 kept byte-equal in chunk 0");
    check(has_segment(keep.out, h, 0xE2, icc_marker, sizeof(icc_marker)),
          "markers: ICC APP2 kept byte-equal in chunk 0");
    check(has_segment(keep.out, h, 0xFE, com_marker, sizeof(com_marker) - 1),
          "markers: COM kept byte-equal in chunk 0");
    check(count_segments(keep.out, keep.out.len, 0xE0, "JFIF", 5) == 1,
          "markers: exactly one JFIF APP0 in output (source's not duplicated)");

    size_t d = drop.sp.end[0];
    check(!has_segment(drop.out, drop.out.len, 0xE1, exif_marker, sizeof(exif_marker)) &&
              !has_segment(drop.out, drop.out.len, 0xE2, icc_marker, sizeof(icc_marker)) &&
              !has_segment(drop.out, drop.out.len, 0xFE, com_marker, sizeof(com_marker) - 1),
          "markers: drop_markers removes APP1, APP2, COM");
    check(count_segments(drop.out, d, 0xE0, "JFIF", 5) == 1,
          "markers: drop_markers still writes libjpeg's JFIF APP0");
    check(drop.out.len + sizeof(exif_marker) + sizeof(icc_marker) + sizeof(com_marker) - 1 + 12 ==
              keep.out.len,
          "markers: kept and dropped outputs differ by exactly the three segments");
out:
    free_result(&keep);
    free_result(&drop);
}

/* Splitter on hand-modified transcoder output. */
static void test_split_edits(struct result *r)
{
    struct pcr_split sp;
    struct buf out = r->out;
    const struct pcr_split *o = &r->sp;
    unsigned n = o->nchunks;

    if (n < 4) {
        check(false, "split edits: need a >= 4-scan file");
        return;
    }

    /* DHT between scans goes with the next scan: chunks that start with a DHT. */
    unsigned dht_first = 0;
    for (unsigned i = 1; i < n; i++)
        if (out.p[o->end[i - 1]] == 0xFF && out.p[o->end[i - 1] + 1] == 0xC4)
            dht_first++;
    check(dht_first >= 1, "split: %u of %u later chunks start with their DHT", dht_first, n - 1);

    /* Fill bytes before the marker that follows scan 2: they go with chunk 2. */
    static const uint8_t fill[] = {0xFF, 0xFF, 0xFF};
    struct buf b = buf_insert(out, o->end[1], fill, sizeof(fill));
    bool ok = pcr_jpeg_split(b.p, b.len, &sp) == 0 && sp.nchunks == n && sp.end[0] == o->end[0] &&
              sp.end[1] == o->end[1];
    for (unsigned i = 2; ok && i < n; i++)
        ok = sp.end[i] == o->end[i] + sizeof(fill);
    check(ok && memcmp(b.p + sp.end[1], "\xFF\xFF\xFF\xFF", 4) == 0,
          "split: fill bytes FF FF FF before a marker travel with the next chunk");
    if (ok)
        check_split_matches("fill bytes", b, &sp, true);
    free(b.p);

    /* A COM, a TEM and an RST between scans: all go with the next chunk. */
    static const uint8_t extra[] = {0xFF, 0xFE, 0x00, 0x06, 'a',  'b',
                                    'c',  'd',  0xFF, 0x01, 0xFF, 0xD3};
    b = buf_insert(out, o->end[2], extra, sizeof(extra));
    ok = pcr_jpeg_split(b.p, b.len, &sp) == 0 && sp.nchunks == n && sp.end[2] == o->end[2] &&
         sp.end[3] == o->end[3] + sizeof(extra) &&
         memcmp(b.p + sp.end[2], extra, sizeof(extra)) == 0;
    check(ok, "split: COM, TEM, RST3 between scans travel with the next chunk");
    free(b.p);

    /* EOI must follow the last scan directly, and end the file. */
    b = buf_insert(out, out.len - 2, "\xFF\xFE\x00\x03x", 5);
    check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL,
          "split: COM between last scan and EOI rejected");
    free(b.p);
    b = buf_insert(out, out.len - 2, "\xFF", 1);
    check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL, "split: fill byte before EOI rejected");
    free(b.p);
    b = buf_insert(out, out.len, "\x00", 1);
    check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL, "split: trailing byte after EOI rejected");
    free(b.p);
    b = buf_insert(out, out.len, "\xFF\xD9", 2);
    check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL, "split: second EOI rejected");
    free(b.p);

    /* No SOI */
    b = buf_dup(out.p, out.len);
    b.p[1] = 0xD9;
    check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL, "split: no SOI rejected");
    check(pcr_jpeg_split(out.p + 2, out.len - 2, &sp) == -EINVAL, "split: missing SOI rejected");
    free(b.p);

    /* Every truncation of the file is rejected (and, under ASan, never over-read). */
    bool all = true;
    for (size_t len = 0; len < out.len; len++) {
        uint8_t *t = xmalloc(len); /* exact-size copy so ASan sees any over-read */
        memcpy(t, out.p, len);
        if (pcr_jpeg_split(t, len, &sp) != -EINVAL)
            all = false;
        free(t);
    }
    check(all, "split: all %zu truncations rejected with -EINVAL", out.len);

    /* Marker lengths that run past the buffer */
    static const uint8_t app_long[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F'};
    check(pcr_jpeg_split(app_long, sizeof(app_long), &sp) == -EINVAL,
          "split: APP0 length past end rejected");
    static const uint8_t len_cut[] = {0xFF, 0xD8, 0xFF, 0xDB, 0x00};
    check(pcr_jpeg_split(len_cut, sizeof(len_cut), &sp) == -EINVAL,
          "split: length field cut in half rejected");
    static const uint8_t len_small[] = {0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x01, 0xFF, 0xD9};
    check(pcr_jpeg_split(len_small, sizeof(len_small), &sp) == -EINVAL,
          "split: segment length < 2 rejected");
    static const uint8_t no_scan[] = {0xFF, 0xD8, 0xFF, 0xFE, 0x00, 0x03, 'x', 0xFF, 0xD9};
    check(pcr_jpeg_split(no_scan, sizeof(no_scan), &sp) == -EINVAL, "split: no scan rejected");
    b = buf_dup(out.p, out.len);
    /* SOS length byte of scan 2 made huge: its segment runs past the end */
    {
        struct scaninfo si;
        ref_scan(out.p, out.len, &si);
        b.p[si.sos[1] + 2] = 0xFF;
        b.p[si.sos[1] + 3] = 0xFF;
        check(pcr_jpeg_split(b.p, b.len, &sp) == -EINVAL, "split: SOS length mismatch rejected");
    }
    free(b.p);

    /* Scan count limits: repeat chunk 1 (DHT + SOS + data) to make 64 and 65 scans. */
    for (unsigned want = PCR_MAX_CHUNKS; want <= PCR_MAX_CHUNKS + 1; want++) {
        size_t c1 = o->end[1] - o->end[0];
        unsigned extra_scans = want - n;
        struct buf big = {xmalloc(out.len + c1 * extra_scans), 0};
        memcpy(big.p, out.p, o->end[1]);
        big.len = o->end[1];
        for (unsigned i = 0; i < extra_scans; i++) {
            memcpy(big.p + big.len, out.p + o->end[0], c1);
            big.len += c1;
        }
        memcpy(big.p + big.len, out.p + o->end[1], out.len - o->end[1]);
        big.len += out.len - o->end[1];
        int rc = pcr_jpeg_split(big.p, big.len, &sp);
        if (want == PCR_MAX_CHUNKS)
            check(rc == 0 && sp.nchunks == PCR_MAX_CHUNKS && sp.end[63] == big.len - 2,
                  "split: exactly %u scans accepted", want);
        else
            check(rc == -E2BIG, "split: %u scans -> -E2BIG (rc=%d)", want, rc);
        free(big.p);
    }
}

/* Progressive files with restart markers inside the scans, split directly. */
static void test_split_restarts(void)
{
    struct fx f = {.name = "progressive+restarts",
                   .w = 97,
                   .h = 61,
                   .in_cs = JCS_RGB,
                   .progressive = true,
                   .restart = 1};
    uint8_t *px = make_pixels(&f);
    struct buf src = make_jpeg(&f, px);
    struct pcr_split sp;
    size_t rst = 0;

    for (size_t i = 0; i + 1 < src.len; i++)
        rst += src.p[i] == 0xFF && src.p[i + 1] >= 0xD0 && src.p[i + 1] <= 0xD7;
    check(rst > 100, "split restarts: fixture holds %zu RST markers", rst);
    int rc = pcr_jpeg_split(src.p, src.len, &sp);
    check(rc == 0 && sp.nchunks == 10, "split restarts: rc=%d, %u scans", rc, sp.nchunks);
    if (rc == 0)
        check_split_matches("split restarts", src, &sp, true);
    free(src.p);
    free(px);
}

/* The transcode of @in must fail with -EINVAL and a reason starting with
 * @want_prefix (if non-NULL); so must a decode, unless @decodable. */
static void expect_fail(const char *name, struct buf in, const char *want_prefix, bool decodable)
{
    char why[256] = "unset";
    uint8_t *out = (uint8_t *)1;
    size_t outlen = 1;
    int rc = pcr_jpeg_transcode(in.p, in.len, NULL, &out, &outlen, NULL, why, sizeof(why));
    bool ok = rc == -EINVAL && out == NULL && outlen == 0 && why[0] && !strchr(why, '\n');
    if (want_prefix)
        ok = ok && strncmp(why, want_prefix, strlen(want_prefix)) == 0;
    check(ok, "bad input %s: rc=%d why=\"%s\"", name, rc, why);
    if (rc == 0)
        free(out);

    uint8_t *px = (uint8_t *)1;
    rc = pcr_jpeg_decode(in.p, in.len, &px, NULL, NULL, why, sizeof(why));
    if (decodable)
        check(rc == 0 && px != NULL, "bad input %s: still decodes (rc=%d)", name, rc);
    else
        check(rc == -EINVAL && px == NULL, "bad input %s: decode rc=%d why=\"%s\"", name, rc, why);
    if (rc == 0)
        free(px);
}

static void test_bad_inputs(struct result *r)
{
    struct buf b;
    uint64_t s = 42;

    expect_fail("zero bytes", (struct buf){(uint8_t *)"", 0}, "empty file", false);

    b = (struct buf){xmalloc(4096), 4096};
    for (int k = 0; k < 8; k++) {
        for (size_t i = 0; i < b.len; i++)
            b.p[i] = (uint8_t)rng_next(&s);
        if (k & 1) { /* half of them look like a JPEG for two bytes */
            b.p[0] = 0xFF;
            b.p[1] = 0xD8;
        }
        char nm[32];
        snprintf(nm, sizeof(nm), "random #%d", k);
        expect_fail(nm, b, k & 1 ? NULL : "not a JPEG", false);
    }
    free(b.p);

    static const uint8_t png[] = {0x89, 'P',  'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00,
                                  0x00, 0x0D, 'I', 'H', 'D',  'R',  0x00, 0x00, 0x01, 0xF4};
    expect_fail("PNG signature", (struct buf){(uint8_t *)png, sizeof(png)}, "not a JPEG", false);
    expect_fail("SOI only", (struct buf){(uint8_t *)"\xFF\xD8", 2}, "corrupt JPEG data: ", false);

    /* A baseline source cut in the middle of its scan data */
    struct scaninfo si;
    struct buf src = r->src;
    if (ref_scan(src.p, src.len, &si) == 0 && si.n == 1) {
        b = buf_dup(src.p, (si.sos[0] + si.data_end[0]) / 2);
        expect_fail("truncated in scan data", b, "corrupt JPEG data: Premature end of JPEG file",
                    false);
        free(b.p);

        /* Garbage in the entropy data: an RST marker where no restart interval is
         * set. libjpeg warns and zero-fills; we must refuse. */
        b = buf_dup(src.p, src.len);
        size_t mid = (si.sos[0] + si.data_end[0]) / 2;
        memcpy(b.p + mid, "\xFF\xD3\x12\x34\xFF\xD5", 6);
        struct refdec rd;
        ref_decode(b, &rd);
        free(rd.pix);
        check(rd.warnings > 0, "corrupt fixture makes libjpeg warn (%s)", rd.msg);
        expect_fail("garbage in entropy data", b, "corrupt JPEG data: ", false);
        free(b.p);

        /* 12-bit: the SOF precision byte patched from 8 to 12 */
        size_t sof = 0;
        uint8_t type = 0;
        b = buf_dup(src.p, src.len);
        if (check(find_sof(b, &sof, &type) && b.p[sof + 4] == 8, "SOF precision byte found")) {
            b.p[sof + 4] = 12;
            expect_fail("12-bit", b, "Unsupported JPEG data precision 12", false);
            /* Huge dimensions in a small file: refused before any big allocation. */
            b.p[sof + 4] = 8;
            memcpy(b.p + sof + 5, "\xFF\xDC\xFF\xDC", 4);
            expect_fail("65500x65500 header", b, "image too large", false);
        }
        free(b.p);
    } else {
        check(false, "baseline fixture for bad-input cases");
    }

    /* Valid progressive JPEG whose AC scans stop at Al=1: libjpeg decodes it with
     * block smoothing, so a transcode would change pixels: must be refused. */
    static const jpeg_scan_info script[] = {
        {1, {0}, 0, 0, 0, 0},
        {1, {0}, 1, 63, 0, 1},
    };
    struct fx f = {.name = "incomplete",
                   .w = 64,
                   .h = 48,
                   .in_cs = JCS_GRAYSCALE,
                   .script = script,
                   .nscript = 2};
    uint8_t *px = make_pixels(&f);
    b = make_jpeg(&f, px);
    struct refdec rd;
    check(ref_decode(b, &rd) == 0 && rd.warnings == 0, "incomplete progressive fixture is valid");
    free(rd.pix);
    expect_fail("incomplete progression", b, "progressive JPEG with incomplete scans", true);
    free(b.p);
    free(px);
}

/* Regression cases found by tests/fuzz/fuzz_transcode. */

/* fuzz_transcode crash-3081be38 (minimized): an arithmetic-coded frame with
 * sampling factors 2x2, 1x3, 1x1. libjpeg transcodes its coefficients without a
 * complaint, but no decoder can upsample it ("Fractional sampling not implemented
 * yet"), so the transcode used to produce a file that could not be served. */
static const uint8_t fuzz_fract_sampling[] = {
    0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00, 0x08, 0x06, 0x06, 0x07, 0x06, 0x05, 0x08, 0x07, 0x07,
    0x07, 0x09, 0x09, 0x08, 0x0A, 0x0C, 0x14, 0x0D, 0x0C, 0x0B, 0x0B, 0x0C, 0x19, 0x12, 0x13, 0x0F,
    0x14, 0x1D, 0x1A, 0x1F, 0x1E, 0x1D, 0x1A, 0x1C, 0x1C, 0x20, 0x24, 0x2E, 0x27, 0x20, 0x22, 0x2C,
    0x23, 0x1C, 0x1C, 0x28, 0x37, 0x29, 0x2C, 0x30, 0x31, 0x34, 0x34, 0x34, 0x1F, 0x27, 0x39, 0x3D,
    0x38, 0x32, 0x3C, 0x2E, 0x33, 0x34, 0x32, 0xFF, 0xDB, 0x00, 0x43, 0x01, 0x09, 0x09, 0x09, 0x0C,
    0x0B, 0x0C, 0x18, 0x0D, 0x0D, 0x18, 0x32, 0x21, 0x1C, 0x21, 0x32, 0x32, 0x32, 0x02, 0x13, 0x01,
    0x03, 0x11, 0x01, 0xFF, 0xFF, 0xDA, 0x00, 0x0C, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00,
    0x3F, 0x00, 0xCE, 0x00, 0x08, 0xF6, 0xFF, 0xD9, 0xCE, 0xB4, 0x00, 0x0F, 0x60, 0x00, 0x08, 0x59,
    0xDB, 0xF6, 0xFF, 0xD9, 0xFF, 0xD9, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0xFF, 0xC9, 0x00, 0x11,
    0x08, 0x08, 0x10, 0x00, 0x10, 0x03, 0x01, 0x22, 0x00, 0x02, 0x13, 0x01, 0x03, 0x11, 0x01, 0xFF,
    0xDA, 0x00, 0x0C, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3F, 0x00, 0xFF, 0xD9,

};

static void test_fuzz_regressions(void)
{
    struct buf b = {(uint8_t *)fuzz_fract_sampling, sizeof(fuzz_fract_sampling)};
    expect_fail("fuzz: fractional sampling", b, "Fractional sampling not implemented yet", false);
}

/* ------------------------------------------------------------------------------ */
/* Bytes after EOI (trailers) and the MPF multi-picture index.
 *
 * Sources are built here: a JPEG from make_jpeg(), an MPF APP2 segment written
 * field by field in either byte order, and a second JPEG (or any bytes) appended
 * after the EOI. The checks read the output's MPF with their own walk. */

#define MPF_MAX_IMAGES 3

struct mpf_src {
    struct buf b;       /* the whole source */
    size_t primary;     /* its first image's length (through EOI) */
    size_t tiff;        /* offset of the MPF TIFF header in the source */
    size_t entries;     /* offset of the MP entries from the TIFF header */
    size_t seg, seglen; /* the APP2 segment: offset of its FF, bytes in all */
};

static void put_be_le(uint8_t *p, bool be, uint32_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[be ? n - 1 - i : i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_be_le(const uint8_t *p, bool be, unsigned n)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint32_t)p[be ? n - 1 - i : i] << (8 * i);
    return v;
}

/* FF E2 len "MPF\0" + TIFF: header, an IFD of MPFVersion, NumberOfImages and MP
 * Entry (@nimg entries of 16 bytes, sizes and offsets zero for now). */
static size_t mpf_segment(uint8_t *seg, bool be, unsigned nimg)
{
    uint8_t *t = seg + 8;
    size_t tifflen = 8 + 2 + 3 * 12 + 4 + 16 * (size_t)nimg;

    memset(seg, 0, 8 + tifflen);
    seg[0] = 0xFF;
    seg[1] = 0xE2;
    put_be_le(seg + 2, true, (uint32_t)(2 + 4 + tifflen), 2);
    memcpy(seg + 4, "MPF", 4);
    memcpy(t, be ? "MM" : "II", 2);
    put_be_le(t + 2, be, 42, 2);
    put_be_le(t + 4, be, 8, 4); /* IFD right after the header */
    put_be_le(t + 8, be, 3, 2);
    uint8_t *e = t + 10;
    put_be_le(e, be, 0xB000, 2), put_be_le(e + 2, be, 7, 2), put_be_le(e + 4, be, 4, 4);
    memcpy(e + 8, "0100", 4);
    e += 12;
    put_be_le(e, be, 0xB001, 2), put_be_le(e + 2, be, 4, 2), put_be_le(e + 4, be, 1, 4);
    put_be_le(e + 8, be, nimg, 4);
    e += 12;
    put_be_le(e, be, 0xB002, 2), put_be_le(e + 2, be, 7, 2);
    put_be_le(e + 4, be, 16 * nimg, 4), put_be_le(e + 8, be, 50, 4);
    return 8 + tifflen;
}

/* @primary with an MPF segment after its JFIF APP0, followed by @tail: entry 0 is
 * the primary, entry i >= 1 starts at @at[i - 1] bytes into @tail with size @size. */
static struct mpf_src mpf_source(struct buf primary, bool be, unsigned nimg, const size_t *at,
                                 const size_t *size, struct buf tail)
{
    uint8_t seg[8 + 8 + 2 + 36 + 4 + 16 * MPF_MAX_IMAGES];
    size_t seglen = mpf_segment(seg, be, nimg);
    size_t ins = 2;
    struct mpf_src m;

    if (primary.p[2] == 0xFF && primary.p[3] == 0xE0)
        ins = 4 + ((size_t)primary.p[4] << 8 | primary.p[5]);
    m.seg = ins;
    m.seglen = seglen;
    m.primary = primary.len + seglen;
    m.tiff = ins + 8;
    m.entries = 50;
    uint8_t *ent = seg + 8 + 50;
    put_be_le(ent + 4, be, (uint32_t)m.primary, 4);
    put_be_le(ent, be, 0x20030000, 4); /* representative baseline MP primary */
    for (unsigned i = 1; i < nimg; i++) {
        put_be_le(ent + 16 * i + 4, be, (uint32_t)size[i - 1], 4);
        put_be_le(ent + 16 * i + 8, be, (uint32_t)(m.primary + at[i - 1] - m.tiff), 4);
    }
    struct buf withseg = buf_insert(primary, ins, seg, seglen);
    m.b = buf_insert(withseg, withseg.len, tail.p, tail.len);
    free(withseg.p);
    return m;
}

/* The TIFF data of the first MPF APP2 segment before the first SOS, or NULL. */
static const uint8_t *find_mpf_tiff(struct buf b, size_t *tiff)
{
    struct scaninfo si;
    if (ref_scan(b.p, b.len, &si) != 0 || si.n == 0)
        return NULL;
    for (size_t i = 2; i + 8 < si.sos[0]; i++)
        if (b.p[i] == 0xFF && b.p[i + 1] == 0xE2 && memcmp(b.p + i + 4, "MPF", 4) == 0) {
            *tiff = i + 8;
            return b.p + i + 8;
        }
    return NULL;
}

static int transcode_buf(struct buf in, const struct pcr_transcode_opts *o, struct buf *out,
                         struct pcr_jpeg_info *info, char *why, size_t whylen)
{
    out->p = NULL;
    out->len = 0;
    return pcr_jpeg_transcode(in.p, in.len, o, &out->p, &out->len, info, why, whylen);
}

static void test_mpf_order(struct buf primary, struct buf second, bool be)
{
    const char *bo = be ? "MM" : "II";
    static const char pad[] = "\0\0padding after the last image";
    struct buf tail = buf_insert(second, second.len, pad, sizeof(pad));
    size_t at[2] = {0, second.len}, size[2] = {second.len, sizeof(pad)};
    struct mpf_src m = mpf_source(primary, be, 3, at, size, tail);
    struct pcr_jpeg_info info;
    struct buf out;
    char why[256] = "";
    size_t ot = 0;
    int rc = transcode_buf(m.b, NULL, &out, &info, why, sizeof(why));

    if (!check(rc == 0, "MPF %s: transcode rc=%d (%s)", bo, rc, why))
        goto done;
    check(info.trailer == tail.len && m.b.len - info.trailer == m.primary,
          "MPF %s: trailer of %zu bytes reported (want %zu)", bo, info.trailer, tail.len);
    const uint8_t *t = find_mpf_tiff(out, &ot);
    if (!check(t != NULL, "MPF %s: output keeps the MPF segment", bo))
        goto done;
    const uint8_t *e = t + m.entries;
    bool ok0 = get_be_le(e + 4, be, 4) == out.len && get_be_le(e + 8, be, 4) == 0;
    check(ok0, "MPF %s: entry 0 size = new primary length %zu, offset 0", bo, out.len);
    /* images i >= 1 now start at out.len + at[i - 1]: "out || trailer" */
    bool ok = true;
    for (unsigned i = 1; i < 3; i++)
        ok = ok && ot + get_be_le(e + 16 * i + 8, be, 4) == out.len + at[i - 1] &&
             get_be_le(e + 16 * i + 4, be, 4) == size[i - 1];
    check(ok, "MPF %s: entries 1-2 point at their images after the new EOI, sizes kept", bo);
    /* nothing else in the segment changed: compare with the source's, entry
     * fields of sizes/offsets masked */
    uint8_t a[200], b[200];
    size_t tl = m.seglen - 8;
    memcpy(a, m.b.p + m.tiff, tl);
    memcpy(b, t, tl);
    for (unsigned i = 0; i < 3; i++) {
        memset(a + m.entries + 16 * i + 4, 0, 8);
        memset(b + m.entries + 16 * i + 4, 0, 8);
    }
    check(memcmp(a, b, tl) == 0, "MPF %s: the rest of the segment is unchanged", bo);
    /* the second image is where the index says, and decodes */
    struct buf whole = buf_insert(out, out.len, tail.p, tail.len);
    size_t s1 = ot + get_be_le(e + 16 + 8, be, 4);
    struct refdec rd;
    check(s1 + second.len <= whole.len && memcmp(whole.p + s1, second.p, second.len) == 0 &&
              ref_decode((struct buf){whole.p + s1, second.len}, &rd) == 0 && rd.warnings == 0,
          "MPF %s: image 2 found through the patched index decodes", bo);
    if (s1 + second.len <= whole.len)
        free(rd.pix);
    struct pcr_jpeg_info di = {0};
    rc = pcr_jpeg_decode(whole.p, whole.len, NULL, NULL, &di, why, sizeof(why));
    check(rc == 0 && di.trailer == tail.len,
          "MPF %s: decode of out || trailer stops at the EOI (trailer %zu)", bo, di.trailer);
    free(whole.p);
done:
    free(out.p);
    free(m.b.p);
    free(tail.p);
}

/* Transcode @in, whose MPF was damaged: must fail with an MPF reason. */
static void expect_mpf_fail(const char *name, struct buf in)
{
    struct buf out;
    char why[256] = "";
    struct pcr_jpeg_info info;
    int rc = transcode_buf(in, NULL, &out, &info, why, sizeof(why));

    check(rc == -EINVAL && out.p == NULL && strncmp(why, "MPF", 3) == 0,
          "bad MPF %s: rc=%d why=\"%s\"", name, rc, why);
    free(out.p);
}

static void test_trailers(void)
{
    const struct fx pf = {.name = "mpf primary", .w = 96, .h = 64, .in_cs = JCS_RGB};
    const struct fx sf = {.name = "mpf second", .w = 40, .h = 24, .in_cs = JCS_GRAYSCALE};
    uint8_t *pp = make_pixels(&pf), *sp = make_pixels(&sf);
    struct buf primary = make_jpeg(&pf, pp), second = make_jpeg(&sf, sp);
    struct buf plain, out;
    struct pcr_jpeg_info info;
    char why[256] = "";
    int rc;

    free(pp);
    free(sp);
    rc = transcode_buf(primary, NULL, &plain, &info, why, sizeof(why));
    check(rc == 0 && info.trailer == 0, "trailer: none reported for a plain JPEG (rc=%d)", rc);

    /* No MPF: the trailer is reported and the image transcodes as without it. */
    {
        static const char afcp[] = "IPTC\x1c\x02\x00\x00\x02\x00\x04xyzAXS!\0\0\0\x20\0\0\0\0";
        struct buf in = buf_insert(primary, primary.len, afcp, sizeof(afcp) - 1);
        rc = transcode_buf(in, NULL, &out, &info, why, sizeof(why));
        check(rc == 0 && info.trailer == sizeof(afcp) - 1 && out.len == plain.len &&
                  memcmp(out.p, plain.p, out.len) == 0,
              "trailer: AFCP-like trailer of %zu bytes reported, image transcoded as without it",
              info.trailer);
        free(out.p);
        free(in.p);
    }

    test_mpf_order(primary, second, false);
    test_mpf_order(primary, second, true);

    /* MPF without a trailer (its images were cut off): copied unchanged. */
    {
        size_t at = 0, size = second.len;
        struct buf none = {(uint8_t *)"", 0};
        struct mpf_src m = mpf_source(primary, true, 2, &at, &size, none);
        size_t ot = 0;
        rc = transcode_buf(m.b, NULL, &out, &info, why, sizeof(why));
        const uint8_t *t = rc == 0 ? find_mpf_tiff(out, &ot) : NULL;
        check(rc == 0 && info.trailer == 0 && t && memcmp(t, m.b.p + m.tiff, m.seglen - 8) == 0,
              "MPF without a trailer: segment copied unchanged (rc=%d)", rc);
        free(out.p);
        free(m.b.p);
    }

    /* --drop-markers: no MPF left to patch; the trailer is still reported. */
    {
        size_t at = 0, size = second.len;
        struct mpf_src m = mpf_source(primary, false, 2, &at, &size, second);
        struct pcr_transcode_opts o = {.drop_markers = true};
        size_t ot;
        rc = transcode_buf(m.b, &o, &out, &info, why, sizeof(why));
        check(rc == 0 && info.trailer == second.len && !find_mpf_tiff(out, &ot),
              "MPF with drop_markers: segment dropped, trailer of %zu bytes kept", info.trailer);
        free(out.p);
        free(m.b.p);
    }

    /* Malformed indexes, each with a trailer: refused (the caller keeps the file). */
    {
        size_t at = 0, size = second.len;
        struct mpf_src m = mpf_source(primary, false, 2, &at, &size, second);
        struct buf c;
        struct {
            const char *name;
            size_t off; /* from the TIFF header */
            uint32_t v;
            unsigned n;
        } edits[] = {
            {"offset into the primary", m.entries + 16 + 8, 16, 4},
            {"offset past the end", m.entries + 16 + 8, 0x7FFFFFF0, 4},
            {"size past the end", m.entries + 16 + 4, (uint32_t)second.len + 1, 4},
            {"first entry with an offset", m.entries + 8, 4, 4},
            {"IFD offset outside the segment", 4, 0xFFFF, 4},
            {"IFD count too large", 8, 200, 2},
            {"MP Entry count not a multiple of 16", 10 + 24 + 4, 33, 4},
            {"MP Entry data outside the segment", 10 + 24 + 8, 0xFFF0, 4},
            {"MP Entry of the wrong type", 10 + 24 + 2, 4, 2},
            {"not a TIFF header", 2, 43, 2},
        };
        for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
            c = buf_dup(m.b.p, m.b.len);
            put_be_le(c.p + m.tiff + edits[i].off, false, edits[i].v, edits[i].n);
            expect_mpf_fail(edits[i].name, c);
            free(c.p);
        }
        /* two MPF segments */
        c = buf_insert(m.b, m.seg, m.b.p + m.seg, m.seglen);
        expect_mpf_fail("two segments", c);
        free(c.p);
        /* every single-byte change of the segment: 0 or -EINVAL, never a crash
         * (the sanitizer runs of this test check the bounds) */
        bool sane = true;
        for (size_t i = 0; i < m.seglen - 8; i++) {
            c = buf_dup(m.b.p, m.b.len);
            c.p[m.tiff + i] ^= 0xA5;
            rc = transcode_buf(c, NULL, &out, &info, why, sizeof(why));
            sane = sane && (rc == 0 || (rc == -EINVAL && out.p == NULL));
            free(out.p);
            free(c.p);
        }
        check(sane, "bad MPF: all %zu one-byte edits give 0 or -EINVAL", m.seglen - 8);
        free(m.b.p);
    }

    /* The trailer takes a chunk: a 64-scan script leaves none for it. */
    {
        const struct fx gf = {.name = "gray", .w = 48, .h = 32, .in_cs = JCS_GRAYSCALE};
        uint8_t *gp = make_pixels(&gf);
        struct buf g = make_jpeg(&gf, gp), in;
        static struct pcr_scripts sc;
        struct pcr_script *s = &sc.by_class[PCR_CLASS_GRAY];
        static const char tail[] = "trailer";

        free(gp);
        in = buf_insert(g, g.len, tail, sizeof(tail) - 1);
        for (unsigned nscans = 63; nscans <= 64; nscans++) {
            memset(&sc, 0, sizeof(sc));
            s->nscans = nscans;
            for (unsigned k = 0; k < nscans; k++) {
                s->scan[k] = (struct pcr_scan){.ncomps = 1, .ss = (uint8_t)k, .se = (uint8_t)k};
            }
            s->scan[nscans - 1].se = 63; /* the last band runs to the end */
            struct pcr_transcode_opts o = {.scripts = &sc};
            rc = transcode_buf(in, &o, &out, &info, why, sizeof(why));
            if (nscans == 63)
                check(rc == 0 && info.trailer == sizeof(tail) - 1,
                      "trailer: 63 scans + trailer fit (rc=%d, %s)", rc, why);
            else
                check(rc == -EINVAL && strstr(why, "after EOI"),
                      "trailer: 64 scans + trailer refused (rc=%d, %s)", rc, why);
            free(out.p);
        }
        free(in.p);
        free(g.p);
    }
    free(plain.p);
    free(primary.p);
    free(second.p);
}

/* The transcoder holds no global state: concurrent calls give identical bytes. */
struct thr {
    struct buf src, want;
    int mismatches;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    for (int i = 0; i < 20; i++) {
        uint8_t *o;
        size_t n;
        if (pcr_jpeg_transcode(t->src.p, t->src.len, NULL, &o, &n, NULL, NULL, 0) != 0) {
            t->mismatches++;
            continue;
        }
        if (n != t->want.len || memcmp(o, t->want.p, n) != 0)
            t->mismatches++;
        free(o);
    }
    return NULL;
}

static void test_threads(struct result *r)
{
    struct thr t[4];
    pthread_t th[4];
    int bad = 0;

    for (int i = 0; i < 4; i++) {
        t[i] = (struct thr){r->src, r->out, 0};
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += t[i].mismatches;
    }
    check(bad == 0, "threads: 4x20 concurrent transcodes byte-identical (%d mismatches)", bad);
}

int main(void)
{
    init_markers();
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* One line per fixture reads better than clang-format's one field per line. */
    /* clang-format off */
    static const struct fx fixtures[] = {
        {.name = "color 4:2:0", .w = 227, .h = 149, .in_cs = JCS_RGB, .expect_scans = 10},
        {.name = "color 4:4:4", .w = 131, .h = 77, .in_cs = JCS_RGB, .s444 = true,
         .expect_scans = 10},
        {.name = "grayscale", .w = 150, .h = 100, .in_cs = JCS_GRAYSCALE, .expect_scans = 6},
        {.name = "CMYK", .w = 90, .h = 70, .in_cs = JCS_CMYK, .expect_scans = 18},
        {.name = "YCCK", .w = 90, .h = 70, .in_cs = JCS_CMYK, .jpeg_cs = JCS_YCCK,
         .expect_scans = 18},
        {.name = "RGB (no YCbCr)", .w = 100, .h = 66, .in_cs = JCS_RGB, .jpeg_cs = JCS_RGB,
         .expect_scans = 14},
        {.name = "restart markers", .w = 200, .h = 120, .in_cs = JCS_RGB, .restart = 3,
         .expect_scans = 10},
        {.name = "arithmetic", .w = 120, .h = 90, .in_cs = JCS_RGB, .arith = true,
         .expect_scans = 10},
        {.name = "arithmetic progressive", .w = 120, .h = 90, .in_cs = JCS_RGB, .arith = true,
         .progressive = true, .expect_scans = 10},
        {.name = "progressive", .w = 140, .h = 100, .in_cs = JCS_RGB, .progressive = true,
         .expect_scans = 10},
        {.name = "1x1", .w = 1, .h = 1, .in_cs = JCS_RGB, .expect_scans = 10},
        {.name = "1x1 gray", .w = 1, .h = 1, .in_cs = JCS_GRAYSCALE, .expect_scans = 6},
        {.name = "20000x200", .w = 20000, .h = 200, .in_cs = JCS_RGB, .expect_scans = 10},
    };
    /* clang-format on */
    struct result first = {0};

    for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
        struct result r;
        run_fixture(&fixtures[i], false, &r);
        if (i == 0)
            first = r;
        else
            free_result(&r);
    }

    /* CMYK output carries exactly one Adobe APP14 (libjpeg's), not two. */
    {
        struct result r;
        run_fixture(&fixtures[3], false, &r);
        if (r.out.p)
            check(count_segments(r.out, r.sp.end[0], 0xEE, "Adobe", 5) == 1 &&
                      count_segments(r.src, r.src.len, 0xEE, "Adobe", 5) == 1,
                  "CMYK: exactly one Adobe APP14 in source and output");
        free_result(&r);
    }

    test_markers();
    test_split_restarts();
    test_fuzz_regressions();
    test_trailers();
    if (first.out.p) {
        test_split_edits(&first);
        test_bad_inputs(&first);
        test_threads(&first);
    } else {
        check(false, "color 4:2:0 result needed for split/bad-input tests");
    }
    free_result(&first);

    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
