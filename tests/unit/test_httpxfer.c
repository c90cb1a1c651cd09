/* Unit test of the object-storage transport's settings (httpxfer.c): what
 * http_xfer_init() makes of the part size and the connection count it is given. The
 * option parser (store/opts.c) refuses a part size below PCR_HTTP_PART_SIZE_MIN and
 * more than PCR_HTTP_CONNECTIONS_MAX connections; a library caller filling struct
 * pcr_http_opts itself gets the same bounds here, which httpcache.c relies on. */
#include <stdio.h>
#include <string.h>
#include "backend/httpxfer.h"
#include "check.h"

/* The transport's part size and connections for @part_size, @connections. */
static void settings(uint64_t part_size, unsigned connections, uint64_t *ps, unsigned *n)
{
    struct pcr_http_opts o;
    struct http_transport tp;

    memset(&o, 0, sizeof(o));
    memset(&tp, 0, sizeof(tp));
    o.retries = -1;
    o.part_size = part_size;
    o.connections = connections;
    CHECK(http_xfer_init(&tp, &o) == 0, "http_xfer_init");
    *ps = tp.part_size;
    *n = tp.nconn;
    http_xfer_fini(&tp);
}

int main(void)
{
    uint64_t ps;
    unsigned n;

    settings(0, 0, &ps, &n);
    CHECK(ps == HTTP_DEFAULT_PART_SIZE && n == HTTP_DEFAULT_CONNECTIONS,
          "defaults: %llu bytes, %u connections", (unsigned long long)ps, n);
    settings(1000, 1000, &ps, &n);
    CHECK(ps == PCR_HTTP_PART_SIZE_MIN, "a part size of 1000 is raised to %llu",
          (unsigned long long)ps);
    CHECK(n == PCR_HTTP_CONNECTIONS_MAX, "1000 connections are capped at %u", n);
    settings(PCR_HTTP_PART_SIZE_MIN, 1, &ps, &n);
    CHECK(ps == PCR_HTTP_PART_SIZE_MIN && n == 1, "the bounds themselves are kept");
    return check_done("httpxfer");
}
