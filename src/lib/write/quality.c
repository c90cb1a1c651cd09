/* pcrfs — the per-level fidelity of a transcoded JPEG (pcr_quality_measure(), see
 * pcrfs/writer.h), which mkpcrfs stores in each file's index row (pcrfs(5)).
 *
 * Each level is decoded from exactly the bytes the store serves for it (the first K
 * scan chunks, then FF D9), with the same decoder and MS-SSIM as pcrinfo --fidelity
 * (pcr_jpeg_decode_luma, pcr_msssim_compare), so the stored value is what a reader
 * of that level would measure. The reference's pyramid is built once per image.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/fidelity.h"
#include "pcrfs/writer.h"
#include "common/internal.h"

int pcr_quality_measure(const uint8_t *data, size_t len, const struct pcr_split *split,
                        const struct pcr_jpeg_info *info, unsigned levels, double *ssim, char *why,
                        size_t whylen)
{
    struct pcr_msssim_ref *ref = NULL;
    uint8_t *luma = NULL, *buf = NULL, *prev = NULL;
    unsigned w, h, lw, lh, k, top;
    int rc;

    if (why && whylen)
        why[0] = '\0';
    if (!data || !split || split->nchunks < 1 || split->nchunks > PCR_MAX_CHUNKS || levels < 1 ||
        levels > PCR_MAX_LEVELS || len < 2 || split->end[split->nchunks - 1] + 2 != len)
        return -EINVAL;
    if (info && (uint64_t)info->width * info->height > PCR_QUALITY_MAX_PIXELS)
        return -E2BIG;
    /* levels at or past the scan count serve the whole image */
    top = split->nchunks < levels ? split->nchunks : levels;
    for (k = top; k < levels; k++)
        ssim[k - 1] = 1.0;
    if (top == 1 || levels == 1)
        return 0;

    rc = pcr_jpeg_decode_luma(data, len, &luma, &w, &h, why, whylen);
    if (rc == 0 && (uint64_t)w * h > PCR_QUALITY_MAX_PIXELS)
        rc = -E2BIG; /* the frame said otherwise than @info */
    if (rc == 0)
        rc = pcr_msssim_ref_new(luma, w, h, w, &ref);
    free(luma);
    luma = NULL;
    if (rc == 0 && !(buf = malloc(len)))
        rc = -ENOMEM;
    for (k = 1; rc == 0 && k < top; k++) {
        size_t n = split->end[k - 1];
        char reason[200] = "";

        memcpy(buf, data, n);
        buf[n++] = 0xFF;
        buf[n++] = 0xD9;
        rc = pcr_jpeg_decode_luma(buf, n, &luma, &lw, &lh, reason, sizeof(reason));
        if (rc == 0 && prev && lw == w && lh == h && !memcmp(luma, prev, (size_t)w * h)) {
            /* A scan of chroma only (levels 3, 4, 8, 9 of libjpeg's script for YCbCr)
             * leaves the luma as it was: the same value, without the comparison,
             * which is most of the cost. */
            ssim[k - 1] = ssim[k - 2];
        } else if (rc == 0) {
            rc = pcr_msssim_compare(ref, luma, lw, lh, lw, &ssim[k - 1]);
        }
        free(prev);
        prev = luma;
        luma = NULL;
        if (rc == -EINVAL)
            pcr_errf(why, whylen, "level %u: %s", k,
                     reason[0] ? reason : "its size differs from the full image's");
    }
    free(prev);
    free(buf);
    pcr_msssim_ref_free(ref);
    return rc;
}
