/* Unit test of the object-store cache's default directory (httpstore.c): root's is
 * /var/cache/pcrfs; an ordinary user's $XDG_CACHE_HOME/pcrfs, else ~/.cache/pcrfs, and
 * without HOME (mount(8) at boot, a service) the home of the user's password entry
 * instead of no cache at all. The user cases run in a child that becomes the user
 * "nobody" (65534) when the test runs as root. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend/http_internal.h"
#include "check.h"

static int as_user(void)
{
    struct passwd *pw = getpwuid(geteuid());
    char dir[4096], want[4200];

    CHECK(pw && pw->pw_dir, "a password entry for uid %d", (int)geteuid());
    if (!pw || !pw->pw_dir)
        return check_done("cachedir");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/h", 1);
    CHECK(http_default_cache_dir(dir, sizeof(dir)) == 0 && !strcmp(dir, "/x/cache/pcrfs"),
          "XDG_CACHE_HOME first: %s", dir);
    unsetenv("XDG_CACHE_HOME");
    CHECK(http_default_cache_dir(dir, sizeof(dir)) == 0 && !strcmp(dir, "/h/.cache/pcrfs"),
          "then HOME: %s", dir);
    setenv("XDG_CACHE_HOME", "relative", 1); /* not absolute: ignored, as the spec says */
    unsetenv("HOME");
    snprintf(want, sizeof(want), "%s/.cache/pcrfs", pw->pw_dir);
    dir[0] = '\0';
    CHECK(http_default_cache_dir(dir, sizeof(dir)) == 0 && !strcmp(dir, want),
          "no HOME: the password entry's home %s, got %s", want, dir);
    return check_done("cachedir");
}

int main(void)
{
    char dir[4096];
    pid_t pid;
    int st;

    if (geteuid() != 0)
        return as_user();
    CHECK(http_default_cache_dir(dir, sizeof(dir)) == 0 && !strcmp(dir, "/var/cache/pcrfs"),
          "root: %s", dir);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            printf("cachedir: cannot become uid 65534: %s\n", strerror(errno));
            _exit(2);
        }
        st = as_user();
        fflush(stdout);
        _exit(st);
    }
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the ordinary user's checks (output above)");
    return check_done("cachedir (root)");
}
