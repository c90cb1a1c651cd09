/* mkpcrfs — build a pcrfs store from an ImageFolder-like tree.
 *
 * Three phases:
 *  1. Walk SRC breadth-first, directory by directory, and number the tree the way
 *     pcrfs/writer.h requires (directories in BFS order with each directory's
 *     children contiguous and sorted by name, files grouped by directory and
 *     sorted). Directories are reopened by their path relative to SRC with
 *     openat(), so the walk holds two descriptors at any depth.
 *  2. Transcode with -j worker threads. Workers claim file ids in increasing order
 *     and put results into a ring of slots; the main thread takes the slots in id
 *     order, record by record, and hands each full record to the writer. The
 *     store's bytes therefore depend on nothing but SRC and the options recorded in
 *     it, never on -j or on timing. A worker may not claim a file more than two
 *     records ahead of the record being written: that bounds memory to three
 *     records of images whatever the speed of the disk.
 *  3. Record the build options, commit (the writer renames the temporary
 *     directory into place), then open the new store and print its summary with the
 *     same code as pcrinfo.
 * Token grids (--tokens, --seit; tokimport.h) are read, checked and trained on
 * before phase 1, so that a bad token input fails before any image is transcoded,
 * and written to the store between phases 2 and 3. With tokens SRC may be left
 * out: the image tree is then its root alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/store.h"
#include "pcrfs/writer.h"
#include "progress.h"
#include "summary.h"
#include "tokimport.h"
#include "tool.h"

#define DEFAULT_PER_RECORD 1024
#define MAX_PER_RECORD     (1u << 20)
#define MAX_JOBS           1024
#define MAX_SCRIPT_BYTES   (1u << 20) /* a --scans FILE larger than this is refused */
enum { EXCL_NONE, EXCL_TMP, EXCL_STORE };

/* Records a worker may run ahead of the one being written, plus that one. */
#define WINDOW 3

struct dnode {
    uint64_t parent; /* id of the parent (the root: 1) */
    char *name;      /* "" for the root */
    char *rel;       /* path relative to SRC, "" for the root */
    dev_t dev;       /* identity, to detect loops through symlinks */
    ino_t ino;
    uint64_t first_child, nsubdirs;
    uint64_t first_file, nfiles;
};

struct fnode {
    uint64_t dir; /* id of its directory */
    char *name;
};

/* One file's result, filled by a worker, consumed by the main thread. */
struct slot {
    bool done; /* under b->lock */
    enum pcr_kind kind;
    uint8_t *data; /* malloc()ed: the progressive JPEG or the source bytes */
    size_t len;
    uint64_t src_size;
    struct pcr_split split;    /* JPEG only */
    struct pcr_jpeg_info info; /* JPEG only */
    char note[256];            /* VERBATIM: why */
};

struct build {
    const char *src, *store;
    int srcfd;
    unsigned jobs, per_record;
    bool force, drop_markers, quiet, progress, verbose;
    struct pcr_scripts scripts; /* --scans: what every JPEG is transcoded with */

    struct dnode *dirs;
    uint64_t ndirs, dircap;
    struct fnode *files;
    uint64_t nfiles, filecap;
    uint64_t total_bytes, skipped;
    /* Directories never to enter: the temporary store and the existing store, when
     * STORE lies inside SRC. */
    struct {
        dev_t dev;
        ino_t ino;
        int what; /* EXCL_TMP or EXCL_STORE */
    } exclude[2];
    unsigned nexclude;

    struct pcr_writer *w;

    /* The pipeline. */
    pthread_mutex_t lock;
    pthread_cond_t space_cv; /* the writer moved on: workers may claim more */
    pthread_cond_t done_cv;  /* a slot is done, or a worker failed */
    struct slot *slots;
    uint64_t nslots;
    uint64_t next; /* next file index (0-based) to claim */
    uint64_t wrec; /* record the main thread is collecting */
    bool stop;     /* interrupted or failed: workers leave */
    bool failed;
    char errmsg[1024]; /* first worker failure */
};

static volatile sig_atomic_t interrupted;

/* The temporary directory, for the allocation failure path (see on_oom()). */
static char *tmpdir_copy;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Out of memory, maybe in a worker while the main thread uses the writer: the
 * writer cannot be aborted safely from here, so remove its directory by path;
 * the process exits right after. (A leftover would also be removed by the next
 * build of the same STORE, as its PID is gone.) */
static void on_oom(void)
{
    if (tmpdir_copy)
        nftw(tmpdir_copy, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (!p)
        tool_oom();
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;

    return memcpy(xmalloc(n), s, n);
}

static void *grow(void *p, uint64_t *cap, size_t size)
{
    *cap = *cap ? *cap * 2 : 64;
    p = realloc(p, *cap * size);
    if (!p)
        tool_oom();
    return p;
}

/* "REL/NAME" (or NAME at the root), malloc()ed. */
static char *join(const char *rel, const char *name)
{
    size_t a = strlen(rel), n = strlen(name);
    char *p = xmalloc(a + n + 2);

    if (a) {
        memcpy(p, rel, a);
        p[a++] = '/';
    }
    memcpy(p + a, name, n + 1);
    return p;
}


/* ---- Phase 1: the walk ---- */

static int cmp_name(const void *a, const void *b)
{
    /* strcmp() compares as unsigned char: byte order, as the writer wants. */
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *type_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "FIFO";
    if (S_ISSOCK(m))
        return "socket";
    if (S_ISCHR(m))
        return "character device";
    if (S_ISBLK(m))
        return "block device";
    return "unknown type";
}

static void skip(struct build *b, const char *rel, const char *why)
{
    struct tool_buf esc = {0};

    tool_warn("skipped %s: %s", tool_escaped(&esc, rel), why);
    tool_buf_free(&esc);
    b->skipped++;
}

/* Is (dev, ino) directory @d or one of its ancestors? Then entering it loops. */
static bool on_path(const struct build *b, uint64_t d, dev_t dev, ino_t ino)
{
    for (;;) {
        const struct dnode *n = &b->dirs[d - 1];

        if (n->dev == dev && n->ino == ino)
            return true;
        if (d == PCR_ROOT_DIR)
            return false;
        d = n->parent;
    }
}

/* Read the names in directory @d, sorted. @return 0 or -1 (message printed). */
static int read_names(struct build *b, uint64_t d, int *dfd_out, char ***names_out, size_t *n_out)
{
    const char *rel = b->dirs[d - 1].rel;
    struct tool_buf esc = {0};
    struct dirent *de;
    char **names = NULL;
    uint64_t cap = 0;
    size_t n = 0;
    DIR *dir;
    int fd;

    fd = tool_open_rel(b->srcfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(dir = fdopendir(fd))) {
        int e = errno;

        if (fd >= 0)
            close(fd);
        tool_err("cannot open directory %s: %s", rel[0] ? tool_escaped(&esc, rel) : b->src,
                 strerror(e));
        tool_buf_free(&esc);
        return -1;
    }
    while ((errno = 0, de = readdir(dir)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap)
            names = grow(names, &cap, sizeof(*names));
        names[n++] = xstrdup(de->d_name);
    }
    if (errno) {
        int e = errno;

        tool_err("reading directory %s: %s", rel[0] ? tool_escaped(&esc, rel) : b->src,
                 strerror(e));
        tool_buf_free(&esc);
        closedir(dir);
        while (n)
            free(names[--n]);
        free(names);
        return -1;
    }
    if (n)
        qsort(names, n, sizeof(*names), cmp_name);
    /* Keep a descriptor for fstatat(); closedir() would close ours. */
    *dfd_out = dup(dirfd(dir));
    closedir(dir);
    if (*dfd_out < 0) {
        tool_err("dup: %s", strerror(errno));
        while (n)
            free(names[--n]);
        free(names);
        return -1;
    }
    *names_out = names;
    *n_out = n;
    return 0;
}

static int walk_dir(struct build *b, uint64_t d)
{
    struct tool_buf esc = {0};
    char **names;
    size_t n, i;
    int dfd, rc = 0;

    if (read_names(b, d, &dfd, &names, &n) < 0)
        return -1;
    b->dirs[d - 1].first_file = b->nfiles + 1;
    b->dirs[d - 1].first_child = b->ndirs + 1;
    for (i = 0; i < n && rc == 0; i++) {
        char *rel = join(b->dirs[d - 1].rel, names[i]);
        struct stat st, lst;
        unsigned k;

        if (interrupted) {
            free(rel);
            rc = -1;
            break;
        }
        if (fstatat(dfd, names[i], &st, 0) < 0) {
            int e = errno;

            /* A link whose target is missing or itself loops: ImageFolder could
             * not read it either, so warn and go on. Anything else is an error. */
            if ((e == ENOENT || e == ELOOP) &&
                fstatat(dfd, names[i], &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode)) {
                skip(b, rel,
                     e == ENOENT ? "dangling symbolic link" : "too many levels of symbolic links");
            } else {
                tool_err("cannot stat %s: %s", tool_escaped(&esc, rel), strerror(e));
                rc = -1;
            }
            free(rel);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            struct dnode *c;
            int excluded = EXCL_NONE;

            for (k = 0; k < b->nexclude; k++) {
                if (b->exclude[k].dev == st.st_dev && b->exclude[k].ino == st.st_ino)
                    excluded = b->exclude[k].what;
            }
            /* Our own output, when STORE lies inside SRC: never part of the data,
             * and not counted as skipped, so that the count does not depend on
             * where STORE is. The temporary directory goes unmentioned. */
            if (excluded != EXCL_NONE) {
                if (excluded == EXCL_STORE)
                    tool_warn("not entering %s: it is STORE", tool_escaped(&esc, rel));
                free(rel);
                continue;
            }
            if (on_path(b, d, st.st_dev, st.st_ino)) {
                skip(b, rel, "symbolic link loop (a directory that contains it)");
                free(rel);
                continue;
            }
            if (b->ndirs == b->dircap)
                b->dirs = grow(b->dirs, &b->dircap, sizeof(*b->dirs));
            c = &b->dirs[b->ndirs++];
            memset(c, 0, sizeof(*c));
            c->parent = d;
            c->name = names[i];
            names[i] = NULL;
            c->rel = rel;
            c->dev = st.st_dev;
            c->ino = st.st_ino;
            b->dirs[d - 1].nsubdirs++;
            continue;
        }
        if (!S_ISREG(st.st_mode)) {
            char why[64];

            snprintf(why, sizeof(why), "not a regular file (%s)", type_name(st.st_mode));
            skip(b, rel, why);
            free(rel);
            continue;
        }
        /* Fail now rather than an hour into the transcode. */
        if (faccessat(dfd, names[i], R_OK, AT_EACCESS) < 0) {
            tool_err("cannot read %s: %s", tool_escaped(&esc, rel), strerror(errno));
            free(rel);
            rc = -1;
            continue;
        }
        free(rel);
        if (b->nfiles == b->filecap)
            b->files = grow(b->files, &b->filecap, sizeof(*b->files));
        b->files[b->nfiles].dir = d;
        b->files[b->nfiles].name = names[i];
        names[i] = NULL;
        b->nfiles++;
        b->dirs[d - 1].nfiles++;
        b->total_bytes += (uint64_t)st.st_size;
    }
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    close(dfd);
    tool_buf_free(&esc);
    return rc;
}

static int walk(struct build *b)
{
    struct stat st;
    uint64_t d;

    memset(&st, 0, sizeof(st));
    if (b->srcfd >= 0 && fstat(b->srcfd, &st) < 0) {
        tool_err("%s: %s", b->src, strerror(errno));
        return -1;
    }
    b->dirs = grow(NULL, &b->dircap, sizeof(*b->dirs));
    memset(&b->dirs[0], 0, sizeof(b->dirs[0]));
    b->dirs[0].parent = PCR_ROOT_DIR;
    b->dirs[0].name = xstrdup("");
    b->dirs[0].rel = xstrdup("");
    b->dirs[0].dev = st.st_dev;
    b->dirs[0].ino = st.st_ino;
    b->ndirs = 1;
    if (b->srcfd < 0)
        return 0; /* tokens only: the image tree is its root */
    /* The array is the BFS queue: children are appended as their parent is read. */
    for (d = 1; d <= b->ndirs; d++) {
        if (interrupted || walk_dir(b, d) < 0)
            return -1;
    }
    return 0;
}

static int add_dirs(struct build *b)
{
    uint64_t d;
    int rc;

    for (d = 1; d <= b->ndirs; d++) {
        const struct dnode *n = &b->dirs[d - 1];
        struct pcr_dir_row row = {
            .id = d,
            .parent = n->parent,
            .name = n->name,
            .first_child = n->first_child,
            .nsubdirs = n->nsubdirs,
            .first_file = n->first_file,
            .nfiles = n->nfiles,
        };

        rc = pcr_writer_add_dir(b->w, &row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- Phase 2: the pipeline ---- */

static void fail(struct build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(struct build *b, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&b->lock);
    if (!b->failed) {
        va_start(ap, fmt);
        vsnprintf(b->errmsg, sizeof(b->errmsg), fmt, ap);
        va_end(ap);
        b->failed = true;
    }
    b->stop = true;
    pthread_cond_broadcast(&b->done_cv);
    pthread_cond_broadcast(&b->space_cv);
    pthread_mutex_unlock(&b->lock);
}

/* Read the whole file; its size may have changed since the walk. */
static int read_file(int fd, uint64_t hint, uint8_t **out, size_t *outlen)
{
    size_t cap = (size_t)hint + 1, len = 0;
    uint8_t *buf = malloc(cap);

    if (!buf)
        return -ENOMEM;
    for (;;) {
        ssize_t n;

        if (len == cap) {
            uint8_t *p = realloc(buf, cap * 2);

            if (!p) {
                free(buf);
                return -ENOMEM;
            }
            buf = p;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0) {
            int e = errno;

            if (e == EINTR)
                continue;
            free(buf);
            return -e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

static int process(struct build *b, uint64_t i, struct slot *s)
{
    const struct fnode *f = &b->files[i];
    const struct pcr_transcode_opts topts = {.drop_markers = b->drop_markers,
                                             .scripts = &b->scripts};
    struct tool_buf esc = {0};
    char *rel = join(b->dirs[f->dir - 1].rel, f->name);
    uint8_t *src = NULL, *out = NULL;
    size_t len = 0, outlen = 0;
    struct stat st;
    int fd, rc;

    /* O_NONBLOCK: if the file was replaced by a FIFO since the walk, do not hang. */
    fd = tool_open_rel(b->srcfd, rel, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        rc = -errno;
        fail(b, "cannot open %s: %s", tool_escaped(&esc, rel), strerror(-rc));
        goto out;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        fail(b, "%s: no longer a regular file", tool_escaped(&esc, rel));
        close(fd);
        goto out;
    }
    rc = read_file(fd, (uint64_t)st.st_size, &src, &len);
    close(fd);
    if (rc < 0) {
        fail(b, "reading %s: %s", tool_escaped(&esc, rel), strerror(-rc));
        goto out;
    }
    s->src_size = len;
    s->note[0] = '\0';
    /* JPEG or not is decided by the content: a non-JPEG fails fast ("not a JPEG"). */
    rc = pcr_jpeg_transcode(src, len, &topts, &out, &outlen, &s->info, s->note, sizeof(s->note));
    if (rc == 0) {
        rc = pcr_jpeg_split(out, outlen, &s->split);
        if (rc == 0 && s->info.trailer > 0) {
            /* The bytes after the source's EOI (MPO frames, gain maps, IPTC
             * trailers) follow the new EOI verbatim: they are the file's last
             * chunk, served at the top level (pcrfs(5)). */
            uint8_t *p = realloc(out, outlen + s->info.trailer);

            if (!p) {
                free(out);
                free(src);
                fail(b, "transcoding %s: %s", tool_escaped(&esc, rel), strerror(ENOMEM));
                rc = -ENOMEM;
                goto out;
            }
            out = p;
            memcpy(out + outlen, src + len - s->info.trailer, s->info.trailer);
            outlen += s->info.trailer;
        }
        if (rc == 0) {
            free(src);
            s->kind = PCR_KIND_JPEG;
            s->data = out;
            s->len = outlen;
            goto out;
        }
        /* The transcoder's output always splits; if it ever does not, the source
         * is kept as it is rather than lost. */
        snprintf(s->note, sizeof(s->note), "transcoded file does not split: %s", strerror(-rc));
        free(out);
    } else if (rc != -EINVAL) {
        fail(b, "transcoding %s: %s", tool_escaped(&esc, rel), strerror(-rc));
        free(src);
        goto out;
    }
    if (!s->note[0])
        snprintf(s->note, sizeof(s->note), "cannot be transcoded");
    s->kind = PCR_KIND_VERBATIM;
    s->data = src;
    s->len = len;
    rc = 0;
out:
    free(rel);
    tool_buf_free(&esc);
    return rc;
}

static void *worker(void *arg)
{
    struct build *b = arg;

    for (;;) {
        uint64_t i;
        struct slot *s;

        pthread_mutex_lock(&b->lock);
        while (!b->stop && b->next < b->nfiles && b->next / b->per_record >= b->wrec + WINDOW)
            pthread_cond_wait(&b->space_cv, &b->lock);
        if (b->stop || b->next >= b->nfiles) {
            pthread_mutex_unlock(&b->lock);
            return NULL;
        }
        i = b->next++;
        pthread_mutex_unlock(&b->lock);

        s = &b->slots[i % b->nslots];
        if (process(b, i, s) < 0)
            return NULL;
        pthread_mutex_lock(&b->lock);
        s->done = true;
        pthread_cond_broadcast(&b->done_cv);
        pthread_mutex_unlock(&b->lock);
    }
}

/* Wait for slot @i; draws the progress bar meanwhile. @return 0, or -1 if the
 * build stops (failure or signal). */
static int wait_slot(struct build *b, uint64_t i, uint64_t done_files, uint64_t done_bytes)
{
    struct slot *s = &b->slots[i % b->nslots];
    bool done;

    pthread_mutex_lock(&b->lock);
    while (!s->done && !b->failed && !interrupted) {
        struct timespec ts;

        /* Wake up regularly to see signals and keep the ETA moving. */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&b->done_cv, &b->lock, &ts);
        pthread_mutex_unlock(&b->lock);
        progress_update(done_files, done_bytes, false);
        pthread_mutex_lock(&b->lock);
    }
    done = s->done;
    pthread_mutex_unlock(&b->lock);
    return done ? 0 : -1;
}

static void stop_workers(struct build *b)
{
    pthread_mutex_lock(&b->lock);
    b->stop = true;
    pthread_cond_broadcast(&b->space_cv);
    pthread_mutex_unlock(&b->lock);
}

/* @return 0; -1 failed (message printed); -2 interrupted. */
static int transcode_all(struct build *b)
{
    struct pcr_item *items = xmalloc(sizeof(*items) * b->per_record);
    struct tool_buf esc = {0};
    pthread_t *tids = xmalloc(sizeof(*tids) * b->jobs);
    uint64_t done_bytes = 0, lo, i;
    unsigned t, started = 0;
    sigset_t block, old;
    int rc = 0;

    b->nslots = (uint64_t)b->per_record * WINDOW;
    if (b->nslots > b->nfiles)
        b->nslots = b->nfiles ? b->nfiles : 1;
    b->slots = calloc(b->nslots, sizeof(*b->slots));
    if (!b->slots) {
        tool_err("out of memory");
        free(items);
        free(tids);
        return -1;
    }
    progress_start(b->progress, b->nfiles, b->total_bytes);

    /* Signals are for the main thread: workers inherit this mask, so a read() in a
     * worker is never interrupted, and the main thread sees the flag at once. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (t = 0; t < b->jobs; t++) {
        int e = pthread_create(&tids[t], NULL, worker, b);

        if (e) {
            if (t == 0) {
                pthread_sigmask(SIG_SETMASK, &old, NULL);
                tool_err("cannot start a thread: %s", strerror(e));
                free(items);
                free(tids);
                return -1;
            }
            break; /* fewer threads still work */
        }
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    for (lo = 0; lo < b->nfiles && rc == 0; lo += b->per_record) {
        uint64_t hi = lo + b->per_record < b->nfiles ? lo + b->per_record : b->nfiles;

        for (i = lo; i < hi; i++) {
            struct slot *s = &b->slots[i % b->nslots];
            const struct fnode *f = &b->files[i];

            if (wait_slot(b, i, i, done_bytes) < 0) {
                rc = -1;
                break;
            }
            if (s->kind == PCR_KIND_VERBATIM) {
                char *rel = join(b->dirs[f->dir - 1].rel, f->name);

                tool_warn("stored verbatim: %s: %s", tool_escaped(&esc, rel), s->note);
                free(rel);
            }
            items[i - lo] = (struct pcr_item){
                .id = i + 1,
                .dir = f->dir,
                .name = f->name,
                .kind = s->kind,
                /* The writer may not like NULL even for zero bytes. */
                .data = s->data ? s->data : (const uint8_t *)"",
                .len = s->len,
                .split = s->kind == PCR_KIND_JPEG ? &s->split : NULL,
                .trailer = s->kind == PCR_KIND_JPEG ? s->info.trailer : 0,
                .info = s->kind == PCR_KIND_JPEG ? s->info : (struct pcr_jpeg_info){0},
                .src_size = s->src_size,
                .note = s->kind == PCR_KIND_VERBATIM ? s->note : NULL,
            };
            done_bytes += s->src_size;
            progress_update(i + 1, done_bytes, false);
        }
        if (interrupted)
            rc = -2;
        if (rc == 0) {
            int e = pcr_writer_add_record(b->w, items, (unsigned)(hi - lo));

            if (e < 0) {
                tool_err("writing %s: %s", b->store, strerror(-e));
                if (b->verbose && pcr_writer_error(b->w)[0])
                    tool_err("%s", pcr_writer_error(b->w));
                rc = -1;
            }
        }
        /* Release the record's slots (also on failure: nothing may leak). */
        pthread_mutex_lock(&b->lock);
        for (i = lo; i < hi; i++) {
            struct slot *s = &b->slots[i % b->nslots];

            if (s->done) {
                free(s->data);
                s->data = NULL;
                s->done = false;
            }
        }
        b->wrec++;
        pthread_cond_broadcast(&b->space_cv);
        pthread_mutex_unlock(&b->lock);
    }
    if (rc == 0)
        progress_update(b->nfiles, done_bytes, true);

    stop_workers(b);
    for (t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    /* Slots done ahead of a failure still hold data. */
    for (i = 0; i < b->nslots; i++) {
        free(b->slots[i].data);
        b->slots[i].data = NULL;
    }
    progress_finish();
    if (b->failed) {
        tool_err("%s", b->errmsg);
        rc = -1;
    }
    if (interrupted)
        rc = -2;
    free(items);
    free(tids);
    tool_buf_free(&esc);
    return rc;
}

/* ---- Phase 3 and main ---- */

/* Meta "scans.CLASS": each class's script in jpegtran -scans syntax, or
 * "libjpeg-default"; with "script" (the name) it says exactly how the store was cut. */
static int set_script_meta(struct build *b)
{
    static const char *const key[PCR_CLASS_COUNT] = {
        [PCR_CLASS_GRAY] = "scans.gray",
        [PCR_CLASS_YCC] = "scans.ycc",
        [PCR_CLASS_RGB] = "scans.rgb",
        [PCR_CLASS_CMYK] = "scans.cmyk",
    };
    char text[PCR_MAX_SCANS * 40];
    int rc;

    for (unsigned c = 0; c < PCR_CLASS_COUNT; c++) {
        const struct pcr_script *sc = &b->scripts.by_class[c];

        if (sc->nscans)
            pcr_script_format(sc, text, sizeof(text));
        else
            snprintf(text, sizeof(text), "libjpeg-default");
        rc = pcr_writer_set_meta(b->w, key[c], text);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int set_meta(struct build *b)
{
    char v[64];
    int rc;

    snprintf(v, sizeof(v), "%u", b->per_record);
    if ((rc = pcr_writer_set_meta(b->w, "script", b->scripts.name)) < 0 ||
        (rc = set_script_meta(b)) < 0 || (rc = pcr_writer_set_meta(b->w, "per_record", v)) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "drop_markers", b->drop_markers ? "1" : "0")) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "source", b->src ? b->src : "")) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "created_by", "mkpcrfs " PCR_VERSION)) < 0)
        return rc;
    snprintf(v, sizeof(v), "%" PRIu64, b->skipped);
    return pcr_writer_set_meta(b->w, "skipped", v);
}

/* The summary of the new store, read back from it: the same text as pcrinfo's. */
static int print_summary(const struct build *b, double elapsed)
{
    struct pcr_store *s;
    struct summary *sm;
    char err[1024] = "";
    int rc;

    rc = pcr_store_open(b->store, &s, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s: the new store does not open: %s", b->store, err);
        return 1;
    }
    rc = summary_compute(s, b->store, &sm, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s", err);
        pcr_store_close(s);
        return 1;
    }
    summary_print_text(sm, stdout);
    printf("\nbuilt in %.1f s: %.1f images/s, %.1f MB/s of source, %u thread%s\n", elapsed,
           elapsed > 0 ? (double)b->nfiles / elapsed : 0.0,
           elapsed > 0 ? (double)b->total_bytes / elapsed / 1e6 : 0.0, b->jobs,
           b->jobs == 1 ? "" : "s");
    summary_free(sm);
    pcr_store_close(s);
    return 0;
}

static void build_free(struct build *b)
{
    uint64_t i;

    for (i = 0; i < b->ndirs; i++) {
        free(b->dirs[i].name);
        free(b->dirs[i].rel);
    }
    free(b->dirs);
    for (i = 0; i < b->nfiles; i++)
        free(b->files[i].name);
    free(b->files);
    if (b->slots) {
        for (i = 0; i < b->nslots; i++)
            free(b->slots[i].data);
        free(b->slots);
    }
    if (b->srcfd >= 0)
        close(b->srcfd);
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: mkpcrfs [OPTIONS] SRC STORE\n"
            "       mkpcrfs [OPTIONS] --tokens DIR | --seit DATA ... [SRC | -] STORE\n"
            "Build the pcrfs store STORE from the image tree SRC (any depth).\n"
            "JPEGs are transcoded losslessly to progressive JPEG; every other file is\n"
            "stored verbatim (with a warning).\n"
            "\n"
            "  -j, --jobs N          transcoding threads (default: online CPUs)\n"
            "  -n, --per-record N    images per record (default %u)\n"
            "  -f, --force           replace STORE if it is a pcrfs store\n"
            "      --scans SCRIPT    scan script: 'default' (libjpeg's, 10 levels), 'fast'\n"
            "                        (spectral selection only: faster full-fidelity\n"
            "                        decoding, 9 levels) or a file in jpegtran -scans syntax\n"
            "      --drop-markers    drop APPn/COM markers (EXIF, ICC, comments)\n"
            "  -q, --quiet           no progress bar, no summary\n"
            "      --progress        show the progress bar even if stderr is not a terminal\n"
            "  -v, --verbose         show the library's informational and debug messages\n"
            "  -h, --help            show this help and exit\n"
            "  -V, --version         show the version and exit\n"
            "\n",
            DEFAULT_PER_RECORD);
    tokimport_usage(f);
    fprintf(f, "\n"
               "Exit status: 0 success, 1 failure (nothing is left behind), 2 usage error,\n"
               "130 interrupted. See mkpcrfs(1).\n");
}

enum { OPT_DROP_MARKERS = 256, OPT_PROGRESS, OPT_SCANS };

/* --scans: a preset name, else a file in jpegtran -scans syntax. Exits 2 (usage) if
 * the file cannot be read or is not a valid lossless script. */
static void load_scripts(const char *arg, struct pcr_scripts *out)
{
    const char *base = strrchr(arg, '/');
    char why[256] = "";
    char *text;
    size_t len = 0;
    FILE *f;

    if (pcr_scripts_preset(arg, out) == 0)
        return;
    f = fopen(arg, "rb");
    if (!f)
        tool_usage_error("--scans: '%s' is neither 'default', 'fast' nor a readable file: %s", arg,
                         strerror(errno));
    text = xmalloc(MAX_SCRIPT_BYTES + 1);
    len = fread(text, 1, MAX_SCRIPT_BYTES + 1, f);
    if (ferror(f)) {
        int e = errno;

        fclose(f);
        tool_usage_error("--scans: reading %s: %s", arg, strerror(e));
    }
    fclose(f);
    if (len > MAX_SCRIPT_BYTES)
        tool_usage_error("--scans: %s: larger than %u bytes", arg, MAX_SCRIPT_BYTES);
    if (pcr_scripts_parse(text, len, base ? base + 1 : arg, out, why, sizeof(why)) < 0)
        tool_usage_error("--scans: %s: %s", arg, why);
    free(text);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"per-record", required_argument, NULL, 'n'},
        {"force", no_argument, NULL, 'f'},
        {"drop-markers", no_argument, NULL, OPT_DROP_MARKERS},
        {"scans", required_argument, NULL, OPT_SCANS},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        TOKIMPORT_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct build b = {.per_record = DEFAULT_PER_RECORD};
    struct tokimport_opts topts = {0};
    struct tokimport *tok = NULL;
    bool tokens;
    struct pcr_writer_opts wopts = {0};
    struct sigaction sa;
    sigset_t block, old;
    unsigned long long v;
    char err[1024] = "";
    bool force_progress = false;
    const char *scans_arg = "default";
    double t0 = tool_now();
    long ncpu;
    int c, rc, status = 0;

    tool_prog = "mkpcrfs";
    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    b.jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":j:n:fqvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (tool_parse_uint(optarg, 1, MAX_JOBS, &v) < 0)
                tool_usage_error("invalid number of jobs '%s' (1..%u)", optarg, MAX_JOBS);
            b.jobs = (unsigned)v;
            break;
        case 'n':
            if (tool_parse_uint(optarg, 1, MAX_PER_RECORD, &v) < 0)
                tool_usage_error("invalid images per record '%s' (1..%u)", optarg, MAX_PER_RECORD);
            b.per_record = (unsigned)v;
            break;
        case 'f':
            b.force = true;
            break;
        case OPT_DROP_MARKERS:
            b.drop_markers = true;
            break;
        case OPT_SCANS:
            scans_arg = optarg;
            break;
        case 'q':
            b.quiet = true;
            break;
        case OPT_PROGRESS:
            force_progress = true;
            break;
        case 'v':
            b.verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("mkpcrfs (pcrfs) %s\n", PCR_VERSION);
            return 0;
        default:
            if (!tokimport_option(&topts, c, optarg))
                tool_getopt_error(c, argv);
        }
    }
    tokens = tokimport_enabled(&topts);
    if (argc - optind < (tokens ? 1 : 2))
        tool_usage_error("missing %s", argc - optind == 0 && !tokens ? "SRC and STORE" : "STORE");
    if (argc - optind > 2)
        tool_usage_error("too many arguments: '%s'", argv[optind + 2]);
    /* With tokens, SRC may be omitted (or "-"): a store of tokens only. */
    b.src = argc - optind == 2 ? argv[optind] : NULL;
    if (tokens && b.src && strcmp(b.src, "-") == 0)
        b.src = NULL;
    b.store = argv[argc - 1];
    load_scripts(scans_arg, &b.scripts);
    wopts.levels = b.scripts.levels;
    wopts.script = b.scripts.name;
    b.progress = force_progress || (!b.quiet && isatty(STDERR_FILENO));
    wopts.force = b.force;
    tool_log_init(b.verbose);

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: the library's write()s restart; the flag is checked between steps. */
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    b.srcfd = b.src ? open(b.src, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (b.src && b.srcfd < 0) {
        tool_err("%s: %s", b.src, strerror(errno));
        return 1;
    }
    if (pthread_mutex_init(&b.lock, NULL) || pthread_cond_init(&b.space_cv, NULL) ||
        pthread_cond_init(&b.done_cv, NULL)) {
        tool_err("cannot initialise threads");
        return 1;
    }

    rc = pcr_writer_create(b.store, &wopts, &b.w, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EEXIST)
            tool_err("%s: already exists (--force replaces a pcrfs store)", b.store);
        else if (rc == -ENOTDIR || rc == -EINVAL)
            tool_err("%s: exists and is not a pcrfs store; not replacing it", b.store);
        else
            tool_err("creating %s: %s", b.store, err[0] ? err : strerror(-rc));
        return 1;
    }
    tmpdir_copy = strdup(pcr_writer_tmpdir(b.w));
    tool_oom_hook = on_oom;
    {
        struct stat st;

        if (stat(pcr_writer_tmpdir(b.w), &st) == 0) {
            b.exclude[b.nexclude].dev = st.st_dev;
            b.exclude[b.nexclude].ino = st.st_ino;
            b.exclude[b.nexclude++].what = EXCL_TMP;
        }
        if (stat(b.store, &st) == 0) {
            b.exclude[b.nexclude].dev = st.st_dev;
            b.exclude[b.nexclude].ino = st.st_ino;
            b.exclude[b.nexclude++].what = EXCL_STORE;
        }
    }

    if (tokens) {
        topts.progress = b.progress;
        topts.skip[0] = b.store;
        topts.skip[1] = pcr_writer_tmpdir(b.w);
        if (tokimport_scan(&topts, &interrupted, &tok) < 0)
            goto failed;
    }
    if (walk(&b) < 0)
        goto failed;
    rc = add_dirs(&b);
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        goto failed;
    }
    rc = transcode_all(&b);
    if (rc < 0)
        goto failed;
    if (tok && tokimport_write(tok, b.w) < 0)
        goto failed;
    rc = set_meta(&b);
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        goto failed;
    }
    if (interrupted)
        goto failed;
    /* The commit is short and all or nothing: let it end, then honour nothing more. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    rc = pcr_writer_finish(b.w, err, sizeof(err));
    b.w = NULL;
    tool_oom_hook = NULL;
    if (rc < 0) {
        tool_err("writing %s: %s", b.store, strerror(-rc));
        if (err[0])
            tool_err("%s", err);
        status = 1;
        goto out;
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!b.quiet)
        status = print_summary(&b, tool_now() - t0);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        tool_err("writing the summary: %s", strerror(errno));
        status = 1;
    }
    goto out;

failed:
    progress_finish();
    tool_oom_hook = NULL;
    if (b.w)
        pcr_writer_abort(b.w);
    status = 1;
    if (interrupted) {
        tool_err("interrupted; nothing was written");
        status = 130;
    }
out:
    tokimport_free(tok);
    free(tmpdir_copy);
    build_free(&b);
    return status;
}
