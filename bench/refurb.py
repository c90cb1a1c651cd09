#!/usr/bin/python3
"""Refurbishing: ImageFolder training input over full/ against refurb/ (r = 1, 2, 3).

    bench/refurb.py [--work DIR] [--classes C] [--per-class K] [--size PX] [--epochs E]
                    [--rounds N] [--workers W] [--batch B] [--randaugment] [--build DIR]

Makes a generated photo dataset (tests/gen/mkdataset.py), builds a store, and for each
configuration mounts it afresh (so every run starts at pass 1) and runs E epochs of a
DataLoader (W workers, shuffled) over ImageFolder with:
  full     MNT/full, torchvision's standard ResNet-50 training transform:
           RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize;
  rR       MNT/refurb with -o refurb=R (the crop and flip done by the daemon, each
           served R epochs): final transform RandomHorizontalFlip + ToTensor + Normalize.
With --randaugment each configuration also runs with RandAugment(2, 9) before ToTensor
(the final augmentation of Revamper's setting). The configurations run interleaved,
--rounds times, on a machine that may be shared: figures are per run, and the summary
gives each one's ratio to full/ within the same round, plus the load average.

Measured per run: images/s over epochs 2..E (the steady state; epoch 1 renders every
crop on demand whatever R is) and over epoch 1 alone; CPU per image over epochs 2..E =
the DataLoader workers' user + system time (RUSAGE_CHILDREN, reaped at the end of each
epoch) + the main process's + the pcrfs daemon's (/proc/PID/stat, its FUSE threads and
refurbishing workers included); and the spread of per-batch load times (the time a
worker spends producing a batch: p50, p90, p99, max, ms) to see whether some batches
wait for renders. Prints one JSON object per run, then a summary table (Markdown).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRCROOT, "tests", "integration"))
import mount_util as mu  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TICK = os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK  # utime + stime


def cpu_self_children():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


class Timed:
    """A dataset wrapper whose items carry the seconds their load took."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        t = time.perf_counter()
        x, y = self.ds[i]
        return x, y, time.perf_counter() - t


def collate(batch):
    import torch
    return (torch.stack([b[0] for b in batch]), torch.tensor([b[1] for b in batch]),
            sum(b[2] for b in batch))


def transform(kind, randaug):
    import torchvision.transforms as T
    t = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()] if kind == "full" else \
        [T.RandomHorizontalFlip()]
    if randaug:
        t.append(T.RandAugment(2, 9))
    return T.Compose(t + [T.ToTensor(), T.Normalize(MEAN, STD)])


def run_one(a, store, mnt, cfg, randaug):
    import torch
    from torchvision.datasets import ImageFolder
    kind = "full" if cfg == "full" else "refurb"
    opts = ["-o", "refurb=%s" % cfg[1:]] if kind == "refurb" else []
    m = mu.Mount(store, mnt, *opts)
    m.start()
    try:
        ds = ImageFolder(os.path.join(mnt, kind), transform=transform(kind, randaug))
        g = torch.Generator()
        g.manual_seed(1)
        dl = torch.utils.data.DataLoader(Timed(ds), batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, collate_fn=collate,
                                         generator=g, prefetch_factor=2)
        epochs = []
        batch_s = []
        for e in range(a.epochs):
            d0 = daemon_cpu(m.proc.pid)
            s0, c0 = cpu_self_children()
            t0 = time.monotonic()
            n = 0
            for x, y, secs in dl:
                n += x.shape[0]
                if e > 0:
                    batch_s.append(secs)
            t1 = time.monotonic()
            s1, c1 = cpu_self_children()  # the epoch's workers have been reaped
            d1 = daemon_cpu(m.proc.pid)
            epochs.append({"images": n, "seconds": t1 - t0, "cpu_main": s1 - s0,
                           "cpu_workers": c1 - c0, "cpu_daemon": d1 - d0})
        with open(os.path.join(mnt, ".pcrfs", "stats")) as f:
            st = json.load(f).get("refurb")
    finally:
        m.unmount()
        m.cleanup()
    steady = epochs[1:]
    imgs = sum(e["images"] for e in steady)
    secs = sum(e["seconds"] for e in steady)
    cpu = {k: sum(e[k] for e in steady) / imgs * 1e3
           for k in ("cpu_main", "cpu_workers", "cpu_daemon")}
    bs = sorted(batch_s)

    def pct(p):
        return 1e3 * bs[min(len(bs) - 1, int(p * len(bs)))] if bs else 0.0

    return {"config": cfg, "randaugment": randaug, "images": len(ds),
            "images_per_s": imgs / secs, "first_epoch_images_per_s":
            epochs[0]["images"] / epochs[0]["seconds"],
            "cpu_ms_per_image": sum(cpu.values()), "cpu_ms_split": cpu,
            "batch_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
                         "max": 1e3 * bs[-1] if bs else 0.0},
            "loadavg": os.getloadavg()[0], "refurb_stats": st}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/pcrfs-bench-refurb")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=60)
    ap.add_argument("--size", type=int, default=500)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--randaugment", action="store_true", help="also with RandAugment(2, 9)")
    ap.add_argument("--configs", default="full,r1,r2,r3")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    src = os.path.join(a.work, "src-%d-%d-%d" % (a.classes, a.per_class, a.size))
    store = src + ".store"
    if not os.path.isdir(src):
        subprocess.run([mu.PYTHON, os.path.join(SRCROOT, "tests", "gen", "mkdataset.py"),
                        "--out", src, "--classes", str(a.classes), "--per-class",
                        str(a.per_class), "--size", str(a.size), "--seed", "7",
                        "--manifest", src + ".json"], check=True, stdout=subprocess.DEVNULL)
    if not os.path.isdir(store):
        mu.build_store(src, store)
    mnt = os.path.join(a.work, "mnt")
    results = []
    for rnd in range(a.rounds):
        for randaug in ([False, True] if a.randaugment else [False]):
            for cfg in a.configs.split(","):
                r = run_one(a, store, mnt, cfg, randaug)
                r["round"] = rnd
                print(json.dumps(r), flush=True)
                results.append(r)
    print("\n| final transform | config | images/s (epochs 2-%d) | x full/ | epoch 1 images/s "
          "| CPU ms/image (workers + main + daemon) | batch ms p50 / p90 / max | load avg |"
          % a.epochs)
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in results:
        base = [b for b in results if b["config"] == "full" and b["round"] == r["round"] and
                b["randaugment"] == r["randaugment"]]
        ratio = r["images_per_s"] / base[0]["images_per_s"] if base else float("nan")
        c = r["cpu_ms_split"]
        print("| %s | %s | %.0f | %.2f | %.0f | %.1f (%.1f + %.1f + %.1f) | %.0f / %.0f / %.0f "
              "| %.1f |" % ("+ RandAugment(2, 9)" if r["randaugment"] else "standard",
                            r["config"] if r["config"] == "full" else "refurb=" + r["config"][1:],
                            r["images_per_s"], ratio, r["first_epoch_images_per_s"],
                            r["cpu_ms_per_image"], c["cpu_workers"], c["cpu_main"],
                            c["cpu_daemon"], r["batch_ms"]["p50"], r["batch_ms"]["p90"],
                            r["batch_ms"]["max"], r["loadavg"]))
    summary(results)


def summary(results):
    """Medians over the rounds: each run's images/s and CPU per image as ratios to
    full/'s in the same round (so a round slowed down by other jobs counts once)."""
    import statistics
    print("\n| final transform | config | median images/s | median x full/ (range) "
          "| median CPU ms/image | CPU x less than full/ |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    keys = []
    for r in results:
        if (r["randaugment"], r["config"]) not in keys:
            keys.append((r["randaugment"], r["config"]))
    for ra, cfg in keys:
        runs = [r for r in results if r["randaugment"] == ra and r["config"] == cfg]
        ips, cpu = [], []
        for r in runs:
            base = [b for b in results if b["config"] == "full" and b["round"] == r["round"] and
                    b["randaugment"] == ra]
            if base:
                ips.append(r["images_per_s"] / base[0]["images_per_s"])
                cpu.append(base[0]["cpu_ms_per_image"] / r["cpu_ms_per_image"])
        print("| %s | %s | %.0f | %.2f (%.2f-%.2f) | %.2f | %.2f |" % (
            "+ RandAugment(2, 9)" if ra else "standard",
            cfg if cfg == "full" else "refurb=" + cfg[1:],
            statistics.median(r["images_per_s"] for r in runs), statistics.median(ips),
            min(ips), max(ips), statistics.median(r["cpu_ms_per_image"] for r in runs),
            statistics.median(cpu)))


if __name__ == "__main__":
    main()
