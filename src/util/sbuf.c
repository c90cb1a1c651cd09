/* pcrfs util — a growable string and displayable names (see sbuf.h). */
#include <stdint.h>
#include <stdio.h>
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

/* Length of the well-formed UTF-8 sequence at @p (at most @n bytes) encoding a
 * printable code point, or 0. What is not UTF-8 (pcr_utf8_seq()) and the C1
 * controls are rejected: they would print misleadingly. */
static size_t utf8_printable(const unsigned char *p, size_t n)
{
    uint32_t cp;
    size_t len = pcr_utf8_seq(p, n, &cp);

    return len > 0 && cp >= 0xA0 ? len : 0;
}

void pcr_escape(struct pcr_sbuf *b, const char *name, size_t len)
{
    const unsigned char *p = (const unsigned char *)name;
    size_t i = 0;

    while (i < len) {
        size_t run = i;

        /* Copy printable runs in one go. */
        while (run < len) {
            size_t u;

            if (p[run] >= 0x20 && p[run] < 0x7F && p[run] != '\\') {
                run++;
                continue;
            }
            if (p[run] >= 0x80 && (u = utf8_printable(p + run, len - run)) > 0) {
                run += u;
                continue;
            }
            break;
        }
        if (run > i) {
            pcr_sbuf_add(b, p + i, run - i);
            i = run;
            continue;
        }
        if (p[i] == '\\') {
            pcr_sbuf_add(b, "\\\\", 2);
        } else {
            char hex[5];

            snprintf(hex, sizeof(hex), "\\x%02x", p[i]);
            pcr_sbuf_add(b, hex, 4);
        }
        i++;
    }
    if (!b->s)
        pcr_sbuf_add(b, "", 0);
}

const char *pcr_escaped(struct pcr_sbuf *b, const char *name)
{
    pcr_sbuf_reset(b);
    pcr_escape(b, name, strlen(name));
    return b->s;
}
