/* pcrfs — the read path: (file, level, offset, length) -> a plan of segments ->
 * one backend call -> checked bytes.
 *
 * A file at a level is a list of segments (the plan): for a JPEG, chunks 0..m-1 of
 * its record (chunk 0 carries the header markers and scan 1), then the EOI marker,
 * then at the top level the bytes that followed the source's EOI (the trailer
 * chunk); a verbatim file is its one chunk; a token file is rendered in memory.
 * Every reader goes through read_plan(): the handles of pcr_handle_open(), the
 * open-less pcr_store_pread() of the FUSE driver, and the tools.
 *
 * Checksums. Each chunk is cut into PCR_SUM_BLOCK-byte blocks with a checksum each
 * (pcrfs(5)). read_plan() widens every chunk range it reads to whole blocks, reads
 * all of them in one backend call, verifies every block and only then copies out
 * what was asked: a flipped byte fails the reads that touch its block with EIO (the
 * file is logged once), never reaches a reader, and costs at most a block on each
 * side of a request. Warm reads are served by the kernel's page cache and never get
 * here, so the check costs once per page-cache fill.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pcrfs/tokens.h"
#include "common/le.h"
#include "format/record.h"
#include "store/state.h"

enum seg_type {
    SEG_CHUNK, /* bytes of the record */
    SEG_EOI,   /* FF D9 */
};

struct seg {
    uint64_t off; /* SEG_CHUNK: absolute offset in the record */
    uint64_t len;
    uint32_t sum;  /* SEG_CHUNK: index in f->sums of the chunk's first block */
    uint32_t type; /* enum seg_type */
};

#define MAX_SEGS (PCR_MAX_CHUNKS + 2)

struct plan {
    uint64_t size;
    uint64_t prefix;   /* the record prefix a sequential reader at this level reads */
    unsigned n, level; /* level clamped to 1..L, for the counters */
    struct seg seg[MAX_SEGS];
};

struct pcr_handle {
    struct pcr_store *s;
    const struct pcr_file *f;
    struct rec *r;
    uint8_t *mem; /* a file rendered in memory (token files), or NULL */
    uint64_t size;
    unsigned level, nseg;
    struct seg seg[];
};

static const uint8_t eoi[2] = {0xFF, 0xD9};

static struct pcr_backend *backend(const struct pcr_store *s)
{
    const struct pcr_store *root = s->parent ? s->parent : s;
    return __atomic_load_n(&root->be, __ATOMIC_ACQUIRE);
}

/* ---- chunk arithmetic ---- */

/* The trailer chunk, if any, is not a scan. */
static unsigned scans_of(const struct pcr_file *f)
{
    return (unsigned)f->nchunks - f->trailer;
}

/* Scan chunks served at @level: all at the top level, else min(level, nscans). */
static unsigned chunks_at(const struct pcr_file *f, unsigned level)
{
    unsigned nscans = scans_of(f);

    if (level < 1)
        level = 1;
    if (level >= f->levels || level >= nscans)
        return nscans;
    return level;
}

/* The trailer (bytes after the source's EOI) is served at the top level only
 * (pcrfs(5), TRAILERS); below it an image ends at FF D9, also when every scan is
 * served. */
static bool trailer_at(const struct pcr_file *f, unsigned level)
{
    return f->trailer && level >= f->levels;
}

/* The record prefix a reader of the record at @level reads: groups 0..m-1 (all of
 * them at the top level: trailers and the scans of images with more scans than L
 * lie beyond group L). */
static uint64_t prefix_of(const struct pcr_file *f, const struct rec *r, unsigned level)
{
    unsigned m = chunks_at(f, level);

    return r->goff[level >= f->levels || m >= r->ngroups ? r->ngroups : m];
}

static unsigned clamp_level(const struct pcr_store *s, unsigned level)
{
    return level < 1 ? 1 : level > s->levels ? s->levels : level;
}

/* The plan of @f at @level (for JPEG and verbatim files; token files are rendered). */
static void plan_make(const struct pcr_store *s, const struct pcr_file *f, const struct rec *r,
                      unsigned level, struct plan *p)
{
    struct chunk_iter it = chunk_iter(f);
    unsigned m = chunks_at(f, level);
    bool with_trailer = trailer_at(f, level);
    uint64_t off, len;
    uint32_t sum = 0;

    p->n = 0;
    p->size = 0;
    p->level = clamp_level(s, level);
    p->prefix = prefix_of(f, r, level);
    for (unsigned i = 0; i < f->nchunks; i++) {
        chunk_next(&it, &off, &len);
        if (i == m && f->kind == PCR_KIND_JPEG) {
            p->seg[p->n++] = (struct seg){.len = 2, .type = SEG_EOI};
            p->size += 2;
            if (!with_trailer)
                break;
        }
        p->seg[p->n++] =
            (struct seg){.off = r->goff[i] + off, .len = len, .sum = sum, .type = SEG_CHUNK};
        p->size += len;
        sum += (uint32_t)pcr_sum_blocks(len);
    }
    if (f->kind == PCR_KIND_JPEG && m == f->nchunks) { /* no trailer: EOI last */
        p->seg[p->n++] = (struct seg){.len = 2, .type = SEG_EOI};
        p->size += 2;
    }
}

uint64_t pcr_file_size(const struct pcr_file *f, unsigned level)
{
    struct chunk_iter it = chunk_iter(f);
    unsigned m = chunks_at(f, level);
    uint64_t off, len, total = 2;

    if (f->kind != PCR_KIND_JPEG || (m == scans_of(f) && (!f->trailer || trailer_at(f, level))))
        return f->size_full;
    for (unsigned i = 0; i < m; i++) {
        chunk_next(&it, &off, &len);
        total += len;
    }
    return total;
}

uint64_t pcr_file_chunk_len(const struct pcr_file *f, unsigned i)
{
    struct chunk_iter it = chunk_iter(f);
    uint64_t off, len = 0;

    if (i >= f->nchunks)
        return 0;
    for (unsigned k = 0; k <= i; k++)
        chunk_next(&it, &off, &len);
    return len;
}

void pcr_file_info(const struct pcr_file *f, struct pcr_file_info *out)
{
    out->id = f->id;
    out->dir = f->dir;
    out->name = f->name;
    out->kind = (enum pcr_kind)f->kind;
    out->nchunks = f->nchunks;
    out->trailer = f->trailer ? pcr_file_chunk_len(f, f->nchunks - 1u) : 0;
    out->width = f->width;
    out->height = f->height;
    out->components = f->components;
    out->record = f->record;
    out->src_size = f->src_size;
    out->checksum = f->checksum;
    out->note = f->note ? f->note : "";
}

/* ---- records ---- */

/* A token shard's header (see pcrfs/tokens.h) against the index and the model. */
static const char *check_shard_hdr(const struct pcr_store *s, const struct rec *r,
                                   const uint8_t hdr[PCR_RECORD_HDR])
{
    struct pcr_tokshard_hdr h;
    int ret = pcr_tokshard_hdr_decode(hdr, &h);

    if (ret == -EINVAL)
        return "bad magic (not a pcrfs token shard)";
    if (ret || h.count != r->nimages || h.model_id != pcr_tok_model_id(s->model) ||
        h.blob_bytes + PCR_TOKSHARD_HEADER != r->size)
        return "header disagrees with the index";
    return NULL;
}

/* The record's header against the index. @return NULL (it matches), the reason it
 * does not, or "" when it could not be read (a network blip is not damage: the
 * header is read again on the next use). */
static const char *check_record_hdr(struct pcr_store *s, struct rec *r, int *err)
{
    struct pcr_backend *b = backend(s);
    uint8_t hdr[PCR_RECORD_HDR];
    struct pcr_record_hdr h;
    struct pcr_range rg = {.off = 0, .len = sizeof(hdr), .buf = hdr};

    *err = b->ops->read(b, r->obj, &rg, 1);
    if (*err == -ENODATA)
        return "cannot read its header";
    if (*err)
        return "";
    if (s->tree == PCR_TREE_TOKENS)
        return check_shard_hdr(s, r, hdr);
    if (pcr_record_hdr_decode(hdr, &h) != 0)
        return "bad magic (not a pcrfs record)";
    if (h.version != PCR_RECORD_VERSION || h.ngroups != r->ngroups || h.nimages != r->nimages ||
        h.size != r->size)
        return "header disagrees with the index";
    return NULL;
}

struct rec *store_record(struct pcr_store *s, const struct pcr_file *f, unsigned level)
{
    struct rec *r = &s->recs[f->record - 1];
    int state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE), err = 0;
    const char *why;

    if (state == REC_OK)
        return r;
    if (state == REC_BAD || store_rec_gate(s, r) != 0)
        return NULL;
    if (!__atomic_load_n(&r->obj, __ATOMIC_ACQUIRE) && store_open_record(s, r) != 0)
        return NULL;
    /* The header is read without the lock (a network read must not hold up other
     * records); two threads may both check it, and only the one that settles the
     * state logs. No advice here: a reader that opens one file of a record is not
     * yet one that reads the whole record (seq_note()). */
    (void)level;
    why = check_record_hdr(s, r, &err);
    pthread_mutex_lock(&s->rec_lock);
    if (r->state == REC_UNCHECKED && why && why[0]) {
        pcr_log(PCR_LOG_ERR, "record %s: %s; its files fail with EIO", r->name, why);
        __atomic_store_n(&r->state, REC_BAD, __ATOMIC_RELEASE);
    } else if (r->state == REC_UNCHECKED && !why) {
        __atomic_store_n(&r->state, REC_OK, __ATOMIC_RELEASE);
    }
    state = r->state;
    pthread_mutex_unlock(&s->rec_lock);
    if (state == REC_UNCHECKED)
        store_rec_failed(s, r); /* the server did not answer: its files fail at once */
    else if (state == REC_OK)
        store_rec_ok(r);
    if (state == REC_UNCHECKED && !__atomic_exchange_n(&r->warned, 1, __ATOMIC_RELAXED))
        pcr_log(PCR_LOG_ERR, "record %s: reading its header: %s (tried again on next use)", r->name,
                strerror(-err));
    return state == REC_OK ? r : NULL;
}

/* ---- per-thread scratch ---- */

struct tls {
    uint8_t *buf; /* scratch for block-widened reads */
    size_t cap;
    /* the token file last rendered by this thread (open-less reads) */
    uint64_t tok_gen, tok_id;
    uint8_t *tok_mem;
    size_t tok_len;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *arg)
{
    struct tls *t = arg;

    if (t) {
        free(t->buf);
        free(t->tok_mem);
        free(t);
    }
}

static void tls_init(void)
{
    pthread_key_create(&tls_key, tls_free);
}

static struct tls *tls_get(void)
{
    struct tls *t;

    pthread_once(&tls_once, tls_init);
    t = pthread_getspecific(tls_key);
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (t && pthread_setspecific(tls_key, t) != 0) {
            free(t);
            t = NULL;
        }
    }
    return t;
}

void store_thread_done(void)
{
    pthread_once(&tls_once, tls_init);
    tls_free(pthread_getspecific(tls_key));
    pthread_setspecific(tls_key, NULL);
}

static uint8_t *scratch(struct tls *t, size_t n)
{
    if (n > t->cap) {
        size_t c = t->cap ? t->cap : 256 * 1024;
        while (c < n)
            c *= 2;
        uint8_t *p = realloc(t->buf, c);
        if (!p)
            return NULL;
        t->buf = p;
        t->cap = c;
    }
    return t->buf;
}

/* ---- the one read routine ---- */

static uint32_t sum_at(const struct pcr_file *f, uint64_t i)
{
    return pcr_get_le32(f->sums + 4 * i);
}

/* One chunk range being read: block-aligned [a, a + span) of segment @seg, of which
 * [in, in + take) goes to the reader at out + done. */
struct piece {
    const struct seg *seg;
    uint64_t a, span, in;
    size_t take, done;
    uint8_t *data; /* where the span is read to: the reader's buffer or scratch */
};

static int verify(const struct pcr_file *f, const struct piece *pc)
{
    uint64_t first = pc->a / PCR_SUM_BLOCK;

    for (uint64_t at = 0; at < pc->span; at += PCR_SUM_BLOCK) {
        size_t n = pc->span - at < PCR_SUM_BLOCK ? (size_t)(pc->span - at) : PCR_SUM_BLOCK;
        if (pcr_sum32(pc->data + at, n) != sum_at(f, pc->seg->sum + first + at / PCR_SUM_BLOCK))
            return -(int)(at / PCR_SUM_BLOCK) - 1;
    }
    return 0;
}

/* Carried blocks. The kernel reads a file in requests of up to 128 KiB that need not
 * end on a checksum block, and the next request starts inside the block the previous
 * one ended in: without help that block is read and verified twice (measured on
 * full/: 10.5 % more record bytes than file bytes). So a read that ends inside a
 * block leaves that block, verified, in a slot of the store chosen by (file, block),
 * and a read that starts there takes it. Slots rather than per-thread memory: the
 * next request of a file goes to whichever daemon thread is free (with per-thread
 * carries the multi-threaded daemon still over-read: 437,562 record bytes for a
 * 338,446-byte file, exactly 338,446 with -s). A slot another file took meanwhile
 * only costs the re-read. */
static struct carry_slot *carry_slot(struct pcr_store *s, const struct pcr_file *f, uint64_t off)
{
    uint64_t h = ((uintptr_t)f >> 4) * UINT64_C(0x9e3779b97f4a7c15) ^ off / PCR_SUM_BLOCK;

    return &s->carry[(h ^ h >> 29) % PCR_CARRY_SLOTS];
}

/* If @p starts in a carried block of @f, serve its first bytes from there (already
 * verified) and move @p past that block; p->take may then be 0: nothing left. */
static void from_carry(struct pcr_store *s, const struct pcr_file *f, const struct rec *r,
                       struct piece *p, uint8_t *out)
{
    uint64_t upto, blk = p->seg->len - p->a < PCR_SUM_BLOCK ? p->seg->len - p->a : PCR_SUM_BLOCK;
    uint64_t at = p->seg->off + p->a;
    struct carry_slot *c;
    size_t n;

    /* a carry is left by a read that ended inside a block, and the next read starts
     * where it ended: strictly inside the block. A piece that starts on a block
     * boundary (every piece of a read but its first) takes no lock. */
    if (p->in == p->a || p->in >= p->a + blk)
        return;
    c = carry_slot(s, f, at);
    pthread_mutex_lock(&c->lock);
    /* the same block of the same file (verified against this file's sums), whole */
    if (c->file == f && c->rec == r && c->off == at && c->len == blk) {
        upto = p->a + c->len;
        n = (size_t)((p->in + p->take < upto ? p->in + p->take : upto) - p->in);
        memcpy(out + p->done, c->data + (p->in - p->a), n);
        p->in += n;
        p->take -= n;
        p->done += n;
        p->a += c->len;
        p->span -= c->len;
    }
    pthread_mutex_unlock(&c->lock);
}

/* After a read whose last piece ended inside a block: keep that block (verified)
 * for the next request, which the kernel starts right there. */
static void keep_carry(struct pcr_store *s, const struct pcr_file *f, const struct rec *r,
                       const struct piece *p)
{
    uint64_t end = p->a + p->span, lb;
    struct carry_slot *c;

    if (end <= p->in + p->take)
        return;
    lb = (end - 1) / PCR_SUM_BLOCK * PCR_SUM_BLOCK;
    c = carry_slot(s, f, p->seg->off + lb);
    pthread_mutex_lock(&c->lock);
    if (c->data || (c->data = malloc(PCR_SUM_BLOCK))) {
        c->len = (size_t)(end - lb);
        memcpy(c->data, p->data + (lb - p->a), c->len);
        c->off = p->seg->off + lb;
        c->rec = r;
        c->file = f;
    }
    pthread_mutex_unlock(&c->lock);
}

static ssize_t read_error(struct pcr_store *s, struct rec *r, int ret, uint64_t off)
{
    if (!__atomic_exchange_n(&r->warned, 1, __ATOMIC_RELAXED))
        pcr_log(PCR_LOG_ERR, "record %s: %s at offset %llu; its files fail with EIO", r->name,
                ret == -ENODATA ? "truncated" : strerror(-ret), (unsigned long long)off);
    pcr_count(&s->stats.errors, 1);
    return ret == -ENOMEM ? -ENOMEM : -EIO;
}

static ssize_t read_plan(struct pcr_store *s, const struct pcr_file *f, struct rec *r,
                         const struct seg *seg, unsigned nseg, uint64_t size, unsigned level,
                         uint8_t *out, size_t len, uint64_t off)
{
    struct piece pc[MAX_SEGS];
    struct pcr_range rg[MAX_SEGS];
    struct pcr_backend *b = backend(s);
    uint64_t pos = 0, bytes = 0;
    size_t done = 0, need = 0;
    unsigned np = 0;
    struct tls *t = NULL;
    uint8_t *tmp = NULL;
    bool healed = false;
    int ret;

    if (off >= size)
        return 0;
    if (len > size - off)
        len = (size_t)(size - off);
    pcr_count(&s->stats.level[level].reads, 1);
    t = tls_get(); /* NULL: scratch fails below if needed */
    /* which segments the request touches, each widened to whole checksum blocks */
    for (unsigned i = 0; i < nseg && done < len; i++) {
        uint64_t end = pos + seg[i].len;
        if (off + done < end) {
            uint64_t in = off + done - pos;
            size_t take =
                end - (off + done) < len - done ? (size_t)(end - (off + done)) : len - done;
            if (seg[i].type == SEG_EOI) {
                memcpy(out + done, eoi + in, take);
            } else {
                struct piece *p = &pc[np];
                uint64_t a = in / PCR_SUM_BLOCK * PCR_SUM_BLOCK;
                uint64_t z = (in + take + PCR_SUM_BLOCK - 1) / PCR_SUM_BLOCK * PCR_SUM_BLOCK;
                *p = (struct piece){.seg = &seg[i],
                                    .a = a,
                                    .span = (z < seg[i].len ? z : seg[i].len) - a,
                                    .in = in,
                                    .take = take,
                                    .done = done};
                from_carry(s, f, r, p, out);
                if (p->take)
                    np++;
                if (p->take && (p->a != p->in || p->span != p->take))
                    need += (size_t)p->span;
            }
            done += take;
        }
        pos = end;
    }
    if (need && (!t || !(tmp = scratch(t, need))))
        return -ENOMEM;
    for (unsigned i = 0; i < np; i++) {
        struct piece *p = &pc[i];
        if (p->a == p->in && p->span == p->take) {
            p->data = out + p->done; /* exactly what was asked: no copy */
        } else {
            p->data = tmp;
            tmp += p->span;
        }
        rg[i] =
            (struct pcr_range){.off = p->seg->off + p->a, .len = (size_t)p->span, .buf = p->data};
        bytes += p->span;
    }
    if (np && store_rec_gate(s, r) != 0) {
        pcr_count(&s->stats.errors, 1);
        return -EIO; /* failed on the network just before: at once, not after a deadline */
    }
    if (np) {
        ret = b->ops->read(b, r->obj, rg, np);
        if (ret == -EAGAIN)
            return ret; /* (local bytes only: store_pread_local()) */
        if (ret && (ret == -EIO || ret == -ETIMEDOUT))
            store_rec_failed(s, r);
        if (ret)
            return read_error(s, r, ret, rg[0].off);
        store_rec_ok(r);
        pcr_count(&s->stats.level[level].bytes, bytes);
    }
    for (unsigned i = 0; i < np; i++) {
        struct piece *p = &pc[i];
        int bad = verify(f, p);
        if (bad && !healed && s->base->ops->drop) {
            /* bytes kept by the backend (a cached prefix) that fail: dropped and asked
             * for again, once, so a corruption in transit or on the cache's disk heals
             * as soon as the source is right; just the ranges that fail (the backend
             * keeps the rest of the record) */
            for (unsigned k = i; k < np; k++)
                if (k == i || verify(f, &pc[k]))
                    s->base->ops->drop(s->base, r->obj, rg[k].off, rg[k].len);
            healed = true;
            ret = b->ops->read(b, r->obj, rg, np);
            if (ret == -EAGAIN)
                return ret;
            if (ret && (ret == -EIO || ret == -ETIMEDOUT))
                store_rec_failed(s, r);
            if (ret)
                return read_error(s, r, ret, rg[0].off);
            i = UINT_MAX; /* verify every piece again: the loop's i++ makes it 0 */
            continue;
        }
        if (bad) {
            if (!__atomic_exchange_n(&((struct pcr_file *)f)->damaged, 1, __ATOMIC_RELAXED)) {
                char path[1024];

                /* named by its path, which an operator can look for, not the index's id */
                if (pcr_store_path(s, f->id, path, sizeof(path)) < 0)
                    snprintf(path, sizeof(path), "file %llu", (unsigned long long)f->id);
                pcr_log(PCR_LOG_ERR,
                        "%s: checksum mismatch in record %s at offset %" PRIu64 "; its "
                        "reads there fail with EIO",
                        path, r->name, p->seg->off + p->a + (uint64_t)(-bad - 1) * PCR_SUM_BLOCK);
            }
            pcr_count(&s->stats.errors, 1);
            return -EIO;
        }
        if (p->data != out + p->done)
            memcpy(out + p->done, p->data + (p->in - p->a), p->take);
    }
    if (np)
        keep_carry(s, f, r, &pc[np - 1]);
    if (healed)
        pcr_count(&s->stats.heals, 1);
    return (ssize_t)len;
}

/* ---- files rendered in memory: token grids ---- */

/* A token file is decoded whole: the blob (about 1 kB) is read, checked and decoded
 * into the NPY bytes the view serves, so reads are plain copies and a blob that does
 * not decode fails the open (EIO), never a read in the middle of a file.
 * @return 0 and a malloc()ed buffer of f->size_full bytes in *out. */
static int token_render(struct pcr_store *s, const struct pcr_file *f, struct rec *r, uint8_t **out)
{
    struct plan p;
    size_t ntok = (size_t)f->width * f->height;
    uint8_t *blob = NULL, *mem = NULL;
    uint16_t *grid = NULL;
    ssize_t n;
    int ret = -ENOMEM;

    plan_make(s, f, r, 1, &p);
    blob = malloc(p.size ? p.size : 1);
    grid = malloc(ntok * sizeof(*grid));
    mem = malloc(f->size_full);
    if (!blob || !grid || !mem)
        goto out;
    n = read_plan(s, f, r, p.seg, p.n, p.size, 1, blob, p.size, 0);
    if (n != (ssize_t)p.size) {
        ret = n < 0 ? (int)n : -EIO;
        goto out;
    }
    ret = pcr_tok_decode(s->model, blob, p.size, f->height, f->width, grid);
    if (ret) {
        pcr_log(PCR_LOG_ERR, "token file %llu: its blob does not decode to %ux%u tokens",
                (unsigned long long)f->id, f->height, f->width);
        pcr_count(&s->stats.errors, 1);
        ret = -EIO;
        goto out;
    }
    if (pcr_npy_write_grid(f->height, f->width, grid, mem, f->size_full) != f->size_full) {
        ret = -EIO;
        goto out;
    }
    *out = mem;
    mem = NULL;
    ret = 0;
out:
    free(mem);
    free(blob);
    free(grid);
    return ret;
}

/* ---- reading record by record ----
 *
 * A record's prefix at level K holds every image of the record at K (PCR's one
 * sequential read per record), and advise() makes the backend fetch it whole: from
 * object storage as parts over many connections into the cache, from local files
 * as one readahead stream (-o readahead=record). That is right only for a reader
 * that goes record by record; for one that does not (a shuffle over the whole
 * store, fadvise DONTNEED churn, a cache smaller than what the shuffle touches) it
 * fetches a whole prefix to serve one image: 10-30x the bytes read (issue 19). So
 * the store advises a record only when
 * - a reader is seen going through it in order: SEQ_RUN + 1 files of the record
 *   opened one after another in file-id order (tracked for SEQ_CURSORS readers at
 *   once, e.g. a DataLoader's workers; a shuffle almost never does this), and then
 *   also the next SEQ_AHEAD records when this is the mount's first record read so or
 *   the one before was read the same way (a scan of the store in order); or
 * - with -o readahead=record (a local store whose user said its reader goes record
 *   by record; object storage has the hints for that, and Must 3's guarantee
 *   without them), a reader is seen going through it in an order of its own:
 *   SEQ_DENSE of the last PCR_SEQ_DENSE_WINDOW files opened lie in the record.
 *   RecordSampler
 *   shuffles the files of a window of records (8) together, so it never opens two
 *   files in file-id order, but each record of its window holds about 1/8 of what
 *   it opens; a shuffle over a store of R records puts 64/R of the last 64 opens in
 *   a record (0.05 on ImageNet's 1,250: an open makes its record the sixth with
 *   odds of ~2e-9, one record read ahead in ~300 epochs). Without this, a
 *   RecordSampler that gives no hints (prefetch=False, or the paths of its order
 *   read by another program, as bench/order_read.py does) was read file by file:
 *   cold, record order, -o readahead=record, scan5/ 0.69-0.71x and full/
 *   0.37-0.69x plain files (BENCHMARKS.md, "Cold local reads in record order"),
 *   where advising every record at its first open (before issue 19's Must 3) read
 *   1.08-1.13x and 0.86-0.91x on 2026-11-23; or
 * - the reader said which records come next (pcr_store_prefetch(), the sampler's
 *   hint through /.pcrfs/prefetch). Once readers name their records, a scan's guess
 *   ahead is bounded by what this node reads: only records it was told of or has
 *   opened a file of (rec->known). The records after one it reads may be another
 *   node's share of a job (RecordSampler with world_size > 1), which this node must
 *   not fetch. (Before, any hint turned the guess off for good: a special case.)
 *   A hint names records, not a view: their prefix is the level of the last file
 *   opened, and a hint that comes before any file was opened waits for the first
 *   open of a file of an image view (hints_at_level()). A file of tokens/ tells no
 *   level: it lies in the token tree, a store of its own that no hint names, so the
 *   hints still wait after it (ending their wait at the top level would fetch the
 *   hinted records whole for a reader of tokens). Before, a hint was advised at
 *   once at the top level: the sampler hints a window before its first file, so at
 *   scan5/ its first window was fetched whole, 3x the bytes (43 MB records for 14 MB
 *   prefixes: BENCHMARKS.md §22, fetched / served 2-4 in a 15 s run).
 * Every other miss reads just the bytes its file needs. */
#define SEQ_CURSORS 4
#define SEQ_RUN     2
#define SEQ_AHEAD   2 /* records fetched ahead of a scan in order */
#define SEQ_DENSE   6 /* of the last PCR_SEQ_DENSE_WINDOW opens: a record read now */

static void advise(struct pcr_store *s, struct rec *r, uint64_t prefix)
{
    struct pcr_backend *b = backend(s);
    struct pcr_object *o = __atomic_load_n(&r->obj, __ATOMIC_ACQUIRE);

    if (b->ops->advise && o && r->valid && prefix) {
        b->ops->advise(b, o, 0, prefix);
        store_ahead_visit(r, prefix);
        pcr_count(&s->stats.advised, 1);
    }
}

/* Record @id (1..nrecs) opened and its header checked, for advice ahead of its
 * reader. @return it, or NULL (out of range, or failing: its reads will say). */
static struct rec *rec_ready(struct pcr_store *s, uint64_t id)
{
    struct rec *r;

    if (id < 1 || id > s->nrecs)
        return NULL;
    r = &s->recs[id - 1];
    /* a record held as failing is not asked for ahead: its server does not answer,
     * and the open would wait out a deadline in the caller's read */
    if (!r->valid || __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == REC_BAD ||
        __atomic_load_n(&r->fail_until, __ATOMIC_ACQUIRE))
        return NULL;
    if (!__atomic_load_n(&r->obj, __ATOMIC_ACQUIRE) && store_open_record(s, r) != 0)
        return NULL;
    return r;
}

/* Advise the records @ids[0..n) at @level, read side by side (one hint: a window of
 * the sampler): the backend fetches their prefixes interleaved (advise_many), else
 * each in turn. */
static void advise_hint(struct pcr_store *s, const uint64_t *ids, size_t n, unsigned level)
{
    struct pcr_backend *b = backend(s);
    struct pcr_object *o[PCR_PREFETCH_MAX];
    uint64_t len[PCR_PREFETCH_MAX];

    for (size_t at = 0; at < n; at += PCR_PREFETCH_MAX) {
        size_t k = 0;
        for (size_t i = at; i < n && i < at + PCR_PREFETCH_MAX; i++) {
            struct rec *r = rec_ready(s, ids[i]);
            uint64_t prefix = r ? rec_prefix(s, r, level) : 0;
            if (!prefix)
                continue;
            o[k] = __atomic_load_n(&r->obj, __ATOMIC_ACQUIRE);
            store_ahead_visit(r, prefix);
            len[k++] = prefix;
        }
        pcr_count(&s->stats.advised, k); /* (as advise() counts one) */
        if (b->ops->advise_many && k)
            b->ops->advise_many(b, o, len, k);
        else
            for (size_t i = 0; i < k; i++)
                b->ops->advise(b, o[i], 0, len[i]);
    }
}

struct hinted {
    uint64_t seq, group, id;
};

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const struct hinted *)a)->seq, y = ((const struct hinted *)b)->seq;
    return x < y ? -1 : x > y;
}

/* The first open tells the level: the records hinted before it are advised at it,
 * in the order they were hinted, each hint's records together (advise_hint()).
 * Before, in record order: a sampler's fifth window could go before its first. */
static void hints_at_level(struct pcr_store *s, unsigned level)
{
    struct hinted *h;
    uint64_t *ids;
    size_t n = 0;
    bool first;

    if (__atomic_load_n(&s->level_seen, __ATOMIC_ACQUIRE))
        return; /* (the common case, without the lock) */

    pthread_mutex_lock(&s->rec_lock);
    first = !s->level_seen;
    __atomic_store_n(&s->level_seen, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->rec_lock);
    if (!first)
        return;
    h = calloc(s->hint_seq ? s->hint_seq : 1, sizeof(*h));
    ids = calloc(s->hint_seq ? s->hint_seq : 1, sizeof(*ids));
    pthread_mutex_lock(&s->rec_lock);
    for (uint64_t id = 1; h && ids && id <= s->nrecs && n < s->hint_seq; id++) {
        struct rec *r = &s->recs[id - 1];
        if (r->hint_waits)
            h[n++] = (struct hinted){r->hint_waits, r->hint_group, id};
        r->hint_waits = 0;
    }
    pthread_mutex_unlock(&s->rec_lock);
    if (n)
        qsort(h, n, sizeof(*h), by_seq);
    for (size_t i = 0; i < n; i++)
        ids[i] = h[i].id;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && h[j].group == h[i].group; j++)
            ;
        advise_hint(s, ids + i, j - i, level);
    }
    free(h);
    free(ids);
}

/* An open of a file of record @id (1..nrecs) that needs @prefix, under rec_lock.
 * @return whether to advise the record: SEQ_DENSE of the last PCR_SEQ_DENSE_WINDOW
 * opens lie in it, and it was not advised at least this far since its count last
 * left 0 (a visit). Once per visit, not at each crossing of SEQ_DENSE: a window of
 * RecordSampler puts about 8 of every 64 opens in each of its records, a count that
 * goes up and down across 6 all the time, and each crossing advised the record's
 * whole prefix again (about 50 calls per record, each a WILLNEED over 42 MB that the
 * page cache holds already: BENCHMARKS.md, "Cold local reads in record order"). A
 * higher level (a larger @prefix) is advised again; a record come back after 64
 * opens elsewhere (the next epoch) is a new visit. */
static bool dense_note(struct pcr_store *s, uint32_t id, uint64_t prefix)
{
    unsigned pos = s->dense_pos++ % PCR_SEQ_DENSE_WINDOW;
    uint32_t old = s->dense_ring[pos];
    struct rec *r = &s->recs[id - 1];

    if (old && --s->recs[old - 1].dense_n == 0)
        s->recs[old - 1].dense_pfx = 0;
    s->dense_ring[pos] = id;
    if (++r->dense_n < SEQ_DENSE || prefix <= r->dense_pfx)
        return false;
    r->dense_pfx = prefix;
    return true;
}

/* File @f of record @r is opened at @level (@prefix: what its level needs). */
static void seq_note(struct pcr_store *s, const struct pcr_file *f, struct rec *r, unsigned level,
                     uint64_t prefix)
{
    bool go = false, next = false;
    unsigned i;

    __atomic_store_n(&s->seq_level, level, __ATOMIC_RELAXED);
    __atomic_store_n(&r->known, true, __ATOMIC_RELAXED);
    if (!backend(s)->ops->advise)
        return;
    hints_at_level(s, level);
    pthread_mutex_lock(&s->rec_lock);
    for (i = 0; i < SEQ_CURSORS && r->seq_next[i] != f->id; i++)
        ;
    if (i < SEQ_CURSORS) {
        r->seq_next[i] = f->id + 1;
        if (r->seq_run[i] < UINT8_MAX && ++r->seq_run[i] == SEQ_RUN) {
            go = true;
            /* the mount's first such record, or the one after the last: the
             * reader scans the store in order */
            next = !s->seq_last || s->seq_last + 1 == f->record;
            s->seq_last = f->record;
        }
    } else {
        i = r->seq_turn++ % SEQ_CURSORS;
        r->seq_next[i] = f->id + 1;
        r->seq_run[i] = 0;
    }
    if (__atomic_load_n(&(s->parent ? s->parent : s)->readahead, __ATOMIC_RELAXED))
        go = dense_note(s, f->record, prefix) || go;
    pthread_mutex_unlock(&s->rec_lock);
    if (!go || __atomic_load_n(&r->fail_until, __ATOMIC_ACQUIRE))
        return; /* (failing: see rec_ready()) */
    advise(s, r, prefix);
    /* more than one: a record's parts alone do not fill the connections (a prefix
     * of 86 MB is 11 parts of 8 MiB; BENCHMARKS.md, "Parts over many connections") */
    for (unsigned k = 1; next && k <= SEQ_AHEAD; k++) {
        uint64_t id = (uint64_t)f->record + k;
        struct rec *n;
        /* (checked before rec_ready(): an unknown record is not even opened) */
        if (id > s->nrecs || (__atomic_load_n(&s->hinted, __ATOMIC_RELAXED) &&
                              !__atomic_load_n(&s->recs[id - 1].known, __ATOMIC_RELAXED)))
            continue;
        n = rec_ready(s, id);
        if (n)
            advise(s, n, rec_prefix(s, n, level));
    }
}

int pcr_store_prefetch(struct pcr_store *s, const uint64_t *records, size_t n)
{
    unsigned level = __atomic_load_n(&s->seq_level, __ATOMIC_RELAXED);

    for (size_t i = 0; i < n; i++)
        if (records[i] < 1 || records[i] > s->nrecs)
            return -EINVAL;
    if (!backend(s)->ops->advise)
        return 0;
    for (size_t i = 0; i < n; i++)
        __atomic_store_n(&s->recs[records[i] - 1].known, true, __ATOMIC_RELAXED);
    if (n)
        __atomic_store_n(&s->hinted, true, __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->rec_lock);
    if (!s->level_seen) {
        /* (under the lock: the first open either sees these or came before) */
        uint64_t group = s->hint_seq + 1; /* the hint's first */
        for (size_t i = 0; i < n; i++) {
            struct rec *r = &s->recs[records[i] - 1];
            if (r->hint_waits)
                continue; /* (named before: it keeps its place) */
            r->hint_waits = ++s->hint_seq;
            r->hint_group = group;
        }
        pthread_mutex_unlock(&s->rec_lock);
        /* their objects opened now (a HEAD each), not in the first open */
        for (size_t i = 0; i < n; i++)
            (void)rec_ready(s, records[i]);
        return 0;
    }
    pthread_mutex_unlock(&s->rec_lock);
    advise_hint(s, records, n, level);
    return 0;
}

int pcr_store_prefetch_text(struct pcr_store *s, const char *buf, size_t len)
{
    uint64_t ids[PCR_PREFETCH_MAX];
    size_t n = 0, i = 0;

    /* untrusted bytes: decimal ids split by spaces or newlines, nothing else */
    while (i < len) {
        uint64_t v = 0;
        size_t start;
        if (buf[i] == ' ' || buf[i] == ',' || buf[i] == '\n') {
            i++;
            continue;
        }
        for (start = i; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
            if (i - start >= 19)
                return -EINVAL;
            v = v * 10 + (uint64_t)(buf[i] - '0');
        }
        if (i == start || (i < len && buf[i] != ' ' && buf[i] != ',' && buf[i] != '\n') ||
            n == PCR_PREFETCH_MAX)
            return -EINVAL;
        ids[n++] = v;
    }
    return pcr_store_prefetch(s, ids, n);
}

/* ---- handles ---- */

static ssize_t handle_copy(const uint8_t *mem, uint64_t size, void *buf, size_t len, uint64_t off)
{
    if (off >= size)
        return 0;
    if (len > size - off)
        len = (size_t)(size - off);
    memcpy(buf, mem + off, len);
    return (ssize_t)len;
}

static int handle_open(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                       struct pcr_handle **out)
{
    struct rec *r = store_record(s, f, level);
    struct pcr_handle *h;
    struct plan p;
    int ret;

    if (!r) {
        pcr_count(&s->stats.errors, 1);
        return -EIO;
    }
    if (f->kind == PCR_KIND_TOKENS) {
        h = calloc(1, sizeof(*h));
        if (!h)
            return -ENOMEM;
        ret = token_render(s, f, r, &h->mem);
        if (ret) {
            free(h);
            return ret;
        }
        h->size = f->size_full;
        h->level = 1;
    } else {
        plan_make(s, f, r, level, &p);
        h = malloc(sizeof(*h) + p.n * sizeof(h->seg[0]));
        if (!h)
            return -ENOMEM;
        memcpy(h->seg, p.seg, p.n * sizeof(h->seg[0]));
        seq_note(s, f, r, level, p.prefix);
        h->mem = NULL;
        h->nseg = p.n;
        h->size = p.size;
        h->level = p.level;
    }
    h->s = s;
    h->f = f;
    h->r = r;
    pcr_count(&s->stats.level[h->level].opens, 1);
    *out = h;
    return 0;
}

uint64_t pcr_handle_size(const struct pcr_handle *h)
{
    return h->size;
}

static ssize_t handle_read(struct pcr_handle *h, void *buf, size_t len, uint64_t off)
{
    if (h->mem) {
        pcr_count(&h->s->stats.level[h->level].reads, 1);
        return handle_copy(h->mem, h->size, buf, len, off);
    }
    return read_plan(h->s, h->f, h->r, h->seg, h->nseg, h->size, h->level, buf, len, off);
}

void pcr_handle_close(struct pcr_handle *h)
{
    if (h)
        free(h->mem);
    free(h);
}

/* A token file read without a handle: rendered once into the calling thread's cache
 * and served from there while the same thread keeps reading it (the kernel reads a
 * file's pages in order, usually in one request for a ~2 kB .tok file). */
static ssize_t token_pread(struct pcr_store *s, const struct pcr_file *f, struct rec *r, void *buf,
                           size_t len, uint64_t off)
{
    struct tls *t = tls_get();
    uint8_t *mem;
    int ret;

    if (!t)
        return -ENOMEM;
    if (!(t->tok_mem && t->tok_gen == s->gen && t->tok_id == f->id)) {
        ret = token_render(s, f, r, &mem);
        if (ret)
            return ret;
        free(t->tok_mem);
        t->tok_mem = mem;
        t->tok_len = f->size_full;
        t->tok_gen = s->gen;
        t->tok_id = f->id;
    }
    if (off == 0)
        pcr_count(&s->stats.level[1].opens, 1);
    pcr_count(&s->stats.level[1].reads, 1);
    return handle_copy(t->tok_mem, t->tok_len, buf, len, off);
}

/* pcr_handle_read() without the handle, for readers that keep none (the FUSE driver
 * when the kernel sends no OPEN): the plan lives on the stack. A read at offset 0
 * counts as an open (the driver's open-less reads have no other first moment). */
static ssize_t store_pread(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                           size_t len, uint64_t off)
{
    struct rec *r = store_record(s, f, level);
    struct plan p;

    if (!r) {
        pcr_count(&s->stats.errors, 1);
        return -EIO;
    }
    if (f->kind == PCR_KIND_TOKENS)
        return token_pread(s, f, r, buf, len, off);
    plan_make(s, f, r, level, &p);
    if (off == 0) {
        pcr_count(&s->stats.level[p.level].opens, 1);
        seq_note(s, f, r, level, p.prefix);
    }
    return read_plan(s, f, r, p.seg, p.n, p.size, p.level, buf, len, off);
}

ssize_t store_pread_local(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                          size_t len)
{
    struct rec *r = &s->recs[f->record - 1];
    struct plan p;
    ssize_t n;

    /* a record is opened and checked by its first reader, never here: that reads */
    if (f->kind == PCR_KIND_TOKENS || __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != REC_OK ||
        __atomic_load_n(&r->fail_until, __ATOMIC_ACQUIRE) ||
        !__atomic_load_n(&r->obj, __ATOMIC_ACQUIRE))
        return -EAGAIN;
    plan_make(s, f, r, level, &p);
    pcr_backend_op_begin_local();
    n = read_plan(s, f, r, p.seg, p.n, p.size, p.level, buf, len, 0);
    pcr_backend_op_end();
    return n;
}

/* ---- one deadline per operation ----
 * Each public read call is one operation of its thread: every request the backend
 * makes for it shares one deadline from its start (pcr_backend_op_begin(),
 * backend/opstart.c). */

int pcr_handle_open(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                    struct pcr_handle **out)
{
    pcr_backend_op_begin();
    int ret = handle_open(s, f, level, out);
    pcr_backend_op_end();
    return ret;
}

ssize_t pcr_handle_read(struct pcr_handle *h, void *buf, size_t len, uint64_t off)
{
    pcr_backend_op_begin();
    ssize_t n = handle_read(h, buf, len, off);
    pcr_backend_op_end();
    return n;
}

ssize_t pcr_store_read(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                       size_t len, uint64_t off)
{
    struct pcr_handle *h;
    ssize_t n;
    int ret;

    pcr_backend_op_begin(); /* one deadline for the open and the read */
    ret = handle_open(s, f, level, &h);
    n = ret ? ret : handle_read(h, buf, len, off);
    if (!ret)
        pcr_handle_close(h);
    pcr_backend_op_end();
    return n;
}

ssize_t pcr_store_pread(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                        size_t len, uint64_t off)
{
    pcr_backend_op_begin();
    ssize_t n = store_pread(s, f, level, buf, len, off);
    pcr_backend_op_end();
    return n;
}
