/* Unit test of the POSIX backend's readahead (-o readahead=record): advise() over a
 * range larger than the kernel's cap on one WILLNEED (max(read_ahead_kb,
 * max_sectors_kb) of the device) must bring the whole range into the page cache,
 * not its first few MB; closing an object while its advice is still being issued
 * must neither hang nor touch the freed object (run under ASan in scripts/test.sh).
 *
 * Page-cache residency is read with mincore() on a mapping of the file. The file
 * is created under $TMPDIR (default /tmp), or else in the build directory or
 * /var/tmp: a file system that cannot drop a file's clean pages (tmpfs keeps them:
 * there is no disk to read them back from) cannot show readahead at all; if none
 * can, the test exits 77 (SKIP), saying so. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/backend.h"
#include "check.h"

static long page;

/* A sysfs number, or 0. */
static unsigned long sysfs_ul(const char *fmt, unsigned maj, unsigned min)
{
    char path[128];
    unsigned long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), fmt, maj, min);
    f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* Pages of the @len-byte mapping @map in the page cache (read from the disk). */
static size_t resident(void *map, size_t len)
{
    size_t n = (len + (size_t)page - 1) / (size_t)page, count = 0;
    unsigned char *vec = malloc(n);

    if (!vec || mincore(map, len, vec) != 0) {
        free(vec);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
}

/* Drop @fd's pages from the page cache. @return whether they are gone. */
static int evict(int fd, void *map, size_t len)
{
    fdatasync(fd);
    posix_fadvise(fd, 0, (off_t)len, POSIX_FADV_DONTNEED);
    return resident(map, len) < (len / (size_t)page) / 20;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void rm_rf(const char *dir)
{
    char cmd[700];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* The largest of the two caps on one WILLNEED of @fd's device, in kB (0: unknown). */
static unsigned long willneed_cap_kb(int fd)
{
    struct stat sb;
    unsigned long ra, ms;

    if (fstat(fd, &sb) != 0)
        return 0;
    ra = sysfs_ul("/sys/dev/block/%u:%u/queue/read_ahead_kb", major(sb.st_dev), minor(sb.st_dev));
    ms = sysfs_ul("/sys/dev/block/%u:%u/queue/max_sectors_kb", major(sb.st_dev), minor(sb.st_dev));
    return ra > ms ? ra : ms;
}

/* Make DIR/records/000001.pcr under @base, four times the WILLNEED cap and at least
 * 48 MiB, mapped, and out of the page cache. @return 1; 0 if @base cannot drop the
 * file's pages (tmpfs: nothing is left then); -1 on an error. */
static int make_record(const char *base, char *dir, size_t dirlen, int *fdp, void **mapp,
                       size_t *lenp, unsigned long *capp)
{
    char rec[600];
    size_t len, chunk = 1u << 20;
    char *buf;
    void *map;
    int fd;

    snprintf(dir, dirlen, "%s/pcrfs-test-backend-XXXXXX", base);
    if (!mkdtemp(dir))
        return 0; /* not writable here: try the next place */
    snprintf(rec, sizeof(rec), "%s/records", dir);
    mkdir(rec, 0755);
    snprintf(rec, sizeof(rec), "%s/records/000001.pcr", dir);
    fd = open(rec, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return -1;
    *capp = willneed_cap_kb(fd);
    len = (size_t)4 * *capp * 1024;
    if (len < (48u << 20))
        len = 48u << 20;
    buf = malloc(chunk);
    if (!buf)
        return -1;
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (char)(i * 7 + 1);
    for (size_t at = 0; at < len; at += chunk)
        if (pwrite(fd, buf, chunk, (off_t)at) != (ssize_t)chunk)
            return -1;
    free(buf);
    map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return -1;
    if (!evict(fd, map, len)) {
        munmap(map, len);
        close(fd);
        rm_rf(dir);
        return 0;
    }
    *fdp = fd;
    *mapp = map;
    *lenp = len;
    return 1;
}

int main(void)
{
    /* $TMPDIR, then the build directory meson runs the test in, then /var/tmp: the
     * first whose file system can drop a file's pages (not tmpfs) */
    const char *bases[] = {getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", ".", "/var/tmp"};
    char dir[512];
    struct pcr_backend *b = NULL;
    struct pcr_object *o = NULL;
    unsigned long cap_kb = 0;
    size_t len = 0, pages, got = 0;
    void *map = NULL;
    int fd = -1, ok = 0, rc = 0;

    page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]) && rc == 0; i++)
        rc = make_record(bases[i], dir, sizeof(dir), &fd, &map, &len, &cap_kb);
    if (rc < 0)
        return 2;
    if (rc == 0) {
        printf("backend: SKIP: neither $TMPDIR, the build directory nor /var/tmp can drop a "
               "file's pages from the page cache (tmpfs?), so readahead cannot be seen\n");
        return 77;
    }
    pages = len / (size_t)page;

    CHECK(pcr_backend_posix(dir, &b) == 0, "backend");
    CHECK(b->ops->open(b, "records/000001.pcr", &o) == 0, "open");
    CHECK(b->ops->size(b, o) == len, "size");

    /* off (the default): advise() reads nothing */
    CHECK(b->ops->advise(b, o, 0, len) == 0, "advise, readahead off");
    sleep_ms(200);
    CHECK(resident(map, len) < pages / 20, "readahead off: %zu of %zu pages read",
          resident(map, len), pages);

    /* on: the whole range, not the kernel's cap; tried up to 3 times in case
     * something else drops the page cache meanwhile (benchmarks do) */
    pcr_backend_posix_readahead(b, 1);
    for (int attempt = 0; attempt < 3 && !ok; attempt++) {
        if (attempt)
            evict(fd, map, len);
        CHECK(b->ops->advise(b, o, 0, len / 2) == 0, "advise, first half");
        CHECK(b->ops->advise(b, o, len / 2, len - len / 2) == 0, "advise, second half");
        for (int i = 0; i < 1000 && (got = resident(map, len)) < pages; i++)
            sleep_ms(10);
        ok = got == pages;
    }
    CHECK(
        ok,
        "advise over %zu MiB (the kernel caps one WILLNEED at %lu kB here): %zu of %zu pages read",
        len >> 20, cap_kb, got, pages);

    /* once its advice is done, the object's job is idle: new advice queues it again
     * (the prefix of a record read again after the page cache dropped it) */
    ok = 0;
    for (int attempt = 0; attempt < 3 && !ok; attempt++) {
        sleep_ms(50);
        evict(fd, map, len);
        CHECK(b->ops->advise(b, o, 0, len) == 0, "advise again");
        for (int i = 0; i < 1000 && (got = resident(map, len)) < pages; i++)
            sleep_ms(10);
        ok = got == pages;
    }
    CHECK(ok, "advise again after the first advice ended: %zu of %zu pages read", got, pages);

    /* A read of several ranges far apart (a full/ file's chunks), cold and then with
     * one range cached: the ranges not in the page cache are asked for together
     * (posix.c, read_scattered); the bytes must be the file's either way. */
    {
        static const uint64_t offs[] = {3, 5u << 20, (9u << 20) + 4097, (17u << 20) + 1,
                                        (40u << 20) + 65535};
        enum { NR = sizeof(offs) / sizeof(offs[0]), RLEN = 70000 };
        struct pcr_range rg[NR];
        static uint8_t bufs[NR][RLEN];

        for (int pass = 0; pass < 2; pass++) {
            evict(fd, map, len);
            if (pass == 1) /* the third range cached, the others not */
                CHECK(pread(fd, bufs[2], RLEN, (off_t)offs[2]) == RLEN, "cache one range");
            memset(bufs, 0, sizeof(bufs));
            for (int i = 0; i < NR; i++)
                rg[i] = (struct pcr_range){.off = offs[i], .len = RLEN, .buf = bufs[i]};
            CHECK(b->ops->read(b, o, rg, NR) == 0, "read %d ranges, pass %d", NR, pass);
            for (int i = 0; i < NR; i++) {
                int same = 1;
                for (size_t k = 0; k < RLEN && same; k++)
                    same = bufs[i][k] == (uint8_t)(((offs[i] + k) % (1u << 20)) * 7 + 1);
                CHECK(same, "range %d (offset %llu), pass %d: bytes differ", i,
                      (unsigned long long)offs[i], pass);
            }
        }
    }

    /* close while the advice is being issued, then destroy: must return at once
     * and leave nothing behind (ASan) */
    evict(fd, map, len);
    CHECK(b->ops->advise(b, o, 0, len) == 0, "advise before close");
    b->ops->close(b, o);
    CHECK(b->ops->open(b, "records/000001.pcr", &o) == 0, "reopen");
    CHECK(b->ops->advise(b, o, 0, len) == 0, "advise before destroy");
    b->ops->close(b, o);
    pcr_backend_destroy(b);

    munmap(map, len);
    close(fd);
    rm_rf(dir);
    return check_done("backend");
}
