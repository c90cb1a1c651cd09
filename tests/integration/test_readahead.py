#!/usr/bin/python3
"""-o readahead=record on a local store: which records the store reads ahead
(pcrfs(1), -o readahead; src/lib/store/read.c, "reading record by record"), counted
by "records_advised" of /.pcrfs/stats.

A reader that goes record by record in an order of its own (RecordSampler shuffles the
files of a window of records together, so no two of its opens follow in file-id order)
gets each record it reads read ahead once most of what it opens lies in that record;
a reader spread over many records (a shuffle) gets nothing read ahead. Each test
mounts its own store and leaves nothing mounted.

Run by hand:  PCRFS_BUILD_DIR=/path/to/build /usr/bin/python3 test_readahead.py -v
"""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from test_mount import StoreFixture  # noqa: E402


class Readahead(StoreFixture, unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # 24 files: in 3 records of 8 (cls.store) and in 12 records of 2 (cls.many)
        cls.make_fixture(classes=4, per_class=6, seed=23, awkward=False, per_record=8)
        cls.many = os.path.join(cls.tmp, "many.pcr")
        mu.build_store(cls.src, cls.many, per_record=2)

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def mount(self, store, *options):
        """A mount of @store for a with block (unmounted at its end, whatever happens)."""
        self.mnt = os.path.join(self.tmp, "mnt-" + self._testMethodName)
        return mu.Mount(store, self.mnt, *options)

    def by_record(self, store):
        """{record: [relative path, ...] in file-id order} of @store, from a mount of
        its own (a file's id is the low 55 bits of its inode number: pcrfs(1))."""
        rec = mu.record_of_id(store)
        mnt = os.path.join(self.tmp, "mnt-ids")
        out = {}
        with mu.Mount(store, mnt):
            ids = {rel: os.stat(os.path.join(os.fsencode(mnt), b"full", rel)).st_ino &
                   ((1 << 55) - 1) for rel in self.files}
        for rel in sorted(self.files, key=ids.get):
            out.setdefault(rec[ids[rel]], []).append(rel)
        return out

    def advised_after(self, order, view="scan1"):
        """Read @order (relative paths) of @view whole, one file after another, and
        check the bytes; returns how many record prefixes the store advised."""
        for rel in order:
            with open(os.path.join(os.fsencode(self.mnt), os.fsencode(view), rel), "rb",
                      buffering=0) as f:
                self.assertEqual(f.read(), self.oracle(rel, view), rel)
        with open(os.path.join(self.mnt, ".pcrfs", "stats"), "rb") as f:
            return json.load(f)["records_advised"]

    def test_record_read_in_its_own_order_is_read_ahead(self):
        """A record's files in reverse id order (never two in file-id order: the
        scan-in-order rule cannot see it) make the record read ahead once 6 of the last
        opens lie in it: once for the record, and nothing without readahead=record.
        Fails without the rule: 0."""
        recs = self.by_record(self.store)
        self.assertGreaterEqual(len(recs), 3)
        first = sorted(recs)[0]
        order = list(reversed(recs[first]))
        self.assertGreaterEqual(len(order), 6)
        with self.mount(self.store, "-o", "readahead=record"):
            self.assertEqual(self.advised_after(order[:5]), 0)
            self.assertEqual(self.advised_after(order[5:]), 1)
        with self.mount(self.store):
            self.assertEqual(self.advised_after(order), 0)

    def test_record_advised_once_per_visit(self):
        """One record holds about 5.8 of every 64 opens (one in eleven; the rest from the
        other two records) for 330 opens, so its count goes below 6 and back again and
        again, as a record of a RecordSampler window does (8 records: ~8 of 64): it is
        read ahead once, not at every crossing; the other two once each. Every read
        reaches the daemon (its pages dropped after each: POSIX_FADV_DONTNEED, and none
        handed ahead: -o push=no). Fails with the advice at each crossing: 27 advised."""
        recs = self.by_record(self.store)
        a, b, c = sorted(recs)[:3]
        # (each record's files in reverse id order: the scan-in-order rule sees none)
        ra, rb, rc = (list(reversed(recs[x])) for x in (a, b, c))
        others = [x for pair in zip(rb, rc) for x in pair]
        order, k = [], 0
        for i in range(30):
            order.append(ra[i % len(ra)])
            for _ in range(10):
                order.append(others[k % len(others)])
                k += 1
        with self.mount(self.store, "-o", "readahead=record", "-o", "push=no"):
            for rel in order:
                p = os.path.join(os.fsencode(self.mnt), b"scan1", os.fsencode(rel))
                with open(p, "rb", buffering=0) as f:
                    self.assertEqual(f.read(), self.oracle(rel, "scan1"), rel)
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with open(os.path.join(self.mnt, ".pcrfs", "stats"), "rb") as f:
                stats = json.load(f)
            self.assertEqual(stats["records_advised"], 3)
            # (every read reached the daemon: otherwise the test shows nothing)
            self.assertGreaterEqual(stats["views"]["scan1"]["opens"], len(order))

    def test_hinted_records_counted(self):
        """Records named in .pcrfs/prefetch/ before the first open are advised at the
        first open's level, and records_advised counts them as it counts the others
        (one open of record 1 advises nothing of its own). Fails with the hint path
        uncounted: 0."""
        recs = self.by_record(self.store)
        first, *rest = sorted(recs)
        with self.mount(self.store, "-o", "readahead=record"):
            with self.assertRaises(FileNotFoundError):  # (the lookup is the hint)
                os.stat(os.path.join(self.mnt, ".pcrfs", "prefetch", ",".join(map(str, rest))))
            self.assertEqual(self.advised_after(recs[first][:1]), len(rest))

    # ---- -o dirahead: a directory's names ahead of its lookups (src/fuse/dirahead.c) ----

    def lookups(self, m):
        """LOOKUP requests the daemon (-d) has logged so far, less one per read of
        /.pcrfs/stats (a snapshot, looked up at every open: pcrfs(1)), and less the
        LOOKUP of /.pcrfs itself."""
        return m.stderr().count("opcode: LOOKUP") - self.polls - (self.polls > 0)

    def stats(self):
        self.polls += 1
        with open(os.path.join(self.mnt, ".pcrfs", "stats"), "rb") as f:
            return json.load(f)

    def dir_files(self):
        """(a class directory, [its files]) of the fixture, bytes."""
        by_dir = {}
        for rel in sorted(self.files):
            by_dir.setdefault(os.path.dirname(rel), []).append(rel)
        d = sorted(by_dir)[0]
        self.assertGreaterEqual(len(by_dir[d]), 4)
        return d, by_dir[d]

    def first_read_then_stats(self, *options):
        """Mount with @options (and -d), read one file of a directory, let a listing
        ahead finish, then stat and read the directory's other files: the LOOKUPs those
        sent, and the mount's dirahead stats."""
        d, files = self.dir_files()
        mnt = os.fsencode(os.path.join(self.tmp, "mnt-" + self._testMethodName))
        self.mnt = os.fsdecode(mnt)
        self.polls = 0
        with mu.Mount(self.store, self.mnt, "-d", *options) as m:
            with open(os.path.join(mnt, b"full", files[0]), "rb") as f:
                self.assertEqual(f.read(), self.oracle(files[0], "full"))
            want = 1 if self.stats()["dirahead"]["on"] else 0
            self.assertTrue(mu.wait_for(lambda: self.stats()["dirahead"]["listed"] >= want, 10))
            before = self.lookups(m)
            for rel in files[1:]:
                p = os.path.join(mnt, b"full", rel)
                self.assertEqual(os.stat(p).st_size, len(self.oracle(rel, "full")), rel)
                with open(p, "rb") as f:
                    self.assertEqual(f.read(), self.oracle(rel, "full"), rel)
            sent = self.lookups(m) - before
            stats = self.stats()["dirahead"]
        return sent, len(files) - 1, stats

    def test_dirahead_saves_the_lookups_of_a_directory(self):
        """With -o readahead=record the first file found in a directory has the daemon
        list it through the mount with attributes (READDIRPLUS): the directory's other
        files are then stat'ed and read without a LOOKUP each, with the right sizes and
        bytes. With -o dirahead=no every one of them sends its LOOKUP (and that is what
        fails without the listing ahead)."""
        sent, n, stats = self.first_read_then_stats("-o", "readahead=record")
        self.assertEqual(stats["on"], True)
        self.assertEqual((stats["listed"], stats["failed"]), (1, 0), stats)
        self.assertGreaterEqual(stats["entries"], n + 1)
        self.assertEqual(sent, 0)
        sent, n, stats = self.first_read_then_stats("-o", "readahead=record", "-o",
                                                    "dirahead=no")
        self.assertEqual((stats["on"], stats["listed"]), (False, 0), stats)
        self.assertEqual(sent, n)
        # asked for alone, without the records' readahead
        sent, n, stats = self.first_read_then_stats("-o", "dirahead=yes")
        self.assertEqual((stats["on"], stats["listed"], sent), (True, 1, 0), stats)
        # and off by default
        sent, n, stats = self.first_read_then_stats()
        self.assertEqual((stats["on"], sent), (False, n), stats)

    def test_dirahead_leaves_other_listings_as_readdirplus_says(self):
        """The connection asks READDIRPLUS for every listing once dirahead is on, but a
        user's listing keeps -o readdirplus='s answer: by default names only (the kernel
        enters no file, so the first stat after it is a LOOKUP, which then lists the
        directory ahead), with readdirplus=yes the attributes (no LOOKUP at all). Names
        and sizes are the same either way."""
        d, files = self.dir_files()
        names = sorted(os.path.basename(f) for f in files)
        for extra, want in (((), 1), (("-o", "readdirplus=yes"), 0)):
            mnt = os.fsencode(os.path.join(self.tmp, "mnt-rdp"))
            self.mnt = os.fsdecode(mnt)
            self.polls = 0
            with mu.Mount(self.store, self.mnt, "-d", "-o", "readahead=record", *extra) as m:
                top = os.path.join(mnt, b"full", d)
                self.assertEqual(sorted(os.listdir(top)), names, extra)
                before = self.lookups(m)
                for i, rel in enumerate(files):
                    self.assertEqual(os.stat(os.path.join(mnt, b"full", rel)).st_size,
                                     len(self.oracle(rel, "full")), rel)
                    if i == 0 and want:  # (that LOOKUP queued the listing ahead)
                        self.assertTrue(mu.wait_for(
                            lambda: self.stats()["dirahead"]["listed"] == 1, 10))
                self.assertEqual(self.lookups(m) - before, want, extra)
                # the user's listing, cached by the kernel, is still whole
                self.assertEqual(sorted(os.listdir(top)), names, extra)

    def test_dirahead_unmounts_cleanly_right_after_a_read(self):
        """A read and at once fusermount3 -u, 60 times: the listing ahead it started
        neither makes the unmount fail nor keeps the daemon from exiting 0 (root: the
        listing holds a detached copy of the mount, not the mount). Fails with the
        directory opened through the mount's path: 1 to 3 in 20 failed with EBUSY."""
        d, files = self.dir_files()
        mnt = os.path.join(self.tmp, "mnt-quick")
        busy = 0
        for i in range(60):
            m = mu.Mount(self.store, mnt, "-o", "readahead=record").start()
            try:
                rel = files[i % len(files)]
                with open(os.path.join(os.fsencode(mnt), b"full", rel), "rb") as f:
                    self.assertEqual(f.read(), self.oracle(rel, "full"))
                p = mu.run([mu.FUSERMOUNT, "-u", mnt])
                busy += p.returncode != 0
                if p.returncode == 0:
                    self.assertEqual(m.proc.wait(15), 0, m.stderr())
            finally:
                m.stop()
        self.assertEqual(busy, 0, "fusermount3 -u failed (EBUSY) %d of 60 times" % busy)

    # ---- -o push: files of a record read ahead handed to the page cache (src/fuse/push.c) ----

    def push_then_opens(self, *options):
        """Mount with @options, read the first three files of a directory in id order (the
        scan-in-order rule then reads their record ahead), after its listing ahead; wait
        for the daemon to hand files; then read the directory's other files: the READs at
        offset 0 those sent (the view's "opens") and the mount's push stats."""
        d, files = self.dir_files()
        self.assertGreaterEqual(len(self.by_record(self.store)[1]), len(files))
        mnt = os.fsencode(os.path.join(self.tmp, "mnt-" + self._testMethodName))
        self.mnt = os.fsdecode(mnt)
        self.polls = 0
        with mu.Mount(self.store, self.mnt, *options):
            for i, rel in enumerate(files[:3]):
                with open(os.path.join(mnt, b"full", rel), "rb") as f:
                    self.assertEqual(f.read(), self.oracle(rel, "full"), rel)
                if i == 0:  # (the kernel knows the directory's files before any is handed)
                    self.assertTrue(mu.wait_for(
                        lambda: self.stats()["dirahead"]["listed"] >= 1, 10))
            if self.stats()["push"]["on"]:
                self.assertTrue(mu.wait_for(
                    lambda: self.stats()["push"]["files"] >= len(files) - 3, 10),
                    self.stats()["push"])
            before = self.stats()["views"]["full"]["opens"]
            for rel in files[3:]:
                with open(os.path.join(mnt, b"full", rel), "rb") as f:
                    self.assertEqual(f.read(), self.oracle(rel, "full"), rel)
            stats = self.stats()
        return stats["views"]["full"]["opens"] - before, len(files) - 3, stats["push"]

    def test_push_hands_the_files_of_a_record_read_ahead(self):
        """With -o readahead=record, once a record is read ahead the daemon hands the
        files of the opened file's directory in it to the kernel: read afterwards, they
        send no READ, and their bytes are the oracle's. With -o push=no each is a READ
        (what fails without the handing)."""
        sent, n, push = self.push_then_opens("-o", "readahead=record")
        self.assertEqual(push["on"], True)
        # (and the two opened before the record was read ahead, which a visit of the
        # record does not count as its own: ahead.c)
        self.assertEqual((push["files"], push["unknown"], push["failed"]), (n + 2, 0, 0), push)
        self.assertGreater(push["bytes"], 0)
        self.assertEqual(sent, 0)
        sent, n, push = self.push_then_opens("-o", "readahead=record", "-o", "push=no")
        self.assertEqual((push["on"], push["files"]), (False, 0), push)
        self.assertEqual(sent, n)

    def test_reader_spread_over_records_gets_nothing_read_ahead(self):
        """One file of each of 12 records in turn (a shuffle over the store), in
        reverse id order within each: no record holds 6 of the last opens, nothing is
        read ahead."""
        recs = self.by_record(self.many)
        self.assertGreaterEqual(len(recs), 10)
        order = []
        for i in range(max(len(v) for v in recs.values())):
            for r in sorted(recs):
                files = list(reversed(recs[r]))
                if i < len(files):
                    order.append(files[i])
        # (the bytes of a file do not depend on its record: the oracle of cls.store)
        with self.mount(self.many, "-o", "readahead=record"):
            self.assertEqual(self.advised_after(order), 0)


if __name__ == "__main__":
    unittest.main()
