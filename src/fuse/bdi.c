/* pcrfs — the kernel's readahead for the files of this mount (-o read_ahead_kb=N).
 *
 * A FUSE mount's files are read through the page cache with the readahead of its
 * backing device info (bdi), 128 kB unless set: a whole-file read of a 300 kB image
 * then arrives as three READ requests, one after the other, each a round trip to
 * the daemon. The kernel would send up to max_pages (1 MiB with libfuse 3.14) in one,
 * and INIT can only lower the readahead (libfuse's -o max_readahead), so after the
 * mount the daemon raises it where root may: /sys/class/bdi/MAJ:MIN/read_ahead_kb,
 * MAJ:MIN being the mount's device as /proc/self/mountinfo gives it (a stat(2) of the
 * mount point would wait for this very daemon, which does not serve yet).
 * Measured (BENCHMARKS.md §13): full/, records in the page cache, 2,000 files in
 * record order, one thread, 6 interleaved rounds: 2,633 READs at 128 kB, 2,000 at
 * 1024 kB, 6,195 against 6,912 files/s (medians).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
    char *w = s;

    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *w++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
            s += 3;
        } else {
            *w++ = *s;
        }
    }
    *w = '\0';
}

/* The device ("0:53") of the last fuse mount at @mnt, into @dev. @return 0 or -ENOENT. */
static int mount_dev(const char *mnt, char *dev, size_t devlen)
{
    char line[8192];
    int found = -ENOENT;
    FILE *f = fopen("/proc/self/mountinfo", "re");

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char *sp = NULL, *id = strtok_r(line, " ", &sp), *parent = strtok_r(NULL, " ", &sp);
        char *mm = strtok_r(NULL, " ", &sp), *root = strtok_r(NULL, " ", &sp);
        char *point = strtok_r(NULL, " ", &sp), *rest = strtok_r(NULL, "\n", &sp);
        char *dash;

        if (!id || !parent || !mm || !root || !point || !rest)
            continue;
        dash = strstr(rest, " - ");
        if (!dash || strncmp(dash + 3, "fuse", 4) != 0)
            continue;
        unescape(point);
        if (strcmp(point, mnt) == 0 && strlen(mm) < devlen) {
            memcpy(dev, mm, strlen(mm) + 1);
            found = 0; /* the last one wins: a mount on top of an older one */
        }
    }
    fclose(f);
    return found;
}

int pcrfs_set_read_ahead(const char *mountpoint, unsigned kb)
{
    char dev[32], path[96], val[16];
    int fd, n, rc = mount_dev(mountpoint, dev, sizeof(dev));

    if (rc)
        return rc;
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = snprintf(val, sizeof(val), "%u\n", kb);
    rc = write(fd, val, (size_t)n) == n ? 0 : -errno;
    close(fd);
    return rc;
}
