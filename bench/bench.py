#!/usr/bin/python3
"""Measure every figure of BENCHMARKS.md side by side in one run and rewrite its
generated sections. Started by bench/run.sh, which installs and builds first.

Sections (in run order): dataset, build, pcr, bytes, reader, imagefolder, bwlimit,
meta, fidelity (bench/fidelity.py's tables, run on the same dataset and build), tokens
(SeiT-style token grids: size per coder, decode time, .tok reads through the mount),
pyloader and listing (bench/loaders.py: Python's per-file costs on the mount, warm; a
names-only walk and ImageFolder's constructor on the 1.28 M-file store, cold), cold
(bench/s3.py --only local: cold reads in record order, section 13, which it renders
itself). Results go to WORK/results.json (merged with an earlier run when --only is
used, so one section can be re-measured while developing); BENCHMARKS.md is then
rendered from that file. Only text between the "BEGIN GENERATED" and "END GENERATED"
markers is replaced.
"""
import argparse
import datetime
import filecmp
import json
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mount_util as mu  # noqa: E402
SECTIONS = ["dataset", "build", "pcr", "bytes", "reader", "imagefolder", "bwlimit", "meta",
            "fidelity", "tokens", "pyloader", "listing", "cold"]


def now():
    return time.perf_counter()


# Repeated runs report their best: on a shared machine every disturbance (another job's
# CPU burst, its cache drop) only ever makes a run slower, so the fastest run is the
# closest to what the code can do. Every run's figure is kept in the results as well.
def best(runs, key):
    return max(runs, key=lambda r: r[key])


def parse_rate(s):
    m = re.fullmatch(r"([0-9.]+)([kKmMgG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError("bad rate %r" % s)
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


class Bench:
    def __init__(self, a):
        self.a = a
        self.repo = a.repo
        self.work = a.work
        self.build = a.build
        self.pcrfs = os.path.join(a.build, "src/fuse/pcrfs")
        self.mkpcrfs = os.path.join(a.build, "src/tools/mkpcrfs")
        self.pcrinfo = os.path.join(a.build, "src/tools/pcrinfo")
        self.mkmeta = os.path.join(a.helpers, "mkmeta")
        self.bench_transform = os.path.join(a.helpers, "bench_transform")
        self.bench_tokens = os.path.join(a.build, "tests/bench/bench_tokens")
        self.mktokens_py = os.path.join(a.repo, "tests/gen/mktokens.py")
        self.read_tree_py = os.path.join(a.repo, "tests/bench/read_tree.py")
        self.logdir = os.path.join(self.work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.mounts = {}  # mount point -> its mu.Mount (daemon in the foreground)
        self.section = None
        self.cmds = {}
        self.res = {}
        self.store = os.path.join(self.work, "store.pcr")
        self.mnt = os.path.join(self.work, "mnt")
        self.can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
        self.my_drops = 0  # ours, counted to tell them from other jobs' (vm_drops)

    # ---- running things ---------------------------------------------------------------

    def show(self, cmd):
        """A command as BENCHMARKS.md shows it: paths relative to $WORK, $BUILD, the repo."""
        s = cmd if isinstance(cmd, str) else shlex.join(cmd)
        for path, name in ((self.build, "$BUILD"), (self.work, "$WORK"), (self.repo, ".")):
            s = s.replace(path + "/", name + "/").replace(path, name)
        s = s.replace("/usr/bin/python3 ./", "python3 ")
        s = s.replace("$BUILD/src/tools/", "").replace("$BUILD/src/fuse/", "")
        return s

    def record(self, cmd):
        lst = self.cmds.setdefault(self.section, [])
        s = self.show(cmd)
        if s not in lst:
            lst.append(s)

    def log(self, msg):
        print("bench: %s" % msg, flush=True)

    def run(self, cmd, show=None, check=True, **kw):
        """Run @cmd (a list), record it, return the CompletedProcess (text output)."""
        self.record(show or cmd)
        p = subprocess.run(cmd, text=True, capture_output=True, **kw)
        if check and p.returncode != 0:
            raise RuntimeError("%s: exit %d\n%s" % (self.show(cmd), p.returncode, p.stderr[-2000:]))
        return p

    def timed(self, cmd, show=None, stdout=subprocess.DEVNULL):
        """Run @cmd; return (wall seconds, cpu seconds of it and its children, exit)."""
        self.record(show or cmd)
        with tempfile.TemporaryFile() as err:
            t0 = now()
            p = subprocess.Popen(cmd, stdout=stdout, stderr=err)
            _, status, ru = os.wait4(p.pid, 0)
            wall = now() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            if p.returncode != 0:
                err.seek(0)
                raise RuntimeError("%s: exit %d\n%s" % (self.show(cmd), p.returncode,
                                                        err.read()[-2000:].decode(errors="replace")))
        return wall, ru.ru_utime + ru.ru_stime

    def pyjson(self, script, args, show=None):
        """Run one of our Python helpers; it prints one JSON object."""
        cmd = ["/usr/bin/python3", os.path.join(HERE, script)] + args
        p = self.run(cmd, show=show)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def read_tree(self, root, threads=None, passes=1, cold=False, ls=False):
        """tests/bench/read_tree.py (the project's shuffled whole-file reader): one
        run over @root. @return files, bytes (one pass), files_per_s, mb_per_s over
        all passes; with @ls, the seconds of `ls -lR`."""
        cmd = ["/usr/bin/python3", self.read_tree_py, "--json"]
        if cold:
            if not self.can_drop:
                raise RuntimeError("cold runs need root (drop_caches)")
            cmd.append("--drop-caches")
            self.my_drops += 1
        if ls:
            p = self.run(cmd + ["--ls", root])
            return json.loads(p.stdout.splitlines()[-1])["ls_lR_s"]
        cmd += ["--threads", str(threads or self.a.threads), "--repeat", str(passes), root]
        p = self.run(cmd)
        rs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        t = sum(r["read_s"] for r in rs)
        files = rs[0]["files"]
        nbytes = rs[0]["bytes"]
        return {"files": files, "bytes": nbytes, "seconds": t,
                "files_per_s": files * len(rs) / t, "mb_per_s": nbytes * len(rs) / t / 1e6}

    def drop_caches(self):
        if not self.can_drop:
            return False
        self.record(mu.DROP_CACHES)
        mu.drop_caches()
        self.my_drops += 1
        return True

    @staticmethod
    def vm_drops():
        """How many times anyone dropped the page cache since boot (/proc/vmstat)."""
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("drop_pagecache "):
                    return int(line.split()[1])
        return 0

    # ---- mounts ------------------------------------------------------------------------

    def mount(self, kind, src, mnt, opts=()):
        """Mount in the foreground (so we own the daemon's pid) with the tests' helper
        (tests/integration/mount_util.py); wait until it answers.
        @return seconds from exec to a served mount point, and the daemon's pid."""
        self.umount(mnt)
        if kind == "pcrfs":
            cmd = [self.pcrfs, src, mnt] + list(opts)
        else:
            cmd = ["squashfuse_ll", src, mnt] + list(opts)
        self.record(cmd)
        m = mu.Mount(src, mnt, argv=cmd,
                     errpath=os.path.join(self.logdir, os.path.basename(mnt) + ".log"))
        try:
            m.start(timeout=60, step=0.0002)
        except AssertionError as e:
            raise RuntimeError("%s: %s (see %s)" % (self.show(cmd), e, self.logdir))
        self.mounts[mnt] = m
        return m.seconds, m.proc.pid

    def umount(self, mnt):
        m = self.mounts.pop(mnt, None)
        if m or os.path.ismount(mnt):
            self.record(["fusermount3", "-u", mnt])
        if m:
            rc = m.stop(timeout=60)
            if rc != 0:
                self.log("warning: the daemon of %s exited %s" % (mnt, rc))
        elif os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], capture_output=True)

    def umount_all(self):
        for m in list(self.mounts):
            self.umount(m)

    def clean_stale(self):
        """Lazily unmount what an interrupted earlier run left under WORK."""
        with open("/proc/mounts") as f:
            for line in f:
                mp = line.split()[1].replace("\\040", " ")
                if mp.startswith(self.work + "/"):
                    subprocess.run(["fusermount3", "-uz", mp], capture_output=True)

    @staticmethod
    def rss(pid):
        out = {}
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
        return out

    def stats(self, mnt):
        with open(os.path.join(mnt, ".pcrfs/stats")) as f:
            return json.load(f)

    @staticmethod
    def loadavg():
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]

    def pcrfs_has(self, opt):
        p = subprocess.run([self.pcrfs, "--help"], capture_output=True, text=True)
        return opt in (p.stdout + p.stderr)

    # ---- sections ----------------------------------------------------------------------

    def env(self):
        def cmd(c):
            try:
                return subprocess.run(c, capture_output=True, text=True).stdout.strip()
            except OSError:
                return ""

        def pkg(p):
            return cmd(["dpkg-query", "-W", "-f=${Version}", p]) or "?"

        cpu = "?"
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
        osname = "?"
        if os.path.exists("/etc/os-release"):
            with open("/etc/os-release") as f:
                for line in f:
                    if line.startswith("PRETTY_NAME="):
                        osname = line.split("=", 1)[1].strip().strip('"')
        disk = cmd(["findmnt", "-no", "SOURCE,FSTYPE", "--target", self.work])
        commit = cmd(["git", "-C", self.repo, "rev-parse", "--short", "HEAD"])
        dirty = cmd(["git", "-C", self.repo, "status", "--porcelain", "--untracked-files=no"])
        untracked = cmd(["git", "-C", self.repo, "status", "--porcelain"])
        vers = cmd(["/usr/bin/python3", "-c",
                    "import PIL, torch, torchvision; print(PIL.__version__, torch.__version__,"
                    " torchvision.__version__)"]).split()
        return {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu, "cores": os.cpu_count(), "mem": mem, "os": osname,
            "kernel": platform.release(), "disk": disk,
            "commit": commit + (" + uncommitted changes" if dirty or untracked else ""),
            "libfuse": cmd(["pkg-config", "--modversion", "fuse3"]),
            "libjpeg_turbo": pkg("libjpeg62-turbo"), "sqlite": pkg("libsqlite3-0"),
            "squashfuse": pkg("squashfuse"), "squashfs_tools": pkg("squashfs-tools"),
            "python": platform.python_version(),
            "pillow": vers[0] if len(vers) > 0 else "?",
            "torch": vers[1] if len(vers) > 1 else "?",
            "torchvision": vers[2] if len(vers) > 2 else "?",
            "cmdline": os.environ.get("BENCH_CMDLINE", "bench/run.sh"),
        }

    def s_dataset(self):
        a = self.a
        out = {}
        if a.dataset:
            ds = os.path.abspath(a.dataset)
            out.update(kind="given", path=ds)
        else:
            ds = os.path.join(self.work, "ds-flickr-%dx%d-s%d" % (a.classes, a.per_class, a.seed))
            stamp = os.path.join(ds, "..", os.path.basename(ds) + ".done")
            if a.reuse_dataset and os.path.exists(stamp):
                with open(stamp) as f:
                    out.update(json.load(f), reused=True)
            else:
                if os.path.exists(stamp):
                    os.unlink(stamp)
                shutil.rmtree(ds, ignore_errors=True)
                cmd = ["/usr/bin/python3", a.make_dataset, "--out", ds, "--classes",
                       str(a.classes), "--per-class", str(a.per_class), "--seed", str(a.seed),
                       "--jpeg-mix", "flickr", "--jobs", str(os.cpu_count())]
                self.log("making the dataset (%d images)" % (a.classes * a.per_class))
                wall, _ = self.timed(cmd, show=["python3", "../shared/data/make_dataset.py"] +
                                     cmd[2:])
                out.update(kind="generated", seconds=wall)
                with open(stamp, "w") as f:
                    json.dump(out, f)
            out["path"] = ds
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(ds) for f in fs)
        out["files"] = len(files)
        out["bytes"] = sum(os.path.getsize(f) for f in files)
        self.ds = ds
        self.ds_files = files
        return out

    def s_build(self):
        """mkpcrfs -j1 and -j2 against the bare libjpeg transform on the same files."""
        n = len(self.ds_files)
        runs = {1: [], 2: []}
        out = {"files": n, "load_before": self.loadavg()}
        stores = {j: os.path.join(self.work, "store-j%d.pcr" % j) for j in (1, 2)}
        for rep in range(self.a.build_reps):
            for j in (1, 2):
                self.log("mkpcrfs -j%d (round %d)" % (j, rep + 1))
                wall, cpu = self.timed([self.mkpcrfs, "-q", "-f", "-j%d" % j, self.ds, stores[j]])
                runs[j].append({"wall": wall, "cpu": cpu})
            if rep == 0:
                self.log("bench_transform (bare libjpeg transform vs pcr_jpeg_transcode+split)")
                p = self.run([self.bench_transform, "-r", "1"] + self.ds_files,
                             show=shlex.join([self.bench_transform, "-r", "1"]) +
                             " $(find %s -type f | sort)" % shlex.quote(self.ds))
                m = re.search(r"all rounds: bare ([0-9.]+) images/s wall, ([0-9.]+) cpu; "
                              r"pcr ([0-9.]+) images/s wall, ([0-9.]+) cpu", p.stdout)
                if not m:
                    raise RuntimeError("bench_transform: unexpected output:\n" + p.stdout)
                out["bare_wall"], out["bare_cpu"], out["pcr_wall"], out["pcr_cpu"] = \
                    [float(x) for x in m.groups()]
                out["bench_transform_out"] = p.stdout
        out["load_after"] = self.loadavg()
        for j in (1, 2):
            best = min(runs[j], key=lambda r: r["wall"])
            out["j%d" % j] = {"runs": runs[j], "wall": best["wall"], "cpu": best["cpu"],
                              "ips_wall": n / best["wall"],
                              "ips_cpu": n / min(r["cpu"] for r in runs[j])}
        # the result must not depend on -j: compare the two stores' records
        r1, r2 = (os.path.join(stores[j], "records") for j in (1, 2))
        names = sorted(os.listdir(r1))
        out["same_records"] = names == sorted(os.listdir(r2)) and all(
            filecmp.cmp(os.path.join(r1, x), os.path.join(r2, x), shallow=False) for x in names)
        self.record("cmp -s $WORK/store-j1.pcr/records/NNNNNN.pcr $WORK/store-j2.pcr/records/...")
        # the -j2 store is the one every later section mounts
        if os.path.exists(self.store):
            shutil.rmtree(self.store)
        os.rename(stores[2], self.store)
        shutil.rmtree(stores[1])
        return out

    def s_pcr(self):
        p = self.run([self.pcrinfo, "--json", self.store])
        info = json.loads(p.stdout)
        src_mean = info["source_bytes"] / max(1, info["files"])
        return {"info": info, "source_mean": src_mean}

    def extract(self, level):
        d = os.path.join(self.work, "x-%s" % level)
        if os.path.exists(d):
            shutil.rmtree(d)
        self.run([self.pcrinfo, "--extract", d, "--level",
                  "full" if level == "full" else level[4:], self.store])
        return d

    def expected_bytes(self):
        """Per level: mean bytes served, and mean bytes a read must take from the records
        (the served bytes minus the EOI appended to every JPEG below... at every level)."""
        p = self.run([self.pcrinfo, "--list", self.store])
        served, chunks, n = {}, {}, 0
        for line in p.stdout.splitlines():
            path, kind, _, sizes = line.split("\t")
            sizes = [int(x) for x in sizes.split()]
            n += 1
            for k, s in enumerate(sizes, 1):
                served[k] = served.get(k, 0) + s
                chunks[k] = chunks.get(k, 0) + (s - 2 if kind == "jpeg" else s)
        return n, {k: v / n for k, v in served.items()}, {k: v / n for k, v in chunks.items()}

    def s_bytes(self):
        """Bytes taken from record files per image per level, from /.pcrfs/stats."""
        n, served, expect = self.expected_bytes()
        levels = len(served)
        self.mount("pcrfs", self.store, self.mnt)
        rows = []
        for k in range(1, levels + 1):
            before = self.stats(self.mnt)
            r = self.read_tree(os.path.join(self.mnt, "scan%d" % k))
            after = self.stats(self.mnt)
            rb = after["levels"][k - 1]["record_bytes"] - before["levels"][k - 1]["record_bytes"]
            rows.append({"level": k, "files": r["files"], "served": served[k],
                         "read_served": r["bytes"] / r["files"], "expected": expect[k],
                         "measured": rb / r["files"]})
        self.record(["cat", os.path.join(self.mnt, ".pcrfs/stats")])
        self.umount(self.mnt)
        return {"files": n, "rows": rows}

    def s_reader(self):
        """The shuffled whole-file reader on pcrfs views, the same bytes as plain files,
        and squashfuse_ll; ls -lR."""
        a = self.a
        x = {lv: self.extract(lv) for lv in ("scan1", "scan5", "full")}
        sqfs = os.path.join(self.work, "full.sqfs")
        smnt = os.path.join(self.work, "mnt-sqfs")
        if os.path.exists(sqfs):
            os.unlink(sqfs)
        self.log("mksquashfs")
        sq_wall, sq_cpu = self.timed(["mksquashfs", x["full"], sqfs, "-noappend", "-quiet"])
        out = {"mksquashfs_s": sq_wall, "sqfs_bytes": os.path.getsize(sqfs),
               "threads": a.threads, "warm_passes": a.warm_passes}
        # (label, kind, path inside the mount or the plain directory)
        targets = [("pcrfs scan1", "pcrfs", "scan1"), ("plain scan1", "plain", x["scan1"]),
                   ("pcrfs scan5", "pcrfs", "scan5"), ("plain scan5", "plain", x["scan5"]),
                   ("pcrfs full", "pcrfs", "full"), ("plain full", "plain", x["full"]),
                   ("squashfuse_ll full", "sqfs", "")]

        def root(kind, p):
            return {"pcrfs": lambda: os.path.join(self.mnt, p), "plain": lambda: p,
                    "sqfs": lambda: smnt}[kind]()

        def fresh(kind):
            if kind == "pcrfs":
                self.mount("pcrfs", self.store, self.mnt)
            elif kind == "sqfs":
                self.mount("sqfs", sqfs, smnt)


        cold = {t[0]: [] for t in targets}
        warm = {t[0]: [] for t in targets}
        self.log("reader: cold runs")
        for rep in range(a.cold_reps):
            for label, kind, p in targets:
                fresh(kind)
                cold[label].append(self.read_tree(root(kind, p), cold=True))
        self.log("reader: warm runs")
        for label, kind, p in targets:  # prime the page cache
            self.read_tree(root(kind, p))
        for rep in range(a.warm_reps):
            for label, kind, p in targets:
                warm[label].append(self.read_tree(root(kind, p), passes=a.warm_passes))
        rows = []
        for label, kind, p in targets:
            c = best(cold[label], "files_per_s")
            w = best(warm[label], "files_per_s")
            rows.append({"label": label, "files": c["files"], "bytes": c["bytes"],
                         "cold_fps": c["files_per_s"], "cold_mbps": c["mb_per_s"],
                         "warm_fps": w["files_per_s"], "warm_mbps": w["mb_per_s"],
                         "cold_all": [r["files_per_s"] for r in cold[label]],
                         "warm_all": [r["files_per_s"] for r in warm[label]]})
        out["rows"] = rows
        # ls -lR of the same tree three ways
        self.log("ls -lR")
        lsr = [("pcrfs full", "pcrfs", "full"), ("plain full", "plain", x["full"]),
               ("squashfuse_ll full", "sqfs", "")]
        ls = {l: {"cold": [], "warm": []} for l, _, _ in lsr}
        for rep in range(a.cold_reps):
            for label, kind, p in lsr:
                fresh(kind)
                ls[label]["cold"].append(self.read_tree(root(kind, p), cold=True, ls=True))
        for rep in range(a.warm_reps):
            for label, kind, p in lsr:
                ls[label]["warm"].append(self.read_tree(root(kind, p), ls=True))
        out["ls"] = [{"label": l, "cold": min(ls[l]["cold"]), "warm": min(ls[l]["warm"]),
                      "cold_all": ls[l]["cold"], "warm_all": ls[l]["warm"]} for l, _, _ in lsr]
        self.umount(self.mnt)
        self.umount(smnt)
        return out

    def s_imagefolder(self):
        """One epoch of ImageFolder + Pillow, cold, on the source and every view."""
        a = self.a
        xfull = os.path.join(self.work, "x-full")
        if not os.path.isdir(xfull):
            xfull = self.extract("full")
        targets = [("source (baseline JPEGs)", "plain", self.ds),
                   ("plain full (same bytes as pcrfs full)", "plain", xfull)]
        targets += [("pcrfs %s" % v, "pcrfs", v) for v in ("scan1", "scan2", "scan5", "full")]
        runs = {t[0]: [] for t in targets}
        for rep in range(a.if_reps):
            for label, kind, p in targets:
                if kind == "pcrfs":
                    self.mount("pcrfs", self.store, self.mnt)
                    p = os.path.join(self.mnt, p)
                self.drop_caches()
                self.log("ImageFolder: %s (round %d)" % (label, rep + 1))
                runs[label].append(self.pyjson("imagefolder.py", [p, "--workers", str(a.workers)]))
        self.umount(self.mnt)
        rows = []
        for label, _, _ in targets:
            r = dict(best(runs[label], "images_per_s"), label=label)
            r["all"] = [x["images_per_s"] for x in runs[label]]
            rows.append(r)
        return {"workers": a.workers, "reps": a.if_reps, "rows": rows}

    def s_bwlimit(self):
        """PCR's Theorem 4.1: under a bandwidth limit, images/s follows bytes per image."""
        a = self.a
        if not self.pcrfs_has("bwlimit"):
            return {"missing": "pcrfs has no -o bwlimit (pcrfs --help does not list it)"}
        views = ["full", "scan5", "scan2", "scan1"]
        # images per run: enough for ~bw_seconds of full-view reading at the limit, so
        # that the bucket's initial burst (1/8 s of traffic) stays small next to the run
        info = json.loads(self.run([self.pcrinfo, "--json", self.store]).stdout)
        full = info["table"][-1]["mean_bytes"]
        nimg = {r: max(200, min(info["files"], int(r * a.bw_seconds / full))) for r in a.rates}
        runs = {}
        for rep in range(a.bw_reps):
            for rate in a.rates:
                for v in views:
                    self.mount("pcrfs", self.store, self.mnt, ["-o", "bwlimit=%d" % rate])
                    self.drop_caches()
                    before = self.stats(self.mnt)
                    self.log("bwlimit %.0f MB/s: ImageFolder %s (round %d)" % (rate / 1e6, v,
                                                                               rep + 1))
                    r = self.pyjson("imagefolder.py",
                                    [os.path.join(self.mnt, v), "--workers", str(a.workers),
                                     "--limit", str(nimg[rate])])
                    after = self.stats(self.mnt)
                    rb = sum(l["record_bytes"] for l in after["levels"]) - \
                        sum(l["record_bytes"] for l in before["levels"])
                    runs.setdefault((rate, v), []).append({
                        "rate": rate, "view": v, "images": r["images"],
                        "images_all": r["images_all"], "images_per_s": r["images_per_s"],
                        "seconds": r["seconds"], "record_bytes": rb,
                        "bytes_per_image": rb / max(1, r["images_all"])})
                    self.umount(self.mnt)
        rows = []
        for (rate, v), rs in runs.items():
            rows.append(dict(best(rs, "images_per_s"), all=[x["images_per_s"] for x in rs]))
        return {"workers": a.workers, "seconds": a.bw_seconds, "reps": a.bw_reps, "rows": rows}

    def s_meta(self):
        """An ImageNet-sized store (1.28 M files): mount, RSS, ls -l, find, stat, first read."""
        a = self.a
        store = os.path.join(self.work, "meta.pcr")
        mnt = os.path.join(self.work, "mnt-meta")
        out = {}
        self.log("mkmeta (%d files)" % a.meta_files)
        p = self.run([self.mkmeta, "-f", "-n", str(a.meta_files), "-d", str(a.meta_dirs), store])
        out["build"] = json.loads(p.stdout)
        out["store_bytes"] = sum(os.path.getsize(os.path.join(d, f))
                                 for d, _, fs in os.walk(store) for f in fs)
        out["index_bytes"] = os.path.getsize(os.path.join(store, "index.db"))

        # 1. mount as users do (the command returns once the mount is served)
        os.makedirs(mnt, exist_ok=True)
        self.umount(mnt)
        self.drop_caches()
        t, _ = self.timed([self.pcrfs, store, mnt])
        out["mount_cmd_s"] = t
        self.umount(mnt)
        # 2. foreground, so that we know the daemon's pid
        self.drop_caches()
        t, pid = self.mount("pcrfs", store, mnt)
        out["mount_s"] = t
        out["rss_mount"] = self.rss(pid)["VmRSS"]
        # mkmeta names a 1,300-file class and a file of another class, so that nothing
        # has to be listed (and loaded) before the cold figures
        big = out["build"]["first_class"]
        sample = out["build"]["sample"]
        # first read of a file: its directory not yet loaded, its record not yet opened
        self.drop_caches()
        t0 = now()
        with open(os.path.join(mnt, "full", sample), "rb") as f:
            data = f.read()
        out["first_read_s"] = now() - t0
        out["first_read_bytes"] = len(data)
        t0 = now()
        with open(os.path.join(mnt, "full", sample), "rb") as f:
            f.read()
        out["second_read_s"] = now() - t0
        self.record("python3 -c \"open('$WORK/mnt-meta/full/%s','rb').read()\"  # timed, twice"
                    % sample)
        # ls -l of a 1,300-file class: cold (directory loaded from the index) and warm
        d = os.path.join(mnt, "full", big)
        out["ls_dir"] = {"files": out["build"]["first_class_files"]}
        out["ls_dir"]["cold"] = self.timed(["ls", "-l", d])[0]
        out["ls_dir"]["warm"] = min(self.timed(["ls", "-l", d])[0] for _ in range(5))
        classes = sorted(os.listdir(os.path.join(mnt, "full")))
        # the same listing of a plain directory of as many files, for scale
        nd = os.path.join(self.work, "plain-class")
        shutil.rmtree(nd, ignore_errors=True)
        os.makedirs(nd)
        names = os.listdir(os.path.join(mnt, "full", big))
        for nm in names:
            with open(os.path.join(nd, nm), "wb") as f:
                f.write(data)
        self.drop_caches()
        out["ls_dir"]["plain_cold"] = self.timed(["ls", "-l", nd])[0]
        out["ls_dir"]["plain_warm"] = min(self.timed(["ls", "-l", nd])[0] for _ in range(5))
        shutil.rmtree(nd)
        # find | wc -l: cold (directories loaded from the index as find goes), then warm
        finds = {}

        def find(view, label):
            t0 = now()
            p = subprocess.run("find %s | wc -l" % shlex.quote(os.path.join(mnt, view)),
                               shell=True, capture_output=True, text=True, check=True)
            t = now() - t0
            self.record("find %s | wc -l" % os.path.join(mnt, view))
            finds[label] = {"entries": int(p.stdout), "s": t, "rate": int(p.stdout) / t}

        self.log("find on %d files" % a.meta_files)
        find("scan5", "scan5 cold")
        out["rss_find"] = self.rss(pid)["VmRSS"]
        first_cold = finds["scan5 cold"]
        find("scan5", "scan5 warm")
        find("scan1", "scan1 (index loaded, kernel cold)")
        out["rss_find2"] = self.rss(pid)["VmRSS"]
        # stat: a random sample of paths, in a view nothing has listed (every stat is a
        # LOOKUP), then again (kernel cache), then in scan5 (listed by find: attributes
        # came with the listing only with -o readdirplus=yes, else a LOOKUP each)
        rng = random.Random(1)
        cl = rng.sample(classes, min(len(classes), 80))
        rels = []
        for c in cl:
            rels += [os.path.join(c, f) for f in os.listdir(os.path.join(mnt, "scan5", c))]
        rng.shuffle(rels)
        rels = rels[:a.stat_sample]
        stat = {}
        for label, view in (("scan2 cold", "scan2"), ("scan2 warm", "scan2"),
                            ("scan5 after find", "scan5")):
            paths = [os.path.join(mnt, view, r) for r in rels]
            t0 = now()
            for pth in paths:
                os.lstat(pth)
            t = now() - t0
            stat[label] = {"n": len(paths), "s": t, "rate": len(paths) / t}
        self.record("python3 -c 'for p in SAMPLE: os.lstat(p)'  # %d random paths" % len(rels))
        out["stat"] = stat
        hwm = self.rss(pid)
        out["rss_end"] = hwm["VmRSS"]
        out["hwm_end"] = hwm["VmHWM"]
        self.umount(mnt)
        # a cold find again on a fresh mount (best of the two), then the same with
        # readdirplus on (off by default), to show what it costs on 1.28 M entries
        self.drop_caches()
        self.mount("pcrfs", store, mnt)
        find("scan5", "scan5 cold")
        cold_runs = [first_cold["rate"], finds["scan5 cold"]["rate"]]
        finds["scan5 cold"] = max(first_cold, finds["scan5 cold"], key=lambda r: r["rate"])
        finds["scan5 cold"]["all"] = cold_runs
        self.umount(mnt)
        self.drop_caches()
        _, pid = self.mount("pcrfs", store, mnt, ["-o", "readdirplus=yes"])
        find("scan5", "scan5 cold, -o readdirplus=yes")
        out["rss_find_nordp"] = self.rss(pid)["VmRSS"]
        self.umount(mnt)
        # order of the rows in BENCHMARKS.md
        out["find"] = {k: finds[k] for k in ("scan5 cold", "scan5 warm",
                                             "scan1 (index loaded, kernel cold)",
                                             "scan5 cold, -o readdirplus=yes")}
        return out

    def s_fidelity(self):
        """bench/fidelity.py: bytes, MS-SSIM and decode rate per level, per scan script.
        Its Markdown goes into BENCHMARKS.md as it prints it."""
        script = os.path.join(HERE, "fidelity.py")
        if not os.path.exists(script):
            return {"missing": "bench/fidelity.py is not in this checkout"}
        wd = os.path.join(self.work, "fidelity")
        out = os.path.join(self.work, "fidelity.json")
        self.log("bench/fidelity.py (MS-SSIM and decode rate per level)")
        p = self.run(["/usr/bin/python3", script, "--dataset", self.ds, "--build", self.build,
                      "--work", wd, "--reps", str(self.a.fidelity_reps), "--json", out])
        with open(out) as f:
            data = json.load(f)
        return {"markdown": p.stdout, "data": data}

    # bench_tokens' size rows: "NAME   123.4 B/img   7.685 bits/token   (+0.1 B/img model: 1198 B)"
    TOK_ROW = re.compile(r"^( *)(\S.*?)\s+([0-9.]+) B/img\s+([0-9.]+) bits/token"
                         r"(?:\s+\(\+([0-9.]+) B/img model: ([0-9]+) B\))?\s*$")
    TOK_DEC = re.compile(r"^\s+(huffman|zstd-dict)\s+([0-9.]+) us/image\s+\(([0-9.]+) ns/token\)")

    def s_tokens(self):
        """Issue #4: SeiT-style token grids. bench_tokens' bytes per image and decode time
        per coder; then the same grids as .npy files, through a --tokens store's mount
        (.tok) against the files on local disk, read whole and with numpy.load."""
        a = self.a
        if not os.path.exists(self.bench_tokens):
            return {"missing": "%s was not built (tests/bench/meson.build)" %
                    self.show(self.bench_tokens)}
        n, classes = a.tok_images, a.tok_classes
        d = os.path.join(self.work, "tokens-%d-s%d" % (n, a.seed))
        seit, tree = os.path.join(d, "seit"), os.path.join(d, "npy%dk" % (n // 1000))
        stamp = d + ".done"
        gen = ["/usr/bin/python3", self.mktokens_py, "--seed", str(a.seed)]
        if not (a.reuse_dataset and os.path.exists(stamp)):
            if os.path.exists(stamp):
                os.unlink(stamp)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            self.log("mktokens.py: %d grids as SeiT files and as a .npy tree" % n)
            self.run(gen + ["seit", seit, "--n", str(n), "--classes", str(classes)])
            self.run(gen + ["classes", tree, "--classes", str(classes),
                            "--per-class", str(n // classes)])
            open(stamp, "w").close()
        else:
            self.record(gen + ["seit", seit, "--n", str(n), "--classes", str(classes)])
            self.record(gen + ["classes", tree, "--classes", str(classes),
                               "--per-class", str(n // classes)])
        data = [os.path.join(seit, f) for f in os.listdir(seit) if f.endswith("data.bin")][0]
        labels = [os.path.join(seit, f) for f in os.listdir(seit) if f.endswith("label.txt")][0]
        out = {"images": n, "classes": classes, "shape": None}

        # 1. sizes and decode time per coder (single thread, best of 5 passes inside)
        self.log("bench_tokens")
        p = self.run([self.bench_tokens, data, labels])
        out["bench_tokens_out"] = p.stdout
        rows, dec = [], {}
        for line in p.stdout.splitlines():
            m = self.TOK_ROW.match(line)
            if m:
                rows.append({"name": m.group(2), "sweep": bool(m.group(1)),
                             "bytes": float(m.group(3)), "bits": float(m.group(4)),
                             "model_amort": float(m.group(5) or 0),
                             "model_bytes": int(m.group(6) or 0)})
                continue
            m = self.TOK_DEC.match(line)
            if m:
                dec[m.group(1)] = {"us": float(m.group(2)), "ns_token": float(m.group(3))}
                continue
            m = re.match(r"([0-9]+) images of ([0-9]+)x([0-9]+) tokens, ([0-9]+) distinct", line)
            if m:
                out["shape"] = [int(m.group(2)), int(m.group(3))]
                out["symbols"] = int(m.group(4))
            m = re.match(r"auto choice: (\S+)", line)
            if m:
                out["auto"] = m.group(1)
            m = re.match(r"encode: huffman ([0-9.]+) us/image, zstd-dict ([0-9.]+) us/image", line)
            if m:
                out["encode_us"] = {"huffman": float(m.group(1)), "zstd-dict": float(m.group(2))}
            m = re.search(r"\.npy serialisation ([0-9.]+) us/image", line)
            if m:
                out["npy_us"] = float(m.group(1))
        if not rows or set(dec) != {"huffman", "zstd-dict"}:
            raise RuntimeError("bench_tokens: unexpected output:\n" + p.stdout)
        out["rows"], out["decode"] = rows, dec

        # 2. the .npy tree as a store
        store = os.path.join(self.work, "tokens.pcr")
        mnt = os.path.join(self.work, "mnt-tok")
        shutil.rmtree(store, ignore_errors=True)
        self.log("mkpcrfs --tokens")
        wall, cpu = self.timed([self.mkpcrfs, "-q", "--tokens", tree, store])
        out["store"] = {"seconds": wall, "cpu": cpu,
                        "bytes": sum(os.path.getsize(os.path.join(dp, f))
                                     for dp, _, fs in os.walk(store) for f in fs),
                        "npy_bytes": sum(os.path.getsize(os.path.join(dp, f))
                                         for dp, _, fs in os.walk(tree) for f in fs)}
        # the mount must serve the .npy bytes it was given (a sample, compared byte by byte)
        self.mount("pcrfs", store, mnt)
        tokroot = os.path.join(mnt, "tokens")
        rels = sorted(os.path.relpath(os.path.join(dp, f), tree)
                      for dp, _, fs in os.walk(tree) for f in fs)
        for rel in random.Random(a.seed).sample(rels, min(200, len(rels))):
            tok = os.path.join(tokroot, rel[:-4] + ".tok")
            if not filecmp.cmp(tok, os.path.join(tree, rel), shallow=False):
                raise RuntimeError("%s differs from %s" % (tok, rel))
        self.record("cmp $WORK/mnt-tok/tokens/CLASS/NAME.tok %s/CLASS/NAME.npy  # 200 random files"
                    % self.show(tree))
        # 3. whole-file reads: .tok through the mount vs the .npy files on local disk
        targets = [("pcrfs tokens/ (.tok)", "pcrfs", tokroot), ("plain .npy tree", "plain", tree)]
        cold = {t[0]: [] for t in targets}
        warm = {t[0]: [] for t in targets}
        self.log("tokens: cold reads")
        for rep in range(a.cold_reps):
            for label, kind, root in targets:
                if kind == "pcrfs":
                    self.mount("pcrfs", store, mnt)
                cold[label].append(self.read_tree(root, cold=True))
        self.log("tokens: warm reads")
        for label, kind, root in targets:  # prime the page cache
            self.read_tree(root)
        for rep in range(a.warm_reps):
            for label, kind, root in targets:
                warm[label].append(self.read_tree(root, passes=a.warm_passes))
        out["threads"], out["warm_passes"] = a.threads, a.warm_passes
        out["reads"] = []
        for label, _, _ in targets:
            c, w = best(cold[label], "files_per_s"), best(warm[label], "files_per_s")
            out["reads"].append({
                "label": label, "files": c["files"], "bytes": c["bytes"],
                "cold_fps": c["files_per_s"], "cold_mbps": c["mb_per_s"],
                "warm_fps": w["files_per_s"], "warm_mbps": w["mb_per_s"],
                "cold_all": [r["files_per_s"] for r in cold[label]],
                "warm_all": [r["files_per_s"] for r in warm[label]]})
        # 4. numpy.load of every file, one thread, shuffled, warm (what a loader calls)
        load = ("import numpy, os, random, sys, time\n"
                "r = sys.argv[1]\n"
                "fs = sorted(os.path.join(d, f) for d, _, n in os.walk(r) for f in n)\n"
                "random.Random(1).shuffle(fs)\n"
                "for f in fs: numpy.load(f)\n"
                "ts = []\n"
                "for _ in range(3):\n"
                "    t0 = time.perf_counter()\n"
                "    s = 0\n"
                "    for f in fs: s += int(numpy.load(f)[0, 0])\n"
                "    ts.append(time.perf_counter() - t0)\n"
                "print(len(fs) / min(ts))\n")
        out["npload"] = []
        for label, _, root in targets:
            p = self.run(["/usr/bin/python3", "-c", load, root],
                         show="python3 -c 'for f in shuffled(FILES): numpy.load(f)'  "
                              "# 1 thread, warm, best of 3, %s" % self.show(root))
            out["npload"].append({"label": label, "fps": float(p.stdout.split()[-1])})
        self.umount(mnt)
        return out

    def s_pyloader(self):
        import loaders
        return loaders.s_pyloader(self)

    def s_listing(self):
        import loaders
        return loaders.s_listing(self)

    def s_cold(self):
        """Section 13: cold whole-file reads in RecordSampler and random order, with and
        without -o readahead=record, against plain files of the same bytes. bench/s3.py
        --only local measures it and rewrites its own block of the output file."""
        self.log("bench/s3.py --only local (cold reads in record order)")
        cmd = ["/usr/bin/python3", os.path.join(HERE, "s3.py"), "--only", "local",
               "--work", os.path.join(self.work, "cold"), "--data", self.work,
               "--store", self.store, "--build", self.build, "--out", self.a.out,
               "--run-timeout", "90", "--reps", str(self.a.cold_reps)]
        # the command §13 names as the one that measured it
        env = dict(os.environ, BENCH_CMDLINE="bench/run.sh --only cold (%s)" % self.show(cmd))
        p = self.run(cmd, timeout=3600, env=env)
        return {"log": p.stdout[-2000:]}

    # ---- driver ------------------------------------------------------------------------

    def run_all(self):
        a = self.a
        path = os.path.join(self.work, "results.json")
        if a.only and os.path.exists(path):
            with open(path) as f:
                self.res = json.load(f)
        only = a.only or SECTIONS
        t_start = now()
        self.clean_stale()
        self.res["env"] = self.env()
        self.res["env"]["load_start"] = self.loadavg()
        self.res.setdefault("cmds", {})
        self.res.setdefault("timing", {})
        if "dataset" in self.res:  # for sections that need it when --only skips it
            self.ds = self.res["dataset"]["path"]
            self.ds_files = sorted(os.path.join(d, f) for d, _, fs in os.walk(self.ds)
                                   for f in fs)
        try:
            for s in SECTIONS:
                # the dataset is needed by the build; later sections need the store
                if s not in only and not (s == "dataset" and "build" in only):
                    continue
                if s in ("bytes", "reader", "imagefolder", "bwlimit", "pyloader", "cold") and \
                        not os.path.isdir(self.store):
                    raise RuntimeError("no store at %s: run the build section" % self.store)
                self.section = s
                self.cmds[s] = []
                self.log("== %s" % s)
                t0 = now()
                d0, m0 = self.vm_drops(), self.my_drops
                self.res[s] = getattr(self, "s_" + s)()
                self.res["timing"][s] = now() - t0
                # other jobs dropping the page cache make warm figures partly cold
                self.res.setdefault("foreign_drops", {})[s] = max(
                    0, self.vm_drops() - d0 - (self.my_drops - m0))
                self.res["cmds"][s] = self.cmds[s]
                with open(path, "w") as f:
                    json.dump(self.res, f, indent=1)
        finally:
            self.umount_all()
        self.res["env"]["load_end"] = self.loadavg()
        self.res["env"]["measure_s"] = now() - t_start
        # from bench/run.sh's start: installing and building count too
        t0 = float(os.environ.get("BENCH_T0", "0") or 0)
        self.res["env"]["total_s"] = time.time() - t0 if t0 else now() - t_start
        self.res["env"]["complete"] = not a.only
        with open(path, "w") as f:
            json.dump(self.res, f, indent=1)
        return self.res


def main():
    repo = os.path.dirname(HERE)
    ap = argparse.ArgumentParser(description="Measure pcrfs and rewrite BENCHMARKS.md.")
    ap.add_argument("--repo", default=repo)
    ap.add_argument("--work", default=os.path.join(os.path.dirname(repo), "bench-data"))
    ap.add_argument("--build", default=None, help="meson build directory (default WORK/build)")
    ap.add_argument("--helpers", default=None, help="mkmeta, bench_transform (BUILD/bench-helpers)")
    ap.add_argument("--out", default=None, help="the file to rewrite (default REPO/BENCHMARKS.md)")
    ap.add_argument("--dataset", help="an existing ImageFolder tree instead of generating one")
    ap.add_argument("--make-dataset", default=os.path.join(os.path.dirname(repo),
                                                           "shared/data/make_dataset.py"))
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reuse-dataset", action="store_true",
                    help="keep a dataset generated by an earlier run with the same arguments")
    ap.add_argument("--build-reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4, help="reader threads")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    ap.add_argument("--cold-reps", type=int, default=3,
                    help="rounds of each cold measurement (section cold too: s3.py --reps)")
    ap.add_argument("--warm-reps", type=int, default=5)
    ap.add_argument("--warm-passes", type=int, default=3,
                    help="passes over the tree per warm reader run")
    ap.add_argument("--rates", type=lambda s: [parse_rate(x) for x in s.split(",")],
                    default=[parse_rate(x) for x in ("5M", "10M", "20M", "50M")],
                    help="bandwidth limits, bytes/s with k/M/G suffixes (default 5M,10M,20M,50M)")
    ap.add_argument("--bw-seconds", type=float, default=10,
                    help="size each bandwidth-limited run to last about this long for the "
                         "full view (200 images at least, the whole dataset at most)")
    ap.add_argument("--bw-reps", type=int, default=2,
                    help="rounds over all rates and views under a bandwidth limit")
    ap.add_argument("--if-reps", type=int, default=2,
                    help="rounds of unthrottled ImageFolder epochs")
    ap.add_argument("--meta-files", type=int, default=1281167)
    ap.add_argument("--meta-dirs", type=int, default=1000)
    ap.add_argument("--stat-sample", type=int, default=100000)
    ap.add_argument("--fidelity-reps", type=int, default=2,
                    help="decode rounds of bench/fidelity.py (best kept)")
    ap.add_argument("--tok-images", type=int, default=10000,
                    help="token grids (32x32, codebook 391) for the tokens section")
    ap.add_argument("--tok-classes", type=int, default=100)
    ap.add_argument("--py-rounds", type=int, default=7,
                    help="interleaved rounds of bench/pyloader.py (pyloader section)")
    ap.add_argument("--py-files", type=int, default=500,
                    help="files of scan1 per pyloader pass")
    ap.add_argument("--listing-reps", type=int, default=3,
                    help="cold rounds of the listing section")
    ap.add_argument("--listing-stats", type=int, default=20000,
                    help="random samples stat'ed after ImageFolder (listing section)")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None,
                    help="comma-separated sections to re-measure (%s)" % ",".join(SECTIONS))
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite BENCHMARKS.md from WORK/results.json, measure nothing")
    a = ap.parse_args()
    a.work = os.path.abspath(a.work)
    a.build = os.path.abspath(a.build or os.path.join(a.work, "build"))
    a.helpers = os.path.abspath(a.helpers or os.path.join(a.build, "bench-helpers"))
    a.out = a.out or os.path.join(a.repo, "BENCHMARKS.md")
    if a.only:
        bad = [s for s in a.only if s not in SECTIONS]
        if bad:
            ap.error("unknown section(s) %s" % ",".join(bad))
    sys.path.insert(0, HERE)
    import render

    if a.render_only:
        with open(os.path.join(a.work, "results.json")) as f:
            res = json.load(f)
    else:
        res = Bench(a).run_all()
    render.rewrite(a.out, res)
    print("bench: wrote %s" % a.out)


if __name__ == "__main__":
    main()
