/* pcrfs — what every view module uses: the store's own file handlers (a
 * descriptor's NULL ops, or the parts a module keeps) and the level parser (view.h).
 * A leaf: it calls nothing of the other files of view/.
 */
#include <string.h>

#include "view/view.h"

int pcr_view_store_lookup(const struct pcr_view *v, uint64_t dir, const char *name,
                          struct pcr_node *out)
{
    return pcr_store_lookup(v->store, dir, name, out);
}

int pcr_view_store_readdir(const struct pcr_view *v, uint64_t dir, uint64_t *pos,
                           struct pcr_dirent *out, char *namebuf, size_t namelen)
{
    (void)namebuf, (void)namelen;
    return pcr_store_readdir(v->store, dir, *pos, out);
}

/* Exact, from the index, without touching record data. */
int64_t pcr_view_store_size(const struct pcr_view *v, const struct pcr_file *f)
{
    return (int64_t)pcr_file_size(f, v->level);
}

/* The level is the view's: for dynamic/ the one its number names, held by this
 * handle until it is closed. A token file is decoded here, whole (about 2 kB). */
int pcr_view_store_open(const struct pcr_view *v, const struct pcr_file *f, void **state)
{
    struct pcr_handle *h = NULL;
    int rc = pcr_handle_open(v->store, f, v->level, &h);

    *state = h;
    return rc;
}

/* With an open, the handle; without, (store, file, level) -> pcr_store_pread(), no
 * allocation. */
ssize_t pcr_view_store_read(const struct pcr_view *v, const struct pcr_file *f, void *state,
                            char *buf, size_t size, uint64_t off)
{
    if (state)
        return pcr_handle_read(state, buf, size, off);
    return pcr_store_pread(v->store, f, v->level, buf, size, off);
}

void pcr_view_store_close(void *state)
{
    pcr_handle_close(state);
}

const struct pcr_view_file_ops pcr_view_store_ops = {
    .lookup = pcr_view_store_lookup,
    .readdir = pcr_view_store_readdir,
    .size = pcr_view_store_size,
    .open = pcr_view_store_open,
    .read = pcr_view_store_read,
    .close = pcr_view_store_close,
};

unsigned pcr_view_parse_level(unsigned levels, const char *s, size_t len)
{
    unsigned k = 0;
    size_t i;

    if (len == 4 && memcmp(s, "full", 4) == 0)
        return levels;
    if (len == 0 || len > 3)
        return 0; /* 3 digits hold any level (PCR_MAX_LEVELS) and stop overflow */
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        k = k * 10 + (unsigned)(s[i] - '0');
    }
    return k >= 1 && k <= levels ? k : 0;
}
