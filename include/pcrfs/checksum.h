/* pcrfs — XXH64, the checksum of every file's full bytes in a store (pcrfs(5)).
 *
 * Public so that tools verify what the index records with the library's own code
 * (pcrinfo --verify). Implemented from the published xxHash specification, seed 0;
 * the result equals xxhash's XXH64(data, len, 0).
 */
#ifndef PCRFS_CHECKSUM_H
#define PCRFS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Streaming state, for data that comes in pieces: init, update any number of times,
 * final (which does not change the state). */
struct pcr_xxh64 {
    uint64_t v[4];
    uint64_t total;
    uint8_t buf[32];
    unsigned nbuf;
};
void pcr_xxh64_init(struct pcr_xxh64 *st);
void pcr_xxh64_update(struct pcr_xxh64 *st, const void *data, size_t len);
uint64_t pcr_xxh64_final(const struct pcr_xxh64 *st);

/* XXH64 of @len bytes at @data in one call. */
uint64_t pcr_xxh64(const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
