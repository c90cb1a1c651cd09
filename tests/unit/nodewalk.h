/* The unit tests' walk over the library's nodes (pcrfs.h, "Serving the tree"): the
 * node of a path, one lookup per component from the root, as a kernel walks it. */
#ifndef PCRFS_TEST_NODEWALK_H
#define PCRFS_TEST_NODEWALK_H

#include <stdio.h>
#include <string.h>
#include "pcrfs/pcrfs.h"

/* The node of @path ("full/a/x.JPEG"). 0: none. */
static inline uint64_t walk(pcrfs_store *s, const char *path)
{
    char buf[4096], *save = NULL, *c;
    uint64_t n = PCRFS_NODE_ROOT;

    snprintf(buf, sizeof(buf), "%s", path);
    for (c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save))
        if (pcrfs_node_lookup(s, n, c, &n) != 1)
            return 0;
    return n;
}

#endif
