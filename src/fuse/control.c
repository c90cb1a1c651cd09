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
#include "pcrfs/backend.h"

/* A growing string; an allocation failure is remembered and reported at the end so
 * the renderers stay linear. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static bool sb_reserve(struct sbuf *b, size_t more)
{
    size_t cap;
    char *p;

    if (b->oom)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1)
        cap *= 2;
    p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (!sb_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the well-formed UTF-8 sequence at @s (at most @n bytes), 0 if none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len, i;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, cp = s[0] & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* overlong forms, surrogates and code points past U+10FFFF are not UTF-8 */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string. Store paths and index values are arbitrary bytes: bytes that are
 * not UTF-8 become U+FFFD so the output always parses. */
static void sb_json_str(struct sbuf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str), i = 0, k;

    sb_putn(b, "\"", 1);
    while (i < n) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_putn(b, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(b, "\\u%04x", c);
            i++;
        } else if ((k = utf8_seq(s + i, n - i)) > 0) {
            sb_putn(b, (const char *)s + i, k);
            i += k;
        } else {
            sb_puts(b, "\\ufffd");
            i++;
        }
    }
    sb_putn(b, "\"", 1);
}

/* A value from the index's meta table: a number if it is all digits, else a string,
 * null if absent. */
static void sb_json_meta(struct sbuf *b, struct pcr_store *s, const char *key)
{
    char val[512];
    ssize_t n = pcr_store_meta(s, key, val, sizeof(val));
    size_t i;

    if (n < 0) {
        sb_puts(b, "null");
        return;
    }
    for (i = 0; val[i] >= '0' && val[i] <= '9'; i++)
        ;
    if (i > 0 && i < 19 && val[i] == '\0' && (val[0] != '0' || i == 1))
        sb_puts(b, val);
    else
        sb_json_str(b, val);
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
    struct sbuf b = {0};
    char name[32];
    unsigned v;

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
    if (fs->tokstore)
        sb_puts(&b, ", \"tokens\"");
    sb_printf(&b, "],\n  \"pcrfs_version\": \"%s\"\n}\n", PCR_VERSION);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    fs->info = b.p;
    fs->info_len = b.len;
    return 0;
}

int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len)
{
    struct pcr_stats stats, *st = &stats;
    struct sbuf b = {0};
    struct timespec now;
    char name[32];
    unsigned v, k;

    pcr_store_stats(fs->store, st);
    clock_gettime(CLOCK_MONOTONIC, &now);

    /* no_open: "opens" counts READs at offset 0 (ops.c) */
    sb_printf(&b, "{\n  \"uptime_s\": %lld,\n  \"no_open\": %s,\n  \"views\": {\n",
              (long long)(now.tv_sec - fs->started),
              atomic_load_explicit(&fs->no_open, memory_order_relaxed) ? "true" : "false");
    /* tokens/ first: scan1 always follows, so the comma is always right */
    if (fs->tokstore) {
        const struct view_counters *c = &fs->tok_view;
        struct pcr_stats ts;

        pcr_store_stats(fs->tokstore, &ts);
        sb_printf(&b,
                  "    \"tokens\": {\"level\": 1, \"opens\": %llu, \"reads\": %llu, "
                  "\"bytes\": %llu, \"errors\": %llu, \"shard_bytes\": %llu},\n",
                  (unsigned long long)atomic_load_explicit(&c->opens, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->reads, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->bytes, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->errors, memory_order_relaxed),
                  (unsigned long long)ts.level[1].bytes);
    }
    for (v = 1; v <= fs->levels + 1; v++) {
        const struct view_counters *c = &fs->views[v];
        sb_printf(&b,
                  "    \"%s\": {\"level\": %u, \"opens\": %llu, \"reads\": %llu, "
                  "\"bytes\": %llu, \"errors\": %llu}%s\n",
                  view_name(fs, v, name, sizeof(name)), v > fs->levels ? fs->levels : v,
                  (unsigned long long)atomic_load_explicit(&c->opens, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->reads, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->bytes, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->errors, memory_order_relaxed),
                  v <= fs->levels || fs->dynamic ? "," : "");
    }
    if (fs->dynamic) {
        const struct view_counters *c = &fs->views[fs->levels + 2];
        sb_printf(&b,
                  "    \"dynamic\": {\"level\": %u, \"switches\": %llu, \"opens\": %llu, "
                  "\"reads\": %llu, \"bytes\": %llu, \"errors\": %llu}\n",
                  atomic_load(&fs->level_now),
                  (unsigned long long)atomic_load_explicit(&fs->switches, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->opens, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->reads, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->bytes, memory_order_relaxed),
                  (unsigned long long)atomic_load_explicit(&c->errors, memory_order_relaxed));
    }
    sb_puts(&b, "  },\n  \"levels\": [\n");
    for (k = 1; k <= fs->levels; k++)
        sb_printf(&b,
                  "    {\"level\": %u, \"opens\": %llu, \"reads\": %llu, "
                  "\"record_bytes\": %llu}%s\n",
                  k, (unsigned long long)st->level[k].opens, (unsigned long long)st->level[k].reads,
                  (unsigned long long)st->level[k].bytes, k < fs->levels ? "," : "");
    sb_puts(&b, "  ],\n");
    /* a store in object storage: its requests and cache (pcrfs/backend.h) */
    struct pcr_http_stats hs;
    if (pcr_http_stats(&hs) == 0)
        sb_printf(&b,
                  "  \"http\": {\"requests\": %llu, \"gets\": %llu, \"prefix_fetches\": %llu, "
                  "\"bytes\": %llu, \"retries\": %llu, \"errors\": %llu, \"timeouts\": %llu, "
                  "\"cache_hits\": %llu, \"cache_misses\": %llu, \"cache_bytes\": %llu, "
                  "\"cache_limit\": %llu, \"evictions\": %llu},\n",
                  (unsigned long long)hs.requests, (unsigned long long)hs.gets,
                  (unsigned long long)hs.prefix_fetches, (unsigned long long)hs.bytes,
                  (unsigned long long)hs.retries, (unsigned long long)hs.errors,
                  (unsigned long long)hs.timeouts, (unsigned long long)hs.cache_hits,
                  (unsigned long long)hs.cache_misses, (unsigned long long)hs.cache_bytes,
                  (unsigned long long)hs.cache_limit, (unsigned long long)hs.evictions);
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
    size_t i = 0, digits = 0;

    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\t' ||
                       s[len - 1] == '\r' || s[len - 1] == '\0'))
        len--;
    if (len == 4 && memcmp(s, "full", 4) == 0)
        return fs->levels;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        k = k * 10 + (unsigned)(s[i] - '0');
        if (++digits > 3 || k > fs->levels)
            return 0; /* also stops overflow */
    }
    return digits && k >= 1 ? k : 0;
}
