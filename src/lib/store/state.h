/* pcrfs — the store reader's private state, shared by its three files (a header of
 * none of them: each includes it, and it calls none of them):
 *   store.c  open and close, the record table, holding records open, counters;
 *   tree.c   the directory table and the lazy loading of each directory's files;
 *   read.c   chunk arithmetic, the read plan, handles and the one read routine;
 *   ahead.c  the files a reader will want next, read from local bytes only.
 * Their own calls run one way: store.c -> tree.c, read.c -> store.c, ahead.c -> read.c
 * and tree.c.
 *
 * Ownership and lifetime (the cache essay). Everything a store hands out lives until
 * pcr_store_close(): nothing is ever evicted, because the store is immutable and the
 * kernel above us already caches pages and attributes. What we keep:
 *   - at open: every directory row (dirs[]), every record row (recs[]); both are
 *     small (a directory holds ~1,000 files, a record 1,024) and validated at once,
 *     so a store whose tree is inconsistent is refused before anything is mounted;
 *   - at open: every record object opened through the backend and held until close,
 *     so a store rebuilt or deleted under a mount keeps serving what was mounted
 *     (the unlinked files live on while open); its header is checked against the
 *     index on the first read of one of its files;
 *   - lazily, a directory at a time: its file rows (struct dirfiles), loaded on the
 *     first lookup/readdir/stat that needs them, validated row by row (a bad row is
 *     dropped and logged, the rest of the directory is served), then published with a
 *     release store so readers never take a lock once a directory is loaded.
 * Names, chunk tables, checksums, notes and quality tables of loaded files live in one arena;
 * handles are the only per-open allocation and belong to whoever opened them.
 */
#ifndef PCRFS_STORE_STATE_H
#define PCRFS_STORE_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "pcrfs/backend.h"
#include "pcrfs/jpeg.h"
#include "pcrfs/store.h"
#include "common/internal.h"
#include "format/index.h"

#define MAX_NAME     255 /* NAME_MAX: longer names cannot be served by the kernel */
#define MAX_NOTE     512
#define MAX_RECORDS  (1ULL << 32)
#define MAX_IDS      (1ULL << 40)   /* dir and file ids must fit the inode scheme */
#define MAX_CODEBOOK (256ULL << 20) /* bytes of codebook NPY kept in memory */
#define MAX_TOK_BLOB (16u << 20)    /* one encoded token grid */

enum rec_state {
    REC_UNCHECKED = 0, /* header not read yet */
    REC_OK = 1,        /* header matches the index */
    REC_BAD = 2,       /* missing, damaged, or its index row is invalid: EIO */
};

/* read.c, seq_note(): how many of the last opens are looked at for a reader going
 * record by record in its own order (a sampler that shuffles within a window) */
#define PCR_SEQ_DENSE_WINDOW 64

struct rec {
    char name[72]; /* as in the index, validated (pcr_record_name_ok) */
    uint64_t size, nimages;
    unsigned ngroups;
    uint64_t goff[PCR_MAX_CHUNKS + 1]; /* group g is [goff[g], goff[g+1]) */
    bool valid;                        /* the index row itself is consistent */
    struct pcr_object *obj;            /* open object, or NULL (atomic) */
    int state;                         /* enum rec_state (atomic) */
    int warned;                        /* a read error was logged (atomic) */
    /* reading record by record (read.c, seq_note()): a few readers' next file ids in
     * this record and how many files in a row each read (under rec_lock) */
    uint64_t seq_next[4];
    uint8_t seq_run[4];
    uint8_t seq_turn;
    uint8_t dense_n;     /* opens of its files among the store's last
                            PCR_SEQ_DENSE_WINDOW (read.c, seq_note(); rec_lock) */
    uint64_t dense_pfx;  /* the prefix advised since dense_n last left 0, or 0
                            (read.c, dense_note(); rec_lock) */
    bool known;          /* this node was told of it (a hint) or opened a file of it:
                            a scan's guess ahead may fetch it once hints came (atomic) */
    uint64_t hint_waits; /* hinted before any file was opened: advised at the first
                            open's level, in this order (rec_lock; 0: not) */
    uint64_t hint_group; /* ...together with the records of the same hint (rec_lock) */
    uint64_t fail_until; /* ms (monotonic): failed on the network, its files
                            fail at once until then (atomic; 0: not) */
    uint64_t advised;    /* the prefix last advised to the backend (atomic; 0: none):
                            its files are worth handing ahead (ahead.c) */
    uint8_t visit;       /* advice so far, 1..255 then 1 again (atomic; 0: none): a
                            visit of the record hands its files once (ahead.c) */
};

struct pcr_file {
    uint64_t id, dir;
    const char *name;
    const uint8_t *chunks;  /* validated varint pairs (offset in group, length) */
    const uint8_t *sums;    /* u32 LE per PCR_SUM_BLOCK block of each chunk, in order */
    const char *note;       /* NULL unless verbatim with a reason */
    const uint8_t *quality; /* u16 LE MS-SSIM per level 1..levels-1 (pcrfs(5)), or NULL */
    uint64_t size_full;     /* bytes served at level L, EOI and trailer included */
    uint64_t src_size, checksum;
    uint32_t record; /* index into recs[] + 1 */
    uint32_t width, height;
    uint16_t chunks_len;
    uint8_t kind, nchunks, components, levels;
    uint8_t trailer; /* 1: the last chunk is served after the EOI, top level only */
    uint8_t damaged; /* a checksum failed: the file fails with EIO (atomic) */
    uint8_t served;  /* the visit of its record it was opened or handed ahead in
                        (atomic; ahead.c) */
};

struct dirfiles {
    uint64_t n; /* accepted rows, sorted by name and by id */
    struct pcr_file f[];
};

struct dir {
    uint64_t parent, first_child, nsubdirs, first_file, nfiles;
    const char *name;
    struct dirfiles *files; /* NULL until loaded; set once (release/acquire) */
};

/* The arena of the names, chunk tables, checksums, notes and quality tables of
 * loaded files (tree.c): blocks of ARENA_BLOCK bytes or more, freed at close. */
struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

/* A verified checksum block kept from the end of one read of a file for the next
 * (read.c, "Carried blocks"): slots of the store, not of a thread, because the
 * kernel's successive READs of one file go to whichever daemon thread is free. */
#define PCR_CARRY_SLOTS 16
struct carry_slot {
    pthread_mutex_t lock;
    const struct rec *rec;
    const struct pcr_file *file; /* whose checksums verified it; NULL: empty */
    uint64_t off;                /* its absolute offset in the record */
    size_t len;
    uint8_t *data; /* PCR_SUM_BLOCK bytes, allocated on first use */
};

struct pcr_store {
    struct pcr_index *idx;
    char *path;                  /* the store directory, as given */
    enum pcr_index_tree tree;    /* which tree of the index this object serves */
    struct pcr_store *parent;    /* the image store a token tree belongs to (owns idx, be) */
    struct pcr_tok_model *model; /* token tree: the decoder of its blobs */
    void *codebook;              /* image store: the codebook NPY bytes, or NULL */
    size_t codebook_len;
    struct pcr_backend *base; /* where record bytes come from (owned by the image store) */
    struct pcr_backend *be;   /* what reads go through: base, or a shim over it (atomic) */
    struct pcr_backend *shim; /* the bandwidth shim, once -o bwlimit asked for one */
    const char *subdir;       /* "records" or "tokens": where this tree's objects live */
    uint64_t gen;             /* unique per store opened in this process (token cache key) */
    unsigned levels;
    int64_t mtime;
    uint64_t ndirs, nfiles, nrecs;
    struct dir *dirs; /* [id - 1] */
    uint64_t *fdirs;  /* ids of directories with files, by first_file */
    uint64_t nfdirs;
    struct rec *recs;         /* [id - 1] */
    pthread_mutex_t lock;     /* serialises directory loading */
    pthread_mutex_t rec_lock; /* serialises opening and checking records */
    struct arena_block *arena;
    struct pcr_stats stats; /* updated with relaxed atomics */
    uint64_t seq_last;      /* the record last seen read record by record (rec_lock) */
    unsigned seq_level;     /* the level of the last open (atomic): hints' prefixes */
    bool level_seen;        /* a file was opened, so seq_level holds (set under rec_lock;
                               atomic) */
    uint64_t hint_seq;      /* counts the records hinted before the first open (rec_lock) */
    bool hinted;            /* a reader named records (pcr_store_prefetch()): a scan's
                               guess ahead only for records it knows (atomic) */
    struct carry_slot carry[PCR_CARRY_SLOTS];
    /* the records of the last PCR_SEQ_DENSE_WINDOW opens, a ring (read.c, seq_note();
     * rec_lock; 0: none yet) */
    uint32_t dense_ring[PCR_SEQ_DENSE_WINDOW];
    unsigned dense_pos;
    /* readahead=record (pcr_store_set_readahead(); atomic): the rule of the record
     * most recent opens lie in applies (read.c, seq_note()) */
    bool readahead;
    /* files to hand ahead (ahead.c): AHEAD_TASKS slots, allocated at first use */
    pthread_mutex_t ahead_lock;
    struct ahead_task *ahead;
    unsigned ahead_turn;
    uint64_t ahead_gen;
};

static inline void pcr_count(uint64_t *ctr, uint64_t n)
{
    __atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* One chunk-table walk for everyone: the (offset in group, length) pairs of a file,
 * validated at load, so decoding cannot fail on a loaded file. */
struct chunk_iter {
    const uint8_t *p;
    size_t left;
};
static inline struct chunk_iter chunk_iter(const struct pcr_file *f)
{
    struct chunk_iter it = {f->chunks, f->chunks_len};
    return it;
}
static inline void chunk_next(struct chunk_iter *it, uint64_t *off, uint64_t *len)
{
    size_t k = pcr_varint_get(it->p, it->left, off);
    it->p += k;
    it->left -= k;
    k = pcr_varint_get(it->p, it->left, len);
    it->p += k;
    it->left -= k;
}

/* The bytes of record @r a reader at @level needs: its prefix (level 0 or the top:
 * the whole record). */
static inline uint64_t rec_prefix(const struct pcr_store *s, const struct rec *r, unsigned level)
{
    if (!level || level >= s->levels || level >= r->ngroups)
        return r->goff[r->ngroups];
    return r->goff[level];
}

/* tree.c */
/* Make room for element @n of an array filled as rows arrive, so that memory follows
 * the rows an index holds, never a count or an id it merely claims. */
int store_grow(void *arrp, uint64_t *cap, uint64_t n, size_t hdr, size_t elem);
int store_load_dirs(struct pcr_store *s, uint64_t max, char *err, size_t errlen);
void store_free_tree(struct pcr_store *s);

/* read.c */
/* The record of @f, opened and its header checked on first use (after advising the
 * backend of the prefix @level needs).
 * @return the record, or NULL (EIO: missing or damaged; logged once). */
struct rec *store_record(struct pcr_store *s, const struct pcr_file *f, unsigned level);
/* Free the calling thread's read scratch and token cache (thread exit). */
void store_thread_done(void);
/* All of @f at @level (@len bytes, its size there) from bytes that are local already,
 * without counting it as a reader's (no open, no record-by-record rule). @return the
 * bytes; -EAGAIN some are not local (nothing was read from the source: the record
 * not checked yet, held as failing, or its bytes not cached), -EIO a checksum. */
ssize_t store_pread_local(struct pcr_store *s, const struct pcr_file *f, unsigned level, void *buf,
                          size_t len);

/* ahead.c */
void store_ahead_free(struct pcr_store *s);
/* A new visit of @r (its prefix advised): its files may be handed ahead again. */
void store_ahead_visit(struct rec *r, uint64_t prefix);

/* store.c */
/* Open (through the backend) the object of record @r, once. */
int store_open_record(struct pcr_store *s, struct rec *r);
/* A record that failed on the network is held as failing for the backend's
 * fail_hold_ms: store_rec_gate() says -EIO at once while it is held, and
 * lets ONE caller through to probe it once the hold has passed (the others keep
 * failing at once meanwhile); store_rec_failed() starts a hold, store_rec_ok() ends
 * it. */
int store_rec_gate(struct pcr_store *s, struct rec *r);
void store_rec_failed(struct pcr_store *s, struct rec *r);
void store_rec_ok(struct rec *r);

#endif
