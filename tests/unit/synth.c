/* The synthetic store of the unit tests (synth.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "synth.h"

struct tfile files[NFILES] = {
    {"r1.JPEG", 1, "r1.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}, NULL},
    {"r2.bin", 1, "r2.bin", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
    {"a/ x y.JPEG", 2, " x y.JPEG", PCR_KIND_JPEG, 6, 0, NULL, {0}, NULL},
    {"a/cmyk.JPEG", 2, "cmyk.JPEG", PCR_KIND_JPEG, 18, 0, NULL, {0}, NULL},
    {"a/empty", 2, "empty", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
    {"a/one.JPEG", 2, "one.JPEG", PCR_KIND_JPEG, 1, 0, NULL, {0}, NULL},
    {"b/c/z.txt", 4, "z.txt", PCR_KIND_VERBATIM, 1, 0, NULL, {0}, NULL},
    {"b/c/\xff\xfe.JPEG", 4, "\xff\xfe.JPEG", PCR_KIND_JPEG, 10, 0, NULL, {0}, NULL},
};

static uint32_t rnd_state = 12345;
uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

void make_data(void)
{
    for (size_t i = 0; i < NFILES; i++) {
        struct tfile *t = &files[i];
        size_t n = 0;
        if (t->kind == PCR_KIND_VERBATIM) {
            /* r2.bin spans three checksum blocks (test_flipped) */
            t->len = !strcmp(t->name, "empty")    ? 0
                     : !strcmp(t->name, "r2.bin") ? 150000
                                                  : 100 + rnd() % 3000;
            t->data = malloc(t->len + 1);
            for (size_t k = 0; k < t->len; k++)
                t->data[k] = (uint8_t)(rnd() >> 8); /* high bits: period 2^24 */
            continue;
        }
        t->split.nchunks = t->nchunks;
        t->data = malloc(64 * 4096 + 2);
        for (unsigned c = 0; c < t->nchunks; c++) {
            size_t l = 1 + rnd() % 4000;
            for (size_t k = 0; k < l; k++)
                t->data[n + k] = (uint8_t)(i * 32 + c);
            n += l;
            t->split.end[c] = n;
        }
        t->data[n++] = 0xFF;
        t->data[n++] = 0xD9;
        t->len = n;
    }
}

int build(const char *path, bool force, unsigned per_record, char *err, size_t errlen)
{
    static const struct pcr_dir_row dirs[] = {
        {1, 1, "", 2, 2, 1, 2},
        {2, 1, "a", 0, 0, 3, 4},
        {3, 1, "b", 4, 1, 0, 0},
        {4, 3, "c", 0, 0, 7, 2},
    };
    const struct tstore st = {dirs, 4, files, NFILES, per_record, force};

    return tstore_write(path, &st, err, errlen);
}
