/* pcrfs — the refurbishing context: a bounded cache of prepared samples keyed by
 * (sample, version), and the worker threads that fill it ahead of need.
 *
 * One mutex guards the table, the LRU list and the entries' states; no render, load
 * or file write ever runs under it (only a RAM copy-out or an open()/unlink() does).
 * The workers are the threads of a work queue (common/workq.h); each entry is its
 * own job.
 *
 * An entry is in one state:
 *   QUEUED   in the work queue, waiting for a worker (or for a get() to take it
 *            back with pcr_workq_take(); a worker may have dequeued it already and
 *            not yet marked it RUNNING, so a get() that cannot take it waits);
 *   RUNNING  being rendered by exactly one thread (the worker or the get() that
 *            took it), in no list; a worker's entry stays RUNNING until the queue
 *            has let go of it (the job's done()), so that nobody frees it before;
 *   READY    prepared, in the LRU list: RAM bytes at e->data, or a file in the
 *            cache directory named after (sample, version);
 *   FAILED   the render failed with e->rc, in the LRU list (so a broken image is
 *            not rendered again by every open); a get() removes it and retries.
 * Correctness never depends on the cache: a version's bytes are a pure function
 * of (seed, sample, version, the image), so an evicted sample is rendered again,
 * identical. The cache only ever answers for the exact (sample, version) asked.
 *
 * Disk entries are published atomically: written to a temporary name in the
 * private directory, then renamed, and only then marked READY.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/refurb.h"
#include "common/internal.h"
#include "common/workq.h"

enum est { E_QUEUED, E_RUNNING, E_READY, E_FAILED };

struct entry {
    uint64_t sample, version;
    enum est st;
    int rc;                    /* FAILED: the error */
    unsigned waiters;          /* threads waiting on it or copying it out */
    bool dead;                 /* superseded while RUNNING: reap when published */
    uint8_t *data;             /* READY in RAM mode; a worker's render until done() */
    struct entry *hnext;       /* hash chain (by sample) */
    struct entry *prev, *next; /* LRU (READY, FAILED) */
    struct pcr_job job;        /* QUEUED: in the work queue; owner: the context */
};

struct pcr_refurb {
    struct pcr_refurb_conf conf;
    size_t ppm; /* bytes per sample */
    pcr_refurb_load_fn load;
    void *arg;

    pthread_mutex_t mu;
    pthread_cond_t cv_done; /* some entry left RUNNING (CLOCK_MONOTONIC) */
    struct entry **tab;
    size_t mask;       /* buckets - 1 */
    struct entry lru;  /* circular list with a sentinel */
    uint64_t capacity; /* READY + FAILED entries kept at most */
    uint64_t nrunning;
    uint64_t tmpseq; /* temporary file names */
    struct pcr_refurb_stats st;

    unsigned nthreads;   /* workers at most; 0: no work queue */
    struct pcr_workq wq; /* the workers */
    char *dir;           /* NULL: RAM */
    int dirfd;
};

/* ---- lists and table ---------------------------------------------------------- */

static void list_init(struct entry *s)
{
    s->prev = s->next = s;
}

static void list_add_tail(struct entry *s, struct entry *e)
{
    e->prev = s->prev;
    e->next = s;
    s->prev->next = e;
    s->prev = e;
}

static void list_del(struct entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static size_t bucket(const struct pcr_refurb *r, uint64_t sample)
{
    return (size_t)((sample * 0x9e3779b97f4a7c15ull) >> 32) & r->mask;
}

static struct entry *find(struct pcr_refurb *r, uint64_t sample, uint64_t version)
{
    for (struct entry *e = r->tab[bucket(r, sample)]; e; e = e->hnext)
        if (e->sample == sample && e->version == version)
            return e;
    return NULL;
}

static void file_name(char *buf, size_t len, uint64_t sample, uint64_t version)
{
    snprintf(buf, len, "%" PRIu64 "v%" PRIu64 ".ppm", sample, version);
}

/* Unlink the entry *@pp points to (@pp: its link in the table) from the table and
 * its list and free it; its file too. A QUEUED entry has been taken out of the work
 * queue (or the queue is gone). */
static void remove_at(struct pcr_refurb *r, struct entry **pp)
{
    struct entry *e = *pp;

    *pp = e->hnext;
    if (e->st == E_QUEUED) {
        r->st.queued--;
    } else if (e->st == E_READY || e->st == E_FAILED) {
        list_del(e);
        r->st.cached--;
        if (e->st == E_READY && r->dir) {
            char name[64];
            file_name(name, sizeof(name), e->sample, e->version);
            unlinkat(r->dirfd, name, 0);
        }
    }
    free(e->data);
    free(e);
}

/* remove_at() of @e, wherever it is in its bucket's chain */
static void remove_entry(struct pcr_refurb *r, struct entry *e)
{
    struct entry **pp = &r->tab[bucket(r, e->sample)];

    while (*pp != e)
        pp = &(*pp)->hnext;
    remove_at(r, pp);
}

static struct entry *add_entry(struct pcr_refurb *r, uint64_t sample, uint64_t version, enum est st)
{
    struct entry *e = calloc(1, sizeof(*e));
    size_t b = bucket(r, sample);

    if (!e)
        return NULL;
    e->sample = sample;
    e->version = version;
    e->st = st;
    e->hnext = r->tab[b];
    r->tab[b] = e;
    if (st == E_QUEUED) {
        r->st.queued++;
    } else if (st == E_RUNNING) {
        r->nrunning++;
    }
    return e;
}

/* Versions of @sample older than @version are never served again. */
static void drop_older(struct pcr_refurb *r, uint64_t sample, uint64_t version)
{
    struct entry *e = r->tab[bucket(r, sample)], *next;

    for (; e; e = next) {
        next = e->hnext;
        if (e->sample != sample || e->version >= version)
            continue;
        /* a QUEUED entry a worker has dequeued already is as good as RUNNING */
        if (e->st == E_RUNNING || e->waiters ||
            (e->st == E_QUEUED && !pcr_workq_take(&r->wq, &e->job))) {
            e->dead = true; /* its thread reaps it */
        } else {
            remove_entry(r, e);
            r->st.dropped++;
        }
    }
}

static void reap_if_dead(struct pcr_refurb *r, struct entry *e)
{
    if (e->dead && e->waiters == 0 && e->st != E_RUNNING) {
        remove_entry(r, e);
        r->st.dropped++;
    }
}

/* Keep READY + FAILED within the bound, least recently used first; an entry that
 * a thread is copying out is skipped. */
static void evict(struct pcr_refurb *r)
{
    struct entry *e = r->lru.next, *next;

    for (; e != &r->lru && r->st.cached > r->capacity; e = next) {
        next = e->next;
        if (e->waiters)
            continue;
        remove_entry(r, e);
        r->st.evicted++;
    }
}

/* ---- rendering ------------------------------------------------------------------ */

static int write_file(struct pcr_refurb *r, uint64_t seq, uint64_t sample, uint64_t version,
                      const uint8_t *buf)
{
    char tmp[64], name[64];
    size_t done = 0;
    int fd, rc = 0;

    snprintf(tmp, sizeof(tmp), ".tmp-%" PRIu64, seq);
    file_name(name, sizeof(name), sample, version);
    fd = openat(r->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    while (done < r->ppm) {
        ssize_t n = write(fd, buf + done, r->ppm - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)n;
    }
    if (close(fd) && !rc)
        rc = -errno;
    if (!rc && renameat(r->dirfd, tmp, r->dirfd, name))
        rc = -errno;
    if (rc)
        unlinkat(r->dirfd, tmp, 0);
    return rc;
}

/* Load and render (@sample, @version) without the lock; in disk mode also write
 * its file. *data: the bytes (the caller owns them). */
static int produce(struct pcr_refurb *r, uint64_t sample, uint64_t version, uint8_t **data)
{
    uint8_t *jpeg = NULL, *buf;
    size_t len = 0;
    char why[128];
    uint64_t seq;
    int rc;

    *data = NULL;
    rc = r->load(r->arg, sample, &jpeg, &len);
    if (rc)
        return rc < 0 ? rc : -EIO;
    buf = malloc(r->ppm);
    if (!buf) {
        free(jpeg);
        return -ENOMEM;
    }
    rc = pcr_refurb_render(&r->conf, jpeg, len, sample, version, buf, NULL, why, sizeof(why));
    free(jpeg);
    if (rc) {
        pcr_log(PCR_LOG_WARN, "refurb: sample %" PRIu64 " version %" PRIu64 ": %s", sample, version,
                why);
        free(buf);
        return rc;
    }
    if (r->dir) {
        pthread_mutex_lock(&r->mu);
        seq = r->tmpseq++;
        pthread_mutex_unlock(&r->mu);
        rc = write_file(r, seq, sample, version, buf);
        if (rc) {
            pcr_log(PCR_LOG_ERR, "refurb: cannot write to the cache directory %s: %s", r->dir,
                    strerror(-rc));
            free(buf);
            return rc;
        }
    }
    *data = buf;
    return 0;
}

/* Under the lock: @e (RUNNING) is done. Takes @data: keeps it in RAM mode when @keep,
 * else frees it. */
static void publish(struct pcr_refurb *r, struct entry *e, int rc, uint8_t *data, bool keep)
{
    r->nrunning--;
    if (rc == 0) {
        e->st = E_READY;
        r->st.prepared++;
        if (!r->dir && keep) {
            e->data = data;
            data = NULL;
        }
    } else {
        e->st = E_FAILED;
        e->rc = rc;
        r->st.failed++;
    }
    /* @data is ours in every case: what the entry does not keep (a cache on disk
     * holds the file) goes here, one place for every caller */
    free(data);
    list_add_tail(&r->lru, e);
    r->st.cached++;
    pthread_cond_broadcast(&r->cv_done);
    reap_if_dead(r, e); /* may free e */
}

/* A worker's job: render QUEUED @j's entry without the lock. It stays RUNNING, its
 * result kept in it, until job_done(): the queue still touches @j when this returns. */
static void job_run(struct pcr_job *j)
{
    struct entry *e = (struct entry *)((char *)j - offsetof(struct entry, job));
    struct pcr_refurb *r = (struct pcr_refurb *)j->owner;
    uint8_t *data;

    pthread_mutex_lock(&r->mu);
    r->st.queued--;
    e->st = E_RUNNING;
    r->nrunning++;
    pthread_mutex_unlock(&r->mu);
    e->rc = produce(r, e->sample, e->version, &data);
    e->data = data;
}

static void job_done(struct pcr_job *j)
{
    struct entry *e = (struct entry *)((char *)j - offsetof(struct entry, job));
    struct pcr_refurb *r = (struct pcr_refurb *)j->owner;
    uint8_t *data = e->data;
    int rc = e->rc;

    pthread_mutex_lock(&r->mu);
    e->data = NULL;
    publish(r, e, rc, data, true); /* may free e; takes data */
    evict(r);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the public calls ----------------------------------------------------------- */

/* Under the lock: copy READY @e out. RAM: a copy made under the lock. Disk: the
 * file is opened under the lock (an eviction may unlink the name, never the open
 * file) and read after it. @return 0, -ENOENT (the file is gone: render again). */
static int copy_out(struct pcr_refurb *r, struct entry *e, uint8_t **buf)
{
    char name[64];
    size_t done = 0;
    uint8_t *b = malloc(r->ppm);
    int fd, rc = 0;

    if (!b)
        return -ENOMEM;
    if (!r->dir) {
        memcpy(b, e->data, r->ppm);
        *buf = b;
        return 0;
    }
    file_name(name, sizeof(name), e->sample, e->version);
    fd = openat(r->dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        free(b);
        return -ENOENT;
    }
    pthread_mutex_unlock(&r->mu);
    while (done < r->ppm) {
        ssize_t n = pread(fd, b + done, r->ppm - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO; /* a cache file cut short: not ours */
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    pthread_mutex_lock(&r->mu);
    if (rc) {
        free(b);
        return rc;
    }
    *buf = b;
    return 0;
}

/* Under the lock: wait for RUNNING @e (or QUEUED, in a worker's hands) to finish. */
static void wait_running(struct pcr_refurb *r, struct entry *e)
{
    r->st.waits++;
    e->waiters++;
    while (e->st == E_RUNNING || e->st == E_QUEUED)
        pthread_cond_wait(&r->cv_done, &r->mu);
    e->waiters--;
}

/* Under the lock, returns unlocked: render (@sample, @version) in this thread,
 * taking over @e (QUEUED, taken out of the work queue) or a new entry, and publish
 * it. */
static int render_here(struct pcr_refurb *r, struct entry *e, uint64_t sample, uint64_t version,
                       uint8_t **buf)
{
    uint8_t *data, *keep = NULL;
    int rc;

    if (e) {
        r->st.queued--;
        e->st = E_RUNNING;
        r->nrunning++;
    } else if (!(e = add_entry(r, sample, version, E_RUNNING))) {
        pthread_mutex_unlock(&r->mu);
        return -ENOMEM;
    }
    r->st.ondemand++;
    pthread_mutex_unlock(&r->mu);
    rc = produce(r, sample, version, &data);
    if (rc == 0 && !r->dir) {
        keep = malloc(r->ppm);
        if (keep)
            memcpy(keep, data, r->ppm);
    }
    pthread_mutex_lock(&r->mu);
    if (rc == 0 && !r->dir && !keep) {
        /* No memory for the cache's copy: serve ours, cache nothing. */
        publish(r, e, -ENOMEM, NULL, false);
        r->st.failed--;
    } else {
        publish(r, e, rc, keep, true);
    }
    evict(r);
    pthread_mutex_unlock(&r->mu);
    *buf = data;
    return rc;
}

int pcr_refurb_get(struct pcr_refurb *r, uint64_t sample, uint64_t version, uint8_t **buf,
                   size_t *len)
{
    struct entry *e;
    int rc;

    *buf = NULL;
    *len = 0;
    pthread_mutex_lock(&r->mu);
    drop_older(r, sample, version);
    for (;;) {
        bool waited = false;

        e = find(r, sample, version);
        if (e && (e->st == E_RUNNING || (e->st == E_QUEUED && !pcr_workq_take(&r->wq, &e->job)))) {
            /* QUEUED but not taken: a worker has it, about to mark it RUNNING */
            wait_running(r, e);
            waited = true;
        }
        if (e && e->st == E_FAILED) {
            if (!waited) { /* a failure from earlier: try again */
                if (!e->waiters)
                    remove_entry(r, e);
                e = NULL;
            } else {
                rc = e->rc;
                if (!e->waiters)
                    remove_entry(r, e);
                pthread_mutex_unlock(&r->mu);
                return rc;
            }
        }
        if (!e || e->st == E_QUEUED)
            break;
        /* READY */
        if (!waited)
            r->st.hits++;
        list_del(e);
        list_add_tail(&r->lru, e);
        e->waiters++;
        rc = copy_out(r, e, buf);
        e->waiters--;
        if (rc == -ENOENT) {
            if (!e->waiters)
                remove_entry(r, e);
            continue;
        }
        reap_if_dead(r, e);
        pthread_mutex_unlock(&r->mu);
        if (rc == 0)
            *len = r->ppm;
        return rc;
    }
    rc = render_here(r, e, sample, version, buf);
    if (rc == 0)
        *len = r->ppm;
    return rc;
}

void pcr_refurb_release(struct pcr_refurb *r, uint64_t sample, uint64_t version)
{
    pthread_mutex_lock(&r->mu);
    drop_older(r, sample, version == UINT64_MAX ? version : version + 1);
    pthread_mutex_unlock(&r->mu);
}

int pcr_refurb_schedule(struct pcr_refurb *r, uint64_t sample, uint64_t version)
{
    struct entry *e;
    int rc = 0;

    if (r->nthreads == 0)
        return -EPIPE;
    pthread_mutex_lock(&r->mu);
    e = find(r, sample, version);
    if (e && e->st == E_FAILED && !e->waiters) {
        remove_entry(r, e); /* try again */
        e = NULL;
    }
    if (!e) {
        if (r->st.queued + r->nrunning >= r->capacity) {
            rc = -ENOBUFS;
        } else if (!(e = add_entry(r, sample, version, E_QUEUED))) {
            rc = -ENOMEM;
        } else {
            e->job.run = job_run;
            e->job.done = job_done;
            e->job.owner = r;
            if (!pcr_workq_push(&r->wq, &e->job, false)) {
                remove_entry(r, e); /* no worker could be started */
                rc = -EAGAIN;
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int pcr_refurb_wait(struct pcr_refurb *r, uint64_t sample, uint64_t version, unsigned timeout_ms)
{
    struct timespec dl;
    struct entry *e;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    e = find(r, sample, version);
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        return -ENOENT;
    }
    e->waiters++;
    while ((e->st == E_QUEUED || e->st == E_RUNNING) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&r->cv_done, &r->mu, &dl);
    e->waiters--;
    rc = e->st == E_READY ? 0 : e->st == E_FAILED ? e->rc : -ETIMEDOUT;
    reap_if_dead(r, e);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void pcr_refurb_get_stats(struct pcr_refurb *r, struct pcr_refurb_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

/* Remove everything in the private directory (files only: we make no others). */
static void remove_dir(struct pcr_refurb *r)
{
    int fd = dup(r->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;

    if (d) {
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(r->dirfd, de->d_name, 0);
        closedir(d);
    } else if (fd >= 0) {
        close(fd);
    }
    close(r->dirfd);
    rmdir(r->dir);
    free(r->dir);
}

/* Who made a private directory, written into it as MARKER: "pcrfs-refurb PID BOOT
 * PIDNS HOST". A daemon killed with SIGKILL (or by the OOM killer) cannot remove its
 * directory, which can hold the whole data set's worth of crops; the next context
 * made in the same parent removes it when the marker proves it dead: same boot,
 * same PID namespace and host, no such process, same owner. Anything else (no
 * marker, another machine sharing the file system, a container's PIDs) is left. */
#define MARKER ".pcrfs-owner"

static void read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;

    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, " \n")] = '\0';
    if (fd >= 0)
        close(fd);
}

/* "BOOT PIDNS HOST" of this process (each "-" when unknown). */
static void identity(char *out, size_t len)
{
    char boot[64], ns[64] = "-", host[256] = "-";
    ssize_t n;

    read_small("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
    n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    ns[n > 0 ? n : 1] = '\0';
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "-");
    host[sizeof(host) - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c <= ' ')
            *c = '_';
    snprintf(out, len, "%s %s %s", boot[0] ? boot : "-", ns, host);
}

/* A marker's "pcrfs-refurb PID REST": the PID (> 0) and in @rest what follows it and
 * its blanks; -1 when the line is not so (strtol: an overflow is no PID). */
static long marker_pid(const char *mark, const char **rest)
{
    static const char head[] = "pcrfs-refurb ";
    const char *num = mark + sizeof(head) - 1;
    char *end;
    long pid;

    if (strncmp(mark, head, sizeof(head) - 1) != 0)
        return -1;
    errno = 0;
    pid = strtol(num, &end, 10);
    if (errno != 0 || end == num || pid <= 0)
        return -1;
    *rest = end + strspn(end, " \t");
    return pid;
}

static void sweep_stale(const char *parent, const char *me)
{
    DIR *d = opendir(parent);
    struct dirent *de;

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        char path[4096], mpath[4200], mark[512];
        struct stat st;
        const char *rest;
        long pid;
        int fd;

        if (strncmp(de->d_name, "pcrfs-refurb.", 13) != 0 ||
            snprintf(path, sizeof(path), "%s/%s", parent, de->d_name) >= (int)sizeof(path) ||
            lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        snprintf(mpath, sizeof(mpath), "%s/" MARKER, path);
        fd = open(mpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        {
            ssize_t n = read(fd, mark, sizeof(mark) - 1);
            mark[n > 0 ? n : 0] = '\0';
            close(fd);
        }
        mark[strcspn(mark, "\n")] = '\0';
        if ((pid = marker_pid(mark, &rest)) <= 0 || strcmp(rest, me) != 0 ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        {
            int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            DIR *sub = dfd >= 0 ? fdopendir(dfd) : NULL;
            struct dirent *e;

            if (!sub) {
                if (dfd >= 0)
                    close(dfd);
                continue;
            }
            /* files only, as remove_dir(): a context makes nothing else */
            while ((e = readdir(sub)) != NULL)
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                    unlinkat(dfd, e->d_name, 0);
            closedir(sub);
        }
        if (rmdir(path) == 0)
            pcr_log(PCR_LOG_INFO,
                    "refurb cache %s: removed (left by pcrfs process %ld, which "
                    "is gone)",
                    path, pid);
    }
    closedir(d);
}

static int make_dir(struct pcr_refurb *r, const char *parent)
{
    size_t n = strlen(parent) + sizeof("/pcrfs-refurb.XXXXXX");
    char me[400], line[512];
    int fd, len;

    identity(me, sizeof(me));
    sweep_stale(parent, me);
    r->dir = malloc(n);
    if (!r->dir)
        return -ENOMEM;
    snprintf(r->dir, n, "%s/pcrfs-refurb.XXXXXX", parent);
    if (!mkdtemp(r->dir)) {
        int rc = -errno;
        free(r->dir);
        r->dir = NULL;
        return rc;
    }
    r->dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r->dirfd < 0) {
        int rc = -errno;
        rmdir(r->dir);
        free(r->dir);
        r->dir = NULL;
        return rc;
    }
    /* the marker: without it a killed daemon's directory is never removed */
    len = snprintf(line, sizeof(line), "pcrfs-refurb %ld %s\n", (long)getpid(), me);
    fd = openat(r->dirfd, MARKER, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, line, (size_t)len) != len) {
        int rc = fd < 0 ? -errno : -EIO;
        if (fd >= 0)
            close(fd);
        remove_dir(r);
        r->dir = NULL;
        return rc;
    }
    close(fd);
    return 0;
}

int pcr_refurb_open(const struct pcr_refurb_opts *o, pcr_refurb_load_fn load, void *arg,
                    struct pcr_refurb **out)
{
    struct pcr_refurb *r;
    uint64_t bytes = o->cache_bytes ? o->cache_bytes : 256ull << 20;
    size_t nb = 1024;
    int rc;

    *out = NULL;
    if (!load || pcr_refurb_conf_check(&o->conf) || o->threads > 256)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->conf = o->conf;
    r->ppm = pcr_refurb_ppm_size(o->conf.size);
    r->load = load;
    r->arg = arg;
    r->capacity = bytes / r->ppm ? bytes / r->ppm : 1;
    while (nb < r->capacity * 2 && nb < (1u << 22))
        nb *= 2;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): a table of pointers, one pointer each */
    r->tab = calloc(nb, sizeof(*r->tab));
    r->mask = nb - 1;
    r->dirfd = -1;
    list_init(&r->lru);
    pthread_mutex_init(&r->mu, NULL);
    /* pcr_refurb_wait's deadline: a clock step never shortens or stretches it */
    if ((rc = pcr_cond_init_monotonic(&r->cv_done)) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r->tab);
        free(r);
        return rc;
    }
    if (!r->tab) {
        pcr_refurb_close(r);
        return -ENOMEM;
    }
    if (o->cache_dir && (rc = make_dir(r, o->cache_dir)) != 0) {
        pcr_refurb_close(r);
        return rc;
    }
    /* every worker started now (signals blocked): a thread limit fails the open, which
     * the daemon reports at mount, not a render later (-EAGAIN from pthread_create) */
    if (o->threads) {
        if ((rc = pcr_workq_init(&r->wq, o->threads)) != 0) {
            pcr_refurb_close(r);
            return rc;
        }
        r->nthreads = o->threads;
        if ((rc = pcr_workq_start(&r->wq)) != 0) {
            pcr_refurb_close(r);
            return rc;
        }
    }
    *out = r;
    return 0;
}

void pcr_refurb_close(struct pcr_refurb *r)
{
    if (!r)
        return;
    /* queued jobs dropped (their entries stay QUEUED), running ones finished and
     * published, threads joined; without the lock: a job's done() takes it */
    pcr_workq_free(&r->wq);
    for (size_t b = 0; r->tab && b <= r->mask; b++)
        while (r->tab[b]) /* by its link: no rehash to find the chain again */
            remove_at(r, &r->tab[b]);
    if (r->dir)
        remove_dir(r);
    pthread_cond_destroy(&r->cv_done);
    pthread_mutex_destroy(&r->mu);
    free(r->tab);
    free(r);
}
