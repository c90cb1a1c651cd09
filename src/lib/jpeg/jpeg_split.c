/* pcrfs — the JPEG scan splitter (see pcrfs/jpeg.h).
 *
 * The chunking rule, and why it is cut where it is
 * -----------------------------------------------
 * A progressive JPEG is SOI, a header (APPn, COM, DQT, SOF, DHT, DRI), then scans,
 * each an SOS segment followed by entropy-coded data, with table segments (DHT, DRI,
 * COM, ...) between scans, and finally EOI. PCR stores scan i of every image of a
 * record together, so a reader that wants fidelity K reads one prefix of the record.
 * We cut every image where its entropy-coded data ends:
 *
 *   chunk 0  = SOI .. end of scan 1's data          (header travels with scan 1)
 *   chunk i  = byte after scan i's data .. end of scan i+1's data
 *   (EOI)    = FF D9, in no chunk; appended when a level is served
 *
 * Cutting at the end of entropy data (rather than before each SOS) puts the tables a
 * scan needs (the optimized DHT that libjpeg writes before each progressive Huffman
 * scan) in the same chunk as that scan, so chunks 0..K-1 + FF D9 is always a complete
 * JPEG whose K scans each have their tables: no chunk depends on a later one.
 *
 * Entropy-coded data ends at the first 0xFF not followed by 0x00 (a stuffed zero)
 * or 0xD0..0xD7 (RSTn, which live inside the data when a restart interval is set).
 * An 0xFF followed by 0xFF is a fill byte in front of a marker, so the whole run of
 * fill bytes, like the marker itself, starts the next chunk.
 *
 * We insist on EOI right after the last scan's data and nothing after it, so that
 * chunk 0 || ... || chunk n-1 || FF D9 reproduces the buffer exactly; that holds for
 * everything pcr_jpeg_transcode() writes, and anything else is stored verbatim.
 *
 * Every read is bounds-checked against @len: the input is untrusted and fuzzed
 * (tests/fuzz/fuzz_split.c).
 */
#include <errno.h>
#include <string.h>
#include "pcrfs/jpeg.h"

/* Marker codes (the byte after 0xFF) that the splitter needs to tell apart. */
enum {
    M_TEM = 0x01,
    M_SOF0 = 0xC0,
    M_DHT = 0xC4,
    M_JPG = 0xC8,
    M_DAC = 0xCC,
    M_SOF15 = 0xCF,
    M_RST0 = 0xD0,
    M_RST7 = 0xD7,
    M_SOI = 0xD8,
    M_EOI = 0xD9,
    M_SOS = 0xDA,
};

static int is_sof(unsigned m)
{
    return m >= M_SOF0 && m <= M_SOF15 && m != M_DHT && m != M_JPG && m != M_DAC;
}

/* Offset of the 0xFF that ends the entropy-coded data starting at @p, or @len if the
 * data runs to the end of the buffer (no marker follows: the file is truncated). */
static size_t entropy_end(const uint8_t *buf, size_t len, size_t p)
{
    while (p < len) {
        const uint8_t *ff = memchr(buf + p, 0xFF, len - p);
        if (!ff)
            return len;
        p = (size_t)(ff - buf);
        if (p + 1 >= len)
            return len; /* a lone 0xFF as the last byte: no marker can follow */
        uint8_t next = buf[p + 1];
        if (next == 0x00 || (next >= M_RST0 && next <= M_RST7)) {
            p += 2;
            continue;
        }
        return p;
    }
    return len;
}

int pcr_jpeg_split(const uint8_t *buf, size_t len, struct pcr_split *out)
{
    size_t pos = 2;      /* next byte to parse, always outside entropy data */
    size_t last_end = 0; /* end of the latest scan's entropy data */
    unsigned nscans = 0; /* scans seen, also past PCR_MAX_CHUNKS */
    unsigned nsof = 0;

    out->nchunks = 0;
    if (!buf || len < 4 || buf[0] != 0xFF || buf[1] != M_SOI)
        return -EINVAL;

    while (pos < len) {
        size_t mstart = pos; /* first 0xFF of this marker, fill bytes included */

        if (buf[pos] != 0xFF)
            return -EINVAL; /* garbage between segments */
        while (pos + 1 < len && buf[pos + 1] == 0xFF)
            pos++; /* fill bytes */
        if (pos + 1 >= len)
            return -EINVAL;
        unsigned m = buf[pos + 1];
        pos += 2; /* now just past the marker code */

        if (m == M_EOI) {
            /* EOI must follow the last scan's data directly (no fill bytes, no
             * segment in between) and end the buffer, or the chunks would not
             * reproduce it. */
            if (nscans == 0 || mstart != last_end || pos - mstart != 2 || pos != len)
                return -EINVAL;
            if (nscans > PCR_MAX_CHUNKS) {
                out->nchunks = 0;
                return -E2BIG;
            }
            out->nchunks = nscans;
            return 0;
        }
        if (m == 0x00 || m == M_SOI)
            return -EINVAL; /* a stuffed zero or a second SOI outside a scan */
        if (m == M_TEM || (m >= M_RST0 && m <= M_RST7))
            continue; /* standalone markers: no length, travel with the next chunk */

        /* Every other marker starts a segment with a 16-bit length that counts
         * itself but not the marker. */
        if (len - pos < 2)
            return -EINVAL;
        size_t seglen = ((size_t)buf[pos] << 8) | buf[pos + 1];
        if (seglen < 2 || seglen > len - pos)
            return -EINVAL;

        if (is_sof(m)) {
            /* P, Y, X, Nf, then 3 bytes per component. One frame per image: a
             * hierarchical file (several frames) is not something we split. */
            if (seglen < 8 || seglen != 8 + 3 * (size_t)buf[pos + 7] || nscans > 0 || ++nsof > 1)
                return -EINVAL;
        } else if (m == M_SOS) {
            /* Ns (1..4), 2 bytes per component, Ss, Se, Ah/Al. */
            if (nsof == 0 || seglen < 3)
                return -EINVAL;
            unsigned ns = buf[pos + 2];
            if (ns < 1 || ns > 4 || seglen != 6 + 2 * (size_t)ns)
                return -EINVAL;
            size_t end = entropy_end(buf, len, pos + seglen);
            if (end >= len)
                return -EINVAL; /* data runs off the end: truncated */
            if (nscans < PCR_MAX_CHUNKS)
                out->end[nscans] = end;
            if (nscans <= PCR_MAX_CHUNKS)
                nscans++; /* saturates at "too many" */
            last_end = end;
            pos = end;
            continue;
        }
        pos += seglen;
    }
    out->nchunks = 0;
    return -EINVAL; /* no EOI */
}
