/* libFuzzer target: http_cred_parse_json() — the JSON of EC2 instance metadata,
 * container credentials and credential_process output — over arbitrary bytes.
 *
 * Besides "no crash, no out-of-bounds read, no leak", checks the contract: 0,
 * -EACCES or -EINVAL only, with a message on failure and nothing returned; on
 * success an id and a secret, non-empty, and every value printable ASCII without
 * spaces (they go into HTTP headers), and an expiry after 1970.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/creds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s > 0x7e)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int process = 0; process < 2; process++) {
        struct http_cred_doc d;
        char why[256] = "";
        int rc = http_cred_parse_json((const char *)data, size, process, &d, why, sizeof(why));
        if (rc != 0) {
            if ((rc != -EINVAL && rc != -EACCES) || !why[0] || d.id || d.secret || d.token)
                abort();
            continue;
        }
        if (!d.id || !d.secret || !*d.id || !*d.secret || d.expiry < 0)
            abort();
        printable(d.id);
        printable(d.secret);
        printable(d.token);
        http_cred_doc_free(&d);
        if (d.id || d.secret || d.token)
            abort();
    }
    return 0;
}
