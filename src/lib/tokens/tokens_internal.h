/* pcrfs — helpers shared by the token modules (npy.c, huffman.c, tokcodec.c,
 * tokshard.c, seit.c), the token tests and the benchmark; not installed. The public
 * API is pcrfs/tokens.h. */
#ifndef PCRFS_TOKENS_INTERNAL_H
#define PCRFS_TOKENS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "pcrfs/tokens.h"

/* ---- Canonical Huffman over an alphabet of up to 65536 symbols ----------------
 *
 * Codes are canonical (RFC 1951 order: shorter codes first, equal lengths by symbol)
 * and written MSB-first, so a code is its own big-endian bit string and a decoder
 * can find a symbol by comparing left-aligned bit windows. Lengths are limited to
 * PCR_HUF_MAXLEN so a code always fits in one 64-bit refill with room to spare.
 *
 * The guard. A code over n symbols has n + 1 entries: the last, the guard, is never
 * encoded and is an error when decoded. It always has a longest length and the
 * highest index, so it owns the all-ones codeword (or no codeword is all ones), and
 * the last byte is padded with one bits. Then a blob decodes only with its exact
 * symbol count: one symbol fewer leaves a real code in the padding, which is never
 * all ones; one more must decode the padding, which is at best the guard. With zero
 * padding, a grid ending in the all-zeros code of the most frequent token would
 * also decode as one token shorter. The guard costs about 2^-20 bit per symbol.
 */
#define PCR_HUF_MAXLEN 20
#define PCR_HUF_MAXSYM 65536 /* real symbols, the guard not counted */
/* The primary decoding table: 4 Ki entries * 4 B = 16 KiB, half of L1d. With 11 bits
 * an 8192-entry codebook decoded ~10% slower (391 entries: no difference). */
#define PCR_HUF_TABLEBITS 12

struct pcr_huf_dec {
    unsigned nsym; /* guard included: the guard is nsym - 1 */
    unsigned maxlen;
    unsigned slow_start; /* first length the slow path tries: TABLEBITS + 1, or 1 if the
                          * guard is short enough to sit in (be left out of) the table */
    /* Primary table indexed by the next PCR_HUF_TABLEBITS bits: (symbol << 8) | length
     * (the symbol through the map given to pcr_huf_dec_init()),
     * or 0 when the code is longer than the table, is the guard or is no code (then
     * the slow path decides). */
    uint32_t table[1u << PCR_HUF_TABLEBITS];
    /* Slow path, canonical order: limit[l] is the first left-aligned (32-bit) window
     * value that is NOT a code of length <= l; base[l] maps a length-l code to its
     * position in sorted[]. */
    uint64_t limit[PCR_HUF_MAXLEN + 2];
    int32_t base[PCR_HUF_MAXLEN + 1];
    uint32_t *sorted; /* symbols (mapped) in canonical order; the guard's slot unused */
    size_t guard_pos; /* the guard's index in sorted[] */
};

struct pcr_huf_enc {
    unsigned nsym;  /* guard included */
    uint32_t *code; /* code[s] right-aligned, valid if len[s] != 0 */
    uint8_t *len;
};

/* Code lengths for @n real symbols with counts @freq[0..n) (0 = unused: length 0),
 * plus the guard at @len[n]: @len must hold n + 1 bytes. Lengths are limited to
 * @maxlen (<= PCR_HUF_MAXLEN; 2^maxlen > number of used symbols).
 * @return 0, -EINVAL (no used symbol, bad arguments), -ENOMEM. */
int pcr_huf_lengths(const uint64_t *freq, unsigned n, unsigned maxlen, uint8_t *len);

/* Validate @len[0..nsym) (guard last, non-zero; each <= PCR_HUF_MAXLEN; Kraft sum
 * <= 1; 2 <= nsym <= PCR_HUF_MAXSYM + 1) and build the tables.
 * The decoder outputs @map[symbol] (@map: nsym - 1 entries, or NULL for the symbol
 * itself), so the token codec gets token values straight from the table instead of
 * ranks it would map in a second pass.
 * @return 0, -EINVAL (not such a code), -ENOMEM. */
int pcr_huf_enc_init(struct pcr_huf_enc *e, const uint8_t *len, unsigned nsym);
int pcr_huf_dec_init(struct pcr_huf_dec *d, const uint8_t *len, unsigned nsym, const uint16_t *map);
void pcr_huf_enc_free(struct pcr_huf_enc *e);
void pcr_huf_dec_free(struct pcr_huf_dec *d);

/* Upper bound on the bytes pcr_huf_encode() writes for @n symbols. */
size_t pcr_huf_bound(const struct pcr_huf_enc *e, size_t n);
/* Encode @n symbols; the last byte is padded with one bits.
 * @return bytes written; -ENOENT a symbol has no code (or is the guard); -ENOSPC
 * @cap too small. */
long pcr_huf_encode(const struct pcr_huf_enc *e, const uint16_t *sym, size_t n, uint8_t *out,
                    size_t cap);
/* Decode exactly @n symbols that must consume all of @in: the stream may end only
 * in fewer than 8 one bits of padding. @return 0, -EINVAL (no such code, the guard,
 * truncated, trailing bytes, bad padding). Never reads outside [in, in+len). */
int pcr_huf_decode(const struct pcr_huf_dec *d, const uint8_t *in, size_t len, uint16_t *out,
                   size_t n);

/* ---- Codec internals (tokcodec.c, shared with toktrain.c, the benchmark, tests) -- */

#define PCR_TOK_NVALUES  65536u      /* token values: 0..65535 */
#define PCR_TOK_MAX_DICT (16u << 20) /* largest zstd dictionary a model may hold */

struct pcr_tok_model;
/* Serialise a model (format: pcr_tok_model_blob() in pcrfs/tokens.h): @value the
 * rank -> value table of @nseen entries; @lens (nseen + 1 code lengths, HUFFMAN) or
 * @level and @dict (ZSTD_DICT). *out is malloc()ed. @return 0, -ENOMEM. */
int pcr_tok_model_serialise(enum pcr_tok_coder coder, unsigned nseen, const uint16_t *value,
                            const uint8_t *lens, int level, const void *dict, size_t dictlen,
                            uint8_t **out, size_t *outlen);
/* A grid shape the codec takes: H, W in 1..PCR_TOK_MAX_SIDE, H*W <= PCR_TOK_MAX_TOKENS. */
bool pcr_tok_shape_ok(unsigned h, unsigned w);
/* ranks[i] = the model's rank of grid[i] (the frequency re-indexing). */
void pcr_tok_model_ranks(const struct pcr_tok_model *m, const uint16_t *grid, size_t n,
                         uint16_t *ranks);

/* ---- Files -------------------------------------------------------------------- */

/* Read a whole file into a malloc()ed buffer. If it starts with the gzip magic
 * (1F 8B) and @gunzip, it is decompressed (all members) when the library was built
 * with zlib, else -ENOTSUP. A message naming @path goes to @err on failure.
 * @return 0; -errno of open/read; -EINVAL corrupt gzip; -ENOTSUP; -ENOMEM; -EFBIG
 *         larger than @max bytes (after decompression). */
int pcr_tok_read_file(const char *path, bool gunzip, size_t max, uint8_t **buf, size_t *len,
                      char *err, size_t errlen);

#endif
