/* Unit tests of the credential parsers (src/lib/backend/credparse.c): the AWS shared
 * files, the JSON of IMDS, container credentials and credential_process, STS's XML,
 * ISO 8601 times. Each check names what it would catch; the fuzz targets
 * (tests/fuzz/fuzz_cred*.c, fuzz_stsxml.c) cover what is not named here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "backend/creds.h"
#include "check.h"

static int ini(const char *text, const char *profile, bool config, const char *key, char **out)
{
    struct http_ini_want w = {key, out};
    return http_cred_ini_find(text, strlen(text), profile, config, &w, 1);
}

static void test_ini(void)
{
    const char *cred = "[default]\naws_access_key_id = AKIA1 \n[dev]\n\taws_access_key_id=AKIA2\n"
                       "aws_access_key_id = AKIA3\n# [x]\n";
    const char *conf = "[default]\nregion = us-east-1\n[dev]\nregion = wrong\n"
                       "[profile   dev]\r\nregion = eu-west-3\r\nservices = s\n"
                       "s3 =\n  endpoint_url = https://nested\n[services s]\ns3 =\n"
                       "  endpoint_url = https://minio:9000\nendpoint_url = https://top\n";
    char *v = NULL;

    CHECK(ini(cred, "default", false, "aws_access_key_id", &v) == 1 && v && !strcmp(v, "AKIA1"),
          "trailing blanks trimmed: %s", v ? v : "(null)");
    free(v);
    /* an indented line right under a section is a continuation, not a setting; the
     * last of a key given twice wins */
    CHECK(ini(cred, "dev", false, "aws_access_key_id", &v) == 1 && v && !strcmp(v, "AKIA3"), "%s",
          v ? v : "(null)");
    free(v);
    CHECK(ini(cred, "x", false, "aws_access_key_id", &v) == 0 && !v, "a commented section");
    CHECK(ini(conf, "dev", true, "region", &v) == 1 && v && !strcmp(v, "eu-west-3"),
          "config: [profile dev], not [dev]; CR LF: %s", v ? v : "(null)");
    free(v);
    CHECK(ini(conf, "default", true, "region", &v) == 1 && v && !strcmp(v, "us-east-1"),
          "[default]");
    free(v);
    CHECK(ini(conf, "dev", true, "s3.endpoint_url", &v) == 1 && v && !strcmp(v, "https://nested"),
          "a sub-setting: %s", v ? v : "(null)");
    free(v);
    CHECK(ini(conf, "services s", true, "s3.endpoint_url", &v) == 1 && v &&
              !strcmp(v, "https://minio:9000"),
          "[services s]: %s", v ? v : "(null)");
    free(v);
    CHECK(ini(conf, "services s", true, "endpoint_url", &v) == 1 && v && !strcmp(v, "https://top"),
          "a top-level key after a block ends it");
    free(v);
    CHECK(ini(conf, "s", true, "s3.endpoint_url", &v) == 0 && !v, "[services s] is not profile s");
    char big[HTTP_CRED_MAX_VALUE + 300];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "[default]\nk=", 12);
    CHECK(ini(big, "default", false, "k", &v) == -EINVAL && !v, "an over-long line is refused");
    CHECK(http_cred_ini_find("[default]\nk=a\0b\n", 15, "default", false,
                             &(struct http_ini_want){"k", &v}, 1) == -EINVAL &&
              !v,
          "a NUL byte");
}

static void test_time(void)
{
    int64_t t = -1;

    CHECK(http_cred_parse_time("1970-01-01T00:00:00Z", &t) == 0 && t == 0, "epoch: %lld",
          (long long)t);
    CHECK(http_cred_parse_time("2026-11-25T17:00:00Z", &t) == 0 && t == 1795626000,
          "a known time: %lld", (long long)t);
    CHECK(http_cred_parse_time("2024-02-29T12:00:00.123456Z", &t) == 0 && t == 1709208000,
          "leap day, fraction: %lld", (long long)t);
    CHECK(http_cred_parse_time("2026-11-25T18:00:00+01:00", &t) == 0 && t == 1795626000,
          "an offset: %lld", (long long)t);
    CHECK(http_cred_parse_time("2026-11-25T17:00:00", &t) == -EINVAL, "no zone");
    CHECK(http_cred_parse_time("2026-13-25T17:00:00Z", &t) == -EINVAL, "month 13");
    CHECK(http_cred_parse_time("2026-11-25T17:00:00Zjunk", &t) == -EINVAL, "trailing bytes");
}

static int json(const char *s, bool process, struct http_cred_doc *d)
{
    char why[200];
    return http_cred_parse_json(s, strlen(s), process, d, why, sizeof(why));
}

static void test_json(void)
{
    struct http_cred_doc d;

    CHECK(json("{\"Code\":\"Success\",\"AccessKeyId\":\"ASIA1\",\"SecretAccessKey\":\"a\\/b\","
               "\"Token\":\"t\\u0041\",\"Expiration\":\"1970-01-01T01:00:00Z\",\"X\":[1,{\"y\":"
               "null}]}",
               false, &d) == 0 &&
              !strcmp(d.id, "ASIA1") && !strcmp(d.secret, "a/b") && !strcmp(d.token, "tA") &&
              d.expiry == 3600,
          "IMDS answer with escapes");
    http_cred_doc_free(&d);
    CHECK(!d.id && !d.secret && !d.token, "freed");
    CHECK(json("{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\"}", true, &d) == 0 &&
              !d.token && !d.expiry,
          "credential_process without a session");
    http_cred_doc_free(&d);
    CHECK(json("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\"}", true, &d) == -EINVAL,
          "credential_process output must say Version 1");
    CHECK(json("{\"Code\":\"Failure\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\"}", false,
               &d) == -EACCES &&
              !d.id,
          "a Code other than Success");
    CHECK(json("{\"AccessKeyId\":\"A\",\"AccessKeyId\":\"B\",\"SecretAccessKey\":\"s\"}", false,
               &d) == -EINVAL &&
              !d.id,
          "a key given twice");
    CHECK(json("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\\nX-Evil: 1\"}", false, &d) ==
                  -EINVAL &&
              !d.secret,
          "a header split");
    CHECK(json("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\"} x", false, &d) == -EINVAL,
          "trailing bytes");
    CHECK(json("{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"s\",\"Expiration\":\"soon\"}", false,
               &d) == -EINVAL,
          "a bad Expiration");
    CHECK(json("{\"AccessKeyId\":\"A\"", false, &d) == -EINVAL, "truncated");
}

static void test_sts(void)
{
    const char *ok = "<R><Result><Credentials><AccessKeyId>ASIA9</AccessKeyId><SecretAccessKey>"
                     "x&amp;y</SecretAccessKey><SessionToken>tok</SessionToken><Expiration>"
                     "1970-01-02T00:00:00Z</Expiration></Credentials></Result></R>";
    const char *err =
        "<ErrorResponse><Error><Code>InvalidIdentityToken</Code></Error></ErrorResponse>";
    struct http_cred_doc d;
    char why[200];

    CHECK(http_cred_parse_sts(ok, strlen(ok), &d, why, sizeof(why)) == 0 &&
              !strcmp(d.id, "ASIA9") && !strcmp(d.secret, "x&y") && !strcmp(d.token, "tok") &&
              d.expiry == 86400,
          "an answer with an entity");
    http_cred_doc_free(&d);
    CHECK(http_cred_parse_sts(err, strlen(err), &d, why, sizeof(why)) == -EACCES &&
              !strcmp(d.code, "InvalidIdentityToken") && strstr(why, "InvalidIdentityToken"),
          "an error's code: %s", why);
    const char *no_tok =
        "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>s"
        "</SecretAccessKey><Expiration>1970-01-02T00:00:00Z</Expiration></Credentials>";
    CHECK(http_cred_parse_sts(no_tok, strlen(no_tok), &d, why, sizeof(why)) == -EINVAL && !d.id,
          "no session token");
    const char *nested = "<Credentials><AccessKeyId>A<b/></AccessKeyId></Credentials>";
    CHECK(http_cred_parse_sts(nested, strlen(nested), &d, why, sizeof(why)) == -EINVAL && !d.id,
          "markup inside a value");
}

int main(void)
{
    test_ini();
    test_time();
    test_json();
    test_sts();
    return check_done("creds");
}
