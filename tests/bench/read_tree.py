#!/usr/bin/python3
"""Read a whole tree the way a training epoch does, and time it.

    read_tree.py [--drop-caches] [--threads N] [--seed S] [--repeat R] [--json] ROOT...
    read_tree.py --ls [--drop-caches] ROOT...

Lists ROOT (os.walk, as ImageFolder does), then reads every file completely in a
shuffled order (seed S; the same order for every ROOT with the same relative paths),
from N threads (default 1), and prints files/s and MB/s (10^6 bytes). With --repeat R
the pass is repeated R times without dropping caches in between (pass 1 cold if
--drop-caches, passes 2.. warm). --ls times `ls -lR ROOT > /dev/null` instead.

--drop-caches writes 3 to /proc/sys/vm/drop_caches before the first pass (root only):
page cache, dentries and inodes go, also the kernel's FUSE caches of a pcrfs mount
(the daemon's own index cache stays; remount for that).

Used for BENCHMARKS.md; not a test. Needs only the Python standard library.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def list_tree(root):
    files = []
    for dp, _, fns in os.walk(root):
        for name in fns:
            files.append(os.path.relpath(os.path.join(dp, name), root))
    files.sort()
    return files


def read_all(root, rels, threads, bufsize=1 << 20):
    """Read every file of @rels under @root; returns total bytes."""
    total = [0] * threads
    next_idx = [0]
    lock = threading.Lock()
    errors = []

    def worker(k):
        buf = bytearray(bufsize)
        view = memoryview(buf)
        n = 0
        while True:
            with lock:
                i = next_idx[0]
                next_idx[0] += 1
            if i >= len(rels):
                break
            try:
                fd = os.open(os.path.join(root, rels[i]), os.O_RDONLY)
                try:
                    while True:
                        got = os.readv(fd, [view])
                        if got <= 0:
                            break
                        n += got
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append((rels[i], e))
        total[k] = n

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit("read_tree: %d files failed, first: %s: %s" % (
            len(errors), errors[0][0], errors[0][1]))
    return sum(total)


def bench_read(root, args):
    results = []
    if args.drop_caches:
        drop_caches()
    t0 = time.monotonic()
    rels = list_tree(root)
    t_list = time.monotonic() - t0
    random.Random(args.seed).shuffle(rels)
    for r in range(args.repeat):
        t0 = time.monotonic()
        nbytes = read_all(root, rels, args.threads)
        dt = time.monotonic() - t0
        results.append({
            "root": root, "pass": r + 1,
            "state": "cold" if (args.drop_caches and r == 0) else "warm",
            "threads": args.threads, "files": len(rels), "bytes": nbytes,
            "list_s": round(t_list, 4) if r == 0 else None, "read_s": round(dt, 4),
            "files_per_s": round(len(rels) / dt, 1), "MB_per_s": round(nbytes / dt / 1e6, 1),
        })
    return results


def bench_ls(root, args):
    if args.drop_caches:
        drop_caches()
    t0 = time.monotonic()
    subprocess.run(["ls", "-lR", root], stdout=subprocess.DEVNULL, check=True)
    dt = time.monotonic() - t0
    return [{"root": root, "ls_lR_s": round(dt, 4),
             "state": "cold" if args.drop_caches else "warm"}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", metavar="ROOT")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ls", action="store_true", help="time ls -lR instead of reading")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args()
    for root in args.roots:
        for r in (bench_ls if args.ls else bench_read)(root, args):
            if args.json:
                print(json.dumps(r))
            elif args.ls:
                print("%-40s %-4s ls -lR %.3f s" % (r["root"], r["state"], r["ls_lR_s"]))
            else:
                print("%-40s %-4s pass %d: %d files, %.1f MB in %.3f s: %.0f files/s, "
                      "%.1f MB/s (list %s s, %d threads)" % (
                          r["root"], r["state"], r["pass"], r["files"], r["bytes"] / 1e6,
                          r["read_s"], r["files_per_s"], r["MB_per_s"], r["list_s"],
                          r["threads"]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
