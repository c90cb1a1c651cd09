/* pcrfs tools — helpers shared by mkpcrfs and pcrinfo: messages, the library's log
 * hook, allocation that exits on failure, escaping of arbitrary byte names for
 * display, and option parsing.
 *
 * tool.c owns stderr: every message goes through tool_err()/tool_warn(), which
 * first erase the status line (the progress bar, progress.h, draws through
 * tool_status_show()) and print under one lock, so that lines from several threads
 * never mix and never glue onto the bar.
 */
#ifndef PCRFS_TOOL_H
#define PCRFS_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "pcrfs/pcrfs.h"

/* The program name used as the prefix of every message ("mkpcrfs"). */
extern const char *tool_prog;

/* Called before the program exits on an allocation failure (from any thread), to
 * remove what it was writing; NULL by default. */
extern void (*tool_oom_hook)(void);
/* Print "PROG: out of memory", run tool_oom_hook and exit 1. */
void tool_oom(void) __attribute__((noreturn));

/* Allocation that exits on failure (tool_oom()); a size of 0 allocates one byte,
 * so the result is never NULL. */
void *tool_xmalloc(size_t n);
void *tool_xrealloc(void *p, size_t n);
char *tool_xstrdup(const char *s);
/* Grow the array @p of @size-byte elements: *@cap doubles (becomes @first when 0).
 * @return the reallocated array. */
void *tool_grow(void *p, uint64_t *cap, uint64_t first, size_t size);
/* "REL/NAME" (or NAME when REL is "", the root), malloc()ed. */
char *tool_join(const char *rel, const char *name);

/* "PROG: MESSAGE\n" on stderr. */
void tool_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PROG: warning: MESSAGE\n" on stderr. */
void tool_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The usage error: "PROG: MESSAGE" and a hint to --help on stderr; exits 2. */
void tool_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Report the getopt_long() error @c ('?' or ':', with opterr = 0 and an option
 * string starting with ':') as a usage error; exits 2. */
void tool_getopt_error(int c, char **argv) __attribute__((noreturn));

/* Install the library's log hook: messages go to stderr prefixed with the program
 * name; @verbose also shows PCR_LOG_INFO and PCR_LOG_DEBUG. */
void tool_log_init(bool verbose);

/* The status line: a transient last line on stderr (the progress bar) that every
 * message erases first and the next tool_status_show() brings back. Show @line
 * (one line, no newline; it replaces the previous one), or erase it for good. */
void tool_status_show(const char *line);
void tool_status_clear(void);

/* A growable string, for escaped names and paths. */
struct tool_buf {
    char *s;
    size_t len, cap;
};
void tool_buf_reset(struct tool_buf *b);
void tool_buf_add(struct tool_buf *b, const void *data, size_t len);
/* Make room for a string of @len bytes (plus its NUL). */
void tool_buf_reserve(struct tool_buf *b, size_t len);
void tool_buf_free(struct tool_buf *b);

/* Append @len bytes of @name to @b in displayable form (pcr_utf8_escape(),
 * util/utf8.h). */
void tool_escape(struct tool_buf *b, const char *name, size_t len);
/* Reset @b, escape the NUL-terminated @name into it and return b->s. */
const char *tool_escaped(struct tool_buf *b, const char *name);

/* The value @s of option @name ("--jobs") as a whole number in [@min, @max], in the
 * strict syntax every program shares (util/optparse.h); anything else is a usage
 * error, "PROG: --jobs=0: want a whole number 1..256" (exits 2). */
uint64_t tool_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max);
/* The same for a pcr_opt_*() call that already ran: a usage error with its
 * message @msg unless @rc is 0. */
void tool_opt_check(int rc, const char *msg);

/* Monotonic seconds. */
double tool_now(void);

/* Open without touching access times where the kernel allows (O_NOATIME falls back
 * when refused), and open a path relative to @base that may be longer than the
 * kernel takes at once. Both return a descriptor or -1 with errno. */
int tool_open_noatime(int dirfd, const char *path, int flags);
/* Remove the tree @path (a directory and everything under it, or a file) without
 * following symbolic links. Not thread-safe. @return 0, or the first negative
 * errno met (the rest is still attempted). */
int tool_remove_tree(const char *path);
int tool_open_rel(int base, const char *rel, int flags);

#endif
