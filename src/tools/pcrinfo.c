/* pcrinfo — inspect, verify and extract a pcrfs store through the store library.
 *
 * Everything here goes through the public API (pcrfs/store.h), exactly as the
 * FUSE driver does, so a store that pcrinfo --verify accepts is one the driver
 * serves correctly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h" /* pcr_xxh64() */
#include "pcrfs/jpeg.h"
#include "pcrfs/store.h"
#include "summary.h"
#include "tool.h"

#define IO_CHUNK (1u << 20)

enum mode { MODE_SUMMARY, MODE_JSON, MODE_VERIFY, MODE_LIST, MODE_CAT, MODE_EXTRACT };

static const char *const mode_opt[] = {
    [MODE_SUMMARY] = "",    [MODE_JSON] = "--json", [MODE_VERIFY] = "--verify",
    [MODE_LIST] = "--list", [MODE_CAT] = "--cat",   [MODE_EXTRACT] = "--extract",
};

/* The path of file @id into @b (raw bytes). @return 0 or a negative errno. */
static int file_path(struct pcr_store *s, uint64_t id, struct tool_buf *b)
{
    ssize_t n;

    tool_buf_reserve(b, 255);
    while ((n = pcr_store_path(s, id, b->s, b->cap)) == -ENAMETOOLONG)
        tool_buf_reserve(b, b->cap * 2);
    if (n < 0)
        return (int)n;
    b->len = (size_t)n;
    return 0;
}

static const char *kind_name(enum pcr_kind k)
{
    return k == PCR_KIND_JPEG ? "jpeg" : k == PCR_KIND_VERBATIM ? "verbatim" : "unknown";
}

static int do_list(struct pcr_store *s)
{
    struct tool_buf path = {0}, esc = {0};
    unsigned levels = pcr_store_levels(s), k;
    uint64_t n = pcr_store_nfiles(s), id;
    int rc = 0;

    for (id = 1; id <= n; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        int e;

        if ((e = pcr_store_file(s, id, &f)) < 0 || (e = file_path(s, id, &path)) < 0) {
            tool_err("file %" PRIu64 ": %s", id, strerror(-e));
            rc = 1;
            continue;
        }
        pcr_file_info(f, &fi);
        tool_buf_reset(&esc);
        tool_escape(&esc, path.s, path.len);
        printf("%s\t%s\t%u\t", esc.s, kind_name(fi.kind), fi.nchunks);
        for (k = 1; k <= levels; k++)
            printf("%s%" PRIu64, k > 1 ? " " : "", pcr_file_size(f, k));
        putchar('\n');
    }
    tool_buf_free(&path);
    tool_buf_free(&esc);
    return rc;
}

static int do_verify(struct pcr_store *s)
{
    struct tool_buf path = {0}, esc = {0};
    unsigned L = pcr_store_levels(s);
    uint64_t n = pcr_store_nfiles(s), id, failures = 0, decoded = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;

    for (id = 1; id <= n; id++) {
        const struct pcr_file *f;
        struct pcr_file_info fi;
        struct pcr_jpeg_info ji;
        char why[512] = "";
        uint64_t size, sum;
        ssize_t got;
        int e;

        if ((e = file_path(s, id, &path)) < 0) {
            printf("FAILED file %" PRIu64 ": %s\n", id, strerror(-e));
            failures++;
            continue;
        }
        tool_buf_reset(&esc);
        tool_escape(&esc, path.s, path.len);
        if ((e = pcr_store_file(s, id, &f)) < 0) {
            printf("FAILED %s: %s\n", esc.s, strerror(-e));
            failures++;
            continue;
        }
        pcr_file_info(f, &fi);
        size = pcr_file_size(f, L);
        if (size > SIZE_MAX / 2) {
            printf("FAILED %s: size %" PRIu64 " out of range\n", esc.s, size);
            failures++;
            continue;
        }
        if (size + 1 > cap) {
            uint8_t *p = realloc(buf, (size_t)size + 1);

            if (!p) {
                printf("FAILED %s: out of memory for %" PRIu64 " bytes\n", esc.s, size);
                failures++;
                continue;
            }
            buf = p;
            cap = (size_t)size + 1;
        }
        /* Ask for one byte more than the index says: a read that returns it would
         * mean the size is wrong. */
        got = pcr_store_read(s, f, L, buf, (size_t)size + 1, 0);
        if (got < 0) {
            printf("FAILED %s: read: %s\n", esc.s, strerror((int)-got));
            failures++;
            continue;
        }
        if ((uint64_t)got != size) {
            printf("FAILED %s: read %zd bytes, the index says %" PRIu64 "\n", esc.s, got, size);
            failures++;
            continue;
        }
        sum = pcr_xxh64(buf, (size_t)got);
        if (sum != fi.checksum) {
            printf("FAILED %s: checksum %016" PRIx64 ", the index says %016" PRIx64 "\n", esc.s,
                   sum, fi.checksum);
            failures++;
            continue;
        }
        if (fi.kind != PCR_KIND_JPEG)
            continue;
        e = pcr_jpeg_decode(buf, (size_t)got, NULL, NULL, &ji, why, sizeof(why));
        if (e < 0) {
            printf("FAILED %s: does not decode: %s\n", esc.s, why[0] ? why : strerror(-e));
            failures++;
            continue;
        }
        if (ji.width != fi.width || ji.height != fi.height || ji.components != fi.components) {
            printf("FAILED %s: decodes as %ux%u, %u components; the index says %ux%u, %u\n", esc.s,
                   ji.width, ji.height, ji.components, fi.width, fi.height, fi.components);
            failures++;
            continue;
        }
        decoded++;
    }
    printf("verified %" PRIu64 " files at level %u (%" PRIu64 " JPEGs decoded): %" PRIu64
           " failure%s\n",
           n, L, decoded, failures, failures == 1 ? "" : "s");
    free(buf);
    tool_buf_free(&path);
    tool_buf_free(&esc);
    return failures ? 1 : 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copy @f at @level to @fd. @return 0, or a negative errno; *@reading tells
 * which side failed. */
static int copy_file(struct pcr_store *s, const struct pcr_file *f, unsigned level, int fd,
                     uint8_t *buf, bool *reading)
{
    struct pcr_handle *h;
    uint64_t off = 0, size;
    int rc;

    *reading = true;
    rc = pcr_handle_open(s, f, level, &h);
    if (rc < 0)
        return rc;
    size = pcr_handle_size(h);
    while (off < size) {
        ssize_t n = pcr_handle_read(h, buf, IO_CHUNK, off);

        if (n < 0) {
            rc = (int)n;
            break;
        }
        if (n == 0) {
            rc = -EIO; /* shorter than its size: the store is inconsistent */
            break;
        }
        *reading = false;
        rc = write_all(fd, buf, (size_t)n);
        if (rc < 0)
            break;
        *reading = true;
        off += (uint64_t)n;
    }
    pcr_handle_close(h);
    return rc;
}

static int do_cat(struct pcr_store *s, const char *path, unsigned level)
{
    struct pcr_node node = {.is_dir = true, .id = PCR_ROOT_DIR};
    const struct pcr_file *f;
    char *copy = strdup(path), *p, *save = NULL;
    uint8_t *buf = malloc(IO_CHUNK);
    bool reading;
    int rc;

    if (!copy || !buf) {
        tool_err("out of memory");
        free(copy);
        free(buf);
        return 1;
    }
    /* Component by component from the root; empty components and "." are
     * skipped, as in a path name; ".." is refused (nothing above the root). */
    rc = 0;
    for (p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (strcmp(p, ".") == 0)
            continue;
        if (!node.is_dir) {
            rc = -ENOTDIR;
            break;
        }
        if (strcmp(p, "..") == 0) {
            rc = -ENOENT;
            break;
        }
        rc = pcr_store_lookup(s, node.id, p, &node);
        if (rc < 0)
            break;
    }
    free(copy);
    if (rc == 0 && node.is_dir)
        rc = -EISDIR;
    if (rc == 0)
        rc = pcr_store_file(s, node.id, &f);
    if (rc < 0) {
        struct tool_buf esc = {0};

        tool_err("%s: %s", tool_escaped(&esc, path), strerror(-rc));
        tool_buf_free(&esc);
        free(buf);
        return 1;
    }
    rc = copy_file(s, f, level, STDOUT_FILENO, buf, &reading);
    free(buf);
    if (rc < 0) {
        struct tool_buf esc = {0};

        if (reading)
            tool_err("reading %s: %s", tool_escaped(&esc, path), strerror(-rc));
        else
            tool_err("writing to standard output: %s", strerror(-rc));
        tool_buf_free(&esc);
        return 1;
    }
    return 0;
}

/* Names come from the store: never trust them to stay inside DIR. */
static bool safe_name(const char *n)
{
    return n[0] && !strchr(n, '/') && strcmp(n, ".") != 0 && strcmp(n, "..") != 0;
}

struct extract {
    struct pcr_store *s;
    unsigned level;
    uint8_t *buf;
    struct tool_buf path; /* of the directory being written, relative to DIR */
    struct tool_buf esc;
    const char *dest;
};

static const char *ex_path(struct extract *x, const char *name)
{
    size_t keep = x->path.len;
    const char *r;

    if (keep)
        tool_buf_add(&x->path, "/", 1);
    tool_buf_add(&x->path, name, strlen(name));
    tool_buf_reset(&x->esc);
    tool_escape(&x->esc, x->path.s, x->path.len);
    x->path.len = keep;
    x->path.s[keep] = '\0';
    r = x->esc.s;
    return r;
}

static int extract_dir(struct extract *x, uint64_t dir, int dfd)
{
    uint64_t pos;

    for (pos = 0;; pos++) {
        struct pcr_dirent de;
        int rc = pcr_store_readdir(x->s, dir, pos, &de);

        if (rc == -ENOENT)
            return 0;
        if (rc < 0) {
            tool_err("%s: reading directory %s: %s", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".", strerror(-rc));
            return -1;
        }
        if (!safe_name(de.name)) {
            tool_err("%s: unsafe name in the store in %s: refused", x->dest,
                     x->path.len ? tool_escaped(&x->esc, x->path.s) : ".");
            return -1;
        }
        if (de.node.is_dir) {
            size_t keep = x->path.len;
            int cfd;

            if (mkdirat(dfd, de.name, 0777) < 0 ||
                (cfd = openat(dfd, de.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, de.name), strerror(errno));
                return -1;
            }
            if (keep)
                tool_buf_add(&x->path, "/", 1);
            tool_buf_add(&x->path, de.name, strlen(de.name));
            rc = extract_dir(x, de.node.id, cfd);
            close(cfd);
            x->path.len = keep;
            x->path.s[keep] = '\0';
            if (rc < 0)
                return -1;
        } else {
            const struct pcr_file *f;
            bool reading = true;
            int fd;

            rc = pcr_store_file(x->s, de.node.id, &f);
            if (rc < 0) {
                tool_err("%s: %s", ex_path(x, de.name), strerror(-rc));
                return -1;
            }
            fd = openat(dfd, de.name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            if (fd < 0) {
                tool_err("%s/%s: %s", x->dest, ex_path(x, de.name), strerror(errno));
                return -1;
            }
            rc = copy_file(x->s, f, x->level, fd, x->buf, &reading);
            if (close(fd) < 0 && rc == 0) {
                rc = -errno;
                reading = false;
            }
            if (rc < 0) {
                if (reading)
                    tool_err("reading %s: %s", ex_path(x, de.name), strerror(-rc));
                else
                    tool_err("writing %s/%s: %s", x->dest, ex_path(x, de.name), strerror(-rc));
                return -1;
            }
        }
    }
}

static int do_extract(struct pcr_store *s, const char *dest, unsigned level)
{
    struct extract x = {.s = s, .level = level, .dest = dest};
    int dfd, rc;

    if (mkdir(dest, 0777) < 0) {
        tool_err("%s: %s", dest, errno == EEXIST ? "already exists" : strerror(errno));
        return 1;
    }
    dfd = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        tool_err("%s: %s", dest, strerror(errno));
        return 1;
    }
    x.buf = malloc(IO_CHUNK);
    if (!x.buf) {
        tool_err("out of memory");
        close(dfd);
        return 1;
    }
    tool_buf_add(&x.path, "", 0);
    rc = extract_dir(&x, PCR_ROOT_DIR, dfd);
    close(dfd);
    free(x.buf);
    tool_buf_free(&x.path);
    tool_buf_free(&x.esc);
    return rc < 0 ? 1 : 0;
}

static void usage(FILE *f)
{
    fputs("Usage: pcrinfo [OPTIONS] STORE\n"
          "Show, verify or extract the pcrfs store STORE.\n"
          "\n"
          "  (no option)     the summary and the PCR table\n"
          "      --json      the summary as one JSON object\n"
          "      --verify    read every file at the highest level, check its checksum,\n"
          "                  decode every JPEG; exit 1 on any failure\n"
          "      --list      one line per file: path, kind, chunks, size at each level\n"
          "      --cat PATH  write the file PATH to standard output (at --level)\n"
          "      --extract DIR  write the whole tree into the new directory DIR (at --level)\n"
          "      --level K   1..L or 'full' (default: full)\n"
          "  -v, --verbose   show the library's informational and debug messages\n"
          "  -h, --help      show this help and exit\n"
          "  -V, --version   show the version and exit\n"
          "\n"
          "Exit status: 0 success, 1 failure or verification failed, 2 usage error.\n"
          "See pcrinfo(1).\n",
          f);
}

enum { OPT_JSON = 256, OPT_VERIFY, OPT_LIST, OPT_CAT, OPT_EXTRACT, OPT_LEVEL };

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"list", no_argument, NULL, OPT_LIST},
        {"cat", required_argument, NULL, OPT_CAT},
        {"extract", required_argument, NULL, OPT_EXTRACT},
        {"level", required_argument, NULL, OPT_LEVEL},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    enum mode mode = MODE_SUMMARY;
    const char *arg = NULL, *level_arg = NULL, *path;
    struct pcr_store *s;
    char err[1024] = "";
    bool verbose = false;
    unsigned level;
    int c, rc;

    tool_prog = "pcrinfo";
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":vhV", longopts, NULL)) != -1) {
        enum mode m;

        switch (c) {
        case OPT_JSON:
        case OPT_VERIFY:
        case OPT_LIST:
        case OPT_CAT:
        case OPT_EXTRACT:
            m = c == OPT_JSON     ? MODE_JSON
                : c == OPT_VERIFY ? MODE_VERIFY
                : c == OPT_LIST   ? MODE_LIST
                : c == OPT_CAT    ? MODE_CAT
                                  : MODE_EXTRACT;
            if (mode != MODE_SUMMARY && mode != m)
                tool_usage_error("%s and %s cannot be used together", mode_opt[mode], mode_opt[m]);
            mode = m;
            if (optarg)
                arg = optarg;
            break;
        case OPT_LEVEL:
            level_arg = optarg;
            break;
        case 'v':
            verbose = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("pcrinfo (pcrfs) %s\n", PCR_VERSION);
            return 0;
        default:
            tool_getopt_error(c, argv);
        }
    }
    if (optind == argc)
        tool_usage_error("missing STORE");
    if (argc - optind > 1)
        tool_usage_error("too many arguments: '%s'", argv[optind + 1]);
    if (level_arg && mode != MODE_CAT && mode != MODE_EXTRACT)
        tool_usage_error("--level applies only to --cat and --extract");
    path = argv[optind];
    tool_log_init(verbose);

    rc = pcr_store_open(path, &s, err, sizeof(err));
    if (rc < 0) {
        tool_err("%s", err[0] ? err : strerror(-rc));
        return 1;
    }
    level = pcr_store_levels(s);
    if (level_arg && strcmp(level_arg, "full") != 0) {
        unsigned long long v;

        if (tool_parse_uint(level_arg, 1, level, &v) < 0) {
            pcr_store_close(s);
            tool_usage_error("invalid level '%s': this store has levels 1..%u or 'full'", level_arg,
                             level);
        }
        level = (unsigned)v;
    }

    switch (mode) {
    case MODE_SUMMARY:
    case MODE_JSON: {
        struct summary *sm;

        rc = summary_compute(s, path, &sm, err, sizeof(err));
        if (rc < 0) {
            tool_err("%s", err);
            rc = 1;
            break;
        }
        if (mode == MODE_JSON)
            summary_print_json(sm, stdout);
        else
            summary_print_text(sm, stdout);
        summary_free(sm);
        rc = 0;
        break;
    }
    case MODE_VERIFY:
        rc = do_verify(s);
        break;
    case MODE_LIST:
        rc = do_list(s);
        break;
    case MODE_CAT:
        rc = do_cat(s, arg, level);
        break;
    case MODE_EXTRACT:
        rc = do_extract(s, arg, level);
        break;
    }
    pcr_store_close(s);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        tool_err("writing to standard output: %s", strerror(errno));
        return 1;
    }
    return rc;
}
