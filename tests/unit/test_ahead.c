/* Unit test of pcrfs_node_ahead() (src/lib/store/ahead.c; pcrfs(3)): which files are
 * handed ahead (those of the opened file's directory in a record read ahead, not yet
 * opened in this visit of the record; once each; again in the next visit), that their
 * bytes are the node's, and that it reads nothing from the disk: with the record out
 * of the page cache it answers -EAGAIN and leaves the cache as it was (mincore(2)),
 * and it hands the files once the record is cached. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "pcrfs/pcrfs.h"
#include "synth.h"
#include "nodewalk.h"

/* Pages of file @fd. */
static size_t pages(int fd)
{
    struct stat sb;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    return fstat(fd, &sb) == 0 ? ((size_t)sb.st_size + page - 1) / page : 0;
}

/* Pages of file @fd in the page cache. */
static size_t resident(int fd)
{
    struct stat sb;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0, pages;
    unsigned char *vec;
    void *m;

    if (fstat(fd, &sb) != 0 || sb.st_size == 0)
        return 0;
    pages = ((size_t)sb.st_size + page - 1) / page;
    m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    vec = malloc(pages);
    if (m != MAP_FAILED && vec && mincore(m, (size_t)sb.st_size, vec) == 0)
        for (size_t i = 0; i < pages; i++)
            n += vec[i] & 1;
    if (m != MAP_FAILED)
        munmap(m, (size_t)sb.st_size);
    free(vec);
    return n;
}

static void evict(int fd)
{
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void warm(int fd)
{
    char buf[65536];
    off_t at = 0;
    ssize_t n;

    while ((n = pread(fd, buf, sizeof(buf), at)) > 0)
        at += n;
}

/* pcrfs_node_ahead() until it answers something but 1: the nodes handed (each
 * checked against pcrfs_node_read()), their count in *@n. @return the last answer. */
static int drain(pcrfs_store *s, uint64_t *nodes, size_t max, size_t *n)
{
    static char buf[1 << 20], want[1 << 20];
    uint64_t node;
    size_t len;
    int rc;

    *n = 0;
    while ((rc = pcrfs_node_ahead(s, &node, buf, sizeof(buf), &len)) == 1) {
        /* from offset 1: a read at 0 is an open, which would change what is handed */
        ssize_t got = pcrfs_node_read(s, node, want, sizeof(want), 1);
        CHECK(len > 1 && got >= 0 && (size_t)got == len - 1 && memcmp(buf + 1, want, len - 1) == 0,
              "handed node %llx: its bytes (%zu) are a read's (%zd)", (unsigned long long)node, len,
              got);
        if (*n < max)
            nodes[(*n)++] = node;
        else
            break;
    }
    return rc;
}

static bool has(const uint64_t *nodes, size_t n, uint64_t node)
{
    for (size_t i = 0; i < n; i++)
        if (nodes[i] == node)
            return true;
    return false;
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-ahead-XXXXXX", path[600], rec[900], err[512], buf[4096];
    const uint64_t one = 1;
    uint64_t nodes[16], xy, cmyk, onej, top;
    pcrfs_store *s;
    size_t n, left;
    DIR *d;
    struct dirent *de;
    int fd = -1, rc;

    make_data();
    if (!mkdtemp(tmpl))
        return 2;
    snprintf(path, sizeof(path), "%s/store", tmpl);
    CHECK(build(path, false, 8, err, sizeof(err)) == 0, "build, one record: %s", err);
    snprintf(rec, sizeof(rec), "%s/records", path);
    d = opendir(rec);
    while (d && (de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".pcr")) {
            snprintf(rec, sizeof(rec), "%s/records/%s", path, de->d_name);
            fd = open(rec, O_RDONLY);
        }
    if (d)
        closedir(d);
    CHECK(fd >= 0, "the record file: %s", rec);
    CHECK(pcrfs_open(path, NULL, &s) == 0, "open: %s", pcrfs_errmsg());
    if (fd < 0 || !s)
        return check_done("ahead");
    xy = walk(s, "full/a/ x y.JPEG");
    cmyk = walk(s, "full/a/cmyk.JPEG");
    onej = walk(s, "full/a/one.JPEG");
    top = walk(s, "full/r1.JPEG");
    CHECK(xy && cmyk && onej && top, "the files' nodes");

    CHECK(pcrfs_node_ahead(s, nodes, buf, sizeof(buf), &n) == 0, "nothing opened: nothing");
    CHECK(pcrfs_node_read(s, xy, buf, sizeof(buf), 0) > 0, "open a file");
    CHECK(pcrfs_node_ahead(s, nodes, buf, sizeof(buf), &n) == 0,
          "its record not read ahead: nothing");

    /* the record read ahead (a hint), then out of the page cache */
    CHECK(pcrfs_prefetch(s, &one, 1) == 0, "hint record 1");
    CHECK(pcrfs_node_read(s, cmyk, buf, sizeof(buf), 0) > 0, "open another file of a/");
    evict(fd);
    /* (a few pages may stay: under valgrind 4 did, which DONTNEED could not drop) */
    left = resident(fd);
    CHECK(left < pages(fd) / 2, "the record evicted (%zu of %zu pages left)", left, pages(fd));
    rc = drain(s, nodes, 16, &n);
    CHECK(rc == -EAGAIN && n == 0, "not cached: -EAGAIN, nothing handed (%d, %zu)", rc, n);
    usleep(200000); /* (a read the kernel started would be done: mincore sees it) */
    CHECK(resident(fd) == left, "and nothing read: %zu pages cached now, %zu before", resident(fd),
          left);

    /* cached: the files of a/ in the record that were not opened in this visit */
    warm(fd);
    rc = drain(s, nodes, 16, &n);
    CHECK(rc == 0 && n == 2 && has(nodes, n, xy) && has(nodes, n, onej),
          "cached: ' x y' (opened before the visit) and 'one' handed, not 'cmyk' (opened), "
          "not 'empty' (no bytes), nothing of another directory (%d, %zu)",
          rc, n);
    CHECK(drain(s, nodes, 16, &n) == 0 && n == 0, "each once");
    CHECK(pcrfs_node_ahead(s, nodes, buf, 100, &n) == 0, "a buffer too small: nothing");

    /* the next visit (the record advised again) hands what its reader did not open */
    CHECK(pcrfs_prefetch(s, &one, 1) == 0, "hint record 1 again");
    CHECK(pcrfs_node_read(s, onej, buf, sizeof(buf), 0) > 0, "open 'one' in the new visit");
    CHECK(pcrfs_node_read(s, top, buf, sizeof(buf), 0) > 0, "and a file of the top directory");
    rc = drain(s, nodes, 16, &n);
    CHECK(rc == 0 && has(nodes, n, xy) && has(nodes, n, cmyk) && !has(nodes, n, onej) &&
              !has(nodes, n, top),
          "a new visit: ' x y' and 'cmyk' again, not 'one' or 'r1' (opened) (%d, %zu)", rc, n);

    pcrfs_close(s);
    close(fd);
    snprintf(buf, sizeof(buf), "rm -rf '%s'", tmpl);
    CHECK(system(buf) == 0, "clean up");
    return check_done("ahead");
}
