#!/usr/bin/python3
"""Write the seed corpus of fuzz_seit (tests/fuzz/fuzz_seit.c describes the input).

Each seed is a valid SeiT release (or one with a single, typical defect), so that the
fuzzer starts past the checks and reaches items, names and grids: plain and gzip data
and index files, concatenated gzip members, offsets of several dtypes and byte
orders, labels with CRLF and trailing blank lines, a names file, all three forms of
the escape code (values < 255, 255..509, and the store's four-byte form for >= 510,
which SeiT's reader, and so pcr_seit_decode(), reads as a repeated escape), and
several grid shapes.

    /usr/bin/python3 tests/fuzz/mkseeds_seit.py tests/fuzz/corpus/seit
"""
import gzip
import hashlib
import io
import os
import sys

import numpy as np

SEP = b"@@@@"
SHAPES = [(32, 32), (1, 1), (3, 2), (4, 4), (1, 7), (32, 32), (2, 1), (16, 16)]


def escape(values):
    out = bytearray()
    for v in values:
        v = int(v)
        if v < 255:
            out.append(v)
        elif v < 510:
            out += bytes([255, v - 255])
        else:
            out += bytes([255, 255, (v - 510) >> 8, (v - 510) & 255])
    return bytes(out)


def npy(arr):
    b = io.BytesIO()
    np.save(b, arr)
    return b.getvalue()


def gz(b):
    return gzip.compress(b, mtime=0)


def seed(flags, data, index, labels, names=None):
    parts = [data, index, labels] + ([names] if names is not None else [])
    return bytes([flags]) + SEP.join(parts)


def release(rng, shape, n, k, dtype="<i8", labels=None):
    h, w = SHAPES[shape]
    grids = rng.integers(0, k, size=(n, h * w))
    grids[0, 0] = k - 1
    blobs = [escape(g) for g in grids]
    off = np.cumsum([0] + [len(b) for b in blobs]).astype(dtype)
    labels = labels if labels is not None else [int(x) for x in rng.integers(0, 3, size=n)]
    return b"".join(blobs), npy(off), "".join("%d\n" % l for l in labels).encode()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    seeds = []
    d, i, l = release(rng, 3, 3, 391)
    seeds.append(seed(3 << 4, d, i, l))
    d, i, l = release(rng, 1, 6, 700, "<u4")
    seeds.append(seed((1 << 4) | 1, d, i, l, b"a/x.JPEG\nb/y.JPEG\na/z\nc\nd/e/f\nb/q\n"))
    d, i, l = release(rng, 2, 4, 300, ">i4")
    seeds.append(seed((2 << 4) | 2 | 4, gz(d), gz(i), l.replace(b"\n", b"\r\n") + b"\n\n"))
    d, i, l = release(rng, 4, 5, 256, "<u2")
    seeds.append(seed((4 << 4) | 4, gz(d[:7]) + gz(d[7:]), i, l))  # two gzip members
    d, i, l = release(rng, 0, 2, 391)
    seeds.append(seed(0, d, gz(i), l))
    d, i, l = release(rng, 6, 8, 65535 - 1, "<i2")
    seeds.append(seed((6 << 4) | 1, d, i, l, b"".join(b"n%d\n" % j for j in range(8))))
    d, i, l = release(rng, 7, 1, 391, labels=[16777215])
    seeds.append(seed(7 << 4, d, i, l))
    # typical defects, each one check away from a valid release
    d, i, l = release(rng, 3, 3, 391)
    seeds.append(seed(3 << 4, d[:-1], i, l))                         # last image short
    seeds.append(seed(3 << 4, d, i, l + b"2\n"))                     # one label too many
    seeds.append(seed((3 << 4) | 1, d, i, l, b"a\n../b\nc\n"))       # escaping name
    seeds.append(seed((3 << 4) | 1, d, i, l, b"a\nb\na\n"))          # duplicate name
    seeds.append(seed(3 << 4, d, npy(np.array([0, 9, 5, len(d)])), l))  # not monotonic
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        with open(os.path.join(out, name), "wb") as f:
            f.write(s)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
