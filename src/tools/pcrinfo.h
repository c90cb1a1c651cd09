/* pcrinfo — what its parts share: the command line (pcrinfo.c) runs one mode; the
 * modes that read files (--list, --verify, --cat, --extract) are in pcrinfo_files.c,
 * --fidelity in pcrinfo_fidelity.c. Everything goes through the public API
 * (pcrfs/store.h), exactly as the FUSE driver does, so a store that pcrinfo
 * --verify accepts is one the driver serves correctly.
 */
#ifndef PCRFS_TOOLS_PCRINFO_H
#define PCRFS_TOOLS_PCRINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pcrfs/pcrfs.h"
#include "pcrfs/store.h"
#include "tool.h"

#define FID_SAMPLE    300 /* default --sample */
#define FID_MAX       100000
#define FID_THRESHOLD 0.95 /* PCR: levels with MS-SSIM >= 0.95 keep accuracy */
#define MAX_JOBS      256

/* The path of file @id into @b (raw bytes). @return 0 or a negative errno. */
int file_path(struct pcr_store *s, uint64_t id, struct tool_buf *b);

/* Each mode: @return the exit status (0, or 1 with the messages printed). */
int do_list(struct pcr_store *s);
int do_verify(struct pcr_store *s);
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
int do_fidelity(struct pcr_store *s, const struct fid_args *a);

#endif
