/* Token codec benchmark: size and decode speed of each encoding of a token dataset.
 *
 *   bench_tokens DATA LABELS [H W]
 *
 * DATA, LABELS: SeiT release files (data.bin[.gz], its index.npy[.gz] beside it,
 * label file), e.g. from `tests/gen/mktokens.py seit DIR --n 10000`.
 * Prints, per image and per token: raw uint16; SeiT's escape bytes (as in DATA, and
 * after our frequency re-indexing); escape bytes + canonical Huffman over bytes;
 * Huffman over the re-indexed tokens; escape bytes + zstd with a trained dictionary
 * (several dictionary sizes and levels); whole-stream zstd -19 (no random access,
 * for reference); the order-0 empirical entropy; and single-thread decode time per
 * image for each coder (thread CPU time, best of 5 passes). Model (table/dictionary)
 * bytes are shown amortised. BENCH_QUICK=1 skips the dictionary size/level sweep.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>
#include "pcrfs/tokens.h"
#include "common/internal.h"
#include "tokens/tokens_internal.h"

/* Thread CPU time, not wall time: the machine is shared and a preempted pass would
 * otherwise count another process's work (the figures are single-thread anyway). */
static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t n_img;
static unsigned H, W;
static size_t T; /* tokens per image */

static void row(const char *what, double bytes_per_img, double model_bytes)
{
    double amort = model_bytes / (double)n_img;

    printf("%-44s %9.1f B/img %7.3f bits/token", what, bytes_per_img,
           8.0 * bytes_per_img / (double)T);
    if (model_bytes > 0)
        printf("   (+%.1f B/img model: %.0f B)", amort, model_bytes);
    printf("\n");
}

struct blobs {
    uint8_t *buf;
    size_t *off; /* n_img + 1 */
};

/* Encode every grid with @m; optionally time it. */
static int encode_all(const struct pcr_tok_model *m, uint16_t *const *grids, struct blobs *b,
                      double *enc_us)
{
    size_t cap = pcr_tok_encode_bound(m, T), total = 0;
    double t0 = now();

    b->off = malloc((n_img + 1) * sizeof(size_t));
    b->buf = malloc(cap * n_img);
    if (!b->off || !b->buf)
        return -ENOMEM;
    for (uint64_t i = 0; i < n_img; i++) {
        ssize_t r = pcr_tok_encode(m, grids[i], H, W, b->buf + total, cap);
        if (r < 0) {
            fprintf(stderr, "encode %" PRIu64 ": %s\n", i, strerror((int)-r));
            return (int)r;
        }
        b->off[i] = total;
        total += (size_t)r;
    }
    b->off[n_img] = total;
    if (enc_us)
        *enc_us = (now() - t0) / (double)n_img * 1e6;
    return 0;
}

/* Decode every blob @reps times; check the first pass. @return us per image. */
static double decode_all(const struct pcr_tok_model *m, uint16_t *const *grids,
                         const struct blobs *b, int reps)
{
    uint16_t *out = malloc(T * sizeof(uint16_t));
    double t0, best = 1e30;

    for (uint64_t i = 0; i < n_img; i++) {
        if (pcr_tok_decode(m, b->buf + b->off[i], b->off[i + 1] - b->off[i], H, W, out) != 0 ||
            memcmp(out, grids[i], T * 2) != 0) {
            fprintf(stderr, "decode mismatch at %" PRIu64 "\n", i);
            exit(1);
        }
    }
    for (int r = 0; r < reps; r++) {
        t0 = now();
        for (uint64_t i = 0; i < n_img; i++)
            pcr_tok_decode(m, b->buf + b->off[i], b->off[i + 1] - b->off[i], H, W, out);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    free(out);
    return best / (double)n_img * 1e6;
}

static struct pcr_tok_model *train(uint16_t *const *grids, enum pcr_tok_coder coder, size_t dict,
                                   int level, struct pcr_tok_train_report *rep, double *secs)
{
    struct pcr_tok_train_opts o = {.coder = coder, .dict_size = dict, .zstd_level = level};
    struct pcr_tok_trainer *t;
    struct pcr_tok_model *m = NULL;
    char err[256];
    double t0 = now();

    if (pcr_tok_trainer_new(&o, &t))
        exit(1);
    for (uint64_t i = 0; i < n_img; i++)
        pcr_tok_trainer_add(t, grids[i], H, W);
    if (pcr_tok_trainer_finish(t, &m, rep, err, sizeof(err))) {
        fprintf(stderr, "train: %s\n", err);
        exit(1);
    }
    if (secs)
        *secs = now() - t0;
    return m;
}

int main(int argc, char **argv)
{
    struct pcr_seit_paths p = {0};
    struct pcr_seit_opts so = {0};
    struct pcr_seit *s;
    struct pcr_tok_train_report rep;
    uint16_t **grids;
    char err[1024];
    size_t esc_in_file = 0;

    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s DATA LABELS [H W]\n", argv[0]);
        return 2;
    }
    p.data = argv[1];
    p.labels = argv[2];
    if (argc == 5) {
        so.h = (unsigned)atoi(argv[3]);
        so.w = (unsigned)atoi(argv[4]);
    }
    if (pcr_seit_open(&p, &so, &s, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    n_img = pcr_seit_count(s);
    pcr_seit_shape(s, &H, &W);
    T = (size_t)H * W;
    grids = malloc(n_img * sizeof(*grids));
    for (uint64_t i = 0; i < n_img; i++) {
        struct pcr_seit_item it;
        grids[i] = malloc(T * 2);
        if (pcr_seit_grid(s, i, grids[i], err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        pcr_seit_item(s, i, &it);
        esc_in_file += it.length;
    }
    pcr_seit_close(s);

    /* Huffman over ranks (also gives the entropy and the re-indexing). */
    double tr_huf, tr_zstd, enc_huf, enc_zstd, dec_huf, dec_zstd;
    struct pcr_tok_model *huf = train(grids, PCR_TOK_HUFFMAN, 0, 0, &rep, &tr_huf);
    struct blobs bh, bz;
    size_t mlen;

    printf("%" PRIu64 " images of %ux%u tokens, %u distinct values (max %u)\n\n", n_img, H, W,
           rep.symbols, rep.max_value);
    row("raw uint16", 2.0 * T, 0);
    row("order-0 empirical entropy", rep.entropy * T / 8.0, 0);
    row("uniform over the values used (log2 K)", log2(rep.symbols) * T / 8.0, 0);
    row("SeiT escape bytes, ids as in the file", (double)esc_in_file / n_img, 0);

    /* Escape bytes of the ranks, and a byte Huffman over them (per image). */
    {
        uint64_t freq[256] = {0}, esc_total = 0, bytes = 0;
        uint16_t *r = malloc(T * 2);
        uint8_t *e = malloc(4 * T), len[257];
        size_t *elen = malloc(n_img * sizeof(size_t));
        for (uint64_t i = 0; i < n_img; i++) {
            pcr_tok_model_ranks(huf, grids[i], T, r);
            elen[i] = pcr_tok_escape_encode(r, T, e);
            esc_total += elen[i];
            for (size_t k = 0; k < elen[i]; k++)
                freq[e[k]]++;
        }
        row("SeiT escape bytes, re-indexed by frequency", (double)esc_total / n_img, 0);
        pcr_huf_lengths(freq, 256, PCR_HUF_MAXLEN, len);
        for (uint64_t i = 0; i < n_img; i++) {
            size_t b = 0;
            pcr_tok_model_ranks(huf, grids[i], T, r);
            size_t n = pcr_tok_escape_encode(r, T, e);
            for (size_t k = 0; k < n; k++)
                b += len[e[k]];
            bytes += (b + 7) / 8; /* each image is its own blob */
        }
        row("escape bytes + canonical Huffman (bytes)", (double)bytes / n_img, 257);
        free(r);
        free(e);
        free(elen);
    }

    pcr_tok_model_blob(huf, &mlen);
    if (encode_all(huf, grids, &bh, &enc_huf))
        return 1;
    row("canonical Huffman over re-indexed tokens", (double)bh.off[n_img] / n_img, (double)mlen);

    /* zstd with a trained dictionary: the default, then a sweep. */
    struct pcr_tok_model *zs = train(grids, PCR_TOK_ZSTD_DICT, 0, 0, NULL, &tr_zstd);
    pcr_tok_model_blob(zs, &mlen);
    if (encode_all(zs, grids, &bz, &enc_zstd))
        return 1;
    {
        char what[96];
        snprintf(what, sizeof(what), "escape + zstd-dict (%u KiB dict, level %d)",
                 PCR_TOK_DICT_SIZE / 1024, PCR_TOK_ZSTD_LEVEL);
        row(what, (double)bz.off[n_img] / n_img, (double)mlen);
    }
    if (!getenv("BENCH_QUICK")) {
        static const size_t dicts[] = {8192, 16384, 65536, 112640};
        static const int levels[] = {3, 9, 22};
        for (size_t d = 0; d < PCR_ARRAY_SIZE(dicts); d++) {
            struct pcr_tok_model *m = train(grids, PCR_TOK_ZSTD_DICT, dicts[d], 0, NULL, NULL);
            struct blobs b;
            char what[96];
            size_t ml;
            pcr_tok_model_blob(m, &ml);
            if (encode_all(m, grids, &b, NULL))
                return 1;
            snprintf(what, sizeof(what), "  dict %zu KiB, level %d", dicts[d] / 1024,
                     PCR_TOK_ZSTD_LEVEL);
            row(what, (double)b.off[n_img] / n_img, (double)ml);
            free(b.buf);
            free(b.off);
            pcr_tok_model_free(m);
        }
        for (size_t l = 0; l < PCR_ARRAY_SIZE(levels); l++) {
            struct pcr_tok_model *m = train(grids, PCR_TOK_ZSTD_DICT, 0, levels[l], NULL, NULL);
            struct blobs b;
            char what[96];
            double eus;
            size_t ml;
            pcr_tok_model_blob(m, &ml);
            if (encode_all(m, grids, &b, &eus))
                return 1;
            snprintf(what, sizeof(what), "  dict %u KiB, level %d (enc %.0f us)",
                     PCR_TOK_DICT_SIZE / 1024, levels[l], eus);
            row(what, (double)b.off[n_img] / n_img, (double)ml);
            free(b.buf);
            free(b.off);
            pcr_tok_model_free(m);
        }
    }
    /* Per-image zstd without a dictionary, and the whole stream (no random access). */
    {
        uint16_t *r = malloc(T * 2);
        uint8_t *all = malloc(4 * T * n_img), *c;
        size_t o = 0, per = 0, cl;
        for (uint64_t i = 0; i < n_img; i++) {
            size_t n;
            uint8_t tmp[ZSTD_COMPRESSBOUND(4 * 4096)];
            pcr_tok_model_ranks(huf, grids[i], T, r);
            n = pcr_tok_escape_encode(r, T, all + o);
            if (4 * T <= 4 * 4096)
                per += ZSTD_compress(tmp, sizeof(tmp), all + o, n, 19) - 4;
            o += n;
        }
        row("escape + zstd -19 per image, no dictionary", (double)per / n_img, 0);
        c = malloc(ZSTD_compressBound(o));
        cl = ZSTD_compress(c, ZSTD_compressBound(o), all, o, 19);
        row("escape + zstd -19 whole stream (no access)", (double)cl / n_img, 0);
        free(c);
        free(all);
        free(r);
    }
    row("SeiT paper: published (ImageNet-1k)", 1110, 0);
    row("SeiT paper: raw (ImageNet-1k)", 2000, 0);

    /* Decode speed. */
    dec_huf = decode_all(huf, grids, &bh, 5);
    dec_zstd = decode_all(zs, grids, &bz, 5);
    printf("\nsingle-thread decode (thread CPU time), best of 5 passes over all images:\n");
    printf("  huffman    %7.2f us/image  (%.2f ns/token)\n", dec_huf, dec_huf * 1000 / T);
    printf("  zstd-dict  %7.2f us/image  (%.2f ns/token)\n", dec_zstd, dec_zstd * 1000 / T);
    {
        double t0 = now();
        for (int i = 0; i < 10000; i++)
            ZSTD_freeDCtx(ZSTD_createDCtx());
        printf("  (ZSTD_createDCtx + ZSTD_freeDCtx: %.2f us: a context per call would add "
               "that to each zstd decode; pcrfs keeps one per thread)\n",
               (now() - t0) / 10000 * 1e6);
    }
    {
        uint16_t *out = malloc(T * 2);
        uint8_t *npy = malloc(pcr_npy_grid_size(H, W));
        double t0 = now();
        for (uint64_t i = 0; i < n_img; i++)
            pcr_npy_write_grid(H, W, grids[i], npy, pcr_npy_grid_size(H, W));
        printf("  .npy serialisation %.2f us/image\n", (now() - t0) / n_img * 1e6);
        free(out);
        free(npy);
    }
    printf("\nencode: huffman %.2f us/image, zstd-dict %.1f us/image; training: huffman %.2f s, "
           "zstd-dict %.2f s\n",
           enc_huf, enc_zstd, tr_huf, tr_zstd);
    {
        struct pcr_tok_model *a = train(grids, PCR_TOK_AUTO, 0, 0, &rep, NULL);
        printf("auto choice: %s (held-out %u grids: huffman %" PRIu64 " B, zstd-dict %" PRIu64
               " B)\n",
               pcr_tok_coder_name(pcr_tok_model_coder(a)), rep.heldout_grids, rep.huffman_bytes,
               rep.zstd_bytes);
        pcr_tok_model_free(a);
    }
    free(bh.buf);
    free(bh.off);
    free(bz.buf);
    free(bz.off);
    pcr_tok_model_free(huf);
    pcr_tok_model_free(zs);
    for (uint64_t i = 0; i < n_img; i++)
        free(grids[i]);
    free(grids);
    return 0;
}
