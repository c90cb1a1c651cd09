/* pcrfs build — what the parts of the token import share (not the interface: that
 * is tokimport.h). The import is in four files by concern:
 *   tokimport.c        options, the in-memory tree and its numbering, pass 2 (write)
 *   tokimport_npy.c    --tokens DIR: the walk (walk.h) and reading one .npy grid
 *   tokimport_seit.c   --seit: SeiT's release files turned into the tree
 *   tokimport_train.c  pass 1: every grid read and checked, the model trained,
 *                      --codebook
 *
 * Both sources are first turned into the same in-memory tree (struct tdir / tfile,
 * in discovery order), then numbered once the way pcrfs/writer.h wants it: a
 * breadth-first pass that sorts each directory's subdirectories and files by their
 * *final* names. Sorting after the renaming matters: replacing ".npy" by ".tok"
 * can change the byte order of two names ("a.npy" < "a.o.npy" but "a.o.tok" <
 * "a.tok"), and SeiT names arrive in any order.
 */
#ifndef PCRFS_BUILD_TOKIMPORT_INT_H
#define PCRFS_BUILD_TOKIMPORT_INT_H

#include <stdint.h>
#include <sys/types.h>
#include "builder/builder.h"
#include "builder/tokopts.h"

#define MAX_REPORTED 20         /* bad items (and skipped files) listed one by one */
#define SHARD_TOKENS (1u << 24) /* tokens held in memory for one shard: 32 MiB */
/* A PCR_TOK_MAX_TOKENS grid of 8-byte integers plus a generous header, as the
 * library's own pcr_npy_load_grid() allows. */
#define MAX_NPY_BYTES ((size_t)PCR_TOK_MAX_TOKENS * 8 + (1u << 20))
/* The reader refuses a codebook blob larger than this (src/lib/store/), so the
 * builder must too. */
#define MAX_CODEBOOK_BYTES ((size_t)256 << 20)

struct tdir {
    char *name;      /* "" for the root */
    char *rel;       /* --tokens: path relative to DIR ("" for the root) */
    uint64_t parent; /* index of the parent (the root: 0, itself) */
    uint64_t *kids;  /* indices of the subdirectories */
    uint64_t nkids, kidcap;
    uint64_t *files; /* indices of the files */
    uint64_t nfiles, filecap;
    uint64_t id;                      /* final id (1 = root) */
    uint64_t first_child, first_file; /* final ids */
};

struct tfile {
    uint64_t dir;  /* index of its directory */
    char *name;    /* final name, "x.tok" (--tokens: the source is "x.npy") */
    uint64_t seit; /* --seit: the image number */
    uint64_t size; /* source bytes (for the progress callback) */
    unsigned h, w; /* from pass 1 */
    uint64_t hash; /* of the grid read in pass 1, to catch a file changed since */
};

struct tokimport {
    struct tokimport_opts o;     /* as given, per_shard defaulted */
    volatile sig_atomic_t *stop; /* o.rep->cancel: the caller cancelled */
    int rootfd;                  /* --tokens DIR, else -1 */
    struct pcr_seit *seit;       /* --seit, else NULL */
    struct tdir *dirs;           /* [0] is the root; in discovery order */
    uint64_t ndirs, dircap;
    struct tfile *files; /* in discovery order (--tokens: grouped by directory) */
    uint64_t nfiles, filecap;
    uint64_t *dorder;      /* final directory id - 1 -> index in dirs */
    uint64_t *forder;      /* final file id - 1 -> index in files */
    uint64_t total_bytes;  /* source bytes of all grids (progress callback) */
    uint64_t total_tokens; /* sum of H*W (sizes the shard buffer) */
    uint64_t bad, skipped; /* items reported as bad / skipped so far */
    struct {               /* directories never entered (STORE, its temp dir) */
        dev_t dev;
        ino_t ino;
        bool store; /* STORE itself: say so */
    } skip[2];
    unsigned nskip;
    uint8_t *buf; /* an .npy file being read */
    size_t bufcap;
    uint16_t *grid;                  /* pass 1: the grid being read */
    struct pcr_tok_model *model;     /* trained in pass 1 */
    struct pcr_tok_train_report rep; /* what training saw (meta keys) */
    uint8_t *codebook;               /* --codebook file's bytes */
    size_t codebook_len;
    struct pcr_sbuf esc, path; /* message buffers */
};

/* Out of memory: the build returns -ENOMEM (pcr_bld_nomem()). @return -1. */
int ti_nomem(struct tokimport *t);
/* Did memory run out in this build (so that a pass stops and fails)? */
bool ti_out_of_memory(const struct tokimport *t);

/* Append a directory (named @name, child of @parent; @rel its path under --tokens
 * DIR, or NULL) or a file (@name malloc()ed, taken, freed on failure) to the tree.
 * @return the directory's index / the file; out of memory (ti_nomem() said so)
 * UINT64_MAX / NULL. */
uint64_t ti_new_dir(struct tokimport *t, uint64_t parent, const char *name, const char *rel);
struct tfile *ti_new_file(struct tokimport *t, uint64_t dir, char *name);

/* FNV-1a over the shape and the values: a grid read twice must give the same. */
uint64_t ti_grid_hash(const uint16_t *g, unsigned h, unsigned w);
/* The final name of a source name: its last extension replaced by ".tok" (malloc()ed);
 * NULL if too long (errno ENAMETOOLONG) or out of memory (ENOMEM). */
char *ti_tok_name(const char *base);
/* For messages, valid until the next call: DIR/REL/NAME of an .npy source, escaped;
 * the source name of a --tokens file; where a file's grid comes from. */
const char *ti_npy_path(struct tokimport *t, const char *rel, const char *name);
const char *ti_npy_name(const struct tfile *f, char *buf, size_t len);
const char *ti_src_desc(struct tokimport *t, const struct tfile *f);
/* One bad item: reported while few (MAX_REPORTED), counted always. */
void ti_bad(struct tokimport *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One skipped entry (a warning), likewise. */
void ti_skipped(struct tokimport *t, const char *what, const char *why);

/* Number the tree breadth-first (pcrfs/writer.h); two entries of one directory with
 * the same final name are bad items. @return 0, or -1 out of memory (reported). */
int ti_number_tree(struct tokimport *t);

/* --tokens DIR: find every .npy file. @return 0 (bad entries counted); -1; -2
 * interrupted. */
int ti_npy_walk(struct tokimport *t);
/* Read the .npy of @f (in the open directory @dfd) into @grid (@cap tokens).
 * @return 0; -1 bad (reported). */
int ti_load_npy(struct tokimport *t, int dfd, const struct tfile *f, uint16_t *grid, size_t cap,
                unsigned *h, unsigned *w);
/* Read the grid of @f into @grid (@cap tokens): from the SeiT data, or from its
 * .npy through *@dfd, the open directory of the files of *@cur, which this opens
 * (closing the previous one) when @f is in another. A directory that cannot be
 * opened is reported once; its files then give -1 quietly. The caller closes
 * *@dfd (start with -1 and UINT64_MAX). @return 0; -1 bad (reported). */
int ti_read_grid(struct tokimport *t, const struct tfile *f, int *dfd, uint64_t *cur,
                 uint16_t *grid, size_t cap, unsigned *h, unsigned *w);
/* --seit: open the release files and build the tree. @return 0 (bad names counted); -1. */
int ti_seit_tree(struct tokimport *t);

#endif
