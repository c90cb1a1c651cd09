#!/usr/bin/python3
"""Train a model on a pcrfs mount with PCR's fidelity autotuning (pcrfs.Autotuner).

    examples/autotune.py DATA [--val VAL] [--model small|resnet18] [--epochs 10]
                         [--warmup 5] [--every 1] [--threshold 0.8] [--probe 1280]
                         [--levels 1,2,5] [--batch 128] [--size 64] [--workers 2]

DATA is an ImageFolder tree (DATA/CLASS/IMAGE) in the dynamic view of a pcrfs mount
made with -o level=K, normally MNT/dynamic/train:

    mkpcrfs ~/data/imagenette store.pcr
    pcrfs store.pcr /mnt/p -o level=full
    examples/autotune.py /mnt/p/dynamic/train --val /mnt/p/full/val

It trains a small CNN (or torchvision's resnet18) on the CPU with an unmodified
torchvision ImageFolder and DataLoader over DATA, from full fidelity (it writes
"full" to MNT/.pcrfs/level at the start). Before each epoch it calls
Autotuner.step(epoch): after --warmup epochs, and then every --every epochs, the
tuner scores the levels on a fixed probe of training images read from MNT/scanK/
and MNT/full/, and writes the chosen level to MNT/.pcrfs/level, so the loader's
next file opens read that level (pcrfs(1), "DYNAMIC VIEW"). The defaults are PCR's
(python/pcrfs/autotune.py says where the tuner departs from it); on a CPU, a
smaller --probe, --levels or a larger --every cut the tuning's cost.

Per epoch it prints the level, the tuner's result when it tuned, the bytes pcrfs
served to dynamic/ (MNT/.pcrfs/stats; less than the loader read when the page cache
already held them), the training loss and, with --val, the validation accuracy.
Needs Debian's python3-torch, python3-torchvision and python3-pil.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import ImageFolder

try:
    import pcrfs  # installed by meson install
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "python"))
    import pcrfs


class SmallNet(nn.Module):
    def __init__(self, ncls):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
        self.fc = nn.Linear(128, ncls)

    def forward(self, x):
        return self.fc(self.body(x).mean(dim=(2, 3)))


def evaluate(model, loader):
    model.eval()
    right = n = 0
    with torch.no_grad():
        for x, y in loader:
            right += (model(x).argmax(1) == y).sum().item()
            n += len(y)
    return right / max(n, 1)


def main():
    ap = argparse.ArgumentParser(
        description="Train on a pcrfs mount's dynamic view with pcrfs.Autotuner "
                    "(PCR's gradient-similarity rule) choosing the level.")
    ap.add_argument("data", help="ImageFolder tree in a pcrfs view, e.g. MNT/dynamic/train "
                                 "(the mount made with -o level=K)")
    ap.add_argument("--val", help="ImageFolder tree to report validation accuracy on "
                                  "(e.g. MNT/full/val)")
    ap.add_argument("--model", choices=("small", "resnet18"), default="small",
                    help="a 3-layer CNN or torchvision's resnet18 (default small)")
    ap.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="epochs before the first tuning (default 5, PCR's)")
    ap.add_argument("--every", type=int, default=1,
                    help="tune every N epochs after the warm-up (default 1, PCR's)")
    ap.add_argument("--threshold", type=float, default=0.8,
                    help="cosine similarity a level must reach (default 0.8, PCR's)")
    ap.add_argument("--probe", type=int, default=1280,
                    help="probe images (default 1280, PCR's 10 batches)")
    ap.add_argument("--levels", help="levels to score, e.g. 1,2,5 (default: all below full)")
    ap.add_argument("--no-guard", action="store_true",
                    help="choose a level even when the model is at chance on the probe")
    ap.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    ap.add_argument("--size", type=int, default=64, help="crop side in pixels (default 64)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the model, order and probe")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    train_tf = transforms.Compose([transforms.RandomResizedCrop(a.size),
                                   transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                   norm])
    # PCR's probe is not augmented: the same centre crop at every level.
    eval_tf = transforms.Compose([transforms.Resize(a.size * 8 // 7),
                                  transforms.CenterCrop(a.size), transforms.ToTensor(), norm])
    train = ImageFolder(a.data, transform=train_tf, loader=pcrfs.pil_loader)
    loader = DataLoader(train, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0,
                        generator=torch.Generator().manual_seed(a.seed))
    val_loader = None
    if a.val:
        val = ImageFolder(a.val, transform=eval_tf, loader=pcrfs.pil_loader)
        val_loader = DataLoader(val, batch_size=256, num_workers=a.workers)

    ncls = len(train.classes)
    if a.model == "resnet18":
        from torchvision.models import resnet18
        model = resnet18(num_classes=ncls)
    else:
        model = SmallNet(ncls)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    levels = [int(k) for k in a.levels.split(",")] if a.levels else None
    tuner = pcrfs.Autotuner(train, model, nn.CrossEntropyLoss(), probe=a.probe,
                            threshold=a.threshold, every=a.every, warmup=a.warmup,
                            batch_size=a.batch, transform=eval_tf, levels=levels,
                            seed=a.seed, guard=not a.no_guard, num_workers=a.workers)
    mnt = tuner.mnt
    pcrfs.set_level(mnt, "full")  # the warm-up epochs read full fidelity
    print("%s: %d images, %d classes; store of %d levels; dynamic/ at level %d until "
          "epoch %d" % (a.data, len(train), ncls, tuner.L, pcrfs.level(mnt), a.warmup))

    for epoch in range(a.epochs):
        r = tuner.step(epoch)
        if r:
            print("tune  epoch %d: %s" % (epoch, r))
        served0 = pcrfs.stats(mnt)["views"]["dynamic"]["bytes"]
        t = time.monotonic()
        model.train()
        loss_sum = n = 0
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(y)
            n += len(y)
        served = pcrfs.stats(mnt)["views"]["dynamic"]["bytes"] - served0
        acc = " val acc %.3f," % evaluate(model, val_loader) if val_loader else ""
        print("epoch %d: level %d, pcrfs served %.2f MB, loss %.3f,%s %.1f s" % (
            epoch, pcrfs.level(mnt), served / 1e6, loss_sum / max(n, 1), acc,
            time.monotonic() - t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
