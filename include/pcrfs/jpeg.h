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

/* The chunking rule (PCR's reference splitter, DESIGN §3):
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
    unsigned nchunks;            /* number of scans, 1..PCR_MAX_CHUNKS */
    size_t end[PCR_MAX_CHUNKS];  /* end[i]: offset one past chunk i; chunk i starts
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
};

struct pcr_transcode_opts {
    bool drop_markers;   /* false (default): keep APPn (EXIF, ICC, ...) and COM */
};

/* Transcode a baseline/progressive/arithmetic JPEG losslessly (DCT coefficients
 * copied, as `jpegtran -progressive -copy all` does) into a progressive JPEG with
 * libjpeg's default scan script.
 *
 * On success *out is a malloc()ed buffer of *outlen bytes that pcr_jpeg_split()
 * accepts, and @info (if non-NULL) holds the image's geometry.
 * Any libjpeg warning while reading (corrupt data, premature end) is a failure:
 * the caller then keeps the source bytes verbatim, so nothing is ever lost.
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
 */
int pcr_jpeg_transcode(const uint8_t *src, size_t len, const struct pcr_transcode_opts *opts,
                       uint8_t **out, size_t *outlen, struct pcr_jpeg_info *info, char *why,
                       size_t whylen);

/* Decode a JPEG completely.
 *
 * If @pixels is non-NULL, *pixels receives a malloc()ed buffer of width*height*
 * components bytes in the file's own colour space converted as libjpeg does by
 * default (YCbCr -> RGB, gray stays gray, CMYK/YCCK -> CMYK), and *npixels its size.
 * A libjpeg warning (corrupt data, truncated scan) is a failure.
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
