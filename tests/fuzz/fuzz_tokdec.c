/* libFuzzer target: everything that decodes token bytes from a store or a SeiT file.
 *
 * The first input byte picks the parser:
 *   0  pcr_tok_model_load() on the rest (a model blob from a damaged index);
 *   1  pcr_tok_decode() of the rest with a fixed Huffman model (K = 391);
 *   2  the same with a fixed zstd-dictionary model;
 *   3  pcr_tok_escape_decode() of the rest (SeiT data);
 *   4  pcr_huf_dec_init() with code lengths from the input, then decoding the rest
 *      (the canonical decoder's slow path must stay inside its tables for any
 *      code that passes validation);
 *   5  pcr_tok_model_load() like 0, but with the model's trailing XXH64 recomputed
 *      first: a mutated model almost never has the right checksum, so mode 0 alone
 *      stops at the checksum and never reaches the parser behind it (the rank table,
 *      the code lengths, the dictionary). The next byte k says that the last k bytes
 *      are not part of the model but a blob to decode with it, as a 1x16 grid, if it
 *      loads.
 * For 1 and 2 the next byte picks the grid shape. A blob that decodes must encode
 * back to a blob that decodes to the same grid.
 * Seeds: PCR_FUZZ_SEEDS=DIR fuzz_tokdec -runs=0 writes a valid input per mode to DIR.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/checksum.h"
#include "pcrfs/tokens.h"
#include "common/le.h"
#include "tokens/tokens_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pcr_tok_model *models[3];

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const unsigned shapes[][2] = {{32, 32}, {16, 16}, {1, 1}, {7, 3}, {1, 64}, {64, 64}};

static void put_seed(const char *dir, int k, uint8_t mode, uint8_t arg, const void *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/seed-%d-%d", dir, mode, k);
    f = fopen(path, "wb");
    if (!f)
        return;
    fputc(mode, f);
    if (mode == 1 || mode == 2)
        fputc(arg, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

/* Valid inputs for every mode can only be made here, where the fixed models are:
 * PCR_FUZZ_SEEDS=DIR writes them to DIR (then start the fuzzer with DIR as corpus). */
static void write_seeds(const char *dir, uint16_t (*g)[1024])
{
    static uint8_t blob[1 << 16];
    int k = 0;

    for (int c = PCR_TOK_HUFFMAN; c <= PCR_TOK_ZSTD_DICT; c++) {
        size_t len;
        const void *mb = pcr_tok_model_blob(models[c], &len);
        put_seed(dir, k++, 0, 0, mb, len);
        for (unsigned s = 0; s < 5; s++) { /* the 64x64 shape needs 4 grids: skipped */
            ssize_t n =
                pcr_tok_encode(models[c], g[s], shapes[s][0], shapes[s][1], blob, sizeof(blob));
            if (n > 0)
                put_seed(dir, k++, (uint8_t)c, (uint8_t)s, blob, (size_t)n);
        }
    }
    put_seed(dir, k++, 3, 0, blob, pcr_tok_escape_encode(g[0], 1024, blob));
    /* Mode 4: lengths 1, 2, 3, 3 (guard last), then some bits. */
    memcpy(blob, "\x02\x01\x02\x03\x03\x4f\xa7", 7);
    put_seed(dir, k++, 4, 0, blob, 7);
    /* Mode 5: each model with a stale checksum (mode 5 fixes it) and no blob. */
    for (int c = PCR_TOK_HUFFMAN; c <= PCR_TOK_ZSTD_DICT; c++) {
        size_t len;
        const void *mb = pcr_tok_model_blob(models[c], &len);

        if (len + 1 > sizeof(blob))
            continue;
        blob[0] = 0; /* k = 0 */
        memcpy(blob + 1, mb, len);
        memset(blob + len - 7, 0, 8);
        put_seed(dir, k++, 5, 0, blob, len + 1);
    }
}

/* Mode 5: load @len bytes at @p as a model after recomputing its checksum, then
 * decode @blob with it. */
static void load_fixed(const uint8_t *p, size_t len, const uint8_t *blob, size_t bloblen)
{
    static uint8_t buf[1 << 20];
    static uint16_t grid[16];
    struct pcr_tok_model *m;
    char err[256];

    if (len < 8 || len > sizeof(buf))
        return;
    memcpy(buf, p, len);
    pcr_put_le64(buf + len - 8, pcr_xxh64(buf, len - 8));
    if (pcr_tok_model_load(buf, len, &m, err, sizeof(err)) != 0)
        return;
    (void)pcr_tok_decode(m, blob, bloblen, 1, 16, grid);
    pcr_tok_model_free(m);
}

/* Fixed models trained on deterministic, mildly skewed, spatially repetitive grids. */
static void init_models(void)
{
    static uint16_t g[64][1024];
    uint64_t st = 1;
    char err[256];

    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 1024; j++)
            g[i][j] = (j && rnd(&st) % 3 == 0)
                          ? g[i][j - 1]
                          : (uint16_t)(rnd(&st) % 391 * (rnd(&st) % 391) / 391);
    for (int c = PCR_TOK_HUFFMAN; c <= PCR_TOK_ZSTD_DICT; c++) {
        struct pcr_tok_train_opts o = {
            .coder = (enum pcr_tok_coder)c, .dict_size = 4096, .zstd_level = 3};
        struct pcr_tok_trainer *t;
        if (pcr_tok_trainer_new(&o, &t))
            abort();
        for (int i = 0; i < 64; i++)
            pcr_tok_trainer_add(t, g[i], 32, 32);
        if (pcr_tok_trainer_finish(t, &models[c], NULL, err, sizeof(err)))
            abort();
    }
    if (getenv("PCR_FUZZ_SEEDS"))
        write_seeds(getenv("PCR_FUZZ_SEEDS"), g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint16_t out[4096 + 64], again[4096 + 64];
    static uint8_t blob[1 << 16];
    char err[256];

    if (!models[1])
        init_models();
    if (size < 1)
        return 0;
    switch (data[0] % 6) {
    case 0: {
        struct pcr_tok_model *m;
        if (pcr_tok_model_load(data + 1, size - 1, &m, err, sizeof(err)) == 0)
            pcr_tok_model_free(m);
        break;
    }
    case 1:
    case 2: {
        const struct pcr_tok_model *m = models[data[0] % 6];
        unsigned h, w;
        ssize_t len;
        if (size < 2)
            return 0;
        h = shapes[data[1] % 6][0];
        w = shapes[data[1] % 6][1];
        if (pcr_tok_decode(m, data + 2, size - 2, h, w, out) != 0)
            break;
        /* Every decoded value has a code (Huffman decodes only seen values). */
        len = pcr_tok_encode(m, out, h, w, blob, sizeof(blob));
        assert(len > 0);
        assert(pcr_tok_decode(m, blob, (size_t)len, h, w, again) == 0);
        assert(memcmp(out, again, (size_t)h * w * 2) == 0);
        break;
    }
    case 3:
        (void)pcr_tok_escape_decode(data + 1, size - 1, out, 4096);
        break;
    case 4: {
        struct pcr_huf_dec d;
        unsigned nsym;
        if (size < 3)
            return 0;
        nsym = 2 + data[1] % 64;
        if (size < 2 + nsym)
            return 0;
        if (pcr_huf_dec_init(&d, data + 2, nsym, NULL) == 0) {
            (void)pcr_huf_decode(&d, data + 2 + nsym, size - 2 - nsym, out, 1024);
            pcr_huf_dec_free(&d);
        }
        break;
    }
    case 5: {
        size_t k;

        if (size < 2)
            return 0;
        k = data[1] <= size - 2 ? data[1] : 0;
        load_fixed(data + 2, size - 2 - k, data + size - k, k);
        break;
    }
    }
    return 0;
}
