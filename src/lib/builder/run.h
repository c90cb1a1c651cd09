/* pcrfs build — the runs behind the public build calls (src/lib/api/build.c): one
 * build's options, parsed from "NAME=VALUE" strings, and the three runs. */
#ifndef PCRFS_BUILD_RUN_H
#define PCRFS_BUILD_RUN_H

#include <stddef.h>
#include <stdint.h>
#include "builder/builder.h"
#include "builder/tokimport.h"

struct pcr_bld_opts {
    struct build b;
    struct tokimport_opts topts;
    uint64_t tokcap;
    const char *scans;     /* scans=, "default" by default */
    const char *plan;      /* plan= */
    uint64_t part, nparts; /* part=I/N */
    const char *build_opt; /* the first option a plan fixes, as mkpcrfs(1) names it */
    char msg[1024];        /* a usage error of a run (-EINVAL) */
};

/* Parse @opts (NULL-ended "NAME=VALUE") into @o, defaults first, then check that they
 * go together. @return 0; -EINVAL and @msg. @o is to be freed either way. */
int pcr_bld_opts_parse(struct pcr_bld_opts *o, const char *const *opts, char *msg, size_t len);
/* One option, alone. @return 0; -EINVAL; -ENOENT not a build option (@msg). */
int pcr_bld_option_check(const char *name, const char *value, char *msg, size_t len);
void pcr_bld_opts_free(struct pcr_bld_opts *o);

/* The runs (o->b.rep set by the caller). @return 0; -EINVAL a usage error (o->msg);
 * -ECANCELED; another negative errno (reported through the log hook). */
int pcr_bld_build(struct pcr_bld_opts *o, const char *src, const char *out);
int pcr_bld_plan(struct pcr_bld_opts *o, const char *src, const char *plan);
int pcr_bld_merge(struct pcr_bld_opts *o, const char *out, const char *const *parts, size_t n);

#endif
