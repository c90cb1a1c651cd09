/* pcrfs — the library's log hook.
 *
 * The store library never prints. Every diagnostic goes through one hook that the
 * program installs: the daemon sends it to stderr in the foreground and to syslog
 * when detached, the tools to stderr. Without a hook, messages are dropped.
 */
#ifndef PCRFS_LOG_H
#define PCRFS_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum pcr_log_level {
    PCR_LOG_ERR = 0,  /* an operation failed (a record is damaged, a row rejected) */
    PCR_LOG_WARN = 1, /* the operation went on in a degraded way (file stored verbatim) */
    PCR_LOG_INFO = 2,
    PCR_LOG_DEBUG = 3,
};

/* @msg is one line without a trailing newline; it is only valid during the call. */
typedef void (*pcr_log_fn)(enum pcr_log_level level, const char *msg, void *ctx);

/* Install the hook (NULL drops everything). Not thread-safe against concurrent
 * logging: call it once, before any other pcr_* function. Messages above
 * @max_level are not formatted at all. */
void pcr_log_set_hook(pcr_log_fn fn, void *ctx, enum pcr_log_level max_level);

#ifdef __cplusplus
}
#endif
#endif
