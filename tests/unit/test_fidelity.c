/* Unit tests for scan scripts (scanscript.c), transcoding with them (transcode.c),
 * luma decoding and MS-SSIM (msssim.c).
 *
 * Fixtures are made here with libjpeg's compression API from synthetic images
 * (gradients, edges and noise, so blocks have real AC coefficients). What the
 * library writes is checked against libjpeg driven directly from this file (pixels,
 * warnings) and against a walk of the SOS headers written here (the scans really
 * follow the script). MS-SSIM is checked against a direct, unoptimised
 * implementation of the same definition in this file (2-D window sums, no ring
 * buffer, no shortcut for identical input).
 *
 * Prints one line per failed check and a count; exits 1 if any check failed.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include "pcrfs/fidelity.h"
#include "pcrfs/jpeg.h"
#include "check.h"

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        perror("malloc");
        exit(2);
    }
    return p;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* ---- Fixtures ---------------------------------------------------------------- */

struct img {
    unsigned w, h, nc;
    uint8_t *px;
};

static struct img make_pixels(unsigned w, unsigned h, unsigned nc, uint64_t seed, int noise)
{
    struct img m = {w, h, nc, xmalloc((size_t)w * h * nc)};
    uint64_t s = seed | 1;

    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++)
            for (unsigned c = 0; c < nc; c++) {
                int v = c == 0   ? (int)(x * 255 / (w > 1 ? w - 1 : 1))
                        : c == 1 ? (int)(y * 255 / (h > 1 ? h - 1 : 1))
                        : c == 2 ? (int)((x + y) * 255 / (w + h))
                                 : 128 + (int)((((x / 16) ^ (y / 16)) & 1) * 64);
                if (((x / 37) + (y / 23)) % 5 == 0)
                    v = 255 - v;
                if (noise)
                    v += (int)(rng_next(&s) % (unsigned)(2 * noise + 1)) - noise;
                m.px[((size_t)y * w + x) * nc + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return m;
}

struct buf {
    uint8_t *p;
    size_t len;
};

/* A baseline JPEG of @m; @jcs: its JPEG colour space (JCS_UNKNOWN: libjpeg's
 * default for the input, YCbCr for RGB). */
static struct buf make_jpeg(const struct img *m, J_COLOR_SPACE in_cs, J_COLOR_SPACE jcs)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *out = NULL;
    unsigned long outlen = 0;
    struct buf b;

    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &outlen);
    c.image_width = m->w;
    c.image_height = m->h;
    c.input_components = (int)m->nc;
    c.in_color_space = in_cs;
    jpeg_set_defaults(&c);
    if (jcs != JCS_UNKNOWN)
        jpeg_set_colorspace(&c, jcs);
    jpeg_set_quality(&c, 92, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = m->px + (size_t)c.next_scanline * m->w * m->nc;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    b.p = xmalloc(outlen);
    memcpy(b.p, out, outlen);
    b.len = outlen;
    free(out);
    return b;
}

/* ---- libjpeg driven directly ---------------------------------------------------- */

struct tjerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
};

static void tjerr_exit(j_common_ptr c)
{
    longjmp(((struct tjerr *)c->err)->jb, 1);
}

static void tjerr_emit(j_common_ptr c, int level)
{
    if (level < 0)
        ((struct tjerr *)c->err)->warnings++;
}

static void tjerr_output(j_common_ptr c)
{
    (void)c;
}

struct refdec {
    uint8_t *pix;
    unsigned w, h, nc;
    int warnings;
};

static int ref_run(struct jpeg_decompress_struct *d, struct tjerr *e, const uint8_t *p, size_t n,
                   J_COLOR_SPACE out_cs, struct refdec *r)
{
    if (setjmp(e->jb))
        return -1;
    jpeg_create_decompress(d);
    jpeg_mem_src(d, p, (unsigned long)n);
    jpeg_read_header(d, TRUE);
    if (out_cs != JCS_UNKNOWN)
        d->out_color_space = out_cs;
    jpeg_start_decompress(d);
    r->w = d->output_width;
    r->h = d->output_height;
    r->nc = (unsigned)d->output_components;
    r->pix = xmalloc((size_t)r->w * r->h * r->nc);
    while (d->output_scanline < d->output_height) {
        JSAMPROW row = r->pix + (size_t)d->output_scanline * r->w * r->nc;
        jpeg_read_scanlines(d, &row, 1);
    }
    jpeg_finish_decompress(d);
    return 0;
}

/* Decode with libjpeg's defaults (or @out_cs). @return 0, -1 on an error. */
static int ref_decode(const uint8_t *p, size_t n, J_COLOR_SPACE out_cs, struct refdec *r)
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
    rc = ref_run(&d, &e, p, n, out_cs, r);
    r->warnings = e.warnings;
    jpeg_destroy_decompress(&d);
    if (rc) {
        free(r->pix);
        r->pix = NULL;
    }
    return rc;
}

/* The SOS headers of a JPEG, walked here byte by byte: Ns, Ss, Se, Ah, Al of each
 * scan, and the SOF marker. Entropy data never holds FF followed by a byte other
 * than 00 or RSTn, so the next marker is the first such FF. @return scans, -1. */
struct sos {
    unsigned ns, ss, se, ah, al;
};

static int walk_sos(const uint8_t *b, size_t len, struct sos *out, unsigned max, unsigned *sof)
{
    size_t i = 2;
    unsigned n = 0;

    *sof = 0;
    while (i + 2 <= len) {
        if (b[i] != 0xFF)
            return -1;
        unsigned m = b[i + 1];
        if (m == 0xD9)
            return (int)n;
        if (i + 4 > len)
            return -1;
        size_t seg = ((size_t)b[i + 2] << 8) | b[i + 3];
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)
            *sof = m;
        if (m == 0xDA) {
            size_t p = i + 4;
            unsigned ns = b[p];
            if (n < max) {
                out[n].ns = ns;
                out[n].ss = b[p + 1 + 2 * ns];
                out[n].se = b[p + 2 + 2 * ns];
                out[n].ah = b[p + 3 + 2 * ns] >> 4;
                out[n].al = b[p + 3 + 2 * ns] & 15;
            }
            n++;
            i += 2 + seg;
            while (i + 1 < len &&
                   !(b[i] == 0xFF && b[i + 1] != 0x00 && !(b[i + 1] >= 0xD0 && b[i + 1] <= 0xD7)))
                i++;
            continue;
        }
        i += 2 + seg;
    }
    return -1;
}

/* ---- Scan script parsing ------------------------------------------------------ */

static const char libjpeg_default_ycc[] = "# libjpeg's jpeg_simple_progression() for YCbCr\n"
                                          "0,1,2: 0-0,   0, 1 ;\n"
                                          "0:     1-5,   0, 2 ;\n"
                                          "2:     1-63,  0, 1 ;\n"
                                          "1:     1-63,  0, 1 ;\n"
                                          "0:     6-63,  0, 2 ;\n"
                                          "0:     1-63,  2, 1 ;\n"
                                          "0,1,2: 0-0,   1, 0 ;\n"
                                          "2:     1-63,  1, 0 ;\n"
                                          "1:     1-63,  1, 0 ;\n"
                                          "0:     1-63,  1, 0 ;\n";

static int parse(const char *text, struct pcr_scripts *out, char *why, size_t whylen)
{
    return pcr_scripts_parse(text, strlen(text), "t.txt", out, why, whylen);
}

static void test_parse_ok(void)
{
    struct pcr_scripts s, s2;
    char why[256] = "", text[4096];
    int rc;

    rc = parse(libjpeg_default_ycc, &s, why, sizeof(why));
    CHECK(rc == 0, "libjpeg's default script parses: %s", why);
    CHECK(s.levels == 10, "levels %u", s.levels);
    CHECK(strcmp(s.name, "file:t.txt") == 0, "name %s", s.name);
    CHECK(s.by_class[PCR_CLASS_YCC].nscans == 10 && s.by_class[PCR_CLASS_RGB].nscans == 10,
          "3-component classes get the script as written");
    /* Projected onto component 0 it is exactly libjpeg's grayscale default. */
    CHECK(s.by_class[PCR_CLASS_GRAY].nscans == 6, "gray projection has %u scans",
          s.by_class[PCR_CLASS_GRAY].nscans);
    CHECK(s.by_class[PCR_CLASS_GRAY].scan[3].ss == 1 &&
              s.by_class[PCR_CLASS_GRAY].scan[3].ah == 2 &&
              s.by_class[PCR_CLASS_GRAY].scan[3].al == 1,
          "gray projection keeps order");
    CHECK(s.by_class[PCR_CLASS_CMYK].nscans == 0, "CMYK (more components) gets libjpeg's default");
    const struct pcr_scan *sc = &s.by_class[PCR_CLASS_YCC].scan[0];
    CHECK(sc->ncomps == 3 && sc->comp[2] == 2 && sc->ss == 0 && sc->se == 0 && sc->ah == 0 &&
              sc->al == 1,
          "first scan parsed");

    /* Format and parse again: the same script. */
    pcr_script_format(&s.by_class[PCR_CLASS_YCC], text, sizeof(text));
    rc = parse(text, &s2, why, sizeof(why));
    CHECK(rc == 0 && memcmp(&s2.by_class[PCR_CLASS_YCC], &s.by_class[PCR_CLASS_YCC],
                            sizeof(struct pcr_script)) == 0,
          "format/parse round trip: %s", why);

    /* jpegtran's free format: any punctuation separates, comments, no final ';'. */
    rc = parse("0 1 2 :0 0 0 0 ; # DC\n 0:1/63/0/0;1 : 1 - 63 , 0 , 0 ;\r\n2:1-63,0,0", &s, why,
               sizeof(why));
    CHECK(rc == 0 && s.levels == 4, "free format parses: %s", why);
    /* A comment right after a number ends it, as in rdswitch.c. */
    rc = parse("0,1,2: 0-0, 0, 0;0: 1-63, 0, 0#x\n;1: 1-63, 0, 0; 2: 1-63, 0, 0;", &s, why,
               sizeof(why));
    CHECK(rc == 0 && s.levels == 4, "comment after a number: %s", why);

    /* A sequential script: one scan per component. */
    rc = parse("0;\n1;\n2;\n", &s, why, sizeof(why));
    CHECK(rc == 0 && s.levels == 3, "sequential script parses: %s", why);
    CHECK(s.by_class[PCR_CLASS_YCC].scan[1].se == 63 && s.by_class[PCR_CLASS_GRAY].nscans == 1,
          "sequential scans are 0-63; gray keeps one");

    /* A grayscale script: colour images get libjpeg's default. */
    rc = parse("0: 0-0, 0, 0; 0: 1-9, 0, 0; 0: 10-63, 0, 0;", &s, why, sizeof(why));
    CHECK(rc == 0 && s.levels == 3 && s.by_class[PCR_CLASS_GRAY].nscans == 3 &&
              s.by_class[PCR_CLASS_YCC].nscans == 0,
          "gray script: %s", why);
}

static void expect_bad(const char *text, const char *needle)
{
    struct pcr_scripts s;
    char why[256] = "";
    int rc = parse(text, &s, why, sizeof(why));

    CHECK(rc == -EINVAL, "rejected (rc %d): %s", rc, text);
    CHECK(strstr(why, needle) != NULL, "reason '%s' mentions '%s'", why, needle);
}

static void test_parse_bad(void)
{
    char big[4096];
    size_t n = 0;

    expect_bad("", "no scan");
    expect_bad("# only a comment\n", "no scan");
    expect_bad("0,1,2: 0-0, 0, 0; x", "unexpected character");
    expect_bad("0,1,2: 0-0, 0;", "invalid scan entry");
    expect_bad("0 1 2 3 0: 0-0, 0, 0;", "more than 4 components");
    expect_bad("4: 0-0, 0, 0;", "component index 4");
    expect_bad("0: 0-64, 0, 0;", "Se 64");
    expect_bad("0: 0-0, 0, 11;", "Al 11");
    expect_bad("0: 0-0, 0, 99999999999999999999;", "too large");
    /* libjpeg's rules */
    expect_bad("0: 1-63, 0, 0; 0: 0-0, 0, 0;", "before its DC");
    expect_bad("0: 0-5, 0, 0; 0: 6-63, 0, 0;", "must have Se 0");
    expect_bad("0,1: 0-0, 0, 0; 0 1: 1-63, 0, 0;", "one component");
    expect_bad("1,0: 0-0, 0, 0; 0: 1-63,0,0; 1: 1-63,0,0;", "must increase");
    expect_bad("0: 0-0, 0, 0; 0: 1-63, 0, 1; 0: 1-63, 2, 1;", "do not follow");
    expect_bad("0;0;", "sent twice");
    expect_bad("0; 1: 1-63, 0, 0;", "sequential script");
    /* Completeness: what libjpeg itself lets through, and would lose data. */
    expect_bad("0: 0-0, 0, 0; 0: 1-62, 0, 0;", "coefficient 63 is never sent");
    expect_bad("0: 0-0, 0, 0; 0: 1-63, 0, 1;", "stops at bit 1");
    expect_bad("0: 0-0, 0, 1; 0: 1-63, 0, 0;", "coefficient 0 stops at bit 1");
    expect_bad("0,2: 0-0, 0, 0; 0: 1-63, 0, 0; 2: 1-63, 0, 0;", "component 1");
    expect_bad("0; 2;", "component 1 is never sent");
    expect_bad("0; 1;", "components 0 and 1 only");
    /* 65 scans */
    n += (size_t)snprintf(big + n, sizeof(big) - n, "0: 0-0, 0, 0;");
    for (int i = 1; i <= 63; i++)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "0: %d-%d, 0, 0;", i, i);
    snprintf(big + n, sizeof(big) - n, "0: 0-0, 0, 0;");
    expect_bad(big, "more than 64 scans");
    /* Bytes that are not text never crash it. */
    {
        struct pcr_scripts s;
        char why[128];
        static const char junk[] = "0\0:\xff\xfe 1-\x80;";
        CHECK(pcr_scripts_parse(junk, sizeof(junk) - 1, NULL, &s, why, sizeof(why)) == -EINVAL,
              "NUL and high bytes rejected");
        CHECK(pcr_scripts_parse(NULL, 0, NULL, &s, why, sizeof(why)) == -EINVAL,
              "empty buffer rejected");
    }
}

/* mkpcrfs(1), SCAN SCRIPTS: the 5-scan example, as the man page prints it. */
static const char five_scan_example[] = "0,1,2: 0-0,  0, 0;   # DC\n"
                                        "0:     1-9,  0, 0;   # Y, low\n"
                                        "1:     1-63, 0, 0;   # Cb\n"
                                        "2:     1-63, 0, 0;   # Cr\n"
                                        "0:     10-63, 0, 0;  # Y, the rest\n";

static void test_presets(void)
{
    struct pcr_scripts s;
    char why[256] = "";
    static const unsigned nc[PCR_CLASS_COUNT] = {1, 3, 3, 4};

    CHECK(pcr_scripts_preset("default", &s) == 0 && s.levels == 10 &&
              strcmp(s.name, "libjpeg-default") == 0,
          "default preset");
    for (unsigned c = 0; c < PCR_CLASS_COUNT; c++)
        CHECK(s.by_class[c].nscans == 0, "default preset leaves class %u to libjpeg", c);
    CHECK(pcr_scripts_preset("libjpeg-default", &s) == 0 && s.levels == 10, "alias");
    CHECK(pcr_scripts_preset("nope", &s) == -ENOENT, "unknown preset");
    CHECK(pcr_scripts_preset("fast", &s) == 0 && strcmp(s.name, "fast") == 0, "fast preset");
    CHECK(s.levels == s.by_class[PCR_CLASS_YCC].nscans, "fast: L = colour scans (%u)", s.levels);
    for (unsigned c = 0; c < PCR_CLASS_COUNT; c++) {
        const struct pcr_script *sc = &s.by_class[c];
        int rc = pcr_script_validate(sc, nc[c], why, sizeof(why));

        CHECK(rc == 0, "fast class %u valid and complete: %s", c, why);
        for (unsigned i = 0; i < sc->nscans; i++)
            CHECK(sc->scan[i].ah == 0 && sc->scan[i].al == 0,
                  "fast class %u scan %u: spectral selection only", c, i + 1);
    }
    /* The 5-scan example of mkpcrfs(1) (the fastest script found with a useful ladder,
     * BENCHMARKS.md section 9): spectral selection only, every coefficient of every
     * component coded once, and its luma bands are what grayscale images get. */
    CHECK(parse(five_scan_example, &s, why, sizeof(why)) == 0 && s.levels == 5,
          "5-scan example parses: %s", why);
    for (unsigned c = 0; c < PCR_CLASS_COUNT; c++) {
        const struct pcr_script *sc = &s.by_class[c];

        if (c == PCR_CLASS_CMYK) {
            CHECK(sc->nscans == 0, "5-scan example: CMYK gets libjpeg's default");
            continue;
        }
        CHECK(pcr_script_validate(sc, nc[c], why, sizeof(why)) == 0,
              "5-scan example class %u valid and complete: %s", c, why);
        for (unsigned i = 0; i < sc->nscans; i++)
            CHECK(sc->scan[i].ah == 0 && sc->scan[i].al == 0,
                  "5-scan example class %u scan %u: spectral selection only", c, i + 1);
    }
    CHECK(s.by_class[PCR_CLASS_GRAY].nscans == 3 && s.by_class[PCR_CLASS_GRAY].scan[1].se == 9 &&
              s.by_class[PCR_CLASS_GRAY].scan[2].ss == 10,
          "5-scan example: gray gets DC, 1-9, 10-63");
    CHECK(pcr_script_class_of(1, false) == PCR_CLASS_GRAY &&
              pcr_script_class_of(3, true) == PCR_CLASS_YCC &&
              pcr_script_class_of(3, false) == PCR_CLASS_RGB &&
              pcr_script_class_of(4, false) == PCR_CLASS_CMYK &&
              pcr_script_class_of(2, false) == PCR_CLASS_COUNT,
          "classes");
}

/* ---- Transcoding with scripts ----------------------------------------------------- */

struct kind {
    const char *name;
    unsigned nc;
    J_COLOR_SPACE in_cs, jcs;
    enum pcr_script_class cls;
    unsigned default_scans;
};

static const struct kind kinds[] = {
    {"YCbCr", 3, JCS_RGB, JCS_UNKNOWN, PCR_CLASS_YCC, 10},
    {"gray", 1, JCS_GRAYSCALE, JCS_UNKNOWN, PCR_CLASS_GRAY, 6},
    {"RGB", 3, JCS_RGB, JCS_RGB, PCR_CLASS_RGB, 14},
    {"CMYK", 4, JCS_CMYK, JCS_UNKNOWN, PCR_CLASS_CMYK, 18},
};

/* Transcode @src with @scr; check it is lossless, follows the script (or has
 * @expect_default scans), and every prefix of K scans + EOI decodes cleanly. */
static void check_transcode(const struct kind *k, const struct buf *src,
                            const struct pcr_scripts *scr, const char *what)
{
    struct pcr_transcode_opts o = {.scripts = scr};
    const struct pcr_script *sc = scr ? &scr->by_class[k->cls] : NULL;
    uint8_t *out = NULL;
    size_t outlen = 0;
    struct pcr_split sp;
    struct pcr_jpeg_info info;
    struct refdec a, b;
    struct sos sos[PCR_MAX_SCANS];
    unsigned sof, want;
    char why[256] = "";
    int rc, ns;

    rc = pcr_jpeg_transcode(src->p, src->len, &o, &out, &outlen, &info, why, sizeof(why));
    CHECK(rc == 0, "%s %s: transcodes: %s", k->name, what, why);
    if (rc)
        return;
    want = sc && sc->nscans ? sc->nscans : k->default_scans;
    CHECK(pcr_jpeg_split(out, outlen, &sp) == 0 && sp.nchunks == want, "%s %s: %u chunks, want %u",
          k->name, what, sp.nchunks, want);
    ns = walk_sos(out, outlen, sos, PCR_MAX_SCANS, &sof);
    CHECK(ns == (int)want, "%s %s: %d SOS headers", k->name, what, ns);
    if (sc && sc->nscans && ns == (int)want) {
        bool seq = sc->scan[0].ss == 0 && sc->scan[0].se == 63;
        CHECK(seq ? (sof == 0xC0 || sof == 0xC1) : sof == 0xC2, "%s %s: SOF %02X", k->name, what,
              sof);
        for (unsigned i = 0; i < want; i++)
            CHECK(sos[i].ns == sc->scan[i].ncomps && sos[i].ss == sc->scan[i].ss &&
                      sos[i].se == sc->scan[i].se && sos[i].ah == sc->scan[i].ah &&
                      sos[i].al == sc->scan[i].al,
                  "%s %s: scan %u is the script's", k->name, what, i + 1);
    }
    /* Lossless: the same pixels as the source, no warnings. */
    CHECK(ref_decode(src->p, src->len, JCS_UNKNOWN, &a) == 0 &&
              ref_decode(out, outlen, JCS_UNKNOWN, &b) == 0,
          "%s %s: both decode", k->name, what);
    if (a.pix && b.pix)
        CHECK(a.w == b.w && a.h == b.h && a.nc == b.nc && b.warnings == 0 &&
                  memcmp(a.pix, b.pix, (size_t)a.w * a.h * a.nc) == 0,
              "%s %s: same pixels as the source", k->name, what);
    free(a.pix);
    free(b.pix);
    /* Every level is a clean JPEG. */
    for (unsigned lv = 1; lv < sp.nchunks; lv++) {
        size_t n = sp.end[lv - 1];
        uint8_t *p = xmalloc(n + 2);
        memcpy(p, out, n);
        p[n] = 0xFF;
        p[n + 1] = 0xD9;
        rc = ref_decode(p, n + 2, JCS_UNKNOWN, &a);
        CHECK(rc == 0 && a.warnings == 0, "%s %s: level %u decodes without warnings", k->name, what,
              lv);
        free(a.pix);
        free(p);
    }
    free(out);
}

static void test_transcode(void)
{
    struct pcr_scripts def, fast, user, seq, five;
    char why[256];

    pcr_scripts_preset("default", &def);
    pcr_scripts_preset("fast", &fast);
    CHECK(parse("0,1,2: 0-0, 0, 1; 0: 1-9, 0, 0; 1: 1-63, 0, 0; 2: 1-63, 0, 0; "
                "0: 10-63, 0, 0; 0,1,2: 0-0, 1, 0;",
                &user, why, sizeof(why)) == 0,
          "user script: %s", why);
    CHECK(parse("0; 1; 2;", &seq, why, sizeof(why)) == 0, "sequential: %s", why);
    CHECK(parse(five_scan_example, &five, why, sizeof(why)) == 0, "5-scan: %s", why);

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const struct kind *k = &kinds[i];
        struct img m = make_pixels(203, 131, k->nc, 77 + i, 20);
        struct buf src = make_jpeg(&m, k->in_cs, k->jcs);
        struct pcr_transcode_opts o0 = {0}, od = {.scripts = &def};
        uint8_t *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;

        check_transcode(k, &src, NULL, "no script");
        check_transcode(k, &src, &def, "default");
        check_transcode(k, &src, &fast, "fast");
        check_transcode(k, &src, &user, "user");
        check_transcode(k, &src, &seq, "sequential");
        check_transcode(k, &src, &five, "5-scan example");
        /* The default preset is byte-identical to no script at all (which is what
         * jpegtran -progressive writes; tests/integration compares with jpegtran). */
        CHECK(pcr_jpeg_transcode(src.p, src.len, &o0, &a, &alen, NULL, NULL, 0) == 0 &&
                  pcr_jpeg_transcode(src.p, src.len, &od, &b, &blen, NULL, NULL, 0) == 0 &&
                  alen == blen && memcmp(a, b, alen) == 0,
              "%s: default preset is byte-identical", k->name);
        free(a);
        free(b);
        free(src.p);
        free(m.px);
    }
}

/* ---- Luma ------------------------------------------------------------------- */

static void test_luma(void)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const struct kind *k = &kinds[i];
        struct img m = make_pixels(97, 61, k->nc, 5 + i, 10);
        struct buf src = make_jpeg(&m, k->in_cs, k->jcs);
        uint8_t *luma = NULL;
        unsigned w = 0, h = 0;
        struct refdec r;
        char why[256] = "";
        int rc = pcr_jpeg_decode_luma(src.p, src.len, &luma, &w, &h, why, sizeof(why));
        size_t bad = 0;
        double sum = 0;

        CHECK(rc == 0 && w == 97 && h == 61, "%s: luma decodes: %s", k->name, why);
        CHECK(ref_decode(src.p, src.len, JCS_UNKNOWN, &r) == 0, "%s: reference decode", k->name);
        for (size_t p = 0; luma && r.pix && p < (size_t)w * h; p++) {
            const uint8_t *q = r.pix + p * r.nc;
            double y;
            if (r.nc == 1) {
                y = q[0];
            } else if (r.nc == 3) {
                y = 0.299 * q[0] + 0.587 * q[1] + 0.114 * q[2];
            } else { /* inverted CMYK, as documented */
                y = (0.299 * q[0] + 0.587 * q[1] + 0.114 * q[2]) * q[3] / 255.0;
            }
            /* Y of YCbCr is not exactly the luma of the decoded RGB (rounding, chroma
             * upsampling, clamping to 0..255): close on average, a few levels at
             * worst. Gray and CMYK are computed exactly. */
            sum += fabs(y - luma[p]);
            if (fabs(y - luma[p]) > (r.nc == 3 ? 12.0 : 0.51))
                bad++;
        }
        CHECK(bad == 0 && sum / ((double)w * h) < (r.nc == 3 ? 1.0 : 0.3),
              "%s: luma is BT.601 luma of the colour decode (%zu pixels off, mean %.3f)", k->name,
              bad, sum / ((double)w * h));
        free(r.pix);
        free(luma);
        free(src.p);
        free(m.px);
    }
    {
        uint8_t *l = (uint8_t *)1;
        unsigned w = 1, h = 1;
        CHECK(pcr_jpeg_decode_luma((const uint8_t *)"nope", 4, &l, &w, &h, NULL, 0) == -EINVAL &&
                  l == NULL && w == 0,
              "not a JPEG");
    }
}

/* ---- MS-SSIM ------------------------------------------------------------------ */

/* The definition, computed directly: 2-D window sums over every position. */
static double ref_ssim_scale(const double *x, const double *y, unsigned w, unsigned h, double *mcs)
{
    const double C1 = (0.01 * 255) * (0.01 * 255), C2 = (0.03 * 255) * (0.03 * 255);
    double g[11], gs = 0, scs = 0, sss = 0;
    unsigned ow = w - 10, oh = h - 10;

    for (int i = 0; i < 11; i++) {
        g[i] = exp(-((i - 5) * (i - 5)) / (2 * 1.5 * 1.5));
        gs += g[i];
    }
    for (int i = 0; i < 11; i++)
        g[i] /= gs;
    for (unsigned oy = 0; oy < oh; oy++)
        for (unsigned ox = 0; ox < ow; ox++) {
            double mx = 0, my = 0, xx = 0, yy = 0, xy = 0;
            for (unsigned a = 0; a < 11; a++)
                for (unsigned b = 0; b < 11; b++) {
                    double wgt = g[a] * g[b];
                    double p = x[(size_t)(oy + a) * w + ox + b],
                           q = y[(size_t)(oy + a) * w + ox + b];
                    mx += wgt * p;
                    my += wgt * q;
                    xx += wgt * p * p;
                    yy += wgt * q * q;
                    xy += wgt * p * q;
                }
            double vx = xx - mx * mx, vy = yy - my * my, cv = xy - mx * my;
            double cs = (2 * cv + C2) / (vx + vy + C2);
            scs += cs;
            sss += cs * (2 * mx * my + C1) / (mx * mx + my * my + C1);
        }
    *mcs = scs / ((double)ow * oh);
    return sss / ((double)ow * oh);
}

static double *down(const double *x, unsigned w, unsigned h, unsigned *ow, unsigned *oh)
{
    unsigned W = (w + 1) / 2, H = (h + 1) / 2;
    double *o = xmalloc((size_t)W * H * sizeof(double));
    for (unsigned j = 0; j < H; j++)
        for (unsigned i = 0; i < W; i++) {
            unsigned x0 = 2 * i, x1 = 2 * i + 1 < w ? 2 * i + 1 : 2 * i;
            unsigned y0 = 2 * j, y1 = 2 * j + 1 < h ? 2 * j + 1 : 2 * j;
            o[(size_t)j * W + i] = (x[(size_t)y0 * w + x0] + x[(size_t)y0 * w + x1] +
                                    x[(size_t)y1 * w + x0] + x[(size_t)y1 * w + x1]) /
                                   4;
        }
    *ow = W;
    *oh = H;
    return o;
}

static double ref_msssim(const uint8_t *a, const uint8_t *b, unsigned w, unsigned h, unsigned *sc)
{
    static const double wt[5] = {0.0448, 0.2856, 0.3001, 0.2363, 0.1333};
    double *x = xmalloc((size_t)w * h * sizeof(double)),
           *y = xmalloc((size_t)w * h * sizeof(double));
    double mcs[5], ssim[5], res = 1, wsum = 0;
    unsigned m = 0;

    for (size_t i = 0; i < (size_t)w * h; i++) {
        x[i] = a[i];
        y[i] = b[i];
    }
    while (m < 5 && w >= 11 && h >= 11) {
        unsigned nw, nh;
        ssim[m] = ref_ssim_scale(x, y, w, h, &mcs[m]);
        m++;
        double *nx = down(x, w, h, &nw, &nh), *ny = down(y, w, h, &nw, &nh);
        free(x);
        free(y);
        x = nx;
        y = ny;
        w = nw;
        h = nh;
    }
    free(x);
    free(y);
    *sc = m;
    for (unsigned j = 0; j < m; j++)
        wsum += wt[j];
    for (unsigned j = 0; j < m; j++) {
        double v = j + 1 < m ? mcs[j] : ssim[j];
        res *= pow(v < 0 ? 0 : v, wt[j] / wsum);
    }
    return res;
}

/* A smooth image with a disturbance: @blur softens, @noise adds. */
static uint8_t *degrade(const struct img *m, int noise, int blur, uint64_t seed)
{
    uint8_t *o = xmalloc((size_t)m->w * m->h);
    uint64_t s = seed | 1;
    for (unsigned y = 0; y < m->h; y++)
        for (unsigned x = 0; x < m->w; x++) {
            int sum = 0, n = 0;
            for (int dy = -blur; dy <= blur; dy++)
                for (int dx = -blur; dx <= blur; dx++) {
                    int xx = (int)x + dx, yy = (int)y + dy;
                    if (xx >= 0 && yy >= 0 && xx < (int)m->w && yy < (int)m->h) {
                        sum += m->px[(size_t)yy * m->w + xx];
                        n++;
                    }
                }
            int v = sum / n;
            if (noise)
                v += (int)(rng_next(&s) % (unsigned)(2 * noise + 1)) - noise;
            o[(size_t)y * m->w + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    return o;
}

static void test_msssim(void)
{
    /* 200x180 -> 5 scales (smallest 13x12); 100x90 -> 4; 30x25 -> 2; 9x40 -> 0. */
    static const struct {
        unsigned w, h, scales;
    } sz[] = {{200, 180, 5}, {100, 90, 4}, {30, 25, 2}, {11, 11, 1}, {9, 40, 0}};

    for (size_t i = 0; i < sizeof(sz) / sizeof(sz[0]); i++) {
        struct img m = make_pixels(sz[i].w, sz[i].h, 1, 100 + i, 6);
        uint8_t *d1 = degrade(&m, 4, 0, 1), *d2 = degrade(&m, 12, 1, 2);
        uint8_t *same = xmalloc((size_t)m.w * m.h);
        double v0, v1, v2, r1, r2, vlsb;
        unsigned sc = 99, rsc;

        memcpy(same, m.px, (size_t)m.w * m.h);
        CHECK(pcr_msssim(same, m.px, m.w, m.h, m.w, &v0, &sc) == 0 && v0 == 1.0,
              "%ux%u: identical images give exactly 1 (%.17g)", m.w, m.h, v0);
        CHECK(sc == sz[i].scales, "%ux%u: %u scales, want %u", m.w, m.h, sc, sz[i].scales);
        CHECK(pcr_msssim(d1, m.px, m.w, m.h, m.w, &v1, NULL) == 0 &&
                  pcr_msssim(d2, m.px, m.w, m.h, m.w, &v2, NULL) == 0,
              "%ux%u: computes", m.w, m.h);
        CHECK(v1 < 1.0 && v2 < v1 && v2 >= 0, "%ux%u: more damage, lower: %.6f > %.6f", m.w, m.h,
              v1, v2);
        if (sz[i].scales > 0) {
            r1 = ref_msssim(d1, m.px, m.w, m.h, &rsc);
            r2 = ref_msssim(d2, m.px, m.w, m.h, &rsc);
            CHECK(fabs(v1 - r1) < 1e-9 && fabs(v2 - r2) < 1e-9,
                  "%ux%u: equals the direct computation (%.12f vs %.12f, %.12f vs %.12f)", m.w, m.h,
                  v1, r1, v2, r2);
            CHECK(rsc == sz[i].scales, "%ux%u: reference agrees on scales", m.w, m.h);
        }
        /* One pixel one level off: not 1, but very close, through the full path. */
        same[(size_t)(m.h / 2) * m.w + m.w / 2] ^= 1;
        CHECK(pcr_msssim(same, m.px, m.w, m.h, m.w, &vlsb, NULL) == 0 && vlsb < 1.0 && vlsb > 0.999,
              "%ux%u: one LSB off gives %.9f", m.w, m.h, vlsb);
        /* Symmetric in its arguments (SSIM is). */
        CHECK(pcr_msssim(m.px, d2, m.w, m.h, m.w, &r2, NULL) == 0 && fabs(r2 - v2) < 1e-12,
              "%ux%u: symmetric", m.w, m.h);
        free(d1);
        free(d2);
        free(same);
        free(m.px);
    }
    {
        /* Stride: a sub-image of a wider buffer gives the same value. */
        struct img m = make_pixels(64, 48, 1, 9, 5);
        uint8_t *d = degrade(&m, 8, 0, 3);
        uint8_t *wa = xmalloc(80 * 48), *wb = xmalloc(80 * 48);
        double a, b;
        memset(wa, 7, 80 * 48);
        memset(wb, 200, 80 * 48);
        for (unsigned y = 0; y < 48; y++) {
            memcpy(wa + y * 80, d + y * 64, 64);
            memcpy(wb + y * 80, m.px + y * 64, 64);
        }
        CHECK(pcr_msssim(d, m.px, 64, 48, 64, &a, NULL) == 0 &&
                  pcr_msssim(wa, wb, 64, 48, 80, &b, NULL) == 0 && a == b,
              "stride respected (%.9f vs %.9f)", a, b);
        CHECK(pcr_msssim(d, m.px, 64, 48, 63, &a, NULL) == -EINVAL, "stride < width refused");
        CHECK(pcr_msssim(d, m.px, 0, 48, 64, &a, NULL) == -EINVAL, "zero width refused");
        struct pcr_msssim_ref *r;
        CHECK(pcr_msssim_ref_new(m.px, 64, 48, 64, &r) == 0, "ref");
        CHECK(pcr_msssim_compare(r, d, 48, 64, 48, &a) == -EINVAL, "size mismatch refused");
        pcr_msssim_ref_free(r);
        free(wa);
        free(wb);
        free(d);
        free(m.px);
    }
}

/* MS-SSIM falls as fewer scans are kept: the fidelity levels mean something. */
static void test_levels_msssim(void)
{
    struct img m = make_pixels(320, 240, 3, 4242, 12);
    struct buf src = make_jpeg(&m, JCS_RGB, JCS_UNKNOWN);
    const char *names[] = {"default", "fast"};

    for (int p = 0; p < 2; p++) {
        struct pcr_scripts s;
        struct pcr_transcode_opts o = {.scripts = &s};
        struct pcr_split sp;
        struct pcr_msssim_ref *ref = NULL;
        uint8_t *out = NULL, *full = NULL;
        size_t outlen = 0;
        unsigned w, h;
        double prev = -1, v;
        bool mono = true;

        pcr_scripts_preset(names[p], &s);
        if (pcr_jpeg_transcode(src.p, src.len, &o, &out, &outlen, NULL, NULL, 0) != 0 ||
            pcr_jpeg_split(out, outlen, &sp) != 0) {
            CHECK(0, "%s: transcode", names[p]);
            continue;
        }
        CHECK(pcr_jpeg_decode_luma(out, outlen, &full, &w, &h, NULL, 0) == 0 &&
                  pcr_msssim_ref_new(full, w, h, w, &ref) == 0,
              "%s: full luma", names[p]);
        for (unsigned k = 1; ref && k <= sp.nchunks; k++) {
            size_t n = k < sp.nchunks ? sp.end[k - 1] : outlen - 2;
            uint8_t *lv = xmalloc(n + 2), *l = NULL;
            memcpy(lv, out, n);
            lv[n] = 0xFF;
            lv[n + 1] = 0xD9;
            if (pcr_jpeg_decode_luma(lv, n + 2, &l, &w, &h, NULL, 0) == 0 &&
                pcr_msssim_compare(ref, l, w, h, w, &v) == 0) {
                if (v < prev - 1e-12)
                    mono = false;
                if (k == 1)
                    CHECK(v < 0.95, "%s: level 1 is visibly degraded (%.4f)", names[p], v);
                if (k == sp.nchunks)
                    CHECK(v == 1.0, "%s: all scans = 1.0", names[p]);
                prev = v;
            } else {
                CHECK(0, "%s: level %u luma", names[p], k);
            }
            free(l);
            free(lv);
        }
        CHECK(mono, "%s: MS-SSIM never falls as scans are added", names[p]);
        pcr_msssim_ref_free(ref);
        free(full);
        free(out);
    }
    free(src.p);
    free(m.px);
}

int main(void)
{
    test_parse_ok();
    test_parse_bad();
    test_presets();
    test_transcode();
    test_luma();
    test_msssim();
    test_levels_msssim();
    return check_done("test_fidelity");
}
