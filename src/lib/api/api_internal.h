/* pcrfs — the public API's insides, shared by its three files, each of which calls
 * only the ones below it: path.c (the tree by path) -> node.c (nodes, control files,
 * attributes, the handles) -> pcrfs.c (opening, the instance per process, fork,
 * errors, options): not installed.
 */
#ifndef PCRFS_LIB_API_INTERNAL_H
#define PCRFS_LIB_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pcrfs/backend.h"
#include "pcrfs/pcrfs.h"
#include "pcrfs/store.h"
#include "view/view.h"

/* One opening of the store, in one process. */
struct inst {
    struct pcr_store *store;
    struct pcr_store *tokstore; /* NULL: none */
    struct pcr_views *views;
    pid_t pid;    /* the process it belongs to */
    bool started; /* pcr_views_start() ran (PCRFS_OPEN_DEFER_START: pcrfs_start()) */
    char *info;   /* /.pcrfs/info, rendered at open (the store never changes) */
    size_t info_len;
    const void *codebook; /* /.pcrfs/codebook.npy (the store's), or NULL */
    size_t codebook_len;
    pthread_mutex_t lock; /* guards records and every control file's pending write */
    char *records;        /* /.pcrfs/records, rendered on first use */
    size_t records_len;
    /* reads without an open: the last node whose read failed (node.c) */
    atomic_uint_fast64_t last_err_node;
};

struct pcrfs_store {
    char *path;
    char *path_abs;              /* for info: absolute (a URL as given) */
    unsigned flags;              /* PCRFS_OPEN_* */
    struct pcr_views_args args;  /* the views' options, parsed */
    struct pcr_store_opts sopts; /* bwlimit=, readahead=, cache=, endpoint=, ... (store/opts.c) */
    _Atomic(struct inst *) cur;
};

struct ctl_file;

/* An open file: a view's (v, f, its open's state) or a control file's (ctl). */
struct pcrfs_file {
    struct inst *in;
    const struct pcr_view *v;
    const struct pcr_file *f;
    void *state;
    int64_t size; /* -1: not asked yet */
    uint64_t node;
    const struct ctl_file *ctl; /* a control file, or NULL */
    char *wbuf;                 /* a writable one open for writing: pending bytes */
    size_t wlen;
};

/* Set this thread's message. */
void api_errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set this thread's message; the value is @rc (taken before the message is made: it
 * may be -errno). A macro, so that a checker sees the error returned: the analyzer
 * does not follow a variadic call, and took a failed lookup for a success. */
#define api_fail(rc, ...)                                                                          \
    ({                                                                                             \
        int api_rc_ = (rc);                                                                        \
        api_errmsg(__VA_ARGS__);                                                                   \
        api_rc_;                                                                                   \
    })
/* Clear this thread's message. */
void api_ok(void);
/* This process's instance, reopened on the first call after a fork. NULL: message. */
struct inst *api_inst(pcrfs_store *s);

/* In a function returning int: this process's instance of store @s in @in, or
 * return the error (the message cleared first). */
#define PCRFS_INST(in, s)                                                                          \
    do {                                                                                           \
        api_ok();                                                                                  \
        if (!(s))                                                                                  \
            return api_fail(-EINVAL, "no store");                                                  \
        if (!((in) = api_inst(s)))                                                                 \
            return -EIO;                                                                           \
    } while (0)

/* node.c: a handle on file @f of view @v (its open counted by the view; size -1:
 * asked on first use), for pcrfs_node_open() and path.c's opens.
 * @return 0 or -errno (no message). */
int api_file_open_view(struct inst *in, const struct pcr_view *v, const struct pcr_file *f,
                       uint64_t node, struct pcrfs_file **out);

/* path.c: this process's instance of @s and the stored file @f at @path of the
 * tree, served by view @v (its store: in->store or in->tokstore), for the
 * inspection calls (inspect.c). @return 0 or -errno (the message set). */
int api_file_at(pcrfs_store *s, const char *path, struct inst **in, const struct pcr_view **v,
                const struct pcr_file **f);

#endif
