#!/usr/bin/python3
"""Node throughput from object storage against the number of connections: measure and
rewrite section 22 of BENCHMARKS.md. Started by bench/node_throughput.sh.

One s3rver on 127.0.0.1 behind bench/capproxy.py, which caps each connection (as one
stream to S3 is capped) and adds a round-trip time and a cost per new connection.

  ceiling  N parallel ranged GETs with curl through the proxy (what a plain client
           gets from N connections), through the proxy with no cap, and straight
           from s3rver: the physical limit of the set-up at N connections is
           min(N x cap, the uncapped ceiling).
  pcrfs    a fresh s3:// mount (empty cache) read in RecordSampler order by
           --readers threads for --window seconds (the rate: bytes / the time to the
           last byte; the data is large enough that the window, not the end of the
           view, ends a run; and the rate from the moment the sampler's first window
           was read, which a fresh mount reaches only once its first parts are in),
           full/ and scan5/, at each
           -o http_connections=N the build accepts (main's daemon has none: one run
           per view, the proxy counting the connections it opened); GETs per image and
           bytes fetched / bytes served from /.pcrfs/stats.
  s3fs     s3fs-fuse on the original JPEGs in the same bucket, the same order, the
           same readers, through the same proxy, its parallel settings tuned.

Every run (and every curl run) also records the CPU seconds of the daemon, the proxy,
s3rver and the readers (or curl), and the machine's idle time (bench/cpustat.py), so
that the table shows whether the CPU or the cap bound it.

Cases are interleaved within a round; every invocation's figures are kept in
WORK/node-results.json under --label, so runs at different times show their spread.
Only 127.0.0.1 is contacted. Everything started is stopped at the end.
"""
import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpustat  # noqa: E402
import s3  # noqa: E402  (its Bench: s3rver, uploads, mounts, command log)

REPO = s3.REPO
BUCKET = s3.BUCKET
RANGE = 4 << 20  # bytes per ranged GET of the curl ceiling runs

# s3fs-fuse settings (s3fs(1)), chosen for many small files read by many threads:
#   parallel_count / multipart_size: parallel ranged GETs of one large object; our
#     JPEGs (~100 kB) are below the smallest multipart_size (5 MB), so one GET each:
#     set anyway, as a tuned set-up would be;
#   multireq_max: parallel HEADs when listing (the untimed walk before each run);
#   max_stat_cache_size / stat_cache_expire: hold every file's stat from the walk, so
#     the timed reads send GETs only (no HEAD per open);
#   enable_noobj_cache: no repeated HEADs for names that do not exist (ImageFolder);
#   no use_cache: a disk cache only helps a second read, and there is none.
S3FS_OPTS = ("parallel_count=32,multipart_size=8,multireq_max=64,max_stat_cache_size=100000,"
             "stat_cache_expire=3600,enable_noobj_cache,readwrite_timeout=60")


def median(xs):
    xs = sorted(xs)
    if not xs:
        return 0.0
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


class Timeline:
    """/.pcrfs/stats of @mnt every TICK seconds while a run reads, in a thread: rows of
    [seconds, bytes fetched (parts and direct GETs), bytes served by the views], so
    that the start, the steady rate and the end of a run can be told apart."""
    TICK = 0.5

    def __init__(self, bench, mnt):
        import threading
        self.bench, self.mnt, self.rows, self.done = bench, mnt, [], threading.Event()
        self.t0 = time.monotonic()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def loop(self):
        while not self.done.wait(self.TICK):
            try:
                st = self.bench.pcrfs_stats(self.mnt)
            except (OSError, ValueError):
                continue
            h = st.get("http", {})
            self.rows.append([round(time.monotonic() - self.t0, 2),
                              h.get("fetch_bytes", 0) + h.get("direct_bytes", 0),
                              sum(v.get("bytes", 0) for v in st.get("views", {}).values())])

    def stop(self):
        self.done.set()
        self.th.join(timeout=10)
        return self.rows


class NodeBench(s3.Bench):
    def __init__(self, a):
        super().__init__(a)
        self.mkpcrfs = os.path.join(a.build, "src/tools/mkpcrfs")
        self.section = "node"

    # ---- data -----------------------------------------------------------------------------

    def make_data(self):
        """An ImageNet-like tree of a.classes x a.per_class generated JPEGs, hard-linked
        a.copies times under other class names, and its store of a.per_record images per
        record; each reused while its stamp matches. A stamp keys on what makes the
        data (the generator's text, mkpcrfs's version, the arguments with WORK's paths
        relative, the stamp of what it was made from), not on where the checkout or the
        build lies: another build directory of the same version reuses the store."""
        a = self.a
        uniq = os.path.join(self.work, "unique")
        script = os.path.join(REPO, "tests/gen/mkdataset.py")
        gen = ["/usr/bin/python3", script, "--out", uniq,
               "--classes", str(a.classes), "--per-class", str(a.per_class), "--seed", "1",
               "--size", str(a.size), "--manifest", uniq + ".manifest.json"]
        self.record(gen)
        with open(script, "rb") as f:
            key = ["mkdataset.py", hashlib.sha256(f.read()).hexdigest()] + self.rel(gen[2:])
        if not self.stamped(uniq, key):
            self.log("generating %d JPEGs" % (a.classes * a.per_class))
            shutil.rmtree(uniq, ignore_errors=True)
            self.run(gen, timeout=3600)
            self.stamp(uniq, key)
        ds = a.dataset
        key = [a.copies, self.stamp_of(uniq)]
        cp = "cp -al $WORK/unique/CLASS $DATASET/cCOPY-CLASS  # COPY = 0..%d" % (a.copies - 1)
        self.record(cp)
        if not self.stamped(ds, key):
            shutil.rmtree(ds, ignore_errors=True)
            os.makedirs(ds)
            for c in range(a.copies):
                for cls in sorted(os.listdir(uniq)):
                    self.run(["cp", "-al", os.path.join(uniq, cls),
                              os.path.join(ds, "c%02d-%s" % (c, cls))], show=cp)
            self.stamp(ds, key)
        mk = [self.mkpcrfs, "-j2", "-n", str(a.per_record), ds, a.store]
        self.record(mk)
        version = subprocess.run([self.mkpcrfs, "--version"], capture_output=True,
                                 text=True).stdout.strip()
        key = [version] + self.rel(mk[1:]) + [self.stamp_of(ds)]
        if not self.stamped(a.store, key):
            self.log("building the store (%s)" % self.show(mk))
            shutil.rmtree(a.store, ignore_errors=True)
            self.run(mk, timeout=3600)
            self.stamp(a.store, key)

    def rel(self, args):
        """@args with WORK's paths relative to WORK (a stamp must not name a path)."""
        return [os.path.relpath(x, self.work) if x.startswith(self.work + os.sep) else x
                for x in args]

    @staticmethod
    def stamp_of(path):
        """The stamp of @path as a digest: what the next step's key holds."""
        try:
            with open(path + ".stamp", "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None

    @staticmethod
    def stamped(path, key):
        try:
            with open(path + ".stamp") as f:
                return json.load(f) == json.loads(json.dumps(key)) and os.path.exists(path)
        except (OSError, ValueError):
            return False

    @staticmethod
    def stamp(path, key):
        with open(path + ".stamp", "w") as f:
            json.dump(key, f)

    def store_figures(self):
        recs = sorted(os.listdir(os.path.join(self.a.store, "records")))
        sizes = [os.path.getsize(os.path.join(self.a.store, "records", r)) for r in recs]
        exp = self.expected()
        exp.update(record_objects=len(recs), record_bytes_mean=sum(sizes) / len(sizes),
                   originals_bytes=sum(os.path.getsize(os.path.join(d, f))
                                       for d, _, fs in os.walk(self.a.dataset) for f in fs),
                   record_names=recs)
        return exp

    # ---- the proxy and the ceiling --------------------------------------------------------

    def capproxy(self, cap):
        a = self.a
        p, port, ctl = self.proxy(a.rtt_ms, "capproxy.py", ["--cap-mbps", str(cap),
                                                            "--connect-ms", str(a.connect_ms)])
        self.proxy_pid = p.pid
        return p, port, ctl

    def servers(self, **more):
        """The processes whose CPU a run counts: the proxy, s3rver and @more."""
        pids = {"proxy": self.proxy_pid, "s3rver": dict(self.procs).get("s3rver").pid}
        pids.update(more)
        return pids

    def curl(self, port, n, records, pids):
        """2N ranged GETs of RANGE bytes (distinct ranges of the record objects) with
        at most N at once: the aggregate MB/s a plain parallel client gets, and the CPU
        seconds of curl and of the @pids processes meanwhile."""
        cfg = os.path.join(self.work, "curl-ceiling.cfg")
        ranges = []
        for rec, size in records:
            ranges += [(rec, off) for off in range(0, size - RANGE + 1, RANGE)]
        take = [ranges[i % len(ranges)] for i in range(2 * n)]
        with open(cfg, "w") as f:
            for i, (rec, off) in enumerate(take):
                if i:
                    f.write("next\n")
                f.write('aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "%s:%s"\n' % (s3.KEY, s3.KEY))
                f.write('header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n')
                f.write('fail\nsilent\nshow-error\noutput = "/dev/null"\n')
                f.write('range = "%d-%d"\nurl = "http://127.0.0.1:%d/%s/store/records/%s"\n'
                        % (off, off + RANGE - 1, port, BUCKET, rec))
        cmd = ["curl", "--parallel", "--parallel-immediate", "--parallel-max", str(n),
               "-K", cfg]
        show = ("curl --parallel --parallel-immediate --parallel-max N -K CFG  "
                "# CFG: 2N ranged GETs (--aws-sigv4) of %d MiB of the record objects, "
                "N = %s" % (RANGE >> 20, ",".join(map(str, self.a.conns))))
        meter = cpustat.Meter(pids)
        t0 = time.monotonic()
        self.run(cmd, show=show, timeout=600)
        secs = time.monotonic() - t0
        return {"n": n, "bytes": len(take) * RANGE, "seconds": secs,
                "mb_per_s": len(take) * RANGE / secs / 1e6, "cpu": meter.stop()}

    def ceiling(self, exp):
        a = self.a
        recs = [(r, os.path.getsize(os.path.join(a.store, "records", r)))
                for r in exp["record_names"]]
        out = {"capped": {}, "uncapped": None, "direct": None}
        p, port, ctl = self.capproxy(a.cap_mbps)
        try:
            for n in a.conns:
                self.log("ceiling: curl, %d connections, capped" % n)
                r = self.curl(port, n, recs, self.servers())
                r["proxy"] = self.proxy_cmd(ctl, "stats")
                self.proxy_cmd(ctl, "reset")
                out["capped"][str(n)] = r
        finally:
            self.stop(p)
        n = max(a.conns)
        p, port, ctl = self.capproxy(0)
        try:
            self.log("ceiling: curl, %d connections, no cap" % n)
            out["uncapped"] = self.curl(port, n, recs, self.servers())
        finally:
            self.stop(p)
        self.log("ceiling: curl, %d connections, straight to s3rver" % n)
        out["direct"] = self.curl(self.s3port, n, recs, self.servers(proxy=None))
        return out

    # ---- the runs -------------------------------------------------------------------------

    def accepted(self):
        """Which of the parallel-fetch options this build's pcrfs accepts."""
        p = subprocess.run([self.pcrfs, "--help"], capture_output=True, text=True)
        text = p.stdout + p.stderr
        return {o: o in text for o in ("http_connections", "http_part_size")}

    def read(self, root, order, daemon):
        """@order: a file of paths, or None: RecordSampler's, with prefetch hints;
        @daemon: the mount's process, whose CPU is counted with the servers'."""
        a = self.a
        pids = ",".join("%s=%d" % kv for kv in self.servers(daemon=daemon).items() if kv[1])
        # (the rate once RecordSampler's first window, 8 records, was read)
        args = [root, order or "--sampler", "--threads", str(a.readers), "--timeout",
                str(a.window), "--after", str(8 * a.per_record), "--cpu-pids", pids]
        if a.prefetch_ahead is not None and not order:
            args[2:2] = ["--prefetch-ahead", str(a.prefetch_ahead)]
        show = ["/usr/bin/python3", os.path.join(HERE, "order_read.py")] + args[:-1] + [
            "daemon=PID,proxy=PID,s3rver=PID"]
        return self.pyjson("order_read.py", args, timeout=a.window + 300, show=show)

    def run_pcrfs(self, ctl, port, view, n, order):
        a = self.a
        mnt = os.path.join(self.work, "mnt-node")
        cache = os.path.join(self.work, "cache-node")
        shutil.rmtree(cache, ignore_errors=True)
        opts = "cache=%s,http_timeout=60" % cache
        if n:
            opts += ",http_connections=%d" % n
        if a.part_size and self.opts_ok["http_part_size"]:
            opts += ",http_part_size=%s" % a.part_size
        if a.cache_size:
            opts += ",cache_size=%s" % a.cache_size
        self.mount([self.pcrfs, "s3://%s/store" % BUCKET, mnt, "-o", opts], mnt,
                   env=self.env_s3(port))
        try:
            before = self.pcrfs_stats(mnt)
            self.proxy_cmd(ctl, "reset")
            tl = Timeline(self, mnt)
            try:
                r = self.read(os.path.join(mnt, view), None if a.hints else order,
                              self.mounts[mnt].proc.pid)
            finally:
                r_tl = tl.stop()
            r["timeline"] = r_tl
            r["proxy"] = self.proxy_cmd(ctl, "stats")
            after = self.pcrfs_stats(mnt)
        finally:
            self.umount(mnt)
            shutil.rmtree(cache, ignore_errors=True)
        self.record(["cat", os.path.join(mnt, ".pcrfs/stats")])
        hb, ha = before.get("http", {}), after.get("http", {})
        r["http"] = {k: ha[k] - hb[k] for k in ha
                     if isinstance(ha[k], (int, float)) and isinstance(hb.get(k), (int, float))}
        return r

    def run_s3fs(self, ctl, port, order):
        mnt = os.path.join(self.work, "mnt-s3fs")
        pw = os.path.join(self.work, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write("%s:%s\n" % (s3.KEY, s3.KEY))
        os.chmod(pw, 0o600)
        cmd = ["s3fs", "%s:/originals" % BUCKET, mnt, "-o",
               "url=http://127.0.0.1:%d,use_path_request_style,passwd_file=%s,ro,%s" %
               (port, pw, S3FS_OPTS)]
        self.mount(cmd, mnt)
        try:
            # stat every file first, untimed (as ImageFolder's listing does before an
            # epoch), so that the timed reads are GETs; bounded in time
            t0 = time.monotonic()
            walked = 0
            for d, _, fs in os.walk(mnt):
                for f in fs:
                    os.stat(os.path.join(d, f))
                    walked += 1
                if time.monotonic() - t0 > self.a.walk_timeout:
                    break
            walk = {"files": walked, "seconds": time.monotonic() - t0,
                    "proxy": self.proxy_cmd(ctl, "stats")}
            self.proxy_cmd(ctl, "reset")
            r = self.read(mnt, order, self.mounts[mnt].proc.pid)
            r["proxy"] = self.proxy_cmd(ctl, "stats")
            r["walk"] = walk
        finally:
            self.umount(mnt)
        return r

    def run_all(self):
        a = self.a
        path = os.path.join(self.work, "node-results.json")
        res = {}
        if os.path.exists(path):
            with open(path) as f:
                res = json.load(f)
        t0 = time.monotonic()
        inv = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": subprocess.run(["git", "-C", REPO, "describe", "--always",
                                         "--dirty"], capture_output=True,
                                        text=True).stdout.strip(),
               "cmdline": os.environ.get("BENCH_CMDLINE", "bench/node_throughput.sh"),
               "load_start": s3.loadavg(), "cores": os.cpu_count(),
               "cap_mbps": a.cap_mbps, "rtt_ms": a.rtt_ms, "connect_ms": a.connect_ms,
               "readers": a.readers, "window": a.window, "part_size": a.part_size,
               "cache_size": a.cache_size,
               "hints": a.hints, "prefetch_ahead": a.prefetch_ahead,
               "s3fs_opts": S3FS_OPTS,
               "s3fs": subprocess.run(["dpkg-query", "-W", "-f=${Version}", "s3fs"],
                                      capture_output=True, text=True).stdout.strip()}
        try:
            self.opts_ok = self.accepted()
            inv["accepted"] = self.opts_ok
            self.make_data()
            exp = self.store_figures()
            self.s3rver()
            self.upload(a.store, "store")
            self.upload(a.dataset, "originals")
            if a.prepare_only:
                return res
            mnt = os.path.join(self.work, "mnt-local")
            self.mount([self.pcrfs, a.store, mnt], mnt)
            orders = self.orders(mnt)
            self.umount(mnt)
            inv["ceiling"] = self.ceiling(exp)
            conns = a.conns if self.opts_ok["http_connections"] else [0]
            cases = [("pcrfs", v, n) for v in a.views for n in conns] + [("s3fs", None, 0)]
            runs = {"%s %s %d" % c: [] for c in cases}
            p, port, ctl = self.capproxy(a.cap_mbps)
            try:
                for rep in range(a.reps):
                    for kind, view, n in cases:
                        self.log("round %d: %s %s, %s connections" % (
                            rep + 1, kind, view or "originals", n or "default"))
                        if kind == "pcrfs":
                            r = self.run_pcrfs(ctl, port, view, n, orders["record"])
                        else:
                            r = self.run_s3fs(ctl, port, orders["record"])
                        r["load"] = s3.loadavg()
                        runs["%s %s %d" % (kind, view, n)].append(r)
            finally:
                self.stop(p)
            inv["rows"] = [{"kind": k, "view": v, "conns": n, "runs": runs["%s %s %d" % (k, v, n)]}
                           for k, v, n in cases]
            exp.pop("record_names")
            inv["expected"] = exp
        finally:
            self.cleanup()
        inv["load_end"] = s3.loadavg()
        inv["seconds"] = time.monotonic() - t0
        inv["cmds"] = self.cmds.get("node", [])
        res.setdefault(a.label, []).append(inv)
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
        return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(os.path.dirname(REPO), "bench-node"),
                    help="dataset, store, mount points, caches, s3rver's data, results")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--s3rver", default=None, help="the s3rver program")
    ap.add_argument("--label", default="current",
                    help="the results' name in WORK/node-results.json and the section "
                    "(e.g. baseline; invocations with one label are one table)")
    ap.add_argument("--conns", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 4, 16, 32, 64], help="-o http_connections values")
    ap.add_argument("--views", type=lambda s: s.split(","), default=["scan5", "full"])
    ap.add_argument("--cache-size", default="", help="-o cache_size (default: the "
                    "daemon's own)")
    ap.add_argument("--part-size", default="", help="-o http_part_size (default: the "
                    "daemon's own)")
    ap.add_argument("--cap-mbps", type=float, default=2.0, help="per connection (MB/s)")
    ap.add_argument("--rtt-ms", type=float, default=2.0)
    ap.add_argument("--connect-ms", type=float, default=5.0)
    ap.add_argument("--readers", type=int, default=32, help="reader threads")
    ap.add_argument("--no-hints", dest="hints", action="store_false",
                    help="pcrfs read in RecordSampler's order from a file, without its "
                    "prefetch hints (default: RecordSampler(prefetch=True) drawn as read)")
    ap.add_argument("--prefetch-ahead", type=int, default=None,
                    help="RecordSampler's prefetch_ahead (default: the sampler's own)")
    ap.add_argument("--window", type=float, default=15.0,
                    help="seconds each run reads (it stops earlier at the end of the order)")
    ap.add_argument("--walk-timeout", type=float, default=120.0)
    ap.add_argument("--reps", type=int, default=1, help="interleaved rounds")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--size", type=int, default=900, help="mkdataset.py --size")
    ap.add_argument("--copies", type=int, default=32, help="hard-linked copies of the tree")
    ap.add_argument("--per-record", type=int, default=512, help="mkpcrfs -n")
    ap.add_argument("--out", default=os.path.join(REPO, "BENCHMARKS.md"))
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--prepare-only", action="store_true",
                    help="make the data and upload it, measure nothing (not a benchmark: "
                    "the next invocations reuse it)")
    a = ap.parse_args()
    a.work = os.path.abspath(a.work)
    a.build = os.path.abspath(a.build)
    a.dataset = os.path.join(a.work, "dataset")
    a.store = os.path.join(a.work, "store.pcr")
    if not a.s3rver:
        d = os.environ.get("PCRFS_S3RVER_DIR") or os.path.join(REPO, "tests", "s3")
        a.s3rver = os.path.join(d, "node_modules", ".bin", "s3rver")
    import noderender
    s3.drive(a, NodeBench, os.path.join(a.work, "node-results.json"), noderender.rewrite,
             "nodebench")

if __name__ == "__main__":
    main()
