/* Unit tests of the token modules: NPY reader/writer, escape code, Huffman, the codec
 * (both coders, codebooks 391 and 8192, 16x16 and 32x32 grids), token shards and the
 * SeiT release-format reader, including every bad input of issue #4.
 *
 *   test_tokens                     the self-contained tests
 *   test_tokens --numpy MKTOKENS    compare with numpy: the .npy writer byte for byte
 *                                   against numpy.save(), and SeiT files written by
 *                                   tests/gen/mktokens.py against its .npy tree
 *                                   (exit 77, "skipped", if python3-numpy is missing)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef PCR_HAVE_ZLIB
#include <zlib.h>
#endif
#include "pcrfs/tokens.h"
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "tokens/tokens_internal.h"

static int failures, checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* rc must be @want and the message must contain @sub. */
#define CHECK_ERR(rc, want, err, sub)                                                              \
    do {                                                                                           \
        checks++;                                                                                  \
        if ((rc) != (want) || !strstr((err), (sub))) {                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: expected %d containing \"%s\", got %d \"%s\"\n", __FILE__,     \
                    __LINE__, (int)(want), (sub), (int)(rc), (err));                               \
        }                                                                                          \
    } while (0)

static char tmpdir[64];

/* A path under the test directory; the strings live until exit (freed in main). */
static char *paths[4096];
static int npaths;

static const char *tpath(const char *fmt, ...)
{
    char name[256], *p;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    if (npaths == (int)PCR_ARRAY_SIZE(paths) || asprintf(&p, "%s/%s", tmpdir, name) < 0) {
        fprintf(stderr, "tpath: out of slots\n");
        exit(2);
    }
    paths[npaths++] = p;
    return p;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void log_hook(enum pcr_log_level lvl, const char *msg, void *ctx)
{
    (void)ctx;
    if (getenv("TEST_VERBOSE"))
        fprintf(stderr, "log[%d]: %s\n", (int)lvl, msg);
}

/* ---- A realistic grid generator (the C twin of tests/gen/mktokens.py) ----------- */

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double urand(uint64_t *s)
{
    return (double)(rnd(s) >> 11) / 9007199254740992.0;
}

struct gen {
    unsigned k;
    uint16_t *perm; /* rank -> token id */
    double *cdf;    /* Zipf(0.75) */
    uint64_t rng;
};

static void gen_init(struct gen *g, unsigned k, uint64_t seed)
{
    double sum = 0;

    g->k = k;
    g->rng = seed;
    g->perm = malloc(k * sizeof(uint16_t));
    g->cdf = malloc(k * sizeof(double));
    for (unsigned i = 0; i < k; i++)
        g->perm[i] = (uint16_t)i;
    for (unsigned i = k - 1; i > 0; i--) {
        unsigned j = (unsigned)(rnd(&g->rng) % (i + 1));
        uint16_t t = g->perm[i];
        g->perm[i] = g->perm[j];
        g->perm[j] = t;
    }
    for (unsigned i = 0; i < k; i++) {
        sum += 1.0 / pow(i + 1.0, 0.75);
        g->cdf[i] = sum;
    }
    for (unsigned i = 0; i < k; i++)
        g->cdf[i] /= sum;
}

static unsigned gen_zipf(struct gen *g)
{
    double u = urand(&g->rng);
    unsigned lo = 0, hi = g->k - 1;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (g->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Four regions split at random row/column, a palette of 8 tokens each, neighbours
 * continued with probability 0.35, 8% wild tokens. */
static void gen_grid(struct gen *g, unsigned h, unsigned w, uint16_t *out)
{
    unsigned pal[4][8], cy = 1 + (unsigned)(rnd(&g->rng) % h),
                        cx = 1 + (unsigned)(rnd(&g->rng) % w);

    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 8; i++)
            pal[r][i] = gen_zipf(g);
    for (unsigned y = 0; y < h; y++) {
        for (unsigned x = 0; x < w; x++) {
            unsigned r = (y >= cy) * 2 + (x >= cx), t;
            double u = urand(&g->rng);
            if (u < 0.35 && (x || y)) {
                if (x && (!y || urand(&g->rng) < 0.5))
                    out[y * w + x] = out[y * w + x - 1];
                else
                    out[y * w + x] = out[(y - 1) * w + x];
                continue;
            }
            if (u < 0.43)
                t = gen_zipf(g);
            else
                t = pal[r][(unsigned)(8 * urand(&g->rng) * urand(&g->rng))];
            out[y * w + x] = g->perm[t];
        }
    }
}

static void gen_free(struct gen *g)
{
    free(g->perm);
    free(g->cdf);
}

/* ---- Escape code -------------------------------------------------------------- */

static void test_escape(void)
{
    const uint16_t v[] = {0, 1, 254, 255, 256, 300, 509, 510, 511, 766, 8191, 65535};
    const size_t n = PCR_ARRAY_SIZE(v);
    uint8_t buf[64];
    uint16_t back[16];
    size_t len = pcr_tok_escape_encode(v, n, buf);
    /* SeiT's forms for values below 510; the extension above. */
    const uint8_t head[] = {0, 1, 254, 255, 0, 255, 1, 255, 45, 255, 254, 255, 255, 0, 0};

    CHECK(len == 3 + 2 * 4 + 4 * 5);
    CHECK(memcmp(buf, head, sizeof(head)) == 0);
    CHECK(memcmp(buf + len - 4, "\xff\xff\xfe\x01", 4) == 0); /* 65535 = 510 + 0xfe01 */
    CHECK(pcr_tok_escape_decode(buf, len, back, 16) == (ssize_t)n);
    CHECK(memcmp(back, v, sizeof(v)) == 0);
    /* Counting beyond the capacity, writing nothing past it. */
    back[2] = 0xbeef;
    CHECK(pcr_tok_escape_decode(buf, len, back, 2) == (ssize_t)n);
    CHECK(back[2] == 0xbeef);
    CHECK(pcr_tok_escape_decode(buf, len, NULL, 0) == (ssize_t)n);
    /* A stream that ends inside an escape, and an out-of-range extension value. */
    CHECK(pcr_tok_escape_decode((const uint8_t *)"\x05\xff", 2, back, 16) == -EINVAL);
    CHECK(pcr_tok_escape_decode((const uint8_t *)"\xff\xff\x01", 3, back, 16) == -EINVAL);
    CHECK(pcr_tok_escape_decode((const uint8_t *)"\xff\xff\xff\xff", 4, back, 16) == -EINVAL);
    CHECK(pcr_tok_escape_decode((const uint8_t *)"\xff\xff\xfe\x02", 4, back, 16) == -EINVAL);
    CHECK(pcr_tok_escape_decode(buf, 0, back, 16) == 0);
}

/* ---- Huffman ------------------------------------------------------------------ */

static double kraft(const uint8_t *len, unsigned n)
{
    double k = 0;

    for (unsigned i = 0; i < n; i++)
        if (len[i])
            k += ldexp(1.0, -len[i]);
    return k;
}

static void huf_roundtrip(const uint64_t *freq, unsigned n, const char *what)
{
    uint8_t *len = malloc(n + 1);
    struct pcr_huf_enc e;
    struct pcr_huf_dec d;
    uint16_t sym[4000], back[4001];
    uint8_t out[16000];
    unsigned used = 0, k = 0, maxl = 0;
    long bytes;

    CHECK(pcr_huf_lengths(freq, n, PCR_HUF_MAXLEN, len) == 0);
    for (unsigned i = 0; i <= n; i++)
        if (len[i] > maxl)
            maxl = len[i];
    CHECK(maxl <= PCR_HUF_MAXLEN);
    CHECK(kraft(len, n + 1) <= 1.0);
    CHECK(len[n] == maxl); /* the guard is a longest code */
    CHECK(pcr_huf_enc_init(&e, len, n + 1) == 0);
    CHECK(pcr_huf_dec_init(&d, len, n + 1, NULL) == 0);
    for (unsigned i = 0; i < n; i++)
        if (freq[i]) {
            CHECK(len[i] > 0);
            used++;
        } else {
            CHECK(len[i] == 0);
        }
    /* Every used symbol, several times, in a scrambled order. */
    for (unsigned r = 0; r < 4000; r++) {
        unsigned s = (unsigned)((r * 2654435761u) % n);
        while (!freq[s])
            s = (s + 1) % n;
        sym[k++] = (uint16_t)s;
    }
    bytes = pcr_huf_encode(&e, sym, k, out, sizeof(out));
    CHECK(bytes > 0);
    if (bytes > 0) {
        CHECK(pcr_huf_decode(&d, out, (size_t)bytes, back, k) == 0);
        CHECK(memcmp(back, sym, k * sizeof(uint16_t)) == 0);
        /* Exactly k symbols: one fewer, one more, a byte less or more all fail. */
        CHECK(pcr_huf_decode(&d, out, (size_t)bytes, back, k - 1) == -EINVAL);
        CHECK(pcr_huf_decode(&d, out, (size_t)bytes, back, k + 1) == -EINVAL);
        CHECK(pcr_huf_decode(&d, out, (size_t)bytes - 1, back, k) == -EINVAL);
        out[bytes] = 0xff;
        CHECK(pcr_huf_decode(&d, out, (size_t)bytes + 1, back, k) == -EINVAL);
    }
    /* The guard and unused symbols cannot be encoded. */
    {
        uint16_t g = (uint16_t)n;
        if (n < 65536)
            CHECK(pcr_huf_encode(&e, &g, 1, out, sizeof(out)) == -ENOENT);
    }
    if (failures)
        fprintf(stderr, "  (huffman case: %s)\n", what);
    pcr_huf_enc_free(&e);
    pcr_huf_dec_free(&d);
    free(len);
}

static void test_huffman(void)
{
    uint64_t f[600];
    uint8_t len[8];
    struct pcr_huf_dec d;

    /* One used symbol (plus the guard): 1-bit codes. */
    memset(f, 0, sizeof(f));
    f[3] = 100;
    huf_roundtrip(f, 5, "single symbol");
    /* Two, uniform 256, Zipf 391. */
    f[4] = 1;
    huf_roundtrip(f, 5, "two symbols");
    for (int i = 0; i < 256; i++)
        f[i] = 1000;
    huf_roundtrip(f, 256, "uniform 256");
    for (int i = 0; i < 391; i++)
        f[i] = (uint64_t)(1e7 / pow(i + 1, 0.9)) + 1;
    huf_roundtrip(f, 391, "zipf 391");
    /* Fibonacci counts give a depth-60 Huffman tree: the length limit must act. */
    f[0] = f[1] = 1;
    for (int i = 2; i < 60; i++)
        f[i] = f[i - 1] + f[i - 2];
    huf_roundtrip(f, 60, "fibonacci 60");

    /* Validation of untrusted lengths: over-full (Kraft > 1), too long, no guard. */
    memcpy(len, "\x01\x01\x01", 3);
    CHECK(pcr_huf_dec_init(&d, len, 3, NULL) == -EINVAL);
    memcpy(len, "\x01\x15\x15", 3);
    CHECK(pcr_huf_dec_init(&d, len, 3, NULL) == -EINVAL);
    memcpy(len, "\x01\x01\x00", 3);
    CHECK(pcr_huf_dec_init(&d, len, 3, NULL) == -EINVAL);
    /* An incomplete code decodes what it can and rejects the unused space. */
    memcpy(len, "\x01\x03\x03", 3); /* codes 0, 100, 101; 11x unused */
    CHECK(pcr_huf_dec_init(&d, len, 3, NULL) == 0);
    {
        uint16_t o[8];
        CHECK(pcr_huf_decode(&d, (const uint8_t *)"\x0f", 1, o, 4) == 0); /* 0 0 0 0 + 1111 */
        CHECK(o[0] == 0 && o[3] == 0);
        CHECK(pcr_huf_decode(&d, (const uint8_t *)"\xc0", 1, o, 1) == -EINVAL); /* 11: none */
        CHECK(pcr_huf_decode(&d, (const uint8_t *)"\xa0", 1, o, 1) == -EINVAL); /* guard */
        CHECK(pcr_huf_decode(&d, (const uint8_t *)"\x0e", 1, o, 4) == -EINVAL); /* pad 1110 */
        pcr_huf_dec_free(&d);
    }
}

/* ---- NPY ---------------------------------------------------------------------- */

/* A .npy file with an arbitrary header dict (padded like numpy) and raw data. */
static size_t make_npy(uint8_t *out, int major, const char *dict, const void *data, size_t dlen)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), hlen;

    hlen = dl + 1;
    hlen += 64 - ((pre + hlen) % 64);
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)major;
    out[7] = 0;
    if (major == 1) {
        out[8] = (uint8_t)(hlen & 0xff);
        out[9] = (uint8_t)(hlen >> 8);
    } else {
        out[8] = (uint8_t)(hlen & 0xff);
        out[9] = (uint8_t)(hlen >> 8);
        out[10] = out[11] = 0;
    }
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, ' ', hlen - dl - 1);
    out[pre + hlen - 1] = '\n';
    memcpy(out + pre + hlen, data, dlen);
    return pre + hlen + dlen;
}

static char dictbuf[256];

static const char *dict2(const char *descr, const char *fortran, const char *shape)
{
    snprintf(dictbuf, sizeof(dictbuf), "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
             fortran, shape);
    return dictbuf;
}

/* Parse + convert a buffer; on failure the message is in err. */
static int grid_of(const uint8_t *buf, size_t len, uint16_t *out, unsigned *h, unsigned *w,
                   char *err)
{
    struct pcr_npy a;
    int rc = pcr_npy_parse(buf, len, &a, err, 256);

    if (rc)
        return rc;
    return pcr_npy_to_grid(&a, out, 4096, h, w, err, 256);
}

static void test_npy_dtypes(void)
{
    uint8_t buf[1024], data[64];
    uint16_t g[64];
    unsigned h, w;
    char err[256];
    /* Values 0, 1, 254, 65535 (where the type holds them) as a 2x2 grid. */
    struct {
        const char *descr;
        unsigned size;
        bool be;
        uint16_t v[4];
    } cases[] = {
        {"|u1", 1, false, {0, 1, 254, 255}},   {"<u1", 1, false, {0, 1, 7, 255}},
        {"|i1", 1, false, {0, 1, 100, 127}},   {"<u2", 2, false, {0, 1, 254, 65535}},
        {">u2", 2, true, {0, 1, 254, 65535}},  {"<i2", 2, false, {0, 1, 254, 32767}},
        {"<u4", 4, false, {0, 1, 254, 65535}}, {"<i4", 4, false, {0, 1, 254, 65535}},
        {"<i8", 8, false, {0, 1, 254, 65535}}, {"<u8", 8, false, {0, 1, 8191, 65535}},
        {">i8", 8, true, {0, 1, 254, 65535}},
    };

    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        for (int major = 1; major <= 2; major++) {
            size_t len;
            int rc;
            for (int i = 0; i < 4; i++) {
                uint64_t v = cases[c].v[i];
                for (unsigned b = 0; b < cases[c].size; b++) {
                    unsigned shift = cases[c].be ? 8 * (cases[c].size - 1 - b) : 8 * b;
                    data[i * cases[c].size + b] = (uint8_t)(shift < 64 ? v >> shift : 0);
                }
            }
            len = make_npy(buf, major, dict2(cases[c].descr, "False", "(2, 2)"), data,
                           4 * cases[c].size);
            rc = grid_of(buf, len, g, &h, &w, err);
            CHECK(rc == 0);
            if (rc)
                fprintf(stderr, "  dtype %s v%d: %s\n", cases[c].descr, major, err);
            CHECK(h == 2 && w == 2);
            CHECK(memcmp(g, cases[c].v, sizeof(cases[c].v)) == 0);
        }
    }
    /* Header variations numpy or other writers produce: double quotes, other key
     * order, no trailing comma, 1-tuple shape for the parser. */
    {
        struct pcr_npy a;
        size_t len =
            make_npy(buf, 1, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i8\"}",
                     "\1\0\0\0\0\0\0\0\2\0\0\0\0\0\0\0\3\0\0\0\0\0\0\0", 24);
        int64_t v = 0;
        CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
        CHECK(a.ndim == 1 && a.shape[0] == 3 && a.kind == 'i' && a.itemsize == 8);
        CHECK(pcr_npy_get_int(&a, 2, &v) == 0 && v == 3);
        CHECK(pcr_npy_get_int(&a, 3, &v) == -EINVAL);
    }
}

static void test_npy_bad(void)
{
    static uint8_t buf[16384], data[8192];
    uint16_t g[4096] = {0}; /* also the data of a valid array below: defined bytes */
    unsigned h, w;
    char err[256] = "";
    size_t len;
    int rc;

    memset(data, 0, sizeof(data));
#define BAD(dict, dlen, sub)                                                                       \
    do {                                                                                           \
        len = make_npy(buf, 1, (dict), data, (dlen));                                              \
        err[0] = 0;                                                                                \
        rc = grid_of(buf, len, g, &h, &w, err);                                                    \
        CHECK_ERR(rc, -EINVAL, err, sub);                                                          \
    } while (0)

    /* Wrong dtype. */
    BAD(dict2("<f4", "False", "(2, 2)"), 16, "dtype '<f4' is not an integer type");
    BAD(dict2("<f8", "False", "(2, 2)"), 32, "not an integer type");
    BAD(dict2("|b1", "False", "(2, 2)"), 4, "unsupported dtype '|b1'");
    BAD(dict2("<c8", "False", "(2, 2)"), 32, "unsupported dtype");
    BAD(dict2("<U1", "False", "(2, 2)"), 16, "unsupported dtype");
    BAD(dict2("|O", "False", "(2, 2)"), 16, "unsupported dtype");
    BAD(dict2("|u2", "False", "(2, 2)"), 8, "no byte order");
    BAD("{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (2,), }", 4,
        "structured dtypes");
    /* Wrong rank. */
    BAD(dict2("<u2", "False", "(4,)"), 8, "expected a 2-D array, got 1-D (4,)");
    BAD(dict2("<u2", "False", "(2, 2, 2)"), 16, "expected a 2-D array, got 3-D (2, 2, 2)");
    BAD(dict2("<u2", "False", "()"), 2, "got 0-D");
    /* Fortran order. */
    BAD(dict2("<u2", "True", "(2, 3)"), 12, "Fortran-ordered");
    /* Empty and oversized grids. */
    BAD(dict2("<u2", "False", "(0, 3)"), 0, "out of range");
    BAD(dict2("|u1", "False", "(1, 4097)"), 4097, "out of range");
    /* Negative values and values above 65535, with their position. */
    data[0] = 5;
    data[2 * 3 + 1] = 0xff; /* i2 at [1, 0] of a (2, 3) grid: 0xff00 = -256 */
    data[2 * 3] = 0x00;
    BAD(dict2("<i2", "False", "(2, 3)"), 12, "negative value -256 at [1, 0]");
    memset(data, 0, sizeof(data));
    data[4 * 5] = 0x70;
    data[4 * 5 + 1] = 0x11;
    data[4 * 5 + 2] = 0x01; /* u4 70000 at flat 5 = [1, 2] */
    BAD(dict2("<u4", "False", "(2, 3)"), 24, "value 70000 at [1, 2] exceeds 65535");
    memset(data, 0, sizeof(data));
    memset(data + 8, 0xff, 8); /* i8 -1 at [0, 1] */
    BAD(dict2("<i8", "False", "(1, 2)"), 16, "negative value -1 at [0, 1]");
    memset(data, 0, sizeof(data));
    data[0] = 0x80; /* >i2 0x8000 = -32768 at [0, 0] */
    BAD(dict2(">i2", "False", "(1, 1)"), 2, "negative value -32768 at [0, 0]");
    memset(data, 0xff, 8); /* u8 max */
    BAD(dict2("<u8", "False", "(1, 1)"), 8, "value 18446744073709551615 at [0, 0]");
    memset(data, 0, sizeof(data));
    /* Garbled headers. */
    BAD("{'descr': '<u2', 'shape': (2, 2), }", 8, "missing key 'fortran_order'");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", 8,
        "unexpected or repeated key 'x'");
    BAD("{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (2, 2)}", 8,
        "repeated key 'descr'");
    BAD("{'descr': '<u2', 'fortran_order': Maybe, 'shape': (2, 2), }", 8, "malformed header");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (2, -2), }", 8, "bad shape");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2) ", 8, "malformed header");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), } x", 8,
        "bytes after the dictionary");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999, 2), }", 8, "bad shape");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (1099511627775, 1099511627775), }", 8,
        "shape too large");
    BAD("{'descr': '<u2', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8, 9), }", 8,
        "more than 8 dimensions");

    /* Truncated data, trailing data, a truncated header, bad magic or version. */
    len = make_npy(buf, 1, dict2("<u2", "False", "(32, 32)"), g, 2048);
    CHECK_ERR(grid_of(buf, len - 1, g, &h, &w, err), -EINVAL, err,
              "truncated: 2047 data bytes, shape needs 2048");
    CHECK_ERR(grid_of(buf, 100, g, &h, &w, err), -EINVAL, err, "the header runs past the end");
    CHECK_ERR(grid_of(buf, 5, g, &h, &w, err), -EINVAL, err, "not a .npy file");
    buf[len] = 0;
    CHECK_ERR(grid_of(buf, len + 1, g, &h, &w, err), -EINVAL, err, "1 trailing bytes");
    CHECK(grid_of(buf, len, g, &h, &w, err) == 0 && h == 32 && w == 32);
    buf[6] = 3;
    CHECK_ERR(grid_of(buf, len, g, &h, &w, err), -EINVAL, err, "unsupported .npy version 3.0");
    buf[6] = 1;
    buf[0] = 0x92;
    CHECK_ERR(grid_of(buf, len, g, &h, &w, err), -EINVAL, err, "no \\x93NUMPY magic");
    buf[0] = 0x93;
    buf[20] = 0xc3;
    CHECK_ERR(grid_of(buf, len, g, &h, &w, err), -EINVAL, err, "malformed header: byte 0xc3");
    buf[20] = 0;
    CHECK_ERR(grid_of(buf, len, g, &h, &w, err), -EINVAL, err, "malformed header: byte 0x00");
    /* A v2.0 header whose 4-byte length is huge. */
    len = make_npy(buf, 2, dict2("<u2", "False", "(1, 1)"), g, 2);
    buf[11] = 0x80;
    CHECK_ERR(grid_of(buf, len, g, &h, &w, err), -EINVAL, err, "header runs past the end");
#undef BAD
    /* The buffer is too small for the grid: -E2BIG, not an overflow. */
    {
        struct pcr_npy a;
        len = make_npy(buf, 1, dict2("<u2", "False", "(4, 4)"), data, 32);
        CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
        CHECK(pcr_npy_to_grid(&a, g, 15, &h, &w, err, sizeof(err)) == -E2BIG);
    }
}

static void test_npy_files(void)
{
    uint8_t buf[4096];
    uint16_t *g = NULL, v[6] = {1, 2, 3, 65535, 0, 9};
    unsigned h = 0, w = 0;
    char err[512];
    size_t len;
    int rc;

    len = make_npy(buf, 1, dict2("<u2", "False", "(2, 3)"), v, sizeof(v));
    write_file(tpath("ok.npy"), buf, len);
    rc = pcr_npy_load_grid(tpath("ok.npy"), &g, &h, &w, err, sizeof(err));
    CHECK(rc == 0 && h == 2 && w == 3 && g && memcmp(g, v, sizeof(v)) == 0);
    free(g);
    /* Every message names the file. */
    write_file(tpath("trunc.npy"), buf, len - 3);
    rc = pcr_npy_load_grid(tpath("trunc.npy"), &g, &h, &w, err, sizeof(err));
    CHECK_ERR(rc, -EINVAL, err, tpath("trunc.npy"));
    CHECK(strstr(err, "truncated") != NULL && g == NULL);
    len = make_npy(buf, 1, dict2("<u2", "True", "(2, 3)"), v, sizeof(v));
    write_file(tpath("fortran.npy"), buf, len);
    rc = pcr_npy_load_grid(tpath("fortran.npy"), &g, &h, &w, err, sizeof(err));
    CHECK_ERR(rc, -EINVAL, err, "fortran.npy: Fortran-ordered array (2, 3)");
    rc = pcr_npy_load_grid(tpath("missing.npy"), &g, &h, &w, err, sizeof(err));
    CHECK_ERR(rc, -ENOENT, err, "missing.npy");
    mkdir(tpath("adir.npy"), 0755);
    rc = pcr_npy_load_grid(tpath("adir.npy"), &g, &h, &w, err, sizeof(err));
    CHECK_ERR(rc, -EINVAL, err, "not a regular file");
    write_file(tpath("garbage.npy"), "PK\3\4garbage", 11);
    rc = pcr_npy_load_grid(tpath("garbage.npy"), &g, &h, &w, err, sizeof(err));
    CHECK_ERR(rc, -EINVAL, err, "garbage.npy: not a .npy file");
}

static void test_npy_writer(void)
{
    /* numpy 1.24: np.save(f, np.zeros((32, 32), np.uint16)) header, 128 bytes. */
    static const char dict[] = "{'descr': '<u2', 'fortran_order': False, 'shape': (32, 32), }";
    uint8_t expect[128], out[2200];
    uint16_t g[1024], back[1024];
    unsigned h, w;
    char err[256];

    memcpy(expect, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(expect + 10, dict, sizeof(dict) - 1);
    memset(expect + 10 + sizeof(dict) - 1, ' ', 127 - 10 - (sizeof(dict) - 1));
    expect[127] = '\n';
    for (int i = 0; i < 1024; i++)
        g[i] = (uint16_t)(i * 67 + 1);
    g[0] = 0;
    g[1023] = 65535;
    CHECK(pcr_npy_grid_header_len(32, 32) == 128);
    CHECK(pcr_npy_grid_size(32, 32) == 128 + 2048);
    CHECK(pcr_npy_write_grid(32, 32, g, out, sizeof(out)) == 2176);
    CHECK(memcmp(out, expect, 128) == 0);
    CHECK(out[128] == 0 && out[129] == 0 && out[128 + 2 * 1023] == 0xff);
    CHECK(grid_of(out, 2176, back, &h, &w, err) == 0 && h == 32 && w == 32);
    CHECK(memcmp(back, g, sizeof(g)) == 0);
    CHECK(pcr_npy_write_grid(32, 32, g, out, 2175) == 0); /* too small: nothing */
    CHECK(pcr_npy_grid_size(0, 5) == 0 && pcr_npy_grid_size(4097, 1) == 0);
    /* Every valid shape: a multiple of 64, parseable, sizes agree. */
    for (unsigned hh = 1; hh <= PCR_TOK_MAX_SIDE; hh = hh * 3 + 1) {
        for (unsigned ww = 1; ww <= PCR_TOK_MAX_SIDE; ww = ww * 5 + 2) {
            size_t hl = pcr_npy_grid_header_len(hh, ww);
            uint8_t hdr[256];
            struct pcr_npy a;
            CHECK(hl % 64 == 0 && hl >= 64 && hl <= sizeof(hdr));
            CHECK(pcr_npy_grid_size(hh, ww) == hl + 2 * (size_t)hh * ww);
            /* Parse header + zero data of the right size. */
            if (hh * ww <= 1024) {
                uint8_t *f = calloc(1, pcr_npy_grid_size(hh, ww));
                uint16_t *z = calloc(hh * ww, 2);
                CHECK(pcr_npy_write_grid(hh, ww, z, f, pcr_npy_grid_size(hh, ww)) ==
                      pcr_npy_grid_size(hh, ww));
                CHECK(pcr_npy_parse(f, pcr_npy_grid_size(hh, ww), &a, err, sizeof(err)) == 0);
                CHECK(a.ndim == 2 && a.shape[0] == hh && a.shape[1] == ww && a.kind == 'u' &&
                      a.itemsize == 2 && !a.big_endian && a.data_offset == hl);
                free(f);
                free(z);
            }
        }
    }
}

static void test_codebook(void)
{
    uint8_t buf[1024], data[512] = {0};
    struct pcr_npy a;
    char err[256];
    size_t len;

    len = make_npy(buf, 1, dict2("<f4", "False", "(391, 0)"), data, 0);
    CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
    CHECK_ERR(pcr_npy_check_codebook(&a, 0, err, sizeof(err)), -EINVAL, err, "non-empty 2-D");
    len = make_npy(buf, 1, dict2("<f4", "False", "(8, 4)"), data, 128);
    CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
    CHECK(pcr_npy_check_codebook(&a, 8, err, sizeof(err)) == 0);
    CHECK_ERR(pcr_npy_check_codebook(&a, 9, err, sizeof(err)), -EINVAL, err,
              "codebook has 8 entries but tokens go up to 8");
    len = make_npy(buf, 1, dict2("<i4", "False", "(8, 4)"), data, 128);
    CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
    CHECK_ERR(pcr_npy_check_codebook(&a, 0, err, sizeof(err)), -EINVAL, err, "not a float");
    len = make_npy(buf, 1, dict2("<f8", "True", "(8, 4)"), data, 256);
    CHECK(pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
    CHECK_ERR(pcr_npy_check_codebook(&a, 0, err, sizeof(err)), -EINVAL, err, "Fortran");
}

/* ---- Codec -------------------------------------------------------------------- */

static struct pcr_tok_model *train(enum pcr_tok_coder coder, uint16_t *const *grids, unsigned n,
                                   unsigned h, unsigned w, struct pcr_tok_train_report *rep)
{
    struct pcr_tok_train_opts o = {.coder = coder, .dict_size = 8192};
    struct pcr_tok_trainer *t;
    struct pcr_tok_model *m = NULL;
    char err[256] = "";
    int rc;

    CHECK(pcr_tok_trainer_new(&o, &t) == 0);
    for (unsigned i = 0; i < n; i++)
        CHECK(pcr_tok_trainer_add(t, grids[i], h, w) == 0);
    rc = pcr_tok_trainer_finish(t, &m, rep, err, sizeof(err));
    CHECK(rc == 0 && m);
    if (rc)
        fprintf(stderr, "  train: %s\n", err);
    return m;
}

/* Encode every grid, reload the model from its blob (as the store does), decode with
 * the reloaded model, compare. @return total blob bytes. */
static uint64_t roundtrip(struct pcr_tok_model *m, uint16_t *const *grids, unsigned n, unsigned h,
                          unsigned w)
{
    size_t cap = pcr_tok_encode_bound(m, (size_t)h * w), bl;
    uint8_t *blob = malloc(cap), *copy;
    uint16_t *back = malloc((size_t)(h + 1) * w * 2); /* room for the wrong shapes below */
    struct pcr_tok_model *m2 = NULL;
    const void *mb = pcr_tok_model_blob(m, &bl);
    char err[256];
    uint64_t total = 0;
    int bad = 0;

    CHECK(pcr_tok_model_load(mb, bl, &m2, err, sizeof(err)) == 0);
    CHECK(pcr_tok_model_id(m2) == pcr_tok_model_id(m));
    CHECK(pcr_tok_model_coder(m2) == pcr_tok_model_coder(m));
    for (unsigned i = 0; i < n && m2; i++) {
        ssize_t len = pcr_tok_encode(m, grids[i], h, w, blob, cap);
        CHECK(len > 0);
        if (len <= 0)
            break;
        total += (uint64_t)len;
        if (pcr_tok_decode(m2, blob, (size_t)len, h, w, back) != 0 ||
            memcmp(back, grids[i], (size_t)h * w * 2) != 0)
            bad++;
        if (i < 8) {
            /* A blob decodes only to its own shape; truncation fails. */
            CHECK(pcr_tok_decode(m2, blob, (size_t)len, h, w - 1, back) == -EINVAL);
            CHECK(pcr_tok_decode(m2, blob, (size_t)len, h + 1, w, back) == -EINVAL);
            if (w > 1)
                CHECK(pcr_tok_decode(m2, blob, (size_t)len, h * 2, w / 2, back) != 0 ||
                      (h * 2 * (w / 2) == h * w));
            CHECK(pcr_tok_decode(m2, blob, (size_t)len - 1, h, w, back) == -EINVAL);
            CHECK(pcr_tok_decode(m2, blob, 0, h, w, back) == -EINVAL);
            /* Corrupted bytes: an error or some grid, never a crash (ASan run). */
            copy = malloc((size_t)len);
            for (ssize_t k = 0; k<len; k += len / 64> 7 ? len / 64 : 7) {
                memcpy(copy, blob, (size_t)len);
                copy[k] ^= 0x5a;
                (void)pcr_tok_decode(m2, copy, (size_t)len, h, w, back);
            }
            free(copy);
        }
    }
    CHECK(bad == 0);
    pcr_tok_model_free(m2);
    free(blob);
    free(back);
    return total;
}

static void codec_case(unsigned k, unsigned h, unsigned w, unsigned n)
{
    struct gen g;
    uint16_t **grids = malloc(n * sizeof(*grids));
    struct pcr_tok_train_report rep;
    bool high255 = false, high510 = false;

    gen_init(&g, k, 42 + k + h);
    for (unsigned i = 0; i < n; i++) {
        grids[i] = malloc((size_t)h * w * 2);
        gen_grid(&g, h, w, grids[i]);
        for (unsigned j = 0; j < h * w; j++) {
            high255 |= grids[i][j] >= 255;
            high510 |= grids[i][j] >= 510;
        }
    }
    CHECK(high255);
    CHECK(high510 == (k > 510));
    for (int c = PCR_TOK_AUTO; c <= PCR_TOK_ZSTD_DICT; c++) {
        struct pcr_tok_model *m = train((enum pcr_tok_coder)c, grids, n, h, w, &rep);
        uint64_t bytes;
        if (!m)
            continue;
        CHECK(rep.grids == n && rep.tokens == (uint64_t)n * h * w);
        CHECK(rep.entropy > 1.0 && rep.entropy <= log2(k) + 1e-9);
        /* Huffman is within one bit of the order-0 entropy. */
        CHECK(rep.huffman_bits >= rep.entropy - 1e-9 && rep.huffman_bits < rep.entropy + 1.0);
        CHECK(rep.symbols == pcr_tok_model_symbols(m) && rep.max_value < k);
        if (c == PCR_TOK_AUTO) {
            CHECK(rep.heldout_grids == n / 8 && rep.huffman_bytes > 0 && rep.zstd_bytes > 0);
            CHECK(rep.coder ==
                  (rep.huffman_bytes <= rep.zstd_bytes ? PCR_TOK_HUFFMAN : PCR_TOK_ZSTD_DICT));
        } else {
            CHECK(pcr_tok_model_coder(m) == (enum pcr_tok_coder)c &&
                  rep.coder == (enum pcr_tok_coder)c);
        }
        bytes = roundtrip(m, grids, n, h, w);
        /* Compression happened: below the 2 bytes/token of raw uint16. */
        CHECK(bytes < (uint64_t)n * h * w * 2 * 3 / 4);
        if (getenv("TEST_VERBOSE"))
            fprintf(stderr, "K=%u %ux%u %s: %.3f bits/token (entropy %.3f, huffman %.3f)\n", k, h,
                    w, pcr_tok_coder_name(pcr_tok_model_coder(m)),
                    8.0 * (double)bytes / ((double)n * h * w), rep.entropy, rep.huffman_bits);
        pcr_tok_model_free(m);
    }
    for (unsigned i = 0; i < n; i++)
        free(grids[i]);
    free(grids);
    gen_free(&g);
}

static void test_codec_special(void)
{
    uint16_t a[256], b[1024], c[1024], d[1024];
    uint16_t *grids[3] = {a, b, c};
    uint8_t blob[8192];
    struct pcr_tok_model *m;
    struct pcr_tok_train_report rep;

    /* A store whose grids are all the same token. */
    for (int i = 0; i < 256; i++)
        a[i] = 7;
    for (int coder = PCR_TOK_HUFFMAN; coder <= PCR_TOK_ZSTD_DICT; coder++) {
        uint16_t *one[1] = {a};
        m = train((enum pcr_tok_coder)coder, one, 1, 16, 16, &rep);
        if (!m)
            continue;
        CHECK(rep.symbols == 1 && rep.entropy == 0.0);
        roundtrip(m, one, 1, 16, 16);
        if (coder == PCR_TOK_HUFFMAN) {
            /* Unseen values have no Huffman code. */
            uint16_t other[256];
            memcpy(other, a, sizeof(a));
            other[5] = 8;
            CHECK(pcr_tok_encode(m, other, 16, 16, blob, sizeof(blob)) == -ENOENT);
            CHECK(pcr_tok_encode(m, a, 16, 16, blob, sizeof(blob)) == 32); /* 1 bit each */
        } else {
            uint16_t other[256], back[256];
            ssize_t len;
            memcpy(other, a, sizeof(a));
            other[5] = 65535;
            len = pcr_tok_encode(m, other, 16, 16, blob, sizeof(blob));
            CHECK(len > 0);
            CHECK(len > 0 && pcr_tok_decode(m, blob, (size_t)len, 16, 16, back) == 0 &&
                  memcmp(back, other, sizeof(other)) == 0);
        }
        pcr_tok_model_free(m);
    }
    /* Grids holding the extreme values 0 and 65535 (and everything between 250 and 520
     * to cross both escape boundaries). */
    for (int i = 0; i < 1024; i++) {
        b[i] = (uint16_t)(i % 2 ? 65535 : 0);
        c[i] = (uint16_t)(250 + i % 271);
        d[i] = (uint16_t)(i * 64);
    }
    grids[2] = d;
    for (int coder = PCR_TOK_HUFFMAN; coder <= PCR_TOK_ZSTD_DICT; coder++) {
        uint16_t *three[3] = {b, c, d};
        m = train((enum pcr_tok_coder)coder, three, 3, 32, 32, &rep);
        if (!m)
            continue;
        CHECK(rep.max_value == 65535);
        roundtrip(m, three, 3, 32, 32);
        pcr_tok_model_free(m);
    }
    (void)grids;
    /* The whole alphabet: every value 0..65535 once, in a 256x256 grid, plus a
     * skewed one so that the code has lengths from 1 to 20. */
    {
        uint16_t *all = malloc(65536 * 2), *skew = malloc(65536 * 2);
        uint16_t *two[2] = {all, skew};
        for (unsigned i = 0; i < 65536; i++) {
            all[i] = (uint16_t)(i * 40503u); /* odd multiplier: a permutation */
            skew[i] = (uint16_t)(i % 3 ? 17 : i % 7);
        }
        for (int coder = PCR_TOK_HUFFMAN; coder <= PCR_TOK_ZSTD_DICT; coder++) {
            m = train((enum pcr_tok_coder)coder, two, 2, 256, 256, &rep);
            if (!m)
                continue;
            CHECK(rep.symbols == 65536 && rep.max_value == 65535);
            CHECK(pcr_tok_model_symbols(m) == 65536);
            roundtrip(m, two, 2, 256, 256);
            pcr_tok_model_free(m);
        }
        free(all);
        free(skew);
    }
    /* Bad shapes. */
    {
        struct pcr_tok_trainer *t;
        CHECK(pcr_tok_trainer_new(NULL, &t) == 0);
        CHECK(pcr_tok_trainer_add(t, a, 0, 16) == -EINVAL);
        CHECK(pcr_tok_trainer_add(t, a, 4097, 1) == -EINVAL);
        {
            char err[256];
            CHECK_ERR(pcr_tok_trainer_finish(t, &m, NULL, err, sizeof(err)), -EINVAL, err,
                      "no grids");
        }
        struct pcr_tok_train_opts o = {.coder = 7};
        CHECK(pcr_tok_trainer_new(&o, &t) == -EINVAL);
        o = (struct pcr_tok_train_opts){.zstd_level = 99};
        CHECK(pcr_tok_trainer_new(&o, &t) == -EINVAL);
    }
}

/* Rewrite the checksum after editing a model blob, to reach the structural checks. */
static void reseal(uint8_t *b, size_t len)
{
    uint64_t x = pcr_xxh64(b, len - 8);
    for (int i = 0; i < 8; i++)
        b[len - 8 + i] = (uint8_t)(x >> (8 * i));
}

static void test_model_load_bad(void)
{
    struct gen g;
    uint16_t *grids[20];
    struct pcr_tok_model *m, *x = NULL;
    const uint8_t *mb;
    uint8_t *b;
    size_t len;
    char err[256];

    gen_init(&g, 391, 7);
    for (int i = 0; i < 20; i++) {
        grids[i] = malloc(1024 * 2);
        gen_grid(&g, 32, 32, grids[i]);
    }
    for (int coder = PCR_TOK_HUFFMAN; coder <= PCR_TOK_ZSTD_DICT; coder++) {
        m = train((enum pcr_tok_coder)coder, grids, 20, 32, 32, NULL);
        if (!m)
            continue;
        mb = pcr_tok_model_blob(m, &len);
        b = malloc(len);
        memcpy(b, mb, len);
        CHECK_ERR(pcr_tok_model_load(b, len - 1, &x, err, sizeof(err)), -EINVAL, err, "checksum");
        CHECK_ERR(pcr_tok_model_load(b, 10, &x, err, sizeof(err)), -EINVAL, err,
                  "not a pcrfs token model");
        b[len / 2] ^= 1;
        CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err, "checksum");
        b[len / 2] ^= 1;
        CHECK(pcr_tok_model_load(b, len, &x, err, sizeof(err)) == 0);
        pcr_tok_model_free(x);
        x = NULL;
        /* Valid checksum, bad content. */
        b[8] = 3;
        reseal(b, len);
        CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                  "unknown coder 3");
        b[8] = (uint8_t)coder;
        b[16] = b[18];
        b[17] = b[19]; /* rank 0 and rank 1 both the same value */
        reseal(b, len);
        CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err, "twice");
        memcpy(b, mb, len);
        b[12] = 0xff;
        b[13] = 0xff;
        reseal(b, len);
        CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                  "bad symbol count");
        memcpy(b, mb, len);
        if (coder == PCR_TOK_HUFFMAN) {
            unsigned nseen = pcr_tok_model_symbols(m);
            b[16 + 2 * nseen] = 1; /* rank 0 and ... */
            b[16 + 2 * nseen + 1] = 1;
            b[16 + 2 * nseen + 2] = 1; /* ... three 1-bit codes: over-full */
            reseal(b, len);
            CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                      "not a prefix code");
        } else {
            unsigned nseen = pcr_tok_model_symbols(m);
            uint8_t *lv = b + 16 + 2 * nseen;
            lv[0] = 0;
            lv[1] = lv[2] = lv[3] = 0; /* level 0 */
            reseal(b, len);
            CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                      "bad zstd level");
            memcpy(b, mb, len);
            lv[4] ^= 1; /* dictionary length off by one */
            reseal(b, len);
            CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                      "dictionary size");
            memcpy(b, mb, len);
            /* A trained dictionary has zstd's magic; damage its entropy tables. */
            if (memcmp(lv + 8, "\x37\xa4\x30\xec", 4) == 0) {
                memset(lv + 8 + 8, 0xff, 64);
                reseal(b, len);
                CHECK_ERR(pcr_tok_model_load(b, len, &x, err, sizeof(err)), -EINVAL, err,
                          "zstd rejects the dictionary");
            }
        }
        free(b);
        pcr_tok_model_free(m);
    }
    for (int i = 0; i < 20; i++)
        free(grids[i]);
    gen_free(&g);
}

/* ---- Threads ------------------------------------------------------------------ */

struct thread_arg {
    const struct pcr_tok_model *m;
    uint16_t **grids;
    unsigned n, first;
    uint8_t (*blobs)[4096];
    ssize_t *lens;
    int bad;
};

static void *encode_thread(void *p)
{
    struct thread_arg *a = p;

    /* Interleaved: every thread encodes every 4th grid, all starting at once, so the
     * lazily built compression dictionary is requested concurrently. */
    for (unsigned i = a->first; i < a->n; i += 4)
        a->lens[i] = pcr_tok_encode(a->m, a->grids[i], 32, 32, a->blobs[i], 4096);
    return NULL;
}

static void *decode_thread(void *p)
{
    struct thread_arg *a = p;
    uint16_t out[1024];

    for (int rep = 0; rep < 20; rep++)
        for (unsigned i = 0; i < a->n; i++)
            if (a->lens[i] <= 0 ||
                pcr_tok_decode(a->m, a->blobs[i], (size_t)a->lens[i], 32, 32, out) != 0 ||
                memcmp(out, a->grids[i], sizeof(out)) != 0)
                a->bad++;
    return NULL;
}

static void test_threads(void)
{
    enum { N = 64 };
    static uint8_t blobs[N][4096];
    ssize_t lens[N];
    uint16_t *grids[N];
    struct gen g;

    gen_init(&g, 391, 5);
    for (int i = 0; i < N; i++) {
        grids[i] = malloc(2048);
        gen_grid(&g, 32, 32, grids[i]);
    }
    for (int coder = PCR_TOK_HUFFMAN; coder <= PCR_TOK_ZSTD_DICT; coder++) {
        struct pcr_tok_model *m = train((enum pcr_tok_coder)coder, grids, N, 32, 32, NULL);
        struct pcr_tok_model *fresh = NULL;
        struct thread_arg a[4];
        pthread_t th[4];
        size_t bl;
        const void *b;
        char err[256];
        if (!m)
            continue;
        /* A freshly loaded model: its compression dictionary does not exist yet. */
        b = pcr_tok_model_blob(m, &bl);
        CHECK(pcr_tok_model_load(b, bl, &fresh, err, sizeof(err)) == 0);
        memset(lens, 0, sizeof(lens));
        for (int t = 0; t < 4; t++) {
            a[t] = (struct thread_arg){fresh, grids, N, (unsigned)t, blobs, lens, 0};
            pthread_create(&th[t], NULL, encode_thread, &a[t]);
        }
        for (int t = 0; t < 4; t++)
            pthread_join(th[t], NULL);
        for (int t = 0; t < 4; t++)
            pthread_create(&th[t], NULL, decode_thread, &a[t]);
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            CHECK(a[t].bad == 0);
        }
        /* The same bytes as a single-threaded encode with the original model. */
        for (int i = 0; i < N; i++) {
            uint8_t one[4096];
            ssize_t len = pcr_tok_encode(m, grids[i], 32, 32, one, sizeof(one));
            CHECK(len == lens[i] && memcmp(one, blobs[i], (size_t)len) == 0);
        }
        pcr_tok_model_free(fresh);
        pcr_tok_model_free(m);
    }
    for (int i = 0; i < N; i++)
        free(grids[i]);
    gen_free(&g);
}

/* ---- Shards ------------------------------------------------------------------- */

static void test_shards(void)
{
    struct pcr_tokshard_writer *w;
    struct pcr_tokshard_hdr h;
    uint64_t off[50], total = 0;
    uint8_t blob[3000], got[3000], hdr[PCR_TOKSHARD_HEADER];
    char err[256];
    struct stat st;
    int fd;

    CHECK(pcr_tokshard_create(tpath("a.tok"), 0x1234, &w, err, sizeof(err)) == 0);
    for (int i = 0; i < 50; i++) {
        memset(blob, i, sizeof(blob));
        CHECK(pcr_tokshard_add(w, blob, 100 + (size_t)i * 50, &off[i]) == 0);
        total += 100 + (uint64_t)i * 50;
    }
    CHECK(off[0] == PCR_TOKSHARD_HEADER && off[1] == PCR_TOKSHARD_HEADER + 100);
    CHECK(pcr_tokshard_add(w, blob, 0, &off[0]) == -EINVAL);
    CHECK(pcr_tokshard_finish(w, err, sizeof(err)) == 0);
    CHECK_ERR(pcr_tokshard_create(tpath("a.tok"), 1, &w, err, sizeof(err)), -EEXIST, err, "a.tok");

    /* The file as the store's reader sees it: a header it decodes, then the blobs at
     * their offsets. */
    fd = open(tpath("a.tok"), O_RDONLY);
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    CHECK(pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
    CHECK(pcr_tokshard_hdr_decode(hdr, &h) == 0);
    CHECK(h.version == PCR_TOKSHARD_VERSION && h.count == 50 && h.model_id == 0x1234);
    CHECK(h.blob_bytes == total && (uint64_t)st.st_size == PCR_TOKSHARD_HEADER + total);
    for (int i = 0; i < 50; i++) {
        size_t n = 100 + (size_t)i * 50;
        memset(blob, i, n);
        CHECK(pread(fd, got, n, (off_t)off[i]) == (ssize_t)n && memcmp(got, blob, n) == 0);
    }
    close(fd);
    memcpy(hdr, "PCRTOKX\n", 8); /* not a shard */
    CHECK(pcr_tokshard_hdr_decode(hdr, &h) == -EINVAL);
    {
        uint8_t v2[PCR_TOKSHARD_HEADER] = "PCRTOKS\n\2\0\0\0";
        CHECK(pcr_tokshard_hdr_decode(v2, &h) == -ENOTSUP);
    }
    /* abort removes the file. */
    CHECK(pcr_tokshard_create(tpath("c.tok"), 1, &w, err, sizeof(err)) == 0);
    CHECK(pcr_tokshard_add(w, blob, 10, &off[0]) == 0);
    pcr_tokshard_abort(w);
    CHECK(access(tpath("c.tok"), F_OK) != 0);
}

/* ---- SeiT --------------------------------------------------------------------- */

/* Write an int64 1-D index .npy. */
static void write_index(const char *path, const int64_t *off, size_t n)
{
    uint8_t *buf = malloc(256 + n * 8);
    char d[128];
    size_t len;

    snprintf(d, sizeof(d), "{'descr': '<i8', 'fortran_order': False, 'shape': (%zu,), }", n);
    len = make_npy(buf, 1, d, off, n * 8);
    write_file(path, buf, len);
    free(buf);
}

#ifdef PCR_HAVE_ZLIB
static void write_gz(const char *path, const void *data, size_t len, int members)
{
    gzFile f = gzopen(path, "wb");
    size_t half = len / 2;

    if (members == 2) {
        gzwrite(f, data, (unsigned)half);
        gzclose(f);
        f = gzopen(path, "ab");
        gzwrite(f, (const uint8_t *)data + half, (unsigned)(len - half));
    } else {
        gzwrite(f, data, (unsigned)len);
    }
    gzclose(f);
}
#endif

struct seit_fixture {
    unsigned n;
    uint16_t grids[12][1024];
    uint8_t data[12 * 4096];
    size_t datalen;
    int64_t off[13];
    unsigned label[12];
};

static void seit_make(struct seit_fixture *fx, unsigned k, unsigned hw)
{
    struct gen g;

    gen_init(&g, k, 99 + k);
    fx->n = 12;
    fx->datalen = 0;
    for (unsigned i = 0; i < fx->n; i++) {
        gen_grid(&g, hw, hw, fx->grids[i]);
        fx->off[i] = (int64_t)fx->datalen;
        fx->datalen += pcr_tok_escape_encode(fx->grids[i], hw * hw, fx->data + fx->datalen);
        fx->label[i] = (i * 7) % 3 == 0 ? 10 : (i * 7) % 3;
    }
    fx->off[fx->n] = (int64_t)fx->datalen;
    gen_free(&g);
}

static void write_labels(const char *path, const unsigned *label, unsigned n, const char *extra)
{
    FILE *f = fopen(path, "w");

    for (unsigned i = 0; i < n; i++)
        fprintf(f, "%u\n", label[i]);
    fputs(extra, f);
    fclose(f);
}

/* SeiT's reader (datasets.py, get_data_index_of()) is the oracle for SeiT files:
 * each rule below is one way its decoding differs from the store's escape code. */
static void test_seit_decode(void)
{
    static const struct {
        const char *what, *in;
        size_t len;
        size_t n;
        uint16_t want[8];
        unsigned odd;
    } cases[] = {
        {"plain bytes", "\x00\x07\xfe", 3, 3, {0, 7, 254}, 0},
        {"two-byte form", "\xff\x00\xff\xfe\x05", 5, 3, {255, 509, 5}, 0},
        /* [255, 255, 1, 255, 7, 0]: SeiT reads 256, 262, 0; the store's four-byte
         * extension would read 510 + 0x1ff = 1021, 7, 0 */
        {"repeated escape",
         "\xff\xff\x01\xff\x07\x00",
         6,
         3,
         {256, 262, 0},
         PCR_SEIT_REPEATED_ESCAPE},
        {"redundant escape", "\xff\xff\x2d", 3, 1, {300}, PCR_SEIT_REPEATED_ESCAPE},
        {"run of escapes", "\x01\xff\xff\xff\xff\x00", 6, 2, {1, 255}, PCR_SEIT_REPEATED_ESCAPE},
        {"trailing escape", "\x01\x02\xff", 3, 2, {1, 2}, PCR_SEIT_TRAILING_ESCAPE},
        {"only escapes",
         "\xff\xff",
         2,
         0,
         {0},
         PCR_SEIT_REPEATED_ESCAPE | PCR_SEIT_TRAILING_ESCAPE},
        {"empty", "", 0, 0, {0}, 0},
    };

    for (size_t c = 0; c < PCR_ARRAY_SIZE(cases); c++) {
        uint16_t out[8] = {0};
        unsigned odd = 99;
        size_t n = pcr_seit_decode((const uint8_t *)cases[c].in, cases[c].len, out, 8, &odd);

        CHECK(n == cases[c].n && odd == cases[c].odd &&
              memcmp(out, cases[c].want, n * sizeof(*out)) == 0);
        if (n != cases[c].n || odd != cases[c].odd)
            fprintf(stderr, "  %s: %zu values, odd %u\n", cases[c].what, n, odd);
        /* counting only, and a short buffer: the count is the same */
        CHECK(pcr_seit_decode((const uint8_t *)cases[c].in, cases[c].len, NULL, 0, NULL) ==
              cases[c].n);
        if (cases[c].n > 1) {
            uint16_t one[2] = {0, 0xbeef};
            CHECK(pcr_seit_decode((const uint8_t *)cases[c].in, cases[c].len, one, 1, NULL) ==
                  cases[c].n);
            CHECK(one[0] == cases[c].want[0] && one[1] == 0xbeef);
        }
    }
    /* What SeiT's encoder writes (the store's code below 510) reads back unchanged and
     * is never odd. */
    {
        uint16_t v[510], back[510];
        uint8_t buf[4 * 510];
        unsigned odd = 99;
        size_t len;

        for (unsigned i = 0; i < 510; i++)
            v[i] = (uint16_t)(509 - i);
        len = pcr_tok_escape_encode(v, 510, buf);
        CHECK(pcr_seit_decode(buf, len, back, 510, &odd) == 510 && odd == 0 &&
              memcmp(v, back, sizeof(v)) == 0);
    }
}

/* Label files with LF, CRLF and lone-CR line ends (Python's universal newlines, as
 * SeiT's loader reads them) give the same labels; the count message says which file
 * has how many. */
static void test_seit_line_ends(void)
{
    static const char *const ends[] = {"\n", "\r\n", "\r"};
    static const uint8_t data[] = {1, 2, 3, 4, 5, 6};
    const int64_t off[] = {0, 2, 4, 6};
    struct pcr_seit_paths p = {0};
    struct pcr_seit_opts o = {1, 2};
    struct pcr_seit *s = NULL;
    struct pcr_seit_item it;
    char err[1024], lab[64];

    mkdir(tpath("seitle"), 0755);
    write_file(tpath("seitle/x-token.data.bin"), data, sizeof(data));
    write_index(tpath("seitle/x-token.index.npy"), off, 4);
    p.data = tpath("seitle/x-token.data.bin");
    p.labels = tpath("seitle/x-label.txt");
    for (size_t e = 0; e < PCR_ARRAY_SIZE(ends); e++) {
        for (int final = 0; final < 2; final++) {
            int n =
                snprintf(lab, sizeof(lab), "7%s 8%s9%s", ends[e], ends[e], final ? ends[e] : "");
            write_file(p.labels, lab, (size_t)n);
            CHECK(pcr_seit_open(&p, &o, &s, err, sizeof(err)) == 0);
            if (!s) {
                fprintf(stderr, "  line end %zu: %s\n", e, err);
                continue;
            }
            CHECK(pcr_seit_count(s) == 3);
            CHECK(pcr_seit_item(s, 0, &it) == 0 && it.label == 7);
            CHECK(pcr_seit_item(s, 1, &it) == 0 && it.label == 8);
            CHECK(pcr_seit_item(s, 2, &it) == 0 && it.label == 9);
            pcr_seit_close(s);
            s = NULL;
        }
    }
    /* CR then LF is one line end, two CRs two (an empty line: not a label) */
    write_file(p.labels, "7\r\r8\r", 5);
    CHECK_ERR(pcr_seit_open(&p, &o, &s, err, sizeof(err)), -EINVAL, err, "line 2: ''");
    write_file(p.labels, "7\r8\r", 4);
    CHECK_ERR(pcr_seit_open(&p, &o, &s, err, sizeof(err)), -EINVAL, err,
              "x-label.txt has 2 labels but");
    write_file(p.labels, "7\n", 2);
    CHECK_ERR(pcr_seit_open(&p, &o, &s, err, sizeof(err)), -EINVAL, err,
              "x-label.txt has 1 label but");
}

static void test_seit(void)
{
    static struct seit_fixture fx;
    struct pcr_seit_paths p = {0};
    struct pcr_seit *s = NULL;
    struct pcr_seit_item it;
    uint16_t grid[1024];
    char err[1024], name[256];
    int rc;

    seit_make(&fx, 391, 32);
    mkdir(tpath("seit"), 0755);
    write_file(tpath("seit/x-token.data.bin"), fx.data, fx.datalen);
    write_index(tpath("seit/x-token.index.npy"), fx.off, fx.n + 1);
    write_labels(tpath("seit/x-label.txt"), fx.label, fx.n, "\n");

    /* The index path derived as SeiT's loader does. */
    p.data = tpath("seit/x-token.data.bin");
    p.labels = tpath("seit/x-label.txt");
    rc = pcr_seit_open(&p, NULL, &s, err, sizeof(err));
    CHECK(rc == 0);
    if (rc)
        fprintf(stderr, "  %s\n", err);
    if (s) {
        unsigned h, w;
        CHECK(pcr_seit_count(s) == 12);
        pcr_seit_shape(s, &h, &w);
        CHECK(h == 32 && w == 32);
        for (unsigned i = 0; i < fx.n; i++) {
            CHECK(pcr_seit_grid(s, i, grid, err, sizeof(err)) == 0);
            CHECK(memcmp(grid, fx.grids[i], sizeof(grid)) == 0);
        }
        /* Labels 1, 2, 10; names "<label>/<k>" zero-padded. */
        CHECK(pcr_seit_item(s, 0, &it) == 0 && it.label == 10 && it.index_in_label == 0);
        CHECK(pcr_seit_item(s, 3, &it) == 0 && it.label == 10 && it.index_in_label == 1);
        CHECK(pcr_seit_item(s, 1, &it) == 0 && it.label == 1 && it.offset == (uint64_t)fx.off[1] &&
              it.length == (uint64_t)(fx.off[2] - fx.off[1]));
        CHECK(pcr_seit_name(s, 0, name, sizeof(name)) == 4 && strcmp(name, "10/0") == 0);
        CHECK(pcr_seit_name(s, 1, name, sizeof(name)) == 4 && strcmp(name, "01/0") == 0);
        CHECK(pcr_seit_name(s, 1, name, 4) == -ENAMETOOLONG);
        CHECK(pcr_seit_item(s, 12, &it) == -ENOENT);
        CHECK(pcr_seit_grid(s, 12, grid, err, sizeof(err)) == -ENOENT);
        pcr_seit_close(s);
        s = NULL;
    }

    /* Names file: used verbatim; bad ones rejected. */
    write_file(
        tpath("seit/names.txt"),
        "a/0.JPEG\r\na/1.JPEG\nb/2.JPEG\nb/3\nc/4\nc/5\nd/6\nd/7\ne/8\ne/9\nf/10\nf/11\n",
        strlen("a/0.JPEG\r\na/1.JPEG\nb/2.JPEG\nb/3\nc/4\nc/5\nd/6\nd/7\ne/8\ne/9\nf/10\nf/11\n"));
    p.names = tpath("seit/names.txt");
    CHECK(pcr_seit_open(&p, NULL, &s, err, sizeof(err)) == 0);
    if (s) {
        CHECK(pcr_seit_name(s, 0, name, sizeof(name)) == 8 && strcmp(name, "a/0.JPEG") == 0);
        CHECK(pcr_seit_name(s, 11, name, sizeof(name)) > 0 && strcmp(name, "f/11") == 0);
        pcr_seit_close(s);
        s = NULL;
    }
    write_file(tpath("seit/names.txt"), "a\nb\n", 4);
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
              "has 2 names but there are 12 images");
    write_file(tpath("seit/names.txt"), "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nb\n", 24);
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
              "name 'b' appears twice");
    write_file(tpath("seit/names.txt"), "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk/../x\nl\n", 29);
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
              "line 11: 'k/../x' is not a clean relative path");
    write_file(tpath("seit/names.txt"), "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n/k\nl\n", 24);
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "line 11");
    p.names = NULL;

    /* Label count != image count; a garbled label line. */
    write_labels(tpath("seit/x-label.txt"), fx.label, fx.n - 1, "");
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "has 11 labels but");
    CHECK(strstr(err, "has 12 images") != NULL);
    write_labels(tpath("seit/x-label.txt"), fx.label, fx.n, "3\n");
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "has 13 labels");
    {
        unsigned l2[12];
        memcpy(l2, fx.label, sizeof(l2));
        write_labels(tpath("seit/x-label.txt"), l2, 2, "cat\n1\n1\n1\n1\n1\n1\n1\n1\n1\n");
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                  "x-label.txt: line 3: 'cat' is not a label");
        write_labels(tpath("seit/x-label.txt"), l2, 2, "-1\n1\n1\n1\n1\n1\n1\n1\n1\n1\n");
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "line 3: '-1'");
        write_labels(tpath("seit/x-label.txt"), l2, 2, "99999999\n1\n1\n1\n1\n1\n1\n1\n1\n1\n");
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "line 3");
        write_labels(tpath("seit/x-label.txt"), l2, 2, "\n1\n1\n1\n1\n1\n1\n1\n1\n1\n");
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "line 3: ''");
    }
    write_labels(tpath("seit/x-label.txt"), fx.label, fx.n, "");

    /* Index: not monotonic, past the data, wrong dtype/rank, missing. */
    {
        int64_t off[13];
        memcpy(off, fx.off, sizeof(off));
        off[5] = off[4] - 1;
        write_index(tpath("seit/x-token.index.npy"), off, 13);
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                  "offsets not monotonic: offset[5]");
        memcpy(off, fx.off, sizeof(off));
        off[12] = (int64_t)fx.datalen + 1;
        write_index(tpath("seit/x-token.index.npy"), off, 13);
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "offset[12] = ");
        CHECK(strstr(err, "points past the data") != NULL);
        off[0] = -4;
        write_index(tpath("seit/x-token.index.npy"), off, 13);
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                  "offset[0] is negative");
        write_index(tpath("seit/x-token.index.npy"), off, 1);
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "need N + 1");
        {
            uint8_t buf[512];
            size_t len = make_npy(buf, 1, dict2("<f8", "False", "(13,)"), off, 13 * 8);
            write_file(tpath("seit/x-token.index.npy"), buf, len);
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "expected a 1-D integer array of offsets, got dtype '<f8'");
            len = make_npy(buf, 1, dict2("<i8", "False", "(13, 1)"), off, 13 * 8);
            write_file(tpath("seit/x-token.index.npy"), buf, len);
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "with 2 dimensions");
            write_file(tpath("seit/x-token.index.npy"), buf, 40);
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "x-token.index.npy: truncated");
        }
        /* Blobs that do not decode to 32x32: one token short (the offsets move one
         * image's last byte into the next); a trailing escape byte, which SeiT's
         * reader drops (so image 11 still decodes, and is counted as odd). */
        memcpy(off, fx.off, sizeof(off));
        write_index(tpath("seit/x-token.index.npy"), off, 13);
        {
            uint8_t *d = malloc(fx.datalen + 8);
            memcpy(d, fx.data, fx.datalen);
            d[fx.datalen] = 255; /* image 12: one dangling escape byte */
            write_file(tpath("seit/x-token.data.bin"), d, fx.datalen + 1);
            off[12] = (int64_t)fx.datalen + 1;
            off[3] -= 1;
            /* the last byte of image 2 (its last token, < 255 or the second byte of an
             * escape) now starts image 3 */
            write_index(tpath("seit/x-token.index.npy"), off, 13);
            CHECK(pcr_seit_open(&p, NULL, &s, err, sizeof(err)) == 0);
            if (s) {
                uint64_t first;
                unsigned kinds;

                rc = pcr_seit_grid(s, 2, grid, err, sizeof(err));
                CHECK(rc == -EINVAL && strstr(err, "image 2 (label 2") != NULL);
                CHECK(strstr(err, "decodes to 1023 tokens, expected 32x32 = 1024") != NULL);
                rc = pcr_seit_grid(s, 3, grid, err, sizeof(err));
                CHECK_ERR(rc, -EINVAL, err, "decodes to 1025 tokens, expected 32x32 = 1024");
                CHECK(pcr_seit_grid(s, 4, grid, err, sizeof(err)) == 0 &&
                      memcmp(grid, fx.grids[4], sizeof(grid)) == 0);
                /* The last image: the trailing escape, dropped; the only odd image
                 * unless image 2 now ends in the first byte of an escape. */
                CHECK(pcr_seit_grid(s, 11, grid, err, sizeof(err)) == 0 &&
                      memcmp(grid, fx.grids[11], sizeof(grid)) == 0);
                rc = (int)pcr_seit_odd(s, &first, &kinds);
                CHECK(kinds == PCR_SEIT_TRAILING_ESCAPE);
                CHECK((rc == 1 && first == 11) || (rc == 2 && first == 2));
                pcr_seit_close(s);
                s = NULL;
            }
            free(d);
        }
        /* The same data read as 16x64 passes: the shape is an option. */
        write_file(tpath("seit/x-token.data.bin"), fx.data, fx.datalen);
        write_index(tpath("seit/x-token.index.npy"), fx.off, 13);
        {
            struct pcr_seit_opts o = {16, 64};
            CHECK(pcr_seit_open(&p, &o, &s, err, sizeof(err)) == 0);
            if (s) {
                CHECK(pcr_seit_grid(s, 0, grid, err, sizeof(err)) == 0);
                pcr_seit_close(s);
                s = NULL;
            }
            o = (struct pcr_seit_opts){16, 16};
            CHECK(pcr_seit_open(&p, &o, &s, err, sizeof(err)) == 0);
            if (s) {
                CHECK_ERR(pcr_seit_grid(s, 0, grid, err, sizeof(err)), -EINVAL, err,
                          "decodes to 1024 tokens, expected 16x16 = 256");
                pcr_seit_close(s);
                s = NULL;
            }
        }
    }
    /* Missing files. */
    p.data = tpath("seit/nothing-here.bin");
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err, "no 'data.bin'");
    p.data = tpath("seit/y-token.data.bin");
    write_file(p.data, fx.data, fx.datalen);
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -ENOENT, err, "no index file");
    p.index = tpath("seit/x-token.index.npy");
    p.labels = tpath("seit/none.txt");
    CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -ENOENT, err, "none.txt");
    p.labels = tpath("seit/x-label.txt");
    CHECK(pcr_seit_open(&p, NULL, &s, err, sizeof(err)) == 0);
    pcr_seit_close(s);
    s = NULL;

    /* gzip: data and index compressed (index in two members), found by magic. */
    {
        uint8_t *ibuf = malloc(4096);
        char d[128];
        size_t ilen;
        snprintf(d, sizeof(d), "{'descr': '<i8', 'fortran_order': False, 'shape': (13,), }");
        ilen = make_npy(ibuf, 1, d, fx.off, 13 * 8);
#ifdef PCR_HAVE_ZLIB
        write_gz(tpath("seit/z-token.data.bin.gz"), fx.data, fx.datalen, 1);
        write_gz(tpath("seit/z-token.index.npy.gz"), ibuf, ilen, 2);
        p.data = tpath("seit/z-token.data.bin.gz");
        p.index = NULL;
        rc = pcr_seit_open(&p, NULL, &s, err, sizeof(err));
        CHECK(rc == 0);
        if (rc)
            fprintf(stderr, "  %s\n", err);
        if (s) {
            for (unsigned i = 0; i < fx.n; i++)
                CHECK(pcr_seit_grid(s, i, grid, err, sizeof(err)) == 0 &&
                      memcmp(grid, fx.grids[i], sizeof(grid)) == 0);
            pcr_seit_close(s);
            s = NULL;
        }
        /* Truncated and garbled gzip. */
        {
            uint8_t *gz;
            size_t gzlen;
            CHECK(pcr_tok_read_file(tpath("seit/z-token.data.bin.gz"), false, 1 << 20, &gz, &gzlen,
                                    err, sizeof(err)) == 0);
            write_file(tpath("seit/t-token.data.bin.gz"), gz, gzlen - 10);
            p.data = tpath("seit/t-token.data.bin.gz");
            p.index = tpath("seit/x-token.index.npy");
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "t-token.data.bin.gz: truncated gzip data");
            gz[gzlen / 2] ^= 0xff;
            gz[gzlen / 2 + 1] ^= 0xff;
            write_file(tpath("seit/t-token.data.bin.gz"), gz, gzlen);
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "corrupt gzip data");
            gz[gzlen / 2] ^= 0xff;
            gz[gzlen / 2 + 1] ^= 0xff;
            gz = realloc(gz, gzlen + 4);
            memcpy(gz + gzlen, "junk", 4);
            write_file(tpath("seit/t-token.data.bin.gz"), gz, gzlen + 4);
            CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -EINVAL, err,
                      "trailing bytes after the last gzip member");
            /* A bomb beyond the limit. */
            {
                uint8_t *big;
                size_t blen;
                CHECK(pcr_tok_read_file(tpath("seit/z-token.data.bin.gz"), true, 1000, &big, &blen,
                                        err, sizeof(err)) == -EFBIG);
            }
            free(gz);
        }
#else
        write_file(tpath("seit/z-token.data.bin.gz"), "\x1f\x8b\x08", 3);
        p.data = tpath("seit/z-token.data.bin.gz");
        CHECK_ERR(pcr_seit_open(&p, NULL, &s, err, sizeof(err)), -ENOTSUP, err, "without zlib");
#endif
        free(ibuf);
    }
}

/* ---- Comparisons with numpy (--numpy) ----------------------------------------- */

static int run(const char *const argv[])
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint16_t ref_value(unsigned h, unsigned w, size_t i)
{
    if (i == 0)
        return 65535;
    if (i == 1)
        return 0;
    return (uint16_t)((i * 7919 + h * 31 + w) % 65536);
}

static const char *const py = "/usr/bin/python3";

static int numpy_tests(const char *script)
{
    static const unsigned shapes[][2] = {{1, 1},       {1, 7},    {7, 1},     {2, 3},
                                         {16, 16},     {32, 32},  {13, 1000}, {999, 9},
                                         {1000, 1000}, {4096, 1}, {1, 4096},  {4096, 2}};
    const char *probe[] = {py, "-c", "import numpy", NULL};
    char err[1024];

    if (run(probe) != 0) {
        fprintf(stderr, "python3-numpy not available: skipped\n");
        return 77;
    }
    {
        const char *argv[] = {py, script, "npyref", tpath("ref"), NULL};
        CHECK(run(argv) == 0);
    }
    for (size_t s = 0; s < PCR_ARRAY_SIZE(shapes); s++) {
        unsigned h = shapes[s][0], w = shapes[s][1];
        size_t n = (size_t)h * w, size = pcr_npy_grid_size(h, w), rlen = 0;
        uint16_t *g = malloc(n * 2);
        uint8_t *mine = malloc(size), *ref = NULL;
        for (size_t i = 0; i < n; i++)
            g[i] = ref_value(h, w, i);
        CHECK(pcr_npy_write_grid(h, w, g, mine, size) == size);
        CHECK(pcr_tok_read_file(tpath("ref/ref_%ux%u.npy", h, w), false, 1u << 26, &ref, &rlen, err,
                                sizeof(err)) == 0);
        CHECK(rlen == size && ref && memcmp(mine, ref, size) == 0);
        if (rlen != size || (ref && memcmp(mine, ref, size) != 0))
            fprintf(stderr, "  numpy.save differs for (%u, %u): %zu vs %zu bytes\n", h, w, rlen,
                    size);
        free(g);
        free(mine);
        free(ref);
    }

    /* SeiT files (gzip, names, codebooks 391 and 510, SeiT's largest, 32x32 and
     * 16x16) against the .npy tree of the same grids. */
    {
        static const struct {
            const char *k, *grid, *gz;
            unsigned hw;
        } cfg[] = {{"391", "32", "--gzip", 32}, {"510", "16", "--names", 16}};
        for (size_t c = 0; c < PCR_ARRAY_SIZE(cfg); c++) {
            const char *dir = tpath("gen%zu", c), *tree = tpath("gen%zu/tree", c);
            const char *argv[] = {py,          script,    "-k",     cfg[c].k, "--grid",
                                  cfg[c].grid, "seit",    dir,      "--n",    "300",
                                  "--names",   cfg[c].gz, "--tree", tree,     NULL};
            struct pcr_seit_paths p = {0};
            struct pcr_seit_opts o = {cfg[c].hw, cfg[c].hw};
            struct pcr_seit *s = NULL;
            char data[600], labels[600], names[600];
            uint16_t grid[1024];
            unsigned maxv = 0;
            int rc;

            CHECK(run(argv) == 0);
            snprintf(data, sizeof(data), "%s/gen-train-token.data.bin%s", dir, c == 0 ? ".gz" : "");
            snprintf(labels, sizeof(labels), "%s/gen-train-label.txt", dir);
            snprintf(names, sizeof(names), "%s/gen-train-names.txt", dir);
            p.data = data;
            p.labels = labels;
            p.names = names;
            rc = pcr_seit_open(&p, &o, &s, err, sizeof(err));
            CHECK(rc == 0);
            if (rc) {
                fprintf(stderr, "  %s\n", err);
                continue;
            }
            CHECK(pcr_seit_count(s) == 300);
            for (uint64_t i = 0; i < pcr_seit_count(s); i++) {
                char nm[512], path[1200];
                uint16_t *t = NULL;
                unsigned h = 0, w = 0;
                CHECK(pcr_seit_grid(s, i, grid, err, sizeof(err)) == 0);
                CHECK(pcr_seit_name(s, i, nm, sizeof(nm)) > 5);
                /* c000/img_000000.JPEG -> tree/c000/img_000000.npy */
                nm[strlen(nm) - 5] = 0;
                snprintf(path, sizeof(path), "%s/%s.npy", tree, nm);
                rc = pcr_npy_load_grid(path, &t, &h, &w, err, sizeof(err));
                CHECK(rc == 0 && h == cfg[c].hw && w == cfg[c].hw);
                CHECK(t && memcmp(t, grid, (size_t)h * w * 2) == 0);
                for (unsigned j = 0; t && j < h * w; j++)
                    maxv = t[j] > maxv ? t[j] : maxv;
                free(t);
            }
            /* The generator puts K-1 in the first grid: 509, the largest value of
             * SeiT's two-byte form. */
            CHECK(maxv == (unsigned)atoi(cfg[c].k) - 1);
            pcr_seit_close(s);
        }
    }
    /* A codebook from the generator passes the codebook check. */
    {
        const char *argv[] = {py, script, "-k", "391", "codebook", tpath("cb.npy"), NULL};
        uint8_t *buf = NULL;
        size_t len;
        struct pcr_npy a;
        CHECK(run(argv) == 0);
        CHECK(pcr_tok_read_file(tpath("cb.npy"), false, 1 << 24, &buf, &len, err, sizeof(err)) ==
              0);
        CHECK(buf && pcr_npy_parse(buf, len, &a, err, sizeof(err)) == 0);
        CHECK(buf && pcr_npy_check_codebook(&a, 391, err, sizeof(err)) == 0);
        CHECK(buf && pcr_npy_check_codebook(&a, 392, err, sizeof(err)) == -EINVAL);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 0;

    pcr_log_set_hook(log_hook, NULL, PCR_LOG_DEBUG);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/pcrfs-tokens-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    if (argc == 3 && strcmp(argv[1], "--numpy") == 0) {
        rc = numpy_tests(argv[2]);
    } else if (argc == 1) {
        test_escape();
        test_huffman();
        test_npy_dtypes();
        test_npy_bad();
        test_npy_files();
        test_npy_writer();
        test_codebook();
        codec_case(391, 32, 32, 400);
        codec_case(391, 16, 16, 400);
        codec_case(8192, 32, 32, 400);
        codec_case(8192, 16, 16, 400);
        test_codec_special();
        test_model_load_bad();
        test_threads();
        test_shards();
        test_seit();
        test_seit_decode();
        test_seit_line_ends();
    } else {
        fprintf(stderr, "usage: %s [--numpy path/to/mktokens.py]\n", argv[0]);
        rc = 2;
    }
    nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    for (int i = 0; i < npaths; i++)
        free(paths[i]);
    if (rc)
        return rc;
    /* The summary line of tests/unit/check.h, whose CHECK takes a message each. */
    printf("%s: %d checks, %d failed\n", argc == 1 ? "tokens" : "tokens-numpy", checks, failures);
    return failures ? 1 : 0;
}
