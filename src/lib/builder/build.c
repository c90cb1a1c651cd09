/* pcrfs build — the walk of SRC, the transcoding pipeline and the build's meta
 * keys (phases 1 and 2 and the first half of 3; see builder.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "builder/builder.h"
#include "common/internal.h"
#include "builder/walk.h"

/* Records a worker may run ahead of the one being written, plus that one. */
#define WINDOW 3
/* Reads of a file that keeps changing while it is read, before it is stored as last
 * read (with a warning). */
#define READ_ATTEMPTS 3
/* A file larger than this that is not a JPEG (or larger than MAX_TRANSCODE) is
 * never read into memory: the writer streams it into the record (bounded memory
 * whatever the size: a video in the tree must not exhaust it). */
#define STREAM_MIN    (4u << 20)
#define MAX_TRANSCODE (1ull << 30)

int64_t build_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* "SECONDS.NANOSECONDS" of @ns, into @buf. */
static const char *fmt_ns(int64_t ns, char buf[32])
{
    snprintf(buf, 32, "%" PRId64 ".%09" PRId64, ns / 1000000000, ns % 1000000000);
    return buf;
}

/* ---- Phase 1: the walk (walk.h); the walker's directory d is our id d + 1 ---- */

static int on_error(void *ctx, const char *msg)
{
    (void)ctx;
    pcr_bld_err("%s", msg);
    return -1; /* a source we cannot read entirely is not built from */
}

static void on_skip(void *ctx, const char *what, const char *why)
{
    struct build *b = ctx;

    pcr_bld_warn("skipped %s: %s", what, why);
    b->skipped++;
}

static int on_begin(void *ctx, uint64_t d)
{
    struct build *b = ctx;

    b->dirs[d].first_file = b->nfiles + 1;
    b->dirs[d].first_child = b->ndirs + 1;
    return 0;
}

static int on_dir(void *ctx, uint64_t parent, const char *name, const char *rel,
                  const struct stat *st)
{
    struct build *b = ctx;
    struct dnode *c;

    (void)st;
    if (b->ndirs == b->dircap) {
        struct dnode *t = pcr_try_grow(b->dirs, &b->dircap, 64, sizeof(*b->dirs));

        if (!t)
            return pcr_bld_nomem(b->rep);
        b->dirs = t;
    }
    c = &b->dirs[b->ndirs++];
    memset(c, 0, sizeof(*c));
    c->parent = parent + 1;
    c->name = pcr_try_strdup(name);
    c->rel = pcr_try_strdup(rel);
    if (!c->name || !c->rel)
        return pcr_bld_nomem(b->rep); /* build_free() frees what there is */
    b->dirs[parent].nsubdirs++;
    /* the caller's chance to cancel (the walk polls the flag) */
    pcr_bld_progress(b->rep, PCRFS_BUILD_WALK, b->nfiles, 0, b->total_bytes, 0, false);
    return 0;
}

static int on_file(void *ctx, uint64_t d, int dfd, char **name, const char *rel,
                   const struct stat *st)
{
    struct build *b = ctx;

    /* Fail now rather than an hour into the transcode. */
    if (faccessat(dfd, *name, R_OK, AT_EACCESS) < 0) {
        struct pcr_sbuf esc = {0};

        pcr_bld_err("cannot read %s: %s", pcr_escaped(&esc, rel), strerror(errno));
        pcr_sbuf_free(&esc);
        return -1;
    }
    if (b->nfiles == b->filecap) {
        struct fnode *t = pcr_try_grow(b->files, &b->filecap, 64, sizeof(*b->files));

        if (!t)
            return pcr_bld_nomem(b->rep);
        b->files = t;
    }
    b->files[b->nfiles].dir = d + 1;
    b->files[b->nfiles].name = *name;
    b->files[b->nfiles].size = (uint64_t)st->st_size;
    b->files[b->nfiles].mtime_ns = build_mtime_ns(st);
    *name = NULL;
    b->nfiles++;
    b->dirs[d].nfiles++;
    b->total_bytes += (uint64_t)st->st_size;
    pcr_bld_progress(b->rep, PCRFS_BUILD_WALK, b->nfiles, 0, b->total_bytes, 0, false);
    return 0;
}

int build_walk(struct build *b)
{
    const struct walk_ops ops = {.ctx = b,
                                 .error = on_error,
                                 .skip = on_skip,
                                 .begin = on_begin,
                                 .dir = on_dir,
                                 .file = on_file};
    struct walk_opts o = {.rootfd = b->srcfd, .root_name = b->src, .stop = &b->rep->cancel};

    int rc;

    b->dirs = pcr_try_grow(NULL, &b->dircap, 64, sizeof(*b->dirs));
    if (!b->dirs)
        return pcr_bld_nomem(b->rep);
    memset(&b->dirs[0], 0, sizeof(b->dirs[0]));
    b->dirs[0].parent = PCR_ROOT_DIR;
    b->ndirs = 1;
    b->dirs[0].name = pcr_try_strdup("");
    b->dirs[0].rel = pcr_try_strdup("");
    if (!b->dirs[0].name || !b->dirs[0].rel)
        return pcr_bld_nomem(b->rep);
    if (b->srcfd < 0)
        return 0; /* tokens only: the image tree is its root */
    for (unsigned k = 0; k < b->nexclude; k++) {
        o.exclude[k].dev = b->exclude[k].dev;
        o.exclude[k].ino = b->exclude[k].ino;
        o.exclude[k].warn = b->exclude[k].store;
    }
    o.nexclude = b->nexclude;
    rc = walk_tree(&o, &ops);
    if (rc == -ENOMEM)
        return pcr_bld_nomem(b->rep);
    return rc < 0 ? -1 : 0;
}

int build_add_dirs(struct build *b)
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
            return e ? -e : -EIO; /* never 0: *out is unset */
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

/* The per-level MS-SSIM of the JPEG in @s, if asked for. A failure is not the
 * build's: the image is served as well without a table (readers then take its top
 * level), so it is only named in a warning (s->note, printed in file order). */
static void measure(struct build *b, struct slot *s)
{
    char why[200] = "";
    int rc;

    s->has_quality = false;
    if (!b->quality)
        return;
    rc = pcr_quality_measure(s->data, s->len - s->info.trailer, &s->split, &s->info,
                             b->scripts.levels, s->quality, why, sizeof(why));
    if (rc == 0)
        s->has_quality = true;
    else if (rc == -E2BIG)
        snprintf(s->note, sizeof(s->note), "over %u Mpixels", PCR_QUALITY_MAX_PIXELS >> 20);
    else
        snprintf(s->note, sizeof(s->note), "%s", why[0] ? why : strerror(-rc));
}

/* Is the file open as @fd (stat @st), larger than STREAM_MIN, to be streamed into
 * its record rather than read (not a JPEG by its first bytes, or larger than
 * MAX_TRANSCODE)? Then @s says so (verbatim, data NULL) and the writer fetches its
 * bytes (stream_read()). */
static bool stream_only(int fd, const struct stat *st, struct slot *s)
{
    uint8_t magic[2] = {0, 0};
    bool jpeg = pread(fd, magic, 2, 0) == 2 && magic[0] == 0xFF && magic[1] == 0xD8;

    if (jpeg && (uint64_t)st->st_size <= MAX_TRANSCODE)
        return false;
    /* the note a read file gets from the transcoder for the same reason */
    snprintf(s->note, sizeof(s->note), "%s",
             jpeg ? "larger than 1 GiB: not transcoded" : "not a JPEG");
    s->kind = PCR_KIND_VERBATIM;
    s->data = NULL;
    s->len = (size_t)st->st_size;
    s->src_size = (uint64_t)st->st_size;
    s->streamed = true;
    s->changed = false;
    s->mtime_ns = build_mtime_ns(st);
    return true;
}

/* pcr_item.read of a streamed file: opens it at the first piece, checks at the
 * last that it neither grew nor changed while read (a planned build fails then;
 * another stores what was read, with a warning), and closes it. */
static int stream_read(void *arg, uint64_t off, uint8_t *buf, size_t n)
{
    struct stream *c = arg;
    const struct build *b = c->b;
    struct pcr_sbuf esc = {0};
    struct stat st;
    size_t got = 0;
    uint8_t extra;
    int rc = 0;

    if (off == 0) {
        c->fd = pcr_open_rel(b->srcfd, c->rel, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (c->fd < 0 || fstat(c->fd, &st) < 0) {
            snprintf(c->msg, sizeof(c->msg), "cannot open %s: %s", pcr_escaped(&esc, c->rel),
                     strerror(errno));
            rc = -errno;
            goto out;
        }
        if ((uint64_t)st.st_size != c->size || build_mtime_ns(&st) != c->mtime_ns)
            c->changed = true;
    }
    while (got < n) {
        ssize_t k = pread(c->fd, buf + got, n - got, (off_t)(off + got));

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(c->msg, sizeof(c->msg), "reading %s: %s", pcr_escaped(&esc, c->rel),
                     k < 0 ? strerror(errno) : "it shrank while being read");
            rc = k < 0 ? -errno : -ESTALE;
            goto out;
        }
        got += (size_t)k;
    }
    if (off + n == c->size) {
        if (pread(c->fd, &extra, 1, (off_t)c->size) != 0 || fstat(c->fd, &st) < 0 ||
            (uint64_t)st.st_size != c->size || build_mtime_ns(&st) != c->mtime_ns)
            c->changed = true;
        close(c->fd);
        c->fd = -1;
    }
    if (c->changed && b->planned) {
        snprintf(c->msg, sizeof(c->msg), "%s: changed since the plan (while being read)",
                 pcr_escaped(&esc, c->rel));
        rc = -ESTALE;
    }
out:
    pcr_sbuf_free(&esc);
    return rc;
}

static int process(struct build *b, uint64_t i, struct slot *s)
{
    const struct fnode *f = &b->files[i];
    const struct pcr_transcode_opts topts = {.drop_markers = b->drop_markers,
                                             .scripts = &b->scripts};
    struct pcr_sbuf esc = {0};
    char *rel = pcr_try_path_join(b->dirs[f->dir - 1].rel, f->name);
    uint8_t *src = NULL, *out = NULL;
    size_t len = 0, outlen = 0;
    struct stat st;
    char t1[32], t2[32];
    int fd, rc;

    s->streamed = false;
    if (!rel) {
        rc = -ENOMEM;
        fail(b, "out of memory");
        goto out;
    }
    /* A file that changes while it is read is read again: what is stored must be one
     * state of it. In a planned build it must still be the state the plan fixed. */
    for (unsigned attempt = 1;; attempt++) {
        struct stat after;

        /* O_NONBLOCK: if the file was replaced by a FIFO since the walk, do not hang. */
        fd = pcr_open_rel(b->srcfd, rel, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
            rc = -errno;
            fail(b, "cannot open %s: %s", pcr_escaped(&esc, rel), strerror(-rc));
            goto out;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            rc = -EINVAL;
            fail(b, "%s: no longer a regular file", pcr_escaped(&esc, rel));
            close(fd);
            goto out;
        }
        if (b->planned && ((uint64_t)st.st_size != f->size || build_mtime_ns(&st) != f->mtime_ns)) {
            rc = -ESTALE;
            fail(b,
                 "%s: changed since the plan (size %" PRIu64 ", modified %s; the plan has %" PRIu64
                 ", %s)",
                 pcr_escaped(&esc, rel), (uint64_t)st.st_size, fmt_ns(build_mtime_ns(&st), t1),
                 f->size, fmt_ns(f->mtime_ns, t2));
            close(fd);
            goto out;
        }
        if ((uint64_t)st.st_size > STREAM_MIN && stream_only(fd, &st, s)) {
            close(fd);
            rc = 0;
            goto out;
        }
        rc = read_file(fd, (uint64_t)st.st_size, &src, &len);
        if (rc == 0 && fstat(fd, &after) < 0) {
            int e = errno;          /* read once: each read of errno is a call */
            rc = e > 0 ? -e : -EIO; /* never 0: after is unset */
        }
        close(fd);
        if (rc != 0) {
            fail(b, "reading %s: %s", pcr_escaped(&esc, rel), strerror(-rc));
            goto out;
        }
        s->changed = (uint64_t)after.st_size != len || after.st_size != st.st_size ||
                     build_mtime_ns(&after) != build_mtime_ns(&st);
        if (s->changed && b->planned) {
            rc = -ESTALE;
            fail(b, "%s: changed since the plan (while being read)", pcr_escaped(&esc, rel));
            free(src);
            goto out;
        }
        if (!s->changed || attempt == READ_ATTEMPTS)
            break;
        free(src);
        src = NULL;
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
                fail(b, "transcoding %s: %s", pcr_escaped(&esc, rel), strerror(ENOMEM));
                rc = -ENOMEM;
                goto out;
            }
            out = p;
            /* read_file() returned 0, so src is set; the analyzer loses that -e < 0:
             * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
            memcpy(out + outlen, src + len - s->info.trailer, s->info.trailer);
            outlen += s->info.trailer;
        }
        if (rc == 0) {
            free(src);
            s->kind = PCR_KIND_JPEG;
            s->data = out;
            s->len = outlen;
            measure(b, s);
            goto out;
        }
        /* The transcoder's output always splits; if it ever does not, the source
         * is kept as it is rather than lost. */
        snprintf(s->note, sizeof(s->note), "transcoded file does not split: %s", strerror(-rc));
        free(out);
    } else if (rc != -EINVAL) {
        fail(b, "transcoding %s: %s", pcr_escaped(&esc, rel), strerror(-rc));
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
    /* whatever ran out (a read, the transcoder, a path), the build says -ENOMEM */
    if (rc == -ENOMEM)
        pcr_bld_set_nomem(b->rep);
    free(rel);
    pcr_sbuf_free(&esc);
    return rc;
}

static void *worker(void *arg)
{
    struct build *b = arg;

    for (;;) {
        uint64_t i;
        struct slot *s;

        pthread_mutex_lock(&b->lock);
        while (!b->stop && b->next < b->fend && b->next / b->per_record >= b->wrec + WINDOW)
            pthread_cond_wait(&b->space_cv, &b->lock);
        if (b->stop || b->next >= b->fend) {
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

/* Wait for slot @i; reports progress meanwhile (the caller may cancel). @return 0, or -1 if the
 * build stops (failure or signal). */
static int wait_slot(struct build *b, uint64_t i, uint64_t done_files, uint64_t done_bytes,
                     uint64_t total_files, uint64_t total_bytes)
{
    struct slot *s = &b->slots[i % b->nslots];
    bool done;

    pthread_mutex_lock(&b->lock);
    while (!s->done && !b->failed && !b->rep->cancel) {
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
        pcr_bld_progress(b->rep, PCRFS_BUILD_TRANSCODE, done_files, total_files, done_bytes,
                         total_bytes, false);
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

/* Start up to b->jobs workers into @tids. @return how many started (0: none,
 * reported). */
static unsigned start_workers(struct build *b, pthread_t *tids)
{
    sigset_t block, old;
    unsigned t, started = 0;

    /* Signals are for the calling thread: workers inherit this mask, so a read() in a
     * worker is never interrupted, and the caller's handler runs in the thread that
     * calls its progress callback. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    for (t = 0; t < b->jobs; t++) {
        int e = pthread_create(&tids[t], NULL, worker, b);

        if (e) {
            if (t == 0)
                pcr_bld_err("cannot start a thread: %s", strerror(e));
            break; /* fewer threads still work */
        }
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return started;
}

/* File @f as messages name it, "REL/NAME" escaped into @esc (valid until its next
 * use); cannot fail (sbuf.h). */
static const char *file_name(const struct build *b, const struct fnode *f, struct pcr_sbuf *esc)
{
    const char *rel = b->dirs[f->dir - 1].rel;

    pcr_sbuf_reset(esc);
    if (rel[0]) {
        pcr_escape(esc, rel, strlen(rel));
        pcr_escape(esc, "/", 1);
    }
    pcr_escape(esc, f->name, strlen(f->name));
    return esc->s ? esc->s : PCR_ESCAPE_NOMEM;
}

/* @return 0; -1 failed (message printed); -2 interrupted. */
int build_transcode(struct build *b)
{
    struct pcr_item *items = pcr_try_malloc(sizeof(*items) * b->per_record);
    struct stream *streams = pcr_try_malloc(sizeof(*streams) * b->per_record);
    struct pcr_sbuf esc = {0};
    pthread_t *tids = pcr_try_malloc(sizeof(*tids) * b->jobs);
    uint64_t done_bytes = 0, lo, i;
    unsigned t, started;
    int rc = 0;

    uint64_t nfiles = b->fend - b->fbegin, total_bytes = 0;

    for (i = b->fbegin; i < b->fend; i++)
        total_bytes += b->files[i].size;
    /* a part starts at a record boundary: the window counts records from there */
    b->next = b->fbegin;
    b->wrec = b->fbegin / b->per_record;
    b->nslots = (uint64_t)b->per_record * WINDOW;
    if (b->nslots > nfiles)
        b->nslots = nfiles ? nfiles : 1;
    b->slots = items && streams && tids ? pcr_try_malloc(b->nslots * sizeof(*b->slots)) : NULL;
    if (!b->slots) {
        free(items);
        free(streams);
        free(tids);
        return pcr_bld_nomem(b->rep);
    }
    memset(b->slots, 0, b->nslots * sizeof(*b->slots));
    pcr_bld_progress(b->rep, PCRFS_BUILD_TRANSCODE, 0, nfiles, 0, total_bytes, false);

    started = start_workers(b, tids);
    if (!started) {
        free(items);
        free(streams);
        free(tids);
        return -1;
    }

    for (lo = b->fbegin; lo < b->fend && rc == 0; lo += b->per_record) {
        uint64_t hi = lo + b->per_record < b->fend ? lo + b->per_record : b->fend;

        uint64_t filled = 0;

        for (i = lo; i < hi; i++) {
            struct slot *s = &b->slots[i % b->nslots];
            const struct fnode *f = &b->files[i];

            if (wait_slot(b, i, i - b->fbegin, done_bytes, nfiles, total_bytes) < 0) {
                rc = -1;
                break;
            }
            if (s->changed)
                pcr_bld_warn("%s changed while being read, %d times: stored as last read",
                             file_name(b, f, &esc), READ_ATTEMPTS);
            if (s->kind == PCR_KIND_VERBATIM) {
                pcr_bld_warn("stored verbatim: %s: %s", file_name(b, f, &esc), s->note);
            } else if (b->quality && !s->has_quality) {
                pcr_bld_warn("no per-level MS-SSIM for %s: %s", file_name(b, f, &esc), s->note);
                b->unmeasured++;
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
                .quality = s->kind == PCR_KIND_JPEG && s->has_quality ? s->quality : NULL,
            };
            if (s->streamed) {
                struct stream *c = &streams[i - lo];

                *c = (struct stream){.b = b,
                                     .rel = pcr_try_path_join(b->dirs[f->dir - 1].rel, f->name),
                                     .fd = -1,
                                     .size = s->len,
                                     .mtime_ns = s->mtime_ns};
                if (!c->rel) {
                    /* not counted in filled: nothing of it to release */
                    rc = pcr_bld_nomem(b->rep);
                    break;
                }
                items[i - lo].data = NULL;
                items[i - lo].read = stream_read;
                items[i - lo].read_arg = c;
            }
            filled = i - lo + 1;
            done_bytes += s->src_size;
            pcr_bld_progress(b->rep, PCRFS_BUILD_TRANSCODE, i + 1 - b->fbegin, nfiles, done_bytes,
                             total_bytes, false);
        }
        if (b->rep->cancel)
            rc = -2;
        if (rc == 0) {
            int e = pcr_writer_add_record(b->w, items, (unsigned)(hi - lo));
            const char *why = NULL;

            for (i = lo; i < hi; i++) {
                struct stream *c = &streams[i - lo];

                if (!items[i - lo].read)
                    continue;
                if (c->msg[0] && !why)
                    why = c->msg;
                else if (c->changed && e == 0)
                    pcr_bld_warn("%s changed while being read: stored as read",
                                 pcr_escaped(&esc, c->rel));
            }
            if (e < 0 && why) {
                pcr_bld_err("%s", why);
                rc = -1;
            } else if (e < 0) {
                pcr_bld_err("writing %s: %s", b->store, strerror(-e));
                /* the details, for a verbose log */
                if (pcr_writer_error(b->w)[0])
                    pcr_log(PCR_LOG_INFO, "%s", pcr_writer_error(b->w));
                rc = -1;
            }
        }
        /* The streamed files' names and descriptors (the items this record filled). */
        for (uint64_t k = 0; k < filled; k++) {
            if (!items[k].read)
                continue;
            if (streams[k].fd >= 0)
                close(streams[k].fd);
            free(streams[k].rel);
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
        pcr_bld_progress(b->rep, PCRFS_BUILD_TRANSCODE, nfiles, nfiles, done_bytes, total_bytes,
                         true);

    stop_workers(b);
    for (t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    /* Slots done ahead of a failure still hold data. */
    for (i = 0; i < b->nslots; i++) {
        free(b->slots[i].data);
        b->slots[i].data = NULL;
    }
    if (b->failed) {
        pcr_bld_err("%s", b->errmsg);
        rc = -1;
    }
    if (b->rep->cancel)
        rc = -2;
    free(items);
    free(streams);
    free(tids);
    pcr_sbuf_free(&esc);
    return rc;
}

/* ---- Phase 3: the meta keys ---- */

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

int build_set_meta(struct build *b)
{
    char v[64];
    int rc;

    snprintf(v, sizeof(v), "%u", b->per_record);
    if ((rc = pcr_writer_set_meta(b->w, "script", b->scripts.name)) < 0 ||
        (rc = set_script_meta(b)) < 0 || (rc = pcr_writer_set_meta(b->w, "per_record", v)) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "drop_markers", b->drop_markers ? "1" : "0")) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "quality", b->quality ? "ms-ssim-luma" : "off")) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "source", b->src ? b->src : "")) < 0 ||
        (rc = pcr_writer_set_meta(b->w, "created_by", "mkpcrfs " PCR_VERSION)) < 0)
        return rc;
    snprintf(v, sizeof(v), "%" PRIu64, b->skipped);
    return pcr_writer_set_meta(b->w, "skipped", v);
}

void build_free(struct build *b)
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
    for (unsigned k = 0; k < b->ntokopts; k++)
        free(b->tokopts[k].value);
    free(b->tokopts);
    free(b->scans_text);
    free(b->src_owned);
    if (b->slots) {
        for (i = 0; i < b->nslots; i++)
            free(b->slots[i].data);
        free(b->slots);
    }
    if (b->srcfd >= 0)
        close(b->srcfd);
}
