#!/usr/bin/python3
"""Reliability of a mounted store under faults and load (GitHub issue #5).

A dataset filesystem runs for days under many DataLoader workers and reads stores
that may be damaged while it serves them. Each test really mounts a store
(`pcrfs STORE MNT -f`, mount_util.Mount), damages or loads it, and checks every byte
read against oracles prepared beforehand by `pcrinfo --extract DIR --level K` (the
same store library as `pcrinfo --cat`, without FUSE; one call per level).

What the daemon does with a record that changes under it (the contract these tests
pin down, also in RELIABILITY.md):
  - The daemon opens each record file once, on the first open of one of its files,
    checks it against the index (regular file, size, magic, version, ngroups,
    nimages) and keeps that descriptor until unmount. A record that fails the check
    makes its files fail with EIO from then on, logged once.
  - Truncated while mounted: every read that reaches past the new end gets a short
    pread and fails with EIO (logged once per record); files and levels whose bytes
    all lie before the cut keep being served, and so does every other record.
  - Replaced by rename() (or unlinked) after its first use: the daemon keeps reading
    the old inode through its descriptor, so every byte stays right. Replaced before
    its first use: the new file is checked at first use; garbage fails (EIO).
  - Overwritten in place, size kept: not detected by the daemon. It serves the bytes
    now in the file (a check per read would mean hashing the whole file on every
    partial read: the XXH64 in the index covers the full level). `pcrinfo --verify`
    finds it (exit 1, names the file). A header overwritten before the record's first
    use is detected (EIO). Pages the kernel already cached (keep_cache) may still be
    served: the checks here read with O_DIRECT, which always reaches the daemon.
  - index.db damaged while mounted: directories already loaded keep serving; the
    others fail with EIO when first used (SQLite reports the corruption).

Classes:
  RecordFaults  truncate, rename-replace, unlink and overwrite a record while reader
                threads run; EIO exactly where the byte ranges say, nothing wrong
                served, the other records intact, the daemon alive, exit 0; garbage
                over index.db while mounted
  KillUnderLoad kill -9 of the daemon while readers run: they get ENOTCONN, never
                wrong bytes, and do not hang; fusermount3 -u; a remount serves all
  Load          PCRFS_LOAD_THREADS (16) threads + PCRFS_LOAD_PROCS (4) processes read
                random files of every view (scan1..scanL, full, tokens) at random
                offsets for PCRFS_LOAD_SECONDS (20); every byte checked; the daemon's
                fd count is the same before and after; its peak RSS stays under
                PCRFS_RSS_LIMIT_MB (200; 1024 when the daemon is built with
                AddressSanitizer, whose quarantine alone may hold 256 MB) and is
                printed
  DescriptorLimit  80 records under a soft RLIMIT_NOFILE of 48 (hard 4096): every
                file served (the daemon keeps a descriptor per used record, so a
                store with more records than the soft limit must not fail with EIO)
The existing tests this file does not repeat: kill -9 of an idle daemon and remount
(test_mount.py Lifecycle.test_kill_9_then_fusermount_and_remount), records damaged
before the mount (test_mount.py BadStores), disk full during a build
(test_build.py test_disk_full).

Run by hand: PCRFS=... MKPCRFS=... PCRINFO=... /usr/bin/python3 test_reliability.py -v
(or PCRFS_BUILD_DIR=/path/to/build).
"""

import errno
import json
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402

LOAD_SECONDS = float(os.environ.get("PCRFS_LOAD_SECONDS", "20"))
LOAD_THREADS = int(os.environ.get("PCRFS_LOAD_THREADS", "16"))
LOAD_PROCS = int(os.environ.get("PCRFS_LOAD_PROCS", "4"))
PER_RECORD = 4


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def direct_read(path, size):
    """Read all of @path with O_DIRECT (every request reaches the daemon, none is
    served from the page cache), in a loop so that a short read is followed by
    another. Returns the bytes, or raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        out = bytearray()
        while True:
            b = os.pread(fd, max(size - len(out), 0) + 4096, len(out))
            if not b:
                return bytes(out)
            out += b
    finally:
        os.close(fd)


def varints(blob):
    out, v, shift = [], 0, 0
    for b in blob:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(v)
            v, shift = 0, 0
    return out


def record_layout(store):
    """{relative path (bytes): (record file name, [(start, end) of each chunk in the
    record file])} for the image tree, from index.db (schema: man/pcrfs.5)."""
    db = sqlite3.connect("file:%s?mode=ro&immutable=1" % os.path.join(store, "index.db"),
                         uri=True)
    try:
        dirs = {}
        for did, parent, name in db.execute("SELECT id, parent, name FROM dirs ORDER BY id"):
            dirs[did] = b"" if did == 1 else os.path.join(dirs[parent], bytes(name))
        recs = {}
        for rid, name, groups in db.execute("SELECT id, name, groups FROM records"):
            recs[rid] = (name, varints(groups))
        out = {}
        for d, name, rec, chunks in db.execute("SELECT dir, name, record, chunks FROM files"):
            rname, goff = recs[rec]
            c = varints(chunks)
            ranges = [(goff[g] + c[2 * g], goff[g] + c[2 * g] + c[2 * g + 1])
                      for g in range(len(c) // 2)]
            out[os.path.join(dirs[d], bytes(name))] = (rname, ranges)
        return out
    finally:
        db.close()


def proc_status(pid):
    """{field: value} of /proc/PID/status (VmRSS, VmHWM in kB, Threads)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def kb(v):
    return int(v.split()[0])


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def uses_asan(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


class Fixture:
    """A source tree, a store (PER_RECORD images per record, so several records) and
    the oracles of every view, made once per class."""

    CLASSES, PER_CLASS, SEED = 3, 8, 11

    @classmethod
    def make_fixture(cls, tokens=False):
        """With @tokens, the store also holds a token grid per image (mktokens.py
        tree, imported with mkpcrfs --tokens) and want[] the tokens/ view too.
        A failure removes what was made (tearDownClass does not run then)."""
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-rel-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        try:
            cls._make_fixture(tokens)
        except BaseException:
            cls.remove_fixture()
            raise

    @classmethod
    def _make_fixture(cls, tokens):
        src = os.path.join(cls.tmp, "src")
        cls.store = os.path.join(cls.tmp, "store.pcr")
        mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"), "--out",
                src, "--classes", str(cls.CLASSES), "--per-class", str(cls.PER_CLASS), "--seed",
                str(cls.SEED), "--awkward", "--manifest", src + ".json"], check=0)
        if tokens:
            tok = os.path.join(cls.tmp, "tok")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py"),
                    "--seed", "21", "-k", "391", "--grid", "32", "tree", src, tok], check=0)
            mu.run([mu.program("MKPCRFS"), "-q", "-j", "2", "-n", str(PER_RECORD), "--tokens",
                    tok, src, cls.store], check=0)
        else:
            mu.build_store(src, cls.store, per_record=PER_RECORD)
        cls.levels = mu.store_levels(cls.store)
        cls.views = ["scan%d" % k for k in range(1, cls.levels + 1)] + ["full"]
        cls.layout = record_layout(cls.store)
        cls.want = {}
        for k in range(1, cls.levels + 1):
            out = os.path.join(cls.tmp, "extract%d" % k)
            mu.run([mu.program("PCRINFO"), "--extract", out, "--level", str(k), cls.store],
                   check=0)
            for rel in cls.layout:
                data = read_bytes(os.path.join(os.fsencode(out), rel))
                cls.want[("scan%d" % k, rel)] = data
                if k == cls.levels:
                    cls.want[("full", rel)] = data
            shutil.rmtree(out)
        # the oracle agrees with pcrinfo --cat
        rel = sorted(cls.layout)[0]
        assert mu.oracle(cls.store, rel, 2) == cls.want[("scan2", rel)]
        if tokens:
            # the oracle of a .tok file: numpy.save of its source grid as <u2 (pcrfs(1))
            import io
            import numpy as np
            for dp, _, fns in os.walk(os.fsencode(tok)):
                for fn in fns:
                    rel = os.path.relpath(os.path.join(dp, fn), os.fsencode(tok))
                    b = io.BytesIO()
                    np.save(b, np.load(os.path.join(dp, fn)).astype("<u2"))
                    cls.want[("tokens", rel[:-4] + b".tok")] = b.getvalue()
            # one grid per regular file of the tree (symlinks are not followed there)
            assert sum(k[0] == "tokens" for k in cls.want) >= len(cls.layout) - 2
            cls.views.append("tokens")
        cls.records = sorted({r for r, _ in cls.layout.values()})
        assert len(cls.records) >= 5, cls.records

    @classmethod
    def remove_fixture(cls):
        for dp, dns, _ in os.walk(cls.tmp):
            for d in dns:
                p = os.path.join(dp, d)
                if os.path.ismount(p) or mu.is_dead_mount(p):
                    subprocess.run([mu.FUSERMOUNT, "-u", "-z", p], stderr=subprocess.DEVNULL)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def level_of(cls, view):
        return cls.levels if view == "full" else int(view[4:])

    @classmethod
    def files_of(cls, record):
        return sorted(r for r, (n, _) in cls.layout.items() if n == record)

    @classmethod
    def reaches(cls, rel, view, cut):
        """True if @rel at @view needs record bytes at or past offset @cut."""
        ranges = cls.layout[rel][1][:cls.level_of(view)]
        return any(end > cut and end > start for start, end in ranges)


class Readers:
    """Threads that read random (view, file) pairs of @keys with O_DIRECT (whole file,
    or a random range) until stopped, and sort every outcome: right bytes, EIO,
    another error, or wrong bytes (never acceptable)."""

    def __init__(self, mnt, want, keys, nthreads=4, seed=1):
        self.mnt = os.fsencode(mnt)
        self.want = want
        self.keys = list(keys)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.eio = {}      # key -> count
        self.other = {}    # (key, errno) -> count
        self.wrong = []    # (key, off, n)
        self.threads = [threading.Thread(target=self._run, args=(seed + i,), daemon=True)
                        for i in range(nthreads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def set_keys(self, keys):
        with self.lock:
            self.keys = list(keys)

    def finish(self, timeout=30):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)

    def _run(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            with self.lock:
                key = self.keys[rng.randrange(len(self.keys))]
            data = self.want[key]
            path = os.path.join(self.mnt, key[0].encode(), key[1])
            whole = rng.random() < 0.5
            off = 0 if whole else rng.randrange(len(data) + 1)
            n = len(data) + 4096 if whole else rng.randrange(1, 70000)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                try:
                    got = os.pread(fd, n, off)
                finally:
                    os.close(fd)
            except OSError as e:
                with self.lock:
                    if e.errno == errno.EIO:
                        self.eio[key] = self.eio.get(key, 0) + 1
                    else:
                        self.other[(key, e.errno)] = self.other.get((key, e.errno), 0) + 1
                continue
            with self.lock:
                if got == data[off:off + n]:
                    self.ok += 1
                else:
                    self.wrong.append((key, off, n))


class RecordFaults(Fixture, unittest.TestCase):
    """A record truncated, replaced, unlinked or overwritten while reader threads run."""

    @classmethod
    def setUpClass(cls):
        cls.make_fixture()

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def setUp(self):
        self.mount = None
        self.readers = None

    def tearDown(self):
        if self.readers:
            self.readers.finish()
        if self.mount:
            self.mount.cleanup()

    def mounted_copy(self):
        """A private copy of the store, mounted; returns (store, mnt)."""
        store = os.path.join(self.tmp, self._testMethodName + ".pcr")
        shutil.copytree(self.store, store)
        mnt = os.path.join(self.tmp, "mnt-" + self._testMethodName)
        self.mount = mu.Mount(store, mnt)
        self.mount.start()
        return store, mnt

    def keys(self, records):
        return [(v, rel) for rel, (r, _) in self.layout.items() if r in records
                for v in self.views]

    def read_now(self, mnt, key):
        """One O_DIRECT read of the whole file: its bytes, or the OSError's errno."""
        try:
            return direct_read(os.path.join(os.fsencode(mnt), key[0].encode(), key[1]),
                               len(self.want[key]))
        except OSError as e:
            return e.errno

    def assert_served(self, mnt, records):
        """Every file of @records, every view, right now: exactly the oracle bytes."""
        bad = [k for k in self.keys(records) if self.read_now(mnt, k) != self.want[k]]
        self.assertEqual(bad, [], "files of intact records not served right")

    def assert_all_eio(self, mnt, record):
        got = {k: self.read_now(mnt, k) for k in self.keys([record])}
        self.assertEqual({k for k, v in got.items() if v != errno.EIO}, set(),
                         "files of %s that did not fail with EIO" % record)

    def stats(self, mnt):
        return json.loads(read_bytes(os.path.join(mnt, ".pcrfs", "stats")))

    def stop_readers(self):
        """Stop the reader threads; nothing wrong may have been served, no error but
        EIO seen, and no thread may hang."""
        r = self.readers
        self.assertTrue(r.finish(), "a reader thread hung")
        self.assertEqual(r.wrong, [], "wrong bytes served")
        self.assertEqual(r.other, {}, "errors other than EIO")
        self.assertGreater(r.ok, 50, "the readers hardly read anything")
        return r

    def finish(self, mnt, expect_errors):
        """The daemon survived, counted errors iff expected, and exits 0 on unmount."""
        self.assertTrue(self.mount.alive(), self.mount.stderr())
        st = self.stats(mnt)
        self.assertEqual(st["errors"] > 0, expect_errors, st)
        rc = self.mount.unmount()
        self.assertEqual(rc, 0, "daemon exit status %r: %s" % (rc, self.mount.stderr()))

    def test_truncate_record_while_reading(self):
        store, mnt = self.mounted_copy()
        victim = self.records[2]
        path = os.path.join(store, "records", victim)
        cut = os.path.getsize(path) // 2
        self.readers = Readers(mnt, self.want, self.keys(self.records), nthreads=4).start()
        time.sleep(1.5)
        ok_before = self.readers.ok
        os.truncate(path, cut)
        time.sleep(2.0)
        r = self.stop_readers()
        self.assertGreater(ok_before, 0)
        # EIO only for files of the victim, and only where their bytes cross the cut
        for key in r.eio:
            self.assertEqual(self.layout[key[1]][0], victim, key)
            self.assertTrue(self.reaches(key[1], key[0], cut), ("EIO but in bounds", key))
        # now, file by file: EIO exactly where a needed byte lies past the cut
        expect_eio, expect_ok = set(), set()
        for key in self.keys([victim]):
            (expect_eio if self.reaches(key[1], key[0], cut) else expect_ok).add(key)
        self.assertTrue(expect_eio and expect_ok, "the cut should split the victim's files")
        got = {k: self.read_now(mnt, k) for k in expect_eio | expect_ok}
        self.assertEqual({k for k in expect_eio if got[k] != errno.EIO}, set(),
                         "reads past the cut that did not fail with EIO")
        self.assertEqual({k for k in expect_ok if got[k] != self.want[k]}, set(),
                         "reads before the cut not served right")
        self.assert_served(mnt, [x for x in self.records if x != victim])
        print("\n[truncate] %s cut to %d bytes under %d readers: %d right reads, %d EIO "
              "(victim only); afterwards %d (file, view) EIO and %d served right, as the "
              "byte ranges say" % (victim, cut, len(r.threads), r.ok, sum(r.eio.values()),
                                   len(expect_eio), len(expect_ok)), file=sys.stderr)
        err = self.mount.stderr()
        self.assertEqual(err.count(victim), 1, "the record is not logged exactly once: " + err)
        self.assertIn("truncated", err)
        self.finish(mnt, expect_errors=True)

    def test_replace_and_unlink_records_while_reading(self):
        """The daemon holds every record open from mount time (pcrfs(1), "A rebuild
        under a mount"): records replaced by rename or unlinked under it, used or not
        yet, keep serving the bytes that were mounted."""
        store, mnt = self.mounted_copy()
        rdir = os.path.join(store, "records")
        used, unlinked, fresh = self.records[1], self.records[3], self.records[4]
        # @used and @unlinked are read now; @fresh is first read after the swap
        for rec in (used, unlinked):
            key = ("scan1", self.files_of(rec)[0])
            self.assertEqual(self.read_now(mnt, key), self.want[key])
        others = [x for x in self.records if x != fresh]
        self.readers = Readers(mnt, self.want, self.keys(others), nthreads=4).start()
        time.sleep(1.0)
        rng = random.Random(5)
        for rec in (used, fresh):
            tmp = os.path.join(rdir, ".new-" + rec)
            with open(tmp, "wb") as f:
                f.write(rng.randbytes(os.path.getsize(os.path.join(rdir, rec))))
            os.rename(tmp, os.path.join(rdir, rec))
        os.unlink(os.path.join(rdir, unlinked))
        time.sleep(2.0)
        r = self.stop_readers()
        self.assertEqual(r.eio, {}, "EIO for a record replaced under the mount")
        print("\n[replace] %d right reads while %s and %s were replaced by rename and %s "
              "unlinked; no EIO" % (r.ok, used, fresh, unlinked), file=sys.stderr)
        # every record, the one first read only now included: the mounted bytes
        self.assert_served(mnt, self.records)
        err = self.mount.stderr()
        for rec in (used, fresh, unlinked):
            self.assertNotIn(rec, err)
        self.finish(mnt, expect_errors=False)

    def test_rebuild_under_mount(self):
        """mkpcrfs --force over the mounted store's own path (a new layout: other
        records, other offsets) while readers run: the mount keeps serving exactly the
        store it mounted, every file of every view, until it is remounted."""
        store, mnt = self.mounted_copy()
        key = ("scan1", self.files_of(self.records[0])[0])
        self.assertEqual(self.read_now(mnt, key), self.want[key])
        # readers on the first record only: the others are first read after the
        # rebuild, which lazily opened records would not survive
        self.readers = Readers(mnt, self.want, self.keys(self.records[:1]), nthreads=4).start()
        time.sleep(0.5)
        p = mu.run([mu.program("MKPCRFS"), "-q", "-f", "-j", "2", "-n", "3",
                    os.path.join(self.tmp, "src"), store])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotEqual(record_layout(store), self.layout, "the rebuild changed nothing")
        time.sleep(1.0)
        r = self.stop_readers()
        self.assertEqual(r.eio, {}, "EIO after a rebuild under the mount")
        self.assert_served(mnt, self.records)
        print("\n[rebuild] %d right reads while the store was rebuilt in place with another "
              "layout; every file of every view still the mounted bytes" % r.ok, file=sys.stderr)
        self.assertNotIn("error", self.mount.stderr())
        self.finish(mnt, expect_errors=False)

    def test_overwrite_record_in_place(self):
        store, mnt = self.mounted_copy()
        rdir = os.path.join(store, "records")
        victim, header_victim = self.records[1], self.records[4]
        # a JPEG of the victim with 3+ chunks and a plain name (to find it in output)
        rel = next(r for r in self.files_of(victim)
                   if len(self.layout[r][1]) >= 3 and r.isascii() and b" " not in r)
        self.assertEqual(self.read_now(mnt, ("scan1", rel)), self.want[("scan1", rel)])
        others = [x for x in self.records if x not in (victim, header_victim)]
        self.readers = Readers(mnt, self.want, self.keys(others), nthreads=4).start()
        # 8 bytes in the middle of chunk 2 (0-based 1), size unchanged
        start, end = self.layout[rel][1][1]
        self.assertGreater(end - start, 16)
        pos = start + (end - start) // 2
        fd = os.open(os.path.join(rdir, victim), os.O_RDWR)
        try:
            old = os.pread(fd, 8, pos)
            new = bytes(b ^ 0x5A for b in old)
            os.pwrite(fd, new, pos)
        finally:
            os.close(fd)
        # and the magic of a record the daemon has not opened yet
        with open(os.path.join(rdir, header_victim), "r+b") as f:
            f.write(b"NOTAPCR!")
        time.sleep(1.0)
        r = self.stop_readers()
        self.assertEqual(r.eio, {}, "EIO for an intact record")
        print("\n[overwrite] %d right reads of other records while 8 bytes of %s and the "
              "magic of %s were overwritten" % (r.ok, victim, header_victim), file=sys.stderr)
        # level 1 does not include chunk 2: unchanged
        self.assertEqual(self.read_now(mnt, ("scan1", rel)), self.want[("scan1", rel)])
        # level 2 and up read the damaged block: its checksum fails, EIO, never the
        # changed bytes (pcrfs(5), chunk checksums)
        for view in ("scan2", "scan5", "full"):
            self.assertEqual(self.read_now(mnt, (view, rel)), errno.EIO,
                             "in-place overwrite inside a chunk must fail with EIO")
        self.assert_all_eio(mnt, header_victim)
        err = self.mount.stderr()
        self.assertEqual(err.count("checksum mismatch"), 1, "logged once per file: " + err)
        # named by the file's path in the store, not by its index id
        self.assertIn(os.fsdecode(rel) + ": checksum mismatch", err)
        self.assert_served(mnt, others)
        self.finish(mnt, expect_errors=True)
        # pcrinfo --verify finds it too: exit 1, the file named
        p = mu.run([mu.program("PCRINFO"), "--verify", store])
        out = (p.stdout + p.stderr).decode(errors="replace")
        self.assertEqual(p.returncode, 1, out)
        self.assertIn(os.fsdecode(rel), out)


    def test_index_overwritten_while_mounted(self):
        """index.db is read lazily (a directory's file rows on first use): garbage
        written over it while mounted makes the directories not loaded yet fail with
        EIO; the loaded ones keep serving, nothing wrong is listed or read, and the
        daemon lives. A store of its own: 60 directories, so that SQLite has not
        cached the whole index at mount (the fixture's index fits in its cache)."""
        src = os.path.join(self.tmp, "idx-src")
        store = os.path.join(self.tmp, "idx.pcr")
        mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"), "--out",
                src, "--classes", "60", "--per-class", "6", "--seed", "4", "--size", "64",
                "--manifest", src + ".json"], check=0)
        mu.build_store(src, store, per_record=PER_RECORD)
        out = os.path.join(self.tmp, "idx-extract")
        mu.run([mu.program("PCRINFO"), "--extract", out, store], check=0)
        want = {}
        for dp, _, fns in os.walk(os.fsencode(out)):
            for fn in fns:
                want[os.path.relpath(os.path.join(dp, fn), os.fsencode(out))] = \
                    read_bytes(os.path.join(dp, fn))
        dirs = sorted({os.path.dirname(r) for r in want})
        self.assertEqual(len(dirs), 60)
        mnt = os.path.join(self.tmp, "mnt-idx")
        self.mount = mu.Mount(store, mnt)
        self.mount.start()
        full = os.path.join(os.fsencode(mnt), b"full")

        def read(rel):
            try:
                return direct_read(os.path.join(full, rel), len(want[rel]))
            except OSError as e:
                return e.errno

        loaded = dirs[:3]
        for rel in want:
            if os.path.dirname(rel) in loaded:
                self.assertEqual(read(rel), want[rel])
        idx = os.path.join(store, "index.db")
        with open(idx, "r+b") as f:
            f.seek(4096)
            f.write(random.Random(3).randbytes(os.path.getsize(idx) - 4096))
        failed = set()
        for d in dirs[3:]:
            try:
                listed = set(os.listdir(os.path.join(full, d)))
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, d)
                failed.add(d)
                continue
            names = {os.path.basename(r) for r in want if os.path.dirname(r) == d}
            self.assertLessEqual(listed, names, "a damaged index listed other names")
        self.assertGreater(len(failed), 10, "the damage was hardly reached")
        for rel, data in want.items():
            d = os.path.dirname(rel)
            if d in loaded:
                self.assertEqual(read(rel), data, rel)
            elif d not in failed:
                self.assertIn(read(rel), (data, errno.EIO, errno.ENOENT), rel)
        print("\n[index] garbage over index.db from byte 4096 while mounted: %d of %d "
              "directories not loaded yet fail with EIO; the %d loaded are served" % (
                  len(failed), len(dirs) - len(loaded), len(loaded)), file=sys.stderr)
        self.assertIn("malformed", self.mount.stderr())
        self.assertTrue(self.mount.alive())
        rc = self.mount.unmount()
        self.assertEqual(rc, 0, "daemon exit status %r: %s" % (rc, self.mount.stderr()))


class KillUnderLoad(Fixture, unittest.TestCase):
    """kill -9 of the daemon while readers run (test_mount.py kills an idle one)."""

    @classmethod
    def setUpClass(cls):
        cls.make_fixture()

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def test_kill_9_while_reading_then_fusermount_and_remount(self):
        mnt = os.path.join(self.tmp, "mnt")
        m = mu.Mount(self.store, mnt)
        m2 = None
        readers = None
        try:
            m.start()
            readers = Readers(mnt, self.want, list(self.want), nthreads=6).start()
            time.sleep(1.5)
            before = readers.ok
            self.assertGreater(before, 20)
            self.assertEqual(m.signal(signal.SIGKILL), -signal.SIGKILL)
            time.sleep(1.0)
            self.assertTrue(readers.finish(20), "a reader hangs on the dead mount")
            self.assertEqual(readers.wrong, [], "wrong bytes before or after the kill")
            self.assertEqual(readers.eio, {}, "EIO from an intact store")
            errs = {e for (_, e) in readers.other}
            self.assertTrue(errs, "no reader saw the daemon die")
            self.assertLessEqual(errs, {errno.ENOTCONN, errno.ECONNABORTED}, errs)
            print("\n[kill -9] %d right reads before the kill, %d after it failed with %s; "
                  "no wrong bytes, no hang" % (before, sum(readers.other.values()),
                                               "/".join(errno.errorcode[e] for e in errs)),
                  file=sys.stderr)
            self.assertTrue(mu.is_dead_mount(mnt))
            mu.run([mu.FUSERMOUNT, "-u", mnt], check=0)
            self.assertFalse(os.path.ismount(mnt))
            m2 = mu.Mount(self.store, mnt).start()
            bad = [k for k in self.want
                   if direct_read(os.path.join(os.fsencode(mnt), k[0].encode(), k[1]),
                                  len(self.want[k])) != self.want[k]]
            self.assertEqual(bad, [], "files not served right after the remount")
            self.assertEqual(m2.unmount(), 0, m2.stderr())
        finally:
            if readers:
                readers.finish()
            m.cleanup()
            if m2:
                m2.cleanup()


def _load_worker(mnt, want, deadline, seed, queue):
    """Read random (view, file) pairs until @deadline: whole files or random ranges,
    buffered (page cache) or O_DIRECT (the daemon), each file opened and closed per
    read. Returns (reads, bytes checked, [problems])."""
    rng = random.Random(seed)
    keys = sorted(want)
    mnt = os.fsencode(mnt)
    reads = nbytes = 0
    bad = []
    while time.monotonic() < deadline:
        key = keys[rng.randrange(len(keys))]
        data = want[key]
        path = os.path.join(mnt, key[0].encode(), key[1])
        direct = rng.random() < 0.5
        try:
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
            try:
                if rng.random() < 0.3:
                    off, n = 0, len(data) + 1
                else:
                    off = rng.randrange(len(data) + 16)
                    n = rng.choice([1, 7, 512, 4096, 65536, rng.randrange(1, len(data) + 2)])
                got = os.pread(fd, n, off)
                if os.fstat(fd).st_size != len(data):
                    bad.append(("size", key))
            finally:
                os.close(fd)
        except OSError as e:
            bad.append((errno.errorcode.get(e.errno, e.errno), key))
            continue
        reads += 1
        nbytes += len(got)
        if got != data[off:off + n]:
            bad.append(("bytes", key, off, n))
    out = (reads, nbytes, bad[:10])
    if queue is not None:
        queue.put(out)
        return None
    return out


class LoadMixin:
    """Threads + processes of _load_worker over @want on a mounted store."""

    def run_load(self, mnt, want, pid, label):
        # Warm up: every file once, so that every record (and shard) descriptor the
        # daemon keeps is open before the first count.
        for key, data in sorted(want.items()):
            got = direct_read(os.path.join(os.fsencode(mnt), key[0].encode(), key[1]),
                              len(data))
            self.assertEqual(got, data, key)
        fds_before = fd_count(pid)
        st_before = proc_status(pid)
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        deadline = time.monotonic() + LOAD_SECONDS
        # processes first: forking after the threads start would copy a busy process
        procs = [ctx.Process(target=_load_worker, args=(mnt, want, deadline, 1000 + i, q))
                 for i in range(LOAD_PROCS)]
        for p in procs:
            p.start()
        results, lock = [], threading.Lock()

        def thread_main(seed):
            r = _load_worker(mnt, want, deadline, seed, None)
            with lock:
                results.append(r)

        threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(LOAD_THREADS)]
        for t in threads:
            t.start()
        peak_threads = 0
        while any(t.is_alive() for t in threads):
            peak_threads = max(peak_threads, int(proc_status(pid)["Threads"]))
            time.sleep(0.5)
        for t in threads:
            t.join()
        for p in procs:
            results.append(q.get(timeout=LOAD_SECONDS + 120))
        for p in procs:
            p.join(60)
            self.assertEqual(p.exitcode, 0)
        self.assertEqual(len(results), LOAD_THREADS + LOAD_PROCS)
        reads = sum(r[0] for r in results)
        nbytes = sum(r[1] for r in results)
        problems = [x for r in results for x in r[2]]
        # the readers closed everything; give the kernel's RELEASE requests a moment
        mu.wait_for(lambda: fd_count(pid) <= fds_before, timeout=5)
        fds_after = fd_count(pid)
        st = proc_status(pid)
        asan = uses_asan(pid)
        limit = int(os.environ.get("PCRFS_RSS_LIMIT_MB", "1024" if asan else "200"))
        print("\n[%s] %d threads + %d processes, %.0f s: %d reads, %.1f MB checked; daemon: "
              "fds %d -> %d, VmRSS %d -> %d kB, VmHWM %d kB (limit %d MB%s), threads %s -> "
              "peak %d" % (label, LOAD_THREADS, LOAD_PROCS, LOAD_SECONDS, reads, nbytes / 1e6,
                           fds_before, fds_after, kb(st_before["VmRSS"]), kb(st["VmRSS"]),
                           kb(st["VmHWM"]), limit, ", ASan" if asan else "",
                           st_before["Threads"], peak_threads), file=sys.stderr)
        self.assertEqual(problems, [], "wrong bytes, sizes or errors under load")
        self.assertGreater(reads, 100 * (LOAD_THREADS + LOAD_PROCS) * min(LOAD_SECONDS, 20) / 20,
                           "the load hardly read anything")
        self.assertEqual(fds_after, fds_before, "the daemon's descriptors grew under load")
        self.assertLess(kb(st["VmHWM"]), limit * 1024, "daemon peak RSS over the limit")
        return reads


class Load(Fixture, LoadMixin, unittest.TestCase):
    """16 threads + 4 processes over every view of a store: scan1..scanL, full and
    tokens."""

    @classmethod
    def setUpClass(cls):
        cls.make_fixture(tokens=True)

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def test_threads_and_processes_every_view(self):
        mnt = os.path.join(self.tmp, "mnt")
        m = mu.Mount(self.store, mnt)
        try:
            m.start()
            self.assertEqual(sorted(os.listdir(mnt)), sorted(self.views + [".pcrfs"]))
            self.run_load(mnt, self.want, m.proc.pid, "%d views" % len(self.views))
            st = json.loads(read_bytes(os.path.join(mnt, ".pcrfs", "stats")))
            self.assertEqual(st["errors"], 0, st)
            for v in self.views:
                self.assertGreater(st["views"][v]["reads"], 0, v)
            self.assertTrue(m.alive())
            self.assertEqual(m.unmount(), 0, m.stderr())
            self.assertEqual(m.stderr(), "", "the daemon logged something under load")
        finally:
            m.cleanup()


class DescriptorLimit(unittest.TestCase):
    """More records than the daemon's soft descriptor limit.

    The daemon keeps one descriptor per record it has used, for as long as it runs.
    ImageNet at the default 1,024 images per record has 1,252 records, and most
    sessions start with a soft RLIMIT_NOFILE of 1,024: the records past it failed
    with EIO ("Too many open files"), for good. Here: 80 records (one image each)
    under a soft limit of 48 and a hard limit of 4,096; every file must be served."""

    SOFT, HARD = 48, 4096

    def test_more_records_than_the_soft_fd_limit(self):
        import resource
        tmp = tempfile.mkdtemp(prefix="pcrfs-relfd-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        m = None
        try:
            src = os.path.join(tmp, "src")
            store = os.path.join(tmp, "store.pcr")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"),
                    "--out", src, "--classes", "4", "--per-class", "20", "--seed", "2",
                    "--manifest", src + ".json"], check=0)
            mu.build_store(src, store, per_record=1)
            nrec = len(os.listdir(os.path.join(store, "records")))
            self.assertGreater(nrec, 1.5 * self.SOFT)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            self.assertGreaterEqual(hard, self.HARD, "this test needs a hard limit >= %d" %
                                    self.HARD)
            m = mu.Mount(store, os.path.join(tmp, "mnt"))
            # the daemon inherits the limits of the process that starts it
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.SOFT, hard))
            try:
                m.start()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            full = os.path.join(os.fsencode(m.mnt), b"full")
            failed = []
            for dp, _, fns in os.walk(full):
                for fn in sorted(fns):
                    rel = os.path.relpath(os.path.join(dp, fn), full)
                    try:
                        got = read_bytes(os.path.join(dp, fn))
                    except OSError as e:
                        failed.append((rel, e.strerror))
                        continue
                    if got != mu.oracle(store, rel, "full"):
                        failed.append((rel, "wrong bytes"))
            self.assertEqual(failed, [], "%d of %d records failed: %s" % (
                len(failed), nrec, m.stderr()[:300]))
            self.assertGreater(fd_count(m.proc.pid), nrec)
            self.assertEqual(m.unmount(), 0, m.stderr())
        finally:
            if m:
                m.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
