/* The build pipeline out of memory: pcrfs_build(), pcrfs_build_plan(), a planned
 * build's part and pcrfs_merge(), and builds with tokens= and seit=, with the Nth of the pipeline's
 * allocations failing (util/xalloc.h, pcr_try_fail_from), and every one after it, for every N up to
 * the run's count. Each run must return -ENOMEM and say so ("out of memory", or the errno's text
 * after a file's name), and leave nothing behind: no STORE, no temporary directory or file; only a
 * failure the pipeline tolerates by design (a name in a message) may let it succeed. Leaks are the
 * unit suite's valgrind and ASan runs' to find. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "pcrfs/pcrfs.h"
#include "pcrfs/tokens.h"
#include "util/fsio.h"
#include "util/xalloc.h"

/* Bounds the loops whatever the count: a build this small makes far fewer. */
#define MAX_N 4000

static char base[64];

static void put_bytes(const char *rel, const void *data, size_t len)
{
    char path[256];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", base, rel);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
        perror(path);
        exit(2);
    }
    close(fd);
}

static void put(const char *rel, const char *text)
{
    put_bytes(rel, text, strlen(text));
}

/* A token grid of @h x @w (values varied by @seed) as the .npy file @rel. */
static void put_npy(const char *rel, unsigned h, unsigned w, unsigned seed)
{
    uint16_t grid[64];
    uint8_t buf[512];
    char path[256];
    size_t n;
    int fd;

    for (unsigned i = 0; i < h * w && i < 64; i++)
        grid[i] = (uint16_t)((i * 7 + seed) % 50);
    n = pcr_npy_write_grid(h, w, grid, buf, sizeof(buf));
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (n == 0 || fd < 0 || write(fd, buf, n) != (ssize_t)n) {
        perror(path);
        exit(2);
    }
    close(fd);
}

/* A file larger than the pipeline reads at once: the writer streams it. */
static void put_big(const char *rel, size_t size)
{
    char *text = malloc(size + 1);

    if (!text)
        exit(2);
    memset(text, 'x', size);
    text[size] = '\0';
    put(rel, text);
    free(text);
}

static void dir(const char *rel)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/%s", base, rel);
    if (mkdir(path, 0755) != 0) {
        perror(path);
        exit(2);
    }
}

/* A SeiT release of three 1x2 grids (one byte per token) under seit/: the data,
 * its index (a 1-D '<i8' .npy of the offsets, padded as numpy pads), labels and
 * names in two class directories. */
static void put_seit(void)
{
    static const uint8_t data[] = {1, 2, 3, 4, 5, 6};
    static const char dict[] = "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }";
    uint8_t npy[128 + 4 * 8] = "\x93NUMPY\x01\x00";
    size_t hlen = 128 - 10; /* magic, version and length, then the dict to 128 bytes */

    npy[8] = (uint8_t)hlen;
    memset(npy + 10, ' ', hlen - 1);
    memcpy(npy + 10, dict, strlen(dict));
    npy[127] = '\n';
    for (unsigned i = 0; i < 4; i++)
        npy[128 + i * 8] = (uint8_t)(2 * i); /* little-endian 0, 2, 4, 6 */
    dir("seit");
    put_bytes("seit/x-token.data.bin", data, sizeof(data));
    put_bytes("seit/x-token.index.npy", npy, sizeof(npy));
    put("seit/x-label.txt", "0\n1\n1\n");
    put("seit/names.txt", "c0/a.JPEG\nc1/b.JPEG\nc1/c.JPEG\n");
}

/* Entries of @base other than those named in @keep (NULL-terminated). */
static unsigned extra_entries(const char *const *keep)
{
    DIR *d = opendir(base);
    struct dirent *de;
    unsigned n = 0;

    if (!d)
        return 1000;
    while ((de = readdir(d)) != NULL) {
        bool known = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;

        for (unsigned k = 0; keep[k] && !known; k++)
            known = strcmp(de->d_name, keep[k]) == 0;
        if (!known) {
            fprintf(stderr, "left behind: %s\n", de->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

enum what { BUILD, TOKENS, SEIT, PLAN, PART, MERGE };

static int run(enum what what, const char *out)
{
    static const char *const build_opts[] = {"jobs=2", "per_record=2", NULL};
    char src[96], path[96], plan_opt[128], p1[96], p2[96], tokens_opt[128];
    const char *part_opts[] = {plan_opt, "part=1/2", "jobs=2", NULL};
    const char *tok_opts[] = {tokens_opt, "jobs=2", NULL};
    char seit[4][128];
    const char *seit_opts[] = {seit[0], seit[1], seit[2], seit[3], "seit_shape=1x2", NULL};
    const char *const parts[] = {p1, p2};

    snprintf(src, sizeof(src), "%s/src", base);
    snprintf(path, sizeof(path), "%s/%s", base, out);
    snprintf(plan_opt, sizeof(plan_opt), "plan=%s/plan", base);
    snprintf(p1, sizeof(p1), "%s/p1", base);
    snprintf(p2, sizeof(p2), "%s/p2", base);
    snprintf(tokens_opt, sizeof(tokens_opt), "tokens=%s/tok", base);
    snprintf(seit[0], sizeof(seit[0]), "seit=%s/seit/x-token.data.bin", base);
    snprintf(seit[1], sizeof(seit[1]), "seit_index=%s/seit/x-token.index.npy", base);
    snprintf(seit[2], sizeof(seit[2]), "seit_labels=%s/seit/x-label.txt", base);
    snprintf(seit[3], sizeof(seit[3]), "seit_names=%s/seit/names.txt", base);
    switch (what) {
    case BUILD:
        return pcrfs_build(src, path, build_opts, NULL, NULL);
    case TOKENS:
        return pcrfs_build(src, path, tok_opts, NULL, NULL);
    case SEIT:
        return pcrfs_build(NULL, path, seit_opts, NULL, NULL);
    case PLAN:
        return pcrfs_build_plan(src, path, build_opts + 1, NULL, NULL);
    case PART:
        return pcrfs_build(NULL, path, part_opts, NULL, NULL);
    default:
        return pcrfs_merge(path, parts, 2, NULL, NULL, NULL);
    }
}

/* Run @what once as it is, counting its allocations (T), then with its Nth
 * allocation and every one after it failing, for N = 1..T. A run may succeed only
 * if every failure it met was one the pipeline tolerates by design (a name in a
 * message replaced by a fixed text). @keep: what @base holds before. */
static void fail_each(enum what what, const char *name, const char *const *keep)
{
    unsigned long start = pcr_try_count, total, n, failures = 0;
    char out[128];
    int rc;

    snprintf(out, sizeof(out), "%s/out", base);
    rc = run(what, "out");
    total = pcr_try_count - start;
    CHECK(rc == 0, "%s: %s", name, pcrfs_errmsg());
    CHECK(total > 0 && total <= MAX_N, "%s: %lu allocations", name, total);
    pcr_remove_tree(out);
    for (n = 1; n <= total && n <= MAX_N; n++) {
        unsigned long tolerated = pcr_try_tolerated;

        start = pcr_try_count;
        __atomic_store_n(&pcr_try_fail_from, start + n, __ATOMIC_RELAXED);
        rc = run(what, "out");
        __atomic_store_n(&pcr_try_fail_from, 0, __ATOMIC_RELAXED);
        if (rc == 0) {
            CHECK(pcr_try_tolerated > tolerated && pcr_try_count - start >= n,
                  "%s: N=%lu succeeded although an allocation failed", name, n);
            pcr_remove_tree(out);
            continue;
        }
        failures++;
        CHECK(rc == -ENOMEM, "%s: N=%lu returned %d (%s)", name, n, rc, pcrfs_errmsg());
        CHECK(strstr(pcrfs_errmsg(), "out of memory") || strstr(pcrfs_errmsg(), strerror(ENOMEM)),
              "%s: N=%lu said '%s'", name, n, pcrfs_errmsg());
        CHECK(access(out, F_OK) != 0, "%s: N=%lu left %s", name, n, out);
        CHECK(extra_entries(keep) == 0, "%s: N=%lu left something behind", name, n);
        pcr_remove_tree(out);
    }
    CHECK(failures > 0, "%s: no allocation of the pipeline failed", name);
    printf("%s: %lu allocations; %lu of the %lu runs failed with -ENOMEM\n", name, total, failures,
           n - 1);
}

int main(void)
{
    static const char *const plan_opts[] = {"per_record=2", NULL};
    const char *const keep_src[] = {"src", "tok", "seit", NULL};
    const char *const keep_plan[] = {"src", "tok", "seit", "plan", NULL};
    const char *const keep_parts[] = {"src", "tok", "seit", "plan", "p1", "p2", NULL};
    char src[96], plan[96], p1[96], p2[96];
    const char *p1_opts[] = {NULL, "part=1/2", NULL}, *p2_opts[] = {NULL, "part=2/2", NULL};
    char plan_opt[128];

    snprintf(base, sizeof(base), "/tmp/pcrfs-buildoom.XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 2;
    }
    dir("src");
    dir("src/a");
    dir("src/a/deep");
    dir("src/b");
    put("src/top.txt", "top\n");
    put("src/a/one.txt", "one\n");
    put("src/a/two.txt", "two\n");
    put("src/a/deep/three.txt", "three\n");
    put("src/b/four.txt", "four\n");
    put("src/b/five.txt", "five\n");
    put_big("src/b/big.bin", (5u << 20) + 3);
    dir("tok");
    dir("tok/a");
    put_npy("tok/top.npy", 4, 4, 1);
    put_npy("tok/a/one.npy", 4, 4, 2);
    put_npy("tok/a/two.npy", 4, 4, 3);
    put_seit();

    fail_each(BUILD, "build", keep_src);
    fail_each(TOKENS, "tokens", keep_src);
    fail_each(SEIT, "seit", keep_src);
    fail_each(PLAN, "plan", keep_src);

    /* a planned build: the plan, then part 1 under failures, then both parts and
     * the merge under failures */
    snprintf(src, sizeof(src), "%s/src", base);
    snprintf(plan, sizeof(plan), "%s/plan", base);
    snprintf(plan_opt, sizeof(plan_opt), "plan=%s", plan);
    CHECK(pcrfs_build_plan(src, plan, plan_opts, NULL, NULL) == 0, "plan: %s", pcrfs_errmsg());
    fail_each(PART, "part", keep_plan);
    p1_opts[0] = p2_opts[0] = plan_opt;
    snprintf(p1, sizeof(p1), "%s/p1", base);
    snprintf(p2, sizeof(p2), "%s/p2", base);
    CHECK(pcrfs_build(NULL, p1, p1_opts, NULL, NULL) == 0, "part 1: %s", pcrfs_errmsg());
    CHECK(pcrfs_build(NULL, p2, p2_opts, NULL, NULL) == 0, "part 2: %s", pcrfs_errmsg());
    fail_each(MERGE, "merge", keep_parts);

    pcr_remove_tree(base);
    return check_done("buildoom");
}
