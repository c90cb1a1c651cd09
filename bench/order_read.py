#!/usr/bin/python3
"""Read the files of a tree in a given order, whole, in one thread (for bench/s3.py).

    order_read.py ROOT ORDER [--decode] [--timeout S]

ORDER is a file of relative paths, one a line (the order an ImageFolder with a
given sampler would open them). Each file is read as ImageFolder's loaders read
it: open(p, 'rb', buffering=0).read(); with --decode, Pillow then decodes it
(Image.open on the bytes, convert('RGB')). Prints one JSON object: files, bytes,
seconds, files_per_s, mb_per_s.
"""
import io
import json
import os
import sys
import time


def main():
    args = [x for x in sys.argv[1:] if not x.startswith("--")]
    decode = "--decode" in sys.argv
    timeout = 0.0
    if "--timeout" in sys.argv:
        timeout = float(sys.argv[sys.argv.index("--timeout") + 1])
        args.remove(sys.argv[sys.argv.index("--timeout") + 1])
    root, order = args
    with open(order) as f:
        paths = [os.path.join(root, line.rstrip("\n")) for line in f if line.strip()]
    if decode:
        from PIL import Image
    n = nbytes = 0
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            data = f.read()
        nbytes += len(data)
        if decode:
            Image.open(io.BytesIO(data)).convert("RGB")
        n += 1
        if timeout and time.perf_counter() - t0 > timeout:
            break
    secs = time.perf_counter() - t0
    json.dump({"root": root, "decode": decode, "files": n, "bytes": nbytes, "seconds": secs,
               "files_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6,
               "timed_out": n < len(paths)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
