/* pcrfs — opening a store in object storage (pcr_store_open_url()): the URL picks
 * the backend (s3://, http://, https://: all the HTTP backend's, which parses them),
 * the backend brings index.db to a local file (backend/httpstore.c), and the store
 * opens on that index with the backend for its records, as a local store does
 * (store.c). The store layer calls down into the backend, never the reverse.
 *
 * A copy of index.db from an earlier mount that does not open as an index (damaged
 * on disk after its hash was checked, or written by an older pcrfs) is forgotten
 * and fetched again, once.
 */
#include <errno.h>
#include <unistd.h>
#include "common/internal.h"
#include "pcrfs/backend.h"
#include "pcrfs/store.h"

static int open_url(const char *url, const struct pcr_http_opts *o, struct pcr_store **out,
                    char *err, size_t errlen, bool again)
{
    struct pcr_backend *b = NULL;
    struct pcr_http_index ix;
    int ret;

    /* every URL store is the HTTP backend's; it refuses another scheme, and a URL
     * with user-info without repeating it (backend/url.c) */
    ret = pcr_backend_http(url, o, &b, err, errlen);
    if (ret)
        return ret;
    ret = pcr_backend_http_fetch_index(b, o, again, &ix, err, errlen);
    if (ret) {
        pcr_backend_destroy(b);
        return ret;
    }
    ret = pcr_store_open_backend(url, ix.path, b, out, err, errlen);
    if (ix.temp)
        unlink(ix.path); /* SQLite keeps it open; nothing is left behind */
    if (ret && ix.cached && !again) {
        pcr_log(PCR_LOG_WARN,
                "cache %s: the copy of index.db does not validate (%s); "
                "fetched again",
                ix.dir, err);
        pcr_backend_http_forget_index(&ix);
        return open_url(url, o, out, err, errlen, true);
    }
    return ret;
}

int pcr_store_open_url(const char *url, const struct pcr_http_opts *o, struct pcr_store **out,
                       char *err, size_t errlen)
{
    return open_url(url, o, out, err, errlen, false);
}
