/* pcrfs — writing a store.
 *
 * The writer builds into a temporary directory beside the target
 * (".NAME.tmp.PID") and renames it into place in pcr_writer_finish(), so an
 * interrupted build never leaves a half-written store under the target's name.
 * The caller decides the layout: it numbers directories and files (see below),
 * transcodes, and hands over one record at a time. The same calls in the same
 * order give the same bytes (timestamps aside).
 *
 * Numbering (checked: a violation is -EINVAL):
 *   directories 1..D in breadth-first order, root = 1, the children of each
 *   directory contiguous and sorted by name (byte order);
 *   files 1..N grouped by directory in directory order, sorted by name within one;
 *   so dir d holds files [first_file, first_file + nfiles) and subdirectories
 *   [first_child, first_child + nsubdirs).
 * Records are filled with files in id order.
 */
#ifndef PCRFS_WRITER_H
#define PCRFS_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "pcrfs/jpeg.h"
#include "pcrfs/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pcr_writer;

struct pcr_writer_opts {
    unsigned levels;    /* L (10 for libjpeg's default script) */
    const char *script; /* scan script name recorded in the store ("libjpeg-default") */
    bool force;         /* replace an existing store at the target */
    int64_t created;    /* meta "created" (the mtime a mount serves), seconds since
                         * the epoch; 0: now */
    /* A part of a planned build (mkpcrfs --plan --part): files are numbered from
     * part_first_file + 1 and records from part_first_record + 1, the part holds
     * part_files files, and finish checks that count instead of the whole tree's
     * and leaves the store check to the merge (pcr_writer_add_part()), since a part
     * alone is not a store. */
    bool part;
    uint64_t part_first_file, part_first_record, part_files;
};

/* Start a store at @path. @path must not exist, unless opts->force and it is a
 * pcrfs store (a directory holding index.db): then it is replaced at finish. With
 * force, a symbolic link to a store has the store it points to replaced (built
 * beside it, swapped in atomically); the link itself is kept. A dangling link is
 * never replaced.
 * The temporary directory holds a marker file (".pcrfs-build": PID, boot id,
 * process start time) until finish. A ".NAME.tmp.PID" beside the target is
 * removed only when it is a directory owned by the caller's effective uid, holds
 * such a marker naming the same PID, and that build is gone (its PID ended, or
 * belongs to an earlier boot or to a process started at another time); anything
 * else there is left alone.
 * @return 0; -EEXIST (exists, no force); -ENOTDIR/-EINVAL (exists and is not a
 *         store: never replaced); -errno of mkdir/open; message in @err. */
int pcr_writer_create(const char *path, const struct pcr_writer_opts *opts, struct pcr_writer **out,
                      char *err, size_t errlen);

struct pcr_dir_row {
    uint64_t id, parent; /* the root has parent 1 */
    const char *name;    /* "" for the root; no '/', never "." or ".." */
    uint64_t first_child, nsubdirs;
    uint64_t first_file, nfiles;
};
int pcr_writer_add_dir(struct pcr_writer *w, const struct pcr_dir_row *row);

#define PCR_WRITER_PIECE (1u << 20)

/* One file of a record. */
struct pcr_item {
    uint64_t id, dir;
    const char *name;
    enum pcr_kind kind;
    const uint8_t *data; /* JPEG: the progressive file, EOI included,
                          * then the trailer; VERBATIM: the source bytes */
    size_t len;
    /* VERBATIM with data NULL: the writer fetches the len bytes itself, in pieces of
     * at most PCR_WRITER_PIECE bytes in increasing @off, so that a file of any size
     * takes bounded memory. @read fills @buf with exactly @n bytes at @off and
     * returns 0, or a negative errno that fails the record (its message, if any,
     * is the caller's to give). */
    int (*read)(void *arg, uint64_t off, uint8_t *buf, size_t n);
    void *read_arg;
    const struct pcr_split *split; /* JPEG only: pcr_jpeg_split() of the progressive
                                    * file (data without the trailer) */
    size_t trailer;                /* JPEG only: the last @trailer bytes of data are
                                    * the source's bytes after its EOI
                                    * (pcr_jpeg_info.trailer), stored as the file's
                                    * last chunk and served at the top level only;
                                    * 0 for none */
    struct pcr_jpeg_info info;     /* JPEG only */
    uint64_t src_size;
    const char *note;      /* VERBATIM: why (NULL for none) */
    const double *quality; /* JPEG only: the MS-SSIM of levels 1..L-1 against
                            * level L (L-1 values in [0, 1], e.g. from
                            * pcr_quality_measure()), stored quantised
                            * (pcrfs/store.h, pcr_file_quality()); NULL: none */
};

/* Write one record holding @items (1..n, ids continuing where the last ended):
 * a header, then scan group g = chunk g of every item, in item order (an item's
 * trailer is its chunk nscans, in group nscans). The index row's checksum is of
 * data[0, len): what the top level serves.
 * @return 0; -EINVAL (numbering); -ENOSPC/-EIO/... from write(2), message in the
 *         writer's error (pcr_writer_error()). */
int pcr_writer_add_record(struct pcr_writer *w, const struct pcr_item *items, unsigned n);

/* The per-level fidelity of one transcoded JPEG, for pcr_item.quality: the luma
 * MS-SSIM (pcrfs/fidelity.h) of level K -- chunks 0..min(K, nscans)-1 of @split
 * followed by FF D9, as the store serves it -- against the whole image, for
 * K = 1..@levels-1, into ssim[0..levels-2]. Levels at or past the image's scan count
 * serve every scan and get exactly 1 without a decode.
 * @data/@len: the progressive file, EOI included, without any trailer.
 * Memory: about 25 bytes per pixel while it runs; images over
 * PCR_QUALITY_MAX_PIXELS are refused. Thread-safe.
 * @return 0; -E2BIG over PCR_QUALITY_MAX_PIXELS; -EINVAL a level does not decode
 *         (reason in @why); -ENOMEM. */
#define PCR_QUALITY_MAX_PIXELS (48u << 20)
int pcr_quality_measure(const uint8_t *data, size_t len, const struct pcr_split *split,
                        const struct pcr_jpeg_info *info, unsigned levels, double *ssim, char *why,
                        size_t whylen);

int pcr_writer_set_meta(struct pcr_writer *w, const char *key, const char *value);
/* A named blob in the index ("codebook": the NPY file served as
 * /.pcrfs/codebook.npy). */
int pcr_writer_set_blob(struct pcr_writer *w, const char *key, const void *data, size_t len);

/* Tokens (a second tree, numbered like the image tree: pcr_writer_add_tok_dir
 * rows 1..D, token files 1..N in directory order, sorted by name). The model, trained
 * by the caller over every grid, must be set before the first shard and outlive
 * the writer's use of it. A tokens-only store still has an image tree: its root. */
struct pcr_tok_model;
struct pcr_tok_item {
    uint64_t id, dir;
    const char *name;
    const uint16_t *grid; /* h*w token values, row-major, as imported */
    unsigned h, w;
};
int pcr_writer_set_tok_model(struct pcr_writer *w, const struct pcr_tok_model *m);
int pcr_writer_add_tok_dir(struct pcr_writer *w, const struct pcr_dir_row *row);
/* Encode @items with the model into one shard (tokens/NNNNNN.tks) and index them.
 * @return 0; -EINVAL numbering/shape/no model; -errno of writing (pcr_writer_error). */
int pcr_writer_add_tok_shard(struct pcr_writer *w, const struct pcr_tok_item *items, unsigned n);

/* The last error message, "" if none. */
const char *pcr_writer_error(const struct pcr_writer *w);

/* Check the numbering is complete, commit the index, fsync, rename into place.
 * Frees @w in every case; on failure nothing is left behind.
 * @return 0 or a negative errno (message in @err). */
int pcr_writer_finish(struct pcr_writer *w, char *err, size_t errlen);

/* Remove everything this writer created and free it. Safe from any point. */
void pcr_writer_abort(struct pcr_writer *w);

/* A part written by a part writer (pcr_writer_opts.part), as its meta keys say
 * ("part.plan", "part.index", "part.count", "part.first_file", "part.files",
 * "part.first_record", "part.records"; the caller sets them with
 * pcr_writer_set_meta()) and "levels". */
struct pcr_part_info {
    char plan[64];                  /* the plan's identity */
    uint64_t index, count;          /* part index of count, 1 <= index <= count */
    uint64_t first_file, files;     /* its files: ids first_file + 1 .. + files */
    uint64_t first_record, records; /* its records, likewise */
    unsigned levels;
};
/* Part @index of @count of a build of @nfiles files in records of @per_record:
 * records [R(index-1)/count, R*index/count) of the R = ceil(nfiles/per_record)
 * (contiguous, sizes differing by one at most; empty when count > R) and their
 * files, into @out (plan and levels untouched). */
void pcr_part_range(uint64_t nfiles, uint64_t per_record, uint64_t index, uint64_t count,
                    struct pcr_part_info *out);
/* Read the part at @dir. @return 0; -ENOENT not a part (no index.db or no part
 * keys); -EINVAL a key missing or malformed; message in @err. */
int pcr_part_read_info(const char *dir, struct pcr_part_info *info, char *err, size_t errlen);

/* Merge: add part @dir to @w, a writer of a whole store; parts come in order, the
 * first one first (@first: its meta keys, blobs, directory rows and token tree are
 * taken, the part keys excepted). Record files are hard-linked when @dir and the
 * store share a file system, copied otherwise; each must be a regular file of the
 * size its index row says, named as its id says, numbered where the last part
 * ended. Index rows are copied as they are, in the writer's one transaction.
 * @return 0 or a negative errno, message in @err. */
int pcr_writer_add_part(struct pcr_writer *w, const char *dir, bool first, char *err,
                        size_t errlen);

/* The temporary directory being written (to remove it from a signal path). */
const char *pcr_writer_tmpdir(const struct pcr_writer *w);

#ifdef __cplusplus
}
#endif
#endif
