/* pcrfs tools — a one-line progress bar on stderr.
 *
 * Only the thread that calls progress_update() draws. The bar is formatted here and
 * shown as tool.c's status line (tool_status_show()), so any thread may print a
 * message in between through tool_err()/tool_warn(), which erase the bar first; the
 * bar comes back at the next update.
 */
#ifndef PCRFS_PROGRESS_H
#define PCRFS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* Start a bar for @total_files files of @total_bytes bytes. Without @enabled
 * every other call is a no-op. */
void progress_start(bool enabled, uint64_t total_files, uint64_t total_bytes);
/* @files and @bytes done so far; redraws at most every 100 ms unless @force. */
void progress_update(uint64_t files, uint64_t bytes, bool force);
/* Erase the bar for good (at the end, or before exiting on an error). */
void progress_finish(void);

#endif
