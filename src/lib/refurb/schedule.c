/* pcrfs — refurbishing's randomness: the keyed RNG, the crop parameters and the
 * balanced schedule (see pcrfs/refurb.h and doc/REFURB.md).
 *
 * Everything here is a pure function of its arguments, so a sample's version v has
 * one crop whichever thread renders it and whenever: no generator state is shared.
 */
#include <errno.h>
#include <math.h>
#include "pcrfs/refurb.h"

#define GOLDEN 0x9e3779b97f4a7c15ull /* SplitMix64's increment */
#define KEY0   0x7063726672667262ull /* "pcrfrfrb": separates us from other users */

/* SplitMix64's output function (Steele, Lea, Flood 2014). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void pcr_refurb_conf_default(struct pcr_refurb_conf *c)
{
    c->size = 224;
    c->scale[0] = 0.08;
    c->scale[1] = 1.0;
    c->ratio[0] = 3.0 / 4.0;
    c->ratio[1] = 4.0 / 3.0;
    c->flip = true;
    c->dct_scaling = true;
    c->partial = true;
    c->seed = 0;
}

int pcr_refurb_conf_check(const struct pcr_refurb_conf *c)
{
    if (!c || c->size < 1 || c->size > PCR_REFURB_MAX_SIZE)
        return -EINVAL;
    /* Written so that NaN fails every comparison and is rejected. */
    if (!(c->scale[0] > 0 && c->scale[0] <= c->scale[1] && c->scale[1] <= 1))
        return -EINVAL;
    if (!(c->ratio[0] > 0 && c->ratio[0] <= c->ratio[1] && c->ratio[1] < INFINITY))
        return -EINVAL;
    return 0;
}

void pcr_refurb_rng_init(struct pcr_refurb_rng *r, uint64_t seed, uint64_t sample, uint64_t version,
                         unsigned stream)
{
    /* Each step is a bijection of the previous hash and the next key part, so two
     * different (sample, version, stream) under one seed start far apart. */
    uint64_t h = mix64(seed ^ KEY0);

    h = mix64(h ^ sample);
    h = mix64(h ^ version);
    r->state = mix64(h ^ (uint64_t)stream);
}

uint64_t pcr_refurb_rng_next(struct pcr_refurb_rng *r)
{
    r->state += GOLDEN;
    return mix64(r->state);
}

/* torch.empty(1).uniform_(lo, hi) on the CPU: 24 random bits scaled in double
 * precision, stored in a float32 tensor. */
static float uniform_f32(struct pcr_refurb_rng *r, double lo, double hi)
{
    double x = (double)(pcr_refurb_rng_next(r) >> 40) * 0x1p-24;

    return (float)(x * (hi - lo) + lo);
}

/* torch.randint(0, m): an integer in [0, m); the modulo bias is below m / 2^64. */
static unsigned randint(struct pcr_refurb_rng *r, unsigned m)
{
    return (unsigned)(pcr_refurb_rng_next(r) % m);
}

/* Python's int(round(x)): round half to even, which is rint() in the default
 * rounding mode. Values are clamped to what fits an unsigned (then rejected). */
static double pyround(double x)
{
    return rint(x);
}

static void centre_crop(unsigned width, unsigned height, const struct pcr_refurb_conf *c,
                        struct pcr_refurb_params *p)
{
    double in_ratio = (double)width / (double)height;
    double rmin = fmin(c->ratio[0], c->ratio[1]), rmax = fmax(c->ratio[0], c->ratio[1]);
    double w = width, h = height;

    if (in_ratio < rmin) {
        h = pyround(w / rmin);
    } else if (in_ratio > rmax) {
        w = pyround(h * rmax);
    }
    /* torchvision can reach 0 here only for ratio ranges far from the image's
     * (then PIL fails on an empty crop); we keep at least one pixel. */
    if (w < 1)
        w = 1;
    if (h < 1)
        h = 1;
    p->width = (unsigned)w;
    p->height = (unsigned)h;
    p->top = (height - p->height) / 2;
    p->left = (width - p->width) / 2;
    p->fallback = true;
}

int pcr_refurb_params(unsigned width, unsigned height, const struct pcr_refurb_conf *c,
                      uint64_t sample, uint64_t version, struct pcr_refurb_params *out)
{
    struct pcr_refurb_rng rng;
    double area = (double)width * (double)height;
    /* torch.log(torch.tensor(ratio)): the logs of the float32 ratios, in float32. */
    float lr0 = logf((float)c->ratio[0]), lr1 = logf((float)c->ratio[1]);

    if (width == 0 || height == 0 || pcr_refurb_conf_check(c))
        return -EINVAL;
    *out = (struct pcr_refurb_params){0};
    pcr_refurb_rng_init(&rng, c->seed, sample, version, PCR_REFURB_STREAM_CROP);
    for (int t = 0; t < 10; t++) {
        double target = area * (double)uniform_f32(&rng, c->scale[0], c->scale[1]);
        double ar = (double)expf(uniform_f32(&rng, (double)lr0, (double)lr1));
        double w = pyround(sqrt(target * ar));
        double h = pyround(sqrt(target / ar));

        if (w > 0 && w <= width && h > 0 && h <= height) {
            out->width = (unsigned)w;
            out->height = (unsigned)h;
            out->top = randint(&rng, height - out->height + 1);
            out->left = randint(&rng, width - out->width + 1);
            break;
        }
    }
    if (out->width == 0)
        centre_crop(width, height, c, out);
    if (c->flip) {
        struct pcr_refurb_rng f;
        pcr_refurb_rng_init(&f, c->seed, sample, version, PCR_REFURB_STREAM_FLIP);
        /* torch.rand(1) < 0.5 */
        out->flip = (pcr_refurb_rng_next(&f) >> 40) < (1u << 23);
    }
    return 0;
}

/* ---- The permutation: a Feistel network over [0, 4^k), cycle-walked into [0, n).
 * A Feistel network is a bijection whatever its round function, so the walk (apply
 * again while outside [0, n)) ends and is a bijection of [0, n) too; 4^k < 4n keeps
 * the expected walk short (below 4 rounds of the network). */

struct feistel {
    unsigned half;   /* bits per half */
    uint64_t mask;   /* (1 << half) - 1 */
    uint64_t key[4]; /* round keys */
};

static void feistel_init(struct feistel *f, uint64_t n, uint64_t seed)
{
    unsigned bits = 2;

    while (bits < 64 && ((n - 1) >> bits) != 0)
        bits += 2;
    f->half = bits / 2; /* at most 32 */
    f->mask = (1ull << f->half) - 1;
    for (int i = 0; i < 4; i++)
        f->key[i] = mix64(seed ^ KEY0 ^ (GOLDEN * (uint64_t)(i + 1)));
}

static uint64_t feistel_round(const struct feistel *f, int i, uint64_t x)
{
    return mix64(x ^ f->key[i]) & f->mask;
}

static uint64_t feistel_enc(const struct feistel *f, uint64_t x)
{
    uint64_t l = (x >> f->half) & f->mask, r = x & f->mask;

    for (int i = 0; i < 4; i++) {
        uint64_t t = l ^ feistel_round(f, i, r);
        l = r;
        r = t;
    }
    return (l << f->half) | r;
}

static uint64_t feistel_dec(const struct feistel *f, uint64_t x)
{
    uint64_t l = (x >> f->half) & f->mask, r = x & f->mask;

    for (int i = 3; i >= 0; i--) {
        uint64_t t = r ^ feistel_round(f, i, l);
        r = l;
        l = t;
    }
    return (l << f->half) | r;
}

uint64_t pcr_refurb_perm(uint64_t n, uint64_t seed, uint64_t i)
{
    struct feistel f;

    if (n <= 1 || i >= n)
        return i;
    feistel_init(&f, n, seed);
    do
        i = feistel_enc(&f, i);
    while (i >= n);
    return i;
}

uint64_t pcr_refurb_perm_inv(uint64_t n, uint64_t seed, uint64_t v)
{
    struct feistel f;

    if (n <= 1 || v >= n)
        return v;
    feistel_init(&f, n, seed);
    do
        v = feistel_dec(&f, v);
    while (v >= n);
    return v;
}

uint64_t pcr_refurb_phase(uint64_t n, uint64_t seed, unsigned r, uint64_t i)
{
    return r <= 1 ? 0 : pcr_refurb_perm(n, seed, i) % r;
}

/* The phase class that is fresh at @pass: (pass + p) mod r == 0. */
static uint64_t fresh_class(unsigned r, uint64_t pass)
{
    return (r - pass % r) % r;
}

uint64_t pcr_refurb_fresh_count(uint64_t n, unsigned r, uint64_t pass)
{
    uint64_t c;

    if (r <= 1 || pass == 0)
        return n;
    c = fresh_class(r, pass);
    return n > c ? (n - c - 1) / r + 1 : 0;
}

uint64_t pcr_refurb_fresh_nth(uint64_t n, uint64_t seed, unsigned r, uint64_t pass, uint64_t k)
{
    if (r <= 1 || pass == 0)
        return pcr_refurb_perm_inv(n, seed, k);
    return pcr_refurb_perm_inv(n, seed, fresh_class(r, pass) + k * r);
}
