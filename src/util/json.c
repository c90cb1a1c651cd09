/* pcrfs util — the JSON writer (see json.h). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "util/json.h"
#include "util/utf8.h"

void pcr_json_init(struct pcr_json *j, FILE *f)
{
    memset(j, 0, sizeof(*j));
    j->f = f;
}

static bool reserve(struct pcr_json *j, size_t more)
{
    size_t cap;
    char *p;

    if (j->oom)
        return false;
    if (j->len + more + 1 <= j->cap)
        return true;
    cap = j->cap ? j->cap : 1024;
    while (cap < j->len + more + 1)
        cap *= 2;
    p = realloc(j->p, cap);
    if (!p) {
        j->oom = true;
        return false;
    }
    j->p = p;
    j->cap = cap;
    return true;
}

void pcr_json_raw(struct pcr_json *j, const char *s, size_t n)
{
    if (j->f) {
        fwrite(s, 1, n, j->f);
        return;
    }
    if (!reserve(j, n))
        return;
    memcpy(j->p + j->len, s, n);
    j->len += n;
    j->p[j->len] = '\0';
}

void pcr_json_puts(struct pcr_json *j, const char *s)
{
    pcr_json_raw(j, s, strlen(s));
}

void pcr_json_vprintf(struct pcr_json *j, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;

    if (j->f) {
        vfprintf(j->f, fmt, ap);
        return;
    }
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !reserve(j, (size_t)n))
        return;
    vsnprintf(j->p + j->len, (size_t)n + 1, fmt, ap);
    j->len += (size_t)n;
}

void pcr_json_printf(struct pcr_json *j, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    pcr_json_vprintf(j, fmt, ap);
    va_end(ap);
}

void pcr_json_quote(struct pcr_json *j, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run, k;

    pcr_json_raw(j, "\"", 1);
    while (i < n) {
        /* Copy runs of bytes that need nothing in one go. */
        for (run = i; run < n; run += k) {
            unsigned char c = s[run];

            if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f)
                break;
            if ((k = pcr_utf8_seq(s + run, n - run, NULL)) == 0)
                break;
        }
        if (run > i) {
            pcr_json_raw(j, str + i, run - i);
            i = run;
            continue;
        }
        if (s[i] == '"' || s[i] == '\\') {
            char esc[2] = {'\\', (char)s[i]};

            pcr_json_raw(j, esc, 2);
        } else if (s[i] < 0x20 || s[i] == 0x7f) {
            char esc[8];

            snprintf(esc, sizeof(esc), "\\u%04x", s[i]);
            pcr_json_raw(j, esc, 6);
        } else {
            pcr_json_raw(j, "\\ufffd", 6); /* not UTF-8 */
        }
        i++;
    }
    pcr_json_raw(j, "\"", 1);
}

void pcr_json_strn(struct pcr_json *j, const char *s, size_t n)
{
    pcr_json_quote(j, s, n);
}

void pcr_json_str(struct pcr_json *j, const char *s)
{
    if (!s) {
        pcr_json_null(j);
        return;
    }
    pcr_json_strn(j, s, strlen(s));
}

void pcr_json_double(struct pcr_json *j, double v, int prec)
{
    if (isnan(v) || isinf(v))
        pcr_json_raw(j, "null", 4);
    else
        pcr_json_printf(j, "%.*f", prec, v);
}

void pcr_json_null(struct pcr_json *j)
{
    pcr_json_raw(j, "null", 4);
}

void pcr_json_numtext(struct pcr_json *j, const char *s)
{
    size_t i;

    if (!s) {
        pcr_json_null(j);
        return;
    }
    for (i = 0; s[i] >= '0' && s[i] <= '9'; i++)
        ;
    if (i > 0 && i < 19 && s[i] == '\0' && (s[0] != '0' || i == 1)) {
        pcr_json_raw(j, s, i);
    } else {
        pcr_json_str(j, s);
    }
}

void pcr_json_fquote(FILE *f, const char *s)
{
    struct pcr_json j;

    if (!f) /* a writer without a file would build a buffer nobody frees */
        return;
    pcr_json_init(&j, f);
    pcr_json_quote(&j, s, strlen(s));
}
