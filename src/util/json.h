/* pcrfs util — the one JSON writer of the tools (pcrinfo --json, the build summary)
 * and the library's views (the info and stats JSON of a mount and of pcrfs(3)).
 *
 * Output goes to a FILE or into a growing buffer. Strings are escaped one way
 * everywhere: '"' and '\' with a backslash, control characters (U+0000..U+001F and
 * DEL) as \u00XX, well-formed UTF-8 kept as is, and every byte that is not part of
 * well-formed UTF-8 becomes U+FFFD ("\ufffd"), so that the output always parses
 * whatever bytes a store or a source tree holds. Numbers: integers exactly, doubles
 * with a given precision, NaN and infinities as null (JSON has none).
 *
 * Objects and arrays are the renderer's own text (pcr_json_raw(), pcr_json_printf()):
 * every renderer writes its own layout, so the writer keeps no nesting.
 *
 * Not thread-safe per writer; a writer is cheap, make one per rendering.
 */
#ifndef PCRFS_UTIL_JSON_H
#define PCRFS_UTIL_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct pcr_json {
    FILE *f; /* non-NULL: write here; else into p */
    char *p; /* the buffer (malloc()ed, NUL-terminated; the caller frees it) */
    size_t len, cap;
    bool oom; /* an allocation failed: the buffer is incomplete, report -ENOMEM */
};

/* A writer into @f, or (with NULL) into a growing buffer. */
void pcr_json_init(struct pcr_json *j, FILE *f);

/* Raw text, as is (layout, or JSON the caller built). */
void pcr_json_raw(struct pcr_json *j, const char *s, size_t n);
void pcr_json_puts(struct pcr_json *j, const char *s);
void pcr_json_printf(struct pcr_json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void pcr_json_vprintf(struct pcr_json *j, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* The values, with no separator: the caller writes the commas and colons. */
void pcr_json_str(struct pcr_json *j, const char *s);            /* NULL: null */
void pcr_json_strn(struct pcr_json *j, const char *s, size_t n); /* NUL bytes escaped */
/* @v with @prec digits after the point ("%.*f"); NaN and infinities: null. */
void pcr_json_double(struct pcr_json *j, double v, int prec);
void pcr_json_null(struct pcr_json *j);
/* A decimal integer given as text (an index value) as a number when it is one
 * (digits only, no leading zero, at most 18 digits), else as a string; NULL: null. */
void pcr_json_numtext(struct pcr_json *j, const char *s);

/* Only the escaping: the string literal of @n bytes at @s, quotes included. */
void pcr_json_quote(struct pcr_json *j, const char *s, size_t n);
/* The string literal of @s written to @f, for renderers that print the rest
 * themselves. */
void pcr_json_fquote(FILE *f, const char *s);

#endif
