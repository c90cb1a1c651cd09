/* pcrfs util — the one UTF-8 validator of the tools and the FUSE driver.
 *
 * Store paths, index values and source names are arbitrary bytes; whatever shows
 * them (JSON, messages) needs to know where well-formed UTF-8 is.
 */
#ifndef PCRFS_UTIL_UTF8_H
#define PCRFS_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence at @p, at most @n (>= 1) bytes,
 * with its code point in *@cp (may be NULL); 0 if there is none: a stray
 * continuation byte, an overlong form, a surrogate, a code point above U+10FFFF, or a
 * sequence cut short by @n. An ASCII byte (NUL included) is a sequence of 1. */
size_t pcr_utf8_seq(const unsigned char *p, size_t n, uint32_t *cp);

/* Room pcr_utf8_escape() needs for @len bytes: each may become "\xNN". */
#define PCR_UTF8_ESCAPE_MAX(len) (4 * (len) + 1)

/* @len bytes of @name in displayable form into @out (PCR_UTF8_ESCAPE_MAX(@len)
 * bytes), NUL-terminated: well-formed UTF-8 other than control characters is kept,
 * every other byte becomes "\xNN" and a backslash "\\", so a name that is not text
 * (or holds a newline or a tab) still prints on one line and different names never
 * print the same. What the tools print and the library's summary shows.
 * @return the length written (without the NUL). */
size_t pcr_utf8_escape(char *out, const char *name, size_t len);

#endif
