/* pcrfs — a remote store's index.db on this machine: the local cache directory,
 * index.db fetched into it once, the record-prefix cache started there
 * (pcr_backend_http_fetch_index()); store/remote.c opens the store on it.
 *
 * index.db is kept as DIR/index-HASH.db, HASH from the remote object's size and
 * ETag: a copy whose name matches the HEAD answer is the current one and is used
 * without a GET; otherwise it is fetched into a temporary file (GET with If-Match,
 * so the bytes are those of that ETag) and renamed into place, so that concurrent
 * mounts and a crash mid-fetch never leave a half-written index under that name.
 * The copy is then validated like any local index (pcr_index_open(), when the
 * store layer opens it: store/remote.c). With no usable cache directory, the index
 * goes to a temporary file instead (unlinked once opened) and records are read
 * without a cache.
 *
 * Trust. What is in the cache is served as the store, so the cache must be ours: the
 * cache directory and the store's folder in it are refused (one line, the mount
 * fails) when either is a symbolic link, owned by another user, or writable by
 * group or others; we make them 0700. A copy of index.db is used only when its name
 * matches the server's ETag and size AND its content hash matches the one recorded
 * beside it (index-HASH.sum) when it was fetched; a copy that fails either, or that
 * does not open as an index, is removed and fetched again (once per mount, counted
 * in the stats), so a damaged cache heals instead of failing every mount.
 *
 * Range. pcrfs reads records by range; a server that answers a ranged GET with the
 * whole object (200) is refused at mount with one line, instead of every read
 * downloading whole records and failing.
 */
#include <dirent.h>
#include <inttypes.h>
#include <errno.h>
#include <pwd.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/http_internal.h"

#define MAX_INDEX     (64ULL << 30)
#define CACHE_DEFAULT (1ULL << 30)

int http_default_cache_dir(char *out, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;

    if (geteuid() == 0)
        n = snprintf(out, len, "/var/cache/pcrfs");
    else if (xdg && xdg[0] == '/')
        n = snprintf(out, len, "%s/pcrfs", xdg);
    else if (home && home[0] == '/')
        n = snprintf(out, len, "%s/.cache/pcrfs", home);
    else {
        /* no HOME (mount(8) at boot, a service): the user's home from the password
         * database, as a login would set it */
        struct passwd pw, *res = NULL;
        char buf[4096];

        if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &res) != 0 || !res || !pw.pw_dir ||
            pw.pw_dir[0] != '/')
            return -ENOENT;
        n = snprintf(out, len, "%s/.cache/pcrfs", pw.pw_dir);
    }
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Remove the directories make_dirs() made (@made > 0: the first one's length), deepest first;
 * rmdir(2) leaves a directory something else has put a file in since. */
static void unmake_dirs(const char *path, size_t made)
{
    char p[4096];
    char *slash;

    if (!made || strlen(path) >= sizeof(p))
        return;
    memcpy(p, path, strlen(path) + 1);
    while (strlen(p) >= made && rmdir(p) == 0 && (slash = strrchr(p, '/')) != NULL)
        *slash = '\0';
}

/* mkdir -p, the last levels private to the user. *@made: the length of the first
 * directory made (a prefix of @path), 0 when all existed: what unmake_dirs()
 * removes when the mount does not go ahead. */
static int make_dirs(const char *path, size_t *made)
{
    char p[4096];
    size_t n = strlen(path);

    *made = 0;
    if (n == 0 || n >= sizeof(p))
        return -ENAMETOOLONG;
    memcpy(p, path, n + 1);
    for (char *s = p + 1;; s++) {
        char c = *s;

        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) == 0) {
            if (!*made)
                *made = (size_t)(s - p);
        } else if (errno != EEXIST) {
            int rc = -errno;

            unmake_dirs(p, *made);
            *made = 0;
            return rc;
        }
        *s = c;
        if (!c)
            break;
    }
    struct stat sb;
    if (stat(p, &sb) != 0)
        return -errno;
    if (!S_ISDIR(sb.st_mode))
        return -ENOTDIR;
    return access(p, W_OK | X_OK) == 0 ? 0 : -errno;
}

/* Whether @path (a cache directory) may be trusted: a directory, not a symbolic
 * link, owned by us and writable by no one else. @return 0; -EPERM with the reason
 * in @err; another negative errno (it cannot be opened: not a trust question). */
static int dir_trusted(const char *path, char *err, size_t errlen)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), ret = 0;

    if (fd < 0) {
        int e = errno;
        if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
            pcr_errf(err, errlen,
                     "cache %s: a symbolic link: refused (the cache directory "
                     "and its folders must be real directories of this user)",
                     path);
            return -EPERM;
        }
        return -e;
    }
    if (fstat(fd, &sb) != 0)
        ret = -errno;
    else if (sb.st_uid != geteuid())
        pcr_errf(err, errlen,
                 "cache %s: owned by uid %u, not by this user (uid %u): refused "
                 "(another user could change what is served)",
                 path, (unsigned)sb.st_uid, (unsigned)geteuid()),
            ret = -EPERM;
    else if (sb.st_mode & (S_IWGRP | S_IWOTH))
        pcr_errf(err, errlen,
                 "cache %s: writable by group or others (mode %03o): refused "
                 "(another user could change what is served; chmod go-w or use another "
                 "directory)",
                 path, (unsigned)(sb.st_mode & 07777)),
            ret = -EPERM;
    close(fd);
    return ret;
}

/* xxh64 of the file at @path (not followed if a symbolic link). @return 0; -errno. */
static int file_hash(const char *path, uint64_t *out)
{
    struct pcr_xxh64 st;
    char *buf = malloc(1u << 20);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), ret = 0;
    ssize_t n;

    *out = 0; /* defined on every path, an error's too */
    if (fd < 0 || !buf) {
        ret = fd < 0 ? -errno : -ENOMEM;
        goto out;
    }
    pcr_xxh64_init(&st);
    while ((n = read(fd, buf, 1u << 20)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            ret = -errno;
            goto out;
        }
        pcr_xxh64_update(&st, buf, (size_t)n);
    }
    *out = pcr_xxh64_final(&st);
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return ret;
}

/* @index's .sum beside it: "index-HASH.db" -> "index-HASH.sum". */
static void sum_path(const char *index, char *out, size_t len)
{
    size_t n = strlen(index);

    snprintf(out, len, "%.*s.sum", (int)(n > 3 ? n - 3 : n), index);
}

/* Whether the copy at @path has the content hash recorded when it was fetched. */
static bool index_verified(const char *path)
{
    char sp[4300], text[40], *end;
    uint64_t want, have;
    ssize_t n;
    int fd;

    sum_path(path, sp, sizeof(sp));
    fd = open(sp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n != 17 || text[16] != '\n')
        return false;
    text[16] = '\0';
    errno = 0;
    want = strtoull(text, &end, 16); /* 16 hex digits, as index_record_hash() writes */
    if (end != text + 16 || errno != 0 || file_hash(path, &have) != 0)
        return false;
    return want == have;
}

/* Record the content hash of the fetched copy @tmp for its final name @path. */
static int index_record_hash(const char *tmp, const char *path)
{
    char sp[4300], stmp[4400], text[20];
    uint64_t h;
    int fd, ret = file_hash(tmp, &h);

    if (ret)
        return ret;
    sum_path(path, sp, sizeof(sp));
    snprintf(stmp, sizeof(stmp), "%s.XXXXXX", sp);
    fd = mkostemp(stmp, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    snprintf(text, sizeof(text), "%016" PRIx64 "\n", h);
    ret = write(fd, text, 17) == 17 ? 0 : -EIO;
    close(fd);
    if (ret || rename(stmp, sp) != 0) {
        ret = ret ? ret : -errno;
        unlink(stmp);
    }
    return ret;
}

/* Remove the cached copy at @path and its hash. */
static void index_forget(const char *path)
{
    char sp[4300];

    sum_path(path, sp, sizeof(sp));
    unlink(path);
    unlink(sp);
}

/* The message for a request about the store itself that failed. */
static void store_failure(struct http_backend *hb, struct http_req *r, char *err, size_t errlen)
{
    const struct http_target *t = &hb->x.t;
    char why[160];

    http_describe(r, why, sizeof(why));
    if (r->err == -EACCES && t->sign)
        pcr_errf(err, errlen, "%s: %s: check %s (credentials from %s)", t->display, why,
                 strcmp(http_creds_source(t->creds), "environment")
                     ? "the credentials"
                     : "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                 http_creds_source(t->creds));
    else if (r->err == -EACCES && t->s3)
        pcr_errf(err, errlen, "%s: %s: no credentials found (tried: %s)", t->display, why,
                 http_creds_tried(t->creds));
    else if (r->err == -ENOENT && strcmp(r->code, "NoSuchBucket") != 0)
        pcr_errf(err, errlen, "%s: not a pcrfs store (no index.db: %s)", t->display, why);
    else if (r->err == -ETIMEDOUT)
        pcr_errf(err, errlen, "%s: %s after %.1f s (%s)", t->display, why,
                 (double)hb->x.timeout_ms / 1000.0, r->url);
    else if (r->status)
        pcr_errf(err, errlen, "%s: %s", t->display, why);
    else
        pcr_errf(err, errlen, "%s: %s (%s)", t->display, why, r->url);
}

/* Remove the copies of other versions of the index (another mount may still have
 * one open: unlinking does not disturb it). */
static void remove_stale(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    size_t stem = strlen(keep) - 3; /* "index-HASH" */

    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        bool db = n > 9 && !strcmp(e->d_name + n - 3, ".db");
        bool sum = n > 10 && !strcmp(e->d_name + n - 4, ".sum");
        if (!strncmp(e->d_name, "index-", 6) && (db || sum) && strncmp(e->d_name, keep, stem) != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* GET index.db (@size bytes, ETag @etag) into a new temporary file in @dir.
 * @return the open fd and its name in @tmp; a negative errno (@r says why). */
static int get_index(struct http_backend *hb, const char *url, const char *dir, uint64_t size,
                     const char *etag, char *tmp, size_t tmplen, struct http_req *r)
{
    int fd, ret;

    *r = (struct http_req){.fd = -1}; /* no r->err for a failure before the GET */
    if ((size_t)snprintf(tmp, tmplen, "%s/.index.XXXXXX", dir) >= tmplen)
        return -ENAMETOOLONG;
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    *r = (struct http_req){.url = url, .expect = size, .if_match = etag, .fd = fd};
    ret = size ? http_perform(&hb->x, r, 1) : 0;
    if (ret == 0 && r->got != size)
        ret = -EIO;
    if (ret) {
        close(fd);
        unlink(tmp);
        return ret;
    }
    return fd;
}

/* index.db into @dir (or a temporary file when @dir is NULL or unusable).
 * @return 0 and its path in @path, *temp when it must be unlinked after opening. */
static int fetch_index(struct http_backend *hb, const char *dir, char *path, size_t len, bool *temp,
                       bool *cached, char *err, size_t errlen)
{
    struct http_req head = {.head = true, .fd = -1}, r;
    char url[HTTP_MAX_URL], tmp[4200], name[64], etag[HTTP_MAX_ETAG + 1];
    struct stat sb;
    int fd, ret;

    ret = http_object_url(&hb->x.t, "index.db", url, sizeof(url));
    if (ret) {
        pcr_errf(err, errlen, "%s: URL too long", hb->x.t.display);
        return -EINVAL;
    }
    head.url = url;
    ret = http_perform(&hb->x, &head, 1);
    if (ret == -ENOENT && hb->x.t.s3) {
        /* HEAD has no body: ask again with GET to tell a missing bucket from a
         * missing object */
        uint8_t b;
        struct http_req g = {.url = url, .off = 0, .len = 1, .buf = &b, .fd = -1};
        if (http_perform(&hb->x, &g, 1) == -ENOENT && g.code[0])
            memcpy(head.code, g.code, sizeof(head.code));
    }
    if (ret) {
        store_failure(hb, &head, err, errlen);
        return ret;
    }
    if (head.size > MAX_INDEX) {
        pcr_errf(err, errlen, "%s: index.db is %llu bytes: not a pcrfs index", hb->x.t.display,
                 (unsigned long long)head.size);
        return -EINVAL;
    }
    snprintf(etag, sizeof(etag), "%s", strncmp(head.etag, "W/", 2) ? head.etag : "");
    if (head.size >= 2) {
        /* the last byte by range: a server that sends the whole object instead is no
         * use (every read would download whole records) */
        uint8_t b;
        struct http_req g = {.url = url,
                             .off = head.size - 1,
                             .len = 1,
                             .expect = head.size,
                             .if_match = etag,
                             .buf = &b,
                             .fd = -1};
        ret = http_perform(&hb->x, &g, 1);
        if (ret && g.status == 200) {
            pcr_errf(err, errlen,
                     "%s: the server does not honour Range requests (HTTP 200 "
                     "with the whole object for a ranged GET of index.db): pcrfs reads "
                     "records by range and cannot use it",
                     hb->x.t.display);
            return -ENOTSUP;
        }
        if (ret) {
            store_failure(hb, &g, err, errlen);
            return ret;
        }
    }
    {
        struct pcr_xxh64 st;
        pcr_xxh64_init(&st);
        pcr_xxh64_update(&st, head.etag, strlen(head.etag));
        pcr_xxh64_update(&st, &head.size, sizeof(head.size));
        snprintf(name, sizeof(name), "index-%016llx.db", (unsigned long long)pcr_xxh64_final(&st));
    }
    *temp = false;
    *cached = false;
    if (dir) {
        snprintf(path, len, "%s/%s", dir, name);
        if (lstat(path, &sb) == 0) {
            if (S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
                (uint64_t)sb.st_size == head.size && head.etag[0] && index_verified(path)) {
                *cached = true;
                return 0; /* the copy of this version is here, as it was fetched */
            }
            pcr_log(PCR_LOG_WARN,
                    "cache %s: the copy of index.db fails verification "
                    "(its size or content hash); fetched again",
                    dir);
            http_count(&hb->x.st.index_refetches, 1);
            index_forget(path);
        }
        fd = get_index(hb, url, dir, head.size, etag, tmp, sizeof(tmp), &r);
        if (fd >= 0) {
            close(fd);
            if (index_record_hash(tmp, path) == 0 && rename(tmp, path) == 0) {
                remove_stale(dir, name);
                return 0;
            }
            unlink(tmp);
        } else if (fd != -ENOSPC && fd != -EACCES && fd != -EROFS && fd != -EDQUOT &&
                   fd != -ENOENT && fd != -ENAMETOOLONG) {
            store_failure(hb, &r, err, errlen); /* the server's fault, not the cache's */
            return fd;
        }
        pcr_log(PCR_LOG_WARN, "cache %s: cannot keep index.db there (%s); using a temporary copy",
                dir, strerror(fd < 0 ? -fd : errno));
    }
    const char *tdir = getenv("TMPDIR");
    fd = get_index(hb, url, tdir && *tdir ? tdir : "/tmp", head.size, etag, tmp, sizeof(tmp), &r);
    if (fd < 0) {
        if (r.err)
            store_failure(hb, &r, err, errlen);
        else
            pcr_errf(err, errlen, "%s: no room for index.db (%llu bytes) in the cache or in %s: %s",
                     hb->x.t.display, (unsigned long long)head.size, tdir && *tdir ? tdir : "/tmp",
                     strerror(-fd));
        return fd;
    }
    close(fd);
    snprintf(path, len, "%s", tmp);
    *temp = true;
    return 0;
}

static uint64_t default_limit(const char *dir)
{
    struct statvfs sv;
    uint64_t tenth;

    if (statvfs(dir, &sv) != 0)
        return CACHE_DEFAULT;
    tenth = (uint64_t)sv.f_blocks * sv.f_frsize / 10;
    return tenth < CACHE_DEFAULT ? tenth : CACHE_DEFAULT;
}

int pcr_backend_http_fetch_index(struct pcr_backend *b, const struct pcr_http_opts *o, bool again,
                                 struct pcr_http_index *ix, char *err, size_t errlen)
{
    struct http_backend *hb = (struct http_backend *)b;
    char base[4096];
    bool have_dir = false;
    size_t made = 0;
    int ret;

    ix->path[0] = ix->dir[0] = '\0';
    ix->temp = ix->cached = false;
    if (again)
        http_count(&hb->x.st.index_refetches, 1);
    if (o && o->cache_dir && *o->cache_dir)
        ret = snprintf(base, sizeof(base), "%s", o->cache_dir) >= (int)sizeof(base) ? -ENAMETOOLONG
                                                                                    : 0;
    else
        ret = http_default_cache_dir(base, sizeof(base));
    if (ret == 0) {
        /* one directory per store: the URL as requests see it (endpoint included) */
        snprintf(ix->dir, sizeof(ix->dir), "%s/%016llx", base,
                 (unsigned long long)pcr_xxh64(hb->x.t.base, strlen(hb->x.t.base)));
        ret = make_dirs(ix->dir, &made);
        /* ours, or refused: a cache another user can change is a way to change what
         * is served */
        if (ret == 0 && ((ret = dir_trusted(base, err, errlen)) == -EPERM ||
                         (ret == 0 && (ret = dir_trusted(ix->dir, err, errlen)) == -EPERM))) {
            unmake_dirs(ix->dir, made);
            return -EPERM;
        }
    }
    if (ret)
        pcr_log(PCR_LOG_WARN,
                "cache %s: %s; index.db goes to a temporary file and records "
                "are read without a cache",
                ret == -ENOENT && !(o && o->cache_dir) ? "(no HOME)" : base, strerror(-ret));
    have_dir = ret == 0;
    if (!have_dir)
        ix->dir[0] = '\0';
    ret = fetch_index(hb, have_dir ? ix->dir : NULL, ix->path, sizeof(ix->path), &ix->temp,
                      &ix->cached, err, errlen);
    if (ret) {
        if (have_dir) /* nothing left behind by a mount that failed */
            unmake_dirs(ix->dir, made);
        return ret;
    }
    if (have_dir) {
        uint64_t limit = o && o->cache_size ? o->cache_size : default_limit(ix->dir);
        if (http_cache_new(&hb->x, ix->dir, limit, &hb->cache) != 0)
            hb->cache = NULL;
    }
    return 0;
}

void pcr_backend_http_forget_index(const struct pcr_http_index *ix)
{
    index_forget(ix->path);
}
