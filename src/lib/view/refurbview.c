/* pcrfs — the refurb/ view (option refurb=R; refurbview.c, named apart from the
 * refurb/ module it calls): partially augmented samples, each served for R
 * consecutive opens (view.h; the refurbishing itself: include/pcrfs/refurb.h).
 *
 * refurb/ mirrors the store's tree; a JPEG a/b.JPEG appears as a/b.JPEG.ppm, a
 * binary PPM of S x S RGB pixels: decode at the level K, RandomResizedCrop, resize,
 * flip (doc/REFURB.md). A file's content stays the same for R consecutive opens,
 * then changes (the library's balanced schedule); the version an open serves is
 * fixed when the file is opened and held by the handle until it is closed.
 *
 * Samples. At mount the file table is scanned once: every file the store holds as a
 * JPEG (kind PCR_KIND_JPEG) whose name can take ".ppm" is a sample, numbered
 * 0..N-1 in file-id order; the others (verbatim files: not JPEGs, or JPEGs the
 * builder could not transcode) are left out of refurb/ and listed with the reason in
 * /.pcrfs/refurb_skipped. N fixes the schedule, so it cannot wait for the first
 * listing. Two arrays map file ids to samples and back (4 bytes per file each), and
 * one counts each sample's opens (4 bytes).
 *
 * Versions. The n-th open (from 0) of sample i serves version
 * pcr_refurb_version(n, p_i, R) with p_i = pcr_refurb_phase(N, seed, R, i): the open
 * takes n with one atomic increment, fetches that version from the library (its
 * cache, a worker rendering it, or rendered here) and keeps the bytes in the handle
 * until release. So a reader sees one version from open to close whatever else
 * opens the file meanwhile; the files are opened with direct I/O (the page cache
 * would serve one open's bytes to the next: the descriptor's cache) and the size is the PPM's
 * constant size, known without work.
 *
 * Ahead of time. When the open just served makes the NEXT open of the sample a
 * fresh version, that version is handed to the library's workers
 * (pcr_refurb_schedule) now: while a pass's opens are under way, exactly the samples
 * that will change in the next pass get prepared, about N/R of them spread over the
 * whole pass, whatever order the reader goes in. A reader that opens the sample
 * again before the worker is done waits for it (or takes the job over if it has not
 * started); a cache too small to hold the prepared versions (the default is chosen
 * to hold them: refurb_default_cache) only costs renders on demand, never other
 * bytes: a version is a pure function of (seed, sample, version, image).
 *
 * State lives in the process that opened the views (the daemon, or a program using
 * the library): a new one starts every sample at its open 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "pcrfs/refurb.h"
#include "util/json.h"
#include "util/optparse.h"
#include "view/view.h"

/* The refurb=R and refurb_* options as given (checked, or NULL). */
struct refurb_args {
    char *r, *size, *scale, *ratio, *flip, *level, *seed, *threads, *cache, *cache_size;
};

/* What the options ask for. */
struct refurb_setup {
    unsigned r;                  /* 0: no refurb/ */
    struct pcr_refurb_conf conf; /* size, scale, ratio, flip, seed */
    unsigned level;              /* 1..L */
    unsigned threads;            /* background workers */
    const char *cache_dir;       /* NULL: RAM */
    uint64_t cache_bytes;        /* 0: the default (refurb_default_cache) */
};

struct refurb {
    struct pcr_refurb *ctx; /* NULL until refurb_start() */
    struct pcr_store *store;
    struct refurb_setup set; /* as used: cache_bytes resolved */
    char *cache_dir;         /* set.cache_dir's copy */
    bool cache_default;      /* cache_bytes was chosen, not given */
    uint64_t cache_needed;   /* bytes for one version of every sample, and some */
    uint64_t nfiles;         /* the store's */
    uint64_t n;              /* samples: the files refurb/ serves */
    uint32_t *sample_of;     /* [file id] -> sample + 1; 0: not served */
    uint32_t *file_of;       /* [sample] -> file id */
    _Atomic uint32_t *nopen; /* [sample] -> opens so far */
    atomic_uint_fast64_t opens, scheduled, refused, failed_opens;
    char *skipped; /* the control file refurb_skipped: "PATH\tREASON\n" lines */
    size_t skipped_len;
    uint64_t nskipped;
    double scan_s; /* the scan of the file table at open */
};

#define REFURB_XATTR      "user.pcrfs.refurb"
#define REFURB_XATTR_NEXT "user.pcrfs.refurb_next"
#define PPM_SUFFIX        ".ppm"
#define NAME_MAX_BYTES    255

/* ---- the scan ------------------------------------------------------------------- */

/* Append @s to the skipped list with bytes that would break a line escaped: TAB,
 * newline and other control bytes as \xHH, a backslash as \\. @return 0 or -ENOMEM. */
static int put_escaped(struct pcr_json *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '\\')
            pcr_json_raw(b, "\\\\", 2);
        else if (c < 0x20 || c == 0x7f)
            pcr_json_printf(b, "\\x%02x", c);
        else
            pcr_json_raw(b, s, 1);
    }
    return b->oom ? -ENOMEM : 0;
}

static int note_skipped(struct refurb *rf, struct pcr_json *b, uint64_t id, const char *why)
{
    char path[4096];

    if (pcr_store_path(rf->store, id, path, sizeof(path)) < 0)
        snprintf(path, sizeof(path), "#%" PRIu64, id); /* deeper than PATH_MAX: its id */
    put_escaped(b, path);
    pcr_json_raw(b, "\t", 1);
    put_escaped(b, why);
    pcr_json_raw(b, "\n", 1);
    rf->nskipped++;
    return b->oom ? -ENOMEM : 0;
}

/* Why file @f is not served, or NULL if it is. */
static const char *skip_reason(struct refurb *rf, const struct pcr_file_info *fi)
{
    char name[NAME_MAX_BYTES + 1];
    struct pcr_node node;
    size_t n = strlen(fi->name);

    if (fi->kind != PCR_KIND_JPEG)
        return fi->note && fi->note[0] ? fi->note : "stored verbatim (not a JPEG pcrfs transcodes)";
    if (n + strlen(PPM_SUFFIX) > NAME_MAX_BYTES)
        return "the name with .ppm would be longer than 255 bytes";
    snprintf(name, sizeof(name), "%s" PPM_SUFFIX, fi->name);
    if (pcr_store_lookup(rf->store, fi->dir, name, &node) == 0 && node.is_dir)
        return "a directory in the same place is named NAME.ppm";
    return NULL;
}

static int rf_scan(struct refurb *rf, char *err, size_t errlen)
{
    struct pcr_json b;
    struct timespec t0, t1;
    uint64_t id;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    rf->nfiles = pcr_store_nfiles(rf->store);
    if (rf->nfiles >= UINT32_MAX) {
        snprintf(err, errlen, "refurb: more than 2^32 files");
        return -EOVERFLOW;
    }
    rf->sample_of = calloc(rf->nfiles + 1, sizeof(*rf->sample_of));
    rf->file_of = calloc(rf->nfiles + 1, sizeof(*rf->file_of));
    if (!rf->sample_of || !rf->file_of)
        return -ENOMEM;
    pcr_json_init(&b, NULL);
    for (id = 1; id <= rf->nfiles && rc == 0; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        const char *why;

        rc = pcr_store_file(rf->store, id, &f);
        if (rc) {
            snprintf(err, errlen, "refurb: reading the file table: %s", strerror(-rc));
            break;
        }
        pcr_file_info(f, &fi);
        why = skip_reason(rf, &fi);
        if (why) {
            rc = note_skipped(rf, &b, id, why);
            continue;
        }
        rf->file_of[rf->n] = (uint32_t)id;
        rf->sample_of[id] = (uint32_t)++rf->n;
    }
    if (rc == 0 && b.oom)
        rc = -ENOMEM;
    if (rc) {
        free(b.p);
        return rc;
    }
    rf->skipped = b.p ? b.p : strdup("");
    rf->skipped_len = b.len;
    rf->nopen = calloc(rf->n ? rf->n : 1, sizeof(*rf->nopen));
    if (!rf->skipped || !rf->nopen)
        return -ENOMEM;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rf->scan_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return 0;
}

/* ---- the library's loader ----------------------------------------------------------- */

/* The sample's JPEG bytes at the view's level, read through the store as any view
 * reads them (so -o bwlimit applies, and the level's reads are counted). */
static int read_sample(void *arg, uint64_t sample, uint8_t **buf, size_t *len)
{
    struct refurb *rf = arg;
    const struct pcr_file *f;
    uint64_t size;
    ssize_t n;
    uint8_t *b;
    int rc;

    if (sample >= rf->n)
        return -ENOENT;
    rc = pcr_store_file(rf->store, rf->file_of[sample], &f);
    if (rc)
        return rc;
    size = pcr_file_size(f, rf->set.level);
    if (size > (UINT64_C(1) << 32))
        return -EFBIG; /* no JPEG the builder splits is that large */
    b = malloc(size ? (size_t)size : 1);
    if (!b)
        return -ENOMEM;
    n = pcr_store_pread(rf->store, f, rf->set.level, b, (size_t)size, 0);
    if (n < 0 || (uint64_t)n != size) {
        free(b);
        return n < 0 ? (int)n : -EIO;
    }
    *buf = b;
    *len = (size_t)size;
    return 0;
}

/* ---- set-up ---------------------------------------------------------------------------- */

/* Enough for one version of every sample (the one being served, or after its last
 * open the next one, prepared ahead: rf_open releases the old one) and what the
 * workers and concurrent opens have in hand. In RAM at most a
 * quarter of the machine's memory; in a directory at most half of the free space
 * of its file system. Smaller only costs renders on demand. */
static uint64_t refurb_default_cache(struct refurb *rf, uint64_t need)
{
    uint64_t cap;

    if (rf->set.cache_dir) {
        struct statvfs sv;

        if (statvfs(rf->set.cache_dir, &sv) != 0)
            return need;
        cap = (uint64_t)sv.f_bavail * sv.f_frsize / 2;
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

        if (pages <= 0 || psize <= 0)
            return need;
        cap = (uint64_t)pages * (uint64_t)psize / 4;
    }
    return need < cap ? need : cap;
}

/* @set checked against the store: scan, counters, and a throwaway context that
 * checks the options and the cache directory now. */
static int refurb_setup_open(struct refurb *rf, const struct refurb_setup *set, unsigned levels,
                             char *err, size_t errlen)
{
    struct pcr_refurb_opts o;
    struct pcr_refurb *probe = NULL;
    uint64_t ppm;
    int rc;

    rf->set = *set;
    rc = pcr_refurb_conf_check(&set->conf);
    if (rc || set->r < 1 || set->level < 1 || set->level > levels) {
        snprintf(err, errlen, "refurb: unusable options");
        return -EINVAL;
    }
    rc = rf_scan(rf, err, errlen);
    if (rc)
        return rc;
    ppm = pcr_refurb_ppm_size(set->conf.size);
    rf->cache_needed = ppm * (rf->n + 2ull * set->threads + 16);
    if (!rf->set.cache_bytes) {
        rf->cache_default = true;
        rf->set.cache_bytes = refurb_default_cache(rf, rf->cache_needed);
    }
    if (rf->set.cache_bytes < ppm)
        rf->set.cache_bytes = ppm;
    memset(&o, 0, sizeof(o));
    o.conf = set->conf;
    o.cache_bytes = rf->set.cache_bytes;
    o.cache_dir = set->cache_dir;
    rc = pcr_refurb_open(&o, read_sample, rf, &probe);
    if (rc) {
        snprintf(err, errlen, "refurb: %s%s%s", set->cache_dir ? "refurb_cache=" : "",
                 set->cache_dir ? set->cache_dir : "", set->cache_dir ? ": " : "");
        snprintf(err + strlen(err), errlen - strlen(err), "%s", strerror(-rc));
        return rc;
    }
    pcr_refurb_close(probe);
    return 0;
}

/* Start the context and its worker threads: after a fork (the daemon's detach)
 * that would leave threads behind. */
static int refurb_start(void *state, char *err, size_t errlen)
{
    struct refurb *rf = state;
    struct pcr_refurb_opts o;
    int rc;

    memset(&o, 0, sizeof(o));
    o.conf = rf->set.conf;
    o.threads = rf->set.threads;
    o.cache_bytes = rf->set.cache_bytes;
    o.cache_dir = rf->set.cache_dir;
    rc = pcr_refurb_open(&o, read_sample, rf, &rf->ctx);
    if (rc == -EAGAIN) /* pthread_create(): RLIMIT_NPROC or a cgroup's pids.max */
        snprintf(err, errlen,
                 "refurb: cannot start %u worker threads: %s (the process limit: ulimit -u, "
                 "or fewer refurb_threads=)",
                 rf->set.threads, strerror(-rc));
    else if (rc)
        snprintf(err, errlen, "refurb: cannot start%s%s: %s", rf->set.cache_dir ? " in " : "",
                 rf->set.cache_dir ? rf->set.cache_dir : "", strerror(-rc));
    return rc;
}

static void refurb_free(void *state)
{
    struct refurb *rf = state;

    pcr_refurb_close(rf->ctx);
    free(rf->sample_of);
    free(rf->file_of);
    free((void *)rf->nopen);
    free(rf->skipped);
    free(rf->cache_dir);
    free(rf);
}

/* ---- the options --------------------------------------------------------- */

#define REFURB_MAX_R          1000
#define REFURB_MAX_THREADS    256
#define REFURB_MAX_CACHE_SIZE UINT64_C(1000000000000000) /* 10^15 bytes */

/* Where each -o refurb* option's value is kept in struct refurb_args. */
static const struct {
    const char *name;
    size_t off;
} refurb_opts[] = {
    {"refurb", offsetof(struct refurb_args, r)},
    {"refurb_size", offsetof(struct refurb_args, size)},
    {"refurb_scale", offsetof(struct refurb_args, scale)},
    {"refurb_ratio", offsetof(struct refurb_args, ratio)},
    {"refurb_flip", offsetof(struct refurb_args, flip)},
    {"refurb_level", offsetof(struct refurb_args, level)},
    {"refurb_seed", offsetof(struct refurb_args, seed)},
    {"refurb_threads", offsetof(struct refurb_args, threads)},
    {"refurb_cache", offsetof(struct refurb_args, cache)},
    {"refurb_cache_size", offsetof(struct refurb_args, cache_size)},
};

/* Option @name's value @val into @set: everything but the level's range, which
 * needs the store (refurb_init). The one place that knows what each option
 * takes (util/optparse.h's forms). @return 0, or -1 with one line in @msg. */
static int parse_one(struct refurb_setup *set, const char *name, const char *val, char *msg,
                     size_t len)
{
    static const char *const yes_no[] = {"yes", "no", NULL};
    uint64_t v;
    unsigned w;
    uint32_t k;

    if (!strcmp(name, "refurb")) {
        if (pcr_opt_uint(name, val, 1, REFURB_MAX_R, "opens per version", &v, msg, len))
            return -1;
        set->r = (unsigned)v;
    } else if (!strcmp(name, "refurb_size")) {
        if (pcr_opt_uint(name, val, 1, PCR_REFURB_MAX_SIZE, "pixels", &v, msg, len))
            return -1;
        set->conf.size = (unsigned)v;
    } else if (!strcmp(name, "refurb_scale")) {
        return pcr_opt_frac_range(name, val, 0, 1, PCR_OPT_GT_MIN, "fractions of the image's area",
                                  set->conf.scale, msg, len);
    } else if (!strcmp(name, "refurb_ratio")) {
        return pcr_opt_frac_range(name, val, 0, INFINITY, PCR_OPT_GT_MIN,
                                  "aspect ratios width/height", set->conf.ratio, msg, len);
    } else if (!strcmp(name, "refurb_flip")) {
        if (pcr_opt_word(name, val, yes_no, &w, msg, len))
            return -1;
        set->conf.flip = w == 0;
    } else if (!strcmp(name, "refurb_level")) {
        return pcr_opt_level(name, val, &k, msg, len);
    } else if (!strcmp(name, "refurb_seed")) {
        return pcr_opt_uint(name, val, 0, UINT64_MAX, NULL, &set->conf.seed, msg, len);
    } else if (!strcmp(name, "refurb_threads")) {
        if (pcr_opt_uint(name, val, 0, REFURB_MAX_THREADS, NULL, &v, msg, len))
            return -1;
        set->threads = (unsigned)v;
    } else if (!strcmp(name, "refurb_cache_size")) {
        return pcr_opt_size(name, val, 1, REFURB_MAX_CACHE_SIZE, "bytes", &set->cache_bytes, msg,
                            len);
    } else if (!strcmp(name, "refurb_cache")) {
        if (!val[0]) {
            pcr_opt_msg(msg, len, name, val, "want a directory");
            return -1;
        }
        set->cache_dir = val;
    }
    return 0;
}

static int refurb_opt(void *args, const char *name, const char *val, char *msg, size_t len)
{
    struct refurb_args *a = args;
    struct refurb_setup scratch;

    for (size_t i = 0; i < sizeof(refurb_opts) / sizeof(refurb_opts[0]); i++) {
        char **slot = (char **)((char *)a + refurb_opts[i].off);

        if (strcmp(name, refurb_opts[i].name) != 0)
            continue;
        memset(&scratch, 0, sizeof(scratch));
        if (parse_one(&scratch, name, val, msg, len) != 0)
            return -1;
        free(*slot); /* the last one given counts */
        *slot = strdup(val);
        return *slot ? 0 : -ENOMEM;
    }
    pcr_opt_msg(msg, len, name, val, "not a refurb option");
    return -1;
}

static int refurb_init(struct pcr_views *vs, const void *args, void **state, char *err,
                       size_t errlen)
{
    const struct refurb_args *c = args;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct refurb_setup setup, *set = &setup;
    struct refurb *rf;
    bool any = false;
    int rc;

    *state = NULL;
    if (!c)
        return 0;
    memset(set, 0, sizeof(*set));
    pcr_refurb_conf_default(&set->conf);
    set->level = vs->levels;
    set->threads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (unsigned)ncpu;
    /* each value was checked as it was given (refurb_opt): only the level's range
     * is new here */
    for (size_t i = 0; i < sizeof(refurb_opts) / sizeof(refurb_opts[0]); i++) {
        const char *val = *(char *const *)((const char *)c + refurb_opts[i].off);

        if (!val)
            continue;
        any = true;
        if (parse_one(set, refurb_opts[i].name, val, err, errlen) != 0)
            return -EINVAL;
    }
    if (!c->r) {
        if (any) {
            snprintf(err, errlen, "refurb_* options need -o refurb=R");
            return -EINVAL;
        }
        return 0;
    }
    if (c->level) {
        set->level = pcr_view_parse_level(vs->levels, c->level, strlen(c->level));
        if (!set->level) {
            pcr_opt_msg(err, errlen, "refurb_level", c->level,
                        "want a level of this store: 1..%u or full", vs->levels);
            return -EINVAL;
        }
    }
    rf = calloc(1, sizeof(*rf));
    if (!rf)
        return -ENOMEM;
    rf->store = vs->store;
    if (set->cache_dir) {
        rf->cache_dir = strdup(set->cache_dir); /* the args may go before the views */
        if (!rf->cache_dir) {
            free(rf);
            return -ENOMEM;
        }
        set->cache_dir = rf->cache_dir;
    }
    rc = refurb_setup_open(rf, set, vs->levels, err, errlen);
    if (rc) {
        refurb_free(rf);
        return rc;
    }
    *state = rf;
    return 0;
}

static void refurb_args_free(void *args)
{
    struct refurb_args *a = args;
    char **f[] = {&a->r,     &a->size, &a->scale,   &a->ratio, &a->flip,
                  &a->level, &a->seed, &a->threads, &a->cache, &a->cache_size};

    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        free(*f[i]);
        *f[i] = NULL;
    }
}

/* ---- the view's handlers (view.h) ----------------------------------------------------- */

static bool rf_served(const struct refurb *rf, uint64_t id, uint64_t *sample)
{
    if (id < 1 || id > rf->nfiles || !rf->sample_of[id])
        return false;
    if (sample)
        *sample = rf->sample_of[id] - 1;
    return true;
}

/* "b.JPEG.ppm" is file b.JPEG if refurb/ serves it; any other name is a directory's
 * or nothing (a file left out is absent, its ".ppm" name too). */
static int rf_lookup(const struct pcr_view *v, uint64_t dir, const char *name, struct pcr_node *out)
{
    const struct refurb *rf = v->state;
    size_t n = strlen(name), sl = strlen(PPM_SUFFIX);
    char base[NAME_MAX_BYTES + 1];
    int rc;

    if (n > sl && n - sl < sizeof(base) && memcmp(name + n - sl, PPM_SUFFIX, sl) == 0) {
        memcpy(base, name, n - sl);
        base[n - sl] = '\0';
        rc = pcr_store_lookup(v->store, dir, base, out);
        if (rc == 0 && !out->is_dir && rf_served(rf, out->id, NULL))
            return 0;
        if (rc && rc != -ENOENT)
            return rc;
    }
    rc = pcr_store_lookup(v->store, dir, name, out);
    if (rc)
        return rc;
    return out->is_dir ? 0 : -ENOENT;
}

static int rf_readdir(const struct pcr_view *v, uint64_t dir, uint64_t *pos, struct pcr_dirent *out,
                      char *namebuf, size_t namelen)
{
    const struct refurb *rf = v->state;
    int rc;

    for (;; (*pos)++) {
        rc = pcr_store_readdir(v->store, dir, *pos, out);
        if (rc)
            return rc;
        if (out->node.is_dir)
            return 0;
        if (rf_served(rf, out->node.id, NULL))
            break;
    }
    snprintf(namebuf, namelen, "%s" PPM_SUFFIX, out->name); /* fits: skip_reason() */
    out->name = namebuf;
    return 0;
}

static int64_t rf_size(const struct pcr_view *v, const struct pcr_file *f)
{
    const struct refurb *rf = v->state;

    (void)f;
    return (int64_t)pcr_refurb_ppm_size(rf->set.conf.size);
}

struct rf_handle {
    uint8_t *data;
    size_t len;
};

static int rf_open(const struct pcr_view *v, const struct pcr_file *f, void **state)
{
    struct refurb *rf = v->state;
    struct pcr_file_info fi;
    struct rf_handle *h;
    uint64_t sample, phase, nopen, version;
    unsigned r = rf->set.r;
    int rc;

    *state = NULL;
    pcr_file_info(f, &fi);
    if (!rf_served(rf, fi.id, &sample))
        return -ENOENT;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    phase = pcr_refurb_phase(rf->n, rf->set.conf.seed, r, sample);
    nopen = atomic_fetch_add_explicit(&rf->nopen[sample], 1, memory_order_relaxed);
    version = pcr_refurb_version(nopen, phase, r);
    pcr_view_count(&rf->opens, 1);
    rc = pcr_refurb_get(rf->ctx, sample, version, &h->data, &h->len);
    /* After the get, so that preparing the next version never delays this one. This
     * was the last open of @version: drop it from the cache (the handle has its
     * copy), so that each sample holds one version there, this one or the next. */
    if (pcr_refurb_is_fresh(nopen + 1, phase, r)) {
        pcr_refurb_release(rf->ctx, sample, version);
        if (rf->set.threads) {
            int s = pcr_refurb_schedule(rf->ctx, sample, pcr_refurb_version(nopen + 1, phase, r));

            pcr_view_count(s == 0 ? &rf->scheduled : &rf->refused, 1);
        }
    }
    if (rc) {
        pcr_view_count(&rf->failed_opens, 1);
        free(h);
        /* an image that does not decode, a record that does not read: EIO, as any
         * view answers a damaged file; running out of memory stays ENOMEM */
        return rc == -ENOMEM ? rc : -EIO;
    }
    *state = h;
    return 0;
}

static ssize_t rf_read(const struct pcr_view *v, const struct pcr_file *f, void *state, char *buf,
                       size_t size, uint64_t off)
{
    const struct rf_handle *h = state;
    size_t n;

    (void)v, (void)f;
    if (!h)
        return -EBADF; /* never without an open: the descriptor's needs_open */
    if (off >= h->len)
        return 0;
    n = h->len - (size_t)off < size ? h->len - (size_t)off : size;
    memcpy(buf, h->data + off, n);
    return (ssize_t)n;
}

static void rf_close(void *state)
{
    struct rf_handle *h = state;

    if (h) {
        free(h->data);
        free(h);
    }
}

static const struct pcr_view_file_ops refurb_ops = {
    .lookup = rf_lookup,
    .readdir = rf_readdir,
    .size = rf_size,
    .open = rf_open,
    .read = rf_read,
    .close = rf_close,
};

/* ---- attributes: the crop of a version ------------------------------------------------- */

static int params_text(const struct refurb *rf, uint64_t id, uint64_t sample, uint64_t version,
                       char *buf, size_t len, size_t *outlen)
{
    const struct pcr_file *f;
    struct pcr_file_info fi;
    struct pcr_refurb_params p;
    int rc, n;

    rc = pcr_store_file(rf->store, id, &f);
    if (rc)
        return rc;
    pcr_file_info(f, &fi);
    rc = pcr_refurb_params(fi.width, fi.height, &rf->set.conf, sample, version, &p);
    if (rc)
        return -EIO;
    n = snprintf(buf, len, "%" PRIu64 " %u %u %u %u %d", version, p.top, p.left, p.height, p.width,
                 p.flip ? 1 : 0);
    if (n <= 0 || (size_t)n >= len)
        return -ERANGE;
    *outlen = (size_t)n;
    return 0;
}

/* Computed from the open counter and the image's size in the index: no decode, and
 * asking does not count as an open. It names the file, not a handle (the kernel
 * sends getxattr with the inode only, also for fgetxattr on a descriptor), so with
 * several readers of one file "the last open" is whichever came last. */
static int rf_getxattr(const struct pcr_view *v, uint64_t id, const char *name, char *buf,
                       size_t len, size_t *outlen)
{
    struct refurb *rf = v->state;
    uint64_t sample, nopen, phase;
    bool next;

    if (!rf_served(rf, id, &sample))
        return -ENOSYS;
    next = strcmp(name, REFURB_XATTR_NEXT) == 0;
    if (!next && strcmp(name, REFURB_XATTR) != 0)
        return strncmp(name, "user.", 5) == 0 ? -ENODATA : -EOPNOTSUPP;
    nopen = atomic_load_explicit(&rf->nopen[sample], memory_order_relaxed);
    if (!next && nopen == 0)
        return -ENODATA;
    phase = pcr_refurb_phase(rf->n, rf->set.conf.seed, rf->set.r, sample);
    return params_text(rf, id, sample,
                       pcr_refurb_version(next ? nopen : nopen - 1, phase, rf->set.r), buf, len,
                       outlen);
}

static int rf_listxattr(const struct pcr_view *v, uint64_t id, const char **list, size_t *len)
{
    static const char names[] = REFURB_XATTR "\0" REFURB_XATTR_NEXT; /* + its NUL */

    if (!rf_served(v->state, id, NULL))
        return -ENOSYS;
    *list = names;
    *len = sizeof(names);
    return 0;
}

/* ---- info and stats ---------------------------------------------------------- */

static void rf_info_json(const void *state, struct pcr_json *b)
{
    const struct refurb *rf = state;
    const struct pcr_refurb_conf *c;

    if (!rf) {
        pcr_json_puts(b, "null");
        return;
    }
    c = &rf->set.conf;
    pcr_json_printf(b,
                    "{\"r\": %u, \"size\": %u, \"scale\": [%.17g, %.17g], "
                    "\"ratio\": [%.17g, %.17g], \"flip\": %s, \"level\": %u, \"seed\": %" PRIu64
                    ", \"threads\": %u, ",
                    rf->set.r, c->size, c->scale[0], c->scale[1], c->ratio[0], c->ratio[1],
                    c->flip ? "true" : "false", rf->set.level, c->seed, rf->set.threads);
    pcr_json_puts(b, "\"cache\": ");
    pcr_json_str(b, rf->set.cache_dir);
    pcr_json_printf(b,
                    ", \"cache_bytes\": %" PRIu64 ", \"cache_default\": %s, "
                    "\"cache_needed\": %" PRIu64 ", \"file_bytes\": %zu, \"files\": %" PRIu64
                    ", \"skipped\": %" PRIu64 ", \"scan_seconds\": %.3f}",
                    rf->set.cache_bytes, rf->cache_default ? "true" : "false", rf->cache_needed,
                    pcr_refurb_ppm_size(c->size), rf->n, rf->nskipped, rf->scan_s);
}

static uint64_t ctr_load(const atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void rf_stats_json(const struct pcr_view *v, struct pcr_json *b)
{
    struct refurb *rf = v->state;
    struct pcr_refurb_stats st;
    struct pcr_view_counters *c = v->ctr;
    uint64_t opens;

    memset(&st, 0, sizeof(st));
    if (rf->ctx)
        pcr_refurb_get_stats(rf->ctx, &st);
    opens = ctr_load(&rf->opens);
    /* passes: whole passes' worth of opens (a pass opens each of the N files once) */
    pcr_json_printf(b,
                    "{\"r\": %u, \"files\": %" PRIu64 ", \"opens\": %" PRIu64
                    ", \"passes\": %" PRIu64 ", \"reads\": %" PRIu64 ", \"bytes\": %" PRIu64
                    ", \"errors\": %" PRIu64 ", \"prepared\": %" PRIu64 ", \"hits\": %" PRIu64
                    ", \"waits\": %" PRIu64 ", \"ondemand\": %" PRIu64 ", \"failed\": %" PRIu64
                    ", \"evicted\": %" PRIu64 ", \"dropped\": %" PRIu64 ", \"queued\": %" PRIu64
                    ", \"cached\": %" PRIu64 ", \"scheduled\": %" PRIu64
                    ", \"schedule_refused\": %" PRIu64 "}",
                    rf->set.r, rf->n, opens, rf->n ? opens / rf->n : 0, ctr_load(&c->reads),
                    ctr_load(&c->bytes), ctr_load(&rf->failed_opens), st.prepared, st.hits,
                    st.waits, st.ondemand, st.failed, st.evicted, st.dropped, st.queued, st.cached,
                    ctr_load(&rf->scheduled), ctr_load(&rf->refused));
}

static int rf_ctl_data(const void *state, const char **data, size_t *len)
{
    const struct refurb *rf = state;

    *data = rf->skipped;
    *len = rf->skipped_len;
    return 0;
}

static unsigned rf_count(const struct pcr_views *vs, const void *state)
{
    (void)vs;
    return state != NULL;
}

static unsigned rf_level(const struct pcr_views *vs, const void *state, unsigned i)
{
    (void)vs, (void)i;
    return ((const struct refurb *)state)->set.level;
}

static const char *const rf_opts[] = {
    "refurb",       "refurb_size",       "refurb_scale", "refurb_ratio",
    "refurb_flip",  "refurb_level",      "refurb_seed",  "refurb_threads",
    "refurb_cache", "refurb_cache_size", NULL,
};

static const char *const rf_path_opts[] = {"refurb_cache", NULL};

const struct pcr_view_desc pcr_view_refurb = {
    .help = "\n"
            "Refurbishing (see REFURBISHING in pcrfs(1)): refurb/ serves every JPEG\n"
            "a/b.JPEG as a/b.JPEG.ppm, a random resized crop to S x S (and a flip) that\n"
            "stays the same for R consecutive opens of the file, then changes:\n"
            "    -o refurb=R            add refurb/, each crop served R times (1..1000)\n"
            "    -o refurb_size=S       output side in pixels (default 224)\n"
            "    -o refurb_scale=LO:HI  crop area fraction range (default 0.08:1)\n"
            "    -o refurb_ratio=LO:HI  crop aspect ratio range (default 3/4:4/3)\n"
            "    -o refurb_flip=yes|no  random horizontal flip (default yes)\n"
            "    -o refurb_level=K      decode the first K scans (1..L or full; default full)\n"
            "    -o refurb_seed=N       the run's seed (0..2^64-1, default 0)\n"
            "    -o refurb_threads=N    workers preparing the next pass (0..256; default: the\n"
            "                           number of CPUs; 0: only on demand)\n"
            "    -o refurb_cache=DIR    keep prepared crops in a private directory made in\n"
            "                           DIR (default: in RAM)\n"
            "    -o refurb_cache_size=SIZE  bound on prepared bytes (1..1000000G, suffix\n"
            "                           k/K, M, G; default: one crop of every file, at\n"
            "                           most 1/4 of RAM or 1/2 of DIR's free space)\n",
    .name = "refurb",
    .opts = rf_opts,
    .path_opts = rf_path_opts,
    .args_size = sizeof(struct refurb_args),
    .level_rule = PCR_LEVEL_FIXED,
    .tree = PCR_TREE_IMAGES,
    /* names and listings never change; a file's bytes change from one open to the
     * next, so no page of it may outlive its open */
    .cache = {.names = true, .listings = true, .pages = false, .direct = true},
    .needs_open = true, /* an open picks the version its handle serves */
    .json_key = "refurb",
    .ops = &refurb_ops,
    .opt = refurb_opt,
    .args_free = refurb_args_free,
    .init = refurb_init,
    .start = refurb_start,
    .free = refurb_free,
    .count = rf_count,
    .number = PCR_VIEW_REFURB,
    .level = rf_level,
    .info_json = rf_info_json,
    .stats_json = rf_stats_json,
    .getxattr = rf_getxattr,
    .listxattr = rf_listxattr,
    .ctl_name = "refurb_skipped",
    .ctl_data = rf_ctl_data,
};
