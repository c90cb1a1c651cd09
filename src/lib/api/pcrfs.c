/* pcrfs — the public API (include/pcrfs/pcrfs.h): opening a store, this process's
 * instance of it, errors, the options, and what is asked of the store as a whole
 * (levels, prefetch, info and stats). The bottom of the API's three files: node.c
 * (the tree by node, the handles) and path.c (the tree by path) call it; it calls
 * neither.
 *
 * A pcrfs_store is a store, its token tree and its views (src/lib/view/), opened
 * with options the way the FUSE driver opens them, plus what reopening them needs:
 * the path and the parsed options.
 *
 * Across fork(). A child inherits the parent's store but not its threads (refurb/'s
 * workers) nor, safely, its connections (libcurl's handles) or a lock another
 * thread held. So every call compares the process id with the one that opened the
 * current instance, and the first call in a child opens a new instance from the
 * kept path and options; the parent's copy is left as it is (closing it would join
 * threads that do not exist in the child). The lock that serialises that reopen is
 * reset in the child by a pthread_atfork() handler, in case a parent thread held it
 * at the fork.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_internal.h"
#include "common/internal.h"
#include "pcrfs/log.h"
#include "util/optparse.h"

/* ---- errors ---------------------------------------------------------------------- */

static _Thread_local char errbuf[512];

void api_errmsg(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
}

void api_ok(void)
{
    errbuf[0] = '\0';
}

const char *pcrfs_errmsg(void)
{
    return errbuf;
}

const char *pcrfs_version(void)
{
    return PCR_VERSION;
}

/* ---- opening ----------------------------------------------------------------------- */

static pthread_mutex_t reopen_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* This process's id, kept by the fork handler: every call compares it with its
 * instance's, and getpid() is a system call (glibc caches it no more). */
static _Atomic pid_t self_pid;

static void atfork_child(void)
{
    pthread_mutex_init(&reopen_lock, NULL);
    atomic_store(&self_pid, getpid());
}

static void atfork_register(void)
{
    atomic_store(&self_pid, getpid());
    pthread_atfork(NULL, NULL, atfork_child);
}

/* One "NAME=VALUE" of pcrfs_open(). @return 0 or -EINVAL/-ENOMEM (errbuf). */
static int take_option(pcrfs_store *s, const char *opt, bool remote)
{
    const char *eq = strchr(opt, '='), *val;
    char name[32], msg[480] = "";
    int rc;

    if (!eq || eq == opt || (size_t)(eq - opt) >= sizeof(name))
        return api_fail(-EINVAL, "option %.64s: want NAME=VALUE", opt);
    snprintf(name, sizeof(name), "%.*s", (int)(eq - opt), opt);
    val = eq + 1;
    if (pcr_views_opt_desc(name))
        rc = pcr_views_opt(&s->args, name, val, msg, sizeof(msg));
    else if (pcr_store_opt_remote_only(name) && !remote)
        return api_fail(-EINVAL,
                        "%s=: only for a store in object storage (s3://, http://, "
                        "https://)",
                        name);
    else
        rc = pcr_store_opt(&s->sopts, name, val, msg, sizeof(msg)); /* store/opts.c */
    if (rc == 1)
        return api_fail(-EINVAL, "%s: not an option of pcrfs(3)", name);
    if (rc == -ENOMEM)
        return api_fail(-ENOMEM, "out of memory");
    return rc ? api_fail(-EINVAL, "%s", msg) : 0;
}

static void inst_free(struct inst *in)
{
    if (!in)
        return;
    pcr_views_close(in->views);
    pcr_store_close(in->tokstore); /* before the store it belongs to */
    pcr_store_close(in->store);
    free(in->info);
    free(in->records); /* node.c's /.pcrfs/records, rendered on first use */
    pthread_mutex_destroy(&in->lock);
    free(in);
}

/* A store that cannot be opened, as pcrfs_open_ex() returns it: its errno, but never
 * -EINVAL, which is a usage error there. */
static int store_failed(int rc, bool *usage)
{
    *usage = false;
    return rc == -EINVAL ? -EBADMSG : rc;
}

/* Open the store and its views in this process, and start the views' threads if
 * @start. *@usage: whether a failure is the options' (not the store's).
 * @return 0 or -errno (errbuf). */
static int inst_open(const pcrfs_store *s, bool start, bool *usage, struct inst **out)
{
    struct inst *in = calloc(1, sizeof(*in));
    char err[480] = "", extra[64];
    int rc;

    *usage = false;
    if (!in)
        return api_fail(-ENOMEM, "out of memory");
    in->pid = getpid();
    pthread_mutex_init(&in->lock, NULL);
    if (pcr_url_is_remote(s->path)) {
        struct pcr_http_opts ho = {0};

        pcr_store_opts_http(&s->sopts, &ho);
        rc = pcr_store_open_url(s->path, &ho, &in->store, err, sizeof(err));
    } else
        rc = pcr_store_open(s->path, &in->store, err, sizeof(err));
    if (rc) {
        inst_free(in);
        return api_fail(store_failed(rc, usage), "%s", err[0] ? err : strerror(-rc));
    }
    rc = pcr_store_open_tokens(in->store, &in->tokstore, err, sizeof(err));
    if (rc && rc != -ENOENT) {
        inst_free(in);
        return api_fail(store_failed(rc, usage), "%s", err[0] ? err : strerror(-rc));
    }
    if (pcr_store_codebook(in->store, &in->codebook, &in->codebook_len) != 0)
        in->codebook = NULL;
    if (pcr_store_levels(in->store) < 1 || pcr_store_levels(in->store) > PCR_MAX_LEVELS) {
        unsigned levels = pcr_store_levels(in->store);

        inst_free(in);
        return api_fail(-EBADMSG, "%s: the store has %u levels", s->path, levels);
    }
    rc = pcr_views_open(in->store, in->tokstore, &s->args, &in->views, err, sizeof(err));
    *usage = rc == -EINVAL;
    if (rc == 0 && start) {
        rc = pcr_views_start(in->views, err, sizeof(err));
        in->started = rc == 0;
    }
    /* what only opening says: rendered once (the store never changes) */
    snprintf(extra, sizeof(extra), ",\n  \"bwlimit\": %llu", (unsigned long long)s->sopts.bwlimit);
    if (rc == 0 && pcr_views_info_json(in->views, s->path_abs, extra, &in->info, &in->info_len))
        rc = -ENOMEM;
    if (rc) {
        inst_free(in);
        return api_fail(rc, "%s", err[0] ? err : strerror(-rc));
    }
    pcr_store_opts_apply(&s->sopts, in->store);
    *out = in;
    return 0;
}

int pcrfs_open_ex(const char *path_or_url, const char *const *options, unsigned flags,
                  pcrfs_store **out)
{
    pcrfs_store *s;
    struct inst *in = NULL;
    bool remote, usage = true;
    int rc = 0;

    errbuf[0] = '\0';
    *out = NULL;
    if (!path_or_url || !path_or_url[0])
        return api_fail(-EINVAL, "no store given");
    pthread_once(&atfork_once, atfork_register);
    s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path_or_url))) {
        free(s);
        return api_fail(-ENOMEM, "out of memory");
    }
    s->flags = flags;
    s->sopts = (struct pcr_store_opts)PCR_STORE_OPTS_INIT;
    remote = pcr_url_is_remote(path_or_url);
    /* info shows the store absolute (a daemon works from "/"); a URL as given */
    s->path_abs = remote ? strdup(path_or_url) : realpath(path_or_url, NULL);
    if (!s->path_abs && !(s->path_abs = strdup(path_or_url)))
        rc = api_fail(-ENOMEM, "out of memory");
    for (const char *const *o = options; o && *o && rc == 0; o++)
        rc = take_option(s, *o, remote);
    if (rc == 0)
        rc = inst_open(s, !(flags & PCRFS_OPEN_DEFER_START), &usage, &in);
    if (rc) {
        pcrfs_close(s);
        return rc;
    }
    atomic_store(&s->cur, in);
    *out = s;
    return 0;
}

int pcrfs_open(const char *path_or_url, const char *const *options, pcrfs_store **out)
{
    int rc = pcrfs_open_ex(path_or_url, options, 0, out);

    return rc == -EBADMSG ? -EINVAL : rc; /* as it always did */
}

int pcrfs_start(pcrfs_store *s)
{
    struct inst *in;
    char err[480] = "";
    int rc = 0;

    errbuf[0] = '\0';
    if (!s)
        return api_fail(-EINVAL, "no store");
    pthread_mutex_lock(&reopen_lock);
    in = atomic_load(&s->cur);
    if (in && !in->started) {
        /* the process that starts it owns it: no reopen after the fork before */
        in->pid = getpid();
        rc = pcr_views_start(in->views, err, sizeof(err));
        in->started = rc == 0;
    }
    pthread_mutex_unlock(&reopen_lock);
    return rc ? api_fail(rc, "%s", err[0] ? err : strerror(-rc)) : 0;
}

void pcrfs_close(pcrfs_store *s)
{
    struct inst *in;

    if (!s)
        return;
    in = atomic_load(&s->cur);
    /* a parent's instance in a child is left alone (see the head comment), unless
     * it never started: no thread of it exists anywhere (a daemon whose mount failed
     * between its fork and pcrfs_start() frees what its parent opened) */
    if (in && (in->pid == getpid() || !in->started))
        inst_free(in);
    pcr_views_args_free(&s->args);
    pcr_store_opts_free(&s->sopts);
    free(s->path);
    free(s->path_abs);
    free(s);
}

/* This process's instance, reopened on the first call after a fork. NULL: errbuf. */
struct inst *api_inst(pcrfs_store *s)
{
    struct inst *in = atomic_load_explicit(&s->cur, memory_order_acquire), *fresh = NULL;
    pid_t me = atomic_load_explicit(&self_pid, memory_order_relaxed);

    if (in && in->pid == me)
        return in;
    pthread_mutex_lock(&reopen_lock);
    in = atomic_load(&s->cur);
    if (!in || in->pid != me) {
        bool usage;

        if (inst_open(s, true, &usage, &fresh) == 0) {
            atomic_store_explicit(&s->cur, fresh, memory_order_release);
            in = fresh;
        } else {
            in = NULL;
        }
    }
    pthread_mutex_unlock(&reopen_lock);
    return in;
}

/* ---- the store as a whole ------------------------------------------------------------ */

int pcrfs_prefetch(pcrfs_store *s, const uint64_t *records, size_t n)
{
    struct inst *in;
    int rc;

    PCRFS_INST(in, s);
    if (!records && n)
        return api_fail(-EINVAL, "no records");
    rc = pcr_store_prefetch(in->store, records, n);
    return rc ? api_fail(rc, "a record id out of range (1..%llu)",
                         (unsigned long long)pcr_store_nrecords(in->store))
              : 0;
}

unsigned pcrfs_levels(pcrfs_store *s)
{
    struct inst *in = s ? api_inst(s) : NULL;

    return in ? pcr_store_levels(in->store) : 0;
}

int pcrfs_set_level(pcrfs_store *s, unsigned level)
{
    struct inst *in;
    int rc;

    PCRFS_INST(in, s);
    rc = pcr_views_set_level(in->views, level, NULL);
    if (rc == -ENOENT)
        return api_fail(rc, "no dynamic/ (open with level=K)");
    return rc ? api_fail(rc, "%u: not a level of this store (1..%u)", level,
                         pcr_store_levels(in->store))
              : 0;
}

ssize_t pcrfs_info_json(pcrfs_store *s, char **out)
{
    struct inst *in;

    PCRFS_INST(in, s);
    *out = malloc(in->info_len + 1);
    if (!*out)
        return api_fail(-ENOMEM, "out of memory");
    memcpy(*out, in->info, in->info_len);
    (*out)[in->info_len] = '\0';
    return (ssize_t)in->info_len;
}

ssize_t pcrfs_stats_json(pcrfs_store *s, char **out)
{
    return pcrfs_stats_json_ex(s, NULL, out);
}

ssize_t pcrfs_stats_json_ex(pcrfs_store *s, const char *head, char **out)
{
    struct inst *in;
    size_t len;
    int rc;

    PCRFS_INST(in, s);
    rc = pcr_views_stats_json(in->views, head, out, &len);
    return rc ? api_fail(rc, "out of memory") : (ssize_t)len;
}

/* ---- options, for a command line that passes them on --------------------------------- */

/* The store's own options (store/opts.c), then the views'. */
static const struct {
    const char *name;
    unsigned flags;
} store_opts[] = {
    {"bwlimit", 0},
    {"readahead", 0},
    {"cache", PCRFS_OPT_PATH | PCRFS_OPT_REMOTE},
    {"cache_size", PCRFS_OPT_REMOTE},
    {"http_timeout", PCRFS_OPT_REMOTE},
    {"http_retries", PCRFS_OPT_REMOTE},
    {"http_part_size", PCRFS_OPT_REMOTE},
    {"http_connections", PCRFS_OPT_REMOTE},
    {"endpoint", PCRFS_OPT_REMOTE},
    {"region", PCRFS_OPT_REMOTE},
    {"profile", PCRFS_OPT_REMOTE},
    {"ca_bundle", PCRFS_OPT_PATH | PCRFS_OPT_REMOTE},
};
#define NSTORE_OPTS (sizeof(store_opts) / sizeof(store_opts[0]))

const char *pcrfs_option(unsigned i, unsigned *flags)
{
    *flags = 0;
    if (i < NSTORE_OPTS) {
        *flags = store_opts[i].flags;
        return store_opts[i].name;
    }
    i -= (unsigned)NSTORE_OPTS;
    for (size_t d = 0; d < pcr_view_ndescs; d++)
        for (const char *const *o = pcr_view_descs[d]->opts; o && *o; o++)
            if (i-- == 0) {
                for (const char *const *po = pcr_view_descs[d]->path_opts; po && *po; po++)
                    if (!strcmp(*po, *o))
                        *flags |= PCRFS_OPT_PATH;
                if (pcr_view_descs[d]->needs_write)
                    *flags |= PCRFS_OPT_WRITE;
                return *o;
            }
    return NULL;
}

int pcrfs_option_check(const char *name, const char *value)
{
    char msg[480] = "";
    int rc;

    errbuf[0] = '\0';
    if (pcr_views_opt_desc(name)) {
        struct pcr_views_args a = {{0}};

        rc = pcr_views_opt(&a, name, value, msg, sizeof(msg));
        pcr_views_args_free(&a);
    } else {
        struct pcr_store_opts o = PCR_STORE_OPTS_INIT;

        rc = pcr_store_opt(&o, name, value, msg, sizeof(msg));
        pcr_store_opts_free(&o);
        if (rc == 1)
            return api_fail(-ENOENT, "%s: not an option of pcrfs(3)", name);
    }
    if (rc == -ENOMEM)
        return api_fail(-ENOMEM, "out of memory");
    return rc ? api_fail(-EINVAL, "%s", msg) : 0;
}

static char help_text[8192];
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

static void help_make(void)
{
    size_t n = 0;

    for (size_t i = 0; i < pcr_view_ndescs; i++) {
        const char *h = pcr_view_descs[i]->help;
        size_t len;

        if (!h)
            continue; /* a view without options to tell */
        len = strlen(h);
        if (len >= sizeof(help_text) - n)
            break; /* a table bug: _Static_assert cannot see string lengths */
        memcpy(help_text + n, h, len);
        n += len;
    }
    help_text[n] = '\0';
}

const char *pcrfs_options_help(void)
{
    pthread_once(&help_once, help_make);
    return help_text;
}

int pcrfs_is_remote(const char *path_or_url)
{
    if (!path_or_url || !pcr_url_is_remote(path_or_url))
        return 0;
    return pcr_url_has_userinfo(path_or_url) ? 2 : 1;
}

static pcrfs_log_fn log_fn;

static void log_tramp(enum pcr_log_level level, const char *msg, void *ctx)
{
    log_fn((int)level, msg, ctx);
}

void pcrfs_set_log(pcrfs_log_fn fn, void *ctx, int max_level)
{
    log_fn = fn;
    pcr_log_set_hook(fn ? log_tramp : NULL, ctx,
                     (enum pcr_log_level)(max_level < 0   ? 0
                                          : max_level > 3 ? 3
                                                          : max_level));
}
