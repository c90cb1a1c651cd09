/* pcrinfo — inspect, verify and extract a pcrfs store through the store library.
 *
 * Everything here goes through the public API (pcrfs/store.h), exactly as the
 * FUSE driver does, so a store that pcrinfo --verify accepts is one the driver
 * serves correctly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/checksum.h"
#include "pcrfs/fidelity.h"
#include "pcrfs/jpeg.h"
#include "pcrfs/store.h"
#include "summary.h"
#include "tool.h"
#include "util/json.h"

#define IO_CHUNK (1u << 20)

#define FID_SAMPLE    300 /* default --sample */
#define FID_MAX       100000
#define FID_THRESHOLD 0.95 /* PCR: levels with MS-SSIM >= 0.95 keep accuracy */
/* MS-SSIM holds two double-precision pyramids of an image per thread (about 21 bytes
 * a pixel): images larger than this are left out of --fidelity (and counted). */
#define FID_MAX_PIXELS (48u << 20)
#define MAX_JOBS       256

enum mode {
    MODE_SUMMARY,
    MODE_JSON,
    MODE_VERIFY,
    MODE_LIST,
    MODE_CAT,
    MODE_EXTRACT,
    MODE_FIDELITY
};

static const char *const mode_opt[] = {
    [MODE_SUMMARY] = "",
    [MODE_JSON] = "--json",
    [MODE_VERIFY] = "--verify",
    [MODE_LIST] = "--list",
    [MODE_CAT] = "--cat",
    [MODE_EXTRACT] = "--extract",
    [MODE_FIDELITY] = "--fidelity",
};

/* The path of file @id into @b (raw bytes). @return 0 or a negative errno. */
static int file_path(struct pcr_store *s, uint64_t id, struct tool_buf *b)
{
    ssize_t n;

    tool_buf_reserve(b, 255);
    while ((n = pcr_store_path(s, id, b->s, b->cap)) == -ENAMETOOLONG)
        tool_buf_reserve(b, b->cap * 2);
    if (n < 0)
        return (int)n;
    b->len = (size_t)n;
    return 0;
}

static const char *kind_name(enum pcr_kind k)
{
    return k == PCR_KIND_JPEG ? "jpeg" : k == PCR_KIND_VERBATIM ? "verbatim" : "unknown";
}

static int do_list(struct pcr_store *s)
{
    struct tool_buf path = {0}, esc = {0};
    unsigned levels = pcr_store_levels(s), k;
    uint64_t n = pcr_store_nfiles(s), id;
    int rc = 0;

    for (id = 1; id <= n; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        int e;

        if ((e = pcr_store_file(s, id, &f)) < 0 || (e = file_path(s, id, &path)) < 0) {
            tool_err("file %" PRIu64 ": %s", id, strerror(-e));
            rc = 1;
            continue;
        }
        pcr_file_info(f, &fi);
        tool_buf_reset(&esc);
        tool_escape(&esc, path.s, path.len);
        printf("%s\t%s\t%u\t", esc.s, kind_name(fi.kind), fi.nchunks);
        for (k = 1; k <= levels; k++)
            printf("%s%" PRIu64, k > 1 ? " " : "", pcr_file_size(f, k));
        putchar('\n');
    }
    tool_buf_free(&path);
    tool_buf_free(&esc);
    return rc;
}

static int do_verify(struct pcr_store *s)
{
    struct tool_buf path = {0}, esc = {0};
    unsigned L = pcr_store_levels(s);
    uint64_t n = pcr_store_nfiles(s), id, failures = 0, decoded = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;

    for (id = 1; id <= n; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        struct pcr_jpeg_info ji;
        char why[512] = "";
        uint64_t size, sum;
        ssize_t got;
        int e;

        if ((e = file_path(s, id, &path)) < 0) {
            printf("FAILED file %" PRIu64 ": %s\n", id, strerror(-e));
            failures++;
            continue;
        }
        tool_buf_reset(&esc);
        tool_escape(&esc, path.s, path.len);
        if ((e = pcr_store_file(s, id, &f)) < 0) {
            printf("FAILED %s: %s\n", esc.s, strerror(-e));
            failures++;
            continue;
        }
        pcr_file_info(f, &fi);
        size = pcr_file_size(f, L);
        if (size > SIZE_MAX / 2) {
            printf("FAILED %s: size %" PRIu64 " out of range\n", esc.s, size);
            failures++;
            continue;
        }
        if (size + 1 > cap) {
            uint8_t *p = realloc(buf, (size_t)size + 1);

            if (!p) {
                printf("FAILED %s: out of memory for %" PRIu64 " bytes\n", esc.s, size);
                failures++;
                continue;
            }
            buf = p;
            cap = (size_t)size + 1;
        }
        /* Ask for one byte more than the index says: a read that returns it would
         * mean the size is wrong. */
        got = pcr_store_read(s, f, L, buf, (size_t)size + 1, 0);
        if (got < 0) {
            printf("FAILED %s: read: %s\n", esc.s, strerror((int)-got));
            failures++;
            continue;
        }
        if ((uint64_t)got != size) {
            printf("FAILED %s: read %zd bytes, the index says %" PRIu64 "\n", esc.s, got, size);
            failures++;
            continue;
        }
        sum = pcr_xxh64(buf, (size_t)got);
        if (sum != fi.checksum) {
            printf("FAILED %s: checksum %016" PRIx64 ", the index says %016" PRIx64 "\n", esc.s,
                   sum, fi.checksum);
            failures++;
            continue;
        }
        if (fi.kind != PCR_KIND_JPEG)
            continue;
        e = pcr_jpeg_decode(buf, (size_t)got, NULL, NULL, &ji, why, sizeof(why));
        if (e < 0) {
            printf("FAILED %s: does not decode: %s\n", esc.s, why[0] ? why : strerror(-e));
            failures++;
            continue;
        }
        if (ji.width != fi.width || ji.height != fi.height || ji.components != fi.components) {
            printf("FAILED %s: decodes as %ux%u, %u components; the index says %ux%u, %u\n", esc.s,
                   ji.width, ji.height, ji.components, fi.width, fi.height, fi.components);
            failures++;
            continue;
        }
        decoded++;
    }
    printf("verified %" PRIu64 " files at level %u (%" PRIu64 " JPEGs decoded): %" PRIu64
           " failure%s\n",
           n, L, decoded, failures, failures == 1 ? "" : "s");
    free(buf);
    tool_buf_free(&path);
    tool_buf_free(&esc);
    return failures ? 1 : 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copy @f at @level to @fd. @return 0, or a negative errno; *@reading tells
 * which side failed. */
static int copy_file(struct pcr_store *s, const struct pcr_file *f, unsigned level, int fd,
                     uint8_t *buf, bool *reading)
{
    struct pcr_handle *h;
    uint64_t off = 0, size;
    int rc;

    *reading = true;
    rc = pcr_handle_open(s, f, level, &h);
    if (rc < 0)
        return rc;
    size = pcr_handle_size(h);
    while (off < size) {
        ssize_t n = pcr_handle_read(h, buf, IO_CHUNK, off);

        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0) {
            rc = -EIO; /* shorter than its size: the store is inconsistent */
            break;
        }
        *reading = false;
        rc = write_all(fd, buf, (size_t)n);
        if (rc < 0)
            break;
        *reading = true;
        off += (uint64_t)n;
    }
    pcr_handle_close(h);
    return rc;
}

static int do_cat(struct pcr_store *s, const char *path, unsigned level)
{
    struct pcr_node node = {.is_dir = true, .id = PCR_ROOT_DIR};
    const struct pcr_file *f;
    char *copy = strdup(path), *p, *save = NULL;
    uint8_t *buf = malloc(IO_CHUNK);
    bool reading;
    int rc;

    if (!copy || !buf) {
        tool_err("out of memory");
        free(copy);
        free(buf);
        return 1;
    }
    /* Component by component from the root; empty components and "." are
     * skipped, as in a path name; ".." is refused (nothing above the root). */
    rc = 0;
    for (p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (strcmp(p, ".") == 0)
            continue;
        if (!node.is_dir) {
            rc = -ENOTDIR;
            break;
        }
        if (strcmp(p, "..") == 0) {
            rc = -ENOENT;
            break;
        }
        rc = pcr_store_lookup(s, node.id, p, &node);
        if (rc < 0)
            break;
    }
    free(copy);
    if (rc == 0 && node.is_dir)
        rc = -EISDIR;
    if (rc == 0)
        rc = pcr_store_file(s, node.id, &f);
    if (rc < 0) {
        struct tool_buf esc = {0};

        tool_err("%s: %s", tool_escaped(&esc, path), strerror(-rc));
        tool_buf_free(&esc);
        free(buf);
        return 1;
    }
    rc = copy_file(s, f, level, STDOUT_FILENO, buf, &reading);
    free(buf);
    if (rc < 0) {
        struct tool_buf esc = {0};

        if (reading)
            tool_err("reading %s: %s", tool_escaped(&esc, path), strerror(-rc));
        else
            tool_err("writing to standard output: %s", strerror(-rc));
        tool_buf_free(&esc);
        return 1;
    }
    return 0;
}

/* Names come from the store: never trust them to stay inside DIR. */
static bool safe_name(const char *n)
{
    return n[0] && !strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

struct extract {
    struct pcr_store *s;
    unsigned level;
    uint8_t *buf;
    struct tool_buf path; /* of the directory being written, relative to DIR */
    struct tool_buf esc;
    const char *dest;
};

static const char *ex_path(struct extract *x, const char *name)
{
    size_t keep = x->path.len;
    const char *r;

    if (keep)
        tool_buf_add(&x->path, "/", 1);
    tool_buf_add(&x->path, name, strlen(name));
    tool_buf_reset(&x->esc);
    tool_escape(&x->esc, x->path.s, x->path.len);
    x->path.len = keep;
    x->path.s[keep] = '\0';
    r = x->esc.s;
    return r;
}

static int extract_dir(struct extract *x, uint64_t dir, int dfd)
{
    uint64_t pos;

    for (pos = 0;; pos++) {
        struct pcr_dirent de;
        int rc = pcr_store_readdir(x->s, dir, pos, &de);

        if (rc == -ENOENT)
            return 0;
        if (rc < 0) {
            tool_err("%s: reading directory %s: %s", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".", strerror(-rc));
            return -1;
        }
        if (!safe_name(de.name)) {
            tool_err("%s: unsafe name in the store in %s: refused", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".");
            return -1;
        }
        if (de.node.is_dir) {
            size_t keep = x->path.len;
            int cfd;

            if (mkdirat(dfd, de.name, 0777) < 0 ||
                (cfd = openat(dfd, de.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, de.name), strerror(errno));
                return -1;
            }
            if (keep)
                tool_buf_add(&x->path, "/", 1);
            tool_buf_add(&x->path, de.name, strlen(de.name));
            rc = extract_dir(x, de.node.id, cfd);
            close(cfd);
            x->path.len = keep;
            x->path.s[keep] = '\0';
            if (rc < 0)
                return -1;
        } else {
            const struct pcr_file *f;
            bool reading = true;
            int fd;

            rc = pcr_store_file(x->s, de.node.id, &f);
            if (rc < 0) {
                tool_err("%s: %s", ex_path(x, de.name), strerror(-rc));
                return -1;
            }
            fd = openat(dfd, de.name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            if (fd < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, de.name), strerror(errno));
                return -1;
            }
            rc = copy_file(x->s, f, x->level, fd, x->buf, &reading);
            if (close(fd) < 0 && rc == 0) {
                rc = -errno;
                reading = false;
            }
            if (rc < 0) {
                if (reading)
                    tool_err("reading %s: %s", ex_path(x, de.name), strerror(-rc));
                else
                    tool_err("writing %s/%s: %s", x->dest, ex_path(x, de.name), strerror(-rc));
                return -1;
            }
        }
    }
}

static int do_extract(struct pcr_store *s, const char *dest, unsigned level)
{
    struct extract x = {.s = s, .level = level, .dest = dest};
    int dfd, rc;

    if (mkdir(dest, 0777) < 0) {
        tool_err("%s: %s", dest, errno == EEXIST ? "already exists" : strerror(errno));
        return 1;
    }
    dfd = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        tool_err("%s: %s", dest, strerror(errno));
        return 1;
    }
    x.buf = malloc(IO_CHUNK);
    if (!x.buf) {
        tool_err("out of memory");
        close(dfd);
        return 1;
    }
    tool_buf_add(&x.path, "", 0);
    rc = extract_dir(&x, PCR_ROOT_DIR, dfd);
    close(dfd);
    free(x.buf);
    tool_buf_free(&x.path);
    tool_buf_free(&x.esc);
    return rc < 0 ? 1 : 0;
}

/* ---- --fidelity: MS-SSIM, bytes and decode time per level ----
 *
 * A seeded sample of the store's JPEGs (splitmix64 driving a partial Fisher-Yates
 * shuffle of the file ids, so the same seed picks the same images on any machine
 * and any number of threads), each read at every level through the library. For
 * each level: the luma MS-SSIM against the highest level (pcrfs/fidelity.h), the
 * bytes served, and the CPU time of a complete libjpeg decode to RGB, the work a
 * data loader does per image (thread CPU time, so other load on the machine does
 * not inflate it). Per-image results are summed in sample order: the output does
 * not depend on the number of threads, except the times.
 */

struct fid_image {
    uint64_t id;
    unsigned scales; /* MS-SSIM scales its size allows */
    bool failed;     /* a level did not read or decode: not counted */
    bool too_large;  /* over FID_MAX_PIXELS: left out */
    unsigned level;  /* the level that failed */
    char why[256];   /* what failed */
    double *ssim;    /* [1..L] */
    double *dec;     /* [1..L], seconds */
    uint64_t *bytes; /* [1..L] */
};

struct fidelity {
    struct pcr_store *s;
    unsigned L;
    struct fid_image *img;
    size_t n;
    atomic_size_t next; /* next image a worker takes */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));

    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double thread_cpu(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read @f at @level into *buf (grown as needed). @return bytes, or a negative errno. */
static ssize_t read_level(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                          uint8_t **buf, size_t *cap)
{
    uint64_t size = pcr_file_size(f, level);
    ssize_t got;

    if (size > SIZE_MAX / 2)
        return -EFBIG;
    if (size + 1 > *cap) {
        uint8_t *p = realloc(*buf, (size_t)size + 1);

        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = (size_t)size + 1;
    }
    got = pcr_store_read(s, f, level, *buf, (size_t)size + 1, 0);
    if (got >= 0 && (uint64_t)got != size)
        return -EIO;
    return got;
}

static void fid_one(struct fidelity *fx, struct fid_image *im, uint8_t **buf, size_t *cap,
                    uint8_t **full, size_t *fullcap)
{
    const struct pcr_file *f;
    struct pcr_msssim_ref *ref = NULL;
    uint8_t *luma = NULL;
    unsigned w, h, L = fx->L, k;
    ssize_t nfull, n;
    double t;
    int rc;

    if (pcr_store_file(fx->s, im->id, &f) == 0) {
        struct pcr_file_info fi;

        pcr_file_info(f, &fi);
        if ((uint64_t)fi.width * fi.height > FID_MAX_PIXELS) {
            im->too_large = true;
            return;
        }
    }
    if ((rc = pcr_store_file(fx->s, im->id, &f)) < 0 ||
        (nfull = read_level(fx->s, f, L, full, fullcap)) < 0) {
        if (rc == 0)
            rc = (int)nfull;
        snprintf(im->why, sizeof(im->why), "read: %s", strerror(-rc));
        im->level = L;
        goto fail;
    }
    t = thread_cpu();
    rc = pcr_jpeg_decode(*full, (size_t)nfull, NULL, NULL, NULL, im->why, sizeof(im->why));
    im->dec[L] = thread_cpu() - t;
    if (rc == 0)
        rc = pcr_jpeg_decode_luma(*full, (size_t)nfull, &luma, &w, &h, im->why, sizeof(im->why));
    if (rc == 0)
        rc = pcr_msssim_ref_new(luma, w, h, w, &ref);
    free(luma);
    luma = NULL;
    if (rc < 0) {
        if (!im->why[0])
            snprintf(im->why, sizeof(im->why), "%s", strerror(-rc));
        im->level = L;
        goto fail;
    }
    im->scales = pcr_msssim_ref_scales(ref);
    im->ssim[L] = 1.0;
    im->bytes[L] = (uint64_t)nfull;
    for (k = 1; k < L; k++) {
        unsigned lw, lh;

        n = read_level(fx->s, f, k, buf, cap);
        if (n < 0) {
            snprintf(im->why, sizeof(im->why), "read: %s", strerror((int)-n));
            im->level = k;
            goto fail;
        }
        im->bytes[k] = (uint64_t)n;
        if (n == nfull && memcmp(*buf, *full, (size_t)n) == 0) {
            /* This image has at most k scans: level k is the full image. */
            im->ssim[k] = 1.0;
            im->dec[k] = im->dec[L];
            continue;
        }
        t = thread_cpu();
        rc = pcr_jpeg_decode(*buf, (size_t)n, NULL, NULL, NULL, im->why, sizeof(im->why));
        im->dec[k] = thread_cpu() - t;
        if (rc == 0)
            rc = pcr_jpeg_decode_luma(*buf, (size_t)n, &luma, &lw, &lh, im->why, sizeof(im->why));
        if (rc == 0)
            rc = pcr_msssim_compare(ref, luma, lw, lh, lw, &im->ssim[k]);
        free(luma);
        luma = NULL;
        if (rc < 0) {
            if (!im->why[0])
                snprintf(im->why, sizeof(im->why), "%s", strerror(-rc));
            im->level = k;
            goto fail;
        }
    }
    pcr_msssim_ref_free(ref);
    return;
fail:
    pcr_msssim_ref_free(ref);
    im->failed = true;
}

static void *fid_worker(void *arg)
{
    struct fidelity *fx = arg;
    uint8_t *buf = NULL, *full = NULL;
    size_t cap = 0, fullcap = 0, i;

    while ((i = atomic_fetch_add(&fx->next, 1)) < fx->n)
        fid_one(fx, &fx->img[i], &buf, &cap, &full, &fullcap);
    free(buf);
    free(full);
    return NULL;
}

static int cmp_id(const void *a, const void *b)
{
    const struct fid_image *x = a, *y = b;

    return x->id < y->id ? -1 : x->id > y->id;
}

/* Pick up to @want JPEG ids. @return how many, or -1 (message printed). */
static ssize_t fid_sample(struct pcr_store *s, size_t want, uint64_t seed, struct fid_image *img,
                          uint64_t *njpeg_seen, bool *all)
{
    uint64_t nfiles = pcr_store_nfiles(s), i, rng = seed;
    uint64_t *ids;
    size_t got = 0;

    *njpeg_seen = 0;
    *all = true;
    if (nfiles > SIZE_MAX / sizeof(*ids)) {
        tool_err("too many files");
        return -1;
    }
    ids = malloc((size_t)(nfiles ? nfiles : 1) * sizeof(*ids));
    if (!ids) {
        tool_err("out of memory");
        return -1;
    }
    for (i = 0; i < nfiles; i++)
        ids[i] = i + 1;
    /* Draw files in a seeded random order until @want JPEGs are found: on a big
     * store only about @want files are looked at. */
    for (i = 0; i < nfiles && got < want; i++) {
        uint64_t r = splitmix64(&rng);
        uint64_t j = i + (uint64_t)(((unsigned __int128)r * (nfiles - i)) >> 64);
        uint64_t t = ids[i];
        const struct pcr_file *f;
        struct pcr_file_info fi;

        ids[i] = ids[j];
        ids[j] = t;
        if (pcr_store_file(s, ids[i], &f) < 0)
            continue;
        pcr_file_info(f, &fi);
        if (fi.kind == PCR_KIND_JPEG) {
            img[got++].id = ids[i];
            (*njpeg_seen)++;
        }
    }
    if (i < nfiles)
        *all = false; /* stopped early: the JPEG count below is a lower bound */
    free(ids);
    qsort(img, got, sizeof(*img), cmp_id); /* read in store order */
    return (ssize_t)got;
}

struct fid_args {
    size_t sample;
    uint64_t seed;
    double threshold;
    unsigned jobs;
    bool json;
};

static int do_fidelity(struct pcr_store *s, const struct fid_args *a)
{
    struct fidelity fx = {.s = s, .L = pcr_store_levels(s)};
    unsigned L = fx.L, k, t, started = 0, reduced = 0, large = 0, recommended;
    size_t i, ok = 0, failures = 0;
    uint64_t njpeg = 0;
    pthread_t tids[MAX_JOBS];
    double *sum_ssim, *min_ssim, *sum_dec, *sum_bytes;
    char script[128] = "";
    bool all;
    ssize_t n;

    if (pcr_store_meta(s, "script", script, sizeof(script)) < 0)
        script[0] = '\0';
    fx.img = calloc(a->sample ? a->sample : 1, sizeof(*fx.img));
    sum_ssim = calloc(L + 1, sizeof(double));
    min_ssim = calloc(L + 1, sizeof(double));
    sum_dec = calloc(L + 1, sizeof(double));
    sum_bytes = calloc(L + 1, sizeof(double));
    if (!fx.img || !sum_ssim || !min_ssim || !sum_dec || !sum_bytes)
        tool_oom();
    n = fid_sample(s, a->sample, a->seed, fx.img, &njpeg, &all);
    if (n < 0)
        return 1;
    fx.n = (size_t)n;
    for (i = 0; i < fx.n; i++) {
        fx.img[i].ssim = calloc(L + 1, sizeof(double));
        fx.img[i].dec = calloc(L + 1, sizeof(double));
        fx.img[i].bytes = calloc(L + 1, sizeof(uint64_t));
        if (!fx.img[i].ssim || !fx.img[i].dec || !fx.img[i].bytes)
            tool_oom();
    }
    for (t = 0; t < a->jobs && t < MAX_JOBS && (t == 0 || t < fx.n); t++) {
        if (pthread_create(&tids[t], NULL, fid_worker, &fx) != 0)
            break;
        started++;
    }
    if (!started)
        fid_worker(&fx);
    for (t = 0; t < started; t++)
        pthread_join(tids[t], NULL);

    for (k = 1; k <= L; k++)
        min_ssim[k] = 1.0;
    for (i = 0; i < fx.n; i++) {
        struct fid_image *im = &fx.img[i];

        if (im->too_large) {
            large++;
            continue;
        }
        if (im->failed) {
            struct tool_buf path = {0}, esc = {0};

            if (file_path(s, im->id, &path) == 0) {
                tool_escape(&esc, path.s, path.len);
                tool_err("%s: level %u: %s", esc.s, im->level, im->why);
            } else {
                tool_err("file %" PRIu64 ": level %u: %s", im->id, im->level, im->why);
            }
            tool_buf_free(&path);
            tool_buf_free(&esc);
            failures++;
            continue;
        }
        ok++;
        if (im->scales < PCR_MSSSIM_SCALES)
            reduced++;
        for (k = 1; k <= L; k++) {
            sum_ssim[k] += im->ssim[k];
            if (im->ssim[k] < min_ssim[k])
                min_ssim[k] = im->ssim[k];
            sum_dec[k] += im->dec[k];
            sum_bytes[k] += (double)im->bytes[k];
        }
    }
    /* The lowest level whose mean reaches the threshold; L always does (1.0). */
    recommended = L;
    for (k = 1; ok && k <= L; k++) {
        if (sum_ssim[k] / (double)ok >= a->threshold) {
            recommended = k;
            break;
        }
    }

    if (a->json) {
        printf("{\"script\":");
        if (script[0])
            pcr_json_fquote(stdout, script);
        else
            fputs("null", stdout);
        printf(",\"levels\":%u,\"metric\":\"ms-ssim\",\"channel\":\"luma\",\"scales\":%d,"
               "\"jpeg\":%" PRIu64 ",\"jpeg_counted\":%s,\"sample\":%zu,\"seed\":%" PRIu64
               ",\"threshold\":%.6g,\"failures\":%zu,\"reduced_scales\":%u,\"too_large\":%u,"
               "\"table\":[",
               L, PCR_MSSSIM_SCALES, njpeg, all ? "true" : "false", ok, a->seed, a->threshold,
               failures, reduced, large);
        for (k = 1; ok && k <= L; k++) {
            printf("%s{\"level\":%u,\"msssim\":%.6f,\"msssim_min\":%.6f,\"mean_bytes\":%.3f,"
                   "\"ratio_to_full\":%.6f,\"decode_ms\":%.4f}",
                   k > 1 ? "," : "", k, sum_ssim[k] / (double)ok, min_ssim[k],
                   sum_bytes[k] / (double)ok, sum_bytes[L] > 0 ? sum_bytes[k] / sum_bytes[L] : 0.0,
                   1e3 * sum_dec[k] / (double)ok);
        }
        printf("],\"recommended\":");
        if (ok)
            printf("%u}\n", recommended);
        else
            printf("null}\n");
    } else {
        printf("fidelity      %zu of %s%" PRIu64 " JPEGs (seed %" PRIu64
               "): luma MS-SSIM of each level against level %u\n",
               ok, all ? "" : "more than ", njpeg, a->seed, L);
        printf("              script %s; decode = CPU time of a full libjpeg decode to RGB\n",
               script[0] ? script : "?");
        if (reduced)
            printf("              %u image%s smaller than %d px used fewer than %d scales\n",
                   reduced, reduced == 1 ? "" : "s", PCR_MSSSIM_WINDOW << (PCR_MSSSIM_SCALES - 1),
                   PCR_MSSSIM_SCALES);
        if (large)
            printf("              %u image%s over %u Mpixels left out\n", large,
                   large == 1 ? "" : "s", FID_MAX_PIXELS >> 20);
        if (failures)
            printf("              %zu image%s failed (see the messages above)\n", failures,
                   failures == 1 ? "" : "s");
        printf("\nlevel  MS-SSIM     min  mean bytes  ratio to full  decode ms\n");
        if (!ok)
            printf("    -  no JPEG in this store\n");
        for (k = 1; ok && k <= L; k++)
            printf("%5u  %7.4f  %6.4f  %10.0f  %13.3f  %9.3f\n", k, sum_ssim[k] / (double)ok,
                   min_ssim[k], sum_bytes[k] / (double)ok,
                   sum_bytes[L] > 0 ? sum_bytes[k] / sum_bytes[L] : 0.0,
                   1e3 * sum_dec[k] / (double)ok);
        if (ok)
            printf("\nrecommended   level %u: the lowest whose mean MS-SSIM >= %g\n", recommended,
                   a->threshold);
    }
    for (i = 0; i < fx.n; i++) {
        free(fx.img[i].ssim);
        free(fx.img[i].dec);
        free(fx.img[i].bytes);
    }
    free(fx.img);
    free(sum_ssim);
    free(min_ssim);
    free(sum_dec);
    free(sum_bytes);
    return failures ? 1 : 0;
}

static void usage(FILE *f)
{
    fputs("Usage: pcrinfo [OPTIONS] STORE\n"
          "Show, verify or extract the pcrfs store STORE.\n"
          "\n"
          "  (no option)     the summary and the PCR table\n"
          "      --json      the summary as one JSON object\n"
          "      --verify    read every file at the highest level, check its checksum,\n"
          "                  decode every JPEG; exit 1 on any failure\n"
          "      --list      one line per file: path, kind, chunks, size at each level\n"
          "      --cat PATH  write the file PATH to standard output (at --level)\n"
          "      --extract DIR  write the whole tree into the new directory DIR (at --level)\n"
          "      --level K   1..L or 'full' (default: full)\n"
          "      --fidelity  per level: mean luma MS-SSIM against full fidelity, mean bytes,\n"
          "                  decode time, and the recommended level (with --json: JSON)\n"
          "      --sample N  images to sample for --fidelity (default 300)\n"
          "      --seed S    seed of the sample (default 1)\n"
          "      --threshold T  MS-SSIM the recommended level must reach (default 0.95)\n"
          "  -j, --jobs N    threads for --fidelity (default: online CPUs)\n"
          "  -v, --verbose   show the library's informational and debug messages\n"
          "  -h, --help      show this help and exit\n"
          "  -V, --version   show the version and exit\n"
          "\n"
          "Exit status: 0 success, 1 failure or verification failed, 2 usage error.\n"
          "See pcrinfo(1).\n",
          f);
}

enum {
    OPT_JSON = 256,
    OPT_VERIFY,
    OPT_LIST,
    OPT_CAT,
    OPT_EXTRACT,
    OPT_LEVEL,
    OPT_FIDELITY,
    OPT_SAMPLE,
    OPT_SEED,
    OPT_THRESHOLD,
};

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"list", no_argument, NULL, OPT_LIST},
        {"cat", required_argument, NULL, OPT_CAT},
        {"extract", required_argument, NULL, OPT_EXTRACT},
        {"level", required_argument, NULL, OPT_LEVEL},
        {"fidelity", no_argument, NULL, OPT_FIDELITY},
        {"sample", required_argument, NULL, OPT_SAMPLE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"jobs", required_argument, NULL, 'j'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    enum mode mode = MODE_SUMMARY;
    const char *arg = NULL, *level_arg = NULL, *path;
    struct pcr_store *s;
    char err[1024] = "";
    bool verbose = false, json = false, fid_opt = false;
    struct fid_args fa = {.sample = FID_SAMPLE, .seed = 1, .threshold = FID_THRESHOLD};
    unsigned long long v;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned level;
    int c, rc;

    tool_prog = "pcrinfo";
    opterr = 0;
    fa.jobs = ncpu > 0 ? (ncpu > MAX_JOBS ? MAX_JOBS : (unsigned)ncpu) : 1;
    while ((c = getopt_long(argc, argv, ":j:vhV", longopts, NULL)) != -1) {
        enum mode m;

        switch (c) {
        case OPT_JSON:
            /* Not a mode of its own: the JSON form of the summary or of --fidelity. */
            json = true;
            break;
        case OPT_FIDELITY:
            if (mode != MODE_SUMMARY && mode != MODE_FIDELITY)
                tool_usage_error("%s and --fidelity cannot be used together", mode_opt[mode]);
            mode = MODE_FIDELITY;
            break;
        case OPT_SAMPLE:
            if (tool_parse_uint(optarg, 1, FID_MAX, &v) < 0)
                tool_usage_error("invalid sample size '%s' (1..%d)", optarg, FID_MAX);
            fa.sample = (size_t)v;
            fid_opt = true;
            break;
        case OPT_SEED:
            if (tool_parse_uint(optarg, 0, UINT64_MAX, &v) < 0)
                tool_usage_error("invalid seed '%s'", optarg);
            fa.seed = v;
            fid_opt = true;
            break;
        case OPT_THRESHOLD: {
            char *end;
            double d;

            errno = 0;
            d = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(d > 0 && d <= 1))
                tool_usage_error("invalid threshold '%s' (a number in (0, 1])", optarg);
            fa.threshold = d;
            fid_opt = true;
            break;
        }
        case 'j':
            if (tool_parse_uint(optarg, 1, MAX_JOBS, &v) < 0)
                tool_usage_error("invalid number of jobs '%s' (1..%d)", optarg, MAX_JOBS);
            fa.jobs = (unsigned)v;
            fid_opt = true;
            break;
        case OPT_VERIFY:
        case OPT_LIST:
        case OPT_CAT:
        case OPT_EXTRACT:
            m = c == OPT_VERIFY ? MODE_VERIFY
                : c == OPT_LIST ? MODE_LIST
                : c == OPT_CAT  ? MODE_CAT
                                : MODE_EXTRACT;
            if (mode != MODE_SUMMARY && mode != m)
                tool_usage_error("%s and %s cannot be used together", mode_opt[mode], mode_opt[m]);
            mode = m;
            if (optarg)
                arg = optarg;
            break;
        case OPT_LEVEL:
            level_arg = optarg;
            break;
        case 'v':
            verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("pcrinfo (pcrfs) %s\n", PCR_VERSION);
            return 0;
        default:
            tool_getopt_error(c, argv);
        }
    }
    if (optind == argc)
        tool_usage_error("missing STORE");
    if (argc - optind > 1)
        tool_usage_error("too many arguments: '%s'", argv[optind + 1]);
    if (json) {
        if (mode != MODE_SUMMARY && mode != MODE_FIDELITY)
            tool_usage_error("--json and %s cannot be used together", mode_opt[mode]);
        if (mode == MODE_SUMMARY)
            mode = MODE_JSON;
    }
    fa.json = json;
    if (fid_opt && mode != MODE_FIDELITY)
        tool_usage_error("--sample, --seed, --threshold and --jobs apply only to --fidelity");
    if (level_arg && mode != MODE_CAT && mode != MODE_EXTRACT)
        tool_usage_error("--level applies only to --cat and --extract");
    path = argv[optind];
    tool_log_init(verbose);

    rc = pcr_store_open(path, &s, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s", err[0] ? err : strerror(-rc));
        return 1;
    }
    level = pcr_store_levels(s);
    if (level_arg && strcmp(level_arg, "full") != 0) {
        unsigned long long v;

        if (tool_parse_uint(level_arg, 1, level, &v) < 0) {
            pcr_store_close(s);
            tool_usage_error("invalid level '%s': this store has levels 1..%u or 'full'", level_arg,
                             level);
        }
        level = (unsigned)v;
    }

    switch (mode) {
    case MODE_SUMMARY:
    case MODE_JSON: {
        struct summary *sm;

        rc = summary_compute(s, path, &sm, err, sizeof(err));
        if (rc < 0) {
            tool_err("%s", err);
            rc = 1;
            break;
        }
        if (mode == MODE_JSON)
            summary_print_json(sm, stdout);
        else
            summary_print_text(sm, stdout);
        summary_free(sm);
        rc = 0;
        break;
    }
    case MODE_VERIFY:
        rc = do_verify(s);
        break;
    case MODE_LIST:
        rc = do_list(s);
        break;
    case MODE_CAT:
        rc = do_cat(s, arg, level);
        break;
    case MODE_EXTRACT:
        rc = do_extract(s, arg, level);
        break;
    case MODE_FIDELITY:
        rc = do_fidelity(s, &fa);
        break;
    }
    pcr_store_close(s);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        tool_err("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return rc;
}
