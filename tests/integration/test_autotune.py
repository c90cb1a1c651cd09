#!/usr/bin/python3
"""pcrfs.Autotuner (python/pcrfs/autotune.py) against a real mount.

What each test asserts, and would be false if the feature broke:
- on a task whose classes differ only in fine, high-frequency texture, a small CNN
  trained a few epochs keeps a level that holds the fine luma detail (>= 5 of the
  default script's 10: scan 5 is the first with luma AC 6..63); on a task whose
  classes differ only in mean colour, it drops to level <= 2 (scan 1 holds the DC);
  the level is written to MNT/.pcrfs/level;
- the chance guard: a model whose output does not depend on the image is at chance
  on the probe, so no level is chosen and the full level is written; without the
  guard the same model's rule picks level 1;
- step() leaves the model as it found it: weights, gradients, BatchNorm buffers,
  eval mode, torch's and Python's RNG; two tunings give the same similarities;
- the schedule (warmup, every), the probe (random images fixed by the seed, or whole
  records with at most one cut), and the
  errors: a mount without -o level, a dataset not on a mount, a level out of range;
- autotune.py imports without torch (pcrfs.Autotuner is loaded on first use) and
  meson installs it beside __init__.py.
"""

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
import pcrfs  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torchvision import transforms  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

SIZE = 32          # image side (4 x 4 JPEG blocks)
PER_CLASS = 120    # training images per class and task
PER_RECORD = 16
EPOCHS = 4         # training epochs before tuning (bounded: seconds on 2 cores)
PROBE = 192
TF = transforms.ToTensor()


def detail_image(rng, cls):
    """Classes differ only in the orientation of a fine (2.5-3.5 px period) stripe
    texture: a random colour and a soft blob shared by both classes, so only the
    high-frequency luma tells them apart."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    a = math.radians((0 if cls == 0 else 90) + rng.uniform(-10, 10))
    period = rng.uniform(2.5, 3.5)
    stripes = np.sin(2 * math.pi / period * (xx * math.cos(a) + yy * math.sin(a))
                     + rng.uniform(0, 2 * math.pi))
    cx, cy, r = rng.uniform(0, SIZE), rng.uniform(0, SIZE), rng.uniform(SIZE / 6, SIZE / 2)
    blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    img = (rng.uniform(70, 180, 3)[None, None, :] + 45 * stripes[:, :, None]
           + rng.uniform(-50, 50, 3)[None, None, :] * blob[:, :, None])
    return img


def colour_image(rng, cls):
    """Classes differ only in mean colour (reddish or bluish); a smooth gradient
    and a little grain shared by both classes."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    base = np.array([170, 110, 80] if cls == 0 else [80, 110, 170], np.float32)
    base += rng.uniform(-25, 25, 3)
    a = rng.uniform(0, 2 * math.pi)
    ramp = (xx * math.cos(a) + yy * math.sin(a)) / SIZE
    img = (base[None, None, :] + rng.uniform(10, 30) * ramp[:, :, None]
           + rng.normal(0, 4, (SIZE, SIZE, 3)))
    return img


def make_task(root, make, seed):
    rng = np.random.default_rng(seed)
    for cls in (0, 1):
        d = os.path.join(root, "class%d" % cls)
        os.makedirs(d)
        for i in range(PER_CLASS):
            img = np.clip(make(rng, cls), 0, 255).astype(np.uint8)
            Image.fromarray(img, "RGB").save(os.path.join(d, "%04d.jpg" % i), quality=92)


class Net(nn.Module):
    """A tiny CNN with BatchNorm (train-mode gradients differ from eval-mode ones)
    and dropout (random draws the tuner must fix)."""

    def __init__(self, ncls=2):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.b2 = nn.BatchNorm2d(32)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(32, ncls)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.relu(self.b2(self.c2(x)))
        return self.fc(self.drop(x.mean(dim=(2, 3))))


def train(model, root, epochs, seed):
    torch.manual_seed(seed)
    ds = ImageFolder(root, transform=TF, loader=pcrfs.pil_loader)
    dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(epochs):
        for x, y in dl:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model


class Autotune(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-autotune-",
                                   dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mount = cls.plain = None
        try:
            src = os.path.join(cls.tmp, "src")
            make_task(os.path.join(src, "colour"), colour_image, 1)
            make_task(os.path.join(src, "detail"), detail_image, 2)
            cls.store = os.path.join(cls.tmp, "store.pcr")
            mu.build_store(src, cls.store, per_record=PER_RECORD)
            cls.mnt = os.path.join(cls.tmp, "mnt")
            cls.mount = mu.Mount(cls.store, cls.mnt, "-o", "level=full").start()
            cls.L = pcrfs.levels(cls.mnt)
            cls.record_of_id = mu.record_of_id(cls.store)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for m in (cls.mount, cls.plain):
            if m:
                m.cleanup()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dataset(self, task, view="dynamic"):
        return ImageFolder(os.path.join(self.mnt, view, task), transform=TF,
                           loader=pcrfs.pil_loader)

    def tuner(self, model, task="detail", **kw):
        kw.setdefault("probe", PROBE)
        kw.setdefault("batch_size", 64)
        kw.setdefault("warmup", 0)
        return pcrfs.Autotuner(self.dataset(task), model, nn.CrossEntropyLoss(), **kw)

    def test_known_answer(self):
        self.assertEqual(self.L, 10)  # the default script: scan 5 brings luma AC 6..63
        got = {}
        for task in ("detail", "colour"):
            t = time.monotonic()
            model = train(Net(), os.path.join(self.mnt, "full", task), EPOCHS, 0)
            pcrfs.set_level(self.mnt, "full")
            r = self.tuner(model, task).step(0)
            print("%s: %s (train and tune %.1f s)" % (task, r, time.monotonic() - t))
            self.assertFalse(r.guarded, r)
            self.assertEqual(r.level, r.chosen)
            self.assertEqual(pcrfs.level(self.mnt), r.level)
            self.assertEqual(sorted(r.similarity), list(range(1, self.L + 1)))
            got[task] = r
        # detail: levels 1-4 hold no fine luma detail, so their gradients point
        # elsewhere; colour: level 1's DC already holds the mean colour.
        self.assertGreaterEqual(got["detail"].level, 5, got["detail"])
        self.assertLess(got["detail"].similarity[1], 0.8, got["detail"])
        self.assertLessEqual(got["colour"].level, 2, got["colour"])

    def test_chance_guard(self):
        model = Net()
        with torch.no_grad():
            # A collapsed model: the last ReLU is dead, so the output (fc's bias)
            # and the gradient (fc's bias only) do not depend on the image.
            model.b2.bias.fill_(-100.0)
            model.fc.bias.copy_(torch.tensor([0.3, -0.2]))
        pcrfs.set_level(self.mnt, 3)
        r = self.tuner(model).step(0)
        self.assertTrue(r.guarded, r)
        self.assertIsNone(r.chosen)
        self.assertEqual(r.level, self.L)
        self.assertEqual(pcrfs.level(self.mnt), self.L)
        self.assertIn("chance", r.reason)
        self.assertLessEqual(r.accuracy, 0.6)
        # What the guard prevents: every level scores 1.0, the rule picks level 1.
        r2 = self.tuner(model, guard=False).step(0)
        self.assertFalse(r2.guarded)
        for k, s in r2.similarity.items():
            self.assertAlmostEqual(s, 1.0, places=5, msg=k)
        self.assertEqual(r2.level, 1, r2)
        self.assertEqual(pcrfs.level(self.mnt), 1)
        pcrfs.set_level(self.mnt, "full")

    def test_state_restored(self):
        torch.manual_seed(3)
        model = Net()
        train(model, os.path.join(self.mnt, "full", "detail"), 1, 3)
        model.eval()
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        model.fc.bias.grad = None
        state = {k: v.clone() for k, v in model.state_dict().items()}
        grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
        torch.manual_seed(11)
        random.seed(12)
        rng, pyrng = torch.get_rng_state(), random.getstate()
        tuner = self.tuner(model, levels=[1, 2, 5])
        r1 = tuner.step(0)
        self.assertFalse(model.training)
        self.assertTrue(torch.equal(torch.get_rng_state(), rng))
        self.assertEqual(random.getstate(), pyrng)
        after = model.state_dict()
        self.assertEqual(sorted(after), sorted(state))
        for k, v in state.items():
            self.assertTrue(torch.equal(after[k], v), k)  # BN running stats included
        for p, g in zip(model.parameters(), grads):
            if g is None:
                self.assertIsNone(p.grad)
            else:
                self.assertTrue(torch.equal(p.grad, g))
        self.assertIn("b1.running_mean", state)
        # Same weights, same probe, same draws: the same scores.
        r2 = tuner.step(0)
        self.assertEqual(r1.similarity, r2.similarity)
        self.assertEqual(sorted(r1.similarity), [1, 2, 5, self.L])
        # A random transform draws the same crops and flips at every level, in the
        # main process or in DataLoader workers.
        aug = transforms.Compose([transforms.RandomCrop(SIZE, padding=4),
                                  transforms.RandomHorizontalFlip(), TF])
        r3 = self.tuner(model, levels=[1, 2, 5], transform=aug).step(0)
        r4 = self.tuner(model, levels=[1, 2, 5], transform=aug, num_workers=2).step(0)
        self.assertEqual(r3.similarity, r4.similarity)
        self.assertNotEqual(r3.similarity, r1.similarity)
        pcrfs.set_level(self.mnt, "full")

    def test_schedule(self):
        # BatchNorm1d cannot train on a batch of one: the probe's 32 images in
        # batches of 31 must not end with one.
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * SIZE * SIZE, 8),
                              nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        pcrfs.set_level(self.mnt, 7)
        tuner = self.tuner(model, warmup=2, every=3, levels=[1], guard=False, probe=32,
                           batch_size=31)
        self.assertEqual([e for e in range(12) if tuner.due(e)], [2, 5, 8, 11])
        self.assertIsNone(tuner.step(1))
        self.assertEqual(pcrfs.level(self.mnt), 7)  # no tuning, no write
        r = tuner.step(2)
        self.assertEqual(r.epoch, 2)
        self.assertEqual(pcrfs.level(self.mnt), r.level)
        self.assertIsNone(tuner.step(3))
        pcrfs.set_level(self.mnt, "full")

    def test_probe_random(self):
        ds = self.dataset("detail")
        tuner = self.tuner(Net(), probe=40, seed=5)
        self.assertEqual(len(set(tuner.probe)), 40)
        self.assertEqual(set(ds.samples[i][1] for i in tuner.probe), {0, 1})
        self.assertEqual(self.tuner(Net(), probe=40, seed=5).probe, tuner.probe)
        self.assertNotEqual(sorted(self.tuner(Net(), probe=40, seed=6).probe),
                            sorted(tuner.probe))
        self.assertEqual(sorted(self.tuner(Net(), probe=10 ** 6).probe), list(range(len(ds))))

    def test_probe_whole_records(self):
        probe = 40
        tuner = self.tuner(Net(), probe=probe, seed=5, whole_records=True)
        ds = self.dataset("detail")
        self.assertEqual(len(tuner.probe), probe)
        self.assertEqual(len(set(tuner.probe)), probe)
        rec = [self.record_of_id[os.stat(ds.samples[i][0]).st_ino & ((1 << 55) - 1)]
               for i in range(len(ds))]
        in_probe = {}
        for i in tuner.probe:
            in_probe[rec[i]] = in_probe.get(rec[i], 0) + 1
        cut = [r for r, n in in_probe.items() if n < rec.count(r)]
        self.assertLessEqual(len(cut), 1, in_probe)       # whole records but the last
        self.assertGreaterEqual(len(in_probe), probe // PER_RECORD)
        # the seed picks the records; another seed picks others
        other = self.tuner(Net(), probe=probe, seed=6, whole_records=True).probe
        self.assertNotEqual(sorted(other), sorted(tuner.probe))
        self.assertEqual(self.tuner(Net(), probe=probe, seed=5, whole_records=True).probe,
                         tuner.probe)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "levels must be in"):
            self.tuner(Net(), levels=[0])
        with self.assertRaisesRegex(ValueError, "not inside a pcrfs mount"):
            pcrfs.Autotuner(ImageFolder(os.path.join(self.tmp, "src", "detail")), Net(),
                            nn.CrossEntropyLoss())
        with self.assertRaisesRegex(ValueError, "transform="):
            pcrfs.Autotuner(os.path.join(self.mnt, "dynamic", "detail"), Net(),
                            nn.CrossEntropyLoss())
        # A path with a transform works as its ImageFolder does.
        r = pcrfs.Autotuner(os.path.join(self.mnt, "dynamic", "detail"), Net(),
                            nn.CrossEntropyLoss(), transform=TF, probe=16, levels=[1],
                            guard=False).tune(write=False)
        self.assertEqual(sorted(r.similarity), [1, self.L])
        cls = type(self)
        cls.plain = mu.Mount(self.store, os.path.join(self.tmp, "plain")).start()
        try:
            with self.assertRaisesRegex(ValueError, "-o level=K"):
                pcrfs.Autotuner(os.path.join(self.tmp, "plain", "full", "detail"), Net(),
                                nn.CrossEntropyLoss(), transform=TF)
        finally:
            self.assertEqual(cls.plain.unmount(), 0)
            cls.plain = None


class Module(unittest.TestCase):
    def test_no_torch_at_import(self):
        code = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, %r)\n"
                "import pcrfs.autotune\n"
                "assert 'Autotuner' in pcrfs.__all__ and pcrfs.Autotuner\n"
                "try:\n    pcrfs.Autotuner('.', None, None)\nexcept ImportError:\n"
                "    print('needs torch')\n" % os.path.join(mu.SRCROOT, "python"))
        p = subprocess.run([mu.PYTHON, "-c", code], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), b"needs torch")

    def test_installed_beside_init(self):
        p = subprocess.run(["meson", "introspect", "--installed", mu.build_dir()],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout)
        dest = {os.path.basename(k): v for k, v in plan.items()
                if os.path.dirname(k).endswith(os.path.join("python", "pcrfs"))}
        self.assertIn("autotune.py", dest)
        self.assertEqual(os.path.dirname(dest["autotune.py"]),
                         os.path.dirname(dest["__init__.py"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
