/* Unit test of the FUSE driver's inode logic without a mount (src/fuse/inode.c:
 * inode numbers from the library's nodes, the /.pcrfs/stats snapshots, their lookup
 * counts and FORGET, eviction, ESTALE), and of the library's node calls it is built
 * on (pcrfs.h, "Serving the tree"): numbers stable across lookups, listings and
 * opens of a store, the root's number, the control files and their write rule. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/fuse/inode.h"
#include "check.h"
#include "pcrfs/pcrfs.h"
#include "pcrfs/writer.h"
#include "nodewalk.h"

#define LEVELS 3

static void test_snaps(void)
{
    const uint64_t stats = (UINT64_C(1) << 55) | 2; /* a file node with gen bits clear */
    struct snaps r;
    uint64_t ino, ino2, first = 0;
    size_t n, len;
    char buf[16];

    pcrfs_snaps_init(&r, stats);
    CHECK(!pcrfs_ino_is_snap(&r, stats), "the stats node itself is no snapshot");
    CHECK(pcrfs_ino_node(&r, 12345) == 12345, "other inodes are their node");
    CHECK(pcrfs_snaps_add(&r, "hello", 5, &ino) == 0, "add");
    CHECK(ino != stats && pcrfs_ino_is_snap(&r, ino) && pcrfs_ino_node(&r, ino) == stats,
          "a snapshot's inode maps back to the stats node: %llx", (unsigned long long)ino);
    CHECK(pcrfs_snaps_add(&r, "world!", 6, &ino2) == 0 && ino2 != ino, "a new inode per lookup");
    CHECK(pcrfs_snaps_read(&r, ino, buf, sizeof(buf), 1, &n, &len) == 0 && n == 4 && len == 5 &&
              memcmp(buf, "ello", 4) == 0,
          "read at an offset");
    CHECK(pcrfs_snaps_read(&r, ino, buf, sizeof(buf), 9, &n, &len) == 0 && n == 0,
          "read past the end");
    CHECK(pcrfs_snaps_read(&r, ino2, buf, 3, 0, &n, NULL) == 0 && n == 3 &&
              memcmp(buf, "wor", 3) == 0,
          "each snapshot keeps its own bytes");

    /* lookup counts: the snapshot lives until all its lookups are forgotten */
    pcrfs_snaps_forget(&r, ino, 0);
    CHECK(pcrfs_snaps_read(&r, ino, NULL, 0, 0, NULL, &len) == 0, "forget 0 keeps it");
    pcrfs_snaps_forget(&r, ino, 1);
    CHECK(pcrfs_snaps_read(&r, ino, NULL, 0, 0, NULL, &len) == -ESTALE, "forgotten: ESTALE");
    pcrfs_snaps_forget(&r, ino, 1);   /* again: nothing left, no crash */
    pcrfs_snaps_forget(&r, stats, 1); /* not a snapshot: nothing to do */
    pcrfs_snaps_forget(&r, 777, 5);
    CHECK(pcrfs_snaps_read(&r, ino2, NULL, 0, 0, NULL, &len) == 0 && len == 6,
          "forgetting one leaves the other");

    /* a bound on what is alive: PCRFS_MAX_SNAPS newer lookups evict the oldest */
    for (unsigned i = 0; i < PCRFS_MAX_SNAPS; i++) {
        CHECK(pcrfs_snaps_add(&r, "x", 1, &ino) == 0, "add %u", i);
        if (i == 0)
            first = ino;
    }
    CHECK(pcrfs_snaps_read(&r, ino2, NULL, 0, 0, NULL, &len) == -ESTALE,
          "evicted after %d newer snapshots", PCRFS_MAX_SNAPS);
    CHECK(pcrfs_snaps_read(&r, first, NULL, 0, 0, NULL, &len) == 0, "the newer ones live");
    pcrfs_snaps_free(&r);
    CHECK(pcrfs_snaps_read(&r, first, NULL, 0, 0, NULL, &len) == -ESTALE, "freed");

    /* a store without a stats node hands out none */
    pcrfs_snaps_init(&r, 0);
    CHECK(pcrfs_snaps_add(&r, "x", 1, &ino) == -EOVERFLOW && ino == 0, "no stats node");
    CHECK(!pcrfs_ino_is_snap(&r, UINT64_C(1) << 8), "nothing is a snapshot then");
}

/* A store of LEVELS levels with verbatim files: dirs 1 "" {a}, 2 "a"; files
 * r.bin in the root, a/x.bin and a/y.bin. */
static int build(const char *path, char *err, size_t errlen)
{
    static const uint8_t data[] = "0123456789";
    struct pcr_writer_opts o = {.levels = LEVELS, .script = "test"};
    struct pcr_dir_row dirs[] = {
        {1, 1, "", 2, 1, 1, 1},
        {2, 1, "a", 0, 0, 2, 2},
    };
    struct pcr_item items[3];
    const char *names[] = {"r.bin", "x.bin", "y.bin"};
    struct pcr_writer *w;
    int ret = pcr_writer_create(path, &o, &w, err, errlen);

    if (ret)
        return ret;
    for (size_t i = 0; i < 2 && ret == 0; i++)
        ret = pcr_writer_add_dir(w, &dirs[i]);
    for (size_t k = 0; k < 3; k++)
        items[k] = (struct pcr_item){.id = k + 1,
                                     .dir = k == 0 ? 1 : 2,
                                     .name = names[k],
                                     .kind = PCR_KIND_VERBATIM,
                                     .data = data,
                                     .len = 4 + k,
                                     .src_size = 4 + k,
                                     .note = "not a JPEG"};
    if (ret == 0)
        ret = pcr_writer_add_record(w, items, 3);
    if (ret == 0)
        return pcr_writer_finish(w, err, errlen);
    snprintf(err, errlen, "%s", pcr_writer_error(w));
    pcr_writer_abort(w);
    return ret;
}

static void test_nodes(const char *path)
{
    const char *opts[] = {"level=2", NULL};
    struct pcrfs_node_attr a;
    pcrfs_store *s, *s2;
    pcrfs_file *f;
    uint64_t n1, n2, pos = 0, child, level, stats;
    char name[256], buf[64];
    int is_dir, rc, seen = 0;

    CHECK(pcrfs_open(path, opts, &s) == 0, "open: %s", pcrfs_errmsg());
    CHECK(pcrfs_open(path, opts, &s2) == 0, "second open: %s", pcrfs_errmsg());
    if (!s || !s2)
        return;
    CHECK(pcrfs_node_stat(s, PCRFS_NODE_ROOT, &a) == 0 && (a.flags & PCRFS_NODE_DIR) &&
              a.parent == PCRFS_NODE_ROOT,
          "the root is a directory, its own parent");

    /* stable: the same number for a path across lookups and across openings */
    n1 = walk(s, "scan2/a/x.bin");
    n2 = walk(s, "scan2/a/x.bin");
    CHECK(n1 != 0 && n1 == n2, "stable across lookups: %llx", (unsigned long long)n1);
    CHECK(walk(s2, "scan2/a/x.bin") == n1, "the same number in another opening");
    CHECK(walk(s, "scan1/a/x.bin") != n1 && walk(s, "full/a/x.bin") != walk(s, "scan3/a/x.bin"),
          "each view its own numbers (full/ is no hard link of scanL/)");
    CHECK(walk(s, "scan2/a/nothere") == 0, "a miss");
    CHECK(pcrfs_node_lookup(s, n1, "x", &n2) == -ENOTDIR, "lookup in a file: ENOTDIR");
    CHECK(pcrfs_node_stat(s, n1, &a) == 0 && a.size == 5 && !(a.flags & PCRFS_NODE_DIR),
          "a file's size: %llu", (unsigned long long)a.size);

    /* a listing names the nodes a lookup finds */
    n2 = walk(s, "scan2/a");
    while ((rc = pcrfs_node_readdir(s, n2, &pos, name, sizeof(name), &child, &is_dir)) == 1) {
        char p[300];
        snprintf(p, sizeof(p), "scan2/a/%s", name);
        CHECK(walk(s, p) == child && !is_dir, "listed %s as its lookup's node", name);
        seen++;
    }
    CHECK(rc == 0 && seen == 2, "two entries, then the end: %d, %d", rc, seen);
    CHECK(pcrfs_node_stat(s, n2, &a) == 0 && a.parent == walk(s, "scan2"), "a dir's parent");

    /* dynamic/: a file's name leads to the node of the current level */
    n1 = walk(s, "dynamic/r.bin");
    CHECK(pcrfs_node_stat(s, n1, &a) == 0 && (a.flags & PCRFS_NODE_NAME_MOVES),
          "a dynamic/ file's name moves");
    level = walk(s, ".pcrfs/level");
    CHECK(pcrfs_node_stat(s, level, &a) == 0 && (a.flags & PCRFS_NODE_WRITABLE) && a.size == 2,
          "/.pcrfs/level is writable and holds \"2\\n\"");

    /* the write rule: whole values only, a stream per handle, flush applies */
    CHECK(pcrfs_node_open(s, n1, 1, &f) == -EROFS, "a view's file is not writable");
    CHECK(pcrfs_node_open(s, level, 0, &f) == 0 && pcrfs_file_size(f) == 2 &&
              pcrfs_file_read(f, buf, sizeof(buf), 0) == 2 && buf[0] == '2',
          "a control file's handle: its size and bytes");
    pcrfs_file_close(f);
    CHECK(pcrfs_node_open(s, level, 1, &f) == 0, "open the level for writing");
    CHECK(pcrfs_file_write(f, "3\n\n", 3) == -EINVAL, "a second line is refused");
    CHECK(pcrfs_node_read(s, level, buf, sizeof(buf), 0) == 2 && buf[0] == '2',
          "and nothing applied");
    CHECK(pcrfs_file_write(f, "1", 1) == 1, "a prefix waits");
    CHECK(pcrfs_node_read(s, level, buf, sizeof(buf), 0) == 2 && buf[0] == '2', "not yet");
    CHECK(pcrfs_file_flush(f) == 0, "flush applies it");
    CHECK(pcrfs_node_read(s, level, buf, sizeof(buf), 0) == 2 && buf[0] == '1', "level 1 now");
    CHECK(pcrfs_file_write(f, "full\n", 5) == 5, "full");
    pcrfs_file_close(f);
    CHECK(pcrfs_node_read(s, level, buf, sizeof(buf), 0) == 2 && buf[0] == '3', "full is 3");
    CHECK(walk(s, "dynamic/r.bin") != n1, "the name leads to another node after a switch");

    /* the stats node leaves the generation bits free for a daemon's snapshots */
    stats = walk(s, ".pcrfs/stats");
    CHECK(pcrfs_node_stat(s, stats, &a) == 0 && (a.flags & PCRFS_NODE_SNAPSHOT), "stats");
    CHECK((stats & (PCRFS_NODE_GEN_MAX << PCRFS_NODE_GEN_SHIFT)) == 0, "its gen bits are 0");
    CHECK(pcrfs_node_getxattr(s, walk(s, "dynamic"), "user.pcrfs.level", buf, sizeof(buf)) == 1 &&
              buf[0] == '3',
          "user.pcrfs.level");
    CHECK(pcrfs_node_setxattr(s, n1, "user.pcrfs.level", NULL, 0) == -EROFS,
          "not settable on a file");

    /* /.pcrfs/prefetch/: a directory of the tree whose lookups are hints, taken (a
     * miss a daemon must not cache) or refused (EINVAL), and which lists nothing */
    n2 = walk(s, ".pcrfs/prefetch");
    CHECK(n2 != 0 && pcrfs_node_stat(s, n2, &a) == 0 && (a.flags & PCRFS_NODE_DIR) &&
              (a.flags & PCRFS_NODE_HINTS) && a.parent == walk(s, ".pcrfs"),
          "prefetch/ is a hints directory under .pcrfs");
    CHECK(pcrfs_node_stat(s, walk(s, ".pcrfs"), &a) == 0 && !(a.flags & PCRFS_NODE_HINTS) &&
              a.nsubdirs == 1,
          ".pcrfs holds one directory and takes no hints");
    CHECK(pcrfs_node_lookup(s, n2, "1", &child) == 0 && child == 0, "a hint: taken, a miss");
    CHECK(pcrfs_node_lookup(s, n2, "1,1", &child) == 0, "a list of records");
    CHECK(pcrfs_node_lookup(s, n2, "2", &child) == -EINVAL, "no record 2: refused");
    CHECK(pcrfs_node_lookup(s, n2, "x", &child) == -EINVAL, "not a number: refused");
    pos = 0;
    CHECK(pcrfs_node_readdir(s, n2, &pos, name, sizeof(name), &child, &is_dir) == 0,
          "prefetch/ lists nothing");
    seen = 0;
    for (pos = 0;
         pcrfs_node_readdir(s, walk(s, ".pcrfs"), &pos, name, sizeof(name), &child, &is_dir) == 1;)
        if (strcmp(name, "prefetch") == 0)
            seen += child == n2 && is_dir;
    CHECK(seen == 1, "listed in .pcrfs once, as a directory");
    CHECK(pcrfs_prefetch(s, (const uint64_t[]){1}, 1) == 0, "pcrfs_prefetch() of record 1");
    CHECK(pcrfs_prefetch(s, (const uint64_t[]){1, 9}, 2) == -EINVAL, "out of range: EINVAL");
    pcrfs_close(s2);
    pcrfs_close(s);
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-inode-XXXXXX", path[600], err[512], cmd[700];

    test_snaps();
    if (!mkdtemp(tmpl))
        return 2;
    snprintf(path, sizeof(path), "%s/store", tmpl);
    CHECK(build(path, err, sizeof(err)) == 0, "build: %s", err);
    test_nodes(path);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpl);
    return check_done("inode");
}
