#!/usr/bin/python3
"""Object storage and record order: measure and rewrite two sections of BENCHMARKS.md.
Started by bench/s3.sh (which installs s3fs and s3rver and builds pcrfs first).

  s3     ImageFolder + Pillow (DataLoader, 2 workers, batch 32, decode + ToTensor)
         over an s3:// mount of the store and over s3fs-fuse mounting the original
         JPEGs, both from one s3rver on 127.0.0.1 behind bench/delayproxy.py, which
         adds a round-trip time (0, 2, 10 ms). pcrfs with pcrfs.RecordSampler and with
         a random order; GETs, bytes and cache hits per image from /.pcrfs/stats and
         from the proxy.
  local  Cold whole-file reads (one thread) and a Pillow decode pass in RecordSampler
         order and in a random order: a local mount with and without
         -o readahead=record against plain files holding the same bytes; in record
         order also the daemon started in the reader's session instead of its own,
         and reads after an ImageFolder-style listing in the same process (untimed)
         with -o readdirplus=no|auto|yes, plain files after the same listing; and
         the order drawn on the timed mount from RecordSampler(ImageFolder(MNT/view),
         prefetch=True), which names the next records through MNT/.pcrfs/prefetch/
         as a training job's sampler does (bench/order_read.py --sampler).
         --limit N reads the first N files of each order (a large store in minutes),
         --record-only the record order's read pass only.

Every run is bounded in time; the rounds are interleaved (A, B, C, A, B, C, ...) and
the tables show medians with every run's figure kept in WORK/s3-results.json.
Only 127.0.0.1 is contacted. Everything started is stopped at the end.
"""
import argparse
import glob
import json
import os
import random
import shlex
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mount_util as mu  # noqa: E402
REPO = os.path.dirname(HERE)
BUCKET = "bench"
KEY = "S3RVER"  # s3rver's built-in credentials
VIEWS = ("scan5", "full")
sys.path.insert(0, HERE)
from s3render import HINTED, LISTED, LISTED_PLAIN, READDIRPLUS  # noqa: E402  (its labels)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def median(xs):
    return statistics.median(xs) if xs else 0.0


def varints(blob):
    out, v, shift = [], 0, 0
    for b in blob:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    return out



def write_upload_cfg(cfg, src, files, ep, prefix):
    """A curl -K config that PUTs SRC/r to s3://BUCKET/PREFIX/r for each r of @files
    (relative paths) at endpoint @ep, signed with s3rver's built-in key."""
    with open(cfg, "w") as f:
        for i, r in enumerate(files):
            if i:
                f.write("next\n")
            f.write('aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "%s:%s"\n' % (KEY, KEY))
            f.write('header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n')
            f.write('fail\nsilent\nshow-error\noutput = "/dev/null"\n')
            f.write('upload-file = "%s"\nurl = "%s/%s/%s/%s"\n' %
                    (os.path.join(src, r), ep, BUCKET, prefix, urllib.request.quote(r)))

class Bench:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        self.pcrfs = os.path.join(a.build, "src/fuse/pcrfs")
        self.pcrinfo = os.path.join(a.build, "src/tools/pcrinfo")
        self.logdir = os.path.join(self.work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.procs = []  # (name, Popen) of servers we started
        self.mounts = {}  # mount point -> its mu.Mount
        self.cmds = {}
        self.section = None
        self.res = {}

    # ---- bookkeeping -------------------------------------------------------------------

    def show(self, cmd):
        s = cmd if isinstance(cmd, str) else shlex.join(cmd)
        for path, name in ((self.a.build, "$BUILD"), (self.work, "$WORK"),
                           (self.a.store, "$STORE"), (self.a.dataset, "$DATASET"),
                           (REPO, ".")):
            if not path:
                continue
            s = s.replace(path + "/", name + "/").replace(path, name)
        s = s.replace("/usr/bin/python3 ./", "python3 ")
        return s.replace("$BUILD/src/tools/", "").replace("$BUILD/src/fuse/", "")

    def record(self, cmd):
        lst = self.cmds.setdefault(self.section, [])
        s = self.show(cmd)
        if s not in lst:
            lst.append(s)

    def log(self, msg):
        print("s3bench: %s" % msg, flush=True)

    def run(self, cmd, show=None, timeout=600, env=None):
        self.record(show or cmd)
        p = subprocess.run(cmd, text=True, capture_output=True, timeout=timeout, env=env)
        if p.returncode != 0:
            raise RuntimeError("%s: exit %d\n%s" % (self.show(cmd), p.returncode,
                                                    p.stderr[-2000:]))
        return p

    def pyjson(self, script, args, timeout, env=None, show=None):
        cmd = ["/usr/bin/python3", os.path.join(HERE, script)] + args
        p = self.run(cmd, show=show, timeout=timeout, env=env)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def drop_caches(self):
        self.record(mu.DROP_CACHES)
        mu.drop_caches()

    # ---- servers and mounts ------------------------------------------------------------

    def start(self, name, cmd, ready, timeout=60):
        """Start a server of ours; wait until ready() is true."""
        self.record(cmd)
        log = open(os.path.join(self.logdir, name + ".log"), "ab")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
        log.close()
        self.procs.append((name, p))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if p.poll() is not None:
                raise RuntimeError("%s exited %d (log %s/%s.log)" % (name, p.returncode,
                                                                     self.logdir, name))
            if ready():
                return p
            time.sleep(0.1)
        raise RuntimeError("%s not ready after %d s" % (name, timeout))

    def stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(15)
        self.procs = [x for x in self.procs if x[1] is not p]

    def mount(self, cmd, mnt, env=None, timeout=120, session=True):
        """With the tests' helper (tests/integration/mount_util.py); @session False: in
        this process's session rather than one of its own."""
        self.umount(mnt)
        self.record(cmd if session else shlex.join(cmd) + "  # in the reader's session")
        m = mu.Mount(None, mnt, argv=cmd, env=env, session=session,
                     errpath=os.path.join(self.logdir, os.path.basename(mnt) + ".log"))
        try:
            m.start(timeout=timeout, step=0.005)
        except AssertionError as e:
            raise RuntimeError("%s: %s (see %s)" % (self.show(cmd), e, self.logdir))
        self.mounts[mnt] = m

    def umount(self, mnt):
        m = self.mounts.pop(mnt, None)
        if m:
            m.stop(timeout=60)
        elif os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)

    def cleanup(self):
        for m in list(self.mounts):
            self.umount(m)
        for _, p in list(self.procs):
            self.stop(p)

    # ---- s3rver, uploads, proxy ----------------------------------------------------------

    def s3rver(self):
        self.s3port = free_port()
        data = os.path.join(self.work, "s3rver-data")
        os.makedirs(data, exist_ok=True)
        ep = "http://127.0.0.1:%d" % self.s3port

        def up():
            try:
                with urllib.request.urlopen(ep + "/", timeout=2):
                    return True
            except OSError:
                return False
        self.start("s3rver", [self.a.s3rver, "-d", data, "-a", "127.0.0.1", "-p",
                              str(self.s3port), "--configure-bucket", BUCKET, "-s"], up)

    def upload(self, src, prefix):
        """Every file under @src to s3://BUCKET/@prefix/ (one curl, many transfers);
        skipped when the same tree (names, sizes, mtimes) was uploaded before."""
        files = sorted(os.path.relpath(os.path.join(d, f), src)
                       for d, _, fs in os.walk(src) for f in fs)
        sig = [[r, os.path.getsize(os.path.join(src, r)),
                int(os.path.getmtime(os.path.join(src, r)))] for r in files]
        stamp = os.path.join(self.work, "uploaded-%s.json" % prefix)
        show = ("curl --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -T FILE "
                "http://127.0.0.1:PORT/%s/%s/RELPATH  # every file of %s" %
                (BUCKET, prefix, self.show(src)))
        self.record(show)
        if os.path.exists(stamp):
            with open(stamp) as f:
                if json.load(f) == sig:
                    return len(files)
        self.log("uploading %d files of %s to s3://%s/%s" % (len(files), src, BUCKET, prefix))
        cfg = os.path.join(self.work, "curl-%s.cfg" % prefix)
        ep = "http://127.0.0.1:%d" % self.s3port
        write_upload_cfg(cfg, src, files, ep, prefix)
        p = subprocess.run(["curl", "-K", cfg], capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise RuntimeError("upload of %s failed: %s" % (src, p.stderr[-1000:]))
        with open(stamp, "w") as f:
            json.dump(sig, f)
        return len(files)

    def proxy(self, rtt, script="delayproxy.py", args=()):
        """Start bench/@script (delayproxy.py, or capproxy.py with its @args) in front of
        s3rver; returns it, its port and its control port."""
        port, ctl = free_port(), free_port()

        def up():
            try:
                socket.create_connection(("127.0.0.1", ctl), timeout=1).close()
                return True
            except OSError:
                return False
        p = self.start("%s-%g" % (script[:-3], rtt),
                       ["/usr/bin/python3", os.path.join(HERE, script), "--listen", str(port),
                        "--upstream", str(self.s3port), "--rtt-ms", str(rtt), "--control",
                        str(ctl)] + list(args), up)
        return p, port, ctl

    @staticmethod
    def proxy_cmd(ctl, cmd):
        with socket.create_connection(("127.0.0.1", ctl), timeout=10) as s:
            s.sendall((cmd + "\n").encode())
            line = s.makefile().readline()
        return json.loads(line) if cmd == "stats" else line

    # ---- the store's own figures -------------------------------------------------------

    def expected(self):
        """Per level K: bytes per image of header + K scans (pcrinfo --list, the EOI
        appended below the top level left out), and of the record prefixes up to K
        (index.db's group offsets: what one GET per record and level fetches)."""
        p = self.run([self.pcrinfo, "--list", self.a.store])
        chunks, n = {}, 0
        for line in p.stdout.splitlines():
            _, kind, _, sizes = line.split("\t")
            sizes = [int(x) for x in sizes.split()]
            n += 1
            top = len(sizes)
            for k, s in enumerate(sizes, 1):
                chunks[k] = chunks.get(k, 0) + (s - 2 if kind == "jpeg" and k < top else s)
        con = sqlite3.connect("file:%s?mode=ro" % os.path.join(self.a.store, "index.db"),
                              uri=True)
        groups = [varints(bytes(g)) for (g,) in con.execute("SELECT groups FROM records")]
        con.close()
        levels = max(chunks)
        prefix = {}
        for k in range(1, levels + 1):
            # level K < top: groups 0..K-1 (chunk 0 is the header and scan 1), which
            # end at offset K; the top level: every group (trailers too)
            prefix[k] = sum(g[min(k, len(g) - 1)] if k < levels else g[-1] for g in groups)
        self.record([self.pcrinfo, "--list", self.a.store])
        self.record("sqlite3 $STORE/index.db 'SELECT groups FROM records'  # prefix ends")
        return {"files": n, "records": len(groups), "levels": levels,
                "scans": {k: v / n for k, v in chunks.items()},
                "prefix": {k: v / n for k, v in prefix.items()}}

    # ---- section s3 ----------------------------------------------------------------------

    def env_s3(self, port):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT_URL="http://127.0.0.1:%d" % port, AWS_ACCESS_KEY_ID=KEY,
                   AWS_SECRET_ACCESS_KEY=KEY, AWS_REGION="us-east-1")
        return env

    def pcrfs_stats(self, mnt):
        with open(os.path.join(mnt, ".pcrfs/stats"), "rb", buffering=0) as f:
            return json.loads(f.read())

    def epoch(self, root, sampler, loader, limit=0, timeout=None):
        args = [root, "--sampler", sampler, "--loader", loader, "--workers",
                str(self.a.workers), "--batch", str(self.a.batch), "--seed", "0",
                "--timeout", str(timeout or self.a.run_timeout)]
        if limit:
            args += ["--limit", str(limit)]
        return self.pyjson("s3_epoch.py", args, timeout=(timeout or self.a.run_timeout) + 120)

    def run_pcrfs(self, port, ctl, view, sampler, loader, cache_size=None, limit=0):
        mnt = os.path.join(self.work, "mnt-s3")
        cache = os.path.join(self.work, "cache")
        opts = "cache=%s,http_timeout=30" % cache
        if cache_size:
            opts += ",cache_size=%d" % cache_size
        self.mount([self.pcrfs, "s3://%s/store" % BUCKET, mnt, "-o", opts], mnt,
                   env=self.env_s3(port))
        try:
            before = self.pcrfs_stats(mnt)["http"]
            self.proxy_cmd(ctl, "reset")
            r = self.epoch(os.path.join(mnt, view), sampler, loader, limit)
            after = self.pcrfs_stats(mnt)["http"]
            r["proxy"] = self.proxy_cmd(ctl, "stats")
        finally:
            self.umount(mnt)
        self.record(["cat", os.path.join(mnt, ".pcrfs/stats")])
        r["http"] = {k: after[k] - before[k] for k in after
                     if isinstance(after[k], (int, float)) and k in before}
        r["http"]["cache_limit"] = after.get("cache_limit")
        return r

    def run_s3fs(self, port, ctl, sampler, loader, limit):
        mnt = os.path.join(self.work, "mnt-s3fs")
        pw = os.path.join(self.work, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write("%s:%s\n" % (KEY, KEY))
        os.chmod(pw, 0o600)
        cmd = ["s3fs", "%s:/originals" % BUCKET, mnt, "-o",
               "url=http://127.0.0.1:%d,use_path_request_style,passwd_file=%s,ro" % (port, pw)]
        self.mount(cmd, mnt)
        try:
            # list and stat the tree first (what ImageFolder's listing does), so that
            # the epoch's requests are the reads' (s3fs keeps a stat cache)
            t0 = time.monotonic()
            for d, _, fs in os.walk(mnt):
                for f in fs:
                    os.stat(os.path.join(d, f))
            walk_s = time.monotonic() - t0
            walk = self.proxy_cmd(ctl, "stats")
            self.proxy_cmd(ctl, "reset")
            r = self.epoch(mnt, sampler, loader, limit)
            r["walk_s"], r["walk_proxy"] = walk_s, walk
            r["proxy"] = self.proxy_cmd(ctl, "stats")
        finally:
            self.umount(mnt)
        return r

    def s_s3(self):
        a = self.a
        exp = self.expected()
        self.s3rver()
        self.upload(a.store, "store")
        self.upload(a.dataset, "originals")
        # (label, kind, view, sampler, loader, extra)
        cases = []
        for v in VIEWS:
            cases.append(("pcrfs %s/, RecordSampler" % v, "pcrfs", v, "record", "pcrfs", {}))
            if v == "scan5":
                cases.append(("pcrfs scan5/, RecordSampler, default loader", "pcrfs", v,
                              "record", "default", {}))
            cases.append(("pcrfs %s/, random order" % v, "pcrfs", v, "random", "pcrfs", {}))
        cases.append(("s3fs originals, random order", "s3fs", None, "random", "pcrfs", {}))
        cases.append(("s3fs originals, random order, default loader", "s3fs", None, "random",
                      "default", {}))
        runs = {(rtt, c[0]): [] for rtt in a.rtts for c in cases}
        out = {"expected": exp, "rtts": a.rtts, "reps": a.reps, "workers": a.workers,
               "batch": a.batch, "s3fs_limit": a.s3fs_limit, "load_start": loadavg()}
        for rep in range(a.reps):
            for rtt in a.rtts:
                p, port, ctl = self.proxy(rtt)
                try:
                    for label, kind, view, sampler, loader, _ in cases:
                        self.log("round %d, RTT %g ms: %s" % (rep + 1, rtt, label))
                        if kind == "pcrfs":
                            r = self.run_pcrfs(port, ctl, view, sampler, loader)
                        else:
                            r = self.run_s3fs(port, ctl, sampler, loader, a.s3fs_limit)
                        r["load"] = loadavg()
                        runs[(rtt, label)].append(r)
                finally:
                    self.stop(p)
        # a random order with a cache smaller than the data: bounded, at the largest RTT
        small = []
        rtt = max(a.rtts)
        p, port, ctl = self.proxy(rtt)
        try:
            for v in VIEWS:
                size = int(exp["prefix"][exp["levels"] if v == "full" else 5] *
                           exp["files"] / exp["records"] * 1.5)
                for sampler in ("record", "random"):
                    self.log("small cache (%d bytes), %s, %s" % (size, v, sampler))
                    r = self.run_pcrfs(port, ctl, v, sampler, "pcrfs", cache_size=size,
                                       limit=a.small_limit if sampler == "random" else 0)
                    r.update(view=v, cache_size=size, load=loadavg())
                    small.append(r)
        finally:
            self.stop(p)
        out["rows"] = [{"rtt": rtt, "label": c[0], "kind": c[1], "view": c[2],
                        "sampler": c[3], "loader": c[4], "runs": runs[(rtt, c[0])]}
                       for rtt in a.rtts for c in cases]
        out["small_cache"] = small
        out["load_end"] = loadavg()
        return out

    # ---- section local ---------------------------------------------------------------------

    def orders(self, mnt):
        """Relative paths in RecordSampler order (seed 0, epoch 0) and a random order."""
        code = ("import sys; sys.path.insert(0, %r)\n"
                "import os, pcrfs\n"
                "from torchvision.datasets import ImageFolder\n"
                "root = sys.argv[1]\n"
                "ds = ImageFolder(root)\n"
                "for i in pcrfs.RecordSampler(ds, seed=0):\n"
                "    print(os.path.relpath(ds.samples[i][0], root))\n" %
                os.path.join(REPO, "python"))
        p = self.run(["/usr/bin/python3", "-c", code, os.path.join(mnt, "full")],
                     show="python3 -c 'RecordSampler(ImageFolder(MNT/full), seed=0) -> paths'")
        rec = p.stdout.split()
        rnd = sorted(rec)
        random.Random(0).shuffle(rnd)
        paths = {}
        for name, lst in (("record", rec), ("random", rnd)):
            paths[name] = os.path.join(self.work, "order-%s.txt" % name)
            with open(paths[name], "w") as f:
                f.write("\n".join(lst) + "\n")
        return paths

    def extract(self, level):
        d = os.path.join(self.work, "x-%s" % level)
        stamp = d + ".done"
        self.record([self.pcrinfo, "--extract", d, "--level", level, self.a.store])
        if os.path.exists(stamp) and open(stamp).read() == self.a.store:
            return d
        shutil.rmtree(d, ignore_errors=True)
        self.run([self.pcrinfo, "--extract", d, "--level", level, self.a.store])
        with open(stamp, "w") as f:
            f.write(self.a.store)
        return d

    def s_local(self):
        a = self.a
        mnt = os.path.join(self.work, "mnt-local")
        self.mount([self.pcrfs, a.store, mnt], mnt)
        orders = self.orders(mnt)
        self.umount(mnt)
        plain = {"scan5": self.extract("5"), "full": self.extract("full")}
        # (label, kind, readahead)
        kinds = [("pcrfs -o readahead=record", "pcrfs", True), ("pcrfs", "pcrfs", False),
                 ("plain files", "plain", False)]
        # the daemon in the reader's session (pcrfs(1), "Cold reads and the daemon's
        # session"): record order, read pass only
        same = ("pcrfs -o readahead=record, reader's session", "pcrfs-same", True)
        # after an ImageFolder-style listing in the same process (order_read.py --list,
        # untimed): without readdirplus each cold read still LOOKUPs its name, with it
        # the listing brought the names (ops.c, "readdirplus off"); record order, read
        # pass only; plain files get the same listing
        listed = [(LISTED % rdp, "pcrfs", True) for rdp in READDIRPLUS] + \
            [(LISTED_PLAIN, "plain", False)]
        # the order drawn from RecordSampler(ImageFolder(MNT/view), prefetch=True) on
        # the timed mount (its listing untimed, as --list's), hinting the records it
        # comes to: the same order as the order file's, read against the plain files
        # rows (order_sha1 checked below)
        hinted = (HINTED, "pcrfs", True)
        cases = []  # (view, order, decode, label, kind, ra)
        for v in VIEWS:
            for order in ("record",) if a.record_only else ("record", "random"):
                for label, kind, ra in kinds + ([same] + listed + [hinted]
                                                if order == "record" else []):
                    cases.append((v, order, False, label, kind, ra))
            if a.record_only:
                continue
            for label, kind, ra in kinds:  # the decode pass: record order only
                cases.append((v, "record", True, label, kind, ra))
        runs = {c: [] for c in cases}
        for rep in range(a.reps):
            for c in cases:
                v, order, decode, label, kind, ra = c
                if kind != "plain":
                    cmd = [self.pcrfs, a.store, mnt] + (["-o", "readahead=record"] if ra else [])
                    for rdp in READDIRPLUS:
                        if label == LISTED % rdp and rdp != "no":
                            cmd += ["-o", "readdirplus=" + rdp]
                    self.mount(cmd, mnt, session=kind == "pcrfs")
                    root = os.path.join(mnt, v)
                else:
                    root = plain[v]
                self.log("round %d: cold %s, %s/, %s order%s" % (
                    rep + 1, label, v, order, ", decode" if decode else ""))
                self.drop_caches()
                args = [root, "--sampler" if label == HINTED else orders[order],
                        "--timeout", str(a.run_timeout)]
                if a.limit:
                    args += ["--limit", str(a.limit)]
                if decode:
                    args.append("--decode")
                if label in (LISTED_PLAIN,) + tuple(LISTED % r for r in READDIRPLUS):
                    args.append("--list")
                r = self.pyjson("order_read.py", args, timeout=a.run_timeout + 60)
                r["load"] = loadavg()
                if kind != "plain":
                    # records the daemon read ahead (hinted or seen going record by
                    # record): untimed, after the reads
                    r["records_advised"] = self.pcrfs_stats(mnt).get("records_advised")
                runs[c].append(r)
                if kind != "plain":
                    self.umount(mnt)
        for v in VIEWS:
            same_order(runs[(v, "record", False, "plain files", "plain", False)],
                       runs[(v, "record", False) + hinted])
        rows = [{"view": c[0], "order": c[1], "decode": c[2], "label": c[3],
                 "runs": runs[c]} for c in cases]
        return {"reps": a.reps, "rows": rows, "limit": a.limit,
                "record_only": a.record_only}

    # ---- driver -----------------------------------------------------------------------------

    def run_all(self):
        path = os.path.join(self.work, "s3-results.json")
        if os.path.exists(path) and set(self.a.only) != {"s3", "local"}:
            with open(path) as f:
                self.res = json.load(f)
        self.res["env"] = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip(),
            "s3fs": subprocess.run(["dpkg-query", "-W", "-f=${Version}", "s3fs"],
                                   capture_output=True, text=True).stdout.strip(),
            "cmdline": os.environ.get("BENCH_CMDLINE", "bench/s3.sh"),
            "load_start": loadavg(), "cores": os.cpu_count()}
        t0 = time.monotonic()
        try:
            for s in ("s3", "local"):
                if s not in self.a.only:
                    continue
                self.section = s
                self.cmds[s] = []
                t, la = time.monotonic(), loadavg()
                self.res[s] = getattr(self, "s_" + s)()
                self.res[s].update(seconds=time.monotonic() - t, load_start=la,
                                   load_end=loadavg())
                self.res[s]["cmds"] = self.cmds[s]
                with open(path, "w") as f:
                    json.dump(self.res, f, indent=1)
        finally:
            self.cleanup()
        self.res["env"]["load_end"] = loadavg()
        self.res["env"]["seconds"] = time.monotonic() - t0
        with open(path, "w") as f:
            json.dump(self.res, f, indent=1)
        return self.res


def same_order(plain, hinted):
    """The sampler's order read with hints must be the order file's that the plain
    files were read in (the rows compare nothing otherwise): same paths, same order,
    wherever both runs read to their end."""
    want = {r["order_sha1"] for r in plain if not r["timed_out"]}
    for r in hinted:
        if not r["timed_out"] and want and r["order_sha1"] not in want:
            raise RuntimeError("the sampler's order (%s) is not the order file's (%s)" %
                               (r["order_sha1"], ", ".join(sorted(want))))


def find_dataset(data):
    cands = sorted(d for d in glob.glob(os.path.join(data, "ds-*")) if os.path.isdir(d))
    return cands[0] if cands else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(os.path.dirname(REPO), "bench-s3"),
                    help="mount points, caches, s3rver's data, logs, results")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(os.path.dirname(REPO), "bench-data"),
                    help="bench/run.sh's work directory (dataset and store, read only)")
    ap.add_argument("--dataset", help="the original JPEGs (default DATA/ds-*)")
    ap.add_argument("--store", help="the store built from them (default DATA/store.pcr)")
    ap.add_argument("--s3rver", default=None, help="the s3rver program")
    ap.add_argument("--rtts", type=lambda s: [float(x) for x in s.split(",")],
                    default=[0.0, 2.0, 10.0], help="round-trip times in ms (default 0,2,10)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (median shown)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--s3fs-limit", type=int, default=640,
                    help="images per s3fs run (the first N of the random order)")
    ap.add_argument("--small-limit", type=int, default=256,
                    help="images per random-order run with a small cache")
    ap.add_argument("--run-timeout", type=float, default=180,
                    help="seconds after which a run stops and counts what it did")
    ap.add_argument("--only", type=lambda s: s.split(","), default=["s3", "local"])
    ap.add_argument("--limit", type=int, default=0,
                    help="local: read the first N files of each order (default all)")
    ap.add_argument("--record-only", action="store_true",
                    help="local: the record order's read pass only (no random order, "
                    "no decode pass)")
    ap.add_argument("--out", default=os.path.join(REPO, "BENCHMARKS.md"))
    ap.add_argument("--render-only", action="store_true")
    a = ap.parse_args()
    a.work = os.path.abspath(a.work)
    a.build = os.path.abspath(a.build)
    ds = a.dataset or find_dataset(a.data)
    a.dataset = os.path.abspath(ds) if ds else ""  # checked only where it is read
    a.store = os.path.abspath(a.store or os.path.join(a.data, "store.pcr"))
    if not a.s3rver:
        d = os.environ.get("PCRFS_S3RVER_DIR") or os.path.join(REPO, "tests", "s3")
        a.s3rver = os.path.join(d, "node_modules", ".bin", "s3rver")
    sys.path.insert(0, HERE)
    import s3render

    def check():
        need = [("store", os.path.join(a.store, "index.db"))]
        if "s3" in a.only:  # the local section reads the store only
            need.append(("dataset", a.dataset))
        for what, p in need:
            if not os.path.exists(p):
                sys.exit("s3bench: no %s at %s (run bench/run.sh first, or --%s)" %
                         (what, p, what))
    drive(a, Bench, os.path.join(a.work, "s3-results.json"), s3render.rewrite, "s3bench",
          check)


def drive(a, bench, path, rewrite, name, check=None):
    """With --render-only, render the results file @path into a.out with @rewrite;
    else (as root) run @bench(a).run_all() first, stopped cleanly by SIGTERM."""
    if a.render_only:
        with open(path) as f:
            res = json.load(f)
    else:
        if os.getuid() != 0:
            sys.exit("%s: run as root (drop_caches, FUSE mounts)" % name)
        if check:
            check()
        os.makedirs(a.work, exist_ok=True)
        b = bench(a)

        def stop(sig, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, stop)
        res = b.run_all()
    res = json.loads(json.dumps(res))  # the keys as in the results file (str)
    rewrite(a.out, res)
    print("%s: wrote %s" % (name, a.out))

if __name__ == "__main__":
    main()
