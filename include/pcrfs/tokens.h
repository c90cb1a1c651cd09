/* pcrfs — token grids (SeiT; pcrfs(1), tokens): NPY files, the token codec, token shards
 * and the SeiT release-format reader.
 *
 * A token grid is H x W unsigned 16-bit token values (H, W in 1..PCR_TOK_MAX_SIDE,
 * H*W <= PCR_TOK_MAX_TOKENS), row-major. The store keeps every grid of a dataset as
 * one small blob; the /tokens view serves it back as a NumPy .npy file (v1.0, dtype
 * <u2, shape (H, W)) holding exactly the values given at import.
 *
 * Encoding, in the order SeiT published it:
 *   1. frequency re-indexing: the most frequent token value becomes rank 0, the next
 *      rank 1, ... (ties by value), so small ranks dominate;
 *   2. for the zstd coder, SeiT's escape byte code on the ranks (see below);
 *   3. an entropy coder chosen per store, recorded in the model:
 *      PCR_TOK_HUFFMAN   canonical Huffman over the ranks themselves (codes up to 20
 *                        bits, table-driven decoding, ~3 us per 32x32 grid). The escape
 *                        step is skipped: a Huffman code over the tokens is their
 *                        optimal prefix code, and escape bytes + a byte Huffman code are
 *                        just another prefix code over the tokens, so they cannot do
 *                        better on the data they were trained on (measured: 988 vs 1002
 *                        B/image on a Zipf-like set, 1095 vs 1128 on a near-uniform one);
 *      PCR_TOK_ZSTD_DICT zstd over the escape bytes with a dictionary trained on the
 *                        dataset (ZDICT_trainFromBuffer); exploits repeated tokens and
 *                        patterns (flat regions) that an order-0 code cannot, at about
 *                        twice Huffman's decoding time.
 *
 * The escape byte code (SeiT, extended). A value v becomes
 *   v < 255           one byte  [v]
 *   255 <= v < 510    two bytes [255, v - 255]                  (SeiT's code)
 *   510 <= v <= 65535 four bytes [255, 255, (v - 510) >> 8, (v - 510) & 255]
 * The third form is our extension for codebooks over 510 entries, used only inside
 * the store (the zstd coder's ranks): SeiT's encoder never writes [255, 255] (its
 * second byte is v - 255 <= 254 for v < 510), but SeiT's reader accepts it and
 * decodes it otherwise, so SeiT's files are read with SeiT's rule instead
 * (pcr_seit_decode() below).
 *
 * Thread safety: a loaded model, an open shard and an open SeiT reader are read-only
 * and may be used from any number of threads at once. Every function that takes
 * bytes from a file or a store treats them as untrusted: it never reads or writes
 * out of bounds and reports a malformed input as an error, never by crashing.
 */
#ifndef PCRFS_TOKENS_H
#define PCRFS_TOKENS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCR_TOK_MAX_SIDE   4096u
#define PCR_TOK_MAX_TOKENS (1u << 20) /* H*W; 1024 for SeiT's 32x32 */

/* ===== NPY files ============================================================== */

#define PCR_NPY_MAX_DIMS 8

/* A parsed .npy buffer. Integer (i1..i8, u1..u8) and float (f2, f4, f8) dtypes of
 * either byte order are parsed; the conversions below say what they accept. */
struct pcr_npy {
    unsigned major, minor; /* 1.0 or 2.0 */
    char kind;             /* 'i' signed, 'u' unsigned, 'f' float */
    unsigned itemsize;     /* bytes per element: 1, 2, 4 or 8 */
    bool big_endian;       /* '>' in the descr */
    bool fortran_order;    /* as written in the header */
    unsigned ndim;         /* 0..PCR_NPY_MAX_DIMS */
    uint64_t shape[PCR_NPY_MAX_DIMS];
    uint64_t count;      /* product of shape (1 for ndim 0) */
    size_t data_offset;  /* header size: the data starts here */
    const uint8_t *data; /* into the parsed buffer; count * itemsize bytes */
    char descr[8];       /* the dtype string as written, e.g. "<u2" */
};

/* Parse and validate a whole .npy file held in @buf.
 *
 * Checks: magic "\x93NUMPY"; version 1.0 or 2.0 (3.0 and others rejected); header
 * length within the buffer; the header is a Python dict literal with exactly the
 * keys 'descr', 'fortran_order', 'shape' (strings in ' or "), only spaces and a
 * newline after it; descr is one of the dtypes above (structured dtypes, objects,
 * strings, bool, complex rejected); every dimension < 2^40; the data is exactly
 * count * itemsize bytes (a shorter file is "truncated", a longer one has "trailing
 * bytes": both rejected).
 *
 * @return 0 and *out (pointing into @buf); -EINVAL with a one-line reason in @err
 *         (the message does not name the file: callers prefix it).
 */
int pcr_npy_parse(const void *buf, size_t len, struct pcr_npy *out, char *err, size_t errlen);

/* Element @i (flat, in file order) of an integer array.
 * @return 0; -EINVAL not an integer dtype or @i >= count; -ERANGE a u8 value above
 *         INT64_MAX. */
int pcr_npy_get_int(const struct pcr_npy *a, uint64_t i, int64_t *v);

/* Convert a parsed 2-D integer array into a token grid.
 *
 * Requires ndim == 2, C order, an integer dtype, H and W in 1..PCR_TOK_MAX_SIDE,
 * H*W <= PCR_TOK_MAX_TOKENS and <= @cap, every value in 0..65535.
 * @return 0 with *h, *w and @out[0..H*W) filled; -EINVAL with the reason in @err:
 *         "dtype '<f4' is not an integer type", "expected a 2-D array, got 3-D
 *         (2, 3, 4)", "Fortran-ordered array ...", "negative value -3 at [4, 7]",
 *         "value 70000 at [0, 1] exceeds 65535", ...; -E2BIG more than @cap tokens.
 */
int pcr_npy_to_grid(const struct pcr_npy *a, uint16_t *out, size_t cap, unsigned *h, unsigned *w,
                    char *err, size_t errlen);

/* Read @path and convert it as above. *grid is malloc()ed (free() it).
 * Every message in @err starts with @path.
 * @return 0; -errno of open/read; -EINVAL (bad .npy, reason given); -ENOMEM. */
int pcr_npy_load_grid(const char *path, uint16_t **grid, unsigned *h, unsigned *w, char *err,
                      size_t errlen);

/* Validate a codebook: a 2-D [K, D] float array in C order, K, D >= 1, and
 * K >= @min_entries (pass the store's largest token value + 1, or 0 for no check).
 * @return 0; -EINVAL with the reason in @err. */
int pcr_npy_check_codebook(const struct pcr_npy *a, uint64_t min_entries, char *err, size_t errlen);

/* Size of the .npy file the /tokens view serves for an H x W grid: the header
 * numpy.save() writes for a C-ordered (H, W) '<u2' array (v1.0, padded with spaces
 * and a newline to a multiple of 64 bytes, as numpy >= 1.24 does, growth padding
 * included) plus 2*H*W data bytes. Exact and computed from H, W alone.
 * @return the size, or 0 if H or W is 0 or above PCR_TOK_MAX_SIDE. */
size_t pcr_npy_grid_size(unsigned h, unsigned w);
/* Length of that header alone (the data starts there). 0 as above. */
size_t pcr_npy_grid_header_len(unsigned h, unsigned w);

/* Write the .npy file for @grid into @out: byte for byte what numpy.save() writes
 * for numpy.asarray(grid, dtype='<u2').reshape(h, w).
 * @return pcr_npy_grid_size(h, w), or 0 if @cap is smaller or the shape invalid. */
size_t pcr_npy_write_grid(unsigned h, unsigned w, const uint16_t *grid, uint8_t *out, size_t cap);

/* ===== The escape byte code =================================================== */

/* Largest encoding of @n values (4 bytes each). */
static inline size_t pcr_tok_escape_bound(size_t n)
{
    return 4 * n;
}

/* Encode @n values into @out (at least pcr_tok_escape_bound(n) bytes).
 * @return bytes written. */
size_t pcr_tok_escape_encode(const uint16_t *v, size_t n, uint8_t *out);

/* Decode @len bytes. Writes at most @cap values to @out (which may be NULL if @cap
 * is 0) but counts them all, so a caller learns how many values a blob holds.
 * @return the number of values in the stream (may exceed @cap);
 *         -EINVAL the stream ends inside an escape sequence, or a four-byte sequence
 *                 encodes a value above 65535. */
ssize_t pcr_tok_escape_decode(const uint8_t *in, size_t len, uint16_t *out, size_t cap);

/* ===== The codec ============================================================== */

enum pcr_tok_coder {
    PCR_TOK_AUTO = 0, /* training only: measure both, keep the smaller */
    PCR_TOK_HUFFMAN = 1,
    PCR_TOK_ZSTD_DICT = 2,
};

/* "huffman", "zstd-dict", "auto" (for store metadata and messages). */
const char *pcr_tok_coder_name(enum pcr_tok_coder c);

struct pcr_tok_model;
struct pcr_tok_trainer;

struct pcr_tok_train_opts {
    enum pcr_tok_coder coder; /* AUTO (default) measures both coders on held-out grids */
    int zstd_level;           /* 0: PCR_TOK_ZSTD_LEVEL */
    size_t dict_size;         /* bytes, 0: PCR_TOK_DICT_SIZE */
    unsigned sample_grids;    /* grids kept (reservoir sample, fixed seed) to train the
                               * dictionary and to compare coders; 0: PCR_TOK_SAMPLES */
};
#define PCR_TOK_ZSTD_LEVEL 19
#define PCR_TOK_DICT_SIZE  (32 * 1024)
#define PCR_TOK_SAMPLES    20000u

/* What training saw and chose (for the build report and BENCHMARKS.md). */
struct pcr_tok_train_report {
    uint64_t grids, tokens;
    unsigned symbols;       /* distinct token values */
    unsigned max_value;     /* largest token value */
    double entropy;         /* order-0 empirical entropy, bits per token */
    double huffman_bits;    /* bits per token of the Huffman code on all grids */
    unsigned sample_grids;  /* grids in the sample */
    unsigned heldout_grids; /* of which held out from dictionary training */
    uint64_t heldout_tokens;
    uint64_t huffman_bytes;   /* both coders' blob bytes over the held-out grids */
    uint64_t zstd_bytes;      /* (0 if that coder was not built) */
    enum pcr_tok_coder coder; /* the choice */
};

/* Start training. @opts may be NULL (defaults).
 * @return 0; -EINVAL bad options; -ENOMEM. */
int pcr_tok_trainer_new(const struct pcr_tok_train_opts *opts, struct pcr_tok_trainer **out);

/* Add one grid (every grid of the store, in any order; the result depends on the
 * order only through the sample). Grids may differ in shape.
 * @return 0; -EINVAL bad shape; -ENOMEM. */
int pcr_tok_trainer_add(struct pcr_tok_trainer *t, const uint16_t *grid, unsigned h, unsigned w);

/* Build the model: the re-index permutation, the Huffman code, and (unless the coder
 * is forced to HUFFMAN) a zstd dictionary trained on the sample minus every 8th grid,
 * which is held out to compare the coders fairly; AUTO keeps the one with fewer
 * held-out bytes (Huffman on a tie: faster to decode). If ZDICT cannot train (too
 * few or too uniform samples), the dictionary is the samples' raw content.
 * Frees @t in every case. @report may be NULL.
 * @return 0 and *out; -EINVAL no tokens were added; -ENOMEM; -EIO zstd failed
 *         (message in @err). */
int pcr_tok_trainer_finish(struct pcr_tok_trainer *t, struct pcr_tok_model **out,
                           struct pcr_tok_train_report *report, char *err, size_t errlen);
void pcr_tok_trainer_free(struct pcr_tok_trainer *t);

/* The serialised model, to store in the index: a pointer valid until the model is
 * freed. Format (little-endian): "PCRTOKM1", coder u8, 3 zero bytes, nseen u32,
 * rank -> value table u16[nseen]; HUFFMAN: code lengths u8[nseen + 1] (the last is
 * a guard symbol, see src/lib/tokens/tokens_internal.h); ZSTD_DICT:
 * level i32, dict length u32, dictionary; then XXH64 of all preceding bytes. */
const void *pcr_tok_model_blob(const struct pcr_tok_model *m, size_t *len);
/* XXH64 of the blob: written into every shard header to pair shards with models. */
uint64_t pcr_tok_model_id(const struct pcr_tok_model *m);
enum pcr_tok_coder pcr_tok_model_coder(const struct pcr_tok_model *m);
/* Number of token values with a code (those seen in training). */
unsigned pcr_tok_model_symbols(const struct pcr_tok_model *m);

/* Load a model from untrusted bytes: checks the magic, the checksum, every length,
 * that the rank table is a set of distinct values, that the code lengths form a
 * prefix code, and that zstd accepts the dictionary.
 * @return 0 and *out; -EINVAL with the reason in @err; -ENOMEM. */
int pcr_tok_model_load(const void *blob, size_t len, struct pcr_tok_model **out, char *err,
                       size_t errlen);
void pcr_tok_model_free(struct pcr_tok_model *m);

/* Largest blob pcr_tok_encode() may write for @ntokens tokens. */
size_t pcr_tok_encode_bound(const struct pcr_tok_model *m, size_t ntokens);

/* Encode one grid. Thread-safe (zstd: one compression context per thread, the
 * compression dictionary is built on the first call).
 * @return the blob's length; -EINVAL bad shape; -ENOENT a value the model has no code
 *         for (HUFFMAN only: it was not seen in training); -ENOSPC @cap too small;
 *         -ENOMEM; -EIO zstd failed. */
ssize_t pcr_tok_encode(const struct pcr_tok_model *m, const uint16_t *grid, unsigned h, unsigned w,
                       uint8_t *out, size_t cap);

/* Decode one untrusted blob into @out[0..h*w). The blob must decode to exactly h*w
 * tokens and use all its bytes. Thread-safe (zstd: one decompression context per
 * thread, kept until the thread exits).
 * @return 0; -EINVAL the blob is malformed or does not hold h*w tokens (the contents
 *         of @out are then unspecified); -ENOMEM. */
int pcr_tok_decode(const struct pcr_tok_model *m, const uint8_t *blob, size_t len, unsigned h,
                   unsigned w, uint16_t *out);

/* ===== Token shards =========================================================== */

/* A shard file: a 32-byte header then the blobs back to back.
 *   0  8  magic "PCRTOKS\n"
 *   8  4  version (1), little-endian like every field
 *  12  4  number of blobs
 *  16  8  model id (pcr_tok_model_id()) the blobs were encoded with
 *  24  8  total blob bytes (the file is exactly 32 + this)
 * The shard does not locate its blobs: the index holds each blob's (shard, offset,
 * length) as returned by pcr_tokshard_add(). */
#define PCR_TOKSHARD_HEADER  32u
#define PCR_TOKSHARD_VERSION 1u

/* A shard header's fields. */
struct pcr_tokshard_hdr {
    uint32_t version;
    uint32_t count;      /* blobs */
    uint64_t model_id;   /* pcr_tok_model_id() of the model the blobs were encoded with */
    uint64_t blob_bytes; /* the file is PCR_TOKSHARD_HEADER + this */
};

/* Decode a shard header from its PCR_TOKSHARD_HEADER bytes (untrusted; no I/O, so a
 * reader that has the bytes already, such as the store's record cache, checks them
 * with it: src/lib/store/read.c, the one reader of shards). *out is filled whenever the magic
 * matches.
 * @return 0; -EINVAL not a token shard (bad magic); -ENOTSUP another version. The
 *         caller checks count, model_id and blob_bytes against what it expects. */
int pcr_tokshard_hdr_decode(const uint8_t hdr[PCR_TOKSHARD_HEADER], struct pcr_tokshard_hdr *out);
/* Encode @h (magic included) into @out. */
void pcr_tokshard_hdr_encode(const struct pcr_tokshard_hdr *h, uint8_t out[PCR_TOKSHARD_HEADER]);

struct pcr_tokshard_writer;

/* Create @path (must not exist). @return 0; -errno of open (message in @err). */
int pcr_tokshard_create(const char *path, uint64_t model_id, struct pcr_tokshard_writer **out,
                        char *err, size_t errlen);
/* Append a blob (1..UINT32_MAX bytes); *offset receives its offset in the file.
 * @return 0; -EINVAL empty or too large; -EFBIG more than UINT32_MAX blobs; -errno of
 *         write(2). */
int pcr_tokshard_add(struct pcr_tokshard_writer *w, const void *blob, size_t len, uint64_t *offset);
/* Write the header, fsync, close, free @w in every case.
 * @return 0; -errno (message in @err; the file is then removed). */
int pcr_tokshard_finish(struct pcr_tokshard_writer *w, char *err, size_t errlen);
/* Close, remove the file, free @w. */
void pcr_tokshard_abort(struct pcr_tokshard_writer *w);

/* ===== SeiT release format ==================================================== */

/* SeiT's published token files:
 *   data.bin[.gz]   concatenated escape-coded images, read as SeiT's reader reads
 *                   them (pcr_seit_decode(): the code above without its third form);
 *   index.npy[.gz]  N + 1 non-decreasing integer start offsets into data.bin;
 *   labels          text, one non-negative integer per line, N lines (lines end
 *                   in LF, CRLF or a lone CR, as Python's universal newlines);
 *   names           optional text, one relative path per line, N lines
 *                   ("n01440764/n01440764_10026.JPEG").
 * Gzip is recognised by its magic bytes, not the file name. Without names, image i
 * is named "<label>/<k>" with k its index within its label, both zero-padded to the
 * widest value, so sorting by name keeps label and file order (ImageFolder numbers
 * classes by sorted directory name, so the class index equals the label when every
 * label 0..max occurs).
 */
struct pcr_seit_paths {
    const char *data;   /* required */
    const char *index;  /* NULL: data's path with the last "data.bin" of its last
                         * component replaced by "index.npy" (SeiT's loader replaces
                         * every "data.bin" in the whole path, directories too: the
                         * same file for SeiT's own names); with or without a ".gz"
                         * suffix, whichever exists */
    const char *labels; /* required */
    const char *names;  /* optional */
};

struct pcr_seit_opts {
    unsigned h, w; /* grid shape; 0, 0: 32 x 32 */
};

#define PCR_SEIT_MAX_LABEL ((1u << 24) - 1)

struct pcr_seit;

/* Load and validate everything but the grids: offsets (non-decreasing, within the
 * data), label count == image count, labels 0..PCR_SEIT_MAX_LABEL, names (count,
 * each a clean relative path: no empty, "." or ".." component, no leading '/',
 * unique). The decompressed data is held in memory.
 * @return 0 and *out; -EINVAL with a message naming the file and the item (line or
 *         image number) in @err; -ENOTSUP a .gz input and no zlib; -errno; -ENOMEM. */
int pcr_seit_open(const struct pcr_seit_paths *paths, const struct pcr_seit_opts *opts,
                  struct pcr_seit **out, char *err, size_t errlen);
void pcr_seit_close(struct pcr_seit *s);

uint64_t pcr_seit_count(const struct pcr_seit *s);

/* SeiT's reader on one image's bytes: a byte b < 255 is the value b, or 255 + b right
 * after a 255; a 255 only marks the next value (a run of them counts as one) and a
 * 255 at the end is dropped, so every value is in 0..509 and every byte string
 * decodes. Writes at most @cap values to @out (NULL if @cap is 0) but counts them all.
 * *@odd (if not NULL) gets the PCR_SEIT_* bits below of what SeiT's encoder would
 * not have written. @return the number of values. */
#define PCR_SEIT_REPEATED_ESCAPE 1u /* 255 right after 255 */
#define PCR_SEIT_TRAILING_ESCAPE 2u /* 255 at the end */
size_t pcr_seit_decode(const uint8_t *in, size_t len, uint16_t *out, size_t cap, unsigned *odd);
/* The images holding such bytes (found at open): their number, the first one and
 * the PCR_SEIT_* bits seen over all of them. */
uint64_t pcr_seit_odd(const struct pcr_seit *s, uint64_t *first, unsigned *kinds);
void pcr_seit_shape(const struct pcr_seit *s, unsigned *h, unsigned *w);

struct pcr_seit_item {
    uint64_t label;
    uint64_t index_in_label; /* 0-based, in file order */
    uint64_t offset, length; /* the image's bytes in data.bin */
};
/* @return 0; -ENOENT @i >= count. */
int pcr_seit_item(const struct pcr_seit *s, uint64_t i, struct pcr_seit_item *out);

/* The relative path of image @i (from the names file, or "<label>/<k>").
 * @return its length (copied NUL-terminated); -ENAMETOOLONG @len too small; -ENOENT. */
ssize_t pcr_seit_name(const struct pcr_seit *s, uint64_t i, char *buf, size_t len);

/* Decode image @i into @grid[0..h*w) with pcr_seit_decode().
 * @return 0; -ENOENT @i >= count; -EINVAL (message in @err naming the image) it does
 *         not hold exactly h*w values. */
int pcr_seit_grid(const struct pcr_seit *s, uint64_t i, uint16_t *grid, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
