#!/usr/bin/python3
"""Fidelity autotuning with PCR's gradient-similarity rule, driving pcrfs's dynamic view.

    examples/autotune.py [--work DIR] [--build BUILD] [--epochs 8] [--retune 2]
                         [--threshold 0.8] [--probe-batches 3] [--scans fast]

What it does, end to end, on generated data (needs Debian's python3-torch,
python3-torchvision, python3-pil, python3-numpy, and the built mkpcrfs and pcrfs):

 1. Makes a small ImageFolder tree, WORK/src/{train,val}/classK/*.JPEG, whose classes
    differ in texture: oriented stripes, some classes told apart only by fine (high
    frequency) detail, some by coarse structure. So the fidelity matters, and which
    level suffices is a property of the data: the question autotuning answers.
 2. Builds a store (mkpcrfs --scans SCRIPT) and mounts it with `pcrfs STORE MNT
    -o level=L`: MNT/dynamic/ serves level L, and MNT/scan1..scanL/ every level.
 3. Trains a small CNN with an *unmodified* torchvision ImageFolder over
    MNT/dynamic/train and a DataLoader with worker processes.
 4. Before the first epoch and every --retune epochs, applies PCR's rule (Kuchnik et
    al., VLDB 2021, §5): take a few fixed batches; compute the gradient of the loss
    at the current weights from each level K's images (MNT/scanK/...) and from the
    full-fidelity ones (MNT/full/...); the cosine similarity of the two says how
    much training at level K moves the model the way full fidelity would. Pick the
    lowest K whose similarity is >= --threshold (PCR: 0.8), and switch the dynamic
    view to it by writing K to MNT/.pcrfs/level. The DataLoader is not rebuilt: its
    next file opens see level K (pcrfs(1), "Dynamic view").
 5. Reports per epoch: the level, the bytes the training read (MNT/.pcrfs/stats),
    the loss and the validation accuracy at full fidelity; at the end, the bytes
    read against an all-full run of the same epochs.

Everything goes to --work (default: a temporary directory, removed at the end unless
--keep). Runs in ~2-4 minutes on 2 cores with the defaults. Run as a user who can
mount FUSE filesystems (fusermount3).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import ImageFolder

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(HERE)
try:
    import pcrfs  # installed by meson install
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.join(SRCROOT, "python"))
    import pcrfs


# ---- data -----------------------------------------------------------------------

# (angle in degrees, cycles per 64 px): pairs of classes share an angle and differ in
# frequency, so low fidelity (which drops high frequencies first) confuses them.
CLASSES = [(0, 3), (0, 14), (60, 3), (60, 14), (120, 5), (120, 12)]


def make_image(rng, angle, freq, size):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    a = math.radians(angle + rng.uniform(-8, 8))
    f = freq * rng.uniform(0.9, 1.1) / 64.0
    phase = rng.uniform(0, 2 * math.pi)
    stripes = np.sin(2 * math.pi * f * (xx * math.cos(a) + yy * math.sin(a)) + phase)
    # a soft blob and colour, shared by all classes: nuisance, not signal
    cx, cy, r = rng.uniform(0, size, 2).tolist() + [rng.uniform(size / 6, size / 2)]
    blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    base = rng.uniform(60, 200, 3)
    contrast = rng.uniform(25, 60)
    img = base[None, None, :] + contrast * stripes[:, :, None] \
        + rng.uniform(-60, 60, 3)[None, None, :] * blob[:, :, None] \
        + rng.normal(0, 6, (size, size, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def make_dataset(root, per_class, val_per_class, size, seed):
    rng = np.random.default_rng(seed)
    for split, n in (("train", per_class), ("val", val_per_class)):
        for k, (angle, freq) in enumerate(CLASSES):
            d = os.path.join(root, split, "class%d" % k)
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                make_image(rng, angle, freq, size).save(
                    os.path.join(d, "%s_%d_%04d.JPEG" % (split, k, i)), quality=90)


# ---- pcrfs --------------------------------------------------------------------

def find_program(build, name, sub):
    cands = []
    if build:
        cands.append(os.path.join(build, sub, name))
    cands += [os.path.join(SRCROOT, "build", sub, name), shutil.which(name) or ""]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("autotune: cannot find %s (give --build)" % name)


class Mount:
    def __init__(self, pcrfs, store, mnt, level):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        self.proc = subprocess.Popen([pcrfs, store, mnt, "-f", "-o", "level=%s" % level],
                                     stderr=subprocess.PIPE)
        for _ in range(500):
            if os.path.ismount(mnt) or self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if not os.path.ismount(mnt):
            sys.exit("autotune: pcrfs did not mount: %s" % self.proc.stderr.read().decode())

    def set_level(self, k):
        pcrfs.set_level(self.mnt, k)

    def level(self):
        return pcrfs.level(self.mnt)

    def dynamic_bytes(self):
        return pcrfs.stats(self.mnt)["views"]["dynamic"]["bytes"]

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        rc = self.proc.wait(30)
        if rc != 0:
            print("autotune: pcrfs exited %d" % rc, file=sys.stderr)
        return rc


# ---- model --------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, ncls):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc = nn.Linear(64, ncls)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.c3(x))
        return self.fc(x.mean(dim=(2, 3)))


TRAIN_TF = transforms.Compose([transforms.RandomCrop(64), transforms.RandomHorizontalFlip(),
                               transforms.ToTensor()])
EVAL_TF = transforms.Compose([transforms.CenterCrop(64), transforms.ToTensor()])


def load_batch(paths, labels):
    x = torch.stack([EVAL_TF(Image.open(p).convert("RGB")) for p in paths])
    return x, torch.tensor(labels)


def gradient(model, batches):
    """The loss gradient at the current weights over @batches, as one flat vector."""
    model.zero_grad()
    model.eval()
    for x, y in batches:
        F.cross_entropy(model(x), y, reduction="sum").backward()
    g = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    return g


def tune(model, mnt, probe, L, threshold):
    """PCR's rule: the lowest level whose gradient's cosine similarity with the full-
    fidelity gradient is >= @threshold. @probe: [(relative paths, labels)] batches."""
    def batches(view):
        return [load_batch([os.path.join(mnt, view, r) for r in rels], labels)
                for rels, labels in probe]

    full = gradient(model, batches("full"))
    sims = {}
    for k in range(1, L):
        sims[k] = F.cosine_similarity(gradient(model, batches("scan%d" % k)), full, dim=0).item()
    sims[L] = 1.0
    chosen = min(k for k, s in sims.items() if s >= threshold)
    return chosen, sims


def evaluate(model, loader):
    model.eval()
    right = n = 0
    with torch.no_grad():
        for x, y in loader:
            right += (model(x).argmax(1) == y).sum().item()
            n += len(y)
    return right / max(n, 1)


# ---- main ---------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", help="working directory (default: temporary)")
    ap.add_argument("--keep", action="store_true", help="keep --work at the end")
    ap.add_argument("--build", help="meson build directory holding src/tools and src/fuse")
    ap.add_argument("--scans", default="fast", help="mkpcrfs --scans (default fast)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2,
                    help="epochs at full fidelity before the first tuning (default 2)")
    ap.add_argument("--retune", type=int, default=2, help="re-tune every N epochs")
    ap.add_argument("--threshold", type=float, default=0.8, help="cosine similarity (PCR: 0.8)")
    ap.add_argument("--probe-batches", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--per-class", type=int, default=150)
    ap.add_argument("--size", type=int, default=80, help="image side in pixels")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    work = a.work or tempfile.mkdtemp(prefix="pcrfs-autotune-")
    os.makedirs(work, exist_ok=True)
    src, store, mnt = (os.path.join(work, n) for n in ("src", "store.pcr", "mnt"))
    mkpcrfs = find_program(a.build, "mkpcrfs", "src/tools")
    pcrfs = find_program(a.build, "pcrfs", "src/fuse")

    if not os.path.isdir(src):
        t = time.time()
        make_dataset(src, a.per_class, a.per_class // 3, a.size, a.seed)
        print("data: %d classes x %d train images of %dx%d in %.1f s" % (
            len(CLASSES), a.per_class, a.size, a.size, time.time() - t))
    if not os.path.isdir(store):
        subprocess.run([mkpcrfs, "-q", "--scans", a.scans, src, store], check=True)
    L = json.loads(subprocess.run([find_program(a.build, "pcrinfo", "src/tools"), "--json",
                                   store], stdout=subprocess.PIPE, check=True).stdout)["levels"]
    m = Mount(pcrfs, store, mnt, "full")
    rc = 1
    try:
        train = ImageFolder(os.path.join(mnt, "dynamic", "train"), transform=TRAIN_TF)
        val = ImageFolder(os.path.join(mnt, "full", "val"), transform=EVAL_TF)
        g = torch.Generator().manual_seed(a.seed)
        loader = DataLoader(train, batch_size=a.batch, shuffle=True, generator=g,
                            num_workers=a.workers, persistent_workers=a.workers > 0)
        val_loader = DataLoader(val, batch_size=128, num_workers=a.workers)
        # The probe: fixed batches, by path relative to the view root.
        idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(a.seed + 1))
        root = os.path.join(mnt, "dynamic")
        probe = []
        for b in range(a.probe_batches):
            sel = idx[b * a.batch:(b + 1) * a.batch].tolist()
            probe.append(([os.path.relpath(train.samples[i][0], root) for i in sel],
                          [train.samples[i][1] for i in sel]))

        model = Net(len(train.classes))
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        # What an epoch reads at each level: the sizes the static views report.
        rels = [os.path.relpath(p, root) for p, _ in train.samples]
        epoch_bytes = {k: sum(os.stat(os.path.join(mnt, "scan%d" % k, r)).st_size
                              for r in rels) for k in range(1, L + 1)}
        total = full_equiv = 0
        print("store: %d levels (script %s); %d epochs at full fidelity, then tune every %d "
              "epochs (threshold %.2f)" % (L, a.scans, a.warmup, a.retune, a.threshold))
        for epoch in range(a.epochs):
            if epoch >= a.warmup and (epoch - a.warmup) % a.retune == 0:
                t = time.time()
                k, sims = tune(model, mnt, probe, L, a.threshold)
                m.set_level(k)
                assert m.level() == k
                print("tune  epoch %d: cos sim %s -> level %d (%.1f s)" % (
                    epoch + 1, " ".join("%d:%.2f" % (j, s) for j, s in sims.items()), k,
                    time.time() - t))
            b0 = m.dynamic_bytes()
            t = time.time()
            model.train()
            loss_sum = n = 0
            for x, y in loader:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                loss_sum += loss.item() * len(y)
                n += len(y)
            # Bytes the loader read (level K's sizes), and what pcrfs itself served
            # (less when the kernel's page cache already held a level's pages).
            level = m.level()
            read = epoch_bytes[level]
            served = m.dynamic_bytes() - b0
            total += read
            full_equiv += epoch_bytes[L]
            acc = evaluate(model, val_loader)
            print("epoch %d: level %d, read %.2f MB (%.0f%% of full; pcrfs served %.2f MB), "
                  "loss %.3f, val acc %.3f, %.1f s" % (
                      epoch + 1, level, read / 1e6, 100.0 * read / epoch_bytes[L],
                      served / 1e6, loss_sum / n, acc, time.time() - t))
        print("total: read %.2f MB, %.0f%% of the %.2f MB an all-full run reads" % (
            total / 1e6, 100.0 * total / full_equiv, full_equiv / 1e6))
        del loader  # stop the workers before unmounting
        rc = 0
    finally:
        if m.close() != 0:
            rc = 1
        if not a.work and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
