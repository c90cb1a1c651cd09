#!/usr/bin/python3
"""Per-image quality views (q90/ q95/ q99/) against the global levels: BENCHMARKS.md §17.

    bench/quality.py --dataset DIR --build BUILD --work DIR [-j N] [--build-rounds R]
                     [--rate RATE] [--bw-seconds S] [--bw-rounds R] [--spot N]
                     [--fidelity-sample N] [--json OUT] [--benchmarks BENCHMARKS.md]
    bench/quality.py --render results.json [--benchmarks BENCHMARKS.md]

Needs the build's mkpcrfs, pcrinfo and pcrfs, root (FUSE mounts, dropping the page
cache), djpeg, numpy, torchvision (bench/imagefolder.py). Three parts, in this order:

  build   the cost of the quality table: `mkpcrfs -q -f -jN SRC STORE` and the same
          with --quality, --build-rounds rounds in ABBA order (plain, quality, then
          quality, plain, ...), after one read of the dataset so that every build finds
          it in the page cache. CPU time (user + sys of the process and its threads, from
          wait4) and wall time; medians. The last --quality store is kept for the other
          parts, and its records must be byte-identical to the plain store's.
  table   bytes per JPEG and the mean and lowest MS-SSIM of every view: scan1..scanL and
          full from `pcrinfo --list` (sizes) and index.db's quality column (read here,
          not through pcrinfo); qNN/ with each JPEG at the lowest level whose stored
          value reaches NN/100 (pcrfs(5)). Cross-checked against pcrinfo --json's
          quality object and against st_size of every file of every qNN/ view on a
          mount. Independent checks of the stored values: `pcrinfo --fidelity` (which
          decodes and measures again at read time) over --fidelity-sample JPEGs, per
          level against the index; and --spot q95/ files read from the mount, their
          luma decoded by djpeg and compared with full/ by the numpy MS-SSIM of
          tests/integration/test_fidelity.py (written from pcrfs/fidelity.h, not from
          the library's code). Target: q95 bytes <= 0.75x those of the lowest global
          level whose minimum MS-SSIM is >= 0.95.
  bwlimit `pcrfs -o bwlimit=RATE`, a fresh mount and a dropped page cache per run,
          bench/imagefolder.py (ImageFolder + DataLoader, 2 workers) on q95/, scanG/
          (G: that lowest level) and full/, the same random images in each, rotated
          order in each of --bw-rounds rounds; medians, and whether each run read the
          records at >= 85 % of the limit (I/O-bound).

Prints the generated Markdown block of §17; --benchmarks FILE puts it between the
"BEGIN/END GENERATED: quality" markers of FILE (appended if absent) and puts its target
row in FILE's targets table. Runtime on 2 shared cores with the 2,000-image benchmark
dataset: about 7 minutes; --deadline (minutes, default 40) stops it between steps.
"""

import argparse
import datetime
import json
import os
import platform
import random
import re
import shlex
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mount_util as mu  # noqa: E402
REPO = os.path.dirname(HERE)
SCALE = 60000  # pcrfs(5): floor(MS-SSIM * 60000) per level
THRESHOLDS = (0.90, 0.95, 0.99)
TARGET_RATIO = 0.75
IO_BOUND = 0.85


def parse_rate(s):
    m = re.fullmatch(r"([0-9.]+)([kKmMgG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError("bad rate %r" % s)
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def fmt_load(l):
    return " ".join("%.1f" % x for x in l)


def vname(t):
    return "q%g" % (100 * t)


class Bench:
    def __init__(self, a):
        self.a = a
        self.mk = os.path.join(a.build, "src/tools/mkpcrfs")
        self.info = os.path.join(a.build, "src/tools/pcrinfo")
        self.pcrfs = os.path.join(a.build, "src/fuse/pcrfs")
        self.work = os.path.abspath(a.work)
        self.mnt = os.path.join(self.work, "mnt")
        self.cmds = {}
        self.part = None
        self.daemon = None
        self.t_end = time.monotonic() + 60 * a.deadline

    # ---- running things -----------------------------------------------------------

    def show(self, cmd):
        s = cmd if isinstance(cmd, str) else shlex.join(cmd)
        for path, name in ((os.path.abspath(self.a.build), "$BUILD"), (self.work, "$WORK"),
                           (os.path.abspath(self.a.dataset), "$DATASET"), (REPO, ".")):
            s = re.sub(re.escape(path) + r"(?=/|\s|$)", name, s)
        s = s.replace("$BUILD/src/tools/", "").replace("$BUILD/src/fuse/", "")
        return s.replace("/usr/bin/python3 ./", "python3 ")

    def record(self, cmd):
        lst = self.cmds.setdefault(self.part, [])
        s = self.show(cmd)
        if s not in lst:
            lst.append(s)

    def check_deadline(self):
        if time.monotonic() > self.t_end:
            raise RuntimeError("--deadline of %g minutes passed" % self.a.deadline)

    def run(self, cmd, timeout=1800, show=None):
        self.check_deadline()
        self.record(show or cmd)
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("%s: exit %d\n%s" % (self.show(cmd), p.returncode,
                                                    p.stderr[-2000:].decode(errors="replace")))
        return p.stdout

    def timed(self, cmd):
        """Run @cmd; (wall s, CPU s of it and its threads) from wait4."""
        self.check_deadline()
        self.record(cmd)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        err = p.stderr.read()
        p.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError("%s failed: %s" % (self.show(cmd), err[-2000:].decode(errors="replace")))
        return wall, ru.ru_utime + ru.ru_stime

    def drop_caches(self):
        self.record("sync; echo 3 > /proc/sys/vm/drop_caches")
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")

    def mount(self, store, opts=()):
        """With the tests' helper (tests/integration/mount_util.py)."""
        cmd = [self.pcrfs, store, self.mnt] + list(opts)
        self.record(cmd)
        self.daemon = mu.Mount(store, self.mnt, *opts, pcrfs=self.pcrfs, errpath=os.devnull)
        try:
            self.daemon.start(timeout=60, step=0.005)
        except AssertionError as e:
            self.daemon = None
            raise RuntimeError("%s did not mount: %s" % (self.show(cmd), e))

    def umount(self):
        if self.daemon is None:
            return
        self.record(["fusermount3", "-u", self.mnt])
        self.daemon.stop(timeout=60)
        self.daemon = None

    def stats(self):
        with open(os.path.join(self.mnt, ".pcrfs/stats")) as f:
            return json.load(f)

    # ---- part 1: build cost -------------------------------------------------------

    def p_build(self):
        self.part = "build"
        a = self.a
        files = []
        for dp, _, fns in os.walk(a.dataset):
            files += [os.path.join(dp, f) for f in fns]
        for p in files:  # warm the page cache: every build reads from memory
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
        runs = {"plain": [], "quality": []}
        stores = {"plain": self.plain_store, "quality": self.q_store}
        for r in range(a.build_rounds):
            for kind in (("plain", "quality") if r % 2 == 0 else ("quality", "plain")):
                cmd = [self.mk, "-q", "-f", "-j%d" % a.jobs] + \
                    (["--quality"] if kind == "quality" else []) + [a.dataset, stores[kind]]
                print("quality.py: build round %d: %s" % (r + 1, kind), file=sys.stderr, flush=True)
                l0 = loadavg()
                wall, cpu = self.timed(cmd)
                runs[kind].append({"wall": wall, "cpu": cpu, "load_before": l0,
                                   "load_after": loadavg()})
        # the quality table lives in the index only: the records must not change
        rec = os.path.join(self.plain_store, "records")
        same = all(open(os.path.join(rec, n), "rb").read() ==
                   open(os.path.join(self.q_store, "records", n), "rb").read()
                   for n in sorted(os.listdir(rec)))
        self.record("cmp $WORK/plain.pcr/records/NNNNNN.pcr $WORK/quality.pcr/records/NNNNNN.pcr")
        med = {k: {m: statistics.median(x[m] for x in v) for m in ("wall", "cpu")}
               for k, v in runs.items()}
        return {"images": len(files), "jobs": a.jobs, "rounds": a.build_rounds, "runs": runs,
                "median": med, "records_identical": same}

    # ---- part 2: the table --------------------------------------------------------

    def index_quality(self, store, L):
        """{path: [stored u16 for levels 1..L-1]} from index.db directly (pcrfs(5))."""
        db = sqlite3.connect("file:%s/index.db?immutable=1" % store, uri=True)
        dirs = {}
        for i, parent, name in db.execute("SELECT id, parent, name FROM dirs"):
            dirs[i] = (parent, name)
        out = {}
        for d, name, kind, q in db.execute("SELECT dir, name, kind, quality FROM files"):
            parts = [name]
            while d in dirs and dirs[d][1] not in (None, b"", ""):
                parts.append(dirs[d][1])
                d = dirs[d][0]
            rel = b"/".join(x if isinstance(x, bytes) else x.encode() for x in reversed(parts))
            vals = struct.unpack("<%dH" % (len(q) // 2), q) if q else ()
            out[rel] = list(vals)
        db.close()
        return out

    @staticmethod
    def level_for(vals, t, L):
        for k, v in enumerate(vals, 1):
            if v >= round(t * SCALE):
                return k
        return L

    def p_table(self):
        self.part = "table"
        a = self.a
        store = self.q_store
        summ = json.loads(self.run([self.info, "--json", store]))
        L = summ["levels"]
        listing = {}
        for line in self.run([self.info, "--list", store]).split(b"\n"):
            if line:
                f = line.split(b"\t")
                listing[f[0]] = (f[1].decode(), [int(x) for x in f[3].split()])
        q = self.index_quality(store, L)
        self.L, self.listing, self.q = L, listing, q
        jpegs = sorted(p for p, (k, _) in listing.items() if k == "jpeg")
        measured = [p for p in jpegs if q.get(p)]
        if set(q) != set(listing):
            raise RuntimeError("index.db and pcrinfo --list name different files "
                               "(%d against %d)" % (len(q), len(listing)))

        def row(view, level_of):
            lv = {p: level_of(p) for p in jpegs}
            nbytes = [listing[p][1][lv[p] - 1] for p in jpegs]
            ss = [q[p][lv[p] - 1] / SCALE if lv[p] < L else 1.0 for p in measured]
            return {"view": view, "mean_bytes": statistics.fmean(nbytes),
                    "mean_level": statistics.fmean(lv.values()),
                    "msssim_mean": statistics.fmean(ss), "msssim_min": min(ss),
                    "levels": {k: sum(1 for v in lv.values() if v == k) for k in range(1, L + 1)}}
        rows = [row("scan%d" % k, lambda p, k=k: k) for k in range(1, L)]
        rows.append(row("full", lambda p: L))
        for t in THRESHOLDS:
            rows.append(row(vname(t), lambda p, t=t: self.level_for(q[p], t, L) if q[p] else L))
        full = rows[L - 1]["mean_bytes"]
        for r in rows:
            r["ratio_to_full"] = r["mean_bytes"] / full
        byv = {r["view"]: r for r in rows}

        # against pcrinfo --json (the library's pcr_file_level_for)
        pq = summ.get("quality") or {}
        diffs = []
        for e in pq.get("table", []):
            r = byv["scan%d" % e["level"]] if e["level"] < L else byv["full"]
            diffs += [abs(e["msssim_mean"] - r["msssim_mean"]), abs(e["msssim_min"] - r["msssim_min"])]
        thr = {}
        for e in pq.get("thresholds", []):
            r = byv.get(vname(e["threshold"]))
            if r:
                thr[e["threshold"]] = e
                diffs += [abs(e["per_image"]["mean_level"] - r["mean_level"]) / 10,
                          abs(e["per_image"]["mean_bytes"] - r["mean_bytes"]) / r["mean_bytes"],
                          abs(e["per_image"]["msssim_min"] - r["msssim_min"])]
        # the global level for 0.95: the lowest whose minimum reaches it
        G = next(k for k in range(1, L + 1) if (byv["scan%d" % k] if k < L else byv["full"])
                 ["msssim_min"] >= 0.95)
        gm = thr.get(0.95, {}).get("global_min", {}).get("level")

        # every file of every qNN/ view has the size of its chosen level on a mount
        self.mount(store)
        try:
            size_bad = size_n = 0
            for t in THRESHOLDS:
                for p in listing:
                    k = self.level_for(q[p], t, L) if q[p] else L
                    st = os.stat(os.path.join(os.fsencode(self.mnt), os.fsencode(vname(t)), p))
                    size_n += 1
                    size_bad += st.st_size != listing[p][1][k - 1]
            self.record("stat $WORK/mnt/q{90,95,99}/*/*  (every file)")
            spot = self.spot_check(q, jpegs, L)
            self.if_order = self.imagefolder_order()
        finally:
            self.umount()
        fid = self.fidelity_check(store, rows, L, len(jpegs))
        g_row = byv["scan%d" % G] if G < L else byv["full"]
        q95 = byv["q95"]
        return {"levels": L, "files": summ["files"], "jpegs": len(jpegs), "measured": len(measured),
                "verbatim": summ["verbatim"], "rows": rows, "pcrinfo_max_diff": max(diffs or [0]),
                "pcrinfo_has_quality": bool(pq), "global_min_level": G, "pcrinfo_global_min": gm,
                "mount_sizes": {"files": size_n, "wrong": size_bad}, "spot": spot,
                "fidelity": fid,
                "target": {"q95_bytes": q95["mean_bytes"], "global_level": G,
                           "global_bytes": g_row["mean_bytes"],
                           "ratio": q95["mean_bytes"] / g_row["mean_bytes"],
                           "met": q95["mean_bytes"] <= TARGET_RATIO * g_row["mean_bytes"]}}

    def imagefolder_order(self):
        """The relative paths of ImageFolder(MNT/full).samples, in its order: with the
        same seed, bench/imagefolder.py --limit N reads the same N in every view."""
        from torchvision.datasets import ImageFolder
        root = os.path.join(self.mnt, "full")
        return [os.fsencode(os.path.relpath(p, root)) for p, _ in ImageFolder(root).samples]

    def file_bytes(self, view, n, seed=0):
        """Mean bytes of the files imagefolder.py --limit @n --seed @seed reads in @view."""
        import torch
        g = torch.Generator()
        g.manual_seed(seed)
        idx = torch.randperm(len(self.if_order), generator=g)[:n].tolist()
        L = self.L
        tot = 0
        for i in idx:
            p = self.if_order[i]
            kind, sizes = self.listing[p]
            if view == "full":
                k = L
            elif view.startswith("scan"):
                k = int(view[4:])
            else:
                k = self.level_for(self.q[p], float(view[1:]) / 100, L) if self.q[p] else L
            tot += sizes[min(k, len(sizes)) - 1]
        return tot / len(idx)

    def spot_check(self, q, jpegs, L):
        """MS-SSIM of --spot q95/ files against full/, read from the mount, recomputed."""
        sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
        # numpy, from pcrfs/fidelity.h's definition; luma by djpeg (CMYK: Pillow + the
        # documented formula), as the integration tests check the library
        from test_fidelity import luma, msssim

        def read(path):
            with open(path, "rb") as f:
                return f.read()

        rng = random.Random(self.a.seed)
        sample = rng.sample([p for p in jpegs if q[p]], min(self.a.spot, len(jpegs)))
        self.record("djpeg -grayscale -pnm < $WORK/mnt/{q95,full}/PATH  "
                    "(%d random JPEGs, seed %d; MS-SSIM: msssim() of "
                    "tests/integration/test_fidelity.py)" % (len(sample), self.a.seed))
        out, failed = [], []
        root = os.fsencode(self.mnt)
        for p in sample:
            self.check_deadline()
            k = self.level_for(q[p], 0.95, L)
            data = read(os.path.join(root, b"q95", p))
            na = len(data)
            try:
                v = msssim(luma(data), luma(read(os.path.join(root, b"full", p))))
            except Exception as e:  # counted and named, never dropped silently
                failed.append("%s: %s" % (p.decode(errors="replace"), e))
                continue
            stored = q[p][k - 1] / SCALE if k < L else 1.0
            out.append({"path": p.decode(errors="replace"), "level": k, "bytes": na,
                        "recomputed": v, "stored": stored})
        # stored = floor(v * 60000) / 60000, and numpy and the library agree to ~1e-6
        tol = 1.0 / SCALE + 1e-6
        agree = sum(1 for o in out if o["stored"] - 1e-6 <= o["recomputed"] < o["stored"] + tol)
        return {"n": len(out), "agree": agree, "failed": failed, "tolerance": tol,
                "max_abs_diff": max(abs(o["recomputed"] - o["stored"]) for o in out),
                "min_recomputed": min(o["recomputed"] for o in out),
                "below_095": sum(1 for o in out if o["recomputed"] < 0.95),
                "below_level_full": sum(1 for o in out if o["level"] < L), "files": out}

    def fidelity_check(self, store, rows, L, njpeg):
        """pcrinfo --fidelity measures again at read time: per level against the index."""
        n = self.a.fidelity_sample or njpeg
        fid = json.loads(self.run([self.info, "--fidelity", "--json", "--sample", str(n),
                                   "--seed", str(self.a.seed), "-j", str(self.a.jobs), store]))
        out = {"sample": fid["sample"], "levels": []}
        for e in fid["table"]:
            r = rows[e["level"] - 1]
            out["levels"].append({"level": e["level"], "mean": e["msssim"],
                                  "min": e["msssim_min"], "index_mean": r["msssim_mean"],
                                  "index_min": r["msssim_min"]})
        out["max_diff_mean"] = max(abs(x["mean"] - x["index_mean"]) for x in out["levels"])
        out["max_diff_min"] = max(abs(x["min"] - x["index_min"]) for x in out["levels"])
        out["whole_set"] = fid["sample"] >= njpeg
        return out

    # ---- part 3: bandwidth limit --------------------------------------------------

    def p_bwlimit(self, G, full_bytes):
        self.part = "bwlimit"
        a = self.a
        views = ["q95", "scan%d" % G, "full"]
        nimg = max(200, int(a.rate * a.bw_seconds / full_bytes))
        runs = {v: [] for v in views}
        for r in range(a.bw_rounds):
            order = views[r % 3:] + views[:r % 3]
            for v in order:
                self.mount(self.q_store, ["-o", "bwlimit=%d" % a.rate])
                try:
                    self.drop_caches()
                    before = self.stats()
                    print("quality.py: bwlimit round %d: %s" % (r + 1, v), file=sys.stderr, flush=True)
                    out = self.run(["/usr/bin/python3", os.path.join(HERE, "imagefolder.py"),
                                    os.path.join(self.mnt, v), "--workers", str(a.workers),
                                    "--limit", str(nimg)], timeout=900)
                    res = json.loads(out)
                    after = self.stats()
                finally:
                    self.umount()
                rb = sum(l["record_bytes"] for l in after["levels"]) - \
                    sum(l["record_bytes"] for l in before["levels"])
                bpi = rb / max(1, res["images_all"])
                runs[v].append({"images_per_s": res["images_per_s"], "images": res["images"],
                                "images_all": res["images_all"], "record_bytes": rb,
                                "bytes_per_image": bpi, "cpu_ms_per_image": res["cpu_ms_per_image"],
                                "read_mb_s": bpi * res["images_per_s"] / 1e6})
        med = {}
        self.record("(file bytes: the sizes in pcrinfo --list of the images imagefolder.py "
                    "--limit %d --seed 0 reads, at each file's level in the view)" % nimg)
        for v, rs in runs.items():
            ips = statistics.median(x["images_per_s"] for x in rs)
            bpi = statistics.median(x["bytes_per_image"] for x in rs)
            med[v] = {"images_per_s": ips, "bytes_per_image": bpi, "prediction": a.rate / bpi,
                      "file_bytes": self.file_bytes(v, nimg),
                      "read_mb_s": statistics.median(x["read_mb_s"] for x in rs),
                      "io_bound_runs": sum(1 for x in rs if x["read_mb_s"] * 1e6 >= IO_BOUND * a.rate),
                      "cpu_ms_per_image": statistics.median(x["cpu_ms_per_image"] for x in rs)}
        return {"rate": a.rate, "images": nimg, "rounds": a.bw_rounds, "workers": a.workers,
                "views": views, "runs": runs, "median": med}

    # ---- all ----------------------------------------------------------------------

    def main(self):
        a = self.a
        os.makedirs(self.work, exist_ok=True)
        self.plain_store = os.path.join(self.work, "plain.pcr")
        self.q_store = os.path.join(self.work, "quality.pcr")
        git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "commit": git + (" + uncommitted changes" if dirty else ""),
               "machine": "%s, %d cores" % (platform.machine(), os.cpu_count()),
               "dataset": os.path.abspath(a.dataset), "load_start": loadavg(),
               "argv": self.show(["python3", "bench/quality.py"] + sys.argv[1:])}
        t0 = time.perf_counter()
        try:
            res["build"] = self.p_build()
            res["load_after_build"] = loadavg()
            res["table"] = self.p_table()
            res["load_after_table"] = loadavg()
            t = res["table"]
            res["bwlimit"] = self.p_bwlimit(t["global_min_level"], t["rows"][t["levels"] - 1]["mean_bytes"])
        finally:
            self.umount()
        res["load_end"] = loadavg()
        res["seconds"] = time.perf_counter() - t0
        res["commands"] = self.cmds
        return res


# ---- rendering --------------------------------------------------------------------

def cmds_block(lines):
    return ("<details><summary>Commands (as run; $WORK = the work directory, $BUILD = the "
            "build directory, $DATASET = the dataset)</summary>\n\n```\n%s\n```\n</details>\n"
            % "\n".join(lines))


def render(res):
    o = []
    b, t, w = res["build"], res["table"], res["bwlimit"]
    L = t["levels"]
    o.append("Run %s, pcrfs commit %s, %s; %.1f min in all; load average %s at the start, "
             "%s after the builds, %s after the table, %s at the end (1/5/15 min; 2 cores shared "
             "with other jobs). `%s`\n" % (
                 res["date"], res["commit"], res["machine"], res["seconds"] / 60,
                 fmt_load(res["load_start"]), fmt_load(res["load_after_build"]),
                 fmt_load(res["load_after_table"]), fmt_load(res["load_end"]), res["argv"]))

    o.append("### 17.1 Bytes and MS-SSIM per view\n")
    o.append("| view | mean level | mean bytes/JPEG | ratio to full | mean MS-SSIM | min MS-SSIM |")
    o.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in t["rows"]:
        name = r["view"] + (" = full" if r["view"] == "scan%d" % L else "")
        bold = "**" if r["view"].startswith("q") or r["view"] == "scan%d" % t["global_min_level"] else ""
        o.append("| %s%s%s | %.2f | %s | %.3f | %.4f | %.4f |" % (
            bold, name, bold, r["mean_level"], "{:,.0f}".format(r["mean_bytes"]),
            r["ratio_to_full"], r["msssim_mean"], r["msssim_min"]))
    tg = t["target"]
    o.append("")
    o.append("{:,} files: {:,} JPEGs, {:,} with a quality table (the MS-SSIM columns are over "
             "those; the bytes over every JPEG), {:,} verbatim. MS-SSIM: luma, against full, as "
             "stored by `mkpcrfs --quality` (floor(value × 60000) / 60000), read from index.db; "
             "a qNN view serves each JPEG at the lowest level whose stored value reaches NN/100. "
             "Levels used by q95 (level: JPEGs): {}.".format(
                 t["files"], t["jpegs"], t["measured"], t["verbatim"],
                 ", ".join("%s: %d" % (k, n) for k, n in
                           next(r for r in t["rows"] if r["view"] == "q95")["levels"].items() if n)))
    o.append("")
    o.append("**Target: q95 bytes ≤ 0.75 × the lowest global level whose minimum MS-SSIM is "
             "≥ 0.95** (scan%d, min %.4f): %s B ÷ %s B = **%.3f**: **%s**." % (
                 tg["global_level"], next(r for r in t["rows"] if r["view"] == (
                     "scan%d" % tg["global_level"] if tg["global_level"] < L else "full"))["msssim_min"],
                 "{:,.0f}".format(tg["q95_bytes"]), "{:,.0f}".format(tg["global_bytes"]),
                 tg["ratio"], "met" if tg["met"] else "missed"))
    o.append("")
    sp, fd, ms = t["spot"], t["fidelity"], t["mount_sizes"]
    o.append("Checks. pcrinfo --json's quality object (the library's `pcr_file_level_for`) "
             "against this table: largest difference %.2g (global_min level for 0.95: %s). "
             "Sizes on a mount: %s of %s files of q90/, q95/, q99/ have exactly the bytes "
             "of their level. `pcrinfo --fidelity` measured %s JPEGs again at read time: "
             "per level, mean and minimum differ from the index's by at most %.2g and %.2g "
             "(the index rounds down by < 1/60000). Spot check from the mount: %d random "
             "q95/ files (%d below full) and their full/ files, luma decoded by djpeg, "
             "MS-SSIM by the numpy implementation of tests/integration/test_fidelity.py: "
             "%d of %d agree with the stored value within 1/60000 (largest difference %.2g); "
             "lowest recomputed %.4f, %d below 0.95%s." % (
                 t["pcrinfo_max_diff"], t["pcrinfo_global_min"], "{:,}".format(ms["files"] - ms["wrong"]),
                 "{:,}".format(ms["files"]), "all {:,}".format(fd["sample"]) if fd["whole_set"] else "%d" % fd["sample"],
                 fd["max_diff_mean"], fd["max_diff_min"], sp["n"], sp["below_level_full"],
                 sp["agree"], sp["n"], sp["max_abs_diff"], sp["min_recomputed"], sp["below_095"],
                 "; %d could not be decoded: %s" % (len(sp["failed"]), "; ".join(sp["failed"][:5]))
                 if sp.get("failed") else ""))
    o.append("")
    o.append(cmds_block(res["commands"]["table"]))

    o.append("### 17.2 Build-time cost of the quality table\n")
    m = b["median"]
    n = b["images"]
    o.append("| build (`-j%d`) | wall s | CPU s | wall ms/image | CPU ms/image | every run: wall / CPU s |" % b["jobs"])
    o.append("| --- | ---: | ---: | ---: | ---: | --- |")
    for k, label in (("plain", "`mkpcrfs`"), ("quality", "`mkpcrfs --quality`")):
        o.append("| %s | %.1f | %.1f | %.1f | %.1f | %s |" % (
            label, m[k]["wall"], m[k]["cpu"], 1e3 * m[k]["wall"] / n, 1e3 * m[k]["cpu"] / n,
            ", ".join("%.1f / %.1f" % (x["wall"], x["cpu"]) for x in b["runs"][k])))
    ex_c = m["quality"]["cpu"] - m["plain"]["cpu"]
    ex_w = m["quality"]["wall"] - m["plain"]["wall"]
    o.append("| the quality table (difference) | %.1f | %.1f | %.1f | %.1f | |" % (
        ex_w, ex_c, 1e3 * ex_w / n, 1e3 * ex_c / n))
    o.append("")
    o.append("%s images, medians of %d rounds each, interleaved (ABBA: plain, quality, quality, "
             "plain); the dataset was read once before, so every build reads it from the page "
             "cache. The quality table costs **%.1f× the CPU of the plain build** (%.0f %% of the "
             "`--quality` build's CPU time; wall: %.1f×, %.0f %%). CPU time is the builder's "
             "user + sys over all its threads (wait4), which other jobs inflate little; wall "
             "time on 2 shared cores includes them. The records of the two stores are %s." % (
                 "{:,}".format(n), b["rounds"], ex_c / m["plain"]["cpu"], 100 * ex_c / m["quality"]["cpu"],
                 ex_w / m["plain"]["wall"], 100 * ex_w / m["quality"]["wall"],
                 "byte-identical (the table is in index.db only)" if b["records_identical"]
                 else "**not** byte-identical"))
    o.append("")
    o.append(cmds_block(res["commands"]["build"]))

    o.append("### 17.3 Under a bandwidth limit: q95/ against scan%d/ and full/\n" % t["global_min_level"])
    md = w["median"]
    o.append("| view | file bytes/image | record bytes/image read | I/O-bound prediction (img/s) "
             "| measured img/s | ÷ prediction | records read at (MB/s) | I/O-bound runs "
             "| CPU ms/image | every run (img/s) |")
    o.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for v in w["views"]:
        r = md[v]
        o.append("| %s | %s | %s (%+.1f %%) | %.1f | %.1f | %.2f | %.1f | %d of %d | %.2f | %s |" % (
            v, "{:,.0f}".format(r["file_bytes"]), "{:,.0f}".format(r["bytes_per_image"]),
            100 * (r["bytes_per_image"] / r["file_bytes"] - 1), r["prediction"], r["images_per_s"],
            r["images_per_s"] / r["prediction"], r["read_mb_s"], r["io_bound_runs"],
            len(w["runs"][v]), r["cpu_ms_per_image"],
            " / ".join("%.0f" % x["images_per_s"] for x in w["runs"][v])))
    g = "scan%d" % t["global_min_level"]
    o.append("")
    o.append("| speed-up | images/s | record bytes/image, inverse | file bytes/image, inverse |")
    o.append("| --- | ---: | ---: | ---: |")
    for x, y in (("q95", g), ("q95", "full"), (g, "full")):
        o.append("| %s ÷ %s | %.2f× | %.2f× | %.2f× |" % (
            x, y, md[x]["images_per_s"] / md[y]["images_per_s"],
            md[y]["bytes_per_image"] / md[x]["bytes_per_image"],
            md[y]["file_bytes"] / md[x]["file_bytes"]))
    o.append("")
    o.append("`pcrfs -o bwlimit=%d` (%.0f MB/s), %s random images (the same in each view: about "
             "%d s of full/ at the limit), bench/imagefolder.py with %d DataLoader workers; a "
             "fresh mount and a dropped page cache before every run (cold); %d rounds, the "
             "views' order rotated each round; medians. File bytes: the mean size of the files "
             "read (from `pcrinfo --list`); record bytes: bytes taken from the record files "
             "(`/.pcrfs/stats`) ÷ images read, the prediction's divisor. A run is I/O-bound when it read "
             "the records at ≥ 85 %% of the limit." % (
                 w["rate"], w["rate"] / 1e6, "{:,}".format(w["images"]), res.get("bw_seconds", 0) or
                 round(w["images"] * md["full"]["bytes_per_image"] / w["rate"]), w["workers"],
                 w["rounds"]))
    o.append("")
    o.append(cmds_block(res["commands"]["bwlimit"]))
    return "\n".join(o)


def target_row(res):
    tg = res["table"]["target"]
    return ("| q95 bytes ≤ 0.75× the lowest global level with min MS-SSIM ≥ 0.95 | %.3f× "
            "(scan%d) | %s | see §17 |" % (tg["ratio"], tg["global_level"],
                                         "met" if tg["met"] else "**missed**"))


def update_benchmarks(path, res):
    with open(path) as f:
        text = f.read()
    block = "<!-- BEGIN GENERATED: quality -->\n%s\n<!-- END GENERATED: quality -->" % render(res).rstrip()
    pat = re.compile(r"<!-- BEGIN GENERATED: quality -->.*?<!-- END GENERATED: quality -->", re.S)
    if pat.search(text):
        text = pat.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    row = target_row(res)
    lines = text.split("\n")
    lines = [l for l in lines if not l.startswith("| q95 bytes ≤ 0.75×")]
    end = lines.index("<!-- END GENERATED: targets -->") if "<!-- END GENERATED: targets -->" in lines else -1
    if end > 0:
        lines.insert(end, row)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--dataset", help="source tree (ImageFolder-like)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="meson build directory")
    ap.add_argument("--work", help="where the stores and the mount point go (kept)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mkpcrfs -j (default 2)")
    ap.add_argument("--build-rounds", type=int, default=2, help="builds of each kind (default 2)")
    ap.add_argument("--rate", type=parse_rate, default=parse_rate("10M"),
                    help="pcrfs -o bwlimit (default 10M)")
    ap.add_argument("--bw-seconds", type=float, default=12,
                    help="images per run: this many seconds of full/ at the limit (default 12)")
    ap.add_argument("--bw-rounds", type=int, default=3, help="default 3")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument("--spot", type=int, default=100, help="q95/ files to recompute (default 100)")
    ap.add_argument("--fidelity-sample", type=int, default=0,
                    help="pcrinfo --fidelity --sample (default 0: every JPEG)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=40, help="minutes (default 40)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--render", metavar="JSON", help="render an earlier --json; measure nothing")
    ap.add_argument("--benchmarks", help="update this BENCHMARKS.md (the quality block, the target row)")
    a = ap.parse_args()
    if a.render:
        with open(a.render) as f:
            res = json.load(f)
    else:
        if not (a.dataset and a.work):
            ap.error("--dataset and --work are needed to measure")
        if os.geteuid() != 0:
            sys.exit("quality.py: needs root (FUSE mounts, dropping the page cache)")
        res = Bench(a).main()
        res["bw_seconds"] = a.bw_seconds
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    print(render(res))
    if a.benchmarks:
        update_benchmarks(a.benchmarks, res)


if __name__ == "__main__":
    main()
