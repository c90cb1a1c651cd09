/* pcrfs tools — importing token grids into a store (mkpcrfs --tokens / --seit), and
 * the token part of the store summary (mkpcrfs and pcrinfo).
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
#ifndef PCRFS_TOOLS_TOKIMPORT_H
#define PCRFS_TOOLS_TOKIMPORT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <getopt.h>
#include "pcrfs/store.h"
#include "pcrfs/tokens.h"
#include "pcrfs/writer.h"

#define TOKIMPORT_PER_SHARD 4096u /* grids per token shard (--tok-per-shard) */

/* What the command line asked for. Zero-initialise, then tokimport_option(). */
struct tokimport_opts {
    const char *npy_dir;      /* --tokens DIR */
    const char *seit_data;    /* --seit DATA.bin[.gz] */
    const char *seit_index;   /* --seit-index FILE (default: beside DATA) */
    const char *seit_labels;  /* --seit-labels FILE */
    const char *seit_names;   /* --seit-names FILE (optional) */
    unsigned seit_h, seit_w;  /* --seit-shape HxW (default 32x32) */
    const char *codebook;     /* --codebook FILE.npy */
    enum pcr_tok_coder coder; /* --tok-coder (default auto) */
    unsigned per_shard;       /* --tok-per-shard (default TOKIMPORT_PER_SHARD) */
    bool progress;            /* draw the progress bar (set by the caller) */
    const char *skip[2];      /* directories never entered under --tokens DIR: STORE
                               * and its temporary directory (set by the caller) */
};

/* getopt_long() values of the token options; the caller's own values stay below. */
enum {
    TOKIMPORT_OPT_TOKENS = 0x1000,
    TOKIMPORT_OPT_SEIT,
    TOKIMPORT_OPT_SEIT_INDEX,
    TOKIMPORT_OPT_SEIT_LABELS,
    TOKIMPORT_OPT_SEIT_NAMES,
    TOKIMPORT_OPT_SEIT_SHAPE,
    TOKIMPORT_OPT_CODEBOOK,
    TOKIMPORT_OPT_CODER,
    TOKIMPORT_OPT_PER_SHARD,
};

/* The entries to put in the caller's struct option array. */
/* clang-format off */
#define TOKIMPORT_LONGOPTS \
    {"tokens", required_argument, NULL, TOKIMPORT_OPT_TOKENS}, \
    {"seit", required_argument, NULL, TOKIMPORT_OPT_SEIT}, \
    {"seit-index", required_argument, NULL, TOKIMPORT_OPT_SEIT_INDEX}, \
    {"seit-labels", required_argument, NULL, TOKIMPORT_OPT_SEIT_LABELS}, \
    {"seit-names", required_argument, NULL, TOKIMPORT_OPT_SEIT_NAMES}, \
    {"seit-shape", required_argument, NULL, TOKIMPORT_OPT_SEIT_SHAPE}, \
    {"codebook", required_argument, NULL, TOKIMPORT_OPT_CODEBOOK}, \
    {"tok-coder", required_argument, NULL, TOKIMPORT_OPT_CODER}, \
    {"tok-per-shard", required_argument, NULL, TOKIMPORT_OPT_PER_SHARD}
/* clang-format on */

/* Take option @c with argument @arg if it is one of the token options.
 * @return true if it was (a bad value is a usage error: exits 2), false if not. */
bool tokimport_option(struct tokimport_opts *o, int c, const char *arg);
/* Check the combination once every option is parsed (exits 2 on a usage error:
 * --seit without --seit-labels, --tokens with --seit, --codebook alone, ...).
 * @return true if tokens are to be imported. */
bool tokimport_enabled(const struct tokimport_opts *o);
/* The token options' lines for --help. */
void tokimport_usage(FILE *f);

struct tokimport;

/* Pass 1: find every grid, validate it, train the model, load the codebook.
 * Errors and warnings go to stderr (tool_err/tool_warn) naming the item; every bad
 * item is reported (up to a limit) before failing. *@stop is polled (SIGINT).
 * @return 0 and *out; -1 failed (reported); -2 interrupted. */
int tokimport_scan(const struct tokimport_opts *o, volatile sig_atomic_t *stop,
                   struct tokimport **out);

/* Pass 2: the model, the token directories, every grid in shards, the codebook blob
 * and the tok_* meta keys, into @w (whose image tree the caller writes).
 * @return 0; -1 failed (reported); -2 interrupted. */
int tokimport_write(struct tokimport *t, struct pcr_writer *w);

/* Grids imported (for the caller's rate line). */
uint64_t tokimport_count(const struct tokimport *t);
void tokimport_free(struct tokimport *t);

#endif
