/* pcrfs — whole-file reading, with gzip support, for the token importers (NPY files,
 * SeiT's release files): pcr_tok_read_file() in tokens/tokens_internal.h.
 *
 * Gzip. SeiT publishes data.bin.gz and index.npy.gz. We link zlib (Debian's
 * zlib1g-dev) for them: it is the reference gzip implementation, maintained for three
 * decades, fuzzed continuously (OSS-Fuzz), and already on every system that has
 * libpng, OpenSSL or Python. The alternatives were worse: writing an inflater means
 * a new parser of untrusted input to get right; running `gzip -dc` means a child
 * process, its error reporting and a second copy of the data in a pipe; libdeflate
 * has no -dev package installed here and no streaming API. zlib stays optional (the
 * build defines PCR_HAVE_ZLIB when it finds it): without it a .gz input fails with a
 * message saying to gunzip it first.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef PCR_HAVE_ZLIB
#include <zlib.h>
#endif
#include "common/internal.h"
#include "tokens/tokens_internal.h"

#define READ_CHUNK (1u << 20)

static int read_full(int fd, uint8_t *buf, size_t len, size_t *got)
{
    size_t o = 0;

    *got = 0;
    while (o < len) {
        ssize_t r = read(fd, buf + o, len - o);
        if (r < 0) {
            int e = errno; /* read once: each read of errno is a call */
            if (e == EINTR)
                continue;
            return e > 0 ? -e : -EIO; /* never 0: *got is unset */
        }
        if (r == 0)
            break;
        o += (size_t)r;
    }
    *got = o;
    return 0;
}

#ifdef PCR_HAVE_ZLIB
/* Inflate every gzip member of @fd (positioned at 0) into a growing buffer. */
static int gunzip_fd(int fd, const char *path, size_t hint, size_t max, uint8_t **buf, size_t *len,
                     char *err, size_t errlen)
{
    z_stream zs;
    uint8_t *in = malloc(READ_CHUNK), *out = NULL;
    size_t cap, got;
    unsigned members = 0; /* complete members; zs.total_in restarts at each */
    bool eof = false;
    int rc = 0, zr;

    memset(&zs, 0, sizeof(zs));
    cap = hint < (1u << 16) ? (1u << 16) : hint;
    cap = cap > max ? max : cap;
    out = malloc(cap ? cap : 1);
    if (!in || !out || inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
        free(in);
        free(out);
        return -ENOMEM;
    }
    zs.next_out = out;
    zs.avail_out = (uInt)(cap > UINT32_MAX ? UINT32_MAX : cap);
    for (;;) {
        if (zs.avail_in == 0 && !eof) {
            rc = read_full(fd, in, READ_CHUNK, &got);
            if (rc) {
                pcr_errf(err, errlen, "%s: read: %s", path, strerror(-rc));
                goto out;
            }
            eof = got < READ_CHUNK;
            zs.next_in = in;
            zs.avail_in = (uInt)got;
        }
        if (zs.avail_in == 0 && eof) {
            if (members == 0 || zs.total_in != 0) {
                pcr_errf(err, errlen, "%s: truncated gzip data", path);
                rc = -EINVAL;
            }
            goto out;
        }
        if (zs.avail_out == 0) {
            size_t used = (size_t)(zs.next_out - out), ncap;
            uint8_t *p;
            if (used == cap) {
                if (cap >= max) {
                    pcr_errf(err, errlen, "%s: decompresses to more than %zu bytes", path, max);
                    rc = -EFBIG;
                    goto out;
                }
                ncap = cap > max / 2 ? max : cap * 2;
                p = realloc(out, ncap);
                if (!p) {
                    rc = -ENOMEM;
                    goto out;
                }
                out = p;
                cap = ncap;
            }
            /* avail_out is 32-bit: more than 4 GiB of room is handed out in pieces. */
            zs.next_out = out + used;
            zs.avail_out = (uInt)(cap - used > UINT32_MAX ? UINT32_MAX : cap - used);
        }
        zr = inflate(&zs, Z_NO_FLUSH);
        if (zr == Z_STREAM_END) {
            /* Concatenated members are one gzip file (RFC 1952 §2.2). */
            members++;
            inflateReset(&zs);
        } else if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT) {
            if (members > 0 && zs.total_in < 10) /* not even a gzip header */
                pcr_errf(err, errlen, "%s: trailing bytes after the last gzip member", path);
            else
                pcr_errf(err, errlen, "%s: corrupt gzip data (%s)", path,
                         zs.msg ? zs.msg : "data error");
            rc = -EINVAL;
            goto out;
        } else if (zr == Z_MEM_ERROR) {
            rc = -ENOMEM;
            goto out;
        }
        /* Z_OK, Z_BUF_ERROR: more input or more output space next round. */
    }
out:
    *len = (size_t)(zs.next_out - out);
    inflateEnd(&zs);
    free(in);
    if (rc) {
        free(out);
        return rc;
    }
    *buf = out;
    return 0;
}
#endif

int pcr_tok_read_file(const char *path, bool gunzip, size_t max, uint8_t **buf, size_t *len,
                      char *err, size_t errlen)
{
    struct stat st;
    uint8_t magic[2];
    size_t got, size;
    int fd, rc;

    *buf = NULL;
    *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        pcr_errf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -EINVAL;
    }
    if (gunzip && pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
#ifdef PCR_HAVE_ZLIB
        rc = gunzip_fd(fd, path, (size_t)st.st_size * 4, max, buf, len, err, errlen);
#else
        pcr_errf(err, errlen,
                 "%s: gzip input but pcrfs was built without zlib; gunzip it "
                 "first",
                 path);
        rc = -ENOTSUP;
#endif
        close(fd);
        return rc;
    }
    if ((uint64_t)st.st_size > max) {
        pcr_errf(err, errlen, "%s: larger than %zu bytes", path, max);
        close(fd);
        return -EFBIG;
    }
    size = (size_t)st.st_size;
    *buf = malloc(size ? size : 1);
    if (!*buf) {
        close(fd);
        return -ENOMEM;
    }
    rc = read_full(fd, *buf, size, &got);
    close(fd);
    if (rc == 0 && got != size)
        rc = -EIO; /* the file shrank while we read it */
    if (rc) {
        pcr_errf(err, errlen, "%s: read: %s", path, strerror(-rc));
        free(*buf);
        *buf = NULL;
        return rc;
    }
    *len = size;
    return 0;
}
