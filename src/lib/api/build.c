/* pcrfs — the public build calls (include/pcrfs/pcrfs.h, "Building a store";
 * pcrfs(3), BUILDING A STORE): options parsed and checked, the caller's callbacks
 * wired to the pipeline (src/lib/builder/), and the result turned into an errno and
 * pcrfs_errmsg(). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "api/api_internal.h"
#include "builder/run.h"

/* One build per process, as pcrfs(3) says. The lock was for the out-of-memory
 * path, which held the build's temporary directory in a global and no longer
 * exists; it stays until the pipeline is reviewed for other process-wide state. */
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

enum run { RUN_BUILD, RUN_PLAN, RUN_MERGE };

static int run(enum run what, const char *a, const char *b, const char *const *parts, size_t n,
               const char *const *options, const struct pcrfs_build_cb *cb, void *ctx)
{
    struct pcr_bld_report rep = {.ctx = ctx};
    struct pcrfs_build_cb cbs = {0};
    struct pcr_bld_opts *o;
    char msg[1024] = "";
    int rc;

    if (cb) {
        /* an older caller's struct is shorter: what it lacks stays NULL */
        memcpy(&cbs, cb, cb->size < sizeof(cbs) ? cb->size : sizeof(cbs));
        cbs.size = sizeof(cbs);
        rep.cb = &cbs;
    }
    if ((what == RUN_BUILD && !b) || (what == RUN_PLAN && !b) || (what == RUN_MERGE && !a))
        return api_fail(-EINVAL, "missing %s", what == RUN_PLAN ? "PLAN" : "STORE");
    if (pthread_mutex_trylock(&build_lock) != 0)
        return api_fail(-EBUSY, "another build runs in this process");
    o = calloc(1, sizeof(*o));
    if (!o) {
        pthread_mutex_unlock(&build_lock);
        return api_fail(-ENOMEM, "out of memory");
    }
    pcr_bld_clear_error();
    rc = pcr_bld_opts_parse(o, options, msg, sizeof(msg));
    if (rc < 0) {
        api_errmsg("%s", msg);
        goto out;
    }
    o->b.rep = &rep;
    rc = what == RUN_BUILD  ? pcr_bld_build(o, a, b)
         : what == RUN_PLAN ? pcr_bld_plan(o, a, b)
                            : pcr_bld_merge(o, a, parts, n);
    if (rc == -EINVAL)
        api_errmsg("%s", o->msg);
    else if (rc == -ECANCELED)
        api_errmsg("cancelled; nothing was written");
    else if (rc < 0)
        api_errmsg("%s", pcr_bld_first_error()[0] ? pcr_bld_first_error() : strerror(-rc));
    else
        api_ok();
out:
    pcr_bld_opts_free(o);
    free(o);
    pthread_mutex_unlock(&build_lock);
    return rc;
}

int pcrfs_build(const char *src, const char *out, const char *const *options,
                const struct pcrfs_build_cb *cb, void *ctx)
{
    return run(RUN_BUILD, src, out, NULL, 0, options, cb, ctx);
}

int pcrfs_build_plan(const char *src, const char *plan, const char *const *options,
                     const struct pcrfs_build_cb *cb, void *ctx)
{
    return run(RUN_PLAN, src, plan, NULL, 0, options, cb, ctx);
}

int pcrfs_merge(const char *out, const char *const *parts, size_t n, const char *const *options,
                const struct pcrfs_build_cb *cb, void *ctx)
{
    return run(RUN_MERGE, out, NULL, parts, n, options, cb, ctx);
}

int pcrfs_build_option_check(const char *name, const char *value)
{
    char msg[1024] = "";
    int rc;

    if (!name || !value)
        return api_fail(-EINVAL, "no option");
    rc = pcr_bld_option_check(name, value, msg, sizeof(msg));
    if (rc < 0)
        return api_fail(rc, "%s", msg);
    api_ok();
    return 0;
}

int pcrfs_build_check(const char *const *options)
{
    struct pcr_bld_opts *o = calloc(1, sizeof(*o));
    char msg[1024] = "";
    int rc;

    if (!o)
        return api_fail(-ENOMEM, "out of memory");
    rc = pcr_bld_opts_parse(o, options, msg, sizeof(msg));
    build_free(&o->b);
    free(o);
    if (rc < 0)
        return api_fail(rc, "%s", msg);
    api_ok();
    return 0;
}
