/* pcrfs — training the token codec (see pcrfs/tokens.h): frequency counts over every
 * grid, a reservoir sample, the Huffman code, the zstd dictionary, and the comparison
 * of the two coders on held-out grids. The model format, encoding and decoding are in
 * tokcodec.c; training only builds a model blob and loads it like any other.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zdict.h>
#include "pcrfs/tokens.h"
#include "common/internal.h"
#include "tokens/tokens_internal.h"

#define NVALUES  PCR_TOK_NVALUES
#define MAX_DICT PCR_TOK_MAX_DICT
#define HOLDOUT  8 /* every 8th sampled grid is held out of dictionary training */

/* ---- Training ----------------------------------------------------------------- */

struct sample {
    uint16_t *grid;
    unsigned h, w;
};

struct pcr_tok_trainer {
    struct pcr_tok_train_opts o;
    uint64_t *freq; /* NVALUES counters */
    uint64_t grids, tokens;
    struct sample *samples;
    unsigned nsamples;
    uint64_t rng;
};

/* splitmix64: a fixed seed keeps builds reproducible. */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int pcr_tok_trainer_new(const struct pcr_tok_train_opts *opts, struct pcr_tok_trainer **out)
{
    struct pcr_tok_trainer *t;

    *out = NULL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    if (opts)
        t->o = *opts;
    if (!t->o.zstd_level)
        t->o.zstd_level = PCR_TOK_ZSTD_LEVEL;
    if (!t->o.dict_size)
        t->o.dict_size = PCR_TOK_DICT_SIZE;
    if (!t->o.sample_grids)
        t->o.sample_grids = PCR_TOK_SAMPLES;
    if (t->o.coder > PCR_TOK_ZSTD_DICT || t->o.zstd_level < 1 ||
        t->o.zstd_level > ZSTD_maxCLevel() || t->o.dict_size < 256 || t->o.dict_size > MAX_DICT) {
        free(t);
        return -EINVAL;
    }
    t->freq = calloc(NVALUES, sizeof(*t->freq));
    t->samples = calloc(t->o.sample_grids, sizeof(*t->samples));
    if (!t->freq || !t->samples) {
        pcr_tok_trainer_free(t);
        return -ENOMEM;
    }
    t->rng = 0x5eed70c5ull;
    *out = t;
    return 0;
}

void pcr_tok_trainer_free(struct pcr_tok_trainer *t)
{
    if (!t)
        return;
    if (t->samples)
        for (unsigned i = 0; i < t->nsamples; i++)
            free(t->samples[i].grid);
    free(t->samples);
    free(t->freq);
    free(t);
}

int pcr_tok_trainer_add(struct pcr_tok_trainer *t, const uint16_t *grid, unsigned h, unsigned w)
{
    size_t n = (size_t)h * w;
    struct sample *slot = NULL;
    uint16_t *copy;

    if (!pcr_tok_shape_ok(h, w))
        return -EINVAL;
    /* Reservoir sampling: every grid is kept with the same probability. */
    if (t->nsamples < t->o.sample_grids) {
        slot = &t->samples[t->nsamples];
    } else {
        uint64_t j = next_rand(&t->rng) % (t->grids + 1);
        if (j < t->o.sample_grids)
            slot = &t->samples[j];
    }
    if (slot) {
        copy = malloc(n * sizeof(uint16_t));
        if (!copy)
            return -ENOMEM;
        memcpy(copy, grid, n * sizeof(uint16_t));
        if (slot == &t->samples[t->nsamples])
            t->nsamples++;
        else
            free(slot->grid);
        *slot = (struct sample){copy, h, w};
    }
    for (size_t i = 0; i < n; i++)
        t->freq[grid[i]]++;
    t->grids++;
    t->tokens += n;
    return 0;
}

struct value_freq {
    uint64_t f;
    uint16_t v;
};

/* Most frequent first, ties by value: a total order, so qsort's instability cannot
 * make two builds differ. */
static int cmp_rank(const void *a, const void *b)
{
    const struct value_freq *x = a, *y = b;

    if (x->f != y->f)
        return x->f > y->f ? -1 : 1;
    return x->v < y->v ? -1 : (x->v > y->v ? 1 : 0);
}

/* Held-out bytes of one coder. */
static int measure(const struct pcr_tok_model *m, const struct pcr_tok_trainer *t, bool all,
                   uint64_t *bytes, uint64_t *tokens)
{
    size_t cap = pcr_tok_encode_bound(m, PCR_TOK_MAX_TOKENS);
    uint8_t *buf = malloc(cap);

    if (!buf)
        return -ENOMEM;
    *bytes = *tokens = 0;
    for (unsigned i = 0; i < t->nsamples; i++) {
        const struct sample *s = &t->samples[i];
        ssize_t r;
        if (!all && i % HOLDOUT != HOLDOUT - 1)
            continue;
        r = pcr_tok_encode(m, s->grid, s->h, s->w, buf, cap);
        if (r < 0) {
            free(buf);
            return (int)r;
        }
        *bytes += (uint64_t)r;
        *tokens += (uint64_t)s->h * s->w;
    }
    free(buf);
    return 0;
}

/* Train the zstd dictionary on the escape bytes of the sampled grids' ranks. */
static int train_dict(const struct pcr_tok_trainer *t, const uint16_t *rank, bool holdout,
                      uint8_t **dict, size_t *dictlen, char *err, size_t errlen)
{
    size_t total = 0, ntrain = 0, o = 0, r;
    uint8_t *cat, *d;
    size_t *sizes;
    uint16_t *tmp = malloc(PCR_TOK_MAX_TOKENS * sizeof(uint16_t));

    for (unsigned i = 0; i < t->nsamples; i++)
        total += pcr_tok_escape_bound((size_t)t->samples[i].h * t->samples[i].w);
    cat = malloc(total ? total : 1);
    sizes = malloc((t->nsamples ? t->nsamples : 1) * sizeof(size_t));
    d = malloc(t->o.dict_size);
    if (!cat || !sizes || !d || !tmp) {
        free(cat);
        free(sizes);
        free(d);
        free(tmp);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < t->nsamples; i++) {
        const struct sample *s = &t->samples[i];
        size_t n = (size_t)s->h * s->w;
        if (holdout && i % HOLDOUT == HOLDOUT - 1)
            continue;
        for (size_t k = 0; k < n; k++)
            tmp[k] = rank[s->grid[k]];
        sizes[ntrain] = pcr_tok_escape_encode(tmp, n, cat + o);
        o += sizes[ntrain++];
    }
    free(tmp);
    r = ZDICT_trainFromBuffer(d, t->o.dict_size, cat, sizes, (unsigned)ntrain);
    if (ZDICT_isError(r)) {
        /* Too few or too uniform samples: zstd also accepts raw content as a
         * dictionary, and the tail of the samples is the best content we have. */
        size_t keep = o < t->o.dict_size ? o : t->o.dict_size;
        pcr_log(PCR_LOG_INFO,
                "tokens: zstd dictionary training failed (%s), using %zu bytes "
                "of raw samples",
                ZDICT_getErrorName(r), keep);
        memcpy(d, cat + o - keep, keep);
        r = keep;
    }
    free(cat);
    free(sizes);
    if (r == 0) {
        pcr_errf(err, errlen, "tokens: no sample bytes to build a zstd dictionary");
        free(d);
        return -EIO;
    }
    *dict = d;
    *dictlen = r;
    return 0;
}

/* The frequency re-indexing: @order (rank -> value) and @rank (value -> rank, unseen
 * values after the seen ones) with the ranks' counts in @rfreq; the counts and the
 * order-0 entropy go into @rep. @vf is scratch. @return the number of seen values. */
static unsigned reindex(const struct pcr_tok_trainer *t, struct value_freq *vf, uint16_t *order,
                        uint16_t *rank, uint64_t *rfreq, struct pcr_tok_train_report *rep)
{
    unsigned nseen = 0;

    for (unsigned v = 0; v < NVALUES; v++) {
        if (t->freq[v]) {
            vf[nseen++] = (struct value_freq){t->freq[v], (uint16_t)v};
            rep->max_value = v;
        }
    }
    qsort(vf, nseen, sizeof(*vf), cmp_rank);
    for (unsigned r = 0; r < nseen; r++) {
        order[r] = vf[r].v;
        rank[order[r]] = (uint16_t)r;
        rfreq[r] = vf[r].f;
    }
    for (unsigned v = 0, r = nseen; v < NVALUES; v++)
        if (!t->freq[v])
            rank[v] = (uint16_t)r++;
    rep->grids = t->grids;
    rep->tokens = t->tokens;
    rep->symbols = nseen;
    for (unsigned r = 0; r < nseen; r++) {
        double p = (double)rfreq[r] / (double)t->tokens;
        rep->entropy -= p * log2(p);
    }
    return nseen;
}

/* Serialise a model and load it back: the trainer measures (and hands out) the model
 * exactly as a reader will load it from the store. */
static int make_model(enum pcr_tok_coder coder, unsigned nseen, const uint16_t *order,
                      const uint8_t *lens, int level, const void *dict, size_t dictlen,
                      struct pcr_tok_model **out, char *err, size_t errlen)
{
    uint8_t *blob = NULL;
    size_t bloblen;
    int rc =
        pcr_tok_model_serialise(coder, nseen, order, lens, level, dict, dictlen, &blob, &bloblen);

    if (rc == 0)
        rc = pcr_tok_model_load(blob, bloblen, out, err, errlen);
    free(blob);
    return rc;
}

int pcr_tok_trainer_finish(struct pcr_tok_trainer *t, struct pcr_tok_model **out,
                           struct pcr_tok_train_report *report, char *err, size_t errlen)
{
    struct pcr_tok_train_report rep;
    struct pcr_tok_model *huf = NULL, *zs = NULL;
    struct value_freq *vf = NULL;
    uint16_t *order = NULL, *rank = NULL;
    uint64_t *rfreq = NULL;
    uint8_t *lens = NULL, *dict = NULL;
    size_t dictlen = 0;
    unsigned nseen = 0;
    double bits = 0;
    bool holdout;
    int rc;

    *out = NULL;
    memset(&rep, 0, sizeof(rep));
    if (t->tokens == 0) {
        pcr_errf(err, errlen, "tokens: no grids to train on");
        pcr_tok_trainer_free(t);
        return -EINVAL;
    }
    order = malloc(NVALUES * sizeof(*order));
    rank = malloc(NVALUES * sizeof(*rank));
    rfreq = malloc(NVALUES * sizeof(*rfreq));
    lens = malloc(NVALUES + 1);
    vf = malloc(NVALUES * sizeof(*vf));
    rc = -ENOMEM;
    if (!order || !rank || !rfreq || !lens || !vf)
        goto done;

    nseen = reindex(t, vf, order, rank, rfreq, &rep);
    rc = pcr_huf_lengths(rfreq, nseen, PCR_HUF_MAXLEN, lens);
    if (rc)
        goto done;
    for (unsigned r = 0; r < nseen; r++)
        bits += (double)rfreq[r] * lens[r];
    rep.huffman_bits = bits / (double)t->tokens;
    rep.sample_grids = t->nsamples;

    if (t->o.coder != PCR_TOK_ZSTD_DICT) {
        rc = make_model(PCR_TOK_HUFFMAN, nseen, order, lens, 0, NULL, 0, &huf, err, errlen);
        if (rc)
            goto done;
    }
    /* With fewer than HOLDOUT samples nothing can be held out: the comparison is
     * then made on the dictionary's own training grids (favouring zstd a little). */
    holdout = t->o.coder == PCR_TOK_AUTO && t->nsamples >= HOLDOUT;
    if (t->o.coder != PCR_TOK_HUFFMAN) {
        rc = train_dict(t, rank, holdout, &dict, &dictlen, err, errlen);
        if (rc)
            goto done;
        rc = make_model(PCR_TOK_ZSTD_DICT, nseen, order, NULL, t->o.zstd_level, dict, dictlen, &zs,
                        err, errlen);
        if (rc)
            goto done;
    }
    if (huf) {
        rc = measure(huf, t, !holdout, &rep.huffman_bytes, &rep.heldout_tokens);
        if (rc)
            goto done;
    }
    if (zs) {
        rc = measure(zs, t, !holdout, &rep.zstd_bytes, &rep.heldout_tokens);
        if (rc) {
            pcr_errf(err, errlen, "tokens: zstd compression failed");
            goto done;
        }
    }
    rep.heldout_grids = holdout ? t->nsamples / HOLDOUT : t->nsamples;
    if (huf && (!zs || rep.huffman_bytes <= rep.zstd_bytes)) {
        *out = huf;
        huf = NULL;
    } else {
        *out = zs;
        zs = NULL;
    }
    rep.coder = pcr_tok_model_coder(*out);
    rc = 0;
done:
    if (rc == -ENOMEM)
        pcr_errf(err, errlen, "tokens: out of memory");
    pcr_tok_model_free(huf);
    pcr_tok_model_free(zs);
    free(vf);
    free(order);
    free(rank);
    free(rfreq);
    free(lens);
    free(dict);
    pcr_tok_trainer_free(t);
    if (report)
        *report = rep;
    return rc;
}
