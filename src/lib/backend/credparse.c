/* pcrfs — parsers of the untrusted bytes that carry AWS credentials (creds.h):
 *
 *   the shared credentials and config files (INI: "[name]", "[profile name]" or
 *   "[services name]" sections of "key = value" lines; indented lines under a key
 *   without a value are its sub-settings, "key.sub"),
 *   the JSON of EC2 instance metadata, of container credentials and of a
 *   credential_process ({"AccessKeyId": ..., "SecretAccessKey": ..., "Token" or
 *   "SessionToken": ..., "Expiration": "2026-01-02T03:04:05Z"}),
 *   STS's XML answer to AssumeRoleWithWebIdentity (or its ErrorResponse),
 *   and ISO 8601 UTC times.
 *
 * No I/O here, so that each parser is a fuzz target (tests/fuzz/fuzz_cred*.c). Every
 * input is bounded by the caller (HTTP_CRED_MAX_DOC bytes), every value by
 * HTTP_CRED_MAX_VALUE; anything malformed is refused whole, never half-used.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/internal.h"
#include "backend/credparse.h"

void http_cred_doc_free(struct http_cred_doc *d)
{
    char **v[] = {&d->id, &d->secret, &d->token};

    for (size_t i = 0; i < PCR_ARRAY_SIZE(v); i++) {
        if (*v[i])
            explicit_bzero(*v[i], strlen(*v[i]));
        free(*v[i]);
        *v[i] = NULL;
    }
    d->expiry = 0;
    d->code[0] = '\0';
}

/* Days from 1970-01-01 to @y-@m-@d (proleptic Gregorian; H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool digits(const char *s, unsigned n, unsigned *out)
{
    unsigned v = 0;

    for (unsigned i = 0; i < n; i++) {
        /* the caller measured s (strlen() >= 20), which the analyzer loses:
         * NOLINTNEXTLINE(clang-analyzer-core.uninitialized.ArraySubscript) */
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return true;
}

int http_cred_parse_time(const char *s, int64_t *out)
{
    unsigned y, mo, d, h, mi, se, oh = 0, om = 0;
    int sign = 0;
    const char *p;

    /* strlen(s) >= 20 makes s[0..19] defined, which the analyzer loses:
     * NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
    if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
        s[7] != '-' || !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &se))
        return -EINVAL;
    p = s + 19;
    if (*p == '.') /* fractions of a second: dropped */
        for (p++; isdigit((unsigned char)*p) && p - s < 40; p++)
            ;
    if ((*p == 'Z' || *p == 'z') && !p[1]) {
        sign = 0;
    } else if ((*p == '+' || *p == '-') && digits(p + 1, 2, &oh) && p[3] == ':' &&
               digits(p + 4, 2, &om) && !p[6]) {
        sign = *p == '+' ? 1 : -1;
    } else {
        return -EINVAL;
    }
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60 ||
        oh > 23 || om > 59)
        return -EINVAL;
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se -
           sign * (int64_t)(oh * 3600 + om * 60);
    return 0;
}

/* ---- INI ---- */

static char *trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* Whether section header text @h ("default", "profile  dev") names @profile in
 * the config file (@config: "[profile NAME]", "[default]") or the credentials
 * file ("[NAME]"). */
static bool section_is(const char *h, const char *profile, bool config)
{
    if (!config || !strcmp(h, "default"))
        return !strcmp(h, profile);
    if (!strncmp(profile, "services ", 9) && !strncmp(h, "services", 8) &&
        (h[8] == ' ' || h[8] == '\t')) {
        /* "[services NAME]": service-specific settings a profile points to */
        h += 8;
        while (*h == ' ' || *h == '\t')
            h++;
        return !strcmp(h, profile + 9);
    }
    if (!strncmp(h, "profile", 7) && (h[7] == ' ' || h[7] == '\t')) {
        h += 7;
        while (*h == ' ' || *h == '\t')
            h++;
        return !strcmp(h, profile);
    }
    return false; /* the config file's "[NAME]" without "profile ": not a profile */
}

int http_cred_ini_find(const char *buf, size_t len, const char *profile, bool config,
                       struct http_ini_want *w, unsigned n)
{
    char line[HTTP_CRED_MAX_VALUE + 256], parent[64] = "";
    bool in = false, found = false;
    size_t i = 0;

    for (unsigned k = 0; k < n; k++)
        *w[k].val = NULL;
    while (i < len) {
        size_t e = i, k;
        while (e < len && buf[e] != '\n')
            e++;
        k = e - i;
        if (k >= sizeof(line) || memchr(buf + i, '\0', k)) {
            /* a line no profile has: refused whole, not cut */
            for (unsigned j = 0; j < n; j++) {
                free(*w[j].val);
                *w[j].val = NULL;
            }
            return -EINVAL;
        }
        memcpy(line, buf + i, k);
        line[k] = '\0';
        i = e + 1;
        bool indented = line[0] == ' ' || line[0] == '\t';
        char *l = trim(line), *eq;
        if (!*l || *l == '#' || *l == ';')
            continue;
        if (*l == '[') {
            char *end = strchr(l, ']');
            if (!end) {
                in = false;
                continue;
            }
            *end = '\0';
            in = section_is(trim(l + 1), profile, config);
            parent[0] = '\0';
            found |= in;
            continue;
        }
        if (!in || !(eq = strchr(l, '=')))
            continue;
        *eq = '\0';
        l = trim(l);
        char *val = trim(eq + 1), full[160];
        if (indented && !parent[0])
            continue; /* a continuation of a value: not a setting of its own */
        if (indented) {
            /* a sub-setting ("s3 =\n  endpoint_url = URL"): wanted as "s3.endpoint_url" */
            snprintf(full, sizeof(full), "%s.%.80s", parent, l);
            l = full;
        } else {
            snprintf(parent, sizeof(parent), "%.63s", *val ? "" : l);
        }
        for (unsigned j = 0; j < n; j++) {
            if (strcmp(l, w[j].key) != 0)
                continue;
            char *v = strdup(val);
            if (!v)
                return -ENOMEM;
            if (*w[j].val) {
                explicit_bzero(*w[j].val, strlen(*w[j].val));
                free(*w[j].val);
            }
            *w[j].val = v;
        }
    }
    return found ? 1 : 0;
}

/* ---- JSON ---- */

struct jp {
    const char *p, *end;
    int depth;
};

static void ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A JSON string at j->p into @out (UTF-8, at most @cap - 1 bytes, no NUL inside), or
 * skipped when @out is NULL. */
static int jstring(struct jp *j, char *out, size_t cap)
{
    size_t n = 0;

    if (j->p >= j->end || *j->p != '"')
        return -EINVAL;
    j->p++;
    for (;;) {
        unsigned c;
        if (j->p >= j->end)
            return -EINVAL;
        c = (unsigned char)*j->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return -EINVAL;
        if (c == '\\') {
            if (j->p >= j->end)
                return -EINVAL;
            c = (unsigned char)*j->p++;
            switch (c) {
            case '"':
            case '\\':
            case '/':
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'u': {
                int v = 0;
                if (j->end - j->p < 4)
                    return -EINVAL;
                for (int k = 0; k < 4; k++) {
                    int h = hexval(j->p[k]);
                    if (h < 0)
                        return -EINVAL;
                    v = v * 16 + h;
                }
                j->p += 4;
                /* credentials are ASCII: anything else (and NUL) is refused */
                if (v == 0 || v > 0x7e)
                    return -EINVAL;
                c = (unsigned)v;
                break;
            }
            default:
                return -EINVAL;
            }
        }
        if (out) {
            if (n + 1 >= cap)
                return -E2BIG;
            out[n++] = (char)c;
        }
    }
    if (out)
        out[n] = '\0';
    return 0;
}

static int jvalue(struct jp *j);

static int jnumber(struct jp *j, long long *out)
{
    const char *s = j->p;
    long long v = 0;
    bool neg = false, intpart = true;

    if (s < j->end && *s == '-') {
        neg = true;
        s++;
    }
    if (s >= j->end || !isdigit((unsigned char)*s))
        return -EINVAL;
    for (; s < j->end && isdigit((unsigned char)*s); s++)
        if (v < 100000000000000LL)
            v = v * 10 + (*s - '0');
    if (s < j->end && *s == '.') {
        intpart = false;
        if (++s >= j->end || !isdigit((unsigned char)*s))
            return -EINVAL;
        while (s < j->end && isdigit((unsigned char)*s))
            s++;
    }
    if (s < j->end && (*s == 'e' || *s == 'E')) {
        intpart = false;
        s++;
        if (s < j->end && (*s == '+' || *s == '-'))
            s++;
        if (s >= j->end || !isdigit((unsigned char)*s))
            return -EINVAL;
        while (s < j->end && isdigit((unsigned char)*s))
            s++;
    }
    j->p = s;
    if (out)
        *out = intpart ? (neg ? -v : v) : -1;
    return 0;
}

static int jword(struct jp *j, const char *w)
{
    size_t n = strlen(w);

    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return -EINVAL;
    j->p += n;
    return 0;
}

/* Skip any value (nested at most 16 deep). */
static int jvalue(struct jp *j)
{
    int ret;

    ws(j);
    if (j->p >= j->end)
        return -EINVAL;
    switch (*j->p) {
    case '"':
        return jstring(j, NULL, 0);
    case 't':
        return jword(j, "true");
    case 'f':
        return jword(j, "false");
    case 'n':
        return jword(j, "null");
    case '{':
    case '[': {
        char close = *j->p == '{' ? '}' : ']';
        bool obj = close == '}', first = true;
        if (++j->depth > 16)
            return -EINVAL;
        j->p++;
        for (;;) {
            ws(j);
            if (j->p < j->end && *j->p == close && first) {
                j->p++;
                break;
            }
            if (obj) {
                if ((ret = jstring(j, NULL, 0)) != 0)
                    return ret;
                ws(j);
                if (j->p >= j->end || *j->p++ != ':')
                    return -EINVAL;
            }
            if ((ret = jvalue(j)) != 0)
                return ret;
            ws(j);
            first = false;
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                break;
            }
            return -EINVAL;
        }
        j->depth--;
        return 0;
    }
    default:
        return jnumber(j, NULL);
    }
}

static int take(char **dst, const char *v)
{
    if (*dst) /* a key given twice: which one would AWS use? refused */
        return -EINVAL;
    *dst = strdup(v);
    return *dst ? 0 : -ENOMEM;
}

int http_cred_parse_json(const char *buf, size_t len, bool process, struct http_cred_doc *d,
                         char *err, size_t errlen)
{
    struct jp j = {.p = buf, .end = buf + len};
    char key[64], *val = NULL;
    char when[64] = "";
    long long version = 0;
    bool has_token = false;
    int ret = -EINVAL;

    memset(d, 0, sizeof(*d));
    if (len > HTTP_CRED_MAX_DOC)
        goto bad;
    val = malloc(HTTP_CRED_MAX_VALUE);
    if (!val)
        return -ENOMEM;
    ws(&j);
    if (j.p >= j.end || *j.p++ != '{')
        goto bad;
    ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
        goto done;
    }
    for (;;) {
        ws(&j);
        if (jstring(&j, key, sizeof(key)) != 0) /* no key of 64 bytes or more is ours */
            goto bad;
        ws(&j);
        if (j.p >= j.end || *j.p++ != ':')
            goto bad;
        ws(&j);
        bool want = !strcmp(key, "AccessKeyId") || !strcmp(key, "SecretAccessKey") ||
                    !strcmp(key, "Token") || !strcmp(key, "SessionToken") ||
                    !strcmp(key, "Expiration") || !strcmp(key, "Code");
        if (want && j.p < j.end && *j.p == '"') {
            if (jstring(&j, val, HTTP_CRED_MAX_VALUE) != 0)
                goto bad;
            if (!strcmp(key, "AccessKeyId"))
                ret = take(&d->id, val);
            else if (!strcmp(key, "SecretAccessKey"))
                ret = take(&d->secret, val);
            else if (!strcmp(key, "Token") || !strcmp(key, "SessionToken")) {
                ret = has_token ? -EINVAL : take(&d->token, val);
                has_token = true;
            } else if (!strcmp(key, "Expiration")) {
                snprintf(when, sizeof(when), "%.63s", val);
                ret = 0;
            } else {
                snprintf(d->code, sizeof(d->code), "%.63s", val);
                ret = 0;
            }
            if (ret)
                goto bad;
        } else if (!strcmp(key, "Version") && j.p < j.end && *j.p != '"') {
            if (jnumber(&j, &version) != 0)
                goto bad;
        } else if (want && j.p < j.end && !strcmp(key, "Expiration") && !jword(&j, "null")) {
            /* "Expiration": null: no expiry */
        } else if (jvalue(&j) != 0) {
            goto bad;
        }
        ws(&j);
        if (j.p < j.end && *j.p == ',') {
            j.p++;
            continue;
        }
        if (j.p < j.end && *j.p == '}') {
            j.p++;
            break;
        }
        goto bad;
    }
done:
    ws(&j);
    if (j.p != j.end)
        goto bad;
    free(val);
    val = NULL;
    if (d->code[0] && strcmp(d->code, "Success") != 0) {
        pcr_errf(err, errlen, "the answer says %s", d->code);
        http_cred_doc_free(d);
        return -EACCES;
    }
    if (process && version != 1) {
        pcr_errf(err, errlen, "output without \"Version\": 1");
        http_cred_doc_free(d);
        return -EINVAL;
    }
    if (!d->id || !d->secret || !*d->id || !*d->secret) {
        pcr_errf(err, errlen, "no AccessKeyId and SecretAccessKey in the answer");
        http_cred_doc_free(d);
        return -EINVAL;
    }
    if (when[0] && http_cred_parse_time(when, &d->expiry) != 0) {
        pcr_errf(err, errlen, "Expiration is not an ISO 8601 time");
        http_cred_doc_free(d);
        return -EINVAL;
    }
    return http_cred_check(d, err, errlen);
bad:
    if (val) {
        explicit_bzero(val, HTTP_CRED_MAX_VALUE);
        free(val);
    }
    http_cred_doc_free(d);
    pcr_errf(err, errlen, "not a credentials document (malformed JSON)");
    return -EINVAL;
}

int http_cred_check(struct http_cred_doc *d, char *err, size_t errlen)
{
    const char *v[] = {d->id, d->secret, d->token};

    /* they go into HTTP headers: printable ASCII only, no header splitting */
    for (size_t i = 0; i < PCR_ARRAY_SIZE(v); i++)
        for (const char *p = v[i]; p && *p; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p > 0x7e) {
                pcr_errf(err, errlen, "a credential with spaces or control characters");
                http_cred_doc_free(d);
                return -EINVAL;
            }
    return 0;
}

/* ---- STS XML ---- */

/* The text of the first <@tag>...</@tag> within [s, end), entities decoded, into a
 * new string (*out). @return 0, -ENOENT none, -EINVAL malformed, -ENOMEM. */
static int xml_text(const char *s, const char *end, const char *tag, char **out)
{
    char open[48], close[48];
    const char *a, *b;
    size_t n = 0;
    char *v;

    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    a = memmem(s, (size_t)(end - s), open, strlen(open));
    if (!a)
        return -ENOENT;
    a += strlen(open);
    b = memmem(a, (size_t)(end - a), close, strlen(close));
    if (!b || b - a >= HTTP_CRED_MAX_VALUE)
        return -EINVAL;
    v = malloc((size_t)(b - a) + 1);
    if (!v)
        return -ENOMEM;
    for (const char *p = a; p < b;) {
        static const struct {
            const char *ent;
            char c;
        } ents[] = {
            {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        if (*p == '<' || *p == '\0') {
            free(v);
            return -EINVAL;
        }
        if (*p == '&') {
            size_t k;
            for (k = 0; k < PCR_ARRAY_SIZE(ents); k++) {
                size_t el = strlen(ents[k].ent);
                if ((size_t)(b - p) >= el && !memcmp(p, ents[k].ent, el)) {
                    v[n++] = ents[k].c;
                    p += el;
                    break;
                }
            }
            if (k == PCR_ARRAY_SIZE(ents)) {
                free(v);
                return -EINVAL;
            }
            continue;
        }
        v[n++] = *p++;
    }
    v[n] = '\0';
    *out = v;
    return 0;
}

int http_cred_parse_sts(const char *buf, size_t len, struct http_cred_doc *d, char *err,
                        size_t errlen)
{
    const char *c, *ce, *end = buf + len;
    char *when = NULL, *code = NULL;
    int ret;

    memset(d, 0, sizeof(*d));
    if (len > HTTP_CRED_MAX_DOC || memchr(buf, '\0', len)) {
        pcr_errf(err, errlen, "not an STS answer");
        return -EINVAL;
    }
    c = memmem(buf, len, "<Credentials>", 13);
    ce = c ? memmem(c, (size_t)(end - c), "</Credentials>", 14) : NULL;
    if (!c || !ce) {
        /* <ErrorResponse><Error><Code>AccessDenied</Code>...: the code, for messages */
        if (xml_text(buf, end, "Code", &code) == 0) {
            size_t k = 0;
            for (const char *p = code; *p && k + 1 < sizeof(d->code); p++)
                if (isalnum((unsigned char)*p) || *p == '.')
                    d->code[k++] = *p;
            d->code[k] = '\0';
            free(code);
            pcr_errf(err, errlen, "STS refused: %s", d->code);
            return -EACCES;
        }
        pcr_errf(err, errlen, "not an STS answer (no <Credentials>)");
        return -EINVAL;
    }
    ce += 14;
    if ((ret = xml_text(c, ce, "AccessKeyId", &d->id)) != 0 ||
        (ret = xml_text(c, ce, "SecretAccessKey", &d->secret)) != 0 ||
        (ret = xml_text(c, ce, "SessionToken", &d->token)) != 0 ||
        (ret = xml_text(c, ce, "Expiration", &when)) != 0) {
        http_cred_doc_free(d);
        if (ret == -ENOMEM)
            return ret;
        pcr_errf(err, errlen, "an STS answer without a whole set of credentials");
        return -EINVAL;
    }
    ret = http_cred_parse_time(when, &d->expiry);
    free(when);
    if (ret || !*d->id || !*d->secret || !*d->token) {
        http_cred_doc_free(d);
        pcr_errf(err, errlen, "an STS answer with an empty key or a bad Expiration");
        return -EINVAL;
    }
    return http_cred_check(d, err, errlen);
}
