/* pcrfs — the views: the tree a mount's root shows, computed by the library (not
 * installed; the FUSE driver and the public API of pcrfs.h are its clients).
 *
 * A view is a directory of the root that mirrors one of the store's trees: scan1/ ..
 * scanL/, full/, dynamic/ (level=K), q90/ q95/ q99/, mix/ (mix=LO-HI), tokens/,
 * refurb/ (refurb=R). Each kind of view is a module (a file of this folder) that
 * exports one descriptor, a struct pcr_view_desc: its name, its options and their
 * parsing, init/start/free of its state, how many directories it adds, the level
 * each serves, its file handlers (names, sizes, open/read/close), its members of the
 * info and stats JSON, its extended attributes and control file, whether it needs
 * an open per read (state changes per open) and what a kernel may cache of it.
 * views.c lists the descriptors, in the order of the root listing: adding a view is
 * its module plus one line there (and meson.build); its number, help text and
 * options are its descriptor's.
 *
 * At open, pcr_views_open() expands the descriptors into struct pcr_view entries, one
 * per view number (the stable numbers the FUSE driver builds inode numbers from,
 * src/lib/api/node.c); a view's directory entry owns its counters and points at its
 * module's state. Everything is read-only after pcr_views_start() but the counters
 * (relaxed atomics) and what each module guards itself.
 */
#ifndef PCRFS_LIB_VIEW_H
#define PCRFS_LIB_VIEW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pcrfs/store.h"

struct pcr_json;
struct pcr_view;
struct pcr_views;

/* View numbers (8 bits: src/lib/api/node.c builds node numbers from them). 0 is no
 * view (the control namespace: the root, /.pcrfs; node.c); scanK is K, full L+1; the others are
 * fixed so that their numbers do not move with L. */
#define PCR_VIEW_NUMBERS   256
#define PCR_VIEW_Q         0x70 /* q90/ ...: PCR_VIEW_Q + i - 1 for the i-th threshold */
#define PCR_VIEW_REFURB    0x7E
#define PCR_VIEW_TOKENS    0x7F
#define PCR_VIEW_DYN       0x80 /* dynamic/: its directories; + K its files at level K */
#define PCR_VIEW_MIX       0xC1 /* mix/: the same scheme */
#define PCR_VIEWS_ROOT_MAX (PCR_MAX_LEVELS + 8)
#define PCR_MAX_QVIEWS     8

/* Counters per view directory: the store counts per level and cannot tell full/
 * from scanL/, which serve the same level. */
struct pcr_view_counters {
    atomic_uint_fast64_t opens;  /* successful opens; with no_open, READs at offset 0 */
    atomic_uint_fast64_t reads;  /* reads answered with data or EOF */
    atomic_uint_fast64_t bytes;  /* bytes returned */
    atomic_uint_fast64_t errors; /* opens and reads that failed (EIO) */
};

enum pcr_view_tree {
    PCR_TREE_IMAGES, /* the store */
    PCR_TREE_TOKENS, /* its token tree (pcr_store_open_tokens()) */
};

enum pcr_view_level_rule {
    /* Instance i serves one level; its files and directories share its number. */
    PCR_LEVEL_FIXED,
    /* Directories are in number V; a file is served at the level K = file_level()
     * when its name is looked up (dynamic/: the current level; mix/: its next
     * draw), and the driver numbers it V + K so that an open file keeps its level. */
    PCR_LEVEL_CURRENT,
};

/* How a view's files are named and served: all members set (the pcr_view_store_*
 * functions may be reused), or NULL for the store's own. With an open, read gets
 * what open() put in *state and no file (f NULL); without one, the file and no state.
 * Functions return 0 or a negative errno; read returns the bytes. */
struct pcr_view_file_ops {
    /* @name in directory @dir -> the node it names (pcr_store_lookup()). */
    int (*lookup)(const struct pcr_view *v, uint64_t dir, const char *name, struct pcr_node *out);
    /* The first entry of @dir at a position >= *@pos (pcr_store_readdir()'s), and in
     * *@pos its position: a view that leaves entries out skips them here. A name made
     * up for the view goes in @namebuf (@namelen >= 512). -ENOENT: none left. */
    int (*readdir)(const struct pcr_view *v, uint64_t dir, uint64_t *pos, struct pcr_dirent *out,
                   char *namebuf, size_t namelen);
    /* The exact number of bytes a read of the whole file returns, or -errno. */
    int64_t (*size)(const struct pcr_view *v, const struct pcr_file *f);
    int (*open)(const struct pcr_view *v, const struct pcr_file *f, void **state);
    ssize_t (*read)(const struct pcr_view *v, const struct pcr_file *f, void *state, char *buf,
                    size_t size, uint64_t off);
    void (*close)(void *state);
};

/* What a kernel may cache, beyond attributes (a node's size never changes). */
struct pcr_view_cache {
    bool names;    /* names of files (else looked up at every path walk) */
    bool listings; /* directory listings */
    bool pages;    /* file pages across opens */
    bool direct;   /* no page cache at all: a file's bytes change per open (refurb/) */
};

/* One kind of view: what its module exports (views.c lists them). */
struct pcr_view_desc {
    const char *name;        /* a directory name, or a pattern with one %u (1..count) */
    const char *const *opts; /* the option names it takes (without '='), NULL-ended */
    /* options whose value is a path (a daemon that changes directory makes them
     * absolute before it hands them on), NULL-ended or NULL */
    const char *const *path_opts;
    const char *help; /* its lines of a daemon's --help, or NULL */
    size_t args_size; /* its parsed options' struct, zeroed at first */
    enum pcr_view_level_rule level_rule;
    enum pcr_view_tree tree;
    struct pcr_view_cache cache;
    bool needs_open;      /* an open changes state (mix/, refurb/): never read without one */
    bool needs_write;     /* a control file is written (dynamic/'s level) */
    bool view_stats;      /* a member of "views" in the stats JSON */
    const char *json_key; /* its own top-level member of info and stats, or NULL */
    const struct pcr_view_file_ops *ops; /* NULL: the store's */

    /* Take option @name=@val into @args: checked now, the last one counts.
     * @return 0; -1 a bad value (one line in @msg); -ENOMEM. */
    int (*opt)(void *args, const char *name, const char *val, char *msg, size_t len);
    void (*args_free)(void *args);
    /* Set up the module's state for @vs's store (levels known) from @args; *@state
     * NULL and 0 when the view is off. @return 0; -EINVAL a usage error, another
     * -errno; a message in @err either way. */
    int (*init)(struct pcr_views *vs, const void *args, void **state, char *err, size_t errlen);
    /* Start threads (after a fork that would leave them behind). @return 0/-errno. */
    int (*start)(void *state, char *err, size_t errlen);
    void (*free)(void *state);
    /* How many directories of this kind (0: none), each's level (FIXED) or the level
     * a lookup of file @id hands out now (CURRENT), name and MS-SSIM threshold. */
    unsigned (*count)(const struct pcr_views *vs, const void *state);
    unsigned number; /* the view number of instance 1; instance i is number + i - 1 */
    unsigned (*number_of)(const struct pcr_views *vs, unsigned i); /* or this */
    unsigned (*level)(const struct pcr_views *vs, const void *state, unsigned i);
    unsigned (*file_level)(const struct pcr_view *v, uint64_t id);
    void (*name_of)(const void *state, unsigned i, char *buf, size_t len);
    double (*threshold)(const void *state, unsigned i);
    /* JSON: members of the view's object in stats (", \"k\": v"), and the value of
     * json_key in info and stats (the state may be NULL: null). */
    void (*view_stats_json)(const struct pcr_view *v, struct pcr_json *b);
    void (*info_json)(const void *state, struct pcr_json *b);
    void (*stats_json)(const struct pcr_view *v, struct pcr_json *b);
    /* Extended attributes of file @id: -ENOSYS none of this view's. */
    int (*getxattr)(const struct pcr_view *v, uint64_t id, const char *name, char *buf, size_t len,
                    size_t *outlen);
    int (*listxattr)(const struct pcr_view *v, uint64_t id, const char **list, size_t *len);
    /* A read-only control file (the driver's /.pcrfs/NAME) and its bytes. */
    const char *ctl_name;
    int (*ctl_data)(const void *state, const char **data, size_t *len);
};

/* One view number in use: a view directory (or, for PCR_LEVEL_CURRENT, the files of
 * one level of it). Read-only after pcr_views_open(), but the counters. */
struct pcr_view {
    struct pcr_views *vs;
    const struct pcr_view_desc *desc;    /* NULL: the number is not in use */
    const struct pcr_view_file_ops *ops; /* desc->ops, or the store's */
    void *state;                         /* its module's (shared by its instances) */
    struct pcr_store *store;
    unsigned level; /* the level its files serve */
    unsigned number;
    unsigned index;                /* instance 1..count */
    bool dirs, files;              /* which nodes carry this number */
    struct pcr_view_counters *ctr; /* its directory's counters (own_ctr, or the dir's) */
    struct pcr_view_counters own_ctr;
    char name[32];    /* its directory in the root ("scan5"); "" for file-only numbers */
    double threshold; /* qNN/: the MS-SSIM its files reach */
};

/* The parsed options of every module (pcr_views_opt()). */
struct pcr_views_args {
    void *args[16]; /* per descriptor, views.c's order */
};

struct pcr_views {
    struct pcr_store *store;
    struct pcr_store *tokstore; /* the token tree, or NULL */
    unsigned levels;
    void *state[16]; /* per descriptor */
    struct pcr_view vtab[PCR_VIEW_NUMBERS];
    const struct pcr_view *root[PCR_VIEWS_ROOT_MAX]; /* the root's directories, in order */
    unsigned nroot;
};

/* The descriptors, in the order of the root listing (views.c). */
extern const struct pcr_view_desc *const pcr_view_descs[];
extern const size_t pcr_view_ndescs;

/* Is @name (without '=') an option of some view? @return its descriptor or NULL. */
const struct pcr_view_desc *pcr_views_opt_desc(const char *name);
/* Take view option @name=@val into @a. @return as desc->opt; -ENOENT not a view's. */
int pcr_views_opt(struct pcr_views_args *a, const char *name, const char *val, char *msg,
                  size_t len);
/* Was an option given of a view whose control file is written (dynamic/: level=K)? */
bool pcr_views_args_want_write(const struct pcr_views_args *a);
void pcr_views_args_free(struct pcr_views_args *a);

/* Lay the views out for @store (and its token tree @tokstore, or NULL) with @a (NULL:
 * defaults). @return 0 and *out; -EINVAL a usage error (message in @err), -ENOMEM. */
int pcr_views_open(struct pcr_store *store, struct pcr_store *tokstore,
                   const struct pcr_views_args *a, struct pcr_views **out, char *err,
                   size_t errlen);
/* Start the modules' threads. @return 0 or -errno with a message in @err. */
int pcr_views_start(struct pcr_views *vs, char *err, size_t errlen);
/* Free everything (no file may be open). The stores stay the caller's. */
void pcr_views_close(struct pcr_views *vs);

/* The state of the module of descriptor @d, or NULL when its view is off. */
void *pcr_views_state(const struct pcr_views *vs, const struct pcr_view_desc *d);
/* Would any view in use be broken by reads without an open (desc->needs_open)? */
bool pcr_views_need_open(const struct pcr_views *vs);

/* The entry of view number @no for a directory (@is_file false) or a file, or NULL. */
const struct pcr_view *pcr_views_get(const struct pcr_views *vs, unsigned no, bool is_file);
/* The view number of file @id of @v as looked up now (CURRENT: V + level). */
unsigned pcr_view_child_number(const struct pcr_view *v, bool is_file, uint64_t id);
/* The root's view directories: @pos from 0; by name. NULL past the end / absent. */
const struct pcr_view *pcr_views_root(const struct pcr_views *vs, unsigned pos);
const struct pcr_view *pcr_views_root_lookup(const struct pcr_views *vs, const char *name);
/* Nodes over every view (statfs). */
uint64_t pcr_views_nodes(const struct pcr_views *vs);

/* The size of @f in @v, and a whole open/read/close, counting in @v's counters. */
int64_t pcr_view_size(const struct pcr_view *v, const struct pcr_file *f);
int pcr_view_open(const struct pcr_view *v, const struct pcr_file *f, void **state);
ssize_t pcr_view_read(const struct pcr_view *v, const struct pcr_file *f, void *state, char *buf,
                      size_t size, uint64_t off);
void pcr_view_close(const struct pcr_view *v, void *state);
/* Count a read that returned @n (bytes, or -errno) in @v's counters. */
void pcr_view_count_read(const struct pcr_view *v, ssize_t n);

/* A level named by @s (@len bytes: "1".."L" or "full") of a store of @levels (base.c).
 * @return the level, or 0 if @s is not one. */
unsigned pcr_view_parse_level(unsigned levels, const char *s, size_t len);

/* The JSON of the info and stats files: the store's facts, the views, their modules'
 * members. @store_path as shown, @extra members the caller adds (written as is
 * before the end, e.g. "bwlimit"), NULL for none. Into a malloc()ed buffer.
 * @return 0 or -ENOMEM. */
int pcr_views_info_json(const struct pcr_views *vs, const char *store_path, const char *extra,
                        char **out, size_t *len);
int pcr_views_stats_json(const struct pcr_views *vs, const char *head, char **out, size_t *len);

/* Extended attributes of file @id in @v (its module's): -ENOSYS none. */
int pcr_view_getxattr(const struct pcr_view *v, uint64_t id, const char *name, char *buf,
                      size_t len, size_t *outlen);
int pcr_view_listxattr(const struct pcr_view *v, uint64_t id, const char **list, size_t *len);
/* Does some view in use answer extended attributes? */
bool pcr_views_have_xattrs(const struct pcr_views *vs);
/* Control files of the modules in use: @pos from 0. @return 0 and its name and bytes;
 * -ENOENT past the end. */
int pcr_views_ctl(const struct pcr_views *vs, unsigned pos, const char **name, const char **data,
                  size_t *len);

/* dynamic.c: the level in its state, and set it (*@old: the one before). */
unsigned pcr_view_dyn_level(const void *state);
void pcr_view_dyn_set(void *state, unsigned k, unsigned *old);

/* dynamic/ (views.c): is it on, its level now, and set it.
 * @return set: 0 or -EINVAL (not a level; -ENOENT no dynamic/). */
bool pcr_views_dynamic(const struct pcr_views *vs);
unsigned pcr_views_level_now(const struct pcr_views *vs);
int pcr_views_set_level(struct pcr_views *vs, unsigned k, unsigned *old);

/* The store's own file handlers (base.c), for modules that change only some. */
extern const struct pcr_view_file_ops pcr_view_store_ops;
int pcr_view_store_lookup(const struct pcr_view *v, uint64_t dir, const char *name,
                          struct pcr_node *out);
int pcr_view_store_readdir(const struct pcr_view *v, uint64_t dir, uint64_t *pos,
                           struct pcr_dirent *out, char *namebuf, size_t namelen);
int64_t pcr_view_store_size(const struct pcr_view *v, const struct pcr_file *f);
int pcr_view_store_open(const struct pcr_view *v, const struct pcr_file *f, void **state);
ssize_t pcr_view_store_read(const struct pcr_view *v, const struct pcr_file *f, void *state,
                            char *buf, size_t size, uint64_t off);
void pcr_view_store_close(void *state);

static inline void pcr_view_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

#endif
