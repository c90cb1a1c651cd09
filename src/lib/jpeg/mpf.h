/* pcrfs — the MPF (CIPA DC-007 Multi-Picture Format) patch the transcoder applies
 * when a JPEG keeps bytes after its EOI (see mpf.c). Internal to the jpeg module. */
#ifndef PCRFS_JPEG_MPF_H
#define PCRFS_JPEG_MPF_H

#include <stddef.h>
#include <stdint.h>

/* Rewrite the MP Index of the MPF APP2 segment in @out (the transcoded primary
 * image, @outlen bytes through its EOI) so that the images it locates in the
 * source's trailer are found in "out || trailer":
 *   @src is the source, @src_end the offset one past its EOI (the trailer is
 *   [@src_end, @srclen)); every nonzero MP Entry offset must point into the
 *   trailer, and becomes (its new position) - (the MPF TIFF header's position in
 *   @out); the first entry's size becomes @outlen.
 * Both byte orders (II, MM); every read is bounds-checked (the input is untrusted).
 * @return 0 (also when @src has no MPF segment, or @out none: nothing to patch);
 *         -EINVAL the MPF does not parse, or an offset points outside the trailer
 *                 (a one-line reason in @why; the caller keeps the source verbatim). */
int pcr_mpf_patch(const uint8_t *src, size_t src_end, size_t srclen, uint8_t *out, size_t outlen,
                  char *why, size_t whylen);

#endif
