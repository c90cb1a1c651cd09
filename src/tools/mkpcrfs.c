/* mkpcrfs — build a pcrfs store from an ImageFolder-like tree: the command line,
 * signals, and the order of the phases (mkpcrfs.h says what each does; build.c
 * does it).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/store.h"
#include "mkpcrfs.h"
#include "plan.h"
#include "progress.h"
#include "tokimport.h"
#include "tool.h"
#include "util/optparse.h"

#define DEFAULT_PER_RECORD 1024
#define MAX_PER_RECORD     (1u << 20)
#define MAX_JOBS           1024
#define MAX_SCRIPT_BYTES   (1u << 20) /* a --scans FILE larger than this is refused */
#define MAX_PARTS          1000000

/* What the command line asks for. */
enum mode { MODE_BUILD, MODE_PLAN, MODE_PART, MODE_MERGE };

struct cmdline {
    enum mode mode;
    const char *plan;      /* --plan PLAN */
    uint64_t part, nparts; /* --part I/N */
    const char *build_opt; /* the first option the plan fixes, if one was given */
    char **parts;          /* --merge: the parts */
    unsigned nparts_given;
};

volatile sig_atomic_t mk_interrupted;

/* The temporary directory, for the allocation failure path (see on_oom()). */
static char *tmpdir_copy;

/* Out of memory, maybe in a worker while the main thread uses the writer: the
 * writer cannot be aborted safely from here, so remove its directory by path;
 * the process exits right after. (A leftover would also be removed by the next
 * build of the same STORE, as its PID is gone.) */
static void on_oom(void)
{
    if (tmpdir_copy)
        tool_remove_tree(tmpdir_copy);
}

static void on_signal(int sig)
{
    (void)sig;
    mk_interrupted = 1;
}

/* The summary of the new store, read back from it through the public API
 * (pcrfs_summary()): the same text as pcrinfo's. */
static int print_summary(const struct build *b, double elapsed)
{
    pcrfs_store *ps;
    char *text = NULL;
    ssize_t n;
    int rc;

    rc = pcrfs_open(b->store, NULL, &ps);
    if (rc < 0) {
        tool_err("%s: the new store does not open: %s", b->store, pcrfs_errmsg());
        return 1;
    }
    n = pcrfs_summary(ps, NULL, &text);
    if (n < 0) {
        tool_err("%s", pcrfs_errmsg());
        pcrfs_close(ps);
        return 1;
    }
    fwrite(text, 1, (size_t)n, stdout);
    if (elapsed >= 0)
        printf("\nbuilt in %.1f s: %.1f images/s, %.1f MB/s of source, %u thread%s\n", elapsed,
               elapsed > 0 ? (double)b->nfiles / elapsed : 0.0,
               elapsed > 0 ? (double)b->total_bytes / elapsed / 1e6 : 0.0, b->jobs,
               b->jobs == 1 ? "" : "s");
    free(text);
    pcrfs_close(ps);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: mkpcrfs [OPTIONS] SRC STORE\n"
            "       mkpcrfs [OPTIONS] --tokens DIR | --seit DATA ... [SRC | -] STORE\n"
            "       mkpcrfs [OPTIONS] --plan PLAN SRC          plan a build on many machines\n"
            "       mkpcrfs [-j N] [-f] --plan PLAN --part I/N OUT   build part I of N\n"
            "       mkpcrfs [-f] --merge STORE PART...         make STORE of all the parts\n"
            "Build the pcrfs store STORE from the image tree SRC (any depth).\n"
            "JPEGs are transcoded losslessly to progressive JPEG; every other file is\n"
            "stored verbatim (with a warning).\n"
            "\n"
            "  -j, --jobs N          transcoding threads (1..1024; default: online CPUs)\n"
            "  -n, --per-record N    images per record (1..1048576; default %u)\n"
            "  -f, --force           replace STORE if it is a pcrfs store\n"
            "      --scans SCRIPT    scan script: 'default' (libjpeg's, 10 levels), 'fast'\n"
            "                        (spectral selection only: faster full-fidelity\n"
            "                        decoding, 9 levels) or a file in jpegtran -scans syntax\n"
            "      --drop-markers    drop APPn/COM markers (EXIF, ICC, comments)\n"
            "      --quality         measure each JPEG's luma MS-SSIM at every level and\n"
            "                        store it in the index (per-image levels); the build\n"
            "                        takes 8 to 17 times the CPU time (larger, smoother\n"
            "                        images cost more: mkpcrfs(1))\n"
            "      --no-quality      do not measure it (the default)\n"
            "      --plan PLAN       with SRC: walk SRC and write PLAN, which fixes the\n"
            "                        build (options, files with size and mtime); with\n"
            "                        --part: build a part of it (mkpcrfs(1))\n"
            "      --part I/N        build part I of N (1 <= I <= N <= %u): a contiguous\n"
            "                        range of records, into the directory OUT\n"
            "      --merge           STORE PART...: check that the parts are all N parts of\n"
            "                        one plan and make STORE of them (record files are\n"
            "                        hard-linked on one file system, copied otherwise)\n"
            "  -q, --quiet           no progress bar, no summary\n"
            "      --progress        show the progress bar even if stderr is not a terminal\n"
            "  -v, --verbose         show the library's informational and debug messages\n"
            "  -h, --help            show this help and exit\n"
            "  -V, --version         show the version and exit\n"
            "\n",
            DEFAULT_PER_RECORD, MAX_PARTS);
    tokimport_usage(f);
    fprintf(f, "\n"
               "Exit status: 0 success, 1 failure (nothing is left behind), 2 usage error,\n"
               "130 interrupted. SOURCE_DATE_EPOCH, if set, is the store's creation time.\n"
               "See mkpcrfs(1).\n");
}

enum {
    OPT_DROP_MARKERS = 256,
    OPT_PROGRESS,
    OPT_SCANS,
    OPT_QUALITY,
    OPT_NO_QUALITY,
    OPT_PLAN,
    OPT_PART,
    OPT_MERGE
};

/* --scans: a preset name, else a file in jpegtran -scans syntax. Exits 2 (usage) if
 * the file cannot be read or is not a valid lossless script. */
static void load_scripts(const char *arg, struct pcr_scripts *out, char **keep)
{
    const char *base = strrchr(arg, '/');
    char why[256] = "";
    char *text;
    size_t len = 0;
    FILE *f;

    if (pcr_scripts_preset(arg, out) == 0)
        return;
    f = fopen(arg, "rb");
    if (!f)
        tool_usage_error("--scans: '%s' is neither 'default', 'fast' nor a readable file: %s", arg,
                         strerror(errno));
    text = tool_xmalloc(MAX_SCRIPT_BYTES + 1);
    len = fread(text, 1, MAX_SCRIPT_BYTES + 1, f);
    if (ferror(f)) {
        int e = errno;

        fclose(f);
        tool_usage_error("--scans: reading %s: %s", arg, strerror(e));
    }
    fclose(f);
    if (len > MAX_SCRIPT_BYTES)
        tool_usage_error("--scans: %s: larger than %u bytes", arg, MAX_SCRIPT_BYTES);
    if (pcr_scripts_parse(text, len, base ? base + 1 : arg, out, why, sizeof(why)) < 0)
        tool_usage_error("--scans: %s: %s", arg, why);
    text[len] = '\0';
    if (strlen(text) == len)
        *keep = text; /* a plan records the script itself */
    else
        free(text);
}

/* --part I/N, strictly: two decimal whole numbers, 1 <= I <= N <= MAX_PARTS. */
static void parse_part(const char *arg, struct cmdline *cl)
{
    /* --part has a required argument, so getopt sets optarg (the analyzer takes it
     * for NULL from another option's `optarg ? optarg : ""`):
     * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
    const char *slash = strchr(arg, '/');
    char first[32], msg[160];

    /* the strict parser for each number (no sign, space, hex or suffix) */
    if (!slash || (size_t)(slash - arg) >= sizeof(first))
        goto bad;
    memcpy(first, arg, (size_t)(slash - arg));
    first[slash - arg] = '\0';
    if (pcr_opt_uint("--part", first, 1, MAX_PARTS, NULL, &cl->part, msg, sizeof(msg)) < 0 ||
        pcr_opt_uint("--part", slash + 1, 1, MAX_PARTS, NULL, &cl->nparts, msg, sizeof(msg)) < 0)
        goto bad;
    if (cl->part > cl->nparts)
        tool_usage_error("--part=%s: part %" PRIu64 " of %" PRIu64
                         " does not exist (want 1 <= I <= N)",
                         arg, cl->part, cl->nparts);
    return;
bad:
    tool_usage_error("--part=%s: want I/N, part I of N: whole numbers, 1 <= I <= N <= %u", arg,
                     MAX_PARTS);
}

/* SOURCE_DATE_EPOCH (reproducible-builds.org): the store's "created", so that two
 * builds of one tree match to the byte; set but not a whole number is an error. */
static int64_t source_date_epoch(void)
{
    const char *v = getenv("SOURCE_DATE_EPOCH");

    if (!v)
        return 0;
    return (int64_t)tool_opt_uint("SOURCE_DATE_EPOCH", v, 1, INT64_MAX);
}

/* The operands of each mode into @b and @cl (exits on usage errors). */
static void parse_operands(int argc, char **argv, struct build *b, struct cmdline *cl, bool tokens)
{
    int n = argc - optind;

    if (cl->mode == MODE_MERGE) {
        if (cl->plan || cl->nparts)
            tool_usage_error("--merge takes no --plan or --part: the parts say their plan");
        if (n < 2)
            tool_usage_error("--merge: missing %s", n ? "PART" : "STORE and PART");
        b->store = argv[optind];
        cl->parts = argv + optind + 1;
        cl->nparts_given = (unsigned)(n - 1);
        return;
    }
    if (cl->mode == MODE_PART) {
        if (n != 1)
            tool_usage_error(n ? "too many arguments: '%s'" : "missing OUT, the part's directory",
                             n ? argv[optind + 1] : "");
        b->store = argv[optind];
        return;
    }
    if (cl->mode == MODE_PLAN) {
        if (n > 1)
            tool_usage_error("--plan PLAN SRC takes no STORE: '%s' (the parts are built with "
                             "--part, then merged with --merge)",
                             argv[optind + 1]);
        if (n == 0 && !tokens)
            tool_usage_error("missing SRC");
        b->src = n ? argv[optind] : NULL;
    } else {
        if (n < (tokens ? 1 : 2))
            tool_usage_error("missing %s", n == 0 && !tokens ? "SRC and STORE" : "STORE");
        if (n > 2)
            tool_usage_error("too many arguments: '%s'", argv[optind + 2]);
        /* With tokens, SRC may be omitted (or "-"): a store of tokens only. */
        b->src = n == 2 ? argv[optind] : NULL;
        b->store = argv[argc - 1];
    }
    if (b->src && strcmp(b->src, "-") == 0) {
        if (!tokens)
            tool_usage_error("SRC '-' means no images (a store of tokens only) and needs "
                             "--tokens or --seit; to build from a directory named '-', "
                             "write ./-");
        b->src = NULL;
    }
}

/* The command line into @b, @topts and @cl (exits on --help, --version and usage
 * errors). @return true if tokens are to be imported. */
static bool parse_args(int argc, char **argv, struct build *b, struct tokimport_opts *topts,
                       struct cmdline *cl)
{
    static const struct option longopts[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"per-record", required_argument, NULL, 'n'},
        {"force", no_argument, NULL, 'f'},
        {"drop-markers", no_argument, NULL, OPT_DROP_MARKERS},
        {"scans", required_argument, NULL, OPT_SCANS},
        {"quality", no_argument, NULL, OPT_QUALITY},
        {"no-quality", no_argument, NULL, OPT_NO_QUALITY},
        {"plan", required_argument, NULL, OPT_PLAN},
        {"part", required_argument, NULL, OPT_PART},
        {"merge", no_argument, NULL, OPT_MERGE},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        TOKIMPORT_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    bool force_progress = false, tokens, merge = false;
    const char *scans_arg = "default";
    uint64_t tokcap = 0;
    long ncpu;
    int c;

    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    b->jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":j:n:fqvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            b->jobs = (unsigned)tool_opt_uint("--jobs", optarg, 1, MAX_JOBS);
            break;
        case 'n':
            b->per_record = (unsigned)tool_opt_uint("--per-record", optarg, 1, MAX_PER_RECORD);
            cl->build_opt = cl->build_opt ? cl->build_opt : "--per-record";
            break;
        case 'f':
            b->force = true;
            break;
        case OPT_DROP_MARKERS:
            b->drop_markers = true;
            cl->build_opt = cl->build_opt ? cl->build_opt : "--drop-markers";
            break;
        case OPT_SCANS:
            scans_arg = optarg;
            cl->build_opt = cl->build_opt ? cl->build_opt : "--scans";
            break;
        case OPT_QUALITY:
        case OPT_NO_QUALITY:
            b->quality = c == OPT_QUALITY;
            cl->build_opt = cl->build_opt ? cl->build_opt : argv[optind - 1];
            break;
        case OPT_PLAN:
            cl->plan = optarg;
            break;
        case OPT_PART:
            parse_part(optarg, cl);
            break;
        case OPT_MERGE:
            merge = true;
            break;
        case 'q':
            b->quiet = true;
            break;
        case OPT_PROGRESS:
            force_progress = true;
            break;
        case 'v':
            b->verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("mkpcrfs (pcrfs) %s\n", PCR_VERSION);
            exit(0);
        default:
            if (!tokimport_option(topts, c, optarg))
                tool_getopt_error(c, argv);
            /* kept as given, for a plan */
            if (b->ntokopts == tokcap)
                b->tokopts = tool_grow(b->tokopts, &tokcap, 8, sizeof(*b->tokopts));
            b->tokopts[b->ntokopts].code = c;
            b->tokopts[b->ntokopts++].value = tool_xstrdup(optarg ? optarg : "");
            cl->build_opt = cl->build_opt ? cl->build_opt : argv[optind - 1];
        }
    }
    cl->mode = merge ? MODE_MERGE : cl->nparts ? MODE_PART : cl->plan ? MODE_PLAN : MODE_BUILD;
    if (cl->mode == MODE_PART && !cl->plan)
        tool_usage_error("--part needs --plan PLAN");
    if ((cl->mode == MODE_PART || cl->mode == MODE_MERGE) && cl->build_opt)
        tool_usage_error("%s: a %s takes the build options from the plan", cl->build_opt,
                         cl->mode == MODE_PART ? "part" : "merge");
    tokens = tokimport_enabled(topts);
    parse_operands(argc, argv, b, cl, tokens);
    load_scripts(scans_arg, &b->scripts, &b->scans_text);
    if (cl->mode == MODE_PLAN && strncmp(b->scripts.name, "file:", 5) == 0 && !b->scans_text)
        tool_usage_error("--scans: %s: holds a NUL byte, which a plan cannot record", scans_arg);
    b->created = source_date_epoch();
    b->progress = force_progress || (!b->quiet && isatty(STDERR_FILENO));
    return tokens;
}

/* Signals and SRC. @return 0, or -1 (reported). */
static int start_src(struct build *b)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: the library's write()s restart; the flag is checked between steps. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    b->srcfd = b->src ? open(b->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (b->src && b->srcfd < 0) {
        tool_err("%s: %s", b->src, strerror(errno));
        return -1;
    }
    if (pthread_mutex_init(&b->lock, NULL) || pthread_cond_init(&b->space_cv, NULL) ||
        pthread_cond_init(&b->done_cv, NULL)) {
        tool_err("cannot initialise threads");
        return -1;
    }
    return 0;
}

/* The writer (the temporary store) and the directories the walk must not enter.
 * @return 0, or -1 (reported; nothing was created). */
static int start_writer(struct build *b, const struct pcr_writer_opts *wopts)
{
    char err[1024] = "";
    int rc;

    rc = pcr_writer_create(b->store, wopts, &b->w, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EEXIST)
            tool_err("%s: already exists (--force replaces a pcrfs store)", b->store);
        else if ((rc == -ENOTDIR || rc == -EINVAL) && err[0])
            tool_err("%s", err);
        else if (rc == -ENOTDIR || rc == -EINVAL)
            tool_err("%s: exists and is not a pcrfs store; not replacing it", b->store);
        else
            tool_err("creating %s: %s", b->store, err[0] ? err : strerror(-rc));
        return -1;
    }
    tmpdir_copy = strdup(pcr_writer_tmpdir(b->w));
    tool_oom_hook = on_oom;
    {
        struct stat st;

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
    }
    return 0;
}

/* mkpcrfs --plan PLAN SRC: the walk, written down. @return the exit status. */
static int write_plan(struct build *b, const char *plan)
{
    struct tool_buf esc = {0};

    if (!b->force && access(plan, F_OK) == 0) {
        tool_err("%s: already exists (--force replaces it)", tool_escaped(&esc, plan));
        tool_buf_free(&esc);
        return 1;
    }
    if (!b->created)
        b->created = (int64_t)time(NULL); /* every part's store gets the plan's time */
    if (build_walk(b) < 0)
        return mk_interrupted ? 130 : 1;
    if (plan_write(b, plan) < 0)
        return 1;
    if (!b->quiet)
        printf("%s: %" PRIu64 " files in %" PRIu64 " directories, %" PRIu64
               " records of %u; %.1f MB of source\n",
               tool_escaped(&esc, plan), b->nfiles, b->ndirs,
               (b->nfiles + b->per_record - 1) / b->per_record, b->per_record,
               (double)b->total_bytes / 1e6);
    tool_buf_free(&esc);
    return 0;
}

/* A part: the plan into @b, the part's range of records and files into @range, and
 * the token options for part 1 (which carries the token tree). @return 0 or -1
 * (reported). */
static int read_part(struct build *b, const struct cmdline *cl, struct tokimport_opts *topts,
                     struct pcr_writer_opts *wopts, struct pcr_part_info *range)
{
    if (plan_read(b, cl->plan) < 0)
        return -1;
    pcr_part_range(b->nfiles, b->per_record, cl->part, cl->nparts, range);
    b->fbegin = range->first_file;
    b->fend = range->first_file + range->files;
    for (unsigned k = 0; cl->part == 1 && k < b->ntokopts; k++)
        if (!tokimport_option(topts, b->tokopts[k].code, b->tokopts[k].value)) {
            tool_err("%s: a token option this mkpcrfs does not know (%d)", cl->plan,
                     b->tokopts[k].code);
            return -1;
        }
    wopts->part = true;
    wopts->part_first_file = range->first_file;
    wopts->part_first_record = range->first_record;
    wopts->part_files = range->files;
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

int main(int argc, char **argv)
{
    /* --quality is opt-in: the build takes 8 to 17 times the CPU with it (mkpcrfs(1)) */
    struct build b = {.per_record = DEFAULT_PER_RECORD, .quality = false, .srcfd = -1};
    struct tokimport_opts topts = {0};
    struct tokimport *tok = NULL;
    struct cmdline cl = {0};
    struct pcr_part_info range = {0};
    bool tokens;
    struct pcr_writer_opts wopts = {0};
    sigset_t block, old;
    char err[1024] = "";
    double t0 = tool_now();
    int rc, status = 0;

    tool_prog = "mkpcrfs";
    tokens = parse_args(argc, argv, &b, &topts, &cl);
    tool_log_init(b.verbose);
    if (cl.mode == MODE_MERGE) {
        if (start_src(&b) < 0) {
            status = 1;
            goto out;
        }
        status = merge_run(&b, cl.parts, cl.nparts_given) < 0 ? (mk_interrupted ? 130 : 1) : 0;
        if (status == 0 && !b.quiet)
            status = print_summary(&b, -1);
        goto out;
    }
    if (cl.mode == MODE_PART) {
        if (read_part(&b, &cl, &topts, &wopts, &range) < 0) {
            status = 1; /* what the plan reader took is freed at out */
            goto out;
        }
        tokens = tokimport_enabled(&topts);
    }
    if (start_src(&b) < 0) {
        status = 1;
        goto out;
    }
    if (cl.mode == MODE_PLAN) {
        status = write_plan(&b, cl.plan);
        goto out;
    }
    wopts.levels = b.scripts.levels;
    wopts.script = b.scripts.name;
    wopts.force = b.force;
    wopts.created = b.created;
    if (start_writer(&b, &wopts) < 0)
        return 1;

    if (tokens) {
        topts.progress = b.progress;
        topts.skip[0] = b.store;
        topts.skip[1] = pcr_writer_tmpdir(b.w);
        if (tokimport_scan(&topts, &mk_interrupted, &tok) < 0)
            goto failed;
    }
    /* a part has its tree from the plan; a whole build walks SRC */
    if (cl.mode == MODE_BUILD) {
        if (build_walk(&b) < 0)
            goto failed;
        b.fend = b.nfiles;
    }
    rc = build_add_dirs(&b);
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        goto failed;
    }
    rc = build_transcode(&b);
    if (rc < 0)
        goto failed;
    if (tok && tokimport_write(tok, b.w) < 0)
        goto failed;
    rc = build_set_meta(&b);
    if (rc == 0 && cl.mode == MODE_PART)
        rc = set_part_meta(&b, &range);
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        goto failed;
    }
    if (mk_interrupted)
        goto failed;
    /* The commit is short and all or nothing: let it end, then honour nothing more. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    rc = pcr_writer_finish(b.w, err, sizeof(err));
    b.w = NULL;
    tool_oom_hook = NULL;
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        if (err[0])
            tool_err("%s", err);
        status = 1;
        goto out;
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!b.quiet && cl.mode == MODE_PART)
        printf("part %" PRIu64 " of %" PRIu64 " of plan %s: files %" PRIu64 "..%" PRIu64
               " (%" PRIu64 "), built in %.1f s\n",
               cl.part, cl.nparts, b.plan_id, b.fbegin + 1, b.fend, b.fend - b.fbegin,
               tool_now() - t0);
    else if (!b.quiet)
        status = print_summary(&b, tool_now() - t0);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        tool_err("writing the summary: %s", strerror(errno));
        status = 1;
    }
    goto out;

failed:
    progress_finish();
    tool_oom_hook = NULL;
    if (b.w)
        pcr_writer_abort(b.w);
    status = 1;
    if (mk_interrupted) {
        tool_err("interrupted; nothing was written");
        status = 130;
    }
out:
    tokimport_free(tok);
    free(tmpdir_copy);
    build_free(&b);
    return status;
}
