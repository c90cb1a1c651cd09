#!/usr/bin/python3
"""End-to-end tests of fidelity: scan-script presets (mkpcrfs --scans), the MS-SSIM
inspector (pcrinfo --fidelity) and the dynamic view (pcrfs -o level=K, the control
file /.pcrfs/level). tests/integration/meson.build sets MKPCRFS, PCRINFO, PCRFS.

What each class asserts, and would be false if the feature broke:
  Presets     default, fast and a user script file each build; every level of every
              JPEG is header + chunks 1..min(K, n) + FF D9 (the test's own splitter),
              decodes cleanly with djpeg and Pillow, and the top level has the
              source's pixels; default == `jpegtran -progressive -copy all` and the
              user file == `jpegtran -scans FILE -copy all`, byte for byte; scan counts
              per image class; fast has no refinement scan; the store records its
              script and L
  BadScripts  invalid, incomplete (lossy) or missing script files are usage errors and
              leave nothing behind
  Fidelity    pcrinfo --fidelity: full = 1.0, lower levels lower, equal to an
              independent numpy MS-SSIM of djpeg's luma (mean per level, all images);
              the recommendation follows the threshold; the seed fixes the sample
  PerImage    mkpcrfs --quality: every JPEG's stored MS-SSIM at every level equals an
              independent numpy MS-SSIM of Pillow's luma of `pcrinfo --cat --level K`
              (within the stored step, 1/60000, plus 1e-6); for 0.90, 0.95, 0.99 the
              lowest level the index names is the lowest the recomputation reaches;
              pcrinfo's per-image table (JSON and text) agrees with both; verbatim
              files and builds without --quality have no table; -j does not change it
  Dynamic     (see the class) the dynamic view switches level under a live reader
"""

import errno
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import run  # noqa: E402

CLASSES, PER_CLASS, SIZE = 2, 10, 420  # + ~25 awkward files; ~45 JPEGs

# A user script: PCR's luma bands without refinement, a DC refinement at the end.
USER_SCRIPT = """# test script: DC at half precision, refined last
0,1,2: 0-0, 0, 1;
0: 1-5, 0, 0;    # luma low band
1: 1-63, 0, 0;
2: 1-63, 0, 0;
0: 6-63, 0, 0;
0,1,2: 0-0, 1, 0;
"""

# Scans per image class, by store (None: the class keeps libjpeg's default).
DEFAULT_SCANS = {"ycc": 10, "gray": 6, "rgb": 14, "cmyk": 18}
EXPECT_SCANS = {
    "default": DEFAULT_SCANS,
    "fast": {"ycc": 9, "gray": 5, "rgb": 7, "cmyk": 9},
    "user": {"ycc": 6, "gray": 4, "rgb": 6, "cmyk": 18},
}
EXPECT_LEVELS = {"default": 10, "fast": 9, "user": 6}


def mkpcrfs():
    return common.program("MKPCRFS")


def pcrinfo():
    return common.program("PCRINFO")


def report(failures, what, limit=25):
    if failures:
        raise AssertionError("%d %s:\n  %s" % (len(failures), what,
                                               "\n  ".join(failures[:limit])))


def image_class(data):
    """'gray', 'ycc', 'rgb' or 'cmyk' of a JPEG, from its SOF and Adobe marker."""
    sof = common.sof_info(data)
    n = sof[4]
    if n == 1:
        return "gray"
    if n == 4:
        return "cmyk"
    # An Adobe APP14 with transform 0 means RGB (what cjpeg -rgb writes).
    # (APP14: FF EE, length, "Adobe", version, flags0, flags1, transform)
    i = data.find(b"Adobe")
    if 4 <= i < 400 and data[i - 4:i - 2] == b"\xff\xee" and data[i + 11] == 0:
        return "rgb"
    return "ycc"


def sos_params(data):
    """[(Ns, Ss, Se, Ah, Al)] of every scan, walking the markers."""
    out = []
    pos = 2
    n = len(data)
    while pos + 4 <= n and data[pos] == 0xFF:
        m = data[pos + 1]
        if m == 0xD9:
            break
        ln = (data[pos + 2] << 8) | data[pos + 3]
        if m == 0xDA:
            p = pos + 4
            ns = data[p]
            q = p + 1 + 2 * ns
            out.append((ns, data[q], data[q + 1], data[q + 2] >> 4, data[q + 2] & 15))
            pos += 2 + ln
            while pos + 1 < n and not (data[pos] == 0xFF and data[pos + 1] != 0 and
                                       not 0xD0 <= data[pos + 1] <= 0xD7):
                pos += 1
            continue
        pos += 2 + ln
    return out


def parse_list(store):
    p = run([pcrinfo(), "--list", store], check=0)
    out = {}
    for line in p.stdout.split(b"\n"):
        if line:
            parts = line.split(b"\t")
            out[common.unescape(parts[0])] = (parts[1].decode(), int(parts[2]),
                                              [int(x) for x in parts[3].split()])
    return out


# --------------------------------------------------------------------------------
# MS-SSIM, independently (numpy), from the definition in pcrfs/fidelity.h.

_W = np.array([0.0448, 0.2856, 0.3001, 0.2363, 0.1333])
_C1, _C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2


def _gauss():
    x = np.arange(11) - 5.0
    g = np.exp(-x * x / (2 * 1.5 * 1.5))
    return g / g.sum()


def _filt(img, g):
    sw = np.lib.stride_tricks.sliding_window_view
    v = sw(img, 11, axis=0) @ g
    return sw(v, 11, axis=1) @ g


def _down(img):
    h, w = img.shape
    if h % 2:
        img = np.vstack([img, img[-1:]])
    if w % 2:
        img = np.hstack([img, img[:, -1:]])
    return (img[0::2, 0::2] + img[1::2, 0::2] + img[0::2, 1::2] + img[1::2, 1::2]) / 4


def msssim(a, b):
    """MS-SSIM of 8-bit 2-D arrays @a against @b."""
    x = a.astype(np.float64)
    y = b.astype(np.float64)
    if min(x.shape) < 11:
        mx, my = x.mean(), y.mean()
        vx, vy = ((x - mx) ** 2).mean(), ((y - my) ** 2).mean()
        cov = ((x - mx) * (y - my)).mean()
        v = (2 * mx * my + _C1) * (2 * cov + _C2) / ((mx * mx + my * my + _C1) * (vx + vy + _C2))
        return min(max(v, 0.0), 1.0)
    g = _gauss()
    vals = []
    while len(vals) < 5 and min(x.shape) >= 11:
        mx, my = _filt(x, g), _filt(y, g)
        vx = _filt(x * x, g) - mx * mx
        vy = _filt(y * y, g) - my * my
        cov = _filt(x * y, g) - mx * my
        cs = (2 * cov + _C2) / (vx + vy + _C2)
        lum = (2 * mx * my + _C1) / (mx * mx + my * my + _C1)
        vals.append((cs.mean(), (lum * cs).mean()))
        x, y = _down(x), _down(y)
    m = len(vals)
    w = _W[:m] / _W[:m].sum()
    out = 1.0
    for j, (mcs, ssim) in enumerate(vals):
        v = ssim if j == m - 1 else mcs
        out *= max(v, 0.0) ** w[j]
    return min(max(out, 0.0), 1.0)


def luma(data):
    """The luma plane pcrinfo measures, decoded by other code: djpeg -grayscale for
    YCbCr, gray and RGB; for CMYK, Pillow's pixels (Pillow inverts Adobe CMYK, libjpeg
    does not) through the documented formula."""
    if common.sof_info(data)[4] == 4:
        im = common.pillow_image(data)
        a = 255 - np.asarray(im, dtype=np.int64)  # back to libjpeg's values
        y = (299 * a[:, :, 0] + 587 * a[:, :, 1] + 114 * a[:, :, 2]) * a[:, :, 3]
        return ((y + 1000 * 255 // 2) // (1000 * 255)).astype(np.uint8)
    p = subprocess.run(["djpeg", "-grayscale", "-pnm"], input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60, check=True)
    m = re.match(rb"P5\s+(\d+)\s+(\d+)\s+(\d+)\s", p.stdout)
    w, h = int(m.group(1)), int(m.group(2))
    return np.frombuffer(p.stdout[m.end():m.end() + w * h], dtype=np.uint8).reshape(h, w)


# --------------------------------------------------------------------------------
# Fixtures


class Env:
    tmp = None
    stores = {}

    @classmethod
    def dir(cls):
        if cls.tmp is None:
            cls.tmp = common.TempDir("pcrfs-fidelity-test-")
        return cls.tmp.path

    @classmethod
    def src(cls):
        if "src" not in cls.stores:
            d = os.path.join(cls.dir(), "src")
            cls.stores["manifest"] = common.make_dataset(d, CLASSES, PER_CLASS, 21,
                                                         awkward=True, size=SIZE)
            cls.stores["src"] = d
            script = os.path.join(cls.dir(), "my-scans.txt")
            with open(script, "w") as f:
                f.write(USER_SCRIPT)
            cls.stores["script"] = script
        return cls.stores["src"]

    @classmethod
    def store(cls, preset):
        """{'path', 'json', 'list', 'extract': {K: {rel: path}}} of the store built
        from the test tree with --scans @preset ('user' = the script file)."""
        key = "store-" + preset
        if key not in cls.stores:
            src = cls.src()
            path = os.path.join(cls.dir(), preset + ".pcr")
            arg = cls.stores["script"] if preset == "user" else preset
            run([mkpcrfs(), "-q", "-j2", "-n", "16", "--scans", arg, src, path], check=0)
            st = {"path": path, "json": json.loads(run([pcrinfo(), "--json", path],
                                                       check=0).stdout),
                  "list": parse_list(path), "extract": {}}
            for k in range(1, st["json"]["levels"] + 1):
                d = os.path.join(cls.dir(), "%s-L%d" % (preset, k))
                run([pcrinfo(), "--extract", d, "--level", str(k), path], check=0)
                st["extract"][k] = common.tree_files(d)[0]
            cls.stores[key] = st
        return cls.stores[key]


def tearDownModule():
    if Env.tmp is not None and not os.environ.get("PCRFS_KEEP_TMP"):
        Env.tmp.cleanup()


# --------------------------------------------------------------------------------


class Presets(unittest.TestCase):
    PRESETS = ("default", "fast", "user")

    @classmethod
    def setUpClass(cls):
        cls.src = os.fsencode(Env.src())
        cls.files, _ = common.source_files(Env.src())

    def jpegs(self, st):
        rels = [r for r, (kind, _, _) in st["list"].items() if kind == "jpeg"]
        self.assertGreaterEqual(len(rels), 35)
        return rels

    def test_store_records_script_and_levels(self):
        names = {"default": "libjpeg-default", "fast": "fast", "user": "file:my-scans.txt"}
        for p in self.PRESETS:
            st = Env.store(p)
            self.assertEqual(st["json"]["levels"], EXPECT_LEVELS[p], p)
            self.assertEqual(st["json"]["script"], names[p], p)
            con = sqlite3.connect("file:%s?mode=ro" % os.path.join(st["path"], "index.db"),
                                  uri=True)
            meta = dict(con.execute("SELECT key, value FROM meta"))
            con.close()
            self.assertEqual(meta["levels"], str(EXPECT_LEVELS[p]))
            self.assertEqual(meta["script"], names[p])
            for cls in ("gray", "ycc", "rgb", "cmyk"):
                self.assertEqual(st["json"]["scans"][cls], meta["scans." + cls])
            if p == "default":
                self.assertEqual(set(st["json"]["scans"].values()), {"libjpeg-default"})
            if p == "user":
                # The recorded colour script is the file's, scan for scan.
                text = re.sub(r"#.*", "", USER_SCRIPT)
                want = [tuple(int(x) for x in re.findall(r"\d+", s))
                        for s in text.split(";") if re.search(r"\d", s)]
                got = [tuple(int(x) for x in re.findall(r"\d+", s))
                       for s in meta["scans.ycc"].split(";") if re.search(r"\d", s)]
                self.assertEqual(got, want)

    def test_levels_are_prefixes_and_decode(self):
        for p in self.PRESETS:
            st = Env.store(p)
            L = st["json"]["levels"]
            bad = []
            seen = {}
            for rel in self.jpegs(st):
                full = common.read(st["extract"][L][rel])
                chunks = common.split_jpeg(full)
                for k in range(1, L + 1):
                    got = common.read(st["extract"][k][rel])
                    if got != common.level_bytes(chunks, k, L):
                        bad.append("%s %s level %d: not header + %d scans + EOI" % (
                            p, common.fmt_path(rel), k, min(k, len(chunks))))
                    seen.setdefault(got, "%s %s level %d" % (p, common.fmt_path(rel), k))
            for data, where in seen.items():
                rc, err = common.djpeg(data)
                if rc != 0 or err:
                    bad.append("%s: djpeg exit %d: %s" % (where, rc, err))
                try:
                    common.pillow_image(data)
                except Exception as e:
                    bad.append("%s: Pillow: %s" % (where, e))
            report(bad, "bad levels")

    def test_full_level_has_source_pixels(self):
        for p in self.PRESETS:
            st = Env.store(p)
            L = st["json"]["levels"]
            bad = []
            for rel in self.jpegs(st):
                src = common.pixels(common.read(self.files[rel]))
                got = common.pixels(common.read(st["extract"][L][rel]))
                if src != got:
                    bad.append("%s %s" % (p, common.fmt_path(rel)))
            report(bad, "full levels whose pixels differ from the source")

    def test_scan_counts_per_class(self):
        for p in self.PRESETS:
            st = Env.store(p)
            L = st["json"]["levels"]
            seen = set()
            bad = []
            for rel in self.jpegs(st):
                data = common.read(st["extract"][L][rel])
                cls = image_class(common.read(self.files[rel]))
                seen.add(cls)
                n = len(common.split_jpeg(data))
                if n != EXPECT_SCANS[p][cls]:
                    bad.append("%s %s (%s): %d scans, want %d" % (
                        p, common.fmt_path(rel), cls, n, EXPECT_SCANS[p][cls]))
                if st["list"][rel][1] != n:
                    bad.append("%s %s: --list says %d chunks" % (p, common.fmt_path(rel),
                                                                  st["list"][rel][1]))
            self.assertEqual(seen, {"ycc", "gray", "rgb", "cmyk"})
            report(bad, "scan count errors")

    def test_fast_is_spectral_selection_only(self):
        st = Env.store("fast")
        L = st["json"]["levels"]
        for rel in self.jpegs(st):
            scans = sos_params(common.read(st["extract"][L][rel]))
            self.assertTrue(scans)
            for ns, ss, se, ah, al in scans:
                self.assertEqual((ah, al), (0, 0), common.fmt_path(rel))
                if ss > 0:
                    self.assertEqual(ns, 1)

    def test_default_is_jpegtran_progressive(self):
        st = Env.store("default")
        L = st["json"]["levels"]
        bad = []
        for rel in self.jpegs(st):
            want = run(["jpegtran", "-progressive", "-copy", "all"],
                       input=common.read(self.files[rel]), check=0).stdout
            if common.read(st["extract"][L][rel]) != want:
                bad.append(common.fmt_path(rel))
        report(bad, "default-preset files that differ from jpegtran -progressive -copy all")

    def test_user_file_is_jpegtran_scans(self):
        """For images of the script's own class (3 components), the store holds exactly
        what jpegtran -scans FILE writes; other classes get its projection or the
        default (counted in test_scan_counts_per_class)."""
        st = Env.store("user")
        L = st["json"]["levels"]
        bad = []
        n = 0
        for rel in self.jpegs(st):
            src = common.read(self.files[rel])
            if image_class(src) not in ("ycc", "rgb"):
                continue
            n += 1
            want = run(["jpegtran", "-scans", Env.stores["script"], "-copy", "all"], input=src,
                       check=0).stdout
            if common.read(st["extract"][L][rel]) != want:
                bad.append(common.fmt_path(rel))
        self.assertGreater(n, 20)
        report(bad, "user-script files that differ from jpegtran -scans FILE -copy all")

    def test_fast_is_smaller_than_source_and_close_to_default(self):
        d = Env.store("default")["json"]["table"][-1]["mean_bytes"]
        f = Env.store("fast")["json"]["table"][-1]["mean_bytes"]
        self.assertLess(f, d * 1.05, "fast full level more than 5% larger than default")


class BadScripts(unittest.TestCase):
    def test_rejected(self):
        base = Env.dir()
        src = Env.src()
        cases = [
            ("incomplete", "0,1,2: 0-0, 0, 0; 0: 1-62, 0, 0; 1: 1-63, 0, 0; 2: 1-63, 0, 0;",
             "coefficient 63 is never sent"),
            ("lossy", "0,1,2: 0-0, 0, 0; 0: 1-63, 0, 1; 1: 1-63, 0, 0; 2: 1-63, 0, 0;",
             "stops at bit 1"),
            ("syntax", "0,1,2: 0-0, 0, 0; 0: 1-63 x", "line 1"),
            ("ac-first", "0: 1-63, 0, 0; 0,1,2: 0-0, 0, 0;", "before its DC"),
        ]
        for name, text, needle in cases:
            path = os.path.join(base, "bad-%s.txt" % name)
            with open(path, "w") as f:
                f.write(text)
            out = os.path.join(base, "bad-%s.pcr" % name)
            p = run([mkpcrfs(), "-q", "--scans", path, src, out])
            self.assertEqual(p.returncode, 2, name)
            self.assertIn(needle, p.stderr.decode(), name)
            self.assertFalse(os.path.exists(out), name)
        p = run([mkpcrfs(), "-q", "--scans", os.path.join(base, "missing.txt"), src,
                 os.path.join(base, "m.pcr")])
        self.assertEqual(p.returncode, 2)
        self.assertIn("neither 'default', 'fast' nor a readable file", p.stderr.decode())
        help_text = run([mkpcrfs(), "--help"], check=0).stdout.decode()
        self.assertIn("--scans", help_text)


# --------------------------------------------------------------------------------


def fidelity(store, *args):
    p = run([pcrinfo(), "--fidelity", "--json"] + list(args) + [store], check=0)
    return json.loads(p.stdout)


class Fidelity(unittest.TestCase):
    def test_levels_against_numpy(self):
        """Every JPEG (sample >= count): the mean MS-SSIM of each level equals the
        test's own numpy MS-SSIM of djpeg's luma; full is exactly 1; lower is lower."""
        for p in ("default", "fast"):
            st = Env.store(p)
            L = st["json"]["levels"]
            j = fidelity(st["path"], "--sample", "100000")
            rels = [r for r, (kind, _, _) in st["list"].items() if kind == "jpeg"]
            self.assertEqual(j["sample"], len(rels))
            self.assertEqual(j["jpeg"], len(rels))
            self.assertEqual(j["levels"], L)
            self.assertEqual(j["failures"], 0)
            self.assertEqual([t["level"] for t in j["table"]], list(range(1, L + 1)))
            sums = [0.0] * (L + 1)
            byts = [0] * (L + 1)
            for rel in rels:
                ref = luma(common.read(st["extract"][L][rel]))
                for k in range(1, L + 1):
                    data = common.read(st["extract"][k][rel])
                    byts[k] += len(data)
                    sums[k] += msssim(luma(data), ref)
            for k in range(1, L + 1):
                t = j["table"][k - 1]
                self.assertAlmostEqual(t["msssim"], sums[k] / len(rels), delta=1e-6,
                                       msg="%s level %d" % (p, k))
                self.assertAlmostEqual(t["mean_bytes"], byts[k] / len(rels), delta=1e-3)
                self.assertGreater(t["decode_ms"], 0)
            ms = [t["msssim"] for t in j["table"]]
            self.assertEqual(ms[-1], 1.0)
            self.assertEqual(j["table"][-1]["msssim_min"], 1.0)
            self.assertLess(ms[0], 0.9, "%s: level 1 of photo-like images is far from full" % p)
            self.assertLess(ms[0], ms[L // 2])
            self.assertEqual(ms, sorted(ms), "%s: MS-SSIM must not fall with the level" % p)
            # The recommendation: the lowest level whose mean reaches 0.95.
            self.assertEqual(j["threshold"], 0.95)
            self.assertEqual(j["recommended"], min(t["level"] for t in j["table"]
                                                   if t["msssim"] >= 0.95))

    def test_threshold_moves_recommendation(self):
        st = Env.store("default")
        lo = fidelity(st["path"], "--threshold", "0.5", "--sample", "20")
        hi = fidelity(st["path"], "--threshold", "1", "--sample", "20")
        mid = fidelity(st["path"], "--threshold", "0.97", "--sample", "20")
        self.assertEqual(lo["recommended"], 1)
        self.assertEqual(hi["recommended"], min(t["level"] for t in hi["table"]
                                                if t["msssim"] >= 1.0))
        self.assertLessEqual(lo["recommended"], mid["recommended"])
        self.assertLessEqual(mid["recommended"], hi["recommended"])
        self.assertGreater(hi["recommended"], lo["recommended"])

    def test_seed_fixes_sample(self):
        st = Env.store("fast")
        a = fidelity(st["path"], "--sample", "8", "--seed", "5", "-j", "1")
        b = fidelity(st["path"], "--sample", "8", "--seed", "5", "-j", "2")
        c = fidelity(st["path"], "--sample", "8", "--seed", "6")
        self.assertEqual(a["sample"], 8)
        key = lambda j: [(t["msssim"], t["mean_bytes"]) for t in j["table"]]  # noqa: E731
        self.assertEqual(key(a), key(b), "same seed, other thread count: same sample")
        self.assertNotEqual(key(a), key(c), "another seed: another sample")

    def test_text_output(self):
        st = Env.store("fast")
        out = run([pcrinfo(), "--fidelity", "--sample", "10", st["path"]],
                  check=0).stdout.decode()
        self.assertRegex(out, r"fidelity\s+10 of")
        self.assertRegex(out, r"\n\s+9\s+1\.0000\s+1\.0000\s")
        self.assertRegex(out, r"recommended\s+level \d+: the lowest whose mean MS-SSIM >= 0.95")

    def test_usage_errors(self):
        st = Env.store("default")["path"]
        for args in (["--fidelity", "--sample", "0"], ["--fidelity", "--threshold", "1.5"],
                     ["--fidelity", "--threshold", "x"], ["--sample", "5"], ["--seed", "1"],
                     ["--fidelity", "--verify"], ["--json", "--list"],
                     ["--fidelity", "--level", "2"]):
            p = run([pcrinfo()] + args + [st])
            self.assertEqual(p.returncode, 2, args)


# --------------------------------------------------------------------------------
# Per-image fidelity (mkpcrfs --quality)

QSCALE = 60000  # PCR_QUALITY_SCALE: stored = floor(MS-SSIM * 60000) (pcrfs(5))
THRESHOLDS = (0.90, 0.95, 0.99)


def pillow_luma(data):
    """Luma decoded by Pillow: the Y plane of a YCbCr JPEG (decoded as YCbCr, so no
    colour conversion: the samples libjpeg's gray output holds), a gray JPEG's plane.
    RGB and CMYK JPEGs go through luma() (their luma is a formula of the pixels)."""
    from PIL import Image
    cls = image_class(data)
    if cls not in ("ycc", "gray"):
        return luma(data)
    im = Image.open(io.BytesIO(data))
    if cls == "ycc":
        im.draft("YCbCr", im.size)
    im.load()
    if im.mode == "YCbCr":
        return np.asarray(im.getchannel(0))
    assert im.mode == "L", im.mode
    return np.asarray(im)


def stored_quality(store):
    """{path: [MS-SSIM of levels 1..L-1] or []} from index.db's files.quality."""
    db = sqlite3.connect("file:%s?immutable=1" % os.path.join(store, "index.db"), uri=True)
    try:
        dirs = {i: (p, bytes(n)) for i, p, n in db.execute("SELECT id, parent, name FROM dirs")}
        out = {}
        for d, name, q in db.execute("SELECT dir, name, quality FROM files"):
            parts = [bytes(name)]
            while d != 1:
                parts.insert(0, dirs[d][1])
                d = dirs[d][0]
            out[b"/".join(parts)] = [int.from_bytes(q[i:i + 2], "little") / QSCALE
                                     for i in range(0, len(q), 2)]
        return out
    finally:
        db.close()


def lowest(values, t, top):
    """The lowest level (1-based) whose value reaches @t, else @top."""
    return next((k + 1 for k, v in enumerate(values) if v >= t), top)


class PerImage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        src = Env.src()
        cls.path = os.path.join(Env.dir(), "quality.pcr")
        run([mkpcrfs(), "-q", "-j2", "-n", "16", "--quality", src, cls.path], check=0)
        cls.json = json.loads(run([pcrinfo(), "--json", cls.path], check=0).stdout)
        cls.L = cls.json["levels"]
        cls.list = parse_list(cls.path)
        cls.q = stored_quality(cls.path)
        # the independent measure: every level of every JPEG through pcrinfo --cat,
        # decoded by Pillow, MS-SSIM in numpy
        cls.ref = {}
        for rel, (kind, _, _) in cls.list.items():
            if kind != "jpeg":
                continue
            lv = [pillow_luma(run([pcrinfo(), "--cat", os.fsdecode(rel), "--level", str(k),
                                   cls.path], check=0).stdout) for k in range(1, cls.L + 1)]
            cls.ref[rel] = [msssim(lv[k], lv[-1]) for k in range(cls.L - 1)]

    def test_1_stored_values_match_numpy(self):
        """Tolerance: the store keeps floor(v * 60000) / 60000, so stored <= v < stored +
        1/60000; the library and numpy agree to 1e-6 (summation order)."""
        self.assertGreater(len(self.ref), 30)
        bad = []
        for rel, want in self.ref.items():
            got = self.q[rel]
            self.assertEqual(len(got), self.L - 1, common.fmt_path(rel))
            for k, (g, w) in enumerate(zip(got, want), 1):
                if not (g - 1e-6 <= w < g + 1.0 / QSCALE + 1e-6):
                    bad.append("%s level %d: stored %.6f, numpy %.6f" %
                               (common.fmt_path(rel), k, g, w))
        report(bad, "stored MS-SSIM values that differ from numpy's")
        spread = [v for vals in self.ref.values() for v in vals]
        self.assertLess(min(spread), 0.9, "level 1 of photo-like images is far from full")
        for rel, (kind, _, _) in self.list.items():
            if kind != "jpeg":
                self.assertEqual(self.q[rel], [], "%s has a quality table" % common.fmt_path(rel))

    def test_2_lowest_level_per_threshold(self):
        """For every JPEG and threshold the level the index names (the lowest whose
        stored value reaches it) is the lowest the numpy values reach; a value within
        the tolerance of the threshold may fall on either side."""
        tol = 1.0 / QSCALE + 1e-6
        bad = []
        for t in THRESHOLDS:
            for rel, want in self.ref.items():
                k = lowest(self.q[rel], t, self.L)
                if k < self.L and not want[k - 1] >= t - tol:
                    bad.append("%s at %.2f: level %d has numpy %.6f" %
                               (common.fmt_path(rel), t, k, want[k - 1]))
                for j in range(k - 1):
                    if not want[j] < t + tol:
                        bad.append("%s at %.2f: level %d (numpy %.6f) is lower than %d" %
                                   (common.fmt_path(rel), t, j + 1, want[j], k))
        report(bad, "per-image levels that are not the lowest reaching the threshold")

    def test_3_summary_per_threshold(self):
        """pcrinfo's table, from pcr_file_level_for(): mean level, mean bytes and the
        lowest MS-SSIM when each JPEG is served at its own level, beside one level for
        all (the lowest whose mean reaches t, and the lowest whose minimum does)."""
        q = self.json["quality"]
        self.assertIsNotNone(q)
        jpegs = [r for r, (kind, _, _) in self.list.items() if kind == "jpeg"]
        self.assertEqual(q["measured"], len(jpegs))
        for k in range(1, self.L + 1):
            vals = [self.q[r][k - 1] if k < self.L else 1.0 for r in jpegs]
            row = q["table"][k - 1]
            self.assertAlmostEqual(row["msssim_mean"], sum(vals) / len(vals), delta=1e-6)
            self.assertAlmostEqual(row["msssim_min"], min(vals), delta=1e-6)
        self.assertEqual([r["threshold"] for r in q["thresholds"]], [0.9, 0.95, 0.99])
        for row in q["thresholds"]:
            t = row["threshold"]
            lv = {r: lowest(self.q[r], t, self.L) for r in jpegs}
            size = {r: self.list[r][2][lv[r] - 1] for r in jpegs}
            got = row["per_image"]
            self.assertAlmostEqual(got["mean_level"], sum(lv.values()) / len(jpegs), delta=1e-4)
            self.assertAlmostEqual(got["mean_bytes"], sum(size.values()) / len(jpegs), delta=1e-3)
            self.assertAlmostEqual(got["msssim_min"], min(
                (self.q[r] + [1.0])[lv[r] - 1] for r in jpegs), delta=1e-6)
            self.assertGreaterEqual(got["msssim_min"], t)
            means = [r["msssim_mean"] for r in q["table"]]
            g = lowest(means[:-1], t, self.L)
            self.assertEqual(row["global_mean"]["level"], g)
            self.assertAlmostEqual(row["global_mean"]["mean_bytes"],
                                   self.json["table"][g - 1]["mean_bytes"], delta=1e-3)
            self.assertEqual(row["global_min"]["level"],
                             lowest([r["msssim_min"] for r in q["table"]][:-1], t, self.L))
            # per image never costs more bytes than the one level every image reaches
            self.assertLessEqual(got["mean_bytes"], row["global_min"]["mean_bytes"] + 1e-6)

    def test_4_text_and_extra_threshold(self):
        out = run([pcrinfo(), "--threshold", "0.975", self.path], check=0).stdout.decode()
        self.assertRegex(out, r"level\s+mean bytes/JPEG\s+ratio to full\s+MS-SSIM\s+min\n")
        self.assertIn("measured at build time for %d of %d JPEGs" %
                      (self.json["quality"]["measured"], self.json["jpeg"]), out)
        for t in ("0.90", "0.95", "0.975", "0.99"):
            self.assertRegex(out, r"\n\s+%s\s+\d+\.\d\d\s+\d+\s+" % re.escape(t))
        j = json.loads(run([pcrinfo(), "--json", "--threshold", "0.975", "--threshold", "0.9",
                            self.path], check=0).stdout)
        self.assertEqual([r["threshold"] for r in j["quality"]["thresholds"]],
                         [0.9, 0.95, 0.975, 0.99])
        for args in (["--verify", "--threshold", "0.9"], ["--threshold", "0"],
                     ["--threshold", "1.01"]):
            self.assertEqual(run([pcrinfo()] + args + [self.path]).returncode, 2, args)

    def test_5_off_by_default_and_deterministic(self):
        src = Env.src()
        off = os.path.join(Env.dir(), "quality-off.pcr")
        one = os.path.join(Env.dir(), "quality-j1.pcr")
        run([mkpcrfs(), "-q", "-j2", "-n", "16", src, off], check=0)
        run([mkpcrfs(), "-q", "-j1", "-n", "16", "--quality", src, one], check=0)
        self.assertTrue(all(v == [] for v in stored_quality(off).values()))
        j = json.loads(run([pcrinfo(), "--json", off], check=0).stdout)
        self.assertIsNone(j["quality"])
        self.assertNotIn("per-image levels", run([pcrinfo(), off], check=0).stdout.decode())
        self.assertEqual(stored_quality(one), self.q, "-j1 and -j2 store the same values")
        db = sqlite3.connect("file:%s?immutable=1" % os.path.join(off, "index.db"), uri=True)
        self.assertEqual(db.execute("SELECT value FROM meta WHERE key = 'quality'").fetchone(),
                         ("off",))
        db.close()


# --------------------------------------------------------------------------------
# The dynamic view


def expect_errno(test, err, fn, *args):
    with test.assertRaises(OSError, msg="%s%r" % (fn.__name__, args)) as cm:
        fn(*args)
    test.assertEqual(cm.exception.errno, err, "%s%r: %s" % (fn.__name__, args, cm.exception))


def write_level(mnt, value):
    """Write @value to MNT/.pcrfs/level as `echo` would (O_TRUNC, one write)."""
    fd = os.open(os.path.join(mnt, ".pcrfs", "level"), os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value if isinstance(value, bytes) else value.encode())
    finally:
        os.close(fd)


def read_level(mnt):
    with open(os.path.join(mnt, ".pcrfs", "level"), "rb") as f:
        return f.read()


def stats(mnt):
    with open(os.path.join(mnt, ".pcrfs", "stats")) as f:
        return json.load(f)


class Dynamic(unittest.TestCase):
    """pcrfs -o level=K: dynamic/ serves level K until /.pcrfs/level (or setxattr
    user.pcrfs.level on dynamic/) says otherwise. After a switch a stat or an open
    through the kernel sees the new level's size and bytes (compared with pcrinfo's
    --list sizes and --extract trees); a file open across switches keeps the level it
    was opened at (no mixed reads); every other write fails with EROFS."""

    @classmethod
    def setUpClass(cls):
        import mount_util as mu
        cls.mu = mu
        cls.st = Env.store("fast")
        cls.L = cls.st["json"]["levels"]
        cls.rels = sorted(cls.st["list"])
        cls.mnt = os.path.join(Env.dir(), "mnt-dynamic")
        cls.m = mu.Mount(cls.st["path"], cls.mnt, "-o", "level=2").start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.m.unmount()
        cls.m.cleanup()
        if rc != 0:
            raise AssertionError("pcrfs exited %r: %s" % (rc, cls.m.stderr()))

    def dyn(self, rel=b""):
        return os.path.join(os.fsencode(self.mnt), b"dynamic", rel)

    def want(self, rel, k):
        return common.read(self.st["extract"][k][rel])

    def check_level(self, k):
        """Every file of dynamic/ has level @k's size (stat) and bytes (read)."""
        self.assertEqual(read_level(self.mnt), b"%d\n" % k)
        bad = []
        for rel in self.rels:
            size = os.stat(self.dyn(rel)).st_size
            if size != self.st["list"][rel][2][k - 1]:
                bad.append("%s: size %d, level %d is %d" % (common.fmt_path(rel), size, k,
                                                            self.st["list"][rel][2][k - 1]))
            elif common.read(self.dyn(rel)) != self.want(rel, k):
                bad.append("%s: bytes are not level %d's" % (common.fmt_path(rel), k))
        report(bad, "dynamic/ files not at level %d" % k)

    def test_1_layout_and_level_at_mount(self):
        root = sorted(os.listdir(self.mnt))
        self.assertIn("dynamic", root)
        self.assertEqual(len(root), self.L + 3)  # scan1..L, full, dynamic, .pcrfs
        self.assertEqual(sorted(os.listdir(os.path.join(self.mnt, ".pcrfs"))),
                         ["info", "level", "prefetch", "records", "stats"])
        self.assertEqual(os.stat(os.path.join(self.mnt, ".pcrfs", "level")).st_mode & 0o777,
                         0o644)
        with open(os.path.join(self.mnt, ".pcrfs", "info")) as f:
            info = json.load(f)
        self.assertTrue(info["dynamic"])
        self.assertIn("dynamic", info["views"])
        files, dirs = common.tree_files(self.dyn())
        self.assertEqual(set(files), set(self.rels))
        write_level(self.mnt, "2")
        self.check_level(2)
        # Not a read-only mount (the control file must be writable) ...
        with open("/proc/mounts") as f:
            opts = [l.split()[3] for l in f if l.split()[1] == self.mnt]
        self.assertEqual(len(opts), 1)
        self.assertNotIn("ro", opts[0].split(","))

    def test_2_switch_by_control_file(self):
        before = stats(self.mnt)["views"]["dynamic"]["switches"]
        seq = [5, 1, self.L, 3]
        for k in seq:
            write_level(self.mnt, "%d\n" % k)
            self.check_level(k)
            self.assertEqual(stats(self.mnt)["views"]["dynamic"]["level"], k)
        write_level(self.mnt, "full")
        self.check_level(self.L)
        self.assertEqual(stats(self.mnt)["views"]["dynamic"]["switches"], before + len(seq) + 1)
        # the echo of a shell, O_CREAT included
        p = run(["sh", "-c", "echo 4 > '%s/.pcrfs/level'" % self.mnt])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_level(4)

    def test_3_switch_by_setxattr(self):
        os.setxattr(self.dyn(), "user.pcrfs.level", b"6")
        self.check_level(6)
        os.setxattr(self.dyn(), "user.pcrfs.level", b"full")
        self.check_level(self.L)
        expect_errno(self, errno.EINVAL, os.setxattr, self.dyn(), "user.pcrfs.level", b"0")
        expect_errno(self, errno.EROFS, os.setxattr, self.dyn(), "user.other", b"1")
        expect_errno(self, errno.EROFS, os.setxattr, self.dyn(self.rels[0]), "user.pcrfs.level",
                     b"1")

    def test_4_bad_levels_refused(self):
        write_level(self.mnt, "3")
        for bad in ("0", str(self.L + 1), "abc", "\n", "-1", "3x", "1 2", "99999999999"):
            expect_errno(self, errno.EINVAL, write_level, self.mnt, bad)
        self.assertEqual(read_level(self.mnt), b"3\n")

    def test_5_open_file_keeps_its_level(self):
        """Open at level 2, switch to L in the middle of reading: the rest of the file,
        its fstat size and a re-read from offset 0 are still level 2's; a new open is
        level L's."""
        jpegs = [r for r in self.rels if self.st["list"][r][0] == "jpeg"]
        for rel in jpegs[:12]:
            write_level(self.mnt, "2")
            lo, hi = self.want(rel, 2), self.want(rel, self.L)
            self.assertNotEqual(lo, hi)
            with open(self.dyn(rel), "rb", buffering=0) as f:
                head = f.read(len(lo) // 2)
                write_level(self.mnt, "full")
                self.assertEqual(os.fstat(f.fileno()).st_size, len(lo))
                rest = f.read()
                f.seek(0)
                again = f.read()
            self.assertEqual(head + rest, lo, common.fmt_path(rel))
            self.assertEqual(again, lo, common.fmt_path(rel))
            self.assertEqual(common.read(self.dyn(rel)), hi)
            self.assertEqual(os.stat(self.dyn(rel)).st_size, len(hi))

    def test_5b_pages_across_switches(self):
        """What a switch costs in re-reads, as pcrfs(1) states it, from the daemon's
        byte counter: reading a level again without a switch reads nothing (pages
        kept across opens); after a -> b -> a every file of a is read again (the
        kernel evicts a FUSE inode with its pages once no name or open file refers
        to it, and a name of dynamic/ refers to one level's inode at a time), except
        a file held open across the switches, whose inode and pages survive."""
        a, b = 4, 2
        size = {k: sum(self.st["list"][rel][2][k - 1] for rel in self.rels) for k in (a, b)}

        def served():
            return stats(self.mnt)["views"]["dynamic"]["bytes"]

        def read_all():
            before = served()
            for rel in self.rels:
                common.read(self.dyn(rel))
            return served() - before

        write_level(self.mnt, "%d" % a)
        read_all()
        self.assertEqual(read_all(), 0, "level %d read again without a switch" % a)
        held = open(self.dyn(self.rels[0]), "rb")
        try:
            write_level(self.mnt, "%d" % b)
            self.assertEqual(read_all(), size[b])
            write_level(self.mnt, "%d" % a)
            self.assertEqual(read_all(), size[a] - self.st["list"][self.rels[0]][2][a - 1],
                             "after %d -> %d -> %d: all of level %d but the held file" %
                             (a, b, a, a))
        finally:
            held.close()

    def test_6_live_readers_never_see_a_mix(self):
        """Readers loop over dynamic/ (small reads, so each file takes many READs)
        while the level changes every few milliseconds: every file read is exactly one
        level's bytes, its fstat size is that level's, levels do change under the
        readers, and reads do span switches."""
        import random
        import threading
        levels = {rel: {self.want(rel, k): k for k in range(1, self.L + 1)}
                  for rel in self.rels}
        stop = threading.Event()
        switches = [0]
        results = []

        def reader(seed):
            rnd = random.Random(seed)
            seen, bad, spanned, n = set(), [], 0, 0
            while not stop.is_set():
                rel = rnd.choice(self.rels)
                s0 = switches[0]
                with open(self.dyn(rel), "rb", buffering=0) as f:
                    chunks = []
                    while True:
                        c = f.read(rnd.choice((512, 1000, 4096)))
                        if not c:
                            break
                        chunks.append(c)
                    size = os.fstat(f.fileno()).st_size
                data = b"".join(chunks)
                n += 1
                if switches[0] != s0:
                    spanned += 1
                k = levels[rel].get(data)
                if k is None:
                    bad.append("%s: %d bytes that are no level's" % (common.fmt_path(rel),
                                                                     len(data)))
                elif size != len(data):
                    bad.append("%s: fstat %d, read %d" % (common.fmt_path(rel), size, len(data)))
                else:
                    seen.add(k)
            results.append((n, seen, bad, spanned))

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        rnd = random.Random(7)
        t_end = time.time() + 4.0
        try:
            while time.time() < t_end:
                write_level(self.mnt, str(rnd.randint(1, self.L)))
                switches[0] += 1
                time.sleep(0.005)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(len(results), 3)
        for n, seen, bad, spanned in results:
            report(bad, "mixed or wrong reads")
            self.assertGreater(n, 20)
            self.assertGreaterEqual(len(seen), 3, "the level did not change under the reader")
            self.assertGreater(spanned, 0, "no read spanned a switch")
        self.assertGreater(switches[0], 50)

    def test_7_imagefolder_follows_the_level(self):
        from torchvision.datasets import ImageFolder
        write_level(self.mnt, "1")
        ds = ImageFolder(os.path.join(self.mnt, "dynamic"))
        self.assertGreaterEqual(len(ds), CLASSES * PER_CLASS)
        path = ds.samples[0][0]
        rel = os.path.relpath(os.fsencode(path), self.dyn())
        low = ds[0][0]
        write_level(self.mnt, "full")
        full = ds[0][0]  # the same dataset object: no rebuild, no new listing
        self.assertEqual(low.size, full.size)
        self.assertNotEqual(low.tobytes(), full.tobytes())
        self.assertEqual(full.tobytes(), common.pillow_image(self.want(rel, self.L))
                         .convert("RGB").tobytes())

    def test_8_other_writes_fail_with_erofs(self):
        m = os.fsencode(self.mnt)
        rel = self.rels[0]
        for view in (b"dynamic", b"scan1", b"full"):
            f = os.path.join(m, view, rel)
            d = os.path.dirname(f)
            expect_errno(self, errno.EROFS, os.open, f, os.O_WRONLY)
            expect_errno(self, errno.EROFS, os.open, f, os.O_RDONLY | os.O_TRUNC)
            expect_errno(self, errno.EROFS, os.open, d + b"/n", os.O_WRONLY | os.O_CREAT, 0o644)
            expect_errno(self, errno.EROFS, os.mkdir, d + b"/n")
            expect_errno(self, errno.EROFS, os.mkfifo, d + b"/fifo")
            expect_errno(self, errno.EROFS, os.unlink, f)
            expect_errno(self, errno.EROFS, os.rmdir, d)
            expect_errno(self, errno.EROFS, os.rename, f, d + b"/x")
            expect_errno(self, errno.EROFS, os.link, f, d + b"/x")
            expect_errno(self, errno.EROFS, os.symlink, b"x", d + b"/x")
            expect_errno(self, errno.EROFS, os.truncate, f, 0)
            expect_errno(self, errno.EROFS, os.chmod, f, 0o600)
            expect_errno(self, errno.EROFS, os.chown, f, 1, 1)
            expect_errno(self, errno.EROFS, os.utime, f, (0, 0))
            expect_errno(self, errno.EROFS, os.setxattr, f, "user.x", b"1")
            expect_errno(self, errno.EROFS, os.removexattr, f, "user.x")
            self.assertFalse(os.access(f, os.W_OK))
            self.assertTrue(os.access(f, os.R_OK))
        for p in (b".pcrfs", b"dynamic", b""):
            expect_errno(self, errno.EROFS, os.open, os.path.join(m, p, b"new"),
                         os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(self, errno.EROFS, os.open, os.path.join(m, b".pcrfs/info"), os.O_WRONLY)
        expect_errno(self, errno.EROFS, os.unlink, os.path.join(m, b".pcrfs/level"))
        expect_errno(self, errno.EROFS, os.chmod, os.path.join(m, b".pcrfs/level"), 0o666)
        self.assertTrue(os.access(os.path.join(m, b".pcrfs/level"), os.W_OK))
        for view in (b"dynamic", b"scan1"):
            self.assertEqual(common.read(os.path.join(m, view, rel)),
                             common.read(os.path.join(m, view, rel)))

    def test_9_other_users(self):
        """With allow_other, another user reads everything, cannot change the level
        (EACCES, EPERM) and gets EROFS for every other write."""
        if os.geteuid() != 0:
            self.skipTest("needs root to act as another user")
        # (the test's own directory is 0700: the other user could not reach a mount
        # point in it)
        base = common.TempDir("pcrfs-fidelity-others-")
        self.addCleanup(base.cleanup)
        os.chmod(base.path, 0o755)
        mnt = os.path.join(base.path, "mnt")
        with self.mu.Mount(self.st["path"], mnt, "-o", "level=3,allow_other") as m:
            rel = self.rels[0]
            code = r"""
import errno, os, sys
m, rel = sys.argv[1].encode(), bytes.fromhex(sys.argv[2])
os.setgid(65534); os.setuid(65534)
out = []
def err(fn, *a):
    try:
        fn(*a)
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
def wr():
    fd = os.open(m + b"/.pcrfs/level", os.O_WRONLY)
    os.write(fd, b"1")
err(wr)
err(os.setxattr, m + b"/dynamic", "user.pcrfs.level", b"1")
err(os.open, m + b"/dynamic/" + rel, os.O_WRONLY)
err(os.mkdir, m + b"/full/x")
err(os.unlink, m + b"/scan1/" + rel)
print(" ".join(out), len(open(m + b"/dynamic/" + rel, "rb").read()),
      os.access(m + b"/full", os.W_OK))
"""
            p = run([common.PYTHON, "-c", code, mnt, rel.hex()], check=0)
            self.assertEqual(p.stdout.decode().split(),
                             ["EACCES", "EPERM", "EROFS", "EROFS", "EROFS",
                              str(self.st["list"][rel][2][2]), "False"])
            self.assertEqual(read_level(mnt), b"3\n")
            self.assertEqual(m.unmount(), 0, m.stderr())

    def test_options(self):
        mu = self.mu
        for bad in ("level=0", "level=%d" % (self.L + 1), "level=abc", "level="):
            mnt = os.path.join(Env.dir(), "mnt-bad")
            os.makedirs(mnt, exist_ok=True)
            p = run([mu.program("PCRFS"), self.st["path"], mnt, "-f", "-o", bad], timeout=30)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(b"%s: want a level" % bad.encode(), p.stderr, bad)
            self.assertFalse(os.path.ismount(mnt))
        # Without -o level: no dynamic view, no control file, a read-only mount.
        mnt = os.path.join(Env.dir(), "mnt-static")
        with mu.Mount(self.st["path"], mnt) as m:
            self.assertNotIn("dynamic", os.listdir(mnt))
            expect_errno(self, errno.ENOENT, os.stat, os.path.join(mnt, ".pcrfs", "level"))
            expect_errno(self, errno.ENOENT, os.stat, os.path.join(mnt, "dynamic"))
            with open("/proc/mounts") as f:
                opts = [l.split()[3] for l in f if l.split()[1] == mnt]
            self.assertIn("ro", opts[0].split(","))
            self.assertEqual(m.unmount(), 0, m.stderr())
        mnt = os.path.join(Env.dir(), "mnt-full")
        with mu.Mount(self.st["path"], mnt, "-o", "level=full") as m:
            self.assertEqual(read_level(mnt), b"%d\n" % self.L)
            self.assertEqual(m.unmount(), 0, m.stderr())


if __name__ == "__main__":
    unittest.main(verbosity=2)
