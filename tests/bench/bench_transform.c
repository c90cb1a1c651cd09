/* bench_transform — how close pcr_jpeg_transcode() comes to libjpeg's bare transform.
 *
 * usage: bench_transform [-r ROUNDS] FILE...
 *
 * Loads every FILE into memory first (no I/O is timed), then, ROUNDS times, runs on
 * one thread:
 *   bare: jpeg_read_coefficients -> jpeg_copy_critical_parameters ->
 *         jpeg_simple_progression -> jpeg_write_coefficients into jpeg_mem_dest,
 *         no marker copying, no splitting, warnings ignored (what jpegtran
 *         -progressive does, minus its process start and file I/O);
 *   pcr:  pcr_jpeg_transcode() (markers kept, any warning is a failure) followed by
 *         pcr_jpeg_split() of its output, as mkpcrfs does per image.
 * Prints images/s for each round, the best round, and why files went verbatim.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jpeglib.h>
#include "pcrfs/jpeg.h"

struct file {
    const char *path;
    unsigned char *data;
    size_t len;
};

struct bare_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
};

static void bare_exit(j_common_ptr c)
{
    longjmp(((struct bare_err *)c->err)->jb, 1);
}

static void bare_silent(j_common_ptr c)
{
    (void)c;
}

struct bare {
    struct bare_err err;
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    unsigned char *out;
    unsigned long outlen;
};

static int bare_run(struct bare *b, const struct file *f)
{
    jvirt_barray_ptr *coef;

    if (setjmp(b->err.jb))
        return -1;
    jpeg_mem_src(&b->src, f->data, (unsigned long)f->len);
    jpeg_read_header(&b->src, TRUE);
    coef = jpeg_read_coefficients(&b->src);
    jpeg_copy_critical_parameters(&b->src, &b->dst);
    jpeg_simple_progression(&b->dst);
    jpeg_mem_dest(&b->dst, &b->out, &b->outlen);
    jpeg_write_coefficients(&b->dst, coef);
    jpeg_finish_compress(&b->dst);
    jpeg_finish_decompress(&b->src);
    return 0;
}

/* One bare transform; @return output bytes or 0 on error. Objects are created per
 * image, as pcr_jpeg_transcode() does, so both sides pay the same setup. */
static size_t bare_transform(const struct file *f)
{
    struct bare b;
    size_t n = 0;

    memset(&b, 0, sizeof(b));
    b.src.err = jpeg_std_error(&b.err.pub);
    b.err.pub.error_exit = bare_exit;
    b.err.pub.output_message = bare_silent;
    b.dst.err = &b.err.pub;
    jpeg_create_decompress(&b.src);
    jpeg_create_compress(&b.dst);
    if (bare_run(&b, f) == 0)
        n = b.outlen;
    jpeg_destroy_compress(&b.dst);
    jpeg_destroy_decompress(&b.src);
    /* jpeg_mem_dest's buffer: after an error it may already have been replaced
     * (and the replacement is unreachable); on success it is b.out. */
    if (n)
        free(b.out);
    return n;
}

/* Wall time and this thread's CPU time. The machine is shared (2 cores, other
 * builds running), so each image is timed with both methods back to back, in
 * alternating order, and the CPU-time rate is reported next to the wall rate. */
struct stamp {
    double wall, cpu;
};

static struct stamp now(void)
{
    struct timespec w, c;
    clock_gettime(CLOCK_MONOTONIC, &w);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    return (struct stamp){(double)w.tv_sec + (double)w.tv_nsec * 1e-9,
                          (double)c.tv_sec + (double)c.tv_nsec * 1e-9};
}

static void add_since(struct stamp *acc, struct stamp t0)
{
    struct stamp t1 = now();
    acc->wall += t1.wall - t0.wall;
    acc->cpu += t1.cpu - t0.cpu;
}

struct reason {
    char why[128];
    unsigned count;
    const char *example;
};

int main(int argc, char **argv)
{
    int rounds = 3, first = 1;
    struct file *files;
    size_t nfiles = 0, inbytes = 0;

    if (argc > 2 && strcmp(argv[1], "-r") == 0) {
        rounds = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || rounds < 1) {
        fprintf(stderr, "usage: %s [-r ROUNDS] FILE...\n", argv[0]);
        return 2;
    }
    files = calloc((size_t)(argc - first), sizeof(*files));
    for (int i = first; i < argc; i++) {
        FILE *fp = fopen(argv[i], "rb");
        struct file *f = &files[nfiles];
        long sz;
        if (!fp || fseek(fp, 0, SEEK_END) != 0 || (sz = ftell(fp)) < 0 ||
            fseek(fp, 0, SEEK_SET) != 0) {
            perror(argv[i]);
            return 1;
        }
        f->path = argv[i];
        f->len = (size_t)sz;
        f->data = malloc(f->len ? f->len : 1);
        if (!f->data || fread(f->data, 1, f->len, fp) != f->len) {
            perror(argv[i]);
            return 1;
        }
        fclose(fp);
        inbytes += f->len;
        nfiles++;
    }
    printf("%zu files, %.1f MB\n", nfiles, (double)inbytes / 1e6);

    struct reason reasons[32];
    unsigned nreasons = 0, nverbatim = 0;
    size_t bare_out = 0, pcr_out = 0;
    unsigned bare_fail = 0;
    struct stamp tot_bare = {0, 0}, tot_pcr = {0, 0};

    for (int r = 0; r < rounds; r++) {
        struct stamp t_bare = {0, 0}, t_pcr = {0, 0};
        bare_out = 0;
        bare_fail = 0;
        pcr_out = 0;
        nverbatim = 0;
        nreasons = 0;
        for (size_t i = 0; i < nfiles; i++) {
            for (int pass = 0; pass < 2; pass++) {
                struct stamp t0 = now();
                if ((pass + i + (size_t)r) % 2 == 0) {
                    size_t n = bare_transform(&files[i]);
                    add_since(&t_bare, t0);
                    bare_out += n;
                    bare_fail += n == 0;
                    continue;
                }
                uint8_t *out;
                size_t outlen;
                char why[128];
                struct pcr_split sp;
                int rc = pcr_jpeg_transcode(files[i].data, files[i].len, NULL, &out, &outlen, NULL,
                                            why, sizeof(why));
                if (rc == 0 && pcr_jpeg_split(out, outlen, &sp) != 0) {
                    fprintf(stderr, "%s: transcode output does not split\n", files[i].path);
                    return 1;
                }
                add_since(&t_pcr, t0);
                if (rc == 0) {
                    pcr_out += outlen;
                    free(out);
                    continue;
                }
                nverbatim++;
                unsigned k;
                for (k = 0; k < nreasons && strcmp(reasons[k].why, why) != 0; k++)
                    ;
                if (k == nreasons && nreasons < 32) {
                    snprintf(reasons[k].why, sizeof(reasons[k].why), "%s", why);
                    reasons[k].count = 0;
                    reasons[k].example = files[i].path;
                    nreasons++;
                }
                if (k < nreasons)
                    reasons[k].count++;
            }
        }
        printf("round %d: bare %.1f images/s wall (%.1f cpu), pcr_jpeg_transcode+split %.1f "
               "images/s wall (%.1f cpu)\n",
               r + 1, (double)nfiles / t_bare.wall, (double)nfiles / t_bare.cpu,
               (double)nfiles / t_pcr.wall, (double)nfiles / t_pcr.cpu);
        tot_bare.wall += t_bare.wall;
        tot_bare.cpu += t_bare.cpu;
        tot_pcr.wall += t_pcr.wall;
        tot_pcr.cpu += t_pcr.cpu;
    }
    double n = (double)nfiles * rounds;
    printf("all rounds: bare %.1f images/s wall, %.1f cpu; pcr %.1f images/s wall, %.1f cpu; "
           "pcr/bare = %.3f wall, %.3f cpu\n",
           n / tot_bare.wall, n / tot_bare.cpu, n / tot_pcr.wall, n / tot_pcr.cpu,
           tot_bare.wall / tot_pcr.wall, tot_bare.cpu / tot_pcr.cpu);
    printf("bare: %u failed (errors only; warnings ignored), output %.1f MB\n", bare_fail,
           (double)bare_out / 1e6);
    printf("pcr: %zu transcoded, output %.1f MB; %u verbatim (%.1f%%):\n", nfiles - nverbatim,
           (double)pcr_out / 1e6, nverbatim, 100.0 * nverbatim / (double)nfiles);
    for (unsigned k = 0; k < nreasons; k++)
        printf("  %u x %s (e.g. %s)\n", reasons[k].count, reasons[k].why, reasons[k].example);
    return 0;
}
