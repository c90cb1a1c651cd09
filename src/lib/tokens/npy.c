/* pcrfs — NumPy .npy files: a strict reader for imported token grids, SeiT index
 * files and codebooks, and the writer behind the /tokens view (see pcrfs/tokens.h).
 *
 * The format (numpy/lib/format.py): "\x93NUMPY", major, minor, a little-endian
 * header length (u16 for 1.0, u32 for 2.0), then an ASCII Python dict literal
 * {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with spaces and a
 * newline, then the raw data. We parse the literal ourselves with a tiny grammar
 * instead of evaluating anything: strings, True/False and tuples of integers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/tokens.h"
#include "common/internal.h"
#include "common/le.h"
#include "tokens/tokens_internal.h"

#define NPY_MAGIC     "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_DIM   (1ull << 40)

/* Cursor over the header literal. */
struct lex {
    const char *start, *p, *end;
};

static void skip_ws(struct lex *lx)
{
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r'))
        lx->p++;
}

static bool eat(struct lex *lx, char c)
{
    skip_ws(lx);
    if (lx->p < lx->end && *lx->p == c) {
        lx->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes (numpy never writes any in these keys/values). */
static bool lex_string(struct lex *lx, char *buf, size_t cap)
{
    char q;
    size_t n = 0;

    skip_ws(lx);
    if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"'))
        return false;
    q = *lx->p++;
    while (lx->p < lx->end && *lx->p != q) {
        if (*lx->p == '\\' || n + 1 >= cap)
            return false;
        buf[n++] = *lx->p++;
    }
    if (lx->p >= lx->end)
        return false;
    lx->p++;
    buf[n] = 0;
    return true;
}

static bool lex_word(struct lex *lx, const char *w)
{
    size_t n = strlen(w);

    skip_ws(lx);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n) != 0)
        return false;
    lx->p += n;
    return true;
}

static bool lex_uint(struct lex *lx, uint64_t *v)
{
    uint64_t x = 0;
    const char *start;

    skip_ws(lx);
    start = lx->p;
    while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
        x = x * 10 + (uint64_t)(*lx->p - '0');
        if (x >= NPY_MAX_DIM)
            return false;
        lx->p++;
    }
    *v = x;
    return lx->p > start;
}

static int parse_descr(const char *d, struct pcr_npy *a, char *err, size_t errlen)
{
    char order, kind;
    unsigned size;

    if (strlen(d) != 3 || d[2] < '1' || d[2] > '8') {
        pcr_errf(err, errlen, "unsupported dtype '%s'", d);
        return -EINVAL;
    }
    order = d[0];
    kind = d[1];
    size = (unsigned)(d[2] - '0');
    if (order != '<' && order != '>' && order != '|' && order != '=') {
        pcr_errf(err, errlen, "unsupported dtype '%s'", d);
        return -EINVAL;
    }
    if (!((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) &&
        !(kind == 'f' && (size == 2 || size == 4 || size == 8))) {
        pcr_errf(err, errlen, "unsupported dtype '%s' (integers and floats only)", d);
        return -EINVAL;
    }
    /* '|' (not applicable) only makes sense for one-byte items; '=' is native,
     * and every platform pcrfs builds on is little-endian. */
    if (order == '|' && size != 1) {
        pcr_errf(err, errlen, "unsupported dtype '%s' (no byte order)", d);
        return -EINVAL;
    }
    a->kind = kind;
    a->itemsize = size;
    a->big_endian = order == '>' && size > 1;
    memcpy(a->descr, d, 4); /* 3 characters and the NUL, checked above */
    return 0;
}

static int parse_header(struct lex *lx, struct pcr_npy *a, char *err, size_t errlen)
{
    bool have_descr = false, have_fortran = false, have_shape = false;
    char key[32], val[32];
    int rc;

    if (!eat(lx, '{'))
        goto syntax;
    for (;;) {
        if (eat(lx, '}'))
            break;
        if (!lex_string(lx, key, sizeof(key)) || !eat(lx, ':'))
            goto syntax;
        if (strcmp(key, "descr") == 0 && !have_descr) {
            skip_ws(lx);
            if (lx->p < lx->end && *lx->p == '[') {
                pcr_errf(err, errlen, "structured dtypes are not supported");
                return -EINVAL;
            }
            if (!lex_string(lx, val, sizeof(val))) {
                pcr_errf(err, errlen, "malformed header: 'descr' is not a short string");
                return -EINVAL;
            }
            rc = parse_descr(val, a, err, errlen);
            if (rc)
                return rc;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if (lex_word(lx, "True"))
                a->fortran_order = true;
            else if (lex_word(lx, "False"))
                a->fortran_order = false;
            else
                goto syntax;
            have_fortran = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!eat(lx, '('))
                goto syntax;
            a->ndim = 0;
            for (;;) {
                uint64_t v;
                if (eat(lx, ')'))
                    break;
                if (!lex_uint(lx, &v)) {
                    pcr_errf(err, errlen,
                             "malformed header: bad shape (dimensions are "
                             "integers below 2^40)");
                    return -EINVAL;
                }
                if (a->ndim == PCR_NPY_MAX_DIMS) {
                    pcr_errf(err, errlen, "more than %d dimensions", PCR_NPY_MAX_DIMS);
                    return -EINVAL;
                }
                a->shape[a->ndim++] = v;
                if (eat(lx, ')'))
                    break;
                if (!eat(lx, ','))
                    goto syntax;
            }
            have_shape = true;
        } else {
            pcr_errf(err, errlen, "malformed header: unexpected or repeated key '%s'", key);
            return -EINVAL;
        }
        if (eat(lx, '}'))
            break;
        if (!eat(lx, ','))
            goto syntax;
    }
    skip_ws(lx);
    if (lx->p != lx->end) {
        pcr_errf(err, errlen, "malformed header: bytes after the dictionary");
        return -EINVAL;
    }
    if (!have_descr || !have_fortran || !have_shape) {
        pcr_errf(err, errlen, "malformed header: missing key '%s'",
                 !have_descr     ? "descr"
                 : !have_fortran ? "fortran_order"
                                 : "shape");
        return -EINVAL;
    }
    return 0;
syntax:
    pcr_errf(err, errlen, "malformed header near byte %zu of the dictionary",
             (size_t)(lx->p - lx->start));
    return -EINVAL;
}

int pcr_npy_parse(const void *buf, size_t len, struct pcr_npy *out, char *err, size_t errlen)
{
    const uint8_t *b = buf;
    size_t hstart, hlen, i;
    uint64_t count = 1, bytes;
    struct lex lx;
    int rc;

    memset(out, 0, sizeof(*out));
    if (len < NPY_MAGIC_LEN + 2 || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        pcr_errf(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
        return -EINVAL;
    }
    out->major = b[6];
    out->minor = b[7];
    if (out->major == 1 && out->minor == 0) {
        if (len < 10)
            goto truncated_header;
        hlen = pcr_get_le16(b + 8);
        hstart = 10;
    } else if (out->major == 2 && out->minor == 0) {
        if (len < 12)
            goto truncated_header;
        hlen = pcr_get_le32(b + 8);
        hstart = 12;
    } else {
        pcr_errf(err, errlen, "unsupported .npy version %u.%u (1.0 and 2.0 only)", out->major,
                 out->minor);
        return -EINVAL;
    }
    if (hlen > len - hstart)
        goto truncated_header;
    for (i = 0; i < hlen; i++) {
        if (b[hstart + i] == 0 || b[hstart + i] >= 0x80) {
            pcr_errf(err, errlen, "malformed header: byte 0x%02x at offset %zu", b[hstart + i],
                     hstart + i);
            return -EINVAL;
        }
    }
    lx.start = lx.p = (const char *)b + hstart;
    lx.end = lx.p + hlen;
    rc = parse_header(&lx, out, err, errlen);
    if (rc)
        return rc;
    for (i = 0; i < out->ndim; i++)
        if (__builtin_mul_overflow(count, out->shape[i], &count))
            goto too_big;
    if (__builtin_mul_overflow(count, (uint64_t)out->itemsize, &bytes))
        goto too_big;
    out->count = count;
    out->data_offset = hstart + hlen;
    out->data = b + out->data_offset;
    if (bytes > len - out->data_offset) {
        pcr_errf(err, errlen, "truncated: %zu data bytes, shape needs %" PRIu64,
                 len - out->data_offset, bytes);
        return -EINVAL;
    }
    if (bytes < len - out->data_offset) {
        pcr_errf(err, errlen, "%" PRIu64 " trailing bytes after the data",
                 (uint64_t)(len - out->data_offset) - bytes);
        return -EINVAL;
    }
    return 0;
truncated_header:
    pcr_errf(err, errlen, "truncated: the header runs past the end of the file");
    return -EINVAL;
too_big:
    pcr_errf(err, errlen, "shape too large");
    return -EINVAL;
}

/* Raw element i as a 64-bit pattern, in host order. */
static uint64_t load_raw(const struct pcr_npy *a, uint64_t i)
{
    const uint8_t *p = a->data + i * a->itemsize;
    uint64_t v = 0;

    if (a->big_endian) {
        for (unsigned k = 0; k < a->itemsize; k++)
            v = v << 8 | p[k];
    } else {
        for (unsigned k = a->itemsize; k-- > 0;)
            v = v << 8 | p[k];
    }
    return v;
}

/* The value of integer element i, split into sign and magnitude so u8 fits. */
static void load_int(const struct pcr_npy *a, uint64_t i, bool *neg, uint64_t *mag)
{
    uint64_t v = load_raw(a, i);

    *neg = false;
    *mag = v;
    if (a->kind == 'i') {
        unsigned bits = a->itemsize * 8;
        if (bits >= 8 && bits < 64 && (v >> (bits - 1)) & 1)
            v |= ~0ull << bits; /* sign-extend */
        if ((int64_t)v < 0) {
            *neg = true;
            *mag = (uint64_t)0 - v;
        }
    }
}

int pcr_npy_get_int(const struct pcr_npy *a, uint64_t i, int64_t *v)
{
    bool neg;
    uint64_t mag;

    if ((a->kind != 'i' && a->kind != 'u') || i >= a->count)
        return -EINVAL;
    load_int(a, i, &neg, &mag);
    if (neg) {
        *v = (int64_t)(0 - mag);
        return 0;
    }
    if (mag > INT64_MAX)
        return -ERANGE;
    *v = (int64_t)mag;
    return 0;
}

static void shape_str(const struct pcr_npy *a, char *buf, size_t len)
{
    size_t n = 0;

    n += (size_t)snprintf(buf + n, len - n, "(");
    for (unsigned i = 0; i < a->ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, i ? ", " : "", a->shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, a->ndim == 1 ? ",)" : ")");
}

int pcr_npy_to_grid(const struct pcr_npy *a, uint16_t *out, size_t cap, unsigned *h, unsigned *w,
                    char *err, size_t errlen)
{
    char shp[128];

    if (a->kind != 'i' && a->kind != 'u') {
        pcr_errf(err, errlen, "dtype '%s' is not an integer type", a->descr);
        return -EINVAL;
    }
    shape_str(a, shp, sizeof(shp));
    if (a->ndim != 2) {
        pcr_errf(err, errlen, "expected a 2-D array, got %u-D %s", a->ndim, shp);
        return -EINVAL;
    }
    if (a->fortran_order) {
        pcr_errf(err, errlen,
                 "Fortran-ordered array %s; save it in C order "
                 "(numpy.ascontiguousarray)",
                 shp);
        return -EINVAL;
    }
    if (a->shape[0] < 1 || a->shape[1] < 1 || a->shape[0] > PCR_TOK_MAX_SIDE ||
        a->shape[1] > PCR_TOK_MAX_SIDE || a->count > PCR_TOK_MAX_TOKENS) {
        pcr_errf(err, errlen, "grid shape %s out of range (1..%u per side, %u tokens)", shp,
                 PCR_TOK_MAX_SIDE, PCR_TOK_MAX_TOKENS);
        return -EINVAL;
    }
    if (a->count > cap) {
        pcr_errf(err, errlen, "grid %s larger than the buffer", shp);
        return -E2BIG;
    }
    for (uint64_t i = 0; i < a->count; i++) {
        bool neg;
        uint64_t mag;
        load_int(a, i, &neg, &mag);
        if (neg) {
            pcr_errf(err, errlen, "negative value -%" PRIu64 " at [%" PRIu64 ", %" PRIu64 "]", mag,
                     i / a->shape[1], i % a->shape[1]);
            return -EINVAL;
        }
        if (mag > 65535) {
            pcr_errf(err, errlen, "value %" PRIu64 " at [%" PRIu64 ", %" PRIu64 "] exceeds 65535",
                     mag, i / a->shape[1], i % a->shape[1]);
            return -EINVAL;
        }
        out[i] = (uint16_t)mag;
    }
    *h = (unsigned)a->shape[0];
    *w = (unsigned)a->shape[1];
    return 0;
}

int pcr_npy_load_grid(const char *path, uint16_t **grid, unsigned *h, unsigned *w, char *err,
                      size_t errlen)
{
    /* A PCR_TOK_MAX_TOKENS grid of 8-byte items plus a generous header. */
    const size_t max = (size_t)PCR_TOK_MAX_TOKENS * 8 + (1u << 20);
    struct pcr_npy a;
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[256];
    int rc;

    *grid = NULL;
    rc = pcr_tok_read_file(path, false, max, &buf, &len, err, errlen);
    if (rc)
        return rc;
    rc = pcr_npy_parse(buf, len, &a, why, sizeof(why));
    if (rc == 0) {
        uint64_t n = a.count ? a.count : 1;
        *grid = malloc((n > PCR_TOK_MAX_TOKENS ? 1 : n) * sizeof(uint16_t));
        if (!*grid) {
            free(buf);
            return -ENOMEM;
        }
        rc = pcr_npy_to_grid(&a, *grid, PCR_TOK_MAX_TOKENS, h, w, why, sizeof(why));
    }
    free(buf);
    if (rc) {
        free(*grid);
        *grid = NULL;
        pcr_errf(err, errlen, "%s: %s", path, why);
        return rc == -E2BIG ? -EINVAL : rc;
    }
    return 0;
}

int pcr_npy_check_codebook(const struct pcr_npy *a, uint64_t min_entries, char *err, size_t errlen)
{
    char shp[128];

    shape_str(a, shp, sizeof(shp));
    if (a->kind != 'f') {
        pcr_errf(err, errlen, "codebook dtype '%s' is not a float type", a->descr);
        return -EINVAL;
    }
    if (a->ndim != 2 || a->shape[0] < 1 || a->shape[1] < 1) {
        pcr_errf(err, errlen, "codebook must be a non-empty 2-D [K, D] array, got %s", shp);
        return -EINVAL;
    }
    if (a->fortran_order) {
        pcr_errf(err, errlen, "codebook %s is Fortran-ordered; save it in C order", shp);
        return -EINVAL;
    }
    if (a->shape[0] < min_entries) {
        pcr_errf(err, errlen, "codebook has %" PRIu64 " entries but tokens go up to %" PRIu64,
                 a->shape[0], min_entries - 1);
        return -EINVAL;
    }
    return 0;
}

/* ---- Writer --------------------------------------------------------------------
 *
 * numpy >= 1.24 (format.py, _write_array_header) writes for a C-ordered (H, W) '<u2'
 * array: the dict repr "{'descr': '<u2', 'fortran_order': False, 'shape': (H, W), }",
 * then 21 - len(str(H)) spaces of "growth" padding (GROWTH_AXIS_MAX_DIGITS, so the
 * header can be rewritten in place when the array grows), then (_wrap_header) with
 * hlen = len + 1 for the final newline, padlen = 64 - ((10 + hlen) % 64) more spaces
 * (a full 64 when already aligned) and the newline. Older numpy, without growth
 * padding, writes the same bytes for common shapes such as (32, 32) (both pad to 128
 * bytes of spaces); where they differ we follow the current rule, and the unit test
 * compares with the installed numpy.
 */
#define GROWTH_AXIS_MAX_DIGITS 21
#define ARRAY_ALIGN            64

static int grid_dict(unsigned h, unsigned w, char *buf, size_t cap)
{
    return snprintf(buf, cap, "{'descr': '<u2', 'fortran_order': False, 'shape': (%u, %u), }", h,
                    w);
}

size_t pcr_npy_grid_header_len(unsigned h, unsigned w)
{
    char d[128], hs[16];
    size_t len;

    if (h < 1 || w < 1 || h > PCR_TOK_MAX_SIDE || w > PCR_TOK_MAX_SIDE)
        return 0;
    len = (size_t)grid_dict(h, w, d, sizeof(d));
    len += GROWTH_AXIS_MAX_DIGITS - (size_t)snprintf(hs, sizeof(hs), "%u", h);
    len += 1; /* newline */
    return 10 + len + (ARRAY_ALIGN - ((10 + len) % ARRAY_ALIGN));
}

size_t pcr_npy_grid_size(unsigned h, unsigned w)
{
    size_t hl = pcr_npy_grid_header_len(h, w);

    return hl ? hl + 2 * (size_t)h * w : 0;
}

size_t pcr_npy_write_grid(unsigned h, unsigned w, const uint16_t *grid, uint8_t *out, size_t cap)
{
    size_t hl = pcr_npy_grid_header_len(h, w), total, n;

    if (!hl)
        return 0;
    total = hl + 2 * (size_t)h * w;
    if (cap < total)
        return 0;
    memcpy(out, NPY_MAGIC, NPY_MAGIC_LEN);
    out[6] = 1;
    out[7] = 0;
    pcr_put_le16(out + 8, (uint16_t)(hl - 10));
    n = (size_t)grid_dict(h, w, (char *)out + 10, hl - 10);
    memset(out + 10 + n, ' ', hl - 11 - n);
    out[hl - 1] = '\n';
    for (size_t i = 0; i < (size_t)h * w; i++)
        pcr_put_le16(out + hl + 2 * i, grid[i]);
    return total;
}
