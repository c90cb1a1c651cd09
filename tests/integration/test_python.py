#!/usr/bin/python3
"""The Python module `pcrfs` (python/pcrfs) against a real mount.

What each test asserts, and would be false if the feature broke:
- records(): /.pcrfs/records gives every file's record, as the index says;
- RecordSampler: every sample once per epoch (one rank), each record's samples inside
  one window of at most W records, the order fixed by (seed, epoch) and changing with
  the epoch; ranks get disjoint records and equal lengths;
- a DataLoader with 2 workers over ImageFolder + RecordSampler yields every sample;
- pil_loader gives the pixels of torchvision's default loader, and sends the daemon no
  FUSE_IOCTL (isatty) where the default loader sends one per image;
- info/levels/level/set_level drive the dynamic view as /.pcrfs does;
- the module installs where /usr/bin/python3 imports it (meson's install plan).
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
import pcrfs  # noqa: E402

PER_RECORD = 4


class Module(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-py-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mount = None
        try:
            src = os.path.join(cls.tmp, "src")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"),
                    "--out", src, "--classes", "3", "--per-class", "9", "--seed", "5"], check=0)
            cls.store = os.path.join(cls.tmp, "store.pcr")
            mu.build_store(src, cls.store, per_record=PER_RECORD)
            cls.mnt = os.path.join(cls.tmp, "mnt")
            cls.mount = mu.Mount(cls.store, cls.mnt, "-o", "level=3")
            cls.mount.start()
            db = sqlite3.connect("file:%s/index.db?immutable=1" % cls.store, uri=True)
            cls.record_of_id = dict(db.execute("SELECT id, record FROM files"))
            db.close()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.mount:
            cls.mount.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dataset(self, view="scan2"):
        from torchvision.datasets import ImageFolder
        return ImageFolder(os.path.join(self.mnt, view))

    def record_of(self, ds):
        """index in @ds -> record, from the index (the oracle)."""
        out = []
        for path, _ in ds.samples:
            fid = os.stat(path).st_ino & ((1 << 55) - 1)
            out.append(self.record_of_id[fid])
        return out

    def test_records_file(self):
        runs = pcrfs.records(self.mnt)
        got = {}
        for first, count, rec in runs:
            for fid in range(first, first + count):
                got[fid] = rec
        self.assertEqual(got, self.record_of_id)
        self.assertGreaterEqual(len({r for _, _, r in runs}), 6)
        # records hold PER_RECORD files each (the last may hold fewer)
        self.assertTrue(all(c <= PER_RECORD for _, c, _ in runs))
        st = os.stat(os.path.join(self.mnt, ".pcrfs", "records"))
        with open(os.path.join(self.mnt, ".pcrfs", "records"), "rb") as f:
            self.assertEqual(len(f.read()), st.st_size)

    def test_file_id(self):
        path = self.dataset().samples[0][0]
        self.assertIsNotNone(pcrfs.file_id(os.stat(path).st_ino))
        self.assertIsNone(pcrfs.file_id(os.stat(os.path.dirname(path)).st_ino))
        self.assertIsNone(pcrfs.file_id(os.stat(os.path.join(self.mnt, ".pcrfs", "info")).st_ino))

    def test_sampler_one_rank(self):
        ds = self.dataset()
        rec = self.record_of(ds)
        for window in (1, 2, 3):
            s = pcrfs.RecordSampler(ds, window=window, seed=7)
            order = list(s)
            self.assertEqual(sorted(order), list(range(len(ds))), "every sample once")
            self.assertEqual(len(s), len(ds))
            # cut the order where the set of records seen reaches window + 1
            blocks, cur = [], []
            for i in order:
                if rec[i] not in {rec[j] for j in cur} and \
                        len({rec[j] for j in cur}) == window:
                    blocks.append(cur)
                    cur = []
                cur.append(i)
            blocks.append(cur)
            seen = set()
            for b in blocks:
                recs = {rec[i] for i in b}
                self.assertLessEqual(len(recs), window)
                self.assertFalse(recs & seen, "a record split over two windows (W=%d)" % window)
                seen |= recs
            self.assertEqual(seen, set(rec))

    def test_sampler_epochs_and_seed(self):
        ds = self.dataset()
        a = pcrfs.RecordSampler(ds, window=2, seed=1)
        b = pcrfs.RecordSampler(ds, window=2, seed=1)
        self.assertEqual(list(a), list(b))
        first = list(a)
        a.set_epoch(1)
        self.assertNotEqual(list(a), first)
        b.set_epoch(1)
        self.assertEqual(list(a), list(b))
        c = pcrfs.RecordSampler(ds, window=2, seed=1, shuffle=False)
        rec = self.record_of(ds)
        order = list(c)
        self.assertEqual([rec[i] for i in order], sorted(rec[i] for i in order),
                         "without shuffle: records in store order")

    def test_sampler_ranks(self):
        ds = self.dataset()
        rec = self.record_of(ds)
        n = 3
        parts = [list(pcrfs.RecordSampler(ds, window=2, seed=3, rank=r, world_size=n))
                 for r in range(n)]
        self.assertEqual({len(p) for p in parts}, {-(-len(ds) // n)})
        recsets = [{rec[i] for i in p} for p in parts]
        for i in range(n):
            for j in range(i + 1, n):
                self.assertFalse(recsets[i] & recsets[j], "ranks share a record")
        self.assertEqual(set().union(*recsets), set(rec))
        dl = [list(pcrfs.RecordSampler(ds, window=2, seed=3, rank=r, world_size=n,
                                       drop_last=True)) for r in range(n)]
        self.assertEqual({len(p) for p in dl}, {len(ds) // n})

    def test_dataloader(self):
        import torch
        from torchvision import transforms
        from torchvision.datasets import ImageFolder
        ds = ImageFolder(os.path.join(self.mnt, "scan5"), loader=pcrfs.pil_loader,
                         transform=transforms.Compose([transforms.Resize((32, 32)),
                                                       transforms.PILToTensor()]))
        s = pcrfs.RecordSampler(ds, window=2, seed=0)
        dl = torch.utils.data.DataLoader(ds, batch_size=5, sampler=s, num_workers=2)
        targets = torch.cat([t for _, t in dl]).tolist()
        self.assertEqual(sorted(targets), sorted(ds.targets))

    def test_pil_loader(self):
        from torchvision.datasets.folder import pil_loader
        for path, _ in self.dataset("full").samples[:6]:
            a, b = pcrfs.pil_loader(path), pil_loader(path)
            self.assertEqual((a.mode, a.size), (b.mode, b.size))
            self.assertEqual(a.tobytes(), b.tobytes())

    def test_pil_loader_sends_no_ioctl(self):
        """torchvision's loader opens with CPython's buffered open(), whose isatty() is
        a FUSE_IOCTL round trip per image; pcrfs.pil_loader sends none (pcrfs(1),
        "Python loaders"). Counted in the daemon's -d log, warm, on a read-only mount."""
        from torchvision.datasets import ImageFolder
        from torchvision.datasets.folder import pil_loader
        mnt = os.path.join(self.tmp, "mnt-d")
        m = mu.Mount(self.store, mnt, "-d")
        m.start()
        try:
            paths = [p for p, _ in ImageFolder(os.path.join(mnt, "scan2")).samples[:5]]
            for p in paths:  # warm: pages, names and attributes in the kernel
                pcrfs.pil_loader(p)
            n0 = m.stderr().count("opcode: IOCTL")
            for p in paths:
                pcrfs.pil_loader(p)
            n1 = m.stderr().count("opcode: IOCTL")
            for p in paths:
                pil_loader(p)
            n2 = m.stderr().count("opcode: IOCTL")
        finally:
            m.cleanup()
        self.assertEqual(n1 - n0, 0)
        self.assertEqual(n2 - n1, len(paths))  # the control: the count does see them

    def test_levels_and_dynamic(self):
        L = mu.store_levels(self.store)
        self.assertEqual(pcrfs.levels(self.mnt), L)
        self.assertEqual(pcrfs.info(os.path.join(self.mnt, "scan1"))["levels"], L)
        self.assertEqual(pcrfs.level(self.mnt), 3)
        pcrfs.set_level(self.mnt, 5)
        self.assertEqual(pcrfs.level(self.mnt), 5)
        with open(os.path.join(self.mnt, ".pcrfs", "level")) as f:
            self.assertEqual(f.read().strip(), "5")
        rel = os.path.relpath(self.dataset().samples[0][0], os.path.join(self.mnt, "scan2"))
        self.assertEqual(os.path.getsize(os.path.join(self.mnt, "dynamic", rel)),
                         os.path.getsize(os.path.join(self.mnt, "scan5", rel)))
        pcrfs.set_level(self.mnt, 3)
        self.assertIn("views", pcrfs.stats(self.mnt))
        with self.assertRaises(ValueError):
            pcrfs.find_mount(self.tmp)

    def test_readahead_record_same_bytes(self):
        """-o readahead=record (the kernel asked to read each record's prefix on its
        first read) serves the same bytes, read in RecordSampler order."""
        mnt2 = os.path.join(self.tmp, "mnt-ra")
        m = mu.Mount(self.store, mnt2, "-o", "readahead=record")
        m.start()
        try:
            for view in ("scan1", "scan5", "full"):
                ds = self.dataset(view)
                for i in pcrfs.RecordSampler(ds, window=2, seed=4):
                    path = ds.samples[i][0]
                    with open(path, "rb") as a, open(os.path.join(
                            mnt2, os.path.relpath(path, self.mnt)), "rb") as b:
                        self.assertEqual(a.read(), b.read(), path)
        finally:
            self.assertEqual(m.unmount(), 0, m.stderr())

    def test_installed_where_python_imports(self):
        """meson installs the module into a directory /usr/bin/python3 searches."""
        p = subprocess.run(["meson", "introspect", "--installed", mu.build_dir()],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        dest = [v for k, v in json.loads(p.stdout).items()
                if k.endswith(os.path.join("python", "pcrfs", "__init__.py"))]
        self.assertEqual(len(dest), 1, dest)
        pkgdir = os.path.dirname(os.path.dirname(dest[0]))
        prefix = pkgdir.split("/lib/")[0]
        if prefix in ("/usr", "/usr/local"):
            path = subprocess.run([mu.PYTHON, "-c", "import sys; print('\\n'.join(sys.path))"],
                                  stdout=subprocess.PIPE, check=True).stdout.decode().split()
            self.assertIn(pkgdir, path)


if __name__ == "__main__":
    unittest.main(verbosity=2)
