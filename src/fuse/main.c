/* pcrfs — mount a pcrfs store: the command line and the daemon's life cycle.
 *
 *   pcrfs STORE MOUNTPOINT [-o opts] [-f] [-d] [-s]
 *
 * Order matters: the store is opened and validated before anything is mounted or
 * the process detaches, so a bad store fails with a message on the terminal, exit
 * status 1 and no mount left behind. Then: mount, detach (unless -f), serve until
 * fusermount3 -u or SIGTERM/SIGINT/SIGHUP, unmount, exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "pcrfs/backend.h"
#include "pcrfs/log.h"

#define EXIT_USAGE      2
#define DEFAULT_TIMEOUT 86400.0
#define DEFAULT_READ_AHEAD_KB 1024 /* = max_pages: one READ up to 1 MiB (bdi.c) */

/* What the command line says beyond libfuse's own options. */
struct cli {
    char *store; /* the first non-option argument */
    double timeout;
    int nokeep_cache;
    int open; /* -o open: an OPEN round trip per open(2), as before no-open */
    char *bwlimit; /* -o bwlimit=RATE, as given */
    char *readahead; /* -o readahead=record|kernel */
    char *quality;   /* -o quality=T1:T2:...|none: the qNN/ views */
    char *level;   /* -o level=K: the dynamic view's first level, as given */
    /* stores in object storage (STORE is an s3:// or http(s):// URL) */
    char *cache;        /* -o cache=DIR */
    char *cache_size;   /* -o cache_size=SIZE, as given */
    double http_timeout; /* -o http_timeout=SECS (0: the library's default) */
    int http_retries;   /* -o http_retries=N (-1: the library's default) */
    char *endpoint, *region, *profile, *ca_bundle; /* -o endpoint= ... (s3://), as given */
    char *logfile; /* -o logfile=PATH */
    int read_ahead_kb; /* -o read_ahead_kb=N: -1 not given (bdi.c) */
    bool has_readdirplus; /* -o readdirplus=...: libfuse's option, noted (ops.c, op_init) */
    struct refurb_args refurb; /* -o refurb=R and its refurb_* options, as given */
    struct mix_args mix;       /* -o mix=LO-HI, mix_mean=M, mix_seed=N, as given */
    bool has_ro, has_rw, has_defperm, has_fsname, has_subtype;
};

enum {
    KEY_RO,
    KEY_RW,
    KEY_DEFPERM,
    KEY_FSNAME,
    KEY_SUBTYPE,
    KEY_READDIRPLUS,
};

static const struct fuse_opt cli_spec[] = {
    {"timeout=%lf", offsetof(struct cli, timeout), 0},
    {"nokeep_cache", offsetof(struct cli, nokeep_cache), 1},
    {"open", offsetof(struct cli, open), 1},
    {"bwlimit=%s", offsetof(struct cli, bwlimit), 0},
    {"readahead=%s", offsetof(struct cli, readahead), 0},
    {"quality=%s", offsetof(struct cli, quality), 0},
    {"level=%s", offsetof(struct cli, level), 0},
    {"cache=%s", offsetof(struct cli, cache), 0},
    {"cache_size=%s", offsetof(struct cli, cache_size), 0},
    {"http_timeout=%lf", offsetof(struct cli, http_timeout), 0},
    {"http_retries=%d", offsetof(struct cli, http_retries), 0},
    {"endpoint=%s", offsetof(struct cli, endpoint), 0},
    {"region=%s", offsetof(struct cli, region), 0},
    {"profile=%s", offsetof(struct cli, profile), 0},
    {"ca_bundle=%s", offsetof(struct cli, ca_bundle), 0},
    {"logfile=%s", offsetof(struct cli, logfile), 0},
    {"read_ahead_kb=%d", offsetof(struct cli, read_ahead_kb), 0},
    {"mix=%s", offsetof(struct cli, mix.range), 0},
    {"mix_mean=%s", offsetof(struct cli, mix.mean), 0},
    {"mix_seed=%s", offsetof(struct cli, mix.seed), 0},
    {"refurb=%s", offsetof(struct cli, refurb.r), 0},
    {"refurb_size=%s", offsetof(struct cli, refurb.size), 0},
    {"refurb_scale=%s", offsetof(struct cli, refurb.scale), 0},
    {"refurb_ratio=%s", offsetof(struct cli, refurb.ratio), 0},
    {"refurb_flip=%s", offsetof(struct cli, refurb.flip), 0},
    {"refurb_level=%s", offsetof(struct cli, refurb.level), 0},
    {"refurb_seed=%s", offsetof(struct cli, refurb.seed), 0},
    {"refurb_threads=%s", offsetof(struct cli, refurb.threads), 0},
    {"refurb_cache=%s", offsetof(struct cli, refurb.cache), 0},
    {"refurb_cache_size=%s", offsetof(struct cli, refurb.cache_size), 0},
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("rw", KEY_RW),
    FUSE_OPT_KEY("default_permissions", KEY_DEFPERM),
    FUSE_OPT_KEY("fsname=", KEY_FSNAME),
    FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
    FUSE_OPT_KEY("readdirplus=", KEY_READDIRPLUS),
    FUSE_OPT_END,
};

/* Take STORE (the first non-option) out of the arguments, leave MOUNTPOINT for
 * fuse_parse_cmdline(), and note which mount options the user gave; those are kept
 * (return 1) for fuse_session_new(). */
static int cli_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct cli *c = data;

    (void)outargs;
    switch (key) {
    case FUSE_OPT_KEY_NONOPT:
        if (c->store)
            return 1;
        c->store = strdup(arg);
        return c->store ? 0 : -1;
    case KEY_RO:
        c->has_ro = true;
        return 1;
    case KEY_RW:
        c->has_rw = true;
        return 1;
    case KEY_DEFPERM:
        c->has_defperm = true;
        return 1;
    case KEY_FSNAME:
        c->has_fsname = true;
        return 1;
    case KEY_SUBTYPE:
        c->has_subtype = true;
        return 1;
    case KEY_READDIRPLUS: /* kept for fuse_parse_conn_info_opts() */
        c->has_readdirplus = true;
        return 1;
    default:
        return 1;
    }
}

/* ---- logging -----------------------------------------------------------------------
 * The library's hook and libfuse's go to stderr while the daemon has a terminal and
 * to syslog once it has detached, or with -o logfile=PATH to that file (containers
 * often have no syslog). log_fd and log_syslog are written once, before the session
 * loop starts any worker thread, and only read afterwards. */

static bool log_syslog;
static int log_fd = -1;

/* One line, written with one write(2) to a file opened with O_APPEND, so lines from
 * several threads (or daemons sharing the file) never interleave:
 * "2026-11-21T10:00:00.123Z pcrfs[PID]: warning: message". Control bytes become '?'
 * (libfuse's messages end with a newline, which is dropped). */
static void log_line(const char *tag, const char *msg)
{
    char line[4096];
    struct timespec ts;
    struct tm tm;
    size_t n, i, mlen = strlen(msg);
    int k;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    k = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ pcrfs[%ld]: %s",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, (long)getpid(), tag);
    if (k < 0)
        return;
    n = (size_t)k < sizeof(line) - 1 ? (size_t)k : sizeof(line) - 1;
    while (mlen > 0 && msg[mlen - 1] == '\n')
        mlen--; /* the newline that ended it */
    for (i = 0; i < mlen && n < sizeof(line) - 1; i++)
        line[n++] = (unsigned char)msg[i] < 0x20 || msg[i] == 0x7f ? '?' : msg[i];
    line[n++] = '\n';
    (void)!write(log_fd, line, n);
}

static void log_hook(enum pcr_log_level level, const char *msg, void *ctx)
{
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    static const char *const tag[] = {"error: ", "warning: ", "", "debug: "};
    unsigned l = (unsigned)level < 4 ? (unsigned)level : 3;

    (void)ctx;
    if (log_fd >= 0)
        log_line(tag[l], msg);
    else if (log_syslog)
        syslog(prio[l], "%s", msg);
    else
        fprintf(stderr, "pcrfs: %s%s\n", tag[l], msg);
}

/* libfuse's levels are syslog's priorities (FUSE_LOG_EMERG = LOG_EMERG = 0 ...). */
static void fuse_log_hook(enum fuse_log_level level, const char *fmt, va_list ap)
{
    char msg[1024];

    if (log_fd < 0) {
        vsyslog((int)level, fmt, ap);
        return;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    log_line(level <= FUSE_LOG_ERR ? "error: " : level == FUSE_LOG_WARNING ? "warning: " : "", msg);
}

/* "12500000", "12.5M", "100k": bytes per second (or bytes). @return 0 or -1. */
int pcrfs_parse_rate(const char *s, uint64_t *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno || !(v >= 0))
        return -1;
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1e3, end++;
        break;
    case 'M':
        v *= 1e6, end++;
        break;
    case 'G':
        v *= 1e9, end++;
        break;
    }
    if (*end || v >= 1.8e19)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* "pcrfs: STORE: message". The library's messages mostly start with the path
 * already ("STORE/index.db: not a pcrfs index"); it is not repeated then. */
static void store_error(const char *store, const char *msg)
{
    size_t n = strlen(store);

    if (strncmp(msg, store, n) == 0 && (msg[n] == ':' || msg[n] == '/'))
        fprintf(stderr, "pcrfs: %s\n", msg);
    else
        fprintf(stderr, "pcrfs: %s: %s\n", store, msg);
}

/* Append "-o NAME=VALUE" with VALUE escaped for libfuse's option parser (a store
 * path may hold commas). */
static int add_opt_value(struct fuse_args *args, const char *name, const char *value)
{
    char *opt, *opts = NULL;
    int rc;

    if (asprintf(&opt, "%s=%s", name, value) < 0)
        return -1;
    rc = fuse_opt_add_opt_escaped(&opts, opt);
    free(opt);
    if (rc == 0)
        rc = fuse_opt_add_arg(args, "-o");
    if (rc == 0)
        rc = fuse_opt_add_arg(args, opts);
    free(opts);
    return rc;
}

/* The library keeps one descriptor open per record (opened on first use, never
 * closed while mounted), so a store with more records than the soft RLIMIT_NOFILE
 * (often 1024: ImageNet at 1,024 images per record has 1,252) would start failing
 * with EIO. Raise the soft limit to the hard one, as daemons that cache files do. */
/* The qNN/ views: -o quality=0.9:0.95:0.99 (thresholds in (0, 1]; ':' because -o
 * splits at commas) or none; by
 * default 0.90, 0.95 and 0.99 when the store has a quality table (mkpcrfs
 * --quality). @return 0, or -1 (message printed). */
static int set_quality_views(struct pcrfs *fs, const char *opt)
{
    static const double dflt[] = {0.90, 0.95, 0.99};
    char meta[32], *copy, *tok, *save = NULL;
    bool has = pcr_store_meta(fs->store, "quality", meta, sizeof(meta)) > 0 &&
               strcmp(meta, "off") != 0;

    fs->nq = 0;
    if (!opt) {
        for (size_t i = 0; has && i < sizeof(dflt) / sizeof(dflt[0]); i++)
            fs->qthresh[fs->nq++] = dflt[i];
        return 0;
    }
    if (!strcmp(opt, "none"))
        return 0;
    if (!has)
        fprintf(stderr, "pcrfs: warning: quality=%s: the store has no quality table (build "
                        "it with mkpcrfs --quality): every qNN/ serves the top level\n", opt);
    copy = strdup(opt);
    if (!copy)
        return -1;
    for (tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        char *end;
        double t = strtod(tok, &end);
        if (end == tok || *end || !(t > 0.0 && t <= 1.0) || fs->nq >= PCRFS_MAX_QVIEWS) {
            fprintf(stderr, "pcrfs: quality=%s: want up to %d thresholds in (0, 1], e.g. "
                            "0.9:0.95:0.99\n", opt, PCRFS_MAX_QVIEWS);
            free(copy);
            return -1;
        }
        for (unsigned i = 0; i < fs->nq; i++)
            if (fs->qthresh[i] == t) {
                fprintf(stderr, "pcrfs: quality=%s: %g given twice\n", opt, t);
                free(copy);
                return -1;
            }
        fs->qthresh[fs->nq++] = t;
    }
    free(copy);
    return 0;
}

static void raise_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Would libfuse take these arguments? Asked of a throwaway session before anything
 * is opened, so that an unknown option or flag is a usage error (exit 2, libfuse
 * names it) and not a failure found after the store was opened. */
static bool fuse_args_ok(const struct fuse_args *args)
{
    struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
    struct fuse_session *se;
    int i;

    for (i = 0; i < args->argc; i++)
        if (fuse_opt_add_arg(&copy, args->argv[i]) != 0) {
            fuse_opt_free_args(&copy);
            return false;
        }
    se = fuse_session_new(&copy, &pcrfs_ops, sizeof(pcrfs_ops), NULL);
    fuse_opt_free_args(&copy);
    if (!se)
        return false;
    fuse_session_destroy(se);
    return true;
}

/* The kernel mounts a FUSE filesystem on a regular file as readily as on a directory,
 * and every access then fails with EIO: refuse anything but a directory. libfuse has
 * already resolved the path (a missing one is a usage error); "/dev/fd/N" (a
 * descriptor of /dev/fuse passed by a privileged mounter) is not a path. */
static int check_mountpoint(const char *mnt)
{
    struct stat st;
    unsigned fd;
    char c;

    if (sscanf(mnt, "/dev/fd/%u%c", &fd, &c) == 1)
        return 0;
    if (stat(mnt, &st) != 0) {
        fprintf(stderr, "pcrfs: %s: %s\n", mnt, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pcrfs: %s: not a directory\n", mnt);
        return -1;
    }
    return 0;
}

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts opts;
    struct fuse_loop_config *loop_cfg = NULL;
    struct fuse_session *se = NULL;
    struct cli cli = {.timeout = DEFAULT_TIMEOUT, .http_retries = -1, .read_ahead_kb = -1};
    static struct pcrfs fs; /* big (per-view counters); lives as long as the process */
    struct refurb_setup refurb_set;
    struct timespec now;
    char err[512] = "";
    char *store_abs = NULL;
    int ret = 1, rc;

    memset(&opts, 0, sizeof(opts));
    raise_fd_limit();
    if (fuse_opt_parse(&args, &cli, cli_spec, cli_proc) != 0) {
        ret = EXIT_USAGE;
        goto out_args;
    }
    /* Before fuse_parse_cmdline(), which would otherwise name the type after argv[0]:
     * mount(8) and /proc/mounts then show "fuse.pcrfs" however we were started. */
    if (!cli.has_subtype && !cli.has_fsname && fuse_opt_add_arg(&args, "-osubtype=pcrfs") != 0)
        goto out_args;
    if (fuse_parse_cmdline(&args, &opts) != 0) {
        pcrfs_usage(stderr);
        ret = EXIT_USAGE;
        goto out_args;
    }
    if (opts.show_help) {
        pcrfs_help();
        ret = 0;
        goto out_opts;
    }
    if (opts.show_version) {
        printf("pcrfs %s\nFUSE library version %s\n", PCR_VERSION, fuse_pkgversion());
        fflush(stdout); /* fuse_lowlevel_version() runs fusermount3, which prints too */
        fuse_lowlevel_version();
        ret = 0;
        goto out_opts;
    }
    if (!cli.store || !opts.mountpoint) {
        fprintf(stderr, "pcrfs: missing %s\n", cli.store ? "MOUNTPOINT" : "STORE");
        pcrfs_usage(stderr);
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (!(cli.timeout >= 0.0)) {
        fprintf(stderr, "pcrfs: timeout must be a number >= 0\n");
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (!(cli.http_timeout >= 0.0 && cli.http_timeout <= 86400.0) || cli.http_retries < -1) {
        fprintf(stderr, "pcrfs: http_timeout must be 0..86400 seconds, http_retries >= 0\n");
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (cli.read_ahead_kb < -1 || cli.read_ahead_kb > 1048576) {
        fprintf(stderr, "pcrfs: read_ahead_kb must be 0..1048576 (0: the kernel's)\n");
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (cli.readahead && strcmp(cli.readahead, "record") != 0 &&
        strcmp(cli.readahead, "kernel") != 0) {
        fprintf(stderr, "pcrfs: readahead=%s: want record or kernel\n", cli.readahead);
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (cli.bwlimit && pcrfs_parse_rate(cli.bwlimit, &fs.bwlimit) != 0) {
        fprintf(stderr, "pcrfs: bwlimit=%s: not a rate (bytes/s, e.g. 50M)\n", cli.bwlimit);
        ret = EXIT_USAGE;
        goto out_opts;
    }
    if (cli.logfile && !cli.logfile[0]) {
        fprintf(stderr, "pcrfs: logfile=: no path\n");
        ret = EXIT_USAGE;
        goto out_opts;
    }
    /* libfuse's connection options (readdirplus=, max_readahead=, ...): taken out of
     * args here, applied in the init handler. */
    fs.conn_opts = fuse_parse_conn_info_opts(&args);
    if (!fs.conn_opts) {
        ret = EXIT_USAGE;
        goto out_opts;
    }

    /* "ro": the kernel then refuses every write itself (EROFS, no round trip), mount
     * and statvfs(2) say read-only so cp -a, rsync and tar do not try, and the write
     * handlers in ops.c are only a second line for "-o rw".
     * "default_permissions": the kernel checks the modes we report (0444 files,
     * 0555 directories) itself; without it FUSE grants every access that reaches the
     * daemon and the daemon would have to check permissions on every request. */
    /* With -o level=K (the dynamic view), neither: "ro" would make the kernel refuse
     * the write to /.pcrfs/level before the daemon sees it, and with
     * default_permissions the kernel would answer other users' writes with EACCES;
     * without them every write reaches the daemon, which refuses it with EROFS
     * (ops.c) except the level change, and answers access(2). */
    if (!cli.level && !cli.has_ro && !cli.has_rw && fuse_opt_add_arg(&args, "-oro") != 0)
        goto out_conn;
    if (!cli.level && !cli.has_defperm && fuse_opt_add_arg(&args, "-odefault_permissions") != 0)
        goto out_conn;
    if (!fuse_args_ok(&args)) {
        ret = EXIT_USAGE;
        goto out_conn;
    }
    if (check_mountpoint(opts.mountpoint) != 0)
        goto out_conn;
    if (cli.level && cli.has_ro)
        fprintf(stderr, "pcrfs: warning: -o ro: the kernel will refuse every write, so the "
                        "level of dynamic/ cannot be changed\n");

    /* Before the store is opened (what opening it finds, a damaged record say, goes
     * to the log too) and before detaching: a log that cannot be written fails the
     * mount here, on the terminal, and a relative path means the caller's directory
     * (the daemon changes to / when it detaches). */
    if (cli.logfile) {
        log_fd = open(cli.logfile, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
        if (log_fd < 0) {
            fprintf(stderr, "pcrfs: logfile=%s: %s\n", cli.logfile, strerror(errno));
            goto out_conn;
        }
        fuse_set_log_func(fuse_log_hook);
    }

    pcr_log_set_hook(log_hook, NULL, opts.debug ? PCR_LOG_DEBUG : PCR_LOG_INFO);

    /* Opened with the path as given, so messages name what the user typed (the
     * library keeps a directory descriptor and SQLite an absolute path, so the
     * daemon's chdir("/") when it detaches does not matter). */
    if (pcr_url_is_remote(cli.store)) {
        struct pcr_http_opts ho = {.cache_dir = cli.cache, .retries = cli.http_retries,
                                   .timeout_ms = (unsigned)(cli.http_timeout * 1000.0),
                                   .endpoint = cli.endpoint, .region = cli.region,
                                   .profile = cli.profile, .ca_bundle = cli.ca_bundle};
        if (cli.cache_size && (pcrfs_parse_rate(cli.cache_size, &ho.cache_size) != 0 ||
                               !ho.cache_size)) {
            fprintf(stderr, "pcrfs: cache_size=%s: not a size (bytes, e.g. 500M)\n",
                    cli.cache_size);
            ret = EXIT_USAGE;
            goto out_conn;
        }
        rc = pcr_store_open_url(cli.store, &ho, &fs.store, err, sizeof(err));
        if (rc && pcr_url_has_userinfo(cli.store)) {
            fprintf(stderr, "pcrfs: %s\n", err); /* not the URL: it holds a secret */
            goto out_conn;
        }
    } else {
        rc = pcr_store_open(cli.store, &fs.store, err, sizeof(err));
    }
    if (rc) {
        store_error(cli.store, err[0] ? err : strerror(-rc));
        goto out_conn;
    }
    /* absolute for /.pcrfs/info and for the mount table (fsname); a URL as given */
    store_abs = pcr_url_is_remote(cli.store) ? strdup(cli.store) : realpath(cli.store, NULL);
    if (!store_abs) {
        store_error(cli.store, strerror(errno));
        goto out_store;
    }
    fs.store_path = store_abs;
    /* tokens/ and /.pcrfs/codebook.npy when the store has them; a token tree that
     * does not open is a damaged store, refused like any other */
    rc = pcr_store_open_tokens(fs.store, &fs.tokstore, err, sizeof(err));
    if (rc && rc != -ENOENT) {
        store_error(cli.store, err[0] ? err : strerror(-rc));
        goto out_store;
    }
    if (pcr_store_codebook(fs.store, &fs.codebook, &fs.codebook_len) != 0)
        fs.codebook = NULL;
    fs.levels = pcr_store_levels(fs.store);
    if (fs.levels < 1 || fs.levels > PCR_MAX_LEVELS) {
        fprintf(stderr, "pcrfs: %s: the store has %u levels\n", cli.store, fs.levels);
        goto out_store;
    }
    if (set_quality_views(&fs, cli.quality) != 0) {
        ret = EXIT_USAGE;
        goto out_store;
    }
    if (cli.level) {
        unsigned k = pcrfs_parse_level(&fs, cli.level, strlen(cli.level));

        if (!k) {
            fprintf(stderr, "pcrfs: level=%s: not a level of this store (1..%u or full)\n",
                    cli.level, fs.levels);
            ret = EXIT_USAGE;
            goto out_store;
        }
        fs.dynamic = true;
        atomic_store(&fs.level_now, k);
    }
    rc = pcrfs_mix_init(&cli.mix, &fs);
    if (rc) {
        if (rc == -ENOMEM)
            fprintf(stderr, "pcrfs: out of memory\n");
        else
            ret = EXIT_USAGE;
        goto out_store;
    }
    if (pcrfs_refurb_parse(&cli.refurb, &fs, &refurb_set) != 0) {
        ret = EXIT_USAGE;
        goto out_store;
    }
    if (refurb_set.r) {
        rc = pcrfs_refurb_init(&fs, &refurb_set, err, sizeof(err));
        if (rc) {
            store_error(cli.store, err[0] ? err : strerror(-rc));
            goto out_store;
        }
    }
    fs.timeout = cli.timeout;
    fs.keep_cache = !cli.nokeep_cache;
    /* No OPEN (ops.c, "No OPEN"): warm whole-file reads 60-104 k files/s instead of
     * 21-29 k (0.6-0.9x plain files instead of 0.4-0.6x). Only on "ro" mounts, where
     * the kernel refuses write-mode and O_TRUNC opens itself: elsewhere only OPEN can
     * refuse them. And never with nokeep_cache: the kernel keeps the cache of files
     * it opens without OPEN. */
    fs.want_no_open = !cli.open && !cli.nokeep_cache &&
                      (cli.has_ro || (!cli.level && !cli.has_rw));
    /* refurb/: an open picks the version its handle serves, and its files are read
     * with direct I/O, which only an OPEN reply can ask for */
    if (fs.refurb)
        fs.want_no_open = false;
    /* mix/: an open counts the file's pass (mixview.c) */
    if (fs.mix)
        fs.want_no_open = false;
    fs.debug = opts.debug;
    fs.readdirplus_opt = cli.has_readdirplus;
    /* one READ per image rather than one per 128 kB (bdi.c), where root may */
    fs.read_ahead_kb = cli.read_ahead_kb < 0 ? DEFAULT_READ_AHEAD_KB : (unsigned)cli.read_ahead_kb;
    fs.read_ahead_given = cli.read_ahead_kb > 0;
    fs.mountpoint = opts.mountpoint;
    fs.uid = getuid();
    fs.gid = getgid();
    fs.mtime = pcr_store_mtime(fs.store);
    if (fs.bwlimit)
        pcr_store_set_bwlimit(fs.store, fs.bwlimit);
    if (cli.readahead && !strcmp(cli.readahead, "record"))
        pcr_store_set_readahead(fs.store, true);
    clock_gettime(CLOCK_MONOTONIC, &now);
    fs.started = now.tv_sec;
    pthread_mutex_init(&fs.open_lock, NULL);
    fs.open_files.prev = fs.open_files.next = &fs.open_files;
    pthread_mutex_init(&fs.snap_lock, NULL);
    pthread_mutex_init(&fs.records_lock, NULL);
    if (pcrfs_views_init(&fs) != 0) {
        fprintf(stderr, "pcrfs: the table of views is inconsistent\n");
        goto out_store;
    }
    if (pcrfs_info_render(&fs) != 0) {
        fprintf(stderr, "pcrfs: out of memory\n");
        goto out_store;
    }
    if (!cli.has_fsname && add_opt_value(&args, "fsname", store_abs) != 0)
        goto out_store;
    se = fuse_session_new(&args, &pcrfs_ops, sizeof(pcrfs_ops), &fs);
    if (!se)
        goto out_store; /* libfuse said why (e.g. an unknown option) */
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, opts.mountpoint) != 0)
        goto out_signals;
    if (fuse_daemonize(opts.foreground) != 0)
        goto out_unmount;
    if (!opts.foreground && log_fd < 0) {
        openlog("pcrfs", LOG_PID, LOG_DAEMON);
        fuse_set_log_func(fuse_log_hook);
        log_syslog = true;
    }
    /* after the fork of fuse_daemonize(), which would leave the workers behind */
    if (fs.refurb && (rc = pcrfs_refurb_start(&fs)) != 0) {
        char msg[128];

        snprintf(msg, sizeof(msg), "refurb: cannot start: %s", strerror(-rc));
        log_hook(PCR_LOG_ERR, msg, NULL);
        goto out_unmount;
    }

    /* Threads, measured on the 2-core machine (BENCHMARKS.md: 5000 images, full/,
     * cold, 4 reader threads): libfuse's defaults (up to 10 workers, one /dev/fuse
     * descriptor) 2700-2900 files/s; -s 920-1800; max_threads=2 2180-2390; 4 and 16
     * within noise of 10; clone_fd 2530-2960, no gain. Cold reads block in pread(2)
     * inside the library, so more workers than cores keep the disk busy; clone_fd
     * pays off only when many cores contend for one descriptor. So libfuse's
     * defaults stay, and clone_fd is off unless asked for.
     * Warm, the one request a Python loader sends is the isatty() ioctl (ops.c, "No
     * ioctl handler"); its round trip, measured interleaved on 2 cores at load 5-9
     * (os.isatty() on a pcrfs file, 200 rounds of 500): median 7 us with the defaults
     * and 127 us with -s in one run, 57 us and 9.5 us in another, clone_fd and
     * max_threads=1|2 in between: the scheduler's placement of the woken thread (the
     * caller's CPU, 4.3 us, or the other, 125 us, both pinned with taskset) decides,
     * not the thread model, so nothing here is changed for it. max_idle_threads=1 is the one setting that
     * loses every time (110 us): libfuse 3.14 then starts and ends a thread per
     * request. */
    if (opts.singlethread) {
        rc = fuse_session_loop(se);
    } else {
        loop_cfg = fuse_loop_cfg_create();
        if (!loop_cfg) {
            log_hook(PCR_LOG_ERR, "out of memory", NULL);
            goto out_unmount;
        }
        fuse_loop_cfg_set_clone_fd(loop_cfg, (unsigned)opts.clone_fd);
        /* UINT_MAX is libfuse's "not given": keep the library's default then */
        if (opts.max_idle_threads != UINT_MAX)
            fuse_loop_cfg_set_idle_threads(loop_cfg, opts.max_idle_threads);
        fuse_loop_cfg_set_max_threads(loop_cfg, opts.max_threads);
        rc = fuse_session_loop_mt(se, loop_cfg);
    }
    /* The loop returns 0 after fusermount3 -u, the signal's number after the handlers
     * installed above stopped it (a requested, clean stop), a negative errno when the
     * channel failed. */
    ret = (rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP) ? 0 : 1;
    if (ret)
        log_hook(PCR_LOG_ERR, "session loop failed", NULL);

out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_store:
    if (fs.open_files.next)
        pcrfs_ops_close_all(&fs);
    pcrfs_refurb_free(&fs); /* no file open any more; before the store it reads */
    pcrfs_mix_free(&fs);
    pcrfs_ops_thread_done();
    if (loop_cfg)
        fuse_loop_cfg_destroy(loop_cfg);
    pcr_store_close(fs.tokstore); /* before the store it belongs to */
    pcr_store_close(fs.store);
    free(fs.info);
out_conn:
    free(fs.conn_opts);
    free(store_abs);
out_opts:
    free(opts.mountpoint);
out_args:
    free(cli.store);
    free(cli.bwlimit);
    free(cli.readahead);
    free(cli.quality);
    free(cli.level);
    free(cli.mix.range);
    free(cli.mix.mean);
    free(cli.mix.seed);
    free(cli.cache);
    free(cli.cache_size);
    free(cli.endpoint);
    free(cli.region);
    free(cli.profile);
    free(cli.ca_bundle);
    free(cli.logfile);
    pcrfs_refurb_args_free(&cli.refurb);
    fuse_opt_free_args(&args);
    if (log_syslog)
        closelog();
    if (log_fd >= 0)
        close(log_fd);
    return ret;
}
