#!/usr/bin/python3
"""Read the files of a tree in a given order, whole (for bench/s3.py and
bench/node_throughput.py).

    order_read.py ROOT ORDER [--decode] [--timeout S] [--threads N]

ORDER is a file of relative paths, one a line (the order an ImageFolder with a
given sampler would open them). Each file is read as ImageFolder's loaders read
it: open(p, 'rb', buffering=0).read(); with --decode, Pillow then decodes it
(Image.open on the bytes, convert('RGB')). With --threads N (default 1), N threads
take the next path of the order in turn, as DataLoader workers take the next
batch, so up to N files are being read at once. Prints one JSON object: files,
bytes, seconds, files_per_s, mb_per_s.
"""
import io
import json
import os
import sys
import threading
import time


def opt(name, default):
    """The value after --@name in argv (removed from it), or @default."""
    if name not in sys.argv:
        return default
    i = sys.argv.index(name)
    v = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    return v


def main():
    timeout = float(opt("--timeout", 0))
    threads = max(1, int(opt("--threads", 1)))
    decode = "--decode" in sys.argv
    root, order = [x for x in sys.argv[1:] if not x.startswith("--")]
    with open(order) as f:
        paths = [os.path.join(root, line.rstrip("\n")) for line in f if line.strip()]
    if decode:
        from PIL import Image
    n = nbytes = 0
    lock = threading.Lock()
    t0 = time.perf_counter()

    def worker():
        nonlocal n, nbytes
        while True:
            with lock:
                if n >= len(paths) or (timeout and time.perf_counter() - t0 > timeout):
                    return
                p = paths[n]
                n += 1
            with open(p, "rb", buffering=0) as f:
                data = f.read()
            if decode:
                Image.open(io.BytesIO(data)).convert("RGB")
            with lock:
                nbytes += len(data)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    json.dump({"root": root, "decode": decode, "threads": threads, "files": n,
               "bytes": nbytes, "seconds": secs, "files_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6,
               "timed_out": n < len(paths)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
