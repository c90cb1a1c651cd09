/* refurb_tool — drives the refurbishing library from the Python tests and prints
 * timings (tests/integration/test_refurb_lib.py; doc/REFURB.md).
 *
 *   refurb_tool params W H SEED SAMPLE VERSION [opts]   one crop: top left h w flip fallback
 *   refurb_tool draws  W H SEED COUNT [opts]            crops of samples 0..COUNT-1, version 0
 *   refurb_tool render IN.jpg OUT.ppm SEED SAMPLE VERSION [opts]
 *                      [--box TOP LEFT H W FLIP] [--scale-num M]
 *       writes the PPM; prints: width height components M top left h w flip warnings
 *   refurb_tool bench [opts] [--reps N] FILE...         ms per sample rendered
 * opts: --size S, --scale LO HI, --ratio LO HI, --no-flip, --no-dct, --no-partial
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pcrfs/refurb.h"

static int usage(void)
{
    fprintf(stderr, "usage: refurb_tool params|draws|render|bench ... (see the source)\n");
    return 2;
}

static unsigned long long num(const char *s)
{
    return strtoull(s, NULL, 0);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long n;

    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        b = malloc((size_t)n + 1);
        if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
        *len = (size_t)n;
    }
    fclose(f);
    return b;
}

struct args {
    struct pcr_refurb_conf conf;
    const char *pos[8];
    int npos;
    bool box;
    struct pcr_refurb_params p;
    unsigned scale_num, reps;
    const char **files;
    int nfiles;
};

static int parse(int argc, char **argv, struct args *a)
{
    pcr_refurb_conf_default(&a->conf);
    a->reps = 3;
    a->files = calloc((size_t)argc, sizeof(char *));
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        int left = argc - i - 1;
        if (!strcmp(s, "--size") && left >= 1) {
            a->conf.size = (unsigned)num(argv[++i]);
        } else if (!strcmp(s, "--scale") && left >= 2) {
            a->conf.scale[0] = atof(argv[++i]);
            a->conf.scale[1] = atof(argv[++i]);
        } else if (!strcmp(s, "--ratio") && left >= 2) {
            a->conf.ratio[0] = atof(argv[++i]);
            a->conf.ratio[1] = atof(argv[++i]);
        } else if (!strcmp(s, "--no-flip")) {
            a->conf.flip = false;
        } else if (!strcmp(s, "--no-partial")) {
            a->conf.partial = false;
        } else if (!strcmp(s, "--no-dct")) {
            a->conf.dct_scaling = false;
        } else if (!strcmp(s, "--scale-num") && left >= 1) {
            a->scale_num = (unsigned)num(argv[++i]);
        } else if (!strcmp(s, "--reps") && left >= 1) {
            a->reps = (unsigned)num(argv[++i]);
        } else if (!strcmp(s, "--box") && left >= 5) {
            a->box = true;
            a->p.top = (unsigned)num(argv[++i]);
            a->p.left = (unsigned)num(argv[++i]);
            a->p.height = (unsigned)num(argv[++i]);
            a->p.width = (unsigned)num(argv[++i]);
            a->p.flip = num(argv[++i]) != 0;
        } else if (s[0] == '-' && s[1] == '-') {
            return -1;
        } else {
            if (a->npos < 8)
                a->pos[a->npos++] = s;
            a->files[a->nfiles++] = s;
        }
    }
    return pcr_refurb_conf_check(&a->conf) ? -1 : 0;
}

static int cmd_params(struct args *a)
{
    struct pcr_refurb_params p;

    if (a->npos != 5)
        return usage();
    a->conf.seed = num(a->pos[2]);
    if (pcr_refurb_params((unsigned)num(a->pos[0]), (unsigned)num(a->pos[1]), &a->conf,
                          num(a->pos[3]), num(a->pos[4]), &p))
        return 1;
    printf("%u %u %u %u %d %d\n", p.top, p.left, p.height, p.width, p.flip, p.fallback);
    return 0;
}

static int cmd_draws(struct args *a)
{
    unsigned long long n;
    struct pcr_refurb_params p;

    if (a->npos != 4)
        return usage();
    a->conf.seed = num(a->pos[2]);
    n = num(a->pos[3]);
    for (unsigned long long i = 0; i < n; i++) {
        if (pcr_refurb_params((unsigned)num(a->pos[0]), (unsigned)num(a->pos[1]), &a->conf, i, 0,
                              &p))
            return 1;
        printf("%u %u %u %u %d %d\n", p.top, p.left, p.height, p.width, p.flip, p.fallback);
    }
    return 0;
}

static int cmd_render(struct args *a)
{
    struct pcr_refurb_info info;
    size_t len, n = pcr_refurb_ppm_size(a->conf.size);
    uint8_t *jpeg, *ppm = malloc(n);
    char why[256];
    FILE *f;
    int rc;

    if (a->npos != 5)
        return usage();
    jpeg = slurp(a->pos[0], &len);
    if (!jpeg || !ppm) {
        fprintf(stderr, "refurb_tool: cannot read %s\n", a->pos[0]);
        return 1;
    }
    a->conf.seed = num(a->pos[2]);
    if (a->scale_num && !a->box) {
        fprintf(stderr, "refurb_tool: --scale-num needs --box\n");
        return 2;
    }
    if (a->box)
        rc = pcr_refurb_render_params(&a->conf, jpeg, len, &a->p, a->scale_num, ppm, &info, why,
                                      sizeof(why));
    else
        rc = pcr_refurb_render(&a->conf, jpeg, len, num(a->pos[3]), num(a->pos[4]), ppm, &info, why,
                               sizeof(why));
    if (rc) {
        fprintf(stderr, "refurb_tool: %s: %s (%d)\n", a->pos[0], why, rc);
        return 1;
    }
    f = fopen(a->pos[1], "wb");
    if (!f || fwrite(ppm, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "refurb_tool: cannot write %s\n", a->pos[1]);
        return 1;
    }
    printf("%u %u %u %u %u %u %u %u %d %u\n", info.width, info.height, info.components,
           info.scale_num, info.params.top, info.params.left, info.params.height, info.params.width,
           info.params.flip, info.warnings);
    free(jpeg);
    free(ppm);
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); /* CPU time: the machine is shared */
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmd_bench(struct args *a)
{
    size_t n = pcr_refurb_ppm_size(a->conf.size), total = 0;
    uint8_t *ppm = malloc(n);
    uint8_t **jpegs = calloc((size_t)a->nfiles + 1, sizeof(*jpegs));
    size_t *lens = calloc((size_t)a->nfiles + 1, sizeof(*lens));
    unsigned scales[9] = {0};
    double t0, t;
    char why[256];

    if (!a->nfiles)
        return usage();
    for (int i = 0; i < a->nfiles; i++) {
        jpegs[i] = slurp(a->files[i], &lens[i]);
        if (!jpegs[i]) {
            fprintf(stderr, "refurb_tool: cannot read %s\n", a->files[i]);
            return 1;
        }
    }
    t0 = now();
    for (unsigned rep = 0; rep < a->reps; rep++)
        for (int i = 0; i < a->nfiles; i++) {
            struct pcr_refurb_info info;
            if (pcr_refurb_render(&a->conf, jpegs[i], lens[i], (uint64_t)i, rep, ppm, &info, why,
                                  sizeof(why)) == 0) {
                total++;
                scales[info.scale_num]++;
            }
        }
    t = now() - t0;
    printf("size %u dct %s partial %s: %zu samples, %.3f CPU ms/sample; decoded at M/8 for M=1..8:",
           a->conf.size, a->conf.dct_scaling ? "on" : "off", a->conf.partial ? "on" : "off", total,
           total ? 1e3 * t / (double)total : 0.0);
    for (int m = 1; m <= 8; m++)
        printf(" %u", scales[m]);
    printf("\n");
    for (int i = 0; i < a->nfiles; i++)
        free(jpegs[i]);
    free(jpegs);
    free(lens);
    free(ppm);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = {0};
    int rc;

    /* a bad command line is no command: usage() at the end */
    const char *cmd = argc >= 2 && !parse(argc, argv, &a) ? argv[1] : "";

    if (!strcmp(cmd, "params"))
        rc = cmd_params(&a);
    else if (!strcmp(cmd, "draws"))
        rc = cmd_draws(&a);
    else if (!strcmp(cmd, "render"))
        rc = cmd_render(&a);
    else if (!strcmp(cmd, "bench"))
        rc = cmd_bench(&a);
    else
        rc = usage();
    free(a.files);
    return rc;
}
