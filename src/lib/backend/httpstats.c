/* pcrfs — the process's list of object-storage backends, for pcr_http_stats() and
 * the credentials part of /.pcrfs/stats: the sums over every open store.
 */
#include <errno.h>
#include <string.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/http_internal.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_backend *registry;

void http_stats_register(struct http_backend *hb)
{
    pthread_mutex_lock(&registry_lock);
    hb->next = registry;
    registry = hb;
    pthread_mutex_unlock(&registry_lock);
}

void http_stats_unregister(struct http_backend *hb)
{
    pthread_mutex_lock(&registry_lock);
    for (struct http_backend **p = &registry; *p; p = &(*p)->next)
        if (*p == hb) {
            *p = hb->next;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
}

int pcr_http_creds_json(char *out, size_t len)
{
    int ret = -ENOENT;

    pthread_mutex_lock(&registry_lock);
    for (struct http_backend *hb = registry; hb; hb = hb->next)
        if (hb->x.t.creds) {
            http_creds_json(hb->x.t.creds, out, len);
            ret = 0;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return ret;
}

int pcr_http_stats(struct pcr_http_stats *out)
{
    int ret = -ENOENT;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&registry_lock);
    for (struct http_backend *hb = registry; hb; hb = hb->next) {
        const uint64_t *src = (const uint64_t *)&hb->x.st;
        uint64_t *dst = (uint64_t *)out;
        for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
            dst[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
        ret = 0;
    }
    pthread_mutex_unlock(&registry_lock);
    return ret;
}
