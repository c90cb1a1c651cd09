/* pcrfs util — UTF-8 validation (see utf8.h). */
#include <string.h>
#include "util/utf8.h"

size_t pcr_utf8_seq(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned c = p[0];
    size_t len, i;
    uint32_t v, min;

    if (c < 0x80) {
        len = 1, v = c, min = 0;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    /* overlong forms, surrogates and code points past U+10FFFF are not UTF-8 */
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    if (cp)
        *cp = v;
    return len;
}

/* Length of the well-formed UTF-8 sequence at @p (at most @n bytes) encoding a
 * printable code point, or 0. What is not UTF-8 and the C1 controls are rejected:
 * they would print misleadingly. */
static size_t utf8_printable(const unsigned char *p, size_t n)
{
    uint32_t cp;
    size_t len = pcr_utf8_seq(p, n, &cp);

    return len > 0 && cp >= 0xA0 ? len : 0;
}

size_t pcr_utf8_escape(char *out, const char *name, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)name;
    size_t i = 0, o = 0;

    while (i < len) {
        size_t u;

        if (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '\\') {
            out[o++] = (char)p[i++];
        } else if (p[i] >= 0x80 && (u = utf8_printable(p + i, len - i)) > 0) {
            memcpy(out + o, p + i, u);
            o += u;
            i += u;
        } else if (p[i] == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
            i++;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[p[i] >> 4];
            out[o++] = hex[p[i] & 15];
            i++;
        }
    }
    out[o] = '\0';
    return o;
}
