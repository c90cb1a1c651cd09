/* mkpcrfs — build a pcrfs store from an ImageFolder-like tree: the command line of
 * the library's build calls (pcrfs_build(), pcrfs_build_plan(), pcrfs_merge():
 * pcrfs(3), BUILDING A STORE), with signals, the progress bar and the summary.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/pcrfs.h"
#include "progress.h"
#include "tool.h"

#define DEFAULT_PER_RECORD 1024
#define MAX_PARTS          1000000
#define TOK_PER_SHARD      4096u /* the library's default of tok_per_shard= */

/* What the command line asks for. */
enum mode { MODE_BUILD, MODE_PLAN, MODE_PART, MODE_MERGE };

struct cmdline {
    enum mode mode;
    const char *src, *store; /* SRC (NULL: none), STORE (the part's OUT) */
    const char *plan;        /* --plan PLAN */
    bool part;               /* --part I/N */
    const char *part_arg;
    const char *build_opt;    /* the first option the plan fixes, if one was given */
    const char *const *parts; /* --merge: the parts */
    unsigned nparts_given;
    bool quiet, progress, verbose, tokens;
    /* the library's options, "NAME=VALUE" (NULL-ended) */
    char **opts;
    uint64_t nopts, optcap;
};

/* What the build reports back: the progress bar's stage, and the result. */
struct run {
    const struct cmdline *cl;
    unsigned stage; /* the stage the bar shows (0: none) */
    struct pcrfs_build_result res;
    bool have_res;
};

static volatile sig_atomic_t mk_interrupted;

static void on_signal(int sig)
{
    mk_interrupted = sig;
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
    fprintf(f,
            "Token grids (served as tokens/.../NAME.tok, NumPy <u2 (H, W) arrays):\n"
            "      --tokens DIR      a tree of per-image .npy files (any depth, integer\n"
            "                        dtype, values 0..65535); DIR/a/x.npy -> tokens/a/x.tok\n"
            "      --seit DATA       SeiT's release format: DATA (*data.bin[.gz]) and the\n"
            "                        index.npy[.gz] beside it; tokens 0..509, read as\n"
            "                        SeiT's own reader does\n"
            "      --seit-labels FILE  one label per line (required with --seit)\n"
            "      --seit-names FILE   one relative path per line: a/x.JPEG -> tokens/a/x.tok\n"
            "                        (default: tokens/LABEL/K.tok)\n"
            "      --seit-index FILE the index file, if not beside DATA\n"
            "      --seit-shape HxW  grid shape of the SeiT data (default 32x32)\n"
            "      --codebook FILE   a [K, D] float .npy, served as /.pcrfs/codebook.npy\n"
            "      --tok-coder C     auto (default: the smaller on held-out grids),\n"
            "                        huffman or zstd-dict\n"
            "      --tok-per-shard N grids per token shard (default %u)\n",
            TOK_PER_SHARD);
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
    OPT_MERGE,
    OPT_TOKENS,
    OPT_SEIT,
    OPT_SEIT_INDEX,
    OPT_SEIT_LABELS,
    OPT_SEIT_NAMES,
    OPT_SEIT_SHAPE,
    OPT_CODEBOOK,
    OPT_CODER,
    OPT_PER_SHARD,
};

/* Pass --NAME's @value to the library as NAME=@value (@name with '_' for '-'),
 * checked now, so that a bad value is reported in command-line order (exits 2). */
static void add_opt(struct cmdline *cl, const char *name, const char *value)
{
    size_t n;
    char *s;

    /* getopt sets optarg for an option with a required argument; the analyzer
     * cannot know it */
    if (!value)
        value = "";
    n = strlen(name) + strlen(value) + 2;
    if (pcrfs_build_option_check(name, value) < 0)
        tool_usage_error("%s", pcrfs_errmsg());
    s = tool_xmalloc(n);
    snprintf(s, n, "%s=%s", name, value);
    if (cl->nopts + 1 >= cl->optcap)
        cl->opts = tool_grow(cl->opts, &cl->optcap, 16, sizeof(*cl->opts));
    cl->opts[cl->nopts++] = s;
    cl->opts[cl->nopts] = NULL;
}

static int64_t source_date_epoch(void)
{
    const char *v = getenv("SOURCE_DATE_EPOCH");

    if (!v)
        return 0;
    return (int64_t)tool_opt_uint("SOURCE_DATE_EPOCH", v, 1, INT64_MAX);
}

/* The operands of each mode into @cl (exits on usage errors). */
static void parse_operands(int argc, char **argv, struct cmdline *cl, bool tokens)
{
    int n = argc - optind;

    if (cl->mode == MODE_MERGE) {
        if (cl->plan || cl->part)
            tool_usage_error("--merge takes no --plan or --part: the parts say their plan");
        if (n < 2)
            tool_usage_error("--merge: missing %s", n ? "PART" : "STORE and PART");
        cl->store = argv[optind];
        cl->parts = (const char *const *)(argv + optind + 1);
        cl->nparts_given = (unsigned)(n - 1);
        return;
    }
    if (cl->mode == MODE_PART) {
        if (n != 1)
            tool_usage_error(n ? "too many arguments: '%s'" : "missing OUT, the part's directory",
                             n ? argv[optind + 1] : "");
        cl->store = argv[optind];
        return;
    }
    if (cl->mode == MODE_PLAN) {
        if (n > 1)
            tool_usage_error("--plan PLAN SRC takes no STORE: '%s' (the parts are built with "
                             "--part, then merged with --merge)",
                             argv[optind + 1]);
        if (n == 0 && !tokens)
            tool_usage_error("missing SRC");
        cl->src = n ? argv[optind] : NULL;
    } else {
        if (n < (tokens ? 1 : 2))
            tool_usage_error("missing %s", n == 0 && !tokens ? "SRC and STORE" : "STORE");
        if (n > 2)
            tool_usage_error("too many arguments: '%s'", argv[optind + 2]);
        /* With tokens, SRC may be omitted (or "-"): a store of tokens only. */
        cl->src = n == 2 ? argv[optind] : NULL;
        cl->store = argv[argc - 1];
    }
    if (cl->src && strcmp(cl->src, "-") == 0) {
        if (!tokens)
            tool_usage_error("SRC '-' means no images (a store of tokens only) and needs "
                             "--tokens or --seit; to build from a directory named '-', "
                             "write ./-");
        cl->src = NULL;
    }
}

/* The command line into @cl (exits on --help, --version and usage errors). */
static void parse_args(int argc, char **argv, struct cmdline *cl)
{
    /* the token options: the library's names, in the order of the OPT_ values */
    static const char *const tokname[] = {"tokens",      "seit",       "seit_index",
                                          "seit_labels", "seit_names", "seit_shape",
                                          "codebook",    "tok_coder",  "tok_per_shard"};
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
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"seit", required_argument, NULL, OPT_SEIT},
        {"seit-index", required_argument, NULL, OPT_SEIT_INDEX},
        {"seit-labels", required_argument, NULL, OPT_SEIT_LABELS},
        {"seit-names", required_argument, NULL, OPT_SEIT_NAMES},
        {"seit-shape", required_argument, NULL, OPT_SEIT_SHAPE},
        {"codebook", required_argument, NULL, OPT_CODEBOOK},
        {"tok-coder", required_argument, NULL, OPT_CODER},
        {"tok-per-shard", required_argument, NULL, OPT_PER_SHARD},
        {NULL, 0, NULL, 0},
    };
    bool force_progress = false, merge = false;
    char num[32];
    int64_t created;
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":j:n:fqvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            add_opt(cl, "jobs", optarg);
            break;
        case 'n':
            add_opt(cl, "per_record", optarg);
            cl->build_opt = cl->build_opt ? cl->build_opt : "--per-record";
            break;
        case 'f':
            add_opt(cl, "force", "1");
            break;
        case OPT_DROP_MARKERS:
            add_opt(cl, "drop_markers", "1");
            cl->build_opt = cl->build_opt ? cl->build_opt : "--drop-markers";
            break;
        case OPT_SCANS:
            add_opt(cl, "scans", optarg);
            cl->build_opt = cl->build_opt ? cl->build_opt : "--scans";
            break;
        case OPT_QUALITY:
        case OPT_NO_QUALITY:
            add_opt(cl, "quality", c == OPT_QUALITY ? "1" : "0");
            cl->build_opt = cl->build_opt ? cl->build_opt : argv[optind - 1];
            break;
        case OPT_PLAN:
            cl->plan = optarg;
            break;
        case OPT_PART:
            if (pcrfs_build_option_check("part", optarg) < 0)
                tool_usage_error("%s", pcrfs_errmsg());
            cl->part = true;
            cl->part_arg = optarg;
            break;
        case OPT_MERGE:
            merge = true;
            break;
        case 'q':
            cl->quiet = true;
            break;
        case OPT_PROGRESS:
            force_progress = true;
            break;
        case 'v':
            cl->verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("mkpcrfs (pcrfs) %s\n", pcrfs_version());
            exit(0);
        default:
            if (c < OPT_TOKENS || c > OPT_PER_SHARD)
                tool_getopt_error(c, argv);
            add_opt(cl, tokname[c - OPT_TOKENS], optarg);
            cl->tokens = cl->tokens || c == OPT_TOKENS || c == OPT_SEIT;
            cl->build_opt = cl->build_opt ? cl->build_opt : argv[optind - 1];
        }
    }
    cl->mode = merge ? MODE_MERGE : cl->part ? MODE_PART : cl->plan ? MODE_PLAN : MODE_BUILD;
    if (cl->mode == MODE_PART && !cl->plan)
        tool_usage_error("--part needs --plan PLAN");
    if ((cl->mode == MODE_PART || cl->mode == MODE_MERGE) && cl->build_opt)
        tool_usage_error("%s: a %s takes the build options from the plan", cl->build_opt,
                         cl->mode == MODE_PART ? "part" : "merge");
    /* the options together (--seit without --seit-labels, ...) */
    if (cl->opts && pcrfs_build_check((const char *const *)cl->opts) < 0)
        tool_usage_error("%s", pcrfs_errmsg());
    parse_operands(argc, argv, cl, cl->tokens);
    if (cl->mode == MODE_PART) {
        add_opt(cl, "plan", cl->plan);
        add_opt(cl, "part", cl->part_arg);
    }
    created = source_date_epoch();
    if (created && cl->mode != MODE_MERGE && cl->mode != MODE_PART) {
        snprintf(num, sizeof(num), "%" PRId64, created);
        add_opt(cl, "created", num);
    }
    cl->progress = force_progress || (!cl->quiet && isatty(STDERR_FILENO));
}

/* The summary of the new store, read back from it through the public API
 * (pcrfs_summary()): the same text as pcrinfo's. */
static int print_summary(const struct cmdline *cl, const struct run *r, double elapsed)
{
    pcrfs_store *ps;
    char *text = NULL;
    ssize_t n;
    int rc;

    rc = pcrfs_open(cl->store, NULL, &ps);
    if (rc < 0) {
        tool_err("%s: the new store does not open: %s", cl->store, pcrfs_errmsg());
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
               elapsed > 0 ? (double)r->res.files / elapsed : 0.0,
               elapsed > 0 ? (double)r->res.bytes / elapsed / 1e6 : 0.0, r->res.jobs,
               r->res.jobs == 1 ? "" : "s");
    free(text);
    pcrfs_close(ps);
    return 0;
}

/* The library's progress: the bar for the stages that have a total; a nonzero
 * return (SIGINT, SIGTERM) cancels the build, which then leaves nothing behind. */
static int on_progress(const struct pcrfs_build_progress *p, void *ctx)
{
    struct run *r = ctx;

    if (p->stage == PCRFS_BUILD_TOKENS_READ || p->stage == PCRFS_BUILD_TRANSCODE ||
        p->stage == PCRFS_BUILD_TOKENS) {
        if (p->stage != r->stage) {
            progress_start(r->cl->progress, p->total, p->total_bytes);
            r->stage = p->stage;
        }
        progress_update(p->done, p->bytes, p->final != 0);
        if (p->final) {
            progress_finish();
            r->stage = 0;
        }
    }
    return mk_interrupted != 0;
}

static void on_result(const struct pcrfs_build_result *res, void *ctx)
{
    struct run *r = ctx;

    r->res = *res;
    r->have_res = true;
}

/* The report of a successful run. @return the exit status. */
static int report(const struct cmdline *cl, const struct run *r, double elapsed)
{
    struct tool_buf esc = {0};
    int status = 0;

    if (cl->quiet)
        return 0;
    if (cl->mode == MODE_PLAN)
        printf("%s: %" PRIu64 " files in %" PRIu64 " directories, %" PRIu64
               " records of %u; %.1f MB of source\n",
               tool_escaped(&esc, cl->plan), r->res.files, r->res.dirs, r->res.records,
               r->res.per_record, (double)r->res.bytes / 1e6);
    else if (cl->mode == MODE_PART)
        printf("part %" PRIu64 " of %" PRIu64 " of plan %s: files %" PRIu64 "..%" PRIu64
               " (%" PRIu64 "), built in %.1f s\n",
               r->res.part, r->res.nparts, r->res.plan_id, r->res.first_file + 1, r->res.end_file,
               r->res.end_file - r->res.first_file, elapsed);
    else
        status = print_summary(cl, r, cl->mode == MODE_MERGE ? -1 : elapsed);
    tool_buf_free(&esc);
    return status;
}

int main(int argc, char **argv)
{
    struct cmdline cl = {0};
    struct run r = {.cl = &cl};
    const struct pcrfs_build_cb cb = {
        .size = sizeof(cb), .progress = on_progress, .result = on_result};
    static const char *const none[] = {NULL};
    const char *const *opts;
    struct sigaction sa;
    double t0 = tool_now();
    int rc, status;

    tool_prog = "mkpcrfs";
    parse_args(argc, argv, &cl);
    tool_log_init(cl.verbose);
    opts = cl.opts ? (const char *const *)cl.opts : none;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: the library's write()s restart; the flag is seen at its next
     * progress call. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (cl.mode == MODE_MERGE)
        rc = pcrfs_merge(cl.store, cl.parts, cl.nparts_given, opts, &cb, &r);
    else if (cl.mode == MODE_PLAN)
        rc = pcrfs_build_plan(cl.src, cl.plan, opts, &cb, &r);
    else
        rc = pcrfs_build(cl.src, cl.store, opts, &cb, &r);
    progress_finish();
    /* A signal during the commit (short, all or nothing) is honoured after it, as
     * the default action would have been. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (rc == 0 && mk_interrupted)
        raise(mk_interrupted);
    if (rc == -EINVAL) /* a usage error: nothing was read */
        tool_usage_error("%s", pcrfs_errmsg());
    if (rc == -ECANCELED) {
        if (cl.mode == MODE_BUILD || cl.mode == MODE_PART)
            tool_err("interrupted; nothing was written");
        status = 130;
    } else if (rc < 0) {
        status = 1; /* the library's messages said why */
    } else {
        status = report(&cl, &r, tool_now() - t0);
        if (fflush(stdout) != 0 || ferror(stdout)) {
            tool_err("writing the summary: %s", strerror(errno));
            status = 1;
        }
    }
    for (uint64_t i = 0; i < cl.nopts; i++)
        free(cl.opts[i]);
    free(cl.opts);
    return status;
}
