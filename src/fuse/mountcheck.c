/* Checks before the mount (mountcheck.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs.h"
#include "mountcheck.h"

/* Descriptors the daemon needs besides the ones open when it starts, at the least:
 * /dev/fuse, the pipe to the waiting parent, the log file or syslog socket, the index
 * (SQLite may open a second), the store's directory, one record, and one spare (a
 * refurb cache file or an HTTP connection). Fewer cannot serve one file. */
#define MIN_FREE_FDS 8

enum { KEY_NONEMPTY, KEY_AUTO_UNMOUNT, KEY_ALLOW };

static const struct fuse_opt mc_spec[] = {
    FUSE_OPT_KEY("nonempty", KEY_NONEMPTY),
    FUSE_OPT_KEY("auto_unmount", KEY_AUTO_UNMOUNT),
    FUSE_OPT_KEY("allow_other", KEY_ALLOW),
    FUSE_OPT_KEY("allow_root", KEY_ALLOW),
    FUSE_OPT_END,
};

struct seen {
    bool nonempty, auto_unmount, allow;
};

static int take_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct seen *s = data;

    (void)arg;
    (void)outargs;
    switch (key) {
    case KEY_NONEMPTY:
        s->nonempty = true;
        return 0; /* taken out: fusermount3 and the kernel do not know it */
    case KEY_AUTO_UNMOUNT:
        s->auto_unmount = true;
        return 1; /* libfuse's: kept */
    case KEY_ALLOW:
        s->allow = true;
        return 1;
    default:
        return 1;
    }
}

int pcrfs_mc_take_opts(struct fuse_args *args, bool *nonempty)
{
    struct seen s = {0};

    if (fuse_opt_parse(args, &s, mc_spec, take_proc) != 0)
        return -1;
    *nonempty = s.nonempty;
    /* fusermount3 unmounts as root after checking that it can open the mount point,
     * which root cannot on an ordinary user's mount without allow_other/allow_root
     * (libfuse 3.14, Debian 12): the mount would stay behind, stale */
    if (s.auto_unmount && !s.allow && geteuid() != 0)
        fprintf(stderr, "pcrfs: warning: auto_unmount: for an ordinary user it takes effect "
                        "only with allow_other or allow_root (see pcrfs(1))\n");
    return 0;
}

/* Copied: fuse_opt_parse() frees the arguments it was given when it is done. */
static int first_nonopt(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    char **mnt = data;

    (void)outargs;
    if (key == FUSE_OPT_KEY_NONOPT && !*mnt)
        *mnt = strdup(arg);
    return 1;
}

static void stale_line(const char *mnt)
{
    fprintf(stderr,
            "pcrfs: %s: a stale FUSE mount (its daemon has exited): run "
            "fusermount3 -u %s, then mount again\n",
            mnt, mnt);
}

/* A FUSE mount whose daemon is gone. stat(2) can still succeed from the kernel's
 * cached attributes of the root (pcrfs caches them for a day); statfs(2) always asks
 * the daemon, and an aborted connection answers ENOTCONN. */
static bool mounted_at(const char *mnt, char *type, size_t len);

static bool is_stale(const char *mnt)
{
    struct statfs sf;
    char type[64], *real = realpath(mnt, NULL); /* lstat()s only: triggers nothing */
    bool autofs = real && mounted_at(real, type, sizeof(type)) && !strcmp(type, "autofs");

    free(real);
    /* statfs(2) would trigger an automount, which waits for this very mount */
    if (autofs)
        return false;
    return statfs(mnt, &sf) != 0 && (errno == ENOTCONN || errno == ECONNABORTED);
}

int pcrfs_mc_stale(const struct fuse_args *args)
{
    struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
    char *mnt = NULL;
    int rc = 0;

    for (int i = 0; i < args->argc; i++)
        if (fuse_opt_add_arg(&copy, args->argv[i]) != 0) {
            fuse_opt_free_args(&copy);
            return 0; /* out of memory: fuse_parse_cmdline() will say so */
        }
    /* the program's name is argv[0], never a non-option */
    if (fuse_opt_parse(&copy, &mnt, NULL, first_nonopt) == 0 && mnt && is_stale(mnt)) {
        stale_line(mnt);
        rc = -1;
    }
    free(mnt);
    fuse_opt_free_args(&copy);
    return rc;
}

/* Is @path @dir or inside it (both absolute and canonical)? */
static bool inside(const char *path, const char *dir)
{
    size_t n = strlen(dir);

    if (n == 1 && dir[0] == '/')
        return true;
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* @path made absolute and canonical as far as it exists (symbolic links resolved),
 * the rest (what mkdir -p or open(O_CREAT) would make) appended with "." and ".."
 * taken lexically. @return a malloc'd path, or NULL (errno set). */
static char *canonical(const char *path)
{
    char buf[PATH_MAX], *r, *slash;
    char tail[PATH_MAX] = "";
    size_t n;

    if (path[0] == '/') {
        if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
            return errno = ENAMETOOLONG, NULL;
    } else {
        if (!getcwd(buf, sizeof(buf)))
            return NULL;
        n = strlen(buf);
        if (snprintf(buf + n, sizeof(buf) - n, "/%s", path) >= (int)(sizeof(buf) - n))
            return errno = ENAMETOOLONG, NULL;
    }
    /* the longest prefix that exists */
    while ((r = realpath(buf, NULL)) == NULL && errno == ENOENT) {
        char t[PATH_MAX];

        slash = strrchr(buf, '/');
        if (!slash)
            return NULL;
        if (snprintf(t, sizeof(t), "%s%s%s", slash + 1, tail[0] ? "/" : "", tail) >= (int)sizeof(t))
            return errno = ENAMETOOLONG, NULL;
        memcpy(tail, t, strlen(t) + 1);
        if (slash == buf) {
            r = strdup("/");
            break;
        }
        *slash = '\0';
    }
    if (!r)
        return NULL;
    if (snprintf(buf, sizeof(buf), "%s", strcmp(r, "/") ? r : "") >= (int)sizeof(buf)) {
        free(r);
        return errno = ENAMETOOLONG, NULL;
    }
    free(r);
    for (char *save = NULL, *c = strtok_r(tail, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            slash = strrchr(buf, '/');
            if (slash)
                *slash = '\0';
            continue;
        }
        n = strlen(buf);
        if (snprintf(buf + n, sizeof(buf) - n, "/%s", c) >= (int)(sizeof(buf) - n))
            return errno = ENAMETOOLONG, NULL;
    }
    return strdup(buf[0] ? buf : "/");
}

/* The mount table's entry at @mnt, if any: its type into @type. /proc/self/mountinfo
 * escapes ' ', '\t', '\n' and '\\' in octal. */
static bool mounted_at(const char *mnt, char *type, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char *line = NULL;
    size_t cap = 0;
    bool found = false;

    if (!f)
        return false;
    while (!found && getline(&line, &cap, f) > 0) {
        char point[PATH_MAX], *p, *sep, *o = point;
        int field = 0;

        /* ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER */
        for (p = line; *p && field < 4; p++)
            if (*p == ' ')
                field++;
        for (; *p && *p != ' ' && o < point + sizeof(point) - 1; p++) {
            if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
                p[3] >= '0' && p[3] <= '7') {
                *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
                p += 3;
            } else {
                *o++ = *p;
            }
        }
        *o = '\0';
        if (strcmp(point, mnt) != 0)
            continue;
        found = true;
        sep = strstr(p, " - ");
        snprintf(type, len, "%s", sep ? sep + 3 : "?");
        type[strcspn(type, " \n")] = '\0';
    }
    free(line);
    fclose(f);
    return found;
}

/* Entries in @dir besides "." and "..", counted up to @max. */
/* "/dev/fd/N", N a descriptor number and nothing after it: /dev/fuse opened by a
 * privileged mounter (libfuse's own reading of such a mount point). */
static bool fd_mount(const char *mnt)
{
    static const char head[] = "/dev/fd/";
    const char *num = mnt + sizeof(head) - 1;
    unsigned long v;
    char *end;

    if (strncmp(mnt, head, sizeof(head) - 1) != 0 || *num < '0' || *num > '9')
        return false;
    errno = 0;
    v = strtoul(num, &end, 10);
    return errno == 0 && *end == '\0' && v <= UINT_MAX;
}

static int entries(const char *dir, int max)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (!d)
        return 0;
    while (n < max && (de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

int pcrfs_mc_mountpoint(const char *mnt, const char *store, bool nonempty)
{
    char type[64], *st_abs = NULL;
    struct stat st;
    bool mounted;
    int n;

    if (fd_mount(mnt))
        return 0; /* a descriptor of /dev/fuse passed by a privileged mounter */
    mounted = mounted_at(mnt, type, sizeof(type));
    /* An autofs trigger (x-systemd.automount) is there to be mounted over, and
     * looking into it would trigger the automount, which waits for this mount. */
    if (mounted && !strcmp(type, "autofs"))
        return 0;
    if (is_stale(mnt)) {
        stale_line(mnt);
        return -1;
    }
    if (stat(mnt, &st) != 0) {
        fprintf(stderr, "pcrfs: %s: %s\n", mnt, strerror(errno));
        return -1;
    }
    /* The kernel mounts a FUSE filesystem on a regular file as readily as on a
     * directory, and every access then fails with EIO. */
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "pcrfs: %s: not a directory\n", mnt);
        return -1;
    }
    /* inside the store: the store's own tree would be hidden by what serves it */
    if (store && (st_abs = realpath(store, NULL)) != NULL && inside(mnt, st_abs)) {
        fprintf(stderr, "pcrfs: %s: the mount point is %sthe store %s\n", mnt,
                strcmp(mnt, st_abs) ? "inside " : "", st_abs);
        free(st_abs);
        return -1;
    }
    free(st_abs);
    if (nonempty)
        return 0;
    /* a second pcrfs on a mounted point would stack a second mount and daemon */
    if (mounted) {
        fprintf(stderr,
                "pcrfs: %s: already a mount point (%s): unmount it first, or give "
                "-o nonempty to mount over it\n",
                mnt, type);
        return -1;
    }
    n = entries(mnt, 1000);
    if (n > 0) {
        fprintf(stderr,
                "pcrfs: %s: not empty (%d%s entries would be hidden): give -o "
                "nonempty to mount over them\n",
                mnt, n, n >= 1000 ? "+" : "");
        return -1;
    }
    return 0;
}

int pcrfs_mc_path(const char *name, char **path, const char *mnt, const char *store)
{
    char *abs, *st_abs = NULL;
    const char *where = NULL;

    if (!*path)
        return 0;
    if (!**path) {
        fprintf(stderr, "pcrfs: %s=: no path\n", name);
        return -1;
    }
    abs = canonical(*path);
    if (!abs) {
        fprintf(stderr, "pcrfs: %s=%s: %s\n", name, *path, strerror(errno));
        return -1;
    }
    if (inside(abs, mnt))
        where = "the mount point";
    else if (store && (st_abs = realpath(store, NULL)) != NULL && inside(abs, st_abs))
        where = "the store";
    if (where) {
        fprintf(stderr, "pcrfs: %s=%s: inside %s %s (pcrfs does not write there)\n", name, *path,
                where, where[4] == 'm' ? mnt : st_abs);
        free(st_abs);
        free(abs);
        return -1;
    }
    free(st_abs);
    free(*path);
    *path = abs;
    return 0;
}

/* Descriptors open now (/proc/self/fd, less the one that lists it). */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    long n = 0;

    if (!d)
        return -1;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

int pcrfs_mc_resources(const char *mnt)
{
    struct rlimit rl;
    long used = open_fds();

    if (used >= 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long long)rl.rlim_cur - used < MIN_FREE_FDS) {
        fprintf(stderr,
                "pcrfs: too few file descriptors: the open-file limit is %llu and %ld "
                "are in use; pcrfs needs %d more (raise the limit: ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, used, MIN_FREE_FDS);
        return -1;
    }
    if (fd_mount(mnt))
        return 0; /* the mounter opened /dev/fuse */
    /* libfuse opens /dev/fuse as the calling user before it tries fusermount3, and
     * stops there with a bare "failed to open /dev/fuse" */
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        if (errno == ENOENT)
            fprintf(stderr, "pcrfs: /dev/fuse: no such device (load the fuse module: "
                            "modprobe fuse)\n");
        else
            fprintf(stderr,
                    "pcrfs: /dev/fuse: %s: mounting needs read and write access to "
                    "it (as root, or a mode such as 0666; see pcrfs(1))\n",
                    strerror(errno));
        return -1;
    }
    return 0;
}

bool pcrfs_mc_have_syslog(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = "/dev/log"};
    bool ok = false;

    /* syslog(3) tries a datagram socket, then a stream one */
    for (int i = 0; i < 2 && !ok; i++) {
        int s = socket(AF_UNIX, (i ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);

        if (s < 0)
            continue;
        ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
        close(s);
    }
    return ok;
}
