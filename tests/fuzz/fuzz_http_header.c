/* libFuzzer target: http_header_line() (src/lib/backend/httphdr.c), the parser of
 * every response header line an object-storage server sends: status lines,
 * Content-Range, ETag, Retry-After.
 *
 * The input is cut at '\n' into lines, each handed over as libcurl does (the line
 * with its line end, unterminated), to one request as one response after another.
 * Besides "no crash, no read past the line" (ASan), checks the contract after every
 * line: the status is 0..999; the ETag is NUL-terminated within its buffer and
 * printable ASCII without spaces; Retry-After is at most HTTP_RETRY_AFTER_MAX_MS;
 * a parsed Content-Range (not flagged bad) came from digits that survived overflow
 * checks, so a < 2^64 and the flag is only set with has_crange.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/http_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct http_req *r)
{
    size_t n = strnlen(r->etag, sizeof(r->etag));

    if (r->status < 0 || r->status > 999)
        abort();
    if (n >= sizeof(r->etag))
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)r->etag[i] < 0x21 || (unsigned char)r->etag[i] > 0x7e)
            abort();
    if (r->retry_after_ms > HTTP_RETRY_AFTER_MAX_MS)
        abort();
    if (r->bad_hdr && !r->has_crange)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_req *r = calloc(1, sizeof(*r));
    size_t start = 0;

    if (!r)
        return 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != '\n')
            continue;
        size_t len = i - start + (i < size); /* the '\n' included, as libcurl passes it */
        /* a copy of exactly the line, so that ASan sees any read past it */
        char *line = malloc(len ? len : 1);
        if (!line)
            break;
        memcpy(line, data + start, len);
        http_header_line(r, line, len);
        free(line);
        check(r);
        start = i + 1;
    }
    free(r);
    return 0;
}
