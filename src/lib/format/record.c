/* pcrfs — record header encoding and name rules (see record.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "format/record.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void pcr_record_hdr_encode(const struct pcr_record_hdr *h, uint8_t out[PCR_RECORD_HDR])
{
    memcpy(out, PCR_RECORD_MAGIC, 8);
    put32(out + 8, h->version);
    put32(out + 12, h->ngroups);
    put64(out + 16, h->nimages);
    put64(out + 24, h->size);
}

int pcr_record_hdr_decode(const uint8_t in[PCR_RECORD_HDR], struct pcr_record_hdr *h)
{
    if (memcmp(in, PCR_RECORD_MAGIC, 8) != 0)
        return -EINVAL;
    h->version = (uint32_t)get(in + 8, 4);
    h->ngroups = (uint32_t)get(in + 12, 4);
    h->nimages = get(in + 16, 8);
    h->size = get(in + 24, 8);
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
