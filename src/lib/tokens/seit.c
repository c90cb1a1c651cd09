/* pcrfs — SeiT's release format (see pcrfs/tokens.h). Its files are read whole, and
 * gunzipped when they are gzip files, by pcr_tok_read_file() (fileio.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pcrfs/tokens.h"
#include "common/internal.h"
#include "tokens/tokens_internal.h"

/* ---- SeiT --------------------------------------------------------------------- */

struct pcr_seit {
    uint8_t *data; /* data.bin, decompressed */
    size_t datalen;
    uint64_t n;      /* images */
    uint64_t *off;   /* n + 1 offsets, validated */
    uint32_t *label; /* n labels */
    uint32_t *kin;   /* index within the label */
    unsigned h, w;
    char *names;             /* the names file, lines NUL-terminated in place; or NULL */
    char **name;             /* n pointers into names */
    int lw, kw;              /* zero-padding widths for generated names */
    uint64_t odd, first_odd; /* images whose bytes SeiT's encoder would not write */
    unsigned odd_kinds;      /* PCR_SEIT_* of pcr_seit_decode(), over all images */
};

#define SEIT_MAX_FILE ((size_t)1 << 40)

static int digits(uint64_t v)
{
    int d = 1;

    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Split a text buffer into lines in place. A line ends at "\n", "\r\n" or a lone "\r",
 * as in Python's universal newlines, which SeiT's loader reads its label file with
 * (a file saved with old Mac line ends would otherwise be one long line); a final line
 * end does not start another line and empty lines at the end of the file are dropped
 * (editors leave them). *lines is malloc()ed. @return 0, -ENOMEM. */
static int split_lines(char *text, size_t len, char ***lines, uint64_t *nlines)
{
    uint64_t n = 0, cap = 0, i = 0;
    char **v = NULL;

    while (i < len) {
        size_t start = i;
        while (i < len && text[i] != '\n' && text[i] != '\r')
            i++;
        if (i + 1 < len && text[i] == '\r' && text[i + 1] == '\n')
            text[i++] = 0;
        /* text has one spare byte at [len] for the terminator of the last line */
        text[i] = 0;
        if (n == cap) {
            char **p;
            cap = cap ? cap * 2 : 1024;
            p = realloc(v, cap * sizeof(*v));
            if (!p) {
                free(v);
                return -ENOMEM;
            }
            v = p;
        }
        v[n++] = text + start;
        i++;
    }
    while (n > 0 && v[n - 1][0] == 0)
        n--;
    *lines = v;
    *nlines = n;
    return 0;
}

/* Read a text file with one spare byte for split_lines(). */
static int read_text(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
    uint8_t *buf, *p;
    int rc = pcr_tok_read_file(path, true, SEIT_MAX_FILE, &buf, len, err, errlen);

    if (rc)
        return rc;
    if (memchr(buf, 0, *len)) {
        pcr_errf(err, errlen, "%s: not a text file (contains NUL bytes)", path);
        free(buf);
        return -EINVAL;
    }
    p = realloc(buf, *len + 1);
    if (!p) {
        free(buf);
        return -ENOMEM;
    }
    p[*len] = 0;
    *text = (char *)p;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool clean_relpath(const char *s)
{
    const char *c = s;

    if (!*s || *s == '/' || strlen(s) > 4095)
        return false;
    while (*c) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || n > 255 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        if (!e)
            break;
        c = e + 1;
        if (!*c)
            return false; /* trailing '/' */
    }
    return true;
}

static int load_index(struct pcr_seit *s, const char *path, char *err, size_t errlen)
{
    struct pcr_npy a;
    uint8_t *buf;
    size_t len;
    char why[256];
    int rc;

    rc = pcr_tok_read_file(path, true, SEIT_MAX_FILE, &buf, &len, err, errlen);
    if (rc)
        return rc;
    rc = pcr_npy_parse(buf, len, &a, why, sizeof(why));
    if (rc) {
        pcr_errf(err, errlen, "%s: %s", path, why);
        goto out;
    }
    rc = -EINVAL;
    if ((a.kind != 'i' && a.kind != 'u') || a.ndim != 1) {
        pcr_errf(err, errlen,
                 "%s: expected a 1-D integer array of offsets, got dtype '%s' "
                 "with %u dimensions",
                 path, a.descr, a.ndim);
        goto out;
    }
    if (a.count < 2 || a.count - 1 > UINT32_MAX) {
        pcr_errf(err, errlen, "%s: %" PRIu64 " offsets: need N + 1 for 1..%u images", path, a.count,
                 UINT32_MAX);
        goto out;
    }
    s->n = a.count - 1;
    s->off = malloc(a.count * sizeof(*s->off));
    if (!s->off) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < a.count; i++) {
        int64_t v;
        if (pcr_npy_get_int(&a, i, &v) || v < 0) {
            pcr_errf(err, errlen, "%s: offset[%" PRIu64 "] is negative or too large", path, i);
            goto out;
        }
        if (i > 0 && (uint64_t)v < s->off[i - 1]) {
            pcr_errf(err, errlen,
                     "%s: offsets not monotonic: offset[%" PRIu64 "] = %" PRId64
                     " < offset[%" PRIu64 "] = %" PRIu64,
                     path, i, v, i - 1, s->off[i - 1]);
            goto out;
        }
        if ((uint64_t)v > s->datalen) {
            pcr_errf(err, errlen,
                     "%s: offset[%" PRIu64 "] = %" PRId64 " points past the data "
                     "(%zu bytes)",
                     path, i, v, s->datalen);
            goto out;
        }
        s->off[i] = (uint64_t)v;
    }
    if (s->off[0] != 0)
        pcr_log(PCR_LOG_WARN, "%s: the first image starts at %" PRIu64 ", not 0", path, s->off[0]);
    if (s->off[s->n] != s->datalen)
        pcr_log(PCR_LOG_WARN, "%s: %" PRIu64 " bytes of data after the last image are unused", path,
                (uint64_t)s->datalen - s->off[s->n]);
    rc = 0;
out:
    free(buf);
    return rc;
}

/* Text from an input file, fit to quote in a one-line message: at most @max bytes,
 * anything but printable ASCII as \xNN (a label file may hold escape sequences). */
static const char *quote(char *out, size_t cap, const char *in, size_t max)
{
    size_t o = 0;

    for (size_t i = 0; in[i] && i < max && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

static int load_labels(struct pcr_seit *s, const char *path, const char *index_path, char *err,
                       size_t errlen)
{
    char q[4 * 80 + 8];
    char *text = NULL, **lines = NULL;
    uint32_t *count = NULL, maxl = 0;
    uint64_t nl, maxk = 0;
    size_t len;
    int rc;

    rc = read_text(path, &text, &len, err, errlen);
    if (rc)
        return rc;
    rc = split_lines(text, len, &lines, &nl);
    if (rc)
        goto out;
    rc = -EINVAL;
    if (nl != s->n) {
        pcr_errf(err, errlen, "%s has %" PRIu64 " label%s but %s has %" PRIu64 " image%s", path, nl,
                 nl == 1 ? "" : "s", index_path, s->n, s->n == 1 ? "" : "s");
        goto out;
    }
    s->label = malloc(s->n * sizeof(*s->label));
    s->kin = malloc(s->n * sizeof(*s->kin));
    if (!s->label || !s->kin) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < nl; i++) {
        const char *p = lines[i];
        uint64_t v = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            goto bad;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (uint64_t)(*p++ - '0');
            if (v > PCR_SEIT_MAX_LABEL)
                goto bad;
        }
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p)
            goto bad;
        s->label[i] = (uint32_t)v;
        if (v > maxl)
            maxl = (uint32_t)v;
        continue;
    bad:
        pcr_errf(err, errlen,
                 "%s: line %" PRIu64 ": '%s' is not a label (an integer in "
                 "0..%u)",
                 path, i + 1, quote(q, sizeof(q), lines[i], 40), PCR_SEIT_MAX_LABEL);
        goto out;
    }
    count = calloc((size_t)maxl + 1, sizeof(*count));
    if (!count) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < s->n; i++) {
        s->kin[i] = count[s->label[i]]++;
        if (s->kin[i] > maxk)
            maxk = s->kin[i];
    }
    s->lw = digits(maxl);
    s->kw = digits(maxk);
    rc = 0;
out:
    free(count);
    free(lines);
    free(text);
    return rc;
}

static int load_names(struct pcr_seit *s, const char *path, char *err, size_t errlen)
{
    char q[4 * 80 + 8];
    char **sorted = NULL;
    uint64_t nl;
    size_t len;
    int rc;

    rc = read_text(path, &s->names, &len, err, errlen);
    if (rc)
        return rc;
    rc = split_lines(s->names, len, &s->name, &nl);
    if (rc)
        return rc;
    if (nl != s->n) {
        pcr_errf(err, errlen, "%s has %" PRIu64 " name%s but there %s %" PRIu64 " image%s", path,
                 nl, nl == 1 ? "" : "s", s->n == 1 ? "is" : "are", s->n, s->n == 1 ? "" : "s");
        return -EINVAL;
    }
    for (uint64_t i = 0; i < nl; i++) {
        if (!clean_relpath(s->name[i])) {
            pcr_errf(err, errlen, "%s: line %" PRIu64 ": '%s' is not a clean relative path", path,
                     i + 1, quote(q, sizeof(q), s->name[i], 80));
            return -EINVAL;
        }
    }
    sorted = malloc(nl * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    memcpy(sorted, s->name, nl * sizeof(*sorted));
    qsort(sorted, nl, sizeof(*sorted), cmp_str);
    for (uint64_t i = 1; i < nl; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            pcr_errf(err, errlen, "%s: name '%s' appears twice", path,
                     quote(q, sizeof(q), sorted[i], 80));
            free(sorted);
            return -EINVAL;
        }
    }
    free(sorted);
    return 0;
}

/* SeiT's reader (get_data_index_of() in its datasets.py), byte for byte: a 255 sets
 * the next value's offset to 255 (a second 255 sets it again, it does not add), any
 * other byte is a value plus that offset, and a 255 at the end is dropped. Every
 * byte string is thus valid; pcrfs's four-byte extension for values >= 510
 * (pcr_tok_escape_decode()) would read [255, 255, a, b] as one value where SeiT
 * reads 255 + a and then b, so it is not used for SeiT's files. */
size_t pcr_seit_decode(const uint8_t *in, size_t len, uint16_t *out, size_t cap, unsigned *odd)
{
    size_t n = 0;
    unsigned add = 0, kinds = 0;

    for (size_t i = 0; i < len; i++) {
        if (in[i] == 255) {
            if (add)
                kinds |= PCR_SEIT_REPEATED_ESCAPE;
            add = 255;
            continue;
        }
        if (n < cap)
            out[n] = (uint16_t)(add + in[i]);
        n++;
        add = 0;
    }
    if (add)
        kinds |= PCR_SEIT_TRAILING_ESCAPE;
    if (odd)
        *odd = kinds;
    return n;
}

/* Find the images whose bytes SeiT's encoder would not have written, so the import
 * can say once that they are read as SeiT's reader reads them. */
static void scan_odd(struct pcr_seit *s)
{
    for (uint64_t i = 0; i < s->n; i++) {
        unsigned kinds;

        pcr_seit_decode(s->data + s->off[i], s->off[i + 1] - s->off[i], NULL, 0, &kinds);
        if (kinds && s->odd++ == 0)
            s->first_odd = i;
        s->odd_kinds |= kinds;
    }
}

/* SeiT's loader: token_file.replace("data.bin", "index.npy"), on the last component. */
static int find_index(const char *data, char *out, size_t cap, char *err, size_t errlen)
{
    const char *base = strrchr(data, '/'), *hit = NULL, *p;
    char cand[2][4096 + 16];
    size_t n;

    base = base ? base + 1 : data;
    for (p = base; (p = strstr(p, "data.bin")) != NULL; p++)
        hit = p;
    if (!hit || strlen(data) + 8 >= 4096) {
        pcr_errf(err, errlen, "%s: no 'data.bin' in the name to derive the index file from", data);
        return -EINVAL;
    }
    snprintf(cand[0], sizeof(cand[0]), "%.*sindex.npy%s", (int)(hit - data), data, hit + 8);
    n = strlen(cand[0]);
    if (n > 3 && strcmp(cand[0] + n - 3, ".gz") == 0)
        snprintf(cand[1], sizeof(cand[1]), "%.*s", (int)(n - 3), cand[0]);
    else
        snprintf(cand[1], sizeof(cand[1]), "%.4096s.gz", cand[0]);
    for (int i = 0; i < 2; i++) {
        if (access(cand[i], R_OK) == 0) {
            if (strlen(cand[i]) >= cap)
                return -ENAMETOOLONG;
            memcpy(out, cand[i], strlen(cand[i]) + 1); /* measured above */
            return 0;
        }
    }
    pcr_errf(err, errlen, "no index file beside %s (tried %s and %s)", data, cand[0], cand[1]);
    return -ENOENT;
}

void pcr_seit_close(struct pcr_seit *s)
{
    if (!s)
        return;
    free(s->data);
    free(s->off);
    free(s->label);
    free(s->kin);
    free(s->names);
    free(s->name);
    free(s);
}

int pcr_seit_open(const struct pcr_seit_paths *paths, const struct pcr_seit_opts *opts,
                  struct pcr_seit **out, char *err, size_t errlen)
{
    struct pcr_seit *s;
    char index[4096];
    const char *ipath = paths->index;
    int rc;

    *out = NULL;
    if (!paths->data || !paths->labels) {
        pcr_errf(err, errlen, "SeiT import needs a data file and a label file");
        return -EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->h = opts && opts->h ? opts->h : 32;
    s->w = opts && opts->w ? opts->w : 32;
    if (s->h > PCR_TOK_MAX_SIDE || s->w > PCR_TOK_MAX_SIDE ||
        (size_t)s->h * s->w > PCR_TOK_MAX_TOKENS) {
        pcr_errf(err, errlen, "grid shape %ux%u out of range", s->h, s->w);
        rc = -EINVAL;
        goto fail;
    }
    if (!ipath) {
        rc = find_index(paths->data, index, sizeof(index), err, errlen);
        if (rc)
            goto fail;
        ipath = index;
    }
    rc = pcr_tok_read_file(paths->data, true, SEIT_MAX_FILE, &s->data, &s->datalen, err, errlen);
    if (rc == 0)
        rc = load_index(s, ipath, err, errlen);
    if (rc == 0)
        rc = load_labels(s, paths->labels, ipath, err, errlen);
    if (rc == 0 && paths->names)
        rc = load_names(s, paths->names, err, errlen);
    if (rc == 0)
        scan_odd(s);
    if (rc)
        goto fail;
    *out = s;
    return 0;
fail:
    if (rc == -ENOMEM)
        pcr_errf(err, errlen, "SeiT import: out of memory");
    pcr_seit_close(s);
    return rc;
}

uint64_t pcr_seit_count(const struct pcr_seit *s)
{
    return s->n;
}

void pcr_seit_shape(const struct pcr_seit *s, unsigned *h, unsigned *w)
{
    *h = s->h;
    *w = s->w;
}

int pcr_seit_item(const struct pcr_seit *s, uint64_t i, struct pcr_seit_item *out)
{
    if (i >= s->n)
        return -ENOENT;
    out->label = s->label[i];
    out->index_in_label = s->kin[i];
    out->offset = s->off[i];
    out->length = s->off[i + 1] - s->off[i];
    return 0;
}

ssize_t pcr_seit_name(const struct pcr_seit *s, uint64_t i, char *buf, size_t len)
{
    int n;

    if (i >= s->n)
        return -ENOENT;
    if (s->name)
        n = snprintf(buf, len, "%s", s->name[i]);
    else
        n = snprintf(buf, len, "%0*" PRIu32 "/%0*" PRIu32, s->lw, s->label[i], s->kw, s->kin[i]);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return n;
}

int pcr_seit_grid(const struct pcr_seit *s, uint64_t i, uint16_t *grid, char *err, size_t errlen)
{
    size_t n = (size_t)s->h * s->w, got;

    if (i >= s->n)
        return -ENOENT;
    got = pcr_seit_decode(s->data + s->off[i], s->off[i + 1] - s->off[i], grid, n, NULL);
    if (got != n) {
        pcr_errf(err, errlen,
                 "image %" PRIu64 " (label %" PRIu32 ", bytes %" PRIu64 "..%" PRIu64
                 "): decodes to %zu tokens, expected %ux%u = %zu",
                 i, s->label[i], s->off[i], s->off[i + 1], got, s->h, s->w, n);
        return -EINVAL;
    }
    return 0;
}

uint64_t pcr_seit_odd(const struct pcr_seit *s, uint64_t *first, unsigned *kinds)
{
    *first = s->first_odd;
    *kinds = s->odd_kinds;
    return s->odd;
}
