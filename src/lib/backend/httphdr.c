/* pcrfs — response header lines of the object-storage backend: untrusted bytes.
 *
 * libcurl hands every header line of every response (100 Continue, redirects and
 * the final one) to http_header_line() as it arrives, unterminated and of any
 * length. Only what the backend uses is parsed: the status line, Content-Range
 * (which range came back), ETag (If-Match on later reads) and Retry-After (how long
 * a throttling server asks us to wait); each is checked field by field, anything
 * malformed is either flagged (Content-Range: the body is then refused) or ignored
 * (ETag, Retry-After). Lines longer than 255 bytes are cut; no header the backend
 * uses is that long. Kept apart from the transport (httpxfer.c) so that the fuzz target
 * (tests/fuzz/fuzz_http_header.c) exercises exactly this code.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "backend/httpreq.h"

static bool parse_u64(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;

    if (!isdigit((unsigned char)*s))
        return false;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    *out = v;
    return true;
}

/* Retry-After: delta-seconds or an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
 * @return the wait in ms, cut to HTTP_RETRY_AFTER_MAX_MS; 0 for a date in the past
 * or a value that is neither. */
static uint64_t retry_after(const char *p)
{
    uint64_t v;
    struct tm tm;
    const char *end;

    if (parse_u64(&p, &v)) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p)
            return 0;
        return v >= HTTP_RETRY_AFTER_MAX_MS / 1000 ? HTTP_RETRY_AFTER_MAX_MS : v * 1000;
    }
    memset(&tm, 0, sizeof(tm));
    end = strptime(p, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!end || *end)
        return 0;
    time_t at = timegm(&tm), now = time(NULL);
    if (at == (time_t)-1 || at <= now)
        return 0;
    return (uint64_t)(at - now) >= HTTP_RETRY_AFTER_MAX_MS / 1000 ? HTTP_RETRY_AFTER_MAX_MS
                                                                  : (uint64_t)(at - now) * 1000;
}

void http_header_line(struct http_req *r, const char *data, size_t n)
{
    size_t k;
    char line[256];

    k = n < sizeof(line) - 1 ? n : sizeof(line) - 1;
    memcpy(line, data, k);
    line[k] = '\0';
    k = strlen(line); /* a NUL inside the line ends it */
    while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n'))
        line[--k] = '\0';
    if (!strncmp(line, "HTTP/", 5)) {
        /* a new response (after a 100 Continue, say): forget the last one's headers */
        const char *sp = strchr(line, ' ');
        uint64_t st = 0;
        r->status = 0;
        if (sp && (sp++, parse_u64(&sp, &st)) && st < 1000)
            r->status = (long)st;
        r->has_crange = r->bad_hdr = false;
        r->etag[0] = '\0';
        r->nbody = 0;
        r->retry_after_ms = 0;
        return;
    }
    if (!strncasecmp(line, "content-range:", 14)) {
        const char *p = line + 14;
        while (*p == ' ')
            p++;
        r->has_crange = true;
        if (strncasecmp(p, "bytes ", 6) != 0) {
            r->bad_hdr = true;
            return;
        }
        p += 6;
        if (!parse_u64(&p, &r->cr_a) || *p++ != '-' || !parse_u64(&p, &r->cr_b) || *p++ != '/' ||
            (*p != '*' && !parse_u64(&p, &r->cr_total)))
            r->bad_hdr = true;
        else if (*p == '*')
            r->cr_total = UINT64_MAX;
    } else if (!strncasecmp(line, "etag:", 5)) {
        const char *p = line + 5;
        size_t len;
        while (*p == ' ')
            p++;
        len = strlen(p);
        r->etag[0] = '\0';
        if (len <= HTTP_MAX_ETAG) {
            for (size_t i = 0; i < len; i++)
                if ((unsigned char)p[i] < 0x21 || (unsigned char)p[i] > 0x7e)
                    return; /* not a token: ignored */
            memcpy(r->etag, p, len + 1);
        }
    } else if (!strncasecmp(line, "retry-after:", 12)) {
        const char *p = line + 12;
        while (*p == ' ' || *p == '\t')
            p++;
        r->retry_after_ms = retry_after(p);
    }
}
