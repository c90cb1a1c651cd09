/* pcrfs — AWS credentials for s3:// stores: the default provider chain, refresh,
 * and the parsers of what the providers answer. Private to src/lib/backend.
 *
 *   creds.c      the chain (environment, web identity, shared files with
 *                credential_process, container, EC2 instance metadata), the
 *                current credentials behind a lock, their refresh
 *   credparse.c  INI, JSON, STS XML and ISO 8601 parsers (no I/O: fuzz targets),
 *                declared in credparse.h, which this header includes
 */
#ifndef PCRFS_CREDS_H
#define PCRFS_CREDS_H

#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>

#include "backend/credparse.h"

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
