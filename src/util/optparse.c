/* pcrfs util — strict option values (optparse.h says what each form takes).
 *
 * The C library's strtoul()/strtod() and fuse_opt's "%d"/"%lf" accept far more than
 * the man pages promise: leading spaces, a sign ("-1" as a huge unsigned), hex and
 * octal prefixes, exponents, "inf", and trailing bytes they silently drop ("10Q" is
 * 10). So the syntax is checked here byte by byte first; the C library only
 * converts a string already known to be a plain decimal.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optparse.h"

#define SHOW_MAX 64 /* bytes of a value quoted in a message */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* @s for a message: control bytes and DEL as \xHH, at most SHOW_MAX bytes, then
 * "...". */
static void show(const char *s, char *buf, size_t n)
{
    size_t i, o = 0;

    for (i = 0; s[i] && o + 5 < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (i == SHOW_MAX) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
}

static void vmsg(char *msg, size_t len, const char *name, const char *s, const char *fmt,
                 va_list ap)
{
    char val[SHOW_MAX * 4 + 8];
    int n;

    if (!msg || !len)
        return;
    show(s, val, sizeof(val));
    n = snprintf(msg, len, "%s=%s: ", name, val);
    if (n >= 0 && (size_t)n < len)
        vsnprintf(msg + n, len - (size_t)n, fmt, ap);
}

void pcr_opt_msg(char *msg, size_t len, const char *name, const char *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg(msg, len, name, s, fmt, ap);
    va_end(ap);
}

/* Length of the decimal that @s starts with ("5", "0.5", ".5"; not "5." or "."), 0 if
 * none; the number of digits after the point in *@nfrac. */
static size_t scan_decimal(const char *s, size_t *nfrac)
{
    size_t i = 0, nint, nf = 0;

    while (is_digit(s[i]))
        i++;
    nint = i;
    if (s[i] == '.') {
        i++;
        while (is_digit(s[i + nf]))
            nf++;
        if (!nf)
            return 0;
        i += nf;
    }
    if (!nint && !nf)
        return 0;
    *nfrac = nf;
    return i;
}

/* The decimal that is all of @s (C locale: the programs never call setlocale()).
 * @return 0, or -1 if @s is not one or too large for a double. */
static int to_double(const char *s, double *out)
{
    size_t nf;

    if (!s[0] || scan_decimal(s, &nf) != strlen(s))
        return -1;
    *out = strtod(s, NULL);
    return isfinite(*out) ? 0 : -1;
}

/* " (UNIT)" or "" */
static const char *paren(const char *unit, char *buf, size_t n)
{
    if (!unit || !unit[0])
        return "";
    snprintf(buf, n, " (%s)", unit);
    return buf;
}

int pcr_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max, const char *unit,
                 uint64_t *out, char *msg, size_t len)
{
    uint64_t v = 0;
    bool over = false;
    size_t i;
    char u[64];

    for (i = 0; is_digit(s[i]); i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (v > (UINT64_MAX - d) / 10)
            over = true;
        else
            v = v * 10 + d;
    }
    if (i == 0 || s[i] || over || v < min || v > max) {
        pcr_opt_msg(msg, len, name, s, "want a whole number %llu..%llu%s", (unsigned long long)min,
                    (unsigned long long)max, paren(unit, u, sizeof(u)));
        return -1;
    }
    *out = v;
    return 0;
}

/* A bound for a message: whole numbers in full ("31536000", not "3.1536e+07"). */
static const char *num(double v, char *buf, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
    return buf;
}

/* "MIN..MAX", "(MIN, MAX]", ... */
static void interval(char *buf, size_t n, double min, double max, unsigned flags)
{
    char a[32], b[32];

    if (!flags)
        snprintf(buf, n, "%s..%s", num(min, a, sizeof(a)), num(max, b, sizeof(b)));
    else
        snprintf(buf, n, "%c%s, %s%c", flags & PCR_OPT_GT_MIN ? '(' : '[', num(min, a, sizeof(a)),
                 num(max, b, sizeof(b)), flags & PCR_OPT_LT_MAX ? ')' : ']');
}

static bool in_range(double v, double min, double max, unsigned flags)
{
    if (flags & PCR_OPT_GT_MIN ? !(v > min) : !(v >= min))
        return false;
    return flags & PCR_OPT_LT_MAX ? v < max : v <= max;
}

int pcr_opt_real(const char *name, const char *s, double min, double max, unsigned flags,
                 const char *unit, double *out, char *msg, size_t len)
{
    double v;
    char iv[96], u[64];

    if (to_double(s, &v) != 0 || !in_range(v, min, max, flags)) {
        interval(iv, sizeof(iv), min, max, flags);
        pcr_opt_msg(msg, len, name, s, "want a decimal number %s%s", iv, paren(unit, u, sizeof(u)));
        return -1;
    }
    *out = v;
    return 0;
}

/* @v bytes the short way: "1000G", "12500k", "7". */
static void si(char *buf, size_t n, uint64_t v)
{
    static const char suffix[] = "GMk";
    uint64_t m = UINT64_C(1000000000);

    for (int i = 0; i < 3; i++, m /= 1000)
        if (v && v % m == 0) {
            snprintf(buf, n, "%llu%c", (unsigned long long)(v / m), suffix[i]);
            return;
        }
    snprintf(buf, n, "%llu", (unsigned long long)v);
}

/* Exact: the integer and fraction digits are scaled in integers, so "12.5M" is
 * 12500000 and "0.0001k" is no whole number, never a rounded double. */
static int size_value(const char *s, uint64_t *out)
{
    uint64_t ip = 0, fp = 0, mult = 1, scale = 1;
    size_t nf, n = scan_decimal(s, &nf), i, nfrac;
    const char *frac;

    if (!n)
        return -1;
    switch (s[n]) {
    case '\0':
        break;
    case 'k':
    case 'K':
        mult = 1000;
        break;
    case 'M':
        mult = 1000000;
        break;
    case 'G':
        mult = 1000000000;
        break;
    default:
        return -1;
    }
    if (s[n] && s[n + 1])
        return -1; /* "5MB", "5Mi" */
    for (i = 0; is_digit(s[i]); i++) {
        uint64_t d = (uint64_t)(s[i] - '0');

        if (ip > (UINT64_MAX - d) / 10)
            return 1; /* too large */
        ip = ip * 10 + d;
    }
    frac = s[i] == '.' ? s + i + 1 : "";
    for (nfrac = nf; nfrac > 0 && frac[nfrac - 1] == '0'; nfrac--)
        ; /* "1.500k": trailing zeros change nothing */
    for (i = 0; i < nfrac; i++) {
        if (scale >= mult)
            return -1; /* a fraction of a byte */
        fp = fp * 10 + (uint64_t)(frac[i] - '0');
        scale *= 10;
    }
    if (ip > UINT64_MAX / mult)
        return 1;
    ip *= mult;
    fp *= mult / scale;
    if (ip > UINT64_MAX - fp)
        return 1;
    *out = ip + fp;
    return 0;
}

int pcr_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, const char *unit,
                 uint64_t *out, char *msg, size_t len)
{
    uint64_t v = 0;
    char lo[32], hi[32];

    if (size_value(s, &v) != 0 || v < min || v > max) {
        si(lo, sizeof(lo), min);
        si(hi, sizeof(hi), max);
        pcr_opt_msg(msg, len, name, s,
                    "want %s: a whole number %s..%s, with an optional suffix k, M or G "
                    "(10^3, 10^6, 10^9), e.g. 50M",
                    unit, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int pcr_opt_word(const char *name, const char *s, const char *const *words, unsigned *out,
                 char *msg, size_t len)
{
    char list[256] = "";
    size_t n = 0, o = 0;

    for (n = 0; words[n]; n++)
        if (strcmp(s, words[n]) == 0) {
            *out = (unsigned)n;
            return 0;
        }
    for (size_t i = 0; i < n && o < sizeof(list); i++) {
        int k = snprintf(list + o, sizeof(list) - o, "%s%s",
                         i == 0      ? ""
                         : i + 1 < n ? ", "
                                     : " or ",
                         words[i]);
        if (k < 0)
            break;
        o += (size_t)k;
    }
    pcr_opt_msg(msg, len, name, s, "want %s", list);
    return -1;
}

int pcr_opt_threshold(const char *name, const char *s, double *out, char *msg, size_t len)
{
    size_t nf = 0;
    double v = 0;
    bool ok = to_double(s, &v) == 0 && scan_decimal(s, &nf) > 0;

    if (!ok || nf > PCR_OPT_THRESHOLD_DECIMALS || !(v > 0.0 && v <= 1.0)) {
        pcr_opt_msg(msg, len, name, s,
                    "want a threshold in (0, 1] with at most %d digits after the point, "
                    "e.g. 0.95",
                    PCR_OPT_THRESHOLD_DECIMALS);
        return -1;
    }
    *out = v;
    return 0;
}

/* A decimal or N/D: the @n bytes at @s. @return 0 or -1. */
static int frac_value(const char *s, size_t n, double *out)
{
    char buf[SHOW_MAX + 1], *slash;
    double num, den = 1.0;

    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    if (to_double(buf, &num) != 0)
        return -1;
    if (slash && (to_double(slash + 1, &den) != 0 || !(den > 0)))
        return -1;
    *out = num / den;
    return isfinite(*out) ? 0 : -1;
}

int pcr_opt_frac_range(const char *name, const char *s, double min, double max, unsigned flags,
                       const char *what, double out[2], char *msg, size_t len)
{
    const char *sep = strpbrk(s, ":,");
    double v[2];
    char lo[40], hi[40], a[32];

    if (sep && !strpbrk(sep + 1, ":,") && frac_value(s, (size_t)(sep - s), &v[0]) == 0 &&
        frac_value(sep + 1, strlen(sep + 1), &v[1]) == 0 && in_range(v[0], min, max, flags) &&
        in_range(v[1], min, max, flags) && v[0] <= v[1]) {
        out[0] = v[0];
        out[1] = v[1];
        return 0;
    }
    snprintf(lo, sizeof(lo), "%s %s ", num(min, a, sizeof(a)), flags & PCR_OPT_GT_MIN ? "<" : "<=");
    if (isinf(max))
        hi[0] = '\0';
    else
        snprintf(hi, sizeof(hi), " %s %s",
                 flags & PCR_OPT_LT_MAX ? "<" : "<=", num(max, a, sizeof(a)));
    pcr_opt_msg(msg, len, name, s,
                "want LO:HI, %s with %sLO <= HI%s (each a decimal or N/D, e.g. 3/4)", what, lo, hi);
    return -1;
}

int pcr_opt_level(const char *name, const char *s, uint32_t *out, char *msg, size_t len)
{
    uint64_t v = 0;
    size_t i;

    if (strcmp(s, "full") == 0) {
        *out = PCR_OPT_LEVEL_FULL;
        return 0;
    }
    for (i = 0; is_digit(s[i]); i++)
        if (v < PCR_OPT_LEVEL_FULL)
            v = v * 10 + (uint64_t)(s[i] - '0');
    if (i == 0 || s[i]) {
        pcr_opt_msg(msg, len, name, s,
                    "want a level: a whole number 1..L (the store's levels) "
                    "or full");
        return -1;
    }
    *out = v >= PCR_OPT_LEVEL_FULL ? PCR_OPT_LEVEL_FULL - 1 : (uint32_t)v;
    return 0;
}
