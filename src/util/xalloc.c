/* pcrfs util — allocation that does not return on failure, or returns NULL (see
 * xalloc.h). */
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

unsigned long pcr_try_fail_from;
unsigned long pcr_try_count;
unsigned long pcr_try_tolerated;

void *pcr_try_realloc(void *p, size_t n)
{
    unsigned long k = __atomic_add_fetch(&pcr_try_count, 1, __ATOMIC_RELAXED);
    unsigned long from = __atomic_load_n(&pcr_try_fail_from, __ATOMIC_RELAXED);

    if (from && k >= from)
        return NULL; /* a test's injected failure */
    return realloc(p, n ? n : 1);
}

void *pcr_try_malloc(size_t n)
{
    return pcr_try_realloc(NULL, n);
}

char *pcr_try_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = pcr_try_malloc(n);

    return p ? memcpy(p, s, n) : NULL;
}

void *pcr_try_grow(void *p, uint64_t *cap, uint64_t first, size_t size)
{
    uint64_t ncap = *cap ? *cap * 2 : first;

    if (ncap > SIZE_MAX / size)
        return NULL; /* cannot be allocated anyway */
    p = pcr_try_realloc(p, (size_t)ncap * size);
    if (p)
        *cap = ncap;
    return p;
}

/* "REL/NAME" into @p, which holds strlen(rel) + strlen(name) + 2 bytes. */
static char *path_join_into(char *p, const char *rel, size_t a, const char *name, size_t n)
{
    if (a) {
        memcpy(p, rel, a);
        p[a++] = '/';
    }
    memcpy(p + a, name, n + 1);
    return p;
}

char *pcr_path_join(const char *rel, const char *name)
{
    size_t a = strlen(rel), n = strlen(name);

    return path_join_into(pcr_xmalloc(a + n + 2), rel, a, name, n);
}

char *pcr_try_path_join(const char *rel, const char *name)
{
    size_t a = strlen(rel), n = strlen(name);
    char *p = pcr_try_malloc(a + n + 2);

    return p ? path_join_into(p, rel, a, name, n) : NULL;
}
