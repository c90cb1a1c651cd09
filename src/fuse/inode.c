/* pcrfs — inode numbers and the /.pcrfs/stats snapshots (inode.h says why). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "inode.h"
#include "pcrfs/pcrfs.h"

#define GEN_MASK (PCRFS_NODE_GEN_MAX << PCRFS_NODE_GEN_SHIFT)

void pcrfs_snaps_init(struct snaps *r, uint64_t stats_node)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->lock, NULL);
    r->stats_node = stats_node;
}

void pcrfs_snaps_free(struct snaps *r)
{
    for (size_t i = 0; i < PCRFS_MAX_SNAPS; i++) {
        free(r->slot[i]);
        r->slot[i] = NULL;
    }
}

bool pcrfs_ino_is_snap(const struct snaps *r, uint64_t ino)
{
    return r->stats_node && (ino & GEN_MASK) != 0 && (ino & ~GEN_MASK) == r->stats_node;
}

uint64_t pcrfs_ino_node(const struct snaps *r, uint64_t ino)
{
    return pcrfs_ino_is_snap(r, ino) ? r->stats_node : ino;
}

int pcrfs_snaps_add(struct snaps *r, const char *data, size_t len, uint64_t *ino)
{
    struct stat_snap *sn = malloc(sizeof(*sn) + len), *old;

    *ino = 0;
    if (!sn)
        return -ENOMEM;
    memcpy(sn->data, data, len);
    sn->len = len;
    sn->nlookup = 1;
    pthread_mutex_lock(&r->lock);
    if (!r->stats_node || r->gen >= PCRFS_NODE_GEN_MAX) {
        pthread_mutex_unlock(&r->lock);
        free(sn);
        return -EOVERFLOW;
    }
    sn->gen = ++r->gen;
    old = r->slot[sn->gen % PCRFS_MAX_SNAPS];
    r->slot[sn->gen % PCRFS_MAX_SNAPS] = sn;
    pthread_mutex_unlock(&r->lock);
    free(old);
    *ino = r->stats_node | (sn->gen << PCRFS_NODE_GEN_SHIFT);
    return 0;
}

/* Under the lock: the live snapshot of @ino, or NULL (forgotten or evicted). */
static struct stat_snap *snap_find(struct snaps *r, uint64_t ino)
{
    uint64_t gen = (ino & GEN_MASK) >> PCRFS_NODE_GEN_SHIFT;
    struct stat_snap *sn;

    if (!pcrfs_ino_is_snap(r, ino))
        return NULL;
    sn = r->slot[gen % PCRFS_MAX_SNAPS];
    return sn && sn->gen == gen ? sn : NULL;
}

int pcrfs_snaps_read(struct snaps *r, uint64_t ino, char *buf, size_t size, uint64_t off,
                     size_t *outlen, size_t *len)
{
    struct stat_snap *sn;
    size_t n = 0;

    pthread_mutex_lock(&r->lock);
    sn = snap_find(r, ino);
    if (sn && off < sn->len && size) {
        n = sn->len - (size_t)off < size ? sn->len - (size_t)off : size;
        memcpy(buf, sn->data + off, n);
    }
    if (sn && len)
        *len = sn->len;
    pthread_mutex_unlock(&r->lock);
    if (outlen)
        *outlen = n;
    return sn ? 0 : -ESTALE;
}

void pcrfs_snaps_forget(struct snaps *r, uint64_t ino, uint64_t nlookup)
{
    struct stat_snap *sn;

    if (!pcrfs_ino_is_snap(r, ino))
        return; /* every other inode is stateless */
    pthread_mutex_lock(&r->lock);
    sn = snap_find(r, ino);
    if (sn && sn->nlookup > nlookup) {
        sn->nlookup -= nlookup;
        sn = NULL;
    } else if (sn) {
        r->slot[sn->gen % PCRFS_MAX_SNAPS] = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    free(sn);
}
