/* mkmeta — build an ImageNet-sized pcrfs store for the metadata benchmarks.
 *
 *   mkmeta [-f] [-n FILES] [-d DIRS] [-r PER_RECORD] [-P I/N] STORE
 *
 * The store has ImageNet-1k's shape: by default 1,281,167 files in 1,000 class
 * directories named like WordNet ids (n01440764/n01440764_10026.JPEG), 1,300 files
 * in most classes and ~1,112 in the last hundred, as in ILSVRC-2012 train. It goes
 * through the same writer API as mkpcrfs, so every entry is real: one tiny JPEG
 * (16x16, encoded here with libjpeg, then transcoded to progressive with
 * pcr_jpeg_transcode() and cut with pcr_jpeg_split(), exactly as mkpcrfs would) is
 * stored for every name, so any file of the store reads back and decodes. Reusing
 * one image keeps the build to the cost of the index and the record writes, which
 * is what the metadata figures are about.
 *
 * With -P I/N it writes part I of N of that store instead, as mkpcrfs --part would
 * (pcr_part_range(), the part keys; its plan is named by the shape), so that
 * mkpcrfs --merge can be measured at ImageNet scale. SOURCE_DATE_EPOCH fixes the
 * store's "created", so that a merge and a whole build compare row for row.
 *
 * Prints one line of JSON: files, dirs, records, image bytes, seconds, and three
 * names for the benchmarks to use without listing anything first: the first class,
 * its file count, and the first file of the middle class.
 */
#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jpeglib.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/log.h"
#include "pcrfs/store.h"
#include "pcrfs/writer.h"

#define LEVELS    10 /* libjpeg's default script, as mkpcrfs */
#define SCRIPT    "libjpeg-default"
#define SIDE      16
#define NAMELEN   40
#define WNID0     1440764ULL /* n01440764, the first ImageNet class */
#define WNID_STEP 7919ULL

/* A 16x16 colour gradient as a baseline JPEG, in memory. libjpeg's default error
 * handler exits, which is fine for a benchmark tool with fixed, valid input. */
static int tiny_baseline(unsigned char **out, unsigned long *outlen)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char row[SIDE * 3];

    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    *out = NULL;
    *outlen = 0;
    jpeg_mem_dest(&c, out, outlen);
    c.image_width = SIDE;
    c.image_height = SIDE;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < SIDE) {
        for (unsigned x = 0; x < SIDE; x++) {
            row[3 * x] = (unsigned char)(x * 16);
            row[3 * x + 1] = (unsigned char)(c.next_scanline * 16);
            row[3 * x + 2] = (unsigned char)(128 + x * 4);
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return *outlen ? 0 : -EIO;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int namecmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Files in class @c of @ndirs when @nfiles are spread ImageNet-style: 1,300 per class
 * where that fits, the remainder evenly over the last classes. */
static uint64_t class_size(uint64_t c, uint64_t ndirs, uint64_t nfiles)
{
    uint64_t full = 1300, nfull, rest, nrest;

    if (nfiles >= full * ndirs || nfiles < ndirs)
        return nfiles / ndirs + (c < nfiles % ndirs);
    /* the largest number of full classes that leaves the rest >= 1 file per class */
    nfull = (nfiles - ndirs) / (full - 1);
    if (nfull > ndirs)
        nfull = ndirs;
    while (nfull > 0 && nfiles - nfull * full < ndirs - nfull)
        nfull--;
    /* keep the small classes ImageNet-like (>= ~85% of full) when possible */
    while (nfull > 0 && (nfiles - nfull * full) / (ndirs - nfull) < full * 85 / 100)
        nfull--;
    if (c < nfull)
        return full;
    rest = nfiles - nfull * full;
    nrest = ndirs - nfull;
    return rest / nrest + (c - nfull < rest % nrest);
}

static void log_hook(enum pcr_log_level level, const char *msg, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "mkmeta: %s%s\n", level == PCR_LOG_ERR ? "error: " : "", msg);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mkmeta [-f] [-n FILES] [-d DIRS] [-r PER_RECORD] [-P I/N] STORE\n");
}

int main(int argc, char **argv)
{
    uint64_t nfiles = 1281167, ndirs = 1000, per_record = 1024;
    struct pcr_writer_opts wopts = {.levels = LEVELS, .script = SCRIPT};
    struct pcr_writer *w = NULL;
    unsigned char *base = NULL;
    unsigned long baselen = 0;
    uint8_t *prog = NULL;
    size_t proglen = 0;
    struct pcr_jpeg_info info;
    struct pcr_split split;
    struct pcr_item *items = NULL;
    char(*names)[NAMELEN] = NULL;
    char err[512] = "", why[128] = "", v[32], sample[2 * NAMELEN] = "";
    uint64_t fid = 1, part = 0, nparts = 0, flo = 0, fhi;
    struct pcr_part_info range;
    unsigned nitems = 0;
    double t0;
    int c, rc, ret = 1;

    while ((c = getopt(argc, argv, "fn:d:r:P:h")) != -1) {
        switch (c) {
        case 'f':
            wopts.force = true;
            break;
        case 'n':
            nfiles = strtoull(optarg, NULL, 10);
            break;
        case 'd':
            ndirs = strtoull(optarg, NULL, 10);
            break;
        case 'r':
            per_record = strtoull(optarg, NULL, 10);
            break;
        case 'P':
            if (sscanf(optarg, "%" SCNu64 "/%" SCNu64, &part, &nparts) != 2 || part < 1 ||
                part > nparts) {
                usage(stderr);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc || ndirs < 1 || ndirs > 99999999 || nfiles < ndirs || per_record < 1 ||
        per_record > (1u << 20)) {
        usage(stderr);
        return 2;
    }
    pcr_log_set_hook(log_hook, NULL, PCR_LOG_WARN);
    t0 = now();
    if (getenv("SOURCE_DATE_EPOCH"))
        wopts.created = strtoll(getenv("SOURCE_DATE_EPOCH"), NULL, 10);
    fhi = nfiles;
    if (part) {
        pcr_part_range(nfiles, per_record, part, nparts, &range);
        flo = range.first_file;
        fhi = flo + range.files;
        wopts.part = true;
        wopts.part_first_file = flo;
        wopts.part_first_record = range.first_record;
        wopts.part_files = range.files;
    }

    if (tiny_baseline(&base, &baselen) != 0 ||
        pcr_jpeg_transcode(base, baselen, NULL, &prog, &proglen, &info, why, sizeof(why)) != 0 ||
        pcr_jpeg_split(prog, proglen, &split) != 0) {
        fprintf(stderr, "mkmeta: cannot make the tiny JPEG: %s\n", why);
        goto out;
    }

    items = calloc(per_record, sizeof(*items));
    names = calloc(1300 > nfiles / ndirs + 1 ? 1300 : nfiles / ndirs + 1, NAMELEN);
    if (!items || !names) {
        fprintf(stderr, "mkmeta: out of memory\n");
        goto out;
    }
    rc = pcr_writer_create(argv[optind], &wopts, &w, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "mkmeta: %s\n", err);
        goto out;
    }
    /* Directories: the root (1), then the classes 2..ndirs+1, sorted by name (the
     * ids are fixed-width, so numeric order is byte order). */
    rc = pcr_writer_add_dir(w, &(struct pcr_dir_row){.id = PCR_ROOT_DIR,
                                                     .parent = PCR_ROOT_DIR,
                                                     .name = "",
                                                     .first_child = 2,
                                                     .nsubdirs = ndirs,
                                                     .first_file = 1,
                                                     .nfiles = 0});
    for (uint64_t d = 0, first = 1; !rc && d < ndirs; d++) {
        char name[16];
        uint64_t n = class_size(d, ndirs, nfiles);
        snprintf(name, sizeof(name), "n%08llu", (unsigned long long)(WNID0 + d * WNID_STEP));
        rc = pcr_writer_add_dir(w, &(struct pcr_dir_row){.id = d + 2,
                                                         .parent = PCR_ROOT_DIR,
                                                         .name = name,
                                                         .first_child = ndirs + 2,
                                                         .nsubdirs = 0,
                                                         .first_file = first,
                                                         .nfiles = n});
        first += n;
    }
    if (rc) {
        fprintf(stderr, "mkmeta: %s\n", pcr_writer_error(w));
        goto out;
    }

    /* Files, class by class, sorted by name; records filled in id order and cut every
     * per_record files regardless of class, as mkpcrfs does. ImageNet's numbers are
     * not zero-padded, so the byte order is not the numeric one: sort. */
    for (uint64_t d = 0; d < ndirs; d++) {
        uint64_t n = class_size(d, ndirs, nfiles);
        unsigned long long wnid = WNID0 + d * WNID_STEP;
        for (uint64_t k = 0; k < n; k++)
            snprintf(names[k], NAMELEN, "n%08llu_%llu.JPEG", wnid,
                     (unsigned long long)((k * 7 + d) % 13 + 1 + k * 13));
        qsort(names, n, NAMELEN, namecmp);
        if (d == ndirs / 2)
            snprintf(sample, sizeof(sample), "n%08llu/%s", wnid, names[0]);
        for (uint64_t k = 0; k < n; k++) {
            struct pcr_item *it = &items[nitems];

            if (fid <= flo || fid > fhi) { /* another part's */
                fid++;
                continue;
            }
            /* the names of a record must live until it is written: copy them */
            it->name = strdup(names[k]);
            if (!it->name) {
                fprintf(stderr, "mkmeta: out of memory\n");
                goto out;
            }
            it->id = fid++;
            it->dir = d + 2;
            it->kind = PCR_KIND_JPEG;
            it->data = prog;
            it->len = proglen;
            it->split = &split;
            it->info = info;
            it->src_size = baselen;
            if (++nitems == per_record || it->id == fhi) {
                rc = pcr_writer_add_record(w, items, nitems);
                for (unsigned i = 0; i < nitems; i++)
                    free((char *)items[i].name);
                nitems = 0;
                if (rc) {
                    fprintf(stderr, "mkmeta: %s\n", pcr_writer_error(w));
                    goto out;
                }
            }
        }
    }
    snprintf(v, sizeof(v), "%llu", (unsigned long long)per_record);
    if (pcr_writer_set_meta(w, "script", SCRIPT) || pcr_writer_set_meta(w, "per_record", v) ||
        pcr_writer_set_meta(w, "created_by", "bench/mkmeta")) {
        fprintf(stderr, "mkmeta: %s\n", pcr_writer_error(w));
        goto out;
    }
    if (part) {
        const uint64_t pv[] = {
            part, nparts, range.first_file, range.files, range.first_record, range.records};
        static const char *const pk[] = {"part.index", "part.count",        "part.first_file",
                                         "part.files", "part.first_record", "part.records"};
        char plan[64];

        snprintf(plan, sizeof(plan), "mkmeta-%llu-%llu-%llu", (unsigned long long)nfiles,
                 (unsigned long long)ndirs, (unsigned long long)per_record);
        rc = pcr_writer_set_meta(w, "part.plan", plan);
        for (unsigned k = 0; !rc && k < 6; k++) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)pv[k]);
            rc = pcr_writer_set_meta(w, pk[k], v);
        }
        if (rc) {
            fprintf(stderr, "mkmeta: %s\n", pcr_writer_error(w));
            goto out;
        }
    }
    rc = pcr_writer_finish(w, err, sizeof(err));
    w = NULL;
    if (rc) {
        fprintf(stderr, "mkmeta: %s\n", err);
        goto out;
    }
    printf("{\"files\": %llu, \"dirs\": %llu, \"records\": %llu, \"image_bytes\": %zu, "
           "\"nchunks\": %u, \"seconds\": %.3f, \"first_class\": \"n%08llu\", "
           "\"first_class_files\": %llu, \"sample\": \"%s\"}\n",
           (unsigned long long)nfiles, (unsigned long long)ndirs + 1,
           (unsigned long long)((nfiles + per_record - 1) / per_record), proglen, split.nchunks,
           now() - t0, WNID0, (unsigned long long)class_size(0, ndirs, nfiles), sample);
    ret = 0;
out:
    for (unsigned i = 0; i < nitems; i++)
        free((char *)items[i].name);
    if (w)
        pcr_writer_abort(w);
    free(names);
    free(items);
    free(prog);
    free(base);
    return ret;
}
