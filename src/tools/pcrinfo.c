/* pcrinfo — inspect, verify and extract a pcrfs store through the library's public
 * API (pcrfs(3)): the command line and the summary (pcrinfo.h says where the other
 * modes are).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pcrinfo.h"
#include "util/optparse.h"

enum mode {
    MODE_SUMMARY,
    MODE_JSON,
    MODE_VERIFY,
    MODE_LIST,
    MODE_CAT,
    MODE_EXTRACT,
    MODE_FIDELITY
};

static const char *const mode_opt[] = {
    [MODE_SUMMARY] = "",
    [MODE_JSON] = "--json",
    [MODE_VERIFY] = "--verify",
    [MODE_LIST] = "--list",
    [MODE_CAT] = "--cat",
    [MODE_EXTRACT] = "--extract",
    [MODE_FIDELITY] = "--fidelity",
};

static void usage(FILE *f)
{
    fputs("Usage: pcrinfo [OPTIONS] STORE\n"
          "Show, verify or extract the pcrfs store STORE.\n"
          "\n"
          "  (no option)     the summary, the PCR table and, for stores built with\n"
          "                  mkpcrfs --quality, the per-image levels per MS-SSIM threshold\n"
          "      --json      the summary as one JSON object\n"
          "      --verify    read every file at the highest level, check its checksum,\n"
          "                  decode every JPEG; exit 1 on any failure\n"
          "      --list      one line per file: path, kind, chunks, size at each level\n"
          "                  (token files too, as tokens/PATH.tok)\n"
          "      --cat PATH  write the file PATH to standard output (at --level); PATH is\n"
          "                  from the store's root, '..' is refused; tokens/... names a\n"
          "                  token file\n"
          "      --extract DIR  write the whole tree (and tokens/) into the new directory\n"
          "                  DIR (at --level); DIR inside the store is refused; on failure\n"
          "                  DIR is removed\n"
          "      --level K   1..L or 'full' (default: full)\n"
          "      --fidelity  per level: mean luma MS-SSIM against full fidelity, mean bytes,\n"
          "                  decode time, and the recommended level (with --json: JSON)\n"
          "      --sample N  images to sample for --fidelity (default 300)\n"
          "      --seed S    seed of the sample (default 1)\n"
          "      --threshold T  in (0, 1], at most 4 digits after the point; --fidelity:\n"
          "                  MS-SSIM the recommended level must reach (default 0.95);\n"
          "                  summary: one more row of the per-image table (besides 0.90,\n"
          "                  0.95, 0.99; repeatable)\n"
          "  -j, --jobs N    threads for --fidelity (1..256; default: online CPUs)\n"
          "  -q, --quiet     no progress line for --fidelity (shown on a terminal: it\n"
          "                  takes about 0.5 s of CPU per Mpixel of image, pcrinfo(1))\n"
          "  -v, --verbose   show the library's informational and debug messages\n"
          "  -h, --help      show this help and exit\n"
          "  -V, --version   show the version and exit\n"
          "\n"
          "Exit status: 0 success, 1 failure or verification failed, 2 usage error.\n"
          "See pcrinfo(1).\n",
          f);
}

enum {
    OPT_JSON = 256,
    OPT_VERIFY,
    OPT_LIST,
    OPT_CAT,
    OPT_EXTRACT,
    OPT_LEVEL,
    OPT_FIDELITY,
    OPT_SAMPLE,
    OPT_SEED,
    OPT_THRESHOLD,
};

/* What the command line asks for. */
struct opts {
    enum mode mode;
    const char *arg;       /* of --cat, --extract */
    const char *level_arg; /* --level */
    uint32_t level;        /* its value: 1.., or PCR_OPT_LEVEL_FULL */
    const char *path;      /* STORE */
    bool verbose;
    struct fid_args fa;
    double thresholds[PCRFS_SUMMARY_MAX_THRESHOLDS]; /* --threshold, for the summary */
    size_t nthresholds;
};

/* Parse the command line into @o (exits on --help, --version and usage errors). */
static void parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"list", no_argument, NULL, OPT_LIST},
        {"cat", required_argument, NULL, OPT_CAT},
        {"extract", required_argument, NULL, OPT_EXTRACT},
        {"level", required_argument, NULL, OPT_LEVEL},
        {"fidelity", no_argument, NULL, OPT_FIDELITY},
        {"sample", required_argument, NULL, OPT_SAMPLE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"jobs", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    enum mode mode = MODE_SUMMARY;
    bool json = false, fid_opt = false, thr_opt = false, quiet = false;
    struct fid_args fa = {.sample = FID_SAMPLE, .seed = 1, .threshold = FID_THRESHOLD};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int c;

    opterr = 0;
    fa.jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    while ((c = getopt_long(argc, argv, ":j:qvhV", longopts, NULL)) != -1) {
        enum mode m;

        switch (c) {
        case OPT_JSON:
            /* Not a mode of its own: the JSON form of the summary or of --fidelity. */
            json = true;
            break;
        case OPT_FIDELITY:
            if (mode != MODE_SUMMARY && mode != MODE_FIDELITY)
                tool_usage_error("%s and --fidelity cannot be used together", mode_opt[mode]);
            mode = MODE_FIDELITY;
            break;
        case OPT_SAMPLE:
            fa.sample = (size_t)tool_opt_uint("--sample", optarg, 1, FID_MAX);
            fid_opt = true;
            break;
        case OPT_SEED:
            fa.seed = tool_opt_uint("--seed", optarg, 0, UINT64_MAX);
            fid_opt = true;
            break;
        case OPT_THRESHOLD: {
            char msg[512];
            double d = 0;

            /* at most 4 decimals: two thresholds never print alike (optparse.h) */
            tool_opt_check(pcr_opt_threshold("--threshold", optarg, &d, msg, sizeof(msg)), msg);
            for (size_t i = 0; i < o->nthresholds; i++)
                if (o->thresholds[i] == d)
                    tool_usage_error("--threshold=%s: given twice", optarg);
            /* --fidelity takes the last one; the summary has a row for each */
            fa.threshold = d;
            if (o->nthresholds == PCRFS_SUMMARY_MAX_THRESHOLDS)
                tool_usage_error("at most %d --threshold options", PCRFS_SUMMARY_MAX_THRESHOLDS);
            o->thresholds[o->nthresholds++] = d;
            thr_opt = true;
            break;
        }
        case 'j':
            fa.jobs = (unsigned)tool_opt_uint("--jobs", optarg, 1, MAX_JOBS);
            fid_opt = true;
            break;
        case OPT_VERIFY:
        case OPT_LIST:
        case OPT_CAT:
        case OPT_EXTRACT:
            m = c == OPT_VERIFY ? MODE_VERIFY
                : c == OPT_LIST ? MODE_LIST
                : c == OPT_CAT  ? MODE_CAT
                                : MODE_EXTRACT;
            if (mode != MODE_SUMMARY && mode != m)
                tool_usage_error("%s and %s cannot be used together", mode_opt[mode], mode_opt[m]);
            mode = m;
            if (optarg)
                o->arg = optarg;
            break;
        case OPT_LEVEL: {
            char msg[512];

            /* the syntax now, the range once the store is open (main) */
            tool_opt_check(pcr_opt_level("--level", optarg, &o->level, msg, sizeof(msg)), msg);
            o->level_arg = optarg;
            break;
        }
        case 'q':
            quiet = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'V':
            printf("pcrinfo (pcrfs) %s\n", PCR_VERSION);
            exit(0);
        default:
            tool_getopt_error(c, argv);
        }
    }
    if (optind == argc)
        tool_usage_error("missing STORE");
    if (argc - optind > 1)
        tool_usage_error("too many arguments: '%s'", argv[optind + 1]);
    if (json) {
        if (mode != MODE_SUMMARY && mode != MODE_FIDELITY)
            tool_usage_error("--json and %s cannot be used together", mode_opt[mode]);
        if (mode == MODE_SUMMARY)
            mode = MODE_JSON;
    }
    fa.json = json;
    fa.progress = !quiet && isatty(STDERR_FILENO);
    if (fid_opt && mode != MODE_FIDELITY)
        tool_usage_error("--sample, --seed and --jobs apply only to --fidelity");
    if (thr_opt && mode != MODE_FIDELITY && mode != MODE_SUMMARY && mode != MODE_JSON)
        tool_usage_error("--threshold applies only to the summary and --fidelity");
    if (o->level_arg && mode != MODE_CAT && mode != MODE_EXTRACT)
        tool_usage_error("--level applies only to --cat and --extract");
    o->path = argv[optind];
    o->mode = mode;
    o->fa = fa;
}

/* The summary (--json: as JSON). @return the exit status. */
static int do_summary(pcrfs_store *ps, const struct opts *o)
{
    struct pcrfs_summary_args sa = {.size = sizeof(sa),
                                    .flags = o->mode == MODE_JSON ? PCRFS_SUMMARY_JSON : 0,
                                    .thresholds = o->thresholds,
                                    .nthresholds = o->nthresholds};
    char *text = NULL;
    ssize_t n = pcrfs_summary(ps, &sa, &text);

    if (n < 0) {
        tool_err("%s", pcrfs_errmsg()[0] ? pcrfs_errmsg() : strerror((int)-n));
        return 1;
    }
    if (o->nthresholds && !sa.measured)
        tool_warn("--threshold: %s has no per-image quality data (mkpcrfs --quality "
                  "makes it): no rows added",
                  o->path);
    fwrite(text, 1, (size_t)n, stdout);
    free(text);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    const char *path;
    pcrfs_store *ps = NULL;
    unsigned level;
    int rc;

    tool_prog = "pcrinfo";
    parse_args(argc, argv, &o);
    path = o.path;
    tool_log_init(o.verbose);

    /* every mode reads the store through the public API (pcrfs(3)), as any client
     * would: --cat and --extract the tree a mount shows, the others the stored
     * files and the index's facts */
    rc = pcrfs_open(path, NULL, &ps);
    if (rc < 0) {
        tool_err("%s", pcrfs_errmsg()[0] ? pcrfs_errmsg() : strerror(-rc));
        return 1;
    }
    level = pcrfs_levels(ps);
    if (o.level_arg && o.level != PCR_OPT_LEVEL_FULL) {
        if (o.level < 1 || o.level > level) {
            char msg[512];

            pcrfs_close(ps);
            pcr_opt_msg(msg, sizeof(msg), "--level", o.level_arg,
                        "want a level of this store: 1..%u or full", level);
            tool_usage_error("%s", msg);
        }
        level = o.level;
    }

    switch (o.mode) {
    case MODE_SUMMARY:
    case MODE_JSON:
        rc = do_summary(ps, &o);
        break;
    case MODE_VERIFY:
        rc = do_verify(ps);
        break;
    case MODE_LIST:
        rc = do_list(ps);
        break;
    case MODE_CAT:
        rc = do_cat(ps, o.arg, level);
        break;
    case MODE_EXTRACT:
        rc = do_extract(ps, path, o.arg, level);
        break;
    case MODE_FIDELITY:
        rc = do_fidelity(ps, &o.fa);
        break;
    }
    pcrfs_close(ps);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        tool_err("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return rc;
}
