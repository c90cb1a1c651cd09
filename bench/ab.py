#!/usr/bin/python3
"""Compare the reads of two pcrfs builds, interleaved, through their mounts.

    ab.py --a PCRFS STORE --b PCRFS STORE [--views full,scan5,scan1] [--cold-reps N]
          [--warm-reps N] [--warm-passes N] [--threads N] --work DIR [--json FILE]

A and B are two builds of pcrfs (say, before and after a change), each with a store
built by its own mkpcrfs from the same dataset. For each round and each view, both are
read whole, file by file, in the same shuffled order (tests/bench/read_tree.py):

cold    a fresh mount, then `sync; echo 3 > /proc/sys/vm/drop_caches`, then one pass;
        the order alternates A B, B A, A B, ... from round to round, so that a drift in
        the machine's load does not always favour the same side;
warm    both mounted once; each figure is `drop_caches`, one pass to fill the page
        cache, then --warm-passes timed passes, interleaved the same way. Every warm
        figure thus has the same history: on this kernel, of two trees whose pages
        were filled one after the other after a drop, the first filled read back
        1.3-1.4x slower warm (measured with the same build on both sides), so filling
        both and then timing both would favour whichever was filled second.

Besides files/s it records the daemon's CPU time (utime + stime from /proc/PID/stat)
during each pass, so that a difference can be told apart as the daemon's own work or
waiting. Prints one line per pass and, at the end, per view and state: the median
files/s of each side and the median of the per-round ratios B/A. Root only (FUSE
mounts, drop_caches). Used for BENCHMARKS.md; not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
READ_TREE = os.path.join(os.path.dirname(HERE), "tests/bench/read_tree.py")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mount_util as mu  # noqa: E402
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of @pid and its threads, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Mount:
    """One side: its daemon and store, mounted and unmounted with the tests' helper
    (tests/integration/mount_util.py, Mount)."""

    def __init__(self, name, pcrfs, store, mnt, log):
        self.name, self.pcrfs, self.store, self.mnt, self.log = name, pcrfs, store, mnt, log
        self.m = None
        self.proc = None

    def up(self):
        self.down()
        try:
            self.m = mu.Mount(self.store, self.mnt, pcrfs=self.pcrfs, errpath=self.log)
            self.m.start(timeout=60, step=0.001)
        except AssertionError as e:
            raise SystemExit("ab: %s (log %s)" % (e, self.log))
        self.proc = self.m.proc

    def down(self):
        if self.m:
            rc = self.m.stop(timeout=60)
            if rc != 0:
                print("ab: warning: the daemon of %s exited %s" % (self.mnt, rc))
            self.m = self.proc = None

    def read(self, view, cold, threads, passes):
        cmd = ["/usr/bin/python3", READ_TREE, "--json", "--threads", str(threads),
               "--repeat", str(passes)]
        if cold:
            cmd.append("--drop-caches")
        c0 = cpu_s(self.proc.pid)
        p = subprocess.run(cmd + [os.path.join(self.mnt, view)], capture_output=True,
                           text=True, check=True)
        daemon = cpu_s(self.proc.pid) - c0
        rs = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        t = sum(r["read_s"] for r in rs)
        n = rs[0]["files"] * len(rs)
        return {"files": rs[0]["files"], "bytes": rs[0]["bytes"], "seconds": t,
                "files_per_s": n / t, "mb_per_s": rs[0]["bytes"] * len(rs) / t / 1e6,
                "daemon_cpu_ms_per_file": 1e3 * daemon / n}


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", nargs=2, metavar=("PCRFS", "STORE"), required=True)
    ap.add_argument("--b", nargs=2, metavar=("PCRFS", "STORE"), required=True)
    ap.add_argument("--names", default="A,B", help="labels of A and B (default A,B)")
    ap.add_argument("--views", default="full,scan5,scan1")
    ap.add_argument("--cold-reps", type=int, default=5)
    ap.add_argument("--warm-reps", type=int, default=5)
    ap.add_argument("--warm-passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", required=True, help="mount points and daemon logs go here")
    ap.add_argument("--json", help="write every pass and the summary here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("ab: run as root (FUSE mounts, drop_caches)")
    names = a.names.split(",")
    views = a.views.split(",")
    work = os.path.abspath(a.work)
    sides = [Mount(names[i], os.path.abspath(p), os.path.abspath(s),
                   os.path.join(work, "mnt-%s" % names[i]),
                   os.path.join(work, "daemon-%s.log" % names[i]))
             for i, (p, s) in enumerate((a.a, a.b))]
    runs = []
    out = {"argv": sys.argv, "load_start": loadavg(), "runs": runs}

    def one(state, rnd, view, side, passes):
        r = side.read(view, state == "cold", a.threads, passes)
        r.update(state=state, round=rnd, view=view, side=side.name, load=loadavg()[0])
        runs.append(r)
        print("ab: %s round %d %-6s %-8s %8.1f files/s %7.1f MB/s daemon %.3f ms/file "
              "(load %.2f)" % (state, rnd, view, side.name, r["files_per_s"], r["mb_per_s"],
                               r["daemon_cpu_ms_per_file"], r["load"]), flush=True)

    try:
        for rnd in range(a.cold_reps):
            for view in views:
                for side in (sides if rnd % 2 == 0 else sides[::-1]):
                    side.up()  # fresh mount: the daemon's caches start empty too
                    one("cold", rnd + 1, view, side, 1)
                    side.down()
        for side in sides:
            side.up()
        for rnd in range(a.warm_reps):
            for view in views:
                for side in (sides if rnd % 2 == 0 else sides[::-1]):
                    # the same history for every warm figure: caches dropped, the view
                    # read once (the page cache filled), then timed; see the docstring
                    side.read(view, True, a.threads, 1)
                    one("warm", rnd + 1, view, side, a.warm_passes)
    finally:
        for side in sides:
            side.down()
    out["load_end"] = loadavg()

    summary = []
    for state in ("cold", "warm"):
        for view in views:
            sel = {s.name: sorted((r for r in runs if r["state"] == state and
                                   r["view"] == view and r["side"] == s.name),
                                  key=lambda r: r["round"]) for s in sides}
            if not sel[names[0]]:
                continue
            ratios = [rb["files_per_s"] / ra["files_per_s"]
                      for ra, rb in zip(sel[names[0]], sel[names[1]])]
            row = {"state": state, "view": view, "ratio_median": statistics.median(ratios),
                   "ratios": ratios, "ratio_min": min(ratios), "ratio_max": max(ratios)}
            for n in names:
                row[n] = {"fps_median": statistics.median(r["files_per_s"] for r in sel[n]),
                          "mbps_median": statistics.median(r["mb_per_s"] for r in sel[n]),
                          "daemon_ms_median": statistics.median(
                              r["daemon_cpu_ms_per_file"] for r in sel[n]),
                          "fps_all": [r["files_per_s"] for r in sel[n]]}
            summary.append(row)
            print("ab: %s %-6s %s %.1f files/s, %s %.1f files/s: %s/%s median %.3f "
                  "(min %.3f, max %.3f); daemon CPU %.3f vs %.3f ms/file" % (
                      state, view, names[0], row[names[0]]["fps_median"], names[1],
                      row[names[1]]["fps_median"], names[1], names[0], row["ratio_median"],
                      row["ratio_min"], row["ratio_max"], row[names[0]]["daemon_ms_median"],
                      row[names[1]]["daemon_ms_median"]))
    out["summary"] = summary
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
