/* pcrfs build — mkpcrfs --seit: SeiT's release files (pcr_seit_open()) turned into
 * the token tree (see tokimport_int.h).
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
#include "builder/tokimport_int.h"

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
    char *const *names = ctx;

    return strcmp(names[*(const uint64_t *)a], names[*(const uint64_t *)b]);
}

/* The directory DatasetFolder would be given: the leading directories that every
 * name shares, as long as every name keeps a directory below them ("train/" of
 * "train/<class>/x.JPEG"; nothing for "<class>/x.JPEG"). @names sorted by @order, so
 * the first and last share what all share. @return its length, '/' included. */
static size_t common_root(char **names, const uint64_t *order, uint64_t n)
{
    const char *a = names[order[0]], *b = names[order[n - 1]];
    size_t root = 0;

    for (size_t i = 0; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/')
            root = i + 1;
    while (root > 0) {
        uint64_t i = 0;

        while (i < n && strchr(names[order[i]] + root, '/'))
            i++;
        if (i == n)
            break;
        /* a name with no directory below: back to the previous level */
        do
            root--;
        while (root > 0 && a[root - 1] != '/');
    }
    return root;
}

/* Labels that DatasetFolder would not reproduce: it numbers classes by sorted
 * directory name below its root (common_root()), so the class index equals SeiT's
 * label only if each class directory holds one label and the labels go 0, 1, 2, ...
 * in directory order. Only a warning: the grids are imported either way. */
static void check_labels(struct tokimport *t, char **names, const uint64_t *order, uint64_t n)
{
    uint64_t i = 0, cls = 0, mixed = 0, renumbered = 0, renum_cls = 0, renum_label = 0;
    size_t root = n ? common_root(names, order, n) : 0;
    /* names come from the file: escaped for the terminal (pcr_escape()) */
    struct pcr_sbuf first_mixed = {0}, first_renum = {0}, where = {0};

    while (i < n) {
        const char *nm = names[order[i]] + root, *slash = strchr(nm, '/');
        size_t clen = slash ? (size_t)(slash - nm) : 0;
        struct pcr_seit_item it;
        uint64_t label, j;
        bool one = true;

        pcr_seit_item(t->seit, order[i], &it);
        label = it.label;
        for (j = i + 1; j < n; j++) {
            const char *m = names[order[j]] + root;

            if (!clen || strncmp(m, nm, clen + 1) != 0)
                break;
            pcr_seit_item(t->seit, order[j], &it);
            if (it.label != label)
                one = false;
        }
        if (clen) {
            if (!one && mixed++ == 0) {
                pcr_escape(&first_mixed, nm, clen);
            } else if (one && label != cls && renumbered++ == 0) {
                pcr_escape(&first_renum, nm, clen);
                renum_cls = cls;
                renum_label = label;
            }
            cls++;
        }
        i = j;
    }
    /* all through pcr_escape(), which cannot fail (sbuf.h; printable ASCII is kept) */
    if (root) {
        pcr_escape(&where, " under tokens/", 14);
        pcr_escape(&where, names[order[0]], root - 1);
    }
    if (mixed)
        pcr_bld_warn("%s: %" PRIu64 " class director%s%s hold%s images of several labels (the "
                     "first: '%s'); DatasetFolder's labels will differ from SeiT's",
                     pcr_escaped(&t->esc, t->o.seit_names), mixed, mixed == 1 ? "y" : "ies",
                     where.s ? where.s : "", mixed == 1 ? "s" : "",
                     first_mixed.s ? first_mixed.s : PCR_ESCAPE_NOMEM);
    else if (renumbered)
        pcr_bld_warn("%s: DatasetFolder numbers classes by directory name%s: '%s' is class %" PRIu64
                     " but has SeiT label %" PRIu64 " (%" PRIu64 " class%s differ%s)",
                     pcr_escaped(&t->esc, t->o.seit_names), where.s ? where.s : "",
                     first_renum.s ? first_renum.s : PCR_ESCAPE_NOMEM, renum_cls, renum_label,
                     renumbered, renumbered == 1 ? "" : "es", renumbered == 1 ? "s" : "");
    pcr_sbuf_free(&first_mixed);
    pcr_sbuf_free(&first_renum);
    pcr_sbuf_free(&where);
}

/* Bytes SeiT's encoder does not write but its reader accepts are read as its reader
 * does (pcr_seit_decode()); say so once, since a file holding them may have been
 * written by another tool with another rule in mind. */
static void warn_odd(struct tokimport *t)
{
    uint64_t first, n;
    unsigned kinds;

    n = pcr_seit_odd(t->seit, &first, &kinds);
    if (!n)
        return;
    pcr_bld_warn("%s: %" PRIu64 " image%s (the first: image %" PRIu64 ") hold%s %s%s%s; read as "
                 "SeiT's reader reads them (a run of 255 bytes is one escape, a final 255 is "
                 "dropped)",
                 pcr_escaped(&t->esc, t->o.seit_data), n, n == 1 ? "" : "s", first,
                 n == 1 ? "s" : "",
                 kinds & PCR_SEIT_REPEATED_ESCAPE ? "a 255 byte after a 255" : "",
                 kinds == (PCR_SEIT_REPEATED_ESCAPE | PCR_SEIT_TRAILING_ESCAPE) ? " or " : "",
                 kinds & PCR_SEIT_TRAILING_ESCAPE ? "a 255 byte at the end" : "");
}

int ti_seit_tree(struct tokimport *t)
{
    struct pcr_seit_paths paths = {.data = t->o.seit_data,
                                   .index = t->o.seit_index,
                                   .labels = t->o.seit_labels,
                                   .names = t->o.seit_names};
    struct pcr_seit_opts so = {.h = t->o.seit_h, .w = t->o.seit_w};
    char err[1024] = "", buf[8192];
    uint64_t n, i, *order;
    char **names;
    /* The directories along the previous name: names sorted in byte order keep every
     * directory's entries together, so each directory is created once. */
    struct {
        const char *comp;
        size_t len;
        uint64_t dir;
    } stack[256];
    unsigned depth = 0;
    int rc;

    rc = pcr_seit_open(&paths, &so, &t->seit, err, sizeof(err));
    if (rc) {
        /* the index is looked for by pcrfs's rule, not SeiT's (pcr_seit_paths) */
        pcr_bld_err("%s%s", err[0] ? err : strerror(-rc),
                    !paths.index && (strstr(err, "no index file") || strstr(err, "no 'data.bin'"))
                        ? "; name it with --seit-index"
                        : "");
        return -1;
    }
    n = pcr_seit_count(t->seit);
    warn_odd(t);
    names = pcr_try_malloc((n ? n : 1) * sizeof(*names));
    order = pcr_try_malloc((n ? n : 1) * sizeof(*order));
    if (!names || !order) {
        free(names);
        free(order);
        return ti_nomem(t);
    }
    for (i = 0; i < n; i++) {
        struct pcr_seit_item it;

        if (pcr_seit_name(t->seit, i, buf, sizeof(buf)) < 0) {
            ti_bad(t, "SeiT image %" PRIu64 ": name too long", i);
            buf[0] = '\0';
        }
        names[i] = pcr_try_strdup(buf);
        if (!names[i]) {
            n = i; /* the names so far are freed below */
            rc = ti_nomem(t);
            break;
        }
        order[i] = i;
        pcr_seit_item(t->seit, i, &it);
        t->total_bytes += it.length;
    }
    if (rc == 0 && n > 1)
        qsort_r(order, n, sizeof(*order), cmp_name_idx, names);
    if (rc == 0 && ti_new_dir(t, 0, "", NULL) == UINT64_MAX)
        rc = -1;
    for (i = 0; rc == 0 && i < n && !t->bad; i++) {
        const char *nm = names[order[i]], *p = nm, *slash;
        unsigned level = 0;
        uint64_t dir = 0;
        struct tfile *f;
        char *tn;

        /* follow or create the directories of this name */
        while ((slash = strchr(p, '/')) != NULL) {
            size_t len = (size_t)(slash - p);

            if (level == 256) {
                ti_bad(t, "SeiT image %" PRIu64 ": more than 256 directory levels", order[i]);
                break;
            }
            if (len > 255) {
                ti_bad(t, "SeiT image %" PRIu64 ": a directory name longer than 255 bytes",
                       order[i]);
                break;
            }
            if (level < depth && stack[level].len == len &&
                memcmp(stack[level].comp, p, len) == 0) {
                dir = stack[level].dir;
            } else {
                char comp[256];

                memcpy(comp, p, len);
                comp[len] = '\0';
                dir = ti_new_dir(t, dir, comp, NULL);
                if (dir == UINT64_MAX) {
                    rc = -1; /* out of memory, said */
                    break;
                }
                stack[level].comp = p;
                stack[level].len = len;
                stack[level].dir = dir;
                depth = level + 1;
            }
            level++;
            p = slash + 1;
        }
        if (t->bad || rc < 0)
            break;
        /* the stack now holds exactly this name's directories */
        depth = level;
        tn = ti_tok_name(p);
        if (!tn && errno == ENOMEM) {
            rc = ti_nomem(t);
            break;
        }
        if (!tn) {
            ti_bad(t, "SeiT image %" PRIu64 ": the name '%s' is too long with .tok", order[i],
                   pcr_escaped(&t->esc, p));
            break;
        }
        f = ti_new_file(t, dir, tn);
        if (!f) {
            rc = -1; /* out of memory, said */
            break;
        }
        f->seit = order[i];
    }
    if (rc == 0 && !t->bad && t->o.seit_names)
        check_labels(t, names, order, n);
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(order);
    return rc;
}
