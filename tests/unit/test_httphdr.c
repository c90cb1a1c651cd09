/* Unit test of the object-storage backend's response header parser (httphdr.c):
 * what it takes from status lines, Content-Range, ETag and Retry-After, and what it
 * refuses. Its robustness against any bytes is the fuzz target's
 * (tests/fuzz/fuzz_http_header.c); this checks the meaning. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "backend/http_internal.h"
#include "check.h"

static void feed(struct http_req *r, const char *line)
{
    http_header_line(r, line, strlen(line));
}

int main(void)
{
    struct http_req r;
    char date[64];
    time_t t;
    struct tm tm;

    memset(&r, 0, sizeof(r));
    feed(&r, "HTTP/1.1 206 Partial Content\r\n");
    feed(&r, "Content-Range: bytes 100-199/1000\r\n");
    feed(&r, "ETag: \"abc\"\r\n");
    CHECK(r.status == 206, "status %ld", r.status);
    CHECK(r.has_crange && !r.bad_hdr && r.cr_a == 100 && r.cr_b == 199 && r.cr_total == 1000,
          "Content-Range %llu-%llu/%llu", (unsigned long long)r.cr_a, (unsigned long long)r.cr_b,
          (unsigned long long)r.cr_total);
    CHECK(!strcmp(r.etag, "\"abc\""), "ETag %s", r.etag);

    feed(&r, "HTTP/1.1 200 OK\r\n"); /* a new response forgets the last one's headers */
    CHECK(r.status == 200 && !r.has_crange && !r.etag[0], "reset on a status line");
    feed(&r, "content-range: bytes 1-x/3\r\n");
    CHECK(r.has_crange && r.bad_hdr, "a malformed Content-Range is flagged");
    feed(&r, "ETag: \"a b\"\r\n");
    CHECK(!r.etag[0], "an ETag with a space is ignored");
    feed(&r, "Content-Range: bytes 0-99999999999999999999999/5\r\n");
    CHECK(r.bad_hdr, "an overflowing number is refused");

    /* Retry-After: seconds, capped; a date in the future; the past, garbage: none */
    feed(&r, "HTTP/1.1 503 Slow Down\r\n");
    feed(&r, "Retry-After: 2\r\n");
    CHECK(r.status == 503 && r.retry_after_ms == 2000, "Retry-After 2: %llu ms",
          (unsigned long long)r.retry_after_ms);
    feed(&r, "Retry-After: 86400\r\n");
    CHECK(r.retry_after_ms == HTTP_RETRY_AFTER_MAX_MS, "a day cut to the most: %llu",
          (unsigned long long)r.retry_after_ms);
    feed(&r, "Retry-After: 99999999999999999999999\r\n");
    CHECK(r.retry_after_ms == 0, "overflow ignored: %llu", (unsigned long long)r.retry_after_ms);
    feed(&r, "Retry-After: 2x\r\n");
    CHECK(r.retry_after_ms == 0, "garbage ignored");
    t = time(NULL) + 10;
    gmtime_r(&t, &tm);
    strftime(date, sizeof(date), "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    feed(&r, date);
    CHECK(r.retry_after_ms >= 8000 && r.retry_after_ms <= 10000, "a date 10 s ahead: %llu ms",
          (unsigned long long)r.retry_after_ms);
    feed(&r, "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    CHECK(r.retry_after_ms == 0, "a date in the past: no wait");
    feed(&r, "HTTP/1.1 503 Slow Down\r\n");
    CHECK(r.retry_after_ms == 0, "reset on a status line");
    return check_done("httphdr");
}
