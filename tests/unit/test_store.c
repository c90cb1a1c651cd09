/* Unit test of the writer and the reader over synthetic data: numbering, record
 * layout, sizes and bytes at every level and offset, lookup/readdir/path,
 * checksums, replacing stores, a damaged record failing alone (the views laid over
 * a store: test_views.c). */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "pcrfs/store.h"
#include "pcrfs/writer.h"
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "view/view.h"
#include "check.h"
#include "synth.h"

static void test_read(const char *path)
{
    struct pcr_store *s;
    char err[512], pbuf[512];
    uint8_t *buf = malloc(1 << 20);
    int ret = pcr_store_open(path, &s, err, sizeof(err));

    CHECK(ret == 0, "open: %s", err);
    if (ret)
        return;
    CHECK(pcr_store_levels(s) == LEVELS, "levels %u", pcr_store_levels(s));
    CHECK(pcr_store_nfiles(s) == NFILES, "nfiles");
    CHECK(pcr_store_ndirs(s) == 4, "ndirs");
    for (size_t i = 0; i < NFILES; i++) {
        struct tfile *t = &files[i];
        struct pcr_node node;
        const struct pcr_file *f;
        struct pcr_file_info info;

        ret = tstore_resolve(s, t->path, &node);
        CHECK(ret == 0 && !node.is_dir && node.id == i + 1, "lookup %s: %d", t->path, ret);
        if (ret)
            continue;
        CHECK(pcr_store_file(s, node.id, &f) == 0, "file %zu", i);
        pcr_file_info(f, &info);
        CHECK(info.kind == (enum pcr_kind)t->kind, "kind of %s", t->path);
        CHECK(info.checksum == pcr_xxh64(t->data, t->len), "checksum of %s", t->path);
        CHECK(pcr_store_path(s, node.id, pbuf, sizeof(pbuf)) == (ssize_t)strlen(t->path) &&
                  !strcmp(pbuf, t->path),
              "path %s vs %s", pbuf, t->path);
        for (unsigned level = 1; level <= LEVELS + 2; level++) {
            size_t elen;
            uint8_t *e = tstore_expected(t, level, &elen);
            struct pcr_handle *h;
            CHECK(pcr_file_size(f, level) == elen, "%s level %u size %llu want %zu", t->path, level,
                  (unsigned long long)pcr_file_size(f, level), elen);
            ret = pcr_handle_open(s, f, level, &h);
            CHECK(ret == 0, "handle %s", t->path);
            if (ret) {
                free(e);
                continue;
            }
            CHECK(pcr_handle_size(h) == elen, "handle size");
            ssize_t n = pcr_handle_read(h, buf, 1 << 20, 0);
            CHECK(n == (ssize_t)elen && !memcmp(buf, e, elen), "%s level %u bytes", t->path, level);
            for (int k = 0; k < 200; k++) {
                size_t off = elen ? rnd() % (elen + 3) : 0, len = rnd() % 5000;
                size_t want = off >= elen ? 0 : (len < elen - off ? len : elen - off);
                n = pcr_handle_read(h, buf, len, off);
                CHECK(n == (ssize_t)want && (want == 0 || !memcmp(buf, e + off, want)),
                      "%s level %u off %zu len %zu: %zd", t->path, level, off, len, n);
            }
            pcr_handle_close(h);
            free(e);
        }
    }
    /* readdir: subdirectories first, then files, by name */
    struct pcr_dirent de;
    CHECK(pcr_store_readdir(s, 1, 0, &de) == 0 && de.node.is_dir && !strcmp(de.name, "a"), "rd0");
    CHECK(pcr_store_readdir(s, 1, 1, &de) == 0 && de.node.is_dir && !strcmp(de.name, "b"), "rd1");
    CHECK(pcr_store_readdir(s, 1, 2, &de) == 0 && !de.node.is_dir && !strcmp(de.name, "r1.JPEG"),
          "rd2");
    CHECK(pcr_store_readdir(s, 1, 4, &de) == -ENOENT, "rd end");
    struct pcr_node nn;
    CHECK(pcr_store_lookup(s, 1, "nope", &nn) == -ENOENT, "missing");
    CHECK(pcr_store_lookup(s, 99, "a", &nn) == -ENOENT, "bad dir");
    const struct pcr_file *f;
    CHECK(pcr_store_file(s, 0, &f) == -ENOENT && pcr_store_file(s, NFILES + 1, &f) == -ENOENT,
          "bad file ids");
    struct pcr_stats st;
    pcr_store_stats(s, &st);
    CHECK(st.level[1].bytes > 0 && st.level[LEVELS].bytes > st.level[1].bytes, "stats");
    pcr_store_close(s);
    free(buf);
}

/* Truncate the record holding file @idx: its files fail with EIO, others still read. */
static void test_damaged(const char *path)
{
    struct pcr_store *s;
    char err[512], rec[700];
    static uint8_t buf[200000];
    const struct pcr_file *f;
    struct pcr_file_info info;

    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    CHECK(pcr_store_file(s, 1, &f) == 0, "file 1");
    pcr_file_info(f, &info);
    snprintf(rec, sizeof(rec), "%s/records/%06llu.pcr", path, (unsigned long long)info.record);
    CHECK(truncate(rec, 100) == 0, "truncate %s", rec);
    CHECK(pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0) == -EIO, "damaged record gives EIO");
    for (uint64_t id = 1; id <= NFILES; id++) {
        struct pcr_file_info i2;
        CHECK(pcr_store_file(s, id, &f) == 0, "file %llu", (unsigned long long)id);
        pcr_file_info(f, &i2);
        if (i2.record == info.record)
            continue;
        CHECK(pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0) == (ssize_t)files[id - 1].len,
              "other record still served (file %llu)", (unsigned long long)id);
    }
    pcr_store_close(s);
}

static int collect_run(void *ctx, const struct pcr_record_run *run)
{
    struct pcr_record_run *runs = ctx;
    size_t n = 0;

    while (runs[n].count)
        n++;
    if (n + 1 >= NFILES + 1)
        return -1;
    runs[n] = *run;
    return 0;
}

/* pcr_store_record_runs(): the runs partition the file ids in order, and each file's
 * run names the record pcr_file_info() gives. */
static void test_record_runs(const char *path, unsigned per_record)
{
    struct pcr_record_run runs[NFILES + 1] = {{0}};
    struct pcr_store *s;
    char err[512];
    uint64_t next = 1;

    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    CHECK(pcr_store_record_runs(s, collect_run, runs) == 0, "record runs");
    for (size_t i = 0; runs[i].count; i++) {
        CHECK(runs[i].first == next, "run %zu starts at %llu", i, (unsigned long long)next);
        for (uint64_t id = runs[i].first; id < runs[i].first + runs[i].count; id++) {
            const struct pcr_file *f;
            struct pcr_file_info fi;
            CHECK(pcr_store_file(s, id, &f) == 0, "file %llu", (unsigned long long)id);
            pcr_file_info(f, &fi);
            CHECK(fi.record == runs[i].record && fi.record == (id - 1) / per_record + 1,
                  "file %llu in record %llu", (unsigned long long)id,
                  (unsigned long long)runs[i].record);
        }
        next = runs[i].first + runs[i].count;
    }
    CHECK(next == NFILES + 1, "runs cover every file");
    pcr_store_close(s);
}

struct second_read {
    struct pcr_store *s;
    const struct pcr_file *f;
    uint8_t *buf;
    ssize_t n;
};

static void *second_read(void *arg)
{
    struct second_read *sr = arg;

    sr->n = pcr_store_pread(sr->s, sr->f, LEVELS, sr->buf, 100000, 100000);
    return NULL;
}

/* Sequential reads of r2.bin (three checksum blocks) in steps that end inside a
 * block, as the kernel's 128 KiB requests do: the block carried from one read to
 * the next (read.c) must give the same bytes as a fresh read. */
static void test_sequential_steps(const char *path)
{
    static const size_t steps[] = {4096, 65535, 65537, 100000, 131072, 150000};
    static uint8_t buf[200000];
    struct pcr_store *s;
    const struct pcr_file *f;
    char err[512];

    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    CHECK(pcr_store_file(s, 2, &f) == 0, "r2.bin");
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        size_t off = 0;
        memset(buf, 0, sizeof(buf));
        while (off < files[1].len) {
            ssize_t n = pcr_store_pread(s, f, LEVELS, buf + off, steps[k], off);
            CHECK(n > 0, "step %zu at %zu: %zd", steps[k], off, n);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
        CHECK(off == files[1].len && !memcmp(buf, files[1].data, files[1].len),
              "r2.bin read in steps of %zu", steps[k]);
    }
    /* The carried block is really used: reads of [0, 100000) and [100000, 150000)
     * fetch blocks 0-1 and then only block 2 (block 1 comes from the carry), so the
     * record bytes read are exactly the file's 150,000; re-reading block 1 would
     * make them 215,536. A fresh store: no block carried from the reads above. */
    struct pcr_stats a, b;
    pcr_store_close(s);
    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0 && pcr_store_file(s, 2, &f) == 0,
          "reopen");
    pcr_store_stats(s, &a);
    CHECK(pcr_store_pread(s, f, LEVELS, buf, 100000, 0) == 100000 &&
              pcr_store_pread(s, f, LEVELS, buf + 100000, 100000, 100000) == 50000,
          "two reads of r2.bin");
    pcr_store_stats(s, &b);
    CHECK(b.level[LEVELS].bytes - a.level[LEVELS].bytes == 150000,
          "record bytes for two sequential reads: %llu, want 150000",
          (unsigned long long)(b.level[LEVELS].bytes - a.level[LEVELS].bytes));
    /* The same when the second read runs on another thread, as the daemon's next
     * READ of a file often does: the carry belongs to the store, not the thread. */
    pcr_store_close(s);
    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0 && pcr_store_file(s, 2, &f) == 0,
          "reopen");
    struct second_read sr = {.s = s, .f = f, .buf = buf + 100000};
    pthread_t th;
    pcr_store_stats(s, &a);
    CHECK(pcr_store_pread(s, f, LEVELS, buf, 100000, 0) == 100000, "first read");
    CHECK(pthread_create(&th, NULL, second_read, &sr) == 0 && pthread_join(th, NULL) == 0,
          "thread");
    pcr_store_stats(s, &b);
    CHECK(sr.n == 50000 && !memcmp(buf, files[1].data, files[1].len), "second read, other thread");
    CHECK(b.level[LEVELS].bytes - a.level[LEVELS].bytes == 150000,
          "record bytes for two sequential reads on two threads: %llu, want 150000",
          (unsigned long long)(b.level[LEVELS].bytes - a.level[LEVELS].bytes));
    pcr_store_close(s);
}

/* Where @needle (16 bytes) first lies in @hay, or -1. */
static long find_first(const uint8_t *hay, size_t n, const uint8_t *needle)
{
    for (size_t i = 0; i + 16 <= n; i++)
        if (!memcmp(hay + i, needle, 16))
            return (long)i;
    return -1;
}

static void flip(const char *rec, long at)
{
    int fd = open(rec, O_RDWR);
    uint8_t b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, at) == 1, "read %s", rec);
    b ^= 0x40;
    CHECK(pwrite(fd, &b, 1, at) == 1, "flip a byte of %s", rec);
    close(fd);
}

/* One byte flipped inside a stored chunk (pcrfs(5), chunk checksums): every read
 * that touches its 64 KiB block fails with EIO, reads that do not are served, other
 * files are untouched (the log line is checked by test_reliability.py). Needs the
 * one-record store. */
static void test_flipped(const char *path)
{
    struct pcr_store *s;
    const struct pcr_file *f1, *f2;
    char err[512], rec[700];
    static uint8_t buf[200000], recbuf[400000];
    size_t n;
    unsigned c;
    FILE *fp;

    snprintf(rec, sizeof(rec), "%s/records/000001.pcr", path);
    fp = fopen(rec, "rb");
    CHECK(fp != NULL, "open %s", rec);
    if (!fp)
        return;
    n = fread(recbuf, 1, sizeof(recbuf), fp);
    fclose(fp);
    /* file 1 (r1.JPEG): a chunk of 16+ bytes after chunk 0, each byte == its index */
    for (c = 1; c < files[0].nchunks; c++)
        if (files[0].split.end[c] - files[0].split.end[c - 1] >= 16)
            break;
    CHECK(c < files[0].nchunks, "a chunk of 16 bytes");
    long at1 = find_first(recbuf, n, files[0].data + files[0].split.end[c - 1]);
    long at2 = find_first(recbuf, n, files[1].data + 70000); /* r2.bin, block 1 */
    CHECK(at1 >= 0 && at2 >= 0, "found the chunks in the record (%ld, %ld)", at1, at2);
    if (at1 < 0 || at2 < 0)
        return;
    flip(rec, at1 + 3);
    flip(rec, at2 + 5);
    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    CHECK(pcr_store_file(s, 1, &f1) == 0 && pcr_store_file(s, 2, &f2) == 0, "files 1, 2");
    for (unsigned level = 1; level <= LEVELS; level++) {
        size_t elen;
        uint8_t *e = tstore_expected(&files[0], level, &elen);
        ssize_t got = pcr_store_read(s, f1, level, buf, sizeof(buf), 0);
        if (level <= c)
            CHECK(got == (ssize_t)elen && !memcmp(buf, e, elen), "level %u before the flip", level);
        else
            CHECK(got == -EIO, "level %u reads the flipped chunk: %zd", level, got);
        free(e);
    }
    /* r2.bin: blocks 0 and 2 still served, block 1 fails, alone or in a larger read */
    CHECK(pcr_store_read(s, f2, LEVELS, buf, 65536, 0) == 65536 &&
              !memcmp(buf, files[1].data, 65536),
          "block 0 of r2.bin served");
    CHECK(pcr_store_read(s, f2, LEVELS, buf, 100, 140000) == 100 &&
              !memcmp(buf, files[1].data + 140000, 100),
          "block 2 of r2.bin served");
    CHECK(pcr_store_read(s, f2, LEVELS, buf, 10, 65536 + 100) == -EIO, "block 1: EIO");
    CHECK(pcr_store_read(s, f2, LEVELS, buf, sizeof(buf), 0) == -EIO, "whole file: EIO");
    for (uint64_t id = 3; id <= NFILES; id++) {
        const struct pcr_file *f;
        CHECK(pcr_store_file(s, id, &f) == 0, "file %llu", (unsigned long long)id);
        CHECK(pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0) == (ssize_t)files[id - 1].len,
              "file %llu of the same record served", (unsigned long long)id);
    }
    pcr_store_close(s);
    flip(rec, at1 + 3); /* undo: test_damaged wants the record intact but for its cut */
    flip(rec, at2 + 5);
}

/* The token bucket may never let bytes through faster than its rate (beyond the
 * 1/8 s burst). Only a lower bound on time is asserted: a slow machine cannot
 * make this fail. */
static void test_bwlimit(const char *path)
{
    struct pcr_store *s;
    const struct pcr_file *f;
    struct timespec a, b;
    char err[512];
    static uint8_t buf[200000];
    uint64_t total = 0, rate = 400000;

    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    pcr_store_set_bwlimit(s, rate);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int round = 0; round < 4; round++)
        for (uint64_t id = 1; id <= NFILES; id++) {
            CHECK(pcr_store_file(s, id, &f) == 0, "file");
            ssize_t n = pcr_store_read(s, f, LEVELS, buf, sizeof(buf), 0);
            total += n > 0 ? (uint64_t)n : 0;
        }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    double floor = ((double)total - (double)rate / 8) / (double)rate - 0.002; /* clock */
    CHECK(secs >= floor, "%llu bytes at %llu B/s took %.3f s, less than %.3f s",
          (unsigned long long)total, (unsigned long long)rate, secs, floor);
    pcr_store_close(s);
}

static void test_xxh64(void)
{
    uint8_t big[1000];
    struct pcr_xxh64 st;

    CHECK(pcr_xxh64("", 0) == 0xEF46DB3751D8E999ULL, "xxh64 empty");
    CHECK(pcr_xxh64("abc", 3) == 0x44BC2CF5AD770999ULL, "xxh64 abc");
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 7);
    pcr_xxh64_init(&st);
    for (size_t i = 0; i < sizeof(big); i += 37)
        pcr_xxh64_update(&st, big + i, i + 37 <= sizeof(big) ? 37 : sizeof(big) - i);
    CHECK(pcr_xxh64_final(&st) == pcr_xxh64(big, sizeof(big)), "xxh64 streaming");
}

static void test_varint(void)
{
    uint8_t b[10];
    uint64_t v, vals[] = {0, 1, 127, 128, 300, 1ULL << 32, UINT64_MAX};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        size_t n = pcr_varint_put(b, vals[i]);
        CHECK(pcr_varint_get(b, n, &v) == n && v == vals[i], "varint %llu",
              (unsigned long long)vals[i]);
        CHECK(pcr_varint_get(b, n - 1, &v) == 0, "truncated varint %llu",
              (unsigned long long)vals[i]);
    }
    memset(b, 0xff, sizeof(b));
    CHECK(pcr_varint_get(b, sizeof(b), &v) == 0, "overlong varint");
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-store-XXXXXX", path[600], err[512], cmd[700];
    struct stat sb;

    test_xxh64();
    test_varint();
    make_data();
    if (!mkdtemp(tmpl))
        return 2;
    snprintf(path, sizeof(path), "%s/store", tmpl);

    CHECK(build(path, false, 3, err, sizeof(err)) == 0, "build: %s", err);
    test_read(path);
    test_record_runs(path, 3);
    test_sequential_steps(path);
    CHECK(build(path, false, 3, err, sizeof(err)) == -EEXIST, "exists without force");
    CHECK(build(path, true, 8, err, sizeof(err)) == 0, "force replaces a store: %s", err);
    test_read(path); /* one record this time */
    test_record_runs(path, 8);
    test_bwlimit(path);

    /* --force never replaces something that is not a store */
    char other[600];
    snprintf(other, sizeof(other), "%s/userdir", tmpl);
    mkdir(other, 0755);
    snprintf(cmd, sizeof(cmd), "%s/precious", other);
    close(open(cmd, O_CREAT | O_WRONLY, 0644));
    CHECK(build(other, true, 3, err, sizeof(err)) < 0, "force on a non-store refused");
    CHECK(stat(cmd, &sb) == 0, "non-store left intact");

    test_flipped(path);

    /* records/ as a symbolic link (even to an intact copy) is refused at open */
    {
        char real[700], link[700];
        struct pcr_store *s;
        snprintf(real, sizeof(real), "%s/records.real", path);
        snprintf(link, sizeof(link), "%s/records", path);
        CHECK(rename(link, real) == 0 && symlink("records.real", link) == 0, "symlink setup");
        CHECK(pcr_store_open(path, &s, err, sizeof(err)) == -ENOTDIR &&
                  strstr(err, "symbolic link"),
              "records/ symlink refused: %s", err);
        CHECK(unlink(link) == 0 && rename(real, link) == 0, "symlink undo");
    }
    test_damaged(path);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpl);
    return check_done("store");
}
