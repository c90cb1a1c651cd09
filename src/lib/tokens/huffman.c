/* pcrfs — canonical Huffman codes for the token codec (see tokens_internal.h).
 *
 * Why our own and not zstd's HUF: zstd's Huffman coder is not public API, and it
 * caps the alphabet at 256 symbols while a token alphabet has up to 65536 (a codebook
 * of 8192 entries, say). A table-driven canonical decoder is small: one 2^12-entry
 * lookup for the short (frequent) codes, and a canonical range search for the rest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "tokens/tokens_internal.h"

struct sym_freq {
    uint64_t f;
    uint32_t s;
};

static int cmp_freq(const void *a, const void *b)
{
    const struct sym_freq *x = a, *y = b;

    if (x->f != y->f)
        return x->f < y->f ? -1 : 1;
    /* Ties by symbol, descending, so the lower symbol ends up with the shorter (or
     * equal) code: deterministic across platforms (qsort is not stable). */
    return x->s < y->s ? 1 : (x->s > y->s ? -1 : 0);
}

/* Limit the code lengths to @maxlen, keeping a prefix code: clamp, then lengthen
 * the least frequent codes until Kraft's inequality holds, then shorten the most
 * frequent ones while the slack allows. Only runs for very skewed counts (a symbol
 * 2^-20 as frequent as the total), so simplicity beats package-merge optimality. */
static void limit_lengths(const struct sym_freq *sf, unsigned n, uint8_t *len, unsigned maxlen)
{
    const uint64_t target = 1ull << maxlen;
    uint64_t kraft = 0;
    unsigned i;

    for (i = 0; i < n; i++) {
        if (len[sf[i].s] > maxlen)
            len[sf[i].s] = (uint8_t)maxlen;
        kraft += 1ull << (maxlen - len[sf[i].s]);
    }
    /* sf[] is sorted by ascending frequency. */
    for (i = 0; i < n && kraft > target; i++) {
        uint8_t *l = &len[sf[i].s];
        while (*l < maxlen && kraft > target) {
            kraft -= 1ull << (maxlen - *l - 1);
            (*l)++;
        }
    }
    for (i = n; i-- > 0;) {
        uint8_t *l = &len[sf[i].s];
        while (*l > 1 && kraft + (1ull << (maxlen - *l)) <= target) {
            kraft += 1ull << (maxlen - *l);
            (*l)--;
        }
    }
    assert(kraft <= target);
}

int pcr_huf_lengths(const uint64_t *freq, unsigned nreal, unsigned maxlen, uint8_t *len)
{
    struct sym_freq *sf;
    uint64_t *w;
    uint32_t *parent;
    uint8_t *depth;
    unsigned n = 0, i, maxd = 0;

    if (nreal == 0 || nreal > PCR_HUF_MAXSYM || maxlen == 0 || maxlen > PCR_HUF_MAXLEN)
        return -EINVAL;
    memset(len, 0, (size_t)nreal + 1);
    for (i = 0; i < nreal; i++)
        n += freq[i] != 0;
    n++; /* the guard */
    if (n == 1 || n > (1u << maxlen))
        return -EINVAL;
    sf = malloc(n * sizeof(*sf));
    w = malloc((2 * n - 1) * sizeof(*w));
    parent = malloc((2 * n - 1) * sizeof(*parent));
    depth = malloc(2 * n - 1);
    if (!sf || !w || !parent || !depth) {
        free(sf);
        free(w);
        free(parent);
        free(depth);
        return -ENOMEM;
    }
    n = 0;
    for (i = 0; i < nreal; i++)
        if (freq[i])
            sf[n++] = (struct sym_freq){freq[i], i};
    sf[n++] = (struct sym_freq){0, nreal}; /* weight 0: sorts first, merged first */
    qsort(sf, n, sizeof(*sf), cmp_freq);

    /* Two-queue Huffman: leaves 0..n-1 in ascending weight, internal nodes n..2n-2
     * are created in non-decreasing weight order, so the two smallest are always at
     * the fronts of the two queues. */
    {
        unsigned leaf = 0, node = n, next = n;
        for (i = 0; i < n; i++)
            w[i] = sf[i].f;
        while (next < 2 * n - 1) {
            unsigned pick[2];
            for (int k = 0; k < 2; k++) {
                if (leaf < n && (node >= next || w[leaf] <= w[node]))
                    pick[k] = leaf++;
                else
                    pick[k] = node++;
            }
            w[next] = w[pick[0]] + w[pick[1]];
            parent[pick[0]] = parent[pick[1]] = next;
            next++;
        }
        /* Parents are created after their children: walk back from the root. */
        depth[2 * n - 2] = 0;
        for (i = 2 * n - 2; i-- > 0;) {
            unsigned d = depth[parent[i]] + 1u;
            depth[i] = (uint8_t)(d > 255 ? 255 : d);
        }
        for (i = 0; i < n; i++) {
            len[sf[i].s] = depth[i];
            if (depth[i] > maxd)
                maxd = depth[i];
        }
    }
    if (maxd > maxlen)
        limit_lengths(sf, n, len, maxlen);
    /* The guard must be among the longest codes (it has the highest index, so it
     * then owns the last canonical codeword). Huffman puts the lightest leaf
     * deepest anyway; make sure, swapping lengths with a longest real symbol (the
     * guard has weight 0, so the swap never costs bits). */
    maxd = 0;
    for (i = 0; i <= nreal; i++)
        if (len[i] > maxd)
            maxd = len[i];
    if (len[nreal] < maxd) {
        for (i = 0; i < nreal; i++) {
            if (len[i] == maxd) {
                len[i] = len[nreal];
                len[nreal] = (uint8_t)maxd;
                break;
            }
        }
    }
    free(sf);
    free(w);
    free(parent);
    free(depth);
    return 0;
}

/* Count codes per length and check Kraft's inequality. */
static int check_lengths(const uint8_t *len, unsigned nsym, unsigned count[PCR_HUF_MAXLEN + 1],
                         unsigned *maxlen)
{
    uint64_t kraft = 0;
    unsigned i, used = 0;

    if (nsym < 2 || nsym > PCR_HUF_MAXSYM + 1 || len[nsym - 1] == 0)
        return -EINVAL;
    memset(count, 0, sizeof(unsigned) * (PCR_HUF_MAXLEN + 1));
    *maxlen = 0;
    for (i = 0; i < nsym; i++) {
        if (len[i] > PCR_HUF_MAXLEN)
            return -EINVAL;
        if (len[i] == 0)
            continue;
        count[len[i]]++;
        used++;
        kraft += 1ull << (PCR_HUF_MAXLEN - len[i]);
        if (len[i] > *maxlen)
            *maxlen = len[i];
    }
    if (used < 2 || kraft > (1ull << PCR_HUF_MAXLEN))
        return -EINVAL;
    return 0;
}

/* first[l]: the canonical code of the first symbol of length l. */
static void first_codes(const unsigned count[PCR_HUF_MAXLEN + 1],
                        uint32_t first[PCR_HUF_MAXLEN + 2])
{
    uint32_t code = 0;

    first[0] = 0;
    for (unsigned l = 1; l <= PCR_HUF_MAXLEN; l++) {
        code = (code + count[l - 1]) << 1;
        first[l] = code;
    }
    /* count[0] counts nothing (unused symbols are not in count[]). */
}

int pcr_huf_enc_init(struct pcr_huf_enc *e, const uint8_t *len, unsigned nsym)
{
    unsigned count[PCR_HUF_MAXLEN + 1], maxlen;
    uint32_t next[PCR_HUF_MAXLEN + 2];
    int rc;

    memset(e, 0, sizeof(*e));
    rc = check_lengths(len, nsym, count, &maxlen);
    if (rc)
        return rc;
    count[0] = 0;
    first_codes(count, next);
    e->nsym = nsym;
    e->code = malloc(nsym * sizeof(*e->code));
    e->len = malloc(nsym);
    if (!e->code || !e->len) {
        pcr_huf_enc_free(e);
        return -ENOMEM;
    }
    memcpy(e->len, len, nsym);
    for (unsigned s = 0; s < nsym; s++)
        e->code[s] = len[s] ? next[len[s]]++ : 0;
    return 0;
}

void pcr_huf_enc_free(struct pcr_huf_enc *e)
{
    free(e->code);
    free(e->len);
    memset(e, 0, sizeof(*e));
}

int pcr_huf_dec_init(struct pcr_huf_dec *d, const uint8_t *len, unsigned nsym, const uint16_t *map)
{
    unsigned count[PCR_HUF_MAXLEN + 1], maxlen, l, s;
    uint32_t first[PCR_HUF_MAXLEN + 2], offset[PCR_HUF_MAXLEN + 2], next[PCR_HUF_MAXLEN + 2];
    int rc;

    memset(d, 0, sizeof(*d));
    rc = check_lengths(len, nsym, count, &maxlen);
    if (rc)
        return rc;
    count[0] = 0;
    first_codes(count, first);
    d->nsym = nsym;
    d->maxlen = maxlen;
    d->sorted = malloc(nsym * sizeof(*d->sorted));
    if (!d->sorted)
        return -ENOMEM;

    offset[1] = 0;
    for (l = 1; l <= PCR_HUF_MAXLEN; l++)
        offset[l + 1] = offset[l] + count[l];
    memcpy(next, offset, sizeof(next));
    for (s = 0; s < nsym; s++) {
        if (!len[s])
            continue;
        if (s == nsym - 1) {
            d->guard_pos = next[len[s]];
            d->sorted[next[len[s]]++] = 0;
        } else {
            d->sorted[next[len[s]]++] = map ? map[s] : s;
        }
    }

    for (l = 1; l <= PCR_HUF_MAXLEN; l++) {
        /* The window value one past the last length-l code, left-aligned in 32 bits. */
        d->limit[l] = (uint64_t)(first[l] + count[l]) << (32 - l);
        d->base[l] = (int32_t)offset[l] - (int32_t)first[l];
    }
    d->limit[PCR_HUF_MAXLEN + 1] = 0;
    d->slow_start = len[nsym - 1] <= PCR_HUF_TABLEBITS ? 1 : PCR_HUF_TABLEBITS + 1;

    /* Codes up to PCR_HUF_TABLEBITS bits: one entry per possible continuation. */
    for (l = 1; l <= PCR_HUF_TABLEBITS && l <= PCR_HUF_MAXLEN; l++) {
        for (unsigned i = 0; i < count[l]; i++) {
            uint32_t code = first[l] + i;
            uint32_t lo = code << (PCR_HUF_TABLEBITS - l);
            uint32_t n = 1u << (PCR_HUF_TABLEBITS - l);
            if (offset[l] + i == d->guard_pos)
                continue; /* the guard: left to the slow path, which rejects it */
            for (uint32_t j = 0; j < n; j++)
                d->table[lo + j] = (d->sorted[offset[l] + i] << 8) | l;
        }
    }
    return 0;
}

void pcr_huf_dec_free(struct pcr_huf_dec *d)
{
    free(d->sorted);
    d->sorted = NULL;
}

size_t pcr_huf_bound(const struct pcr_huf_enc *e, size_t n)
{
    (void)e;
    return (n * PCR_HUF_MAXLEN + 7) / 8 + 8;
}

long pcr_huf_encode(const struct pcr_huf_enc *e, const uint16_t *sym, size_t n, uint8_t *out,
                    size_t cap)
{
    uint64_t acc = 0;
    unsigned nacc = 0;
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned s = sym[i], l;
        if (s >= e->nsym - 1 || (l = e->len[s]) == 0)
            return -ENOENT;
        acc = (acc << l) | e->code[s];
        nacc += l;
        while (nacc >= 8) {
            if (o >= cap)
                return -ENOSPC;
            nacc -= 8;
            out[o++] = (uint8_t)(acc >> nacc);
        }
    }
    if (nacc) {
        if (o >= cap)
            return -ENOSPC;
        out[o++] = (uint8_t)((acc << (8 - nacc)) | ((1u << (8 - nacc)) - 1));
    }
    return (long)o;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* The decoder's inner loop. An MSB-first bit reader: bits holds the next bits
 * left-aligned, nbits of them valid. The fast refill loads 8 bytes at once and may
 * set bits past nbits, but those are the stream's own next bits, so later refills OR
 * in the same values. Past the end of the blob the reader supplies zero bytes that
 * it only counts (virt): no code can then run past the end unnoticed, because the
 * check after the loop compares the bits consumed with the blob's length; this
 * keeps a per-symbol bounds test out of the loop. */
static inline int decode_core(const struct pcr_huf_dec *d, const uint8_t *in, size_t len,
                              uint16_t *out, size_t n)
{
    const uint8_t *p = in, *const end = in + len;
    const uint32_t *const table = d->table;
    uint64_t bits = 0, consumed;
    unsigned nbits = 0;
    size_t virt = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t e, sym;
        unsigned l;

        if (nbits < PCR_HUF_MAXLEN) {
            if (end - p >= 8) {
                unsigned adv = (63 - nbits) >> 3;
                bits |= load_be64(p) >> nbits;
                p += adv;
                nbits += adv * 8;
            } else {
                for (; nbits <= 56; nbits += 8) {
                    if (p < end)
                        bits |= (uint64_t)*p++ << (56 - nbits);
                    else
                        virt++;
                }
            }
        }
        e = table[bits >> (64 - PCR_HUF_TABLEBITS)];
        if (__builtin_expect(e != 0, 1)) {
            l = e & 0xff;
            sym = e >> 8;
        } else {
            uint64_t win = bits >> 32;
            size_t k;
            /* Every window that reaches here is >= limit[slow_start - 1], which keeps
             * the index below inside sorted[]. */
            for (l = d->slow_start; l <= d->maxlen; l++)
                if (win < d->limit[l])
                    break;
            if (l > d->maxlen)
                return -EINVAL; /* no code starts with these bits */
            /* in size_t: base[] may be negative, the sum never is (modular) */
            k = (size_t)d->base[l] + (size_t)(win >> (32 - l));
            if (k == d->guard_pos)
                return -EINVAL;
            sym = d->sorted[k];
        }
        bits <<= l;
        nbits -= l;
        out[i] = (uint16_t)sym;
    }
    consumed = (uint64_t)((size_t)(p - in) + virt) * 8 - nbits;
    if (consumed > (uint64_t)len * 8)
        return -EINVAL; /* truncated: codes ran into the virtual zeros */
    if (len != (consumed + 7) / 8)
        return -EINVAL; /* trailing bytes */
    if (consumed & 7) {
        unsigned pad = (1u << (8 - (consumed & 7))) - 1;
        if ((in[len - 1] & pad) != pad)
            return -EINVAL; /* padding must be ones */
    }
    return 0;
}

int pcr_huf_decode(const struct pcr_huf_dec *d, const uint8_t *in, size_t len, uint16_t *out,
                   size_t n)
{
    return decode_core(d, in, len, out, n);
}
