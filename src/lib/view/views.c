/* pcrfs — the list of views, laid out per store, and what every client asks of it
 * (view.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pcrfs/backend.h"
#include "util/json.h"
#include "view/view.h"

/* The descriptors (one module each, pcr_view_NAME), in the order of the root listing.
 * A new view: its module (and meson.build), and one line here. */
#define VIEWS(X)                                                                                   \
    X(scan)                                                                                        \
    X(full)                                                                                        \
    X(dynamic)                                                                                     \
    X(quality)                                                                                     \
    X(mix)                                                                                         \
    X(tokens)                                                                                      \
    X(refurb)                                                                                      \
    /* (a new view: one line above this one) */

#define DECLARE(n) extern const struct pcr_view_desc pcr_view_##n;
VIEWS(DECLARE)
#define LIST(n) &pcr_view_##n,
const struct pcr_view_desc *const pcr_view_descs[] = {VIEWS(LIST)};
const size_t pcr_view_ndescs = sizeof(pcr_view_descs) / sizeof(pcr_view_descs[0]);

#define NDESCS_MAX (sizeof(((struct pcr_views *)0)->state) / sizeof(void *))
_Static_assert(sizeof(pcr_view_descs) / sizeof(pcr_view_descs[0]) <= NDESCS_MAX,
               "struct pcr_views holds a state per descriptor");

static size_t desc_index(const struct pcr_view_desc *d)
{
    size_t i;

    for (i = 0; i < pcr_view_ndescs; i++)
        if (pcr_view_descs[i] == d)
            return i;
    return NDESCS_MAX;
}

/* ---- options ------------------------------------------------------------------------ */

const struct pcr_view_desc *pcr_views_opt_desc(const char *name)
{
    size_t i;

    for (i = 0; i < pcr_view_ndescs; i++)
        for (const char *const *o = pcr_view_descs[i]->opts; o && *o; o++)
            if (strcmp(*o, name) == 0)
                return pcr_view_descs[i];
    return NULL;
}

int pcr_views_opt(struct pcr_views_args *a, const char *name, const char *val, char *msg,
                  size_t len)
{
    const struct pcr_view_desc *d = pcr_views_opt_desc(name);
    size_t i;

    if (!d)
        return -ENOENT;
    i = desc_index(d);
    if (!a->args[i]) {
        a->args[i] = calloc(1, d->args_size);
        if (!a->args[i])
            return -ENOMEM;
    }
    return d->opt(a->args[i], name, val, msg, len);
}

bool pcr_views_args_want_write(const struct pcr_views_args *a)
{
    size_t i;

    for (i = 0; i < pcr_view_ndescs; i++)
        if (a->args[i] && pcr_view_descs[i]->needs_write)
            return true;
    return false;
}

void pcr_views_args_free(struct pcr_views_args *a)
{
    size_t i;

    for (i = 0; i < pcr_view_ndescs; i++) {
        if (a->args[i] && pcr_view_descs[i]->args_free)
            pcr_view_descs[i]->args_free(a->args[i]);
        free(a->args[i]);
        a->args[i] = NULL;
    }
}

/* ---- the layout ------------------------------------------------------------------------ */

static bool ops_complete(const struct pcr_view_file_ops *o)
{
    return !o || (o->lookup && o->readdir && o->size && o->open && o->read && o->close);
}

static bool desc_complete(const struct pcr_view_desc *d)
{
    return ops_complete(d->ops) && d->count &&
           (d->level_rule == PCR_LEVEL_CURRENT ? d->file_level != NULL : d->level != NULL);
}

static int claim(struct pcr_views *vs, unsigned no, const struct pcr_view_desc *d, void *state,
                 unsigned level, bool dirs, bool files, unsigned i, struct pcr_view **out)
{
    struct pcr_view *v;

    if (no == 0 || no >= PCR_VIEW_NUMBERS || vs->vtab[no].desc)
        return -EINVAL;
    v = &vs->vtab[no];
    v->vs = vs;
    v->desc = d;
    v->ops = d->ops ? d->ops : &pcr_view_store_ops;
    v->state = state;
    v->store = d->tree == PCR_TREE_TOKENS ? vs->tokstore : vs->store;
    v->level = level;
    v->number = no;
    v->index = i;
    v->dirs = dirs;
    v->files = files;
    v->ctr = &v->own_ctr;
    *out = v;
    return 0;
}

static int layout(struct pcr_views *vs, char *err, size_t errlen)
{
    unsigned n, i, k;
    size_t di;
    int rc;

    for (di = 0; di < pcr_view_ndescs; di++) {
        const struct pcr_view_desc *d = pcr_view_descs[di];
        void *state = vs->state[di];

        if (!desc_complete(d)) {
            snprintf(err, errlen, "the view %s is incomplete", d->name);
            return -EINVAL;
        }
        n = d->count(vs, state);
        for (i = 1; i <= n; i++) {
            unsigned no = d->number_of ? d->number_of(vs, i) : d->number + i - 1;
            struct pcr_view *v;

            if (vs->nroot >= PCR_VIEWS_ROOT_MAX)
                return -EINVAL;
            if (d->level_rule == PCR_LEVEL_CURRENT) {
                rc = claim(vs, no, d, state, 0, true, false, i, &v);
                for (k = 1; rc == 0 && k <= vs->levels; k++) {
                    struct pcr_view *fv;

                    rc = claim(vs, no + k, d, state, k, false, true, i, &fv);
                    if (rc == 0)
                        fv->ctr = &v->own_ctr; /* one directory, one set of counters */
                }
            } else {
                rc = claim(vs, no, d, state, d->level(vs, state, i), true, true, i, &v);
            }
            if (rc) {
                snprintf(err, errlen, "the view %s: its numbers are taken", d->name);
                return rc;
            }
            if (d->name_of)
                d->name_of(state, i, v->name, sizeof(v->name));
            else
                snprintf(v->name, sizeof(v->name), d->name, i);
            v->threshold = d->threshold ? d->threshold(state, i) : 0.0;
            vs->root[vs->nroot++] = v;
        }
    }
    return 0;
}

int pcr_views_open(struct pcr_store *store, struct pcr_store *tokstore,
                   const struct pcr_views_args *a, struct pcr_views **out, char *err, size_t errlen)
{
    struct pcr_views *vs = calloc(1, sizeof(*vs));
    size_t i;
    int rc = 0;

    *out = NULL;
    err[0] = '\0';
    if (!vs)
        return -ENOMEM;
    vs->store = store;
    vs->tokstore = tokstore;
    vs->levels = pcr_store_levels(store);
    for (i = 0; i < pcr_view_ndescs && rc == 0; i++)
        if (pcr_view_descs[i]->init)
            rc = pcr_view_descs[i]->init(vs, a ? a->args[i] : NULL, &vs->state[i], err, errlen);
    if (rc == 0)
        rc = layout(vs, err, errlen);
    if (rc) {
        if (rc == -ENOMEM && !err[0])
            snprintf(err, errlen, "out of memory");
        pcr_views_close(vs);
        return rc;
    }
    *out = vs;
    return 0;
}

int pcr_views_start(struct pcr_views *vs, char *err, size_t errlen)
{
    size_t i;
    int rc;

    for (i = 0; i < pcr_view_ndescs; i++)
        if (vs->state[i] && pcr_view_descs[i]->start &&
            (rc = pcr_view_descs[i]->start(vs->state[i], err, errlen)) != 0)
            return rc;
    return 0;
}

void pcr_views_close(struct pcr_views *vs)
{
    size_t i;

    if (!vs)
        return;
    for (i = 0; i < pcr_view_ndescs; i++)
        if (vs->state[i] && pcr_view_descs[i]->free)
            pcr_view_descs[i]->free(vs->state[i]);
    free(vs);
}

void *pcr_views_state(const struct pcr_views *vs, const struct pcr_view_desc *d)
{
    size_t i = desc_index(d);

    return i < NDESCS_MAX ? vs->state[i] : NULL;
}

bool pcr_views_need_open(const struct pcr_views *vs)
{
    unsigned i;

    for (i = 0; i < vs->nroot; i++)
        if (vs->root[i]->desc->needs_open)
            return true;
    return false;
}

/* ---- what the clients ask ---------------------------------------------------------------- */

const struct pcr_view *pcr_views_get(const struct pcr_views *vs, unsigned no, bool is_file)
{
    const struct pcr_view *v;

    if (no >= PCR_VIEW_NUMBERS)
        return NULL;
    v = &vs->vtab[no];
    return v->desc && (is_file ? v->files : v->dirs) ? v : NULL;
}

unsigned pcr_view_child_number(const struct pcr_view *v, bool is_file, uint64_t id)
{
    if (v->desc->level_rule == PCR_LEVEL_CURRENT && is_file)
        return v->number + v->desc->file_level(v, id);
    return v->number;
}

const struct pcr_view *pcr_views_root(const struct pcr_views *vs, unsigned pos)
{
    return pos < vs->nroot ? vs->root[pos] : NULL;
}

/* At most L + 8 names. */
const struct pcr_view *pcr_views_root_lookup(const struct pcr_views *vs, const char *name)
{
    unsigned i;

    for (i = 0; i < vs->nroot; i++)
        if (strcmp(vs->root[i]->name, name) == 0)
            return vs->root[i];
    return NULL;
}

uint64_t pcr_views_nodes(const struct pcr_views *vs)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i < vs->nroot; i++)
        n += pcr_store_nfiles(vs->root[i]->store) + pcr_store_ndirs(vs->root[i]->store);
    return n;
}

int64_t pcr_view_size(const struct pcr_view *v, const struct pcr_file *f)
{
    return v->ops->size(v, f);
}

int pcr_view_open(const struct pcr_view *v, const struct pcr_file *f, void **state)
{
    int rc = v->ops->open(v, f, state);

    if (rc == -EIO)
        pcr_view_count(&v->ctr->errors, 1);
    else if (rc == 0)
        pcr_view_count(&v->ctr->opens, 1);
    return rc;
}

ssize_t pcr_view_read(const struct pcr_view *v, const struct pcr_file *f, void *state, char *buf,
                      size_t size, uint64_t off)
{
    ssize_t n = v->ops->read(v, f, state, buf, size, off);

    pcr_view_count_read(v, n);
    return n;
}

void pcr_view_count_read(const struct pcr_view *v, ssize_t n)
{
    if (n < 0) {
        pcr_view_count(&v->ctr->errors, 1);
        return;
    }
    pcr_view_count(&v->ctr->reads, 1);
    pcr_view_count(&v->ctr->bytes, (uint64_t)n);
}

void pcr_view_close(const struct pcr_view *v, void *state)
{
    if (state)
        v->ops->close(state);
}

int pcr_view_getxattr(const struct pcr_view *v, uint64_t id, const char *name, char *buf,
                      size_t len, size_t *outlen)
{
    if (!v || !v->desc->getxattr)
        return -ENOSYS;
    return v->desc->getxattr(v, id, name, buf, len, outlen);
}

int pcr_view_listxattr(const struct pcr_view *v, uint64_t id, const char **list, size_t *len)
{
    if (!v || !v->desc->listxattr)
        return -ENOSYS;
    return v->desc->listxattr(v, id, list, len);
}

bool pcr_views_have_xattrs(const struct pcr_views *vs)
{
    unsigned i;

    for (i = 0; i < vs->nroot; i++)
        if (vs->root[i]->desc->getxattr)
            return true;
    return false;
}

int pcr_views_ctl(const struct pcr_views *vs, unsigned pos, const char **name, const char **data,
                  size_t *len)
{
    size_t i;

    for (i = 0; i < pcr_view_ndescs; i++) {
        const struct pcr_view_desc *d = pcr_view_descs[i];

        if (!d->ctl_name || !vs->state[i])
            continue;
        if (pos-- == 0) {
            *name = d->ctl_name;
            return d->ctl_data(vs->state[i], data, len);
        }
    }
    return -ENOENT;
}

/* ---- dynamic/'s level (dynamic.c keeps it) ---------------------------------------------- */

bool pcr_views_dynamic(const struct pcr_views *vs)
{
    return pcr_views_state(vs, &pcr_view_dynamic) != NULL;
}

unsigned pcr_views_level_now(const struct pcr_views *vs)
{
    const void *d = pcr_views_state(vs, &pcr_view_dynamic);

    return d ? pcr_view_dyn_level(d) : 0;
}

int pcr_views_set_level(struct pcr_views *vs, unsigned k, unsigned *old)
{
    void *d = pcr_views_state(vs, &pcr_view_dynamic);

    if (!d)
        return -ENOENT;
    if (k < 1 || k > vs->levels)
        return -EINVAL;
    pcr_view_dyn_set(d, k, old);
    return 0;
}

/* ---- the info and stats JSON ---------------------------------------------------------
 * Written through the JSON writer shared with the tools (src/util/json.h: one string
 * escaping everywhere), into a growing buffer whose allocation failure is remembered
 * (b.oom) and reported at the end so that the renderers stay linear. */

/* A value from the index's meta table: a number if it is all digits, else a string,
 * null if absent. */
static void json_meta(struct pcr_json *b, struct pcr_store *s, const char *key)
{
    char val[512];

    pcr_json_numtext(b, pcr_store_meta(s, key, val, sizeof(val)) < 0 ? NULL : val);
}

static int json_done(struct pcr_json *b, char **out, size_t *len)
{
    if (b->oom) {
        free(b->p);
        return -ENOMEM;
    }
    *out = b->p;
    *len = b->len;
    return 0;
}

int pcr_views_info_json(const struct pcr_views *vs, const char *store_path, const char *extra,
                        char **out, size_t *len)
{
    const void *codebook;
    size_t cblen, i;
    struct pcr_json b;
    char creds[512];
    unsigned v;

    pcr_json_init(&b, NULL);
    pcr_json_puts(&b, "{\n  \"store\": ");
    pcr_json_quote(&b, store_path, strlen(store_path));
    pcr_json_puts(&b, ",\n  \"format_version\": ");
    json_meta(&b, vs->store, "format_version");
    pcr_json_printf(&b, ",\n  \"levels\": %u", vs->levels);
    pcr_json_puts(&b, ",\n  \"script\": ");
    json_meta(&b, vs->store, "script");
    pcr_json_puts(&b, ",\n  \"per_record\": ");
    json_meta(&b, vs->store, "per_record");
    pcr_json_printf(&b, ",\n  \"files\": %llu", (unsigned long long)pcr_store_nfiles(vs->store));
    pcr_json_printf(&b, ",\n  \"dirs\": %llu", (unsigned long long)pcr_store_ndirs(vs->store));
    pcr_json_printf(&b, ",\n  \"records\": %llu",
                    (unsigned long long)pcr_store_nrecords(vs->store));
    pcr_json_printf(&b, ",\n  \"built\": %lld", (long long)pcr_store_mtime(vs->store));
    if (extra)
        pcr_json_puts(&b, extra);
    pcr_json_printf(&b, ",\n  \"dynamic\": %s", pcr_views_dynamic(vs) ? "true" : "false");
    /* the token tree (tokens/): its size and coder, or null */
    if (vs->tokstore) {
        pcr_json_printf(&b, ",\n  \"tokens\": {\"files\": %llu, \"dirs\": %llu, \"shards\": %llu",
                        (unsigned long long)pcr_store_nfiles(vs->tokstore),
                        (unsigned long long)pcr_store_ndirs(vs->tokstore),
                        (unsigned long long)pcr_store_nrecords(vs->tokstore));
        pcr_json_puts(&b, ", \"coder\": ");
        json_meta(&b, vs->store, "tok_coder");
        pcr_json_printf(&b, ", \"codebook\": %s}",
                        pcr_store_codebook(vs->store, &codebook, &cblen) == 0 ? "true" : "false");
    } else {
        pcr_json_puts(&b, ",\n  \"tokens\": null");
    }
    pcr_json_puts(&b, ",\n  \"views\": [");
    for (v = 0; v < vs->nroot; v++)
        pcr_json_printf(&b, "%s\"%s\"", v ? ", " : "", vs->root[v]->name);
    pcr_json_puts(&b, "]");
    /* each module's own member: its options as used, or null when it is off */
    for (i = 0; i < pcr_view_ndescs; i++) {
        const struct pcr_view_desc *d = pcr_view_descs[i];

        if (!d->json_key || !d->info_json)
            continue;
        pcr_json_printf(&b, ",\n  \"%s\": ", d->json_key);
        d->info_json(vs->state[i], &b);
    }
    /* an s3:// store's credentials as found at mount (stats has the current ones) */
    if (pcr_http_creds_json(creds, sizeof(creds)) == 0)
        pcr_json_printf(&b, ",\n  \"credentials\": %s", creds);
    pcr_json_printf(&b, ",\n  \"pcrfs_version\": \"%s\"\n}\n", PCR_VERSION);
    return json_done(&b, out, len);
}

static uint64_t ld(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

int pcr_views_stats_json(const struct pcr_views *vs, const char *head, char **out, size_t *len)
{
    struct pcr_stats stats, *st = &stats;
    struct pcr_http_stats hs;
    char creds[512];
    struct pcr_json b;
    unsigned v, k, nv = 0;
    size_t i;

    pcr_json_init(&b, NULL);
    pcr_store_stats(vs->store, st);
    pcr_json_puts(&b, "{\n");
    if (head)
        pcr_json_puts(&b, head);
    pcr_json_puts(&b, "  \"views\": {\n");
    for (v = 0; v < vs->nroot; v++) {
        const struct pcr_view *w = vs->root[v];
        const struct pcr_view_counters *c = w->ctr;

        if (!w->desc->view_stats)
            continue;
        pcr_json_printf(&b,
                        "%s    \"%s\": {\"opens\": %llu, \"reads\": %llu, \"bytes\": %llu, "
                        "\"errors\": %llu",
                        nv++ ? ",\n" : "", w->name, (unsigned long long)ld(&c->opens),
                        (unsigned long long)ld(&c->reads), (unsigned long long)ld(&c->bytes),
                        (unsigned long long)ld(&c->errors));
        if (w->desc->view_stats_json)
            w->desc->view_stats_json(w, &b);
        pcr_json_puts(&b, "}");
    }
    pcr_json_puts(&b, "\n  },\n  \"levels\": [\n");
    for (k = 1; k <= vs->levels; k++)
        pcr_json_printf(&b,
                        "    {\"level\": %u, \"opens\": %llu, \"reads\": %llu, "
                        "\"record_bytes\": %llu}%s\n",
                        k, (unsigned long long)st->level[k].opens,
                        (unsigned long long)st->level[k].reads,
                        (unsigned long long)st->level[k].bytes, k < vs->levels ? "," : "");
    pcr_json_puts(&b, "  ],\n");
    for (i = 0; i < pcr_view_ndescs; i++) {
        const struct pcr_view_desc *d = pcr_view_descs[i];
        const struct pcr_view *w = NULL;

        if (!d->json_key || !d->stats_json || d->view_stats)
            continue;
        for (v = 0; v < vs->nroot; v++)
            if (vs->root[v]->desc == d)
                w = vs->root[v];
        pcr_json_printf(&b, "  \"%s\": ", d->json_key);
        if (w)
            d->stats_json(w, &b);
        else
            pcr_json_puts(&b, "null");
        pcr_json_puts(&b, ",\n");
    }
    /* a store in object storage: its requests and cache (pcrfs/backend.h) */
    if (pcr_http_stats(&hs) == 0)
        pcr_json_printf(&b,
                        "  \"http\": {\"requests\": %llu, \"gets\": %llu, \"prefix_fetches\": "
                        "%llu, \"bytes\": %llu, \"retries\": %llu, \"errors\": %llu, "
                        "\"timeouts\": %llu, \"cache_hits\": %llu, \"cache_misses\": %llu, "
                        "\"cache_bytes\": %llu, \"cache_limit\": %llu, \"evictions\": %llu, "
                        "\"throttled\": %llu, \"backoff_ms\": %llu, \"fetch_concurrency\": %llu, "
                        "\"concurrency_cuts\": %llu, \"held_fails\": %llu, \"refetches\": %llu, "
                        "\"heals\": %llu, \"index_refetches\": %llu, \"fetch_bytes\": %llu, "
                        "\"direct_bytes\": %llu, \"front_pushes\": %llu},\n",
                        (unsigned long long)hs.requests, (unsigned long long)hs.gets,
                        (unsigned long long)hs.prefix_fetches, (unsigned long long)hs.bytes,
                        (unsigned long long)hs.retries, (unsigned long long)hs.errors,
                        (unsigned long long)hs.timeouts, (unsigned long long)hs.cache_hits,
                        (unsigned long long)hs.cache_misses, (unsigned long long)hs.cache_bytes,
                        (unsigned long long)hs.cache_limit, (unsigned long long)hs.evictions,
                        (unsigned long long)hs.throttled, (unsigned long long)hs.backoff_ms,
                        (unsigned long long)hs.fetch_concurrency,
                        (unsigned long long)hs.concurrency_cuts, (unsigned long long)st->held_fails,
                        (unsigned long long)hs.refetches, (unsigned long long)st->heals,
                        (unsigned long long)hs.index_refetches, (unsigned long long)hs.fetch_bytes,
                        (unsigned long long)hs.direct_bytes, (unsigned long long)hs.front_pushes);
    /* an s3:// store's credentials: where from and when they expire, no secret */
    if (pcr_http_creds_json(creds, sizeof(creds)) == 0)
        pcr_json_printf(&b, "  \"credentials\": %s,\n", creds);
    pcr_json_printf(&b, "  \"records_advised\": %llu,\n", (unsigned long long)st->advised);
    pcr_json_printf(&b,
                    "  \"errors\": %llu,\n  \"dirs_loaded\": %llu,\n"
                    "  \"files_loaded\": %llu\n}\n",
                    (unsigned long long)st->errors, (unsigned long long)st->dirs_loaded,
                    (unsigned long long)st->files_loaded);
    return json_done(&b, out, len);
}
