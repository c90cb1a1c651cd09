/* pcrfs build — where a build reports to (see builder.h): the caller's
 * progress callback, which may cancel, and the log hook, which gets every message. */
#include <stdarg.h>
#include <stdio.h>
#include "builder/builder.h"
#include "common/internal.h"

/* The first error of the build running on this thread, for pcrfs_errmsg(). */
static __thread char first_error[4096];

int pcr_bld_progress(struct pcr_bld_report *r, unsigned stage, uint64_t done, uint64_t total,
                     uint64_t bytes, uint64_t total_bytes, bool final)
{
    struct pcrfs_build_progress p = {.stage = stage,
                                     .final = final,
                                     .done = done,
                                     .total = total,
                                     .bytes = bytes,
                                     .total_bytes = total_bytes};

    if (!r)
        return 0;
    if (!r->cancel && r->cb && r->cb->progress && r->cb->progress(&p, r->ctx) != 0)
        r->cancel = 1; /* polled by every loop of the build, and by the walk */
    return r->cancel;
}

static void vmsg(enum pcr_log_level level, const char *fmt, va_list ap)
{
    /* Messages quote source names, escaped by the caller (pcr_escaped()): they are
     * formatted once here, so that the first error is kept as the log shows it. */
    char msg[4096];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (level == PCR_LOG_ERR && !first_error[0])
        snprintf(first_error, sizeof(first_error), "%s", msg);
    pcr_log(level, "%s", msg);
}

void pcr_bld_err(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg(PCR_LOG_ERR, fmt, ap);
    va_end(ap);
}

void pcr_bld_warn(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg(PCR_LOG_WARN, fmt, ap);
    va_end(ap);
}

bool pcr_bld_set_nomem(struct pcr_bld_report *r)
{
    /* workers and the main thread may get here at once: one of them says it */
    return r && __atomic_exchange_n(&r->nomem, 1, __ATOMIC_RELAXED) == 0;
}

int pcr_bld_nomem(struct pcr_bld_report *r)
{
    if (pcr_bld_set_nomem(r))
        pcr_bld_err("out of memory");
    return -1;
}

void pcr_bld_clear_error(void)
{
    first_error[0] = '\0';
}

const char *pcr_bld_first_error(void)
{
    return first_error;
}
