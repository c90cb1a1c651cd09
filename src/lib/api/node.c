/* pcrfs — the tree by node (include/pcrfs/pcrfs.h, "Serving the tree"): node
 * numbers, lookup, attributes, listings, reads and opens by node, the control files
 * of /.pcrfs and the extended attributes. What a daemon serving the tree needs
 * (src/fuse is the one in this project), and the handles of pcrfs_file_*, whichever
 * way they were opened. The middle of the API's three files: path.c (paths) calls
 * it, it calls pcrfs.c (the instance, errors) and nothing above.
 *
 * Node numbers. A number is computed from what it names and decodes back without a
 * table:
 *
 *    63        56 55 54                                                  0
 *   +------------+--+-----------------------------------------------------+
 *   |    view    |F |  id: the library's directory id (F=0) or file id (F=1)|
 *   +------------+--+-----------------------------------------------------+
 *
 *   view 0        the control namespace: directory 1 is the root (so the root is
 *                 PCRFS_NODE_ROOT, FUSE's root inode), directory 2 is /.pcrfs,
 *                 directory 3 /.pcrfs/prefetch (hints: prefetch_lookup()); its
 *                 files are the rows of ctl_files[] below, then the views' control
 *                 files (refurb_skipped) from CTL_VIEW_CTL on;
 *   view 1..255   the view numbers of src/lib/view/view.h (scanK/ is K, full/ L+1,
 *                 dynamic/ 0x80 and 0x80+K for its files at level K, mix/ likewise
 *                 from 0xC1, tokens/ 0x7F, refurb/ 0x7E, q90/.. 0x70..): each view's
 *                 descriptor says which, and pcr_views_open() refuses two claims
 *                 of one number.
 *
 * A view's root directory is the store's root directory (PCR_ROOT_DIR) in that
 * view. Library ids start at 1, so no node is 0. Numbers are the same for every
 * opening of a store with the same options (they name, they do not count), and a
 * file of dynamic/ or mix/ has one per level: its name leads to the number of the
 * level it is served at now, and an open of a number always serves that number's
 * level, so a reader never sees two levels in one file. Why this beats one number
 * per file with invalidations: src/fuse/inode.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "common/internal.h"

#define NODE_VIEW_SHIFT 56
#define NODE_FILE_BIT   (UINT64_C(1) << 55)
#define NODE_ID_MASK    (NODE_FILE_BIT - 1)
#define NAMEBUF         512 /* a view's made-up names (view.h's readdir) */

#define VIEW_CTL     0
#define DIR_ROOT     1 /* == PCRFS_NODE_ROOT */
#define DIR_CTL      2 /* /.pcrfs */
#define DIR_PREFETCH 3 /* /.pcrfs/prefetch: looking up "N,N,..." prefetches records */
#define CTL_LEVEL    3 /* /.pcrfs/level's row (user.pcrfs.level shows it too) */
#define CTL_VIEW_CTL 6 /* the views' control files: CTL_VIEW_CTL + their position */
#define LEVEL_XATTR  "user.pcrfs.level"

_Static_assert(CTL_VIEW_CTL + PCR_VIEWS_ROOT_MAX < 0x80, "rows take ids from 0x80 up");

struct parts {
    unsigned view;
    bool is_file;
    uint64_t id;
};

/* @return the node number, or 0 if @id does not fit (never for a real store). */
static uint64_t node_make(unsigned view, bool is_file, uint64_t id)
{
    if (id == 0 || id > NODE_ID_MASK || view > 0xff)
        return 0;
    return ((uint64_t)view << NODE_VIEW_SHIFT) | (is_file ? NODE_FILE_BIT : 0) | id;
}

static struct parts node_split(uint64_t node)
{
    struct parts p = {
        .view = (unsigned)(node >> NODE_VIEW_SHIFT),
        .is_file = (node & NODE_FILE_BIT) != 0,
        .id = node & NODE_ID_MASK,
    };
    return p;
}

/* The view entry of node @p, or NULL (the control namespace, or no such view). */
static const struct pcr_view *view_of(const struct inst *in, struct parts p)
{
    return p.view == VIEW_CTL ? NULL : pcr_views_get(in->views, p.view, p.is_file);
}

/* What a kernel may cache of @v's files (its descriptor's cache). */
static uint32_t file_flags(const struct pcr_view *v)
{
    return (v->desc->cache.names ? 0 : PCRFS_NODE_NAME_MOVES) |
           (v->desc->cache.pages ? PCRFS_NODE_PAGES : 0) |
           (v->desc->cache.direct ? PCRFS_NODE_DIRECT : 0);
}

/* The number of node @id of @v as a child: with PCR_LEVEL_CURRENT a file's is the
 * one of the level current now. 0 if it does not fit. */
static uint64_t child_node(const struct pcr_view *v, bool is_file, uint64_t id)
{
    return node_make(pcr_view_child_number(v, is_file, id), is_file, id);
}

/* ---- the control files of /.pcrfs ----------------------------------------------------
 * One row per file, in listing order. A new control file is one row: its name, an
 * id of its own from 0x80 up (kept for good: it is part of the node number; below
 * 0x80 are the views' control files, and 0x100 up is a daemon's for snapshots), its
 * flags, and its handlers; a writable one also gives the longest value it takes,
 * parses a whole value (apply, under in->lock) and says whether pending bytes can
 * still grow into one (prefix). A writable file makes the store
 * PCRFS_FEATURE_WRITABLE while present: a daemon then mounts read-write. */

struct ctl_file {
    const char *name;
    uint64_t id;
    uint32_t flags; /* PCRFS_NODE_FIXED, _SNAPSHOT, _WRITABLE | _VOLATILE */
    size_t max;     /* a writable one: the longest value, in bytes */
    bool (*present)(const struct inst *in);
    /* its bytes now: *@data (kept by @in), or malloc()ed in *@owned. 0 or -errno */
    int (*get)(struct inst *in, const char **data, size_t *len, char **owned);
    int (*apply)(struct inst *in, const char *val, size_t len);
    bool (*prefix)(const struct inst *in, const char *s, size_t len);
};

static bool always(const struct inst *in)
{
    (void)in;
    return true;
}

static bool has_dynamic(const struct inst *in)
{
    return pcr_views_dynamic(in->views);
}

static bool has_codebook(const struct inst *in)
{
    return in->codebook != NULL;
}

static int info_get(struct inst *in, const char **data, size_t *len, char **owned)
{
    (void)owned;
    *data = in->info;
    *len = in->info_len;
    return 0;
}

static int stats_get(struct inst *in, const char **data, size_t *len, char **owned)
{
    int rc = pcr_views_stats_json(in->views, NULL, owned, len);

    *data = *owned;
    return rc;
}

static int codebook_get(struct inst *in, const char **data, size_t *len, char **owned)
{
    (void)owned;
    *data = in->codebook;
    *len = in->codebook_len;
    return 0;
}

/* /.pcrfs/records: the image tree's files grouped by record, for samplers that read
 * record by record (the Python module's RecordSampler): a line "FIRST COUNT RECORD"
 * per run of file ids FIRST..FIRST+COUNT-1 in one record, in id order, after a
 * comment line. A file's id is its node number's low 55 bits in every scan view.
 * Rendered on first use (one pass over the index's file table) and kept. */
struct records_buf {
    char *p;
    size_t len, cap;
};

static int records_line(void *ctx, const struct pcr_record_run *run)
{
    struct records_buf *b = ctx;
    char line[80];
    int n = snprintf(line, sizeof(line), "%llu %llu %llu\n", (unsigned long long)run->first,
                     (unsigned long long)run->count, (unsigned long long)run->record);

    if (b->len + (size_t)n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        char *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, line, (size_t)n);
    b->len += (size_t)n;
    return 0;
}

static int records_get(struct inst *in, const char **data, size_t *len, char **owned)
{
    static const char head[] = "# first count record (pcrfs(1), /.pcrfs/records)\n";
    int rc = 0;

    (void)owned;
    pthread_mutex_lock(&in->lock);
    if (!in->records) {
        struct records_buf b = {.p = malloc(4096), .len = sizeof(head) - 1, .cap = 4096};
        rc = b.p ? 0 : -ENOMEM;
        if (rc == 0) {
            memcpy(b.p, head, sizeof(head) - 1);
            rc = pcr_store_record_runs(in->store, records_line, &b);
        }
        if (rc == 0) {
            in->records = b.p;
            in->records_len = b.len;
        } else {
            free(b.p); /* the library logged why the index could not be read */
        }
    }
    *data = in->records;
    *len = in->records_len;
    pthread_mutex_unlock(&in->lock);
    return rc < 0 ? (rc == -ENOMEM ? rc : -EIO) : 0;
}

/* /.pcrfs/level (dynamic/): "K\n" */
static int level_get(struct inst *in, const char **data, size_t *len, char **owned)
{
    int n = asprintf(owned, "%u\n", pcr_views_level_now(in->views));

    if (n < 0) {
        *owned = NULL;
        return -ENOMEM;
    }
    *data = *owned;
    *len = (size_t)n;
    return 0;
}

static void set_level(struct inst *in, unsigned k)
{
    unsigned old = k;

    if (pcr_views_set_level(in->views, k, &old) == 0 && old != k)
        pcr_log(PCR_LOG_DEBUG, "dynamic/: level %u -> %u", old, k);
}

static int level_apply(struct inst *in, const char *val, size_t len)
{
    unsigned k = pcr_view_parse_level(in->views->levels, val, len);

    if (!k)
        return -EINVAL;
    set_level(in, k);
    return 0;
}

/* Can @s still grow into a level? */
static bool level_prefix(const struct inst *in, const char *s, size_t len)
{
    unsigned k = 0;
    size_t i;

    if (len <= 4 && memcmp(s, "full", len) == 0)
        return true;
    if (len > 3)
        return false;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        k = k * 10 + (unsigned)(s[i] - '0');
    }
    return k <= in->views->levels;
}

static const struct ctl_file ctl_files[] = {
    {"info", 1, PCRFS_NODE_FIXED, 0, always, info_get, NULL, NULL},
    {"stats", 2, PCRFS_NODE_SNAPSHOT, 0, always, stats_get, NULL, NULL},
    {"level", CTL_LEVEL, PCRFS_NODE_WRITABLE | PCRFS_NODE_VOLATILE, 16, has_dynamic, level_get,
     level_apply, level_prefix},
    {"codebook.npy", 4, PCRFS_NODE_FIXED, 0, has_codebook, codebook_get, NULL, NULL},
    {"records", 5, PCRFS_NODE_FIXED, 0, always, records_get, NULL, NULL},
};
#define NCTL (sizeof(ctl_files) / sizeof(ctl_files[0]))

/* Control file @id: a row (*@row), or a view's (pcr_views_ctl(): *@row NULL, its
 * name and bytes). @return 0; -ENOENT none such in @in. */
static int ctl_find(const struct inst *in, uint64_t id, const struct ctl_file **row,
                    const char **vname, const char **vdata, size_t *vlen)
{
    size_t i;

    *row = NULL;
    for (i = 0; i < NCTL; i++)
        if (ctl_files[i].id == id) {
            *row = &ctl_files[i];
            return ctl_files[i].present(in) ? 0 : -ENOENT;
        }
    if (id < CTL_VIEW_CTL || id - CTL_VIEW_CTL >= PCR_VIEWS_ROOT_MAX)
        return -ENOENT;
    return pcr_views_ctl(in->views, (unsigned)(id - CTL_VIEW_CTL), vname, vdata, vlen);
}

/* The bytes of control file @id now. *@owned: free it after. */
static int ctl_bytes(struct inst *in, uint64_t id, const char **data, size_t *len, char **owned)
{
    const struct ctl_file *row;
    const char *name;
    int rc = ctl_find(in, id, &row, &name, data, len);

    *owned = NULL;
    if (rc || !row)
        return rc;
    return row->get(in, data, len, owned);
}

static void slice(const char *data, size_t len, void *buf, size_t size, uint64_t off, size_t *out)
{
    size_t n = 0;

    if (off < len) {
        n = len - (size_t)off < size ? len - (size_t)off : size;
        memcpy(buf, data + off, n);
    }
    *out = n;
}

/* ---- store-wide ---------------------------------------------------------------------- */

unsigned pcrfs_features(pcrfs_store *s)
{
    struct inst *in = s ? api_inst(s) : NULL;
    unsigned f = 0;

    if (!in)
        return 0;
    if (pcr_views_need_open(in->views))
        f |= PCRFS_FEATURE_NEEDS_OPEN;
    for (size_t i = 0; i < NCTL; i++)
        if (ctl_files[i].apply && ctl_files[i].present(in))
            f |= PCRFS_FEATURE_WRITABLE;
    if (pcr_views_dynamic(in->views))
        f |= PCRFS_FEATURE_XATTRS; /* user.pcrfs.level */
    if (pcr_views_have_xattrs(in->views))
        f |= PCRFS_FEATURE_XATTRS;
    return f;
}

int64_t pcrfs_mtime(pcrfs_store *s)
{
    struct inst *in = s ? api_inst(s) : NULL;

    return in ? pcr_store_mtime(in->store) : 0;
}

uint64_t pcrfs_node_count(pcrfs_store *s)
{
    struct inst *in = s ? api_inst(s) : NULL;

    /* + the root, /.pcrfs, its files and prefetch/ */
    return in ? pcr_views_nodes(in->views) + 6 : 0;
}

/* ---- names --------------------------------------------------------------------------- */

/* A name looked up in /.pcrfs/prefetch is a hint, not a name: the records read next
 * (pcr_store_prefetch_text(): "12,13"), taken by a lookup because a mount is
 * read-only (no write reaches a daemon). Answered as a miss (0) when taken, which
 * a daemon must not cache (PCRFS_NODE_HINTS), or -EINVAL when refused. */
static int prefetch_lookup(struct inst *in, const char *name)
{
    int rc = pcr_store_prefetch_text(in->store, name, strlen(name));

    return rc < 0 ? rc : 0;
}

int pcrfs_node_lookup(pcrfs_store *s, uint64_t dir, const char *name, uint64_t *node)
{
    struct parts p = node_split(dir);
    const struct pcr_view *v;
    struct pcr_node n;
    struct inst *in;
    size_t i;
    int rc;

    PCRFS_INST(in, s);
    *node = 0;
    if (p.is_file)
        return -ENOTDIR;
    if (p.view == VIEW_CTL && p.id == DIR_ROOT) {
        if (strcmp(name, ".pcrfs") == 0)
            *node = node_make(VIEW_CTL, false, DIR_CTL);
        else if ((v = pcr_views_root_lookup(in->views, name)) != NULL)
            *node = node_make(v->number, false, PCR_ROOT_DIR);
        return *node != 0;
    }
    if (p.view == VIEW_CTL && p.id == DIR_PREFETCH)
        return prefetch_lookup(in, name);
    if (p.view == VIEW_CTL && p.id == DIR_CTL) {
        if (strcmp(name, "prefetch") == 0)
            *node = node_make(VIEW_CTL, false, DIR_PREFETCH);
        for (i = 0; *node == 0 && i < NCTL; i++)
            if (strcmp(name, ctl_files[i].name) == 0 && ctl_files[i].present(in))
                *node = node_make(VIEW_CTL, true, ctl_files[i].id);
        for (uint64_t id = CTL_VIEW_CTL; *node == 0; id++) {
            const struct ctl_file *row;
            const char *cname, *data;
            size_t len;

            if (ctl_find(in, id, &row, &cname, &data, &len) != 0)
                break;
            if (strcmp(name, cname) == 0)
                *node = node_make(VIEW_CTL, true, id);
        }
        return *node != 0;
    }
    v = view_of(in, p);
    if (!v)
        return -ENOENT;
    rc = v->ops->lookup(v, p.id, name, &n);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    *node = child_node(v, !n.is_dir, n.id);
    return *node ? 1 : -EOVERFLOW;
}

int pcrfs_node_stat(pcrfs_store *s, uint64_t node, struct pcrfs_node_attr *a)
{
    struct parts p = node_split(node);
    const struct pcr_view *v;
    const struct pcr_file *f;
    struct pcr_dirinfo di;
    struct inst *in;
    int64_t size;
    int rc;

    PCRFS_INST(in, s);
    memset(a, 0, sizeof(*a));
    if (p.view == VIEW_CTL) {
        const struct ctl_file *row;
        const char *data;
        char *owned;
        size_t len;

        a->flags = PCRFS_NODE_CONTROL;
        a->parent = PCRFS_NODE_ROOT;
        if (!p.is_file && (p.id == DIR_ROOT || p.id == DIR_CTL)) {
            a->flags |= PCRFS_NODE_DIR;
            a->nsubdirs = p.id == DIR_ROOT ? in->views->nroot + 1 : 1; /* + .pcrfs, prefetch/ */
            return 0;
        }
        if (!p.is_file && p.id == DIR_PREFETCH) {
            a->flags |= PCRFS_NODE_DIR | PCRFS_NODE_HINTS | PCRFS_NODE_NO_LISTINGS;
            a->parent = node_make(VIEW_CTL, false, DIR_CTL);
            return 0;
        }
        if (!p.is_file || ctl_find(in, p.id, &row, &data, &data, &len) != 0)
            return -ENOENT;
        rc = ctl_bytes(in, p.id, &data, &len, &owned);
        free(owned);
        if (rc)
            return rc;
        a->size = len;
        a->flags |= row ? row->flags : PCRFS_NODE_FIXED;
        return 0;
    }
    v = view_of(in, p);
    if (!v)
        return -ENOENT;
    if (p.is_file) {
        rc = pcr_store_file(v->store, p.id, &f);
        if (rc)
            return rc;
        size = pcr_view_size(v, f);
        if (size < 0)
            return (int)size; /* a size that cannot be known is an error, not 0 */
        a->size = (uint64_t)size;
        a->flags = file_flags(v);
        return 0;
    }
    rc = pcr_store_dir(v->store, p.id, &di);
    if (rc)
        return rc;
    a->flags = PCRFS_NODE_DIR | (v->desc->cache.listings ? 0 : PCRFS_NODE_NO_LISTINGS);
    a->nsubdirs = di.nsubdirs;
    a->parent = p.id == PCR_ROOT_DIR ? PCRFS_NODE_ROOT : node_make(p.view, false, di.parent);
    return a->parent ? 0 : -EOVERFLOW;
}

static int give_name(const char *nm, char *name, size_t namelen)
{
    size_t n = strlen(nm);

    if (n >= namelen)
        return -ENAMETOOLONG;
    memcpy(name, nm, n + 1);
    return 1;
}

int pcrfs_node_readdir(pcrfs_store *s, uint64_t dir, uint64_t *pos, char *name, size_t namelen,
                       uint64_t *node, int *is_dir)
{
    struct parts p = node_split(dir);
    char namebuf[NAMEBUF];
    const struct pcr_view *v;
    struct pcr_dirent de;
    struct inst *in;
    uint64_t at = *pos;
    int rc;

    PCRFS_INST(in, s);
    if (p.is_file)
        return -ENOTDIR;
    *is_dir = p.view == VIEW_CTL && p.id == DIR_ROOT; /* the root lists directories only */
    if (p.view == VIEW_CTL && p.id == DIR_ROOT) {
        if (at < in->views->nroot) {
            v = pcr_views_root(in->views, (unsigned)at);
            *node = node_make(v->number, false, PCR_ROOT_DIR);
            rc = give_name(v->name, name, namelen);
        } else if (at == in->views->nroot) {
            *node = node_make(VIEW_CTL, false, DIR_CTL);
            rc = give_name(".pcrfs", name, namelen);
        } else {
            return 0;
        }
        *pos = at + 1;
        return rc;
    }
    if (p.view == VIEW_CTL && p.id == DIR_PREFETCH)
        return 0; /* hints are not kept: it lists nothing */
    if (p.view == VIEW_CTL && p.id == DIR_CTL) {
        const struct ctl_file *row;
        const char *cname, *data;
        uint64_t k = at;
        size_t i, len;

        for (i = 0; i < NCTL; i++) {
            if (!ctl_files[i].present(in))
                continue;
            if (k-- == 0) {
                *node = node_make(VIEW_CTL, true, ctl_files[i].id);
                *pos = at + 1;
                return give_name(ctl_files[i].name, name, namelen);
            }
        }
        if (k-- == 0) {
            *node = node_make(VIEW_CTL, false, DIR_PREFETCH);
            *is_dir = 1;
            *pos = at + 1;
            return give_name("prefetch", name, namelen);
        }
        if (k >= PCR_VIEWS_ROOT_MAX ||
            ctl_find(in, CTL_VIEW_CTL + k, &row, &cname, &data, &len) != 0)
            return 0;
        *node = node_make(VIEW_CTL, true, CTL_VIEW_CTL + k);
        *pos = at + 1;
        return give_name(cname, name, namelen);
    }
    v = view_of(in, p);
    if (!v)
        return -ENOENT;
    rc = v->ops->readdir(v, p.id, &at, &de, namebuf, sizeof(namebuf));
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    *node = child_node(v, !de.node.is_dir, de.node.id);
    *is_dir = de.node.is_dir;
    if (!*node)
        return -EOVERFLOW;
    *pos = at + 1; /* a view that leaves entries out skipped ahead */
    return give_name(de.name, name, namelen);
}

/* ---- reading and writing ------------------------------------------------------------- */

/* A control file's slice. */
static ssize_t ctl_read(struct inst *in, uint64_t id, void *buf, size_t len, uint64_t off)
{
    const char *data;
    char *owned;
    size_t n, dlen;
    int rc = ctl_bytes(in, id, &data, &dlen, &owned);

    if (rc)
        return rc == -ENOENT ? -EBADF : rc;
    slice(data, dlen, buf, len, off, &n);
    free(owned);
    return (ssize_t)n;
}

/* Whether the files of @v may be handed ahead (pcrfs_node_ahead()): the store's own
 * files at one level, the same bytes at every read (scanK/, full/). Not dynamic/ or
 * mix/ (a name leads elsewhere as the level moves), q90/ (a level per file: not yet),
 * refurb/ (bytes per open) or tokens/ (rendered, not a record's prefix). */
static bool hands_ahead(const struct pcr_view *v)
{
    return v->ops == &pcr_view_store_ops && v->desc->tree == PCR_TREE_IMAGES &&
           v->desc->level_rule == PCR_LEVEL_FIXED && !v->desc->needs_open && v->desc->cache.pages;
}

int pcrfs_node_ahead(pcrfs_store *s, uint64_t *node, void *buf, size_t cap, size_t *len)
{
    struct inst *in;
    unsigned tag;
    uint64_t id;
    int rc;

    PCRFS_INST(in, s);
    rc = pcr_store_ahead_next(in->store, buf, cap, &id, len, &tag);
    if (rc == 1)
        *node = node_make(tag, true, id); /* (the tag is the view number noted) */
    return rc;
}

/* Reads without an open: for the store's views pcr_store_pread() at the view's level,
 * no allocation. A read at offset 0 is what stands for an open in the counters. */
ssize_t pcrfs_node_read(pcrfs_store *s, uint64_t node, void *buf, size_t len, uint64_t off)
{
    struct parts p = node_split(node);
    const struct pcr_view *v;
    const struct pcr_file *f;
    struct inst *in;
    pcrfs_file *h;
    ssize_t n;
    int rc;

    PCRFS_INST(in, s);
    if (!p.is_file)
        return -EISDIR;
    if (p.view == VIEW_CTL)
        return ctl_read(in, p.id, buf, len, off);
    v = view_of(in, p);
    if (!v)
        return -EBADF;
    if (v->desc->needs_open) {
        /* its opens change state (mix/'s pass, refurb/'s version): one of its own */
        rc = pcrfs_node_open(s, node, 0, &h);
        if (rc)
            return rc;
        n = pcrfs_file_read(h, buf, len, off);
        pcrfs_file_close(h);
        return n;
    }
    rc = pcr_store_file(v->store, p.id, &f);
    if (rc)
        return rc;
    n = v->ops->read(v, f, NULL, buf, len, off);
    if (n >= 0 && off == 0) {
        pcr_view_count(&v->ctr->opens, 1);
        if (hands_ahead(v))
            pcr_store_ahead_note(v->store, f, v->level, v->number);
    }
    /* A kernel follows a failed readahead READ with a READ of the same page: one
     * failure of one file, counted once (as the failed open it replaces was). */
    if (n < 0 && atomic_exchange_explicit(&in->last_err_node, node, memory_order_relaxed) == node)
        return n;
    pcr_view_count_read(v, n);
    return n;
}

int pcrfs_node_open(pcrfs_store *s, uint64_t node, int for_write, pcrfs_file **out)
{
    struct parts p = node_split(node);
    const struct ctl_file *row = NULL;
    const struct pcr_view *v = NULL;
    const struct pcr_file *f = NULL;
    const char *name, *data;
    struct inst *in;
    pcrfs_file *h;
    size_t len;
    int rc;

    *out = NULL;
    PCRFS_INST(in, s);
    if (!p.is_file)
        return -EISDIR;
    if (p.view == VIEW_CTL) {
        if (ctl_find(in, p.id, &row, &name, &data, &len) != 0)
            return -ENOENT;
        if (for_write && (!row || !row->apply))
            return -EROFS;
    } else {
        v = view_of(in, p);
        if (!v)
            return -ENOENT;
        if (for_write)
            return -EROFS;
        rc = pcr_store_file(v->store, p.id, &f);
        if (rc)
            return rc;
    }
    if (p.view != VIEW_CTL)
        return api_file_open_view(in, v, f, node, out);
    h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->in = in;
    h->node = node;
    h->size = -1;
    /* a control file that is not a row (a view's) reads like a fixed row */
    static const struct ctl_file view_ctl = {"", 0, PCRFS_NODE_FIXED, 0, NULL, NULL, NULL, NULL};
    h->ctl = row ? row : &view_ctl;
    if (for_write && !(h->wbuf = malloc(row->max))) {
        free(h);
        return -ENOMEM;
    }
    *out = h;
    return 0;
}

int api_file_open_view(struct inst *in, const struct pcr_view *v, const struct pcr_file *f,
                       uint64_t node, struct pcrfs_file **out)
{
    struct pcrfs_file *h = calloc(1, sizeof(*h));
    int rc;

    *out = NULL;
    if (!h)
        return -ENOMEM;
    h->in = in;
    h->node = node;
    h->size = -1;
    h->v = v;
    h->f = f;
    rc = pcr_view_open(v, f, &h->state); /* counts the open or its EIO */
    if (rc) {
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

unsigned pcrfs_file_flags(const pcrfs_file *f)
{
    if (f->ctl)
        return PCRFS_NODE_CONTROL | f->ctl->flags;
    return file_flags(f->v);
}

static int64_t ctl_file_size(const struct pcrfs_file *f)
{
    const char *data;
    char *owned;
    size_t len;
    int rc = ctl_bytes(f->in, node_split(f->node).id, &data, &len, &owned);

    free(owned);
    return rc ? rc : (int64_t)len;
}

static ssize_t ctl_file_read(struct pcrfs_file *f, void *buf, size_t len, uint64_t off)
{
    return ctl_read(f->in, node_split(f->node).id, buf, len, off);
}

/* The value in a write (or an attribute's value): its length without the one
 * trailing newline allowed, or -1 if it holds a NUL or a newline anywhere else. */
static ssize_t value_len(const char *buf, size_t size)
{
    size_t n = size > 0 && buf[size - 1] == '\n' ? size - 1 : size;

    if (memchr(buf, '\n', n) || memchr(buf, '\0', n))
        return -1;
    return (ssize_t)n;
}

/* Writing a control file (pcrfs(1), CONTROL FILES). One rule for every write: a
 * value, optionally followed by one newline, and nothing else: no NUL, no white
 * space, no second line. A write is checked whole before anything is applied, so
 * it is applied whole or not at all: "8\n\n\n" or "7\nxyz\n" fail with EINVAL and
 * nothing changes. The bytes written through one handle since the last applied
 * value are one stream, whatever the offsets: a value is applied when its newline
 * arrives, or, without one, at flush (a daemon's FLUSH: close(2) waits for it, so
 * `printf 10 >` and "1" then "0" in two writes both give 10 before close returns).
 * A write that cannot be (part of) a value fails with EINVAL at once and drops
 * what was pending; a value still incomplete at flush fails it. */
ssize_t pcrfs_file_write(pcrfs_file *f, const void *buf, size_t len)
{
    ssize_t n;
    int rc = 0;

    api_ok();
    if (!f || !f->wbuf)
        return -EBADF;
    n = value_len(buf, len);
    pthread_mutex_lock(&f->in->lock);
    if (n < 0 || (size_t)n > f->ctl->max - f->wlen) {
        f->wlen = 0;
        rc = -EINVAL;
    } else {
        memcpy(f->wbuf + f->wlen, buf, (size_t)n);
        f->wlen += (size_t)n;
        if ((size_t)n < len) { /* the newline: the value is complete */
            rc = f->ctl->apply(f->in, f->wbuf, f->wlen);
            f->wlen = 0;
        } else if (!f->ctl->prefix(f->in, f->wbuf, f->wlen)) {
            f->wlen = 0;
            rc = -EINVAL;
        }
    }
    pthread_mutex_unlock(&f->in->lock);
    return rc ? rc : (ssize_t)len;
}

int pcrfs_file_flush(pcrfs_file *f)
{
    int rc = 0;

    if (!f || !f->wbuf)
        return 0;
    pthread_mutex_lock(&f->in->lock);
    if (f->wlen > 0)
        rc = f->ctl->apply(f->in, f->wbuf, f->wlen);
    f->wlen = 0;
    pthread_mutex_unlock(&f->in->lock);
    return rc;
}

static void ctl_file_close(struct pcrfs_file *f)
{
    pcrfs_file_flush(f);
    free(f->wbuf);
    free(f);
}

/* ---- handles, opened by node (above) or by path (path.c) -------------------------------- */

int64_t pcrfs_file_size(const pcrfs_file *f)
{
    if (f->ctl)
        return ctl_file_size(f);
    /* a node's open (pcrfs_node_open()) leaves it to the first ask */
    if (f->size < 0 && f->v && f->f)
        return pcr_view_size(f->v, f->f);
    return f->size;
}

ssize_t pcrfs_file_read(pcrfs_file *f, void *buf, size_t len, uint64_t off)
{
    ssize_t n;

    api_ok();
    if (f->ctl)
        return ctl_file_read(f, buf, len, off);
    n = pcr_view_read(f->v, NULL, f->state, buf, len, off);
    if (n >= 0 && off == 0 && f->f && hands_ahead(f->v))
        pcr_store_ahead_note(f->v->store, f->f, f->v->level, f->v->number);
    return n < 0 ? api_fail((int)n, "%s", strerror((int)-n)) : n;
}

void pcrfs_file_close(pcrfs_file *f)
{
    if (!f)
        return;
    if (f->ctl) {
        ctl_file_close(f);
        return;
    }
    pcr_view_close(f->v, f->state);
    free(f);
}

/* ---- extended attributes ----------------------------------------------------------------
 * user.pcrfs.level on dynamic/ and /.pcrfs/level: set sets the level, get reads it
 * ("5"), list lists it; and the views' (refurb/'s files). A store with neither
 * answers -ENOSYS (a daemon's kernel then stops asking: no round trip per file for
 * ls -l, cp -a); with one, every node answers, any other user.* name -ENODATA and any
 * other namespace -EOPNOTSUPP (what ls(1) takes as "no SELinux labels here"). */

static bool has_level_xattr(const struct inst *in, uint64_t node)
{
    return pcr_views_dynamic(in->views) && (node == node_make(PCR_VIEW_DYN, false, PCR_ROOT_DIR) ||
                                            node == node_make(VIEW_CTL, true, CTL_LEVEL));
}

/* @val (@n bytes) into @buf as getxattr(2) gives it. */
static ssize_t give(const void *val, size_t n, void *buf, size_t len)
{
    if (len == 0)
        return (ssize_t)n;
    if (len < n)
        return -ERANGE;
    memcpy(buf, val, n);
    return (ssize_t)n;
}

ssize_t pcrfs_node_getxattr(pcrfs_store *s, uint64_t node, const char *name, void *buf, size_t len)
{
    struct parts p = node_split(node);
    char val[128];
    size_t n = 0;
    struct inst *in;
    int rc;

    PCRFS_INST(in, s);
    rc = pcr_view_getxattr(p.is_file ? view_of(in, p) : NULL, p.id, name, val, sizeof(val), &n);
    if (rc == -ENOSYS && pcr_views_dynamic(in->views)) {
        int k;

        if (!has_level_xattr(in, node) || strcmp(name, LEVEL_XATTR) != 0)
            return strncmp(name, "user.", 5) == 0 ? -ENODATA : -EOPNOTSUPP;
        k = snprintf(val, sizeof(val), "%u", pcr_views_level_now(in->views));
        if (k <= 0 || (size_t)k >= sizeof(val))
            return -EIO;
        n = (size_t)k;
        rc = 0;
    }
    if (rc == -ENOSYS && pcr_views_have_xattrs(in->views))
        rc = strncmp(name, "user.", 5) == 0 ? -ENODATA : -EOPNOTSUPP;
    return rc ? rc : give(val, n, buf, len);
}

ssize_t pcrfs_node_listxattr(pcrfs_store *s, uint64_t node, char *buf, size_t len)
{
    struct parts p = node_split(node);
    const char *list = "";
    size_t n = 0;
    struct inst *in;
    int rc;

    PCRFS_INST(in, s);
    rc = pcr_view_listxattr(p.is_file ? view_of(in, p) : NULL, p.id, &list, &n);
    if (rc == -ENOSYS && pcr_views_dynamic(in->views)) {
        list = has_level_xattr(in, node) ? LEVEL_XATTR : "";
        n = has_level_xattr(in, node) ? sizeof(LEVEL_XATTR) : 0; /* with its NUL */
        rc = 0;
    }
    if (rc == -ENOSYS && pcr_views_have_xattrs(in->views)) {
        n = 0;
        rc = 0;
    }
    return rc ? rc : give(list, n, buf, len);
}

int pcrfs_node_setxattr(pcrfs_store *s, uint64_t node, const char *name, const void *value,
                        size_t len)
{
    struct inst *in;
    ssize_t n;
    unsigned k;

    PCRFS_INST(in, s);
    if (!has_level_xattr(in, node) || strcmp(name, LEVEL_XATTR) != 0)
        return -EROFS;
    if (!value)
        return 0;
    /* the same rule as a write to /.pcrfs/level: one value, one trailing newline */
    n = value_len(value, len);
    k = n < 0 ? 0 : pcr_view_parse_level(in->views->levels, value, (size_t)n);
    if (!k)
        return -EINVAL;
    set_level(in, k);
    return 0;
}
