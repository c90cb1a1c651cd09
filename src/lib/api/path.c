/* pcrfs — the tree by path (include/pcrfs/pcrfs.h): stat, list, open and read a
 * path, and a file's record. Paths resolve through the views' own lookups, so names,
 * sizes and bytes are those of a mount.
 *
 * The top of the API's three files, each calling only below it: path.c (this) ->
 * node.c (nodes, control files, the handles of pcrfs_file_*) -> pcrfs.c (opening,
 * the instance per process, errors, options). All share api_internal.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/internal.h"

#define NAME_MAX_BYTES 255
#define NAMEBUF        512

/* What a path names, in this process's instance @in. */
struct target {
    struct inst *in;
    const struct pcr_view *v; /* NULL: the root */
    bool is_dir;
    uint64_t id;              /* a directory's or a file's id in v's tree */
    const struct pcr_file *f; /* a file: its entry (file_at()) */
};

/* @path -> the node it names: the root, a view's directory or file (the file's
 * view entry: with PCR_LEVEL_CURRENT the level it is served at now). */
static int resolve(struct inst *in, const char *path, struct target *n)
{
    char comp[NAME_MAX_BYTES + 1];
    const char *p = path, *end;
    struct pcr_node node;
    int rc;

    n->in = in;
    n->v = NULL;
    n->f = NULL;
    n->is_dir = true;
    n->id = PCR_ROOT_DIR;
    for (;;) {
        size_t len;

        while (*p == '/')
            p++;
        if (!*p)
            break;
        end = strchr(p, '/');
        len = end ? (size_t)(end - p) : strlen(p);
        if (len > NAME_MAX_BYTES)
            return api_fail(-ENAMETOOLONG, "%s: a name is longer than 255 bytes", path);
        memcpy(comp, p, len);
        comp[len] = '\0';
        p += len;
        if (!strcmp(comp, "."))
            continue;
        if (!n->is_dir)
            return api_fail(-ENOTDIR, "%s: not a directory", path);
        if (!strcmp(comp, ".."))
            return api_fail(-EINVAL, "%s: \"..\" is not resolved", path);
        if (!n->v) {
            n->v = pcr_views_root_lookup(in->views, comp);
            if (!n->v)
                return api_fail(-ENOENT, "%s: no such view", path);
            continue;
        }
        rc = n->v->ops->lookup(n->v, n->id, comp, &node);
        if (rc)
            return api_fail(rc, "%s: %s", path, strerror(-rc));
        n->is_dir = node.is_dir;
        n->id = node.id;
        if (!node.is_dir) {
            n->v = pcr_views_get(in->views, pcr_view_child_number(n->v, true, node.id), true);
            if (!n->v)
                return api_fail(-EIO, "%s: no view serves it", path);
        }
    }
    return 0;
}

/* This process's instance and the file at @path in it, in @n. */
static int file_at(pcrfs_store *s, const char *path, struct target *n)
{
    struct inst *in;
    int rc;

    PCRFS_INST(in, s);
    rc = resolve(in, path, n);
    if (rc)
        return rc;
    if (n->is_dir)
        return api_fail(-EISDIR, "%s: a directory", path);
    rc = pcr_store_file(n->v->store, n->id, &n->f);
    return rc ? api_fail(rc, "%s: %s", path, strerror(-rc)) : 0;
}

int pcrfs_stat(pcrfs_store *s, const char *path, struct pcrfs_stat *st)
{
    struct target t;
    struct inst *in;
    int64_t size;
    int rc;

    PCRFS_INST(in, s);
    memset(st, 0, sizeof(*st));
    rc = resolve(in, path, &t);
    if (rc)
        return rc;
    if (t.is_dir) {
        st->is_dir = 1;
        return 0;
    }
    rc = pcr_store_file(t.v->store, t.id, &t.f);
    if (rc)
        return api_fail(rc, "%s: %s", path, strerror(-rc));
    size = pcr_view_size(t.v, t.f);
    if (size < 0)
        return api_fail((int)size, "%s: %s", path, strerror((int)-size));
    st->size = (uint64_t)size;
    st->file_id = t.id;
    return 0;
}

int pcrfs_readdir(pcrfs_store *s, const char *path, uint64_t *pos, char *name, size_t namelen,
                  int *is_dir)
{
    char namebuf[NAMEBUF];
    struct pcr_dirent de;
    const char *nm;
    struct target t;
    struct inst *in;
    uint64_t p = *pos;
    int rc;

    PCRFS_INST(in, s);
    rc = resolve(in, path, &t);
    if (rc)
        return rc;
    if (!t.is_dir)
        return api_fail(-ENOTDIR, "%s: not a directory", path);
    if (!t.v) {
        const struct pcr_view *v =
            p < PCR_VIEWS_ROOT_MAX ? pcr_views_root(in->views, (unsigned)p) : NULL;
        if (!v)
            return 0;
        nm = v->name;
        *is_dir = 1;
    } else {
        rc = t.v->ops->readdir(t.v, t.id, &p, &de, namebuf, sizeof(namebuf));
        if (rc == -ENOENT)
            return 0;
        if (rc)
            return api_fail(rc, "%s: %s", path, strerror(-rc));
        nm = de.name;
        *is_dir = de.node.is_dir;
    }
    if (strlen(nm) >= namelen)
        return api_fail(-ENAMETOOLONG, "%s: a name longer than the buffer", path);
    memcpy(name, nm, strlen(nm) + 1);
    *pos = p + 1;
    return 1;
}

/* A handle on the file @t names; by path its size is known at open (a node's open
 * leaves it to the first ask). */
static int open_target(const struct target *t, const char *path, pcrfs_file **out)
{
    int64_t size = pcr_view_size(t->v, t->f);
    int rc;

    if (size < 0)
        return api_fail((int)size, "%s: %s", path, strerror((int)-size));
    rc = api_file_open_view(t->in, t->v, t->f, 0, out);
    if (rc)
        return api_fail(rc, "%s: %s", path, strerror(-rc));
    (*out)->size = size;
    return 0;
}

int pcrfs_file_open(pcrfs_store *s, const char *path, pcrfs_file **out)
{
    struct target t;
    int rc;

    *out = NULL;
    rc = file_at(s, path, &t);
    return rc ? rc : open_target(&t, path, out);
}

/* Views whose opens change nothing read without a handle (pcr_store_pread(): no
 * allocation); the others open, read and close. */
ssize_t pcrfs_read(pcrfs_store *s, const char *path, void *buf, size_t len, uint64_t off)
{
    struct pcrfs_file *h;
    struct target t;
    ssize_t got;
    int rc;

    rc = file_at(s, path, &t);
    if (rc)
        return rc;
    if (!t.v->desc->needs_open) {
        got = pcr_view_read(t.v, t.f, NULL, buf, len, off);
        if (got >= 0 && off == 0)
            pcr_view_count(&t.v->ctr->opens, 1);
        return got < 0 ? api_fail((int)got, "%s: %s", path, strerror((int)-got)) : got;
    }
    rc = open_target(&t, path, &h);
    if (rc)
        return rc;
    got = pcrfs_file_read(h, buf, len, off);
    pcrfs_file_close(h);
    return got;
}

int pcrfs_record(pcrfs_store *s, const char *path, uint64_t *record, uint64_t *file_id)
{
    struct pcr_file_info fi;
    struct target t;
    int rc;

    rc = file_at(s, path, &t);
    if (rc)
        return rc;
    if (t.v->store != t.in->store)
        return api_fail(-ENODATA, "%s: a token file, in no image record", path);
    pcr_file_info(t.f, &fi);
    *record = fi.record;
    *file_id = fi.id;
    return 0;
}

int api_file_at(pcrfs_store *s, const char *path, struct inst **in, const struct pcr_view **v,
                const struct pcr_file **f)
{
    struct target t;
    int rc = file_at(s, path, &t);

    *in = rc ? NULL : t.in;
    *v = rc ? NULL : t.v;
    *f = rc ? NULL : t.f;
    return rc;
}
