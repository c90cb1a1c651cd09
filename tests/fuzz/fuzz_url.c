/* libFuzzer target: http_target_init() (src/lib/backend/url.c), the parser of store
 * URLs (s3://BUCKET/PREFIX, http[s]://HOST/PATH), of -o endpoint= / -o region= and of
 * user-info ("user:pass@host") in both URLs.
 *
 * The input is "URL" or "URL\0ENDPOINT\0REGION" (then handed over as the mount's
 * options; an empty part is "not given"). The environment is fixed once: static keys
 * (so an s3:// URL finds its credentials there, never on the network), no endpoint
 * or region variables, shared files that do not exist, instance metadata disabled.
 *
 * Besides "no crash, no out-of-bounds access, no leak" (ASan/LSan), checks the
 * contract: 0 or -EINVAL or -ENOMEM only; a URL or endpoint with user-info is always
 * refused, the message for a URL with user-info repeats no URL, and the message for
 * an endpoint with user-info is the same for any other user-info; on success the
 * display name is the input, the base URL is http:// or https:// without user-info,
 * spaces or control characters, an s3:// target has a plain region and signs, and
 * object URLs are the base plus "/NAME" (a name with ".." is refused).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backend/http_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* @ep (a URL with user-info) with every byte of its user-info changed (malloc'd): the
 * same shape, the same length, another secret. */
static char *other_userinfo(const char *ep)
{
    const char *a = strstr(ep, "://") + 3;
    const char *e = a + strcspn(a, "/?#");
    char *q = strdup(ep), *at;

    if (!q)
        abort();
    at = memrchr(q + (a - ep), '@', (size_t)(e - a));
    for (char *p = q + (a - ep); p < at; p++)
        *p = *p == 'x' ? 'y' : 'x';
    return q;
}

/* Whether the message for an s3:// URL with the endpoint @ep depends on @ep's
 * user-info: the same call with another user-info must give the same result and the
 * same message. A differential oracle: the message may quote the store URL or the
 * region, which may hold any text, the endpoint's included; only a change with the
 * secret shows the secret in it. */
static bool depends_on_secret(const char *url, const struct pcr_http_opts *o, int rc,
                              const char *err)
{
    struct pcr_http_opts o2 = *o;
    char err2[512], *ep2 = other_userinfo(o->endpoint);
    struct http_target *t2 = malloc(sizeof(*t2));
    int rc2;

    if (!t2)
        abort();
    o2.endpoint = ep2;
    err2[0] = '\0';
    rc2 = http_target_init(t2, url, &o2, err2, sizeof(err2));
    if (rc2 == 0)
        http_target_free(t2);
    free(t2);
    free(ep2);
    return rc2 != rc || strcmp(err2, err) != 0;
}

/* creds.c fetches from STS, IMDS and container endpoints with handles set up by
 * http_handle_defaults() (httpbase.c, not linked here); with the
 * environment's keys above the chain stops before any of them, and reaching one
 * would make the target depend on the network: a finding. */
void http_handle_defaults(CURL *h)
{
    (void)h;
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const unset[] = {"AWS_ENDPOINT_URL",
                                        "AWS_ENDPOINT_URL_S3",
                                        "AWS_REGION",
                                        "AWS_DEFAULT_REGION",
                                        "AWS_PROFILE",
                                        "AWS_DEFAULT_PROFILE",
                                        "AWS_CA_BUNDLE",
                                        "AWS_SESSION_TOKEN",
                                        "AWS_WEB_IDENTITY_TOKEN_FILE",
                                        "AWS_ROLE_ARN",
                                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                                        "AWS_CONTAINER_CREDENTIALS_FULL_URI"};

    (void)argc, (void)argv;
    for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++)
        unsetenv(unset[i]);
    setenv("AWS_ACCESS_KEY_ID", "AKIDFUZZ", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "fuzzsecret", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/pcrfs-fuzz/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/pcrfs-fuzz/config", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    return 0;
}

static bool plain_url(const char *s)
{
    if (strncmp(s, "http://", 7) && strncmp(s, "https://", 8))
        return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
    return !http_url_has_userinfo(s);
}

static void check_ok(const struct http_target *t, const char *url)
{
    char obj[HTTP_MAX_URL + 64];
    size_t n = strlen(t->base);
    int rc;

    if (strcmp(t->display, url) || !plain_url(t->base) || n >= sizeof(t->base))
        abort();
    if (t->s3) {
        if (strncmp(url, "s3://", 5) || !t->region[0] || !t->sign || !t->creds)
            abort();
        for (const char *p = t->region; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '-'))
                abort();
    } else if (t->sign) {
        abort(); /* http(s):// is anonymous */
    }
    rc = http_object_url(t, "records/000001.pcr", obj, sizeof(obj));
    if (rc == 0 && (strncmp(obj, t->base, n) || strcmp(obj + n, "/records/000001.pcr")))
        abort();
    if (rc != 0 && rc != -ENAMETOOLONG)
        abort();
    if (http_object_url(t, "records/../index.db", obj, sizeof(obj)) != -EINVAL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf, *part[3] = {NULL, NULL, NULL}, err[512];
    struct pcr_http_opts o = {0};
    struct http_target *t;
    size_t k = 0;
    int rc;

    if (size > 2 * HTTP_MAX_URL)
        return 0;
    buf = malloc(size + 1);
    t = malloc(sizeof(*t));
    if (!buf || !t)
        abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    part[0] = buf;
    for (size_t i = 0; i < size && k < 2; i++)
        if (buf[i] == '\0')
            part[++k] = buf + i + 1;
    o.endpoint = part[1] && *part[1] ? part[1] : NULL;
    o.region = part[2] && *part[2] ? part[2] : NULL;
    err[0] = '\0';
    rc = http_target_init(t, part[0], k ? &o : NULL, err, sizeof(err));
    if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
        abort();
    if (memchr(err, '\0', sizeof(err)) == NULL)
        abort();
    if (pcr_url_has_userinfo(part[0]) && rc == 0)
        abort();
    /* the refusal of user-info names no URL: it would repeat the password */
    if (http_url_has_userinfo(part[0]) && (rc == 0 || strstr(err, "://")))
        abort();
    /* an s3:// endpoint with user-info: refused, and the message does not depend on
     * the user-info (it may quote the store URL or the region, which could hold the
     * same text: compared with the message for another user-info) */
    if (k && o.endpoint && !strncmp(part[0], "s3://", 5) && http_url_has_userinfo(o.endpoint) &&
        (rc == 0 || depends_on_secret(part[0], &o, rc, err)))
        abort();
    if (rc == 0) {
        check_ok(t, part[0]);
        http_target_free(t);
    }
    free(t);
    free(buf);
    return 0;
}
