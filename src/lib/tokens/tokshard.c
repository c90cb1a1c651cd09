/* pcrfs — token shards: many small token blobs in one file (see pcrfs/tokens.h).
 *
 * A grid encodes to about a kilobyte, so one file per image would spend more on
 * inodes and directory entries than on data; a shard holds thousands of blobs and
 * the index locates each one by (shard, offset, length): O(1) access, one pread.
 * The header pairs the shard with the model that encoded it, so a shard copied from
 * another store fails its check (src/lib/store/read.c, with pcr_tokshard_hdr_decode:
 * the one reader of shards is the store's) instead of decoding to garbage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/tokens.h"
#include "common/internal.h"
#include "common/le.h"

#define SHARD_MAGIC "PCRTOKS\n"
#define WBUF        (1u << 20)

struct pcr_tokshard_writer {
    int fd;
    char *path;
    uint64_t model_id;
    uint64_t size; /* bytes written so far, header included */
    uint32_t count;
    uint8_t *buf; /* write buffer: blobs are ~1 kB, write(2) per blob is wasteful */
    size_t nbuf;
};

void pcr_tokshard_hdr_encode(const struct pcr_tokshard_hdr *h, uint8_t out[PCR_TOKSHARD_HEADER])
{
    memcpy(out, SHARD_MAGIC, 8);
    pcr_put_le32(out + 8, h->version);
    pcr_put_le32(out + 12, h->count);
    pcr_put_le64(out + 16, h->model_id);
    pcr_put_le64(out + 24, h->blob_bytes);
}

int pcr_tokshard_hdr_decode(const uint8_t hdr[PCR_TOKSHARD_HEADER], struct pcr_tokshard_hdr *out)
{
    memset(out, 0, sizeof(*out));
    if (memcmp(hdr, SHARD_MAGIC, 8) != 0)
        return -EINVAL;
    out->version = pcr_get_le32(hdr + 8);
    out->count = pcr_get_le32(hdr + 12);
    out->model_id = pcr_get_le64(hdr + 16);
    out->blob_bytes = pcr_get_le64(hdr + 24);
    return out->version == PCR_TOKSHARD_VERSION ? 0 : -ENOTSUP;
}

static int write_all(int fd, const uint8_t *p, size_t len, off_t off)
{
    while (len) {
        ssize_t r = pwrite(fd, p, len, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += r;
        len -= (size_t)r;
        off += r;
    }
    return 0;
}

static int flush(struct pcr_tokshard_writer *w)
{
    int rc = write_all(w->fd, w->buf, w->nbuf, (off_t)(w->size - w->nbuf));

    if (rc == 0)
        w->nbuf = 0;
    return rc;
}

static void writer_free(struct pcr_tokshard_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    free(w->buf);
    free(w->path);
    free(w);
}

int pcr_tokshard_create(const char *path, uint64_t model_id, struct pcr_tokshard_writer **out,
                        char *err, size_t errlen)
{
    struct pcr_tokshard_writer *w;
    int rc;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->fd = -1;
    w->path = strdup(path);
    w->buf = malloc(WBUF);
    if (!w->path || !w->buf) {
        writer_free(w);
        return -ENOMEM;
    }
    w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = -errno;
        pcr_errf(err, errlen, "%s: %s", path, strerror(errno));
        writer_free(w);
        return rc;
    }
    w->model_id = model_id;
    /* The header is written at finish; reserve its place. */
    memset(w->buf, 0, PCR_TOKSHARD_HEADER);
    w->nbuf = PCR_TOKSHARD_HEADER;
    w->size = PCR_TOKSHARD_HEADER;
    *out = w;
    return 0;
}

int pcr_tokshard_add(struct pcr_tokshard_writer *w, const void *blob, size_t len, uint64_t *offset)
{
    int rc;

    if (len == 0 || len > UINT32_MAX)
        return -EINVAL;
    if (w->count == UINT32_MAX)
        return -EFBIG;
    *offset = w->size;
    if (w->nbuf + len > WBUF) {
        rc = flush(w);
        if (rc)
            return rc;
    }
    if (len > WBUF) {
        rc = write_all(w->fd, blob, len, (off_t)w->size);
        if (rc)
            return rc;
    } else {
        memcpy(w->buf + w->nbuf, blob, len);
        w->nbuf += len;
    }
    w->size += len;
    w->count++;
    return 0;
}

int pcr_tokshard_finish(struct pcr_tokshard_writer *w, char *err, size_t errlen)
{
    struct pcr_tokshard_hdr hd = {
        .version = PCR_TOKSHARD_VERSION,
        .count = w->count,
        .model_id = w->model_id,
        .blob_bytes = w->size - PCR_TOKSHARD_HEADER,
    };
    uint8_t h[PCR_TOKSHARD_HEADER];
    int rc;

    pcr_tokshard_hdr_encode(&hd, h);
    rc = flush(w);
    if (rc == 0)
        rc = write_all(w->fd, h, sizeof(h), 0);
    if (rc == 0 && fsync(w->fd) != 0)
        rc = -errno;
    if (rc == 0) {
        if (close(w->fd) != 0)
            rc = -errno;
        w->fd = -1;
    }
    if (rc) {
        pcr_errf(err, errlen, "%s: %s", w->path, strerror(-rc));
        unlink(w->path);
    }
    writer_free(w);
    return rc;
}

void pcr_tokshard_abort(struct pcr_tokshard_writer *w)
{
    if (!w)
        return;
    unlink(w->path);
    writer_free(w);
}
