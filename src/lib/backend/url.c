/* pcrfs — store URLs and AWS credentials (see pcrfs/backend.h for the environment).
 *
 *   s3://BUCKET[/PREFIX]  AWS: https://BUCKET.s3.REGION.amazonaws.com/PREFIX
 *                         (path-style when the bucket name has a dot, which the
 *                         wildcard certificate cannot cover); a custom endpoint
 *                         (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL): ENDPOINT/BUCKET/
 *                         PREFIX, path-style, as MinIO, Ceph and the like expect.
 *   http[s]://HOST/PATH   as is, anonymous.
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
#include "backend/http_internal.h"

#define MAX_CRED_FILE (1u << 20)

int pcr_url_is_remote(const char *s)
{
    return s && (!strncmp(s, "s3://", 5) || !strncmp(s, "http://", 7) ||
                 !strncmp(s, "https://", 8));
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

static char *trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = '\0';
    return s;
}

/* Read profile @profile of the INI file @path (the AWS credentials file).
 * @return 1 found, 0 no such file or profile, -EINVAL unreadable, -ENOMEM. */
static int read_profile(struct http_target *t, const char *path, const char *profile,
                        char *err, size_t errlen)
{
    char *buf = NULL, *line, *save = NULL;
    bool in = false;
    struct stat sb;
    ssize_t got;
    int fd, ret = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > MAX_CRED_FILE) {
        pcr_errf(err, errlen, "%s: not a credentials file", path);
        close(fd);
        return -EINVAL;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    got = read(fd, buf, (size_t)sb.st_size);
    close(fd);
    if (got < 0) {
        pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        free(buf);
        return -EINVAL;
    }
    buf[got] = '\0';
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *l = trim(line), *eq, **dst = NULL;
        if (*l == '#' || *l == ';' || !*l)
            continue;
        if (*l == '[') {
            char *end = strchr(l, ']');
            if (end)
                *end = '\0';
            in = !strcmp(trim(l + 1), profile);
            continue;
        }
        if (!in || !(eq = strchr(l, '=')))
            continue;
        *eq = '\0';
        l = trim(l);
        if (!strcmp(l, "aws_access_key_id"))
            dst = &t->key_id;
        else if (!strcmp(l, "aws_secret_access_key"))
            dst = &t->secret;
        else if (!strcmp(l, "aws_session_token"))
            dst = &t->token;
        if (dst) {
            free(*dst);
            *dst = strdup(trim(eq + 1));
            if (!*dst)
                ret = -ENOMEM;
        }
    }
    free(buf);
    if (ret)
        return ret;
    return t->key_id && t->secret ? 1 : 0;
}

static int env_credentials(struct http_target *t, char *err, size_t errlen)
{
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN"), *profile = getenv("AWS_PROFILE");
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home = getenv("HOME");
    char path[4096], homebuf[4096];
    int ret;

    if (id && *id && secret && *secret) {
        t->key_id = strdup(id);
        t->secret = strdup(secret);
        t->token = token && *token ? strdup(token) : NULL;
        if (!t->key_id || !t->secret || (token && *token && !t->token))
            return -ENOMEM;
        snprintf(t->cred_source, sizeof(t->cred_source), "environment");
        return 1;
    }
    if (!profile || !*profile)
        profile = getenv("AWS_DEFAULT_PROFILE");
    if (!profile || !*profile)
        profile = "default";
    if (!home || !*home) {
        /* mount(8) at boot may run us without HOME: the user's own home then */
        struct passwd pw, *res = NULL;
        char pwbuf[4096];
        if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res) {
            snprintf(homebuf, sizeof(homebuf), "%.2048s", res->pw_dir);
            home = homebuf;
        }
    }
    if (file && *file)
        snprintf(path, sizeof(path), "%.4000s", file);
    else if (home && *home)
        snprintf(path, sizeof(path), "%.4000s/.aws/credentials", home);
    else
        return 0;
    ret = read_profile(t, path, profile, err, errlen);
    if (ret == 1)
        snprintf(t->cred_source, sizeof(t->cred_source), "profile %.48s", profile);
    else if (ret == 0 && getenv("AWS_PROFILE") && *getenv("AWS_PROFILE")) {
        pcr_errf(err, errlen, "AWS_PROFILE=%s: no such profile with keys in %s", profile, path);
        return -EINVAL;
    }
    return ret;
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

static int s3_base(struct http_target *t, const char *rest, char *err, size_t errlen)
{
    const char *slash = strchr(rest, '/');
    size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *prefix = slash ? slash + 1 : "";
    const char *ep = getenv("AWS_ENDPOINT_URL_S3"), *region = getenv("AWS_REGION");
    char bucket[64];
    int ret;

    if (!bucket_ok(rest, blen)) {
        pcr_errf(err, errlen, "%s: not a bucket name", t->display);
        return -EINVAL;
    }
    memcpy(bucket, rest, blen);
    bucket[blen] = '\0';
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region)
        region = "us-east-1";
    for (const char *p = region; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-') {
            pcr_errf(err, errlen, "AWS_REGION=%s: not a region name", region);
            return -EINVAL;
        }
    snprintf(t->region, sizeof(t->region), "%.63s", region);
    if (ep && *ep) {
        size_t n = strlen(ep);
        if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8)) {
            pcr_errf(err, errlen, "AWS_ENDPOINT_URL=%s: not an http:// or https:// URL", ep);
            return -EINVAL;
        }
        while (n > 0 && ep[n - 1] == '/')
            n--;
        if (n >= sizeof(t->base) / 2)
            return -ENAMETOOLONG;
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
        if (n >= sizeof(p))
            return -ENAMETOOLONG;
        memcpy(p, prefix, n + 1);
        while (n > 0 && p[n - 1] == '/')
            p[--n] = '\0';
        strcat(t->base, "/");
        ret = append_encoded(t->base, sizeof(t->base), p);
        if (ret)
            return ret;
    }
    snprintf(t->sigv4, sizeof(t->sigv4), "aws:amz:%s:s3", t->region);
    ret = env_credentials(t, err, errlen);
    if (ret < 0)
        return ret;
    t->sign = ret == 1;
    return 0;
}

int http_target_init(struct http_target *t, const char *url, char *err, size_t errlen)
{
    size_t n = strlen(url);
    int ret;

    memset(t, 0, sizeof(*t));
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
    if (!strncmp(url, "s3://", 5)) {
        t->s3 = true;
        ret = s3_base(t, url + 5, err, errlen);
    } else if (pcr_url_is_remote(url)) {
        const char *host = strstr(url, "://") + 3;
        if (!*host || *host == '/' || strchr(url, '?') || strchr(url, '#')) {
            pcr_errf(err, errlen, "%s: not a store URL (http[s]://HOST/PATH)", url);
            return -EINVAL;
        }
        while (n > 0 && url[n - 1] == '/')
            n--;
        snprintf(t->base, sizeof(t->base), "%.*s", (int)n, url);
        ret = 0;
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
    /* secrets do not outlive their use in freed memory */
    if (t->secret)
        explicit_bzero(t->secret, strlen(t->secret));
    free(t->key_id);
    free(t->secret);
    free(t->token);
    t->key_id = t->secret = t->token = NULL;
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
