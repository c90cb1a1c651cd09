#!/usr/bin/python3
"""Does reusing crops cost accuracy? A small CNN trained through refurb/ with r = 1
and r = 3, three seeds each.

    bench/refurb_accuracy.py [--work DIR] [--train-per-class K] [--epochs E] [--seeds N]

The dataset is generated here so that the class is in the pixels (the test tree's
photos are random per image): 10 classes, each a shape (disc, square, triangle, cross,
ring) in one of two colour families, drawn at a random position, size (25-60 % of the
short side) and rotation on a textured background, as 96-240 px JPEGs. A random crop
can cut the object, as RandomResizedCrop does to ImageNet photos.

Training: ImageFolder(MNT/refurb) mounted with -o refurb=R,refurb_size=64,refurb_seed=S
(the daemon does RandomResizedCrop(64) + flip), final transform ToTensor + Normalize,
SGD (lr 0.05, momentum 0.9, cosine), batch 64, a 4-layer CNN; validation on held-out
images with Resize(73) + CenterCrop(64), read from disk. Reports the final validation
accuracy per run and the mean and standard deviation per R (JSON lines, then a table).
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mount_util as mu  # noqa: E402

SHAPES = ["disc", "square", "triangle", "cross", "ring"]
FAMILIES = [((200, 60, 40), (250, 140, 60)), ((40, 80, 200), (60, 180, 220))]


def draw(rng, cls):
    shape = SHAPES[cls % 5]
    lo, hi = FAMILIES[cls // 5]
    w, h = rng.randint(96, 240), rng.randint(96, 240)
    bg = np.clip(rng.gauss(120, 10) + np.random.default_rng(rng.randrange(1 << 30))
                 .normal(0, 25, (h // 8 + 1, w // 8 + 1, 3)), 0, 255).astype(np.uint8)
    im = Image.fromarray(bg).resize((w, h), Image.BILINEAR)
    col = tuple(int(a + rng.random() * (b - a)) for a, b in zip(lo, hi))
    s = int(min(w, h) * rng.uniform(0.25, 0.6))
    cx, cy = rng.randint(s // 2, w - s // 2), rng.randint(s // 2, h - s // 2)
    layer = Image.new("L", (2 * s, 2 * s), 0)
    d = ImageDraw.Draw(layer)
    c = s
    if shape == "disc":
        d.ellipse((c - s // 2, c - s // 2, c + s // 2, c + s // 2), fill=255)
    elif shape == "square":
        d.rectangle((c - s // 2, c - s // 2, c + s // 2, c + s // 2), fill=255)
    elif shape == "triangle":
        d.polygon([(c, c - s // 2), (c - s // 2, c + s // 2), (c + s // 2, c + s // 2)], fill=255)
    elif shape == "cross":
        t = max(2, s // 6)
        d.rectangle((c - s // 2, c - t, c + s // 2, c + t), fill=255)
        d.rectangle((c - t, c - s // 2, c + t, c + s // 2), fill=255)
    else:
        d.ellipse((c - s // 2, c - s // 2, c + s // 2, c + s // 2), fill=255)
        t = max(2, s // 5)
        d.ellipse((c - s // 2 + t, c - s // 2 + t, c + s // 2 - t, c + s // 2 - t), fill=0)
    layer = layer.rotate(rng.uniform(0, 360), resample=Image.BILINEAR)
    layer = layer.filter(ImageFilter.GaussianBlur(0.7))
    im.paste(Image.new("RGB", layer.size, col), (cx - s, cy - s), layer)
    return im


def make(root, per_class, seed):
    rng = random.Random(seed)
    for k in range(10):
        os.makedirs(os.path.join(root, "c%d" % k), exist_ok=True)
        for i in range(per_class):
            draw(rng, k).save(os.path.join(root, "c%d" % k, "%04d.JPEG" % i),
                              quality=rng.randint(80, 95))


def model():
    import torch.nn as nn

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*block(3, 16), *block(16, 32), *block(32, 64), *block(64, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def train(a, store, val, r, seed):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    norm = T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])
    mnt = os.path.join(a.work, "mnt")
    m = mu.Mount(store, mnt, "-o", "refurb=%d,refurb_size=64,refurb_seed=%d" % (r, seed))
    m.start()
    try:
        torch.manual_seed(seed)
        tr = ImageFolder(os.path.join(mnt, "refurb"), transform=T.Compose([T.ToTensor(), norm]))
        va = ImageFolder(val, transform=T.Compose([T.Resize(73), T.CenterCrop(64), T.ToTensor(),
                                                   norm]))
        g = torch.Generator()
        g.manual_seed(seed)
        dl = torch.utils.data.DataLoader(tr, batch_size=64, shuffle=True, num_workers=1,
                                         generator=g)
        vl = torch.utils.data.DataLoader(va, batch_size=200)
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * len(dl))
        t0 = time.monotonic()
        for _ in range(a.epochs):
            net.train()
            for x, y in dl:
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                sched.step()
        secs = time.monotonic() - t0
        net.eval()
        right = total = 0
        with torch.no_grad():
            for x, y in vl:
                right += int((net(x).argmax(1) == y).sum())
                total += len(y)
        with open(os.path.join(mnt, ".pcrfs", "stats")) as f:
            st = json.load(f)["refurb"]
    finally:
        m.unmount()
        m.cleanup()
    return {"r": r, "seed": seed, "val_acc": right / total, "train_seconds": secs,
            "epochs": a.epochs, "prepared": st["prepared"], "opens": st["opens"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/pcrfs-bench-refurb-acc")
    ap.add_argument("--train-per-class", type=int, default=100)
    ap.add_argument("--val-per-class", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    os.makedirs(a.work, exist_ok=True)
    src = os.path.join(a.work, "train-%d" % a.train_per_class)
    val = os.path.join(a.work, "val-%d" % a.val_per_class)
    store = src + ".store"
    if not os.path.isdir(src):
        make(src, a.train_per_class, 1)
    if not os.path.isdir(val):
        make(val, a.val_per_class, 2)
    if not os.path.isdir(store):
        mu.build_store(src, store)
    res = []
    for seed in range(1, a.seeds + 1):
        for r in (1, 3):  # interleaved
            out = train(a, store, val, r, seed)
            print(json.dumps(out), flush=True)
            res.append(out)
    print("\n| r | val accuracy per seed | mean | sd | crops rendered | train s (mean) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for r in (1, 3):
        acc = [x["val_acc"] for x in res if x["r"] == r]
        print("| %d | %s | %.3f | %.3f | %d | %.0f |" % (
            r, ", ".join("%.3f" % v for v in acc), statistics.mean(acc),
            statistics.stdev(acc) if len(acc) > 1 else 0.0,
            statistics.mean(x["prepared"] for x in res if x["r"] == r),
            statistics.mean(x["train_seconds"] for x in res if x["r"] == r)))


if __name__ == "__main__":
    main()
