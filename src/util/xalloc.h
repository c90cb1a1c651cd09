/* pcrfs util — allocation that does not return on failure, for code that holds no
 * state worth unwinding (the tools), and allocation that returns NULL, for the store
 * library's build pipeline, which must not end its caller's process. Also growable
 * arrays and "REL/NAME".
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

/* The same, returning NULL instead of calling pcr_oom(): for the library, which
 * unwinds and returns -ENOMEM. A size of 0 allocates one byte, so NULL always
 * means failure; pcr_try_grow() leaves @p and *@cap as they were when it fails. */
void *pcr_try_malloc(size_t n);
void *pcr_try_realloc(void *p, size_t n);
char *pcr_try_strdup(const char *s);
void *pcr_try_grow(void *p, uint64_t *cap, uint64_t first, size_t size);
char *pcr_try_path_join(const char *rel, const char *name);

/* Fault injection, for tests only (no environment variable or option reaches it):
 * pcr_try_count counts the pcr_try_*() allocations (from any thread); when
 * pcr_try_fail_from is nonzero, the allocation that brings the count to it fails,
 * and so does every one after it. */
extern unsigned long pcr_try_fail_from;
extern unsigned long pcr_try_count;
/* How many failures were tolerated by design (pcr_escape()'s fixed text), so that
 * a test tells them from failures a caller ignored. */
extern unsigned long pcr_try_tolerated;

#endif
