/* pcrfs — the daemon's inode numbers: the library's node numbers, and the
 * /.pcrfs/stats snapshots (inode.c; no FUSE in it, so tests/unit/test_inode.c links it
 * alone).
 *
 * Every inode number the daemon hands to the kernel is a node number of the library
 * (pcrfs(3); their layout: src/lib/api/node.c): a pure function of what it
 * names, so every request's inode decodes without a table, the root is node 1 ==
 * FUSE_ROOT_ID, and numbers are stable across lookups and across mounts of the same
 * store (for NFS export and for tools that remember st_ino). Why no inode table and no
 * forget bookkeeping (save the snapshots, below): FUSE counts lookups so that a
 * filesystem can keep an inode's state alive while the kernel still names it, and free
 * it on FORGET. Here an inode has no state at all: the store is immutable and a node
 * number stays valid while the store is open, so any number the kernel ever held stays
 * valid for the life of the mount, FORGET has nothing to free, and RSS does not grow
 * with the number of files the kernel has seen.
 *
 * The dynamic view changes level at run time, yet its inodes stay stateless and
 * immutable: a file of dynamic/ has one node per level (PCRFS_NODE_NAME_MOVES), a
 * lookup returns the node of the level current at that moment, with an entry timeout
 * of 0 so that every path walk asks again. After a switch, a path resolves to another
 * inode, whose attributes and page cache are the new level's from the start; the old
 * inode keeps serving the old level to whoever still has it open, and its cached pages
 * stay right for it, so nothing is ever invalidated and nothing stale can be reached
 * by name. (Its pages do not outlive it: FUSE's drop_inode evicts an inode, pages and
 * all, once no dentry or open file holds it, and a name holds one level's inode at a
 * time, so switching back to a level reads again what was not held open;
 * test_fidelity.py measures it.) mix/ uses the same mechanism, with a level chosen per
 * file. (Stable inode numbers with fuse_lowlevel_notify_inval_inode() would not do:
 * the page cache and i_size belong to the inode, not to the open file, so a reader
 * that opened before a switch could be served pages another reader fetched after it,
 * or be cut at the new size.)
 *
 * /.pcrfs/stats changes all the time (PCRFS_NODE_SNAPSHOT), yet with no OPEN (ops.c)
 * the kernel caches a file's pages for as long as it keeps the node. So every lookup
 * of "stats" renders a snapshot and hands out a new inode for it: the stats node's
 * number with a generation gen >= 1 in the bits the library leaves free for it
 * (PCRFS_NODE_GEN_SHIFT), with an entry timeout of 0 (a path walk always looks it up
 * again): an inode's bytes and size never change, so its cached pages are always
 * right, `cat` always shows counters taken just before, and a reader (cp) sees one
 * size and one snapshot from open to close.
 *
 * The st_ino these inodes report is not their node id but always the stats node's
 * own number (gen 0), which is also its directory entry's: FUSE keeps the two apart
 * (the kernel finds its inode by node id and shows attr.ino to stat(2)). So the file
 * has one stable inode number, and `cp`, which compares the st_ino of stat(path) with
 * that of fstat() after open and refuses a file "replaced while being copied", copies
 * it.
 *
 * Why not one inode whose bytes are rendered at each read: with no OPEN the kernel
 * opens every file as if with FOPEN_KEEP_CACHE and there is no OPEN reply in which to
 * ask for direct I/O for this one file, so one inode's cached pages would outlive its
 * counters. The kernel drops them only when a new size is seen (a snapshot of the same
 * length would serve old pages) or on fuse_lowlevel_notify_inval_inode(), which the
 * daemon cannot order before a reader's next read (and which may block on a page lock
 * that only a READ it must answer releases, with -s). And with one inode the bytes
 * could change between two read(2) calls of one copy.
 *
 * These are the only inodes with state: the snapshot lives until the kernel forgets
 * the inode (FORGET), which it does as soon as the name points elsewhere and no one has
 * the file open, or until PCRFS_MAX_SNAPS newer snapshots have been taken: generation g
 * lives in slot g % PCRFS_MAX_SNAPS, so each descriptor held open costs nothing past
 * that bound, and a descriptor opened that many lookups ago answers ESTALE if its pages
 * are no longer cached. Finding one is an index, not a search; one mutex, held only to
 * swap pointers and copy at most one read's bytes.
 */
#ifndef PCRFS_FUSE_INODE_H
#define PCRFS_FUSE_INODE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most snapshots alive at once: each held descriptor of /.pcrfs/stats pins one,
 * so without a bound any user of an allow_other mount could grow the daemon by a few
 * kB per descriptor. 256 x (1.5-18 kB: stats for 1..64 levels, counters of up to
 * 20 digits) is at most 4.6 MB, about 0.5 MB for a 10-level store. */
#define PCRFS_MAX_SNAPS 256

/* A snapshot of /.pcrfs/stats, taken when the name was looked up. */
struct stat_snap {
    uint64_t gen;     /* its inode's generation */
    uint64_t nlookup; /* lookups the kernel has not forgotten yet */
    size_t len;
    char data[]; /* len bytes */
};

struct snaps {
    pthread_mutex_t lock;                    /* guards slot and gen */
    uint64_t stats_node;                     /* the library's node of /.pcrfs/stats */
    uint64_t gen;                            /* the last generation handed out */
    struct stat_snap *slot[PCRFS_MAX_SNAPS]; /* generation g lives in [g % MAX] */
};

void pcrfs_snaps_init(struct snaps *r, uint64_t stats_node);
/* Free every snapshot (the session has ended). */
void pcrfs_snaps_free(struct snaps *r);
/* Is @ino a snapshot's inode? */
bool pcrfs_ino_is_snap(const struct snaps *r, uint64_t ino);
/* The library node inode @ino names (a snapshot's: the stats node). */
uint64_t pcrfs_ino_node(const struct snaps *r, uint64_t ino);
/* Keep @data (@len bytes) as a new snapshot, with one lookup counted.
 * @return 0 and its inode in *@ino; -ENOMEM; -EOVERFLOW no generation left. */
int pcrfs_snaps_add(struct snaps *r, const char *data, size_t len, uint64_t *ino);
/* Copy up to @size bytes at @off of snapshot @ino into @buf (*@outlen, if not NULL)
 * and give its length in *@len (if not NULL): a FORGET or a new lookup in another
 * worker may free it as soon as the lock is released.
 * @return 0; -ESTALE forgotten or evicted. */
int pcrfs_snaps_read(struct snaps *r, uint64_t ino, char *buf, size_t size, uint64_t off,
                     size_t *outlen, size_t *len);
/* Inode @ino was forgotten @nlookup times (any inode: only snapshots have state). */
void pcrfs_snaps_forget(struct snaps *r, uint64_t ino, uint64_t nlookup);

#endif
