/* pcrfs — usage and --help (main.c): the driver's options, then each view's from
 * its descriptor (src/lib/view/). Every option here is in pcrfs(1) too. */
#include <stdio.h>

#include "fs.h"

void pcrfs_usage(FILE *out)
{
    fprintf(out, "usage: pcrfs STORE MOUNTPOINT [options]\n"
                 "       pcrfs --help | --version\n");
}

void pcrfs_help(void)
{
    pcrfs_usage(stdout);
    printf("\n"
           "Mount the pcrfs store STORE (built by mkpcrfs) read-only at MOUNTPOINT.\n"
           "Views: scan1/ .. scanL/ (the first K scans of every JPEG), full/ (every\n"
           "scan: the original pixels), tokens/ (token grids as NumPy .tok files, if\n"
           "the store has them), q90/ q95/ q99/ (stores built with --quality), mix/\n"
           "(with -o mix=LO-HI), refurb/ (with -o refurb=R), .pcrfs/info and\n"
           ".pcrfs/stats (JSON).\n"
           "Unmount with: fusermount3 -u MOUNTPOINT\n"
           "Without -f the command returns once the mount serves (exit 0), or prints\n"
           "why it failed (exit 1). MOUNTPOINT must be an empty directory that is not a\n"
           "mount point and not inside STORE; logfile=, cache= and refurb_cache= are made\n"
           "absolute and may not lie inside MOUNTPOINT or STORE.\n"
           "\n"
           "Values are strict: whole numbers are decimal digits only (no sign, hex,\n"
           "octal, exponent or trailing bytes), decimals add an optional fraction; a\n"
           "bad or empty value exits 2 with one line naming it. Given twice: every\n"
           "value is checked, the last one counts (see Values in pcrfs(1)).\n"
           "\n"
           "pcrfs options:\n"
           "    -o timeout=SECS        entry, attribute and negative-lookup timeout\n"
           "                           (0..31536000, default 86400; the store never\n"
           "                           changes)\n"
           "    -o nokeep_cache        let the kernel drop a file's cached pages when it\n"
           "                           is opened again (for cold-read measurements;\n"
           "                           implies -o open)\n"
           "    -o open                send every open(2) to the daemon (one round trip\n"
           "                           each); by default a read-only mount lets the\n"
           "                           kernel skip OPEN, 1.5-3x faster warm reads\n"
           "    -o bwlimit=RATE        read at most RATE bytes/s from the records, all\n"
           "                           threads together (suffix k/K, M, G: powers of\n"
           "                           1000; up to 1000G; 0: none); emulates slow\n"
           "                           storage for benchmarks\n"
           "    -o readahead=record    on the first read of a record at a level, ask the\n"
           "                           kernel to read the record's scan groups up to it\n"
           "                           (for record-ordered readers, pcrfs.RecordSampler);\n"
           "                           default kernel: the kernel's own per-file readahead\n"
           "    -o read_ahead_kb=N     the kernel's readahead for the mount's files, in kB\n"
           "                           (0..1048576; default 1024: one READ per image up\n"
           "                           to 1 MiB; 0: the kernel's 128; needs root, else\n"
           "                           ignored)\n"
           "    -o nonempty            mount over a directory that is not empty or is\n"
           "                           already a mount point\n"
           "    -o logfile=PATH        append the daemon's messages to PATH, one line\n"
           "                           each with a UTC timestamp, instead of syslog\n"
           "                           (detached) or standard error (-f)\n"
           "    -o rw                  do not add \"ro\" (writes still fail with EROFS)\n"
           "\n"
           "STORE may be s3://BUCKET/PREFIX or http[s]://HOST/PATH (a store copied into\n"
           "object storage; credentials from the AWS default chain: environment, web\n"
           "identity, ~/.aws profile, container, EC2 instance metadata; see pcrfs(1)):\n"
           "    -o cache=DIR           where index.db and record prefixes are cached\n"
           "                           (default $XDG_CACHE_HOME/pcrfs, ~/.cache/pcrfs, or\n"
           "                           /var/cache/pcrfs for root)\n"
           "    -o cache_size=SIZE     bytes of record prefixes kept (1..1000000G, suffix\n"
           "                           k/K, M, G; default 1G or 10%% of the cache's file\n"
           "                           system)\n"
           "    -o http_timeout=SECS   deadline of one request (0..86400; default and 0:\n"
           "                           10); a read waits at most 2x this in all, 30 s\n"
           "                           while the server throttles (503 SlowDown, 429)\n"
           "    -o http_retries=N      retries of a failed request (0..20, default 3)\n"
           "    -o http_part_size=SIZE bytes of one GET of a record prefix (64k..1G,\n"
           "                           default 8M)\n"
           "    -o http_connections=N  part GETs in flight at once (1..256, default 32)\n"
           "                           (these and the four below with a local STORE:\n"
           "                           exit 2)\n"
           "    -o endpoint=URL        S3-compatible server (default AWS_ENDPOINT_URL_S3,\n"
           "                           AWS_ENDPOINT_URL, the profile's endpoint_url)\n"
           "    -o region=REGION       signing region (default AWS_REGION, the profile's)\n"
           "    -o profile=NAME        profile of ~/.aws/credentials and ~/.aws/config\n"
           "    -o ca_bundle=FILE      PEM CAs for https (default AWS_CA_BUNDLE)\n"
           "    -o readdirplus=yes|auto|no  list directories with attributes: yes makes\n"
           "                           `ls -l` and the first stat/open of each file\n"
           "                           cheaper, no (the default) makes names-only walks\n"
           "                           (find, os.walk, ImageFolder) about 2x faster\n"
           "    -o max_readahead=N, max_background=N, congestion_threshold=N,\n"
           "       [no_]splice_read, async_read, sync_read\n"
           "                           kernel connection options (libfuse's)\n"
           "\n"
           "The views' options (their ranges need the store: checked once it is open):\n");
    for (size_t i = 0; i < pcr_view_ndescs; i++)
        if (pcr_view_descs[i]->help)
            fputs(pcr_view_descs[i]->help, stdout);
    printf("\n"
           "pcrfs always adds -o ro,default_permissions,fsname=STORE,subtype=pcrfs\n"
           "unless given otherwise (with -o level=K: only fsname and subtype).\n"
           "\n"
           "FUSE options (auto_unmount: for an ordinary user only with allow_other or\n"
           "allow_root, see pcrfs(1)):\n");
    fuse_cmdline_help();
    fuse_lowlevel_help();
}
