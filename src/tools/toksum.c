/* pcrfs tools — the bytes of a token tree's shards, for mkpcrfs's token import
 * (the store's summary, token part included, is the library's: pcrfs_summary()).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tokimport_int.h"

/* Bytes and number of the files in STORE/tokens/: the shards (also of a store being
 * written, from its temporary directory). */
uint64_t ti_tokens_dir_bytes(const char *path, uint64_t *nfiles)
{
    char dir[PATH_MAX];
    struct dirent *de;
    struct stat st;
    uint64_t sum = 0;
    DIR *d;

    *nfiles = 0;
    snprintf(dir, sizeof(dir), "%s/tokens", path);
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
