/* pcrfs — the store's summary, pcrfs_summary() (include/pcrfs/pcrfs.h): what
 * pcrinfo(1) prints and mkpcrfs(1) prints for the store it has just written.
 *
 * Computed from the open store alone (the index, plus the sizes of the store's
 * files), then rendered as text or JSON into a memory stream.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api_internal.h"
#include "pcrfs/tokens.h"
#include "util/json.h"
#include "util/utf8.h"

/* The MS-SSIM thresholds of the per-image table (pcrinfo(1)) besides the caller's. */
#define SUMMARY_THRESHOLDS     0.90, 0.95, 0.99
#define SUMMARY_MAX_THRESHOLDS (3 + PCRFS_SUMMARY_MAX_THRESHOLDS)

/* The token part: from the token tree, the meta keys tok_* and the sizes of
 * tokens/ *. */
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

/* Verbatim files listed one by one in the text summary (JSON lists them all). */
#define LIST_MAX 20

struct vfile {
    char *path;       /* escaped for display */
    const char *note; /* owned by the store */
};

struct reason {
    const char *note;
    uint64_t count;
};

/* The scan script of each image class, as mkpcrfs records it (meta "scans.CLASS"). */
static const char *const scan_class[] = {"gray", "ycc", "rgb", "cmyk"};
#define NCLASS (sizeof(scan_class) / sizeof(scan_class[0]))

/* One row of the per-image table: each JPEG at its own lowest level reaching @t. */
struct thr {
    double t;
    uint64_t bytes, levels; /* sums over the JPEGs */
    double min;             /* lowest MS-SSIM at the level picked */
};

struct summary {
    char *path;
    char script[128], per_record[32], format[32], skipped[32];
    char scans[NCLASS][64 * 40]; /* "" if the store does not record it */
    unsigned levels;
    uint64_t nfiles, ndirs, nrecords, njpeg, nverbatim;
    uint64_t src_bytes, index_bytes, record_bytes;
    uint64_t level_sum[PCR_MAX_LEVELS + 1]; /* bytes of all JPEGs at level K */
    char quality[32];                       /* meta "quality": how it was measured */
    uint64_t nmeasured;                     /* JPEGs with a quality table */
    double q_sum[PCR_MAX_LEVELS + 1], q_min[PCR_MAX_LEVELS + 1]; /* over those */
    struct thr thr[SUMMARY_MAX_THRESHOLDS];
    size_t nthr;
    struct vfile *vfiles;
    struct reason *reasons;
    size_t nreasons;
    struct toksum tok; /* the token part */
    bool oom;          /* rendering ran out of memory */
};

static void meta(struct pcr_store *s, const char *key, char *buf, size_t len)
{
    if (pcr_store_meta(s, key, buf, len) < 0)
        buf[0] = '\0';
}

/* Bytes and number of the regular files in directory @name of @dfd. @return 0 or
 * a negative errno. */
static int dir_bytes(int dfd, const char *name, uint64_t *bytes, uint64_t *nfiles)
{
    struct dirent *de;
    struct stat st;
    DIR *d;
    int fd, e = 0;

    *bytes = *nfiles = 0;
    fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        e = -errno;
        close(fd);
        return e;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            *bytes += (uint64_t)st.st_size;
            (*nfiles)++;
        }
    }
    e = -errno;
    closedir(d);
    return e;
}

/* Bytes of index.db and of records/ * (what the store costs on disk), and of the
 * token shards in tokens/ * (none: 0). */
static int store_sizes(struct summary *sm)
{
    struct stat st;
    uint64_t n;
    int fd, e = 0;

    fd = open(sm->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstatat(fd, "index.db", &st, 0) < 0)
        e = -errno;
    else
        sm->index_bytes = (uint64_t)st.st_size;
    if (e == 0)
        e = dir_bytes(fd, "records", &sm->record_bytes, &n);
    if (e == 0 && sm->tok.present && dir_bytes(fd, "tokens", &sm->tok.shard_bytes, &n) < 0)
        sm->tok.shard_bytes = 0;
    if (fd >= 0)
        close(fd);
    return e ? api_fail(e, "%s: %s", sm->path, strerror(-e)) : 0;
}

/* A number from the meta table (NAN if absent or not a number: never trusted). */
static void meta_num(struct pcr_store *s, const char *key, double *out)
{
    char buf[64], *end;

    *out = NAN;
    if (pcr_store_meta(s, key, buf, sizeof(buf)) > 0) {
        double v = strtod(buf, &end);

        if (*end == '\0' && isfinite(v) && v >= 0)
            *out = v;
    }
}

/* Double the array @p of @size-byte elements (*@cap: 0 makes it 8). NULL: out of
 * memory, @p freed. */
static void *grow(void *p, uint64_t *cap, size_t size)
{
    uint64_t n = *cap ? *cap * 2 : 8;
    void *q = n <= SIZE_MAX / size ? realloc(p, (size_t)n * size) : NULL;

    if (!q)
        free(p);
    else
        *cap = n;
    return q;
}

/* @s in displayable form (pcr_utf8_escape()), malloc()ed; NULL: out of memory. */
static char *escaped(const char *s, size_t len)
{
    char *e = len < SIZE_MAX / 4 ? malloc(PCR_UTF8_ESCAPE_MAX(len)) : NULL;

    if (e)
        pcr_utf8_escape(e, s, len);
    return e;
}

static int cmp_reason(const void *a, const void *b)
{
    const struct reason *x = a, *y = b;

    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->note, y->note);
}

static int add_reason(struct summary *sm, const char *note, uint64_t *cap)
{
    size_t i;

    /* Few distinct reasons in practice: a linear search is enough. */
    for (i = 0; i < sm->nreasons; i++) {
        if (strcmp(sm->reasons[i].note, note) == 0) {
            sm->reasons[i].count++;
            return 0;
        }
    }
    if (sm->nreasons == *cap && !(sm->reasons = grow(sm->reasons, cap, sizeof(*sm->reasons))))
        return -ENOMEM;
    sm->reasons[sm->nreasons].note = note;
    sm->reasons[sm->nreasons].count = 1;
    sm->nreasons++;
    return 0;
}

static int cmp_thr(const void *a, const void *b)
{
    const struct thr *x = a, *y = b;

    return x->t < y->t ? -1 : x->t > y->t;
}

/* The thresholds of the per-image table: the defaults and @extra, sorted, once each. */
static void set_thresholds(struct summary *sm, const double *extra, size_t nextra)
{
    static const double defaults[] = {SUMMARY_THRESHOLDS};
    const size_t nd = sizeof(defaults) / sizeof(defaults[0]);

    for (size_t i = 0; i < nd + nextra; i++) {
        double t = i < nd ? defaults[i] : extra[i - nd];
        size_t k;

        for (k = 0; k < sm->nthr && sm->thr[k].t != t; k++)
            ;
        if (k == sm->nthr && sm->nthr < SUMMARY_MAX_THRESHOLDS)
            sm->thr[sm->nthr++] = (struct thr){.t = t, .min = 1.0};
    }
    qsort(sm->thr, sm->nthr, sizeof(sm->thr[0]), cmp_thr);
}

/* What the quality table of JPEG @f adds: its MS-SSIM per level, and for each
 * threshold the level pcr_file_level_for() picks (the top one without a table). */
static void add_quality(struct summary *sm, const struct pcr_file *f)
{
    double q;
    unsigned k;

    if (pcr_file_quality(f, 1, &q) == 0) {
        sm->nmeasured++;
        for (k = 1; k <= sm->levels; k++) {
            pcr_file_quality(f, k, &q);
            sm->q_sum[k] += q;
            if (q < sm->q_min[k])
                sm->q_min[k] = q;
        }
    }
    for (size_t i = 0; i < sm->nthr; i++) {
        struct thr *t = &sm->thr[i];

        k = pcr_file_level_for(f, t->t);
        t->bytes += pcr_file_size(f, k);
        t->levels += k;
        if (pcr_file_quality(f, k, &q) == 0 && q < t->min)
            t->min = q;
    }
}

static void summary_free(struct summary *sm);
static int toksum_compute(struct inst *in, struct toksum *ts);

/* Read every file's row of @in's store (opened from @path) and the sizes of the
 * store's files. The per-image table (stores built with mkpcrfs --quality) has a
 * row for each of SUMMARY_THRESHOLDS and of the @nextra thresholds @extra
 * (duplicates dropped). @return 0, or a negative errno (the message set). */
static int summary_compute(struct inst *in, const char *path, const double *extra, size_t nextra,
                           struct summary **out)
{
    struct pcr_store *s = in->store;
    struct summary *sm = calloc(1, sizeof(*sm));
    size_t pathcap = 4096;
    uint64_t rcap = 0, vcap = 0;
    char *pbuf = malloc(pathcap);
    uint64_t id;
    unsigned k;
    int rc;

    if (!sm || !pbuf || !(sm->path = strdup(path))) {
        free(pbuf);
        summary_free(sm);
        return api_fail(-ENOMEM, "out of memory");
    }
    sm->levels = pcr_store_levels(s);
    sm->nfiles = pcr_store_nfiles(s);
    sm->ndirs = pcr_store_ndirs(s);
    sm->nrecords = pcr_store_nrecords(s);
    meta(s, "script", sm->script, sizeof(sm->script));
    meta(s, "per_record", sm->per_record, sizeof(sm->per_record));
    meta(s, "format_version", sm->format, sizeof(sm->format));
    meta(s, "skipped", sm->skipped, sizeof(sm->skipped));
    meta(s, "quality", sm->quality, sizeof(sm->quality));
    set_thresholds(sm, extra, nextra);
    for (k = 1; k <= sm->levels; k++)
        sm->q_min[k] = 1.0;
    for (k = 0; k < NCLASS; k++) {
        char key[32];

        snprintf(key, sizeof(key), "scans.%s", scan_class[k]);
        meta(s, key, sm->scans[k], sizeof(sm->scans[k]));
    }

    for (id = 1; id <= sm->nfiles; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        ssize_t n;

        rc = pcr_store_file(s, id, &f);
        if (rc < 0) {
            rc = api_fail(rc, "%s: file %" PRIu64 ": %s", path, id, strerror(-rc));
            goto fail;
        }
        pcr_file_info(f, &fi);
        sm->src_bytes += fi.src_size;
        if (fi.kind == PCR_KIND_JPEG) {
            sm->njpeg++;
            for (k = 1; k <= sm->levels; k++)
                sm->level_sum[k] += pcr_file_size(f, k);
            add_quality(sm, f);
            continue;
        }
        while ((n = pcr_store_path(s, id, pbuf, pathcap)) == -ENAMETOOLONG) {
            char *p = realloc(pbuf, pathcap * 2);

            if (!p) {
                n = -ENOMEM;
                break;
            }
            pbuf = p;
            pathcap *= 2;
        }
        if (n < 0) {
            rc = api_fail((int)n, "%s: path of file %" PRIu64 ": %s", path, id, strerror((int)-n));
            goto fail;
        }
        if (sm->nverbatim == vcap && !(sm->vfiles = grow(sm->vfiles, &vcap, sizeof(*sm->vfiles)))) {
            sm->nverbatim = 0;
            rc = api_fail(-ENOMEM, "out of memory");
            goto fail;
        }
        sm->vfiles[sm->nverbatim].note = fi.note && fi.note[0] ? fi.note : "no reason recorded";
        if (!(sm->vfiles[sm->nverbatim].path = escaped(pbuf, (size_t)n)) ||
            add_reason(sm, sm->vfiles[sm->nverbatim].note, &rcap) < 0) {
            free(sm->vfiles[sm->nverbatim].path);
            rc = api_fail(-ENOMEM, "out of memory");
            goto fail;
        }
        sm->nverbatim++;
    }
    if (sm->nreasons)
        qsort(sm->reasons, sm->nreasons, sizeof(*sm->reasons), cmp_reason);
    rc = toksum_compute(in, &sm->tok);
    if (rc == 0)
        rc = store_sizes(sm);
    if (rc < 0)
        goto fail;
    free(pbuf);
    *out = sm;
    return 0;
fail:
    free(pbuf);
    summary_free(sm);
    return rc;
}

static void summary_free(struct summary *sm)
{
    uint64_t i;

    if (!sm)
        return;
    for (i = 0; i < sm->nverbatim; i++)
        free(sm->vfiles[i].path);
    free(sm->vfiles);
    free(sm->reasons);
    free(sm->path);
    free(sm);
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* The lowest level whose mean (@by_min: lowest) MS-SSIM over the measured JPEGs
 * reaches @t: one level for the whole store, as PCR picks it. */
static unsigned global_level(const struct summary *sm, double t, bool by_min)
{
    for (unsigned k = 1; k < sm->levels; k++)
        if ((by_min ? sm->q_min[k] : sm->q_sum[k] / (double)sm->nmeasured) >= t)
            return k;
    return sm->levels;
}

static double ratio_to_full(const struct summary *sm, double bytes)
{
    double full = (double)sm->level_sum[sm->levels];

    return full > 0 ? bytes / full : 0;
}

/* The per-image table: for each threshold, every JPEG served at its own lowest level
 * reaching it, beside the one level for all that PCR would pick. */
static void print_quality_text(const struct summary *sm, FILE *f)
{
    double n = (double)sm->njpeg;

    if (!sm->nmeasured) {
        if (sm->quality[0] && strcmp(sm->quality, "off") != 0)
            fprintf(f, "\nper-image levels: no JPEG has a per-level MS-SSIM\n");
        return;
    }
    fprintf(f,
            "\nper-image levels: luma MS-SSIM against level %u, measured at build time for %" PRIu64
            " of %" PRIu64 " JPEGs\n",
            sm->levels, sm->nmeasured, sm->njpeg);
    if (sm->nmeasured < sm->njpeg)
        fprintf(f, "                  (the others are counted at level %u)\n", sm->levels);
    fprintf(f, "MS-SSIM   each JPEG at its lowest level >= t      one level for all "
               "(mean >= t)       all >= t\n");
    fprintf(f, "   >= t  mean level  bytes/JPEG  ratio      min  level  bytes/JPEG  ratio      "
               "min     level\n");
    for (size_t i = 0; i < sm->nthr; i++) {
        const struct thr *t = &sm->thr[i];
        unsigned g = global_level(sm, t->t, false);

        fprintf(f, fabs(t->t * 100 - round(t->t * 100)) < 1e-9 ? "%7.2f" : "%7.4g", t->t);
        fprintf(f, "  %10.2f  %10.0f  %5.3f  %7.4f  %5u  %10.0f  %5.3f  %7.4f  %8u\n",
                (double)t->levels / n, (double)t->bytes / n, ratio_to_full(sm, (double)t->bytes),
                t->min, g, (double)sm->level_sum[g] / n,
                ratio_to_full(sm, (double)sm->level_sum[g]), sm->q_min[g],
                global_level(sm, t->t, true));
    }
}

static void print_quality_json(const struct summary *sm, FILE *f)
{
    double n = (double)sm->njpeg;
    unsigned k;

    fputs(",\"quality\":", f);
    if (!sm->nmeasured) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"metric\":\"ms-ssim\",\"channel\":\"luma\",\"measured\":%" PRIu64 ",\"table\":[",
            sm->nmeasured);
    for (k = 1; k <= sm->levels; k++)
        fprintf(f, "%s{\"level\":%u,\"msssim_mean\":%.6f,\"msssim_min\":%.6f}", k > 1 ? "," : "", k,
                sm->q_sum[k] / (double)sm->nmeasured, sm->q_min[k]);
    fputs("],\"thresholds\":[", f);
    for (size_t i = 0; i < sm->nthr; i++) {
        const struct thr *t = &sm->thr[i];
        unsigned g = global_level(sm, t->t, false), a = global_level(sm, t->t, true);

        fprintf(f,
                "%s{\"threshold\":%.6g,\"per_image\":{\"mean_level\":%.4f,\"mean_bytes\":%.3f,"
                "\"ratio_to_full\":%.6f,\"msssim_min\":%.6f}",
                i ? "," : "", t->t, (double)t->levels / n, (double)t->bytes / n,
                ratio_to_full(sm, (double)t->bytes), t->min);
        fprintf(f,
                ",\"global_mean\":{\"level\":%u,\"mean_bytes\":%.3f,\"ratio_to_full\":%.6f,"
                "\"msssim_min\":%.6f},\"global_min\":{\"level\":%u,\"mean_bytes\":%.3f,"
                "\"ratio_to_full\":%.6f,\"msssim_min\":%.6f}}",
                g, (double)sm->level_sum[g] / n, ratio_to_full(sm, (double)sm->level_sum[g]),
                sm->q_min[g], a, (double)sm->level_sum[a] / n,
                ratio_to_full(sm, (double)sm->level_sum[a]), sm->q_min[a]);
    }
    fputs("]}", f);
}

/* @s in displayable form (pcr_utf8_escape()) on @f, as a JSON string if @json;
 * out of memory fails the render (sm->oom). */
static void put_escaped(struct summary *sm, FILE *f, const char *s, bool json)
{
    char *e = escaped(s, strlen(s));

    if (!e)
        sm->oom = true;
    else if (json)
        pcr_json_fquote(f, e);
    else
        fputs(e, f);
    free(e);
}

/* "12.3 MiB" style size into @buf. */
static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    unsigned u = 0;

    while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

static void toksum_print_text(const struct toksum *ts, FILE *f);
static void toksum_print_json(const struct toksum *ts, FILE *f);

static void summary_print_text(struct summary *sm, FILE *f)
{
    char h1[32], h2[32];
    uint64_t store_bytes = sm->index_bytes + sm->record_bytes, i;
    double full;
    unsigned k;

    fputs("store         ", f);
    put_escaped(sm, f, sm->path, false);
    fputc('\n', f);
    fprintf(f, "format        version %s, %u levels, script %s, %s images per record\n",
            sm->format[0] ? sm->format : "?", sm->levels, sm->script[0] ? sm->script : "?",
            sm->per_record[0] ? sm->per_record : "?");
    fprintf(f, "files         %" PRIu64 " in %" PRIu64 " %s, %" PRIu64 " %s\n", sm->nfiles,
            sm->ndirs, plural(sm->ndirs, "directory", "directories"), sm->nrecords,
            plural(sm->nrecords, "record", "records"));
    fprintf(f, "JPEGs         %" PRIu64 " transcoded to progressive\n", sm->njpeg);
    fprintf(f, "verbatim      %" PRIu64 " %s\n", sm->nverbatim,
            plural(sm->nverbatim, "file", "files"));
    for (i = 0; i < sm->nreasons; i++)
        fprintf(f, "  %10" PRIu64 "  %s\n", sm->reasons[i].count, sm->reasons[i].note);
    for (i = 0; i < sm->nverbatim && i < LIST_MAX; i++)
        fprintf(f, "              %s: %s\n", sm->vfiles[i].path, sm->vfiles[i].note);
    if (sm->nverbatim > LIST_MAX)
        fprintf(f, "              ... and %" PRIu64 " more\n", sm->nverbatim - LIST_MAX);
    if (sm->skipped[0])
        fprintf(f, "skipped       %s %s\n", sm->skipped,
                strcmp(sm->skipped, "1") == 0 ? "entry" : "entries");
    else
        fprintf(f, "skipped       not recorded\n");
    fprintf(f, "source bytes  %" PRIu64 " (%s)\n", sm->src_bytes,
            human_bytes(sm->src_bytes, h1, sizeof(h1)));
    fprintf(f, "store bytes   %" PRIu64 " (%s)", store_bytes,
            human_bytes(store_bytes, h2, sizeof(h2)));
    if (sm->src_bytes)
        fprintf(f, ", %.1f%% of source", 100.0 * (double)store_bytes / (double)sm->src_bytes);
    fprintf(f, "; index %" PRIu64 ", records %" PRIu64 "\n", sm->index_bytes, sm->record_bytes);

    toksum_print_text(&sm->tok, f);

    fprintf(f, "\nlevel  mean bytes/JPEG  ratio to full%s\n",
            sm->nmeasured ? "  MS-SSIM     min" : "");
    if (!sm->njpeg) {
        fprintf(f, "    -  no JPEG in this store\n");
        return;
    }
    full = (double)sm->level_sum[sm->levels] / (double)sm->njpeg;
    for (k = 1; k <= sm->levels; k++) {
        double mean = (double)sm->level_sum[k] / (double)sm->njpeg;
        double r = full > 0 ? mean / full : 0;
        char ratio[32];

        snprintf(ratio, sizeof(ratio), "1/%.1fx", r > 0 ? 1 / r : 0.0);
        fprintf(f, "%5u  %15.0f  %-8s (%.3f)", k, mean, ratio, r);
        if (sm->nmeasured)
            fprintf(f, "   %6.4f  %6.4f", sm->q_sum[k] / (double)sm->nmeasured, sm->q_min[k]);
        fputc('\n', f);
    }
    print_quality_text(sm, f);
}

/* A decimal number from the index as a JSON number, or null if absent or odd. */
static const char *num_or_null(const char *s)
{
    return s[0] && strspn(s, "0123456789") == strlen(s) ? s : "null";
}

static void summary_print_json(struct summary *sm, FILE *f)
{
    double full = sm->njpeg ? (double)sm->level_sum[sm->levels] / (double)sm->njpeg : 0;
    uint64_t i;
    unsigned k;

    fprintf(f, "{\"format_version\":%s,\"levels\":%u,\"script\":", num_or_null(sm->format),
            sm->levels);
    if (sm->script[0])
        put_escaped(sm, f, sm->script, true);
    else
        fputs("null", f);
    fprintf(f,
            ",\"files\":%" PRIu64 ",\"dirs\":%" PRIu64 ",\"records\":%" PRIu64 ",\"jpeg\":%" PRIu64
            ",\"verbatim\":%" PRIu64 ",\"skipped\":%s"
            ",\"source_bytes\":%" PRIu64 ",\"store_bytes\":%" PRIu64 ",\"table\":[",
            sm->nfiles, sm->ndirs, sm->nrecords, sm->njpeg, sm->nverbatim, num_or_null(sm->skipped),
            sm->src_bytes, sm->index_bytes + sm->record_bytes);
    for (k = 1; sm->njpeg && k <= sm->levels; k++) {
        double mean = (double)sm->level_sum[k] / (double)sm->njpeg;

        fprintf(f, "%s{\"level\":%u,\"mean_bytes\":%.3f,\"ratio_to_full\":", k > 1 ? "," : "", k,
                mean);
        if (full > 0)
            fprintf(f, "%.6f}", mean / full);
        else
            fputs("null}", f);
    }
    fputs("],\"scans\":", f);
    if (sm->scans[1][0]) {
        for (k = 0; k < NCLASS; k++) {
            fprintf(f, "%s\"%s\":", k ? "," : "{", scan_class[k]);
            pcr_json_fquote(f, sm->scans[k]);
        }
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(",\"verbatim_files\":[", f);
    for (i = 0; i < sm->nverbatim; i++) {
        fprintf(f, "%s{\"path\":", i ? "," : "");
        pcr_json_fquote(f, sm->vfiles[i].path);
        fputs(",\"reason\":", f);
        put_escaped(sm, f, sm->vfiles[i].note, true);
        fputc('}', f);
    }
    fputs("]", f);
    print_quality_json(sm, f);
    toksum_print_json(&sm->tok, f);
    fputs("}\n", f);
}

/* The token part of @in's store. @return 0 (also for a store without tokens:
 * present = false), or a negative errno (the message set). */
static int toksum_compute(struct inst *in, struct toksum *ts)
{
    struct pcr_store *s = in->store, *t = in->tokstore;
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
    if (!t)
        return 0; /* the store opened its token tree, or has none (api/pcrfs.c) */
    ts->present = true;
    ts->grids = pcr_store_nfiles(t);
    ts->dirs = pcr_store_ndirs(t);
    ts->shards = pcr_store_nrecords(t);
    for (uint64_t id = 1; id <= ts->grids; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;

        rc = pcr_store_file(t, id, &f);
        if (rc < 0)
            return api_fail(rc, "token file %" PRIu64 ": %s", id, strerror(-rc));
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
    meta(s, "tok_coder", ts->coder, sizeof(ts->coder));
    meta_num(s, "tok_entropy_bits", &ts->entropy);
    meta_num(s, "tok_model_bytes", &ts->model_bytes);
    meta(s, "tok_source", ts->source, sizeof(ts->source));
    return 0; /* the shards' bytes: store_sizes() */
}

static void toksum_print_text(const struct toksum *ts, FILE *f)
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
            human_bytes(ts->shard_bytes, h1, sizeof(h1)));
    if (!isnan(ts->model_bytes))
        fprintf(f, " + %.0f of model", ts->model_bytes);
    fprintf(f, "; %" PRIu64 " (%s) served\n", ts->served_bytes,
            human_bytes(ts->served_bytes, h2, sizeof(h2)));
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

static void toksum_print_json(const struct toksum *ts, FILE *f)
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

ssize_t pcrfs_summary(pcrfs_store *s, struct pcrfs_summary_args *a, char **out)
{
    struct pcrfs_summary_args none = {.size = sizeof(none)};
    struct summary *sm = NULL;
    struct inst *in;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int rc;

    PCRFS_INST(in, s);
    if (!a)
        a = &none;
    if (!out || a->size < offsetof(struct pcrfs_summary_args, measured) + sizeof(a->measured) ||
        a->nthresholds > PCRFS_SUMMARY_MAX_THRESHOLDS || (a->nthresholds && !a->thresholds) ||
        (a->flags & ~PCRFS_SUMMARY_JSON))
        return api_fail(-EINVAL, "pcrfs_summary: bad arguments");
    for (size_t i = 0; i < a->nthresholds; i++)
        if (!(a->thresholds[i] > 0 && a->thresholds[i] <= 1))
            return api_fail(-EINVAL, "pcrfs_summary: threshold %g: want a number in (0, 1]",
                            a->thresholds[i]);
    if (pcr_url_is_remote(s->path))
        return api_fail(-ENOTSUP, "%s: a summary needs the store's files on local disk", s->path);
    rc = summary_compute(in, s->path, a->thresholds, a->nthresholds, &sm);
    if (rc < 0)
        return rc;
    f = open_memstream(&buf, &len);
    if (f) {
        if (a->flags & PCRFS_SUMMARY_JSON)
            summary_print_json(sm, f);
        else
            summary_print_text(sm, f);
        rc = ferror(f) || sm->oom ? -ENOMEM : 0;
        if (fclose(f) != 0)
            rc = -ENOMEM;
    } else
        rc = -ENOMEM;
    a->measured = sm->nmeasured;
    summary_free(sm);
    if (rc < 0) {
        free(buf);
        return api_fail(rc, "out of memory");
    }
    *out = buf;
    return (ssize_t)len;
}
