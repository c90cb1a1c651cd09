#!/usr/bin/python3
"""Read the files of a tree in a given order, whole (for bench/s3.py and
bench/node_throughput.py).

    order_read.py ROOT ORDER|--sampler [--decode] [--timeout S] [--threads N]
                  [--cpu-pids NAME=PID,...] [--list] [--after N] [--limit N]
                  [--prefetch-ahead K]

ORDER is a file of relative paths, one a line (the order an ImageFolder with a
given sampler would open them). Each file is read as ImageFolder's loaders read
it: open(p, 'rb', buffering=0).read(); with --decode, Pillow then decodes it
(Image.open on the bytes, convert('RGB')). With --threads N (default 1), N threads
take the next path of the order in turn, as DataLoader workers take the next
batch, so up to N files are being read at once. With --sampler instead of ORDER,
the order is drawn as it is read from pcrfs.RecordSampler(ImageFolder(ROOT), seed=0,
prefetch=True) (ROOT on a pcrfs mount; --prefetch-ahead K: its prefetch_ahead, default
the sampler's), which names the records coming next to the
mount as a DataLoader's sampler would (the same order as without hints). Prints one
JSON object: files, bytes, seconds, files_per_s, mb_per_s, timed_out, and cpu.

--timeout S ends a run after S seconds (no new file is started; the files being read
then are read to their end): seconds runs from the first open to the last byte, so
mb_per_s is bytes / the time to the last byte, whether the timeout or the end of the
order ended the run (timed_out false: the whole order was read, and the rate is
that of a run shorter than S). cpu (bench/cpustat.py) covers that same interval:
the CPU seconds of the readers (self), of each --cpu-pids process (e.g. the daemon
serving ROOT) and the machine's idle time.
--limit N reads only the first N files of the order (0, the default: all of them).
order_sha1 is the SHA-1 of the relative paths started, one a line, in the order
started: two runs read the same files in the same order when they print the same.
--list first lists ROOT as torchvision's ImageFolder does (os.scandir of ROOT, then
os.walk of each class directory: names and d_type, no stat), in the same process
and before the clock starts; list_seconds says how long that took (0 without it).

--after N adds "after": the rate from the moment N files were read to the last
byte (bytes, seconds, mb_per_s; null when fewer than N + 1 files were read or less
than 2 s remained): with N = a RecordSampler window's samples, the rate once the
first window is in, which a fresh mount reaches only after its first parts arrived
(a part of 8 MiB at 2 MB/s: ~4 s) and which is what a long training run sees.
first_s is the time to the first file read.
"""
import hashlib
import io
import json
import os
import sys
import threading
import time

import cpustat


def opt(name, default):
    """The value after --@name in argv (removed from it), or @default."""
    if name not in sys.argv:
        return default
    i = sys.argv.index(name)
    v = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    return v


class sampled:
    """The paths of RecordSampler(ImageFolder(@root), prefetch=True)'s order, drawn
    from the sampler as they are indexed (the hints go out as the readers advance)."""

    def __init__(self, root, ahead=None):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "python"))
        import pcrfs
        from torchvision.datasets import ImageFolder
        self.ds = ImageFolder(root)
        kw = {} if ahead is None else {"prefetch_ahead": ahead}
        self.it = iter(pcrfs.RecordSampler(self.ds, seed=0, prefetch=True, **kw))
        self.got = []

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        while len(self.got) <= i:
            self.got.append(self.ds.samples[next(self.it)][0])
        return self.got[i]


def list_tree(root):
    """ImageFolder's listing of @root (torchvision's find_classes and make_dataset):
    the class directories, then every file under each; returns the files seen."""
    n = 0
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    for c in classes:
        for _, _, files in os.walk(os.path.join(root, c), followlinks=True):
            n += len(files)
    return n


def main():
    timeout = float(opt("--timeout", 0))
    threads = max(1, int(opt("--threads", 1)))
    pids = cpustat.parse_pids(opt("--cpu-pids", ""))
    limit = max(0, int(opt("--limit", 0)))
    decode = "--decode" in sys.argv
    after = int(opt("--after", 0))
    ahead = opt("--prefetch-ahead", None)
    if "--sampler" in sys.argv:
        (root,) = [x for x in sys.argv[1:] if not x.startswith("--")]
        paths = sampled(root, None if ahead is None else int(ahead))
    else:
        root, order = [x for x in sys.argv[1:] if not x.startswith("--")]
        with open(order) as f:
            paths = [os.path.join(root, line.rstrip("\n")) for line in f if line.strip()]
    if decode:
        from PIL import Image
    list_secs = 0.0
    if "--list" in sys.argv:
        t = time.perf_counter()
        list_tree(root)
        list_secs = time.perf_counter() - t
    total = min(len(paths), limit) if limit else len(paths)
    n = nbytes = done = 0
    mark = {}  # when @after files were read: t, bytes
    lock = threading.Lock()
    meter = cpustat.Meter(pids)
    t0 = time.perf_counter()

    def worker():
        nonlocal n, nbytes, done
        while True:
            with lock:
                if n >= total or (timeout and time.perf_counter() - t0 > timeout):
                    return
                p = paths[n]
                n += 1
            with open(p, "rb", buffering=0) as f:
                data = f.read()
            if decode:
                Image.open(io.BytesIO(data)).convert("RGB")
            with lock:
                nbytes += len(data)
                done += 1
                if done == 1:
                    mark["first"] = time.perf_counter() - t0
                if done == after:
                    mark.update(t=time.perf_counter() - t0, bytes=nbytes)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    late = None
    if after and done > after and secs - mark["t"] >= 2:
        late = {"files": done - after, "bytes": nbytes - mark["bytes"],
                "seconds": secs - mark["t"],
                "mb_per_s": (nbytes - mark["bytes"]) / (secs - mark["t"]) / 1e6}
    sha = hashlib.sha1("".join(os.path.relpath(paths[i], root) + "\n"
                               for i in range(n)).encode()).hexdigest()
    json.dump({"root": root, "decode": decode, "threads": threads, "files": n,
               "bytes": nbytes, "seconds": secs, "files_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6,
               "timed_out": n < total, "cpu": cpu, "list_seconds": list_secs,
               "first_s": mark.get("first"), "after": late, "order_sha1": sha}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
