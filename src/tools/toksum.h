/* pcrfs tools — the token part of the store summary (mkpcrfs and pcrinfo), read
 * from an open store alone (index, meta keys, sizes of tokens/ *), so that both
 * print the same lines.
 */
#ifndef PCRFS_TOOLS_TOKSUM_H
#define PCRFS_TOOLS_TOKSUM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "pcrfs/store.h"
#include "pcrfs/tokens.h"

struct toksum {
    bool present; /* the store holds tokens */
    uint64_t grids, dirs, shards;
    uint64_t tokens;       /* sum of H*W */
    uint64_t blob_bytes;   /* encoded grids, from the index */
    uint64_t shard_bytes;  /* tokens/ *.tks on disk (headers included) */
    uint64_t served_bytes; /* sum of the .tok files' sizes */
    unsigned min_h, min_w, max_h, max_w;
    char coder[32];     /* meta tok_coder */
    double entropy;     /* meta tok_entropy_bits (NAN if absent) */
    double model_bytes; /* meta tok_model_bytes (NAN if absent) */
    char source[256];   /* meta tok_source */
    bool codebook;      /* a codebook blob is present */
    uint64_t codebook_bytes, cb_k, cb_d;
    char cb_dtype[8];
};

/* @return 0 (also for a store without tokens: present = false); a negative errno
 *         with a message in @err (a damaged token tree). */
int toksum_compute(struct pcr_store *s, const char *path, struct toksum *out, char *err,
                   size_t errlen);
/* Nothing for a store without tokens. */
void toksum_print_text(const struct toksum *ts, FILE *f);
/* ',"tokens":{...}' or ',"tokens":null', to go inside the summary's JSON object. */
void toksum_print_json(const struct toksum *ts, FILE *f);

#endif
