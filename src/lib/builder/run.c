/* pcrfs build — the options of a build and the order of its phases (see
 * builder.h): what pcrfs_build(), pcrfs_build_plan() and pcrfs_merge()
 * (src/lib/api/build.c) run. Every failure is reported through the log hook where
 * it happens; these functions return 0, -EINVAL (a usage error: nothing was read),
 * -ECANCELED, or another negative errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "builder/builder.h"
#include "builder/plan.h"
#include "builder/run.h"
#include "builder/tokimport.h"
#include "common/internal.h"
#include "util/optparse.h"

#define DEFAULT_PER_RECORD 1024
#define MAX_PER_RECORD     (1u << 20)
#define MAX_JOBS           1024
#define MAX_SCRIPT_BYTES   (1u << 20) /* a scans FILE larger than this is refused */
#define MAX_PARTS          1000000

/* The build options (pcrfs.h): NAME, the mkpcrfs(1) option messages name, and for
 * the token options their code (tokimport.h), which a plan records. */
static const struct {
    const char *name, *flag;
    int tokcode; /* 0: not a token option */
} options[] = {
    {"jobs", "--jobs", 0},
    {"per_record", "--per-record", 0},
    {"force", "--force", 0},
    {"scans", "--scans", 0},
    {"drop_markers", "--drop-markers", 0},
    {"quality", "--quality", 0},
    {"created", "created", 0},
    {"plan", "--plan", 0},
    {"part", "--part", 0},
    {"tokens", "--tokens", TOKIMPORT_OPT_TOKENS},
    {"seit", "--seit", TOKIMPORT_OPT_SEIT},
    {"seit_index", "--seit-index", TOKIMPORT_OPT_SEIT_INDEX},
    {"seit_labels", "--seit-labels", TOKIMPORT_OPT_SEIT_LABELS},
    {"seit_names", "--seit-names", TOKIMPORT_OPT_SEIT_NAMES},
    {"seit_shape", "--seit-shape", TOKIMPORT_OPT_SEIT_SHAPE},
    {"codebook", "--codebook", TOKIMPORT_OPT_CODEBOOK},
    {"tok_coder", "--tok-coder", TOKIMPORT_OPT_CODER},
    {"tok_per_shard", "--tok-per-shard", TOKIMPORT_OPT_PER_SHARD},
};

/* "I/N", strictly: two decimal whole numbers, 1 <= I <= N <= MAX_PARTS. */
static int parse_part(const char *arg, uint64_t *part, uint64_t *nparts, char *msg, size_t len)
{
    const char *slash = strchr(arg, '/');
    char first[32];

    /* the strict parser for each number (no sign, space, hex or suffix) */
    if (!slash || (size_t)(slash - arg) >= sizeof(first))
        goto bad;
    memcpy(first, arg, (size_t)(slash - arg));
    first[slash - arg] = '\0';
    if (pcr_opt_uint("--part", first, 1, MAX_PARTS, NULL, part, msg, len) < 0 ||
        pcr_opt_uint("--part", slash + 1, 1, MAX_PARTS, NULL, nparts, msg, len) < 0)
        goto bad;
    if (*part > *nparts) {
        snprintf(msg, len,
                 "--part=%s: part %" PRIu64 " of %" PRIu64 " does not exist (want 1 <= I <= N)",
                 arg, *part, *nparts);
        return -1;
    }
    return 0;
bad:
    snprintf(msg, len, "--part=%s: want I/N, part I of N: whole numbers, 1 <= I <= N <= %u", arg,
             MAX_PARTS);
    return -1;
}

/* Take option @name=@value into @o. @return 0; -EINVAL (message in @msg); -ENOENT
 * not a build option; -ENOMEM (message in @msg). */
static int take_option(struct pcr_bld_opts *o, const char *name, const char *value, char *msg,
                       size_t len)
{
    struct build *b = &o->b;
    uint64_t v = 0;
    unsigned k;
    int rc = 0;

    for (k = 0; k < PCR_ARRAY_SIZE(options); k++)
        if (strcmp(options[k].name, name) == 0)
            break;
    if (k == PCR_ARRAY_SIZE(options)) {
        snprintf(msg, len, "%s: not a build option", name);
        return -ENOENT;
    }
    if (options[k].tokcode) {
        if (tokimport_option(&o->topts, options[k].tokcode, value, msg, len) < 0)
            return -EINVAL;
        /* kept as given, for a plan */
        if (b->ntokopts == o->tokcap) {
            void *t = pcr_try_grow(b->tokopts, &o->tokcap, 8, sizeof(*b->tokopts));

            if (!t)
                goto nomem;
            b->tokopts = t;
        }
        b->tokopts[b->ntokopts].value = pcr_try_strdup(value);
        if (!b->tokopts[b->ntokopts].value)
            goto nomem;
        b->tokopts[b->ntokopts++].code = options[k].tokcode;
        o->build_opt = o->build_opt ? o->build_opt : options[k].flag;
        return 0;
    }
    switch (k) {
    case 0:
        rc = pcr_opt_uint("--jobs", value, 1, MAX_JOBS, NULL, &v, msg, len);
        b->jobs = (unsigned)v;
        break;
    case 1:
        rc = pcr_opt_uint("--per-record", value, 1, MAX_PER_RECORD, NULL, &v, msg, len);
        b->per_record = (unsigned)v;
        o->build_opt = o->build_opt ? o->build_opt : "--per-record";
        break;
    case 2:
        rc = pcr_opt_uint("force", value, 0, 1, NULL, &v, msg, len);
        b->force = v != 0;
        break;
    case 3:
        o->scans = value;
        o->build_opt = o->build_opt ? o->build_opt : "--scans";
        break;
    case 4:
        rc = pcr_opt_uint("drop_markers", value, 0, 1, NULL, &v, msg, len);
        b->drop_markers = v != 0;
        o->build_opt = o->build_opt ? o->build_opt : "--drop-markers";
        break;
    case 5:
        rc = pcr_opt_uint("quality", value, 0, 1, NULL, &v, msg, len);
        b->quality = v != 0;
        o->build_opt = o->build_opt ? o->build_opt : v ? "--quality" : "--no-quality";
        break;
    case 6:
        rc = pcr_opt_uint("created", value, 0, INT64_MAX, NULL, &v, msg, len);
        b->created = (int64_t)v;
        break;
    case 7:
        o->plan = value;
        break;
    default:
        rc = parse_part(value, &o->part, &o->nparts, msg, len);
        break;
    }
    return rc == 0 ? 0 : -EINVAL;
nomem:
    snprintf(msg, len, "out of memory");
    return -ENOMEM;
}

int pcr_bld_opts_parse(struct pcr_bld_opts *o, const char *const *opts, char *msg, size_t len)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    memset(o, 0, sizeof(*o));
    o->b.per_record = DEFAULT_PER_RECORD;
    o->b.srcfd = -1;
    o->b.jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    o->scans = "default";
    for (size_t i = 0; opts && opts[i]; i++) {
        const char *eq = strchr(opts[i], '=');
        char name[64];
        int rc;

        if (!eq || (size_t)(eq - opts[i]) >= sizeof(name)) {
            snprintf(msg, len, "%.64s: want NAME=VALUE", opts[i]);
            return -EINVAL;
        }
        memcpy(name, opts[i], (size_t)(eq - opts[i]));
        name[eq - opts[i]] = '\0';
        rc = take_option(o, name, eq + 1, msg, len);
        if (rc < 0)
            return rc == -ENOMEM ? rc : -EINVAL;
    }
    if (o->nparts && !o->plan) {
        snprintf(msg, len, "--part needs --plan PLAN");
        return -EINVAL;
    }
    if (tokimport_check(&o->topts, msg, len) < 0)
        return -EINVAL;
    return 0;
}

int pcr_bld_option_check(const char *name, const char *value, char *msg, size_t len)
{
    struct pcr_bld_opts o;
    int rc;

    memset(&o, 0, sizeof(o));
    o.b.srcfd = -1;
    rc = take_option(&o, name, value, msg, len);
    build_free(&o.b);
    return rc;
}

/* The scans option: a preset name, else a file in jpegtran -scans syntax. @keep
 * gets the text for a plan (NULL when it holds a NUL). @return 0, or -EINVAL (the
 * file cannot be read or is not a valid lossless script; message in @msg), or
 * -ENOMEM (message in @msg). */
static int load_scripts(const char *arg, struct pcr_scripts *out, char **keep, char *msg,
                        size_t len)
{
    const char *base = strrchr(arg, '/');
    char why[256] = "";
    char *text;
    size_t n = 0;
    FILE *f;

    if (pcr_scripts_preset(arg, out) == 0)
        return 0;
    f = fopen(arg, "rb");
    if (!f) {
        snprintf(msg, len, "--scans: '%s' is neither 'default', 'fast' nor a readable file: %s",
                 arg, strerror(errno));
        return -EINVAL;
    }
    text = pcr_try_malloc(MAX_SCRIPT_BYTES + 1);
    if (!text) {
        fclose(f);
        snprintf(msg, len, "out of memory");
        return -ENOMEM;
    }
    n = fread(text, 1, MAX_SCRIPT_BYTES + 1, f);
    if (ferror(f)) {
        int e = errno;

        fclose(f);
        free(text);
        snprintf(msg, len, "--scans: reading %s: %s", arg, strerror(e));
        return -EINVAL;
    }
    fclose(f);
    if (n > MAX_SCRIPT_BYTES) {
        free(text);
        snprintf(msg, len, "--scans: %s: larger than %u bytes", arg, MAX_SCRIPT_BYTES);
        return -EINVAL;
    }
    if (pcr_scripts_parse(text, n, base ? base + 1 : arg, out, why, sizeof(why)) < 0) {
        free(text);
        snprintf(msg, len, "--scans: %s: %s", arg, why);
        return -EINVAL;
    }
    text[n] = '\0';
    if (strlen(text) == n)
        *keep = text; /* a plan records the script itself */
    else
        free(text);
    return 0;
}

/* SRC and the pipeline's locks. @return 0, or -1 (reported). */
static int start_src(struct build *b)
{
    b->srcfd = b->src ? open(b->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (b->src && b->srcfd < 0) {
        pcr_bld_err("%s: %s", b->src, strerror(errno));
        return -1;
    }
    if (pthread_mutex_init(&b->lock, NULL) || pthread_cond_init(&b->space_cv, NULL) ||
        pthread_cond_init(&b->done_cv, NULL)) {
        pcr_bld_err("cannot initialise threads");
        return -1;
    }
    return 0;
}

/* The writer (the temporary store) and the directories the walk must not enter.
 * @return 0, or -1 (reported; nothing was created). */
static int start_writer(struct build *b, const struct pcr_writer_opts *wopts)
{
    char err[1024] = "";
    struct stat st;
    int rc;

    rc = pcr_writer_create(b->store, wopts, &b->w, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EEXIST)
            pcr_bld_err("%s: already exists (--force replaces a pcrfs store)", b->store);
        else if ((rc == -ENOTDIR || rc == -EINVAL) && err[0])
            pcr_bld_err("%s", err);
        else if (rc == -ENOTDIR || rc == -EINVAL)
            pcr_bld_err("%s: exists and is not a pcrfs store; not replacing it", b->store);
        else
            pcr_bld_err("creating %s: %s", b->store, err[0] ? err : strerror(-rc));
        /* never -EINVAL, which says a usage error */
        b->err = rc == -EEXIST ? rc : rc == -ENOTDIR || rc == -EINVAL ? -ENOTDIR : 0;
        return -1;
    }
    if (stat(pcr_writer_tmpdir(b->w), &st) == 0) {
        b->exclude[b->nexclude].dev = st.st_dev;
        b->exclude[b->nexclude].ino = st.st_ino;
        b->exclude[b->nexclude++].store = false;
    }
    if (stat(b->store, &st) == 0) {
        b->exclude[b->nexclude].dev = st.st_dev;
        b->exclude[b->nexclude].ino = st.st_ino;
        b->exclude[b->nexclude++].store = true;
    }
    return 0;
}

/* The result for the caller's report. */
static void report_result(const struct pcr_bld_opts *o, uint64_t first, uint64_t end)
{
    const struct build *b = &o->b;
    struct pcrfs_build_result r = {
        .files = b->nfiles,
        .dirs = b->ndirs,
        .bytes = b->total_bytes,
        .records = (b->nfiles + b->per_record - 1) / b->per_record,
        .per_record = b->per_record,
        .jobs = b->jobs,
        .part = o->part,
        .nparts = o->nparts,
        .first_file = first,
        .end_file = end,
    };

    snprintf(r.plan_id, sizeof(r.plan_id), "%s", b->plan_id);
    if (b->rep->cb && b->rep->cb->result)
        b->rep->cb->result(&r, b->rep->ctx);
}

/* What a failed run returns. */
static int failed(const struct build *b)
{
    if (b->rep->cancel)
        return -ECANCELED;
    if (b->err)
        return b->err;
    return __atomic_load_n(&b->rep->nomem, __ATOMIC_RELAXED) ? -ENOMEM : -EIO;
}

int pcr_bld_plan(struct pcr_bld_opts *o, const char *src, const char *plan)
{
    struct build *b = &o->b;
    char msg[1024];
    int rc;

    b->src = src;
    if (!src && !tokimport_enabled(&o->topts)) {
        pcr_errf(o->msg, sizeof(o->msg), "missing SRC");
        return -EINVAL;
    }
    rc = load_scripts(o->scans, &b->scripts, &b->scans_text, msg, sizeof(msg));
    if (rc == -ENOMEM) {
        pcr_bld_nomem(b->rep);
        return failed(b);
    }
    if (rc < 0) {
        snprintf(o->msg, sizeof(o->msg), "%s", msg);
        return -EINVAL;
    }
    if (strncmp(b->scripts.name, "file:", 5) == 0 && !b->scans_text) {
        snprintf(o->msg, sizeof(o->msg),
                 "--scans: %s: holds a NUL byte, which a plan cannot record", o->scans);
        return -EINVAL;
    }
    if (!b->force && access(plan, F_OK) == 0) {
        struct pcr_sbuf esc = {0};

        pcr_bld_err("%s: already exists (--force replaces it)", pcr_escaped(&esc, plan));
        pcr_sbuf_free(&esc);
        return -EEXIST;
    }
    if (start_src(b) < 0)
        return failed(b);
    if (!b->created)
        b->created = (int64_t)time(NULL); /* every part's store gets the plan's time */
    if (build_walk(b) < 0 || plan_write(b, plan) < 0)
        return failed(b);
    report_result(o, 0, b->nfiles);
    return 0;
}

/* The part keys (pcrfs/writer.h, struct pcr_part_info). @return 0 or a negative errno. */
static int set_part_meta(struct build *b, const struct pcr_part_info *r)
{
    const uint64_t v[] = {r->index, r->count, r->first_file, r->files, r->first_record, r->records};
    static const char *const key[] = {"part.index", "part.count",        "part.first_file",
                                      "part.files", "part.first_record", "part.records"};
    char num[32];
    int rc = pcr_writer_set_meta(b->w, "part.plan", b->plan_id);

    for (unsigned k = 0; rc == 0 && k < sizeof(v) / sizeof(v[0]); k++) {
        snprintf(num, sizeof(num), "%" PRIu64, v[k]);
        rc = pcr_writer_set_meta(b->w, key[k], num);
    }
    return rc;
}

/* A part: the plan into @b, the part's range of records and files into @range, and
 * the token options for part 1 (which carries the token tree). @return 0 or -1
 * (reported). */
static int read_part(struct pcr_bld_opts *o, struct pcr_writer_opts *wopts,
                     struct pcr_part_info *range)
{
    struct build *b = &o->b;
    char msg[512];

    if (plan_read(b, o->plan) < 0)
        return -1;
    pcr_part_range(b->nfiles, b->per_record, o->part, o->nparts, range);
    b->fbegin = range->first_file;
    b->fend = range->first_file + range->files;
    for (unsigned k = 0; o->part == 1 && k < b->ntokopts; k++)
        if (tokimport_option(&o->topts, b->tokopts[k].code, b->tokopts[k].value, msg,
                             sizeof(msg)) != 1) {
            pcr_bld_err("%s: a token option this mkpcrfs does not know (%d)", o->plan,
                        b->tokopts[k].code);
            return -1;
        }
    wopts->part = true;
    wopts->part_first_file = range->first_file;
    wopts->part_first_record = range->first_record;
    wopts->part_files = range->files;
    return 0;
}

int pcr_bld_build(struct pcr_bld_opts *o, const char *src, const char *out)
{
    struct build *b = &o->b;
    struct tokimport *tok = NULL;
    struct pcr_part_info range = {0};
    struct pcr_writer_opts wopts = {0};
    bool part = o->nparts != 0;
    char err[1024] = "";
    int rc;

    b->src = src;
    b->store = out;
    if (part && o->build_opt) {
        snprintf(o->msg, sizeof(o->msg), "%s: a part takes the build options from the plan",
                 o->build_opt);
        return -EINVAL;
    }
    if (!part && !src && !tokimport_enabled(&o->topts)) {
        snprintf(o->msg, sizeof(o->msg), "missing SRC");
        return -EINVAL;
    }
    rc = part ? 0 : load_scripts(o->scans, &b->scripts, &b->scans_text, err, sizeof(err));
    if (rc == -ENOMEM) {
        pcr_bld_nomem(b->rep);
        return failed(b);
    }
    if (rc < 0) {
        snprintf(o->msg, sizeof(o->msg), "%s", err);
        return -EINVAL;
    }
    if (part && read_part(o, &wopts, &range) < 0)
        return failed(b);
    if (start_src(b) < 0)
        return failed(b);
    wopts.levels = b->scripts.levels;
    wopts.script = b->scripts.name;
    wopts.force = b->force;
    wopts.created = b->created;
    if (start_writer(b, &wopts) < 0)
        return failed(b);

    if (tokimport_enabled(&o->topts)) {
        o->topts.rep = b->rep;
        o->topts.skip[0] = b->store;
        o->topts.skip[1] = pcr_writer_tmpdir(b->w);
        if (tokimport_scan(&o->topts, &tok) < 0)
            goto fail;
    }
    /* a part has its tree from the plan; a whole build walks SRC */
    if (!part) {
        if (build_walk(b) < 0)
            goto fail;
        b->fend = b->nfiles;
    }
    rc = build_add_dirs(b);
    if (rc < 0) {
        pcr_bld_err("writing %s: %s", b->store, strerror(-rc));
        goto fail;
    }
    if (build_transcode(b) < 0)
        goto fail;
    if (tok && tokimport_write(tok, b->w) < 0)
        goto fail;
    rc = build_set_meta(b);
    if (rc == 0 && part)
        rc = set_part_meta(b, &range);
    if (rc < 0) {
        pcr_bld_err("writing %s: %s", b->store, strerror(-rc));
        goto fail;
    }
    /* The commit is short and all or nothing: the last chance to cancel is before. */
    if (pcr_bld_progress(b->rep, PCRFS_BUILD_COMMIT, 0, 0, 0, 0, true))
        goto fail;
    rc = pcr_writer_finish(b->w, err, sizeof(err));
    b->w = NULL;
    tokimport_free(tok);
    if (rc < 0) {
        pcr_bld_err("writing %s: %s", b->store, strerror(-rc));
        if (err[0])
            pcr_bld_err("%s", err);
        return rc == -EINVAL ? -EIO : rc;
    }
    report_result(o, b->fbegin, b->fend);
    return 0;

fail:
    if (b->w)
        pcr_writer_abort(b->w);
    b->w = NULL;
    tokimport_free(tok);
    return failed(b);
}

int pcr_bld_merge(struct pcr_bld_opts *o, const char *out, const char *const *parts, size_t n)
{
    struct build *b = &o->b;

    b->store = out;
    if (o->build_opt || o->plan || o->nparts) {
        snprintf(o->msg, sizeof(o->msg), "%s: a merge takes the build options from the plan",
                 o->build_opt ? o->build_opt
                 : o->plan    ? "--plan"
                              : "--part");
        return -EINVAL;
    }
    if (n == 0 || n > MAX_PARTS) {
        snprintf(o->msg, sizeof(o->msg), "--merge: missing PART");
        return -EINVAL;
    }
    if (start_src(b) < 0 || merge_run(b, parts, (unsigned)n) < 0)
        return failed(b);
    report_result(o, 0, 0);
    return 0;
}

void pcr_bld_opts_free(struct pcr_bld_opts *o)
{
    build_free(&o->b);
}
