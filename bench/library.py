#!/usr/bin/python3
"""The store as a library (pcrfs.Store, pcrfs.ImageFolder; pcrfs(3)) against plain files
and against a mount: the figures of BENCHMARKS.md's section "The library without a mount".

    bench/library.py --work DIR [--rounds 3] [--classes 10] [--per-class 100] [--out MD]

Makes a generated photo dataset (tests/gen/mkdataset.py --size 500) and a store of it
in DIR (kept for the next run), plain files of the same bytes as scan5/ and full/
(pcrinfo --extract), a mount of the store, then measures, in interleaved rounds
(every row one fresh process per round, its two sides alternating inside it):

  warm     one process, no workers: open + read + Pillow decode (convert('RGB')) per
           file over every image of scan5/ and full/: pcrfs.ImageFolder(Store) against
           torchvision's ImageFolder (its default loader) over the plain copy. One
           untimed pass first (the page cache holds every byte), then WARM_PASSES
           timed passes.
           pcrfs.ImageFolder's loader does not copy an RGB image in convert('RGB'),
           torchvision's does: the row warm-tv gives the library torchvision's decode
           steps (Image.open(BytesIO), convert('RGB')), which isolates the read path.
  loader   DataLoader, 2 workers (fork), batch 32, persistent workers: pcrfs.ImageFolder
           against torchvision's ImageFolder over the mount's scan5/; the first epoch is
           untimed (warm-up), the second is timed.
  cold     whole-file reads, one thread, in pcrfs.RecordSampler's order (seed 0): the
           library (Store.read) against plain files (open(p, 'rb', buffering=0).read()),
           one after the other (which first alternates by round),
           each file of the store or of the plain copy dropped from the page cache
           (posix_fadvise DONTNEED) right before the run; scan5/ and full/; once with
           the Store's defaults (the kernel's readahead within a file) and once with
           readahead=record (pcrfs(1)). The store is opened before the clock starts
           (its index is then read: cold too).

Prints a Markdown section (also written to --out): medians of the rounds, every round's
figure, the ratio library / plain (or / mount) per round and its median, the load
average, the commands. The page-cache drop is per file, not drop_caches: other jobs on
the machine keep their caches. Everything mounted is unmounted at the end.
"""
import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "python"))
import mount_util as mu  # noqa: E402

VIEWS = ("scan5", "full")


def drop_file_cache(root):
    """posix_fadvise(DONTNEED) every regular file under @root: its clean pages leave
    the page cache (the next read is from the disk), and no other file's do."""
    n = 0
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)  # a dirty page (a file just written) would stay
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            n += 1
    return n


# ---- the measured processes (bench/library.py --child MODE ...) ----
# Each compares its two sides inside one process, alternating chunks of CHUNK images
# (A B B A A B ...), so that a change of the machine's load in the middle of a run
# falls on both sides alike; each side's time is the sum of its chunks.
CHUNK = 50
# Warm rows decode every image this many times per side and round: a difference of
# 1-2 % needs more than one pass (one pass of 480 images moved by +-4 % at load 8-10)
WARM_PASSES = 3


def alternate(n, sides, cpu=None):
    """Call each of @sides (f(i0, i1)) over chunks of range(n), the order of the sides
    rotating from chunk to chunk; the seconds each took in all (wall), and in @cpu
    (a list) the CPU seconds of this process each took (user + system: what other
    jobs on the machine do not inflate)."""
    t = [0.0] * len(sides)
    c = [0.0] * len(sides)
    for k, i0 in enumerate(range(0, n, CHUNK)):
        i1 = min(n, i0 + CHUNK)
        order = list(range(len(sides)))
        order = order[k % len(order):] + order[:k % len(order)]
        if k // len(order) % 2:
            order.reverse()
        for j in order:
            c0, t0 = time.process_time(), time.perf_counter()
            sides[j](i0, i1)
            t[j] += time.perf_counter() - t0
            c[j] += time.process_time() - c0
    if cpu is not None:
        cpu[:] = c
    return t


def _tv_steps(data):
    """torchvision's loader's decode steps on bytes: Image.open, then convert('RGB'),
    which copies an RGB image's pixels (pcrfs.ImageFolder's default loader does not)."""
    from PIL import Image
    return Image.open(io.BytesIO(data)).convert("RGB")


def child_warm(store, plain, view, loader=None):
    import pcrfs
    from torchvision.datasets import ImageFolder
    lib = pcrfs.ImageFolder(pcrfs.Store(store), view=view, loader=loader)
    ref = ImageFolder(plain)
    assert [p.split("/", 1)[1] for p, _ in lib.samples] == \
        [os.path.relpath(p, plain) for p, _ in ref.samples]

    n = len(lib)

    def run(ds):
        def f(i0, i1):
            for i in range(i0, i1):
                ds[i % n][0].width
        return f

    # warm-up: every byte in the page cache (read, not decoded)
    for p, _ in lib.samples:
        lib.store.read(p)
    for p, _ in ref.samples:
        with open(p, "rb") as f:
            f.read()
    cpu = []
    ta, tb = alternate(n * WARM_PASSES, [run(lib), run(ref)], cpu)
    return {"images": n * WARM_PASSES, "lib_s": ta, "other_s": tb, "lib_cpu_s": cpu[0],
            "other_cpu_s": cpu[1]}


def child_warm_tv(store, plain, view):
    return child_warm(store, plain, view, loader=_tv_steps)


def _count(batch):
    return len(batch)


def child_loader(store, mnt, view, epochs=3):
    import torch
    from torch.utils.data import DataLoader
    import pcrfs
    from torchvision.datasets import ImageFolder
    loaders = []
    for ds in (pcrfs.ImageFolder(pcrfs.Store(store), view=view),
               ImageFolder(os.path.join(mnt, view))):
        g = torch.Generator()
        g.manual_seed(0)
        loaders.append(DataLoader(ds, batch_size=32, shuffle=True, generator=g,
                                  num_workers=2, collate_fn=_count, persistent_workers=True,
                                  prefetch_factor=4, multiprocessing_context="fork"))
    for dl in loaders:  # warm-up epoch (workers started, page cache filled)
        sum(dl)
    t = [0.0, 0.0]
    n = [0, 0]
    for e in range(epochs):  # epochs alternate: lib, mount, mount, lib, lib, mount
        for k in ((0, 1) if e % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            n[k] += sum(loaders[k])
            t[k] += time.perf_counter() - t0
    assert n[0] == n[1]
    return {"images": n[0], "lib_s": t[0], "other_s": t[1]}


def child_cold(store, plain, order, readahead=None):
    import pcrfs
    with open(order) as f:
        paths = [ln.rstrip("\n") for ln in f if ln.strip()]
    # the view's name is the first component; the plain copy is its tree
    files = [os.path.join(plain, p.split("/", 1)[1]) for p in paths]
    t0 = time.perf_counter()
    # readahead=record (pcrfs(1)): the first read of a record asks for its prefix
    st = pcrfs.Store(store, **({"readahead": readahead} if readahead else {}))
    open_s = time.perf_counter() - t0  # the index is read (cold too): timed apart
    nbytes = [0, 0]

    def lib(i0, i1):
        for p in paths[i0:i1]:
            nbytes[0] += len(st.read(p))

    def ref(i0, i1):
        for p in files[i0:i1]:
            with open(p, "rb", buffering=0) as f:
                nbytes[1] += len(f.read())

    # one side after the other, which first alternating by round: interleaved
    # chunks would let the record readahead of one side run during the other's
    # chunk (its thread prefetches up to 16 MB ahead), and load the disk then
    sides = [lib, ref] if int(os.environ.get("BENCH_ROUND", "0")) % 2 == 0 else [ref, lib]
    t = []
    for side in sides:
        t0 = time.perf_counter()
        side(0, len(paths))
        t.append(time.perf_counter() - t0)
    ta, tb = t if sides[0] is lib else t[::-1]
    assert nbytes[0] == nbytes[1], nbytes
    return {"images": len(paths), "bytes": nbytes[0], "lib_s": ta, "other_s": tb,
            "open_s": open_s}


def child_cold_ra(store, plain, order):
    return child_cold(store, plain, order, readahead="record")


def child(argv):
    mode, a, b, arg = argv
    fn = {"warm": child_warm, "warm-tv": child_warm_tv, "loader": child_loader,
          "cold": child_cold, "cold-ra": child_cold_ra}[mode]
    r = fn(a, b, arg)
    r["lib_rate"] = r["images"] / r["lib_s"]
    r["other_rate"] = r["images"] / r["other_s"]
    json.dump(r, sys.stdout)
    print()


# ---- the driver ----

def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def measure(mode, a, b, arg, timeout, rnd):
    p = subprocess.run([mu.PYTHON, os.path.abspath(__file__), "--child", mode, a, b, arg],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"),
                                BENCH_ROUND=str(rnd)))
    if p.returncode != 0:
        raise SystemExit("library.py: %s %s failed:\n%s" % (mode, arg, p.stderr))
    return json.loads(p.stdout)


def prepare(work, classes, per_class):
    src = os.path.join(work, "src")
    store = os.path.join(work, "store.pcr")
    if not os.path.isdir(src):
        mu.run([mu.PYTHON, os.path.join(REPO, "tests", "gen", "mkdataset.py"), "--out",
                src + ".tmp", "--classes", str(classes), "--per-class", str(per_class),
                "--seed", "1", "--size", "500", "--manifest",
                os.path.join(work, "manifest.json")], check=0, timeout=1800)
        os.rename(src + ".tmp", src)
    if not os.path.isdir(store):
        mu.build_store(src, store + ".tmp")
        os.rename(store + ".tmp", store)
    plain = {}
    for view, level in (("scan5", "5"), ("full", "full")):
        plain[view] = os.path.join(work, "x-" + view)
        if not os.path.isdir(plain[view]):
            mu.run([mu.program("PCRINFO"), "--extract", plain[view] + ".tmp", "--level",
                    level, store], check=0)
            os.rename(plain[view] + ".tmp", plain[view])
    orders = {}
    import pcrfs
    st = pcrfs.Store(store)
    for view in VIEWS:
        ds = pcrfs.ImageFolder(st, view=view)
        orders[view] = os.path.join(work, "order-%s.txt" % view)
        with open(orders[view], "w") as f:
            for i in pcrfs.RecordSampler(ds, seed=0):
                f.write(ds.samples[i][0] + "\n")
    st.close()
    return src, store, plain, orders


def fmt(x):
    return "{:,.0f}".format(x) if x >= 100 else "{:,.1f}".format(x)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--run-timeout", type=float, default=300,
                    help="seconds one measured process may take")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    # the library of the build tree the programs come from, unless one is named
    os.environ.setdefault("PCRFS_LIB", os.path.join(mu.build_dir(), "src", "lib", "api",
                                                    "libpcrfs.so"))
    os.makedirs(work, exist_ok=True)
    started, t_start, load0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), \
        time.time(), loadavg()
    src, store, plain, orders = prepare(work, a.classes, a.per_class)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    # (measure, view, the other side's tree, argument)
    runs = [(m, v, plain[v], v) for v in VIEWS for m in ("warm", "warm-tv")] + \
        [("loader", "scan5", mnt, "scan5")] + \
        [(m, v, plain[v], orders[v]) for v in VIEWS for m in ("cold", "cold-ra")]
    res = {}
    with mu.Mount(store, mnt):
        for r in range(a.rounds):
            for mode, view, other, arg in runs:
                if mode.startswith("cold"):
                    drop_file_cache(store)
                    drop_file_cache(other)
                out = measure(mode, store, other, arg, a.run_timeout, r)
                res.setdefault((mode, view), []).append(out)
                print("round %d %s %s: library %.1f/s, other %.1f/s" % (
                    r + 1, mode, view, out["lib_rate"], out["other_rate"]), file=sys.stderr,
                    flush=True)
    minutes = (time.time() - t_start) / 60
    load1 = loadavg()

    lines = []
    lines.append("Measured %s at commit %s with `bench/library.py --work $WORK --rounds %d` "
                 "(%d images of %d classes, mkdataset.py --size 500; %.1f min); load "
                 "average %s at the start, %s at the end (1/5/15 min, 2 cores shared with "
                 "other jobs: other engineers' builds, tests and benchmarks ran at the same "
                 "time)." % (started, commit, a.rounds, res[("cold", "scan5")][0]["images"],
                             len(os.listdir(plain["scan5"])), minutes, load0, load1))
    lines.append("")
    lines.append("| measure | view | library, images/s | compared with | its images/s | "
                 "library / it, each round | median | by CPU time, each round | median |")
    lines.append("| --- | --- | ---: | --- | ---: | --- | ---: | --- | ---: |")
    what = {"warm": "warm, 1 process: open + read + Pillow decode",
            "warm-tv": "the same, the library's bytes decoded as torchvision's loader "
            "does (convert('RGB') copies)",
            "loader": "DataLoader, 2 workers, decode", "cold": "cold whole-file reads, "
            "RecordSampler order", "cold-ra": "the same, the Store with readahead=record"}
    other = {"warm": "torchvision ImageFolder, plain files",
             "warm-tv": "torchvision ImageFolder, plain files",
             "loader": "torchvision ImageFolder, the mount", "cold": "plain files",
             "cold-ra": "plain files"}
    for mode, view, _, _ in runs:
        rs = res[(mode, view)]
        la, lb = [x["lib_rate"] for x in rs], [x["other_rate"] for x in rs]
        ratios = [x / y for x, y in zip(la, lb)]
        # by CPU time: the other side's CPU seconds over the library's (higher: the
        # library costs less), where the process did all the work (warm rows)
        cr = [x["other_cpu_s"] / x["lib_cpu_s"] for x in rs if x.get("lib_cpu_s")]
        lines.append("| %s | %s/ | %s | %s | %s | %s | %.2f | %s | %s |" % (
            what[mode], view, fmt(statistics.median(la)), other[mode],
            fmt(statistics.median(lb)), " / ".join("%.2f" % x for x in ratios),
            statistics.median(ratios), " / ".join("%.2f" % x for x in cr) or "-",
            "%.2f" % statistics.median(cr) if cr else "-"))
    lines.append("")
    lines.append("Each round is one process per row that runs both sides: warm and "
                 "DataLoader rows alternate chunks of %d images (or whole epochs) between "
                 "them, so that the load of the moment falls on both alike; cold rows run "
                 "one side after the other (which first alternates by round), so that the "
                 "record readahead of one cannot run during the other. images/s are medians "
                 "of the %d rounds; the ratio is taken within each round. Warm rows decode "
                 "every image %d times per side and round. By CPU time "
                 "(warm rows, where one process does all the work): the CPU seconds "
                 "(user + system) of the compared side over the library's, which other "
                 "jobs on the machine do not inflate. Cold: every file "
                 "of the store and of the plain copy dropped from the page cache (fsync + "
                 "posix_fadvise DONTNEED) before the row; the store's open (which reads its "
                 "index) is outside the clock: %s s."
                 % (CHUNK, a.rounds, WARM_PASSES, " / ".join("%.3f" % x["open_s"]
                                               for x in res[("cold", VIEWS[0])])))
    print("\n".join(lines))
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    with open(os.path.join(work, "library-results.json"), "a") as f:
        json.dump({"started": started, "commit": commit, "load": [load0, load1],
                   "results": {" ".join(k): v for k, v in res.items()}}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
