#!/usr/bin/python3
"""Where a cold pass of a local mount waits: per-file read times, interleaved rounds.

    cold_stalls.py --pcrfs BIN --store STORE --plain DIR --order FILE --view VIEW
                   [--rounds N] [--warm] [--dump DIR] KIND...

Each round reads, for plain files (DIR: `pcrinfo --extract` of STORE at VIEW's
level) and then for each KIND, the files of ORDER (relative paths, one a line, as
bench/s3.py writes order-record.txt) whole and in order, one thread,
open(p, 'rb', buffering=0).read() to the end, right after `sync; echo 3 >
/proc/sys/vm/drop_caches`; each KIND on a fresh mount of STORE. A KIND is
LABEL=[VAR=VALUE ...] [pcrfs options], e.g. ra=-o readahead=record, or with
environment variables for a patched daemon: idle=PCRFS_X=3 -o readahead=record. The
variable CPU=N is not passed on: it pins the reader and every thread of the daemon
to CPU N for that kind's passes (os.sched_setaffinity, as taskset(1) does).
With --warm nothing is dropped: before each pass the record files and the plain
files are read once, so the pass measures the mount's cost per file with its bytes
in the page cache (still a fresh mount, so every file still has its LOOKUP).

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
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
import mount_util as mu  # noqa: E402  (the one mount helper of the tests and benches)


def read_one(path):
    """The whole file, as a DataLoader worker reads it (unbuffered, 1 MiB reads)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass


def read_all(root, paths):
    for p in paths:
        read_one(os.path.join(root, p))


def prepare(a, paths):
    """Cold: drop the page cache. Warm: read the records and the plain files once."""
    if not a.warm:
        mu.drop_caches()
        return
    records = os.path.join(a.store, "records")
    read_all(records, sorted(os.listdir(records)))
    read_all(a.plain, paths)


def read_pass(a, root, paths):
    prepare(a, paths)
    lat = []
    t0 = time.monotonic()
    for p in paths:
        t = time.monotonic()
        read_one(os.path.join(root, p))
        lat.append(time.monotonic() - t)
    return time.monotonic() - t0, lat


def pin(pid, cpu):
    """Every thread of @pid on CPU @cpu (threads started later inherit it)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        os.sched_setaffinity(int(tid), {cpu})


def mounted_pass(a, spec, paths):
    words = spec.split()
    env = dict(os.environ)
    cpu = None
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        if k == "CPU":
            cpu = int(v)
        else:
            env[k] = v
    os.makedirs(a.mountpoint, exist_ok=True)
    m = mu.Mount(a.store, a.mountpoint, *words, pcrfs=a.pcrfs, env=env,
                 errpath=a.mountpoint.rstrip("/") + ".log")
    mine = os.sched_getaffinity(0)
    try:
        m.start(timeout=60)
        if cpu is not None:
            pin(m.proc.pid, cpu)
            os.sched_setaffinity(0, {cpu})
        return read_pass(a, os.path.join(a.mountpoint, a.view), paths)
    finally:
        os.sched_setaffinity(0, mine)
        m.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcrfs", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--plain", required=True)
    ap.add_argument("--order", required=True)
    ap.add_argument("--view", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mountpoint", default="/tmp/pcrfs-cold-stalls")
    ap.add_argument("--warm", action="store_true",
                    help="records and plain files in the page cache, not dropped")
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
            t, lat = read_pass(a, a.plain, paths) if spec is None else mounted_pass(a, spec, paths)
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
