#!/usr/bin/python3
"""Token grids end to end (GitHub issue #4): mkpcrfs imports them (--tokens DIR, a
tree of per-image .npy files; --seit DATA, SeiT's release format), pcrfs serves them
under MNT/tokens/ as NumPy files and the codebook as MNT/.pcrfs/codebook.npy.

The test data comes from tests/gen/mktokens.py (spatially correlated grids, Zipf-like
frequencies, ids past 255 and (in .npy trees) 510, codebooks of 391, 510 (SeiT's format
holds no more) and 8192 entries, grids of 16x16
and 32x32) plus odd cases written here with numpy. The oracle is numpy itself: every
grid read through the mount must equal what numpy.load returns for its source.

What each class asserts, and would be false if the feature broke:
  NpyTreeWithImages  --tokens beside an image tree: every grid equals its source .npy
                     (values, dtype <u2, shape; bytes as numpy.save writes them, exact
                     st_size); the tree mirrors the source; images still served;
                     codebook.npy equals the given codebook; DatasetFolder has the
                     source's classes and samples and a DataLoader with 2 workers
                     yields the source grids; pcrinfo and /.pcrfs/info report tokens
  TokensOnly         no SRC (and SRC "-"): empty image views; int64 sources, mixed
                     shapes, any depth, names whose order changes with .tok; both
                     coders; --tok-per-shard makes that many shards
  Seit               SeiT data, gzip and plain, with and without a names file: every
                     grid equals the generator's; names as documented; DatasetFolder
                     classes are the labels
  DamagedStore       a truncated shard: EIO at open for its files only, the others
                     intact; a damaged token model: the mount fails with a message
  BadInputs          every bad input of the issue: exit 1, a message naming the item,
                     no STORE and no temporary directory left; all bad files of a tree
                     named in one run; usage errors exit 2
Run by hand: MKPCRFS=... PCRINFO=... PCRFS=... /usr/bin/python3 test_tokens.py -v
"""

import glob
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402

MKTOKENS = os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py")
MKDATASET = os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py")
# numpy >= 1.24 pads .npy headers the way pcrfs writes them (pcrfs/tokens.h): the
# byte-for-byte comparison with numpy.save needs it; values are compared always.
NUMPY_SAME_HEADER = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (1, 24)


def mkpcrfs():
    return mu.program("MKPCRFS")


def pcrinfo():
    return mu.program("PCRINFO")


def mktokens(*args):
    mu.run([mu.PYTHON, MKTOKENS] + [str(a) for a in args], check=0)


def npy_bytes(arr):
    """What numpy.save writes for @arr as a C-ordered <u2 array."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(np.asarray(arr).astype("<u2")))
    return buf.getvalue()


def rel_files(root, ext):
    """{relative path without @ext: absolute path} of the files ending in @ext."""
    out = {}
    for dp, dns, fns in os.walk(root):
        dns.sort()
        for fn in fns:
            if fn.endswith(ext):
                p = os.path.join(dp, fn)
                out[os.path.relpath(p, root)[:-len(ext)]] = p
    return out


def rel_dirs(root):
    return {os.path.relpath(os.path.join(dp, d), root)
            for dp, dns, _ in os.walk(root) for d in dns}


def leftovers(store):
    d, name = os.path.split(os.path.abspath(store))
    return glob.glob(os.path.join(glob.escape(d), "." + glob.escape(name) + ".tmp.*"))


def to_long(a):
    """DatasetFolder transform: this torch has no uint16 tensors, so widen first."""
    import torch
    return torch.from_numpy(a.astype(np.int64))


class Fixture:
    """A temporary directory, stores built in it and mounts of them, removed at the
    end of the class; every mount must have survived and exited 0."""

    @classmethod
    def make_tmp(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-tok-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mounts = []

    @classmethod
    def build(cls, args, check=0):
        return mu.run([mkpcrfs(), "-q"] + [str(a) for a in args], check=check)

    @classmethod
    def mount(cls, store, name):
        m = mu.Mount(store, os.path.join(cls.tmp, name))
        m.start()
        cls.mounts.append(m)
        return m.mnt

    @classmethod
    def finish(cls):
        problems = []
        for m in cls.mounts:
            alive = m.alive()
            rc = m.unmount()
            err = m.stderr()
            m.cleanup()
            if not alive or rc != 0:
                problems.append("%s: alive=%s exit=%r: %s" % (m.mnt, alive, rc, err))
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert not problems, "\n".join(problems)

    def assert_grid(self, served_path, ref):
        """The .tok at @served_path is numpy's file for @ref, read and stat'ed."""
        a = np.load(served_path)
        self.assertEqual(a.dtype, np.dtype("<u2"), served_path)
        self.assertEqual(a.shape, ref.shape, served_path)
        self.assertTrue(np.array_equal(a, ref), "%s: values differ from the source" % served_path)
        with open(served_path, "rb") as f:
            data = f.read()
        self.assertEqual(os.stat(served_path).st_size, len(data), served_path)
        if NUMPY_SAME_HEADER:
            self.assertEqual(data, npy_bytes(ref), "%s: not numpy.save's bytes" % served_path)

    def check_tree(self, mnt, refs, dirs):
        """MNT/tokens holds exactly the .tok files for @refs ({rel stem: array}) and
        the directories @dirs, and every file equals its reference."""
        root = os.path.join(mnt, "tokens")
        self.assertEqual(set(rel_files(root, ".tok")), set(refs))
        self.assertEqual(rel_dirs(root), set(dirs))
        for _, _, fns in os.walk(root):
            self.assertTrue(all(fn.endswith(".tok") for fn in fns), fns)
        for rel, ref in refs.items():
            self.assert_grid(os.path.join(root, rel + ".tok"), ref)


class NpyTreeWithImages(Fixture, unittest.TestCase):
    """An image tree and the per-image token tree made from it (K=391, 32x32), with a
    [391, 32] codebook, in one store."""

    @classmethod
    def setUpClass(cls):
        cls.make_tmp()
        try:
            cls.src = os.path.join(cls.tmp, "src")
            cls.tok = os.path.join(cls.tmp, "tok")
            cls.cb = os.path.join(cls.tmp, "codebook.npy")
            mu.run([mu.PYTHON, MKDATASET, "--out", cls.src, "--classes", "3", "--per-class",
                    "8", "--seed", "4", "--size", "48", "--manifest",
                    os.path.join(cls.tmp, "manifest.json")], check=0)
            mktokens("--seed", 5, "-k", 391, "--grid", 32, "tree", cls.src, cls.tok)
            mktokens("--seed", 6, "-k", 391, "codebook", cls.cb, "--dim", 32)
            # a file that is not a grid: skipped with a warning, not imported
            with open(os.path.join(cls.tok, "README.txt"), "w") as f:
                f.write("not a grid\n")
            cls.store = os.path.join(cls.tmp, "store.pcr")
            p = cls.build(["--tokens", cls.tok, "--codebook", cls.cb, cls.src, cls.store])
            cls.build_stderr = p.stderr.decode(errors="replace")
            cls.mnt = cls.mount(cls.store, "mnt")
        except Exception:
            cls.finish()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.finish()

    def test_grids_equal_sources(self):
        refs = {rel: np.load(p) for rel, p in rel_files(self.tok, ".npy").items()}
        self.assertEqual(len(refs), 24)
        self.check_tree(self.mnt, refs, rel_dirs(self.tok))
        # the generator put ids >= 255 (SeiT's escape) in the data
        self.assertGreaterEqual(max(int(a.max()) for a in refs.values()), 255)

    def test_images_still_served(self):
        full = rel_files(os.path.join(self.mnt, "full"), ".JPEG")
        self.assertEqual(set(full), set(rel_files(self.src, ".JPEG")))

    def test_partial_reads(self):
        rel, src = sorted(rel_files(self.tok, ".npy").items())[0]
        whole = npy_bytes(np.load(src))
        with open(os.path.join(self.mnt, "tokens", rel + ".tok"), "rb") as f:
            f.seek(100)
            part = f.read(333)
            f.seek(len(whole) - 5)
            tail = f.read(100)
        self.assertEqual(part, whole[100:433])
        self.assertEqual(tail, whole[-5:])

    def test_skipped_file_warned(self):
        self.assertIn("warning: skipped", self.build_stderr)
        self.assertIn("README.txt: not a .npy file", self.build_stderr)
        self.assertFalse(os.path.exists(os.path.join(self.mnt, "tokens", "README.tok")))

    def test_codebook(self):
        got = np.load(os.path.join(self.mnt, ".pcrfs", "codebook.npy"))
        want = np.load(self.cb)
        self.assertEqual(got.dtype, want.dtype)
        self.assertTrue(np.array_equal(got, want))
        with open(self.cb, "rb") as f, open(os.path.join(self.mnt, ".pcrfs", "codebook.npy"),
                                            "rb") as g:
            self.assertEqual(f.read(), g.read())
        self.assertIn("codebook.npy", os.listdir(os.path.join(self.mnt, ".pcrfs")))

    def test_info_and_pcrinfo(self):
        with open(os.path.join(self.mnt, ".pcrfs", "info")) as f:
            info = json.load(f)
        self.assertEqual(info["tokens"]["files"], 24)
        self.assertIn(info["tokens"]["coder"], ("huffman", "zstd-dict"))
        self.assertIn("tokens", info["views"])
        self.assertIn("tokens", os.listdir(self.mnt))
        js = json.loads(mu.run([pcrinfo(), "--json", self.store], check=0).stdout)
        self.assertEqual(js["tokens"]["grids"], 24)
        self.assertEqual(js["tokens"]["min_shape"], [32, 32])
        self.assertEqual(js["tokens"]["codebook"]["entries"], 391)
        self.assertEqual(js["tokens"]["coder"], info["tokens"]["coder"])
        self.assertEqual(js["jpeg"], 24)
        text = mu.run([pcrinfo(), self.store], check=0).stdout.decode()
        self.assertRegex(text, r"tokens +24 grids in 4 directories, 1 shard, coder ")
        self.assertRegex(text, r"token grids +32x32, [0-9.]+ bytes/grid, [0-9.]+ bits/token")

    def test_verify_checks_token_files(self):
        """pcrinfo --verify reads every .tok file too; a flipped byte inside a token
        blob fails that file (its block checksum), named under tokens/."""
        p = mu.run([pcrinfo(), "--verify", self.store], check=0)
        self.assertIn(b"and 24 token files: 0 failures", p.stdout)
        store = os.path.join(self.tmp, "verify-damaged.pcr")
        shutil.copytree(self.store, store)
        shard = sorted(glob.glob(os.path.join(store, "tokens", "*.tks")))[0]
        with open(shard, "r+b") as f:
            f.seek(40)  # inside the first blob (the header is 32 bytes)
            b = f.read(1)
            f.seek(40)
            f.write(bytes([b[0] ^ 0x55]))
        p = mu.run([pcrinfo(), "--verify", store])
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 1, out)
        self.assertEqual(out.count(b"FAILED tokens/"), 1, out)
        self.assertIn(b"24 token files: 1 failure", out)

    def test_datasetfolder_and_dataloader(self):
        import torch
        from torchvision.datasets import DatasetFolder
        root = os.path.join(self.mnt, "tokens")
        ds = DatasetFolder(root, loader=np.load, extensions=(".tok",), transform=to_long)
        ref = DatasetFolder(self.tok, loader=np.load, extensions=(".npy",), transform=to_long)
        self.assertEqual(ds.classes, ref.classes)
        self.assertEqual(ds.classes, sorted(os.listdir(self.src)))
        self.assertEqual([(os.path.relpath(p, root)[:-4], c) for p, c in ds.samples],
                         [(os.path.relpath(p, self.tok)[:-4], c) for p, c in ref.samples])
        loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, shuffle=False)
        xs, ys = [], []
        for x, y in loader:
            xs.append(x)
            ys.append(y)
        x = torch.cat(xs)
        y = torch.cat(ys)
        self.assertEqual(tuple(x.shape), (len(ref), 32, 32))
        want = torch.stack([ref[i][0] for i in range(len(ref))])
        self.assertTrue(torch.equal(x, want))
        self.assertEqual(y.tolist(), [c for _, c in ref.samples])


class TokensOnly(Fixture, unittest.TestCase):
    """Stores of tokens only (K=8192, 16x16 int64 sources plus odd shapes, deeper
    directories and names whose byte order changes when .npy becomes .tok)."""

    @classmethod
    def setUpClass(cls):
        cls.make_tmp()
        try:
            cls.tok = os.path.join(cls.tmp, "tok")
            mktokens("--seed", 7, "-k", 8192, "--grid", 16, "--dtype", "<i8", "classes",
                     cls.tok, "--classes", 4, "--per-class", 25)
            rng = np.random.default_rng(8)
            extra = {
                "c000/a": rng.integers(0, 65536, size=(7, 13)),
                "c000/a.o": rng.integers(0, 8192, size=(1, 1)),  # "a.o.tok" < "a.tok"
                "c001/deep/er/x": rng.integers(0, 600, size=(32, 32)).astype(np.uint16),
                "c002/big": rng.integers(0, 300, size=(64, 40)).astype(np.int32),
            }
            for rel, a in extra.items():
                os.makedirs(os.path.dirname(os.path.join(cls.tok, rel)), exist_ok=True)
                np.save(os.path.join(cls.tok, rel + ".npy"), a)
            os.makedirs(os.path.join(cls.tok, "c003", "empty"))
            cls.refs = {rel: np.load(p) for rel, p in rel_files(cls.tok, ".npy").items()}
            cls.stores = {}
            for name, args in [("huffman", ["--tok-coder", "huffman", "--tok-per-shard", 7]),
                               ("zstd", ["--tok-coder", "zstd-dict", "-"])]:
                store = os.path.join(cls.tmp, name + ".pcr")
                cls.build(["--tokens", cls.tok] + args + [store])
                cls.stores[name] = (store, cls.mount(store, "mnt-" + name))
        except Exception:
            cls.finish()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.finish()

    def test_grids_equal_sources(self):
        self.assertEqual(len(self.refs), 104)
        for name, (store, mnt) in self.stores.items():
            with self.subTest(coder=name):
                self.check_tree(mnt, self.refs, rel_dirs(self.tok))

    def test_coder_recorded(self):
        for name, want in (("huffman", "huffman"), ("zstd", "zstd-dict")):
            store, mnt = self.stores[name]
            with open(os.path.join(mnt, ".pcrfs", "info")) as f:
                self.assertEqual(json.load(f)["tokens"]["coder"], want)

    def test_shards(self):
        store, _ = self.stores["huffman"]
        shards = sorted(glob.glob(os.path.join(store, "tokens", "*.tks")))
        self.assertEqual(len(shards), -(-104 // 7))
        for s in shards:
            with open(s, "rb") as f:
                self.assertEqual(f.read(8), b"PCRTOKS\n")
        js = json.loads(mu.run([pcrinfo(), "--json", store], check=0).stdout)
        self.assertEqual(js["tokens"]["shards"], len(shards))
        self.assertEqual(js["tokens"]["grids"], 104)
        self.assertEqual(js["tokens"]["min_shape"], [1, 1])
        self.assertEqual(js["tokens"]["max_shape"], [64, 40])

    def test_image_views_empty(self):
        for name, (store, mnt) in self.stores.items():
            names = set(os.listdir(mnt))
            self.assertIn("full", names)
            self.assertIn("tokens", names)
            self.assertEqual(os.listdir(os.path.join(mnt, "full")), [])
            self.assertEqual(os.listdir(os.path.join(mnt, "scan1")), [])
            self.assertNotIn("codebook.npy", os.listdir(os.path.join(mnt, ".pcrfs")))
            self.assertFalse(os.path.exists(os.path.join(mnt, ".pcrfs", "codebook.npy")))
            with open(os.path.join(mnt, ".pcrfs", "info")) as f:
                info = json.load(f)
            self.assertEqual(info["files"], 0)
            self.assertFalse(info["tokens"]["codebook"])

    def test_datasetfolder(self):
        from torchvision.datasets import DatasetFolder
        _, mnt = self.stores["zstd"]
        ds = DatasetFolder(os.path.join(mnt, "tokens"), loader=np.load, extensions=(".tok",))
        self.assertEqual(ds.classes, ["c000", "c001", "c002", "c003"])
        self.assertEqual(len(ds), 104)
        for i in (0, 30, 103):
            path, c = ds.samples[i]
            rel = os.path.relpath(path, os.path.join(mnt, "tokens"))[:-4]
            self.assertTrue(np.array_equal(ds[i][0], self.refs[rel]))
            self.assertEqual(ds.classes[c], rel.split("/")[0])


class Seit(Fixture, unittest.TestCase):
    """SeiT release files: 32x32, K=391, gzip, with names; 16x16, K=510 (the most
    SeiT's format holds), plain, without names (named LABEL/K.tok)."""

    @classmethod
    def setUpClass(cls):
        cls.make_tmp()
        try:
            cls.a = os.path.join(cls.tmp, "a")
            cls.b = os.path.join(cls.tmp, "b")
            mktokens("--seed", 9, "-k", 391, "--grid", 32, "seit", cls.a, "--n", 300,
                     "--classes", 6, "--gzip", "--names", "--tree", cls.a + "-tree")
            mktokens("--seed", 10, "-k", 510, "--grid", 16, "seit", cls.b, "--n", 250,
                     "--classes", 5, "--tree", cls.b + "-tree")
            pre_a = os.path.join(cls.a, "gen-train")
            pre_b = os.path.join(cls.b, "gen-train")
            cls.store_a = os.path.join(cls.tmp, "a.pcr")
            cls.store_b = os.path.join(cls.tmp, "b.pcr")
            cls.build(["--seit", pre_a + "-token.data.bin.gz", "--seit-labels",
                       pre_a + "-label.txt", "--seit-names", pre_a + "-names.txt",
                       cls.store_a])
            cls.build(["--seit", pre_b + "-token.data.bin", "--seit-labels",
                       pre_b + "-label.txt", "--seit-shape", "16x16", cls.store_b])
            with open(pre_b + "-label.txt") as f:
                cls.labels_b = [int(x) for x in f.read().split()]
            cls.mnt_a = cls.mount(cls.store_a, "mnt-a")
            cls.mnt_b = cls.mount(cls.store_b, "mnt-b")
        except Exception:
            cls.finish()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.finish()

    def test_with_names(self):
        # names "cNNN/img_IIIIII.JPEG" -> tokens/cNNN/img_IIIIII.tok
        refs = {rel: np.load(p) for rel, p in rel_files(self.a + "-tree", ".npy").items()}
        self.assertEqual(len(refs), 300)
        self.check_tree(self.mnt_a, refs, rel_dirs(self.a + "-tree"))

    def test_without_names(self):
        tree = rel_files(self.b + "-tree", ".npy")  # cLLL/img_IIIIII.npy, I = image number
        lw = len(str(max(self.labels_b)))
        seen, refs = {}, {}
        for i, lab in enumerate(self.labels_b):
            k = seen.get(lab, 0)
            seen[lab] = k + 1
            refs[(lab, k)] = np.load(tree["c%03d/img_%06d" % (lab, i)])
        kw = len(str(max(k for _, k in refs)))
        named = {"%0*d/%0*d" % (lw, lab, kw, k): a for (lab, k), a in refs.items()}
        self.check_tree(self.mnt_b, named, {"%0*d" % (lw, lab) for lab in set(self.labels_b)})

    def test_datasetfolder_classes_are_labels(self):
        from torchvision.datasets import DatasetFolder
        ds = DatasetFolder(os.path.join(self.mnt_b, "tokens"), loader=np.load,
                           extensions=(".tok",))
        self.assertEqual(len(ds), 250)
        self.assertEqual(sorted(c for _, c in ds.samples), sorted(self.labels_b))
        for name, idx in ds.class_to_idx.items():
            self.assertEqual(int(name), idx)

    def test_plain_and_gzip_agree(self):
        """The same release files, gzip-compressed or not, give identical stores'
        token files."""
        plain = os.path.join(self.tmp, "a-plain")
        os.makedirs(plain)
        for fn in os.listdir(self.a):
            src = os.path.join(self.a, fn)
            if fn.endswith(".gz"):
                with gzip.open(src, "rb") as f, open(os.path.join(plain, fn[:-3]), "wb") as g:
                    g.write(f.read())
            else:
                shutil.copy(src, plain)
        pre = os.path.join(plain, "gen-train")
        store = os.path.join(self.tmp, "a-plain.pcr")
        self.build(["--seit", pre + "-token.data.bin", "--seit-labels", pre + "-label.txt",
                    "--seit-names", pre + "-names.txt", store])
        mnt = self.mount(store, "mnt-a-plain")
        a = rel_files(os.path.join(self.mnt_a, "tokens"), ".tok")
        b = rel_files(os.path.join(mnt, "tokens"), ".tok")
        self.assertEqual(set(a), set(b))
        for rel in a:
            with open(a[rel], "rb") as f, open(b[rel], "rb") as g:
                self.assertEqual(f.read(), g.read(), rel)


class DamagedStore(Fixture, unittest.TestCase):
    """A truncated token shard fails only its own files, with EIO at open; a token
    model that does not load fails the mount."""

    @classmethod
    def setUpClass(cls):
        cls.make_tmp()
        try:
            cls.tok = os.path.join(cls.tmp, "tok")
            mktokens("--seed", 14, "-k", 391, "--grid", 16, "classes", cls.tok, "--classes", 3,
                     "--per-class", 10)
            cls.store = os.path.join(cls.tmp, "store.pcr")
            # shards of 10 grids: shard N holds class c00(N-1)
            cls.build(["--tokens", cls.tok, "--tok-per-shard", 10, cls.store])
        except Exception:
            cls.finish()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.finish()

    def test_truncated_shard(self):
        import errno
        store = os.path.join(self.tmp, "trunc.pcr")
        shutil.copytree(self.store, store)
        with open(os.path.join(store, "tokens", "000002.tks"), "r+b") as f:
            f.truncate(100)
        mnt = self.mount(store, "mnt-trunc")
        for rel, src in sorted(rel_files(self.tok, ".npy").items()):
            path = os.path.join(mnt, "tokens", rel + ".tok")
            self.assertEqual(os.stat(path).st_size, len(npy_bytes(np.load(src))), rel)
            if rel.startswith("c001/"):
                with self.assertRaises(OSError, msg=rel) as cm:
                    with open(path, "rb") as f:
                        f.read()
                self.assertEqual(cm.exception.errno, errno.EIO, rel)
            else:
                self.assert_grid(path, np.load(src))
        with open(os.path.join(mnt, ".pcrfs", "stats")) as f:
            self.assertEqual(json.load(f)["views"]["tokens"]["errors"], 10)

    def test_bad_model_fails_mount(self):
        import sqlite3
        store = os.path.join(self.tmp, "badmodel.pcr")
        shutil.copytree(self.store, store)
        con = sqlite3.connect(os.path.join(store, "index.db"))
        with con:
            n = con.execute("UPDATE blobs SET value = ? WHERE key = 'tok_model'",
                            (b"PCRTOKM1" + b"\0" * 40,)).rowcount
        con.close()
        self.assertEqual(n, 1)
        mnt = os.path.join(self.tmp, "mnt-badmodel")
        os.makedirs(mnt)
        # without -f: the daemon would detach once mounted, so this never hangs
        p = mu.run([mu.program("PCRFS"), store, mnt], timeout=60)
        mounted = os.path.ismount(mnt)
        if mounted:
            subprocess.run([mu.FUSERMOUNT, "-u", "-z", mnt], stderr=subprocess.DEVNULL)
        self.assertFalse(mounted, "a store whose token model is damaged was mounted")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"token model", p.stderr)


class BadInputs(Fixture, unittest.TestCase):
    """Every bad input fails the build with exit 1, names the item and leaves nothing."""

    @classmethod
    def setUpClass(cls):
        cls.make_tmp()
        cls.n = 0
        try:
            cls.good = os.path.join(cls.tmp, "good")
            mktokens("--seed", 11, "-k", 391, "--grid", 16, "classes", cls.good, "--classes", 2,
                     "--per-class", 5)
            cls.seit = os.path.join(cls.tmp, "seit")
            mktokens("--seed", 12, "-k", 391, "--grid", 32, "seit", cls.seit, "--n", 40,
                     "--classes", 3, "--names")
        except Exception:
            cls.finish()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.finish()

    def fails(self, args, *needles, status=1):
        """Run mkpcrfs with @args into a fresh STORE: assert @status, every needle on
        one line of stderr, no STORE and no temporary directory."""
        BadInputs.n += 1
        store = os.path.join(self.tmp, "out%d.pcr" % self.n)
        p = self.build(args + [store], check=None)
        err = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, status, err)
        self.assertFalse(os.path.exists(store), "STORE left behind")
        self.assertEqual(leftovers(store), [], "temporary directory left behind")
        lines = err.splitlines()
        for group in needles:
            group = (group,) if isinstance(group, str) else group
            self.assertTrue(any(all(n in line for n in group) for line in lines),
                            "no line of stderr has %r:\n%s" % (group, err))
        return err

    def bad_tree(self, files):
        """A copy of the good tree plus @files ({rel: writer(path)})."""
        BadInputs.n += 1
        d = os.path.join(self.tmp, "tree%d" % self.n)
        shutil.copytree(self.good, d)
        for rel, write in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            write(p)
        return d

    @staticmethod
    def save(a):
        return lambda p: np.save(p, a)

    @staticmethod
    def raw(data):
        def w(p):
            with open(p, "wb") as f:
                f.write(data)
        return w

    def good_bytes(self):
        with open(rel_files(self.good, ".npy")["c000/img000000"], "rb") as f:
            return f.read()

    def test_bad_npy_files(self):
        neg = np.zeros((4, 4), np.int32)
        neg[1, 2] = -3
        big = np.zeros((4, 4), np.int32)
        big[0, 1] = 70000
        good = self.good_bytes()
        cases = [
            ("f32.npy", self.save(np.zeros((4, 4), np.float32)), "not an integer type"),
            ("rank3.npy", self.save(np.zeros((2, 3, 4), np.uint16)), "2-D"),
            ("rank1.npy", self.save(np.zeros((9,), np.uint16)), "2-D"),
            ("fortran.npy", self.save(np.asfortranarray(np.ones((3, 4), np.uint16))),
             "Fortran"),
            ("neg.npy", self.save(neg), "negative value -3"),
            ("big.npy", self.save(big), "70000"),
            ("trunc.npy", self.raw(good[:-10]), "truncated"),
            ("garbled.npy", self.raw(b"\x93NUMPY\x01\x00" + b"\xff" * 40), None),
            ("notnpy.npy", self.raw(b"hello, world\n" * 10), None),
            ("empty.npy", self.raw(b""), None),
            ("trailing.npy", self.raw(good + b"\0\0"), "trailing"),
        ]
        for name, write, why in cases:
            with self.subTest(name):
                d = self.bad_tree({"c001/" + name: write})
                self.fails(["--tokens", d], ("c001/" + name,) + ((why,) if why else ()))
        # all at once: every one of them named in one run
        d = self.bad_tree({"c001/" + n: w for n, w, _ in cases})
        err = self.fails(["--tokens", d], "bad token inputs")
        for name, _, _ in cases:
            self.assertIn("c001/" + name, err)

    def test_name_clash(self):
        # a directory "x.tok" and a file "x.npy" would both be tokens/c000/x.tok
        g = np.zeros((2, 2), np.uint16)
        d = self.bad_tree({"c000/x.npy": self.save(g), "c000/x.tok/y.npy": self.save(g)})
        self.fails(["--tokens", d], ("tokens/c000/x.tok", "two entries"))

    def test_empty_tree(self):
        d = os.path.join(self.tmp, "empty-tree")
        os.makedirs(os.path.join(d, "c000"))
        self.fails(["--tokens", d], "no token grid found")
        self.fails(["--tokens", os.path.join(self.tmp, "missing")], "missing")

    def seit_copy(self, change):
        """A copy of the SeiT files after @change(prefix) edited them."""
        BadInputs.n += 1
        d = os.path.join(self.tmp, "seit%d" % self.n)
        shutil.copytree(self.seit, d)
        pre = os.path.join(d, "gen-train")
        change(pre)
        return pre

    def seit_args(self, pre, names=False):
        a = ["--seit", pre + "-token.data.bin", "--seit-labels", pre + "-label.txt"]
        return a + (["--seit-names", pre + "-names.txt"] if names else [])

    def test_bad_seit(self):
        def index(fn):
            def change(pre):
                p = pre + "-token.index.npy"
                a = np.load(p)
                fn(a)
                np.save(p, a)
            return change

        def swap(a):
            a[5], a[6] = a[6], a[5]

        def past(a):
            a[-1] += 10

        def append(path, text):
            def change(pre):
                with open(pre + path, "a") as f:
                    f.write(text)
            return change

        def escape(pre):
            # image 3's last byte becomes an escape byte, which SeiT's reader drops: the
            # image is one token short
            offs = np.load(pre + "-token.index.npy")
            with open(pre + "-token.data.bin", "r+b") as f:
                f.seek(int(offs[4]) - 1)
                f.write(b"\xff")

        def dup_names(pre):
            # two names that both become c000/x.tok
            with open(pre + "-names.txt") as f:
                names = f.read().split("\n")
            names[0], names[1] = "c000/x.JPEG", "c000/x.png"
            with open(pre + "-names.txt", "w") as f:
                f.write("\n".join(names))

        cases = [
            ("not monotonic", index(swap), False, ("index.npy", "monotonic")),
            ("past the data", index(past), False, ("index.npy", "past the data")),
            ("labels", append("-label.txt", "1\n"), False, ("label.txt", "41 labels", "40")),
            ("names", append("-names.txt", "c000/extra.JPEG\n"), True, ("names.txt", "41")),
            ("escape", escape, False, ("data.bin", "image 3", "1023 tokens")),
            ("clash", dup_names, True, ("tokens/c000/x.tok", "x.JPEG", "x.png")),
        ]
        for what, change, names, needles in cases:
            with self.subTest(what):
                pre = self.seit_copy(change)
                self.fails(self.seit_args(pre, names), needles)
        # grids that do not decode to the shape given: every image named, and a hint
        pre = self.seit_copy(lambda pre: None)
        self.fails(self.seit_args(pre) + ["--seit-shape", "16x16"], ("image 0", "expected 16x16"))
        pre = self.seit_copy(lambda pre: os.unlink(pre + "-token.index.npy"))
        self.fails(self.seit_args(pre), ("no index file", "data.bin"))

    def test_seit_shape_hint(self):
        d = os.path.join(self.tmp, "seit16")
        mktokens("--seed", 13, "-k", 391, "--grid", 16, "seit", d, "--n", 10, "--classes", 2)
        pre = os.path.join(d, "gen-train")
        self.fails(self.seit_args(pre), ("image 0", "expected 32x32"), "--seit-shape")

    def test_bad_codebook(self):
        cases = [
            ("small", self.save(np.zeros((100, 8), np.float32)), "100 entries"),
            ("int", self.save(np.zeros((400, 8), np.int32)), "not a float type"),
            ("flat", self.save(np.zeros((400,), np.float32)), "2-D"),
            ("fortran", self.save(np.asfortranarray(np.zeros((400, 8), np.float32))),
             "Fortran"),
            ("junk", self.raw(b"junk" * 100), None),
        ]
        for name, write, why in cases:
            with self.subTest(name):
                p = os.path.join(self.tmp, "cb-%s.npy" % name)
                write(p)
                self.fails(["--tokens", self.good, "--codebook", p],
                           ("--codebook", p) + ((why,) if why else ()))
        self.fails(["--tokens", self.good, "--codebook", os.path.join(self.tmp, "nope.npy")],
                   ("nope.npy", "No such file"))

    def test_usage_errors(self):
        pre = os.path.join(self.seit, "gen-train")
        cases = [
            (["--seit", pre + "-token.data.bin"], "--seit-labels"),
            (["--tokens", self.good, "--seit", pre + "-token.data.bin", "--seit-labels",
              pre + "-label.txt"], "cannot be used together"),
            (["--codebook", "x.npy", self.good], "need --tokens or --seit"),
            (["--tokens", self.good, "--seit-labels", "x"], "only with --seit"),
            (["--seit", "d", "--seit-labels", "l", "--seit-shape", "0x3"], "--seit-shape"),
            (["--tokens", self.good, "--tok-coder", "lzma"], "--tok-coder"),
            (["--tokens", self.good, "--tok-per-shard", "0"], "--tok-per-shard"),
        ]
        for args, needle in cases:
            with self.subTest(args):
                self.fails(args, needle, status=2)

    def test_help_lists_token_options(self):
        out = mu.run([mkpcrfs(), "--help"], check=0).stdout.decode()
        for opt in ("--tokens", "--seit", "--seit-labels", "--seit-names", "--seit-index",
                    "--seit-shape", "--codebook", "--tok-coder", "--tok-per-shard"):
            self.assertIn(opt, out)


if __name__ == "__main__":
    unittest.main()
