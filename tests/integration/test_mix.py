#!/usr/bin/python3
"""The randomized-level view mix/ (pcrfs(1), -o mix=LO-HI, "THE MIX VIEW").

What each class asserts, and would be false if the feature broke:
- Draws: every open of a mix/ file serves exactly the bytes of scanK/ for the level K
  that pcrfs(1)'s formula gives for (seed, file id, n-th open), recomputed here in
  Python; its fstat size is the bytes read; over many passes the served levels pass
  a chi-square test against the distribution (uniform, and with mix_mean the
  distribution of largest entropy, whose probabilities are computed here
  independently and compared with /.pcrfs/info's); /.pcrfs/stats' histogram equals
  what was observed; a remount with the same seed serves the same sequence, another
  seed another one.
- No mixed reads: a file opened and read in small pieces while other opens of the
  same file move it on to other levels still reads as one level, whole.
- Pages: an open at the level of the file's previous open reads nothing from the
  store, an open at another level the whole file (also a level read before).
- Bad options are refused (exit 2, one line, no mount); mix/ and q95/ on a
  tokens-only store are empty trees like scanK/; on a store with tokens and a
  quality table, tokens/ is unchanged; ImageFolder + RecordSampler over mix/ loads
  every sample at a level of LO..HI, and over q95/ every sample, each file in its
  record.
"""

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

MKDATASET = os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py")
MKTOKENS = os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py")
ID_MASK = (1 << 55) - 1
M64 = (1 << 64) - 1


def h64(x):
    """SplitMix64's finaliser, as pcrfs(1) gives it."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def probabilities(lo, hi, mean=None):
    """{k: p}: uniform, or p(k) ~ exp(lam*k) on lo..hi with the given mean."""
    ks = range(lo, hi + 1)
    if mean is None:
        return {k: 1.0 / len(ks) for k in ks}

    def dist(lam):
        w = [math.exp(lam * (k - hi)) for k in ks]
        s = sum(w)
        return {k: x / s for k, x in zip(ks, w)}

    a, b = -60.0, 60.0
    for _ in range(200):
        c = (a + b) / 2
        if sum(k * p for k, p in dist(c).items()) < mean:
            a = c
        else:
            b = c
    return dist((a + b) / 2)


def draw(seed, fid, n, lo, hi, probs):
    """The level of open number @n of file @fid (pcrfs(1))."""
    u = h64(h64(h64(seed) ^ fid) ^ n)
    cum = 0.0
    for k in range(lo, hi):
        cum += probs[k]
        if u < min(int(math.ldexp(cum, 64)), M64):
            return k
    return hi


def chi2_critical(df, z=3.09):
    """Upper 0.001 point of chi-square with @df degrees of freedom (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(observed, probs):
    n = sum(observed.values())
    return sum((observed.get(k, 0) - n * p) ** 2 / (n * p) for k, p in probs.items())


def read_pieces(path, piece=4096):
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        fid = os.fstat(f.fileno()).st_ino & ID_MASK
        out = bytearray()
        while True:
            b = f.read(piece)
            if not b:
                break
            out += b
    return bytes(out), size, fid


def mu_info(mnt):
    with open(os.path.join(mnt, ".pcrfs", "info"), "rb") as f:
        return json.loads(f.read())


def stats(mnt):
    with open(os.path.join(mnt, ".pcrfs", "stats"), "rb") as f:
        return json.loads(f.read())


class Fixture:
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-mix-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mounts = []
        try:
            cls.make()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for m in getattr(cls, "mounts", []):
            m.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def mount(cls, store, name, *opts):
        m = mu.Mount(store, os.path.join(cls.tmp, name), *opts)
        m.start()
        cls.mounts.append(m)
        return m

    @classmethod
    def dataset(cls, name, *args):
        src = os.path.join(cls.tmp, name)
        mu.run([mu.PYTHON, MKDATASET, "--out", src] + [str(a) for a in args], check=0)
        return src

    @staticmethod
    def files(root):
        out = []
        for dp, dns, fns in os.walk(root):
            dns.sort()
            out += sorted(os.path.relpath(os.path.join(dp, f), root) for f in fns)
        return out


class Draws(Fixture, unittest.TestCase):
    SEED = 11

    @classmethod
    def make(cls):
        # JPEGs, a verbatim file, odd names (--awkward): every file of the tree
        cls.src = cls.dataset("src", "--classes", 2, "--per-class", 6, "--seed", 4, "--awkward")
        cls.store = os.path.join(cls.tmp, "s.pcr")
        mu.run([mu.program("MKPCRFS"), "-q", cls.src, cls.store], check=0)
        cls.L = mu.store_levels(cls.store)
        cls.ref = cls.mount(cls.store, "ref").mnt
        cls.rel = cls.files(os.path.join(cls.ref, "full"))
        # {rel: {level: digest}} from the scanK/ views (tested against pcrinfo elsewhere)
        cls.levels = {}
        for rel in cls.rel:
            cls.levels[rel] = {}
            for k in range(1, cls.L + 1):
                with open(os.path.join(cls.ref, "scan%d" % k, rel), "rb") as f:
                    cls.levels[rel][k] = hashlib.sha256(f.read()).digest()

    def levels_of(self, rel, data):
        d = hashlib.sha256(data).digest()
        return {k for k, v in self.levels[rel].items() if v == d}

    def passes(self, mnt, lo, hi, probs, seed, npasses):
        """Open every file @npasses times; assert each open is the drawn level's bytes.
        @return the histogram of the levels drawn (and so served) over all opens."""
        seen = {}
        opens = {}
        for n in range(npasses):
            for rel in self.rel:
                data, size, fid = read_pieces(os.path.join(mnt, "mix", rel))
                self.assertEqual(size, len(data), rel)
                got = self.levels_of(rel, data)
                want = draw(seed, fid, opens.get(rel, 0), lo, hi, probs)
                opens[rel] = opens.get(rel, 0) + 1
                self.assertIn(want, got, "%s open %d: level %d drawn, bytes of %s" %
                              (rel, n, want, sorted(got)))
                seen[want] = seen.get(want, 0) + 1
        return seen

    def test_uniform_draws_and_chi_square(self):
        lo, hi = 2, self.L
        m = self.mount(self.store, "uni", "-o", "mix=2-full,mix_seed=%d" % self.SEED)
        try:
            probs = probabilities(lo, hi)
            info = mu_info(m.mnt)
            self.assertIn("mix", info["views"])
            self.assertEqual((info["mix"]["lo"], info["mix"]["hi"], info["mix"]["seed"]),
                             (lo, hi, self.SEED))
            seen = self.passes(m.mnt, lo, hi, probs, self.SEED, 60)
            n = sum(seen.values())
            self.assertEqual(n, 60 * len(self.rel))
            stat = chi2(seen, probs)
            self.assertLess(stat, chi2_critical(len(probs) - 1), seen)
            served = stats(m.mnt)["views"]["mix"]["served"]
            self.assertEqual({int(k): v for k, v in served.items() if v}, seen)
        finally:
            m.cleanup()

    def test_mean_distribution(self):
        lo, hi, mean = 1, self.L, 3.5
        m = self.mount(self.store, "mean", "-o", "mix=1-%d,mix_mean=3.5,mix_seed=3" % hi)
        try:
            probs = probabilities(lo, hi, mean)
            info = mu_info(m.mnt)
            self.assertFalse(info["mix"]["uniform"])
            for k, p in zip(range(lo, hi + 1), info["mix"]["p"]):
                self.assertAlmostEqual(p, probs[k], places=6)
            self.assertAlmostEqual(sum(k * p for k, p in probs.items()), mean, places=6)
            seen = self.passes(m.mnt, lo, hi, probs, 3, 60)
            # cells with an expectation below 5 pooled into their neighbour
            n = sum(seen.values())
            pooled_o, pooled_p, acc_o, acc_p = {}, {}, 0, 0.0
            for k in range(lo, hi + 1):
                acc_o += seen.get(k, 0)
                acc_p += probs[k]
                if n * acc_p >= 5 or k == hi:
                    pooled_o[k], pooled_p[k] = acc_o, acc_p
                    acc_o, acc_p = 0, 0.0
            self.assertGreater(len(pooled_p), 3)
            self.assertLess(chi2(pooled_o, pooled_p), chi2_critical(len(pooled_p) - 1), seen)
            avg = sum(k * v for k, v in seen.items()) / n
            self.assertLess(abs(avg - mean), 0.3, seen)
        finally:
            m.cleanup()

    def test_same_seed_same_sequence(self):
        def sequence(name, seed):
            m = self.mount(self.store, name, "-o", "mix=1-full,mix_seed=%d" % seed)
            try:
                out = []
                for _ in range(3):
                    for rel in self.rel:
                        data, _, _ = read_pieces(os.path.join(m.mnt, "mix", rel))
                        out.append(hashlib.sha256(data).digest())
                return out
            finally:
                m.cleanup()

        a = sequence("seq-a", 99)
        self.assertEqual(sequence("seq-b", 99), a)
        self.assertNotEqual(sequence("seq-c", 100), a)

    def test_pages_across_draws(self):
        """What pcrfs(1) says a draw costs in reads, from the daemon's byte counter: an
        open drawn at its previous open's level reads nothing (the pages are kept), one
        drawn at another level reads the whole file, even when it is a level read
        before (the kernel evicts the old level's inode with its pages)."""
        lo, hi, seed = 2, 3, 17
        probs = probabilities(lo, hi)
        m = self.mount(self.store, "pages", "-o", "mix=%d-%d,mix_seed=%d" % (lo, hi, seed))
        try:
            prev, seen, back = {}, {}, 0
            for n in range(6):
                before = stats(m.mnt)["views"]["mix"]["bytes"]
                want = 0
                for rel in self.rel:
                    data, size, fid = read_pieces(os.path.join(m.mnt, "mix", rel))
                    k = draw(seed, fid, n, lo, hi, probs)
                    if prev.get(rel) != k:
                        want += size
                        back += k in seen.get(rel, ())
                    prev[rel] = k
                    seen.setdefault(rel, set()).add(k)
                self.assertEqual(stats(m.mnt)["views"]["mix"]["bytes"] - before, want,
                                 "pass %d: bytes read from the store" % n)
            self.assertGreater(back, 0, "no draw went back to a level read before")
        finally:
            m.cleanup()

    def test_no_read_mixes_levels(self):
        m = self.mount(self.store, "race", "-o", "mix=1-full,mix_seed=5")
        try:
            jpegs = [r for r in self.rel if len(set(self.levels[r].values())) == self.L]
            self.assertTrue(jpegs)
            rel = max(jpegs, key=lambda r: os.path.getsize(os.path.join(self.ref, "full", r)))
            path = os.path.join(m.mnt, "mix", rel)
            # one reader holds the file open and reads it in 512-byte pieces while
            # 200 other opens of the same file move it through other levels
            with open(path, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                first = f.read(512)
                levels_between = set()
                for _ in range(200):
                    data, sz, _ = read_pieces(path)
                    self.assertEqual(sz, len(data))
                    levels_between |= self.levels_of(rel, data)
                rest = bytearray(first)
                while True:
                    b = f.read(512)
                    if not b:
                        break
                    rest += b
            self.assertEqual(len(rest), size)
            self.assertEqual(len(self.levels_of(rel, bytes(rest))), 1)
            self.assertGreater(len(levels_between), 1)
            # and two threads opening and reading every file at once for ~1 s
            errors = []
            stop = threading.Event()

            def worker():
                while not stop.is_set():
                    for r in self.rel:
                        data, sz, _ = read_pieces(os.path.join(m.mnt, "mix", r), 1000)
                        if sz != len(data) or not self.levels_of(r, data):
                            errors.append(r)
            ts = [threading.Thread(target=worker) for _ in range(2)]
            for t in ts:
                t.start()
            stop.wait(1.0)
            stop.set()
            for t in ts:
                t.join(30)
            self.assertEqual(errors, [])
        finally:
            m.cleanup()

    def test_bad_options(self):
        for opt, word in [("mix=0-3", "mix=0-3"), ("mix=5-2", "mix=5-2"),
                          ("mix=2-%d" % (self.L + 1), "mix="), ("mix=3", "mix=3"),
                          ("mix=1-4,mix_mean=4", "mix_mean=4"),
                          ("mix=1-4,mix_mean=x", "mix_mean=x"),
                          ("mix=1-4,mix_seed=abc", "mix_seed=abc"),
                          ("mix_mean=3", "need -o mix"), ("mix=1-4,mix_seed=-1", "mix_seed")]:
            with self.subTest(opt=opt):
                mnt = os.path.join(self.tmp, "bad")
                os.makedirs(mnt, exist_ok=True)
                p = subprocess.run([mu.program("PCRFS"), self.store, mnt, "-f", "-o", opt],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(word, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertFalse(os.path.ismount(mnt))


class Stores(Fixture, unittest.TestCase):
    """Tokens-only and mixed stores; ImageFolder + RecordSampler over mix/."""

    @classmethod
    def make(cls):
        cls.src = cls.dataset("src", "--classes", 3, "--per-class", 20, "--seed", 6,
                              "--size", 64)
        tok = os.path.join(cls.tmp, "tok")
        mu.run([mu.PYTHON, MKTOKENS, "--seed", "5", "-k", "391", "--grid", "16", "tree",
                cls.src, tok], check=0)
        cls.both = os.path.join(cls.tmp, "both.pcr")
        mu.run([mu.program("MKPCRFS"), "-q", "-n", "20", "--quality", "--tokens", tok, cls.src,
                cls.both], check=0)
        cls.toks = os.path.join(cls.tmp, "toks.pcr")
        mu.run([mu.program("MKPCRFS"), "-q", "--tokens", tok, "-", cls.toks], check=0)
        cls.L = mu.store_levels(cls.both)

    def test_tokens_only_store(self):
        m = self.mount(self.toks, "toks", "-o", "mix=1-full,quality=0.95")
        try:
            for view in ("mix", "q95"):
                self.assertEqual(os.listdir(os.path.join(m.mnt, view)),
                                 os.listdir(os.path.join(m.mnt, "scan1")))
                self.assertEqual(self.files(os.path.join(m.mnt, view)), [])
            self.assertTrue(self.files(os.path.join(m.mnt, "tokens")))
        finally:
            m.cleanup()

    def test_mixed_store_and_record_sampler(self):
        sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
        import pcrfs
        import torch
        from torchvision import datasets
        m = self.mount(self.both, "both", "-o", "mix=2-%d,mix_seed=1" % (self.L - 1))
        try:
            ref = {}
            for k in range(1, self.L + 1):
                root = os.path.join(m.mnt, "scan%d" % k)
                for rel in self.files(root):
                    with open(os.path.join(root, rel), "rb") as f:
                        ref.setdefault(rel, {})[hashlib.sha256(f.read()).digest()] = k
            tok = self.files(os.path.join(m.mnt, "tokens"))
            self.assertEqual(len(tok), 60)
            ds = datasets.ImageFolder(os.path.join(m.mnt, "mix"), loader=self.raw_loader)
            self.assertEqual(len(ds), 60)
            sampler = pcrfs.RecordSampler(ds, seed=0)
            dl = torch.utils.data.DataLoader(ds, batch_size=None, sampler=sampler,
                                             num_workers=2)
            levels = {}
            for epoch in range(2):
                sampler.set_epoch(epoch)
                got = 0
                for (path, data), _ in dl:
                    rel = os.path.relpath(path, os.path.join(m.mnt, "mix"))
                    k = ref[rel].get(hashlib.sha256(data).digest())
                    self.assertIsNotNone(k, rel)
                    levels[k] = levels.get(k, 0) + 1
                    got += 1
                self.assertEqual(got, 60)
            self.assertTrue(set(levels) <= set(range(2, self.L)), levels)
            self.assertGreater(len(levels), 2, levels)
        finally:
            m.cleanup()

    def test_qview_record_sampler(self):
        sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
        import pcrfs
        from torchvision import datasets
        m = self.mount(self.both, "both-q")
        try:
            self.assertIn("q95", os.listdir(m.mnt))
            self.assertEqual(len(self.files(os.path.join(m.mnt, "tokens"))), 60)
            ds = datasets.ImageFolder(os.path.join(m.mnt, "q95"), loader=self.raw_loader)
            order = list(pcrfs.RecordSampler(ds, seed=3))
            self.assertEqual(sorted(order), list(range(60)))
            recs = pcrfs._record_of_paths([p for p, _ in ds.samples])
            self.assertEqual(len(recs), 60)
            self.assertEqual(len(set(recs.values())), 3)  # -n 20: 3 records, none None
            self.assertNotIn(None, recs.values())
            # each sample loads through q95/ (the bytes are checked in test_qviews)
            for i in order:
                path, data = ds[i][0]
                self.assertTrue(data.startswith(b"\xff\xd8"), path)
        finally:
            m.cleanup()

    @staticmethod
    def raw_loader(path):
        with open(path, "rb") as f:
            return path, f.read()


if __name__ == "__main__":
    unittest.main(verbosity=2)
