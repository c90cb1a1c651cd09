/* pcrfs — the leaf of the object-storage backend: what every HTTP user in
 * src/lib/backend shares (the transport, the credential providers): the clock and
 * the defaults of a libcurl handle. Calls nothing above it (httpbase.h).
 */
#include <time.h>
#include "common/internal.h"
#include "backend/httpbase.h"

uint64_t http_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void http_handle_defaults(CURL *h)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* no Authorization to another host */
    curl_easy_setopt(h, CURLOPT_USERAGENT, "pcrfs/" PCR_VERSION);
}
