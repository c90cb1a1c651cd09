/* pcrfs tools — shared helpers (see tool.h). */
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tool.h"
#include "util/optparse.h"
#include "util/utf8.h"

const char *tool_prog = "pcrfs";

void (*tool_oom_hook)(void);

/* Serialises every writer of stderr; status_drawn: the status line is on the
 * terminal now (under the lock). */
static pthread_mutex_t stderr_mutex = PTHREAD_MUTEX_INITIALIZER;
static bool status_drawn;

static void status_erase_locked(void)
{
    if (status_drawn) {
        fputs("\r\033[K", stderr);
        status_drawn = false;
    }
}

void tool_status_show(const char *line)
{
    pthread_mutex_lock(&stderr_mutex);
    /* "\033[K" clears what a longer previous line left to the right */
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    status_drawn = true;
    pthread_mutex_unlock(&stderr_mutex);
}

void tool_status_clear(void)
{
    pthread_mutex_lock(&stderr_mutex);
    status_erase_locked();
    fflush(stderr);
    pthread_mutex_unlock(&stderr_mutex);
}

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    /* Format first, print under the lock in one call: a line is never split. */
    char line[4096];

    vsnprintf(line, sizeof(line), fmt, ap);
    pthread_mutex_lock(&stderr_mutex);
    status_erase_locked();
    fprintf(stderr, "%s: %s%s\n", tool_prog, kind, line);
    fflush(stderr);
    pthread_mutex_unlock(&stderr_mutex);
}

void tool_oom(void)
{
    /* No formatting, no allocation: this runs when memory is gone. */
    fprintf(stderr, "%s: out of memory\n", tool_prog);
    if (tool_oom_hook)
        tool_oom_hook();
    exit(1);
}

void *tool_xmalloc(size_t n)
{
    return tool_xrealloc(NULL, n);
}

void *tool_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        tool_oom();
    return p;
}

char *tool_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;

    return memcpy(tool_xmalloc(n), s, n);
}

void *tool_grow(void *p, uint64_t *cap, uint64_t first, size_t size)
{
    uint64_t ncap = *cap ? *cap * 2 : first;

    if (ncap > SIZE_MAX / size)
        tool_oom(); /* cannot be allocated anyway */
    p = tool_xrealloc(p, (size_t)ncap * size);
    *cap = ncap;
    return p;
}

char *tool_join(const char *rel, const char *name)
{
    size_t a = strlen(rel), n = strlen(name);
    char *p = tool_xmalloc(a + n + 2);

    if (a) {
        memcpy(p, rel, a);
        p[a++] = '/';
    }
    memcpy(p + a, name, n + 1);
    return p;
}

void tool_err(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void tool_warn(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void tool_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", tool_prog);
    exit(2);
}

void tool_getopt_error(int c, char **argv)
{
    /* getopt_long() leaves the offending word at argv[optind - 1]; a short option
     * inside a cluster ("-qx") is named by optopt. */
    const char *word = optind > 0 ? argv[optind - 1] : "?";
    bool is_short = optopt > 0 && optopt < 128 && word[0] == '-' && word[1] != '-';

    if (c == ':') {
        if (is_short)
            tool_usage_error("option '-%c' requires an argument", optopt);
        tool_usage_error("option '%s' requires an argument", word);
    }
    if (is_short)
        tool_usage_error("invalid option '-%c'", optopt);
    tool_usage_error("unrecognized option '%s'", word);
}

/* The library's messages (pcrfs_set_log(): 0 error, 1 warning, 2 info, 3 debug). */
static void log_hook(int level, const char *msg, void *ctx)
{
    (void)ctx;
    switch (level) {
    case 0:
        tool_err("%s", msg);
        break;
    case 1:
        tool_warn("%s", msg);
        break;
    case 2:
        tool_err("%s", msg);
        break;
    default:
        tool_err("debug: %s", msg);
        break;
    }
}

void tool_log_init(bool verbose)
{
    pcrfs_set_log(log_hook, NULL, verbose ? 3 : 1);
}

void tool_buf_reset(struct tool_buf *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

void tool_buf_reserve(struct tool_buf *b, size_t len)
{
    if (len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *s;

        while (cap < len + 1)
            cap *= 2;
        s = tool_xrealloc(b->s, cap);
        if (!b->s)
            s[0] = '\0';
        b->s = s;
        b->cap = cap;
    }
}

void tool_buf_add(struct tool_buf *b, const void *data, size_t len)
{
    tool_buf_reserve(b, b->len + len);
    memcpy(b->s + b->len, data, len);
    b->len += len;
    b->s[b->len] = '\0';
}

void tool_buf_free(struct tool_buf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

void tool_escape(struct tool_buf *b, const char *name, size_t len)
{
    tool_buf_reserve(b, b->len + PCR_UTF8_ESCAPE_MAX(len));
    b->len += pcr_utf8_escape(b->s + b->len, name, len);
}

const char *tool_escaped(struct tool_buf *b, const char *name)
{
    tool_buf_reset(b);
    tool_escape(b, name, strlen(name));
    return b->s;
}

void tool_opt_check(int rc, const char *msg)
{
    if (rc != 0)
        tool_usage_error("%s", msg);
}

uint64_t tool_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max)
{
    char msg[512];
    uint64_t v = 0;

    tool_opt_check(pcr_opt_uint(name, s, min, max, NULL, &v, msg, sizeof(msg)), msg);
    return v;
}

double tool_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Never change a source tree, not even its access times where the kernel lets us say so:
 * O_NOATIME is refused (EPERM) on files we do not own, then open without it. */
int tool_open_noatime(int dirfd, const char *path, int flags)
{
    int fd = openat(dirfd, path, flags | O_NOATIME);

    if (fd < 0 && errno == EPERM)
        fd = openat(dirfd, path, flags);
    return fd;
}

/* Open @rel (relative to @base) with @flags. A path longer than the kernel takes
 * at once (deep trees) is opened one component at a time; intermediate components
 * are followed like the walk followed them (symlinks included). */
int tool_open_rel(int base, const char *rel, int flags)
{
    char *copy, *p, *slash;
    int cur, fd, e;

    if (!rel[0])
        rel = ".";
    fd = tool_open_noatime(base, rel, flags);
    if (fd >= 0 || errno != ENAMETOOLONG)
        return fd;
    copy = tool_xstrdup(rel);
    cur = base;
    p = copy;
    while ((slash = strchr(p, '/')) != NULL) {
        int nfd;

        *slash = '\0';
        nfd = openat(cur, p, O_PATH | O_DIRECTORY | O_CLOEXEC);
        e = errno;
        if (cur != base)
            close(cur);
        if (nfd < 0) {
            free(copy);
            errno = e;
            return -1;
        }
        cur = nfd;
        p = slash + 1;
    }
    fd = tool_open_noatime(cur, p, flags);
    e = errno;
    if (cur != base)
        close(cur);
    free(copy);
    errno = e;
    return fd;
}

static int remove_err; /* the first error of tool_remove_tree() */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && !remove_err)
        remove_err = -errno;
    return 0;
}

int tool_remove_tree(const char *path)
{
    remove_err = 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && !remove_err)
        remove_err = -errno;
    return remove_err;
}
