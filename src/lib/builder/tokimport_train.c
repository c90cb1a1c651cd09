/* pcrfs build — pass 1 of the token import: every grid read and checked, the model
 * trained on all of them, and --codebook read and checked (see tokimport_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "builder/tokimport.h"
#include "builder/tokimport_int.h"

static int train(struct tokimport *t, struct pcr_tok_trainer *tr)
{
    uint64_t i, done_bytes = 0;
    uint64_t cur = UINT64_MAX, *by_image = NULL;
    int dfd = -1, rc = 0;

    /* SeiT images in file order: the data is read sequentially and messages come in
     * image order. (Files of a --tokens tree are already grouped by directory.) */
    if (t->seit) {
        by_image = pcr_try_malloc((t->nfiles ? t->nfiles : 1) * sizeof(*by_image));
        if (!by_image)
            return ti_nomem(t);
        for (i = 0; i < t->nfiles; i++)
            by_image[t->files[i].seit] = i;
    }
    pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS_READ, 0, t->nfiles, 0, t->total_bytes, false);
    for (i = 0; i < t->nfiles; i++) {
        struct tfile *f = &t->files[by_image ? by_image[i] : i];
        unsigned h, w;

        if (t->o.rep->cancel) {
            rc = -2;
            break;
        }
        if (t->seit) {
            struct pcr_seit_item it;

            pcr_seit_item(t->seit, f->seit, &it);
            f->size = it.length;
        }
        if (ti_read_grid(t, f, &dfd, &cur, t->grid, PCR_TOK_MAX_TOKENS, &h, &w) < 0) {
            if (ti_out_of_memory(t)) {
                rc = -1;
                break;
            }
            continue; /* a bad item: training goes on, the build fails after the pass */
        }
        f->h = h;
        f->w = w;
        f->hash = ti_grid_hash(t->grid, h, w);
        t->total_tokens += (uint64_t)h * w;
        /* the shape was checked by the read: -EINVAL cannot happen, -ENOMEM can */
        if (!t->bad && pcr_tok_trainer_add(tr, t->grid, h, w) < 0) {
            rc = ti_nomem(t);
            break;
        }
        done_bytes += f->size;
        pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS_READ, i + 1, t->nfiles, done_bytes,
                         t->total_bytes, false);
    }
    if (dfd >= 0)
        close(dfd);
    free(by_image);
    if (rc == 0)
        pcr_bld_progress(t->o.rep, PCRFS_BUILD_TOKENS_READ, t->nfiles, t->nfiles, done_bytes,
                         t->total_bytes, true);
    return rc;
}

/* What a --codebook file that is not a .npy is, when it is something a user is
 * likely to have (SeiT ships its codebook as a PyTorch file, codebook.ckpt, that
 * torch.load() returns as a [K, D] tensor), with how to convert it: reading a torch
 * pickle here is not worth it. @return a message, or NULL. */
static const char *codebook_kind(struct tokimport *t, const uint8_t *b, size_t len)
{
    static char msg[1024];
    const char *path = t->o.codebook, *shown = "CKPT";
    bool zip = len >= 30 && memcmp(b, "PK\003\004", 4) == 0;
    size_t nlen = zip ? (size_t)(b[26] | b[27] << 8) : 0;
    const char *name = (const char *)b + 30;

    if (zip && 30 + nlen <= len && nlen >= 4 && memcmp(name + nlen - 4, ".npy", 4) == 0)
        return "a NumPy .npz archive, not a .npy file: save the one [K, D] array with "
               "numpy.save()";
    /* torch.save() writes a zip whose first member is "<name>/data.pkl", or (before
     * PyTorch 1.6, or with _use_new_zipfile_serialization=False) a bare pickle */
    if (!(zip && 30 + nlen <= len && nlen >= 9 && memcmp(name + nlen - 9, "/data.pkl", 9) == 0) &&
        !(len >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5))
        return NULL;
    if (strspn(path, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/+-,:=@") ==
            strlen(path) &&
        strlen(path) < 300)
        shown = path;
    snprintf(msg, sizeof(msg),
             "a PyTorch file (torch.save), not a .npy file; convert it with: python3 -c "
             "'import sys, numpy, torch; numpy.save(sys.argv[2], numpy.ascontiguousarray("
             "torch.load(sys.argv[1], map_location=\"cpu\").float().numpy()))' %s codebook.npy",
             shown);
    return msg;
}

/* Read and check --codebook: first alone (@min_entries 0, before the long pass),
 * then against the largest token value (the bytes are already loaded). */
static int load_codebook(struct tokimport *t, uint64_t min_entries)
{
    const char *path = t->o.codebook, *kind;
    struct pcr_npy a;
    struct stat st;
    char why[512];
    size_t len = 0;
    int fd;

    if (t->codebook) {
        if (pcr_npy_parse(t->codebook, t->codebook_len, &a, why, sizeof(why)) < 0 ||
            pcr_npy_check_codebook(&a, min_entries, why, sizeof(why)) < 0) {
            pcr_bld_err("--codebook %s: %s", pcr_escaped(&t->esc, path), why);
            return -1;
        }
        return 0;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        pcr_bld_err("--codebook %s: %s", pcr_escaped(&t->esc, path), strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_CODEBOOK_BYTES) {
        close(fd);
        pcr_bld_err("--codebook %s: %s", pcr_escaped(&t->esc, path),
                    S_ISREG(st.st_mode) ? "larger than 256 MiB" : "not a regular file");
        return -1;
    }
    t->codebook = pcr_try_malloc((size_t)st.st_size + 1);
    if (!t->codebook) {
        close(fd);
        return ti_nomem(t);
    }
    for (;;) {
        ssize_t r = read(fd, t->codebook + len, (size_t)st.st_size + 1 - len);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;

            close(fd);
            pcr_bld_err("--codebook %s: read: %s", pcr_escaped(&t->esc, path), strerror(e));
            return -1;
        }
        if (r == 0 || (len += (size_t)r) > (size_t)st.st_size)
            break;
    }
    close(fd);
    if (len > (size_t)st.st_size) {
        pcr_bld_err("--codebook %s: the file grew while it was read", pcr_escaped(&t->esc, path));
        return -1;
    }
    t->codebook_len = len;
    if ((kind = codebook_kind(t, t->codebook, len)) != NULL) {
        pcr_bld_err("--codebook %s: %s", pcr_escaped(&t->esc, path), kind);
        return -1;
    }
    if (pcr_npy_parse(t->codebook, len, &a, why, sizeof(why)) < 0 ||
        pcr_npy_check_codebook(&a, min_entries, why, sizeof(why)) < 0) {
        pcr_bld_err("--codebook %s: %s", pcr_escaped(&t->esc, path), why);
        return -1;
    }
    return 0;
}

int tokimport_scan(const struct tokimport_opts *o, struct tokimport **out)
{
    struct tokimport *t = calloc(1, sizeof(*t));
    struct pcr_tok_train_opts to = {0};
    struct pcr_tok_trainer *tr = NULL;
    const char *src;
    char err[1024] = "";
    int rc;

    *out = NULL;
    if (!t)
        return pcr_bld_nomem(o->rep);
    t->o = *o;
    if (!t->o.per_shard)
        t->o.per_shard = TOKIMPORT_PER_SHARD;
    t->stop = &o->rep->cancel;
    t->rootfd = -1;
    for (unsigned k = 0; k < 2; k++) {
        struct stat st;

        if (o->skip[k] && stat(o->skip[k], &st) == 0 && S_ISDIR(st.st_mode)) {
            t->skip[t->nskip].dev = st.st_dev;
            t->skip[t->nskip].ino = st.st_ino;
            t->skip[t->nskip++].store = k == 0;
        }
    }
    rc = o->codebook ? load_codebook(t, 0) : 0;
    if (rc == 0)
        rc = o->npy_dir ? ti_npy_walk(t) : ti_seit_tree(t);
    /* a pass that met a bad item goes on; one out of memory stops here */
    if (rc == 0 && ti_out_of_memory(t))
        rc = -1;
    if (rc == 0)
        rc = ti_number_tree(t);
    src = o->npy_dir ? o->npy_dir : o->seit_data;
    if (rc == 0 && t->bad == 0 && t->nfiles == 0) {
        pcr_bld_err("%s: no token grid found%s", pcr_escaped(&t->esc, src),
                    o->npy_dir ? " (no .npy file)" : "");
        rc = -1;
    }
    if (rc == 0) {
        t->grid = pcr_try_malloc((size_t)PCR_TOK_MAX_TOKENS * sizeof(*t->grid));
        to.coder = o->coder;
        /* the coder was checked with the options: -EINVAL cannot happen, -ENOMEM can */
        if (!t->grid || pcr_tok_trainer_new(&to, &tr) < 0)
            rc = ti_nomem(t);
        else
            rc = train(t, tr);
    }
    if (rc == 0 && t->bad) {
        if (t->bad > MAX_REPORTED)
            pcr_bld_err("... and %" PRIu64 " more", t->bad - MAX_REPORTED);
        pcr_bld_err("%" PRIu64 " bad token %s in %s%s", t->bad, t->bad == 1 ? "input" : "inputs",
                    pcr_escaped(&t->esc, src),
                    /* every image failing is the sign of a wrong shape */
                    t->seit && !o->seit_h && t->bad == t->nfiles
                        ? " (SeiT grids are taken as 32x32: see --seit-shape)"
                        : "");
        rc = -1;
    }
    if (rc == 0) {
        rc = pcr_tok_trainer_finish(tr, &t->model, &t->rep, err, sizeof(err));
        tr = NULL;
        if (rc < 0) {
            pcr_bld_err("training the token model: %s", err[0] ? err : strerror(-rc));
            rc = -1;
        }
    }
    if (tr)
        pcr_tok_trainer_free(tr);
    if (rc == 0 && o->codebook)
        rc = load_codebook(t, (uint64_t)t->rep.max_value + 1);
    if (rc == 0 && *t->stop)
        rc = -2;
    if (rc < 0) {
        tokimport_free(t);
        return rc == -2 ? -2 : -1;
    }
    free(t->grid);
    t->grid = NULL;
    *out = t;
    return 0;
}
