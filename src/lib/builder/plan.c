/* pcrfs build — writing and reading a build plan (see plan.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pcrfs/checksum.h"
#include "pcrfs/store.h"
#include "builder/plan.h"

#define PLAN_MAGIC "pcrfs-plan 1"
#define MAX_LINE   (4u << 20) /* longer lines (a huge --scans text) are refused */

/* ---- writing ---- */

struct out {
    FILE *f;
    struct pcr_xxh64 h;
    struct pcr_sbuf line;
    bool nomem; /* a line could not be held: nothing more is written, the plan fails */
};

static void add(struct out *o, const void *data, size_t len)
{
    if (!o->nomem && pcr_sbuf_try_add(&o->line, data, len) < 0)
        o->nomem = true;
}

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    add(o, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A name or value: every byte up to space, '%' and DEL as %XX, so that a line
 * splits on spaces and any name survives. */
static void put_esc(struct out *o, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c <= ' ' || c == '%' || c == 0x7f) {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};

            add(o, e, 3);
        } else {
            add(o, &s[i], 1);
        }
    }
}

static void end_line(struct out *o)
{
    add(o, "\n", 1);
    if (o->nomem)
        return;
    /* pcr_sbuf keeps a NUL after its bytes: len is the text's */
    pcr_xxh64_update(&o->h, o->line.s, o->line.len);
    fwrite(o->line.s, 1, o->line.len, o->f);
    pcr_sbuf_reset(&o->line);
}

int plan_write(struct build *b, const char *path)
{
    struct out o = {0};
    char *tmp;
    int e = 0;

    if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0)
        return pcr_bld_nomem(b->rep);
    o.f = fopen(tmp, "wx");
    if (!o.f) {
        pcr_bld_err("%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    pcr_xxh64_init(&o.h);
    put(&o, PLAN_MAGIC);
    end_line(&o);
    put(&o, "made_by mkpcrfs %s", PCR_VERSION);
    end_line(&o);
    put(&o, "created %" PRId64, b->created);
    end_line(&o);
    put(&o, "source ");
    put_esc(&o, b->src ? b->src : "-", strlen(b->src ? b->src : "-"));
    end_line(&o);
    put(&o, "per_record %u", b->per_record);
    end_line(&o);
    if (b->scans_text) {
        const char *label = b->scripts.name + (strncmp(b->scripts.name, "file:", 5) ? 0 : 5);

        put(&o, "scans file ");
        put_esc(&o, label, strlen(label));
        put(&o, " ");
        put_esc(&o, b->scans_text, strlen(b->scans_text));
    } else {
        put(&o, "scans preset ");
        put_esc(&o, b->scripts.name, strlen(b->scripts.name));
    }
    end_line(&o);
    put(&o, "drop_markers %d", b->drop_markers ? 1 : 0);
    end_line(&o);
    put(&o, "quality %d", b->quality ? 1 : 0);
    end_line(&o);
    put(&o, "skipped %" PRIu64, b->skipped);
    end_line(&o);
    for (unsigned k = 0; k < b->ntokopts; k++) {
        put(&o, "tokopt %d ", b->tokopts[k].code);
        put_esc(&o, b->tokopts[k].value, strlen(b->tokopts[k].value));
        end_line(&o);
    }
    put(&o, "dirs %" PRIu64, b->ndirs);
    end_line(&o);
    for (uint64_t d = 0; d < b->ndirs; d++) {
        const struct dnode *n = &b->dirs[d];

        put(&o, "d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " ", n->parent,
            n->first_child, n->nsubdirs, n->first_file, n->nfiles);
        put_esc(&o, n->name, strlen(n->name));
        end_line(&o);
    }
    put(&o, "files %" PRIu64, b->nfiles);
    end_line(&o);
    for (uint64_t i = 0; i < b->nfiles; i++) {
        const struct fnode *f = &b->files[i];

        put(&o, "f %" PRIu64 " %" PRId64 " ", f->size, f->mtime_ns);
        put_esc(&o, f->name, strlen(f->name));
        end_line(&o);
    }
    fprintf(o.f, "end %016" PRIx64 "\n", pcr_xxh64_final(&o.h));
    if (ferror(o.f))
        e = errno ? errno : EIO;
    if (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0)
        e = e ? e : errno;
    if (fclose(o.f) != 0)
        e = e ? e : errno;
    if (!e && o.nomem)
        e = ENOMEM;
    if (!e && rename(tmp, path) != 0)
        e = errno;
    if (e == ENOMEM && o.nomem) {
        pcr_bld_nomem(b->rep);
        unlink(tmp);
    } else if (e) {
        pcr_bld_err("writing %s: %s", path, strerror(e));
        unlink(tmp);
    }
    pcr_sbuf_free(&o.line);
    free(tmp);
    return e ? -1 : 0;
}

/* ---- reading ---- */

struct in {
    FILE *f;
    const char *path;
    struct pcr_xxh64 h;
    char *line;
    size_t cap;
    uint64_t lineno;
    char *tok[8]; /* the current line's fields */
    unsigned ntok;
};

/* "PLAN:LINE: WHAT"; @return -1. */
static int bad(struct in *in, const char *what)
{
    pcr_bld_err("%s:%" PRIu64 ": %s (not a plan mkpcrfs --plan wrote, or damaged)", in->path,
                in->lineno, what);
    return -1;
}

/* The next line, split on spaces into in->tok (at most @max fields; the last takes
 * the rest). @return the number of fields, or -1 (end of file or too long). */
static int next_line(struct in *in, unsigned max)
{
    ssize_t n = getline(&in->line, &in->cap, in->f);
    char *p;

    in->lineno++;
    in->ntok = 0;
    if (n <= 0 || in->line[n - 1] != '\n' || (size_t)n > MAX_LINE || strlen(in->line) != (size_t)n)
        return -1;
    if (strncmp(in->line, "end ", 4) != 0)
        pcr_xxh64_update(&in->h, in->line, (size_t)n);
    in->line[n - 1] = '\0';
    p = in->line;
    while (in->ntok < max) {
        in->tok[in->ntok++] = p;
        if (in->ntok == max || !(p = strchr(p, ' ')))
            break;
        *p++ = '\0';
    }
    return (int)in->ntok;
}

/* Undo put_esc() in place. @return false if malformed (or an escaped NUL). */
static bool unescape(char *s)
{
    char *d = s;

    for (; *s; s++) {
        unsigned v = 0;

        if (*s != '%') {
            *d++ = *s;
            continue;
        }
        for (int k = 1; k <= 2; k++) {
            char c = s[k];

            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= (unsigned)(c - '0');
            else if (c >= 'A' && c <= 'F')
                v |= (unsigned)(c - 'A' + 10);
            else
                return false;
        }
        if (v == 0)
            return false;
        *d++ = (char)v;
        s += 2;
    }
    *d = '\0';
    return true;
}

static bool num(const char *s, uint64_t max, uint64_t *out)
{
    char *end;

    if (s[0] < '0' || s[0] > '9' || (s[0] == '0' && s[1]))
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return !errno && !*end && *out <= max;
}

/* A line "KEY VALUE" with a number. */
static int key_num(struct in *in, const char *key, uint64_t max, uint64_t *out)
{
    if (next_line(in, 2) != 2 || strcmp(in->tok[0], key) != 0 || !num(in->tok[1], max, out)) {
        char what[96];

        snprintf(what, sizeof(what), "want \"%s N\"", key);
        return bad(in, what);
    }
    return 0;
}

/* A line "KEY VALUE" with an escaped string: a copy into *@out. @return 0 or -1
 * (reported). */
static int key_str(struct in *in, struct build *b, const char *key, char **out)
{
    if (next_line(in, 2) != 2 || strcmp(in->tok[0], key) != 0 || !unescape(in->tok[1])) {
        char what[96];

        snprintf(what, sizeof(what), "want \"%s PATH\"", key);
        return bad(in, what);
    }
    *out = pcr_try_strdup(in->tok[1]);
    return *out ? 0 : pcr_bld_nomem(b->rep);
}

static int read_options(struct in *in, struct build *b)
{
    uint64_t v;
    char why[256] = "";

    /* parts of one store are built by one version: another may cut other bytes */
    if (next_line(in, 3) != 3 || strcmp(in->tok[0], "made_by") != 0 ||
        strcmp(in->tok[1], "mkpcrfs") != 0)
        return bad(in, "want \"made_by mkpcrfs VERSION\"");
    if (strcmp(in->tok[2], PCR_VERSION) != 0) {
        pcr_bld_err("%s: planned by mkpcrfs %s; this is mkpcrfs %s (build every part with the "
                    "version that made the plan)",
                    in->path, in->tok[2], PCR_VERSION);
        return -1;
    }

    if (key_num(in, "created", INT64_MAX, &v))
        return -1;
    b->created = (int64_t)v;
    if (key_str(in, b, "source", &b->src_owned) < 0)
        return -1;
    b->src = b->src_owned;
    if (strcmp(b->src, "-") == 0) {
        free(b->src_owned);
        b->src = b->src_owned = NULL;
    }
    if (key_num(in, "per_record", 1u << 20, &v) || v < 1)
        return v < 1 ? bad(in, "per_record 0") : -1;
    b->per_record = (unsigned)v;
    if (next_line(in, 4) < 3 || strcmp(in->tok[0], "scans") != 0)
        return bad(in, "want \"scans preset NAME\" or \"scans file LABEL TEXT\"");
    if (strcmp(in->tok[1], "preset") == 0 && in->ntok == 3) {
        if (!unescape(in->tok[2]) || pcr_scripts_preset(in->tok[2], &b->scripts) < 0)
            return bad(in, "unknown scan script preset");
    } else if (strcmp(in->tok[1], "file") == 0 && in->ntok == 4) {
        if (!unescape(in->tok[2]) || !unescape(in->tok[3]) ||
            pcr_scripts_parse(in->tok[3], strlen(in->tok[3]), in->tok[2], &b->scripts, why,
                              sizeof(why)) < 0)
            return bad(in, why[0] ? why : "bad scan script");
        b->scans_text = pcr_try_strdup(in->tok[3]);
        if (!b->scans_text)
            return pcr_bld_nomem(b->rep);
    } else {
        return bad(in, "want \"scans preset NAME\" or \"scans file LABEL TEXT\"");
    }
    if (key_num(in, "drop_markers", 1, &v))
        return -1;
    b->drop_markers = v;
    if (key_num(in, "quality", 1, &v))
        return -1;
    b->quality = v;
    if (key_num(in, "skipped", UINT64_MAX, &b->skipped))
        return -1;
    return 0;
}

/* "tokopt" lines, then "dirs D". */
static int read_tokopts(struct in *in, struct build *b, uint64_t *ndirs)
{
    uint64_t cap = 0, code;

    for (;;) {
        if (next_line(in, 3) < 2)
            return bad(in, "want \"tokopt CODE VALUE\" or \"dirs D\"");
        if (strcmp(in->tok[0], "dirs") == 0 && in->ntok == 2 && num(in->tok[1], 1u << 30, ndirs))
            return 0;
        if (strcmp(in->tok[0], "tokopt") != 0 || in->ntok != 3 ||
            !num(in->tok[1], INT32_MAX, &code) || !unescape(in->tok[2]))
            return bad(in, "want \"tokopt CODE VALUE\" or \"dirs D\"");
        if (b->ntokopts == cap) {
            void *t = pcr_try_grow(b->tokopts, &cap, 8, sizeof(*b->tokopts));

            if (!t)
                return pcr_bld_nomem(b->rep);
            b->tokopts = t;
        }
        b->tokopts[b->ntokopts].value = pcr_try_strdup(in->tok[2]);
        if (!b->tokopts[b->ntokopts].value)
            return pcr_bld_nomem(b->rep);
        b->tokopts[b->ntokopts++].code = (int)code;
    }
}

static int read_dirs(struct in *in, struct build *b, uint64_t ndirs)
{
    if (ndirs < 1)
        return bad(in, "no root directory");
    b->dirs = pcr_try_grow(NULL, &b->dircap, ndirs, sizeof(*b->dirs));
    if (!b->dirs)
        return pcr_bld_nomem(b->rep);
    for (uint64_t d = 0; d < ndirs; d++) {
        struct dnode *n = &b->dirs[d];
        uint64_t v[5];

        if (next_line(in, 7) != 7 || strcmp(in->tok[0], "d") != 0 || !unescape(in->tok[6]))
            return bad(in, "want a directory line");
        for (int k = 0; k < 5; k++)
            if (!num(in->tok[1 + k], UINT64_MAX, &v[k]))
                return bad(in, "want a directory line");
        /* parents come first (the writer checks the rest of the numbering) */
        if ((d == 0 ? v[0] != 1 : v[0] < 1 || v[0] > d) || (d == 0) != (in->tok[6][0] == '\0'))
            return bad(in, "directory numbering");
        memset(n, 0, sizeof(*n));
        n->parent = v[0];
        n->first_child = v[1];
        n->nsubdirs = v[2];
        n->first_file = v[3];
        n->nfiles = v[4];
        b->ndirs++; /* build_free() frees what it holds from now on */
        n->name = pcr_try_strdup(in->tok[6]);
        if (!n->name)
            return pcr_bld_nomem(b->rep);
        n->rel = d == 0 ? pcr_try_strdup("") : pcr_try_path_join(b->dirs[v[0] - 1].rel, n->name);
        if (!n->rel)
            return pcr_bld_nomem(b->rep);
    }
    return 0;
}

static int read_files(struct in *in, struct build *b)
{
    uint64_t nfiles, d = 0;

    if (key_num(in, "files", (uint64_t)1 << 40, &nfiles))
        return -1;
    b->files = pcr_try_grow(NULL, &b->filecap, nfiles ? nfiles : 1, sizeof(*b->files));
    if (!b->files)
        return pcr_bld_nomem(b->rep);
    for (uint64_t i = 0; i < nfiles; i++) {
        struct fnode *f = &b->files[i];
        uint64_t mt;

        if (next_line(in, 4) != 4 || strcmp(in->tok[0], "f") != 0 || !unescape(in->tok[3]) ||
            !num(in->tok[1], INT64_MAX, &f->size) || !num(in->tok[2], INT64_MAX, &mt) ||
            !in->tok[3][0])
            return bad(in, "want a file line");
        /* its directory: the one whose range holds id i + 1 */
        while (d < b->ndirs &&
               (b->dirs[d].nfiles == 0 || b->dirs[d].first_file + b->dirs[d].nfiles <= i + 1))
            d++;
        if (d == b->ndirs || b->dirs[d].first_file > i + 1)
            return bad(in, "a file outside every directory's range");
        f->dir = d + 1;
        f->mtime_ns = (int64_t)mt;
        f->name = pcr_try_strdup(in->tok[3]);
        if (!f->name)
            return pcr_bld_nomem(b->rep);
        b->nfiles++;
        b->total_bytes += f->size;
    }
    /* the directories' counts against the files are checked by the writer */
    return 0;
}

int plan_read(struct build *b, const char *path)
{
    struct in in = {.path = path};
    uint64_t ndirs = 0;
    char want[32];
    int rc = -1;

    in.f = fopen(path, "re");
    if (!in.f) {
        pcr_bld_err("%s: %s", path, strerror(errno));
        return -1;
    }
    pcr_xxh64_init(&in.h);
    if (next_line(&in, 1) != 1 || strcmp(in.tok[0], PLAN_MAGIC) != 0) {
        bad(&in, "want \"" PLAN_MAGIC "\"");
        goto out;
    }
    if (read_options(&in, b) || read_tokopts(&in, b, &ndirs) || read_dirs(&in, b, ndirs) ||
        read_files(&in, b))
        goto out;
    snprintf(want, sizeof(want), "%016" PRIx64, pcr_xxh64_final(&in.h));
    if (next_line(&in, 2) != 2 || strcmp(in.tok[0], "end") != 0) {
        bad(&in, "want \"end HASH\" (a plan cut short?)");
        goto out;
    }
    if (strcmp(in.tok[1], want) != 0) {
        bad(&in, "the plan's hash does not match its text (edited or damaged)");
        goto out;
    }
    if (getc(in.f) != EOF) {
        in.lineno++;
        bad(&in, "text after the end line");
        goto out;
    }
    snprintf(b->plan_id, sizeof(b->plan_id), "%s", want);
    b->planned = true;
    rc = 0;
out:
    free(in.line);
    fclose(in.f);
    return rc;
}
