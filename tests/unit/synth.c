/* The synthetic store of the unit tests (synth.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "synth.h"

struct tfile files[NFILES] = {
    {"r1.JPEG", 1, "r1.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}},
    {"r2.bin", 1, "r2.bin", PCR_KIND_VERBATIM, 1, 0, NULL, {0}},
    {"a/ x y.JPEG", 2, " x y.JPEG", PCR_KIND_JPEG, 6, 0, NULL, {0}},
    {"a/cmyk.JPEG", 2, "cmyk.JPEG", PCR_KIND_JPEG, 18, 0, NULL, {0}},
    {"a/empty", 2, "empty", PCR_KIND_VERBATIM, 1, 0, NULL, {0}},
    {"a/one.JPEG", 2, "one.JPEG", PCR_KIND_JPEG, 1, 0, NULL, {0}},
    {"b/c/z.txt", 4, "z.txt", PCR_KIND_VERBATIM, 1, 0, NULL, {0}},
    {"b/c/\xff\xfe.JPEG", 4, "\xff\xfe.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}},
};

static uint32_t rnd_state = 12345;
uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

void make_data(void)
{
    for (size_t i = 0; i < NFILES; i++) {
        struct tfile *t = &files[i];
        size_t n = 0;
        if (t->kind == PCR_KIND_VERBATIM) {
            /* r2.bin spans three checksum blocks (test_flipped) */
            t->len = !strcmp(t->name, "empty")    ? 0
                     : !strcmp(t->name, "r2.bin") ? 150000
                                                  : 100 + rnd() % 3000;
            t->data = malloc(t->len + 1);
            for (size_t k = 0; k < t->len; k++)
                t->data[k] = (uint8_t)(rnd() >> 8); /* high bits: period 2^24 */
            continue;
        }
        t->split.nchunks = t->nchunks;
        t->data = malloc(64 * 4096 + 2);
        for (unsigned c = 0; c < t->nchunks; c++) {
            size_t l = 1 + rnd() % 4000;
            for (size_t k = 0; k < l; k++)
                t->data[n + k] = (uint8_t)(i * 32 + c);
            n += l;
            t->split.end[c] = n;
        }
        t->data[n++] = 0xFF;
        t->data[n++] = 0xD9;
        t->len = n;
    }
}

/* Bytes at @level per the store's rule, into a new buffer. */
uint8_t *expected(const struct tfile *t, unsigned level, size_t *len)
{
    uint8_t *b = malloc(t->len + 2);
    unsigned m;

    if (t->kind == PCR_KIND_VERBATIM) {
        memcpy(b, t->data, t->len);
        *len = t->len;
        return b;
    }
    m = level >= LEVELS || level >= t->nchunks ? t->nchunks : level;
    *len = t->split.end[m - 1];
    memcpy(b, t->data, *len);
    b[(*len)++] = 0xFF;
    b[(*len)++] = 0xD9;
    return b;
}

int build(const char *path, bool force, unsigned per_record, char *err, size_t errlen)
{
    struct pcr_writer *w;
    struct pcr_writer_opts o = {.levels = LEVELS, .script = "test", .force = force};
    struct pcr_dir_row dirs[] = {
        {1, 1, "", 2, 2, 1, 2},
        {2, 1, "a", 0, 0, 3, 4},
        {3, 1, "b", 4, 1, 0, 0},
        {4, 3, "c", 0, 0, 7, 2},
    };
    int ret = pcr_writer_create(path, &o, &w, err, errlen);

    if (ret)
        return ret;
    for (size_t i = 0; i < 4; i++)
        if ((ret = pcr_writer_add_dir(w, &dirs[i])))
            goto fail;
    for (size_t i = 0; i < NFILES; i += per_record) {
        struct pcr_item items[8];
        unsigned n = 0;
        for (size_t k = i; k < NFILES && n < per_record; k++, n++) {
            struct tfile *t = &files[k];
            items[n] = (struct pcr_item){
                .id = k + 1,
                .dir = t->dir,
                .name = t->name,
                .kind = t->kind,
                .data = t->data,
                .len = t->len,
                .split = t->kind == PCR_KIND_JPEG ? &t->split : NULL,
                .info = {.width = 10, .height = 20, .components = 3},
                .src_size = t->len,
                .note = t->kind == PCR_KIND_VERBATIM ? "not a JPEG" : NULL,
            };
        }
        if ((ret = pcr_writer_add_record(w, items, n)))
            goto fail;
    }
    return pcr_writer_finish(w, err, errlen);
fail:
    snprintf(err, errlen, "%s", pcr_writer_error(w));
    pcr_writer_abort(w);
    return ret;
}

int resolve(struct pcr_store *s, const char *path, struct pcr_node *node)
{
    char buf[512], *save, *part;
    int ret = 0;

    snprintf(buf, sizeof(buf), "%s", path);
    node->is_dir = true;
    node->id = PCR_ROOT_DIR;
    for (part = strtok_r(buf, "/", &save); part && !ret; part = strtok_r(NULL, "/", &save))
        ret = pcr_store_lookup(s, node->id, part, node);
    return ret;
}
