/* pcrfs — the /.pcrfs control files' JSON: info (what is mounted) and stats
 * (counters).
 *
 * Both are JSON so that scripts read them with one call; the library renders the
 * store's facts and every view's members (pcr_views_info_json(), _stats_json());
 * what only the daemon knows is added here. info never changes and is rendered once
 * at mount; stats when its name is looked up (a snapshot per lookup, each with an
 * inode of its own: inode.h). The third, /.pcrfs/level (dynamic mounts), is one
 * number, read and written in pcrfsdir.c.
 */
#include <stdio.h>
#include <time.h>

#include "fs.h"

int pcrfs_info_render(struct pcrfs *fs)
{
    char extra[64];

    snprintf(extra, sizeof(extra), ",\n  \"bwlimit\": %llu", (unsigned long long)fs->bwlimit);
    return pcr_views_info_json(fs->views, fs->store_path, extra, &fs->info, &fs->info_len);
}

int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len)
{
    struct timespec now;
    char head[96];

    clock_gettime(CLOCK_MONOTONIC, &now);
    /* no_open: "opens" counts READs at offset 0 (ops.c) */
    snprintf(head, sizeof(head), "  \"uptime_s\": %lld,\n  \"no_open\": %s,\n",
             (long long)(now.tv_sec - fs->started),
             atomic_load_explicit(&fs->no_open, memory_order_relaxed) ? "true" : "false");
    return pcr_views_stats_json(fs->views, head, out, len);
}
