#!/usr/bin/python3
"""refurb/ (pcrfs -o refurb=R) through real mounts: the refurbishing view.

What each class asserts, and would be false if the feature broke:
  Eviction     reading every file of refurb/ 2R passes (R = 2 and 3, a new shuffled
               order each pass): from the second pass on, the number of files whose
               version changed is floor(N/R) or ceil(N/R); every file's versions run
               0, 1, 2, ... with the first lasting 1..R opens and every later one
               exactly R (the last may be cut by the end); the same version is the
               same bytes, versions with different crops are different bytes (so the
               page cache never served an old open's bytes); /.pcrfs/stats counts the
               opens and the passes; stat costs no open.
  Crops        over ~1600 opens the crop boxes (user.pcrfs.refurb after each open)
               have torchvision's RandomResizedCrop.get_params distribution (two-sample
               KS on area fraction and log aspect ratio against torchvision's own draws
               for the same image sizes, p > 0.001) and a flip rate near 1/2; the
               pixels of each file equal Pillow's crop(box).resize((S, S), BILINEAR)
               (+ mirror) of the image decoded at the view's level (full, and level 3
               against scan3/), PSNR >= 35 dB (doc/REFURB.md's bound for DCT scaling).
  Folder       ImageFolder(MNT/refurb) with flip + ToTensor + Normalize and a
               DataLoader with 2 workers yields every JPEG once as 3 x S x S; the
               verbatim files are absent (lookup and listing) and listed with their
               reason in /.pcrfs/refurb_skipped, counted in /.pcrfs/info; a directory
               of 200 entries, every other one left out, lists exactly the JPEGs over
               several READDIRPLUS calls.
  Concurrency  6 threads (whole-file and 4 kB reads) and a DataLoader with 4 workers
               read refurb/ at once while passes roll over, with a cache far smaller
               than the set: every read of a whole file is a PPM equal to one clean
               version (the versions a single reader gets from a fresh mount with the
               same seed), the cache stays within its bound and the daemon's RSS
               within 200 MB.
  Lifecycle    the same seed and access order give the same bytes, after a remount
               too (state survives nothing: pass 1 again), another seed other bytes; a
               JPEG whose record is damaged fails its open with EIO and stays listed;
               bad options are usage errors (exit 2).
"""

import ctypes
import errno
import hashlib
import json
import math
import os
import random
import shutil
import struct
import sys
import threading
import time
import unittest

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mount_util as mu  # noqa: E402
from test_refurb_lib import ks_2samp, psnr  # noqa: E402

S = 224
PPM_LEN = len(b"P6\n224 224\n255\n") + S * S * 3
PSNR_MIN = 35.0
KS_ALPHA = 1e-3

TMP = None
STORE = None
SRC = None
DOC = None


def setUpModule():
    global TMP, STORE, SRC, DOC
    TMP = common.TempDir("pcrfs-refurbview-")
    SRC = os.path.join(TMP.path, "src")
    DOC = common.make_dataset(SRC, 4, 10, seed=3, awkward=True, size=400)
    STORE = os.path.join(TMP.path, "store")
    mu.build_store(SRC, STORE)


def tearDownModule():
    TMP.cleanup()


def jpeg_entries():
    """Files the store holds as JPEGs (a symlink to one included): refurb/ serves them."""
    return sorted(e["rel"] for e in DOC["entries"] if e["expect"] == "jpeg")


def verbatim_entries():
    return sorted(e["rel"] for e in DOC["entries"] if e["expect"] == "verbatim")


class Mounted:
    """pcrfs STORE MNT -o refurb=... in the foreground; always unmounted."""

    n = 0

    def __init__(self, *opts, store=None):
        Mounted.n += 1
        self.mnt = os.path.join(TMP.path, "mnt%d" % Mounted.n)
        self.m = mu.Mount(store or STORE, self.mnt, "-o", ",".join(opts))

    def __enter__(self):
        self.m.start()
        return self

    def __exit__(self, *exc):
        rc = self.m.unmount() if self.m.alive() else None
        self.m.cleanup()
        if exc[0] is None:
            assert rc == 0, "daemon exit %r: %s" % (rc, self.m.stderr())

    def path(self, *parts):
        return os.path.join(os.fsencode(self.mnt), *[os.fsencode(p) for p in parts])

    def files(self):
        """Every file of refurb/, as paths relative to it (bytes), sorted."""
        root = self.path("refurb")
        out = []
        for d, _, names in os.walk(root):
            out += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return sorted(out)

    def json(self, name):
        with open(self.path(".pcrfs", name), "rb") as f:
            return json.loads(f.read())

    def stats(self):
        return self.json("stats")["refurb"]

    def info(self):
        return self.json("info")["refurb"]

    def read(self, rel):
        with open(os.path.join(self.path("refurb"), rel), "rb") as f:
            return f.read()

    def params(self, rel, nxt=False):
        name = "user.pcrfs.refurb_next" if nxt else "user.pcrfs.refurb"
        v = os.getxattr(os.path.join(self.path("refurb"), rel), name)
        return tuple(int(x) for x in v.split())  # version top left h w flip

    def daemon_rss_kb(self):
        with open("/proc/%d/status" % self.m.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def check_ppm(test, data, size=S):
    head = b"P6\n%d %d\n255\n" % (size, size)
    test.assertTrue(data.startswith(head), data[:20])
    test.assertEqual(len(data), len(head) + size * size * 3)


def md5(b):
    return hashlib.md5(b).hexdigest()


class Eviction(unittest.TestCase):
    def run_passes(self, r):
        with Mounted("refurb=%d" % r, "refurb_seed=5") as m:
            files = m.files()
            n = len(files)
            self.assertEqual(files, sorted(rel + b".ppm" for rel in jpeg_entries()))
            # stat gives the exact size and costs no open
            for f in files:
                self.assertEqual(os.stat(os.path.join(m.path("refurb"), f)).st_size, PPM_LEN)
            self.assertEqual(m.stats()["opens"], 0)
            rng = random.Random(r)
            vers = {f: [] for f in files}
            boxes = {f: [] for f in files}
            hashes = {f: [] for f in files}
            for _ in range(2 * r):
                order = list(files)
                rng.shuffle(order)
                for f in order:
                    nxt = m.params(f, nxt=True)
                    data = m.read(f)
                    check_ppm(self, data)
                    got = m.params(f)
                    self.assertEqual(got, nxt, "refurb_next named another version than the open got")
                    vers[f].append(got[0])
                    boxes[f].append(got[1:])
                    hashes[f].append(md5(data))
            st = m.stats()
            self.assertEqual(st["opens"], 2 * r * n)
            self.assertEqual(st["passes"], 2 * r)
            self.assertEqual(st["files"], n)
            self.assertGreater(st["prepared"], 0)
            # one version per sample in the cache (the last open of a version drops
            # it), so the default cache never evicts (whether the threads kept up with
            # this reader, which does nothing but open, is timing: not asserted)
            self.assertLessEqual(st["cached"], n)
            self.assertEqual(st["evicted"], 0)
        lo, hi = n // r, -(-n // r)
        for p in range(1, 2 * r):
            changed = sum(1 for f in files if vers[f][p] != vers[f][p - 1])
            self.assertIn(changed, (lo, hi), "pass %d: %d of %d files changed (r=%d)" % (
                p, changed, n, r))
            # from outside: the bytes changed exactly where a version with another crop
            # came, and nowhere else
            # (but for the 1x1 image, whose every crop and flip is the same pixel)
            real = [f for f in files if b"1x1" not in f]
            by_bytes = sum(1 for f in real if hashes[f][p] != hashes[f][p - 1])
            by_box = sum(1 for f in real if boxes[f][p] != boxes[f][p - 1])
            self.assertEqual(by_bytes, by_box, "pass %d" % p)
        for f in files:
            v = vers[f]
            runs = []
            for x in v:
                if runs and runs[-1][0] == x:
                    runs[-1][1] += 1
                else:
                    runs.append([x, 1])
            self.assertEqual([x for x, _ in runs], list(range(len(runs))), f)
            self.assertTrue(1 <= runs[0][1] <= r, (f, v))
            for x, k in runs[1:-1]:
                self.assertEqual(k, r, (f, v))
            self.assertLessEqual(runs[-1][1], r, (f, v))
            by_version = {}
            for x, h in zip(v, hashes[f]):
                by_version.setdefault(x, set()).add(h)
            self.assertTrue(all(len(s) == 1 for s in by_version.values()), f)

    def test_balanced_r2(self):
        self.run_passes(2)

    def test_balanced_r3(self):
        self.run_passes(3)


def torch_params(sizes, seed=0):
    import torch
    import torchvision.transforms as T
    torch.manual_seed(seed)
    out = []
    for w, h in sizes:
        img = torch.empty((1, h, w), dtype=torch.uint8)
        out.append(T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3]))
    return np.array(out, dtype=np.int64)  # top left h w


def reference(data, top, left, h, w, flip):
    im = Image.open(__import__("io").BytesIO(data)).convert("RGB")
    out = im.crop((left, top, left + w, top + h)).resize((S, S), Image.BILINEAR)
    if flip:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(out)


class Crops(unittest.TestCase):
    def test_distribution_matches_torchvision(self):
        photos = [rel for rel in jpeg_entries() if os.path.basename(rel).startswith(b"n0000")]
        sizes = {}
        for rel in photos:
            with Image.open(os.path.join(os.fsencode(SRC), rel)) as im:
                sizes[rel] = im.size
        draws, dims = [], []
        with Mounted("refurb=1", "refurb_size=16", "refurb_threads=0", "refurb_seed=11") as m:
            for _ in range(40):
                for rel in photos:
                    p = os.path.join(m.path("refurb"), rel + b".ppm")
                    os.close(os.open(p, os.O_RDONLY))  # the open renders; no read needed
                    draws.append(m.params(rel + b".ppm"))
                    dims.append(sizes[rel])
            self.assertEqual(m.stats()["opens"], 40 * len(photos))
        ours = np.array(draws, dtype=np.int64)  # version top left h w flip
        theirs = torch_params(dims)
        area = np.array([w * h for w, h in dims], dtype=np.float64)
        self.assertTrue(np.all(ours[:, 1] + ours[:, 3] <= [h for _, h in dims]))
        self.assertTrue(np.all(ours[:, 2] + ours[:, 4] <= [w for w, _ in dims]))
        for what, a, b in (("area fraction", ours[:, 3] * ours[:, 4] / area,
                            theirs[:, 2] * theirs[:, 3] / area),
                           ("log aspect", np.log(ours[:, 4] / ours[:, 3]),
                            np.log(theirs[:, 3] / theirs[:, 2]))):
            d, p = ks_2samp(a, b)
            print("  %d crops, %s: KS D=%.4f p=%.3g" % (len(a), what, d, p), file=sys.stderr)
            self.assertGreater(p, KS_ALPHA, what)
        # and the test can tell a wrong distribution: torchvision's at scale (0.25, 1)
        import torch
        import torchvision.transforms as T
        torch.manual_seed(1)
        off = np.array([T.RandomResizedCrop.get_params(torch.empty((1, h, w)), [0.25, 1.0],
                                                       [3 / 4, 4 / 3]) for w, h in dims])
        d, p = ks_2samp(ours[:, 3] * ours[:, 4] / area, off[:, 2] * off[:, 3] / area)
        self.assertLess(p, 1e-6, "the KS test has no power here")
        self.assertTrue(0.4 < ours[:, 5].mean() < 0.6, ours[:, 5].mean())

    def compare(self, level_opt, view):
        worst = float("inf")
        with Mounted("refurb=2", "refurb_seed=3", *level_opt) as m:
            for rel in jpeg_entries():
                src = os.path.join(m.path(view), rel)
                with open(src, "rb") as f:
                    jpeg = f.read()
                for _ in range(3):  # versions 0 and 1 at least
                    data = m.read(rel + b".ppm")
                    check_ppm(self, data)
                    v, top, left, h, w, flip = m.params(rel + b".ppm")
                    got = np.frombuffer(data[-S * S * 3:], dtype=np.uint8).reshape(S, S, 3)
                    q = psnr(got, reference(jpeg, top, left, h, w, flip))
                    worst = min(worst, q)
                    self.assertGreaterEqual(q, PSNR_MIN, (rel, v, top, left, h, w, flip))
        print("  %s: worst PSNR %.1f dB" % (view, worst), file=sys.stderr)

    def test_pixels_full(self):
        self.compare((), "full")

    def test_pixels_level3(self):
        self.compare(("refurb_level=3",), "scan3")


class Folder(unittest.TestCase):
    def test_imagefolder_dataloader(self):
        import torch
        import torchvision.transforms as T
        from torchvision.datasets import ImageFolder
        tf = T.Compose([T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        with Mounted("refurb=2") as m:
            ds = ImageFolder(os.fsdecode(m.path("refurb")), transform=tf)
            self.assertEqual(len(ds), len(jpeg_entries()))
            self.assertEqual(len(ds.classes), 4)
            dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, shuffle=True)
            count = 0
            for x, y in dl:
                self.assertEqual(tuple(x.shape[1:]), (3, S, S))
                self.assertTrue(torch.isfinite(x).all())
                count += x.shape[0]
            self.assertEqual(count, len(ds))
            self.assertEqual(m.stats()["opens"], len(ds))

    def test_skipped_absent_and_listed(self):
        skipped = verbatim_entries()
        self.assertGreaterEqual(len(skipped), 5)
        with Mounted("refurb=3") as m:
            root = m.path("refurb")
            listed = set(m.files())
            for rel in skipped:
                self.assertNotIn(rel + b".ppm", listed)
                for name in (rel, rel + b".ppm"):
                    with self.assertRaises(FileNotFoundError):
                        os.stat(os.path.join(root, name))
                # still served by the other views
                self.assertTrue(os.path.isfile(os.path.join(m.path("full"), rel)))
            # a JPEG's own name (without .ppm) is not a name of refurb/
            with self.assertRaises(FileNotFoundError):
                os.stat(os.path.join(root, jpeg_entries()[0]))
            with open(m.path(".pcrfs", "refurb_skipped"), "rb") as f:
                lines = f.read().splitlines()
            paths = sorted(ln.split(b"\t")[0] for ln in lines)
            self.assertEqual(paths, skipped)
            self.assertTrue(all(len(ln.split(b"\t")) == 2 and ln.split(b"\t")[1] for ln in lines))
            self.assertIn(b".pcrfs", os.listdir(m.path()))
            self.assertIn(b"refurb_skipped", os.listdir(m.path(".pcrfs")))
            info = m.info()
            self.assertEqual(info["skipped"], len(skipped))
            self.assertEqual(info["files"], len(jpeg_entries()))
            self.assertEqual(info["r"], 3)
            self.assertIn("refurb", m.json("info")["views"])
        # without -o refurb: no refurb/, no refurb_skipped
        with Mounted("ro") as m:
            self.assertNotIn(b"refurb", os.listdir(m.path()))
            self.assertNotIn(b"refurb_skipped", os.listdir(m.path(".pcrfs")))
            self.assertIsNone(m.json("info")["refurb"])

    def test_listing_skips_across_readdir_calls(self):
        # 200 entries, every other one a text file: several READDIRPLUS pages, with
        # left-out entries at their edges; the kernel resumes at our offsets
        src = os.path.join(TMP.path, "alt")
        os.makedirs(os.path.join(src, "d"))
        im = Image.new("RGB", (24, 16), (10, 200, 30))
        for i in range(200):
            p = os.path.join(src, "d", "f%03d" % i)
            if i % 2 == 0:
                im.save(p + ".jpg", quality=90)
            else:
                with open(p + ".txt", "w") as f:
                    f.write("not an image %d\n" % i)
        store = os.path.join(TMP.path, "alt-store")
        mu.build_store(src, store)
        with Mounted("refurb=2", store=store) as m:
            want = sorted("f%03d.jpg.ppm" % i for i in range(0, 200, 2))
            self.assertEqual(sorted(os.listdir(os.path.join(m.mnt, "refurb", "d"))), want)
            got = sorted(e.name for e in os.scandir(os.path.join(m.mnt, "refurb", "d"))
                         if e.stat().st_size == PPM_LEN)
            self.assertEqual(got, want)
            self.assertEqual(len(small_getdents(os.path.join(m.mnt, "refurb", "d"))), 100 + 2)
            self.assertEqual(m.info()["skipped"], 100)


def small_getdents(path, bufsize=96):
    """The names of @path read with getdents64 into a @bufsize-byte buffer (one or two
    entries per call: every call resumes at the previous one's last offset)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    buf = ctypes.create_string_buffer(bufsize)
    names = []
    try:
        while True:
            n = libc.syscall(217, fd, buf, bufsize)  # SYS_getdents64 on x86_64
            if n < 0:
                raise OSError(ctypes.get_errno(), "getdents64")
            if n == 0:
                return names
            raw, pos = buf.raw[:n], 0
            while pos < n:
                reclen = struct.unpack_from("<H", raw, pos + 16)[0]
                names.append(raw[pos + 19:pos + reclen].split(b"\0", 1)[0])
                pos += reclen
    finally:
        os.close(fd)


class Concurrency(unittest.TestCase):
    def test_no_torn_reads_bounded_memory(self):
        import torch
        from torchvision.datasets import DatasetFolder
        opts = ("refurb=2", "refurb_seed=21", "refurb_cache_size=3M")
        seen = {}  # rel -> list of hashes
        opens = {}
        lock = threading.Lock()
        rss = []
        errors = []
        with Mounted(*opts) as m:
            files = m.files()
            root = m.path("refurb")
            stop = threading.Event()

            def note(rel, data):
                ok = data.startswith(b"P6\n224 224\n255\n") and len(data) == PPM_LEN
                with lock:
                    if not ok:
                        errors.append((rel, len(data)))
                    seen.setdefault(rel, []).append(md5(data))
                    opens[rel] = opens.get(rel, 0) + 1

            def reader(k):
                rng = random.Random(k)
                for _ in range(3 * len(files) // 2):
                    rel = rng.choice(files)
                    p = os.path.join(root, rel)
                    if k % 2:
                        with open(p, "rb") as f:
                            data = f.read()
                    else:
                        fd = os.open(p, os.O_RDONLY)
                        parts = []
                        while True:
                            b = os.read(fd, 4096)
                            if not b:
                                break
                            parts.append(b)
                            time.sleep(0)  # let others open the file meanwhile
                        os.close(fd)
                        data = b"".join(parts)
                    note(rel, data)

            def sampler():
                while not stop.is_set():
                    rss.append(m.daemon_rss_kb())
                    time.sleep(0.05)

            def load(path):
                with open(path, "rb") as f:
                    return f.read()

            ds = DatasetFolder(os.fsdecode(root), loader=load, extensions=(".ppm",))
            self.assertEqual(len(ds), len(files))
            dl = torch.utils.data.DataLoader(
                list(range(len(ds))), batch_size=4, num_workers=4, shuffle=True,
                persistent_workers=True,
                collate_fn=lambda idx: [(ds.samples[i][0], load(ds.samples[i][0]))
                                        for i in idx])
            it = iter(dl)  # the workers fork now, before the threads start
            threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
            threads.append(threading.Thread(target=sampler))
            for t in threads:
                t.start()
            for epoch in range(2):
                for batch in (it if epoch == 0 else dl):
                    for path, data in batch:
                        note(os.path.relpath(os.fsencode(path), root), data)
            for t in threads[:-1]:
                t.join()
            stop.set()
            threads[-1].join()
            st = m.stats()
            info = m.info()
            rss.append(m.daemon_rss_kb())
        self.assertEqual(errors, [], "torn or short reads")
        cap = info["cache_bytes"] // info["file_bytes"]
        self.assertLessEqual(st["cached"], cap)
        self.assertGreater(st["evicted"] + st["dropped"], 0)
        self.assertGreaterEqual(st["passes"], 3)
        print("  %d opens, %d passes, daemon RSS max %d kB, cache %d/%d, stats %s" % (
            st["opens"], st["passes"], max(rss), st["cached"], cap, st), file=sys.stderr)
        # ASan's quarantine and shadow memory: the looser bound test_reliability.py
        # uses for a sanitized daemon (mount_util.SANITIZED)
        self.assertLess(max(rss), (1024 if mu.SANITIZED else 200) * 1024)
        # the clean versions: a fresh mount with the same seed, one reader, as many
        # opens of each file as the concurrent run made
        total = {rel: opens.get(rel, 0) for rel in files}
        with Mounted(*opts) as m:
            for rel in files:
                clean = {md5(m.read(rel)) for _ in range(total[rel])}
                bad = set(seen.get(rel, [])) - clean
                self.assertEqual(bad, set(), "%s: a read equal to no version" % rel)


class Lifecycle(unittest.TestCase):
    def sweep(self, *opts):
        with Mounted(*opts) as m:
            files = m.files()
            return [md5(m.read(f)) for _ in range(3) for f in files]

    def test_deterministic_and_remount_restarts(self):
        a = self.sweep("refurb=2", "refurb_seed=9")
        b = self.sweep("refurb=2", "refurb_seed=9", "refurb_threads=0")
        c = self.sweep("refurb=2", "refurb_seed=10")
        self.assertEqual(a, b)
        n = len(a) // 3
        differ = sum(1 for x, y in zip(a[:n], c[:n]) if x != y)
        self.assertGreater(differ, n // 2)

    def test_damaged_record_is_eio_and_listed(self):
        store = os.path.join(TMP.path, "damaged")
        shutil.copytree(STORE, store)
        recs = sorted(os.path.join(store, "records", r) for r in os.listdir(
            os.path.join(store, "records")))
        size = os.path.getsize(recs[0])
        with open(recs[0], "r+b") as f:  # garbage over the middle of the first record
            f.seek(size // 3)
            f.write(b"\xa5" * 4096)
        with Mounted("refurb=2", store=store) as m:
            bad = []
            for rel in jpeg_entries():
                try:
                    with open(os.path.join(m.path("full"), rel), "rb") as f:
                        f.read()
                except OSError as e:
                    self.assertEqual(e.errno, errno.EIO)
                    bad.append(rel)
            self.assertTrue(bad, "the damage hit no JPEG")
            listed = set(m.files())
            for rel in bad:
                self.assertIn(rel + b".ppm", listed)
                with self.assertRaises(OSError) as cm:
                    m.read(rel + b".ppm")
                self.assertEqual(cm.exception.errno, errno.EIO)
            good = [r for r in jpeg_entries() if r not in bad][0]
            check_ppm(self, m.read(good + b".ppm"))
            self.assertEqual(m.stats()["errors"], len(bad))

    def test_bad_options(self):
        mnt = os.path.join(TMP.path, "mnt-bad")
        os.makedirs(mnt, exist_ok=True)
        for opt in ("refurb=0", "refurb=x", "refurb=2,refurb_scale=0.9:0.1",
                    "refurb=2,refurb_ratio=1", "refurb=2,refurb_size=0",
                    "refurb=2,refurb_flip=maybe", "refurb=2,refurb_level=99",
                    "refurb_size=64", "refurb=2,refurb_cache_size=0"):
            p = mu.run([mu.program("PCRFS"), STORE, mnt, "-f", "-o", opt], timeout=30)
            self.assertEqual(p.returncode, 2, (opt, p.stderr))
            self.assertFalse(os.path.ismount(mnt))
        p = mu.run([mu.program("PCRFS"), STORE, mnt, "-f", "-o",
                    "refurb=2,refurb_cache=/nonexistent/dir"], timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(b"refurb_cache", p.stderr)
        self.assertFalse(os.path.ismount(mnt))


if __name__ == "__main__":
    unittest.main(verbosity=2)
