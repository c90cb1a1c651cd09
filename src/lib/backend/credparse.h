/* pcrfs — the parsers of what AWS credential providers answer (credparse.c): INI,
 * JSON, STS XML and ISO 8601, no I/O (fuzz targets). Below creds.c, which includes
 * this header through creds.h; private to src/lib/backend.
 */
#ifndef PCRFS_CREDPARSE_H
#define PCRFS_CREDPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_CRED_MAX_DOC   (64u * 1024) /* an answer, a file or process output */
#define HTTP_CRED_MAX_VALUE 8192         /* one value (session tokens are ~1-2 KB) */

/* A set of credentials as a provider answered it. */
struct http_cred_doc {
    char *id, *secret, *token; /* malloc()ed; token NULL without a session */
    int64_t expiry;            /* Unix time; 0: does not expire */
    char code[64];             /* an error code in the answer ("AccessDenied") */
};
void http_cred_doc_free(struct http_cred_doc *d); /* zeroes the secrets */
/* Refuse (and free) credentials that could not go into a header as they are. */
int http_cred_check(struct http_cred_doc *d, char *err, size_t errlen);

/* "2026-01-02T03:04:05Z", fractions and "+HH:MM" allowed. @return 0; -EINVAL. */
int http_cred_parse_time(const char *s, int64_t *out);

/* One key wanted from a profile: *val is set to a new string (or NULL). */
struct http_ini_want {
    const char *key;
    char **val;
};
/* Values of section @profile of an AWS shared file (@config: the config file's
 * "[profile NAME]"/"[default]", or "[services NAME]" when @profile is "services
 * NAME"; else the credentials file's "[NAME]"); the last of a key given twice wins;
 * "s3.endpoint_url" is the sub-setting endpoint_url of key "s3". @return 1 the profile exists, 0
 * not, -EINVAL a line longer than HTTP_CRED_MAX_VALUE or with a NUL, -ENOMEM. */
int http_cred_ini_find(const char *buf, size_t len, const char *profile, bool config,
                       struct http_ini_want *w, unsigned n);

/* The JSON of EC2 instance metadata, container credentials, or (@process) a
 * credential_process, which must say "Version": 1. @return 0; -EACCES the answer
 * carries a "Code" other than "Success"; -EINVAL (message in @err); -ENOMEM. */
int http_cred_parse_json(const char *buf, size_t len, bool process, struct http_cred_doc *d,
                         char *err, size_t errlen);
/* STS's answer to AssumeRoleWithWebIdentity. @return 0; -EACCES an ErrorResponse
 * (its code in d->code); -EINVAL; -ENOMEM. */
int http_cred_parse_sts(const char *buf, size_t len, struct http_cred_doc *d, char *err,
                        size_t errlen);

#endif
