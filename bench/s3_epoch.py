#!/usr/bin/python3
"""One epoch (or a bounded part of one) of torchvision's ImageFolder + Pillow in a
given sample order, for bench/s3.py.

    s3_epoch.py ROOT [--sampler record|random|sequential] [--loader pcrfs|default]
                [--workers 2] [--batch 32] [--seed 0] [--limit N] [--timeout S]

A DataLoader with --workers processes decodes every image (the loader: pcrfs.pil_loader,
or torchvision's default Pillow loader) and applies ToTensor; batches are counted, not
collated (sizes differ). --sampler record is pcrfs.RecordSampler (record by record,
window 8); random is torch's RandomSampler (seeded); sequential is the sorted order
of ImageFolder. --limit N reads the first N indices of that order; --timeout S stops
after S seconds (the images done by then are counted; "timed_out" says so).
Prints one JSON object: images, seconds (from the first request of an iterator to
the last batch, worker start included), images_per_s, first_batch_s.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler  # noqa: E402
from torchvision import transforms  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

import pcrfs  # noqa: E402


def count(batch):
    return len(batch)


class Prefix(torch.utils.data.Sampler):
    """The first @n indices of @inner's order."""

    def __init__(self, inner, n):
        self.inner, self.n = inner, n

    def __iter__(self):
        for i, x in enumerate(self.inner):
            if i >= self.n:
                return
            yield x

    def __len__(self):
        return min(self.n, len(self.inner))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--sampler", choices=("record", "random", "sequential"), default="record")
    ap.add_argument("--loader", choices=("pcrfs", "default"), default="pcrfs")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=0)
    a = ap.parse_args()

    kw = {"loader": pcrfs.pil_loader} if a.loader == "pcrfs" else {}
    t0 = time.perf_counter()
    ds = ImageFolder(a.root, transform=transforms.ToTensor(), **kw)
    list_s = time.perf_counter() - t0
    if a.sampler == "record":
        sampler = pcrfs.RecordSampler(ds, seed=a.seed)
    elif a.sampler == "random":
        g = torch.Generator()
        g.manual_seed(a.seed)
        sampler = RandomSampler(ds, generator=g)
    else:
        sampler = SequentialSampler(ds)
    if a.limit:
        sampler = Prefix(sampler, a.limit)
    dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                    collate_fn=count, prefetch_factor=2 if a.workers else None)
    images, first, timed_out = 0, None, False
    t0 = time.perf_counter()
    for n in dl:
        images += n
        if first is None:
            first = time.perf_counter() - t0
        if a.timeout and time.perf_counter() - t0 > a.timeout:
            timed_out = True
            break
    secs = time.perf_counter() - t0
    del dl
    json.dump({"root": a.root, "sampler": a.sampler, "loader": a.loader, "images": images,
               "planned": len(sampler), "seconds": secs, "images_per_s": images / secs,
               "first_batch_s": first, "list_seconds": list_s, "timed_out": timed_out},
              sys.stdout)
    print()


if __name__ == "__main__":
    main()
