/* pcrfs util — opening files of a source tree, and removing a tree (the tools and
 * the store library's build pipeline).
 */
#ifndef PCRFS_UTIL_FSIO_H
#define PCRFS_UTIL_FSIO_H

#include <stdint.h>

/* Open without touching access times where the kernel allows (O_NOATIME falls back
 * when refused), and open a path relative to @base that may be longer than the
 * kernel takes at once. Both return a descriptor or -1 with errno (ENOMEM too:
 * neither exits). */
int pcr_open_noatime(int dirfd, const char *path, int flags);
int pcr_open_rel(int base, const char *rel, int flags);
/* Remove the tree @path (a directory and everything under it, or a file) without
 * following symbolic links. Not thread-safe. @return 0, or the first negative
 * errno met (the rest is still attempted). */
int pcr_remove_tree(const char *path);

/* Bytes and number of the regular files in directory @dir (not below it; links
 * not followed); 0 and 0 if it cannot be read. */
uint64_t pcr_dir_bytes(const char *dir, uint64_t *nfiles);

#endif
