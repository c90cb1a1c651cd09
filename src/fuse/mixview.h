/* pcrfs — the mix/ view (-o mix=LO-HI; mixview.c).
 *
 * mix/ mirrors the image tree; each open of a file serves it at a level drawn from
 * LO..HI for that (file, pass), where the pass is how many times the file has been
 * opened in mix/ before. The draw is a pure function of (seed, file id, pass), so a
 * run is repeatable for a seed, and the k-th epoch of a loader that opens every file
 * once per epoch sees the k-th draw of every file. How an open file keeps its level:
 * the dynamic/ mechanism (inode.h), with the level drawn per file instead of set for
 * the mount: a lookup in mix/ returns the inode of the level of the file's next open,
 * and the open, which counts the pass, serves the level its inode names.
 *
 * The distribution (pcrfs(1), "THE MIX VIEW"): uniform on LO..HI, or with
 * -o mix_mean=M the distribution of largest entropy on LO..HI with mean M,
 * p(k) proportional to exp(lambda * k), lambda found by bisection.
 */
#ifndef PCRFS_FUSE_MIXVIEW_H
#define PCRFS_FUSE_MIXVIEW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pcrfs/store.h"

struct pcrfs;
struct pcr_json;
struct view_file_ops;

/* The -o mix=LO-HI, mix_mean=M and mix_seed=N options as given (checked, or NULL). */
struct mix_args {
    char *range, *mean, *seed;
};

struct mix {
    unsigned lo, hi;      /* levels, 1 <= lo <= hi <= L */
    double mean;          /* the distribution's mean (given, or (lo+hi)/2 uniform) */
    bool uniform;         /* no mix_mean */
    uint64_t seed;
    double p[PCR_MAX_LEVELS + 1];      /* [k] probability of level k (0 outside lo..hi) */
    uint64_t below[PCR_MAX_LEVELS + 1]; /* [k]: a draw u < below[k] picks a level <= k */
    uint64_t nfiles;                    /* the store's; passes has nfiles + 1 slots */
    _Atomic uint32_t *passes;           /* [file id] -> opens in mix/ so far */
    atomic_uint_fast64_t served[PCR_MAX_LEVELS + 1]; /* [k] opens served at level k */
};

/* Take one -o mix* option (@name without the '=', @val its value) into @a as it is
 * given: its syntax is checked now (ranges need the store: pcrfs_mix_init), so a
 * malformed value is refused even if a later one replaces it; the last one given
 * counts. @return 0; -1 a bad value (one line in @msg); -ENOMEM. */
int pcrfs_mix_opt(struct mix_args *a, const char *name, const char *val, char *msg, size_t len);
/* Check @a and set up fs->mix (NULL without mix=) once the store is open (levels
 * known). Prints what is wrong. @return 0, -1 a usage error, -ENOMEM. */
int pcrfs_mix_init(const struct mix_args *a, struct pcrfs *fs);
void pcrfs_mix_free(struct pcrfs *fs);

/* The level of the next open of file @id in mix/ (views.c, LEVEL_CURRENT). */
unsigned pcrfs_mix_next(const struct pcrfs *fs, uint64_t id);
/* The level drawn for the open number @pass (from 0) of file @id. */
unsigned pcrfs_mix_draw(const struct mix *m, uint64_t id, uint64_t pass);

/* An open of file @f served level @level (views.c's mix/ open): the file's next
 * open is its next pass. */
void pcrfs_mix_opened(struct pcrfs *fs, const struct pcr_file *f, unsigned level);

/* The "mix" members of /.pcrfs/info and /.pcrfs/stats (control.c): an object or null. */
void pcrfs_mix_info_json(const struct pcrfs *fs, struct pcr_json *b);
void pcrfs_mix_stats_json(const struct pcrfs *fs, struct pcr_json *b);

#endif
