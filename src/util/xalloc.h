/* pcrfs util — allocation that does not return on failure, for code that holds no
 * state worth unwinding (the tools, and the store library's build pipeline, which
 * removes its temporary store from the hook). Also growable arrays and "REL/NAME".
 */
#ifndef PCRFS_UTIL_XALLOC_H
#define PCRFS_UTIL_XALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Called when an allocation fails (from any thread); it must not return. NULL (the
 * default): "out of memory" on stderr, then exit(1). Each program (and
 * libpcrfs.so, which carries its own copy of this file) sets its own. */
extern void (*pcr_oom_hook)(void);
/* Run the hook (or the default). */
void pcr_oom(void) __attribute__((noreturn));

/* A size of 0 allocates one byte, so the result is never NULL. */
void *pcr_xmalloc(size_t n);
void *pcr_xrealloc(void *p, size_t n);
char *pcr_xstrdup(const char *s);
/* Grow the array @p of @size-byte elements: *@cap doubles (becomes @first when 0).
 * @return the reallocated array. */
void *pcr_xgrow(void *p, uint64_t *cap, uint64_t first, size_t size);
/* "REL/NAME" (or NAME when REL is "", the root), malloc()ed. */
char *pcr_path_join(const char *rel, const char *name);

#endif
