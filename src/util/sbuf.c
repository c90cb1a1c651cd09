/* pcrfs util — a growable string and displayable names (see sbuf.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include "util/sbuf.h"
#include "util/utf8.h"
#include "util/xalloc.h"

void pcr_sbuf_reset(struct pcr_sbuf *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

/* Room for @len bytes and a NUL: @may_fail, through pcr_try_realloc() (-ENOMEM),
 * else through pcr_xrealloc(), which does not return on failure. */
static int reserve(struct pcr_sbuf *b, size_t len, bool may_fail)
{
    if (len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *s;

        while (cap < len + 1)
            cap *= 2;
        s = may_fail ? pcr_try_realloc(b->s, cap) : pcr_xrealloc(b->s, cap);
        if (!s)
            return -ENOMEM;
        if (!b->s)
            s[0] = '\0';
        b->s = s;
        b->cap = cap;
    }
    return 0;
}

int pcr_sbuf_try_reserve(struct pcr_sbuf *b, size_t len)
{
    return reserve(b, len, true);
}

void pcr_sbuf_reserve(struct pcr_sbuf *b, size_t len)
{
    reserve(b, len, false);
}

static int add(struct pcr_sbuf *b, const void *data, size_t len, bool may_fail)
{
    if (reserve(b, b->len + len, may_fail) < 0)
        return -ENOMEM;
    memcpy(b->s + b->len, data, len);
    b->len += len;
    b->s[b->len] = '\0';
    return 0;
}

int pcr_sbuf_try_add(struct pcr_sbuf *b, const void *data, size_t len)
{
    return add(b, data, len, true);
}

void pcr_sbuf_add(struct pcr_sbuf *b, const void *data, size_t len)
{
    add(b, data, len, false);
}

void pcr_sbuf_free(struct pcr_sbuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

/* The escaping itself is pcr_utf8_escape()'s (utf8.h), which the library's summary
 * also uses, so that a name prints the same from a tool and from the library. */
int pcr_escape(struct pcr_sbuf *b, const char *name, size_t len)
{
    /* Messages must print even when memory is gone: then the name is replaced by a
     * fixed text, written into the room @b already has (if any). */
    if (pcr_sbuf_try_reserve(b, b->len + PCR_UTF8_ESCAPE_MAX(len)) < 0) {
        size_t n = sizeof(PCR_ESCAPE_NOMEM) - 1;

        if (b->s && b->len + n < b->cap) {
            memcpy(b->s + b->len, PCR_ESCAPE_NOMEM, n + 1);
            b->len += n;
        }
        __atomic_add_fetch(&pcr_try_tolerated, 1, __ATOMIC_RELAXED);
        return -ENOMEM;
    }
    b->len += pcr_utf8_escape(b->s + b->len, name, len);
    return 0;
}

const char *pcr_escaped(struct pcr_sbuf *b, const char *name)
{
    pcr_sbuf_reset(b);
    if (pcr_escape(b, name, strlen(name)) < 0)
        return PCR_ESCAPE_NOMEM;
    return b->s;
}
