/* pcrfs — little-endian fields of the on-disk formats (record and shard headers, the
 * token model, NPY headers): one set of helpers for every module; not installed.
 * They work on any host and at any alignment. */
#ifndef PCRFS_LE_H
#define PCRFS_LE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t pcr_get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

/* Loads through memcpy(): one unaligned load (and a byte swap on a big-endian
 * host), which the checksum of every block read from a record depends on. */
static inline uint32_t pcr_get_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t pcr_get_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void pcr_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void pcr_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void pcr_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

#endif
