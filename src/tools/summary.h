/* pcrfs tools — the summary of a store and its PCR table.
 *
 * Computed from an open store alone (the index, plus the sizes of the store's
 * files), so that mkpcrfs, which prints it for the store it has just written, and
 * pcrinfo print the same text by construction.
 */
#ifndef PCRFS_SUMMARY_H
#define PCRFS_SUMMARY_H

#include <stdio.h>
#include "pcrfs/store.h"

struct summary;

/* The MS-SSIM thresholds of the per-image table (pcrinfo(1)) besides @extra ones. */
#define SUMMARY_THRESHOLDS     0.90, 0.95, 0.99
#define SUMMARY_MAX_THRESHOLDS 19 /* the three above and 16 more */

/* Read every file's row of @s (opened from @path) and the sizes of the store's
 * files. The per-image table (stores built with mkpcrfs --quality) has a row for
 * each of SUMMARY_THRESHOLDS and of the @nextra thresholds @extra (in (0, 1];
 * duplicates are dropped, at most SUMMARY_MAX_THRESHOLDS in all).
 * @return 0, or a negative errno with a message in @err. */
int summary_compute(struct pcr_store *s, const char *path, const double *extra, size_t nextra,
                    struct summary **out, char *err, size_t errlen);
void summary_print_text(const struct summary *sm, FILE *f);
void summary_print_json(const struct summary *sm, FILE *f);
/* JPEG files in the store (for the build rate). */
uint64_t summary_njpeg(const struct summary *sm);
/* JPEGs with a per-level MS-SSIM (mkpcrfs --quality): 0 means the per-image table
 * is not printed. */
uint64_t summary_nmeasured(const struct summary *sm);
void summary_free(struct summary *sm);

#endif
