/* pcrfs — store URLs, endpoint, region and CA bundle (see pcrfs/backend.h for the
 * environment; the credentials themselves come from creds.c).
 *
 *   s3://BUCKET[/PREFIX]  AWS: https://BUCKET.s3.REGION.amazonaws.com/PREFIX
 *                         (path-style when the bucket name has a dot, which the
 *                         wildcard certificate cannot cover); a custom endpoint
 *                         (-o endpoint=, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
 *                         profile's services section "s3 = endpoint_url", its
 *                         endpoint_url): ENDPOINT/BUCKET/PREFIX,
 *                         path-style, as MinIO, Ceph and the like expect.
 *   http[s]://HOST/PATH   as is, anonymous.
 *
 * A URL with user-info ("https://user:pass@host/...") is refused, never used: it
 * would show in /proc/mounts, ps and every message that names the store.
 */
#include <ctype.h>
#include <pwd.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/httpxfer.h"

int pcr_url_is_remote(const char *s)
{
    return s &&
           (!strncmp(s, "s3://", 5) || !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8));
}

/* Append @s to @out percent-encoding everything but RFC 3986's unreserved
 * characters and '/', the way S3 (and SigV4's canonical URI) want a key. */
static int append_encoded(char *out, size_t cap, const char *s)
{
    size_t n = strlen(out);

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
            if (n + 1 >= cap)
                return -ENAMETOOLONG;
            out[n++] = (char)c;
        } else {
            if (n + 3 >= cap)
                return -ENAMETOOLONG;
            snprintf(out + n, 4, "%%%02X", c);
            n += 3;
        }
    }
    out[n] = '\0';
    return 0;
}

static bool bucket_ok(const char *b, size_t n)
{
    if (n < 1 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)b[i]) && b[i] != '.' && b[i] != '-' && b[i] != '_')
            return false;
    return true;
}

/* The first of @opt, the environment variables @e1, @e2, and the profile's @key in
 * the shared config file; into *out (a new string, or NULL). */
static int setting(const char *opt, const char *e1, const char *e2, const char *profile,
                   const char *key, char **out, char *err, size_t errlen)
{
    const char *v = opt && *opt ? opt : NULL;

    if (!v && e1)
        v = getenv(e1);
    if ((!v || !*v) && e2)
        v = getenv(e2);
    if (v && *v) {
        *out = strdup(v);
        return *out ? 0 : -ENOMEM;
    }
    if (key && !strcmp(key, "endpoint_url"))
        return http_cred_s3_endpoint(profile, out, err, errlen);
    return key ? http_cred_setting(profile, key, out, err, errlen) : (*out = NULL, 0);
}

static int s3_base(struct http_target *t, const char *rest, const struct pcr_http_opts *o,
                   char *err, size_t errlen)
{
    const char *slash = strchr(rest, '/');
    size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *prefix = slash ? slash + 1 : "";
    const char *profile = o ? o->profile : NULL;
    char bucket[64], *ep = NULL, *region = NULL;
    struct http_cred_cfg cfg;
    int ret;

    if (!bucket_ok(rest, blen)) {
        pcr_errf(err, errlen, "%s: not a bucket name", t->display);
        return -EINVAL;
    }
    memcpy(bucket, rest, blen);
    bucket[blen] = '\0';
    ret = setting(o ? o->endpoint : NULL, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", profile,
                  "endpoint_url", &ep, err, errlen);
    if (!ret)
        ret = setting(o ? o->region : NULL, "AWS_REGION", "AWS_DEFAULT_REGION", profile, "region",
                      &region, err, errlen);
    if (ret)
        goto out;
    ret = -EINVAL;
    if (region && (strlen(region) >= sizeof(t->region) || !*region))
        goto bad_region;
    for (const char *p = region ? region : ""; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-')
            goto bad_region;
    snprintf(t->region, sizeof(t->region), "%s", region ? region : "us-east-1");
    if (ep && *ep) {
        size_t n = strlen(ep);
        const char *host = strstr(ep, "://");
        /* first: the message below repeats the endpoint */
        if (http_url_has_userinfo(ep)) {
            pcr_errf(err, errlen, "the endpoint URL has a user name or password: %s",
                     http_userinfo_msg);
            goto out;
        }
        /* "https://" alone would make the base "https:/BUCKET" */
        if ((strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) || !host[3] ||
            host[3] == '/') {
            pcr_errf(err, errlen, "endpoint %s: not an http:// or https:// URL", ep);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)ep[i] <= ' ' || ep[i] == 0x7f || ep[i] == '?' || ep[i] == '#') {
                pcr_errf(err, errlen, "endpoint: not a plain http:// or https:// URL");
                goto out;
            }
        while (n > 0 && ep[n - 1] == '/')
            n--;
        if (n >= sizeof(t->base) / 2) {
            ret = -ENAMETOOLONG;
            goto out;
        }
        snprintf(t->base, sizeof(t->base), "%.*s/%s", (int)n, ep, bucket);
    } else if (strchr(bucket, '.')) {
        snprintf(t->base, sizeof(t->base), "https://s3.%s.amazonaws.com/%s", t->region, bucket);
    } else {
        snprintf(t->base, sizeof(t->base), "https://%s.s3.%s.amazonaws.com", bucket, t->region);
    }
    while (*prefix == '/')
        prefix++;
    if (*prefix) {
        char p[HTTP_MAX_URL];
        size_t n = strlen(prefix);
        if (n >= sizeof(p)) {
            ret = -ENAMETOOLONG;
            goto out;
        }
        memcpy(p, prefix, n + 1);
        while (n > 0 && p[n - 1] == '/')
            p[--n] = '\0';
        ret = append_encoded(t->base, sizeof(t->base), "/"); /* bounded, as the rest */
        if (!ret)
            ret = append_encoded(t->base, sizeof(t->base), p);
        if (ret)
            goto out;
    }
    snprintf(t->sigv4, sizeof(t->sigv4), "aws:amz:%s:s3", t->region);
    cfg =
        (struct http_cred_cfg){.profile = profile, .region = t->region, .ca_bundle = t->ca_bundle};
    ret = http_creds_new(&cfg, &t->creds, err, errlen);
    if (ret == 0)
        t->sign = http_creds_have(t->creds);
    goto out;
bad_region:
    pcr_errf(err, errlen, "region %.80s: not a region name", region);
out:
    free(ep);
    free(region);
    return ret;
}

const char http_userinfo_msg[] =
    "credentials never go in a URL (it shows in /proc/mounts and ps); give them in the "
    "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a root-only shared "
    "credentials file (-o profile=NAME), or let the node's role provide them (see pcrfs(1), "
    "ENVIRONMENT)";

bool http_url_has_userinfo(const char *url)
{
    const char *a = strstr(url, "://"), *e;

    if (!a)
        return false;
    a += 3;
    e = a + strcspn(a, "/?#");
    return memchr(a, '@', (size_t)(e - a)) != NULL;
}

int pcr_url_has_userinfo(const char *url)
{
    return url && pcr_url_is_remote(url) && http_url_has_userinfo(url);
}

int http_target_init(struct http_target *t, const char *url, const struct pcr_http_opts *o,
                     char *err, size_t errlen)
{
    size_t n = strlen(url);
    const char *ca;
    int ret;

    memset(t, 0, sizeof(*t));
    if (http_url_has_userinfo(url)) {
        /* the message does not repeat the URL: it holds the secret */
        pcr_errf(err, errlen, "a store URL with a user name or password is refused: %s",
                 http_userinfo_msg);
        return -EINVAL;
    }
    if (n >= sizeof(t->display) / 2) {
        pcr_errf(err, errlen, "URL too long");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)url[i] <= ' ' || url[i] == 0x7f) {
            pcr_errf(err, errlen, "a URL with spaces or control characters");
            return -EINVAL;
        }
    memcpy(t->display, url, n + 1);
    /* the CA bundle: -o ca_bundle=, AWS_CA_BUNDLE, the profile's ca_bundle */
    ret = setting(o ? o->ca_bundle : NULL, "AWS_CA_BUNDLE", NULL, o ? o->profile : NULL,
                  !strncmp(url, "s3://", 5) ? "ca_bundle" : NULL, &t->ca_bundle, err, errlen);
    if (ret)
        return ret;
    if ((ca = t->ca_bundle)) {
        int fd = open(ca, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            pcr_errf(err, errlen, "CA bundle %s: %s", ca,
                     fd < 0 ? strerror(errno) : "not a regular file");
            if (fd >= 0)
                close(fd);
            http_target_free(t);
            return -EINVAL;
        }
        close(fd);
    }
    if (!strncmp(url, "s3://", 5)) {
        t->s3 = true;
        ret = s3_base(t, url + 5, o, err, errlen);
    } else if (pcr_url_is_remote(url)) {
        const char *host = strstr(url, "://") + 3;
        if (!*host || *host == '/' || strchr(url, '?') || strchr(url, '#')) {
            pcr_errf(err, errlen, "%s: not a store URL (http[s]://HOST/PATH)", url);
            ret = -EINVAL; /* freed below: -o ca_bundle= may have been copied */
        } else {
            while (n > 0 && url[n - 1] == '/')
                n--;
            snprintf(t->base, sizeof(t->base), "%.*s", (int)n, url);
            ret = 0;
        }
    } else {
        pcr_errf(err, errlen, "%s: not an s3://, http:// or https:// URL", url);
        ret = -EINVAL;
    }
    if (ret == -ENAMETOOLONG) {
        pcr_errf(err, errlen, "%s: URL too long", url);
        ret = -EINVAL;
    }
    if (ret)
        http_target_free(t);
    return ret;
}

void http_target_free(struct http_target *t)
{
    http_creds_free(t->creds);
    t->creds = NULL;
    free(t->ca_bundle);
    t->ca_bundle = NULL;
}

int http_object_url(const struct http_target *t, const char *name, char *out, size_t len)
{
    /* the store's own names: "index.db", "records/000001.pcr", "tokens/..." */
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-' && *p != '/')
            return -EINVAL;
    if (!*name || *name == '/' || strstr(name, "..") || strstr(name, "//"))
        return -EINVAL;
    if ((size_t)snprintf(out, len, "%s/%s", t->base, name) >= len)
        return -ENAMETOOLONG;
    return 0;
}
