#!/usr/bin/python3
"""The refurbishing library (src/lib/refurb/) against torchvision and Pillow, through
its driver tests/unit/refurb_tool (path: argv[1], or REFURB_TOOL). No FUSE here.

What each class asserts, and would be false if the feature broke:
  Crops   the crop distribution equals torchvision's RandomResizedCrop.get_params:
          two-sample Kolmogorov-Smirnov tests (computed here with numpy) on the area
          fraction and the log aspect ratio of 20,000 draws each, for several image
          shapes and (scale, ratio) settings, at p > 0.001; and the same test does
          reject a crop distribution that is slightly off (so it has power). Images no
          try can fit (1000x10, 10x1000, 20000x200) give torchvision's centre crop
          exactly. Every crop lies inside its image.
  Pixels  for every JPEG of a generated tree (photos up to 1000 px, plus the awkward
          cases: gray, CMYK, RGB, restart markers, arithmetic, progressive, 1x1,
          20000x200) and three versions each, the library's PPM equals torchvision's
          resized_crop + hflip on Pillow's decode of the same bytes, byte for byte,
          with DCT scaling off; with DCT scaling on (decoding at M/8), PSNR against
          that reference is >= PSNR_MIN dB for every sample (and the test checks that
          some samples really were decoded at M < 8). The same at lower levels: the
          first K scans of a progressive transcode + EOI.
"""

import io
import math
import os
import subprocess
import sys
import unittest

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TOOL = None
S = 224
PSNR_MIN = 35.0  # measured: 40-48 dB with DCT scaling (doc/REFURB.md); exact without
DRAWS = 20000
KS_ALPHA = 1e-3


def tool(*args, check=True):
    p = subprocess.run([TOOL] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("refurb_tool %s: exit %d: %s" % (" ".join(map(str, args)),
                                                              p.returncode, p.stderr))
    return p


def ks_2samp(a, b):
    """Two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value
    (Kolmogorov's distribution with Stephens' small-sample correction)."""
    a = np.sort(np.asarray(a, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    pooled = np.concatenate([a, b])
    fa = np.searchsorted(a, pooled, side="right") / len(a)
    fb = np.searchsorted(b, pooled, side="right") / len(b)
    d = float(np.max(np.abs(fa - fb)))
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    if lam < 1e-3:
        return d, 1.0
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(max(p, 0.0), 1.0)


def ours_draws(w, h, seed, n, scale=None, ratio=None):
    args = ["draws", w, h, seed, n]
    if scale:
        args += ["--scale", repr(scale[0]), repr(scale[1])]
    if ratio:
        args += ["--ratio", repr(ratio[0]), repr(ratio[1])]
    rows = np.loadtxt(io.StringIO(tool(*args).stdout), dtype=np.int64, ndmin=2)
    return rows  # top left h w flip fallback


def torch_draws(w, h, n, scale, ratio, seed):
    import torch
    import torchvision.transforms as T
    torch.manual_seed(seed)
    img = torch.empty((1, h, w), dtype=torch.uint8)
    return np.array([T.RandomResizedCrop.get_params(img, list(scale), list(ratio))
                     for _ in range(n)], dtype=np.int64)  # i j h w


class Crops(unittest.TestCase):
    CASES = [  # (W, H, scale, ratio)
        (500, 375, (0.08, 1.0), (3 / 4, 4 / 3)),
        (375, 500, (0.08, 1.0), (3 / 4, 4 / 3)),
        (1000, 300, (0.08, 1.0), (3 / 4, 4 / 3)),  # many tries fail: fallbacks mixed in
        (64, 48, (0.08, 1.0), (3 / 4, 4 / 3)),     # small: rounding matters
        (640, 480, (0.35, 1.0), (0.5, 2.0)),
    ]

    def test_distribution_matches_torchvision(self):
        for k, (w, h, scale, ratio) in enumerate(self.CASES):
            ours = ours_draws(w, h, 100 + k, DRAWS, scale, ratio)
            theirs = torch_draws(w, h, DRAWS, scale, ratio, seed=k)
            self.assertEqual(ours.shape, (DRAWS, 6))
            oh, ow = ours[:, 2], ours[:, 3]
            th, tw = theirs[:, 2], theirs[:, 3]
            for what, a, b in (("area fraction", oh * ow / (w * h), th * tw / (w * h)),
                               ("log aspect", np.log(ow / oh), np.log(tw / th))):
                d, p = ks_2samp(a, b)
                print("  %dx%d scale %s ratio %s: KS %s D=%.4f p=%.3g" % (
                    w, h, scale, ratio, what, d, p), file=sys.stderr)
                self.assertGreater(p, KS_ALPHA, "%dx%d %s: D=%.4f p=%.3g" % (w, h, what, d, p))
            # positions: top / (H - h) is uniform in both
            d, p = ks_2samp(ours[:, 0] / np.maximum(h - oh, 1), theirs[:, 0] / np.maximum(h - th, 1))
            self.assertGreater(p, KS_ALPHA, "%dx%d top: D=%.4f p=%.3g" % (w, h, d, p))

    def test_ks_has_power(self):
        # A crop distribution that is slightly off (scale from 0.10 instead of 0.08)
        # must be told apart: otherwise the test above proves nothing.
        w, h = 500, 375
        ours = ours_draws(w, h, 7, DRAWS, (0.10, 1.0), (3 / 4, 4 / 3))
        theirs = torch_draws(w, h, DRAWS, (0.08, 1.0), (3 / 4, 4 / 3), seed=99)
        d, p = ks_2samp(ours[:, 2] * ours[:, 3], theirs[:, 2] * theirs[:, 3])
        print("  power check (scale 0.10 vs 0.08): D=%.4f p=%.3g" % (d, p), file=sys.stderr)
        self.assertLess(p, 1e-6)

    def test_fallback_is_torchvision_centre_crop(self):
        import torch
        import torchvision.transforms as T
        for w, h in ((1000, 10), (10, 1000), (20000, 200), (200, 20000)):
            img = torch.empty((1, h, w), dtype=torch.uint8)
            want = T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
            for sample in range(20):
                top, left, ch, cw, _flip, fb = map(int, tool("params", w, h, 1, sample, 0)
                                                    .stdout.split())
                self.assertEqual((top, left, ch, cw), tuple(want), "%dx%d" % (w, h))
                self.assertEqual(fb, 1)

    def test_inside_and_flip_rate(self):
        for w, h in ((1, 1), (3, 2), (500, 375), (7, 4000)):
            rows = ours_draws(w, h, 5, 3000)
            top, left, ch, cw, flip = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
            self.assertTrue(np.all((ch >= 1) & (cw >= 1) & (top + ch <= h) & (left + cw <= w)))
            self.assertTrue(0.45 < flip.mean() < 0.55, flip.mean())


def read_ppm(path):
    with open(path, "rb") as f:
        data = f.read()
    head = b"P6\n%d %d\n255\n" % (S, S)
    assert data.startswith(head), data[:20]
    assert len(data) == len(head) + S * S * 3, len(data)
    return np.frombuffer(data[len(head):], dtype=np.uint8).reshape(S, S, 3)


def reference(data, top, left, h, w, flip):
    """What torchvision does to a PIL image: resized_crop (crop + Image.resize with
    BILINEAR, which antialiases) then hflip."""
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode
    im = Image.open(io.BytesIO(data)).convert("RGB")
    out = F.resized_crop(im, top, left, h, w, [S, S], InterpolationMode.BILINEAR)
    if flip:
        out = F.hflip(out)
    return np.asarray(out)


def psnr(a, b):
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


class Pixels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = common.TempDir("pcrfs-refurb-")
        root = os.path.join(cls.tmp.path, "tree")
        doc = common.make_dataset(root, 2, 6, seed=4, awkward=True, size=1000)
        cls.files = []  # (label, bytes)
        for e in doc["entries"]:
            if e["expect"] != "jpeg":
                continue
            path = os.path.join(os.fsencode(root), e["rel"])
            with open(path, "rb") as f:
                cls.files.append((e["path"], f.read()))
        # Lower levels: the first K scans of a progressive transcode of each photo.
        cls.levels = []
        for label, data in cls.files:
            if not os.path.basename(label).startswith("n0000"):
                continue
            p = subprocess.run(["jpegtran", "-progressive", "-copy", "all"], input=data,
                               stdout=subprocess.PIPE, check=True)
            chunks = common.split_jpeg(p.stdout)
            for k in (1, 3, 6):
                cls.levels.append(("%s@%d" % (label, k), common.level_bytes(chunks, k, 10)))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def render(self, data, version, *opts):
        src = os.path.join(self.tmp.path, "in.jpg")
        out = os.path.join(self.tmp.path, "out.ppm")
        with open(src, "wb") as f:
            f.write(data)
        p = tool("render", src, out, 17, 3, version, "--size", S, *opts)
        v = list(map(int, p.stdout.split()))
        return dict(zip(("W", "H", "C", "M", "top", "left", "h", "w", "flip", "warn"), v)), \
            read_ppm(out)

    def compare(self, items, versions):
        exact = 0
        scaled = []
        for label, data in items:
            for version in versions:
                info, px = self.render(data, version, "--no-dct")
                self.assertEqual(info["M"], 8)
                ref = reference(data, info["top"], info["left"], info["h"], info["w"],
                                info["flip"])
                diff = int(np.abs(px.astype(int) - ref).max())
                self.assertEqual(diff, 0, "%s v%d: max |diff| %d without DCT scaling (%s)" % (
                    label, version, diff, info))
                exact += 1
                info2, px2 = self.render(data, version)
                self.assertEqual([info2[k] for k in ("top", "left", "h", "w", "flip")],
                                 [info[k] for k in ("top", "left", "h", "w", "flip")])
                q = psnr(px2, ref)
                if info2["M"] < 8:
                    scaled.append((q, info2["M"], label))
                else:
                    self.assertEqual(q, float("inf"), "%s v%d at M=8" % (label, version))
                self.assertGreaterEqual(q, PSNR_MIN, "%s v%d: PSNR %.1f dB at M=%d/8" % (
                    label, version, q, info2["M"]))
        return exact, scaled

    def test_pixels_full_level(self):
        exact, scaled = self.compare(self.files, range(3))
        qs = [q for q, _, _ in scaled]
        print("  full level: %d renders byte-exact without DCT scaling; %d decoded at M<8, "
              "PSNR min %.1f mean %.1f dB (M used: %s)" % (
                  exact, len(scaled), min(qs), sum(qs) / len(qs),
                  sorted(set(m for _, m, _ in scaled))), file=sys.stderr)
        self.assertGreaterEqual(len(scaled), 10, "too few samples used DCT scaling")

    def test_pixels_lower_levels(self):
        exact, scaled = self.compare(self.levels, range(2))
        qs = [q for q, _, _ in scaled]
        print("  levels 1/3/6: %d renders byte-exact without DCT scaling; %d at M<8, PSNR min "
              "%.1f mean %.1f dB" % (exact, len(scaled), min(qs), sum(qs) / len(qs)),
              file=sys.stderr)
        self.assertGreaterEqual(len(scaled), 5)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        TOOL = sys.argv.pop(1)
    TOOL = TOOL or os.environ.get("REFURB_TOOL")
    if not TOOL or not os.access(TOOL, os.X_OK):
        sys.exit("test_refurb_lib.py: no refurb_tool (argv[1] or REFURB_TOOL): %r" % TOOL)
    unittest.main(verbosity=2)
