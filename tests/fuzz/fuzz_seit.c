/* libFuzzer target: SeiT's release-format reader, pcr_seit_open() and everything it
 * hands out (items, names, grids), on files written from the input.
 *
 * fuzz_npy covers pcr_npy_parse() alone; this target covers what SeiT import adds on
 * top: gzip (data.bin.gz, index.npy.gz, concatenated members, bombs), the offsets
 * table (non-decreasing, inside the data), the label file (integers, counts), the
 * names file (clean relative paths, unique), the index path derived from the data
 * file's name, and decoding every image's escape code.
 *
 * Input: one flags byte, then up to four sections separated by "@@@@":
 *   data.bin, index.npy, labels, names (a missing section is an empty file).
 * A section may itself be gzip (the reader looks at the magic, not the name).
 * Flags: bit 0 pass the names file; bit 1 leave the index path to pcr_seit_open()
 * (derived from "a-token.data.bin"); bit 2 give the data and index files ".gz"
 * names; bits 4..6 the grid shape (shapes[] below).
 *
 * Beyond "no crash, no sanitizer report", it traps on broken contracts:
 *   - a failed open that sets *out, or has no message, or one with a newline or
 *     another control character (they would come from the files);
 *   - an item whose bytes lie outside the data, offsets that go backwards, a label
 *     over PCR_SEIT_MAX_LABEL, an index_in_label that is not the count of earlier
 *     items with that label;
 *   - a name that is empty, absolute, has an empty, "." or ".." component, is not
 *     unique, or comes back different into a short buffer;
 *   - a grid that decodes to a value above 509 (SeiT's reader has no form for one),
 *     or, encoded again, is not the image's bytes though they hold nothing odd
 *     (pcr_seit_decode(): a 255 after a 255, a final 255), or, when they do, does not
 *     decode to the same grid; odd images other than pcr_seit_odd() counts;
 *   - index @count answered with anything but -ENOENT;
 *   - a log line with a control character.
 * Seeds: tests/fuzz/mkseeds_seit.py writes the corpus in tests/fuzz/corpus/seit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "pcrfs/log.h"
#include "pcrfs/tokens.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TRAP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_seit: " __VA_ARGS__);                                                \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define SEP        "@@@@"
#define MAX_CHECK  256 /* items checked one by one; pairwise checks use fewer */
#define MAX_UNIQUE 64

static const unsigned shapes[8][2] = {{0, 0}, {1, 1},   {3, 2}, {4, 4},
                                      {1, 7}, {32, 32}, {2, 1}, {16, 16}};

static char dir[256];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void put_file(const char *name, const uint8_t *p, size_t n)
{
    char path[400];
    int fd;

    path_of(path, sizeof(path), name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n))
        TRAP("cannot write %s", path);
    close(fd);
}

static const char *const all_names[] = {"a-token.data.bin",  "a-token.data.bin.gz",
                                        "a-token.index.npy", "a-token.index.npy.gz",
                                        "a-label.txt",       "a-names.txt"};

static void remove_files(void)
{
    char path[400];

    for (size_t i = 0; i < sizeof(all_names) / sizeof(all_names[0]); i++) {
        path_of(path, sizeof(path), all_names[i]);
        unlink(path);
    }
}

static void cleanup(void)
{
    remove_files();
    rmdir(dir);
}

/* A message for a terminal: one line, no control characters (bytes from the files
 * must be escaped or left out: an ESC sequence in a label file must not reach the
 * user's terminal through mkpcrfs's error message). */
static bool one_clean_line(const char *msg)
{
    for (const unsigned char *c = (const unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return false;
    return true;
}

static void log_hook(enum pcr_log_level level, const char *msg, void *ctx)
{
    (void)level;
    (void)ctx;
    if (!msg || !one_clean_line(msg))
        TRAP("log line with a control character: %s", msg ? msg : "(null)");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

    (void)argc;
    (void)argv;
    snprintf(dir, sizeof(dir), "%s/pcrfs-fuzz-seit-%d", base, (int)getpid());
    if (mkdir(dir, 0755) != 0)
        TRAP("cannot create %s", dir);
    atexit(cleanup);
    pcr_log_set_hook(log_hook, NULL, PCR_LOG_DEBUG);
    return 0;
}

/* The next section of the input: up to SEP or the end. */
static void section(const uint8_t **p, const uint8_t *end, const uint8_t **s, size_t *n)
{
    const uint8_t *q = *p < end ? memmem(*p, (size_t)(end - *p), SEP, 4) : NULL;

    *s = *p;
    if (*p >= end) {
        *n = 0;
    } else if (q) {
        *n = (size_t)(q - *p);
        *p = q + 4;
    } else {
        *n = (size_t)(end - *p);
        *p = end;
    }
}

static void check_name(const char *name, ssize_t len)
{
    const char *c = name;

    if (len <= 0 || (size_t)len != strlen(name) || name[0] == '/')
        TRAP("bad name \"%s\" (%zd)", name, len);
    for (;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            TRAP("name \"%s\" has an empty, . or .. component", name);
        if (!e)
            break;
        c = e + 1;
    }
}

static void walk(const struct pcr_seit *s, const uint8_t *raw, size_t rawlen, bool plain,
                 unsigned want_h, unsigned want_w)
{
    static uint16_t grid[32 * 32];
    static uint8_t again[4 * 32 * 32];
    static char names[MAX_UNIQUE][4200];
    uint64_t n = pcr_seit_count(s), prev_end = 0, odd_seen = 0, first_odd = 0;
    struct pcr_seit_item it, first[MAX_CHECK];
    unsigned h, w;
    char err[512], name[4200], small[5];

    pcr_seit_shape(s, &h, &w);
    if (h != want_h || w != want_w)
        TRAP("shape %ux%u, asked for %ux%u", h, w, want_h, want_w);
    if (n < 1)
        TRAP("opened with no images");
    for (uint64_t i = 0; i < n && i < MAX_CHECK; i++) {
        if (pcr_seit_item(s, i, &it) != 0)
            TRAP("item %llu missing", (unsigned long long)i);
        first[i] = it;
        if (i > 0 && it.offset != prev_end)
            TRAP("item %llu does not start where the previous one ends", (unsigned long long)i);
        if (it.offset + it.length < it.offset || (plain && it.offset + it.length > rawlen))
            TRAP("item %llu lies outside the data", (unsigned long long)i);
        prev_end = it.offset + it.length;
        if (it.label > PCR_SEIT_MAX_LABEL)
            TRAP("label %llu", (unsigned long long)it.label);
        uint64_t k = 0;
        for (uint64_t j = 0; j < i; j++)
            k += first[j].label == it.label;
        if (k != it.index_in_label)
            TRAP("item %llu: index_in_label %llu, want %llu", (unsigned long long)i,
                 (unsigned long long)it.index_in_label, (unsigned long long)k);

        ssize_t len = pcr_seit_name(s, i, name, sizeof(name));
        check_name(name, len);
        ssize_t l2 = pcr_seit_name(s, i, small, sizeof(small));
        if (len < (ssize_t)sizeof(small) ? (l2 != len || strcmp(small, name)) : l2 != -ENAMETOOLONG)
            TRAP("name into a short buffer: %zd (full: %zd)", l2, len);
        if (i < MAX_UNIQUE) {
            for (uint64_t j = 0; j < i; j++)
                if (strcmp(names[j], name) == 0)
                    TRAP("name \"%s\" given twice", name);
            memcpy(names[i], name, (size_t)len + 1);
        }

        unsigned odd = 0;
        if (plain) {
            pcr_seit_decode(raw + it.offset, it.length, NULL, 0, &odd);
            if (odd && odd_seen++ == 0)
                first_odd = i;
        }
        err[0] = '\0';
        int rc = pcr_seit_grid(s, i, grid, err, sizeof(err));
        if (rc == 0) {
            static uint16_t back[32 * 32];
            size_t m = pcr_tok_escape_encode(grid, (size_t)h * w, again);
            unsigned odd2 = 0;
            for (size_t j = 0; j < (size_t)h * w; j++)
                if (grid[j] > 509)
                    TRAP("item %llu: value %u above 509", (unsigned long long)i, grid[j]);
            if (plain && !odd && (m != it.length || memcmp(again, raw + it.offset, m)))
                TRAP("item %llu: the grid encodes to other bytes", (unsigned long long)i);
            if (pcr_seit_decode(again, m, back, (size_t)h * w, &odd2) != (size_t)h * w || odd2 ||
                memcmp(back, grid, (size_t)h * w * sizeof(*grid)))
                TRAP("item %llu: the grid encoded again reads back otherwise",
                     (unsigned long long)i);
        } else if (rc != -EINVAL || !err[0] || !one_clean_line(err)) {
            TRAP("grid %llu: %d without a clean one-line message: %s", (unsigned long long)i, rc,
                 err);
        }
    }
    if (plain && n <= MAX_CHECK) {
        uint64_t first = 0;
        unsigned kinds;
        uint64_t count = pcr_seit_odd(s, &first, &kinds);
        if (count != odd_seen || (count && first != first_odd) || (!count && kinds))
            TRAP("pcr_seit_odd: %llu odd images from %llu, counted %llu from %llu",
                 (unsigned long long)count, (unsigned long long)first, (unsigned long long)odd_seen,
                 (unsigned long long)first_odd);
    }
    if (pcr_seit_item(s, n, &it) != -ENOENT || pcr_seit_name(s, n, name, sizeof(name)) != -ENOENT ||
        pcr_seit_grid(s, n, grid, err, sizeof(err)) != -ENOENT)
        TRAP("index %llu (the count) did not give ENOENT", (unsigned long long)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data + (size ? 1 : 0), *end = data + size;
    const uint8_t *sec[4];
    size_t len[4];
    uint8_t flags = size ? data[0] : 0;
    bool gz_names = flags & 4;
    const char *dname = gz_names ? "a-token.data.bin.gz" : "a-token.data.bin";
    const char *iname = gz_names ? "a-token.index.npy.gz" : "a-token.index.npy";
    char dpath[400], ipath[400], lpath[400], npath[400], err[512];
    struct pcr_seit_paths paths;
    struct pcr_seit_opts opts = {shapes[(flags >> 4) & 7][0], shapes[(flags >> 4) & 7][1]};
    struct pcr_seit *s = (struct pcr_seit *)&paths; /* not NULL: open must clear it */
    int rc;

    for (int i = 0; i < 4; i++)
        section(&p, end, &sec[i], &len[i]);
    remove_files();
    put_file(dname, sec[0], len[0]);
    put_file(iname, sec[1], len[1]);
    put_file("a-label.txt", sec[2], len[2]);
    if (flags & 1)
        put_file("a-names.txt", sec[3], len[3]);
    path_of(dpath, sizeof(dpath), dname);
    path_of(ipath, sizeof(ipath), iname);
    path_of(lpath, sizeof(lpath), "a-label.txt");
    path_of(npath, sizeof(npath), "a-names.txt");
    paths.data = dpath;
    paths.index = flags & 2 ? NULL : ipath;
    paths.labels = lpath;
    paths.names = flags & 1 ? npath : NULL;

    strcpy(err, "\x01unset");
    rc = pcr_seit_open(&paths, &opts, &s, err, sizeof(err));
    if (rc != 0) {
        if (rc > 0 || s != NULL)
            TRAP("open failed with %d but set *out", rc);
        if (err[0] == '\x01' || err[0] == '\0' || !one_clean_line(err))
            TRAP("open failed with %d without a clean one-line message: \"%s\"", rc, err);
        return 0;
    }
    bool plain = !(len[0] >= 2 && sec[0][0] == 0x1f && sec[0][1] == 0x8b);
    walk(s, sec[0], len[0], plain, opts.h ? opts.h : 32, opts.w ? opts.w : 32);
    pcr_seit_close(s);
    return 0;
}
