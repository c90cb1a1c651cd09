/* pcrfs — record files (records/NNNNNN.pcr).
 *
 * A record holds the files of one build batch laid out as scan groups:
 *
 *   header (32 bytes, little-endian)
 *     0  magic "PCRFSREC"
 *     8  u32 version (1)
 *    12  u32 ngroups
 *    16  u64 nimages
 *    24  u64 total file size (header included)
 *   group 0: chunk 0 of every file in slot order (a verbatim file's whole bytes)
 *   group 1: chunk 1 of every file that has one
 *   ...
 *
 * Reading a record at level K is therefore one sequential prefix [0, end of group K)
 * — the PCR property. The offsets of the groups and of each file's chunk inside its
 * group live in the index, not here: the header only lets a reader check that the
 * file is the record the index describes.
 */
#ifndef PCRFS_RECORD_H
#define PCRFS_RECORD_H

#include <stdint.h>

#define PCR_RECORD_MAGIC   "PCRFSREC"
#define PCR_RECORD_VERSION 1
#define PCR_RECORD_HDR     32

struct pcr_record_hdr {
    uint32_t version, ngroups;
    uint64_t nimages, size;
};

void pcr_record_hdr_encode(const struct pcr_record_hdr *h, uint8_t out[PCR_RECORD_HDR]);
/* @return 0, or -EINVAL if @in does not start with the magic. */
int pcr_record_hdr_decode(const uint8_t in[PCR_RECORD_HDR], struct pcr_record_hdr *h);

/* "000042.pcr" for record 42 (the names the writer gives). */
void pcr_record_name(uint64_t id, char out[32]);
/* A record name from the index is acceptable: [A-Za-z0-9._-]{1,64}, not starting
 * with '.', so it cannot leave records/. */
int pcr_record_name_ok(const char *name);

#endif
