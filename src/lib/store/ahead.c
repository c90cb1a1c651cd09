/* pcrfs — the files a reader will want next, for a daemon that hands them to the
 * kernel's page cache before they are asked for (pcrfs_node_ahead(), pcrfs(1)
 * -o push).
 *
 * Why: a mount read from a list in record order (RecordSampler) costs one READ round
 * trip per file even when the file's bytes are in memory: 0.10-0.14 ms on the
 * virtual machines measured, against 0.03 ms for a file the kernel holds. When the
 * store reads a record ahead (it was hinted, or its reader was seen going record by
 * record: read.c, seq_note()), the next files are known and their bytes arrive
 * anyway, so the daemon can hand them over while the reader is busy elsewhere.
 *
 * What is handed: when a reader opens file F of record R at level K and R's prefix
 * at K was advised, the files of F's directory that lie in R and that no reader has
 * opened yet become a task. Its files are read in id order (their bytes become local
 * in about that order: each lies further into every scan group) from local bytes
 * only (store_pread_local(): the page cache, asked with mincore(2) before an
 * RWF_NOWAIT read, or the object-storage cache), never from the disk's queue or a
 * server: a file whose bytes are not local yet waits, the task with it, and the
 * caller is told to come back (-EAGAIN). So the work follows the record readahead,
 * and is never a read of its own.
 *
 * Why a directory and a record, not a record alone: the index keeps no list of a
 * record's files (its rows are ordered by directory, pcrfs(5)); a directory's files
 * are contiguous ids and loaded once. Our builder makes records from files in
 * directory order, so a directory lies in one or two records and its task covers
 * what the reader reads there. A store whose records mix directories gets tasks for
 * the directories its reader reaches.
 *
 * Bounds: AHEAD_TASKS tasks (the oldest is replaced), a task that made no progress
 * for AHEAD_IDLE_MS is dropped (its record was evicted or its reader moved on), and
 * a file is handed at most once per visit of its record (each advice of the record
 * starts one, rec.visit: the next epoch reads it again; pcr_file.served holds the
 * visit it was opened or handed in). The caller's buffer bounds a file's size.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include "state.h"

#define AHEAD_TASKS 64
/* (long enough for a record queued behind others in object storage to bring its first
 * part; the daemon then looks every few ms, a mincore(2) per waiting task) */
#define AHEAD_IDLE_MS 10000u

struct ahead_task {
    uint64_t dir;    /* 0: a free slot */
    uint32_t record; /* the record its files must lie in */
    uint8_t visit;   /* ...in this visit of it */
    unsigned level;  /* read at */
    unsigned tag;    /* the caller's (the view: which node numbers) */
    uint64_t next;   /* the next file id to try */
    uint64_t end;    /* past the directory's last file id */
    uint64_t moved;  /* ms (monotonic) of its last file handed, or its start */
    uint64_t gen;    /* changes when the slot is given to another task */
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void pcr_store_ahead_note(struct pcr_store *s, const struct pcr_file *f, unsigned level,
                          unsigned tag)
{
    struct rec *r = &s->recs[f->record - 1];
    uint64_t advised;
    uint8_t visit;
    const struct dir *d;
    struct ahead_task *t, *slot = NULL;

    advised = __atomic_load_n(&r->advised, __ATOMIC_ACQUIRE);
    visit = __atomic_load_n(&r->visit, __ATOMIC_ACQUIRE);
    __atomic_store_n(&((struct pcr_file *)f)->served, visit, __ATOMIC_RELAXED);
    if (!visit || advised < rec_prefix(s, r, level) || f->kind == PCR_KIND_TOKENS || !f->dir ||
        f->dir > s->ndirs)
        return; /* its record is not read ahead that far: its files are not coming */
    d = &s->dirs[f->dir - 1];
    pthread_mutex_lock(&s->ahead_lock);
    if (!s->ahead && !(s->ahead = calloc(AHEAD_TASKS, sizeof(*s->ahead))))
        goto out;
    for (unsigned i = 0; i < AHEAD_TASKS; i++) {
        t = &s->ahead[i];
        if (t->dir == f->dir && t->record == f->record && t->visit == visit && t->level == level &&
            t->tag == tag)
            goto out; /* (also one whose files were all tried: not again) */
        if (!slot || !t->dir || (slot->dir && t->moved < slot->moved))
            slot = t;
    }
    *slot = (struct ahead_task){.dir = f->dir,
                                .record = f->record,
                                .visit = visit,
                                .level = level,
                                .tag = tag,
                                .next = d->first_file,
                                .end = d->first_file + d->nfiles,
                                .moved = now_ms(),
                                .gen = ++s->ahead_gen};
out:
    pthread_mutex_unlock(&s->ahead_lock);
}

int pcr_store_ahead_next(struct pcr_store *s, void *buf, size_t cap, uint64_t *id, size_t *len,
                         unsigned *tag)
{
    uint64_t now = now_ms();
    bool waiting = false;
    int ret = 0;

    pthread_mutex_lock(&s->ahead_lock);
    for (unsigned k = 0; s->ahead && k < AHEAD_TASKS && ret == 0; k++) {
        unsigned at = (s->ahead_turn + k) % AHEAD_TASKS;
        struct ahead_task *t = &s->ahead[at];

        if (t->dir && t->next < t->end && now - t->moved > AHEAD_IDLE_MS)
            t->dir = 0; /* stalled: its record left the cache, or its reader moved on */
        while (t->dir && t->next < t->end) {
            const struct pcr_file *f;
            struct ahead_task mine = *t;
            uint64_t size;
            ssize_t n;

            if (pcr_store_file(s, t->next, &f) != 0 || f->record != t->record ||
                __atomic_load_n(&f->served, __ATOMIC_RELAXED) == t->visit ||
                __atomic_load_n(&f->damaged, __ATOMIC_RELAXED) ||
                (size = pcr_file_size(f, t->level)) == 0 || size > cap) {
                t->next++;
                continue;
            }
            /* read without the lock: a reader's open notes its file meanwhile */
            pthread_mutex_unlock(&s->ahead_lock);
            n = store_pread_local(s, f, mine.level, buf, (size_t)size);
            pthread_mutex_lock(&s->ahead_lock);
            if (n == -EAGAIN) {
                waiting = true; /* the rest of the record is further still */
                break;
            }
            if (t->gen == mine.gen)
                t->next++;
            if (n == (ssize_t)size &&
                __atomic_exchange_n(&((struct pcr_file *)f)->served, mine.visit,
                                    __ATOMIC_RELAXED) != mine.visit) {
                if (t->gen == mine.gen)
                    t->moved = now;
                *id = f->id;
                *len = (size_t)size;
                *tag = mine.tag;
                s->ahead_turn = at; /* the same task first next time */
                ret = 1;
                break;
            }
            if (t->gen != mine.gen)
                break; /* the slot went to another task meanwhile */
        }
    }
    pthread_mutex_unlock(&s->ahead_lock);
    return ret ? ret : waiting ? -EAGAIN : 0;
}

void store_ahead_visit(struct rec *r, uint64_t prefix)
{
    uint8_t v = __atomic_load_n(&r->visit, __ATOMIC_RELAXED);

    /* (two advisers at once may both count one: a visit more, a file handed twice) */
    __atomic_store_n(&r->visit, v == UINT8_MAX ? 1 : v + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&r->advised, prefix, __ATOMIC_RELEASE);
}

void store_ahead_free(struct pcr_store *s)
{
    free(s->ahead);
    s->ahead = NULL;
}
