/* libFuzzer target: pcr_scripts_parse() (the jpegtran -scans parser) over arbitrary
 * bytes.
 *
 * Besides "no crash, no out-of-bounds read" (ASan), checks the contract on success:
 * 1..PCR_MAX_SCANS scans; L equals the scans as written; every class script is
 * either libjpeg's default (0 scans) or valid and complete for its component count;
 * and the written script survives pcr_script_format() and a second parse unchanged.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/jpeg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned nc[PCR_CLASS_COUNT] = {1, 3, 3, 4};
    struct pcr_scripts s, again;
    char why[256], text[PCR_MAX_SCANS * 40];
    unsigned written = PCR_CLASS_COUNT;
    int rc = pcr_scripts_parse((const char *)data, size, "fuzz", &s, why, sizeof(why));

    if (rc != 0) {
        if (rc != -EINVAL || !why[0])
            abort();
        return 0;
    }
    if (s.levels < 1 || s.levels > PCR_MAX_SCANS)
        abort();
    for (unsigned c = 0; c < PCR_CLASS_COUNT; c++) {
        if (s.by_class[c].nscans == 0)
            continue;
        if (s.by_class[c].nscans > PCR_MAX_SCANS ||
            pcr_script_validate(&s.by_class[c], nc[c], NULL, 0) != 0)
            abort();
        if (s.by_class[c].nscans == s.levels && written == PCR_CLASS_COUNT)
            written = c;
    }
    if (written == PCR_CLASS_COUNT)
        abort(); /* the script as written is in some class */
    if (pcr_script_format(&s.by_class[written], text, sizeof(text)) >= sizeof(text))
        abort();
    if (pcr_scripts_parse(text, strlen(text), "fuzz", &again, why, sizeof(why)) != 0 ||
        memcmp(&again.by_class[written], &s.by_class[written], sizeof(struct pcr_script)) != 0)
        abort();
    return 0;
}
