#!/usr/bin/python3
"""Where a cold pass of a local mount waits: per-file read times, interleaved rounds.

    cold_stalls.py --pcrfs BIN --store STORE --plain DIR --order FILE --view VIEW
                   [--rounds N] [--dump DIR] KIND...

Each round reads, for plain files (DIR: `pcrinfo --extract` of STORE at VIEW's
level) and then for each KIND, the files of ORDER (relative paths, one a line, as
bench/s3.py writes order-record.txt) whole and in order, one thread,
open(p, 'rb', buffering=0).read() to the end, right after `sync; echo 3 >
/proc/sys/vm/drop_caches`; each KIND on a fresh mount of STORE. A KIND is
LABEL=[VAR=VALUE ...] [pcrfs options], e.g. ra=-o readahead=record, or with
environment variables for a patched daemon: idle=PCRFS_X=3 -o readahead=record.

Per run it prints the pass's seconds and files/s, the median, 99th percentile and
largest per-file time, how many files took over 1 ms and their sum (the stalls), and
the time to the first tenth of the files; at the end, each kind's median pass and
its ratio to plain files' (BENCHMARKS.md section 13: plain / pcrfs, so higher is
better). --dump DIR keeps each run's per-file times (JSON lists). Runs as root.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_pass(root, paths):
    drop_caches()
    lat = []
    t0 = time.monotonic()
    for p in paths:
        a = time.monotonic()
        with open(os.path.join(root, p), "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
        lat.append(time.monotonic() - a)
    return time.monotonic() - t0, lat


def mounted_pass(a, spec, paths):
    words = spec.split()
    env = dict(os.environ)
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    mnt = a.mountpoint
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([a.pcrfs, a.store, mnt] + words, check=True, env=env,
                   stderr=subprocess.DEVNULL, timeout=60)
    try:
        time.sleep(0.2)
        return read_pass(os.path.join(mnt, a.view), paths)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], timeout=60)
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcrfs", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--plain", required=True)
    ap.add_argument("--order", required=True)
    ap.add_argument("--view", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mountpoint", default="/tmp/pcrfs-cold-stalls")
    ap.add_argument("--dump")
    ap.add_argument("kinds", nargs="+", metavar="KIND")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cold_stalls.py: run as root (drop_caches, FUSE mounts)")
    with open(a.order) as f:
        paths = [line.strip() for line in f if line.strip()]
    kinds = [("plain", None)] + [tuple(k.split("=", 1)) for k in a.kinds]
    res = {k: [] for k, _ in kinds}
    for r in range(a.rounds):
        for label, spec in kinds:
            t, lat = read_pass(a.plain, paths) if spec is None else mounted_pass(a, spec, paths)
            res[label].append(t)
            s = sorted(lat)
            slow = [x for x in lat if x > 0.001]
            tenth = sum(lat[:len(lat) // 10])
            print("round %d %-10s %.3f s %6.0f files/s  median %.2f ms p99 %.2f max %.1f"
                  "  >1 ms: %d files, %.3f s  first tenth: %.3f s"
                  % (r + 1, label, t, len(lat) / t, s[len(s) // 2] * 1e3,
                     s[int(len(s) * 0.99)] * 1e3, s[-1] * 1e3, len(slow), sum(slow), tenth),
                  flush=True)
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                with open(os.path.join(a.dump, "%s-%d.json" % (label, r + 1)), "w") as f:
                    json.dump(lat, f)
    plain = statistics.median(res["plain"])
    for label, _ in kinds:
        m = statistics.median(res[label])
        print("%-10s median %.3f s, plain / this %.2f (runs %s)"
              % (label, m, plain / m, " ".join("%.3f" % x for x in res[label])))


if __name__ == "__main__":
    main()
