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
#include "util/fsio.h"
#include "util/sbuf.h"
#include "util/xalloc.h"

/* The program name used as the prefix of every message ("mkpcrfs"). */
extern const char *tool_prog;

/* Called before the program exits on an allocation failure (from any thread), to
 * remove what it was writing; NULL by default. */
extern void (*tool_oom_hook)(void);
/* Print "PROG: out of memory", run tool_oom_hook and exit 1. */
void tool_oom(void) __attribute__((noreturn));

/* Allocation that exits on failure (tool_oom()), growable strings, displayable
 * names and source files: the tools' names for src/util's (xalloc.h, sbuf.h,
 * fsio.h), which the store library's build pipeline shares. */
#define tool_xmalloc      pcr_xmalloc
#define tool_xrealloc     pcr_xrealloc
#define tool_xstrdup      pcr_xstrdup
#define tool_grow         pcr_xgrow
#define tool_join         pcr_path_join
#define tool_buf          pcr_sbuf
#define tool_buf_reset    pcr_sbuf_reset
#define tool_buf_add      pcr_sbuf_add
#define tool_buf_reserve  pcr_sbuf_reserve
#define tool_buf_free     pcr_sbuf_free
#define tool_escape       pcr_escape
#define tool_escaped      pcr_escaped
#define tool_open_noatime pcr_open_noatime
#define tool_open_rel     pcr_open_rel
#define tool_remove_tree  pcr_remove_tree

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

/* The value @s of option @name ("--jobs") as a whole number in [@min, @max], in the
 * strict syntax every program shares (util/optparse.h); anything else is a usage
 * error, "PROG: --jobs=0: want a whole number 1..256" (exits 2). */
uint64_t tool_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max);
/* The same for a pcr_opt_*() call that already ran: a usage error with its
 * message @msg unless @rc is 0. */
void tool_opt_check(int rc, const char *msg);

/* Monotonic seconds. */
double tool_now(void);

#endif
