/* pcrfs tools — the store summary (see summary.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "summary.h"
#include "toksum.h"
#include "tool.h"
#include "util/json.h"

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
    struct toksum tok; /* the token part (toksum.h) */
};

static void meta(struct pcr_store *s, const char *key, char *buf, size_t len)
{
    if (pcr_store_meta(s, key, buf, len) < 0)
        buf[0] = '\0';
}

/* Bytes of index.db and of records/ *: what the store costs on disk. */
static int store_sizes(struct summary *sm, char *err, size_t errlen)
{
    struct stat st;
    struct dirent *de;
    DIR *d = NULL;
    int fd, rfd, e = 0;

    fd = open(sm->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstatat(fd, "index.db", &st, 0) < 0)
        goto fail;
    sm->index_bytes = (uint64_t)st.st_size;
    rfd = openat(fd, "records", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        goto fail;
    d = fdopendir(rfd);
    if (!d) {
        e = errno;
        close(rfd);
        errno = e;
        goto fail;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (fstatat(rfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            sm->record_bytes += (uint64_t)st.st_size;
    }
    if (errno)
        goto fail;
    closedir(d);
    close(fd);
    return 0;
fail:
    e = errno;
    if (d)
        closedir(d);
    if (fd >= 0)
        close(fd);
    snprintf(err, errlen, "%s: %s", sm->path, strerror(e));
    return -e;
}

static int cmp_reason(const void *a, const void *b)
{
    const struct reason *x = a, *y = b;

    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->note, y->note);
}

static void add_reason(struct summary *sm, const char *note, uint64_t *cap)
{
    size_t i;

    /* Few distinct reasons in practice: a linear search is enough. */
    for (i = 0; i < sm->nreasons; i++) {
        if (strcmp(sm->reasons[i].note, note) == 0) {
            sm->reasons[i].count++;
            return;
        }
    }
    if (sm->nreasons == *cap)
        sm->reasons = tool_grow(sm->reasons, cap, 8, sizeof(*sm->reasons));
    sm->reasons[sm->nreasons].note = note;
    sm->reasons[sm->nreasons].count = 1;
    sm->nreasons++;
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

int summary_compute(struct pcr_store *s, const char *path, const double *extra, size_t nextra,
                    struct summary **out, char *err, size_t errlen)
{
    struct summary *sm = calloc(1, sizeof(*sm));
    struct tool_buf esc = {0};
    size_t pathcap = 4096;
    uint64_t rcap = 0, vcap = 0;
    char *pbuf = malloc(pathcap);
    uint64_t id;
    unsigned k;
    int rc;

    if (!sm || !pbuf || !(sm->path = strdup(path))) {
        free(pbuf);
        summary_free(sm);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
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
            snprintf(err, errlen, "%s: file %" PRIu64 ": %s", path, id, strerror(-rc));
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
            rc = (int)n;
            snprintf(err, errlen, "%s: path of file %" PRIu64 ": %s", path, id, strerror(-rc));
            goto fail;
        }
        if (sm->nverbatim == vcap)
            sm->vfiles = tool_grow(sm->vfiles, &vcap, 16, sizeof(*sm->vfiles));
        tool_buf_reset(&esc);
        tool_escape(&esc, pbuf, (size_t)n);
        sm->vfiles[sm->nverbatim].path = tool_xstrdup(esc.s);
        sm->vfiles[sm->nverbatim].note = fi.note && fi.note[0] ? fi.note : "no reason recorded";
        add_reason(sm, sm->vfiles[sm->nverbatim].note, &rcap);
        sm->nverbatim++;
    }
    if (sm->nreasons)
        qsort(sm->reasons, sm->nreasons, sizeof(*sm->reasons), cmp_reason);
    rc = store_sizes(sm, err, errlen);
    if (rc == 0)
        rc = toksum_compute(s, path, &sm->tok, err, errlen);
    if (rc < 0)
        goto fail;
    free(pbuf);
    tool_buf_free(&esc);
    *out = sm;
    return 0;
fail:
    free(pbuf);
    tool_buf_free(&esc);
    summary_free(sm);
    return rc;
}

uint64_t summary_njpeg(const struct summary *sm)
{
    return sm->njpeg;
}

uint64_t summary_nmeasured(const struct summary *sm)
{
    return sm->nmeasured;
}

void summary_free(struct summary *sm)
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

void summary_print_text(const struct summary *sm, FILE *f)
{
    struct tool_buf esc = {0};
    char h1[32], h2[32];
    uint64_t store_bytes = sm->index_bytes + sm->record_bytes, i;
    double full;
    unsigned k;

    fprintf(f, "store         %s\n", tool_escaped(&esc, sm->path));
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
            tool_human_bytes(sm->src_bytes, h1, sizeof(h1)));
    fprintf(f, "store bytes   %" PRIu64 " (%s)", store_bytes,
            tool_human_bytes(store_bytes, h2, sizeof(h2)));
    if (sm->src_bytes)
        fprintf(f, ", %.1f%% of source", 100.0 * (double)store_bytes / (double)sm->src_bytes);
    fprintf(f, "; index %" PRIu64 ", records %" PRIu64 "\n", sm->index_bytes, sm->record_bytes);

    toksum_print_text(&sm->tok, f);

    fprintf(f, "\nlevel  mean bytes/JPEG  ratio to full%s\n",
            sm->nmeasured ? "  MS-SSIM     min" : "");
    if (!sm->njpeg) {
        fprintf(f, "    -  no JPEG in this store\n");
        tool_buf_free(&esc);
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
    tool_buf_free(&esc);
}

/* A name or a note as JSON: its displayed (escaped, tool_escape()) form, the same
 * text the summary prints, so a name that is not UTF-8 reads the same in both. */
static void json_escaped_str(FILE *f, const char *s)
{
    struct tool_buf esc = {0};

    pcr_json_fquote(f, tool_escaped(&esc, s));
    tool_buf_free(&esc);
}

/* A decimal number from the index as a JSON number, or null if absent or odd. */
static const char *num_or_null(const char *s)
{
    return s[0] && strspn(s, "0123456789") == strlen(s) ? s : "null";
}

void summary_print_json(const struct summary *sm, FILE *f)
{
    double full = sm->njpeg ? (double)sm->level_sum[sm->levels] / (double)sm->njpeg : 0;
    uint64_t i;
    unsigned k;

    fprintf(f, "{\"format_version\":%s,\"levels\":%u,\"script\":", num_or_null(sm->format),
            sm->levels);
    if (sm->script[0])
        json_escaped_str(f, sm->script);
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
        json_escaped_str(f, sm->vfiles[i].note);
        fputc('}', f);
    }
    fputs("]", f);
    print_quality_json(sm, f);
    toksum_print_json(&sm->tok, f);
    fputs("}\n", f);
}
