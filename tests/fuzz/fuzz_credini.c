/* libFuzzer target: http_cred_ini_find() (the AWS shared credentials and config
 * files) over arbitrary bytes, for both file kinds and a few profile names.
 *
 * Besides "no crash, no out-of-bounds read, no leak" (ASan/LSan), checks the
 * contract: 1 or 0 or -EINVAL only; on -EINVAL nothing is returned; every value
 * returned is a NUL-terminated string shorter than the input, found in it, without
 * a newline and without leading or trailing blanks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/creds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const profiles[] = {"default", "dev", "profile dev", ""};
    char *id, *secret, *token, *proc, *region;
    struct http_ini_want w[] = {{"aws_access_key_id", &id},
                                {"aws_secret_access_key", &secret},
                                {"aws_session_token", &token},
                                {"credential_process", &proc},
                                {"region", &region}};

    if (size > HTTP_CRED_MAX_DOC)
        return 0;
    for (unsigned p = 0; p < 4; p++)
        for (int config = 0; config < 2; config++) {
            int rc = http_cred_ini_find((const char *)data, size, profiles[p], config, w, 5);
            if (rc != 0 && rc != 1 && rc != -EINVAL)
                abort();
            for (unsigned k = 0; k < 5; k++) {
                char *v = *w[k].val;
                if (!v)
                    continue;
                size_t n = strlen(v);
                if (rc != 1 || n >= size || strchr(v, '\n') ||
                    (n && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t')) ||
                    (n && !memmem(data, size, v, n)))
                    abort();
                free(v);
            }
        }
    return 0;
}
