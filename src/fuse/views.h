/* pcrfs — the table of views (views.c).
 *
 * A view is a directory of the mount root that mirrors one of the store's trees:
 * scan1/ .. scanL/, full/, dynamic/ (-o level=K), q90/ q95/ q99/, mix/ (-o mix=LO-HI:
 * mixview.c), tokens/, refurb/ (-o refurb=R: refurbview.c). Everything the handlers
 * need to know about a view is one row of the table in views.c, a struct view_row:
 *
 *   name        its directory name, or a pattern with one %u for a family (scan%u);
 *   count       how many directories of the row this mount has (0: none; L: scanK);
 *   ino_view    the inode view number (inode.h) of each, and level what it serves;
 *   level_rule  LEVEL_FIXED, or LEVEL_CURRENT (dynamic/, mix/: the level current
 *               when a file's name is looked up, row->file_level, named by the
 *               file's inode);
 *   tree        the store tree it serves: the images or the tokens;
 *   cache       what the kernel may keep: names of files, listings, file pages;
 *   counters    its slot in the per-view counters of /.pcrfs/stats;
 *   ops         its handlers: name mapping (lookup, readdir), size, open/read/close;
 *               NULL for the store's own (size from the index at the view's level,
 *               pcr_handle_* with OPEN, pcr_store_pread() without).
 *
 * Adding a view is one row plus the functions it needs: refurb/ (refurbview.c)
 * serves a/b.JPEG as a/b.JPEG.ppm with a lookup and a readdir that add and strip
 * ".ppm" (and leave out what it cannot serve), a constant size, an open that
 * renders, and an inode view number of its own (inode.h).
 * At mount, pcrfs_views_init() expands the rows into fs->vtab, one struct view per
 * inode view number, so that a request finds its view with one index: view_of().
 * (The JSON of /.pcrfs/info and stats, in control.c, still lists views itself.)
 */
#ifndef PCRFS_FUSE_VIEWS_H
#define PCRFS_FUSE_VIEWS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "inode.h"
#include "pcrfs/store.h"

struct pcrfs;
struct view;

/* Counters kept by the driver, per view: the library counts per level and cannot
 * tell full/ from scanL/, which serve the same level. */
struct view_counters {
    atomic_uint_fast64_t opens;  /* successful opens; with no_open, READs at offset 0 */
    atomic_uint_fast64_t reads;  /* READ requests answered with data or EOF */
    atomic_uint_fast64_t bytes;  /* bytes returned to the kernel */
    atomic_uint_fast64_t errors; /* opens and reads that failed (EIO) */
};

enum view_tree {
    TREE_IMAGES, /* fs->store */
    TREE_TOKENS, /* fs->tokstore (pcr_store_open_tokens()) */
};

enum view_level_rule {
    /* Instance i serves level(fs, i); its files and directories share its inode view. */
    LEVEL_FIXED,
    /* Directories are in the row's inode view V; a file's inode is in view V + K for
     * the level K = row->file_level() when its name was looked up (dynamic/: the
     * mount's level; mix/: the level of the file's next open; inode.h). */
    LEVEL_CURRENT,
};

/* How a view's files are named and served: all members set (views.c's store_*
 * functions may be reused), or no ops at all for the store's own. With OPEN, read
 * gets what open() put in *state and no file (f NULL); without OPEN (ops.c "No
 * OPEN") the file and no state: it reads from the inode alone. Functions return 0
 * or a negative errno; read returns the bytes. */
struct view_file_ops {
    /* @name in directory @dir -> the node it names (pcr_store_lookup()). */
    int (*lookup)(const struct view *v, uint64_t dir, const char *name, struct pcr_node *out);
    /* The first entry of @dir at a position >= *@pos (pcr_store_readdir()'s
     * positions), and in *@pos its position: a view that leaves entries out skips
     * them here, and a listing resumed at *@pos + 1 goes on after it. A name made up
     * for the view goes in @namebuf (@namelen >= 512). -ENOENT: none left. */
    int (*readdir)(const struct view *v, uint64_t dir, uint64_t *pos, struct pcr_dirent *out,
                   char *namebuf, size_t namelen);
    /* The exact number of bytes a read of the whole file returns. */
    uint64_t (*size)(const struct view *v, const struct pcr_file *f);
    int (*open)(const struct view *v, const struct pcr_file *f, void **state);
    ssize_t (*read)(const struct view *v, const struct pcr_file *f, void *state, char *buf,
                    size_t size, uint64_t off);
    void (*close)(void *state);
};

/* What the kernel may cache, beyond attributes (always fs->timeout: a node's size
 * never changes, inode.h). */
struct view_cache {
    bool names;    /* names of files, for fs->timeout (else 0: looked up at every walk) */
    bool listings; /* directory listings (FOPEN_CACHE_DIR) */
    bool pages;    /* file pages across opens (FOPEN_KEEP_CACHE, unless -o nokeep_cache) */
    bool direct;   /* no page cache at all (FOPEN_DIRECT_IO): a file's bytes change from
                    * one open to the next (refurb/); needs OPEN (main.c) */
};

struct view_row {
    const char *name; /* a directory name, or a pattern with one %u (1..count) */
    unsigned (*count)(const struct pcrfs *fs);
    unsigned (*ino_view)(const struct pcrfs *fs, unsigned i);
    unsigned (*level)(const struct pcrfs *fs, unsigned i); /* LEVEL_FIXED only */
    enum view_level_rule level_rule;
    enum view_tree tree;
    struct view_cache cache;
    struct view_counters *(*counters)(struct pcrfs *fs, unsigned i);
    const struct view_file_ops *ops;
    /* Optional: instance i's directory name (else name is a pattern of i), and the
     * MS-SSIM threshold its files are served at (per-image quality views). */
    void (*name_of)(const struct pcrfs *fs, unsigned i, char *buf, size_t len);
    double (*threshold)(const struct pcrfs *fs, unsigned i);
    /* LEVEL_CURRENT: the level a lookup of file @id hands out now. */
    unsigned (*file_level)(const struct pcrfs *fs, uint64_t id);
};

/* One inode view number in use: a view directory (or, for LEVEL_CURRENT, the files
 * of one level of it), as pcrfs_views_init() laid it out. Read-only after mount. */
struct view {
    struct pcrfs *fs;                /* the mount (for views with state: refurb/) */
    const struct view_row *row;      /* NULL: not a store view (view 0 is the daemon's own) */
    const struct view_file_ops *ops; /* row->ops, or the store's */
    struct pcr_store *store;
    unsigned level;    /* the level its files serve */
    unsigned ino_view; /* its number */
    bool dirs, files;  /* which nodes carry this number */
    struct view_counters *ctr;
    char name[32]; /* its directory in the root ("scan5"); "" for file-only numbers */
    double threshold; /* qNN/: the MS-SSIM its files reach (row->threshold) */
};

/* Inode view numbers (8 bits, inode.h), and the most view directories in the root
 * (which lists them in table order, then .pcrfs). */
#define PCRFS_VIEW_NUMBERS 256
#define VIEWS_ROOT_MAX     (PCR_MAX_LEVELS + 8)

/* Lay the rows out for this mount (fs->levels, fs->dynamic, fs->tokstore known).
 * @return 0, or -EINVAL if two rows claim one inode view number (a table bug). */
int pcrfs_views_init(struct pcrfs *fs);

/* The view of node @p, or NULL if @p is not a node of a store view. */
const struct view *view_of(const struct pcrfs *fs, struct ino_parts p);

/* The inode of node @id of @v as a child: with LEVEL_CURRENT a file's is the one of
 * the level current now. 0 if it does not fit (inode.h). */
uint64_t view_child_ino(const struct pcrfs *fs, const struct view *v, bool is_file, uint64_t id);

/* How long the kernel may keep a name -> @child of @v. */
double view_entry_timeout(const struct pcrfs *fs, const struct view *v, bool is_file);

/* The root directory: its view entries (@pos from 0), and a lookup among them.
 * @return 0 and *name / *ino; -ENOENT past the end / no such view. */
int views_root_entry(const struct pcrfs *fs, uint64_t pos, const char **name, uint64_t *ino);
int views_root_lookup(const struct pcrfs *fs, const char *name, uint64_t *ino);
unsigned views_root_count(const struct pcrfs *fs);

/* Nodes over every view, for statfs's f_files. */
uint64_t views_nodes(const struct pcrfs *fs);

#endif
