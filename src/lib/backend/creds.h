/* pcrfs — AWS credentials for s3:// stores: the default provider chain, refresh,
 * and the parsers of what the providers answer. Private to src/lib/backend.
 *
 *   creds.c      the chain (environment, web identity, shared files with
 *                credential_process, container, EC2 instance metadata), the
 *                current credentials behind a lock, their refresh
 *   credparse.c  INI, JSON, STS XML and ISO 8601 parsers (no I/O: fuzz targets)
 */
#ifndef PCRFS_CREDS_H
#define PCRFS_CREDS_H

#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>

#define HTTP_CRED_MAX_DOC   (64u * 1024) /* an answer, a file or process output */
#define HTTP_CRED_MAX_VALUE 8192         /* one value (session tokens are ~1-2 KB) */

/* ---- credparse.c ---- */

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

/* ---- creds.c ---- */

/* Setting @key ("region", "endpoint_url", "ca_bundle") of the profile (@profile, or
 * AWS_PROFILE, ...) in the shared config file, into *out (NULL when unset).
 * @return 0; -EINVAL an unreadable file (message in @err); -ENOMEM. */
int http_cred_setting(const char *profile, const char *key, char **out, char *err, size_t errlen);
/* The profile's S3 endpoint: "s3 = / endpoint_url =" of the "[services NAME]" section
 * its "services" names, else its own endpoint_url. Same returns. */
int http_cred_s3_endpoint(const char *profile, char **out, char *err, size_t errlen);

struct http_creds;

/* What the mount says beyond the environment (any may be NULL). */
struct http_cred_cfg {
    const char *profile;   /* -o profile= (then the environment's keys are skipped) */
    const char *region;    /* the store's region, for STS */
    const char *ca_bundle; /* for https to STS and container endpoints */
};

/* Run the chain. @return 0 and *out (with or without credentials: see
 * http_creds_have()); a negative errno and a one-line message when a configured
 * source fails (an unreadable token file, STS refusing, a failing
 * credential_process). */
int http_creds_new(const struct http_cred_cfg *cfg, struct http_creds **out, char *err,
                   size_t errlen);
void http_creds_free(struct http_creds *c);
bool http_creds_have(const struct http_creds *c);
/* "web identity (role ARN)", ...; what was tried when nothing was found. */
const char *http_creds_source(const struct http_creds *c);
const char *http_creds_tried(const struct http_creds *c);

/* Sign handle @h with the current credentials (one consistent set, under the lock):
 * SigV4 user and password, and the session token appended to *@hdrs. *@gen says
 * which set was used. Starts the refresh thread on first use in this process.
 * @return 0; -ENOMEM. */
int http_creds_apply(struct http_creds *c, CURL *h, struct curl_slist **hdrs, uint64_t *gen);
/* A request signed with set @gen was answered ExpiredToken / InvalidToken /
 * TokenRefreshRequired: renew now unless another thread already did (waits for a
 * renewal in flight). */
void http_creds_expired(struct http_creds *c, uint64_t gen);
/* JSON object for /.pcrfs/stats: source, expiry, refreshes (never a secret). */
void http_creds_json(struct http_creds *c, char *out, size_t len);

#endif
