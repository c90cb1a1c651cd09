/* pcrfs — the process's list of object-storage transports (httpstats.c), which
 * pcr_http_stats() and pcr_http_creds_json() sum over every open store. Below
 * http.c, which puts each backend's transport on it; private to src/lib/backend.
 */
#ifndef PCRFS_HTTPSTATS_H
#define PCRFS_HTTPSTATS_H

#include "backend/httpxfer.h"

/* One transport on the list, embedded in whatever owns it (struct http_backend). */
struct http_stats_entry {
    const struct http_transport *x;
    struct http_stats_entry *next;
};

/* Add @x, through @e, to (remove @e from) the list. */
void http_stats_register(struct http_stats_entry *e, const struct http_transport *x);
void http_stats_unregister(struct http_stats_entry *e);

#endif
