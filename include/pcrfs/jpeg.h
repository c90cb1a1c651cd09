/* pcrfs — JPEG scan splitting and lossless progressive transcoding.
 *
 * Everything here is a pure function over memory buffers: no files, no global
 * state, safe to call from any number of threads at once. Input bytes are untrusted.
 */
#ifndef PCRFS_JPEG_H
#define PCRFS_JPEG_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most scans (chunks) one image may have. libjpeg's default script gives 10
 * (YCbCr), 6 (gray), 14 (3-component non-YCbCr), 18 (CMYK); 64 leaves room for
 * user scan scripts. A file with more is not split (and is stored verbatim). */
#define PCR_MAX_CHUNKS 64

/* The chunking rule (PCR's reference splitter, pcrfs(5)):
 *   chunk 0 runs from SOI through the end of scan 1's entropy-coded data, so the
 *   frame header and tables travel with the first scan;
 *   chunk i (i >= 1) runs from the byte after scan i's data ... through the end of
 *   scan i+1's entropy-coded data: DHT/DRI/COM markers between two scans travel
 *   with the *next* scan.
 * Entropy-coded data ends at the first 0xFF that is followed by neither 0x00 nor
 * RST0..RST7 (0xD0..0xD7); fill bytes (0xFF 0xFF ...) before a marker therefore
 * belong to the next chunk. The trailing EOI (FF D9) belongs to no chunk: it is
 * appended when a level is served.
 */
struct pcr_split {
    unsigned nchunks;           /* number of scans, 1..PCR_MAX_CHUNKS */
    size_t end[PCR_MAX_CHUNKS]; /* end[i]: offset one past chunk i; chunk i starts
                                 * at end[i-1] (chunk 0 at 0) */
};

/* Split a complete JPEG into its scan chunks.
 *
 * @buf must hold SOI, markers, at least one SOS, and end with EOI (FF D9) directly
 * after the last scan's entropy-coded data, with nothing after it; that is exactly
 * what pcr_jpeg_transcode() produces, and it makes the split lossless:
 * buf == chunk 0 || ... || chunk n-1 || FF D9.
 *
 * @return 0 on success;
 *         -EINVAL if @buf is not such a JPEG (no SOI, a marker segment runs past
 *                 the buffer, no scan, bytes after EOI, ...);
 *         -E2BIG  if it has more than PCR_MAX_CHUNKS scans.
 * Never reads outside [buf, buf+len).
 */
int pcr_jpeg_split(const uint8_t *buf, size_t len, struct pcr_split *out);

struct pcr_jpeg_info {
    unsigned width, height;
    unsigned components; /* 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK */
    size_t trailer;      /* bytes after the image's EOI in the buffer read (MPO and
                          * Ultra HDR secondary images, IPTC/AFCP trailers, ...) */
};

/* ---- Scan scripts (src/lib/jpeg/scanscript.c) ----------------------------------------
 *
 * A scan script says which scans a progressive (or multi-scan sequential) JPEG is
 * written with: libjpeg's jpeg_scan_info[], and the syntax of `jpegtran -scans FILE`.
 * The level a store serves is a number of scans, so the script decides what each
 * level holds (see pcrfs(5), "Levels and scan scripts").
 */

/* The most scans a script may have (each scan is one chunk of the stored file). */
#define PCR_MAX_SCANS PCR_MAX_CHUNKS

/* One scan: the components it codes (indexes into the frame, strictly increasing),
 * the spectral band Ss..Se (zigzag order, 0 = DC) and the successive-approximation
 * bit positions Ah (0 on a coefficient's first scan, else the previous Al) and Al. */
struct pcr_scan {
    uint8_t ncomps;  /* 1..4 */
    uint8_t comp[4]; /* component indexes, 0..3 */
    uint8_t ss, se;  /* 0..63, ss <= se */
    uint8_t ah, al;  /* 0..10 */
};

/* A script for images of one class; nscans == 0 means libjpeg's own default
 * (jpeg_simple_progression(), what `jpegtran -progressive` writes). */
struct pcr_script {
    unsigned nscans;
    struct pcr_scan scan[PCR_MAX_SCANS];
};

/* The image classes a script set tells apart: the ones jpeg_simple_progression()
 * treats differently. An image with 2 or more than 4 components always gets
 * libjpeg's default script. */
enum pcr_script_class {
    PCR_CLASS_GRAY = 0, /* 1 component */
    PCR_CLASS_YCC,      /* 3 components, YCbCr (nearly every photo) */
    PCR_CLASS_RGB,      /* 3 components, any other colour space (Adobe RGB) */
    PCR_CLASS_CMYK,     /* 4 components (CMYK or YCCK) */
    PCR_CLASS_COUNT
};

/* What a store is built with: one script per image class. */
struct pcr_scripts {
    char name[64];   /* recorded as the store's meta "script": "libjpeg-default",
                      * "fast", or "file:BASENAME" */
    unsigned levels; /* L: the scans of the colour (YCC) script; for a user script,
                      * the scans of the script as written */
    struct pcr_script by_class[PCR_CLASS_COUNT];
};

/* Fill @out with the preset @name:
 *   "default" (or "libjpeg-default"): libjpeg's default script for every class
 *       (10 scans colour, 6 gray, 14 RGB, 18 CMYK; L = 10); the transcoder's
 *       output is then byte-identical to `jpegtran -progressive -copy all`.
 *   "fast": spectral selection only (no successive-approximation refinement,
 *       whose scans make full-fidelity decoding slow); see scanscript.c for the
 *       scripts and the measurements behind them.
 * @return 0; -ENOENT unknown name. */
int pcr_scripts_preset(const char *name, struct pcr_scripts *out);

/* Parse a scan script in the syntax of `jpegtran -scans FILE` (libjpeg's
 * wizard.txt): scans separated by ';', each "c1 c2 ...: Ss-Se, Ah, Al" or just
 * "c1 c2 ..." (a sequential scan, 0-63, 0, 0); any punctuation other than ':'
 * and ';' separates numbers; '#' starts a comment to the end of the line.
 * The script must be valid for libjpeg and must code every coefficient of every
 * component to full precision (libjpeg itself does not check the AC bands, and a
 * script that leaves some out would lose data). It is written for N components,
 * N = the highest index + 1 (1, 3 or 4: no class has 2); @out then holds it for
 * every class of N
 * components, its projection (scans restricted to components < n, empty scans
 * dropped; still valid and complete) for classes of n < N components, and
 * libjpeg's default for classes of more than N. L = its number of scans.
 * @label names it in out->name ("file:LABEL"; NULL: "file").
 * Input is untrusted (fuzzed by tests/fuzz/fuzz_scans.c): any bytes are safe.
 * @return 0; -EINVAL with a one-line reason in @why (line number included). */
int pcr_scripts_parse(const char *text, size_t len, const char *label, struct pcr_scripts *out,
                      char *why, size_t whylen);

/* Check @s against libjpeg's rules for an image of @ncomps (1..4) components, and
 * that it codes every coefficient completely.
 * @return 0; -EINVAL with a reason in @why. */
int pcr_script_validate(const struct pcr_script *s, unsigned ncomps, char *why, size_t whylen);

/* Write @s in jpegtran -scans syntax, one scan per line, into @buf.
 * @return the length (snprintf-like: may be >= @len, then truncated). */
size_t pcr_script_format(const struct pcr_script *s, char *buf, size_t len);

/* The class of an image with @ncomps components; @ycc: its JPEG colour space is
 * YCbCr (for 3 components). @return a class, or PCR_CLASS_COUNT (no class). */
enum pcr_script_class pcr_script_class_of(unsigned ncomps, bool ycc);

struct pcr_transcode_opts {
    bool drop_markers;                 /* false (default): keep APPn (EXIF, ICC, ...) and COM */
    const struct pcr_scripts *scripts; /* NULL (default): libjpeg's default script */
};

/* Transcode a baseline/progressive/arithmetic JPEG losslessly (DCT coefficients
 * copied, as `jpegtran -progressive -copy all` does) into a progressive JPEG with
 * libjpeg's default scan script, or with the script opts->scripts gives for the
 * image's class (a multi-scan sequential JPEG if that script is sequential).
 *
 * On success *out is a malloc()ed buffer of *outlen bytes that pcr_jpeg_split()
 * accepts, and @info (if non-NULL) holds the image's geometry.
 * Any libjpeg warning while reading (corrupt data, premature end) is a failure:
 * the caller then keeps the source bytes verbatim, so nothing is ever lost.
 *
 * Bytes after the source's EOI (the second frame of an MPO, an Ultra HDR gain
 * map, an IPTC/AFCP trailer) are not in *out: info->trailer says how many there
 * are, and the caller keeps src[len - trailer, len) verbatim right after *out
 * (nothing is lost: "*out || trailer" is what the store serves at its top level).
 * If the source has an MPF APP2 segment (the multi-picture index that MPO and
 * Ultra HDR readers locate those images by) and a trailer, its offsets are
 * rewritten in *out for that layout: each nonzero MP Entry offset becomes the
 * image's new position (outlen + its offset into the trailer) less the MPF TIFF
 * header's position in *out, and the first entry's size becomes outlen. An MPF
 * that does not parse, or that points outside the trailer, fails the call
 * ("MPF (multi-picture index): ..."), as does a trailer on an image whose scan
 * script has PCR_MAX_CHUNKS scans (no chunk is left for it). Without a trailer the
 * MPF segment is copied unchanged.
 *
 * @return 0 on success;
 *         -EINVAL the input cannot be transcoded losslessly; a one-line reason is
 *                 written to @why (e.g. "not a JPEG", "Unsupported JPEG data
 *                 precision 12", "corrupt JPEG data: premature end of data segment");
 *                 also a frame libjpeg cannot decode to pixels, a progressive source
 *                 whose scans leave coefficients incomplete (its pixels depend on
 *                 libjpeg's smoothing, which the complete output would not get), or
 *                 one needing more than PCR_JPEG_MAX_MEMORY (2 GiB) of coefficient
 *                 memory ("image too large ...");
 *         -ENOMEM out of memory.
 * @why may be NULL. Thread-safe; untrusted input cannot crash it or make it exit.
 * A caller that passes no @info cannot know of a trailer (and so drops it).
 */
int pcr_jpeg_transcode(const uint8_t *src, size_t len, const struct pcr_transcode_opts *opts,
                       uint8_t **out, size_t *outlen, struct pcr_jpeg_info *info, char *why,
                       size_t whylen);

/* Decode a JPEG's luma plane: Y for YCbCr, the gray plane for grayscale, the
 * BT.601 luma (libjpeg's RGB->gray) for RGB, and for CMYK/YCCK the luma of the
 * RGB that inverted (Adobe) CMYK gives, R = C*K/255 etc. (libjpeg cannot convert
 * those to gray itself). A libjpeg warning is a failure, as in pcr_jpeg_decode().
 * On success *luma is a malloc()ed plane of *width x *height bytes (row stride =
 * width).
 * @return 0; -EINVAL (not decodable, reason in @why); -ENOMEM. */
int pcr_jpeg_decode_luma(const uint8_t *buf, size_t len, uint8_t **luma, unsigned *width,
                         unsigned *height, char *why, size_t whylen);

/* Decode a JPEG completely.
 *
 * If @pixels is non-NULL, *pixels receives a malloc()ed buffer of width*height*
 * components bytes in the file's own colour space converted as libjpeg does by
 * default (YCbCr -> RGB, gray stays gray, CMYK/YCCK -> CMYK), and *npixels its size.
 * A libjpeg warning (corrupt data, truncated scan) is a failure. Decoding stops
 * at the first image's EOI; info->trailer counts the bytes after it.
 *
 * @return 0; -EINVAL (not decodable without warnings, or more than 2 GiB of pixels
 *         or coefficients; reason in @why); -ENOMEM.
 */
int pcr_jpeg_decode(const uint8_t *buf, size_t len, uint8_t **pixels, size_t *npixels,
                    struct pcr_jpeg_info *info, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
