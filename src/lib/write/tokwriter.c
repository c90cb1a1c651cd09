/* pcrfs — writing the token tree of a store (see pcrfs/writer.h, pcrfs(5)).
 *
 * A token shard (tokens/NNNNNN.tks, tokshard.c) holds the grids of up to a few
 * thousand files, each encoded with the store's model; in the index it is the
 * token tree's record, and each file a one-chunk row pointing into it whose size
 * and checksum are those of the NPY a reader is served (the decoded grid).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "pcrfs/tokens.h"
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "write/writer_internal.h"

int pcr_writer_add_tok_dir(struct pcr_writer *w, const struct pcr_dir_row *row)
{
    return writer_add_dir(w, PCR_TREE_TOKENS, row);
}

int pcr_writer_set_tok_model(struct pcr_writer *w, const struct pcr_tok_model *m)
{
    size_t len;
    const void *blob = pcr_tok_model_blob(m, &len);
    int ret = pcr_writer_set_blob(w, "tok_model", blob, len);

    if (!ret)
        ret = pcr_writer_set_meta(w, "tok_coder", pcr_tok_coder_name(pcr_tok_model_coder(m)));
    if (!ret)
        w->model = m;
    return ret;
}

/* One shard being written: where each blob went, and the buffers reused per item. */
struct shard {
    char name[32], path[PATH_MAX]; /* "NNNNNN.tks" and its path */
    uint64_t size;                 /* bytes of the shard so far */
    uint64_t *offs, *lens;         /* item i's blob: offset in the shard, length */
    uint8_t *sums;                 /* the blobs' chunk sums, item i's at [soff[i], soff[i + 1]) */
    size_t *soff, sumscap;
    uint8_t *blob; /* one encoded grid */
    size_t blobcap;
    uint8_t *npy; /* one grid as NPY, for its size and checksum */
    size_t npycap;
};

static void shard_free(struct shard *s)
{
    free(s->offs);
    free(s->lens);
    free(s->soff);
    free(s->sums);
    free(s->blob);
    free(s->npy);
}

/* Make @p hold at least @need bytes (doubling, so that many small steps stay cheap).
 * @return 0 or -ENOMEM (@p unchanged). */
static int reserve(uint8_t **p, size_t *cap, size_t need)
{
    size_t ncap = *cap * 2 > need ? *cap * 2 : need;
    uint8_t *np;

    if (need <= *cap)
        return 0;
    np = realloc(*p, ncap);
    if (!np)
        return -ENOMEM;
    *p = np;
    *cap = ncap;
    return 0;
}

static int check_tok_items(struct pcr_writer *w, const struct pcr_tok_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_TOKENS];

    for (unsigned i = 0; i < n; i++) {
        const struct pcr_tok_item *it = &items[i];

        if (it->id != t->nfiles + 1 + i || it->dir < 1 || it->dir > t->ndirs || !it->name ||
            !writer_name_ok(it->name) || !it->grid || it->h < 1 || it->w < 1 ||
            it->h > PCR_TOK_MAX_SIDE || it->w > PCR_TOK_MAX_SIDE ||
            (uint64_t)it->h * it->w > PCR_TOK_MAX_TOKENS ||
            writer_check_order(t, it->dir, it->name)) {
            pcr_errf(w->err, sizeof(w->err), "token file %llu (%s): bad numbering or shape",
                     (unsigned long long)it->id, it->name ? it->name : "?");
            return -EINVAL;
        }
    }
    return 0;
}

/* The tokens/ directory of the store being written, made on first use. */
static int open_tokens_dir(struct pcr_writer *w)
{
    int ret;

    if (w->tokfd >= 0)
        return 0;
    if ((mkdirat(w->tmpfd, "tokens", 0755) != 0 && errno != EEXIST) ||
        (w->tokfd = openat(w->tmpfd, "tokens", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        ret = -errno;
        pcr_errf(w->err, sizeof(w->err), "%s/tokens: %s", w->tmppath, strerror(errno));
        return ret;
    }
    return 0;
}

/* Encode item @i with the model, append it to the shard @sw and sum its blocks. */
static int add_tok_blob(struct pcr_writer *w, struct pcr_tokshard_writer *sw, struct shard *s,
                        const struct pcr_tok_item *it, unsigned i)
{
    size_t need = pcr_tok_encode_bound(w->model, (size_t)it->h * it->w);
    ssize_t bl;
    int ret;

    if (reserve(&s->blob, &s->blobcap, need))
        return -ENOMEM;
    bl = pcr_tok_encode(w->model, it->grid, it->h, it->w, s->blob, s->blobcap);
    if (bl <= 0) {
        pcr_errf(w->err, sizeof(w->err), "token file %s: cannot encode", it->name);
        return bl < 0 ? (int)bl : -EINVAL;
    }
    if (reserve(&s->sums, &s->sumscap, s->soff[i] + 4 * pcr_sum_blocks((uint64_t)bl)))
        return -ENOMEM;
    s->soff[i + 1] = s->soff[i] + pcr_sums_put(s->blob, (size_t)bl, s->sums + s->soff[i]);
    ret = pcr_tokshard_add(sw, s->blob, (size_t)bl, &s->offs[i]);
    s->lens[i] = (uint64_t)bl;
    s->size += (uint64_t)bl;
    return ret;
}

/* Write the shard file: every item's blob, then the shard's own header. */
static int write_shard(struct pcr_writer *w, struct shard *s, const struct pcr_tok_item *items,
                       unsigned n)
{
    struct pcr_tokshard_writer *sw = NULL;
    int ret;

    ret = pcr_tokshard_create(s->path, pcr_tok_model_id(w->model), &sw, w->err, sizeof(w->err));
    for (unsigned i = 0; !ret && i < n; i++)
        ret = add_tok_blob(w, sw, s, &items[i], i);
    if (ret) {
        if (sw)
            pcr_tokshard_abort(sw);
        if (!w->err[0])
            pcr_errf(w->err, sizeof(w->err), "writing %s: %s", s->path, strerror(-ret));
        return ret;
    }
    return pcr_tokshard_finish(sw, w->err, sizeof(w->err));
}

/* The index rows of a written shard: its record (one group: all its blobs) and a
 * one-chunk file row per item, sized and summed as the NPY it is served as. */
static int put_tok_rows(struct pcr_writer *w, struct shard *s, const struct pcr_tok_item *items,
                        unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_TOKENS];
    uint8_t gblob[20], cblob[20];
    size_t gl = pcr_varint_put(gblob, PCR_TOKSHARD_HEADER);
    int ret;

    gl += pcr_varint_put(gblob + gl, s->size);
    ret = pcr_index_put_record(w->idx, PCR_TREE_TOKENS,
                               &(struct pcr_index_record){.id = (int64_t)t->nrecs,
                                                          .name = s->name,
                                                          .size = (int64_t)s->size,
                                                          .nimages = n,
                                                          .groups = gblob,
                                                          .groups_len = gl});
    for (unsigned i = 0; !ret && i < n; i++) {
        const struct pcr_tok_item *it = &items[i];
        size_t nsz = pcr_npy_grid_size(it->h, it->w);
        size_t cl;

        if (reserve(&s->npy, &s->npycap, nsz))
            return -ENOMEM;
        pcr_npy_write_grid(it->h, it->w, it->grid, s->npy, nsz);
        cl = pcr_varint_put(cblob, s->offs[i] - PCR_TOKSHARD_HEADER);
        cl += pcr_varint_put(cblob + cl, s->lens[i]);
        ret = pcr_index_put_file(w->idx, PCR_TREE_TOKENS,
                                 &(struct pcr_index_file){
                                     .id = (int64_t)it->id,
                                     .dir = (int64_t)it->dir,
                                     .name = (const uint8_t *)it->name,
                                     .namelen = strlen(it->name),
                                     .kind = PCR_KIND_TOKENS,
                                     .record = (int64_t)t->nrecs,
                                     .slot = i,
                                     .nchunks = 1,
                                     .chunks = cblob,
                                     .chunks_len = cl,
                                     .size = (int64_t)nsz,
                                     .width = it->w,
                                     .height = it->h,
                                     .src_size = (int64_t)s->lens[i],
                                     .checksum = pcr_xxh64(s->npy, nsz),
                                     .sums = s->sums + s->soff[i],
                                     .sums_len = s->soff[i + 1] - s->soff[i],
                                 });
    }
    return ret ? writer_index_error(w, ret) : 0;
}

/* Write one token shard (tokens/NNNNNN.tks) and its rows: each grid encoded with the
 * model, each file a one-chunk row whose record is the shard (see pcrfs(5)). */
int pcr_writer_add_tok_shard(struct pcr_writer *w, const struct pcr_tok_item *items, unsigned n)
{
    struct wtree *t = &w->t[PCR_TREE_TOKENS];
    struct shard s = {.size = PCR_TOKSHARD_HEADER};
    int ret;

    if (!w->model || n == 0) {
        pcr_errf(w->err, sizeof(w->err), "token shard: %s", n ? "no model set" : "empty");
        return -EINVAL;
    }
    ret = check_tok_items(w, items, n);
    if (!ret)
        ret = open_tokens_dir(w);
    if (ret)
        return ret;
    s.offs = calloc(n, sizeof(*s.offs));
    s.lens = calloc(n, sizeof(*s.lens));
    s.soff = calloc(n + 1, sizeof(*s.soff));
    if (!s.offs || !s.lens || !s.soff) {
        ret = -ENOMEM;
        goto out;
    }
    t->nrecs++;
    snprintf(s.name, sizeof(s.name), "%06llu.tks", (unsigned long long)t->nrecs);
    snprintf(s.path, sizeof(s.path), "%s/tokens/%s", w->tmppath, s.name);
    ret = write_shard(w, &s, items, n);
    if (!ret)
        ret = put_tok_rows(w, &s, items, n);
    if (!ret)
        t->nfiles += n;
out:
    shard_free(&s);
    return ret;
}
