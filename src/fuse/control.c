/* pcrfs — the /.pcrfs control files: info (what is mounted) and stats (counters).
 *
 * Both are JSON so that scripts read them with one call. info never changes and is
 * rendered once at mount; stats is rendered when its name is looked up (a snapshot
 * per lookup, each with an inode of its own: inode.h). The third, /.pcrfs/level (dynamic mounts), is
 * one number, rendered and parsed in ops.c and pcrfs_parse_level() below.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs.h"
#include "util/json.h"
#include "pcrfs/backend.h"

/* The renderers write through the JSON writer shared with the tools (src/util/json.h:
 * one string escaping everywhere), into a growing buffer whose allocation failure is
 * remembered (b.oom) and reported at the end so that the renderers stay linear. */
static void sb_puts(struct pcr_json *b, const char *s)
{
    pcr_json_puts(b, s);
}

__attribute__((format(printf, 2, 3))) static void sb_printf(struct pcr_json *b, const char *fmt,
                                                            ...)
{
    va_list ap;

    va_start(ap, fmt);
    pcr_json_vprintf(b, fmt, ap);
    va_end(ap);
}

/* A JSON string. Store paths and index values are arbitrary bytes: bytes that are
 * not UTF-8 become U+FFFD so the output always parses. */
static void sb_json_str(struct pcr_json *b, const char *str)
{
    pcr_json_quote(b, str, strlen(str));
}

/* A value from the index's meta table: a number if it is all digits, else a string,
 * null if absent. */
static void sb_json_meta(struct pcr_json *b, struct pcr_store *s, const char *key)
{
    char val[512];

    pcr_json_numtext(b, pcr_store_meta(s, key, val, sizeof(val)) < 0 ? NULL : val);
}

static const char *view_name(const struct pcrfs *fs, unsigned view, char *buf, size_t len)
{
    if (view > fs->levels)
        return "full";
    snprintf(buf, len, "scan%u", view);
    return buf;
}

int pcrfs_info_render(struct pcrfs *fs)
{
    struct pcr_json b;
    char name[32];
    unsigned v;

    pcr_json_init(&b, NULL);
    sb_puts(&b, "{\n  \"store\": ");
    sb_json_str(&b, fs->store_path);
    sb_puts(&b, ",\n  \"format_version\": ");
    sb_json_meta(&b, fs->store, "format_version");
    sb_printf(&b, ",\n  \"levels\": %u", fs->levels);
    sb_puts(&b, ",\n  \"script\": ");
    sb_json_meta(&b, fs->store, "script");
    sb_puts(&b, ",\n  \"per_record\": ");
    sb_json_meta(&b, fs->store, "per_record");
    sb_printf(&b, ",\n  \"files\": %llu", (unsigned long long)pcr_store_nfiles(fs->store));
    sb_printf(&b, ",\n  \"dirs\": %llu", (unsigned long long)pcr_store_ndirs(fs->store));
    sb_printf(&b, ",\n  \"records\": %llu", (unsigned long long)pcr_store_nrecords(fs->store));
    sb_printf(&b, ",\n  \"built\": %lld", (long long)fs->mtime);
    sb_printf(&b, ",\n  \"bwlimit\": %llu", (unsigned long long)fs->bwlimit);
    sb_printf(&b, ",\n  \"dynamic\": %s", fs->dynamic ? "true" : "false");
    /* the token tree (tokens/): its size and coder, or null */
    if (fs->tokstore) {
        sb_printf(&b, ",\n  \"tokens\": {\"files\": %llu, \"dirs\": %llu, \"shards\": %llu",
                  (unsigned long long)pcr_store_nfiles(fs->tokstore),
                  (unsigned long long)pcr_store_ndirs(fs->tokstore),
                  (unsigned long long)pcr_store_nrecords(fs->tokstore));
        sb_puts(&b, ", \"coder\": ");
        sb_json_meta(&b, fs->store, "tok_coder");
        sb_printf(&b, ", \"codebook\": %s}", fs->codebook ? "true" : "false");
    } else {
        sb_puts(&b, ",\n  \"tokens\": null");
    }
    sb_puts(&b, ",\n  \"views\": [");
    for (v = 1; v <= fs->levels + 1; v++) {
        sb_puts(&b, v > 1 ? ", \"" : "\"");
        sb_puts(&b, view_name(fs, v, name, sizeof(name)));
        sb_puts(&b, "\"");
    }
    if (fs->dynamic)
        sb_puts(&b, ", \"dynamic\"");
    for (v = 0; v < fs->nq; v++)
        sb_printf(&b, ", \"%s\"", fs->vtab[VIEW_Q + v].name);
    if (fs->mix)
        sb_puts(&b, ", \"mix\"");
    if (fs->tokstore)
        sb_puts(&b, ", \"tokens\"");
    if (fs->refurb)
        sb_puts(&b, ", \"refurb\"");
    /* refurb/ (-o refurb=R): its options as used and how many files it serves and
     * leaves out (/.pcrfs/refurb_skipped lists those), or null */
    /* mix/ (-o mix=LO-HI): its range, seed and the probability of each level, or null */
    sb_puts(&b, "],\n  \"mix\": ");
    pcrfs_mix_info_json(fs, &b);
    sb_puts(&b, ",\n  \"refurb\": ");
    pcrfs_refurb_info_json(fs, &b);
    /* an s3:// store's credentials as found at mount (stats has the current ones) */
    char creds[512];
    if (pcr_http_creds_json(creds, sizeof(creds)) == 0)
        sb_printf(&b, ",\n  \"credentials\": %s", creds);
    sb_printf(&b, ",\n  \"pcrfs_version\": \"%s\"\n}\n", PCR_VERSION);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    fs->info = b.p;
    fs->info_len = b.len;
    return 0;
}

/* "opens": N, "reads": N, "bytes": N, "errors": N of one view */
static void sb_counters(struct pcr_json *b, const struct view_counters *c)
{
    sb_printf(b, "\"opens\": %llu, \"reads\": %llu, \"bytes\": %llu, \"errors\": %llu",
              (unsigned long long)atomic_load_explicit(&c->opens, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&c->reads, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&c->bytes, memory_order_relaxed),
              (unsigned long long)atomic_load_explicit(&c->errors, memory_order_relaxed));
}

int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len)
{
    struct pcr_stats stats, *st = &stats;
    struct pcr_json b;
    struct timespec now;
    char name[32];
    unsigned v, k;

    pcr_json_init(&b, NULL);
    pcr_store_stats(fs->store, st);
    clock_gettime(CLOCK_MONOTONIC, &now);

    /* no_open: "opens" counts READs at offset 0 (ops.c) */
    sb_printf(&b, "{\n  \"uptime_s\": %lld,\n  \"no_open\": %s,\n  \"views\": {\n",
              (long long)(now.tv_sec - fs->started),
              atomic_load_explicit(&fs->no_open, memory_order_relaxed) ? "true" : "false");
    /* qNN/, mix/ and tokens/ first: scan1 always follows, so the comma is always right */
    for (v = 0; v < fs->nq; v++) {
        sb_printf(&b, "    \"%s\": {\"threshold\": %g, ", fs->vtab[VIEW_Q + v].name,
                  fs->qthresh[v]);
        sb_counters(&b, &fs->qviews[v]);
        sb_puts(&b, "},\n");
    }
    if (fs->mix) {
        sb_puts(&b, "    \"mix\": {");
        sb_counters(&b, &fs->mix_view);
        sb_puts(&b, ", \"served\": ");
        pcrfs_mix_stats_json(fs, &b);
        sb_puts(&b, "},\n");
    }
    if (fs->tokstore) {
        struct pcr_stats ts;

        pcr_store_stats(fs->tokstore, &ts);
        sb_puts(&b, "    \"tokens\": {\"level\": 1, ");
        sb_counters(&b, &fs->tok_view);
        sb_printf(&b, ", \"shard_bytes\": %llu},\n", (unsigned long long)ts.level[1].bytes);
    }
    for (v = 1; v <= fs->levels + 1; v++) {
        sb_printf(&b, "    \"%s\": {\"level\": %u, ", view_name(fs, v, name, sizeof(name)),
                  v > fs->levels ? fs->levels : v);
        sb_counters(&b, &fs->views[v]);
        sb_puts(&b, v <= fs->levels || fs->dynamic ? "},\n" : "}\n");
    }
    if (fs->dynamic) {
        sb_printf(&b, "    \"dynamic\": {\"level\": %u, \"switches\": %llu, ",
                  atomic_load(&fs->level_now),
                  (unsigned long long)atomic_load_explicit(&fs->switches, memory_order_relaxed));
        sb_counters(&b, &fs->views[fs->levels + 2]);
        sb_puts(&b, "}\n");
    }
    sb_puts(&b, "  },\n  \"levels\": [\n");
    for (k = 1; k <= fs->levels; k++)
        sb_printf(&b,
                  "    {\"level\": %u, \"opens\": %llu, \"reads\": %llu, "
                  "\"record_bytes\": %llu}%s\n",
                  k, (unsigned long long)st->level[k].opens, (unsigned long long)st->level[k].reads,
                  (unsigned long long)st->level[k].bytes, k < fs->levels ? "," : "");
    sb_puts(&b, "  ],\n");
    /* refurb/: opens and passes, and the library's counters (prepared, hits, waits...) */
    sb_puts(&b, "  \"refurb\": ");
    pcrfs_refurb_stats_json(fs, &b);
    sb_puts(&b, ",\n");
    /* a store in object storage: its requests and cache (pcrfs/backend.h) */
    struct pcr_http_stats hs;
    if (pcr_http_stats(&hs) == 0)
        sb_printf(&b,
                  "  \"http\": {\"requests\": %llu, \"gets\": %llu, \"prefix_fetches\": %llu, "
                  "\"bytes\": %llu, \"retries\": %llu, \"errors\": %llu, \"timeouts\": %llu, "
                  "\"cache_hits\": %llu, \"cache_misses\": %llu, \"cache_bytes\": %llu, "
                  "\"cache_limit\": %llu, \"evictions\": %llu, \"throttled\": %llu, "
                  "\"backoff_ms\": %llu, \"fetch_concurrency\": %llu, "
                  "\"concurrency_cuts\": %llu, \"held_fails\": %llu, \"refetches\": %llu, "
                  "\"heals\": %llu, \"index_refetches\": %llu},\n",
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
                  (unsigned long long)hs.index_refetches);
    /* an s3:// store's credentials: where from and when they expire, no secret */
    char creds[512];
    if (pcr_http_creds_json(creds, sizeof(creds)) == 0)
        sb_printf(&b, "  \"credentials\": %s,\n", creds);
    sb_printf(&b,
              "  \"errors\": %llu,\n  \"dirs_loaded\": %llu,\n"
              "  \"files_loaded\": %llu\n}\n",
              (unsigned long long)st->errors, (unsigned long long)st->dirs_loaded,
              (unsigned long long)st->files_loaded);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

unsigned pcrfs_parse_level(const struct pcrfs *fs, const char *s, size_t len)
{
    unsigned k = 0;
    size_t i;

    if (len == 4 && memcmp(s, "full", 4) == 0)
        return fs->levels;
    if (len == 0 || len > 3)
        return 0; /* 3 digits hold any level (PCR_MAX_LEVELS) and stop overflow */
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        k = k * 10 + (unsigned)(s[i] - '0');
    }
    return k >= 1 && k <= fs->levels ? k : 0;
}
