/* pcrfs util — allocation that does not return on failure (see xalloc.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/xalloc.h"

void (*pcr_oom_hook)(void);

void pcr_oom(void)
{
    if (pcr_oom_hook)
        pcr_oom_hook();
    /* No formatting, no allocation: this runs when memory is gone. */
    fputs("out of memory\n", stderr);
    exit(1);
}

void *pcr_xmalloc(size_t n)
{
    return pcr_xrealloc(NULL, n);
}

void *pcr_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        pcr_oom();
    return p;
}

char *pcr_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;

    return memcpy(pcr_xmalloc(n), s, n);
}

void *pcr_xgrow(void *p, uint64_t *cap, uint64_t first, size_t size)
{
    uint64_t ncap = *cap ? *cap * 2 : first;

    if (ncap > SIZE_MAX / size)
        pcr_oom(); /* cannot be allocated anyway */
    p = pcr_xrealloc(p, (size_t)ncap * size);
    *cap = ncap;
    return p;
}

char *pcr_path_join(const char *rel, const char *name)
{
    size_t a = strlen(rel), n = strlen(name);
    char *p = pcr_xmalloc(a + n + 2);

    if (a) {
        memcpy(p, rel, a);
        p[a++] = '/';
    }
    memcpy(p + a, name, n + 1);
    return p;
}
