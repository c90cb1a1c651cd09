/* pcrfs — scan scripts: presets, the jpegtran -scans parser, validation (see pcrfs/jpeg.h).
 *
 * Why scripts matter here. A store's level K is the first K scans of every image, so
 * the scan script decides both what each level looks like and how fast the complete
 * image decodes. libjpeg's default script (jpeg_simple_progression) is what PCR
 * used; half of its scans are successive-approximation *refinements* (Ah > 0), and
 * libjpeg-turbo decodes those slowly: with Pillow 9.4 / libjpeg-turbo 2.1.5 on
 * /work/data/ds1k a default-script file decodes at 0.40x the rate of its baseline
 * source (297 vs 745 images/s of CPU time). Spectral selection alone (every
 * coefficient sent once, Ah = Al = 0) decodes at 0.65-0.75x.
 *
 * The "fast" preset, and how it was chosen (bench/fidelity.py; figures in
 * BENCHMARKS.md). Pillow 9.4's full-fidelity decode rate relative to the baseline
 * source (CPU time, 974 colour images of /work/data/ds1k: mostly 4:4:4 at quality
 * 96, 745 images/s), the full size against the default script's, and MS-SSIM@bytes
 * of the levels (pcrinfo --fidelity, luma, fraction of the full size; best of a
 * few rounds, where the later search below took medians of interleaved rounds):
 *     libjpeg default, 10 scans      0.40x (299/s)   bytes  0
 *         levels 0.78@5%, 0.94@12%, 0.94@18%, 0.94@24%, 0.99@42%, 0.996@56% ...
 *     DC + one AC scan per component, 4 scans         0.74x (548/s)   +5.9%
 *     DC, Y 1-5, Cb, Cr, Y 6-63 (PCR's bands, no refinement)    ~0.70x   +4.8%
 *     the preset below, 9 scans      0.68x (504/s)   +1.5%
 *         levels 0.78@6%, 0.90@11%, 0.90@14%, 0.90@17%, 0.97@30%, 0.994@53% ...
 *     sequential Y; Cb; Cr (3 scans, not progressive)           0.92x
 * Four scans is the least a progressive colour file can have (a DC scan, then one
 * AC scan per component). A later search (bench/scans.py, BENCHMARKS.md section 9:
 * 500 images, 7 interleaved rounds, 4- to 9-scan spectral-selection scripts) put
 * every such script between 0.68x and 0.72x, the 4-scan one fastest (0.715x), the
 * best 5-scan one with a useful level 0.706x; a sequential 3-scan file 0.99x. perf
 * says why: the progressive AC decoder (jdphuff.c decode_mcu_AC_first, the original
 * IJG loop: one block per call, a jpeg_fill_bit_buffer call whenever fewer than 8
 * bits are left) spends 1.56x the CPU time of jdhuff.c's decode_mcu_fast on the same
 * coefficients with the fewest scans, and Huffman decoding is ~60% of a baseline
 * decode; a script can only add band ends and passes to it. So no script reaches
 * 0.85x with this decoder, and none is enough faster than this preset to be worth
 * another one. Each extra band costs about 1% of decode rate, but narrower bands
 * code smaller (longer end-of-band runs), so 9 scans cost fewer bytes than 4.
 * The preset spends its scans where a level is worth having: luma AC in zigzag
 * bands 1-2, 3-9, 10-27, 28-63 (level 5 = DC + luma 1-9 reaches MS-SSIM 0.97 at 29%
 * of the bytes, where the default script needs 42% for 0.99 and has nothing between
 * 0.94 and 0.99); the lowest chroma band (1-2) early, as colour matters to a
 * classifier and costs little; the rest of the chroma late, since fine chroma detail
 * is what the eye and 4:2:0 subsampling give up first; and DC at full precision
 * (Al = 0), which needs no refinement scan. Grayscale gets the luma bands (5 scans:
 * its level 3 holds luma 1-9 like colour level 5, and it is complete from level 5);
 * RGB (no luma/chroma split) and CMYK get DC, then bands 1-5 and 6-63 of every
 * component (7 and 9 scans).
 *
 * Parsing follows libjpeg's rdswitch.c (read_scan_script) exactly, so that a file
 * jpegtran accepts means the same here, but it reads a bounded memory buffer,
 * rejects numbers that overflow, and the result is validated completely: libjpeg
 * checks that every component's DC is sent but not that every AC coefficient is
 * coded to full precision, so a script that leaves a band out would be silently
 * lossy there. Here it is an error. Fuzzed by tests/fuzz/fuzz_scans.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "pcrfs/jpeg.h"
#include "common/internal.h"

#define MAX_AH_AL      10 /* libjpeg-turbo's limit for 8-bit samples (jcmaster.c) */
#define MAX_COMPS      4  /* components a script may name (scan and frame) */
#define NCOEF          64
#define MAX_NUMBER     65535
#define DEFAULT_LEVELS 10 /* libjpeg's default script: 10 scans for YCbCr */

/* ---- Presets ------------------------------------------------------------------ */

#define DC(...)                                                                                    \
    {                                                                                              \
        .ncomps = sizeof((uint8_t[]){__VA_ARGS__}), .comp = { __VA_ARGS__ }                        \
    }
#define AC(c, s, e)                                                                                \
    {                                                                                              \
        .ncomps = 1, .comp = {(c)}, .ss = (s), .se = (e)                                           \
    }

/* The fast preset. Scan order and bands are the design described above. */
static const struct pcr_scan fast_ycc[] = {
    DC(0, 1, 2),   /* 1: DC of every component, full precision */
    AC(0, 1, 2),   /* 2: luma, the two lowest AC */
    AC(1, 1, 2),   /* 3: Cb, lowest AC */
    AC(2, 1, 2),   /* 4: Cr, lowest AC */
    AC(0, 3, 9),   /* 5: luma */
    AC(0, 10, 27), /* 6: luma */
    AC(1, 3, 63),  /* 7: Cb, the rest */
    AC(2, 3, 63),  /* 8: Cr, the rest */
    AC(0, 28, 63), /* 9: luma, the rest */
};
static const struct pcr_scan fast_gray[] = {
    DC(0), AC(0, 1, 2), AC(0, 3, 9), AC(0, 10, 27), AC(0, 28, 63),
};
static const struct pcr_scan fast_rgb[] = {
    DC(0, 1, 2), AC(0, 1, 5), AC(1, 1, 5), AC(2, 1, 5), AC(0, 6, 63), AC(1, 6, 63), AC(2, 6, 63),
};
static const struct pcr_scan fast_cmyk[] = {
    DC(0, 1, 2, 3), AC(0, 1, 5),  AC(1, 1, 5),  AC(2, 1, 5),  AC(3, 1, 5),
    AC(0, 6, 63),   AC(1, 6, 63), AC(2, 6, 63), AC(3, 6, 63),
};

static void set_script(struct pcr_script *s, const struct pcr_scan *scans, unsigned n)
{
    memset(s, 0, sizeof(*s));
    memcpy(s->scan, scans, n * sizeof(*scans));
    s->nscans = n;
}

int pcr_scripts_preset(const char *name, struct pcr_scripts *out)
{
    memset(out, 0, sizeof(*out));
    if (!name)
        return -ENOENT;
    if (strcmp(name, "default") == 0 || strcmp(name, "libjpeg-default") == 0) {
        /* All classes nscans == 0: the transcoder calls jpeg_simple_progression(),
         * so the bytes are exactly jpegtran -progressive's. */
        snprintf(out->name, sizeof(out->name), "libjpeg-default");
        out->levels = DEFAULT_LEVELS;
        return 0;
    }
    if (strcmp(name, "fast") == 0) {
        snprintf(out->name, sizeof(out->name), "fast");
        set_script(&out->by_class[PCR_CLASS_GRAY], fast_gray, PCR_ARRAY_SIZE(fast_gray));
        set_script(&out->by_class[PCR_CLASS_YCC], fast_ycc, PCR_ARRAY_SIZE(fast_ycc));
        set_script(&out->by_class[PCR_CLASS_RGB], fast_rgb, PCR_ARRAY_SIZE(fast_rgb));
        set_script(&out->by_class[PCR_CLASS_CMYK], fast_cmyk, PCR_ARRAY_SIZE(fast_cmyk));
        out->levels = PCR_ARRAY_SIZE(fast_ycc);
        return 0;
    }
    return -ENOENT;
}

enum pcr_script_class pcr_script_class_of(unsigned ncomps, bool ycc)
{
    switch (ncomps) {
    case 1:
        return PCR_CLASS_GRAY;
    case 3:
        return ycc ? PCR_CLASS_YCC : PCR_CLASS_RGB;
    case 4:
        return PCR_CLASS_CMYK;
    default:
        return PCR_CLASS_COUNT;
    }
}

/* ---- Validation ----------------------------------------------------------------- */

int pcr_script_validate(const struct pcr_script *s, unsigned ncomps, char *why, size_t whylen)
{
    /* last[c][k]: the Al of the latest scan that coded coefficient k of component c,
     * -1 if none yet (libjpeg's last_bitpos). */
    int last[MAX_COMPS][NCOEF];
    bool sent[MAX_COMPS] = {false};
    bool progressive;
    unsigned i, j, c, k;

    if (ncomps < 1 || ncomps > MAX_COMPS) {
        pcr_errf(why, whylen, "scripts are for 1 to %d components, not %u", MAX_COMPS, ncomps);
        return -EINVAL;
    }
    if (s->nscans < 1 || s->nscans > PCR_MAX_SCANS) {
        pcr_errf(why, whylen, "a script has 1 to %d scans, not %u", PCR_MAX_SCANS, s->nscans);
        return -EINVAL;
    }
    memset(last, 0xff, sizeof(last)); /* all -1 */
    /* libjpeg's rule: the first scan decides; a full 0-63 band means sequential. */
    progressive = !(s->scan[0].ss == 0 && s->scan[0].se == NCOEF - 1);

    for (i = 0; i < s->nscans; i++) {
        const struct pcr_scan *sc = &s->scan[i];
        unsigned n = sc->ncomps;

        if (n < 1 || n > MAX_COMPS) {
            pcr_errf(why, whylen, "scan %u: %u components (1 to %d)", i + 1, n, MAX_COMPS);
            return -EINVAL;
        }
        for (j = 0; j < n; j++) {
            if (sc->comp[j] >= ncomps) {
                pcr_errf(why, whylen, "scan %u: component %u, but the image has %u", i + 1,
                         sc->comp[j], ncomps);
                return -EINVAL;
            }
            if (j > 0 && sc->comp[j] <= sc->comp[j - 1]) {
                pcr_errf(why, whylen, "scan %u: component indexes must increase", i + 1);
                return -EINVAL;
            }
        }
        if (!progressive) {
            if (sc->ss != 0 || sc->se != NCOEF - 1 || sc->ah != 0 || sc->al != 0) {
                pcr_errf(why, whylen,
                         "scan %u: a sequential script (its first scan is 0-63) must have "
                         "0-63, 0, 0 in every scan",
                         i + 1);
                return -EINVAL;
            }
            for (j = 0; j < n; j++) {
                if (sent[sc->comp[j]]) {
                    pcr_errf(why, whylen, "scan %u: component %u sent twice in a sequential script",
                             i + 1, sc->comp[j]);
                    return -EINVAL;
                }
                sent[sc->comp[j]] = true;
            }
            continue;
        }
        if (sc->ss > sc->se || sc->se >= NCOEF || sc->ah > MAX_AH_AL || sc->al > MAX_AH_AL) {
            pcr_errf(why, whylen, "scan %u: band %u-%u, Ah %u, Al %u out of range", i + 1, sc->ss,
                     sc->se, sc->ah, sc->al);
            return -EINVAL;
        }
        if (sc->ss == 0 && sc->se != 0) {
            pcr_errf(why, whylen, "scan %u: a progressive DC scan (Ss 0) must have Se 0", i + 1);
            return -EINVAL;
        }
        if (sc->ss != 0 && n != 1) {
            pcr_errf(why, whylen, "scan %u: a progressive AC scan must have one component", i + 1);
            return -EINVAL;
        }
        for (j = 0; j < n; j++) {
            int *lb = last[sc->comp[j]];

            if (sc->ss != 0 && lb[0] < 0) {
                pcr_errf(why, whylen, "scan %u: AC of component %u before its DC", i + 1,
                         sc->comp[j]);
                return -EINVAL;
            }
            for (k = sc->ss; k <= sc->se; k++) {
                if (lb[k] < 0 ? sc->ah != 0 : (sc->ah != (unsigned)lb[k] || sc->al + 1 != sc->ah)) {
                    pcr_errf(why, whylen,
                             "scan %u: component %u coefficient %u: Ah %u, Al %u do not follow "
                             "its previous scans",
                             i + 1, sc->comp[j], k, sc->ah, sc->al);
                    return -EINVAL;
                }
                lb[k] = sc->al;
            }
        }
    }
    for (c = 0; c < ncomps; c++) {
        if (!progressive) {
            if (!sent[c]) {
                pcr_errf(why, whylen, "component %u is never sent", c);
                return -EINVAL;
            }
            continue;
        }
        for (k = 0; k < NCOEF; k++) {
            if (last[c][k] != 0) {
                if (last[c][k] < 0)
                    pcr_errf(why, whylen, "component %u: coefficient %u is never sent", c, k);
                else
                    pcr_errf(why, whylen,
                             "component %u: coefficient %u stops at bit %d (needs refinement "
                             "to Al 0, or the image is not lossless)",
                             c, k, last[c][k]);
                return -EINVAL;
            }
        }
    }
    return 0;
}

/* ---- The jpegtran -scans parser --------------------------------------------------- */

#define END (-1) /* libjpeg's EOF */

struct reader {
    const char *p, *end;
    unsigned line; /* 1-based, for messages */
    bool overflow; /* a number exceeded MAX_NUMBER */
};

/* text_getc(): the next character, a '#' comment read as the newline ending it. */
static int rd_getc(struct reader *r)
{
    int ch;

    if (r->p >= r->end)
        return END;
    ch = (unsigned char)*r->p++;
    if (ch == '#') {
        do {
            ch = r->p < r->end ? (unsigned char)*r->p++ : END;
        } while (ch != '\n' && ch != END);
    }
    if (ch == '\n')
        r->line++;
    return ch;
}

static bool is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* read_text_integer(): skip white space, read an unsigned decimal number and the one
 * character after it. @return false at end of input or on a non-digit (in *term). */
static bool rd_text_integer(struct reader *r, long *val, int *term)
{
    int ch;
    long v;

    do {
        ch = rd_getc(r);
        if (ch == END) {
            *term = ch;
            return false;
        }
    } while (is_space(ch));
    if (!is_digit(ch)) {
        *term = ch;
        return false;
    }
    v = ch - '0';
    while ((ch = rd_getc(r)) != END && is_digit(ch)) {
        v = v * 10 + (ch - '0');
        if (v > MAX_NUMBER) {
            r->overflow = true;
            v = MAX_NUMBER + 1; /* stays out of range, cannot overflow */
        }
    }
    *val = v;
    *term = ch;
    return true;
}

/* read_scan_integer(): a number, then the next non-space character: ';' or ':' or
 * END as is, a digit is put back (term ' '), anything else is a separator (' '). */
static bool rd_scan_integer(struct reader *r, long *val, int *term)
{
    int ch;

    if (!rd_text_integer(r, val, term))
        return false;
    ch = *term;
    while (ch != END && is_space(ch))
        ch = rd_getc(r);
    if (is_digit(ch)) {
        r->p--; /* the digit came from the buffer directly: never a comment */
        ch = ' ';
    } else if (ch != END && ch != ';' && ch != ':') {
        ch = ' ';
    }
    *term = ch;
    return true;
}

/* Restrict @in to components < @n; scans left empty are dropped. */
static void project(const struct pcr_script *in, unsigned n, struct pcr_script *out)
{
    unsigned i, j;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < in->nscans; i++) {
        struct pcr_scan sc = in->scan[i];

        sc.ncomps = 0;
        memset(sc.comp, 0, sizeof(sc.comp));
        for (j = 0; j < in->scan[i].ncomps; j++)
            if (in->scan[i].comp[j] < n)
                sc.comp[sc.ncomps++] = in->scan[i].comp[j];
        if (sc.ncomps)
            out->scan[out->nscans++] = sc;
    }
}

static unsigned class_ncomps(enum pcr_script_class c)
{
    return c == PCR_CLASS_GRAY ? 1 : c == PCR_CLASS_CMYK ? 4 : 3;
}

int pcr_scripts_parse(const char *text, size_t len, const char *label, struct pcr_scripts *out,
                      char *why, size_t whylen)
{
    struct reader r;
    struct pcr_script *s;
    unsigned ncomps = 0, c, line;
    long val;
    int term = END, rc;

    memset(out, 0, sizeof(*out));
    if (!text && len) {
        pcr_errf(why, whylen, "no text");
        return -EINVAL;
    }
    r = (struct reader){.p = text ? text : "", .line = 1}; /* no NULL + 0 */
    r.end = r.p + len;
    /* Parse into the YCC slot; the classes are filled from it at the end. */
    s = &out->by_class[PCR_CLASS_YCC];
    while ((line = r.line, rd_scan_integer(&r, &val, &term))) {
        struct pcr_scan *sc;
        long v[4];
        unsigned n = 1;

        if (s->nscans >= PCR_MAX_SCANS) {
            pcr_errf(why, whylen, "line %u: more than %d scans", line, PCR_MAX_SCANS);
            return -EINVAL;
        }
        sc = &s->scan[s->nscans];
        v[0] = val;
        while (term == ' ') {
            if (n >= MAX_COMPS) {
                pcr_errf(why, whylen, "line %u: more than %d components in one scan", r.line,
                         MAX_COMPS);
                return -EINVAL;
            }
            if (!rd_scan_integer(&r, &val, &term))
                goto bogus;
            v[n++] = val;
        }
        if (r.overflow)
            goto bogus;
        for (c = 0; c < n; c++) {
            if (v[c] >= MAX_COMPS) {
                pcr_errf(why, whylen, "line %u: component index %ld (scripts use 0 to %d)", r.line,
                         v[c], MAX_COMPS - 1);
                return -EINVAL;
            }
            sc->comp[c] = (uint8_t)v[c];
            if ((unsigned)v[c] + 1 > ncomps)
                ncomps = (unsigned)v[c] + 1;
        }
        sc->ncomps = (uint8_t)n;
        if (term == ':') {
            long p[4];

            for (c = 0; c < 4; c++) {
                if (!rd_scan_integer(&r, &p[c], &term) || (c < 3 && term != ' ') || r.overflow)
                    goto bogus;
                if (p[c] > (c < 2 ? NCOEF - 1 : MAX_AH_AL)) {
                    pcr_errf(why, whylen, "line %u: %s %ld out of range (0 to %d)", r.line,
                             (const char *[]){"Ss", "Se", "Ah", "Al"}[c], p[c],
                             c < 2 ? NCOEF - 1 : MAX_AH_AL);
                    return -EINVAL;
                }
            }
            sc->ss = (uint8_t)p[0];
            sc->se = (uint8_t)p[1];
            sc->ah = (uint8_t)p[2];
            sc->al = (uint8_t)p[3];
        } else {
            sc->ss = 0; /* a sequential scan */
            sc->se = NCOEF - 1;
            sc->ah = sc->al = 0;
        }
        if (term != ';' && term != END)
            goto bogus;
        s->nscans++;
    }
    if (r.overflow) {
        pcr_errf(why, whylen, "a number is too large (more than %d)", MAX_NUMBER);
        return -EINVAL;
    }
    if (term != END) {
        pcr_errf(why, whylen, "line %u: unexpected character '%c' (expected a number)", r.line,
                 term >= 0x20 && term < 0x7f ? term : '?');
        return -EINVAL;
    }
    if (s->nscans == 0) {
        pcr_errf(why, whylen, "no scan in the script");
        return -EINVAL;
    }
    rc = pcr_script_validate(s, ncomps, why, whylen);
    if (rc)
        return rc;
    if (ncomps == 2) {
        /* No image class has 2 components (such JPEGs get libjpeg's default): the
         * script as written would never be used. */
        pcr_errf(why, whylen,
                 "the script names components 0 and 1 only: write it for 1 (gray), 3 "
                 "(colour) or 4 (CMYK) components");
        return -EINVAL;
    }

    out->levels = s->nscans;
    {
        struct pcr_script written = *s;

        for (c = 0; c < PCR_CLASS_COUNT; c++) {
            unsigned n = class_ncomps((enum pcr_script_class)c);

            if (n == ncomps)
                out->by_class[c] = written;
            else if (n < ncomps)
                project(&written, n, &out->by_class[c]);
            else
                memset(&out->by_class[c], 0, sizeof(out->by_class[c]));
            /* A projection of a complete, valid script is complete and valid (the
             * rules are per component); checked anyway, as cheap insurance. */
            if (out->by_class[c].nscans && pcr_script_validate(&out->by_class[c], n, NULL, 0) != 0)
                memset(&out->by_class[c], 0, sizeof(out->by_class[c]));
        }
    }
    snprintf(out->name, sizeof(out->name), "file%s%.*s", label ? ":" : "",
             (int)(sizeof(out->name) - 6), label ? label : "");
    return 0;

bogus:
    if (r.overflow)
        pcr_errf(why, whylen, "a number is too large (more than %d)", MAX_NUMBER);
    else
        pcr_errf(why, whylen, "line %u: invalid scan entry (want \"c1 c2 ...: Ss-Se, Ah, Al;\")",
                 r.line);
    return -EINVAL;
}

size_t pcr_script_format(const struct pcr_script *s, char *buf, size_t len)
{
    size_t n = 0;
    unsigned i, j;

#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(n < len ? buf + n : NULL, n < len ? len - n : 0, __VA_ARGS__);           \
        if (w_ > 0)                                                                                \
            n += (size_t)w_;                                                                       \
    } while (0)

    if (len)
        buf[0] = '\0';
    for (i = 0; i < s->nscans && i < PCR_MAX_SCANS; i++) {
        const struct pcr_scan *sc = &s->scan[i];

        for (j = 0; j < sc->ncomps && j < MAX_COMPS; j++)
            PUT("%s%u", j ? "," : "", sc->comp[j]);
        PUT(": %u-%u, %u, %u;\n", sc->ss, sc->se, sc->ah, sc->al);
    }
#undef PUT
    return n;
}
