/* pcrfs util — opening source files, removing a tree (see fsio.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/fsio.h"
#include "util/xalloc.h"

/* Never change a source tree, not even its access times where the kernel lets us say so:
 * O_NOATIME is refused (EPERM) on files we do not own, then open without it. */
int pcr_open_noatime(int dirfd, const char *path, int flags)
{
    int fd = openat(dirfd, path, flags | O_NOATIME);

    if (fd < 0 && errno == EPERM)
        fd = openat(dirfd, path, flags);
    return fd;
}

/* Open @rel (relative to @base) with @flags. A path longer than the kernel takes
 * at once (deep trees) is opened one component at a time; intermediate components
 * are followed like the walk followed them (symlinks included). */
int pcr_open_rel(int base, const char *rel, int flags)
{
    char *copy, *p, *slash;
    int cur, fd, e;

    if (!rel[0])
        rel = ".";
    fd = pcr_open_noatime(base, rel, flags);
    if (fd >= 0 || errno != ENAMETOOLONG)
        return fd;
    copy = pcr_try_strdup(rel);
    if (!copy) {
        errno = ENOMEM;
        return -1;
    }
    cur = base;
    p = copy;
    while ((slash = strchr(p, '/')) != NULL) {
        int nfd;

        *slash = '\0';
        nfd = openat(cur, p, O_PATH | O_DIRECTORY | O_CLOEXEC);
        e = errno;
        if (cur != base)
            close(cur);
        if (nfd < 0) {
            free(copy);
            errno = e;
            return -1;
        }
        cur = nfd;
        p = slash + 1;
    }
    fd = pcr_open_noatime(cur, p, flags);
    e = errno;
    if (cur != base)
        close(cur);
    free(copy);
    errno = e;
    return fd;
}

static int remove_err; /* the first error of pcr_remove_tree() */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && !remove_err)
        remove_err = -errno;
    return 0;
}

int pcr_remove_tree(const char *path)
{
    remove_err = 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && !remove_err)
        remove_err = -errno;
    return remove_err;
}

uint64_t pcr_dir_bytes(const char *dir, uint64_t *nfiles)
{
    struct dirent *de;
    struct stat st;
    uint64_t sum = 0;
    DIR *d;

    *nfiles = 0;
    d = opendir(dir);
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL) {
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            sum += (uint64_t)st.st_size;
            (*nfiles)++;
        }
    }
    closedir(d);
    return sum;
}
