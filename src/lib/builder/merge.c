/* pcrfs_merge() (mkpcrfs --merge STORE PART...): check that the parts are all the parts of one
 * plan, then make STORE of them (the library does the copying: pcr_writer_add_part()). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "builder/builder.h"

struct part {
    const char *dir;
    struct pcr_part_info info;
};

static int by_index(const void *a, const void *b)
{
    const struct part *x = a, *y = b;

    return x->info.index < y->info.index ? -1 : x->info.index > y->info.index;
}

/* Name the parts missing from @p (sorted, no duplicate) in one line. */
static void report_missing(const struct part *p, unsigned n)
{
    /* at most 10 numbers: a fixed buffer, so that the message needs no allocation */
    char list[10 * 24] = "";
    uint64_t count = p[0].info.count, have = 0, missing = count - n, shown = 0;
    size_t used = 0;

    for (uint64_t k = 1; k <= count && shown < 10; k++) {
        if (have < n && p[have].info.index == k) {
            have++;
            continue;
        }
        used +=
            (size_t)snprintf(list + used, sizeof(list) - used, "%s%" PRIu64, shown ? ", " : "", k);
        shown++;
    }
    pcr_bld_err("missing part%s %s%s of %" PRIu64 " (plan %s): nothing was written",
                missing == 1 ? "" : "s", list, missing > shown ? ", ..." : "", count,
                p[0].info.plan);
}

/* The parts' infos into @p, checked: one plan, each index once, all there.
 * @return 0 or -1 (reported in one line). */
static int check_parts(struct part *p, unsigned n)
{
    char err[1024] = "";

    for (unsigned i = 0; i < n; i++) {
        if (pcr_part_read_info(p[i].dir, &p[i].info, err, sizeof(err)) < 0) {
            pcr_bld_err("%s", err);
            return -1;
        }
        if (strcmp(p[i].info.plan, p[0].info.plan) != 0 || p[i].info.count != p[0].info.count) {
            struct pcr_sbuf e1 = {0}, e2 = {0};

            pcr_bld_err("%s: part %" PRIu64 " of %" PRIu64
                        " of another plan (%s; %s is of plan %s)",
                        pcr_escaped(&e1, p[i].dir), p[i].info.index, p[i].info.count,
                        p[i].info.plan, pcr_escaped(&e2, p[0].dir), p[0].info.plan);
            pcr_sbuf_free(&e1);
            pcr_sbuf_free(&e2);
            return -1;
        }
    }
    qsort(p, n, sizeof(*p), by_index);
    for (unsigned i = 1; i < n; i++) {
        if (p[i].info.index == p[i - 1].info.index) {
            struct pcr_sbuf e1 = {0}, e2 = {0};

            pcr_bld_err("part %" PRIu64 " of %" PRIu64 " given twice: %s and %s", p[i].info.index,
                        p[i].info.count, pcr_escaped(&e1, p[i - 1].dir),
                        pcr_escaped(&e2, p[i].dir));
            pcr_sbuf_free(&e1);
            pcr_sbuf_free(&e2);
            return -1;
        }
    }
    if (n != p[0].info.count) {
        report_missing(p, n);
        return -1;
    }
    return 0;
}

int merge_run(struct build *b, const char *const *dirs, unsigned n)
{
    struct part *p = pcr_try_malloc(sizeof(*p) * n);
    struct pcr_writer_opts wopts = {.force = b->force};
    char err[1024] = "";
    int rc = -1;

    if (!p)
        return pcr_bld_nomem(b->rep);
    for (unsigned i = 0; i < n; i++)
        p[i].dir = dirs[i];
    if (check_parts(p, n) < 0)
        goto out;
    wopts.levels = p[0].info.levels;
    rc = pcr_writer_create(b->store, &wopts, &b->w, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EEXIST)
            pcr_bld_err("%s: already exists (--force replaces a pcrfs store)", b->store);
        else
            pcr_bld_err("creating %s: %s", b->store, err[0] ? err : strerror(-rc));
        b->err = rc == -EEXIST || rc == -ENOTDIR ? rc : 0;
        rc = -1;
        goto out;
    }
    for (unsigned i = 0; i < n; i++) {
        if (pcr_bld_progress(b->rep, PCRFS_BUILD_MERGE, i, n, 0, 0, false))
            break;
        rc = pcr_writer_add_part(b->w, p[i].dir, i == 0, err, sizeof(err));
        if (rc < 0) {
            pcr_bld_err("merging %s", err);
            goto fail;
        }
    }
    if (b->rep->cancel || pcr_bld_progress(b->rep, PCRFS_BUILD_MERGE, n, n, 0, 0, true) ||
        pcr_bld_progress(b->rep, PCRFS_BUILD_COMMIT, 0, 0, 0, 0, true))
        goto fail;
    rc = pcr_writer_finish(b->w, err, sizeof(err));
    b->w = NULL;
    if (rc < 0) {
        pcr_bld_err("writing %s: %s", b->store, err[0] ? err : strerror(-rc));
        rc = -1;
    }
    goto out;
fail:
    pcr_writer_abort(b->w);
    b->w = NULL;
    rc = -1;
out:
    free(p);
    return rc;
}
