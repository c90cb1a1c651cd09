#!/usr/bin/python3
"""One epoch of torchvision's ImageFolder with its default Pillow loader.

    imagefolder.py ROOT [--workers N] [--batch B] [--seed S] [--limit N] [--skip F]

What a training loop's input pipeline does, minus the model: ImageFolder(ROOT) lists
the tree, a DataLoader with N worker processes opens every image in a shuffled order
and decodes it with Pillow (the default loader: Image.open + convert('RGB'), which
decodes every pixel). The batches are not collated into tensors (sizes differ; a crop
transform would add the same CPU time to every fidelity): each worker returns how many
images and how many pixels it decoded.

The rate is the steady state: each worker stamps a batch when it has decoded it
(CLOCK_MONOTONIC, one clock for all processes); the clock starts at the stamp that
ends the first F of the batches (default a quarter) and stops at the last, and the
images of the batches stamped in between are counted. That leaves out worker start-up
(fork, imports) and, under `pcrfs -o bwlimit`, the token bucket's initial burst, which
would otherwise flatter short runs. (Arrival times in the main process would not do:
batches are handed over in order, so one may arrive long after it was decoded.)
CPU time: the workers' user + system time over all images, from getrusage() once they
have exited: a figure that other jobs on the machine do not inflate. --limit N reads a random N of the images (a short epoch, for slow
bandwidth limits); the same seed picks the same images in every tree with the same
names.
Prints one JSON object: images (timed), images_all (read), seconds, images_per_s,
cpu_ms_per_image, list_seconds, mpixels (of the timed images).
"""
import argparse
import json
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader, SubsetRandomSampler
from torchvision.datasets import ImageFolder


def count(batch):
    # batch: list of (PIL image, label); the images are already decoded (convert)
    return len(batch), sum(img.width * img.height for img, _ in batch), time.monotonic()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--skip", type=float, default=0.25,
                    help="share of the batches before the clock starts")
    a = ap.parse_args()

    t0 = time.perf_counter()
    ds = ImageFolder(a.root)
    list_s = time.perf_counter() - t0
    g = torch.Generator()
    g.manual_seed(a.seed)
    if a.limit:
        idx = torch.randperm(len(ds), generator=g)[:a.limit].tolist()
        kw = {"sampler": SubsetRandomSampler(idx, generator=g)}
    else:
        kw = {"shuffle": True, "generator": g}
    dl = DataLoader(ds, batch_size=a.batch, num_workers=a.workers, collate_fn=count,
                    prefetch_factor=4 if a.workers else None, **kw)
    done = sorted((t, n, px) for n, px, t in dl)  # batches by the time they were decoded
    del dl  # the workers have exited and been reaped: their CPU time is in RUSAGE_CHILDREN
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = min(len(done) - 2, max(0, int(len(done) * a.skip)))
    if start < 0:
        sys.exit("imagefolder: too few batches to time (need 2)")
    timed = done[start + 1:]
    secs = done[-1][0] - done[start][0]
    images = sum(n for _, n, _ in timed)
    images_all = sum(n for _, n, _ in done)
    json.dump({"root": a.root, "workers": a.workers, "images": images,
               "images_all": images_all, "seconds": secs,
               "images_per_s": images / secs if secs > 0 else 0.0,
               "cpu_ms_per_image": 1e3 * (ru.ru_utime + ru.ru_stime) / images_all,
               "list_seconds": list_s, "mpixels": sum(p for _, _, p in timed) / 1e6},
              sys.stdout)
    print()


if __name__ == "__main__":
    main()
