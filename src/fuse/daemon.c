/* The daemon's detach, with a parent that waits for the mount to serve (daemon.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"

static int ready_fd = -1; /* the pipe's write end (child), or -1 */
static atomic_bool up;    /* pcrfs_daemon_ready() ran */
static bool detached;     /* forked: stdio goes to /dev/null when up */
static void (*up_hook)(void);

/* The parent: wait for 'R' (exit 0) or the end of the pipe (the child's status). */
static _Noreturn void wait_for_child(pid_t pid, int fd)
{
    char c = 0;
    ssize_t n;
    int st;

    /* Ctrl-C now ends only this waiting process; the child has its own session */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    do
        n = read(fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1 && c == 'R')
        _exit(0);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "pcrfs: the daemon stopped before the mount was up\n");
            _exit(1);
        }
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        _exit(WEXITSTATUS(st)); /* its message is on standard error already */
    if (WIFSIGNALED(st))
        fprintf(stderr,
                "pcrfs: the daemon was killed by signal %d (%s) before the mount "
                "was up\n",
                WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        fprintf(stderr, "pcrfs: the daemon stopped before the mount was up\n");
    _exit(1);
}

int pcrfs_daemon_start(bool foreground, void (*on_up)(void))
{
    int p[2];
    pid_t pid;

    up_hook = on_up;
    if (foreground)
        return 0;
    fflush(NULL); /* nothing buffered is written twice */
    if (pipe2(p, O_CLOEXEC) != 0) {
        fprintf(stderr, "pcrfs: cannot detach: pipe: %s\n", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "pcrfs: cannot detach: fork: %s\n", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid > 0) {
        close(p[1]);
        wait_for_child(pid, p[0]);
    }
    close(p[0]);
    ready_fd = p[1];
    detached = true;
    setsid(); /* no terminal's signals; cannot fail in a fresh child */
    /* every path the daemon uses was made absolute before (mountcheck.c) */
    (void)!chdir("/");
    return 0;
}

void pcrfs_daemon_ready(void)
{
    int fd;

    if (atomic_exchange(&up, true))
        return;
    if (up_hook)
        up_hook();
    if (!detached)
        return;
    fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2)
            close(fd);
    }
    (void)!write(ready_fd, "R", 1);
    close(ready_fd);
    ready_fd = -1;
}

bool pcrfs_daemon_is_up(void)
{
    return atomic_load(&up);
}

int pcrfs_daemon_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
