/* pcrinfo — the modes that read a store's files: --list, --verify (every file at the
 * highest level against its checksum, every JPEG decoded: pcrfs_verify()), --cat,
 * --extract, and --fidelity (pcrfs_fidelity()).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/pcrfs.h"
#include "pcrinfo.h"
#include "progress.h"

#define IO_CHUNK (1u << 20)

static const char *kind_name(uint32_t k)
{
    return k == PCRFS_KIND_JPEG       ? "jpeg"
           : k == PCRFS_KIND_VERBATIM ? "verbatim"
           : k == PCRFS_KIND_TOKENS   ? "tokens"
                                      : "unknown";
}

/* The next file of @ps (pcrfs_file_next()), its path in @path (grown as needed).
 * @return as pcrfs_file_next(), never -ENAMETOOLONG. */
static int next_file(pcrfs_store *ps, uint64_t *pos, struct tool_buf *path,
                     struct pcrfs_file_facts *f)
{
    int rc;

    tool_buf_reserve(path, 255);
    while ((rc = pcrfs_file_next(ps, pos, path->s, path->cap, f)) == -ENAMETOOLONG)
        tool_buf_reserve(path, path->cap * 2);
    path->len = rc == 1 ? strlen(path->s) : 0;
    return rc;
}

int do_list(pcrfs_store *ps)
{
    struct tool_buf path = {0}, esc = {0};
    struct pcrfs_file_facts f = {.size = sizeof(f)};
    uint64_t pos = 0;
    int rc = 0, e;

    /* the image files, then the token files (tokens/PATH.tok), by file id */
    while ((e = next_file(ps, &pos, &path, &f)) != 0) {
        if (e < 0) {
            tool_err("%s", pcrfs_errmsg());
            if (e != -EIO)
                return 1;
            rc = 1;
            continue;
        }
        printf("%s\t%s\t%u\t", tool_escaped(&esc, path.s), kind_name(f.kind), f.chunks);
        for (unsigned k = 1; k <= f.levels && k <= PCRFS_MAX_LEVELS; k++)
            printf("%s%" PRIu64, k > 1 ? " " : "", f.level_size[k - 1]);
        putchar('\n');
    }
    tool_buf_free(&path);
    tool_buf_free(&esc);
    return rc;
}

/* Each file --verify checked: a line for each that failed. */
static int on_verified(const char *path, const char *failure, uint64_t done, uint64_t total,
                       void *ctx)
{
    struct tool_buf *esc = ctx;

    (void)done;
    (void)total;
    if (failure)
        printf("FAILED %s%s%s\n", tool_escaped(esc, path), path[0] ? ": " : "", failure);
    return 0;
}

int do_verify(pcrfs_store *ps)
{
    struct pcrfs_verify_result r = {.size = sizeof(r)};
    struct tool_buf esc = {0};
    int rc = pcrfs_verify(ps, on_verified, &esc, &r);

    tool_buf_free(&esc);
    if (rc < 0 && rc != -EBADMSG) {
        tool_err("%s", pcrfs_errmsg());
        return 1;
    }
    printf("verified %" PRIu64 " files at level %u (%" PRIu64 " JPEGs decoded)", r.files, r.level,
           r.decoded);
    if (r.tokens)
        printf(" and %" PRIu64 " token files", r.token_files);
    printf(": %" PRIu64 " failure%s\n", r.failures, r.failures == 1 ? "" : "s");
    return r.failures ? 1 : 0;
}

/* --fidelity's progress line (on a terminal, as mkpcrfs's build shows it). */
static void on_fid_progress(uint64_t done, uint64_t total, uint64_t done_bytes,
                            uint64_t total_bytes, int final, void *ctx)
{
    const struct fid_args *a = ctx;

    if (done == 0 && !final)
        progress_start(a->progress, total, total_bytes);
    progress_update(done, done_bytes, final != 0);
    if (final)
        progress_finish();
}

/* An image --fidelity could not measure: a message on stderr. */
static void on_fid_failure(const char *path, uint64_t id, unsigned level, const char *why,
                           void *ctx)
{
    struct tool_buf esc = {0};

    (void)ctx;
    if (path)
        tool_err("%s: level %u: %s", tool_escaped(&esc, path), level, why);
    else
        tool_err("file %" PRIu64 ": level %u: %s", id, level, why);
    tool_buf_free(&esc);
}

int do_fidelity(pcrfs_store *ps, const struct fid_args *a)
{
    struct pcrfs_fidelity_args fa = {.size = sizeof(fa),
                                     .flags = a->json ? PCRFS_FIDELITY_JSON : 0,
                                     .sample = a->sample,
                                     .seed = a->seed,
                                     .threshold = a->threshold,
                                     .jobs = a->jobs,
                                     .progress = on_fid_progress,
                                     .failure = on_fid_failure,
                                     .ctx = (void *)a};
    char *text = NULL;
    ssize_t n = pcrfs_fidelity(ps, &fa, &text);

    if (n < 0) {
        tool_err("%s", pcrfs_errmsg());
        return 1;
    }
    fwrite(text, 1, (size_t)n, stdout);
    free(text);
    return fa.failures ? 1 : 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copy file @path of @ps (a path of the tree a mount shows) to @fd, from one open:
 * the bytes of one version. @return 0, or a negative errno; *@reading tells which
 * side failed. */
static int copy_file(pcrfs_store *ps, const char *path, int fd, uint8_t *buf, bool *reading)
{
    pcrfs_file *h;
    uint64_t off = 0, size;
    int64_t sz;
    int rc;

    *reading = true;
    rc = pcrfs_file_open(ps, path, &h);
    if (rc < 0)
        return rc;
    sz = pcrfs_file_size(h);
    size = sz > 0 ? (uint64_t)sz : 0;
    while (off < size) {
        ssize_t n = pcrfs_file_read(h, buf, IO_CHUNK, off);

        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0) {
            rc = -EIO; /* shorter than its size: the store is inconsistent */
            break;
        }
        *reading = false;
        rc = write_all(fd, buf, (size_t)n);
        if (rc < 0)
            break;
        *reading = true;
        off += (uint64_t)n;
    }
    pcrfs_file_close(h);
    return rc;
}

/* The view of the tree a mount shows that holds the store's files at @level (1..L:
 * scanK/; L + 1 or more: full/) into @b. */
static void level_view(pcrfs_store *ps, unsigned level, struct tool_buf *b)
{
    char v[32];

    if (level >= pcrfs_levels(ps))
        snprintf(v, sizeof(v), "full");
    else
        snprintf(v, sizeof(v), "scan%u", level);
    tool_buf_reset(b);
    tool_buf_add(b, v, strlen(v));
}

/* Is ".." a component of @path? */
static bool has_dotdot(const char *path)
{
    const char *p = path;

    while ((p = strstr(p, "..")) != NULL) {
        if ((p == path || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return true;
        p += 2;
    }
    return false;
}

int do_cat(pcrfs_store *ps, const char *path, unsigned level)
{
    struct tool_buf esc = {0}, api = {0};
    char *copy, *p, *save = NULL;
    struct pcrfs_stat st;
    uint8_t *buf;
    bool reading, first = true;
    int rc;

    /* Refused before any lookup, so that the message says why (pcrinfo(1)). */
    if (!path[0]) {
        tool_err("--cat: an empty PATH (name a file of the store, e.g. cls/img.jpg)");
        return 1;
    }
    if (has_dotdot(path)) {
        tool_err("%s: '..' is refused: PATH names a file inside the store, from its root",
                 tool_escaped(&esc, path));
        tool_buf_free(&esc);
        return 1;
    }
    /* PATH from the store's root, as in a path name (empty components and "."
     * skipped), under the view of --level; tokens/... is the token tree, as the
     * mount serves it, when the store holds one */
    level_view(ps, level, &api);
    copy = tool_xstrdup(path);
    for (p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (strcmp(p, ".") == 0)
            continue;
        if (first && strcmp(p, "tokens") == 0 && pcrfs_stat(ps, "tokens", &st) == 0) {
            tool_buf_reset(&api);
            tool_buf_add(&api, "tokens", 6);
        } else {
            tool_buf_add(&api, "/", 1);
            tool_buf_add(&api, p, strlen(p));
        }
        first = false;
    }
    free(copy);
    rc = pcrfs_stat(ps, api.s, &st);
    if (rc == 0 && st.is_dir)
        rc = -EISDIR;
    if (rc == 0 && path[strlen(path) - 1] == '/')
        rc = -ENOTDIR; /* "FILE/", as open(2) says */
    if (rc < 0) {
        tool_err("%s: %s", tool_escaped(&esc, path), strerror(-rc));
        tool_buf_free(&esc);
        tool_buf_free(&api);
        return 1;
    }
    buf = tool_xmalloc(IO_CHUNK);
    rc = copy_file(ps, api.s, STDOUT_FILENO, buf, &reading);
    free(buf);
    tool_buf_free(&api);
    if (rc < 0) {
        if (reading)
            tool_err("reading %s: %s", tool_escaped(&esc, path), strerror(-rc));
        else
            tool_err("writing to standard output: %s", strerror(-rc));
        tool_buf_free(&esc);
        return 1;
    }
    return 0;
}

/* Names come from the store: never trust them to stay inside DIR. */
static bool safe_name(const char *n)
{
    return n[0] && !strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

/* SIGINT or SIGTERM during --extract: stop, remove DEST, exit 130. */
static volatile sig_atomic_t ex_interrupted;

struct extract {
    pcrfs_store *ps;
    uint8_t *buf;
    struct tool_buf path; /* of the directory being written, relative to DIR */
    struct tool_buf api;  /* the same directory in the tree a mount shows (VIEW/...) */
    struct tool_buf esc;
    const char *dest;
};

/* Step @x's directories down into @name (or back up to the lengths @keep). */
static void ex_down(struct extract *x, const char *name)
{
    if (x->path.len)
        tool_buf_add(&x->path, "/", 1);
    tool_buf_add(&x->path, name, strlen(name));
    tool_buf_add(&x->api, "/", 1);
    tool_buf_add(&x->api, name, strlen(name));
}

static void ex_up(struct extract *x, const size_t keep[2])
{
    x->path.len = keep[0];
    x->path.s[keep[0]] = '\0';
    x->api.len = keep[1];
    x->api.s[keep[1]] = '\0';
}

static const char *ex_path(struct extract *x, const char *name)
{
    size_t keep = x->path.len;
    const char *r;

    if (keep)
        tool_buf_add(&x->path, "/", 1);
    tool_buf_add(&x->path, name, strlen(name));
    tool_buf_reset(&x->esc);
    tool_escape(&x->esc, x->path.s, x->path.len);
    x->path.len = keep;
    x->path.s[keep] = '\0';
    r = x->esc.s;
    return r;
}

/* Write directory x->api of the tree to @dfd, and below. */
static int extract_dir(struct extract *x, int dfd)
{
    uint64_t pos = 0;

    for (;;) {
        char name[256];
        int rc, is_dir;

        if (ex_interrupted) {
            tool_err("%s: interrupted; the partial output is removed", x->dest);
            return -1;
        }
        rc = pcrfs_readdir(x->ps, x->api.s, &pos, name, sizeof(name), &is_dir);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            tool_err("%s: reading directory %s: %s", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".", strerror(-rc));
            return -1;
        }
        if (!safe_name(name)) {
            tool_err("%s: unsafe name in the store in %s: refused", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".");
            return -1;
        }
        if (is_dir) {
            size_t keep[2] = {x->path.len, x->api.len};
            int cfd;

            if (mkdirat(dfd, name, 0777) < 0 ||
                (cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, name), strerror(errno));
                return -1;
            }
            ex_down(x, name);
            rc = extract_dir(x, cfd);
            close(cfd);
            ex_up(x, keep);
            if (rc < 0)
                return -1;
        } else {
            size_t keep[2] = {x->path.len, x->api.len};
            bool reading = true;
            int fd;

            fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            if (fd < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, name), strerror(errno));
                return -1;
            }
            ex_down(x, name);
            rc = copy_file(x->ps, x->api.s, fd, x->buf, &reading);
            ex_up(x, keep);
            if (close(fd) < 0 && rc == 0) {
                rc = -errno;
                reading = false;
            }
            if (rc < 0) {
                if (reading)
                    tool_err("reading %s: %s", ex_path(x, name), strerror(-rc));
                else
                    tool_err("writing %s/%s: %s", x->dest, ex_path(x, name), strerror(-rc));
                return -1;
            }
        }
    }
}

static void ex_on_signal(int sig)
{
    (void)sig;
    ex_interrupted = 1;
}

/* Would the new directory @dest be inside the store directory @store? Both are
 * resolved (symbolic links, "..") through @dest's parent, which must exist. A
 * store that is not a local directory (a URL) has nothing inside. */
static bool inside_store(const char *store, const char *dest)
{
    char *copy = tool_xstrdup(dest), *slash, *parent, *rs, *rp;
    size_t n = strlen(copy), ls;
    bool in = false;

    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = '\0';
    slash = strrchr(copy, '/');
    if (!slash)
        parent = ".";
    else if (slash == copy)
        parent = "/";
    else {
        *slash = '\0';
        parent = copy;
    }
    rs = realpath(store, NULL);
    rp = realpath(parent, NULL);
    if (rs && rp) {
        ls = strlen(rs);
        in = strncmp(rp, rs, ls) == 0 && (rp[ls] == '\0' || rp[ls] == '/' || ls == 1);
    }
    free(rs);
    free(rp);
    free(copy);
    return in;
}

int do_extract(pcrfs_store *ps, const char *store, const char *dest, unsigned level)
{
    struct extract x = {.ps = ps, .dest = dest};
    struct sigaction sa = {.sa_handler = ex_on_signal}, old_int, old_term;
    struct pcrfs_stat st;
    bool tokens;
    int dfd, tfd, rc;

    if (inside_store(store, dest)) {
        tool_err("%s: inside the store %s; refused (extract to a directory outside it)", dest,
                 store);
        return 1;
    }
    tokens = pcrfs_stat(ps, "tokens", &st) == 0 && st.is_dir;
    if (mkdir(dest, 0777) < 0) {
        tool_err("%s: %s", dest, errno == EEXIST ? "already exists" : strerror(errno));
        return 1;
    }
    /* From here on DEST is ours: a failure or an interrupt removes it whole, so
     * that a re-run starts clean. */
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    x.buf = tool_xmalloc(IO_CHUNK);
    tool_buf_add(&x.path, "", 0);
    dfd = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        tool_err("%s: %s", dest, strerror(errno));
        rc = -1;
    } else {
        level_view(ps, level, &x.api);
        rc = extract_dir(&x, dfd);
        if (rc == 0 && tokens) {
            /* the token tree under tokens/, its .tok files as the mount serves them */
            tool_buf_reset(&x.api);
            tool_buf_add(&x.api, "tokens", 6);
            if (mkdirat(dfd, "tokens", 0777) < 0 ||
                (tfd = openat(dfd, "tokens", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
                    0) {
                tool_err("%s/tokens: %s", dest, strerror(errno));
                rc = -1;
            } else {
                tool_buf_add(&x.path, "tokens", 6);
                rc = extract_dir(&x, tfd);
                close(tfd);
            }
        }
        close(dfd);
    }
    free(x.buf);
    tool_buf_free(&x.path);
    tool_buf_free(&x.api);
    tool_buf_free(&x.esc);
    if (rc < 0) {
        int e = tool_remove_tree(dest);

        if (e < 0)
            tool_err("%s: the partial output is left (removing it: %s)", dest, strerror(-e));
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc < 0 && ex_interrupted)
        return 130;
    return rc < 0 ? 1 : 0;
}
