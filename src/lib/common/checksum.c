/* pcrfs — XXH64, the chunk checksums built on it, and LEB128 varints.
 *
 * XXH64 is written here from the public xxHash specification (about sixty lines)
 * rather than taken as a dependency: it is the only thing we would use of libxxhash.
 * It is ~20x faster than SHA-256, so checksumming stays invisible next to the
 * libjpeg transform during a build.
 */
#include <string.h>
#include "pcrfs/checksum.h"
#include "common/internal.h"
#include "common/le.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t round1(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
    acc ^= round1(0, v);
    return acc * P1 + P4;
}

void pcr_xxh64_init(struct pcr_xxh64 *st)
{
    memset(st, 0, sizeof(*st));
    st->v[0] = P1 + P2;
    st->v[1] = P2;
    st->v[2] = 0;
    st->v[3] = -P1;
}

static inline void stripe(uint64_t v[4], const uint8_t *p)
{
    for (int i = 0; i < 4; i++)
        v[i] = round1(v[i], pcr_get_le64(p + 8 * i));
}

/* The bulk of the input, 32 bytes a round, with the four lanes in registers. */
static const uint8_t *stripes(uint64_t v[4], const uint8_t *p, size_t n)
{
    uint64_t a = v[0], b = v[1], c = v[2], d = v[3];

    for (; n >= 32; p += 32, n -= 32) {
        a = round1(a, pcr_get_le64(p));
        b = round1(b, pcr_get_le64(p + 8));
        c = round1(c, pcr_get_le64(p + 16));
        d = round1(d, pcr_get_le64(p + 24));
    }
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
    return p;
}

void pcr_xxh64_update(struct pcr_xxh64 *st, const void *data, size_t len)
{
    const uint8_t *p = data;

    st->total += len;
    if (st->nbuf) {
        size_t take = 32 - st->nbuf;
        if (take > len)
            take = len;
        memcpy(st->buf + st->nbuf, p, take);
        st->nbuf += take;
        p += take;
        len -= take;
        if (st->nbuf < 32)
            return;
        stripe(st->v, st->buf);
        st->nbuf = 0;
    }
    {
        const uint8_t *q = stripes(st->v, p, len);
        len -= (size_t)(q - p);
        p = q;
    }
    memcpy(st->buf, p, len);
    st->nbuf = len;
}

uint64_t pcr_xxh64_final(const struct pcr_xxh64 *st)
{
    const uint8_t *p = st->buf, *end = st->buf + st->nbuf;
    uint64_t h;

    if (st->total >= 32) {
        const uint64_t *v = st->v;
        h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
        for (int i = 0; i < 4; i++)
            h = merge(h, v[i]);
    } else {
        h = st->v[2] + P5;
    }
    h += st->total;
    for (; p + 8 <= end; p += 8) {
        h ^= round1(0, pcr_get_le64(p));
        h = rotl(h, 27) * P1 + P4;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)pcr_get_le32(p) * P1;
        h = rotl(h, 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (*p) * P5;
        h = rotl(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t pcr_xxh64(const void *data, size_t len)
{
    struct pcr_xxh64 st;
    pcr_xxh64_init(&st);
    pcr_xxh64_update(&st, data, len);
    return pcr_xxh64_final(&st);
}

uint32_t pcr_sum32(const void *data, size_t len)
{
    return (uint32_t)pcr_xxh64(data, len);
}

size_t pcr_varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t pcr_varint_get(const uint8_t *p, size_t len, uint64_t *v)
{
    uint64_t r = 0;
    for (size_t i = 0; i < len && i < 10; i++) {
        uint64_t b = p[i] & 0x7f;
        if (i == 9 && p[i] > 1)
            return 0; /* more than 64 bits */
        r |= b << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = r;
            return i + 1;
        }
    }
    return 0;
}

size_t pcr_sums_put(const uint8_t *data, size_t len, uint8_t *out)
{
    size_t n = 0;

    for (size_t off = 0; off < len; off += PCR_SUM_BLOCK) {
        size_t l = len - off < PCR_SUM_BLOCK ? len - off : PCR_SUM_BLOCK;
        pcr_put_le32(out + n, pcr_sum32(data + off, l));
        n += 4;
    }
    return n;
}
