/* libFuzzer target: the .npy reader (pcr_npy_parse and the conversions behind it).
 *
 * Untrusted .npy files arrive from the user's token tree and SeiT's index files.
 * Beyond "no crash, no out-of-bounds access", it checks one property: a grid the
 * reader accepts survives the writer and the reader again unchanged.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint16_t grid[PCR_TOK_MAX_TOKENS], back[PCR_TOK_MAX_TOKENS];
    struct pcr_npy a, b;
    char err[256];
    unsigned h, w, h2, w2;
    int64_t v;

    if (pcr_npy_parse(data, size, &a, err, sizeof(err)) != 0)
        return 0;
    assert(a.data_offset <= size && a.count * a.itemsize == size - a.data_offset);
    for (uint64_t i = 0; i < a.count && i < 64; i++)
        (void)pcr_npy_get_int(&a, i, &v);
    (void)pcr_npy_get_int(&a, a.count, &v);
    (void)pcr_npy_check_codebook(&a, 391, err, sizeof(err));
    if (pcr_npy_to_grid(&a, grid, PCR_TOK_MAX_TOKENS, &h, &w, err, sizeof(err)) == 0) {
        size_t n = pcr_npy_grid_size(h, w);
        uint8_t *out = malloc(n);
        assert(out && pcr_npy_write_grid(h, w, grid, out, n) == n);
        assert(pcr_npy_parse(out, n, &b, err, sizeof(err)) == 0);
        assert(pcr_npy_to_grid(&b, back, PCR_TOK_MAX_TOKENS, &h2, &w2, err, sizeof(err)) == 0);
        assert(h2 == h && w2 == w && memcmp(grid, back, (size_t)h * w * 2) == 0);
        free(out);
    }
    return 0;
}
