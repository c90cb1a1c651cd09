/* pcrfs build — the source-tree walker of mkpcrfs (the image tree) and of
 * mkpcrfs --tokens (a tree of .npy files).
 *
 * One set of rules for both: breadth-first, any depth (each directory is reopened by
 * its path relative to the root, one component at a time when the path is longer
 * than the kernel takes, so the walk holds two descriptors at any depth); names are
 * arbitrary bytes and each directory's entries are visited sorted by byte order
 * (strcmp(), as pcrfs/writer.h wants); symbolic links are followed; a link back to a
 * directory on the path (a loop), a dangling link, a link chain too long, FIFOs,
 * sockets and devices are skipped with a warning; directories given as excluded
 * (the store being written, when it lies inside the tree) are never entered.
 *
 * What the entries become is the caller's business, through callbacks; so is what
 * an error means (mkpcrfs stops at the first, the token import reports them all).
 */
#ifndef PCRFS_BUILD_WALK_H
#define PCRFS_BUILD_WALK_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#define WALK_MAX_EXCLUDE 2

struct walk_ops {
    void *ctx;
    /* Something could not be read; @msg names it ("cannot stat X: reason").
     * @return 0 to go on, -1 to stop the walk. */
    int (*error)(void *ctx, const char *msg);
    /* An entry skipped; @what is its displayed path, @why the reason. */
    void (*skip)(void *ctx, const char *what, const char *why);
    /* Optional: directory @d (0 = the root; numbered in the order the dir callback
     * saw them) is about to be read. @return 0 or -1 to stop. */
    int (*begin)(void *ctx, uint64_t d);
    /* A subdirectory of @parent to enter: it becomes directory number (the number
     * of dir callbacks so far + 1). @rel is its path from the root.
     * @return 0 or -1 to stop. */
    int (*dir)(void *ctx, uint64_t parent, const char *name, const char *rel,
               const struct stat *st);
    /* A regular file (or a link to one) in directory @d, open as @dfd. *@name is
     * malloc()ed: the callback may keep it (set *name to NULL). @rel is its path
     * from the root. @return 0 or -1 to stop. */
    int (*file)(void *ctx, uint64_t d, int dfd, char **name, const char *rel,
                const struct stat *st);
};

struct walk_opts {
    int rootfd;            /* the tree's root, open (O_RDONLY | O_DIRECTORY) */
    const char *root_name; /* the root as the user named it */
    /* Messages name an entry ROOT/REL (true) or REL alone (false; the root itself is
     * then ROOT). Either way the text is escaped (pcr_escape()). */
    bool prefix_root;
    struct {
        dev_t dev;
        ino_t ino;
        bool warn; /* say "not entering X: it is STORE" (else silently) */
    } exclude[WALK_MAX_EXCLUDE];
    unsigned nexclude;
    volatile sig_atomic_t *stop; /* polled between entries (the caller cancelled); may be NULL */
};

/* Walk the tree. @return 0 done; -1 a callback said stop; -2 *stop was set;
 * -ENOMEM out of memory (not reported: the caller's pcr_bld_nomem()). */
int walk_tree(const struct walk_opts *o, const struct walk_ops *ops);

#endif
