/* pcrfs build — importing token grids into a store (mkpcrfs --tokens / --seit).
 *
 * Two sources, one result: a token tree numbered like the image tree (pcrfs/writer.h)
 * whose files are named "<image>.tok" and served by the /tokens view as NumPy arrays.
 *   --tokens DIR   a tree of per-image .npy files of any depth; DIR/a/b/x.npy becomes
 *                  tokens/a/b/x.tok (".npy" replaced by ".tok"; directories keep their
 *                  names, so the tree mirrors the image tree it was made from);
 *   --seit DATA    SeiT's release files (pcr_seit_open()): with a names file, the name
 *                  "a/b/x.JPEG" becomes tokens/a/b/x.tok (the last extension replaced
 *                  by ".tok"); without, image i becomes "<label>/<k>.tok" with the
 *                  zero-padded label and index within the label of pcr_seit_name().
 *
 * The import runs in two passes so that memory does not grow with the dataset:
 *   tokimport_scan()   walks or opens the source, reads and validates every grid
 *                      (every bad item is reported, by name, before anything is
 *                      written) and trains the model on all of them;
 *   tokimport_write()  reads every grid again, in file-id order, and hands them to
 *                      the writer in shards; a grid that changed between the passes
 *                      is an error (the model was trained on the old one).
 * Only the SeiT data file, which the library holds in memory, is not read twice.
 */
#ifndef PCRFS_BUILD_TOKIMPORT_H
#define PCRFS_BUILD_TOKIMPORT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "pcrfs/store.h"
#include "pcrfs/tokens.h"
#include "pcrfs/writer.h"
#include "builder/tokopts.h"

/* Take option @c with argument @arg if it is one of the token options.
 * @return 1 taken; 0 not a token option; -1 a bad value (the message in @msg). */
int tokimport_option(struct tokimport_opts *o, int c, const char *arg, char *msg, size_t len);
/* Check the combination once every option is taken (--seit without --seit-labels,
 * --tokens with --seit, --codebook alone, ...). @return 0, or -1 and @msg. */
int tokimport_check(const struct tokimport_opts *o, char *msg, size_t len);
/* Are tokens to be imported? */
bool tokimport_enabled(const struct tokimport_opts *o);

struct tokimport;

/* Pass 1: find every grid, validate it, train the model, load the codebook.
 * Errors and warnings go to the log hook (pcr_bld_err/pcr_bld_warn) naming the item;
 * every bad item is reported (up to a limit) before failing. o->rep->cancel is polled.
 * @return 0 and *out; -1 failed (reported); -2 interrupted. */
int tokimport_scan(const struct tokimport_opts *o, struct tokimport **out);

/* Pass 2: the model, the token directories, every grid in shards, the codebook blob
 * and the tok_* meta keys, into @w (whose image tree the caller writes).
 * @return 0; -1 failed (reported); -2 interrupted. */
int tokimport_write(struct tokimport *t, struct pcr_writer *w);

/* Grids imported (for the caller's rate line). */
uint64_t tokimport_count(const struct tokimport *t);
void tokimport_free(struct tokimport *t);

#endif
