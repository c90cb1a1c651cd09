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

#include "pcrfs/backend.h"
#include "pcrfs/pcrfs.h"
#include "pcrfs/store.h"
#include "util/optparse.h"
#include "view/view.h"

#define NAME_MAX_BYTES 255
#define NAMEBUF        512

/* One opening of the store, in one process. */
struct inst {
    struct pcr_store *store;
    struct pcr_store *tokstore; /* NULL: none */
    struct pcr_views *views;
    pid_t pid; /* the process it belongs to */
};

struct pcrfs_store {
    char *path;
    struct pcr_views_args args;  /* the views' options, parsed */
    struct pcr_store_opts sopts; /* bwlimit=, readahead=, cache=, ... (store/opts.c) */
    struct pcr_http_opts http;   /* the rest of the backend's options */
    char *str[4];                /* endpoint=, region=, profile=, ca_bundle= (owned) */
    _Atomic(struct inst *) cur;
};

struct pcrfs_file {
    struct inst *in;
    const struct pcr_view *v;
    const struct pcr_file *f;
    void *state;
    int64_t size;
};

/* ---- errors ---------------------------------------------------------------------- */

static _Thread_local char errbuf[512];

__attribute__((format(printf, 2, 3))) static int fail(int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
    va_end(ap);
    return rc;
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

static void atfork_child(void)
{
    pthread_mutex_init(&reopen_lock, NULL);
}

static void atfork_register(void)
{
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
        return fail(-EINVAL, "option %.64s: want NAME=VALUE", opt);
    snprintf(name, sizeof(name), "%.*s", (int)(eq - opt), opt);
    val = eq + 1;
    if (pcr_views_opt_desc(name))
        rc = pcr_views_opt(&s->args, name, val, msg, sizeof(msg));
    else if ((i = str_opt(name)) >= 0) {
        /* strings the backend checks (url.c), as the daemon takes them */
        if (!remote)
            return fail(-EINVAL,
                        "%s=: only for a store in object storage (s3://, http://, "
                        "https://)",
                        name);
        rc = val[0] ? 0 : -1;
        if (rc) {
            pcr_opt_msg(msg, sizeof(msg), name, val, "want a value");
        } else {
            char *copy = strdup(val);

            if (!copy)
                return fail(-ENOMEM, "out of memory");
            free(s->str[i]);
            s->str[i] = copy;
            s->http.endpoint = s->str[0];
            s->http.region = s->str[1];
            s->http.profile = s->str[2];
            s->http.ca_bundle = s->str[3];
        }
    } else if (pcr_store_opt_remote_only(name) && !remote)
        return fail(-EINVAL,
                    "%s=: only for a store in object storage (s3://, http://, "
                    "https://)",
                    name);
    else
        rc = pcr_store_opt(&s->sopts, name, val, msg, sizeof(msg)); /* store/opts.c */
    if (rc == 1)
        return fail(-EINVAL, "%s: not an option of pcrfs(3)", name);
    if (rc == -ENOMEM)
        return fail(-ENOMEM, "out of memory");
    return rc ? fail(-EINVAL, "%s", msg) : 0;
}

static void inst_free(struct inst *in)
{
    if (!in)
        return;
    pcr_views_close(in->views);
    pcr_store_close(in->tokstore); /* before the store it belongs to */
    pcr_store_close(in->store);
    free(in);
}

/* Open the store and its views in this process. @return 0 or -errno (errbuf). */
static int inst_open(const pcrfs_store *s, struct inst **out)
{
    struct inst *in = calloc(1, sizeof(*in));
    char err[480] = "";
    int rc;

    if (!in)
        return fail(-ENOMEM, "out of memory");
    in->pid = getpid();
    if (pcr_url_is_remote(s->path)) {
        struct pcr_http_opts ho = s->http;

        pcr_store_opts_http(&s->sopts, &ho);
        rc = pcr_store_open_url(s->path, &ho, &in->store, err, sizeof(err));
    } else
        rc = pcr_store_open(s->path, &in->store, err, sizeof(err));
    if (rc) {
        free(in);
        return fail(rc, "%s", err[0] ? err : strerror(-rc));
    }
    rc = pcr_store_open_tokens(in->store, &in->tokstore, err, sizeof(err));
    if (rc && rc != -ENOENT) {
        inst_free(in);
        return fail(rc, "%s", err[0] ? err : strerror(-rc));
    }
    if (pcr_store_levels(in->store) < 1 || pcr_store_levels(in->store) > PCR_MAX_LEVELS) {
        unsigned levels = pcr_store_levels(in->store);

        inst_free(in);
        return fail(-EINVAL, "%s: the store has %u levels", s->path, levels);
    }
    rc = pcr_views_open(in->store, in->tokstore, &s->args, &in->views, err, sizeof(err));
    if (rc == 0)
        rc = pcr_views_start(in->views, err, sizeof(err));
    if (rc) {
        inst_free(in);
        return fail(rc, "%s", err[0] ? err : strerror(-rc));
    }
    pcr_store_opts_apply(&s->sopts, in->store);
    *out = in;
    return 0;
}

int pcrfs_open(const char *path_or_url, const char *const *options, pcrfs_store **out)
{
    pcrfs_store *s;
    struct inst *in = NULL;
    bool remote;
    int rc = 0;

    errbuf[0] = '\0';
    *out = NULL;
    if (!path_or_url || !path_or_url[0])
        return fail(-EINVAL, "no store given");
    pthread_once(&atfork_once, atfork_register);
    s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(path_or_url))) {
        free(s);
        return fail(-ENOMEM, "out of memory");
    }
    s->sopts = (struct pcr_store_opts)PCR_STORE_OPTS_INIT;
    remote = pcr_url_is_remote(path_or_url);
    for (const char *const *o = options; o && *o && rc == 0; o++)
        rc = take_option(s, *o, remote);
    if (rc == 0)
        rc = inst_open(s, &in);
    if (rc) {
        pcrfs_close(s);
        return rc;
    }
    atomic_store(&s->cur, in);
    *out = s;
    return 0;
}

void pcrfs_close(pcrfs_store *s)
{
    struct inst *in;

    if (!s)
        return;
    in = atomic_load(&s->cur);
    /* a parent's instance in a child is left alone (see the head comment) */
    if (in && in->pid == getpid())
        inst_free(in);
    pcr_views_args_free(&s->args);
    pcr_store_opts_free(&s->sopts);
    for (size_t i = 0; i < sizeof(s->str) / sizeof(s->str[0]); i++)
        free(s->str[i]);
    free(s->path);
    free(s);
}

/* This process's instance, reopened on the first call after a fork. NULL: errbuf. */
static struct inst *inst_get(pcrfs_store *s)
{
    struct inst *in = atomic_load_explicit(&s->cur, memory_order_acquire), *fresh = NULL;
    pid_t me = getpid();

    if (in && in->pid == me)
        return in;
    pthread_mutex_lock(&reopen_lock);
    in = atomic_load(&s->cur);
    if (!in || in->pid != me) {
        if (inst_open(s, &fresh) == 0) {
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
            return fail(-ENAMETOOLONG, "%s: a name is longer than 255 bytes", path);
        memcpy(comp, p, len);
        comp[len] = '\0';
        p += len;
        if (!strcmp(comp, "."))
            continue;
        if (!n->is_dir)
            return fail(-ENOTDIR, "%s: not a directory", path);
        if (!strcmp(comp, ".."))
            return fail(-EINVAL, "%s: \"..\" is not resolved", path);
        if (!n->v) {
            n->v = pcr_views_root_lookup(in->views, comp);
            if (!n->v)
                return fail(-ENOENT, "%s: no such view", path);
            continue;
        }
        rc = n->v->ops->lookup(n->v, n->id, comp, &node);
        if (rc)
            return fail(rc, "%s: %s", path, strerror(-rc));
        n->is_dir = node.is_dir;
        n->id = node.id;
        if (!node.is_dir) {
            n->v = pcr_views_get(in->views, pcr_view_child_number(n->v, true, node.id), true);
            if (!n->v)
                return fail(-EIO, "%s: no view serves it", path);
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
        return fail(-EISDIR, "%s: a directory", path);
    rc = pcr_store_file(n->v->store, n->id, f);
    return rc ? fail(rc, "%s: %s", path, strerror(-rc)) : 0;
}

#define INST_OR_FAIL(in, s)                                                                        \
    do {                                                                                           \
        errbuf[0] = '\0';                                                                          \
        if (!(s))                                                                                  \
            return fail(-EINVAL, "no store");                                                      \
        if (!((in) = inst_get(s)))                                                                 \
            return -EIO;                                                                           \
    } while (0)

/* This process's instance and the file at @path in it. */
static int file_at(pcrfs_store *s, const char *path, struct inst **in, struct node *n,
                   const struct pcr_file **f)
{
    errbuf[0] = '\0';
    if (!s)
        return fail(-EINVAL, "no store");
    if (!(*in = inst_get(s)))
        return -EIO;
    return resolve_file(*in, path, n, f);
}

int pcrfs_stat(pcrfs_store *s, const char *path, struct pcrfs_stat *st)
{
    const struct pcr_file *f;
    struct inst *in;
    struct node n;
    int64_t size;
    int rc;

    INST_OR_FAIL(in, s);
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
        return fail(rc, "%s: %s", path, strerror(-rc));
    size = pcr_view_size(n.v, f);
    if (size < 0)
        return fail((int)size, "%s: %s", path, strerror((int)-size));
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

    INST_OR_FAIL(in, s);
    rc = resolve(in, path, &n);
    if (rc)
        return rc;
    if (!n.is_dir)
        return fail(-ENOTDIR, "%s: not a directory", path);
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
            return fail(rc, "%s: %s", path, strerror(-rc));
        nm = de.name;
        *is_dir = de.node.is_dir;
    }
    if (strlen(nm) >= namelen)
        return fail(-ENAMETOOLONG, "%s: a name longer than the buffer", path);
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
        return fail(-ENOMEM, "out of memory");
    h->in = in;
    h->v = n.v;
    h->f = f;
    h->size = pcr_view_size(n.v, f);
    if (h->size < 0) {
        rc = (int)h->size;
        free(h);
        return fail(rc, "%s: %s", path, strerror(-rc));
    }
    rc = pcr_view_open(n.v, f, &h->state);
    if (rc) {
        free(h);
        return fail(rc, "%s: %s", path, strerror(-rc));
    }
    *out = h;
    return 0;
}

int64_t pcrfs_file_size(const pcrfs_file *f)
{
    return f->size;
}

ssize_t pcrfs_file_read(pcrfs_file *f, void *buf, size_t len, uint64_t off)
{
    ssize_t n;

    errbuf[0] = '\0';
    n = pcr_view_read(f->v, NULL, f->state, buf, len, off);
    return n < 0 ? fail((int)n, "%s", strerror((int)-n)) : n;
}

void pcrfs_file_close(pcrfs_file *f)
{
    if (!f)
        return;
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
        return got < 0 ? fail((int)got, "%s: %s", path, strerror((int)-got)) : got;
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
        return fail(-ENODATA, "%s: a token file, in no image record", path);
    pcr_file_info(f, &fi);
    *record = fi.record;
    *file_id = fi.id;
    return 0;
}

int pcrfs_prefetch(pcrfs_store *s, const uint64_t *records, size_t n)
{
    struct inst *in;
    int rc;

    INST_OR_FAIL(in, s);
    if (!records && n)
        return fail(-EINVAL, "no records");
    rc = pcr_store_prefetch(in->store, records, n);
    return rc ? fail(rc, "a record id out of range (1..%llu)",
                     (unsigned long long)pcr_store_nrecords(in->store))
              : 0;
}

unsigned pcrfs_levels(pcrfs_store *s)
{
    struct inst *in = s ? inst_get(s) : NULL;

    return in ? pcr_store_levels(in->store) : 0;
}

int pcrfs_set_level(pcrfs_store *s, unsigned level)
{
    struct inst *in;
    int rc;

    INST_OR_FAIL(in, s);
    rc = pcr_views_set_level(in->views, level, NULL);
    if (rc == -ENOENT)
        return fail(rc, "no dynamic/ (open with level=K)");
    return rc ? fail(rc, "%u: not a level of this store (1..%u)", level,
                     pcr_store_levels(in->store))
              : 0;
}

ssize_t pcrfs_info_json(pcrfs_store *s, char **out)
{
    struct inst *in;
    size_t len;
    int rc;

    INST_OR_FAIL(in, s);
    rc = pcr_views_info_json(in->views, s->path, NULL, out, &len);
    return rc ? fail(rc, "out of memory") : (ssize_t)len;
}

ssize_t pcrfs_stats_json(pcrfs_store *s, char **out)
{
    struct inst *in;
    size_t len;
    int rc;

    INST_OR_FAIL(in, s);
    rc = pcr_views_stats_json(in->views, NULL, out, &len);
    return rc ? fail(rc, "out of memory") : (ssize_t)len;
}
