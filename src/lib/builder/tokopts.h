/* pcrfs build — the token import's options (--tokens, --seit*, --codebook,
 * --tok-coder, --tok-per-shard): what the interface (tokimport.h) takes and what the
 * import's files share (tokimport_int.h) keep. A leaf: no file defines its names. */
#ifndef PCRFS_BUILD_TOKOPTS_H
#define PCRFS_BUILD_TOKOPTS_H

#include "pcrfs/tokens.h"

struct pcr_bld_report;

#define TOKIMPORT_PER_SHARD 4096u /* grids per token shard (--tok-per-shard) */

/* What the command line asked for. Zero-initialise, then tokimport_option(). */
struct tokimport_opts {
    const char *npy_dir;        /* --tokens DIR */
    const char *seit_data;      /* --seit DATA.bin[.gz] */
    const char *seit_index;     /* --seit-index FILE (default: beside DATA) */
    const char *seit_labels;    /* --seit-labels FILE */
    const char *seit_names;     /* --seit-names FILE (optional) */
    unsigned seit_h, seit_w;    /* --seit-shape HxW (default 32x32) */
    const char *codebook;       /* --codebook FILE.npy */
    enum pcr_tok_coder coder;   /* --tok-coder (default auto) */
    unsigned per_shard;         /* --tok-per-shard (default TOKIMPORT_PER_SHARD) */
    struct pcr_bld_report *rep; /* progress and cancel (set by the caller) */
    const char *skip[2];        /* directories never entered under --tokens DIR: STORE
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

#endif
