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
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/store.h"
#include "mkpcrfs.h"
#include "progress.h"
#include "summary.h"
#include "tokimport.h"
#include "tool.h"

#define DEFAULT_PER_RECORD 1024
#define MAX_PER_RECORD     (1u << 20)
#define MAX_JOBS           1024
#define MAX_SCRIPT_BYTES   (1u << 20) /* a --scans FILE larger than this is refused */

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

/* The summary of the new store, read back from it: the same text as pcrinfo's. */
static int print_summary(const struct build *b, double elapsed)
{
    struct pcr_store *s;
    struct summary *sm;
    char err[1024] = "";
    int rc;

    rc = pcr_store_open(b->store, &s, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s: the new store does not open: %s", b->store, err);
        return 1;
    }
    rc = summary_compute(s, b->store, NULL, 0, &sm, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s", err);
        pcr_store_close(s);
        return 1;
    }
    summary_print_text(sm, stdout);
    printf("\nbuilt in %.1f s: %.1f images/s, %.1f MB/s of source, %u thread%s\n", elapsed,
           elapsed > 0 ? (double)b->nfiles / elapsed : 0.0,
           elapsed > 0 ? (double)b->total_bytes / elapsed / 1e6 : 0.0, b->jobs,
           b->jobs == 1 ? "" : "s");
    summary_free(sm);
    pcr_store_close(s);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: mkpcrfs [OPTIONS] SRC STORE\n"
            "       mkpcrfs [OPTIONS] --tokens DIR | --seit DATA ... [SRC | -] STORE\n"
            "Build the pcrfs store STORE from the image tree SRC (any depth).\n"
            "JPEGs are transcoded losslessly to progressive JPEG; every other file is\n"
            "stored verbatim (with a warning).\n"
            "\n"
            "  -j, --jobs N          transcoding threads (default: online CPUs)\n"
            "  -n, --per-record N    images per record (default %u)\n"
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
            "  -q, --quiet           no progress bar, no summary\n"
            "      --progress        show the progress bar even if stderr is not a terminal\n"
            "  -v, --verbose         show the library's informational and debug messages\n"
            "  -h, --help            show this help and exit\n"
            "  -V, --version         show the version and exit\n"
            "\n",
            DEFAULT_PER_RECORD);
    tokimport_usage(f);
    fprintf(f, "\n"
               "Exit status: 0 success, 1 failure (nothing is left behind), 2 usage error,\n"
               "130 interrupted. See mkpcrfs(1).\n");
}

enum { OPT_DROP_MARKERS = 256, OPT_PROGRESS, OPT_SCANS, OPT_QUALITY, OPT_NO_QUALITY };

/* --scans: a preset name, else a file in jpegtran -scans syntax. Exits 2 (usage) if
 * the file cannot be read or is not a valid lossless script. */
static void load_scripts(const char *arg, struct pcr_scripts *out)
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
    free(text);
}

/* The command line into @b and @topts (exits on --help, --version and usage errors).
 * @return true if tokens are to be imported. */
static bool parse_args(int argc, char **argv, struct build *b, struct tokimport_opts *topts)
{
    static const struct option longopts[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"per-record", required_argument, NULL, 'n'},
        {"force", no_argument, NULL, 'f'},
        {"drop-markers", no_argument, NULL, OPT_DROP_MARKERS},
        {"scans", required_argument, NULL, OPT_SCANS},
        {"quality", no_argument, NULL, OPT_QUALITY},
        {"no-quality", no_argument, NULL, OPT_NO_QUALITY},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        TOKIMPORT_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    unsigned long long v;
    bool force_progress = false, tokens;
    const char *scans_arg = "default";
    long ncpu;
    int c;

    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    b->jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":j:n:fqvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (tool_parse_uint(optarg, 1, MAX_JOBS, &v) < 0)
                tool_usage_error("invalid number of jobs '%s' (1..%u)", optarg, MAX_JOBS);
            b->jobs = (unsigned)v;
            break;
        case 'n':
            if (tool_parse_uint(optarg, 1, MAX_PER_RECORD, &v) < 0)
                tool_usage_error("invalid images per record '%s' (1..%u)", optarg, MAX_PER_RECORD);
            b->per_record = (unsigned)v;
            break;
        case 'f':
            b->force = true;
            break;
        case OPT_DROP_MARKERS:
            b->drop_markers = true;
            break;
        case OPT_SCANS:
            scans_arg = optarg;
            break;
        case OPT_QUALITY:
        case OPT_NO_QUALITY:
            b->quality = c == OPT_QUALITY;
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
        }
    }
    tokens = tokimport_enabled(topts);
    if (argc - optind < (tokens ? 1 : 2))
        tool_usage_error("missing %s", argc - optind == 0 && !tokens ? "SRC and STORE" : "STORE");
    if (argc - optind > 2)
        tool_usage_error("too many arguments: '%s'", argv[optind + 2]);
    /* With tokens, SRC may be omitted (or "-"): a store of tokens only. */
    b->src = argc - optind == 2 ? argv[optind] : NULL;
    if (b->src && strcmp(b->src, "-") == 0) {
        if (!tokens)
            tool_usage_error("SRC '-' means no images (a store of tokens only) and needs "
                             "--tokens or --seit; to build from a directory named '-', "
                             "write ./-");
        b->src = NULL;
    }
    b->store = argv[argc - 1];
    load_scripts(scans_arg, &b->scripts);
    b->progress = force_progress || (!b->quiet && isatty(STDERR_FILENO));
    return tokens;
}

/* Signals, SRC, the writer (the temporary store) and the directories the walk must
 * not enter. @return 0, or -1 (reported; nothing was created). */
static int start(struct build *b, const struct pcr_writer_opts *wopts)
{
    struct sigaction sa;
    char err[1024] = "";
    int rc;

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

int main(int argc, char **argv)
{
    /* --quality is opt-in: the build takes 8 to 17 times the CPU with it (mkpcrfs(1)) */
    struct build b = {.per_record = DEFAULT_PER_RECORD, .quality = false};
    struct tokimport_opts topts = {0};
    struct tokimport *tok = NULL;
    bool tokens;
    struct pcr_writer_opts wopts = {0};
    sigset_t block, old;
    char err[1024] = "";
    double t0 = tool_now();
    int rc, status = 0;

    tool_prog = "mkpcrfs";
    tokens = parse_args(argc, argv, &b, &topts);
    wopts.levels = b.scripts.levels;
    wopts.script = b.scripts.name;
    wopts.force = b.force;
    tool_log_init(b.verbose);

    if (start(&b, &wopts) < 0)
        return 1;

    if (tokens) {
        topts.progress = b.progress;
        topts.skip[0] = b.store;
        topts.skip[1] = pcr_writer_tmpdir(b.w);
        if (tokimport_scan(&topts, &mk_interrupted, &tok) < 0)
            goto failed;
    }
    if (build_walk(&b) < 0)
        goto failed;
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
    if (!b.quiet)
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
