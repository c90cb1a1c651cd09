/* pcrinfo — what its parts share: the command line and the summary (pcrinfo.c)
 * run one mode; the modes that read files (--list, --verify, --cat, --extract) and
 * --fidelity are in pcrinfo_files.c. Everything goes through the public API
 * (pcrfs/pcrfs.h, pcrfs(3)) alone, as the FUSE driver does: pcrinfo links
 * libpcrfs.so, which exports nothing else, so a store that pcrinfo --verify
 * accepts is one the library serves, and any other user can do what it does.
 */
#ifndef PCRFS_TOOLS_PCRINFO_H
#define PCRFS_TOOLS_PCRINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/pcrfs.h"
#include "tool.h"

#define FID_SAMPLE    300 /* default --sample */
#define FID_MAX       100000
#define FID_THRESHOLD 0.95 /* PCR: levels with MS-SSIM >= 0.95 keep accuracy */
#define MAX_JOBS      256

/* Each mode: @return the exit status (0, or 1 with the messages printed). */
int do_list(pcrfs_store *ps);
int do_verify(pcrfs_store *ps);
int do_cat(pcrfs_store *ps, const char *path, unsigned level);
/* --extract: refuses a DEST inside @store (its path); on failure or interrupt
 * removes DEST whole (or says it could not); exit 130 when interrupted. */
int do_extract(pcrfs_store *ps, const char *store, const char *dest, unsigned level);

struct fid_args {
    size_t sample;
    uint64_t seed;
    double threshold;
    unsigned jobs;
    bool json;
    bool progress; /* the progress line on stderr (a terminal, no -q) */
};
int do_fidelity(pcrfs_store *ps, const struct fid_args *a);

#endif
