/* pcrfs — a node's attributes as the kernel gets them: the library's (size, links,
 * what is writable) and what every node shares (owner, times, modes, st_blksize);
 * a stats snapshot's from its bytes (inode.h). ops.c and writes.c call it; it calls
 * only inode.c and the library. Why 1 MiB of st_blksize and exact st_blocks: ops.c's
 * head comment.
 */
#include <string.h>
#include <sys/stat.h>

#include "fs.h"

static void stat_common(const struct pcrfs *fs, struct stat *st, uint64_t ino)
{
    st->st_ino = ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_blksize = PCRFS_BLKSIZE;
    st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = (time_t)fs->mtime;
}

void pcrfs_stat_dir(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t nsubdirs)
{
    stat_common(fs, st, ino);
    st->st_mode = S_IFDIR | 0555;
    /* exact, so find(1)'s leaf optimisation stays correct */
    st->st_nlink = (nlink_t)(2 + nsubdirs);
    /* directories have no bytes of their own: `du -sb` then sums file sizes only */
    st->st_size = 0;
}

void pcrfs_stat_file(const struct pcrfs *fs, struct stat *st, uint64_t ino, uint64_t size)
{
    stat_common(fs, st, ino);
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = (off_t)size;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
}

int pcrfs_node_attr(struct pcrfs *fs, fuse_ino_t ino, struct stat *st, unsigned *flags)
{
    struct pcrfs_node_attr a;
    size_t len;
    int rc;

    memset(st, 0, sizeof(*st));
    if (pcrfs_ino_is_snap(&fs->snaps, ino)) {
        rc = pcrfs_snaps_read(&fs->snaps, ino, NULL, 0, 0, NULL, &len);
        if (rc)
            return rc;
        /* st_ino is the file's, not the snapshot's: one file, however many snapshots */
        pcrfs_stat_file(fs, st, fs->snaps.stats_node, len);
        if (flags)
            *flags = PCRFS_NODE_CONTROL | PCRFS_NODE_FIXED | PCRFS_NODE_SNAPSHOT;
        return 0;
    }
    rc = pcrfs_node_stat(fs->store, ino, &a);
    if (rc)
        return rc;
    if (a.flags & PCRFS_NODE_DIR)
        pcrfs_stat_dir(fs, st, ino, a.nsubdirs);
    else
        pcrfs_stat_file(fs, st, ino, a.size);
    if (a.flags & PCRFS_NODE_WRITABLE)
        st->st_mode = S_IFREG | 0644; /* the mounting user may write it */
    if (a.flags & PCRFS_NODE_HINTS)
        st->st_mode = S_IFDIR | 0500; /* hints from the mounting user (and root) */
    if (flags)
        *flags = a.flags;
    return 0;
}
