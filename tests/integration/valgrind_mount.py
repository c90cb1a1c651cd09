#!/usr/bin/python3
"""One mount session of pcrfs under valgrind memcheck (GitHub issue #5), suite
"valgrind".

Builds a small store (the awkward tree of tests/gen/mkdataset.py: verbatim files,
odd names, gray/CMYK/progressive JPEGs) with mkpcrfs under valgrind, runs the daemon
in the foreground under

    valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1

with a short read workload (readdir, stat, every file of every view read whole
through the page cache and at random offsets with O_DIRECT from 4 threads, the
.pcrfs files, failed lookups and writes, a record that fails with EIO), unmounts it
with fusermount3 -u, and requires: exit status 0 from valgrind (no memory error, no
definite leak), "ERROR SUMMARY: 0 errors" in its log, and every byte read equal to
`pcrinfo --cat` (pcrinfo --verify runs under valgrind too).

Run by hand: PCRFS=... MKPCRFS=... PCRINFO=... /usr/bin/python3 valgrind_mount.py
(or PCRFS_BUILD_DIR=/path/to/build). Needs valgrind (scripts/deps.sh installs it);
a missing valgrind is a failure, not a skip. Not for a sanitizer build: ASan and
valgrind cannot watch the same process.
"""

import errno
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from common import unescape  # noqa: E402

VALGRIND = ["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite", "--error-exitcode=1", "--num-callers=30"]


def valgrind(argv, log, timeout=900):
    """Run @argv under memcheck with its report in @log; returns (exit status, report)."""
    p = subprocess.run(VALGRIND + ["--log-file=" + log] + argv, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    with open(log) as f:
        return p, f.read()


def check_report(what, rc, report):
    if rc != 0 or "ERROR SUMMARY: 0 errors" not in report:
        sys.stderr.write(report[-20000:])
        raise AssertionError("%s under valgrind: exit %s, errors reported (log above)" %
                             (what, rc))
    lost = [ln.split("==", 2)[-1].strip() for ln in report.splitlines()
            if "definitely lost:" in ln or "All heap blocks were freed" in ln]
    print("%s: ERROR SUMMARY: 0 errors; %s" % (what, lost[0] if lost else "(no leak summary)"))


def main():
    if shutil.which("valgrind") is None:
        raise AssertionError("valgrind is not installed (scripts/deps.sh installs it)")
    tmp = tempfile.mkdtemp(prefix="pcrfs-valgrind-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
    mnt = os.path.join(tmp, "mnt")
    daemon = None
    try:
        src = os.path.join(tmp, "src")
        store = os.path.join(tmp, "store.pcr")
        mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"), "--out",
                src, "--classes", "2", "--per-class", "4", "--seed", "17", "--awkward",
                "--manifest", src + ".json"], check=0)

        t0 = time.monotonic()
        p, rep = valgrind([mu.program("MKPCRFS"), "-q", "-j", "2", "-n", "4", src, store],
                          os.path.join(tmp, "mkpcrfs.vg"))
        check_report("mkpcrfs (%.0f s)" % (time.monotonic() - t0), p.returncode, rep)
        p, rep = valgrind([mu.program("PCRINFO"), "--verify", store],
                          os.path.join(tmp, "pcrinfo.vg"))
        check_report("pcrinfo --verify", p.returncode, rep)

        levels = mu.store_levels(store)
        views = ["scan%d" % k for k in range(1, levels + 1)] + ["full"]
        listing = mu.run([mu.program("PCRINFO"), "--list", store], check=0).stdout
        rels = [unescape(ln.split(b"\t")[0]) for ln in listing.splitlines() if ln]
        want = {(v, r): mu.oracle(store, r, levels if v == "full" else int(v[4:]))
                for v in ("scan1", "scan3", "full") for r in rels}
        # One record whose files fail with EIO: the error path runs under valgrind too.
        recs = sorted(os.listdir(os.path.join(store, "records")))
        os.truncate(os.path.join(store, "records", recs[-1]), 40)

        os.mkdir(mnt)
        log = os.path.join(tmp, "pcrfs.vg")
        errf = open(os.path.join(tmp, "pcrfs.stderr"), "wb")
        daemon = subprocess.Popen(VALGRIND + ["--log-file=" + log, mu.program("PCRFS"), store,
                                              mnt, "-f"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=errf, start_new_session=True)
        t0 = time.monotonic()
        if not mu.wait_for(lambda: os.path.ismount(mnt) or daemon.poll() is not None, 120):
            raise AssertionError("pcrfs under valgrind did not mount in 120 s")
        if not os.path.ismount(mnt):
            raise AssertionError("pcrfs under valgrind exited %s" % daemon.poll())

        # the workload
        found = set()
        for v in views:
            for dp, dns, fns in os.walk(os.path.join(os.fsencode(mnt), v.encode())):
                for fn in fns:
                    os.stat(os.path.join(dp, fn))
                    found.add((v, os.path.relpath(os.path.join(dp, fn),
                                                  os.path.join(os.fsencode(mnt), v.encode()))))
        missing = {(v, r) for v in views for r in rels} - found
        if missing:
            raise AssertionError("not listed: %r" % sorted(missing)[:5])
        bad, eio = [], 0
        for (v, r), data in sorted(want.items()):
            try:
                with open(os.path.join(os.fsencode(mnt), v.encode(), r), "rb") as f:
                    got = f.read()
            except OSError as e:
                if e.errno != errno.EIO:
                    raise
                eio += 1
                continue
            if got != data:
                bad.append((v, r))
        if eio == 0 or eio == len(want):
            raise AssertionError("expected EIO for the truncated record's files only, got %d"
                                 % eio)
        errors = []

        def reader(seed):
            rng = random.Random(seed)
            keys = sorted(want)
            for _ in range(150):
                v, r = keys[rng.randrange(len(keys))]
                data = want[(v, r)]
                try:
                    fd = os.open(os.path.join(os.fsencode(mnt), v.encode(), r),
                                 os.O_RDONLY | os.O_DIRECT)
                    try:
                        off = rng.randrange(len(data) + 1)
                        n = rng.randrange(1, 9000)
                        got = os.pread(fd, n, off)
                    finally:
                        os.close(fd)
                except OSError as e:
                    if e.errno != errno.EIO:
                        errors.append(repr(e))
                    continue
                if got != data[off:off + n]:
                    errors.append("bytes %s/%r at %d" % (v, r, off))

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in ("info", "stats"):
            mu.run(["cat", os.path.join(mnt, ".pcrfs", name)], check=0)
        for path, op in ((os.path.join(mnt, "full", "nope"), os.stat),
                         (os.path.join(mnt, "scan1", "x"), lambda p: open(p, "wb"))):
            try:
                op(path)
                errors.append("%s did not fail" % path)
            except OSError:
                pass
        if bad or errors:
            raise AssertionError("wrong bytes or errors: %r %r" % (bad[:5], errors[:5]))
        served = time.monotonic() - t0

        mu.run([mu.FUSERMOUNT, "-u", mnt], check=0)
        rc = daemon.wait(300)
        errf.close()
        with open(log) as f:
            rep = f.read()
        check_report("pcrfs mount session (%.0f s served, %d files read whole, %d EIO as "
                     "expected, 600 O_DIRECT reads)" % (served, len(want), eio), rc, rep)
        daemon = None
        print("valgrind: 3 programs, no memory errors, no definite leaks")
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if os.path.ismount(mnt) or mu.is_dead_mount(mnt):
            subprocess.run([mu.FUSERMOUNT, "-u", "-z", mnt], stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
