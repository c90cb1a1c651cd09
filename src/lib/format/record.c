/* pcrfs — record header encoding and name rules (see record.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "common/le.h"
#include "format/record.h"

void pcr_record_hdr_encode(const struct pcr_record_hdr *h, uint8_t out[PCR_RECORD_HDR])
{
    memcpy(out, PCR_RECORD_MAGIC, 8);
    pcr_put_le32(out + 8, h->version);
    pcr_put_le32(out + 12, h->ngroups);
    pcr_put_le64(out + 16, h->nimages);
    pcr_put_le64(out + 24, h->size);
}

int pcr_record_hdr_decode(const uint8_t in[PCR_RECORD_HDR], struct pcr_record_hdr *h)
{
    if (memcmp(in, PCR_RECORD_MAGIC, 8) != 0)
        return -EINVAL;
    h->version = pcr_get_le32(in + 8);
    h->ngroups = pcr_get_le32(in + 12);
    h->nimages = pcr_get_le64(in + 16);
    h->size = pcr_get_le64(in + 24);
    return 0;
}

void pcr_record_name(uint64_t id, char out[32])
{
    snprintf(out, 32, "%06llu.pcr", (unsigned long long)id);
}

int pcr_record_name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > 64 || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}
