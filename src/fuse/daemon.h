/* daemon.c: detaching so that the exit status tells the truth.
 *
 * libfuse's fuse_daemonize() lets the parent exit 0 as soon as the child has
 * forked, so what fails afterwards (the refurb workers, a cache directory, the kernel's
 * INIT) fails with nobody watching and the command has already said "mounted".
 * Here the parent waits: the child mounts, starts its threads and serves; the
 * first request it answers (INIT, from ops.c) is when it says "ready" through a
 * pipe. The parent then exits 0; if the pipe closes without that, it exits with the
 * child's status, whose message the child printed on the shared standard error. */
#ifndef PCRFS_DAEMON_H
#define PCRFS_DAEMON_H

#include <pthread.h>
#include <stdbool.h>

/* Detach (unless @foreground): fork; the parent waits as above and never returns;
 * the child starts a session of its own and returns 0. @on_up runs in the child
 * (or, in the foreground, in this process) when the mount is up and serving, just
 * before standard input, output and error go to /dev/null (detached only); it
 * switches the log away from the terminal.
 * @return 0, or -1 when fork() failed (message printed). */
int pcrfs_daemon_start(bool foreground, void (*on_up)(void));

/* The mount answered its first request (ops.c, INIT): tell the waiting parent, once.
 * Safe from any thread. */
void pcrfs_daemon_ready(void);

/* Whether pcrfs_daemon_ready() has run: before it, messages go to the terminal. */
bool pcrfs_daemon_is_up(void);

/* Start a helper thread of the session (dirahead.c, push.c) that takes no signal:
 * they are the session loop's (SIGTERM ends it). @return pthread_create()'s. */
int pcrfs_daemon_thread(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
