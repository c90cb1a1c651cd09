/* pcrfs — the leaf of src/lib/backend's HTTP code (httpbase.c): what the transport
 * and the credential providers both use, so that neither reaches into the other's
 * layer. Includes nothing of the backend's own.
 */
#ifndef PCRFS_HTTPBASE_H
#define PCRFS_HTTPBASE_H

#include <stdint.h>
#include <curl/curl.h>

/* What every handle of the backend has: no signals, http(s) only, no redirects
 * followed, our User-Agent. */
void http_handle_defaults(CURL *h);
/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t http_now_ms(void);
static inline void http_count(uint64_t *ctr, uint64_t n)
{
    __atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

#endif
