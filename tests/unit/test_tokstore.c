/* Unit test of the token tree of a store: built through the writer (Huffman and
 * zstd-dict models), read back through pcr_store_open_tokens() as NPY files whose
 * values equal the imported grids; sizes exact from the index; a damaged blob or a
 * shard of another model fails with EIO; the codebook blob round-trips; a store
 * without tokens says so. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pcrfs/store.h"
#include "pcrfs/tokens.h"
#include "pcrfs/writer.h"
#include "check.h"

#define NGRID 40

static uint16_t grids[NGRID][32 * 32];
static unsigned gh[NGRID], gw[NGRID];
static char names[NGRID][32];

static uint32_t rnd_state = 7;
static uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

static void make_grids(void)
{
    for (int i = 0; i < NGRID; i++) {
        gh[i] = i % 2 ? 16 : 32;
        gw[i] = i % 3 ? 32 : 16;
        for (unsigned k = 0; k < gh[i] * gw[i]; k++) {
            /* Zipf-ish with a tail past 255 and the extremes 0 and 65535 */
            unsigned r = rnd() % 1000;
            grids[i][k] = (uint16_t)(r < 500   ? r % 7
                                     : r < 950 ? r % 300
                                     : r < 999 ? 300 + r
                                               : 65535);
        }
        snprintf(names[i], sizeof(names[i]), "%02d.tok", i);
    }
}

/* Tree: root {c0, c1}; c0 holds grids 0..19, c1 holds 20..39. */
static int build(const char *path, enum pcr_tok_coder coder, char *err, size_t errlen)
{
    struct pcr_writer_opts o = {.levels = 10, .script = "test"};
    struct pcr_tok_train_opts to = {.coder = coder};
    struct pcr_tok_trainer *tr;
    struct pcr_tok_model *m;
    struct pcr_writer *w;
    struct pcr_dir_row root = {1, 1, "", 0, 0, 0, 0};
    struct pcr_dir_row tdirs[] = {
        {1, 1, "", 2, 2, 0, 0}, {2, 1, "c0", 0, 0, 1, 20}, {3, 1, "c1", 0, 0, 21, 20}};
    struct pcr_tok_item items[NGRID];
    static const char codebook[] = "\x93NUMPY fake codebook bytes";
    int ret;

    if (pcr_tok_trainer_new(&to, &tr))
        return -ENOMEM;
    for (int i = 0; i < NGRID; i++)
        pcr_tok_trainer_add(tr, grids[i], gh[i], gw[i]);
    if ((ret = pcr_tok_trainer_finish(tr, &m, NULL, err, errlen)))
        return ret;
    ret = pcr_writer_create(path, &o, &w, err, errlen);
    if (ret) {
        pcr_tok_model_free(m);
        return ret;
    }
    if ((ret = pcr_writer_add_dir(w, &root)) || (ret = pcr_writer_set_tok_model(w, m)) ||
        (ret = pcr_writer_set_blob(w, "codebook", codebook, sizeof(codebook))))
        goto fail;
    for (int i = 0; i < 3; i++)
        if ((ret = pcr_writer_add_tok_dir(w, &tdirs[i])))
            goto fail;
    for (int i = 0; i < NGRID; i++)
        items[i] = (struct pcr_tok_item){.id = (uint64_t)i + 1,
                                         .dir = i < 20 ? 2 : 3,
                                         .name = names[i],
                                         .grid = grids[i],
                                         .h = gh[i],
                                         .w = gw[i]};
    /* three shards of uneven size */
    if ((ret = pcr_writer_add_tok_shard(w, items, 7)) ||
        (ret = pcr_writer_add_tok_shard(w, items + 7, 30)) ||
        (ret = pcr_writer_add_tok_shard(w, items + 37, 3)))
        goto fail;
    ret = pcr_writer_finish(w, err, errlen);
    pcr_tok_model_free(m);
    return ret;
fail:
    snprintf(err, errlen, "%s", pcr_writer_error(w));
    pcr_writer_abort(w);
    pcr_tok_model_free(m);
    return ret;
}

static void check_store(const char *path)
{
    struct pcr_store *s, *t;
    char err[512];
    const void *cb;
    size_t cblen;
    static uint8_t buf[8192];
    int ret = pcr_store_open(path, &s, err, sizeof(err));

    CHECK(ret == 0, "open: %s", err);
    if (ret)
        return;
    CHECK(pcr_store_codebook(s, &cb, &cblen) == 0 && cblen == 27 && !memcmp(cb, "\x93NUMPY", 6),
          "codebook blob");
    ret = pcr_store_open_tokens(s, &t, err, sizeof(err));
    CHECK(ret == 0, "open tokens: %s", err);
    if (ret) {
        pcr_store_close(s);
        return;
    }
    CHECK(pcr_store_levels(t) == 1 && pcr_store_nfiles(t) == NGRID && pcr_store_ndirs(t) == 3,
          "token tree shape");
    for (int i = 0; i < NGRID; i++) {
        struct pcr_node dir, node;
        const struct pcr_file *f;
        struct pcr_npy a;
        uint16_t got[32 * 32];
        unsigned h, w;

        CHECK(pcr_store_lookup(t, 1, i < 20 ? "c0" : "c1", &dir) == 0 && dir.is_dir, "dir");
        CHECK(pcr_store_lookup(t, dir.id, names[i], &node) == 0 && !node.is_dir, "lookup %s",
              names[i]);
        CHECK(pcr_store_file(t, node.id, &f) == 0, "file");
        ssize_t n = pcr_store_read(t, f, 1, buf, sizeof(buf), 0);
        CHECK(n > 0 && (uint64_t)n == pcr_file_size(f, 1) &&
                  (size_t)n == pcr_npy_grid_size(gh[i], gw[i]),
              "%s: size %zd, index says %llu", names[i], n,
              (unsigned long long)pcr_file_size(f, 1));
        CHECK(pcr_npy_parse(buf, (size_t)n, &a, err, sizeof(err)) == 0, "npy parse: %s", err);
        CHECK(pcr_npy_to_grid(&a, got, 32 * 32, &h, &w, err, sizeof(err)) == 0 && h == gh[i] &&
                  w == gw[i] && !memcmp(got, grids[i], h * w * 2),
              "%s: values equal the imported grid", names[i]);
        /* a read at an offset is a slice of the same bytes */
        uint8_t part[64];
        CHECK(pcr_store_read(t, f, 1, part, sizeof(part), 100) == 64 &&
                  !memcmp(part, buf + 100, 64),
              "offset read");
    }
    pcr_store_close(t);
    pcr_store_close(s);
}

/* Truncate shard 1: its files fail with EIO, the other shards still serve. */
static void damage(const char *path)
{
    struct pcr_store *s, *t;
    char err[512], shard[700];
    static uint8_t buf[8192];

    snprintf(shard, sizeof(shard), "%s/tokens/000001.tks", path);
    CHECK(truncate(shard, 40) == 0, "truncate shard");
    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    CHECK(pcr_store_open_tokens(s, &t, err, sizeof(err)) == 0, "open tokens: %s", err);
    for (uint64_t id = 1; id <= NGRID; id++) {
        const struct pcr_file *f;
        CHECK(pcr_store_file(t, id, &f) == 0, "file %llu", (unsigned long long)id);
        ssize_t n = pcr_store_read(t, f, 1, buf, sizeof(buf), 0);
        if (id <= 7)
            CHECK(n == -EIO, "file %llu of the truncated shard: %zd", (unsigned long long)id, n);
        else
            CHECK(n == (ssize_t)pcr_npy_grid_size(gh[id - 1], gw[id - 1]), "file %llu intact",
                  (unsigned long long)id);
    }
    pcr_store_close(t);
    pcr_store_close(s);
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-tok-XXXXXX", path[600], err[512], cmd[700];
    struct pcr_store *s, *t;

    make_grids();
    if (!mkdtemp(tmpl))
        return 2;
    enum pcr_tok_coder coders[] = {PCR_TOK_HUFFMAN, PCR_TOK_ZSTD_DICT};
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof(path), "%s/store%d", tmpl, c);
        int ret = build(path, coders[c], err, sizeof(err));
        CHECK(ret == 0, "build with %s: %s", pcr_tok_coder_name(coders[c]), err);
        if (ret == 0) {
            check_store(path);
            damage(path);
        }
    }
    /* a store without tokens says so */
    struct pcr_writer *w;
    struct pcr_writer_opts o = {.levels = 10};
    struct pcr_dir_row root = {1, 1, "", 0, 0, 0, 0};
    snprintf(path, sizeof(path), "%s/plain", tmpl);
    CHECK(pcr_writer_create(path, &o, &w, err, sizeof(err)) == 0, "create plain");
    CHECK(pcr_writer_add_dir(w, &root) == 0, "root");
    CHECK(pcr_writer_finish(w, err, sizeof(err)) == 0, "finish plain: %s", err);
    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open plain");
    CHECK(pcr_store_open_tokens(s, &t, err, sizeof(err)) == -ENOENT, "no tokens: -ENOENT");
    const void *cb;
    size_t cblen;
    CHECK(pcr_store_codebook(s, &cb, &cblen) == -ENOENT, "no codebook");
    pcr_store_close(s);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpl);
    return check_done("tokstore");
}
