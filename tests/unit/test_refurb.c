/* Unit tests for refurbishing (src/lib/refurb/, pcrfs/refurb.h): the keyed RNG, the
 * crop parameters, the balanced schedule and its permutation, rendering, and the
 * context's cache and workers.
 *
 * Rendering is checked against a reference written here the slow, obvious way: a
 * full libjpeg decode of the whole image, the crop copied out, then Pillow's
 * bilinear resample (horizontal then vertical, 8-bit rounding after each pass)
 * computed from its definition. With DCT scaling off, the library's partial,
 * streaming decode must give the same bytes. (Against Pillow itself:
 * tests/integration/test_refurb_lib.py.)
 *
 * Prints one line per failed check and a count; exits 1 if any check failed.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <jpeglib.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/refurb.h"
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

/* ---- Fixtures ------------------------------------------------------------------ */

struct buf {
    uint8_t *p;
    size_t len;
};

/* A JPEG of a w x h test pattern with @nc components (1 gray, 3 RGB -> YCbCr 4:2:0,
 * 4 CMYK written with an Adobe marker), optionally progressive. */
static struct buf make_jpeg(unsigned w, unsigned h, unsigned nc, bool progressive, unsigned seed)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *out = NULL;
    unsigned long outlen = 0;
    uint8_t *row = xmalloc((size_t)w * nc);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    struct buf b;

    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &outlen);
    c.image_width = w;
    c.image_height = h;
    c.input_components = (int)nc;
    c.in_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        unsigned y = c.next_scanline;
        for (unsigned x = 0; x < w; x++)
            for (unsigned k = 0; k < nc; k++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                int v = (int)((x * (k + 1) * 255) / (w + 1) + (y * 3 * 255) / (h + 1)) % 256;
                if (((x / 13) + (y / 7)) % 3 == 0)
                    v = 255 - v;
                v += (int)(s % 21) - 10;
                row[x * nc + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    b.p = xmalloc(outlen);
    memcpy(b.p, out, outlen);
    b.len = outlen;
    free(out);
    free(row);
    return b;
}

/* ---- The reference: full decode, crop, Pillow's resample by its definition ------- */

static uint8_t *ref_decode(const struct buf *j, unsigned *w, unsigned *h)
{
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr jerr;
    uint8_t *px, *row;
    bool cmyk;

    d.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, j->p, (unsigned long)j->len);
    jpeg_read_header(&d, TRUE);
    cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&d);
    *w = d.output_width;
    *h = d.output_height;
    px = xmalloc((size_t)*w * *h * 3);
    row = xmalloc((size_t)*w * 4);
    while (d.output_scanline < d.output_height) {
        unsigned y = d.output_scanline;
        JSAMPROW r = row;
        jpeg_read_scanlines(&d, &r, 1);
        for (unsigned x = 0; x < *w; x++)
            for (int k = 0; k < 3; k++) {
                int v;
                if (cmyk) { /* Pillow: CMYK;I then cmyk2rgb */
                    int nk = row[4 * x + 3], t = (255 - row[4 * x + k]) * nk + 128;
                    v = nk - (((t >> 8) + t) >> 8);
                } else {
                    v = row[3 * x + k];
                }
                px[((size_t)y * *w + x) * 3 + k] = (uint8_t)v;
            }
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    free(row);
    return px;
}

/* Pillow's coefficients for one output index, from libImaging/Resample.c's text. */
static int ref_coeffs(unsigned insize, unsigned outsize, unsigned xx, int32_t *k, int *xmin)
{
    double scale = (double)insize / outsize, fs = scale < 1 ? 1 : scale, support = fs;
    double center = (xx + 0.5) * scale, ww = 0, w[4096];
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5), n;

    if (lo < 0)
        lo = 0;
    if (hi > (int)insize)
        hi = (int)insize;
    n = hi - lo;
    for (int x = 0; x < n; x++) {
        double t = fabs((x + lo - center + 0.5) / fs);
        w[x] = t < 1 ? 1 - t : 0;
        ww += w[x];
    }
    for (int x = 0; x < n; x++)
        k[x] = (int32_t)(0.5 + w[x] / ww * (1 << 22));
    *xmin = lo;
    return n;
}

static uint8_t ref_clip(int32_t v)
{
    v >>= 22;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The crop (t, l, h, w) of @px (W wide) resized to s x s, flipped if @flip. */
static uint8_t *ref_render(const uint8_t *px, unsigned W, const struct pcr_refurb_params *p,
                           unsigned s)
{
    uint8_t *mid = xmalloc((size_t)p->height * s * 3), *out = xmalloc((size_t)s * s * 3);
    int32_t k[4096];
    int lo, n;

    for (unsigned y = 0; y < p->height; y++)
        for (unsigned xx = 0; xx < s; xx++) {
            n = ref_coeffs(p->width, s, xx, k, &lo);
            for (int c = 0; c < 3; c++) {
                int32_t acc = 1 << 21;
                for (int x = 0; x < n; x++)
                    acc += px[((size_t)(p->top + y) * W + p->left + lo + x) * 3 + c] * k[x];
                mid[((size_t)y * s + xx) * 3 + c] = ref_clip(acc);
            }
        }
    for (unsigned yy = 0; yy < s; yy++) {
        n = ref_coeffs(p->height, s, yy, k, &lo);
        for (unsigned x = 0; x < s; x++)
            for (int c = 0; c < 3; c++) {
                int32_t acc = 1 << 21;
                for (int y = 0; y < n; y++)
                    acc += mid[((size_t)(lo + y) * s + x) * 3 + c] * k[y];
                unsigned ox = p->flip ? s - 1 - x : x;
                out[((size_t)yy * s + ox) * 3 + c] = ref_clip(acc);
            }
    }
    free(mid);
    return out;
}

/* ---- RNG and crop parameters ------------------------------------------------------ */

static void test_rng(void)
{
    struct pcr_refurb_rng a, b;
    int same = 1, differ = 0;

    pcr_refurb_rng_init(&a, 42, 7, 3, 0);
    pcr_refurb_rng_init(&b, 42, 7, 3, 0);
    for (int i = 0; i < 1000; i++)
        same &= pcr_refurb_rng_next(&a) == pcr_refurb_rng_next(&b);
    CHECK(same, "the same key gives the same stream");
    const uint64_t keys[][4] = {{43, 7, 3, 0}, {42, 8, 3, 0}, {42, 7, 4, 0}, {42, 7, 3, 1}};
    for (int k = 0; k < 4; k++) {
        pcr_refurb_rng_init(&a, 42, 7, 3, 0);
        pcr_refurb_rng_init(&b, keys[k][0], keys[k][1], keys[k][2], (unsigned)keys[k][3]);
        int eq = 0;
        for (int i = 0; i < 64; i++)
            eq += pcr_refurb_rng_next(&a) == pcr_refurb_rng_next(&b);
        differ += eq == 0;
    }
    CHECK(differ == 4, "changing any key part changes the stream (%d of 4)", differ);

    /* Bits are balanced: a crude check that the output is not stuck. */
    pcr_refurb_rng_init(&a, 0, 0, 0, 0);
    unsigned ones = 0;
    for (int i = 0; i < 4096; i++)
        ones += (unsigned)__builtin_popcountll(pcr_refurb_rng_next(&a));
    CHECK(ones > 4096 * 31 && ones < 4096 * 33, "bit balance %u", ones);
}

static void test_params(void)
{
    struct pcr_refurb_conf c;
    struct pcr_refurb_params p, q;
    const unsigned sizes[][2] = {{1, 1},     {2, 1},     {500, 375}, {375, 500}, {1000, 10},
                                 {10, 1000}, {65500, 1}, {1, 65500}, {224, 224}, {4000, 3000}};
    unsigned inside = 0, total = 0, flips = 0, fallbacks = 0;

    pcr_refurb_conf_default(&c);
    c.seed = 11;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (uint64_t s = 0; s < 500; s++) {
            unsigned W = sizes[i][0], H = sizes[i][1];
            int rc = pcr_refurb_params(W, H, &c, s, s % 3, &p);
            total++;
            inside += rc == 0 && p.width >= 1 && p.height >= 1 && p.left + p.width <= W &&
                      p.top + p.height <= H;
            flips += p.flip;
            fallbacks += p.fallback;
        }
    CHECK(inside == total, "%u of %u crops inside their image", inside, total);
    CHECK(flips > total * 45 / 100 && flips < total * 55 / 100, "flips %u of %u", flips, total);

    /* 1000 x 10: no try fits (h >= sqrt(800 / (4/3)) > 10), so always the centre crop
     * with the ratio clamped to 4/3: h = 10, w = round(13.33) = 13, centred. */
    fallbacks = 0;
    for (uint64_t s = 0; s < 200; s++) {
        pcr_refurb_params(1000, 10, &c, s, 0, &p);
        fallbacks += p.fallback && p.width == 13 && p.height == 10 && p.top == 0 &&
                     p.left == (1000 - 13) / 2;
    }
    CHECK(fallbacks == 200, "1000x10: %u of 200 centre crops 13x10", fallbacks);
    pcr_refurb_params(10, 1000, &c, 5, 0, &p);
    CHECK(p.fallback && p.width == 10 && p.height == 13 && p.left == 0 && p.top == 493,
          "10x1000 centre crop %ux%u at %u,%u", p.width, p.height, p.left, p.top);
    /* A square image with scale (1, 1) and ratio (1, 1) always takes the whole image
     * on the first try, not the fallback. */
    c.scale[0] = c.scale[1] = 1.0;
    c.ratio[0] = c.ratio[1] = 1.0;
    pcr_refurb_params(300, 300, &c, 1, 1, &p);
    CHECK(!p.fallback && p.width == 300 && p.height == 300 && p.top == 0 && p.left == 0,
          "scale 1 ratio 1: the whole image");
    /* Python's round is half-to-even: 2.5 -> 2. A 5x5 image at scale 0.25 ratio 1
     * has a target area of 6.25, sqrt 2.5, so w = h = 2 (not 3). */
    c.scale[0] = c.scale[1] = 0.25;
    pcr_refurb_params(5, 5, &c, 3, 0, &p);
    CHECK(p.width == 2 && p.height == 2, "round half to even: %ux%u", p.width, p.height);

    pcr_refurb_conf_default(&c);
    pcr_refurb_params(640, 480, &c, 99, 5, &p);
    pcr_refurb_params(640, 480, &c, 98, 5, &q); /* another call in between */
    pcr_refurb_params(640, 480, &c, 99, 5, &q);
    /* member by member: memcmp() would compare the struct's padding too */
    CHECK(p.top == q.top && p.left == q.left && p.height == q.height && p.width == q.width &&
              p.flip == q.flip && p.fallback == q.fallback,
          "params are a pure function of the key");
    c.flip = false;
    flips = 0;
    for (uint64_t s = 0; s < 100; s++) {
        pcr_refurb_params(640, 480, &c, s, 0, &p);
        flips += p.flip;
    }
    CHECK(flips == 0, "flip off: %u flips", flips);
    CHECK(pcr_refurb_params(0, 10, &c, 0, 0, &p) == -EINVAL, "zero width rejected");
    c.scale[0] = 0.5, c.scale[1] = 0.4;
    CHECK(pcr_refurb_conf_check(&c) == -EINVAL, "scale lo > hi rejected");
    pcr_refurb_conf_default(&c);
    c.ratio[0] = NAN;
    CHECK(pcr_refurb_conf_check(&c) == -EINVAL, "NaN ratio rejected");
    c.ratio[0] = 0.75, c.size = 0;
    CHECK(pcr_refurb_conf_check(&c) == -EINVAL, "size 0 rejected");
}

/* ---- Schedule ------------------------------------------------------------------- */

static void test_perm(void)
{
    const uint64_t ns[] = {1, 2, 3, 4, 5, 7, 16, 17, 1000, 4097, 100000};

    for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
        uint64_t n = ns[t];
        uint8_t *seen = calloc(n, 1);
        int bij = 1, inv = 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t v = pcr_refurb_perm(n, 5, i);
            if (v >= n || seen[v])
                bij = 0;
            else
                seen[v] = 1;
            inv &= pcr_refurb_perm_inv(n, 5, v) == i;
        }
        CHECK(bij, "perm is a bijection of [0, %llu)", (unsigned long long)n);
        CHECK(inv, "perm_inv inverts perm for n = %llu", (unsigned long long)n);
        free(seen);
    }
    /* ImageNet's size: spot checks, and the permutation is not the identity. */
    uint64_t n = 1281167, fixed = 0;
    int inv = 1;
    for (uint64_t i = 0; i < n; i += 997) {
        uint64_t v = pcr_refurb_perm(n, 1, i);
        inv &= v < n && pcr_refurb_perm_inv(n, 1, v) == i;
        fixed += v == i;
    }
    CHECK(inv && fixed < 5, "n = 1281167: inverse holds, %llu fixed points of 1286",
          (unsigned long long)fixed);
    CHECK(pcr_refurb_perm(1000, 1, 3) != pcr_refurb_perm(1000, 2, 3) ||
              pcr_refurb_perm(1000, 1, 4) != pcr_refurb_perm(1000, 2, 4),
          "the seed changes the permutation");
}

static void test_schedule(void)
{
    const uint64_t ns[] = {1, 7, 1000};

    for (size_t t = 0; t < 3; t++)
        for (unsigned r = 1; r <= 3; r++) {
            uint64_t n = ns[t], passes = 4 * r + 3;
            uint64_t lo = n / r, hi = (n + r - 1) / r;
            uint64_t *prev = calloc(n, sizeof(uint64_t)), *life = calloc(n, sizeof(uint64_t));
            int counts_ok = 1, list_ok = 1, life_ok = 1, fresh_ok = 1;

            for (uint64_t pass = 0; pass < passes; pass++) {
                uint64_t changed = 0;
                uint8_t *mark = calloc(n, 1);
                for (uint64_t i = 0; i < n; i++) {
                    uint64_t ph = pcr_refurb_phase(n, 9, r, i);
                    uint64_t v = pcr_refurb_version(pass, ph, r);
                    bool fresh = pass == 0 || v != prev[i];
                    fresh_ok &= fresh == pcr_refurb_is_fresh(pass, ph, r);
                    if (pass > 0 && fresh) {
                        changed++;
                        mark[i] = 1;
                        /* the version that ended lived r opens, or r - phase if it
                         * was version 0 */
                        life_ok &= life[i] == (prev[i] == 0 ? r - ph : r);
                        life[i] = 0;
                    }
                    life[i]++;
                    prev[i] = v;
                }
                if (pass > 0) {
                    counts_ok &= changed == lo || changed == hi;
                    counts_ok &= changed == pcr_refurb_fresh_count(n, r, pass);
                    for (uint64_t k = 0; k < pcr_refurb_fresh_count(n, r, pass); k++) {
                        uint64_t i = pcr_refurb_fresh_nth(n, 9, r, pass, k);
                        list_ok &= i < n && mark[i] == 1;
                        if (i < n)
                            mark[i] = 2; /* listed once only */
                    }
                }
                free(mark);
            }
            CHECK(counts_ok, "N=%llu r=%u: ceil/floor(N/r) changes per pass", (unsigned long long)n,
                  r);
            CHECK(list_ok, "N=%llu r=%u: fresh_nth lists exactly the changed samples",
                  (unsigned long long)n, r);
            CHECK(life_ok, "N=%llu r=%u: each version lives r opens (version 0: r - p)",
                  (unsigned long long)n, r);
            CHECK(fresh_ok, "N=%llu r=%u: is_fresh agrees with the version change",
                  (unsigned long long)n, r);
            free(prev);
            free(life);
        }
    CHECK(pcr_refurb_fresh_count(10, 3, 0) == 10, "pass 0: every sample is fresh");
}

/* ---- Rendering ------------------------------------------------------------------- */

static void test_ppm_size(void)
{
    CHECK(pcr_refurb_ppm_size(224) == 15 + 224 * 224 * 3, "ppm size 224: %zu",
          pcr_refurb_ppm_size(224));
    CHECK(pcr_refurb_ppm_size(1) == 11 + 3, "ppm size 1");
    CHECK(pcr_refurb_ppm_size(4096) == 17 + 4096ull * 4096 * 3, "ppm size 4096");
}

/* Render @p from @j with the library (no DCT scaling) and the reference: same bytes. */
static int same_as_reference(const struct buf *j, const struct pcr_refurb_params *p, unsigned s)
{
    struct pcr_refurb_conf c;
    struct pcr_refurb_info info;
    size_t n = pcr_refurb_ppm_size(s);
    uint8_t *ppm = xmalloc(n), *ref, *full;
    unsigned w, h;
    char why[128], hdr[32];
    int rc, ok;

    pcr_refurb_conf_default(&c);
    c.size = s;
    c.dct_scaling = false;
    rc = pcr_refurb_render_params(&c, j->p, j->len, p, 0, ppm, &info, why, sizeof(why));
    full = ref_decode(j, &w, &h);
    ref = ref_render(full, w, p, s);
    snprintf(hdr, sizeof(hdr), "P6\n%u %u\n255\n", s, s);
    ok = rc == 0 && info.scale_num == 8 && !memcmp(ppm, hdr, strlen(hdr)) &&
         !memcmp(ppm + strlen(hdr), ref, (size_t)s * s * 3);
    /* decoding everything (no crop, no skip) gives the same bytes */
    c.partial = false;
    uint8_t *whole = xmalloc(n);
    ok &= pcr_refurb_render_params(&c, j->p, j->len, p, 0, whole, NULL, NULL, 0) == 0 &&
          !memcmp(whole, ppm, n);
    free(whole);
    if (!ok) {
        size_t diff = 0;
        for (size_t i = 0; rc == 0 && i < (size_t)s * s * 3; i++)
            diff += ppm[strlen(hdr) + i] != ref[i];
        fprintf(stderr, "  render rc %d (%s), %zu bytes differ, crop %u,%u %ux%u -> %u\n", rc, why,
                diff, p->left, p->top, p->width, p->height, s);
    }
    free(ppm);
    free(ref);
    free(full);
    return ok;
}

static void test_render(void)
{
    struct buf base = make_jpeg(301, 203, 3, false, 1), prog = make_jpeg(301, 203, 3, true, 2);
    struct buf gray = make_jpeg(120, 90, 1, false, 3), cmyk = make_jpeg(97, 64, 4, false, 4);
    const struct pcr_refurb_params boxes[] = {
        {0, 0, 203, 301, false, false},    {0, 0, 203, 301, true, false},
        {17, 33, 150, 200, false, false},  {1, 1, 64, 64, true, false},
        {100, 250, 103, 51, false, false}, {5, 290, 7, 11, false, false},
        {57, 3, 131, 257, true, false},
    };
    const unsigned sizes[] = {64, 32, 224};
    int ok = 1;

    for (size_t b = 0; b < sizeof(boxes) / sizeof(boxes[0]); b++)
        for (size_t s = 0; s < 3; s++) {
            ok &= same_as_reference(&base, &boxes[b], sizes[s]);
            ok &= same_as_reference(&prog, &boxes[b], sizes[s]);
        }
    CHECK(ok, "partial streaming decode + resample == full decode + Pillow's resample");
    struct pcr_refurb_params g = {10, 7, 60, 80, true, false}, k = {3, 5, 50, 70, false, false};
    CHECK(same_as_reference(&gray, &g, 48), "gray image: planes copied to RGB");
    CHECK(same_as_reference(&cmyk, &k, 40), "CMYK image: Pillow's inverted-CMYK conversion");

    /* A lower level (the first K scans + EOI): libjpeg smooths the blocks of an
     * incomplete progressive image, and partial decoding must not change that. */
    struct pcr_split sp;
    int lv_ok = pcr_jpeg_split(prog.p, prog.len, &sp) == 0 && sp.nchunks > 6;
    for (unsigned k = 1; lv_ok && k <= 6; k += 2) {
        struct buf lv = {xmalloc(sp.end[k - 1] + 2), sp.end[k - 1] + 2};
        memcpy(lv.p, prog.p, sp.end[k - 1]);
        lv.p[lv.len - 2] = 0xFF, lv.p[lv.len - 1] = 0xD9;
        for (size_t b = 2; b < sizeof(boxes) / sizeof(boxes[0]); b++)
            lv_ok &= same_as_reference(&lv, &boxes[b], 64);
        free(lv.p);
    }
    CHECK(lv_ok, "levels 1, 3, 5 of a progressive image: same as a full decode");

    /* The identity: whole image at its own size is the decoded image. */
    struct buf sq = make_jpeg(64, 64, 3, true, 5);
    struct pcr_refurb_params whole = {0, 0, 64, 64, false, false};
    CHECK(same_as_reference(&sq, &whole, 64), "1:1 resample is the identity");

    /* DCT scaling: the smallest M with crop * M / 8 >= S. */
    struct pcr_refurb_conf c;
    struct pcr_refurb_info info;
    uint8_t *ppm = xmalloc(pcr_refurb_ppm_size(224));
    char why[128];
    pcr_refurb_conf_default(&c);
    c.size = 50;
    struct pcr_refurb_params big = {0, 0, 203, 301, false, false};
    int rc = pcr_refurb_render_params(&c, base.p, base.len, &big, 0, ppm, &info, why, 128);
    /* 203 * M / 8 >= 50 -> M >= 1.97 -> 2 */
    CHECK(rc == 0 && info.scale_num == 2, "DCT scale picked M=%u (want 2)", info.scale_num);
    c.dct_scaling = false;
    rc = pcr_refurb_render_params(&c, base.p, base.len, &big, 0, ppm, &info, why, 128);
    CHECK(rc == 0 && info.scale_num == 8, "DCT scaling off: M=%u", info.scale_num);
    c.dct_scaling = true;
    c.size = 224; /* crop smaller than S: full size */
    rc = pcr_refurb_render_params(&c, base.p, base.len, &boxes[3], 0, ppm, &info, why, 128);
    CHECK(rc == 0 && info.scale_num == 8, "upscale: M=%u", info.scale_num);
    for (unsigned m = 1; m <= 8; m++) {
        rc = pcr_refurb_render_params(&c, prog.p, prog.len, &boxes[2], m, ppm, &info, why, 128);
        CHECK(rc == 0 && info.scale_num == m, "forced M=%u: rc %d (%s)", m, rc, why);
    }
    /* Random versions render and stay deterministic. */
    uint8_t *again = xmalloc(pcr_refurb_ppm_size(224));
    rc = pcr_refurb_render(&c, prog.p, prog.len, 12, 3, ppm, &info, why, 128);
    int rc2 = pcr_refurb_render(&c, prog.p, prog.len, 12, 3, again, NULL, why, 128);
    CHECK(rc == 0 && rc2 == 0 && !memcmp(ppm, again, pcr_refurb_ppm_size(224)),
          "render is deterministic");

    /* Hostile input: errors, never a crash. */
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 1);
    junk[0] = 0xFF, junk[1] = 0xD8;
    CHECK(pcr_refurb_render(&c, junk, sizeof(junk), 0, 0, ppm, NULL, why, 128) == -EINVAL,
          "garbage after SOI: -EINVAL (%s)", why);
    CHECK(pcr_refurb_render(&c, junk + 2, 10, 0, 0, ppm, NULL, why, 128) == -EINVAL, "not a JPEG");
    /* A truncated progressive file: decodable with warnings (Pillow would too, with
     * LOAD_TRUNCATED_IMAGES; the store never truncates). */
    rc = pcr_refurb_render(&c, prog.p, prog.len * 2 / 3, 0, 0, ppm, &info, why, 128);
    CHECK(rc == 0 && info.warnings > 0, "truncated: rc %d, %u warnings", rc, info.warnings);
    struct pcr_refurb_params out = {100, 0, 104, 10, false, false};
    CHECK(pcr_refurb_render_params(&c, base.p, base.len, &out, 0, ppm, NULL, why, 128) == -EINVAL,
          "box outside the image rejected");
    free(again);
    free(ppm);
    free(base.p), free(prog.p), free(gray.p), free(cmyk.p), free(sq.p);
}

/* ---- The context ------------------------------------------------------------------- */

struct corpus {
    struct buf j[6];
    pthread_mutex_t mu;
    unsigned loads;
    pthread_cond_t cv; /* hold, held */
    int hold;          /* a load of this sample waits until hold is set to -1 */
    bool held;         /* a load is waiting so */
};

static int load(void *arg, uint64_t sample, uint8_t **buf, size_t *len)
{
    struct corpus *c = arg;

    pthread_mutex_lock(&c->mu);
    c->loads++;
    if ((int)sample == c->hold) {
        c->held = true;
        pthread_cond_broadcast(&c->cv);
        while (c->hold != -1)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    if (sample >= 6)
        return -ENOENT;
    *buf = xmalloc(c->j[sample].len);
    memcpy(*buf, c->j[sample].p, c->j[sample].len);
    *len = c->j[sample].len;
    return 0;
}

static struct corpus *the_corpus; /* for get_many's check */

struct getter {
    struct pcr_refurb *r;
    int bad;
};

static void *get_many(void *arg)
{
    struct getter *g = arg;
    struct pcr_refurb_conf c;
    uint8_t *want = xmalloc(pcr_refurb_ppm_size(32));

    pcr_refurb_conf_default(&c);
    c.size = 32;
    c.seed = 3;
    for (int i = 0; i < 60; i++) {
        uint64_t s = (uint64_t)(i * 7) % 5, v = (uint64_t)i / 20;
        uint8_t *b;
        size_t len;
        int rc = pcr_refurb_get(g->r, s, v, &b, &len);
        if (rc) {
            g->bad++;
            continue;
        }
        /* what the file must hold: exactly version v of sample s */
        pcr_refurb_render(&c, the_corpus->j[s].p, the_corpus->j[s].len, s, v, want, NULL, NULL, 0);
        g->bad += len != pcr_refurb_ppm_size(32) || memcmp(b, want, len) != 0;
        free(b);
    }
    free(want);
    return NULL;
}

/* Whether get(@sample, @version) returns exactly its render (left in @want). */
static bool get_exact(struct pcr_refurb *r, struct corpus *cp, const struct pcr_refurb_conf *conf,
                      uint64_t sample, uint64_t version, uint8_t *want)
{
    uint8_t *b = NULL;
    size_t len = 0;
    int rc = pcr_refurb_get(r, sample, version, &b, &len);
    bool same;

    pcr_refurb_render(conf, cp->j[sample].p, cp->j[sample].len, sample, version, want, NULL, NULL,
                      0);
    same = rc == 0 && len == pcr_refurb_ppm_size(conf->size) && !memcmp(b, want, len);
    free(b);
    return same;
}

static void test_context(const char *dir)
{
    struct corpus cp = {
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .hold = -1};
    struct pcr_refurb_opts o = {0};
    struct pcr_refurb *r;
    struct pcr_refurb_stats st;
    uint8_t *b, *want = xmalloc(pcr_refurb_ppm_size(32));
    size_t len;
    int rc;

    for (int i = 0; i < 5; i++)
        cp.j[i] = make_jpeg(80 + 13 * i, 60 + 7 * i, i == 4 ? 1 : 3, i % 2, 10 + i);
    cp.j[5].p = xmalloc(16), cp.j[5].len = 16; /* not a JPEG */
    memset(cp.j[5].p, 0xAB, 16);
    the_corpus = &cp;
    pcr_refurb_conf_default(&o.conf);
    o.conf.size = 32;
    o.conf.seed = 3;
    o.threads = 2;
    o.cache_dir = dir;
    o.cache_bytes = 3 * pcr_refurb_ppm_size(32); /* room for 3 */
    rc = pcr_refurb_open(&o, load, &cp, &r);
    CHECK(rc == 0, "open (%s): %d", dir ? "disk" : "RAM", rc);
    if (rc)
        return;

    /* schedule, wait, get: a hit with the exact version */
    CHECK(pcr_refurb_schedule(r, 1, 0) == 0, "schedule");
    CHECK(pcr_refurb_wait(r, 1, 0, 10000) == 0, "wait for a scheduled job");
    CHECK(pcr_refurb_wait(r, 2, 0, 10) == -ENOENT, "wait for nothing: -ENOENT");
    CHECK(get_exact(r, &cp, &o.conf, 1, 0, want), "get returns version 0 of sample 1");
    pcr_refurb_get_stats(r, &st);
    CHECK(st.prepared == 1 && st.hits == 1 && st.ondemand == 0, "stats: %llu prepared %llu hits",
          (unsigned long long)st.prepared, (unsigned long long)st.hits);

    /* a newer version is a different file, and the older one is dropped */
    rc = pcr_refurb_get(r, 1, 1, &b, &len);
    CHECK(rc == 0 && memcmp(b, want, len) != 0, "version 1 differs from version 0");
    free(b);
    pcr_refurb_get_stats(r, &st);
    CHECK(st.ondemand == 1 && st.dropped == 1 && st.cached == 1,
          "on demand 1, dropped 1, cached %llu", (unsigned long long)st.cached);

    /* failures: the load's error, a decode error */
    CHECK(pcr_refurb_get(r, 9, 0, &b, &len) == -ENOENT && !b, "load error passed on");
    CHECK(pcr_refurb_get(r, 5, 0, &b, &len) == -EINVAL, "undecodable: -EINVAL");
    CHECK(pcr_refurb_schedule(r, 5, 1) == 0 && pcr_refurb_wait(r, 5, 1, 10000) == -EINVAL,
          "a failed job's error through wait");

    /* the bound: never more than 3 kept; more than 3 jobs outstanding refused */
    for (uint64_t s = 0; s < 5; s++)
        pcr_refurb_schedule(r, s, 7);
    for (uint64_t s = 0; s < 5; s++)
        pcr_refurb_wait(r, s, 7, 10000);
    pcr_refurb_get_stats(r, &st);
    CHECK(st.cached <= 3 && st.evicted > 0, "cached %llu <= 3, evicted %llu",
          (unsigned long long)st.cached, (unsigned long long)st.evicted);

    /* 4 threads getting overlapping keys: every answer is the exact version */
    pthread_t th[4];
    struct getter g[4] = {{r, 0}, {r, 0}, {r, 0}, {r, 0}};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, get_many, &g[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(g[0].bad + g[1].bad + g[2].bad + g[3].bad == 0, "concurrent gets: %d wrong",
          g[0].bad + g[1].bad + g[2].bad + g[3].bad);
    pcr_refurb_close(r);

    if (dir) { /* the private directory is gone */
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", dir);
        CHECK(system(cmd) == 0, "cache directory removed at close");
    }

    /* a get() takes a job still queued and renders it itself, not waiting for the
     * worker busy with another one (pcr_workq_take) */
    o.threads = 1;
    o.cache_dir = NULL;
    rc = pcr_refurb_open(&o, load, &cp, &r);
    CHECK(rc == 0, "open, one worker");
    pthread_mutex_lock(&cp.mu);
    cp.hold = 4;
    cp.held = false;
    pthread_mutex_unlock(&cp.mu);
    CHECK(pcr_refurb_schedule(r, 4, 2) == 0, "schedule the held job");
    pthread_mutex_lock(&cp.mu);
    for (int i = 0; i < 100 && !cp.held; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cp.cv, &cp.mu, &ts);
    }
    CHECK(cp.held, "the worker runs the held job");
    pthread_mutex_unlock(&cp.mu);
    CHECK(pcr_refurb_schedule(r, 3, 2) == 0, "schedule a job behind it");
    CHECK(get_exact(r, &cp, &o.conf, 3, 2, want), "get of a queued job renders it here, exact");
    pcr_refurb_get_stats(r, &st);
    CHECK(st.ondemand == 1 && st.waits == 0 && st.queued == 0,
          "taken, not waited for: ondemand %llu waits %llu queued %llu",
          (unsigned long long)st.ondemand, (unsigned long long)st.waits,
          (unsigned long long)st.queued);
    pthread_mutex_lock(&cp.mu);
    cp.hold = -1;
    pthread_cond_broadcast(&cp.cv);
    pthread_mutex_unlock(&cp.mu);
    CHECK(pcr_refurb_wait(r, 4, 2, 10000) == 0, "the held job ends");
    pcr_refurb_close(r);

    /* no workers: schedule refuses, get renders */
    o.threads = 0;
    o.cache_dir = NULL;
    rc = pcr_refurb_open(&o, load, &cp, &r);
    CHECK(rc == 0 && pcr_refurb_schedule(r, 0, 0) == -EPIPE, "no workers: -EPIPE");
    CHECK(pcr_refurb_get(r, 0, 0, &b, &len) == 0, "no workers: get renders");
    free(b);
    pcr_refurb_close(r);
    for (int i = 0; i < 6; i++)
        free(cp.j[i].p);
    free(want);
}

int main(void)
{
    char dir[] = "/tmp/test_refurb.XXXXXX";

    test_rng();
    test_params();
    test_perm();
    test_schedule();
    test_ppm_size();
    test_render();
    test_context(NULL);
    if (mkdtemp(dir)) {
        test_context(dir);
        rmdir(dir);
    } else {
        CHECK(0, "mkdtemp failed");
    }
    return check_done("refurb");
}
