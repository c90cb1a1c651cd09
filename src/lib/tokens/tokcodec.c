/* pcrfs — the token codec: SeiT's frequency re-indexing and escape byte code, then
 * canonical Huffman or zstd with a trained dictionary (see pcrfs/tokens.h).
 *
 * Why two coders. Huffman over the ranks is the optimal order-0 prefix code: within
 * a fraction of a bit of the empirical entropy, and decodes a 32x32 grid in a few
 * microseconds from a 16 KiB table. zstd with a dictionary trained on the dataset can
 * beat the order-0 entropy when grids repeat runs and patterns (flat sky, walls),
 * which a frozen tokenizer produces, but costs a frame per grid and decodes slower.
 * Which wins depends on the data, so training measures both on grids held out from
 * the dictionary's training set and the store records the choice in the model.
 *
 * Threads. A model is immutable after load except for the compression dictionary,
 * built under a mutex on the first encode (the FUSE view only decodes and never pays
 * for it). zstd contexts are per thread (a pthread key frees them at thread exit):
 * creating a ZSTD_DCtx costs more than decoding a grid (BENCHMARKS.md), and one
 * context per model per call would be needless allocation on the read path.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zdict.h>
#include "pcrfs/tokens.h"
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "common/le.h"
#include "tokens/tokens_internal.h"

#define NVALUES      PCR_TOK_NVALUES
#define MODEL_MAGIC  "PCRTOKM1"
#define MAX_DICT     PCR_TOK_MAX_DICT
#define ZSTD_MAGIC_0 0x28
#define ZSTD_MAGIC_1 0xB5
#define ZSTD_MAGIC_2 0x2F
#define ZSTD_MAGIC_3 0xFD

struct pcr_tok_model {
    enum pcr_tok_coder coder;
    unsigned nseen;          /* ranks 0..nseen-1 have codes (Huffman) */
    uint16_t rank[NVALUES];  /* value -> rank; total: unseen values rank after seen */
    uint16_t value[NVALUES]; /* rank -> value */
    struct pcr_huf_enc henc; /* HUFFMAN */
    struct pcr_huf_dec hdec;
    const uint8_t *dict; /* ZSTD_DICT: points into blob */
    size_t dictlen;
    int level;
    ZSTD_DDict *ddict;
    pthread_mutex_t lock; /* guards the lazy creation of cdict */
    ZSTD_CDict *cdict;    /* read with __atomic_load_n once set */
    uint8_t *blob;        /* the serialised model */
    size_t bloblen;
    uint64_t id; /* XXH64(blob) */
};

const char *pcr_tok_coder_name(enum pcr_tok_coder c)
{
    switch (c) {
    case PCR_TOK_AUTO:
        return "auto";
    case PCR_TOK_HUFFMAN:
        return "huffman";
    case PCR_TOK_ZSTD_DICT:
        return "zstd-dict";
    }
    return "unknown";
}

/* ---- Escape byte code --------------------------------------------------------- */

size_t pcr_tok_escape_encode(const uint16_t *v, size_t n, uint8_t *out)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned x = v[i];
        if (x < 255) {
            out[o++] = (uint8_t)x;
        } else if (x < 510) {
            out[o++] = 255;
            out[o++] = (uint8_t)(x - 255);
        } else {
            out[o++] = 255;
            out[o++] = 255;
            out[o++] = (uint8_t)((x - 510) >> 8);
            out[o++] = (uint8_t)((x - 510) & 0xff);
        }
    }
    return o;
}

ssize_t pcr_tok_escape_decode(const uint8_t *in, size_t len, uint16_t *out, size_t cap)
{
    size_t i = 0, n = 0;

    while (i < len) {
        unsigned x = in[i];
        if (x < 255) {
            i += 1;
        } else if (i + 1 >= len) {
            return -EINVAL;
        } else if (in[i + 1] < 255) {
            x = 255u + in[i + 1];
            i += 2;
        } else {
            if (len - i < 4)
                return -EINVAL;
            x = 510u + ((unsigned)in[i + 2] << 8 | in[i + 3]);
            if (x > 65535)
                return -EINVAL;
            i += 4;
        }
        if (n < cap)
            out[n] = (uint16_t)x;
        n++;
    }
    return (ssize_t)n;
}

/* ---- Per-thread scratch ------------------------------------------------------- */

struct scratch {
    ZSTD_DCtx *dctx;
    ZSTD_CCtx *cctx;
    uint8_t *a, *b; /* escape bytes; a zstd frame */
    size_t acap, bcap;
    uint16_t *r; /* ranks */
    size_t rcap;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_err;

static void scratch_free(void *p)
{
    struct scratch *s = p;

    if (!s)
        return;
    ZSTD_freeDCtx(s->dctx);
    ZSTD_freeCCtx(s->cctx);
    free(s->a);
    free(s->b);
    free(s->r);
    free(s);
}

static void scratch_init(void)
{
    scratch_err = pthread_key_create(&scratch_key, scratch_free);
}

static struct scratch *scratch_get(void)
{
    struct scratch *s;

    pthread_once(&scratch_once, scratch_init);
    if (scratch_err)
        return NULL;
    s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    return s;
}

static int grow(void **buf, size_t *cap, size_t need)
{
    void *p;

    if (*cap >= need)
        return 0;
    need = need < 4096 ? 4096 : need;
    p = realloc(*buf, need);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = need;
    return 0;
}

/* ---- Model (de)serialisation -------------------------------------------------- */

int pcr_tok_model_serialise(enum pcr_tok_coder coder, unsigned nseen, const uint16_t *value,
                            const uint8_t *lens, int level, const void *dict, size_t dictlen,
                            uint8_t **out, size_t *outlen)
{
    size_t len = 16 + 2 * (size_t)nseen + 8, o = 0;
    uint8_t *b;

    len += coder == PCR_TOK_HUFFMAN ? nseen + 1 : 8 + dictlen;
    b = malloc(len);
    if (!b)
        return -ENOMEM;
    memcpy(b, MODEL_MAGIC, 8);
    b[8] = (uint8_t)coder;
    b[9] = b[10] = b[11] = 0;
    pcr_put_le32(b + 12, nseen);
    o = 16;
    for (unsigned r = 0; r < nseen; r++, o += 2)
        pcr_put_le16(b + o, value[r]);
    if (coder == PCR_TOK_HUFFMAN) {
        memcpy(b + o, lens, nseen + 1);
        o += nseen + 1;
    } else {
        pcr_put_le32(b + o, (uint32_t)level);
        pcr_put_le32(b + o + 4, (uint32_t)dictlen);
        memcpy(b + o + 8, dict, dictlen);
        o += 8 + dictlen;
    }
    pcr_put_le64(b + o, pcr_xxh64(b, o));
    *out = b;
    *outlen = len;
    return 0;
}

void pcr_tok_model_free(struct pcr_tok_model *m)
{
    if (!m)
        return;
    pcr_huf_enc_free(&m->henc);
    pcr_huf_dec_free(&m->hdec);
    ZSTD_freeDDict(m->ddict);
    ZSTD_freeCDict(m->cdict);
    pthread_mutex_destroy(&m->lock);
    free(m->blob);
    free(m);
}

int pcr_tok_model_load(const void *blob, size_t len, struct pcr_tok_model **out, char *err,
                       size_t errlen)
{
    const uint8_t *b = blob;
    struct pcr_tok_model *m;
    uint8_t *seen = NULL;
    size_t o;
    unsigned nseen, coder, r, next;
    int rc = -EINVAL;

    *out = NULL;
    if (len < 16 + 2 + 8 || memcmp(b, MODEL_MAGIC, 8) != 0) {
        pcr_errf(err, errlen, "token model: not a pcrfs token model");
        return -EINVAL;
    }
    if (pcr_get_le64(b + len - 8) != pcr_xxh64(b, len - 8)) {
        pcr_errf(err, errlen, "token model: checksum mismatch (corrupt)");
        return -EINVAL;
    }
    coder = b[8];
    nseen = pcr_get_le32(b + 12);
    if ((coder != PCR_TOK_HUFFMAN && coder != PCR_TOK_ZSTD_DICT) || b[9] || b[10] || b[11]) {
        pcr_errf(err, errlen, "token model: unknown coder %u", coder);
        return -EINVAL;
    }
    if (nseen < 1 || nseen > NVALUES || 16 + 2 * (size_t)nseen + 8 > len) {
        pcr_errf(err, errlen, "token model: bad symbol count %u", nseen);
        return -EINVAL;
    }
    m = calloc(1, sizeof(*m));
    seen = calloc(NVALUES, 1);
    if (!m || !seen) {
        free(m);
        free(seen);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->coder = coder;
    m->nseen = nseen;
    o = 16;
    for (r = 0; r < nseen; r++, o += 2) {
        unsigned v = pcr_get_le16(b + o);
        if (seen[v]) {
            pcr_errf(err, errlen, "token model: value %u appears twice in the rank table", v);
            goto fail;
        }
        seen[v] = 1;
        m->value[r] = (uint16_t)v;
        m->rank[v] = (uint16_t)r;
    }
    /* Values never seen in training rank after the seen ones, in value order, so
     * the permutation is total and any decoded rank maps to a value. */
    next = nseen;
    for (unsigned v = 0; v < NVALUES; v++) {
        if (!seen[v]) {
            m->value[next] = (uint16_t)v;
            m->rank[v] = (uint16_t)next;
            next++;
        }
    }
    if (coder == PCR_TOK_HUFFMAN) {
        if (len - o - 8 != nseen + 1) {
            pcr_errf(err, errlen, "token model: size mismatch");
            goto fail;
        }
        rc = pcr_huf_enc_init(&m->henc, b + o, nseen + 1);
        if (rc == 0)
            rc = pcr_huf_dec_init(&m->hdec, b + o, nseen + 1, m->value);
        if (rc) {
            if (rc == -EINVAL)
                pcr_errf(err, errlen, "token model: code lengths are not a prefix code");
            goto fail;
        }
    } else {
        int32_t level;
        uint32_t dl;
        if (len - o - 8 < 8) {
            pcr_errf(err, errlen, "token model: size mismatch");
            rc = -EINVAL;
            goto fail;
        }
        level = (int32_t)pcr_get_le32(b + o);
        dl = pcr_get_le32(b + o + 4);
        o += 8;
        if (level < 1 || level > ZSTD_maxCLevel() || dl > MAX_DICT || dl != len - o - 8) {
            pcr_errf(err, errlen, "token model: bad zstd level %d or dictionary size %u", level,
                     dl);
            rc = -EINVAL;
            goto fail;
        }
        m->level = level;
        m->dictlen = dl;
    }
    m->blob = malloc(len);
    if (!m->blob) {
        rc = -ENOMEM;
        goto fail;
    }
    memcpy(m->blob, b, len);
    m->bloblen = len;
    m->id = pcr_xxh64(b, len);
    if (coder == PCR_TOK_ZSTD_DICT) {
        m->dict = m->blob + o;
        m->ddict = ZSTD_createDDict(m->dict, m->dictlen);
        if (!m->ddict) {
            pcr_errf(err, errlen, "token model: zstd rejects the dictionary");
            rc = -EINVAL;
            goto fail;
        }
    }
    free(seen);
    *out = m;
    return 0;
fail:
    free(seen);
    pcr_tok_model_free(m);
    return rc;
}

const void *pcr_tok_model_blob(const struct pcr_tok_model *m, size_t *len)
{
    *len = m->bloblen;
    return m->blob;
}

uint64_t pcr_tok_model_id(const struct pcr_tok_model *m)
{
    return m->id;
}

enum pcr_tok_coder pcr_tok_model_coder(const struct pcr_tok_model *m)
{
    return m->coder;
}

unsigned pcr_tok_model_symbols(const struct pcr_tok_model *m)
{
    return m->nseen;
}

void pcr_tok_model_ranks(const struct pcr_tok_model *m, const uint16_t *grid, size_t n,
                         uint16_t *ranks)
{
    for (size_t i = 0; i < n; i++)
        ranks[i] = m->rank[grid[i]];
}

/* ---- Encode / decode ---------------------------------------------------------- */

bool pcr_tok_shape_ok(unsigned h, unsigned w)
{
    return h >= 1 && w >= 1 && h <= PCR_TOK_MAX_SIDE && w <= PCR_TOK_MAX_SIDE &&
           (size_t)h * w <= PCR_TOK_MAX_TOKENS;
}

size_t pcr_tok_encode_bound(const struct pcr_tok_model *m, size_t ntokens)
{
    if (m->coder == PCR_TOK_HUFFMAN)
        return pcr_huf_bound(&m->henc, ntokens);
    return ZSTD_compressBound(pcr_tok_escape_bound(ntokens));
}

static ZSTD_CDict *get_cdict(struct pcr_tok_model *m)
{
    ZSTD_CDict *cd = __atomic_load_n(&m->cdict, __ATOMIC_ACQUIRE);

    if (cd)
        return cd;
    pthread_mutex_lock(&m->lock);
    cd = m->cdict;
    if (!cd) {
        cd = ZSTD_createCDict(m->dict, m->dictlen, m->level);
        __atomic_store_n(&m->cdict, cd, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&m->lock);
    return cd;
}

ssize_t pcr_tok_encode(const struct pcr_tok_model *cm, const uint16_t *grid, unsigned h, unsigned w,
                       uint8_t *out, size_t cap)
{
    /* Only the lazily built compression dictionary is written to. */
    struct pcr_tok_model *m = (struct pcr_tok_model *)cm;
    size_t n = (size_t)h * w, esclen, r;
    struct scratch *s;
    ZSTD_CDict *cd;

    if (!pcr_tok_shape_ok(h, w))
        return -EINVAL;
    s = scratch_get();
    if (!s || grow((void **)&s->r, &s->rcap, n * sizeof(uint16_t)))
        return -ENOMEM;
    pcr_tok_model_ranks(m, grid, n, s->r);
    if (m->coder == PCR_TOK_HUFFMAN)
        return pcr_huf_encode(&m->henc, s->r, n, out, cap);

    if (grow((void **)&s->a, &s->acap, pcr_tok_escape_bound(n)) ||
        grow((void **)&s->b, &s->bcap, ZSTD_compressBound(pcr_tok_escape_bound(n))))
        return -ENOMEM;
    esclen = pcr_tok_escape_encode(s->r, n, s->a);
    cd = get_cdict(m);
    if (!s->cctx)
        s->cctx = ZSTD_createCCtx();
    if (!cd || !s->cctx)
        return -ENOMEM;
    ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_and_parameters);
    /* Every byte counts at ~1 kB per grid: no content size (the grid's shape fixes
     * it), no checksum (the index checksums what is served), no dictionary id (the
     * model is the only dictionary), and the 4-byte magic is stripped below. */
    if (ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, m->level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_contentSizeFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_checksumFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_dictIDFlag, 0)) ||
        ZSTD_isError(ZSTD_CCtx_refCDict(s->cctx, cd)))
        return -EIO;
    r = ZSTD_compress2(s->cctx, s->b, s->bcap, s->a, esclen);
    if (ZSTD_isError(r) || r < 4 || s->b[0] != ZSTD_MAGIC_0 || s->b[1] != ZSTD_MAGIC_1 ||
        s->b[2] != ZSTD_MAGIC_2 || s->b[3] != ZSTD_MAGIC_3)
        return -EIO;
    if (r - 4 > cap)
        return -ENOSPC;
    memcpy(out, s->b + 4, r - 4);
    return (ssize_t)(r - 4);
}

int pcr_tok_decode(const struct pcr_tok_model *m, const uint8_t *blob, size_t len, unsigned h,
                   unsigned w, uint16_t *out)
{
    size_t n = (size_t)h * w, esccap, r;
    struct scratch *s;
    ssize_t got;

    if (!pcr_tok_shape_ok(h, w))
        return -EINVAL;
    /* Huffman: the decoder's table maps ranks back to values. */
    if (m->coder == PCR_TOK_HUFFMAN)
        return pcr_huf_decode(&m->hdec, blob, len, out, n) ? -EINVAL : 0;

    esccap = pcr_tok_escape_bound(n);
    if (len > ZSTD_compressBound(esccap))
        return -EINVAL;
    s = scratch_get();
    if (!s || grow((void **)&s->a, &s->acap, esccap) || grow((void **)&s->b, &s->bcap, len + 4))
        return -ENOMEM;
    if (!s->dctx && !(s->dctx = ZSTD_createDCtx()))
        return -ENOMEM;
    /* Put the stripped magic back: keeps to zstd's stable API (the magicless format
     * is experimental); copying ~1 kB costs tens of nanoseconds. */
    s->b[0] = ZSTD_MAGIC_0;
    s->b[1] = ZSTD_MAGIC_1;
    s->b[2] = ZSTD_MAGIC_2;
    s->b[3] = ZSTD_MAGIC_3;
    memcpy(s->b + 4, blob, len);
    r = ZSTD_decompress_usingDDict(s->dctx, s->a, esccap, s->b, len + 4, m->ddict);
    if (ZSTD_isError(r))
        return -EINVAL;
    got = pcr_tok_escape_decode(s->a, r, out, n);
    if (got < 0 || (size_t)got != n)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        out[i] = m->value[out[i]];
    return 0;
}
