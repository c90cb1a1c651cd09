/* pcrfs — helpers shared by the library's modules; not installed. */
#ifndef PCRFS_INTERNAL_H
#define PCRFS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include "pcrfs/log.h"

#define PCR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Format a message and hand it to the installed hook (see pcrfs/log.h). */
void pcr_log(enum pcr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Write a formatted message into @buf (if non-NULL); always NUL-terminates. */
void pcr_errf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Chunk checksums (pcrfs(5)): each chunk is cut into blocks of PCR_SUM_BLOCK bytes
 * (the last one shorter), and each block has the low 32 bits of its XXH64 as a
 * little-endian u32. A reader verifies a block whenever it reads it from a record. */
#define PCR_SUM_BLOCK 65536u
static inline uint64_t pcr_sum_blocks(uint64_t len)
{
    return (len + PCR_SUM_BLOCK - 1) / PCR_SUM_BLOCK;
}
/* The low 32 bits of XXH64: defined in checksum.c beside XXH64 itself, so that
 * this header only declares (every module includes it; checksum.c includes it too). */
uint32_t pcr_sum32(const void *data, size_t len);
/* Append the sums of @len bytes at @data to @out (4 * pcr_sum_blocks(len) bytes).
 * @return bytes written. */
size_t pcr_sums_put(const uint8_t *data, size_t len, uint8_t *out);

/* LEB128 varints, as packed in the index's BLOB columns. */
size_t pcr_varint_put(uint8_t *out, uint64_t v); /* writes at most 10 bytes */
/* @return bytes consumed, or 0 if the varint is truncated or longer than 64 bits. */
size_t pcr_varint_get(const uint8_t *p, size_t len, uint64_t *v);

#endif
