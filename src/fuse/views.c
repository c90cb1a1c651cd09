/* pcrfs — the table of views, and what the handlers ask of it (views.h).
 *
 * The rows below are the whole description of the views; ops.c only consults the
 * expanded table (fs->vtab) through view_of() and the functions at the end.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs.h"
#include "views.h"

/* ---- the store's own file handlers (a row's NULL members) ------------------------- */

static int store_lookup(const struct view *v, uint64_t dir, const char *name, struct pcr_node *out)
{
    return pcr_store_lookup(v->store, dir, name, out);
}

static int store_readdir(const struct view *v, uint64_t dir, uint64_t *pos, struct pcr_dirent *out,
                         char *namebuf, size_t namelen)
{
    (void)namebuf, (void)namelen;
    return pcr_store_readdir(v->store, dir, *pos, out);
}

/* Exact, from the index, without touching record data. */
static uint64_t store_size(const struct view *v, const struct pcr_file *f)
{
    return pcr_file_size(f, v->level);
}

/* The level is the view's: for dynamic/ the one its inode names, held by this
 * handle until it is closed. A token file is decoded here, whole (about 2 kB): its
 * reads are copies. */
static int store_open(const struct view *v, const struct pcr_file *f, void **state)
{
    struct pcr_handle *h = NULL;
    int rc = pcr_handle_open(v->store, f, v->level, &h);

    *state = h;
    return rc;
}

/* With OPEN, the handle; without, (store, file, level) -> pcr_store_pread(), no
 * allocation. */
static ssize_t store_read(const struct view *v, const struct pcr_file *f, void *state, char *buf,
                          size_t size, uint64_t off)
{
    if (state)
        return pcr_handle_read(state, buf, size, off);
    return pcr_store_pread(v->store, f, v->level, buf, size, off);
}

static void store_close(void *state)
{
    pcr_handle_close(state);
}

static const struct view_file_ops store_ops = {
    .lookup = store_lookup,
    .readdir = store_readdir,
    .size = store_size,
    .open = store_open,
    .read = store_read,
    .close = store_close,
};

/* ---- the rows ----------------------------------------------------------------------- */

static unsigned one(const struct pcrfs *fs)
{
    (void)fs;
    return 1;
}

static unsigned levels(const struct pcrfs *fs)
{
    return fs->levels;
}

/* scanK/: level K, inode view K. */
static unsigned scan_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs;
    return i;
}

static struct view_counters *scan_counters(struct pcrfs *fs, unsigned i)
{
    return &fs->views[i];
}

/* full/: level L, inode view L+1: the bytes of scanL/ under numbers of its own, so
 * that cp -a, du and tar never take a file of full/ for a hard link of its twin. */
static unsigned full_view(const struct pcrfs *fs, unsigned i)
{
    (void)i;
    return fs->levels + 1;
}

static unsigned full_level(const struct pcrfs *fs, unsigned i)
{
    (void)i;
    return fs->levels;
}

static struct view_counters *full_counters(struct pcrfs *fs, unsigned i)
{
    (void)i;
    return &fs->views[fs->levels + 1];
}

/* dynamic/ (-o level=K): directories in VIEW_DYN, files in VIEW_DYN + level. */
static unsigned dyn_count(const struct pcrfs *fs)
{
    return fs->dynamic;
}

static unsigned dyn_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs, (void)i;
    return VIEW_DYN;
}

static struct view_counters *dyn_counters(struct pcrfs *fs, unsigned i)
{
    (void)i;
    return &fs->views[fs->levels + 2];
}

static unsigned dyn_file_level(const struct pcrfs *fs, uint64_t id)
{
    (void)id;
    return pcrfs_level_now(fs);
}

/* mix/ (-o mix=LO-HI): directories in VIEW_MIX, files in VIEW_MIX + the level their
 * next open serves (mixview.c); an open counts the file's pass. */
static int mix_open(const struct view *v, const struct pcr_file *f, void **state)
{
    int rc = store_open(v, f, state);

    if (rc == 0)
        pcrfs_mix_opened(v->fs, f, v->level);
    return rc;
}

static const struct view_file_ops mix_ops = {
    .lookup = store_lookup,
    .readdir = store_readdir,
    .size = store_size,
    .open = mix_open,
    .read = store_read,
    .close = store_close,
};

static unsigned mix_count(const struct pcrfs *fs)
{
    return fs->mix != NULL;
}

static unsigned mix_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs, (void)i;
    return VIEW_MIX;
}

static struct view_counters *mix_counters(struct pcrfs *fs, unsigned i)
{
    (void)i;
    return &fs->mix_view;
}

/* tokens/: the token tree's one level, in a view number that does not move with L. */
static unsigned tok_count(const struct pcrfs *fs)
{
    return fs->tokstore != NULL;
}

static unsigned tok_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs, (void)i;
    return VIEW_TOKENS;
}

static unsigned tok_level(const struct pcrfs *fs, unsigned i)
{
    (void)fs, (void)i;
    return 1;
}

static struct view_counters *tok_counters(struct pcrfs *fs, unsigned i)
{
    (void)i;
    return &fs->tok_view;
}

/* q90/ q95/ q99/: each file at the lowest level whose stored MS-SSIM reaches the
 * view's threshold (pcr_file_level_for()); a per-file level that never changes, so
 * names, listings and pages are cached as for scanK/. */
static unsigned q_level(const struct view *v, const struct pcr_file *f)
{
    return pcr_file_level_for(f, v->threshold);
}

static uint64_t q_size(const struct view *v, const struct pcr_file *f)
{
    return pcr_file_size(f, q_level(v, f));
}

static int q_open(const struct view *v, const struct pcr_file *f, void **state)
{
    struct pcr_handle *h = NULL;
    int rc = pcr_handle_open(v->store, f, q_level(v, f), &h);

    *state = h;
    return rc;
}

static ssize_t q_read(const struct view *v, const struct pcr_file *f, void *state, char *buf,
                      size_t size, uint64_t off)
{
    if (state)
        return pcr_handle_read(state, buf, size, off);
    return pcr_store_pread(v->store, f, q_level(v, f), buf, size, off);
}

static const struct view_file_ops q_ops = {
    .lookup = store_lookup,
    .readdir = store_readdir,
    .size = q_size,
    .open = q_open,
    .read = q_read,
    .close = store_close,
};

static unsigned q_count(const struct pcrfs *fs)
{
    return fs->nq;
}

static unsigned q_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs;
    return VIEW_Q + i - 1;
}

static unsigned q_top(const struct pcrfs *fs, unsigned i)
{
    (void)i;
    return fs->levels;
}

static struct view_counters *q_counters(struct pcrfs *fs, unsigned i)
{
    return &fs->qviews[i - 1];
}

/* "q95" for 0.95, "q99.5" for 0.995 */
static void q_name(const struct pcrfs *fs, unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "q%g", fs->qthresh[i - 1] * 100.0);
}

static double q_threshold(const struct pcrfs *fs, unsigned i)
{
    return fs->qthresh[i - 1];
}

/* refurb/ (-o refurb=R): the image tree at the refurbishing level, refurbview.c. */
static unsigned refurb_count(const struct pcrfs *fs)
{
    return fs->refurb != NULL;
}

static unsigned refurb_view(const struct pcrfs *fs, unsigned i)
{
    (void)fs, (void)i;
    return VIEW_REFURB;
}

static unsigned refurb_level(const struct pcrfs *fs, unsigned i)
{
    (void)i;
    return fs->refurb->set.level;
}

static struct view_counters *refurb_counters(struct pcrfs *fs, unsigned i)
{
    (void)i;
    return &fs->refurb_view;
}

/* In the order of the root listing. The store is immutable, so everything but
 * dynamic/'s and mix/'s names and listings (which change with the level) and
 * refurb/'s file pages is cached by the kernel: see ops.c for what each policy is worth. */
static const struct view_row rows[] = {
    {
        .name = "scan%u",
        .count = levels,
        .ino_view = scan_view,
        .level = scan_view, /* scanK serves level K */
        .level_rule = LEVEL_FIXED,
        .tree = TREE_IMAGES,
        .cache = {.names = true, .listings = true, .pages = true},
        .counters = scan_counters,
    },
    {
        .name = "full",
        .count = one,
        .ino_view = full_view,
        .level = full_level,
        .level_rule = LEVEL_FIXED,
        .tree = TREE_IMAGES,
        .cache = {.names = true, .listings = true, .pages = true},
        .counters = full_counters,
    },
    {
        .name = "dynamic",
        .count = dyn_count,
        .ino_view = dyn_view,
        .level_rule = LEVEL_CURRENT,
        .tree = TREE_IMAGES,
        /* a cached name or listing would carry the inode of an old level (inode.h);
         * pages stay right: they belong to a level's inode (and go with it) */
        .cache = {.names = false, .listings = false, .pages = true},
        .counters = dyn_counters,
        .file_level = dyn_file_level,
    },
    {
        .name = "q",
        .count = q_count,
        .ino_view = q_view,
        .level = q_top, /* files choose their own level (q_ops) */
        .level_rule = LEVEL_FIXED,
        .tree = TREE_IMAGES,
        .cache = {.names = true, .listings = true, .pages = true},
        .counters = q_counters,
        .ops = &q_ops,
        .name_of = q_name,
        .threshold = q_threshold,
    },
    {
        .name = "mix",
        .count = mix_count,
        .ino_view = mix_view,
        .level_rule = LEVEL_CURRENT,
        .tree = TREE_IMAGES,
        /* as dynamic/: a name or a listing would carry the inode of an old draw */
        .cache = {.names = false, .listings = false, .pages = true},
        .counters = mix_counters,
        .ops = &mix_ops,
        .file_level = pcrfs_mix_next,
    },
    {
        .name = "tokens",
        .count = tok_count,
        .ino_view = tok_view,
        .level = tok_level,
        .level_rule = LEVEL_FIXED,
        .tree = TREE_TOKENS,
        .cache = {.names = true, .listings = true, .pages = true},
        .counters = tok_counters,
    },
    {
        .name = "refurb",
        .count = refurb_count,
        .ino_view = refurb_view,
        .level = refurb_level,
        .level_rule = LEVEL_FIXED,
        .tree = TREE_IMAGES,
        /* names and listings never change; a file's bytes change from one open to
         * the next, so no page of it may outlive its open (direct I/O) */
        .cache = {.names = true, .listings = true, .pages = false, .direct = true},
        .counters = refurb_counters,
        .ops = &refurb_ops,
    },
};

/* ---- the expanded table ------------------------------------------------------------ */

/* A row's ops are complete or NULL (the store's); the store_* functions above may
 * be reused by a row that changes only some. */
static bool ops_complete(const struct view_file_ops *o)
{
    return !o || (o->lookup && o->readdir && o->size && o->open && o->read && o->close);
}

static bool row_complete(const struct view_row *row)
{
    return ops_complete(row->ops) && (row->level_rule != LEVEL_CURRENT || row->file_level);
}

static int claim(struct pcrfs *fs, unsigned no, const struct view_row *row, unsigned level,
                 bool dirs, bool files, unsigned i, struct view **out)
{
    struct view *v;

    if (no == VIEW_SELF || no >= PCRFS_VIEW_NUMBERS || fs->vtab[no].row)
        return -EINVAL;
    v = &fs->vtab[no];
    v->fs = fs;
    v->row = row;
    v->ops = row->ops ? row->ops : &store_ops;
    v->store = row->tree == TREE_TOKENS ? fs->tokstore : fs->store;
    v->level = level;
    v->ino_view = no;
    v->dirs = dirs;
    v->files = files;
    v->ctr = row->counters(fs, i);
    *out = v;
    return 0;
}

int pcrfs_views_init(struct pcrfs *fs)
{
    const struct view_row *row;
    struct view *v;
    unsigned n, i, k;
    int rc;

    memset(fs->vtab, 0, sizeof(fs->vtab));
    fs->nroot = 0;
    for (row = rows; row < rows + sizeof(rows) / sizeof(rows[0]); row++) {
        if (!row_complete(row))
            return -EINVAL;
        n = row->count(fs);
        for (i = 1; i <= n; i++) {
            unsigned no = row->ino_view(fs, i);

            if (fs->nroot >= VIEWS_ROOT_MAX)
                return -EINVAL;
            if (row->level_rule == LEVEL_CURRENT) {
                rc = claim(fs, no, row, 0, true, false, i, &v);
                for (k = 1; rc == 0 && k <= fs->levels; k++) {
                    struct view *fv;

                    rc = claim(fs, no + k, row, k, false, true, i, &fv);
                }
            } else {
                rc = claim(fs, no, row, row->level(fs, i), true, true, i, &v);
            }
            if (rc)
                return rc;
            if (row->name_of)
                row->name_of(fs, i, v->name, sizeof(v->name));
            else
                snprintf(v->name, sizeof(v->name), row->name, i);
            v->threshold = row->threshold ? row->threshold(fs, i) : 0.0;
            fs->root[fs->nroot++] = v;
        }
    }
    return 0;
}

const struct view *view_of(const struct pcrfs *fs, struct ino_parts p)
{
    const struct view *v;

    if (p.view >= PCRFS_VIEW_NUMBERS)
        return NULL;
    v = &fs->vtab[p.view];
    return v->row && (p.is_file ? v->files : v->dirs) ? v : NULL;
}

uint64_t view_child_ino(const struct pcrfs *fs, const struct view *v, bool is_file, uint64_t id)
{
    unsigned no = v->ino_view;

    if (v->row->level_rule == LEVEL_CURRENT && is_file)
        no += v->row->file_level(fs, id);
    return ino_make(no, is_file, id);
}

double view_entry_timeout(const struct pcrfs *fs, const struct view *v, bool is_file)
{
    return is_file && !v->row->cache.names ? 0.0 : fs->timeout;
}

int views_root_entry(const struct pcrfs *fs, uint64_t pos, const char **name, uint64_t *ino)
{
    const struct view *v;

    if (pos >= fs->nroot)
        return -ENOENT;
    v = fs->root[pos];
    *name = v->name;
    *ino = ino_make(v->ino_view, false, PCR_ROOT_DIR);
    return 0;
}

/* At most L + 3 names, and the kernel keeps the answer for fs->timeout. */
int views_root_lookup(const struct pcrfs *fs, const char *name, uint64_t *ino)
{
    unsigned i;

    for (i = 0; i < fs->nroot; i++)
        if (strcmp(fs->root[i]->name, name) == 0) {
            *ino = ino_make(fs->root[i]->ino_view, false, PCR_ROOT_DIR);
            return 0;
        }
    return -ENOENT;
}

unsigned views_root_count(const struct pcrfs *fs)
{
    return fs->nroot;
}

uint64_t views_nodes(const struct pcrfs *fs)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i < fs->nroot; i++) {
        struct pcr_store *s = fs->root[i]->store;

        n += pcr_store_nfiles(s) + pcr_store_ndirs(s);
    }
    return n;
}
