/* pcrfs — q90/ q95/ q99/ (option quality=T1:T2:...|none; by default 0.90, 0.95 and
 * 0.99 when the store has a quality table, mkpcrfs --quality): each file at the
 * lowest level whose stored MS-SSIM reaches the view's threshold
 * (pcr_file_level_for()). A per-file level that never changes, so names, listings
 * and pages are cached as for scanK/ (view.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "util/json.h"
#include "util/optparse.h"
#include "view/view.h"

struct q_args {
    char *quality; /* as given, checked */
};

struct q {
    double t[PCR_MAX_QVIEWS];
    unsigned n;
};

static const char *const q_opts[] = {"quality", NULL};

/* "T1:T2:...|none" into @t (*@n of them; 0 for none). Thresholds have at most 4
 * digits after the point, so two never name the same qNN/ view.
 * @return 0, or -1 with one line in @msg. */
static int parse_quality(const char *opt, double *t, unsigned *n, char *msg, size_t len)
{
    const char *p = opt, *end;
    char one[32];

    *n = 0;
    if (!strcmp(opt, "none"))
        return 0;
    for (;; p = end + 1) {
        end = strchr(p, ':');
        if (!end)
            end = p + strlen(p);
        if ((size_t)(end - p) >= sizeof(one) || *n >= PCR_MAX_QVIEWS)
            goto bad;
        memcpy(one, p, (size_t)(end - p));
        one[end - p] = '\0';
        if (pcr_opt_threshold("quality", one, &t[*n], NULL, 0) != 0)
            goto bad;
        for (unsigned i = 0; i < *n; i++)
            if (t[i] == t[*n]) {
                pcr_opt_msg(msg, len, "quality", opt, "%s given twice", one);
                return -1;
            }
        (*n)++;
        if (!*end)
            return 0;
    }
bad:
    pcr_opt_msg(msg, len, "quality", opt,
                "want none, or up to %d thresholds T1:T2:... in (0, 1] with at most %d digits "
                "after the point (e.g. 0.9:0.95:0.99)",
                PCR_MAX_QVIEWS, PCR_OPT_THRESHOLD_DECIMALS);
    return -1;
}

static int q_opt(void *args, const char *name, const char *val, char *msg, size_t len)
{
    struct q_args *a = args;
    double t[PCR_MAX_QVIEWS];
    unsigned n;

    (void)name;
    if (parse_quality(val, t, &n, msg, len) != 0)
        return -1;
    free(a->quality);
    a->quality = strdup(val);
    return a->quality ? 0 : -ENOMEM;
}

static void q_args_free(void *args)
{
    free(((struct q_args *)args)->quality);
}

static int q_init(struct pcr_views *vs, const void *args, void **state, char *err, size_t errlen)
{
    static const double dflt[] = {0.90, 0.95, 0.99};
    const struct q_args *a = args;
    char meta[32];
    bool has =
        pcr_store_meta(vs->store, "quality", meta, sizeof(meta)) > 0 && strcmp(meta, "off") != 0;
    struct q *q = calloc(1, sizeof(*q));

    *state = NULL;
    if (!q)
        return -ENOMEM;
    if (!a || !a->quality) {
        for (size_t i = 0; has && i < sizeof(dflt) / sizeof(dflt[0]); i++)
            q->t[q->n++] = dflt[i];
    } else if (parse_quality(a->quality, q->t, &q->n, err, errlen) != 0) {
        free(q);
        return -EINVAL;
    } else if (q->n && !has) {
        pcr_log(PCR_LOG_WARN,
                "quality=%s: the store has no quality table (build it with mkpcrfs "
                "--quality): every qNN/ serves the top level",
                a->quality);
    }
    if (!q->n) {
        free(q);
        return 0;
    }
    *state = q;
    return 0;
}

static unsigned q_count(const struct pcr_views *vs, const void *state)
{
    (void)vs;
    return state ? ((const struct q *)state)->n : 0;
}

static unsigned q_top(const struct pcr_views *vs, const void *state, unsigned i)
{
    (void)state, (void)i;
    return vs->levels; /* files choose their own level (q_ops) */
}

/* "q95" for 0.95, "q99.5" for 0.995 */
static void q_name(const void *state, unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "q%g", ((const struct q *)state)->t[i - 1] * 100.0);
}

static double q_threshold(const void *state, unsigned i)
{
    return ((const struct q *)state)->t[i - 1];
}

static unsigned q_level(const struct pcr_view *v, const struct pcr_file *f)
{
    return pcr_file_level_for(f, v->threshold);
}

static int64_t q_size(const struct pcr_view *v, const struct pcr_file *f)
{
    return (int64_t)pcr_file_size(f, q_level(v, f));
}

static int q_open(const struct pcr_view *v, const struct pcr_file *f, void **state)
{
    struct pcr_handle *h = NULL;
    int rc = pcr_handle_open(v->store, f, q_level(v, f), &h);

    *state = h;
    return rc;
}

static ssize_t q_read(const struct pcr_view *v, const struct pcr_file *f, void *state, char *buf,
                      size_t size, uint64_t off)
{
    if (state)
        return pcr_handle_read(state, buf, size, off);
    return pcr_store_pread(v->store, f, q_level(v, f), buf, size, off);
}

static const struct pcr_view_file_ops q_ops = {
    .lookup = pcr_view_store_lookup,
    .readdir = pcr_view_store_readdir,
    .size = q_size,
    .open = q_open,
    .read = q_read,
    .close = pcr_view_store_close,
};

static void q_stats(const struct pcr_view *v, struct pcr_json *b)
{
    pcr_json_printf(b, ", \"threshold\": %g", v->threshold);
}

const struct pcr_view_desc pcr_view_quality = {
    .help = "    -o quality=T1:T2:..    add qNN/ views (e.g. q95/; T in (0, 1], at most 4\n"
            "                           digits after the point): every image at the\n"
            "                           lowest level whose MS-SSIM reaches the threshold\n"
            "                           (stores built with mkpcrfs --quality; default\n"
            "                           0.9:0.95:0.99 for those; none: no such views)\n",
    .name = "q",
    .opts = q_opts,
    .args_size = sizeof(struct q_args),
    .level_rule = PCR_LEVEL_FIXED,
    .tree = PCR_TREE_IMAGES,
    .cache = {.names = true, .listings = true, .pages = true},
    .view_stats = true,
    .ops = &q_ops,
    .opt = q_opt,
    .args_free = q_args_free,
    .init = q_init,
    .free = free,
    .count = q_count,
    .number = PCR_VIEW_Q,
    .level = q_top,
    .name_of = q_name,
    .threshold = q_threshold,
    .view_stats_json = q_stats,
};
