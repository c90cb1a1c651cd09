/* pcrfs — FUSE inode numbers, computed from (view, node).
 *
 * The inode scheme. Every inode number the daemon hands to the kernel is a pure
 * function of what it names, and every request's inode decodes back without a table:
 *
 *    63        56 55 54                                                  0
 *   +------------+--+-----------------------------------------------------+
 *   |    view    |F |  id: the library's directory id (F=0) or file id (F=1)|
 *   +------------+--+-----------------------------------------------------+
 *
 *   view 0        the daemon's own namespace (pcrfsdir.c): directory 1 is the mount
 *                 root (so the root is exactly FUSE_ROOT_ID = 1), directory 2 is
 *                 /.pcrfs; files 1 to 5 are its info, stats, level, codebook.npy
 *                 and records, 6 on the views' control files (refurb_skipped);
 *   view 1..L     scan1/ .. scanL/ (L = pcr_store_levels() <= PCR_MAX_LEVELS = 64),
 *                 serving level K = view;
 *   view L+1      full/, serving level L: the same bytes as scanL/ but its own
 *                 inode numbers, so `cp -a`, `du` and `tar` never take a file of full/
 *                 for a hard link of its twin in scanL/;
 *   view 0x80     dynamic/ (only with -o level=K): its directories;
 *   view 0x80+K   dynamic/'s files *as served at level K* (1 <= K <= L);
 *   view 0x70..77 q90/ q95/ q99/ ... (-o quality=LIST, or a store with a quality
 *                 table): the image tree, each file at the lowest level whose
 *                 MS-SSIM reaches the view's threshold (a level fixed per file, so
 *                 a file's bytes never change: no state, as for scanK/);
 *   view 0x7F     tokens/, when the store holds token grids: its ids are those of
 *                 the store's token tree (pcr_store_open_tokens()), a namespace of its
 *                 own, hence a view of its own; a fixed number (below dynamic/'s
 *                 range, above any L+1) keeps its inodes the same whatever L is;
 *   view 0x7E     refurb/ (-o refurb=R): the image tree's ids, its own number for
 *                 the same reason (src/lib/view/refurb.c);
 *   view 0xC1     mix/ (-o mix=LO-HI): its directories; view 0xC1+K its files as
 *                 served at level K (K <= 62: past dynamic/'s last number 0x80+64,
 *                 so the two never collide; src/lib/view/mix.c).
 *
 * Which view owns which numbers is said once, by the descriptors of the library's
 * views (src/lib/view/: each one's number, and PCR_LEVEL_CURRENT for dynamic/'s
 * V + K). At mount, pcr_views_open() lays them out, one entry per view number (the
 * store tree, level, counters and handlers of that number, and whether its
 * directories, files or both are valid), and refuses a table in which two views
 * claim one number. Decoding an inode is then ino_split() and one index, view_of():
 * still no table of inodes, only a table of at most 256 views. A new view takes a
 * number no row can use whatever L is (66..0x7D: above the largest L+1, below
 * tokens/; or 0xC1..0xFF: past dynamic/'s files) and keeps it for good, so its
 * inodes stay stable across versions as those of the views above do.
 *
 * The dynamic view changes level at run time, yet its inodes stay stateless and
 * immutable: a file's inode names the level it serves, and a lookup in dynamic/
 * returns the inode of the level current at that moment, with an entry timeout of
 * 0 so that every path walk asks again. After a switch, a path resolves to another
 * inode, whose attributes and page cache are the new level's from the start; the
 * old inode keeps serving the old level to whoever still has it open, and its
 * cached pages stay right for it (the store is immutable), so nothing is ever
 * invalidated and nothing stale can be reached by name. (Its pages do not outlive
 * it: FUSE's drop_inode evicts an inode, pages and all, once no dentry or open file
 * holds it, and a name holds one level's inode at a time, so switching back to a
 * level reads again what was not held open; test_fidelity.py measures it.) mix/ uses the same
 * mechanism, with a level chosen per file (the one its next open will serve)
 * instead of one for the mount. (Stable inode numbers with
 * fuse_lowlevel_notify_inval_inode() would not do: the page cache and i_size
 * belong to the inode, not to the open file, so a reader that opened before a
 * switch could be served pages another reader fetched after it, or be cut at the
 * new size.)
 *
 * A view's root directory is the store's root directory (PCR_ROOT_DIR) in that view.
 * Eight bits hold 256 view numbers; 55 bits of id hold far more files than SQLite
 * rows. Id 0 never occurs (library ids start at 1) so inode 0 stays free for
 * negative entries.
 *
 * Why no inode table and no forget bookkeeping (save /.pcrfs/stats, below): FUSE
 * counts lookups so that a filesystem can keep an inode's state alive while the
 * kernel still names it, and free it on FORGET. Here an inode has no state at all.
 * The store is immutable, its ids are valid until pcr_store_close(), and the
 * number itself says which view and which node it is, so any number the kernel ever
 * held stays valid for the life of the mount; FORGET has nothing to free and lookup
 * counts are never looked at.
 * It also makes inode numbers stable across mounts of the same store (for NFS
 * export and for tools that remember st_ino), and costs no memory per file: RSS does
 * not grow with the number of files the kernel has seen.
 */
#ifndef PCRFS_FUSE_INODE_H
#define PCRFS_FUSE_INODE_H

#include <stdbool.h>
#include <stdint.h>

#define INO_VIEW_SHIFT 56
#define INO_FILE_BIT   (UINT64_C(1) << 55)
#define INO_ID_MASK    (INO_FILE_BIT - 1)

/* The daemon's own nodes, in view 0. */
#define VIEW_SELF          0
#define SELF_DIR_ROOT      1 /* the mount root; ino 1 == FUSE_ROOT_ID */
#define SELF_DIR_CTL       2 /* /.pcrfs */
#define SELF_DIR_PREFETCH  3 /* /.pcrfs/prefetch: looking up "N,N,..." prefetches records */
#define SELF_FILE_INFO     1 /* /.pcrfs/info */
#define SELF_FILE_STAT     2 /* /.pcrfs/stats: id SELF_FILE_STAT | gen << SELF_GEN_SHIFT */
#define SELF_FILE_LEVEL    3 /* /.pcrfs/level (with -o level=K) */
#define SELF_FILE_CODEBOOK 4 /* /.pcrfs/codebook.npy (when the store has one) */
#define SELF_FILE_RECORDS  5 /* /.pcrfs/records: the files grouped by record */
#define SELF_FILE_VIEW_CTL 6 /* the views' control files from here on (refurb_skipped) */

/* /.pcrfs/stats changes all the time, yet with no OPEN (ops.c) the kernel caches a
 * file's pages for as long as it keeps the node. So every lookup of "stats" renders
 * a snapshot and hands out a new node for it, generation gen >= 1 in the bits above
 * the file's number, with an entry timeout of 0 (a path walk always looks it up
 * again, as for dynamic/ files): a node's bytes and size never change, so its
 * cached pages are always right, `cat` always shows counters taken just before, and
 * a reader (cp) sees one size and one snapshot from open to close.
 *
 * The st_ino these nodes report is not their node id but always the file's own
 * number (id SELF_FILE_STAT, gen 0), which is also its directory entry's: FUSE keeps
 * the two apart (the kernel finds its inode by node id and shows attr.ino to
 * stat(2)). So the file has one stable inode number, and `cp`, which compares the
 * st_ino of stat(path) with that of fstat() after open and refuses a file "replaced
 * while being copied", copies it.
 *
 * Why not one node whose bytes are rendered at each read: with no OPEN the kernel
 * opens every file as if with FOPEN_KEEP_CACHE and there is no OPEN reply in which
 * to ask for direct I/O for this one file, so one node's cached pages would outlive
 * its counters. The kernel drops them only when a new size is seen (a snapshot of the
 * same length would serve old pages) or on fuse_lowlevel_notify_inval_inode(), which
 * the daemon cannot order before a reader's next read (and which may block on a page
 * lock that only a READ it must answer releases, with -s). And with one node the
 * bytes could change between two read(2) calls of one copy.
 *
 * These are the only nodes with state: the snapshot lives until the kernel forgets
 * the node (FORGET), which it does as soon as the name points elsewhere and no one
 * has the file open, or until PCRFS_MAX_SNAPS (fs.h) newer snapshots have been taken:
 * generation g lives in slot g % PCRFS_MAX_SNAPS, so each descriptor held open
 * costs nothing past that bound, and a descriptor opened that many lookups ago
 * answers ESTALE if its pages are no longer cached. Id SELF_FILE_STAT itself (gen 0)
 * is only a st_ino, never a node the kernel holds. */
#define SELF_GEN_SHIFT 8

/* The view numbers are the library's (src/lib/view/view.h: PCR_VIEW_DYN, ...). */

struct ino_parts {
    unsigned view;
    bool is_file;
    uint64_t id;
};

/* @return the inode number, or 0 if @id does not fit (never for a real store). */
static inline uint64_t ino_make(unsigned view, bool is_file, uint64_t id)
{
    if (id == 0 || id > INO_ID_MASK || view > 0xff)
        return 0;
    return ((uint64_t)view << INO_VIEW_SHIFT) | (is_file ? INO_FILE_BIT : 0) | id;
}

static inline struct ino_parts ino_split(uint64_t ino)
{
    struct ino_parts p = {
        .view = (unsigned)(ino >> INO_VIEW_SHIFT),
        .is_file = (ino & INO_FILE_BIT) != 0,
        .id = ino & INO_ID_MASK,
    };
    return p;
}

static inline bool ino_is_stats(uint64_t ino)
{
    struct ino_parts p = ino_split(ino);

    return p.view == VIEW_SELF && p.is_file && (p.id & ((1u << SELF_GEN_SHIFT) - 1)) ==
                                                   SELF_FILE_STAT && (p.id >> SELF_GEN_SHIFT) != 0;
}

#endif
