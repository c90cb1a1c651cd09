#!/usr/bin/python3
"""Per-file cost of Python loaders, warm, one thread: a pcrfs view against plain files
with the same bytes, measured interleaved (A, B, A, B, ...) in one process.

    pyloader.py --a DIR --b DIR [--mode M[,M...]] [--rounds N] [--limit N] [--seed S]

Modes (each one pass over the same shuffled list of files per round and tree):
  buffered    open(p, "rb").read()            CPython's default: isatty() + a buffer of
                                              st_blksize bytes on every open
  unbuffered  open(p, "rb", buffering=0).read()  no isatty, no buffer
  walk        os.walk(DIR) + unbuffered reads of what it lists (what a loader that
              lists its tree and reads each file does)
  isatty      os.open + os.isatty + os.close  (the TCGETS ioctl alone)
  pil         torchvision's default loader: open(p, "rb") + Image.open + convert("RGB")
  pil_pcrfs   pcrfs.pil_loader: io.FileIO (no isatty) + Image.open + convert("RGB")

Every tree is read once before the rounds (warm); then each round runs every mode on
both trees, so that all comparisons are interleaved in time. Prints one JSON object:
per mode and tree the per-file microseconds of every round and their median, per round
the ratio A/B of files per second (B's time over A's: 1.0 = as fast as B) with its
median, this process's CPU time per file (time.process_time), and with --daemon-pid
the daemon's wake-ups per file of A (a count, which the machine's load does not
change: one per FUSE round trip), its CPU time per file (schedstat) and the CPU ratio
B / (A + daemon): what a file costs both processes, which other jobs' load inflates
far less than wall time.
"""
import argparse
import io
import json
import os
import random
import statistics
import sys
import time


def files_of(root):
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.relpath(os.path.join(d, f), root) for f in fs]
    out.sort()
    return out


def pil_default(path):
    from PIL import Image
    with open(path, "rb") as f:  # torchvision.datasets.folder.pil_loader
        img = Image.open(f)
        return img.convert("RGB")


def pil_pcrfs(path):
    from PIL import Image
    with io.FileIO(path, "r") as f:  # what python/pcrfs's pil_loader does
        data = f.readall()
    return Image.open(io.BytesIO(data)).convert("RGB")


def one_pass(mode, root, rels):
    """One pass; @return (wall seconds, CPU seconds of this process, files)."""
    c0, t0 = time.process_time(), time.perf_counter()
    n = 0
    if mode == "walk":
        for d, _, fs in os.walk(root):
            for f in fs:
                with open(os.path.join(d, f), "rb", buffering=0) as fh:
                    fh.read()
                n += 1
        return time.perf_counter() - t0, time.process_time() - c0, n
    paths = [os.path.join(root, r) for r in rels]
    c0, t0 = time.process_time(), time.perf_counter()
    if mode == "buffered":
        for p in paths:
            with open(p, "rb") as f:
                f.read()
    elif mode == "unbuffered":
        for p in paths:
            with open(p, "rb", buffering=0) as f:
                f.read()
    elif mode == "isatty":
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            os.isatty(fd)
            os.close(fd)
    elif mode == "pil":
        for p in paths:
            pil_default(p)
    elif mode == "pil_pcrfs":
        for p in paths:
            pil_pcrfs(p)
    else:
        raise SystemExit("pyloader: unknown mode %r" % mode)
    return time.perf_counter() - t0, time.process_time() - c0, len(paths)


def wakeups(pid):
    """The daemon's voluntary context switches and CPU nanoseconds, all threads: a
    switch per request that found its worker asleep, i.e. one per round trip of a
    one-thread reader (threads that libfuse retires take their counts with them,
    which only happens when more than max_idle_threads are idle)."""
    n = cpu = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        n += int(line.split()[1])
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                cpu += int(f.read().split()[0])
        except FileNotFoundError:  # a worker that libfuse retired meanwhile
            pass
    return n, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the tree measured (e.g. MNT/scan1)")
    ap.add_argument("--b", required=True, help="the reference (plain files, same names)")
    ap.add_argument("--mode", default="buffered,unbuffered,walk,isatty,pil,pil_pcrfs")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--limit", type=int, default=0, help="files per pass (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--daemon-pid", type=int, default=0,
                    help="count the wake-ups of this daemon during the passes over --a")
    a = ap.parse_args()
    rels = files_of(a.b)
    random.Random(a.seed).shuffle(rels)
    if a.limit:
        rels = rels[:a.limit]
    modes = a.mode.split(",")
    out = {"files": len(rels), "rounds": a.rounds, "a": a.a, "b": a.b, "modes": {},
           "loadavg_start": os.getloadavg()}
    for mode in modes:
        for root in (a.a, a.b):  # warm: page cache, dentries, attributes, imports
            one_pass(mode, root, rels)
    us = {m: {"a": [], "b": []} for m in modes}
    cpu = {m: {"a": [], "b": []} for m in modes}
    wk = {m: [] for m in modes}
    dcpu = {m: [] for m in modes}
    # rounds outside, modes and trees inside: every comparison is interleaved in time
    for _ in range(a.rounds):
        for mode in modes:
            for key, root in (("a", a.a), ("b", a.b)):
                count = a.daemon_pid and key == "a"
                w0 = wakeups(a.daemon_pid) if count else (0, 0)
                t, c, n = one_pass(mode, root, rels)
                us[mode][key].append(1e6 * t / n)
                cpu[mode][key].append(1e6 * c / n)
                if count:
                    w1 = wakeups(a.daemon_pid)
                    wk[mode].append((w1[0] - w0[0]) / n)
                    dcpu[mode].append((w1[1] - w0[1]) / 1e3 / n)
    for mode in modes:
        ua, ub = us[mode]["a"], us[mode]["b"]
        ca, cb = cpu[mode]["a"], cpu[mode]["b"]
        ratios = [b / x for x, b in zip(ua, ub)]
        r = out["modes"][mode] = {
            "us_a": ua, "us_b": ub, "median_us_a": statistics.median(ua),
            "median_us_b": statistics.median(ub), "ratios": ratios,
            "ratio": statistics.median(ratios),
            "cpu_us_a": statistics.median(ca), "cpu_us_b": statistics.median(cb)}
        if wk[mode]:
            r["wakeups_per_file"] = statistics.median(wk[mode])
            r["daemon_cpu_us"] = statistics.median(dcpu[mode])
            # the CPU both processes spend per file against what plain files cost
            r["cpu_ratio"] = statistics.median(
                [b / (x + d) for x, b, d in zip(ca, cb, dcpu[mode])])
    out["loadavg"] = os.getloadavg()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
