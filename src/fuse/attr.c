/* pcrfs — the attributes every node shares: owner, times, modes, st_blksize (a
 * leaf: ops.c and pcrfsdir.c fill their nodes' stat with it). Why 1 MiB of
 * st_blksize and exact st_blocks: ops.c's head comment.
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

