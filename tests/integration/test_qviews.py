#!/usr/bin/python3
"""The per-image quality views q90/ q95/ q99/ (pcrfs(1), -o quality=).

Asserts, for a store built with mkpcrfs --quality: every file of every qNN/ view has
exactly the bytes of scanK/ where K is the lowest level whose stored MS-SSIM (read
from index.db independently of the daemon) reaches the threshold, its stat size is
the bytes read, verbatim files are served unchanged; the views are listed in the root
and in /.pcrfs/info; -o quality= makes custom views and refuses bad lists (exit 2);
a store without a quality table gets no qNN/ views.
"""

import json
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

SCALE = 60000  # pcrfs(5): files.quality holds floor(MS-SSIM * 60000) per level


def read_bytes(p):
    with open(p, "rb", buffering=0) as f:
        return f.read()


class QualityViews(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-q-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mounts = []
        try:
            cls.src = os.path.join(cls.tmp, "src")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"),
                    "--out", cls.src, "--classes", "2", "--per-class", "6", "--seed", "9",
                    "--awkward"], check=0)
            cls.store = os.path.join(cls.tmp, "q.pcr")
            mu.run([mu.program("MKPCRFS"), "-q", "--quality", cls.src, cls.store], check=0)
            cls.L = mu.store_levels(cls.store)
            db = sqlite3.connect("file:%s/index.db?immutable=1" % cls.store, uri=True)
            cls.rows = db.execute("SELECT id, kind, quality FROM files").fetchall()
            db.close()
            cls.mnt = cls.mount(cls.store, "mnt")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def mount(cls, store, name, *opts):
        m = mu.Mount(store, os.path.join(cls.tmp, name), *opts)
        m.start()
        cls.mounts.append(m)
        return m.mnt

    @classmethod
    def tearDownClass(cls):
        for m in getattr(cls, "mounts", []):
            m.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def level_for(self, quality, t):
        """The lowest level whose stored value reaches @t, else L (pcrfs(5))."""
        vals = struct.unpack("<%dH" % (len(quality) // 2), quality)
        for k, v in enumerate(vals, 1):
            if v >= round(t * SCALE):
                return k
        return self.L

    def files(self, mnt, view):
        out = {}
        root = os.path.join(mnt, view)
        for dp, _, fns in os.walk(root):
            for fn in fns:
                p = os.path.join(dp, fn)
                out[os.path.relpath(p, root)] = p
        return out

    def test_views_listed(self):
        self.assertTrue({"q90", "q95", "q99"} <= set(os.listdir(self.mnt)))
        info = json.loads(read_bytes(os.path.join(self.mnt, ".pcrfs", "info")))
        self.assertTrue({"q90", "q95", "q99"} <= set(info["views"]))

    def test_bytes_are_the_chosen_level(self):
        byid = {i: (kind, q) for i, kind, q in self.rows}
        self.assertTrue(any(kind == 1 and q for kind, q in byid.values()), "no quality data")
        levels_used = set()
        for view, t in (("q90", 0.90), ("q95", 0.95), ("q99", 0.99)):
            for rel, p in self.files(self.mnt, view).items():
                fid = os.stat(p).st_ino & ((1 << 55) - 1)
                kind, q = byid[fid]
                k = self.level_for(q, t) if kind == 1 and q else self.L
                levels_used.add(k)
                want = read_bytes(os.path.join(self.mnt, "scan%d" % k, rel))
                got = read_bytes(p)
                self.assertEqual(got, want, "%s/%s: not scan%d's bytes" % (view, rel, k))
                self.assertEqual(os.stat(p).st_size, len(got), "%s/%s: size" % (view, rel))
        self.assertGreater(len(levels_used), 1, "every file at one level: nothing per-image")
        # the same tree as full/
        self.assertEqual(set(self.files(self.mnt, "q95")), set(self.files(self.mnt, "full")))

    def test_custom_thresholds_and_errors(self):
        mnt = self.mount(self.store, "mnt-custom", "-o", "quality=0.97:0.995")
        names = set(os.listdir(mnt))
        self.assertTrue({"q97", "q99.5"} <= names, names)
        self.assertNotIn("q95", names)
        for bad in ("quality=1.5", "quality=abc", "quality=0.9:0.9", "quality=0"):
            d = os.path.join(self.tmp, "mnt-bad")
            os.makedirs(d, exist_ok=True)
            p = mu.run([mu.program("PCRFS"), self.store, d, "-f", "-o", bad], timeout=30)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertEqual(p.stderr.count(b"\n"), 1, p.stderr)
        none = self.mount(self.store, "mnt-none", "-o", "quality=none")
        self.assertFalse([n for n in os.listdir(none) if n.startswith("q")])

    def test_store_without_quality_has_no_qviews(self):
        store = os.path.join(self.tmp, "plain.pcr")
        mu.run([mu.program("MKPCRFS"), "-q", self.src, store], check=0)
        mnt = self.mount(store, "mnt-plain")
        self.assertFalse([n for n in os.listdir(mnt) if n.startswith("q")])


if __name__ == "__main__":
    unittest.main(verbosity=2)
