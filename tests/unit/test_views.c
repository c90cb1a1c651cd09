/* Unit test of the view logic (src/lib/view/) without a mount: the table of
 * descriptors, the views laid over a synthetic store (names, numbers, levels, options
 * and their errors), and each view's rows through the public API (pcrfs.h): the
 * root's listing, every directory's names in order, every file's size and bytes at
 * the level its view serves, dynamic/'s level switch, mix/'s draws within its range,
 * the per-view counters of the stats, and the errors of bad paths and options. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pcrfs/pcrfs.h"
#include "pcrfs/store.h"
#include "view/view.h"
#include "check.h"
#include "synth.h"

/* view.h lists no descriptor by name (views.c's X-macro does, so that a new view edits
 * no header): the ones this test names, declared here */
extern const struct pcr_view_desc pcr_view_dynamic, pcr_view_mix, pcr_view_refurb;

/* The table: one descriptor per kind of view, in the order of the root listing, each
 * with what the driver and the API need of it. */
static void test_table(void)
{
    static const char *const want[] = {"scan%u", "full", "dynamic", "q", "mix", "tokens", "refurb"};
    size_t n = sizeof(want) / sizeof(want[0]);

    CHECK(pcr_view_ndescs == n, "%zu descriptors", pcr_view_ndescs);
    for (size_t i = 0; i < pcr_view_ndescs && i < n; i++) {
        const struct pcr_view_desc *d = pcr_view_descs[i];
        CHECK(d->name && !strcmp(d->name, want[i]), "descriptor %zu: %s", i, d->name);
        CHECK(d->count != NULL, "%s: count", d->name);
        CHECK(d->number || d->number_of, "%s: a view number", d->name);
        CHECK(d->level_rule != PCR_LEVEL_CURRENT || d->file_level, "%s: file_level", d->name);
        /* a file of a view that hands out a level at lookup is numbered per level:
         * the kernel must not keep its name (the next lookup may give another) */
        CHECK(d->level_rule != PCR_LEVEL_CURRENT || !d->cache.names, "%s: names cached", d->name);
        for (const char *const *o = d->opts; o && *o; o++)
            CHECK(pcr_views_opt_desc(*o) == d, "%s: option %s", d->name, *o);
    }
    CHECK(pcr_views_opt_desc("mix") == &pcr_view_mix, "mix= is mix/'s");
    CHECK(pcr_views_opt_desc("level") == &pcr_view_dynamic, "level= is dynamic/'s");
    CHECK(pcr_views_opt_desc("bwlimit") == NULL, "bwlimit= is no view's");
    /* refurb/'s bytes change per open: no page of it may outlive an open */
    CHECK(pcr_view_refurb.needs_open && pcr_view_refurb.cache.direct &&
              !pcr_view_refurb.cache.pages,
          "refurb/ uncached");
}

/* The views laid over the store: numbers, levels, options (moved from test_store.c). */
static void test_layout(const char *path)
{
    static const char *const want[] = {"scan1", "scan2",   "scan3", "scan4", "scan5",
                                       "scan6", "scan7",   "scan8", "scan9", "scan10",
                                       "full",  "dynamic", "q90",   "mix"};
    struct pcr_views_args a = {0};
    struct pcr_views *vs = NULL;
    const struct pcr_view *v, *fv;
    const struct pcr_file *f;
    struct pcr_node node;
    char err[512], msg[512], *json;
    size_t len;
    struct pcr_store *s;
    unsigned old;

    CHECK(pcr_store_open(path, &s, err, sizeof(err)) == 0, "open: %s", err);
    /* defaults: scanK/ and full/ only (no quality table, no tokens) */
    CHECK(pcr_views_open(s, NULL, NULL, &vs, err, sizeof(err)) == 0, "views: %s", err);
    CHECK(vs && vs->nroot == LEVELS + 1, "%u views", vs ? vs->nroot : 0);
    CHECK(!pcr_views_dynamic(vs) && !pcr_views_need_open(vs), "no dynamic/, no mix/");
    CHECK(pcr_views_root(vs, LEVELS + 1) == NULL, "nothing past the last view");
    CHECK(pcr_views_root_lookup(vs, "mix") == NULL, "no mix/ without mix=");
    CHECK(pcr_views_set_level(vs, 2, NULL) == -ENOENT, "no dynamic/ to set");
    pcr_views_close(vs);

    CHECK(pcr_views_opt(&a, "level", "3", msg, sizeof(msg)) == 0, "%s", msg);
    CHECK(pcr_views_opt(&a, "quality", "0.9", msg, sizeof(msg)) == 0, "%s", msg);
    CHECK(pcr_views_opt(&a, "mix", "2-4", msg, sizeof(msg)) == 0, "%s", msg);
    CHECK(pcr_views_opt(&a, "mix", "4", msg, sizeof(msg)) == -1, "mix=4 refused as given");
    CHECK(pcr_views_opt(&a, "nope", "1", msg, sizeof(msg)) == -ENOENT, "not a view's option");
    CHECK(pcr_views_args_want_write(&a), "level= wants writes");
    CHECK(pcr_views_open(s, NULL, &a, &vs, err, sizeof(err)) == 0, "views: %s", err);
    CHECK(vs->nroot == sizeof(want) / sizeof(want[0]), "%u views", vs->nroot);
    for (unsigned i = 0; i < vs->nroot && i < sizeof(want) / sizeof(want[0]); i++)
        CHECK(!strcmp(pcr_views_root(vs, i)->name, want[i]), "view %u: %s", i,
              pcr_views_root(vs, i)->name);
    CHECK(pcr_views_root_lookup(vs, "full")->number == LEVELS + 1, "full/ is L+1");
    CHECK(pcr_views_root_lookup(vs, "q90")->number == PCR_VIEW_Q, "q90/");
    CHECK(pcr_views_root_lookup(vs, "scan10")->level == 10, "scan10/ serves 10");
    CHECK(pcr_views_need_open(vs), "mix/ needs an open");
    /* dynamic/: directories in one number, files at V + K */
    v = pcr_views_root_lookup(vs, "dynamic");
    CHECK(v && v->number == PCR_VIEW_DYN && v->dirs && !v->files, "dynamic/'s directory");
    if (!v)
        return; /* failed above; the rest would dereference it */
    CHECK(pcr_views_get(vs, PCR_VIEW_DYN, true) == NULL, "no file in its directory number");
    CHECK(tstore_resolve(s, "a/cmyk.JPEG", &node) == 0 && !node.is_dir, "a/cmyk.JPEG");
    CHECK(pcr_view_child_number(v, true, node.id) == PCR_VIEW_DYN + 3, "level 3 first");
    CHECK(pcr_views_set_level(vs, 5, &old) == 0 && old == 3, "set 5");
    CHECK(pcr_views_set_level(vs, LEVELS + 1, NULL) == -EINVAL, "no level 11");
    fv = pcr_views_get(vs, pcr_view_child_number(v, true, node.id), true);
    CHECK(fv && fv->level == 5 && fv->ctr == v->ctr, "a file entry of level 5, one counter");
    CHECK(pcr_store_file(s, node.id, &f) == 0 &&
              pcr_view_size(fv, f) == (int64_t)pcr_file_size(f, 5),
          "size");
    /* mix/: the level of a file's next open is within 2..4 */
    v = pcr_views_root_lookup(vs, "mix");
    CHECK(v && pcr_view_child_number(v, true, node.id) >= PCR_VIEW_MIX + 2 &&
              pcr_view_child_number(v, true, node.id) <= PCR_VIEW_MIX + 4,
          "mix draw");
    CHECK(pcr_views_info_json(vs, "S", NULL, &json, &len) == 0 && strstr(json, "\"mix\"") &&
              strstr(json, "\"q90\"") && strstr(json, "\"dynamic\": true"),
          "info");
    free(json);
    pcr_views_close(vs);
    pcr_views_args_free(&a);

    /* what needs the store is refused at open, with a message */
    CHECK(pcr_views_opt(&a, "level", "11", msg, sizeof(msg)) == 0, "level=11 parses");
    CHECK(pcr_views_open(s, NULL, &a, &vs, err, sizeof(err)) == -EINVAL && strstr(err, "1..10"),
          "level=11: %s", err);
    pcr_views_args_free(&a);
    CHECK(pcr_views_opt(&a, "refurb_size", "32", msg, sizeof(msg)) == 0, "%s", msg);
    CHECK(pcr_views_open(s, NULL, &a, &vs, err, sizeof(err)) == -EINVAL && strstr(err, "refurb=R"),
          "refurb_size alone: %s", err);
    pcr_views_args_free(&a);
    pcr_store_close(s);
}

/* The names of directory @path in listing order, joined by '|'. */
static void list(pcrfs_store *s, const char *path, char *out, size_t len)
{
    char name[256];
    uint64_t pos = 0;
    int isdir, rc;
    size_t n = 0;

    out[0] = '\0';
    while ((rc = pcrfs_readdir(s, path, &pos, name, sizeof(name), &isdir)) == 1 && n < len)
        n += (size_t)snprintf(out + n, len - n, "%s%s%s", n ? "|" : "", name, isdir ? "/" : "");
    CHECK(rc == 0, "%s: readdir ends with %d", path, rc);
}

/* Every file of view @view: its stat size and its bytes (whole and a range) are those
 * of the store at @level. */
static void check_files(pcrfs_store *s, const char *view, unsigned level)
{
    static char buf[200000];
    char p[600];

    for (size_t i = 0; i < NFILES; i++) {
        const struct tfile *t = &files[i];
        struct pcrfs_stat st;
        size_t elen;
        uint8_t *e = tstore_expected(t, level, &elen);
        ssize_t n;

        snprintf(p, sizeof(p), "%s/%s", view, t->path);
        CHECK(pcrfs_stat(s, p, &st) == 0 && !st.is_dir && st.size == elen && st.file_id == i + 1,
              "%s: size %llu, want %zu", p, (unsigned long long)st.size, elen);
        n = pcrfs_read(s, p, buf, sizeof(buf), 0);
        CHECK(n == (ssize_t)elen && !memcmp(buf, e, elen), "%s: %zd bytes, want %zu", p, n, elen);
        if (elen > 10) {
            n = pcrfs_read(s, p, buf, 5, elen - 7);
            CHECK(n == 5 && !memcmp(buf, e + elen - 7, 5), "%s: a range", p);
        }
        CHECK(pcrfs_read(s, p, buf, sizeof(buf), elen + 1) == 0, "%s: past the end", p);
        free(e);
    }
}

/* Each view's rows through the public API. */
static void test_rows(const char *path)
{
    static const char *const opts[] = {"level=3", "quality=0.9", "mix=2-4", "mix_seed=5", NULL};
    static char buf[200000];
    char names[1024], p[64], *json;
    pcrfs_store *s;
    struct pcrfs_stat st;
    uint64_t rec, fid;
    unsigned k;

    CHECK(pcrfs_open(path, opts, &s) == 0, "open: %s", pcrfs_errmsg());
    if (!s)
        return;
    CHECK(pcrfs_levels(s) == LEVELS, "levels");
    list(s, "", names, sizeof(names));
    CHECK(!strcmp(names, "scan1/|scan2/|scan3/|scan4/|scan5/|scan6/|scan7/|scan8/|scan9/|"
                         "scan10/|full/|dynamic/|q90/|mix/"),
          "root: %s", names);
    /* every view mirrors the store's tree, names in the store's order (directories
     * first) */
    static const char *const views[] = {"scan1", "scan7", "full", "dynamic", "q90", "mix"};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        snprintf(p, sizeof(p), "%s", views[i]);
        list(s, p, names, sizeof(names));
        CHECK(!strcmp(names, "a/|b/|r1.JPEG|r2.bin"), "%s: %s", p, names);
        snprintf(p, sizeof(p), "%s/a", views[i]);
        list(s, p, names, sizeof(names));
        CHECK(!strcmp(names, " x y.JPEG|cmyk.JPEG|empty|one.JPEG"), "%s: %s", p, names);
        snprintf(p, sizeof(p), "%s/b/c", views[i]);
        list(s, p, names, sizeof(names));
        CHECK(!strcmp(names, "z.txt|\xff\xfe.JPEG"), "%s: %s", p, names);
    }
    /* scanK/ serves level K, full/ level L; q90/ without a quality table the top */
    for (k = 1; k <= LEVELS; k++) {
        snprintf(p, sizeof(p), "scan%u", k);
        check_files(s, p, k);
    }
    check_files(s, "full", LEVELS);
    check_files(s, "q90", LEVELS);
    /* dynamic/ serves level= first, then what pcrfs_set_level() says, to new opens */
    check_files(s, "dynamic", 3);
    CHECK(pcrfs_set_level(s, 6) == 0, "set_level 6: %s", pcrfs_errmsg());
    check_files(s, "dynamic", 6);
    CHECK(pcrfs_set_level(s, 0) == -EINVAL && pcrfs_set_level(s, LEVELS + 1) == -EINVAL,
          "set_level out of range");
    /* mix/: each open a level in 2..4; over 40 opens of a 10-scan file more than one */
    {
        const struct tfile *t = &files[0];
        unsigned seen = 0;
        for (int i = 0; i < 40; i++) {
            ssize_t n = pcrfs_read(s, "mix/r1.JPEG", buf, sizeof(buf), 0);
            unsigned lv = 0;
            for (k = 2; k <= 4 && !lv; k++) {
                size_t elen;
                uint8_t *e = tstore_expected(t, k, &elen);
                if (n == (ssize_t)elen && !memcmp(buf, e, elen))
                    lv = k;
                free(e);
            }
            CHECK(lv, "mix/r1.JPEG: %zd bytes, no level of 2..4", n);
            seen |= 1u << lv;
        }
        CHECK(__builtin_popcount(seen) >= 2, "mix/ drew one level only (%#x)", seen);
    }
    /* the records of a file are the store's, whichever view names it */
    CHECK(pcrfs_record(s, "scan2/a/cmyk.JPEG", &rec, &fid) == 0 && fid == 4 && rec == 2,
          "record of a/cmyk.JPEG: %llu", (unsigned long long)rec);
    CHECK(pcrfs_record(s, "full/a/cmyk.JPEG", &rec, &fid) == 0 && rec == 2, "full/ too");
    /* errors */
    CHECK(pcrfs_stat(s, "scan11", &st) == -ENOENT, "no scan11/");
    CHECK(pcrfs_stat(s, "scan1/nope", &st) == -ENOENT, "no such file");
    CHECK(pcrfs_stat(s, "scan1/r1.JPEG/x", &st) == -ENOTDIR, "a file in the middle");
    CHECK(pcrfs_stat(s, "full/a", &st) == 0 && st.is_dir && st.size == 0, "a directory");
    CHECK(pcrfs_read(s, "full/a", buf, 10, 0) == -EISDIR, "read a directory");
    CHECK(pcrfs_record(s, "full/a", &rec, &fid) == -EISDIR, "record of a directory");
    {
        uint64_t pos = 0;
        int isdir;
        char small[1];
        CHECK(pcrfs_readdir(s, "full/r1.JPEG", &pos, small, sizeof(small), &isdir) == -ENOTDIR,
              "readdir of a file");
        pos = 0;
        CHECK(pcrfs_readdir(s, "full", &pos, small, sizeof(small), &isdir) == -ENAMETOOLONG,
              "a name longer than the buffer");
    }
    /* the per-view counters: full/ counted its reads, scan1/ its own */
    CHECK(pcrfs_stats_json(s, &json) > 0, "stats");
    CHECK(strstr(json, "\"full\": {\"opens\": ") && !strstr(json, "\"full\": {\"opens\": 0,"),
          "full/ counted: %s", json);
    CHECK(strstr(json, "\"errors\": 0"), "no errors counted");
    free(json);
    pcrfs_close(s);

    /* without dynamic/ there is no level to set */
    CHECK(pcrfs_open(path, NULL, &s) == 0, "open: %s", pcrfs_errmsg());
    CHECK(pcrfs_set_level(s, 2) == -ENOENT, "no dynamic/");
    list(s, "", names, sizeof(names));
    CHECK(!strcmp(names, "scan1/|scan2/|scan3/|scan4/|scan5/|scan6/|scan7/|scan8/|scan9/|"
                         "scan10/|full/"),
          "root without options: %s", names);
    pcrfs_close(s);
}

/* Options refused at open, each with -EINVAL and a message that names it. */
static void test_option_errors(const char *path)
{
    static const char *const bad[][2] = {
        {"mix=4", "mix"},
        {"mix=9-1", "mix"},
        {"level=11", "1..10"},
        {"level=zero", "level"},
        {"quality=2", "quality"},
        {"refurb_size=32", "refurb=R"},
        {"no_such_option=1", "no_such_option"},
    };
    pcrfs_store *s = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *opts[] = {bad[i][0], NULL};
        int rc = pcrfs_open(path, opts, &s);
        CHECK(rc == -EINVAL && strstr(pcrfs_errmsg(), bad[i][1]), "%s: %d %s", bad[i][0], rc,
              pcrfs_errmsg());
        if (rc == 0)
            pcrfs_close(s);
    }
}

int main(void)
{
    char tmpl[] = "/tmp/pcrfs-test-views-XXXXXX", path[600], err[512], cmd[700];

    test_table();
    make_data();
    if (!mkdtemp(tmpl))
        return 2;
    snprintf(path, sizeof(path), "%s/store", tmpl);
    CHECK(build(path, false, 3, err, sizeof(err)) == 0, "build: %s", err);
    test_layout(path);
    test_rows(path);
    test_option_errors(path);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpl);
    for (size_t i = 0; i < NFILES; i++)
        free(files[i].data);
    return check_done("views");
}
