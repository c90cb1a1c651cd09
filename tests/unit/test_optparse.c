/* The option-value parser (src/util/optparse.c) that pcrfs, mkpcrfs and pcrinfo
 * share: tables of values each form must take (with the value it must give) and
 * values it must refuse (with the message it must give). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/optparse.h"

static char msg[512];

/* pcr_opt_uint() and pcr_opt_size() have the same shape: one runner for both. */
typedef int (*u64_parser)(const char *, const char *, uint64_t, uint64_t, const char *, uint64_t *,
                          char *, size_t);
struct u64_ok {
    const char *s;
    uint64_t v;
};

static void u64_table(u64_parser parse, const struct u64_ok *ok, size_t nok, const char *const *bad,
                      size_t nbad)
{
    uint64_t v;

    for (size_t i = 0; i < nok; i++) {
        v = 1234;
        CHECK(parse("n", ok[i].s, 0, UINT64_MAX, "bytes", &v, msg, sizeof(msg)) == 0 &&
                  v == ok[i].v,
              "'%s' -> %llu (%s)", ok[i].s, (unsigned long long)v, msg);
    }
    for (size_t i = 0; i < nbad; i++) {
        v = 1234;
        CHECK(parse("n", bad[i], 0, UINT64_MAX, "bytes", &v, msg, sizeof(msg)) == -1 && v == 1234,
              "'%s' accepted as %llu", bad[i], (unsigned long long)v);
    }
}

/* Refused by every numeric form: signs, spaces, exponents, hex, units, words. */
static const char *const bad_any[] = {
    "", " 5", "5 ", "+3", "-1", "--1", "1e3", "1E3", "0x10", "10Q", "5x", "5s", "inf", "nan",
};

static void any_cases(void)
{
    for (size_t i = 0; i < sizeof(bad_any) / sizeof(bad_any[0]); i++) {
        const char *b = bad_any[i];
        uint64_t u;
        uint32_t k;
        double d, r[2];

        CHECK(pcr_opt_uint("n", b, 0, UINT64_MAX, NULL, &u, msg, sizeof(msg)) == -1, "uint '%s'",
              b);
        CHECK(pcr_opt_size("n", b, 0, UINT64_MAX, "bytes", &u, msg, sizeof(msg)) == -1, "size '%s'",
              b);
        CHECK(pcr_opt_real("n", b, 0, INFINITY, 0, NULL, &d, msg, sizeof(msg)) == -1, "real '%s'",
              b);
        CHECK(pcr_opt_threshold("n", b, &d, msg, sizeof(msg)) == -1, "threshold '%s'", b);
        CHECK(pcr_opt_level("n", b, &k, msg, sizeof(msg)) == -1, "level '%s'", b);
        CHECK(pcr_opt_frac_range("n", b, 0, INFINITY, 0, "x", r, msg, sizeof(msg)) == -1,
              "range '%s'", b);
        /* every message starts with the option and the value as typed */
        CHECK(strncmp(msg, "n=", 2) == 0 && strncmp(msg + 2, b, strlen(b)) == 0, "%s", msg);
    }
}

static void uint_cases(void)
{
    static const struct u64_ok ok[] = {
        {"0", 0}, {"5", 5}, {"007", 7}, {"1048576", 1048576}, {"18446744073709551615", UINT64_MAX},
    };
    static const char *const bad[] = {
        "1.5", "1,5", "1M", "1_0", "١", "18446744073709551616", "99999999999999999999999999",
    };
    uint64_t v;

    u64_table(pcr_opt_uint, ok, sizeof(ok) / sizeof(ok[0]), bad, sizeof(bad) / sizeof(bad[0]));
    /* the range, and the message names the option, the value, the range and the unit */
    CHECK(pcr_opt_uint("read_ahead_kb", "1048577", 0, 1048576, "kB", &v, msg, sizeof(msg)) == -1,
          "above max");
    CHECK(strcmp(msg, "read_ahead_kb=1048577: want a whole number 0..1048576 (kB)") == 0, "%s",
          msg);
    CHECK(pcr_opt_uint("--jobs", "0", 1, 256, NULL, &v, msg, sizeof(msg)) == -1, "below min");
    CHECK(strcmp(msg, "--jobs=0: want a whole number 1..256") == 0, "%s", msg);
    /* no message buffer: only the verdict */
    CHECK(pcr_opt_uint("n", "x", 0, 9, NULL, &v, NULL, 0) == -1, "NULL msg");
}

static void real_cases(void)
{
    static const struct {
        const char *s;
        double v;
    } ok[] = {
        {"0", 0}, {"5", 5}, {"0.5", 0.5}, {".5", 0.5}, {"86400", 86400}, {"0.001", 0.001},
    };
    static const char *const bad[] = {
        "1,5",
        "5.",
        ".",
        "5..0",
        "1.2.3",
        "1"
        "000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "000000000000000000000000000000000000000000000000000000000000000000000000000000",
    };
    double v;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        v = -7;
        CHECK(pcr_opt_real("t", ok[i].s, 0, INFINITY, 0, NULL, &v, msg, sizeof(msg)) == 0 &&
                  v == ok[i].v,
              "'%s' -> %g (%s)", ok[i].s, v, msg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = -7;
        CHECK(pcr_opt_real("t", bad[i], 0, INFINITY, 0, NULL, &v, msg, sizeof(msg)) == -1 &&
                  v == -7,
              "'%.20s' accepted as %g", bad[i], v);
    }
    /* the long value is cut in the message: one short line */
    CHECK(strlen(msg) < 200 && strstr(msg, "...") != NULL, "%s", msg);
    CHECK(pcr_opt_real("timeout", "10Q", 0, 31536000, 0, "seconds", &v, msg, sizeof(msg)) == -1,
          "10Q");
    CHECK(strcmp(msg, "timeout=10Q: want a decimal number 0..31536000 (seconds)") == 0, "%s", msg);
    /* open bounds */
    CHECK(pcr_opt_real("m", "3", 3, 5, PCR_OPT_GT_MIN | PCR_OPT_LT_MAX, NULL, &v, msg,
                       sizeof(msg)) == -1,
          "open min");
    CHECK(strcmp(msg, "m=3: want a decimal number (3, 5)") == 0, "%s", msg);
    CHECK(pcr_opt_real("m", "4.5", 3, 5, PCR_OPT_GT_MIN | PCR_OPT_LT_MAX, NULL, &v, msg,
                       sizeof(msg)) == 0 &&
              v == 4.5,
          "inside open");
    CHECK(pcr_opt_real("m", "5", 3, 5, PCR_OPT_GT_MIN | PCR_OPT_LT_MAX, NULL, &v, msg,
                       sizeof(msg)) == -1,
          "open max");
}

static void size_cases(void)
{
    static const struct u64_ok ok[] = {
        {"0", 0},
        {"1", 1},
        {"100k", 100000},
        {"100K", 100000},
        {"12.5M", 12500000},
        {"2G", 2000000000},
        {"1.5k", 1500},
        {"1.500k", 1500},
        {"0.001k", 1},
        {".5k", 500},
        {"1.000000000000", 1},
        {"18446744073709551615", UINT64_MAX},
        {"18446744073.709551615G", UINT64_MAX},
    };
    static const char *const bad[] = {
        "1.5",
        "0.0001",
        "0.0001k",
        "5MB",
        "5Mi",
        "5m",
        "5g",
        "5T",
        "k",
        "M",
        ".k",
        "5.k",
        "5 M",
        "5M ",
        "zz",
        "1.0000000001G",
        "18446744073709551616",
        "18446744073.709551616G",
        "99999999999999999999G",
    };
    uint64_t v;

    u64_table(pcr_opt_size, ok, sizeof(ok) / sizeof(ok[0]), bad, sizeof(bad) / sizeof(bad[0]));
    CHECK(pcr_opt_size("bwlimit", "1000000000001", 0, UINT64_C(1000000000000), "bytes/s", &v, msg,
                       sizeof(msg)) == -1,
          "above max");
    CHECK(strncmp(msg, "bwlimit=1000000000001: want bytes/s: a whole number 0..1000G,", 60) == 0,
          "%s", msg);
}

static void word_cases(void)
{
    static const char *const yn[] = {"yes", "no", "auto", NULL};
    unsigned w = 9;

    CHECK(pcr_opt_word("readdirplus", "no", yn, &w, msg, sizeof(msg)) == 0 && w == 1, "no");
    CHECK(pcr_opt_word("readdirplus", "auto", yn, &w, msg, sizeof(msg)) == 0 && w == 2, "auto");
    w = 9;
    for (const char *const *b = (const char *const[]){"", "abc", "Yes", "yes ", " no", "1", NULL};
         *b; b++)
        CHECK(pcr_opt_word("readdirplus", *b, yn, &w, msg, sizeof(msg)) == -1 && w == 9, "'%s'",
              *b);
    CHECK(strcmp(msg, "readdirplus=1: want yes, no or auto") == 0, "%s", msg);
}

static void threshold_cases(void)
{
    static const char *const ok[] = {"1", "0.95", "0.9", ".5", "0.0001", "0.9999", "1.0000"};
    static const char *const bad[] = {
        "",        "0",    "0.0",   "1.0001", "2",   "-0.5",     "0.95 ", "0.9500001",
        "0.12345", "1e-1", "0x0.8", "nan",    "inf", "0.95:0.9", "95%",
    };
    double v;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        CHECK(pcr_opt_threshold("quality", ok[i], &v, msg, sizeof(msg)) == 0 &&
                  v == strtod(ok[i], NULL),
              "'%s' (%s)", ok[i], msg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(pcr_opt_threshold("quality", bad[i], &v, msg, sizeof(msg)) == -1, "'%s' accepted",
              bad[i]);
    CHECK(strcmp(msg, "quality=95%: want a threshold in (0, 1] with at most 4 digits after the "
                      "point, e.g. 0.95") == 0,
          "%s", msg);
}

static void range_cases(void)
{
    double r[2] = {-1, -1};

    CHECK(pcr_opt_frac_range("refurb_scale", "0.08:1", 0, 1, PCR_OPT_GT_MIN, "area", r, msg,
                             sizeof(msg)) == 0 &&
              r[0] == 0.08 && r[1] == 1,
          "0.08:1 %s", msg);
    CHECK(pcr_opt_frac_range("refurb_ratio", "3/4:4/3", 0, INFINITY, PCR_OPT_GT_MIN, "ratio", r,
                             msg, sizeof(msg)) == 0 &&
              r[0] == 0.75 && fabs(r[1] - 4.0 / 3) < 1e-15,
          "3/4:4/3 %s", msg);
    CHECK(pcr_opt_frac_range("refurb_ratio", "1,2", 0, INFINITY, PCR_OPT_GT_MIN, "ratio", r, msg,
                             sizeof(msg)) == 0 &&
              r[0] == 1 && r[1] == 2,
          "1,2 %s", msg);
    for (const char *const *b = (const char *const[]){"", ":", "1", "0.9:0.1", "0:1", "0.5:1.5",
                                                      "1e-1:1", "1/0:1", "0.1:1:1", "a:b", " 0.1:1",
                                                      "0.1:1 ", "-0.1:1", "1/-2:1", "0.5/:1", NULL};
         *b; b++)
        CHECK(pcr_opt_frac_range("refurb_scale", *b, 0, 1, PCR_OPT_GT_MIN, "area", r, msg,
                                 sizeof(msg)) == -1,
              "'%s' accepted", *b);
    /* the message names this option only, with its value */
    CHECK(strcmp(msg, "refurb_scale=0.5/:1: want LO:HI, area with 0 < LO <= HI <= 1 (each a "
                      "decimal or N/D, e.g. 3/4)") == 0,
          "%s", msg);
    CHECK(pcr_opt_frac_range("refurb_ratio", "", 0, INFINITY, PCR_OPT_GT_MIN, "ratio", r, msg,
                             sizeof(msg)) == -1 &&
              strcmp(msg, "refurb_ratio=: want LO:HI, ratio with 0 < LO <= HI (each a decimal "
                          "or N/D, e.g. 3/4)") == 0,
          "%s", msg);
}

static void level_cases(void)
{
    uint32_t k = 7;

    CHECK(pcr_opt_level("level", "full", &k, msg, sizeof(msg)) == 0 && k == PCR_OPT_LEVEL_FULL,
          "full");
    CHECK(pcr_opt_level("level", "3", &k, msg, sizeof(msg)) == 0 && k == 3, "3");
    CHECK(pcr_opt_level("level", "0", &k, msg, sizeof(msg)) == 0 && k == 0, "0: syntax ok");
    CHECK(pcr_opt_level("level", "99999999999999999999", &k, msg, sizeof(msg)) == 0 &&
              k == PCR_OPT_LEVEL_FULL - 1,
          "huge: saturates below full");
    for (const char *const *b = (const char *const[]){"", "bad", "Full", "full ", "3\n", "3 ", " 3",
                                                      "+3", "-1", "0x3", "3.0", "1e1", NULL};
         *b; b++)
        CHECK(pcr_opt_level("level", *b, &k, msg, sizeof(msg)) == -1, "'%s' accepted", *b);
    /* a control byte in a value is shown escaped: the message stays one line */
    CHECK(strcmp(msg, "level=1e1: want a level: a whole number 1..L (the store's levels) or "
                      "full") == 0,
          "%s", msg);
    pcr_opt_level("level", "3\n", &k, msg, sizeof(msg));
    CHECK(strchr(msg, '\n') == NULL && strstr(msg, "level=3\\x0a:") == msg, "%s", msg);
}

int main(void)
{
    any_cases();
    uint_cases();
    real_cases();
    size_cases();
    word_cases();
    threshold_cases();
    range_cases();
    level_cases();
    return check_done("optparse");
}
