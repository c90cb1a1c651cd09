/* pcrfs tools — shared helpers (see tool.h). */
#include <errno.h>
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

/* util/xalloc.h's failures end here, with the program's name. */
static void oom_hook(void)
{
    tool_oom();
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
    pcr_oom_hook = oom_hook;
    pcrfs_set_log(log_hook, NULL, verbose ? 3 : 1);
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
