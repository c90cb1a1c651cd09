/* pcrfs — the refurb/ view (-o refurb=R; refurbview.c).
 *
 * refurb/ mirrors the store's tree; a JPEG a/b.JPEG appears as a/b.JPEG.ppm, a
 * binary PPM of S x S RGB pixels: the refurbishing library's partial augmentation
 * (decode at the level K, RandomResizedCrop, resize, flip; include/pcrfs/refurb.h,
 * doc/REFURB.md). A file's content stays the same for R consecutive opens, then
 * changes (the library's balanced schedule); the version an open serves is fixed
 * when the file is opened and held by the handle until it is closed.
 */
#ifndef PCRFS_FUSE_REFURBVIEW_H
#define PCRFS_FUSE_REFURBVIEW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pcrfs/refurb.h"
#include "pcrfs/store.h"

struct pcrfs;
struct pcr_json;
struct view_file_ops;

/* The -o refurb=R and refurb_* options as given (checked, or NULL). */
struct refurb_args {
    char *r, *size, *scale, *ratio, *flip, *level, *seed, *threads, *cache, *cache_size;
};

/* What the command line asked for (main.c). */
struct refurb_setup {
    unsigned r;                  /* 0: no refurb/ */
    struct pcr_refurb_conf conf; /* size, scale, ratio, flip, seed */
    unsigned level;              /* 1..L */
    unsigned threads;            /* background workers */
    const char *cache_dir;       /* NULL: RAM */
    uint64_t cache_bytes;        /* 0: the default (refurbview.c, refurb_default_cache) */
};

struct refurb {
    struct pcr_refurb *ctx; /* NULL until pcrfs_refurb_start() */
    struct pcr_store *store;
    struct refurb_setup set; /* as used: cache_bytes resolved */
    bool cache_default;      /* cache_bytes was chosen, not given */
    uint64_t cache_needed;   /* bytes for one version of every sample, and some */
    uint64_t nfiles;         /* the store's */
    uint64_t n;              /* samples: the files refurb/ serves */
    uint32_t *sample_of;     /* [file id] -> sample + 1; 0: not served */
    uint32_t *file_of;       /* [sample] -> file id */
    _Atomic uint32_t *nopen; /* [sample] -> opens so far */
    atomic_uint_fast64_t opens, scheduled, refused, failed_opens;
    char *skipped; /* /.pcrfs/refurb_skipped: "PATH\tREASON\n" lines */
    size_t skipped_len;
    uint64_t nskipped;
    double scan_s; /* the mount-time scan of the file table */
};

/* Take one -o refurb* option (@name without the '=', @val its value) into @a as
 * it is given: its syntax and every range that needs no store are checked now,
 * so a malformed value is refused even if a later one replaces it; the last one
 * given counts. @return 0; -1 a bad value or an unknown name (one line in @msg);
 * -ENOMEM. */
int pcrfs_refurb_opt(struct refurb_args *a, const char *name, const char *val, char *msg,
                     size_t len);
/* Turn @a into @set (defaults for what is not given; r 0 without refurb=), once
 * the store is open (levels are known). Prints what is wrong.
 * @return 0 or -1 (a usage error). */
int pcrfs_refurb_parse(const struct refurb_args *a, const struct pcrfs *fs,
                       struct refurb_setup *set);
void pcrfs_refurb_args_free(struct refurb_args *a);

/* Scan the store's files (which refurb/ serves, which it leaves out and why), lay out
 * the per-sample counters and check that a context opens with these options (the
 * cache directory included). Before the mount, so errors reach the terminal.
 * @return 0; -errno with a message in @err. */
int pcrfs_refurb_init(struct pcrfs *fs, const struct refurb_setup *set, char *err, size_t errlen);
/* Start the context and its worker threads: after the fork of daemon.c, which would
 * leave threads behind. @return 0 or -errno. */
int pcrfs_refurb_start(struct pcrfs *fs);
/* Stop the workers and free everything (no file may be open any more). */
void pcrfs_refurb_free(struct pcrfs *fs);

extern const struct view_file_ops refurb_ops;

/* user.pcrfs.refurb ("VERSION TOP LEFT HEIGHT WIDTH FLIP" of the last open of the
 * file, -ENODATA before the first) and user.pcrfs.refurb_next (the same for the
 * version the next open will serve) on refurb/ files. -ENOSYS: @ino is not one. */
int pcrfs_refurb_getxattr(struct pcrfs *fs, uint64_t ino, const char *name, char *buf, size_t len,
                          size_t *outlen);
int pcrfs_refurb_listxattr(struct pcrfs *fs, uint64_t ino, const char **list, size_t *len);

/* The "refurb" members of /.pcrfs/info and /.pcrfs/stats (control.c): a JSON object
 * or null. */
void pcrfs_refurb_info_json(const struct pcrfs *fs, struct pcr_json *b);
void pcrfs_refurb_stats_json(struct pcrfs *fs, struct pcr_json *b);

#endif
