/* libFuzzer target: http_cred_parse_sts() (STS's XML answer to
 * AssumeRoleWithWebIdentity, or its ErrorResponse) and http_cred_parse_time()
 * over arbitrary bytes.
 *
 * Besides "no crash, no out-of-bounds read, no leak", checks the contract: 0,
 * -EACCES (an error code, letters, digits and dots only) or -EINVAL, with a message
 * on failure and nothing returned; on success an id, a secret and a session token,
 * all non-empty printable ASCII, and an expiry after 1970.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/creds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s)
{
    if (!s || !*s)
        abort();
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s > 0x7e)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_cred_doc d;
    char why[256] = "", t[64];
    int64_t when;
    int rc = http_cred_parse_sts((const char *)data, size, &d, why, sizeof(why));

    if (rc != 0) {
        if ((rc != -EINVAL && rc != -EACCES) || !why[0] || d.id || d.secret || d.token)
            abort();
        for (const char *p = d.code; rc == -EACCES && *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '.')
                abort();
    } else {
        printable(d.id);
        printable(d.secret);
        printable(d.token);
        if (d.expiry < 0)
            abort();
        http_cred_doc_free(&d);
    }
    /* the time parser alone, on the input's first line */
    size_t n = size < sizeof(t) - 1 ? size : sizeof(t) - 1;
    memcpy(t, data, n);
    t[n] = '\0';
    if (http_cred_parse_time(t, &when) == 0 && when < 0)
        abort();
    return 0;
}
