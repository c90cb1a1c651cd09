/* pcrfs — the worker threads' reply buffer (fs.h: pcrfs_tls_buf()). */
#include <pthread.h>
#include <stdlib.h>

#include "fs.h"

#define TLS_BUF_MIN (128u << 10)

/* ---- the read buffer --------------------------------------------------------------
 *
 * READ replies are assembled in a buffer that belongs to the worker thread: grown to
 * the largest request seen (the kernel asks at most max_pages at a time, 1 MiB with
 * libfuse 3.14), never shrunk, freed by the key's destructor when libfuse retires the
 * thread. A READ therefore allocates nothing. READDIR replies use it too (a worker
 * handles one request at a time, and the reply is copied out before it returns).
 */
struct tls_buf {
    char *p;
    size_t cap;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static __thread struct tls_buf *tls;

static void tls_free(void *arg)
{
    struct tls_buf *b = arg;

    if (b) {
        free(b->p);
        free(b);
    }
}

static void tls_key_init(void)
{
    if (pthread_key_create(&tls_key, tls_free) != 0)
        abort(); /* only fails when the process is out of keys: nothing to recover */
}

char *pcrfs_tls_buf(size_t size)
{
    struct tls_buf *b = tls;
    size_t cap;
    char *p;

    if (!b) {
        pthread_once(&tls_once, tls_key_init);
        b = calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        if (pthread_setspecific(tls_key, b) != 0) {
            free(b);
            return NULL;
        }
        tls = b;
    }
    if (size > b->cap || !b->p) {
        for (cap = b->cap ? b->cap : TLS_BUF_MIN; cap < size; cap *= 2)
            ;
        p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

void pcrfs_ops_thread_done(void)
{
    if (tls) {
        pthread_setspecific(tls_key, NULL);
        tls_free(tls);
        tls = NULL;
    }
}
