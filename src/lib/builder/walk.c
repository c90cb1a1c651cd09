/* pcrfs build — the source-tree walker (see walk.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "builder/builder.h"
#include "builder/walk.h"

/* A directory to read (the array is the BFS queue: children are appended as their
 * parent is read). */
struct wnode {
    uint64_t parent; /* the root: 0, itself */
    char *rel;       /* path from the root, "" for the root */
    dev_t dev;       /* identity, to detect loops through symlinks */
    ino_t ino;
};

struct walk {
    const struct walk_opts *o;
    const struct walk_ops *ops;
    struct wnode *dirs;
    uint64_t ndirs, cap;
    struct pcr_sbuf esc; /* the message buffer */
};

static int cmp_name(const void *a, const void *b)
{
    /* strcmp() compares as unsigned char: byte order, as the writer wants. */
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* How an entry is named in messages (valid until the next call). ROOT/REL is
 * escaped piece by piece, which gives the text escaping it whole would ("/" is
 * never part of a multibyte character), and cannot fail (sbuf.h). */
static const char *display(struct walk *w, const char *rel)
{
    if (!w->o->prefix_root)
        return rel[0] ? pcr_escaped(&w->esc, rel) : w->o->root_name;
    pcr_sbuf_reset(&w->esc);
    pcr_escape(&w->esc, w->o->root_name, strlen(w->o->root_name));
    if (rel[0]) {
        pcr_escape(&w->esc, "/", 1);
        pcr_escape(&w->esc, rel, strlen(rel));
    }
    return w->esc.s ? w->esc.s : PCR_ESCAPE_NOMEM;
}

static int error(struct walk *w, const char *what, const char *rel, int e)
{
    char msg[8192];

    snprintf(msg, sizeof(msg), "%s %s: %s", what, display(w, rel), strerror(e));
    return w->ops->error(w->ops->ctx, msg);
}

static const char *type_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "not a regular file (FIFO)";
    if (S_ISSOCK(m))
        return "not a regular file (socket)";
    if (S_ISCHR(m))
        return "not a regular file (character device)";
    if (S_ISBLK(m))
        return "not a regular file (block device)";
    return "not a regular file (unknown type)";
}

/* Is (dev, ino) directory @d or one of its ancestors? Then entering it loops. */
static bool on_path(const struct walk *w, uint64_t d, dev_t dev, ino_t ino)
{
    for (;;) {
        if (w->dirs[d].dev == dev && w->dirs[d].ino == ino)
            return true;
        if (d == 0)
            return false;
        d = w->dirs[d].parent;
    }
}

static bool stopped(const struct walk *w)
{
    return w->o->stop && *w->o->stop;
}

/* Read the names in directory @d, sorted. @return the open directory, or NULL
 * (reported; *rc -1 if the callback said stop; -ENOMEM, not reported). */
static DIR *read_names(struct walk *w, uint64_t d, char ***names_out, size_t *n_out, int *rc)
{
    const char *rel = w->dirs[d].rel;
    struct dirent *de;
    char **names = NULL;
    size_t n = 0;
    uint64_t cap = 0;
    DIR *dir;
    int fd;

    *rc = 0;
    fd = pcr_open_rel(w->o->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(dir = fdopendir(fd))) {
        int e = errno;

        if (fd >= 0)
            close(fd);
        *rc = error(w, "cannot open directory", rel, e);
        return NULL;
    }
    while ((errno = 0, de = readdir(dir)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            char **t = pcr_try_grow(names, &cap, 64, sizeof(*names));

            if (!t)
                break;
            names = t;
        }
        names[n] = pcr_try_strdup(de->d_name);
        if (!names[n])
            break;
        n++;
    }
    if (de) { /* out of memory */
        while (n)
            free(names[--n]);
        free(names);
        closedir(dir);
        *rc = -ENOMEM;
        return NULL;
    }
    if (errno)
        *rc = error(w, "reading directory", rel, errno);
    if (n)
        qsort(names, n, sizeof(*names), cmp_name);
    *names_out = names;
    *n_out = n;
    return dir;
}

/* A subdirectory: enter it, or say why not. @return 0, -1 (stop) or -ENOMEM. */
static int subdir(struct walk *w, uint64_t d, const char *name, const char *rel,
                  const struct stat *st)
{
    for (unsigned k = 0; k < w->o->nexclude; k++) {
        if (w->o->exclude[k].dev == st->st_dev && w->o->exclude[k].ino == st->st_ino) {
            /* Our own output: never part of the data, and not counted as skipped, so
             * that the count does not depend on where STORE is. */
            if (w->o->exclude[k].warn)
                pcr_bld_warn("not entering %s: it is STORE", display(w, rel));
            return 0;
        }
    }
    if (on_path(w, d, st->st_dev, st->st_ino)) {
        w->ops->skip(w->ops->ctx, display(w, rel),
                     "symbolic link loop (a directory that contains it)");
        return 0;
    }
    if (w->ndirs == w->cap) {
        struct wnode *t = pcr_try_grow(w->dirs, &w->cap, 64, sizeof(*w->dirs));

        if (!t)
            return -ENOMEM;
        w->dirs = t;
    }
    w->dirs[w->ndirs] = (struct wnode){
        .parent = d, .rel = pcr_try_strdup(rel), .dev = st->st_dev, .ino = st->st_ino};
    if (!w->dirs[w->ndirs].rel)
        return -ENOMEM;
    w->ndirs++;
    return w->ops->dir(w->ops->ctx, d, name, rel, st);
}

/* One entry of directory @d (open as @dfd). @return 0, -1 (stop) or -ENOMEM. */
static int entry(struct walk *w, uint64_t d, int dfd, char **name)
{
    char *rel = pcr_try_path_join(w->dirs[d].rel, *name);
    struct stat st, lst;
    int rc = 0;

    if (!rel)
        return -ENOMEM;
    if (fstatat(dfd, *name, &st, 0) < 0) {
        int e = errno;

        /* A link whose target is missing or itself loops: ImageFolder could not read
         * it either, so warn and go on. Anything else is an error. */
        if ((e == ENOENT || e == ELOOP) && fstatat(dfd, *name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(lst.st_mode))
            w->ops->skip(w->ops->ctx, display(w, rel),
                         e == ENOENT ? "dangling symbolic link"
                                     : "too many levels of symbolic links");
        else
            rc = error(w, "cannot stat", rel, e);
    } else if (S_ISDIR(st.st_mode)) {
        rc = subdir(w, d, *name, rel, &st);
    } else if (!S_ISREG(st.st_mode)) {
        w->ops->skip(w->ops->ctx, display(w, rel), type_name(st.st_mode));
    } else {
        rc = w->ops->file(w->ops->ctx, d, dfd, name, rel, &st);
    }
    free(rel);
    return rc;
}

static int walk_dir(struct walk *w, uint64_t d)
{
    char **names = NULL;
    size_t n = 0, i;
    DIR *dir;
    int rc;

    if (w->ops->begin && w->ops->begin(w->ops->ctx, d) < 0)
        return -1;
    dir = read_names(w, d, &names, &n, &rc);
    for (i = 0; i < n && rc == 0; i++) {
        if (stopped(w))
            break;
        rc = entry(w, d, dirfd(dir), &names[i]);
    }
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (dir)
        closedir(dir);
    return rc;
}

int walk_tree(const struct walk_opts *o, const struct walk_ops *ops)
{
    struct walk w = {.o = o, .ops = ops};
    struct stat st;
    int rc = 0;

    if (fstat(o->rootfd, &st) < 0)
        return error(&w, "cannot stat", "", errno) < 0 ? -1 : 0;
    w.dirs = pcr_try_grow(NULL, &w.cap, 64, sizeof(*w.dirs));
    if (!w.dirs)
        return -ENOMEM;
    w.dirs[0] =
        (struct wnode){.parent = 0, .rel = pcr_try_strdup(""), .dev = st.st_dev, .ino = st.st_ino};
    w.ndirs = w.dirs[0].rel ? 1 : 0;
    rc = w.ndirs ? 0 : -ENOMEM;
    for (uint64_t d = 0; d < w.ndirs && rc == 0; d++) {
        if (stopped(&w))
            break;
        rc = walk_dir(&w, d);
    }
    if (rc == 0 && stopped(&w))
        rc = -2;
    for (uint64_t d = 0; d < w.ndirs; d++)
        free(w.dirs[d].rel);
    free(w.dirs);
    pcr_sbuf_free(&w.esc);
    return rc;
}
