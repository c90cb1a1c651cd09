/* pcrfs — one deadline per reader's operation (include/pcrfs/backend.h).
 *
 * The store marks the start and the end of what the calling thread does for a
 * reader (store/read.c: an open, a read, an open-less read); every request an
 * object-storage backend makes meanwhile (open a record, read its header, its
 * bytes, retries) reads the start and shares one deadline from there
 * (backend/httpxfer.c). The clock lives here, below both, so that the backend never
 * calls up into the store for it. Nested operations keep the outer start.
 *
 * An operation begun with pcr_backend_op_begin_local() may take bytes only from what
 * is local already (the page cache of a local store, the cache of a remote one): a
 * backend answers -EAGAIN rather than wait on a disk or ask a server
 * (pcr_backend_op_local()). The store's files handed ahead are read so
 * (store/ahead.c): they must never add a read of their own to the disk's queue or the
 * network's.
 */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include "pcrfs/backend.h"

static __thread uint64_t op_start;
static __thread unsigned op_depth;
static __thread bool op_local;

uint64_t pcr_backend_op_start(void)
{
    return op_depth ? op_start : 0;
}

void pcr_backend_op_begin(void)
{
    struct timespec ts;

    if (op_depth++)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    op_start = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void pcr_backend_op_begin_local(void)
{
    pcr_backend_op_begin();
    if (op_depth == 1)
        op_local = true;
}

bool pcr_backend_op_local(void)
{
    return op_depth && op_local;
}

void pcr_backend_op_end(void)
{
    if (--op_depth == 0)
        op_local = false;
}
