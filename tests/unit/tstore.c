/* The unit tests' store builder (tstore.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tstore.h"

uint8_t *tstore_expected(const struct tfile *t, unsigned level, size_t *len)
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

int tstore_write(const char *path, const struct tstore *st, char *err, size_t errlen)
{
    struct pcr_writer *w;
    struct pcr_writer_opts o = {.levels = LEVELS, .script = "test", .force = st->force};
    int ret = pcr_writer_create(path, &o, &w, err, errlen);

    if (ret)
        return ret;
    for (size_t i = 0; i < st->ndirs; i++)
        if ((ret = pcr_writer_add_dir(w, &st->dirs[i])))
            goto fail;
    for (size_t i = 0; i < st->nfiles; i += st->per_record) {
        struct pcr_item items[8];
        unsigned n = 0;
        for (size_t k = i; k < st->nfiles && n < st->per_record && n < 8; k++, n++) {
            const struct tfile *t = &st->files[k];
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
                .quality = t->quality,
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

int tstore_resolve(struct pcr_store *s, const char *path, struct pcr_node *node)
{
    char buf[8192], *save, *part;
    int ret = 0;

    snprintf(buf, sizeof(buf), "%s", path);
    node->is_dir = true;
    node->id = PCR_ROOT_DIR;
    for (part = strtok_r(buf, "/", &save); part && !ret; part = strtok_r(NULL, "/", &save))
        ret = pcr_store_lookup(s, node->id, part, node);
    return ret;
}
