/* pcrfs — mount a pcrfs store: the command line and the daemon's life cycle.
 *
 *   pcrfs STORE MOUNTPOINT [-o opts] [-f] [-d] [-s]
 *
 * Order matters: the mount point, the paths the daemon writes and its descriptors
 * are checked (mountcheck.c), then the store is opened and validated, all before
 * anything is mounted or the process detaches, so a bad store fails with a message
 * on the terminal, exit status 1 and no mount left behind. Then: detach (unless -f;
 * daemon.c: the parent waits), mount, start the workers, serve; the first request
 * tells the parent to exit 0. Serve until fusermount3 -u or SIGTERM/SIGINT/SIGHUP,
 * unmount, exit 0.
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

#include "daemon.h"
#include "fs.h"
#include "mountcheck.h"
#include "util/optparse.h"

#define EXIT_USAGE            2
#define CLI_LIB_OPTS_MAX      48 /* the library's options (pcrfs_option()) */
#define DEFAULT_TIMEOUT       86400.0
#define DEFAULT_READ_AHEAD_KB 1024 /* = max_pages: one READ up to 1 MiB (bdi.c) */

/* What the command line says beyond libfuse's own options. Every value is checked
 * as it arrives (cli_proc), so a malformed one is refused even when a later one
 * replaces it; the last one given counts (pcrfs(1), OPTIONS). */
struct cli {
    char *store; /* the first non-option argument */
    double timeout;
    int nokeep_cache;
    int open; /* -o open: an OPEN round trip per open(2), as before no-open */
    /* The library's options (pcrfs_option(): bwlimit=, readahead=, cache=, endpoint=,
     * ..., and the views' level=, quality=, mix=, refurb=, ...), each checked by the
     * library as it is given and kept as a string, the last value of each name: they
     * are handed to pcrfs_open_ex() as given, paths made absolute. */
    struct {
        const char *name; /* pcrfs_option()'s */
        unsigned flags;   /* PCRFS_OPT_* */
        char *val;
    } lib[CLI_LIB_OPTS_MAX];
    unsigned nlib;
    char *remote_only; /* the message refusing the last object-storage option for a local STORE */
    char *logfile;     /* -o logfile=PATH */
    int read_ahead_kb; /* -o read_ahead_kb=N: -1 not given (bdi.c) */
    int readdirplus;   /* -o readdirplus= (libfuse's option, kept for it): RDP_* */
    int dirahead;      /* -o dirahead=: -1 not given (then as -o readahead=record) */
    int push;          /* -o push=: -1 not given (then as -o readahead=record) */
    bool has_ro, has_rw, has_defperm, has_fsname, has_subtype;
};

#define MAX_TIMEOUT       31536000.0 /* 365 days: "never" for a store that never changes */
#define MAX_READ_AHEAD_KB 1048576

enum {
    KEY_RO,
    KEY_RW,
    KEY_DEFPERM,
    KEY_FSNAME,
    KEY_SUBTYPE,
    KEY_READDIRPLUS,
    KEY_DIRAHEAD,
    KEY_PUSH,
    KEY_TIMEOUT,
    KEY_LOGFILE,
    KEY_READ_AHEAD_KB,
    KEY_LIB,      /* the library's: bwlimit=, cache=, endpoint=, level=, mix=, ... */
    KEY_FUSE_NUM, /* libfuse's numeric options: checked here, kept for libfuse */
};

/* The driver's own options; the library's (one FUSE_OPT_KEY per pcrfs_option(),
 * KEY_LIB) are added by cli_spec_make(). */
static const struct fuse_opt cli_own[] = {
    {"nokeep_cache", offsetof(struct cli, nokeep_cache), 1},
    {"open", offsetof(struct cli, open), 1},
    FUSE_OPT_KEY("timeout=", KEY_TIMEOUT),
    FUSE_OPT_KEY("logfile=", KEY_LOGFILE),
    FUSE_OPT_KEY("read_ahead_kb=", KEY_READ_AHEAD_KB),
    FUSE_OPT_KEY("max_threads=", KEY_FUSE_NUM),
    FUSE_OPT_KEY("max_idle_threads=", KEY_FUSE_NUM),
    FUSE_OPT_KEY("max_readahead=", KEY_FUSE_NUM),
    FUSE_OPT_KEY("max_background=", KEY_FUSE_NUM),
    FUSE_OPT_KEY("congestion_threshold=", KEY_FUSE_NUM),
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("rw", KEY_RW),
    FUSE_OPT_KEY("default_permissions", KEY_DEFPERM),
    FUSE_OPT_KEY("fsname=", KEY_FSNAME),
    FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
    FUSE_OPT_KEY("readdirplus=", KEY_READDIRPLUS),
    FUSE_OPT_KEY("dirahead=", KEY_DIRAHEAD),
    FUSE_OPT_KEY("push=", KEY_PUSH),
};

/* cli_own, then "NAME=" for every option of the library, then the end. The
 * templates live in @names (CLI_LIB_OPTS_MAX x 32 bytes). @return 0, or -1 (a table
 * bug). */
static int cli_spec_make(struct fuse_opt *spec, char (*names)[32])
{
    size_t n = sizeof(cli_own) / sizeof(cli_own[0]);
    const char *o;
    unsigned k, flags;

    memcpy(spec, cli_own, sizeof(cli_own));
    for (k = 0; (o = pcrfs_option(k, &flags)) != NULL; k++) {
        if (k >= CLI_LIB_OPTS_MAX || strlen(o) + 2 > 32)
            return -1;
        snprintf(names[k], 32, "%s=", o);
        spec[n++] = (struct fuse_opt)FUSE_OPT_KEY(names[k], KEY_LIB);
    }
    spec[n] = (struct fuse_opt)FUSE_OPT_END;
    return 0;
}

/* libfuse's own numeric options that pcrfs(1) documents: libfuse reads them with
 * sscanf("%u"), which takes "-1" as 4294967295 and "5x" as 5. The thread limits are
 * libfuse 3.14's (FUSE_LOOP_MT_MAX_THREADS); the kernel keeps max_background and
 * congestion_threshold in 16 bits. */
static const struct {
    const char *name;
    uint64_t min, max;
} fuse_nums[] = {
    {"max_threads", 1, 100000},         {"max_idle_threads", 1, 100000},
    {"max_readahead", 0, UINT32_MAX},   {"max_background", 1, 65535},
    {"congestion_threshold", 1, 65535},
};

/* Replace the string in @slot with @val (the last one given counts). */
static int set_str(char **slot, const char *val)
{
    free(*slot);
    *slot = strdup(val);
    return *slot ? 0 : -1;
}

/* The library's option @name=@val: checked by the library now, kept (the last value
 * of each name) for pcrfs_open_ex(). @return 0, -1 a bad value (@msg), -ENOMEM. */
static int cli_lib(struct cli *c, const char *name, const char *val, char *msg, size_t len,
                   unsigned *flags)
{
    int rc = pcrfs_option_check(name, val);
    const char *o = NULL;
    unsigned i;

    if (rc) {
        snprintf(msg, len, "%s", pcrfs_errmsg());
        return rc == -ENOMEM ? rc : -1;
    }
    for (i = 0; i < c->nlib && strcmp(c->lib[i].name, name) != 0; i++)
        ;
    if (i == c->nlib) {
        for (unsigned k = 0; (o = pcrfs_option(k, flags)) != NULL; k++)
            if (!strcmp(o, name))
                break;
        if (!o || i == CLI_LIB_OPTS_MAX)
            return -ENOMEM; /* cannot be: the spec has only these, each once */
        c->lib[i].name = o;
        c->lib[i].flags = *flags;
        c->nlib++;
    }
    *flags = c->lib[i].flags;
    return set_str(&c->lib[i].val, val) != 0 ? -ENOMEM : 0;
}

/* Check the value of option @arg ("NAME=VALUE", the template of @key) and keep it.
 * @return what cli_proc() returns: 0 taken, 1 kept for libfuse, -1 a usage error
 * (printed). */
static int cli_value(struct cli *c, int key, const char *arg)
{
    static const char *const rdp_words[] = {"yes", "no", "auto", NULL};
    static const char *const yesno_words[] = {"yes", "no", NULL};
    const char *eq = strchr(arg, '='), *val = eq + 1;
    char name[32], msg[512] = "";
    uint64_t v = 0;
    unsigned w, flags = 0;
    int rc = 0, keep = 0;

    snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
    switch (key) {
    case KEY_TIMEOUT:
        rc = pcr_opt_real(name, val, 0, MAX_TIMEOUT, 0, "seconds", &c->timeout, msg, sizeof(msg));
        break;
    case KEY_LOGFILE:
        if (!val[0]) {
            pcr_opt_msg(msg, sizeof(msg), name, val, "want a path");
            rc = -1;
        } else if (set_str(&c->logfile, val) != 0) {
            rc = -ENOMEM;
        }
        break;
    case KEY_READ_AHEAD_KB:
        rc = pcr_opt_uint(name, val, 0, MAX_READ_AHEAD_KB, "kB, 0: the kernel's", &v, msg,
                          sizeof(msg));
        c->read_ahead_kb = rc == 0 ? (int)v : c->read_ahead_kb;
        break;
    case KEY_LIB: /* what needs the store (a level past L, ...): pcrfs_open_ex() */
        rc = cli_lib(c, name, val, msg, sizeof(msg), &flags);
        break;
    case KEY_FUSE_NUM:
        keep = 1;
        for (size_t i = 0; i < sizeof(fuse_nums) / sizeof(fuse_nums[0]); i++)
            if (!strcmp(name, fuse_nums[i].name))
                rc = pcr_opt_uint(name, val, fuse_nums[i].min, fuse_nums[i].max, NULL, &v, msg,
                                  sizeof(msg));
        break;
    case KEY_READDIRPLUS: /* kept for fuse_parse_conn_info_opts() */
        keep = 1;
        rc = pcr_opt_word(name, val, rdp_words, &w, msg, sizeof(msg));
        c->readdirplus = rc == 0 ? (int)(w == 0   ? RDP_YES
                                         : w == 1 ? RDP_NO
                                                  : RDP_AUTO)
                                 : c->readdirplus;
        break;
    case KEY_DIRAHEAD:
    case KEY_PUSH:
        rc = pcr_opt_word(name, val, yesno_words, &w, msg, sizeof(msg));
        if (rc == 0)
            *(key == KEY_PUSH ? &c->push : &c->dirahead) = w == 0;
        break;
    case KEY_FSNAME:
    case KEY_SUBTYPE:
        keep = 1;
        if (!val[0]) {
            pcr_opt_msg(msg, sizeof(msg), name, val, "want a name");
            rc = -1;
        }
        *(key == KEY_FSNAME ? &c->has_fsname : &c->has_subtype) = true;
        break;
    }
    if (rc == 0 && key == KEY_LIB && (flags & PCRFS_OPT_REMOTE)) {
        /* main() refuses it for a local STORE, once the arguments are all read */
        pcr_opt_msg(msg, sizeof(msg), name, val,
                    "only for a STORE in object storage (s3://, http://, https://)");
        if (set_str(&c->remote_only, msg) != 0)
            rc = -ENOMEM;
    }
    if (rc) {
        fprintf(stderr, "pcrfs: %s\n", rc == -ENOMEM ? "out of memory" : msg);
        return -1;
    }
    return keep;
}

/* Take STORE (the first non-option) out of the arguments, leave MOUNTPOINT for
 * fuse_parse_cmdline(), note which mount options the user gave (those are kept,
 * return 1, for fuse_session_new()) and check every option's value. */
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
    case FUSE_OPT_KEY_OPT:
        return 1;
    default:
        return cli_value(c, key, arg);
    }
}

/* ---- logging -----------------------------------------------------------------------
 * The library's hook and libfuse's go to stderr while the daemon has a terminal and
 * to syslog once it has detached, or with -o logfile=PATH to that file (containers
 * often have no syslog). log_fd is written once, before the session loop starts any
 * worker thread; log_syslog when the mount is up (log_up(), from the first request's
 * thread), after which the terminal is gone. Until then an error from libfuse (a
 * mount that fails) goes to the terminal as well as the log file: the caller waits
 * for it (daemon.c). */

static atomic_bool log_syslog;
static int log_fd = -1;
static bool log_detach; /* not -f: syslog once the mount is up, unless logfile= */

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

/* The library's levels: 0 error, 1 warning, 2 info, 3 debug (pcrfs_set_log()). */
#define LOG_LEVEL_ERR   0
#define LOG_LEVEL_INFO  2
#define LOG_LEVEL_DEBUG 3

static void log_hook(int level, const char *msg, void *ctx)
{
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    static const char *const tag[] = {"error: ", "warning: ", "", "debug: "};
    unsigned l = (unsigned)level < 4 ? (unsigned)level : 3;

    (void)ctx;
    if (log_fd >= 0)
        log_line(tag[l], msg);
    else if (atomic_load(&log_syslog))
        syslog(prio[l], "%s", msg);
    else
        fprintf(stderr, "pcrfs: %s%s\n", tag[l], msg);
}

/* libfuse's levels are syslog's priorities (FUSE_LOG_EMERG = LOG_EMERG = 0 ...). */
static void fuse_log_hook(enum fuse_log_level level, const char *fmt, va_list ap)
{
    char msg[1024];

    if (log_fd < 0) {
        if (atomic_load(&log_syslog))
            vsyslog((int)level, fmt, ap);
        else
            vfprintf(stderr, fmt, ap);
        return;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    log_line(level <= FUSE_LOG_ERR ? "error: " : level == FUSE_LOG_WARNING ? "warning: " : "", msg);
    if (level <= FUSE_LOG_ERR && !pcrfs_daemon_is_up())
        fprintf(stderr, "%s%s", msg, msg[0] && msg[strlen(msg) - 1] == '\n' ? "" : "\n");
}

/* The mount serves (daemon.c): a detached daemon's terminal goes away now. */
static void log_up(void)
{
    if (!log_detach || log_fd >= 0)
        return;
    /* without syslog (containers) a detached daemon's messages would go nowhere: said
     * while the caller's terminal is still there */
    if (!pcrfs_mc_have_syslog())
        fprintf(stderr, "pcrfs: warning: no syslog (/dev/log): the detached daemon's messages "
                        "are lost; give -o logfile=PATH, or -f to keep them on standard error\n");
    openlog("pcrfs", LOG_PID, LOG_DAEMON);
    atomic_store(&log_syslog, true);
}

/* A failure of the mount itself: to the log, and to the terminal while someone
 * waits for the outcome (a log file alone would leave the caller with nothing). */
static void mount_failed(const char *msg)
{
    log_hook(LOG_LEVEL_ERR, msg, NULL);
    if (log_fd >= 0 && !pcrfs_daemon_is_up())
        fprintf(stderr, "pcrfs: %s\n", msg);
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

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts opts;
    struct fuse_loop_config *loop_cfg = NULL;
    struct fuse_session *se = NULL;
    struct cli cli = {.timeout = DEFAULT_TIMEOUT,
                      .read_ahead_kb = -1,
                      .readdirplus = RDP_UNSET,
                      .dirahead = -1,
                      .push = -1};
    static struct pcrfs fs; /* lives as long as the process */
    struct fuse_opt cli_spec[96];
    char lib_opt_names[CLI_LIB_OPTS_MAX][32];
    const char *lib_opts[CLI_LIB_OPTS_MAX + 1];
    char *lib_strs[CLI_LIB_OPTS_MAX] = {0};
    struct timespec now;
    bool want_write;
    bool record = false; /* -o readahead=record */
    char *store_abs = NULL;
    bool nonempty;
    int ret = 1, rc;

    memset(&opts, 0, sizeof(opts));
    raise_fd_limit();
    _Static_assert(sizeof(cli_own) / sizeof(cli_own[0]) + CLI_LIB_OPTS_MAX < 96, "cli_spec");
    if (cli_spec_make(cli_spec, lib_opt_names) != 0) {
        fprintf(stderr, "pcrfs: the library's options do not fit the option table\n");
        goto out_args;
    }
    if (fuse_opt_parse(&args, &cli, cli_spec, cli_proc) != 0) {
        ret = EXIT_USAGE;
        goto out_args;
    }
    if (pcrfs_mc_take_opts(&args, &nonempty) != 0)
        goto out_args;
    if (pcrfs_mc_stale(&args) != 0)
        goto out_args;
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
        printf("pcrfs %s\nFUSE library version %s\n", pcrfs_version(), fuse_pkgversion());
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
    /* every value was checked as it was given (cli_proc); what is left is what
     * needs STORE */
    if (cli.remote_only && !pcrfs_is_remote(cli.store)) {
        fprintf(stderr, "pcrfs: %s\n", cli.remote_only);
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
     * handlers (writes.c) are only a second line for "-o rw".
     * "default_permissions": the kernel checks the modes we report (0444 files,
     * 0555 directories) itself; without it FUSE grants every access that reaches the
     * daemon and the daemon would have to check permissions on every request. */
    /* With -o level=K (dynamic/: a view whose control file is written), neither: "ro"
     * would make the kernel refuse the write to /.pcrfs/level before the daemon sees
     * it, and with
     * default_permissions the kernel would answer other users' writes with EACCES;
     * without them every write reaches the daemon, which refuses it with EROFS
     * (writes.c) except the level change, and answers access(2) (writes.c). */
    want_write = false;
    for (unsigned i = 0; i < cli.nlib; i++)
        want_write = want_write || (cli.lib[i].flags & PCRFS_OPT_WRITE);
    if (!want_write && !cli.has_ro && !cli.has_rw && fuse_opt_add_arg(&args, "-oro") != 0)
        goto out_conn;
    if (!want_write && !cli.has_defperm && fuse_opt_add_arg(&args, "-odefault_permissions") != 0)
        goto out_conn;
    if (!fuse_args_ok(&args)) {
        ret = EXIT_USAGE;
        goto out_conn;
    }
    /* The mount point, the paths the daemon writes (absolute now: it works from "/"),
     * and its descriptors, before anything is opened or made. */
    {
        const char *local = pcrfs_is_remote(cli.store) ? NULL : cli.store;

        struct stat lsb;

        if (pcrfs_mc_mountpoint(opts.mountpoint, local, nonempty) != 0)
            goto out_conn;
        /* the path is made canonical below (symbolic links resolved): a log planted
         * as a link is refused before that, as the O_NOFOLLOW open would */
        if (cli.logfile && lstat(cli.logfile, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
            fprintf(stderr, "pcrfs: logfile=%s: a symbolic link: refused\n", cli.logfile);
            goto out_conn;
        }
        if (pcrfs_mc_path("logfile", &cli.logfile, opts.mountpoint, local) != 0) {
            ret = EXIT_USAGE;
            goto out_conn;
        }
        /* the library's paths: cache=, ca_bundle= (read by libcurl at every new
         * connection, from "/" once detached), refurb_cache=; the absolute path
         * replaces what was given */
        for (unsigned i = 0; i < cli.nlib; i++) {
            if (!(cli.lib[i].flags & PCRFS_OPT_PATH))
                continue;
            if (pcrfs_mc_path(cli.lib[i].name, &cli.lib[i].val, opts.mountpoint, local) != 0 ||
                pcrfs_option_check(cli.lib[i].name, cli.lib[i].val) != 0) {
                if (pcrfs_errmsg()[0])
                    fprintf(stderr, "pcrfs: %s\n", pcrfs_errmsg());
                ret = EXIT_USAGE;
                goto out_conn;
            }
        }
        if (pcrfs_mc_resources(opts.mountpoint) != 0)
            goto out_conn;
    }
    if (want_write && cli.has_ro)
        fprintf(stderr, "pcrfs: warning: -o ro: the kernel will refuse every write, so the "
                        "level of dynamic/ cannot be changed\n");

    /* Before the store is opened (what opening it finds, a damaged record say, goes
     * to the log too) and before detaching: a log that cannot be written fails the
     * mount here, on the terminal, and a relative path means the caller's directory
     * (the daemon changes to / when it detaches). */
    if (cli.logfile) {
        /* not through a symbolic link, and not another user's file: on a shared
         * directory either would let that user choose what root appends to */
        struct stat lsb;
        log_fd = open(cli.logfile,
                      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, 0640);
        if (log_fd < 0) {
            fprintf(stderr, "pcrfs: logfile=%s: %s\n", cli.logfile,
                    errno == ELOOP ? "a symbolic link: refused" : strerror(errno));
            goto out_conn;
        }
        if (fstat(log_fd, &lsb) == 0 && S_ISREG(lsb.st_mode) && lsb.st_uid != geteuid()) {
            fprintf(stderr, "pcrfs: logfile=%s: owned by uid %u, not by this user: refused\n",
                    cli.logfile, (unsigned)lsb.st_uid);
            close(log_fd);
            log_fd = -1;
            goto out_conn;
        }
    }
    fuse_set_log_func(fuse_log_hook);

    pcrfs_set_log(log_hook, NULL, opts.debug ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO);

    /* Opened with the path as given, so messages name what the user typed (the
     * library keeps a directory descriptor and SQLite an absolute path, so the
     * daemon's chdir("/") when it detaches does not matter). The views' threads are
     * started after the fork (pcrfs_start(), below). What is checked against the
     * store (levels, the quality table, refurb/'s scan and cache directory) fails
     * here, before the mount: -EINVAL a usage error, anything else the store's. */
    for (unsigned i = 0; i < cli.nlib; i++) {
        if (asprintf(&lib_strs[i], "%s=%s", cli.lib[i].name, cli.lib[i].val) < 0) {
            lib_strs[i] = NULL;
            fprintf(stderr, "pcrfs: out of memory\n");
            goto out_conn;
        }
        lib_opts[i] = lib_strs[i];
    }
    lib_opts[cli.nlib] = NULL;
    rc = pcrfs_open_ex(cli.store, lib_opts, PCRFS_OPEN_DEFER_START, &fs.store);
    if (rc == -EINVAL || (rc && pcrfs_is_remote(cli.store) == 2)) {
        /* a usage error; or the store's, without the URL: it holds a secret */
        fprintf(stderr, "pcrfs: %s\n", pcrfs_errmsg()[0] ? pcrfs_errmsg() : strerror(-rc));
        if (rc == -EINVAL)
            ret = EXIT_USAGE;
        goto out_conn;
    } else if (rc) {
        store_error(cli.store, pcrfs_errmsg()[0] ? pcrfs_errmsg() : strerror(-rc));
        goto out_conn;
    }
    /* absolute for the mount table (fsname); a URL as given */
    store_abs = pcrfs_is_remote(cli.store) ? strdup(cli.store) : realpath(cli.store, NULL);
    if (!store_abs) {
        store_error(cli.store, strerror(errno));
        goto out_store;
    }
    fs.features = pcrfs_features(fs.store);
    fs.timeout = cli.timeout;
    fs.keep_cache = !cli.nokeep_cache;
    /* No OPEN (ops.c, "No OPEN"): warm whole-file reads 60-104 k files/s instead of
     * 21-29 k (0.6-0.9x plain files instead of 0.4-0.6x). Only on "ro" mounts, where
     * the kernel refuses write-mode and O_TRUNC opens itself: elsewhere only OPEN can
     * refuse them. And never with nokeep_cache: the kernel keeps the cache of files
     * it opens without OPEN. */
    fs.want_no_open =
        !cli.open && !cli.nokeep_cache && (cli.has_ro || (!want_write && !cli.has_rw));
    /* refurb/: an open picks the version its handle serves, and its files are read
     * with direct I/O, which only an OPEN reply can ask for; mix/: an open counts the
     * file's pass (the views' needs_open) */
    if (fs.features & PCRFS_FEATURE_NEEDS_OPEN)
        fs.want_no_open = false;
    fs.debug = opts.debug;
    fs.readdirplus = cli.readdirplus;
    /* a directory's names read ahead of its lookups (dirahead.c): asked for, or with
     * the records (-o readahead=record: a reader of whole datasets) */
    for (unsigned i = 0; i < cli.nlib; i++) /* (the last one counts) */
        if (!strcmp(cli.lib[i].name, "readahead"))
            record = !strcmp(cli.lib[i].val, "record");
    pcrfs_dirahead_init(&fs, cli.dirahead < 0 ? record : cli.dirahead > 0);
    /* and the files of the records read ahead handed to the kernel (push.c): the same;
     * never with nokeep_cache, whose opens drop them */
    pcrfs_push_init(&fs, (cli.push < 0 ? record : cli.push > 0) && fs.keep_cache);
    /* one READ per image rather than one per 128 kB (bdi.c), where root may */
    fs.read_ahead_kb = cli.read_ahead_kb < 0 ? DEFAULT_READ_AHEAD_KB : (unsigned)cli.read_ahead_kb;
    fs.read_ahead_given = cli.read_ahead_kb > 0;
    fs.mountpoint = opts.mountpoint;
    fs.uid = getuid();
    fs.gid = getgid();
    fs.mtime = pcrfs_mtime(fs.store);
    clock_gettime(CLOCK_MONOTONIC, &now);
    fs.started = now.tv_sec;
    pthread_mutex_init(&fs.open_lock, NULL);
    fs.open_files.prev = fs.open_files.next = &fs.open_files;
    {
        /* the node the stats snapshots are taken of (inode.h) */
        uint64_t ctl = 0, stats = 0;

        if (pcrfs_node_lookup(fs.store, PCRFS_NODE_ROOT, ".pcrfs", &ctl) == 1 &&
            pcrfs_node_lookup(fs.store, ctl, "stats", &stats) != 1)
            stats = 0;
        pcrfs_snaps_init(&fs.snaps, stats);
    }
    if (!cli.has_fsname && add_opt_value(&args, "fsname", store_abs) != 0)
        goto out_store;
    log_detach = !opts.foreground;
    /* From here on the child works and the parent waits for "serving" (daemon.c). */
    if (pcrfs_daemon_start(opts.foreground, log_up) != 0)
        goto out_store;
    se = fuse_session_new(&args, &pcrfs_ops, sizeof(pcrfs_ops), &fs);
    if (!se)
        goto out_store; /* libfuse said why (e.g. an unknown option) */
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    fs.se = se;
    if (fuse_session_mount(se, opts.mountpoint) != 0)
        goto out_signals;
    /* after the fork (daemon.c), which would leave the workers behind; before the
     * parent is told the mount serves, so that a failure is its exit status */
    if ((rc = pcrfs_start(fs.store)) != 0) {
        mount_failed(pcrfs_errmsg()[0] ? pcrfs_errmsg() : strerror(-rc));
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
     * not the thread model, so nothing here is changed for it. max_idle_threads=1 is the one
     * setting that loses every time (110 us): libfuse 3.14 then starts and ends a thread per
     * request. */
    if (opts.singlethread) {
        rc = fuse_session_loop(se);
    } else {
        loop_cfg = fuse_loop_cfg_create();
        if (!loop_cfg) {
            mount_failed("out of memory");
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
        mount_failed("session loop failed");

out_unmount:
    fuse_session_unmount(se);
    pcrfs_dirahead_stop(&fs); /* its request, if any, failed with the session's end */
    pcrfs_push_stop(&fs);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_store:
    if (fs.open_files.next)
        pcrfs_ops_close_all(&fs);
    pcrfs_ops_thread_done();
    if (loop_cfg)
        fuse_loop_cfg_destroy(loop_cfg);
    pcrfs_close(fs.store); /* no file open any more */
out_conn:
    for (unsigned i = 0; i < CLI_LIB_OPTS_MAX; i++)
        free(lib_strs[i]); /* also when the store did not open */
    free(fs.conn_opts);
    free(store_abs);
out_opts:
    free(opts.mountpoint);
out_args:
    free(cli.store);
    free(cli.remote_only);
    free(cli.logfile);
    for (unsigned i = 0; i < cli.nlib; i++)
        free(cli.lib[i].val);
    fuse_opt_free_args(&args);
    if (atomic_load(&log_syslog))
        closelog();
    if (log_fd >= 0)
        close(log_fd);
    return ret;
}
