/* pcrfs build — mkpcrfs --tokens DIR: the walk of a tree of .npy files (walk.h, the
 * same walker and rules as the image tree) and reading one grid (see
 * tokimport_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "builder/tokimport_int.h"
#include "builder/walk.h"

static bool ends_npy(const char *name)
{
    size_t n = strlen(name);

    /* "x.npy" with a non-empty stem; ".npy" alone is a hidden file, not a grid */
    return n > 4 && strcmp(name + n - 4, ".npy") == 0;
}

/* The walker's callbacks: its directory numbers are our indices (the root is 0). */

static int on_error(void *ctx, const char *msg)
{
    ti_bad(ctx, "%s", msg);
    return 0; /* every bad entry is reported before failing */
}

static void on_skip(void *ctx, const char *what, const char *why)
{
    ti_skipped(ctx, what, why);
}

static int on_dir(void *ctx, uint64_t parent, const char *name, const char *rel,
                  const struct stat *st)
{
    struct tokimport *t = ctx;

    (void)st;
    if (ti_new_dir(t, parent, name, rel) == UINT64_MAX)
        return -1; /* out of memory, said */
    /* the caller's chance to cancel (the walk polls the flag) */
    pcr_bld_progress(t->o.rep, PCRFS_BUILD_WALK, t->nfiles, 0, t->total_bytes, 0, false);
    return 0;
}

static int on_file(void *ctx, uint64_t d, int dfd, char **name, const char *rel,
                   const struct stat *st)
{
    struct tokimport *t = ctx;
    struct tfile *f;

    (void)dfd;
    (void)rel;
    if (!ends_npy(*name)) {
        ti_skipped(t, ti_npy_path(t, t->dirs[d].rel, *name), "not a .npy file");
        return 0;
    }
    /* x.npy -> x.tok: same length, renamed in place and handed over */
    memcpy(*name + strlen(*name) - 3, "tok", 3);
    f = ti_new_file(t, d, *name);
    *name = NULL;
    if (!f)
        return -1; /* out of memory, said */
    f->size = (uint64_t)st->st_size;
    t->total_bytes += f->size;
    pcr_bld_progress(t->o.rep, PCRFS_BUILD_WALK, t->nfiles, 0, t->total_bytes, 0, false);
    return 0;
}

int ti_npy_walk(struct tokimport *t)
{
    const struct walk_ops ops = {
        .ctx = t, .error = on_error, .skip = on_skip, .dir = on_dir, .file = on_file};
    struct walk_opts o = {.root_name = t->o.npy_dir, .prefix_root = true, .stop = t->stop};
    int rc;

    t->rootfd = open(t->o.npy_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t->rootfd < 0) {
        pcr_bld_err("--tokens %s: %s", pcr_escaped(&t->esc, t->o.npy_dir), strerror(errno));
        return -1;
    }
    o.rootfd = t->rootfd;
    for (unsigned k = 0; k < t->nskip; k++) {
        o.exclude[k].dev = t->skip[k].dev;
        o.exclude[k].ino = t->skip[k].ino;
        o.exclude[k].warn = t->skip[k].store;
    }
    o.nexclude = t->nskip;
    if (ti_new_dir(t, 0, "", "") == UINT64_MAX)
        return -1;
    rc = walk_tree(&o, &ops);
    if (rc == -ENOMEM)
        return ti_nomem(t);
    if (t->skipped > MAX_REPORTED)
        pcr_bld_warn("skipped %" PRIu64 " more entries of %s that are not .npy files",
                     t->skipped - MAX_REPORTED, pcr_escaped(&t->esc, t->o.npy_dir));
    return rc == -2 ? -2 : rc;
}

int ti_load_npy(struct tokimport *t, int dfd, const struct tfile *f, uint16_t *grid, size_t cap,
                unsigned *h, unsigned *w)
{
    struct pcr_npy a;
    struct stat st;
    char why[512], name[300];
    size_t len = 0;
    int fd, rc;

    fd = pcr_open_noatime(dfd, ti_npy_name(f, name, sizeof(name)), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        ti_bad(t, "%s: %s", ti_src_desc(t, f), strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > MAX_NPY_BYTES) {
        close(fd);
        ti_bad(t, "%s: %" PRIu64 " bytes, too large for a token grid of at most %u tokens",
               ti_src_desc(t, f), (uint64_t)st.st_size, PCR_TOK_MAX_TOKENS);
        return -1;
    }
    /* One byte more than the size, to see a file that grew. */
    if ((size_t)st.st_size + 1 > t->bufcap) {
        uint8_t *nb = pcr_try_realloc(t->buf, (size_t)st.st_size + 1);

        if (!nb) {
            close(fd);
            return ti_nomem(t); /* the pass stops at ti_out_of_memory() */
        }
        t->buf = nb;
        t->bufcap = (size_t)st.st_size + 1;
    }
    for (;;) {
        ssize_t r = read(fd, t->buf + len, t->bufcap - len);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;

            close(fd);
            ti_bad(t, "%s: read: %s", ti_src_desc(t, f), strerror(e));
            return -1;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len == t->bufcap) {
            close(fd);
            ti_bad(t, "%s: the file grew while it was read", ti_src_desc(t, f));
            return -1;
        }
    }
    close(fd);
    rc = pcr_npy_parse(t->buf, len, &a, why, sizeof(why));
    if (rc == 0)
        rc = pcr_npy_to_grid(&a, grid, cap, h, w, why, sizeof(why));
    if (rc) {
        ti_bad(t, "%s: %s", ti_src_desc(t, f),
               rc == -E2BIG ? "more tokens than it had when it was first read" : why);
        return -1;
    }
    return 0;
}
