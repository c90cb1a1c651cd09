/* pcrfs library — the options of how a store is read (pcr_store_opt()): one parser
 * for the daemon's -o (src/fuse/main.c) and pcrfs_open() (src/lib/api/pcrfs.c), so
 * both take the same forms, within the same limits, with the same messages
 * (pcrfs(1), OPTIONS; pcrfs(3)). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pcrfs/backend.h"
#include "pcrfs/store.h"
#include "util/optparse.h"

#define MAX_BWLIMIT      UINT64_C(1000000000000)    /* 10^12 bytes/s, as pcrfs(1) */
#define MAX_CACHE_SIZE   UINT64_C(1000000000000000) /* 10^15 bytes */
#define MAX_HTTP_TIMEOUT 86400.0
#define MAX_HTTP_RETRIES 20 /* the cap of backend/httpxfer.c */
#define MAX_PART_SIZE    (UINT64_C(1) << 30)

/* The string options, each kept as given and non-empty (what it may hold is checked
 * where it is used: cache= by the cache, the others by url.c when the store opens). */
static const char *const str_names[] = {"cache", "endpoint", "region", "profile", "ca_bundle"};
#define NSTR (sizeof(str_names) / sizeof(str_names[0]))

static int str_index(const char *name)
{
    for (size_t i = 0; i < NSTR; i++)
        if (!strcmp(name, str_names[i]))
            return (int)i;
    return -1;
}

/* Where string option @i of str_names[] is kept in @o. */
static char **str_slot(struct pcr_store_opts *o, int i)
{
    char **slots[NSTR] = {&o->cache, &o->endpoint, &o->region, &o->profile, &o->ca_bundle};

    return slots[i];
}

int pcr_store_opt_remote_only(const char *name)
{
    return str_index(name) >= 0 || !strcmp(name, "cache_size") || !strcmp(name, "http_timeout") ||
           !strcmp(name, "http_retries") || !strcmp(name, "http_part_size") ||
           !strcmp(name, "http_connections");
}

int pcr_store_opt(struct pcr_store_opts *o, const char *name, const char *val, char *msg,
                  size_t len)
{
    static const char *const readahead_words[] = {"kernel", "record", NULL};
    uint64_t v;
    unsigned w;
    int rc, i;

    if (!strcmp(name, "bwlimit"))
        return pcr_opt_size(name, val, 0, MAX_BWLIMIT, "bytes/s (0: no limit)", &o->bwlimit, msg,
                            len);
    if (!strcmp(name, "readahead")) {
        rc = pcr_opt_word(name, val, readahead_words, &w, msg, len);
        o->readahead_record = rc == 0 ? w == 1 : o->readahead_record;
        return rc;
    }
    if ((i = str_index(name)) >= 0) {
        char **slot = str_slot(o, i), *dup;

        if (!val[0]) {
            pcr_opt_msg(msg, len, name, val, slot == &o->cache ? "want a path" : "want a value");
            return -1;
        }
        dup = strdup(val);
        if (!dup)
            return -ENOMEM;
        free(*slot);
        *slot = dup;
        return 0;
    }
    if (!strcmp(name, "cache_size"))
        return pcr_opt_size(name, val, 1, MAX_CACHE_SIZE, "bytes", &o->cache_size, msg, len);
    if (!strcmp(name, "http_timeout"))
        return pcr_opt_real(name, val, 0, MAX_HTTP_TIMEOUT, 0, "seconds, 0: 10", &o->http_timeout,
                            msg, len);
    if (!strcmp(name, "http_retries")) {
        rc = pcr_opt_uint(name, val, 0, MAX_HTTP_RETRIES, NULL, &v, msg, len);
        o->http_retries = rc == 0 ? (int)v : o->http_retries;
        return rc;
    }
    if (!strcmp(name, "http_part_size"))
        return pcr_opt_size(name, val, PCR_HTTP_PART_SIZE_MIN, MAX_PART_SIZE, "bytes",
                            &o->http_part_size, msg, len);
    if (!strcmp(name, "http_connections")) {
        rc = pcr_opt_uint(name, val, 1, PCR_HTTP_CONNECTIONS_MAX, NULL, &v, msg, len);
        o->http_connections = rc == 0 ? (unsigned)v : o->http_connections;
        return rc;
    }
    return 1;
}

void pcr_store_opts_http(const struct pcr_store_opts *o, struct pcr_http_opts *ho)
{
    ho->cache_dir = o->cache;
    ho->cache_size = o->cache_size;
    ho->timeout_ms = (unsigned)(o->http_timeout * 1000.0);
    ho->retries = o->http_retries;
    ho->part_size = o->http_part_size;
    ho->connections = o->http_connections;
    ho->endpoint = o->endpoint;
    ho->region = o->region;
    ho->profile = o->profile;
    ho->ca_bundle = o->ca_bundle;
}

void pcr_store_opts_apply(const struct pcr_store_opts *o, struct pcr_store *s)
{
    if (o->bwlimit)
        pcr_store_set_bwlimit(s, o->bwlimit);
    if (o->readahead_record)
        pcr_store_set_readahead(s, true);
}

void pcr_store_opts_free(struct pcr_store_opts *o)
{
    for (int i = 0; i < (int)NSTR; i++) {
        free(*str_slot(o, i));
        *str_slot(o, i) = NULL;
    }
}
