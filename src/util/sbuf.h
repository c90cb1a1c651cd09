/* pcrfs util — a growable string, and arbitrary byte names made displayable
 * (messages of the tools and of the store library's build pipeline).
 */
#ifndef PCRFS_UTIL_SBUF_H
#define PCRFS_UTIL_SBUF_H

#include <stddef.h>

struct pcr_sbuf {
    char *s;
    size_t len, cap;
};
void pcr_sbuf_reset(struct pcr_sbuf *b);
void pcr_sbuf_add(struct pcr_sbuf *b, const void *data, size_t len);
/* Make room for a string of @len bytes (plus its NUL). */
void pcr_sbuf_reserve(struct pcr_sbuf *b, size_t len);
/* The same without exiting (the library): 0, or -ENOMEM with @b as it was. */
int pcr_sbuf_try_add(struct pcr_sbuf *b, const void *data, size_t len);
int pcr_sbuf_try_reserve(struct pcr_sbuf *b, size_t len);
void pcr_sbuf_free(struct pcr_sbuf *b);

/* Append @len bytes of @name to @b in displayable form: well-formed UTF-8 other
 * than control characters is kept, every other byte becomes "\xNN" and a
 * backslash becomes "\\", so a name that is not text (or holds a newline or a tab)
 * still prints on one line and different names never print the same. */
/* Neither exits: out of memory, the name is replaced by PCR_ESCAPE_NOMEM (appended
 * only if @b has room for it), so that a message still prints; pcr_escape() then
 * returns -ENOMEM (0 otherwise), for a caller that builds more than a message. */
#define PCR_ESCAPE_NOMEM "(name not shown: out of memory)"
int pcr_escape(struct pcr_sbuf *b, const char *name, size_t len);
/* Reset @b, escape the NUL-terminated @name into it and return b->s (or the
 * constant PCR_ESCAPE_NOMEM). */
const char *pcr_escaped(struct pcr_sbuf *b, const char *name);

#endif
