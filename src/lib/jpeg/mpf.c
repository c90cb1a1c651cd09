/* pcrfs — keeping MPF offsets right when the primary image changes length (mpf.h).
 *
 * Multi-picture files (MPO stereo pairs, Ultra HDR gain maps, camera previews) are a
 * primary JPEG followed, after its EOI, by more JPEGs. Readers find those through
 * the MPF APP2 segment of the primary: "MPF\0", then a TIFF header (II or MM, 42,
 * the offset of the MP Index IFD), whose tag 0xB002 (MP Entry) holds 16 bytes per
 * image: attributes (u32), size (u32), data offset (u32, relative to the TIFF
 * header; 0 for the primary) and two dependent-image entry numbers (u16).
 *
 * The transcoder re-encodes the primary, which changes its length, and keeps the
 * bytes after its EOI unchanged right after the new EOI. A position p in the old
 * trailer is therefore at outlen + (p - src_end) in the new file, and each offset
 * is moved by the same rule; the MPF segment itself is copied verbatim into the new
 * header, so only the four-byte fields change and no length does.
 *
 * Everything here reads untrusted bytes: each field is bounds-checked against its
 * segment, and anything that does not parse fails the call (the caller then keeps
 * the source verbatim, so an MPF we do not understand never loses an image).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include "jpeg/mpf.h"
#include "common/internal.h"

enum {
    M_TEM = 0x01,
    M_RST0 = 0xD0,
    M_RST7 = 0xD7,
    M_EOI = 0xD9,
    M_SOS = 0xDA,
    M_APP2 = 0xE2,
    TAG_MP_ENTRY = 0xB002,
    TYPE_UNDEFINED = 7,
    MP_ENTRY_SIZE = 16,
};

/* The MPF segments among the markers before the first SOS: how many, and where
 * the first one's TIFF data starts and how long it is.
 * @return the count, or -EINVAL if the header does not walk cleanly. */
static int find_mpf(const uint8_t *buf, size_t len, size_t *tiff, size_t *tifflen)
{
    size_t pos = 2;
    int count = 0;

    if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8)
        return -EINVAL;
    while (pos < len) {
        if (buf[pos] != 0xFF)
            return -EINVAL;
        while (pos + 1 < len && buf[pos + 1] == 0xFF)
            pos++; /* fill bytes */
        if (pos + 1 >= len)
            return -EINVAL;
        unsigned m = buf[pos + 1];
        pos += 2;
        if (m == M_SOS || m == M_EOI)
            return count;
        if (m == M_TEM || (m >= M_RST0 && m <= M_RST7))
            continue;
        if (len - pos < 2)
            return -EINVAL;
        size_t seglen = ((size_t)buf[pos] << 8) | buf[pos + 1];
        if (seglen < 2 || seglen > len - pos)
            return -EINVAL;
        if (m == M_APP2 && seglen >= 2 + 4 && memcmp(buf + pos + 2, "MPF", 4) == 0) {
            if (count++ == 0) {
                *tiff = pos + 2 + 4;
                *tifflen = seglen - 2 - 4;
            }
        }
        pos += seglen;
    }
    return -EINVAL; /* no SOS */
}

struct tiff {
    uint8_t *p;
    size_t len;
    bool be; /* MM: big-endian */
};

static uint32_t rd(const struct tiff *t, size_t off, unsigned n)
{
    uint32_t v = 0;

    for (unsigned i = 0; i < n; i++)
        v |= (uint32_t)t->p[off + (t->be ? n - 1 - i : i)] << (8 * i);
    return v;
}

static void wr32(const struct tiff *t, size_t off, uint32_t v)
{
    for (unsigned i = 0; i < 4; i++)
        t->p[off + (t->be ? 3 - i : i)] = (uint8_t)(v >> (8 * i));
}

/* Find the MP Entry array of the TIFF data @t: *at its offset, *n its entries.
 * @return 0 (*n = 0 when there is no MP Entry tag); -EINVAL with a reason. */
static int mp_entries(const struct tiff *t, size_t *at, size_t *n, const char **why)
{
    size_t ifd, count;

    *n = 0;
    if (t->len < 8 || !((t->p[0] == 'I' && t->p[1] == 'I') || (t->p[0] == 'M' && t->p[1] == 'M')) ||
        rd(t, 2, 2) != 42) {
        *why = "no TIFF header";
        return -EINVAL;
    }
    ifd = rd(t, 4, 4);
    if (ifd < 8 || ifd > t->len - 2) {
        *why = "MP Index IFD outside the segment";
        return -EINVAL;
    }
    count = rd(t, ifd, 2);
    if (count * 12 > t->len - ifd - 2) {
        *why = "MP Index IFD runs past the segment";
        return -EINVAL;
    }
    for (size_t i = 0; i < count; i++) {
        size_t e = ifd + 2 + 12 * i;
        if (rd(t, e, 2) != TAG_MP_ENTRY)
            continue;
        size_t bytes = rd(t, e + 4, 4), off = rd(t, e + 8, 4);
        if (*n) {
            *why = "two MP Entry tags";
            return -EINVAL;
        }
        if (rd(t, e + 2, 2) != TYPE_UNDEFINED || bytes == 0 || bytes % MP_ENTRY_SIZE ||
            off > t->len || bytes > t->len - off) {
            *why = "MP Entry tag malformed or outside the segment";
            return -EINVAL;
        }
        *at = off;
        *n = bytes / MP_ENTRY_SIZE;
    }
    return 0;
}

int pcr_mpf_patch(const uint8_t *src, size_t src_end, size_t srclen, uint8_t *out, size_t outlen,
                  char *why, size_t whylen)
{
    size_t s_tiff = 0, s_len = 0, o_tiff = 0, o_len = 0, at = 0, n = 0;
    const char *reason = NULL;
    struct tiff t;
    int ns, no;

    ns = find_mpf(src, src_end, &s_tiff, &s_len);
    no = find_mpf(out, outlen, &o_tiff, &o_len);
    if (ns == 0 || no == 0)
        return 0; /* nothing to patch (no MPF, or --drop-markers removed it) */
    if (ns < 0 || no < 0)
        reason = "header does not walk";
    else if (ns > 1)
        reason = "more than one MPF segment";
    else if (no != ns || o_len != s_len || memcmp(out + o_tiff, src + s_tiff, s_len) != 0)
        reason = "segment not copied unchanged";
    if (reason)
        goto fail;
    if (outlen > UINT32_MAX) {
        reason = "image too large for MPF offsets";
        goto fail;
    }
    t = (struct tiff){.p = out + o_tiff, .len = o_len, .be = out[o_tiff] == 'M'};
    if (mp_entries(&t, &at, &n, &reason))
        goto fail;
    /* Check every entry before changing any. */
    for (size_t i = 0; i < n; i++) {
        size_t e = at + MP_ENTRY_SIZE * i, size = rd(&t, e + 4, 4), off = rd(&t, e + 8, 4);
        size_t old = s_tiff + off; /* < 2^33: no overflow */
        if (i == 0 && off != 0) {
            reason = "first MP entry has a nonzero offset";
            goto fail;
        }
        if (i == 0 || off == 0)
            continue;
        if (old < src_end || old >= srclen || size > srclen - old) {
            reason = "an MP entry points outside the bytes after EOI";
            goto fail;
        }
        if (outlen + (old - src_end) - o_tiff > UINT32_MAX) {
            reason = "an MP entry offset overflows";
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) {
        size_t e = at + MP_ENTRY_SIZE * i, off = rd(&t, e + 8, 4);
        if (i == 0)
            wr32(&t, e + 4, (uint32_t)outlen);
        else if (off != 0)
            wr32(&t, e + 8, (uint32_t)(outlen + (s_tiff + off - src_end) - o_tiff));
    }
    return 0;
fail:
    pcr_errf(why, whylen, "MPF (multi-picture index): %s", reason);
    return -EINVAL;
}
