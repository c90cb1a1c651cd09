/* libFuzzer target: pcr_jpeg_transcode() then pcr_jpeg_split() and pcr_jpeg_decode()
 * of its output.
 *
 * Untrusted input must never crash, hang or exit; on failure there must be a
 * one-line reason and no output; on success the output must split into
 * 1..PCR_MAX_CHUNKS scans and decode without a libjpeg warning, with the geometry
 * the transcoder reported.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include "pcrfs/jpeg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pcr_transcode_opts opts = {.drop_markers = size > 0 && (data[size - 1] & 1)};
    struct pcr_jpeg_info info, dinfo;
    struct pcr_split sp;
    uint8_t *out = NULL;
    size_t outlen = 0;
    char why[256];

    int rc = pcr_jpeg_transcode(data, size, &opts, &out, &outlen, &info, why, sizeof(why));
    if (rc != 0) {
        if ((rc != -EINVAL && rc != -ENOMEM) || out || outlen || !why[0] || strchr(why, '\n'))
            abort();
        return 0;
    }
    if (pcr_jpeg_split(out, outlen, &sp) != 0 || sp.nchunks < 1 || sp.nchunks > PCR_MAX_CHUNKS)
        abort();
    if (pcr_jpeg_decode(out, outlen, NULL, NULL, &dinfo, why, sizeof(why)) != 0)
        abort(); /* the transcoder wrote a JPEG that libjpeg warns about */
    if (dinfo.width != info.width || dinfo.height != info.height ||
        dinfo.components != info.components)
        abort();
    free(out);
    return 0;
}
