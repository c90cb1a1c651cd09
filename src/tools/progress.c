/* pcrfs tools — the progress bar (see progress.h). */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "progress.h"
#include "tool.h"

static struct {
    bool enabled;
    uint64_t total_files, total_bytes;
    double start, last;
} pg;

void progress_start(bool enabled, uint64_t total_files, uint64_t total_bytes)
{
    memset(&pg, 0, sizeof(pg));
    pg.enabled = enabled;
    pg.total_files = total_files;
    pg.total_bytes = total_bytes;
    pg.start = tool_now();
    pg.last = 0;
}

static unsigned term_width(void)
{
    struct winsize ws;

    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

static void fmt_eta(double s, char *buf, size_t len)
{
    unsigned long t;

    if (s < 0 || s > 360000.0) {
        snprintf(buf, len, "--:--");
        return;
    }
    t = (unsigned long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

void progress_update(uint64_t files, uint64_t bytes, bool force)
{
    double now = tool_now(), el, frac, eta;
    char left[128], right[128], etas[32], line[512];
    unsigned width, barw, fill, i;
    size_t n;

    if (!pg.enabled)
        return;
    if (!force && now - pg.last < 0.1)
        return;
    pg.last = now;
    el = now - pg.start;
    if (pg.total_bytes)
        frac = (double)bytes / (double)pg.total_bytes;
    else
        frac = pg.total_files ? (double)files / (double)pg.total_files : 1.0;
    if (frac > 1)
        frac = 1;
    /* The ETA follows bytes, not files: image sizes vary, bytes track the work. */
    eta = (frac > 0 && el > 0.5) ? el * (1 - frac) / frac : -1;
    fmt_eta(eta, etas, sizeof(etas));
    /* Pad "done" to the width of "total" so that the bar does not move. */
    snprintf(left, sizeof(left), "%llu", (unsigned long long)pg.total_files);
    snprintf(left, sizeof(left), "%*llu/%llu %3.0f%% ", (int)strlen(left),
             (unsigned long long)files, (unsigned long long)pg.total_files, frac * 100);
    snprintf(right, sizeof(right), " %6.1f img/s %6.1f MB/s ETA %5s", el > 0 ? files / el : 0.0,
             el > 0 ? bytes / el / 1e6 : 0.0, etas);
    width = term_width() - 1; /* never touch the last column: no line wrap */
    n = strlen(left) + strlen(right) + 2;
    barw = width > n + 10 ? (unsigned)(width - n) : 0;
    if (barw > 50)
        barw = 50;
    fill = (unsigned)(frac * barw);
    n = (size_t)snprintf(line, sizeof(line), "%s", left);
    if (barw) {
        line[n++] = '[';
        for (i = 0; i < barw; i++)
            line[n++] = i < fill ? '#' : '.';
        line[n++] = ']';
    }
    snprintf(line + n, sizeof(line) - n, "%s", right);
    tool_status_show(line);
}

void progress_finish(void)
{
    if (!pg.enabled)
        return;
    tool_status_clear();
    pg.enabled = false;
}
