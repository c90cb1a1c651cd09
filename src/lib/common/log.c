/* pcrfs — the log hook (see pcrfs/log.h). */
#include <stdio.h>
#include <stdarg.h>
#include "common/internal.h"

/* Messages are one line, and they often quote bytes from a store or a source file:
 * control characters (newlines, terminal escapes) become '?', so no input can forge
 * a log line or drive the terminal. Bytes >= 0x80 stay (UTF-8 names). */
static void one_line(char *m)
{
    for (; *m; m++)
        if ((unsigned char)*m < 0x20 || *m == 0x7f)
            *m = '?';
}

static pcr_log_fn log_fn;
static void *log_ctx;
static enum pcr_log_level log_max = PCR_LOG_INFO;

void pcr_log_set_hook(pcr_log_fn fn, void *ctx, enum pcr_log_level max_level)
{
    log_fn = fn;
    log_ctx = ctx;
    log_max = max_level;
}

void pcr_log(enum pcr_log_level level, const char *fmt, ...)
{
    char msg[4096]; /* a message may quote a long escaped path */
    va_list ap;

    if (!log_fn || level > log_max)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    one_line(msg);
    log_fn(level, msg, log_ctx);
}

void pcr_errf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    one_line(buf);
}
