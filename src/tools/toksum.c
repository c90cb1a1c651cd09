/* pcrfs tools — the token part of the store summary (see toksum.h), from an open
 * store alone, so that mkpcrfs and pcrinfo print the same lines.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "toksum.h"
#include "tool.h"
#include "util/json.h"

/* A number from the meta table (NAN if absent or not a number: never trusted). */
static void ti_meta_num(struct pcr_store *s, const char *key, double *out)
{
    char buf[64], *end;

    *out = NAN;
    if (pcr_store_meta(s, key, buf, sizeof(buf)) > 0) {
        double v = strtod(buf, &end);

        if (*end == '\0' && isfinite(v) && v >= 0)
            *out = v;
    }
}

static void meta_str(struct pcr_store *s, const char *key, char *buf, size_t len)
{
    if (pcr_store_meta(s, key, buf, len) < 0)
        buf[0] = '\0';
}

int toksum_compute(struct pcr_store *s, const char *path, struct toksum *ts, char *err,
                   size_t errlen)
{
    struct pcr_store *t = NULL;
    uint64_t nfiles;
    char dir[PATH_MAX];
    const void *cb;
    size_t cblen;
    int rc;

    memset(ts, 0, sizeof(*ts));
    if (pcr_store_codebook(s, &cb, &cblen) == 0) {
        struct pcr_npy a;
        char why[256];

        ts->codebook = true;
        ts->codebook_bytes = cblen;
        if (pcr_npy_parse(cb, cblen, &a, why, sizeof(why)) == 0 && a.ndim == 2) {
            ts->cb_k = a.shape[0];
            ts->cb_d = a.shape[1];
            snprintf(ts->cb_dtype, sizeof(ts->cb_dtype), "%s", a.descr);
        }
    }
    rc = pcr_store_open_tokens(s, &t, err, errlen);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return rc;
    ts->present = true;
    ts->grids = pcr_store_nfiles(t);
    ts->dirs = pcr_store_ndirs(t);
    ts->shards = pcr_store_nrecords(t);
    for (uint64_t id = 1; id <= ts->grids; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;

        rc = pcr_store_file(t, id, &f);
        if (rc < 0) {
            snprintf(err, errlen, "%s: token file %" PRIu64 ": %s", path, id, strerror(-rc));
            pcr_store_close(t);
            return rc;
        }
        pcr_file_info(f, &fi);
        ts->tokens += (uint64_t)fi.width * fi.height;
        ts->blob_bytes += fi.src_size;
        ts->served_bytes += pcr_file_size(f, 1);
        if (id == 1 || fi.height < ts->min_h || (fi.height == ts->min_h && fi.width < ts->min_w)) {
            ts->min_h = fi.height;
            ts->min_w = fi.width;
        }
        if (id == 1 || fi.height > ts->max_h || (fi.height == ts->max_h && fi.width > ts->max_w)) {
            ts->max_h = fi.height;
            ts->max_w = fi.width;
        }
    }
    pcr_store_close(t);
    meta_str(s, "tok_coder", ts->coder, sizeof(ts->coder));
    ti_meta_num(s, "tok_entropy_bits", &ts->entropy);
    ti_meta_num(s, "tok_model_bytes", &ts->model_bytes);
    meta_str(s, "tok_source", ts->source, sizeof(ts->source));
    snprintf(dir, sizeof(dir), "%s/tokens", path);
    ts->shard_bytes = pcr_dir_bytes(dir, &nfiles);
    return 0;
}

void toksum_print_text(const struct toksum *ts, FILE *f)
{
    char h1[32], h2[32];

    if (!ts->present)
        return;
    fprintf(f,
            "tokens        %" PRIu64 " grid%s in %" PRIu64 " director%s, %" PRIu64
            " shard%s, coder %s\n",
            ts->grids, ts->grids == 1 ? "" : "s", ts->dirs, ts->dirs == 1 ? "y" : "ies", ts->shards,
            ts->shards == 1 ? "" : "s", ts->coder[0] ? ts->coder : "?");
    if (ts->min_h == ts->max_h && ts->min_w == ts->max_w)
        fprintf(f, "token grids   %ux%u", ts->min_h, ts->min_w);
    else
        fprintf(f, "token grids   %ux%u to %ux%u", ts->min_h, ts->min_w, ts->max_h, ts->max_w);
    fprintf(f, ", %.1f bytes/grid, %.3f bits/token",
            ts->grids ? (double)ts->blob_bytes / (double)ts->grids : 0.0,
            ts->tokens ? 8.0 * (double)ts->blob_bytes / (double)ts->tokens : 0.0);
    if (!isnan(ts->entropy))
        fprintf(f, " (order-0 entropy %.3f)", ts->entropy);
    fprintf(f, "\ntoken bytes   %" PRIu64 " (%s) in shards", ts->shard_bytes,
            tool_human_bytes(ts->shard_bytes, h1, sizeof(h1)));
    if (!isnan(ts->model_bytes))
        fprintf(f, " + %.0f of model", ts->model_bytes);
    fprintf(f, "; %" PRIu64 " (%s) served\n", ts->served_bytes,
            tool_human_bytes(ts->served_bytes, h2, sizeof(h2)));
    if (ts->codebook)
        fprintf(f,
                "codebook      %" PRIu64 " x %" PRIu64 " %s, %" PRIu64
                " bytes (/.pcrfs/codebook.npy)\n",
                ts->cb_k, ts->cb_d, ts->cb_dtype[0] ? ts->cb_dtype : "?", ts->codebook_bytes);
    else
        fprintf(f, "codebook      none\n");
}

/* A measured number, null if absent. */
static void json_num(FILE *f, double v)
{
    struct pcr_json j;

    pcr_json_init(&j, f);
    pcr_json_double(&j, v, 4);
}

void toksum_print_json(const struct toksum *ts, FILE *f)
{
    if (!ts->present) {
        fputs(",\"tokens\":null", f);
        return;
    }
    fprintf(f,
            ",\"tokens\":{\"grids\":%" PRIu64 ",\"dirs\":%" PRIu64 ",\"shards\":%" PRIu64
            ",\"tokens\":%" PRIu64 ",\"blob_bytes\":%" PRIu64 ",\"shard_bytes\":%" PRIu64
            ",\"served_bytes\":%" PRIu64 ",\"min_shape\":[%u,%u],\"max_shape\":[%u,%u]"
            ",\"bytes_per_grid\":%.3f,\"bits_per_token\":%.4f,\"entropy_bits\":",
            ts->grids, ts->dirs, ts->shards, ts->tokens, ts->blob_bytes, ts->shard_bytes,
            ts->served_bytes, ts->min_h, ts->min_w, ts->max_h, ts->max_w,
            ts->grids ? (double)ts->blob_bytes / (double)ts->grids : 0.0,
            ts->tokens ? 8.0 * (double)ts->blob_bytes / (double)ts->tokens : 0.0);
    json_num(f, ts->entropy);
    fputs(",\"model_bytes\":", f);
    json_num(f, ts->model_bytes);
    fputs(",\"coder\":", f);
    pcr_json_fquote(f, ts->coder);
    fputs(",\"source\":", f);
    pcr_json_fquote(f, ts->source);
    fputs(",\"codebook\":", f);
    if (ts->codebook) {
        fprintf(f, "{\"entries\":%" PRIu64 ",\"dim\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"dtype\":",
                ts->cb_k, ts->cb_d, ts->codebook_bytes);
        pcr_json_fquote(f, ts->cb_dtype);
        fputc('}', f);
    } else
        fputs("null", f);
    fputs("}", f);
}
