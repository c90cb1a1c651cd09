/* pcrfs — the public API (include/pcrfs/pcrfs.h): the views of a store by path.
 *
 * A pcrfs_store is a store, its token tree and its views (src/lib/view/), opened
 * with options the way the FUSE driver opens them, plus what reopening them needs:
 * the path and the parsed options. Paths resolve through the views' own lookups, so
 * names, sizes and bytes are those of a mount.
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

#define NAME_MAX_BYTES 255
#define NAMEBUF        512

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

/* The string options for object storage, as pcrfs(1) takes them: non-empty, checked
 * by the library when the store is opened (url.c), kept in pcrfs_store.str[]. */
static const char *const str_opts[] = {"endpoint", "region", "profile", "ca_bundle"};

static int str_opt(const char *name)
{
    for (int i = 0; i < (int)(sizeof(str_opts) / sizeof(str_opts[0])); i++)
        if (!strcmp(name, str_opts[i]))
            return i;
    return -1;
}

/* One "NAME=VALUE" of pcrfs_open(). @return 0 or -EINVAL/-ENOMEM (errbuf). */
static int take_option(pcrfs_store *s, const char *opt, bool remote)
{
    const char *eq = strchr(opt, '='), *val;
    char name[32], msg[480] = "";
    int rc, i;

    if (!eq || eq == opt || (size_t)(eq - opt) >= sizeof(name))
        return api_fail(-EINVAL, "option %.64s: want NAME=VALUE", opt);
    snprintf(name, sizeof(name), "%.*s", (int)(eq - opt), opt);
    val = eq + 1;
    if (pcr_views_opt_desc(name))
        rc = pcr_views_opt(&s->args, name, val, msg, sizeof(msg));
    else if ((i = str_opt(name)) >= 0) {
        /* strings the backend checks (url.c), as the daemon takes them */
        if (!remote)
            return api_fail(-EINVAL,
                            "%s=: only for a store in object storage (s3://, http://, "
                            "https://)",
                            name);
        rc = val[0] ? 0 : -1;
        if (rc) {
            pcr_opt_msg(msg, sizeof(msg), name, val, "want a value");
        } else {
            char *copy = strdup(val);

            if (!copy)
                return api_fail(-ENOMEM, "out of memory");
            free(s->str[i]);
            s->str[i] = copy;
            s->http.endpoint = s->str[0];
            s->http.region = s->str[1];
            s->http.profile = s->str[2];
            s->http.ca_bundle = s->str[3];
        }
    } else if (pcr_store_opt_remote_only(name) && !remote)
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
    api_node_inst_free(in);
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
        struct pcr_http_opts ho = s->http;

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
    for (size_t i = 0; i < sizeof(s->str) / sizeof(s->str[0]); i++)
        free(s->str[i]);
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

/* ---- paths ---------------------------------------------------------------------------- */

struct node {
    const struct pcr_view *v; /* NULL: the root */
    bool is_dir;
    uint64_t id; /* a directory's or a file's id in v's tree */
};

/* @path -> the node it names: the root, a view's directory or file (the file's
 * view entry: with PCR_LEVEL_CURRENT the level it is served at now). */
static int resolve(struct inst *in, const char *path, struct node *n)
{
    char comp[NAME_MAX_BYTES + 1];
    const char *p = path, *end;
    struct pcr_node node;
    int rc;

    n->v = NULL;
    n->is_dir = true;
    n->id = PCR_ROOT_DIR;
    for (;;) {
        size_t len;

        while (*p == '/')
            p++;
        if (!*p)
            break;
        end = strchr(p, '/');
        len = end ? (size_t)(end - p) : strlen(p);
        if (len > NAME_MAX_BYTES)
            return api_fail(-ENAMETOOLONG, "%s: a name is longer than 255 bytes", path);
        memcpy(comp, p, len);
        comp[len] = '\0';
        p += len;
        if (!strcmp(comp, "."))
            continue;
        if (!n->is_dir)
            return api_fail(-ENOTDIR, "%s: not a directory", path);
        if (!strcmp(comp, ".."))
            return api_fail(-EINVAL, "%s: \"..\" is not resolved", path);
        if (!n->v) {
            n->v = pcr_views_root_lookup(in->views, comp);
            if (!n->v)
                return api_fail(-ENOENT, "%s: no such view", path);
            continue;
        }
        rc = n->v->ops->lookup(n->v, n->id, comp, &node);
        if (rc)
            return api_fail(rc, "%s: %s", path, strerror(-rc));
        n->is_dir = node.is_dir;
        n->id = node.id;
        if (!node.is_dir) {
            n->v = pcr_views_get(in->views, pcr_view_child_number(n->v, true, node.id), true);
            if (!n->v)
                return api_fail(-EIO, "%s: no view serves it", path);
        }
    }
    return 0;
}

/* The file at @path. */
static int resolve_file(struct inst *in, const char *path, struct node *n,
                        const struct pcr_file **f)
{
    int rc = resolve(in, path, n);

    if (rc)
        return rc;
    if (n->is_dir)
        return api_fail(-EISDIR, "%s: a directory", path);
    rc = pcr_store_file(n->v->store, n->id, f);
    return rc ? api_fail(rc, "%s: %s", path, strerror(-rc)) : 0;
}

/* This process's instance and the file at @path in it. */
static int file_at(pcrfs_store *s, const char *path, struct inst **in, struct node *n,
                   const struct pcr_file **f)
{
    errbuf[0] = '\0';
    if (!s)
        return api_fail(-EINVAL, "no store");
    if (!(*in = api_inst(s)))
        return -EIO;
    return resolve_file(*in, path, n, f);
}

int api_file_at(pcrfs_store *s, const char *path, struct inst **in, const struct pcr_view **v,
                const struct pcr_file **f)
{
    struct node n;
    int rc = file_at(s, path, in, &n, f);

    *v = rc ? NULL : n.v;
    return rc;
}

int pcrfs_stat(pcrfs_store *s, const char *path, struct pcrfs_stat *st)
{
    const struct pcr_file *f;
    struct inst *in;
    struct node n;
    int64_t size;
    int rc;

    PCRFS_INST(in, s);
    memset(st, 0, sizeof(*st));
    rc = resolve(in, path, &n);
    if (rc)
        return rc;
    if (n.is_dir) {
        st->is_dir = 1;
        return 0;
    }
    rc = pcr_store_file(n.v->store, n.id, &f);
    if (rc)
        return api_fail(rc, "%s: %s", path, strerror(-rc));
    size = pcr_view_size(n.v, f);
    if (size < 0)
        return api_fail((int)size, "%s: %s", path, strerror((int)-size));
    st->size = (uint64_t)size;
    st->file_id = n.id;
    return 0;
}

int pcrfs_readdir(pcrfs_store *s, const char *path, uint64_t *pos, char *name, size_t namelen,
                  int *is_dir)
{
    char namebuf[NAMEBUF];
    struct pcr_dirent de;
    const char *nm;
    struct inst *in;
    struct node n;
    uint64_t p = *pos;
    int rc;

    PCRFS_INST(in, s);
    rc = resolve(in, path, &n);
    if (rc)
        return rc;
    if (!n.is_dir)
        return api_fail(-ENOTDIR, "%s: not a directory", path);
    if (!n.v) {
        const struct pcr_view *v =
            p < PCR_VIEWS_ROOT_MAX ? pcr_views_root(in->views, (unsigned)p) : NULL;
        if (!v)
            return 0;
        nm = v->name;
        *is_dir = 1;
    } else {
        rc = n.v->ops->readdir(n.v, n.id, &p, &de, namebuf, sizeof(namebuf));
        if (rc == -ENOENT)
            return 0;
        if (rc)
            return api_fail(rc, "%s: %s", path, strerror(-rc));
        nm = de.name;
        *is_dir = de.node.is_dir;
    }
    if (strlen(nm) >= namelen)
        return api_fail(-ENAMETOOLONG, "%s: a name longer than the buffer", path);
    memcpy(name, nm, strlen(nm) + 1);
    *pos = p + 1;
    return 1;
}

int pcrfs_file_open(pcrfs_store *s, const char *path, pcrfs_file **out)
{
    const struct pcr_file *f;
    struct pcrfs_file *h;
    struct inst *in;
    struct node n;
    int rc;

    *out = NULL;
    rc = file_at(s, path, &in, &n, &f);
    if (rc)
        return rc;
    h = calloc(1, sizeof(*h));
    if (!h)
        return api_fail(-ENOMEM, "out of memory");
    h->in = in;
    h->v = n.v;
    h->f = f;
    h->size = pcr_view_size(n.v, f);
    if (h->size < 0) {
        rc = (int)h->size;
        free(h);
        return api_fail(rc, "%s: %s", path, strerror(-rc));
    }
    rc = pcr_view_open(n.v, f, &h->state);
    if (rc) {
        free(h);
        return api_fail(rc, "%s: %s", path, strerror(-rc));
    }
    *out = h;
    return 0;
}

int64_t pcrfs_file_size(const pcrfs_file *f)
{
    if (f->ctl)
        return api_ctl_file_size(f);
    /* a node's open (pcrfs_node_open()) leaves it to the first ask */
    if (f->size < 0 && f->v && f->f)
        return pcr_view_size(f->v, f->f);
    return f->size;
}

ssize_t pcrfs_file_read(pcrfs_file *f, void *buf, size_t len, uint64_t off)
{
    ssize_t n;

    errbuf[0] = '\0';
    if (f->ctl)
        return api_ctl_file_read(f, buf, len, off);
    n = pcr_view_read(f->v, NULL, f->state, buf, len, off);
    return n < 0 ? api_fail((int)n, "%s", strerror((int)-n)) : n;
}

void pcrfs_file_close(pcrfs_file *f)
{
    if (!f)
        return;
    if (f->ctl) {
        api_ctl_file_close(f);
        return;
    }
    pcr_view_close(f->v, f->state);
    free(f);
}

/* Views whose opens change nothing read without a handle (pcr_store_pread(): no
 * allocation); the others open, read and close. */
ssize_t pcrfs_read(pcrfs_store *s, const char *path, void *buf, size_t len, uint64_t off)
{
    const struct pcr_file *f;
    struct pcrfs_file *h;
    struct inst *in;
    struct node n;
    ssize_t got;
    int rc;

    rc = file_at(s, path, &in, &n, &f);
    if (rc)
        return rc;
    if (!n.v->desc->needs_open) {
        got = pcr_view_read(n.v, f, NULL, buf, len, off);
        if (got >= 0 && off == 0)
            pcr_view_count(&n.v->ctr->opens, 1);
        return got < 0 ? api_fail((int)got, "%s: %s", path, strerror((int)-got)) : got;
    }
    rc = pcrfs_file_open(s, path, &h);
    if (rc)
        return rc;
    got = pcrfs_file_read(h, buf, len, off);
    pcrfs_file_close(h);
    return got;
}

int pcrfs_record(pcrfs_store *s, const char *path, uint64_t *record, uint64_t *file_id)
{
    const struct pcr_file *f;
    struct pcr_file_info fi;
    struct inst *in;
    struct node n;
    int rc;

    rc = file_at(s, path, &in, &n, &f);
    if (rc)
        return rc;
    if (n.v->store != in->store)
        return api_fail(-ENODATA, "%s: a token file, in no image record", path);
    pcr_file_info(f, &fi);
    *record = fi.record;
    *file_id = fi.id;
    return 0;
}

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

/* The store's own options (store/opts.c, and the strings above), then the views'. */
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
    } else if (str_opt(name) >= 0) {
        rc = value[0] ? 0 : -1;
        if (rc)
            pcr_opt_msg(msg, sizeof(msg), name, value, "want a value");
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
