#!/usr/bin/python3
"""pcrfs.RecordSampler's split of an epoch across ranks, without a mount: the pure
functions RecordSampler runs (plan_epoch, rank_indices) and the dataset unwrapping.

What each test asserts, and would be false if the feature broke:
- over random (records, sizes, world_size 1..64, shuffle, drop_last, epoch, window):
  every rank yields exactly DistributedSampler's len(); how many samples are yielded
  0, 1, 2... times across ranks is exactly DistributedSampler's (so with drop_last=False
  every sample at least once and the only repeats are its padding; with drop_last=True
  at most world_size - 1 left out); shuffle=False keeps the store's record order;
  ranks read each record once bar at most 2 (world_size - 1) shared reads; each
  window of a rank mixes at most @window records; the order is a function of
  (seed, epoch) and changes with the epoch;
- seeds: no (seed, epoch) replays another's order (seed s at epoch s+1 against seed
  0, seed -s against s);
- `import pcrfs` imports neither torch nor PIL;
- datasets: .samples of str and pathlib.Path, .imgs, Subset, ConcatDataset, nested,
  random_split, and a dataset with none of these (one warning, no crash) give the
  right paths; off-mount files (a plain directory, bare names) are one record each
  with one warning; the sampler and a dataset pickle.
"""

import collections
import os
import pathlib
import pickle
import random
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRCROOT, "python"))
import pcrfs  # noqa: E402

CASES = 1500  # random cases in the property test (about 10 s)


def ds_len(n, world, drop_last):
    """DistributedSampler's len() per rank (the oracle), from torch itself."""
    from torch.utils.data.distributed import DistributedSampler
    return len(DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False,
                                  drop_last=drop_last))


def ds_histogram(n, world, drop_last):
    """{times yielded: number of samples} across all ranks of DistributedSampler."""
    from torch.utils.data.distributed import DistributedSampler
    c = collections.Counter()
    for r in range(world):
        c.update(DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False,
                                    drop_last=drop_last))
    hist = collections.Counter(c[i] for i in range(n))
    return {k: v for k, v in hist.items()}


class Plan(unittest.TestCase):
    def random_groups(self, rng):
        shape = rng.choice(["even", "uneven", "tiny", "one-short"])
        nrec = rng.choice([0, 1, 2, 3, 5, 9, 17, 40, 100])
        if shape == "even":
            sizes = [rng.randint(1, 40)] * nrec
        elif shape == "one-short":  # the issue's store: eight of ~32 and one of 1
            sizes = [rng.randint(28, 36) for _ in range(nrec)] + [1]
        elif shape == "tiny":
            sizes = [1] * nrec
        else:
            sizes = [rng.randint(1, 60) for _ in range(nrec)]
        groups, i = [], 0
        for s in sizes:
            groups.append(list(range(i, i + s)))
            i += s
        return groups, i

    def test_property_against_distributed_sampler(self):
        rng = random.Random(20261125)
        t0 = time.monotonic()
        for case in range(CASES):
            groups, n = self.random_groups(rng)
            world = rng.choice([1, 2, 3, 4, 7, 8, 16, 33, 64, rng.randint(1, 64)])
            shuffle, drop_last = rng.random() < 0.5, rng.random() < 0.5
            seed, epoch, window = rng.randint(-5, 5), rng.randint(0, 3), rng.randint(1, 9)
            what = "case %d: %d records, %d samples, W=%d shuffle=%s drop_last=%s" % (
                case, len(groups), n, world, shuffle, drop_last)
            shares = pcrfs.plan_epoch(groups, world, seed, epoch, shuffle, drop_last, window)
            outs = [pcrfs.rank_indices(groups, r, world, seed, epoch, shuffle, drop_last,
                                       window) for r in range(world)]
            want = ds_len(n, world, drop_last)
            self.assertEqual([len(o) for o in outs], [want] * world, what)
            counts = collections.Counter(i for o in outs for i in o)
            self.assertTrue(set(counts) <= set(range(n)), what)
            hist = collections.Counter(counts[i] for i in range(n))
            self.assertEqual(dict(hist), ds_histogram(n, world, drop_last), what)
            if not drop_last:
                self.assertTrue(all(counts[i] >= 1 for i in range(n)), what)
            else:
                self.assertLessEqual(sum(1 for i in range(n) if not counts[i]), world - 1,
                                     what)
            # each rank's output is its pieces, window by window, each window shuffled
            # within itself and mixing at most @window records
            group_of = {i: g for g, idx in enumerate(groups) for i in idx}
            for r, (pieces, out) in enumerate(zip(shares, outs)):
                pos = 0
                for w in range(0, len(pieces), window):
                    chunk = [i for _, ids in pieces[w:w + window] for i in ids]
                    got = out[pos:pos + len(chunk)]
                    pos += len(chunk)
                    self.assertEqual(sorted(got), sorted(chunk), what)
                    self.assertLessEqual(len({group_of[i] for i in got}), window, what)
                    for g, ids in pieces[w:w + window]:
                        self.assertTrue(all(group_of[i] == g for i in ids), what)
                self.assertEqual(pos, len(out), what)
            # locality: (rank, record) reads beyond one per record come only from the
            # share boundaries (world - 1) and the padding (at most world - 1 samples)
            reads = sum(len({g for g, _ in p}) for p in shares)
            used = len({g for p in shares for g, _ in p})
            self.assertLessEqual(reads - used, 2 * (world - 1), what)
            if not shuffle:  # the store's order, rank after rank (the padding aside)
                seq = [g for p in shares for g, ids in p for _ in ids][:n]
                self.assertEqual(seq, sorted(seq), what)
            if n >= 20 and shuffle and want:
                again = pcrfs.rank_indices(groups, 0, world, seed, epoch, shuffle,
                                           drop_last, window)
                self.assertEqual(again, outs[0], what)
                other = [pcrfs.rank_indices(groups, r, world, seed, epoch + 1, shuffle,
                                            drop_last, window) for r in range(world)]
                self.assertNotEqual(other, outs, what)
            self.assertLess(time.monotonic() - t0, 300, "property test too slow")

    def test_issue_store(self):
        """The issue's 256-sample store (9 records: eight of ~32, one of 1): nothing
        left out at any world size, and with drop_last only 256 mod world_size."""
        sizes = [32, 32, 31, 32, 32, 32, 32, 32, 1]
        groups, i = [], 0
        for s in sizes:
            groups.append(list(range(i, i + s)))
            i += s
        self.assertEqual(i, 256)
        for world in (2, 3, 4, 7, 9, 12, 64):
            for shuffle in (False, True):
                for epoch in range(3):
                    seen = set()
                    for r in range(world):
                        seen.update(pcrfs.rank_indices(groups, r, world, 0, epoch, shuffle))
                    self.assertEqual(seen, set(range(256)), (world, shuffle, epoch))
                left = 256 - len({i for r in range(world) for i in pcrfs.rank_indices(
                    groups, r, world, 0, 0, True, drop_last=True)})
                self.assertEqual(left, 256 % world, world)

    def test_seeds_never_replay(self):
        groups = [list(range(i * 4, i * 4 + 4)) for i in range(30)]
        orders = {}
        for seed in range(-6, 7):
            for epoch in range(8):
                o = tuple(pcrfs.rank_indices(groups, 0, 1, seed, epoch))
                self.assertNotIn(o, orders, ((seed, epoch), orders.get(o)))
                orders[o] = (seed, epoch)
        for s in range(1, 6):  # the issue's two collisions of (seed << 32) ^ epoch
            self.assertNotEqual(pcrfs.rank_indices(groups, 0, 1, s, s + 1),
                                pcrfs.rank_indices(groups, 0, 1, 0, s + 1))
            self.assertNotEqual(pcrfs.rank_indices(groups, 0, 1, -s, 0),
                                pcrfs.rank_indices(groups, 0, 1, s, 0))


class Import(unittest.TestCase):
    def test_import_pcrfs_imports_no_torch(self):
        code = ("import sys; import pcrfs; pcrfs.find_mount; pcrfs.file_id(1);"
                "print('torch' in sys.modules, 'PIL' in sys.modules)")
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                           cwd=os.path.join(SRCROOT, "python"), timeout=120, check=True)
        self.assertEqual(p.stdout.split(), [b"False", b"False"])
        # and RecordSampler is torch's Sampler once asked for
        from torch.utils.data import Sampler
        self.assertTrue(issubclass(pcrfs.RecordSampler, Sampler))


class Datasets(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-sp-")
        cls.files = []
        for c in ("a", "b"):
            os.mkdir(os.path.join(cls.tmp, c))
            for i in range(5):
                p = os.path.join(cls.tmp, c, "%d.bin" % i)
                with open(p, "wb") as f:
                    f.write(b"x")
                cls.files.append(p)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def sampler(self, ds, **kw):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            s = pcrfs.RecordSampler(ds, **kw)
        return s, [str(x.message) for x in w]

    def test_shapes(self):
        from torch.utils.data import ConcatDataset, Subset, random_split

        class Folder:
            def __init__(self, samples, attr="samples"):
                setattr(self, attr, samples)
                self.n = len(samples)

            def __len__(self):
                return self.n

            def __getitem__(self, i):
                return i

        plain = Folder([(p, 0) for p in self.files])
        paths = Folder([(pathlib.Path(p), 0) for p in self.files])
        imgs = Folder([(p, 1) for p in self.files], "imgs")
        bare = Folder(list(self.files))
        sub = Subset(plain, [7, 2, 9])
        cat = ConcatDataset([plain, sub, imgs])
        nested = Subset(cat, [0, 11, 12, 22])
        split = random_split(plain, [4, 6])[1]
        P = pcrfs._sample_paths
        self.assertEqual(P(plain), (self.files, None))
        self.assertEqual(P(paths), (self.files, None))
        self.assertEqual(P(imgs), (self.files, None))
        self.assertEqual(P(bare), (self.files, None))
        self.assertEqual(P(sub), ([self.files[i] for i in (7, 2, 9)], None))
        self.assertEqual(P(cat), (self.files + [self.files[i] for i in (7, 2, 9)] +
                                  self.files, None))
        self.assertEqual(P(nested)[0], [self.files[i] for i in (0, 2, 9, 9)])
        self.assertEqual(P(split)[0], [self.files[i] for i in split.indices])
        for ds in (plain, paths, imgs, sub, cat, nested, split):
            s, warned = self.sampler(ds, seed=1)
            self.assertEqual(sorted(s), list(range(len(ds))))
            self.assertEqual(len(warned), 1, warned)  # off any mount: said once
            self.assertIn("not on a mount", warned[0])
            self.assertEqual(s.records_for_epoch(), [])
            t = pickle.loads(pickle.dumps(s))
            self.assertEqual(list(t), list(s))

    def test_unknown_dataset_warns(self):
        class Odd:
            def __len__(self):
                return 7
        s, warned = self.sampler(Odd(), rank=1, world_size=2)
        self.assertEqual(len(s), 4)
        self.assertEqual(len(list(s)), 4)
        self.assertEqual(len(warned), 1, warned)
        self.assertIn("cannot group by record", warned[0])
        self.assertNotIn("\n", warned[0])

    def test_bare_names(self):
        """Relative names: a directory listing of the working directory."""
        class Folder:
            samples = [("%d.bin" % i, 0) for i in range(5)] + [("missing.bin", 0)]
        old = os.getcwd()
        os.chdir(os.path.join(self.tmp, "a"))
        try:
            keys = pcrfs.record_keys([p for p, _ in Folder.samples])
            s, warned = self.sampler(Folder(), shuffle=False)
        finally:
            os.chdir(old)
        self.assertEqual(keys, [None] * 6)
        self.assertEqual(list(s), list(range(6)))

    def test_hints_ahead(self):
        """With prefetch hints, each window's records are named in one hint before
        the window starts: the first window and the @prefetch_ahead next ones before
        the first sample, then one window further each time a window starts; the
        indices are those without hints. Before, the next window's records were
        named one at a time across the current window (the last at 8/9 of it), too
        late for a window whose records are all read from its first sample on."""
        class Names:
            samples = [("%d.bin" % i, 0) for i in range(24)]

        class Target:  # stands for a pcrfs.Store: takes the hints
            def __init__(self):
                self.calls = []

            def prefetch(self, recs):
                self.calls.append((len(got), list(recs)))

        for ahead in (1, 2):
            s, _ = self.sampler(Names(), window=2, seed=3, prefetch=False)
            # 6 records of 4 samples, as the store's (one mount root)
            s.records = [list(range(4 * k, 4 * k + 4)) for k in range(6)]
            s.keys = [("/m", k + 1) for k in range(6)]
            plain = list(s)
            t = Target()
            s.prefetch, s.prefetch_ahead = t, ahead
            s._target = lambda root: t
            got = []
            for i in s:
                got.append(i)
            self.assertEqual(got, plain)
            wins = [sorted({s.keys[k][1] for k in range(6)
                            if set(s.records[k]) & set(got[8 * w:8 * w + 8])})
                    for w in range(3)]
            want = [(0, wins[w]) for w in range(ahead + 1)] + \
                [(8 * (w - ahead), wins[w]) for w in range(ahead + 1, 3)]
            self.assertEqual([(n, sorted(r)) for n, r in t.calls], want, (ahead, t.calls))
        with self.assertRaises(ValueError):
            pcrfs.RecordSampler(Names(), prefetch_ahead=-1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
