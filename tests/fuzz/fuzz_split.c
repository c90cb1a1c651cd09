/* libFuzzer target: pcr_jpeg_split() over arbitrary bytes.
 *
 * Besides "no crash, no out-of-bounds read" (ASan), checks the contract on success:
 * 1..PCR_MAX_CHUNKS chunks, strictly increasing ends, every chunk after the first
 * starting with a marker, and the buffer ending in FF D9 right after the last chunk.
 */
#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include "pcrfs/jpeg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pcr_split sp;
    int rc = pcr_jpeg_split(data, size, &sp);

    if (rc != 0) {
        if (rc != -EINVAL && rc != -E2BIG)
            abort();
        return 0;
    }
    if (sp.nchunks < 1 || sp.nchunks > PCR_MAX_CHUNKS)
        abort();
    for (unsigned i = 0; i < sp.nchunks; i++) {
        size_t start = i ? sp.end[i - 1] : 0;
        if (sp.end[i] <= start || sp.end[i] > size)
            abort();
        if (data[start] != 0xFF)
            abort();
    }
    if (sp.end[sp.nchunks - 1] + 2 != size || data[size - 2] != 0xFF || data[size - 1] != 0xD9)
        abort();
    return 0;
}
