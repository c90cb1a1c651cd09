/* pcrfs util — a growable string and displayable names (see sbuf.h). */
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

void pcr_sbuf_reserve(struct pcr_sbuf *b, size_t len)
{
    if (len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *s;

        while (cap < len + 1)
            cap *= 2;
        s = pcr_xrealloc(b->s, cap);
        if (!b->s)
            s[0] = '\0';
        b->s = s;
        b->cap = cap;
    }
}

void pcr_sbuf_add(struct pcr_sbuf *b, const void *data, size_t len)
{
    pcr_sbuf_reserve(b, b->len + len);
    memcpy(b->s + b->len, data, len);
    b->len += len;
    b->s[b->len] = '\0';
}

void pcr_sbuf_free(struct pcr_sbuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

/* The escaping itself is pcr_utf8_escape()'s (utf8.h), which the library's summary
 * also uses, so that a name prints the same from a tool and from the library. */
void pcr_escape(struct pcr_sbuf *b, const char *name, size_t len)
{
    pcr_sbuf_reserve(b, b->len + PCR_UTF8_ESCAPE_MAX(len));
    b->len += pcr_utf8_escape(b->s + b->len, name, len);
}

const char *pcr_escaped(struct pcr_sbuf *b, const char *name)
{
    pcr_sbuf_reset(b);
    pcr_escape(b, name, strlen(name));
    return b->s;
}
