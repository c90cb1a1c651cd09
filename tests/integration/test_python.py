#!/usr/bin/python3
"""The Python module `pcrfs` (python/pcrfs) against a real mount.

What each test asserts, and would be false if the feature broke:
- records(): /.pcrfs/records gives every file's record, as the index says;
- RecordSampler: every sample once per epoch (one rank), each record's samples inside
  one window of at most W records, the order fixed by (seed, epoch) and changing with
  the epoch; ranks get contiguous shares of equal length that cover every sample,
  sharing at most world_size - 1 records; records_for_epoch() lists them;
- every dataset shape groups by the index's records: a symlinked root, pathlib.Path
  samples, bare names from a working directory in the mount, Subset/random_split and
  ConcatDataset, samples partly off the mount, two mounts (never merged); tokens/ files
  and a plain directory are one record each;
- a DataLoader with 2 workers over ImageFolder + RecordSampler yields every sample, and
  with fork and spawn, with and without persistent workers, the sampler's order;
- three processes under torch.distributed (gloo over tcp://127.0.0.1) gather every
  sample exactly once per epoch;
- level()/set_level() on a mount without -o level and with bad values fail with the
  path, the value and the range, and leave the level as it was;
- pil_loader gives the pixels of torchvision's default loader, and sends the daemon no
  FUSE_IOCTL (isatty) where the default loader sends one per image;
- info/levels/level/set_level drive the dynamic view as /.pcrfs does;
- the module installs where /usr/bin/python3 imports it (meson's install plan).
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
import pcrfs  # noqa: E402

PER_RECORD = 4


class IndexDataset:
    """Yields its indices (a DataLoader's output is then the sampler's order); at
    module level so that spawned workers can unpickle it."""

    def __init__(self, ds):
        self.samples = ds.samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return i


class Module(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-py-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mount = None
        try:
            src = os.path.join(cls.tmp, "src")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"),
                    "--out", src, "--classes", "3", "--per-class", "9", "--seed", "5"], check=0)
            tok = os.path.join(cls.tmp, "tok")
            mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py"),
                    "--seed", "5", "-k", "300", "--grid", "8", "tree", src, tok], check=0)
            cls.store = os.path.join(cls.tmp, "store.pcr")
            mu.run([mu.program("MKPCRFS"), "-q", "-j", "2", "-n", str(PER_RECORD),
                    "--tokens", tok, src, cls.store], check=0)
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
        for n in (2, 3, 4, 5, 9, 40):
            for shuffle in (True, False):
                ss = [pcrfs.RecordSampler(ds, window=2, seed=3, rank=r, world_size=n,
                                          shuffle=shuffle) for r in range(n)]
                parts = [list(s) for s in ss]
                self.assertEqual({len(p) for p in parts}, {-(-len(ds) // n)})
                self.assertEqual({len(s) for s in ss}, {-(-len(ds) // n)})
                self.assertEqual(set().union(*parts), set(range(len(ds))), "every sample")
                self.assertEqual(sum(map(len, parts)) - len(ds), -len(ds) % n, "repeats")
                recsets = [{rec[i] for i in p} for p in parts]
                # contiguous shares: a record read by two ranks only at a boundary or
                # for the padding
                shared = sum(map(len, recsets)) - len(set().union(*recsets))
                self.assertLessEqual(shared, 2 * (n - 1))
                for r, s in enumerate(ss):
                    mine = s.records_for_epoch()
                    self.assertEqual({k[1] for k in mine}, recsets[r])
                    self.assertEqual({k[0] for k in mine}, {os.path.realpath(self.mnt)})
                dl = [list(pcrfs.RecordSampler(ds, window=2, seed=3, rank=r, world_size=n,
                                               drop_last=True, shuffle=shuffle))
                      for r in range(n)]
                self.assertEqual({len(p) for p in dl}, {len(ds) // n})
                self.assertEqual(len(set().union(*dl)), len(ds) // n * n)

    # ---- dataset shapes ------------------------------------------------------------

    def keys_by_index(self, ds):
        """The sampler's grouping of @ds as {index: record number or None}."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = pcrfs.RecordSampler(ds, seed=0)
        out = {}
        for key, idx in zip(s.keys, s.records):
            for i in idx:
                out[i] = key
        return s, out

    def test_dataset_shapes(self):
        from torch.utils.data import ConcatDataset, Subset, random_split
        from torchvision.datasets import ImageFolder
        ds = self.dataset()
        rec = self.record_of(ds)
        root = os.path.realpath(self.mnt)
        want = {i: (root, r) for i, r in enumerate(rec)}
        self.assertEqual(self.keys_by_index(ds)[1], want)
        # a symbolic link to the view
        link = os.path.join(self.tmp, "link-scan2")
        os.symlink(os.path.join(self.mnt, "scan2"), link)
        self.assertEqual(self.keys_by_index(ImageFolder(link))[1], want)
        self.assertEqual(pcrfs.find_mount(link), root)
        # pathlib.Path samples
        pds = self.dataset()
        pds.samples = [(pathlib.Path(p), t) for p, t in pds.samples]
        self.assertEqual(self.keys_by_index(pds)[1], want)
        # bare names, from a working directory inside the mount
        cls_dir = os.path.dirname(ds.samples[0][0])
        names = [i for i, (p, _) in enumerate(ds.samples) if os.path.dirname(p) == cls_dir]
        bare = IndexDataset(ds)
        bare.samples = [(os.path.basename(ds.samples[i][0]), 0) for i in names]
        old = os.getcwd()
        os.chdir(cls_dir)
        try:
            got = self.keys_by_index(bare)[1]
        finally:
            os.chdir(old)
        self.assertEqual(got, {j: want[i] for j, i in enumerate(names)})
        # Subset (random_split) and ConcatDataset, unwrapped to their indices
        a, b = random_split(ds, [10, len(ds) - 10])
        self.assertEqual(self.keys_by_index(b)[1],
                         {j: want[i] for j, i in enumerate(b.indices)})
        cat = ConcatDataset([a, Subset(ds, [3, 4])])
        s, got = self.keys_by_index(cat)
        self.assertEqual(got, {j: want[i] for j, i in enumerate(list(a.indices) + [3, 4])})
        self.assertEqual(sorted(s), list(range(len(cat))))
        # samples partly off the mount: a local copy first, then the mount's
        local = os.path.join(self.tmp, "local", "c")
        os.makedirs(local)
        for p, _ in ds.samples[:3]:
            shutil.copy(p, local)
        cat = ConcatDataset([ImageFolder(os.path.dirname(local)), ds])
        got = self.keys_by_index(cat)[1]
        self.assertEqual([got[i] for i in range(3)], [None] * 3)
        self.assertEqual({i - 3: k for i, k in got.items() if i >= 3}, want)
        # a local tree of symbolic links to the mount's files: each link followed
        links = os.path.join(self.tmp, "links", "c")
        os.makedirs(links)
        for i, (p, _) in enumerate(ds.samples):
            os.symlink(p, os.path.join(links, "%03d.JPEG" % i))
        self.assertEqual(self.keys_by_index(ImageFolder(os.path.dirname(links)))[1], want)

    def test_plain_directory_and_tokens(self):
        """Files in no record are one record each (the old sampler looked tokens/ ids
        up in the image records, and crashed on a plain directory), said in one
        warning when nothing at all is grouped."""
        from torchvision.datasets import DatasetFolder, ImageFolder
        toks = DatasetFolder(os.path.join(self.mnt, "tokens"), loader=lambda p: p,
                             extensions=(".tok",))
        self.assertEqual(len(toks), len(self.dataset()))
        st = os.stat(toks.samples[0][0])
        self.assertEqual(pcrfs.inode_parts(st.st_ino)[:2], (0x7F, True))
        self.assertIsNone(pcrfs.file_id(st.st_ino))
        # the token ids do collide with image ids listed in .pcrfs/records
        self.assertIn(pcrfs.inode_parts(st.st_ino)[2], self.record_of_id)
        plain = os.path.join(self.tmp, "plain", "c")
        os.makedirs(plain)
        for p, _ in self.dataset().samples[:5]:
            shutil.copy(p, plain)
        for ds in (toks, ImageFolder(os.path.dirname(plain))):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                s = pcrfs.RecordSampler(ds, seed=2, rank=1, world_size=2)
            self.assertEqual(len(w), 1, [str(x.message) for x in w])
            self.assertEqual(s.keys, [None] * len(ds))
            self.assertEqual(len(s.records), len(ds))
            self.assertEqual(len(list(s)), -(-len(ds) // 2))

    def test_two_mounts(self):
        """The same store on two mounts: the files share ids, never records."""
        from torch.utils.data import ConcatDataset
        from torchvision.datasets import ImageFolder
        mnt2 = os.path.join(self.tmp, "mnt-two")
        m = mu.Mount(self.store, mnt2)
        m.start()
        try:
            ds = self.dataset()
            rec = self.record_of(ds)
            cat = ConcatDataset([ds, ImageFolder(os.path.join(mnt2, "scan3"))])
            s, got = self.keys_by_index(cat)
            n = len(ds)
            self.assertEqual({i: k for i, k in got.items() if i < n},
                             {i: (os.path.realpath(self.mnt), r) for i, r in enumerate(rec)})
            self.assertEqual({i - n: k for i, k in got.items() if i >= n},
                             {i: (os.path.realpath(mnt2), r) for i, r in enumerate(rec)})
            self.assertEqual(len(s.records), 2 * len(set(rec)))
            # no level file on this mount: a one-line error naming the option
            for f in (lambda: pcrfs.level(mnt2), lambda: pcrfs.set_level(mnt2, 2)):
                with self.assertRaises(FileNotFoundError) as cm:
                    f()
                self.assertIn("-o level=K", str(cm.exception))
                self.assertIn(os.path.realpath(mnt2), str(cm.exception))
        finally:
            self.assertEqual(m.unmount(), 0, m.stderr())

    def test_dataloader_order(self):
        """fork and spawn, with and without persistent workers: the sampler's order."""
        import torch
        ds = IndexDataset(self.dataset())
        s = pcrfs.RecordSampler(ds, window=2, seed=9, rank=1, world_size=2)
        for ctx in ("fork", "spawn"):
            for persistent in (False, True):
                dl = torch.utils.data.DataLoader(ds, batch_size=3, sampler=s, num_workers=2,
                                                 multiprocessing_context=ctx,
                                                 persistent_workers=persistent)
                for epoch in (0, 1):
                    s.set_epoch(epoch)
                    got = torch.cat(list(dl)).tolist()
                    self.assertEqual(got, list(s), (ctx, persistent, epoch))
                del dl

    def test_distributed_gloo(self):
        """Three ranks under torch.distributed: all_gather of each rank's indices
        covers every sample exactly once per epoch (27 samples, 3 ranks)."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        script = os.path.join(self.tmp, "ddp.py")
        with open(script, "w") as f:
            f.write(DDP_SCRIPT)
        env = dict(os.environ, PYTHONPATH=os.path.join(mu.SRCROOT, "python"))
        procs = [subprocess.Popen([mu.PYTHON, script, str(r), str(port),
                                   os.path.join(self.mnt, "scan2")], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True) for r in range(3)]
        outs = []
        deadline = time.monotonic() + 180
        try:
            for p in procs:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
                outs.append((p.returncode, out, err))
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for rc, out, err in outs:
            self.assertEqual(rc, 0, err.decode(errors="replace")[-3000:])
        n = len(self.dataset())
        self.assertEqual(n % 3, 0)
        for line in outs[0][1].decode().splitlines():
            epoch, gathered = json.loads(line)
            self.assertEqual([len(g) for g in gathered], [n // 3] * 3, epoch)
            self.assertEqual(sorted(i for g in gathered for i in g), list(range(n)), epoch)
        self.assertEqual(len(outs[0][1].decode().splitlines()), 3)

    def test_errors_name_path_value_range(self):
        L = mu.store_levels(self.store)
        pcrfs.set_level(self.mnt, 3)
        for bad in (0, L + 1, -1, "2\nabc", "7\n8", "x", 2.5, True, "", None):
            with self.assertRaises(ValueError, msg=repr(bad)) as cm:
                pcrfs.set_level(self.mnt, bad)
            msg = str(cm.exception)
            self.assertIn(repr(bad), msg)
            self.assertIn("1..%d" % L, msg)
            self.assertIn(os.path.join(os.path.realpath(self.mnt), ".pcrfs", "level"), msg)
            self.assertEqual(pcrfs.level(self.mnt), 3, repr(bad))
        pcrfs.set_level(self.mnt, "full")
        self.assertEqual(pcrfs.level(self.mnt), L)
        pcrfs.set_level(self.mnt, " 2 ")
        self.assertEqual(pcrfs.level(self.mnt), 2)
        pcrfs.set_level(self.mnt, 3)
        junk = os.path.join(self.tmp, "junk.JPEG")
        with open(junk, "wb") as f:
            f.write(b"not an image at all")
        with self.assertRaises(OSError) as cm:
            pcrfs.pil_loader(junk)
        self.assertIn(junk, str(cm.exception))
        self.assertEqual(type(cm.exception).__name__, "UnidentifiedImageError")

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


DDP_SCRIPT = r"""
import datetime, json, sys
import torch.distributed as dist
from torchvision.datasets import ImageFolder
import pcrfs
rank, port, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + port, rank=rank,
                        world_size=3, timeout=datetime.timedelta(seconds=60))
s = pcrfs.RecordSampler(ImageFolder(root), window=2, seed=11)  # rank, world from dist
assert (s.rank, s.world_size) == (rank, 3)
for epoch in range(3):
    s.set_epoch(epoch)
    got = [None] * 3
    dist.all_gather_object(got, list(s))
    if rank == 0:
        print(json.dumps([epoch, got]))
dist.destroy_process_group()
"""


if __name__ == "__main__":
    unittest.main(verbosity=2)
