"""bench.py's sections "pyloader" and "listing", and their tables (render.py calls
r_pyloader and r_listing).

pyloader: what a Python loader pays per file on pcrfs that it does not pay on plain
files of the same bytes, warm, one thread (bench/pyloader.py, interleaved A/B).
listing: a names-only walk and ImageFolder's constructor on the 1.28 M-file store,
cold, against the same tree of empty files on local disk, per readdirplus policy.
"""
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def median(xs):
    return statistics.median(xs) if xs else 0.0


# ---- pyloader ----------------------------------------------------------------------------

PY_MODES = "buffered,unbuffered,walk,isatty,pil,pil_pcrfs"


def s_pyloader(b):
    a = b.a
    xs1 = os.path.join(b.work, "x-scan1")
    if not os.path.isdir(xs1):
        xs1 = b.extract("scan1")
    _, pid = b.mount("pcrfs", b.store, b.mnt)
    b.log("pyloader: %d rounds of %s" % (a.py_rounds, PY_MODES))
    args = ["--a", os.path.join(b.mnt, "scan1"), "--b", xs1, "--mode", PY_MODES,
            "--rounds", str(a.py_rounds), "--limit", str(a.py_files), "--daemon-pid"]
    r = b.pyjson("pyloader.py", args + [str(pid)],
                 show=["python3", os.path.join(HERE, "pyloader.py")] + args + ["DAEMON_PID"])
    b.umount(b.mnt)
    return r


PY_LABELS = {
    "buffered": "`open(p, 'rb').read()` (buffered: isatty + st_blksize buffer)",
    "unbuffered": "`open(p, 'rb', buffering=0).read()` (no isatty)",
    "walk": "`os.walk` + unbuffered reads (tree walk included)",
    "isatty": "`os.open` + `os.isatty` + `os.close` (the TCGETS ioctl alone)",
    "pil": "torchvision's default loader: `open` + `Image.open` + `convert('RGB')`",
    "pil_pcrfs": "`pcrfs.pil_loader` (FileIO, no isatty) + `convert('RGB')`",
}
PY_TARGETS = {"pil": 0.95, "pil_pcrfs": 0.95, "unbuffered": 0.7, "walk": 0.7}


def r_pyloader(res, table, n0, n1, n2, status, commands):
    if "pyloader" not in res:
        return "_Not measured in the run that produced this file._"
    p = res["pyloader"]
    rows = []
    for mode, v in p["modes"].items():
        tgt = PY_TARGETS.get(mode)
        note = ("%s (≥ %.2f×)" % (status(v["ratio"] >= tgt), tgt)) if tgt else ""
        rows.append((PY_LABELS.get(mode, mode), n1(v["median_us_a"]), n1(v["median_us_b"]),
                     "%s× (%s)" % (n2(v["ratio"]), " ".join(n2(x) for x in v["ratios"])),
                     "%s + %s" % (n1(v["cpu_us_a"]), n1(v["daemon_cpu_us"])),
                     n1(v["cpu_us_b"]), "%s×" % n2(v["cpu_ratio"]),
                     n2(v["wakeups_per_file"]), note))
    m = p["modes"]
    txt = table(["per file, warm, one thread", "pcrfs scan1 µs", "plain µs",
                 "plain/pcrfs time (each round)", "CPU µs pcrfs: reader + daemon",
                 "CPU µs plain", "CPU ratio", "daemon wake-ups / file", "target (time)"],
                rows)
    if "pil" in m and "pil_pcrfs" in m:
        x, y = m["pil_pcrfs"], m["pil"]
        txt += ("\n\n`pcrfs.pil_loader` against torchvision's default loader on the mount: "
                "%s µs against %s µs per image (median of %d interleaved rounds); CPU "
                "%s + %s µs (reader + daemon) against %s + %s µs, %s daemon wake-ups per "
                "image against %s." % (
                    n1(x["median_us_a"]), n1(y["median_us_a"]), p["rounds"],
                    n1(x["cpu_us_a"]), n1(x["daemon_cpu_us"]), n1(y["cpu_us_a"]),
                    n1(y["daemon_cpu_us"]), n2(x["wakeups_per_file"]),
                    n2(y["wakeups_per_file"])))
    txt += ("\n\n%s files of scan1 (the same shuffled list in both trees), %d rounds; each round "
            "runs every mode on both trees back to back. Times are medians; the ratio is the "
            "median of the per-round ratios. CPU = the reader's own CPU time per file and the "
            "daemon's (all threads, from schedstat); CPU ratio = plain / (reader + daemon): "
            "what a file costs in CPU, which the load inflates far less than the wall time. "
            "Wake-ups = the daemon's voluntary context switches per file (one per FUSE round "
            "trip; a count the load does not change). "
            "Load average %s at the start, %s at the end." % (
                n0(p["files"]), p["rounds"], " ".join(n2(x) for x in p["loadavg_start"]),
                " ".join(n2(x) for x in p["loadavg"])))
    return txt + commands(res, "pyloader")


# ---- listing -----------------------------------------------------------------------------

IF_SNIPPET = (
    "import os, random, sys, time\n"
    "from torchvision.datasets import ImageFolder\n"
    "t0 = time.perf_counter()\n"
    "ds = ImageFolder(sys.argv[1])\n"
    "t1 = time.perf_counter()\n"
    "ps = [p for p, _ in random.Random(1).sample(ds.samples, int(sys.argv[2]))]\n"
    "t2 = time.perf_counter()\n"
    "for p in ps: os.stat(p)\n"
    "t3 = time.perf_counter()\n"
    "print(len(ds), t1 - t0, len(ps), t3 - t2)\n")


def daemon_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_empty_tree(b, store, mnt, dst):
    """The store's scan5/ as empty files on local disk (names only)."""
    stamp = dst + ".done"
    b.record("python3 -c 'for every file of MNT/scan5: create it empty under "
             "$WORK/meta-empty/scan5'")
    if os.path.exists(stamp):
        return
    b.log("listing: the tree of empty files")
    b.mount("pcrfs", store, mnt, ["-o", "readdirplus=no"])
    src = os.path.join(mnt, "scan5")
    for d, _, fs in os.walk(src):
        od = os.path.join(dst, os.path.relpath(d, src))
        os.makedirs(od, exist_ok=True)
        for f in fs:
            os.close(os.open(os.path.join(od, f), os.O_WRONLY | os.O_CREAT, 0o644))
    b.umount(mnt)
    open(stamp, "w").close()


def s_listing(b):
    a = b.a
    store = os.path.join(b.work, "meta.pcr")
    mnt = os.path.join(b.work, "mnt-meta")
    if not os.path.isdir(store):
        b.run([b.mkmeta, "-f", "-n", str(a.meta_files), "-d", str(a.meta_dirs), store])
    local = os.path.join(b.work, "meta-empty")
    make_empty_tree(b, store, mnt, os.path.join(local, "scan5"))
    configs = [("local disk (ext4, empty files)", None), ("pcrfs (default)", []),
               ("pcrfs -o readdirplus=yes", ["-o", "readdirplus=yes"]),
               ("pcrfs -o readdirplus=auto", ["-o", "readdirplus=auto"])]
    runs = {(c, w): [] for c, _ in configs for w in ("find", "imagefolder")}

    def one(label, opts, what):
        pid = None
        root = os.path.join(local, "scan5")
        if opts is not None:
            _, pid = b.mount("pcrfs", store, mnt, opts)
            root = os.path.join(mnt, "scan5")
        b.drop_caches()
        c0 = daemon_cpu(pid) if pid else 0.0
        if what == "find":
            t0 = time.perf_counter()
            out = subprocess.run("find %s | wc -l" % root, shell=True, capture_output=True,
                                 text=True, check=True).stdout
            t = time.perf_counter() - t0
            b.record("find %s | wc -l" % root)
            r = {"entries": int(out), "s": t}
        else:
            cmd = ["/usr/bin/python3", "-c", IF_SNIPPET, root, str(a.listing_stats)]
            p = b.run(cmd, show="python3 -c 'ImageFolder(ROOT); then os.stat of %d random "
                                "samples' %s" % (a.listing_stats, b.show(root)))
            n, t, ns, ts = p.stdout.split()
            r = {"entries": int(n), "s": float(t), "stats": int(ns), "stat_s": float(ts)}
        r["rate"] = r["entries"] / r["s"]
        r["daemon_cpu"] = daemon_cpu(pid) - c0 if pid else 0.0
        r["load"] = b.loadavg()[0]
        if pid:
            b.umount(mnt)
        runs[(label, what)].append(r)

    for rep in range(a.listing_reps):
        for what in ("find", "imagefolder"):
            order = configs if rep % 2 == 0 else configs[::-1]
            for label, opts in order:
                b.log("listing: %s, %s (round %d)" % (what, label, rep + 1))
                one(label, opts, what)
    rows = []
    for label, _ in configs:
        for what in ("find", "imagefolder"):
            rs = runs[(label, what)]
            row = {"label": label, "what": what, "entries": rs[0]["entries"],
                   "s": median([r["s"] for r in rs]), "all_s": [r["s"] for r in rs],
                   "rate": median([r["rate"] for r in rs]),
                   "daemon_cpu": median([r["daemon_cpu"] for r in rs]),
                   "load": [r["load"] for r in rs]}
            if what == "imagefolder":
                row["stat_rate"] = median([r["stats"] / r["stat_s"] for r in rs])
            rows.append(row)
    return {"reps": a.listing_reps, "stats": a.listing_stats, "rows": rows}


def r_listing(res, table, n0, n1, n2, status, commands):
    if "listing" not in res:
        return "_Not measured in the run that produced this file._"
    L = res["listing"]
    by = {(r["label"], r["what"]): r for r in L["rows"]}
    local_if = by.get(("local disk (ext4, empty files)", "imagefolder"))
    rows = []
    for r in L["rows"]:
        if r["what"] == "find":
            what = "`find ROOT/scan5 | wc -l`"
            note = "%s k entries/s" % n0(r["rate"] / 1e3)
            if r["label"] == "pcrfs (default)":
                note += " — %s (≥ 500 k/s)" % status(r["rate"] >= 500e3)
        else:
            what = "`ImageFolder(ROOT/scan5)`"
            note = "%s k entries/s; then `os.stat` %s k/s" % (n0(r["rate"] / 1e3),
                                                              n0(r["stat_rate"] / 1e3))
            if local_if and r["label"] != local_if["label"]:
                x = r["s"] / local_if["s"]
                note += "; %s× local" % n2(x)
                if r["label"] == "pcrfs (default)":
                    note += " — %s (≤ 1.5×)" % status(x <= 1.5)
        rows.append((r["label"], what, n0(r["entries"]), "%.2f s" % r["s"],
                     " / ".join("%.2f" % x for x in r["all_s"]),
                     "%.2f s" % r["daemon_cpu"] if r["label"].startswith("pcrfs") else "",
                     note))
    txt = table(["tree", "cold", "entries", "median", "each round (s)", "daemon CPU", "note"],
                rows, ["l", "l", "r", "r", "r", "r", "l"])
    loads = [x for r in L["rows"] for x in r["load"]]
    txt += ("\n\nCold = page cache dropped and (pcrfs) a fresh mount before every run; %d "
            "rounds, the order of the trees reversed every other round. After the "
            "constructor, `os.stat` of %s random samples: a FUSE LOOKUP each unless "
            "READDIRPLUS already gave the kernel the attributes (what the first epoch's "
            "opens cost). Load average during the runs %s–%s." % (
                L["reps"], n0(L["stats"]), n2(min(loads)), n2(max(loads))))
    return txt + commands(res, "listing")
