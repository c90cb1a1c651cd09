/* pcrfs — the process's list of object-storage transports (httpstats.h), for
 * pcr_http_stats() and the credentials part of /.pcrfs/stats: the sums over every
 * open store. Knows the transport, not the backend above it.
 */
#include <errno.h>
#include <string.h>
#include "common/internal.h"
#include "backend/creds.h"
#include "backend/httpstats.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_stats_entry *registry;

void http_stats_register(struct http_stats_entry *e, const struct http_transport *x)
{
    e->x = x;
    pthread_mutex_lock(&registry_lock);
    e->next = registry;
    registry = e;
    pthread_mutex_unlock(&registry_lock);
}

void http_stats_unregister(struct http_stats_entry *e)
{
    pthread_mutex_lock(&registry_lock);
    for (struct http_stats_entry **p = &registry; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
}

int pcr_http_creds_json(char *out, size_t len)
{
    int ret = -ENOENT;

    pthread_mutex_lock(&registry_lock);
    for (const struct http_stats_entry *e = registry; e; e = e->next)
        if (e->x->t.creds) {
            http_creds_json(e->x->t.creds, out, len);
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
    for (const struct http_stats_entry *e = registry; e; e = e->next) {
        const uint64_t *src = (const uint64_t *)&e->x->st;
        uint64_t *dst = (uint64_t *)out;
        for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
            dst[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
        ret = 0;
    }
    pthread_mutex_unlock(&registry_lock);
    return ret;
}
