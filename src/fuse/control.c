/* pcrfs — what the daemon adds to the library's control files: /.pcrfs/stats with
 * its own members (uptime, no_open) as snapshots (inode.h), and who may write the
 * writable ones (/.pcrfs/level, user.pcrfs.level).
 *
 * The files themselves (info, stats, level, codebook.npy, records, the views'),
 * their bytes and the rules of writing them are the library's (pcrfs(3);
 * src/lib/api/node.c: one row per file).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fs.h"

int pcrfs_stats_render(struct pcrfs *fs, char **out, size_t *len)
{
    struct timespec now;
    const struct dirahead *da = &fs->dirahead;
    const struct push *pu = &fs->push;
    char head[512];
    ssize_t n;

    clock_gettime(CLOCK_MONOTONIC, &now);
    /* no_open: "opens" counts READs at offset 0 (ops.c); dirahead: directories
     * listed ahead of their lookups, the entries they brought, and those that could
     * not be listed (dirahead.c); push: files handed to the kernel's page cache, their
     * bytes, those of inodes it did not know, and those it refused (push.c) */
    snprintf(head, sizeof(head),
             "  \"uptime_s\": %lld,\n  \"no_open\": %s,\n"
             "  \"dirahead\": {\"on\": %s, \"listed\": %llu, \"entries\": %llu, "
             "\"failed\": %llu},\n"
             "  \"push\": {\"on\": %s, \"files\": %llu, \"bytes\": %llu, \"unknown\": %llu, "
             "\"failed\": %llu},\n",
             (long long)(now.tv_sec - fs->started),
             atomic_load_explicit(&fs->no_open, memory_order_relaxed) ? "true" : "false",
             da->on ? "true" : "false",
             (unsigned long long)atomic_load_explicit(&da->listed, memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&da->entries, memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&da->failed, memory_order_relaxed),
             pu->on ? "true" : "false",
             (unsigned long long)atomic_load_explicit(&pu->files, memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&pu->bytes, memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&pu->unknown, memory_order_relaxed),
             (unsigned long long)atomic_load_explicit(&pu->failed, memory_order_relaxed));
    n = pcrfs_stats_json_ex(fs->store, head, out);
    if (n < 0)
        return (int)n;
    *len = (size_t)n;
    return 0;
}

int pcrfs_stats_snap(struct pcrfs *fs, uint64_t *ino)
{
    char *data;
    size_t len;
    int rc = pcrfs_stats_render(fs, &data, &len);

    if (rc)
        return rc;
    rc = pcrfs_snaps_add(&fs->snaps, data, len, ino);
    free(data);
    return rc;
}

bool pcrfs_may_control(const struct pcrfs *fs, fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);

    return ctx && (ctx->uid == 0 || ctx->uid == fs->uid);
}
