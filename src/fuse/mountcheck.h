/* mountcheck.c: what is checked about the mount point, the path options and the
 * process's resources before anything is mounted, so that a mount that cannot go
 * ahead fails on the terminal with one line, and leaves nothing behind. */
#ifndef PCRFS_MOUNTCHECK_H
#define PCRFS_MOUNTCHECK_H

#include <stdbool.h>

struct fuse_args;

/* Take pcrfs's own mount-point option out of @args (libfuse 3 no longer knows it):
 * "-o nonempty", mount over a directory that is not empty or already a mount point.
 * Warns when auto_unmount cannot work (an ordinary user without allow_other or
 * allow_root). @return 0, or -1 (out of memory). */
int pcrfs_mc_take_opts(struct fuse_args *args, bool *nonempty);

/* Before fuse_parse_cmdline(), whose realpath() of the mount point would fail with a
 * bare "Transport endpoint is not connected": a mount point left by a daemon that
 * died is named with the command that clears it. @args holds MOUNTPOINT as its first
 * non-option. @return 0, or -1 (message printed). */
int pcrfs_mc_stale(const struct fuse_args *args);

/* MOUNTPOINT (absolute, as libfuse resolved it): a directory, not inside the local
 * store @store (NULL for a URL), not already a mount point and empty unless
 * @nonempty. @return 0, or -1 (message printed). */
int pcrfs_mc_mountpoint(const char *mnt, const char *store, bool nonempty);

/* Make the path option @name=*@path absolute (the daemon works from "/"), and refuse
 * it inside the mount point (the daemon would wait on its own mount) or inside the
 * local store @store (NULL for a URL). *@path is replaced by a malloc'd absolute
 * path; NULL stays NULL. @return 0, or -1 (message printed). */
int pcrfs_mc_path(const char *name, char **path, const char *mnt, const char *store);

/* Enough descriptors left under RLIMIT_NOFILE for the daemon's own (/dev/fuse, the
 * index, the log, sockets); and /dev/fuse usable. @return 0, or -1 (message printed). */
int pcrfs_mc_resources(const char *mnt);

/* Whether a syslog socket answers at /dev/log. */
bool pcrfs_mc_have_syslog(void);

#endif
