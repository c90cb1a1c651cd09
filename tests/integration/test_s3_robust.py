#!/usr/bin/python3
"""Object storage that misbehaves (issue 25, Must 4-6): the tests' proxy
(httpproxy.py) on 127.0.0.1 in front of s3rver (test_s3.py's fixture) answers 503
SlowDown with Retry-After, trickles bodies, hangs, ignores Range, or flips a byte of a
record prefix in transit; the cache directory is poisoned.

What each test asserts, and would be false if the feature broke:
  test_slowdown_storm     a 2.5 s storm of 503 SlowDown (Retry-After: 1) on every
                          record request: no EIO, every byte right, the retries of
                          one object are >= 0.9 s apart (Retry-After honoured), the
                          stats count throttling answers and a cut in concurrency
                          (before: 4 attempts in 1.1 s, then EIO)
  test_jitter_per_process two daemons throttled alike retry at different times
                          (before: the same unseeded rand() sequence in every daemon)
  test_norange_refused    a server that answers a ranged GET with the whole object:
                          mount refused, one line, exit 1, nothing mounted
  test_trickle_then_back  a body trickled at ~30 B/s: the first file of the record
                          fails within the per-read deadline (2 x http_timeout), the
                          other files of the record at once (the record is held as
                          failing); after the server is right again and the hold
                          has passed, every file reads right
  test_stopped_server     s3rver SIGSTOPped: every read returns (EIO) within the
                          per-read deadline; after SIGCONT, every file reads right
  test_head_disagrees_heals  a HEAD whose size disagrees with the index: EIO, then
                          (the object right again, after the hold) every file right;
                          before, the record was disabled until remount
  test_corrupt_prefix_heals  one byte flipped in a prefix fetch: the checksum
                          mismatch drops the cached prefix, it is fetched again,
                          every file reads right (heals, refetches counted)
  test_cache_poisoned     a cache folder of another user, one writable by others, a
                          symbolic link: each refused with one line; a cached
                          index.db with two files' rows swapped (same size): fetched
                          again, class files serve their own bytes; garbage with a
                          matching hash: does not validate, fetched again
  test_corrupt_part_heals_alone  one byte flipped in one part of 64 KiB: just that
                          part is fetched again, every file right (before: the record)
  test_logfile_refused    -o logfile= a symbolic link, or another user's file: refused
  test_prefetch_never_starves  one connection capped at 64 kB/s, both records hinted
                          (all their parts queued as prefetch), 8 readers at once:
                          every read right, none waits longer than about two parts
                          (before: every part one after another, ~8 s)
  test_prefetch_depth_in_parts  two connections, both records hinted: at most 2
                          parts queued or in flight ahead (before: all of both
                          records'), the rest fetched in turn, both whole in the cache
  test_direct_gets_bounded  one read of a file of full/ alone, its ranges in every
                          group of the record (10 GETs of its own): at most
                          http_connections of them wait for an answer at once (1 at
                          1, 2 at 2; before 1ccd576: 10 at once at 1)
  test_hint_then_token_file  a store with tokens, a hint before any open, then a file
                          of tokens/: nothing of the hinted record fetched; then a
                          file of scan2/: its scan2/ prefix, not the whole record
  test_unmount_mid_fetch  fusermount3 -u while part GETs trickle or hang: the daemon
                          aborts them and exits 0 within 6 s (before: 39.5 s, each
                          GET's own time limit and a retry, record after record)
Every wait is bounded; nothing but 127.0.0.1 is contacted.
Run by hand: MKPCRFS=... PCRINFO=... PCRFS=... /usr/bin/python3 test_s3_robust.py -v
"""

import errno
import glob
import os
import signal
import sqlite3
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from httpproxy import Proxy  # noqa: E402
from test_s3 import BUCKET, READER, Fixture, files_of_record, read, stats  # noqa: E402

TIMEOUT = 1.0   # -o http_timeout for these mounts
DEADLINE = 2 * TIMEOUT  # one read's deadline (pcrfs(1))
SLACK = 1.5     # FUSE, process start and scheduling on a loaded 2-core machine
HOLD = 5.0      # a failed record is held as failing this long (pcrfs(1))


M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def xxh64(data):
    """XXH64 with seed 0 (the xxHash specification), as pcrfs records a cached
    index.db's content hash."""
    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & M64

    def rnd(acc, v):
        return (rotl((acc + v * P2) & M64, 31) * P1) & M64

    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ rnd(0, v[k])) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= rnd(0, int.from_bytes(data[i:i + 8], "little"))
        h = (rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * P1) & M64
        h = (rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def note(msg):
    """A measured figure, on stderr (quoted in RELIABILITY.md)."""
    sys.stderr.write("  [%s]\n" % msg)


STORE = "/%s/ds" % BUCKET  # the store's path on the server


def make_proxy(upstream_port):
    """The proxy (httpproxy.py) in front of s3rver, its faults acting on the record
    objects, its count in flight on their GETs."""
    return Proxy(upstream_port, target=lambda r: "/records/" in r.path,
                 counted=lambda r: r.method == "GET" and "/records/" in r.path)


class Robust(Fixture, unittest.TestCase):

    @classmethod
    def make(cls):
        super().make()
        cls.proxy = make_proxy(cls.server.port)
        cls.index = os.path.join(cls.store, "index.db")

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "proxy", None):
            cls.proxy.close()
        super().tearDownClass()

    def setUp(self):
        self.proxy.reset()

    def mount_proxy(self, name, *extra):
        opts = "%s,http_timeout=%g,http_retries=2" % (self.cache(name), TIMEOUT)
        return self.mount(self.proxy.url(STORE), name, "-o", opts, *extra)

    def unmount_last(self):
        m = self.mounts.pop()
        self.assertEqual(m.unmount(), 0, m.stderr())

    def reader(self, paths, pause=0.0, timeout=120):
        """Read @paths in turn in a process of its own: [(ok, errno, secs, path)]."""
        p = mu.run([mu.PYTHON, "-c", READER, str(pause)] + paths, check=0, timeout=timeout)
        out = []
        for line in p.stdout.decode().splitlines():
            f = line.split(" ", 3)
            if f[0] == "OK":
                out.append((True, 0, float(f[1]), f[2]))
            else:
                out.append((False, int(f[1]), float(f[2]), f[3]))
        self.assertEqual(len(out), len(paths), p.stderr.decode())
        return out

    def record_paths(self, mnt, view, record, n=None):
        rels = sorted(files_of_record(self.index, record))[:n]
        return [os.path.join(mnt, view, r) for r in rels]

    def open_one(self, mnt, view="full"):
        """Read one file of @view, so that the mount knows the level hints are
        fetched at (a hint before any open waits for the first: pcrfs(1))."""
        self.assert_right(mnt, view, self.record_paths(mnt, view, 1, 1))

    def assert_right(self, mnt, view, paths):
        for p in paths:
            rel = os.path.relpath(p, os.path.join(mnt, view))
            self.assertEqual(read(p), read(os.path.join(self.local, view, rel)), p)

    def assert_back(self, mnt, view, paths):
        """The server is right again: once the records' hold has passed, every file of
        @paths reads right (within 40 s)."""
        time.sleep(HOLD + 0.2)
        end = time.monotonic() + 40
        while time.monotonic() < end:
            res = self.reader(paths)
            if all(r[0] for r in res):
                break
            time.sleep(1)
        self.assertTrue(all(r[0] for r in res), res)
        self.assert_right(mnt, view, paths)

    def test_slowdown_storm(self):
        mnt = self.mount_proxy("storm")
        paths = self.record_paths(mnt, "scan5", 1) + self.record_paths(mnt, "scan5", 2)
        self.proxy.retry_after = 1
        start = time.monotonic()
        self.proxy.storm_until = start + 2.5
        res = self.reader(paths)
        bad = [r for r in res if not r[0]]
        note("storm: %d files, %d x 503, %d EIO, slowest read %.2f s, all in %.1f s" % (
            len(res), len(self.proxy.requests(lambda e: e.status == 503)), len(bad),
            max(r[2] for r in res), time.monotonic() - start))
        self.assertEqual(bad, [], "EIO during a SlowDown storm shorter than the budget")
        self.assert_right(mnt, "scan5", paths)
        slow = self.proxy.requests(lambda e: e.status == 503)
        self.assertTrue(slow, "the storm answered nothing")
        # Retry-After: 1 honoured: the requests for one object are >= 0.9 s apart
        by_path = {}
        for e in self.proxy.requests(lambda e: "/records/" in e.path):
            by_path.setdefault(e.path, []).append((e.t, e.status))
        gaps = [b[0] - a[0] for ts in by_path.values() for a, b in zip(ts, ts[1:])
                if a[1] == 503]
        self.assertTrue(gaps, by_path)
        # (another thread's request for the same object may follow a 503 sooner)
        waited = [g for g in gaps if g >= 0.9]
        self.assertGreaterEqual(len(waited), 0.75 * len(gaps), by_path)
        st = stats(mnt)["http"]
        self.assertGreaterEqual(st["throttled"], len(slow) - 2)
        self.assertGreaterEqual(st["concurrency_cuts"], 1, st)
        self.assertGreater(st["backoff_ms"], 900)
        self.assertEqual(st["errors"], 0)
        self.unmount_last()

    def test_jitter_per_process(self):
        """Two daemons throttled alike (no Retry-After) retry at different times:
        the jitter's generator is seeded per process."""
        other = make_proxy(self.server.port)
        try:
            seqs = []
            for name, proxy in (("jit1", self.proxy), ("jit2", other)):
                mnt = self.mount(proxy.url(STORE), name, "-o", "%s,http_timeout=%g,http_retries=2"
                                 % (self.cache(name), TIMEOUT))
                paths = self.record_paths(mnt, "scan1", 1, 1)
                start = time.monotonic()
                proxy.storm_until = start + 2.0
                res = self.reader(paths)
                self.assertTrue(res[0][0], res)
                ts = [e.t for e in proxy.requests(lambda e: "/records/" in e.path)]
                seqs.append([round(b - a, 3) for a, b in zip(ts, ts[1:])][:4])
                self.unmount_last()
            self.assertGreaterEqual(min(len(q) for q in seqs), 2, seqs)
            n = min(len(q) for q in seqs)
            same = sum(abs(a - b) < 0.01 for a, b in zip(seqs[0][:n], seqs[1][:n]))
            note("jitter: gaps between one object's requests, two daemons: %s" % seqs)
            self.assertLess(same, n, "both daemons retried at the same times: %s" % seqs)
        finally:
            other.close()

    def test_norange_refused(self):
        # a server that ignores Range on every object, index.db too: a proxy whose
        # faults act on every request
        proxy = Proxy(self.server.port)
        self.addCleanup(proxy.close)
        proxy.mode = "norange"
        mnt = os.path.join(self.tmp, "norange")
        os.makedirs(mnt)
        p = mu.run([mu.program("PCRFS"), proxy.url(STORE), mnt, "-o",
                    self.cache("norange")], timeout=60)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("does not honour Range", err)
        self.assertFalse(os.path.ismount(mnt))

    def test_trickle_then_back(self):
        mnt = self.mount_proxy("trickle")
        paths = self.record_paths(mnt, "scan5", 2, 8)
        self.proxy.mode = "trickle"
        t0 = time.monotonic()
        res = self.reader(paths)
        took = time.monotonic() - t0
        note("trickle: first file %.2f s, the other %d at most %.3f s, all %.2f s" % (
            res[0][2], len(res) - 1, max(r[2] for r in res[1:]), took))
        self.assertFalse(res[0][0], "the first file read from a trickling server")
        for ok, e, secs, p in res:
            self.assertFalse(ok, p)
            self.assertEqual(e, errno.EIO, p)
            self.assertLess(secs, DEADLINE + SLACK, p)
        # the others failed at once: the record is held as failing
        for ok, e, secs, p in res[1:]:
            self.assertLess(secs, 0.5, p)
        self.assertLess(took, DEADLINE + SLACK + 4)
        self.assertGreaterEqual(stats(mnt)["http"]["held_fails"], len(paths) - 1)
        # the server is right again: after the hold, every file reads right
        self.proxy.reset()
        self.assert_back(mnt, "scan5", paths)
        self.unmount_last()

    def test_stopped_server(self):
        mnt = self.mount_proxy("stopped")
        paths = (self.record_paths(mnt, "scan3", 1, 6) + self.record_paths(mnt, "scan3", 2, 6))
        self.server.proc.send_signal(signal.SIGSTOP)
        try:
            res = self.reader(paths, timeout=90)
        finally:
            self.server.proc.send_signal(signal.SIGCONT)
        note("stopped: %d reads, %d EIO, slowest %.2f s, sum %.2f s" % (
            len(res), sum(not r[0] for r in res), max(r[2] for r in res),
            sum(r[2] for r in res)))
        for ok, e, secs, p in res:
            self.assertFalse(ok, p)
            self.assertLess(secs, DEADLINE + SLACK, "%s: %.2f s" % (p, secs))
        self.assert_back(mnt, "scan3", paths)
        self.unmount_last()

    def test_head_disagrees_heals(self):
        self.proxy.mode = "badsize"
        mnt = self.mount_proxy("badsize")
        paths = self.record_paths(mnt, "scan2", 2, 4)
        res = self.reader(paths)
        self.assertEqual([r[0] for r in res], [False] * len(paths), res)
        self.proxy.reset()
        self.assert_back(mnt, "scan2", paths)
        self.assertIn("asked again", self.mounts[-1].stderr())
        self.unmount_last()

    def test_corrupt_prefix_heals(self):
        self.proxy.mode = "corrupt"
        self.proxy.corrupt_left = 1
        # healing, not deadlines, is under test: the refetch must not run past a 2 x 1 s
        # deadline on a busy machine and hold the record as failing (-o last wins)
        mnt = self.mount_proxy("corrupt", "-o", "http_timeout=10")
        # both records: the first read in order has the second prefetched, and
        # which of the two prefix fetches the proxy corrupts is a race
        paths = self.record_paths(mnt, "full", 1) + self.record_paths(mnt, "full", 2)
        res = self.reader(paths)
        self.assertEqual(self.proxy.corrupt_left, 0, "no prefix fetch was corrupted")
        self.assertEqual([r for r in res if not r[0]], [])
        self.assert_right(mnt, "full", paths)
        st = stats(mnt)["http"]
        self.assertGreaterEqual(st["heals"], 1, st)
        self.assertGreaterEqual(st["refetches"], 1, st)
        self.unmount_last()

    def test_prefetch_never_starves(self):
        """Issue 19: prefetch must not starve readers at few connections. One part
        connection (http_connections=1), 64 KiB parts at 32 KiB/s (a part is 2 s),
        both records hinted (their ~8 parts queued as prefetch); 8 readers at once, 4
        on each record (a file of full/ has bytes in every part of its record). A
        reader waits for at most the part in flight and its own (or reads its own
        bytes), so the slowest read takes about 2 parts, not all parts in a row."""
        self.proxy.mode = "cap"
        self.proxy.cap_bps = 32 * 1024
        part = 64 * 1024
        secs = part / self.proxy.cap_bps  # one part's GET
        mnt = self.mount(self.proxy.url(STORE), "starve", "-o",
                         "%s,http_timeout=20,http_retries=2,http_part_size=64k,"
                         "http_connections=1" % self.cache("starve"))
        # a file of full/ has bytes in every group of its record: in every part of
        # it (a record is ~4 parts here); 4 readers on each record
        paths = self.record_paths(mnt, "full", 1)[::50] + self.record_paths(mnt, "full", 2)[::50]
        nparts = sum(-(-os.path.getsize(os.path.join(self.store, "records", r)) // part)
                     for r in os.listdir(os.path.join(self.store, "records")))
        self.assertGreaterEqual(nparts, 6, "records of too few parts for the test")
        self.open_one(mnt)
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1,2"))
        except FileNotFoundError:
            pass
        time.sleep(0.3)  # the first prefetch part in flight
        res, lock = [], threading.Lock()

        def one(p):
            t = time.monotonic()
            try:
                ok = read(p) == read(p.replace(mnt, self.local))
            except OSError:
                ok = False
            with lock:
                res.append((ok, time.monotonic() - t, p))
        ts = [threading.Thread(target=one, args=(p,)) for p in paths]
        for t in ts:
            t.start()
        for t in ts:
            t.join(90)
        self.assertEqual(len(res), len(paths))
        secs_sorted = sorted(r[1] for r in res)
        note("prefetch vs readers at 1 connection: %d reads in %s s (a part: %.1f s)" %
             (len(res), " ".join("%.2f" % t for t in secs_sorted), secs))
        self.assertEqual([r for r in res if not r[0]], [])
        # at most the part in flight and the reader's own (the others read their own
        # bytes, one reader after another: N = 1 bounds direct GETs too); before,
        # the parts one after another: median ~4.5 parts, slowest ~7
        self.assertLess(secs_sorted[len(res) // 2], 2.5 * secs, res)
        self.assertLess(secs_sorted[-1], 4 * secs, res)
        self.unmount_last()

    def test_prefetch_depth_in_parts(self):
        """Issue 19: prefetch goes a depth counted in parts, 2 per background slot
        (N - 1 of N connections), not in records. At http_connections=2, 64 KiB parts
        at 32 KiB/s, both records hinted (>= 6 parts): at most 2 parts are queued or
        in flight (what the cache reserved), where the depth of 8 records had every
        part of both queued at once; once the link is fast the rest follows in turn,
        both records whole in the cache."""
        self.proxy.mode = "cap"
        self.proxy.cap_bps = 32 * 1024
        part = 64000  # http_part_size=64k: k is 1000
        mnt = self.mount(self.proxy.url(STORE), "depth", "-o",
                         "%s,http_timeout=20,http_retries=2,http_part_size=64k,"
                         "http_connections=2" % self.cache("depth"))
        sizes = [os.path.getsize(os.path.join(self.store, "records", "%06d.pcr" % r))
                 for r in (1, 2)]
        self.assertGreaterEqual(sum(-(-n // part) for n in sizes), 6,
                                "records of too few parts for the test")
        self.open_one(mnt)
        d0 = stats(mnt)["http"]["direct_bytes"]  # that file's own GET
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1,2"))
        except FileNotFoundError:
            pass
        time.sleep(0.6)  # every part the depth allows queued; none ended (2 s each)
        held = stats(mnt)["http"]["cache_bytes"]
        note("prefetch depth at 2 connections: %d bytes reserved (a part: %d, the two "
             "records: %d)" % (held, part, sum(sizes)))
        self.assertGreaterEqual(held, part, "no part fetched ahead")
        self.assertLessEqual(held, 2 * part, "more than 2 parts queued ahead")
        self.proxy.cap_bps = 8 * 1024 * 1024
        end = time.monotonic() + 30
        while (stats(mnt)["http"]["cache_bytes"] < sum(sizes) - 2 * 16384 and
               time.monotonic() < end):
            time.sleep(0.1)
        st = stats(mnt)["http"]
        # the records but their headers
        self.assertGreaterEqual(st["cache_bytes"], sum(sizes) - 2 * 16384, st)
        self.assertEqual(st["direct_bytes"], d0, (d0, st))
        self.unmount_last()

    def test_direct_gets_bounded(self):
        """One read of a file of full/, read alone (no hint, not in order: it GETs its
        own bytes), has a range in every group of its record, i.e. more GETs than
        http_connections=1 allows at once: they go out in turns, never more than one
        in flight (before 1ccd576: all of them at once when none was in flight, the
        node bench's proxy saw 13 at http_connections=1). At 2 connections the proxy
        sees 2 at once: it does count GETs that overlap."""
        self.proxy.delay = 0.2  # every GET of a record lasts >= 0.2 s: turns overlap
        rels = sorted(files_of_record(self.index, 1))
        for n, rel in ((1, rels[7]), (2, rels[150])):
            name = "direct%d" % n
            mnt = self.mount(self.proxy.url(STORE), name, "-o",
                             "%s,http_timeout=10,http_retries=2,http_connections=%d"
                             % (self.cache(name), n))
            path = os.path.join(mnt, "full", rel)
            os.stat(path)
            with self.proxy.lock:  # the mount's own requests (the index) are done
                self.proxy.max_inflight = self.proxy.inflight
            t0 = time.monotonic()
            self.assertEqual(read(path), read(os.path.join(self.local, "full", rel)), rel)
            gets = self.proxy.requests(lambda e: e.t >= t0 and e.method == "GET" and
                                       e.path.endswith("/records/000001.pcr"))
            note("one read of full/ at http_connections=%d: %d GETs, at most %d at once, "
                 "%.2f s" % (n, len(gets), self.proxy.max_inflight, time.monotonic() - t0))
            # (the record's header is one GET before the file's own)
            self.assertGreater(len(gets) - 1, n, "a read of too few ranges for the test")
            self.assertLessEqual(self.proxy.max_inflight, n, gets)
            if n == 2:
                self.assertEqual(self.proxy.max_inflight, 2, gets)
            self.unmount_last()

    def test_hint_then_token_file(self):
        """A store with a token tree: a hint given before any open waits for the first
        open of a file of an image view, whose level it is fetched at. A file of tokens/
        tells no level (its shard is another object, and hints name the image
        records): after a hint and a token file, no byte of the hinted record has been
        fetched; after a file of scan2/, the record's scan2/ prefix (under 0.6 of the
        record), not the whole record (had the token file ended the wait at the top
        level, the whole record would be fetched)."""
        mnt = self.mount_proxy("tokhint", "-o", "http_timeout=10")
        size1 = os.path.getsize(os.path.join(self.store, "records", "000001.pcr"))
        tokrel = None
        for d, _, names in sorted(os.walk(os.path.join(self.local, "tokens"))):
            if names:
                tokrel = os.path.relpath(os.path.join(d, sorted(names)[0]),
                                         os.path.join(self.local, "tokens"))
                break
        self.assertIsNotNone(tokrel, "the store has no token files")

        def sent(part):
            with self.proxy.lock:
                return sum(n for p, n in self.proxy.sent.items() if part in p)
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1"))
        except FileNotFoundError:
            pass
        self.assertEqual(read(os.path.join(mnt, "tokens", tokrel)),
                         read(os.path.join(self.local, "tokens", tokrel)), tokrel)
        time.sleep(1.0)  # (a record advised at the token read: under way by now)
        rec1, tok = sent("/records/000001.pcr"), sent("/tokens/")
        self.assertGreater(tok, 0, "the token file came from no shard")
        self.assertEqual(rec1, 0, "the hinted record fetched after a token file only")
        rel = sorted(files_of_record(self.index, 1))[3]
        self.assertEqual(read(os.path.join(mnt, "scan2", rel)),
                         read(os.path.join(self.local, "scan2", rel)), rel)
        end = time.monotonic() + 20
        while time.monotonic() < end:  # the prefix fetched: no part in flight
            st = stats(mnt)["http"]
            if st["prefix_fetches"] >= 2 and st["fetch_bytes"] >= st["cache_bytes"] > 0:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        rec1 = sent("/records/000001.pcr")
        note("hint, a token file, a file of scan2/: %d bytes of record 1 (%d) fetched, "
             "%d of token shards" % (rec1, size1, tok))
        self.assertGreater(rec1, 0)
        self.assertLess(rec1, 0.6 * size1)
        self.unmount_last()

    def test_unmount_mid_fetch(self):
        """fusermount3 -u while part GETs trickle (8 bytes every 0.25 s) or hang (no
        answer), at http_timeout=10: the daemon aborts them and exits 0 within a few
        seconds (a hung GET hears of it within about a second). Before, it waited for
        every running part GET to end: each attempt's own time limit (10 s here), then
        a retry within the deadline of 2 x http_timeout, record after record: 39.5 s
        with two records hinted (the exits of over 15 s seen under load)."""
        for mode in ("trickle", "hang"):
            self.proxy.reset()
            name = "midfetch-" + mode
            mnt = self.mount(self.proxy.url(STORE), name, "-o", "%s,http_timeout=10,"
                             "http_retries=2,http_part_size=64k,http_connections=4"
                             % self.cache(name))
            self.open_one(mnt)
            # both records opened (their HEADs) before the server stops answering
            self.assert_right(mnt, "full", self.record_paths(mnt, "full", 2, 1))
            self.proxy.mode = mode
            t0 = time.monotonic()
            try:
                os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1,2"))
            except FileNotFoundError:
                pass
            end = time.monotonic() + 10
            while time.monotonic() < end and not self.proxy.requests(
                    lambda e: e.t >= t0 and e.method == "GET" and "/records/" in e.path):
                time.sleep(0.05)
            time.sleep(0.5)  # the parts' GETs under way
            fetching = len(self.proxy.requests(lambda e: e.t >= t0 and e.method == "GET"))
            self.assertGreater(fetching, 0, "no part GET under way")
            m = self.mounts.pop()
            t1 = time.monotonic()
            rc = m.unmount(timeout=60)
            took = time.monotonic() - t1
            note("unmount with %d part GETs (%s): the daemon ended in %.2f s" % (
                fetching, mode, took))
            self.assertEqual(rc, 0, m.stderr())
            self.assertLess(took, 6.0, m.stderr())  # (a hung GET: ~1 s per record)
            self.assertNotIn("fetching bytes", m.stderr())  # an abort is no error to log

    def test_unmount_stops_all_at_once(self):
        """fusermount3 -u while a part GET of each of 15 records hangs: the store
        stops its backend's transfers together before it closes the records, so
        the daemon exits within a few seconds. Before, each record's close aborted
        and waited for its own GETs in turn (a hung GET hears of it within about a
        second): ~1 s per record, 15 s here."""
        store = os.path.join(self.tmp, "store-16")
        if not os.path.exists(store):
            mu.run([mu.program("MKPCRFS"), "-q", "-n", "25", os.path.join(self.tmp, "src"),
                    store], check=0)
            self.server.upload(store, "ds16")
        index = os.path.join(store, "index.db")
        nrec = len(os.listdir(os.path.join(store, "records")))
        self.assertGreaterEqual(nrec, 15, nrec)
        mnt = self.mount(self.proxy.url("/%s/ds16" % BUCKET), "stopall", "-o",
                         "%s,http_timeout=10,http_retries=2,http_part_size=64k,"
                         "http_connections=16" % self.cache("stopall"))
        for k in range(1, nrec + 1):  # every record opened (its HEAD), the level known
            read(os.path.join(mnt, "full", sorted(files_of_record(index, k))[0]))
        self.proxy.mode = "hang"
        t0 = time.monotonic()
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch",
                                 ",".join(str(k) for k in range(1, nrec + 1))))
        except FileNotFoundError:
            pass

        def hung():
            """The records with a part GET sent since the hint (all hang)."""
            return {e.path for e in self.proxy.requests(
                lambda e: e.t >= t0 and e.method == "GET" and "/records/" in e.path)}
        end = time.monotonic() + 10
        while time.monotonic() < end and len(hung()) < 15:
            time.sleep(0.05)
        time.sleep(0.5)
        self.assertGreaterEqual(len(hung()), 15, sorted(hung()))
        m = self.mounts.pop()
        t1 = time.monotonic()
        rc = m.unmount(timeout=90)
        took = time.monotonic() - t1
        note("unmount with part GETs of %d records hung: the daemon ended in %.2f s" % (
            len(hung()), took))
        self.assertEqual(rc, 0, m.stderr())
        # 0.67-0.72 s measured (plain and ASan builds); 9.7 s before, in turn: a
        # bound of 2.5 s fails a close that still waits for a few records in turn
        self.assertLess(took, 2.5, m.stderr())
        self.assertNotIn("fetching bytes", m.stderr())

    def test_corrupt_part_heals_alone(self):
        """A byte flipped in one part of 64 KiB: the checksum mismatch drops just the
        part(s) holding the bad bytes, not the record (before: the whole record
        prefix was fetched again for one bad block)."""
        self.proxy.mode = "corrupt"
        self.proxy.corrupt_left = 1
        self.proxy.corrupt_min = 32768  # a part, not a record header or a file's GET
        mnt = self.mount_proxy("corruptpart", "-o", "http_timeout=10,http_part_size=64k")
        size = os.path.getsize(os.path.join(self.store, "records", "000001.pcr"))
        self.open_one(mnt)
        d0 = stats(mnt)["http"]["direct_bytes"]  # that file's own GET
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1"))
        except FileNotFoundError:
            pass
        paths = self.record_paths(mnt, "full", 1)
        end = time.monotonic() + 30
        while stats(mnt)["http"]["cache_bytes"] < size and time.monotonic() < end:
            time.sleep(0.1)  # the record in the cache, one part of it bad
        res = self.reader(paths)
        self.assertEqual(self.proxy.corrupt_left, 0, "no part fetch was corrupted")
        self.assertEqual([r for r in res if not r[0]], [])
        self.assert_right(mnt, "full", paths)
        st = stats(mnt)["http"]
        note("one bad part: %d bytes fetched for a record of %d (%d directly), %d heals, "
             "%d bytes cached after" % (st["fetch_bytes"] + st["direct_bytes"], size,
                                        st["direct_bytes"], st["heals"], st["cache_bytes"]))
        self.assertGreaterEqual(st["heals"], 1, st)
        # the record once, and again at most two parts (a bad block may straddle),
        # all through the cache, which holds the record again (its prefix: the
        # record but its header); before, the record dropped whole: fetched again
        # or read file by file with GETs of their own
        self.assertLessEqual(st["fetch_bytes"] + st["direct_bytes"] - d0,
                             size + 2 * 65536 + 16384, (size, d0, st))
        self.assertLessEqual(st["direct_bytes"] - d0, 16384, (d0, st))
        self.assertGreaterEqual(st["cache_bytes"], size - 16384, st)
        self.unmount_last()

    def refused(self, name, cache, want):
        mnt = os.path.join(self.tmp, name)
        os.makedirs(mnt, exist_ok=True)
        p = mu.run([mu.program("PCRFS"), self.proxy.url(STORE), mnt, "-o", "cache=" + cache],
                   timeout=60)
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(want, err)
        self.assertFalse(os.path.ismount(mnt))

    def test_cache_poisoned(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (chown to another user)")
        # another user's folder
        other = os.path.join(self.tmp, "poison-other")
        os.makedirs(other, mode=0o700)
        os.chown(other, 65534, 65534)
        self.refused("poison1", other, "owned by uid 65534")
        # writable by others (a shared scratch directory used as the cache itself)
        shared = os.path.join(self.tmp, "poison-shared")
        os.makedirs(shared)
        os.chmod(shared, 0o1777)
        self.refused("poison2", shared, "writable by group or others")
        # the store's folder planted as a symbolic link in our own cache directory
        mine = os.path.join(self.tmp, "poison-link")
        mnt = self.mount_proxy("poison-ok")
        self.unmount_last()
        good = os.path.join(self.tmp, "cache-poison-ok")
        (folder,) = [d for d in os.listdir(good)]
        os.makedirs(mine, mode=0o700)
        os.symlink(os.path.join(good, folder), os.path.join(mine, folder))
        self.refused("poison3", mine, "a symbolic link")
        # a swapped index: two files' rows exchanged in the cached copy, same size
        (copy,) = glob.glob(os.path.join(good, folder, "index-*.db"))
        size = os.path.getsize(copy)
        con = sqlite3.connect(copy)
        a, b = con.execute("SELECT id FROM files WHERE record = 1 ORDER BY id LIMIT 2").fetchall()
        na = con.execute("SELECT name FROM files WHERE id = ?", a).fetchone()[0]
        nb = con.execute("SELECT name FROM files WHERE id = ?", b).fetchone()[0]
        con.execute("UPDATE files SET name = ? WHERE id = ?", (b"\x00tmp", a[0]))
        con.execute("UPDATE files SET name = ? WHERE id = ?", (na, b[0]))
        con.execute("UPDATE files SET name = ? WHERE id = ?", (nb, a[0]))
        con.commit()
        con.close()
        self.assertEqual(os.path.getsize(copy), size)
        mnt = self.mount_proxy("poison-ok")
        self.assertEqual(stats(mnt)["http"]["index_refetches"], 1)
        paths = self.record_paths(mnt, "full", 1, 4)
        self.assert_right(mnt, "full", paths)
        self.unmount_last()
        # a cached copy damaged on disk (garbage, same size): fetched again too
        with open(copy, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * 4096)
        mnt = self.mount_proxy("poison-ok")
        self.assertEqual(stats(mnt)["http"]["index_refetches"], 1)
        self.assert_right(mnt, "full", paths)
        self.unmount_last()
        # garbage whose hash was recorded too (a copy damaged before it was hashed,
        # or left by another program): it does not open as an index, so it is
        # removed and fetched again
        sum_file = copy[:-3] + ".sum"
        with open(sum_file) as f:
            self.assertEqual(f.read(), "%016x\n" % xxh64(read(copy)))  # the helper is right
        with open(copy, "r+b") as f:
            f.write(b"\xff" * 4096)  # over SQLite's header
        with open(sum_file, "w") as f:
            f.write("%016x\n" % xxh64(read(copy)))
        mnt = self.mount_proxy("poison-ok")
        self.assertEqual(stats(mnt)["http"]["index_refetches"], 1)
        self.assertIn("does not validate", self.mounts[-1].stderr())
        self.assert_right(mnt, "full", paths)
        self.unmount_last()

    def test_logfile_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (chown to another user)")
        target = os.path.join(self.tmp, "victim")
        with open(target, "w") as f:
            f.write("x\n")
        link = os.path.join(self.tmp, "log-link")
        os.symlink(target, link)
        theirs = os.path.join(self.tmp, "log-theirs")
        with open(theirs, "w"):
            pass
        os.chown(theirs, 65534, 65534)
        for log, want in ((link, "symbolic link"), (theirs, "owned by uid 65534")):
            mnt = os.path.join(self.tmp, "logmnt")
            os.makedirs(mnt, exist_ok=True)
            p = mu.run([mu.program("PCRFS"), self.store, mnt, "-o", "logfile=" + log],
                       timeout=60)
            err = p.stderr.decode()
            self.assertEqual(p.returncode, 1, err)
            self.assertIn(want, err)
            self.assertFalse(os.path.ismount(mnt))
        with open(target) as f:
            self.assertEqual(f.read(), "x\n")
        self.assertEqual(os.path.getsize(theirs), 0)


if __name__ == "__main__":
    unittest.main()
