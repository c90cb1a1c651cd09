#!/usr/bin/python3
"""Building a store through the library (pcrfs_build(), pcrfs(3) BUILDING A
STORE), called directly with ctypes through pcrfs.build(), not through mkpcrfs.

What each test asserts, and would be false if the feature broke:
- a store built by pcrfs.build() with the options mkpcrfs passes serves the same
  full/ and scan5/ tree, names and bytes as the store mkpcrfs builds from the same
  tree (read back with pcrfs.Store), and its index and record files are the same
  bytes;
- the progress callback sees the walk and the transcode, with the transcode's
  final call at done == total;
- a nonzero return of the progress callback, in the walk or in the middle of the
  transcode, cancels the build: OSError(ECANCELED), no STORE and nothing else left
  beside it (no temporary directory);
- a bad option value fails with EINVAL and mkpcrfs's message, before anything is
  created.
"""

import errno
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

sys.path.insert(0, os.path.join(common.SRCROOT, "python"))
import pcrfs  # noqa: E402

CREATED = "1700000000"


def tree(store, view):
    """{path under @view: bytes} of every file of @view, read through the library."""
    out = {}
    todo = [view]
    while todo:
        d = todo.pop()
        for name in store.listdir(d):
            p = d + "/" + name
            if store.stat(p).is_dir:
                todo.append(p)
            else:
                out[p] = store.read(p)
    return out


class BuildApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = common.TempDir()
        cls.src = os.path.join(cls.tmp.path, "src")
        common.make_dataset(cls.src, classes=3, per_class=7, seed=41)
        cls.mk = os.path.join(cls.tmp.path, "mk.pcrfs")
        env = dict(os.environ, SOURCE_DATE_EPOCH=CREATED)
        common.run([common.program("MKPCRFS"), "-q", "-j", "2", "-n", "5", cls.src, cls.mk],
                   check=0, env=env, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def out_dir(self, name):
        d = os.path.join(self.tmp.path, name)
        os.mkdir(d)
        return d

    def test_same_store_as_mkpcrfs(self):
        out = os.path.join(self.out_dir("api"), "api.pcrfs")
        seen = []

        def progress(stage, done, total, nbytes, total_bytes):
            seen.append((stage, done, total))
            return False

        pcrfs.build(self.src, out, progress=progress, jobs=2, per_record=5, created=CREATED)
        stages = {s for s, _, _ in seen}
        self.assertIn("walk", stages)
        self.assertIn("transcode", stages)
        last = [x for x in seen if x[0] == "transcode"][-1]
        self.assertEqual(last[1], last[2])
        self.assertEqual(last[2], 21)
        with pcrfs.Store(self.mk) as a, pcrfs.Store(out) as b:
            for view in ("full", "scan5"):
                ta, tb = tree(a, view), tree(b, view)
                self.assertEqual(len(ta), 21, view)
                self.assertEqual(sorted(ta), sorted(tb), view)
                for p in ta:
                    self.assertEqual(ta[p], tb[p], p)
        # the store itself, index and records: the same bytes (a build depends on SRC
        # and the options alone)
        fa, da = common.tree_files(self.mk)
        fb, db = common.tree_files(out)
        self.assertEqual(sorted(fa), sorted(fb))
        self.assertEqual(da, db)
        self.assertIn(b"index.db", fa)
        self.assertGreaterEqual(len(fa), 6)  # the index and 5 records of 5 images
        for rel in fa:
            self.assertEqual(common.read(fa[rel]), common.read(fb[rel]), rel)

    def cancelled(self, when):
        parent = self.out_dir("cancel-" + when)
        out = os.path.join(parent, "c.pcrfs")
        calls = []

        def progress(stage, done, total, nbytes, total_bytes):
            calls.append(stage)
            return stage == when and (when == "walk" or done >= 7)

        with self.assertRaises(OSError) as cm:
            pcrfs.build(self.src, out, progress=progress, jobs=2, per_record=5)
        self.assertEqual(cm.exception.errno, errno.ECANCELED)
        self.assertIn(when, calls)
        self.assertFalse(os.path.exists(out))
        self.assertEqual(os.listdir(parent), [])  # no temporary directory either

    def test_cancel_in_walk(self):
        self.cancelled("walk")

    def test_cancel_in_transcode(self):
        self.cancelled("transcode")

    def test_bad_option(self):
        parent = self.out_dir("bad")
        out = os.path.join(parent, "b.pcrfs")
        with self.assertRaises(OSError) as cm:
            pcrfs.build(self.src, out, jobs=0)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("--jobs=0: want a whole number 1..1024", str(cm.exception))
        with self.assertRaises(OSError) as cm:
            pcrfs.build(self.src, out, no_such_option=1)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("no_such_option: not a build option", str(cm.exception))
        self.assertEqual(os.listdir(parent), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
