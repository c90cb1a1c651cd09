/* pcrfs — AWS credentials: the default provider chain and refresh (creds.h).
 *
 * The chain, in the order the AWS SDKs document, the first source that is
 * configured wins (one that is configured but fails is a mount error naming it):
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY [, AWS_SESSION_TOKEN]
 *      (skipped when the mount names a profile with -o profile=);
 *   2. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *      [+ AWS_ROLE_SESSION_NAME] (or the profile's web_identity_token_file and
 *      role_arn): STS AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS, else
 *      https://sts.REGION.amazonaws.com; the token file is read again each time;
 *   3. shared files: the profile (-o profile=, AWS_PROFILE, AWS_DEFAULT_PROFILE,
 *      "default") of the credentials file (AWS_SHARED_CREDENTIALS_FILE,
 *      ~/.aws/credentials), then its credential_process, then keys in the config
 *      file (AWS_CONFIG_FILE, ~/.aws/config);
 *   4. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (http://169.254.170.2)
 *      or _FULL_URI (https, or http to loopback, 169.254.170.2, 169.254.170.23 or
 *      fd00:ec2::23 only), with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read each
 *      time) or AWS_CONTAINER_AUTHORIZATION_TOKEN as the Authorization header;
 *   5. EC2 instance metadata, IMDSv2 only (a session token from PUT, then the
 *      role's credentials) at AWS_EC2_METADATA_SERVICE_ENDPOINT, else
 *      http://169.254.169.254; skipped when AWS_EC2_METADATA_DISABLED=true.
 *
 * Refresh. The current set lives behind c->lock; a request copies it into its
 * libcurl handle under the lock (libcurl copies strings), so every request signs
 * with one consistent set. Credentials that expire are renewed by a short-lived
 * thread started by the first request that finds them inside the refresh window
 * (5 minutes before expiry, or half their lifetime when that is shorter); the
 * other requests keep signing with the old set, which is still valid, so a
 * rotation never fails a read. Only a request that finds the set already expired
 * waits for the renewal. An ExpiredToken/InvalidToken/TokenRefreshRequired answer
 * renews at once (http_creds_expired()). Keys from the shared files are read again
 * when either file changes (checked at most every FILE_POLL_MS by a request).
 * No thread lives longer than a renewal, so the daemon's fork when it detaches
 * loses nothing (a renewal in flight in the parent is noticed by its pid; fork
 * handlers keep every lock consistent across the fork).
 *
 * credential_process is run by /bin/sh -c (as the Go and Java SDKs do; the AWS
 * CLI splits the line itself), stdin /dev/null, its stderr ours, with at most
 * HTTP_CRED_MAX_DOC bytes of output and PROCESS_TIMEOUT_MS; its exit status must
 * be 0.
 *
 * Secrets are never logged, never put in a message, zeroed when dropped; the
 * process is made non-dumpable (PR_SET_DUMPABLE 0) once it holds any.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/httpbase.h"

extern char **environ;

#define WINDOW_MAX_S       300  /* renew 5 minutes ahead, as the AWS SDKs do */
#define FILE_POLL_MS       2000 /* how often the shared files are checked for changes */
#define PROCESS_TIMEOUT_MS 30000
#define META_TIMEOUT_MS    2000 /* IMDS and container endpoints: local, answer fast */
#define STS_TIMEOUT_MS     10000
#define RETRY_MIN_MS       1000  /* after a failed renewal ... */
#define RETRY_MAX_MS       30000 /* ... doubling up to this */
#define WAIT_MAX_MS        30000 /* a request waits at most this for a renewal */
#define IMDS_DEFAULT       "http://169.254.169.254"
#define ECS_HOST           "http://169.254.170.2"

enum kind { K_NONE, K_ENV, K_WEBID, K_FILE, K_CONTAINER, K_IMDS };

struct stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    bool exists;
};

struct http_creds {
    struct http_creds *next; /* the process's list, for fork (all_lock) */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a renewal finished */
    enum kind kind;
    char source[256];
    char tried[600];
    /* the current set, under lock */
    char *id, *secret, *token;
    int64_t expiry_ms; /* wall clock; 0: does not expire */
    int64_t got_ms;    /* when it was obtained */
    uint64_t gen;
    /* renewal, under lock */
    bool refreshing;
    pid_t refresher; /* the process whose thread renews (a fork loses it) */
    bool stop;       /* http_creds_free() runs: a renewal in flight gives up (atomic) */
    int64_t next_try_ms, last_ms, next_poll_ms;
    unsigned fail_streak;
    uint64_t refreshes, failures;
    struct stamp st_cred, st_conf;   /* the shared files as last read, under lock */
    struct stamp new_cred, new_conf; /* as the renewal in flight read them (its own) */
    /* the source's settings: fixed after http_creds_new() */
    char *profile, *cred_file, *conf_file, *ca_bundle, *region;
    char *role_arn, *session, *token_file; /* web identity */
    char *url;                             /* container or IMDS endpoint */
    bool process;                          /* K_FILE through credential_process */
};

/* Every set of the process. The daemon forks when it detaches, possibly while a
 * renewal thread holds a set's lock: the fork handlers take every lock first, so
 * the child never inherits one held by a thread it does not have. */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static struct http_creds *all;

static void fork_prepare(void)
{
    pthread_mutex_lock(&all_lock);
    for (struct http_creds *c = all; c; c = c->next)
        pthread_mutex_lock(&c->lock);
}

static void fork_done(void)
{
    for (struct http_creds *c = all; c; c = c->next)
        pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&all_lock);
}

static void fork_register(void)
{
    pthread_atfork(fork_prepare, fork_done, fork_done);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void zfree(char **p)
{
    if (*p) {
        explicit_bzero(*p, strlen(*p));
        free(*p);
        *p = NULL;
    }
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static void tried_add(struct http_creds *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tried_add(struct http_creds *c, const char *fmt, ...)
{
    size_t n = strlen(c->tried);
    va_list ap;

    if (n + 3 >= sizeof(c->tried))
        return;
    if (n)
        n += (size_t)snprintf(c->tried + n, sizeof(c->tried) - n, "; ");
    va_start(ap, fmt);
    vsnprintf(c->tried + n, sizeof(c->tried) - n, fmt, ap);
    va_end(ap);
}

/* ---- files ---- */

/* What says a shared file changed: another file, another size or mtime. */
static void stamp_set(struct stamp *st, const struct stat *sb)
{
    *st = (struct stamp){.dev = sb->st_dev,
                         .ino = sb->st_ino,
                         .size = sb->st_size,
                         .mtime = sb->st_mtim,
                         .exists = true};
}

/* Read all of a small regular file. @return 0 and *out (NUL-terminated, *len);
 * -ENOENT; -EINVAL (not a regular file, too big); -errno. */
static int read_small(const char *path, char **out, size_t *len, struct stamp *st)
{
    struct stat sb;
    char *buf;
    size_t got = 0;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;            /* read once: each read of errno is a call */
        return e > 0 ? -e : -EIO; /* never 0: *out is unset */
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)HTTP_CRED_MAX_DOC) {
        close(fd);
        return -EINVAL;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    if (st)
        stamp_set(st, &sb);
    *out = buf;
    *len = got;
    return 0;
}

static void stamp_of(const char *path, struct stamp *st)
{
    struct stat sb;

    *st = (struct stamp){0};
    if (path && stat(path, &sb) == 0)
        stamp_set(st, &sb);
}

static bool stamp_eq(const struct stamp *a, const struct stamp *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* $@var, else HOME/.aws/@name, else NULL (no HOME, or no memory: no file). */
static char *shared_file(const char *var, const char *home, const char *name)
{
    char *path = NULL;

    if (env(var))
        return strdup(env(var));
    if (home && asprintf(&path, "%s/.aws/%s", home, name) < 0)
        return NULL;
    return path;
}

/* The shared files and profile: -o profile=, AWS_PROFILE, AWS_DEFAULT_PROFILE. */
static int shared_paths(const char *opt_profile, char **profile, char **cred, char **conf)
{
    const char *p = opt_profile && *opt_profile ? opt_profile : env("AWS_PROFILE");
    const char *home = env("HOME");
    char homebuf[2048];

    if (!p)
        p = env("AWS_DEFAULT_PROFILE");
    if (!home) {
        /* mount(8) at boot may run us without HOME: the user's own home then */
        struct passwd pw, *res = NULL;
        char pwbuf[4096];
        if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res) {
            snprintf(homebuf, sizeof(homebuf), "%s", res->pw_dir);
            home = homebuf;
        }
    }
    *profile = strdup(p ? p : "default");
    *cred = shared_file("AWS_SHARED_CREDENTIALS_FILE", home, "credentials");
    *conf = shared_file("AWS_CONFIG_FILE", home, "config");
    return *profile ? 0 : -ENOMEM;
}

/* Keys @w of the profile in file @path. @return 1 the profile is there, 0 not (or
 * no file), -EINVAL (message in @err), -ENOMEM. */
static int profile_read(const char *path, const char *profile, bool config, struct http_ini_want *w,
                        unsigned n, struct stamp *st, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    int ret;

    for (unsigned i = 0; i < n; i++)
        *w[i].val = NULL;
    if (st)
        stamp_of(path, st);
    if (!path)
        return 0;
    ret = read_small(path, &buf, &len, NULL);
    if (ret == -ENOENT || ret == -ENOTDIR)
        return 0;
    if (ret == -ENOMEM)
        return ret;
    if (ret) {
        pcr_errf(err, errlen, "%s: not a readable %s file (%s)", path,
                 config ? "config" : "credentials", strerror(-ret));
        return -EINVAL;
    }
    ret = http_cred_ini_find(buf, len, profile, config, w, n);
    /* read_small() returned 0, so buf is set; the analyzer loses that -e < 0:
     * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
    explicit_bzero(buf, len);
    free(buf);
    if (ret == -EINVAL)
        pcr_errf(err, errlen, "%s: a line too long or with a NUL byte", path);
    return ret;
}

int http_cred_setting(const char *opt_profile, const char *key, char **out, char *err,
                      size_t errlen)
{
    char *profile = NULL, *cred = NULL, *conf = NULL;
    struct http_ini_want w = {key, out};
    int ret;

    *out = NULL;
    ret = shared_paths(opt_profile, &profile, &cred, &conf);
    if (ret == 0)
        ret = profile_read(conf, profile, true, &w, 1, NULL, err, errlen);
    free(profile);
    free(cred);
    free(conf);
    return ret < 0 ? ret : 0;
}

int http_cred_s3_endpoint(const char *opt_profile, char **out, char *err, size_t errlen)
{
    char *profile = NULL, *cred = NULL, *conf = NULL, *svc = NULL, *own = NULL, *sec = NULL;
    struct http_ini_want w[] = {{"services", &svc}, {"endpoint_url", &own}};
    struct http_ini_want ws = {"s3.endpoint_url", out};
    int ret;

    *out = NULL;
    ret = shared_paths(opt_profile, &profile, &cred, &conf);
    if (ret == 0)
        ret = profile_read(conf, profile, true, w, 2, NULL, err, errlen);
    if (ret >= 0 && svc && *svc) {
        ret = asprintf(&sec, "services %s", svc) < 0 ? -ENOMEM : 0;
        if (!ret)
            ret = profile_read(conf, sec, true, &ws, 1, NULL, err, errlen);
    }
    if (ret >= 0 && !*out) {
        *out = own;
        own = NULL;
    }
    free(profile), free(cred), free(conf), free(svc), free(own), free(sec);
    return ret < 0 ? ret : 0;
}

/* ---- HTTP to STS, container and metadata endpoints ---- */

struct body {
    char *p;
    size_t n;
    bool over;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct body *b = ctx;
    size_t n = size * nmemb;

    if (b->n + n > HTTP_CRED_MAX_DOC) {
        b->over = true;
        return 0;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

/* Whether the set is being freed: a renewal in flight stops (its request aborted,
 * its credential_process killed) rather than hold up the exit that frees it. */
static bool stopping(const struct http_creds *c)
{
    return __atomic_load_n(&c->stop, __ATOMIC_RELAXED);
}

/* libcurl's progress callback of a renewal's request: nonzero aborts it. */
static int fetch_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return stopping(arg) ? 1 : 0;
}

/* One request; the body (at most HTTP_CRED_MAX_DOC bytes) into *out. @return the
 * HTTP status, or a negative errno with a reason in @err. */
static long fetch(struct http_creds *c, const char *method, const char *url,
                  struct curl_slist *hdrs, const char *post, long timeout_ms, char **out,
                  size_t *outlen, char *err, size_t errlen)
{
    struct body b = {.p = malloc(HTTP_CRED_MAX_DOC + 1)};
    char ebuf[CURL_ERROR_SIZE] = "";
    long status = 0;
    CURLcode cc;
    CURL *h;

    if (!b.p)
        return -ENOMEM;
    b.p[0] = '\0';
    h = curl_easy_init();
    if (!h) {
        free(b.p);
        return -ENOMEM;
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    http_handle_defaults(h);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 1000 ? timeout_ms : 1000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, fetch_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    if (c->kind == K_IMDS || c->kind == K_CONTAINER)
        curl_easy_setopt(h, CURLOPT_PROXY, ""); /* link-local: never through a proxy */
    if (c->ca_bundle)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_bundle);
    if (hdrs)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (post)
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, post);
    if (method)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    cc = curl_easy_perform(h);
    if (cc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (cc != CURLE_OK || b.over) {
        explicit_bzero(b.p, b.n);
        free(b.p);
        if (b.over) {
            pcr_errf(err, errlen, "an answer over %u bytes", HTTP_CRED_MAX_DOC);
            return -EINVAL;
        }
        if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
            pcr_errf(err, errlen, "TLS certificate verification failed: %s",
                     ebuf[0] ? ebuf : curl_easy_strerror(cc));
        else
            pcr_errf(err, errlen, "no answer (%s)", ebuf[0] ? ebuf : curl_easy_strerror(cc));
        return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO;
    }
    *out = b.p;
    *outlen = b.n;
    return status;
}

static struct curl_slist *header(struct curl_slist *l, const char *name, const char *value)
{
    char *s;
    struct curl_slist *l2;

    if (!l && !name)
        return NULL;
    if (asprintf(&s, "%s: %s", name, value) < 0)
        return NULL;
    l2 = curl_slist_append(l, s);
    explicit_bzero(s, strlen(s));
    free(s);
    return l2;
}

/* ---- the sources ---- */

static int get_webid(struct http_creds *c, struct http_cred_doc *d, char *err, size_t errlen)
{
    char *tok = NULL, *etok = NULL, *erole = NULL, *esess = NULL, *body = NULL, *post = NULL;
    char url[1024], why[200] = "";
    size_t len = 0;
    long st;
    int ret;

    ret = read_small(c->token_file, &tok, &len, NULL);
    if (ret) {
        pcr_errf(err, errlen, "web identity: token file %s: %s", c->token_file,
                 ret == -EINVAL ? "not a regular file of at most 64 KiB" : strerror(-ret));
        return -EINVAL;
    }
    while (len > 0 && isspace((unsigned char)tok[len - 1]))
        tok[--len] = '\0';
    if (env("AWS_ENDPOINT_URL_STS"))
        snprintf(url, sizeof(url), "%.1000s", env("AWS_ENDPOINT_URL_STS"));
    else
        snprintf(url, sizeof(url), "https://sts.%s.amazonaws.com", c->region);
    etok = curl_easy_escape(NULL, tok, (int)len);
    erole = curl_easy_escape(NULL, c->role_arn, 0);
    esess = curl_easy_escape(NULL, c->session, 0);
    /* read_small() returned 0, so tok is set; the analyzer loses that -e < 0:
     * NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker) */
    explicit_bzero(tok, len);
    free(tok);
    if (!etok || !erole || !esess ||
        asprintf(&post,
                 "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s"
                 "&RoleSessionName=%s&WebIdentityToken=%s",
                 erole, esess, etok) < 0) {
        post = NULL;
        ret = -ENOMEM;
        goto out;
    }
    struct curl_slist *h = header(NULL, "Accept", "application/xml");
    st = fetch(c, NULL, url, h, post, STS_TIMEOUT_MS, &body, &len, why, sizeof(why));
    curl_slist_free_all(h);
    if (st < 0) {
        pcr_errf(err, errlen, "web identity: STS %s: %s", url, why);
        ret = (int)st;
        goto out;
    }
    ret = http_cred_parse_sts(body, len, d, why, sizeof(why));
    if (ret == 0 && st != 200) {
        http_cred_doc_free(d);
        ret = -EACCES;
    }
    if (ret)
        pcr_errf(err, errlen, "web identity: STS %s for role %s: HTTP %ld%s%s", url, c->role_arn,
                 st, why[0] ? ": " : "", why);
out:
    if (etok) {
        explicit_bzero(etok, strlen(etok));
        curl_free(etok);
    }
    curl_free(erole);
    curl_free(esess);
    zfree(&post);
    zfree(&body);
    return ret;
}

/* Run credential_process @cmd of @c; its output (bounded, timed, killed once @c is
 * being freed) into *out. */
static int run_process(const struct http_creds *c, const char *cmd, char **out, size_t *outlen,
                       char *err, size_t errlen)
{
    posix_spawn_file_actions_t fa;
    int pfd[2], status = 0, ret = 0;
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    char *buf = malloc(HTTP_CRED_MAX_DOC + 1);
    size_t n = 0;
    int64_t end = wall_ms() + PROCESS_TIMEOUT_MS;
    pid_t pid;

    if (!buf)
        return -ENOMEM;
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        free(buf);
        return -errno;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    ret = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (ret != 0) {
        close(pfd[0]);
        free(buf);
        pcr_errf(err, errlen, "credential_process: cannot run /bin/sh: %s", strerror(ret));
        return -EINVAL;
    }
    for (;;) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int64_t left = end - wall_ms();
        if (left <= 0) {
            ret = -ETIMEDOUT;
            break;
        }
        if (stopping(c)) {
            ret = -ECANCELED;
            break;
        }
        int r = poll(&p, 1, left < 100 ? (int)left : 100); /* (100 ms: stopping() seen) */
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        ssize_t k = read(pfd[0], buf + n, HTTP_CRED_MAX_DOC + 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
        if (n > HTTP_CRED_MAX_DOC) {
            ret = -E2BIG;
            break;
        }
    }
    close(pfd[0]);
    if (ret)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!ret && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        ret = -EINVAL;
        if (WIFEXITED(status))
            pcr_errf(err, errlen, "credential_process exited with status %d", WEXITSTATUS(status));
        else
            pcr_errf(err, errlen, "credential_process killed by signal %d", WTERMSIG(status));
    } else if (ret == -ETIMEDOUT) {
        pcr_errf(err, errlen, "credential_process: no answer in %d s (killed)",
                 PROCESS_TIMEOUT_MS / 1000);
    } else if (ret == -E2BIG) {
        pcr_errf(err, errlen, "credential_process: output over %u bytes", HTTP_CRED_MAX_DOC);
        ret = -EINVAL;
    } else if (ret == -ECANCELED) {
        pcr_errf(err, errlen, "credential_process: stopped (the store is closed)");
    }
    if (ret) {
        explicit_bzero(buf, n > HTTP_CRED_MAX_DOC ? HTTP_CRED_MAX_DOC : n);
        free(buf);
        return ret == -ETIMEDOUT ? -EINVAL : ret;
    }
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;
}

/* The shared files' profile. @return 1 credentials in *d, 0 none there, < 0. */
static int get_files(struct http_creds *c, struct http_cred_doc *d, bool *process, char *err,
                     size_t errlen)
{
    char *id = NULL, *secret = NULL, *token = NULL, *proc = NULL, *cproc = NULL;
    char *cid = NULL, *csecret = NULL, *ctoken = NULL, *out = NULL;
    struct http_ini_want wc[] = {{"aws_access_key_id", &id},
                                 {"aws_secret_access_key", &secret},
                                 {"aws_session_token", &token},
                                 {"credential_process", &proc}};
    struct http_ini_want wf[] = {{"aws_access_key_id", &cid},
                                 {"aws_secret_access_key", &csecret},
                                 {"aws_session_token", &ctoken},
                                 {"credential_process", &cproc}};
    char why[200] = "";
    size_t len = 0;
    int ret, inc, inf;

    memset(d, 0, sizeof(*d));
    *process = false;
    inc = profile_read(c->cred_file, c->profile, false, wc, 4, &c->new_cred, err, errlen);
    if (inc < 0)
        return inc;
    inf = profile_read(c->conf_file, c->profile, true, wf, 4, &c->new_conf, err, errlen);
    if (inf < 0) {
        ret = inf;
        goto out;
    }
    ret = 0;
    if (id && secret) {
        d->id = id, d->secret = secret, d->token = token;
        id = secret = token = NULL;
        ret = 1;
    } else if (proc || cproc) {
        *process = true;
        ret = run_process(c, proc ? proc : cproc, &out, &len, err, errlen);
        if (ret == 0) {
            ret = http_cred_parse_json(out, len, true, d, why, sizeof(why));
            if (ret)
                pcr_errf(err, errlen, "credential_process of profile %s: %s", c->profile, why);
            else
                ret = 1;
        }
        if (ret < 0 && ret != -ENOMEM)
            ret = -EINVAL;
    } else if (cid && csecret) {
        d->id = cid, d->secret = csecret, d->token = ctoken;
        cid = csecret = ctoken = NULL;
        ret = 1;
    } else if (inc || inf) {
        pcr_errf(err, errlen,
                 "profile %s has neither aws_access_key_id with "
                 "aws_secret_access_key nor credential_process",
                 c->profile);
        ret = -ENOENT;
    }
    if (ret == 1 && !*process && http_cred_check(d, err, errlen) != 0)
        ret = -EINVAL;
out:
    zfree(&id), zfree(&secret), zfree(&token), zfree(&cid), zfree(&csecret), zfree(&ctoken);
    free(proc);
    free(cproc);
    zfree(&out);
    return ret;
}

static int get_container(struct http_creds *c, struct http_cred_doc *d, char *err, size_t errlen)
{
    const char *tf = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    char *auth = NULL, *body = NULL, why[200] = "";
    struct curl_slist *h = NULL;
    size_t len = 0;
    long st;
    int ret;

    if (tf) {
        ret = read_small(tf, &auth, &len, NULL);
        if (ret) {
            pcr_errf(err, errlen,
                     "container credentials: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE "
                     "%s: %s",
                     tf, ret == -EINVAL ? "not a small regular file" : strerror(-ret));
            return -EINVAL;
        }
        while (len > 0 && isspace((unsigned char)auth[len - 1]))
            auth[--len] = '\0';
    } else if (env("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
        auth = strdup(env("AWS_CONTAINER_AUTHORIZATION_TOKEN"));
        if (!auth)
            return -ENOMEM;
    }
    if (auth) {
        for (const char *p = auth; *p; p++)
            if ((unsigned char)*p < ' ' || *p == 0x7f) {
                zfree(&auth);
                pcr_errf(err, errlen,
                         "container credentials: the authorization token has "
                         "control characters");
                return -EINVAL;
            }
        h = header(NULL, "Authorization", auth);
        zfree(&auth);
        if (!h)
            return -ENOMEM;
    }
    st = fetch(c, NULL, c->url, h, NULL, META_TIMEOUT_MS * 2, &body, &len, why, sizeof(why));
    curl_slist_free_all(h);
    if (st < 0) {
        pcr_errf(err, errlen, "container credentials %s: %s", c->url, why);
        return (int)st;
    }
    ret = st == 200 ? http_cred_parse_json(body, len, false, d, why, sizeof(why)) : -EACCES;
    zfree(&body);
    if (ret)
        pcr_errf(err, errlen, "container credentials %s: HTTP %ld%s%s", c->url, st,
                 why[0] ? ": " : "", why);
    return ret;
}

static int get_imds(struct http_creds *c, struct http_cred_doc *d, long timeout_ms, char *err,
                    size_t errlen)
{
    char url[1200], *tok = NULL, *role = NULL, why[200] = "";
    struct curl_slist *h;
    size_t len = 0, k;
    long st;
    int ret;

    snprintf(url, sizeof(url), "%s/latest/api/token", c->url);
    h = header(NULL, "X-aws-ec2-metadata-token-ttl-seconds", "21600");
    if (!h)
        return -ENOMEM;
    st = fetch(c, "PUT", url, h, NULL, timeout_ms, &tok, &len, why, sizeof(why));
    curl_slist_free_all(h);
    if (st != 200) {
        if (st >= 0)
            zfree(&tok);
        pcr_errf(err, errlen, "EC2 instance metadata %s: %s", c->url,
                 st < 0 ? why : "no IMDSv2 session token");
        return st < 0 ? (int)st : -EACCES;
    }
    for (k = 0; k < len; k++)
        if ((unsigned char)tok[k] <= ' ' || tok[k] == 0x7f)
            break;
    if (k != len || !len) {
        zfree(&tok);
        pcr_errf(err, errlen, "EC2 instance metadata %s: a malformed session token", c->url);
        return -EINVAL;
    }
    h = header(NULL, "X-aws-ec2-metadata-token", tok);
    zfree(&tok);
    if (!h)
        return -ENOMEM;
    snprintf(url, sizeof(url), "%s/latest/meta-data/iam/security-credentials/", c->url);
    st = fetch(c, NULL, url, h, NULL, timeout_ms, &role, &len, why, sizeof(why));
    if (st == 200) {
        /* the first line: the instance profile's role name */
        for (k = 0; k < len && role[k] != '\n' && role[k] != '\r'; k++)
            if (!isalnum((unsigned char)role[k]) && !strchr("+=,.@_-", role[k]))
                break;
        if (k == 0 || k > 128 || (k < len && role[k] != '\n' && role[k] != '\r'))
            st = -2;
        else
            role[k] = '\0';
    }
    if (st != 200) {
        pcr_errf(err, errlen, "EC2 instance metadata %s: %s", c->url,
                 st == -2 ? "a malformed role name"
                 : st < 0 ? why
                          : "no IAM role attached");
        free(role);
        curl_slist_free_all(h);
        return st == -2 ? -EINVAL : st < 0 ? (int)st : -EACCES;
    }
    snprintf(url, sizeof(url), "%s/latest/meta-data/iam/security-credentials/%s", c->url, role);
    if (!c->source[0]) /* at mount; a renewal does not touch it */
        snprintf(c->source, sizeof(c->source), "EC2 instance metadata (role %.128s)", role);
    free(role);
    char *body = NULL;
    st = fetch(c, NULL, url, h, NULL, timeout_ms, &body, &len, why, sizeof(why));
    curl_slist_free_all(h);
    if (st != 200) {
        if (st >= 0)
            zfree(&body);
        pcr_errf(err, errlen, "EC2 instance metadata %s: %s", c->url,
                 st < 0 ? why : "the role's credentials were refused");
        return st < 0 ? (int)st : -EACCES;
    }
    ret = http_cred_parse_json(body, len, false, d, why, sizeof(why));
    zfree(&body);
    if (ret)
        pcr_errf(err, errlen, "EC2 instance metadata %s: %s", c->url, why);
    return ret;
}

/* A new set from the chosen source. @return 0 and *d; < 0 (message in @err). */
static int get(struct http_creds *c, struct http_cred_doc *d, char *err, size_t errlen)
{
    bool process;
    int ret;

    switch (c->kind) {
    case K_WEBID:
        return get_webid(c, d, err, errlen);
    case K_FILE:
        ret = get_files(c, d, &process, err, errlen);
        if (ret == 0) {
            pcr_errf(err, errlen, "profile %s: no longer in the shared files", c->profile);
            return -ENOENT;
        }
        return ret < 0 ? ret : 0;
    case K_CONTAINER:
        return get_container(c, d, err, errlen);
    case K_IMDS:
        return get_imds(c, d, META_TIMEOUT_MS * 2, err, errlen);
    default:
        pcr_errf(err, errlen, "credentials from the environment are not renewed");
        return -EINVAL;
    }
}

/* ---- the current set ---- */

static void install(struct http_creds *c, struct http_cred_doc *d)
{
    zfree(&c->id), zfree(&c->secret), zfree(&c->token);
    c->id = d->id, c->secret = d->secret, c->token = d->token;
    d->id = d->secret = d->token = NULL;
    c->expiry_ms = d->expiry ? d->expiry * 1000 : 0;
    c->got_ms = wall_ms();
    c->gen++;
    c->st_cred = c->new_cred;
    c->st_conf = c->new_conf;
}

/* When the set should be renewed: 5 minutes before it expires, or halfway through
 * a shorter life. */
static int64_t renew_at(const struct http_creds *c)
{
    int64_t life = c->expiry_ms - c->got_ms, ahead = WINDOW_MAX_S * 1000;

    if (!c->expiry_ms)
        return INT64_MAX;
    if (life / 2 < ahead)
        ahead = life > 0 ? life / 2 : 0;
    return c->expiry_ms - ahead;
}

static void fmt_time(int64_t ms, char *out, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (!ms || !gmtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, len, "never");
}

static void renew(struct http_creds *c)
{
    struct http_cred_doc d;
    char why[512] = "", when[32];
    int ret;

    ret = get(c, &d, why, sizeof(why));
    pthread_mutex_lock(&c->lock);
    c->last_ms = wall_ms();
    if (ret == 0) {
        install(c, &d);
        c->refreshes++;
        c->fail_streak = 0;
        c->next_try_ms = 0;
        fmt_time(c->expiry_ms, when, sizeof(when));
        pcr_log(PCR_LOG_INFO, "credentials renewed from %s (expire %s)", c->source, when);
    } else {
        int64_t wait = RETRY_MIN_MS << (c->fail_streak < 5 ? c->fail_streak : 5);
        c->failures++;
        c->fail_streak++;
        c->next_try_ms = c->last_ms + (wait > RETRY_MAX_MS ? RETRY_MAX_MS : wait);
        fmt_time(c->expiry_ms, when, sizeof(when));
        if (!stopping(c)) /* (stopped by http_creds_free(): no failure to report) */
            pcr_log(PCR_LOG_WARN,
                    "credentials from %s: renewal failed (%s); the current ones "
                    "expire %s",
                    c->source, why, when);
    }
    c->refreshing = false;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    http_cred_doc_free(&d);
}

static void *renew_thread(void *arg)
{
    renew(arg);
    return NULL;
}

static bool renewing(const struct http_creds *c)
{
    return c->refreshing && c->refresher == getpid();
}

/* Start a renewal in a thread of its own (or here, when no thread can start).
 * Called and returns with c->lock held. */
static void kick(struct http_creds *c)
{
    pthread_attr_t a;
    pthread_t t;
    int ret;

    if (renewing(c))
        return;
    c->refreshing = true;
    c->refresher = getpid();
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    ret = pthread_create(&t, &a, renew_thread, c);
    pthread_attr_destroy(&a);
    if (ret != 0) {
        pthread_mutex_unlock(&c->lock);
        renew(c);
        pthread_mutex_lock(&c->lock);
    }
}

static void wait_renewal(struct http_creds *c)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += WAIT_MAX_MS / 1000;
    while (renewing(c))
        if (pthread_cond_timedwait(&c->cond, &c->lock, &ts) == ETIMEDOUT)
            break;
}

int http_creds_apply(struct http_creds *c, CURL *h, struct curl_slist **hdrs, uint64_t *gen)
{
    int64_t now = wall_ms();
    int ret = 0;

    pthread_mutex_lock(&c->lock);
    if (c->kind == K_FILE && now >= c->next_poll_ms) {
        struct stamp a, b;
        c->next_poll_ms = now + FILE_POLL_MS;
        stamp_of(c->cred_file, &a);
        stamp_of(c->conf_file, &b);
        if ((!stamp_eq(&a, &c->st_cred) || !stamp_eq(&b, &c->st_conf)) && now >= c->next_try_ms)
            kick(c);
    }
    if (c->expiry_ms && now >= renew_at(c) && now >= c->next_try_ms)
        kick(c);
    if (c->expiry_ms && now >= c->expiry_ms - 1000)
        wait_renewal(c); /* expired: nothing to sign with until the new set is here */
    if (c->id) {
        curl_easy_setopt(h, CURLOPT_USERNAME, c->id);
        curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret);
        if (c->token) {
            struct curl_slist *l = header(*hdrs, "x-amz-security-token", c->token);
            if (l)
                *hdrs = l;
            else
                ret = -ENOMEM;
        }
    }
    *gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    return ret;
}

void http_creds_expired(struct http_creds *c, uint64_t gen)
{
    pthread_mutex_lock(&c->lock);
    /* renewed since that request was signed: it is signed again with the new set.
     * Not more than once a second, whatever the server says. */
    if (c->kind != K_ENV && c->kind != K_NONE && gen == c->gen && wall_ms() >= c->last_ms + 1000)
        kick(c);
    wait_renewal(c);
    pthread_mutex_unlock(&c->lock);
}

void http_creds_json(struct http_creds *c, char *out, size_t len)
{
    char when[32];

    pthread_mutex_lock(&c->lock);
    fmt_time(c->expiry_ms, when, sizeof(when));
    /* source is built from file names, role names and URLs: no quote or backslash
     * reaches it unescaped */
    char src[sizeof(c->source)];
    size_t k = 0;
    for (const char *p = c->kind == K_NONE ? "none" : c->source; *p && k + 1 < sizeof(src); p++)
        src[k++] = *p == '"' || *p == '\\' || (unsigned char)*p < ' ' ? '?' : *p;
    src[k] = '\0';
    snprintf(out, len,
             "{\"source\": \"%s\", \"expires\": %s%s%s, \"renewals\": %llu, "
             "\"renewal_failures\": %llu}",
             src, c->expiry_ms ? "\"" : "", c->expiry_ms ? when : "null", c->expiry_ms ? "\"" : "",
             (unsigned long long)c->refreshes, (unsigned long long)c->failures);
    pthread_mutex_unlock(&c->lock);
}

bool http_creds_have(const struct http_creds *c)
{
    return c && c->kind != K_NONE;
}

const char *http_creds_source(const struct http_creds *c)
{
    return c->kind == K_NONE ? "" : c->source;
}

const char *http_creds_tried(const struct http_creds *c)
{
    return c->tried;
}

/* ---- the chain ---- */

/* Whether a container FULL_URI names a host the AWS SDKs allow over plain http. */
static bool container_host_ok(const char *url)
{
    static const char *const ok[] = {"localhost", "169.254.170.2", "169.254.170.23",
                                     "[fd00:ec2::23]", "[::1]"};
    const char *h, *e;
    size_t n;

    if (!strncasecmp(url, "https://", 8))
        return true;
    if (strncasecmp(url, "http://", 7) != 0)
        return false;
    h = url + 7;
    if (*h == '[')
        e = strchr(h, ']') ? strchr(h, ']') + 1 : NULL;
    else
        e = h + strcspn(h, ":/");
    if (!e || (*e && *e != ':' && *e != '/'))
        return false;
    n = (size_t)(e - h);
    for (size_t i = 0; i < PCR_ARRAY_SIZE(ok); i++)
        if (strlen(ok[i]) == n && !strncasecmp(h, ok[i], n))
            return true;
    /* 127.0.0.0/8: four dotted numbers of 1-3 digits each, the first 127 (digit by
     * digit: sscanf("%u") would not say that a number overflowed) */
    unsigned part[4], k = 0;
    const char *p = h;
    for (; k < 4; k++) {
        unsigned v = 0, nd = 0;
        for (; p < e && isdigit((unsigned char)*p) && nd < 4; p++, nd++)
            v = v * 10 + (unsigned)(*p - '0');
        if (nd == 0 || nd > 3 || v > 255)
            return false;
        part[k] = v;
        if (k < 3 && (p >= e || *p++ != '.'))
            return false;
    }
    return p == e && part[0] == 127;
}

static bool truthy(const char *v)
{
    return v && !strcasecmp(v, "true");
}

static int dup_into(char **dst, const char *s)
{
    *dst = s ? strdup(s) : NULL;
    return !s || *dst ? 0 : -ENOMEM;
}

/* The first source that is configured, its first set into *d. @return 1 found,
 * 0 nothing configured (c->tried says what was looked at), < 0 a configured source
 * failed (message in @err). */
static int chain(struct http_creds *c, bool explicit_profile, struct http_cred_doc *d, char *err,
                 size_t errlen)
{
    char *role = NULL, *tokfile = NULL, why[512] = "";
    struct http_ini_want w[] = {{"role_arn", &role}, {"web_identity_token_file", &tokfile}};
    bool process;
    int ret;

    /* 1. environment */
    if (!explicit_profile && env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
        c->kind = K_ENV;
        snprintf(c->source, sizeof(c->source), "environment");
        if (dup_into(&d->id, env("AWS_ACCESS_KEY_ID")) ||
            dup_into(&d->secret, env("AWS_SECRET_ACCESS_KEY")) ||
            dup_into(&d->token, env("AWS_SESSION_TOKEN")))
            return -ENOMEM;
        ret = http_cred_check(d, err, errlen);
        if (ret)
            pcr_errf(err, errlen,
                     "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN "
                     "has spaces or control characters");
        return ret ? ret : 1;
    }
    tried_add(c, explicit_profile ? "environment (skipped: -o profile)"
                                  : "environment (no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
    /* 2. web identity: the environment's, else the profile's */
    if (!explicit_profile && env("AWS_WEB_IDENTITY_TOKEN_FILE") && env("AWS_ROLE_ARN")) {
        if (dup_into(&c->token_file, env("AWS_WEB_IDENTITY_TOKEN_FILE")) ||
            dup_into(&c->role_arn, env("AWS_ROLE_ARN")))
            return -ENOMEM;
    } else {
        ret = profile_read(c->conf_file, c->profile, true, w, 2, NULL, err, errlen);
        if (ret < 0)
            return ret;
        if (role && tokfile) {
            c->role_arn = role, c->token_file = tokfile;
            role = tokfile = NULL;
        }
        free(role);
        free(tokfile);
    }
    if (c->token_file) {
        char sess[64];
        snprintf(sess, sizeof(sess), "pcrfs-%lld", (long long)(wall_ms() / 1000));
        if (dup_into(&c->session,
                     env("AWS_ROLE_SESSION_NAME") ? env("AWS_ROLE_SESSION_NAME") : sess))
            return -ENOMEM;
        c->kind = K_WEBID;
        snprintf(c->source, sizeof(c->source), "web identity (role %.160s)", c->role_arn);
        ret = get_webid(c, d, err, errlen);
        return ret ? ret : 1;
    }
    tried_add(c, "web identity (no AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)");
    /* 3. shared files */
    c->kind = K_FILE;
    ret = get_files(c, d, &process, err, errlen);
    if (ret == 1) {
        c->process = process;
        snprintf(c->source, sizeof(c->source), "%sprofile %.64s (%.120s)",
                 process ? "credential_process of " : "", c->profile,
                 c->new_cred.exists ? c->cred_file : c->conf_file);
        return 1;
    }
    if (ret < 0 && ret != -ENOENT)
        return ret;
    if (ret == 0 && (explicit_profile || env("AWS_PROFILE"))) {
        /* a profile asked for by name that is nowhere: a typo, not another source */
        pcr_errf(err, errlen, "profile %s: not in %s nor %s", c->profile,
                 c->cred_file ? c->cred_file : "(no credentials file)",
                 c->conf_file ? c->conf_file : "(no config file)");
        return -EINVAL;
    }
    /* a profile without keys (only a region or an endpoint, say): the chain goes on
     * to the container and instance credentials, as the SDKs' does */
    tried_add(c, "profile %.64s in %.200s and %.200s (%s)", c->profile,
              c->cred_file ? c->cred_file : "(no HOME)", c->conf_file ? c->conf_file : "(no HOME)",
              ret == -ENOENT ? "no keys" : "not there");
    /* 4. container */
    if (env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
        const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
        if (*rel != '/' || asprintf(&c->url, "%s%s", ECS_HOST, rel) < 0) {
            c->url = NULL;
            pcr_errf(err, errlen, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=%s: not a path", rel);
            return -EINVAL;
        }
    } else if (env("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
        const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
        if (!container_host_ok(full)) {
            pcr_errf(err, errlen,
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI=%s: plain http only to "
                     "a loopback address, 169.254.170.2, 169.254.170.23 or fd00:ec2::23",
                     full);
            return -EINVAL;
        }
        if (dup_into(&c->url, full))
            return -ENOMEM;
    }
    if (c->url) {
        c->kind = K_CONTAINER;
        snprintf(c->source, sizeof(c->source), "container credentials (%.160s)", c->url);
        ret = get_container(c, d, err, errlen);
        return ret ? ret : 1;
    }
    tried_add(c, "container (no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI)");
    /* 5. EC2 instance metadata */
    if (truthy(env("AWS_EC2_METADATA_DISABLED"))) {
        tried_add(c, "EC2 instance metadata (AWS_EC2_METADATA_DISABLED=true)");
        c->kind = K_NONE;
        return 0;
    }
    const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    size_t n = strlen(ep ? ep : IMDS_DEFAULT);
    while (n > 1 && (ep ? ep : IMDS_DEFAULT)[n - 1] == '/')
        n--;
    if (asprintf(&c->url, "%.*s", (int)n, ep ? ep : IMDS_DEFAULT) < 0) {
        c->url = NULL;
        return -ENOMEM;
    }
    if (strncmp(c->url, "http://", 7) != 0 && strncmp(c->url, "https://", 8) != 0) {
        pcr_errf(err, errlen, "AWS_EC2_METADATA_SERVICE_ENDPOINT=%s: not an http:// URL", c->url);
        return -EINVAL;
    }
    c->kind = K_IMDS;
    /* not on EC2, this is where the chain ends: a short wait, as the SDKs do */
    ret = get_imds(c, d, META_TIMEOUT_MS / 2, why, sizeof(why));
    if (ret == 0) {
        if (!c->source[0])
            snprintf(c->source, sizeof(c->source), "EC2 instance metadata");
        return 1;
    }
    tried_add(c, "%s", why);
    c->kind = K_NONE;
    return 0;
}

int http_creds_new(const struct http_cred_cfg *cfg, struct http_creds **out, char *err,
                   size_t errlen)
{
    struct http_creds *c = calloc(1, sizeof(*c));
    struct http_cred_doc d = {0};
    pthread_condattr_t ca;
    int ret;

    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    ret = shared_paths(cfg ? cfg->profile : NULL, &c->profile, &c->cred_file, &c->conf_file);
    if (!ret)
        ret = dup_into(&c->region, cfg && cfg->region ? cfg->region : "us-east-1");
    if (!ret)
        ret = dup_into(&c->ca_bundle, cfg ? cfg->ca_bundle : NULL);
    if (!ret)
        ret = chain(c, cfg && cfg->profile && *cfg->profile, &d, err, errlen);
    if (ret < 0) {
        if (ret == -ENOENT)
            ret = -EINVAL;
        http_cred_doc_free(&d);
        http_creds_free(c);
        return ret;
    }
    pthread_once(&fork_once, fork_register);
    pthread_mutex_lock(&all_lock);
    c->next = all;
    all = c;
    pthread_mutex_unlock(&all_lock);
    if (ret == 1) {
        char when[32];
        install(c, &d);
        c->next_poll_ms = wall_ms() + FILE_POLL_MS;
        /* no core dump, no ptrace by other users, no /proc/PID/mem: the process
         * holds keys from now on */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        fmt_time(c->expiry_ms, when, sizeof(when));
        pcr_log(PCR_LOG_DEBUG, "credentials from %s (expire %s)", c->source, when);
    } else {
        pcr_log(PCR_LOG_DEBUG, "no credentials (tried: %s): requests are unsigned", c->tried);
    }
    http_cred_doc_free(&d);
    *out = c;
    return 0;
}

void http_creds_free(struct http_creds *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&all_lock);
    for (struct http_creds **p = &all; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&all_lock);
    pthread_mutex_lock(&c->lock);
    /* a renewal thread uses c: it stops (its request aborted within about a second,
     * its credential_process killed within 100 ms) rather than run to its deadline,
     * up to 30 s, which held a daemon's exit */
    __atomic_store_n(&c->stop, true, __ATOMIC_RELAXED);
    while (renewing(c))
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
    zfree(&c->id), zfree(&c->secret), zfree(&c->token);
    free(c->profile);
    free(c->cred_file);
    free(c->conf_file);
    free(c->ca_bundle);
    free(c->region);
    free(c->role_arn);
    free(c->session);
    free(c->token_file);
    free(c->url);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
