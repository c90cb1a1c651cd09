#!/usr/bin/python3
"""The store as a library (libpcrfs.so, pcrfs(3)) and the Python dataset over it,
without a mount.

What each test asserts, and would be false if the feature broke:
- for every view a mount of the same store serves (scanK/, full/, dynamic/, qNN/
  with and without a quality table, mix/, refurb/, tokens/), the library lists the
  same names in the same order, the same sizes and the same bytes (first open of
  each file);
- pcrfs.ImageFolder(store) as user nobody, in a mount namespace where /dev/fuse is
  /dev/null, yields every sample with torchvision's classes and targets;
- one Store read by 4 threads at once gives every file's bytes;
- Store.readinto() fills bytearrays and numpy arrays with read()'s bytes, no more;
  with mix/ served (a read is an open), read() allocates one copy of the file (the
  bytes it returns) and gives a mount's bytes, draw for draw, also from an offset;
  read() with a scratch buffer smaller than every file gives the sized read's bytes;
  the default loader's image equals Image.open().convert('RGB') (RGB, L, CMYK JPEGs,
  a PNG with a transparent palette entry);
- a DataLoader with 2 workers (fork and spawn) over it and RecordSampler yields every
  sample once, grouped by the store's records, and by default names every record to
  the Store as a prefetch hint (none with prefetch=False, the same order);
- a C program compiled with `pkg-config --cflags --libs pcrfs` against an installed
  tree lists and reads the store; the install carries only the umbrella header and a
  library that exports pcrfs_* alone; the installed Python module finds the installed
  library without PCRFS_LIB;
- pcrinfo --extract and --cat at --level K and full give scanK/'s and full/'s tree
  and bytes (they are clients of the public API);
- pcrfs_open() refuses a bad bwlimit=, readahead=, cache=, cache_size=,
  http_timeout= or http_retries= with the same line as the daemon (one parser).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import mount_util as mu  # noqa: E402

sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
LIB = os.environ.get("PCRFS_LIB") or os.path.join(mu.build_dir(), "src", "lib", "api",
                                                   "libpcrfs.so")
os.environ["PCRFS_LIB"] = LIB
import pcrfs  # noqa: E402


def walk_mount(root, rel=""):
    """[(rel path, is_dir, size)] in listing order, depth first."""
    out = []
    base = os.path.join(root, rel)
    for name in os.listdir(base):
        p = os.path.join(rel, name) if rel else name
        full = os.path.join(root, p)
        if os.path.isdir(full):
            out.append((p, True, 0))
            out += walk_mount(root, p)
        else:
            out.append((p, False, os.stat(full).st_size))
    return out


def walk_store(store, rel=""):
    out = []
    for name, isdir in store.scandir(rel):
        p = "%s/%s" % (rel, name) if rel else name
        if isdir:
            out.append((p, True, 0))
            out += walk_store(store, p)
        else:
            out.append((p, False, store.size(p)))
    return out


def make_stores(cls, awkward=False):
    """cls.src (a generated dataset, with @awkward files), cls.store of it and
    cls.store_qt, with a quality table and a token tree (q90/ q95/ q99/ of their
    own and tokens/), under cls.tmp."""
    cls.src = os.path.join(cls.tmp, "src")
    common.make_dataset(cls.src, classes=3, per_class=5, seed=7, awkward=awkward)
    cls.store = os.path.join(cls.tmp, "store")
    mu.build_store(cls.src, cls.store, per_record=4)
    tok = os.path.join(cls.tmp, "tok")
    mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py"), "--seed",
            "5", "-k", "391", "--grid", "16", "tree", cls.src, tok], check=0)
    cls.store_qt = os.path.join(cls.tmp, "store-qt")
    mu.run([mu.program("MKPCRFS"), "-q", "-n", "4", "--quality", "--tokens", tok, cls.src,
            cls.store_qt], check=0)


class LibraryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-lib-")
        os.chmod(cls.tmp, 0o755)  # nobody reads the store
        make_stores(cls)
        for d, dirs, files in os.walk(cls.tmp):
            for n in dirs:
                os.chmod(os.path.join(d, n), 0o755)
            for n in files:
                os.chmod(os.path.join(d, n), 0o644)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def same_as_mount(self, store=None, **options):
        store = store or self.store
        opts = ",".join("%s=%s" % kv for kv in options.items())
        mnt = os.path.join(self.tmp, "mnt")
        m = mu.Mount(store, mnt, *(["-o", opts] if opts else []))
        with m:
            with pcrfs.Store(store, **options) as st:
                want = [e for e in walk_mount(mnt) if not e[0].startswith(".pcrfs")]
                got = walk_store(st)
                self.assertEqual(got, want, options)
                self.assertGreater(sum(1 for e in got if not e[1]), 15)
                for p, isdir, size in got:
                    if isdir:
                        continue
                    with open(os.path.join(mnt, p), "rb") as f:
                        b = f.read()
                    self.assertEqual(st.read(p), b, p)
                    self.assertEqual(len(b), size, p)
                with open(os.path.join(mnt, ".pcrfs", "info")) as f:
                    views = json.load(f)["views"]
                self.assertEqual(st.info()["views"], views)
            self.assertEqual(m.unmount(), 0)
        return views

    def test_views_plain(self):
        self.same_as_mount()

    def test_views_options(self):
        # dynamic/, qNN/ (no quality table: the top level), mix/ (first draws) and
        # refurb/ (first versions) beside the scan views
        self.same_as_mount(level=2, quality="0.9:0.95", mix="1-3", mix_seed=5, refurb=2,
                           refurb_size=32, refurb_threads=0)

    def test_views_quality_tokens(self):
        # q90/ q95/ q99/ from a quality table, tokens/ from a token tree
        views = self.same_as_mount(store=self.store_qt)
        for v in ("q90", "q95", "q99", "tokens"):
            self.assertIn(v, views)

    def big_store(self):
        """A store of one 640x640 JPEG (c/big.jpg, over 256 KiB at its largest
        scans), built once, and the mix= option of those scans."""
        from PIL import Image
        src = os.path.join(self.tmp, "big-src")
        store = os.path.join(self.tmp, "big-store")
        if not os.path.exists(store):
            os.makedirs(os.path.join(src, "c"), exist_ok=True)
            rnd = __import__("random").Random(3)
            im = Image.frombytes("RGB", (640, 640),
                                 bytes(rnd.getrandbits(8) for _ in range(640 * 640 * 3)))
            im.save(os.path.join(src, "c", "big.jpg"), quality=97)
            mu.build_store(src, store, per_record=4)
        with pcrfs.Store(store) as st:
            top = max(int(n[4:]) for n in st.listdir() if n.startswith("scan"))
        return store, "%d-%d" % (top - 1, top)

    def test_per_open_views_one_draw_per_read(self):
        # mix/ draws a pass at each open: Store.read() of a file bigger than its
        # scratch buffer (256 KiB) must still be one open, so that N reads see the
        # passes a mount's N opens see (a partial read, then a whole one, drew two).
        store, mix = self.big_store()  # the largest scans: the file is > 256 KiB
        opts = {"mix": mix, "mix_seed": "5"}
        mnt = os.path.join(self.tmp, "mnt")
        with pcrfs.Store(store, **opts) as st:
            got = [st.read("mix/c/big.jpg") for _ in range(4)]
        self.assertGreater(max(len(b) for b in got), 1 << 18)
        m = mu.Mount(store, mnt, "-o", "mix=%s,mix_seed=5" % mix)
        with m:
            want = []
            for _ in range(4):
                with open(os.path.join(mnt, "mix", "c", "big.jpg"), "rb") as f:
                    want.append(f.read())
            self.assertEqual(m.unmount(), 0)
        self.assertEqual([len(b) for b in got], [len(b) for b in want])
        self.assertEqual(got, want)
        self.assertGreater(len(set(got)), 1)  # the passes differ: the draws are seen

    def test_per_open_read_copies_once(self):
        # With mix/ served every Store.read() is an open (one draw); it reads into
        # the thread's scratch buffer and copies once, into the bytes it returns:
        # those are all it allocates (before: a zero-filled bytearray of the file and
        # then its copy, twice the file). The bytes are a mount's, draw for draw,
        # also from an offset.
        import tracemalloc
        store, mix = self.big_store()
        path, off = "mix/c/big.jpg", 1000
        with pcrfs.Store(store, mix=mix, mix_seed="5") as st:
            got = [st.read("full/c/big.jpg")]  # the largest: the scratch buffer grows
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                got.append(st.read(path))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            got += [st.read(path), st.read(path, off)]
        self.assertIsInstance(got[1], bytes)
        self.assertGreater(len(got[1]), 1 << 18)
        self.assertLess(peak, 1.25 * len(got[1]), "more than one copy of %d bytes" % len(got[1]))
        mnt = os.path.join(self.tmp, "mnt")
        m = mu.Mount(store, mnt, "-o", "mix=%s,mix_seed=5" % mix)
        with m:
            want = []
            for p, at in (("full/c/big.jpg", 0), (path, 0), (path, 0), (path, off)):
                with open(os.path.join(mnt, p), "rb") as f:
                    f.seek(at)
                    want.append(f.read())
            self.assertEqual(m.unmount(), 0)
        self.assertEqual([len(b) for b in got], [len(b) for b in want])
        self.assertEqual(got, want)

    def test_range_and_errors(self):
        with pcrfs.Store(self.store) as st:
            p = "full/" + "/".join(st.listdir("full")[:1])
            p += "/" + st.listdir(p)[0]
            whole = st.read(p)
            self.assertEqual(st.read(p, 10, 100), whole[10:110])
            self.assertEqual(st.read(p, len(whole) + 5, 10), b"")
            with self.assertRaises(FileNotFoundError):
                st.read("scan1/nope")
            with self.assertRaises(OSError):
                st.read("scan1")
            self.assertGreaterEqual(st.record(p), 1)
        with self.assertRaises(OSError) as e:
            pcrfs.Store(self.store, mix="9-1")
        self.assertIn("mix", str(e.exception))
        with self.assertRaises(OSError):
            pcrfs.Store(self.store, no_such_option=1)

    def test_store_options_as_daemon(self):
        # bwlimit=, readahead=, cache=, cache_size=, http_timeout=, http_retries=
        # have one parser (src/lib/store/opts.c): pcrfs_open() refuses a bad value with
        # the daemon's own line. An http:// URL, so that the object-storage options are
        # checked rather than refused for a local store; both stop before any request.
        url = "http://127.0.0.1:9/store"
        mnt = os.path.join(self.tmp, "optmnt")
        os.makedirs(mnt, exist_ok=True)
        bad = {"bwlimit": ["", "-1", "99999999999999999999", "zz", "5T", "1.5"],
               "readahead": ["", "yes", "Record"],
               "cache": [""],
               "cache_size": ["", "0", "-1", "1e3", "12.5"],
               "http_timeout": ["", "-1", "86401", "abc", "1e3"],
               "http_retries": ["", "-1", "21", "abc", "3.5"]}
        for name, values in bad.items():
            for v in values:
                r = subprocess.run([mu.program("PCRFS"), url, mnt, "-o", "%s=%s" % (name, v)],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, (name, v, r.stderr))
                line = r.stderr.strip()
                self.assertTrue(line.startswith("pcrfs: %s=" % name), line)
                with self.assertRaises(OSError) as e:
                    pcrfs.Store(url, **{name: v})
                self.assertEqual(e.exception.strerror, "%s: %s" % (url, line[len("pcrfs: "):]),
                                 (name, v))
        # the documented forms are taken, and a local store refuses the remote ones
        with pcrfs.Store(self.store, bwlimit="12.5M", readahead="record") as st:
            self.assertGreater(len(st.listdir("scan1")), 0)
        with self.assertRaises(OSError) as e:
            pcrfs.Store(self.store, cache_size="1M")
        self.assertIn("only for a store in object storage", str(e.exception))

    def test_pcrinfo_is_a_client(self):
        # pcrinfo --cat and --extract read through the public API (pcrfs(3)): at
        # --level K they give scanK/'s tree, at full full/'s, with the same bytes
        pcrinfo = mu.program("PCRINFO")
        with pcrfs.Store(self.store) as st:
            for level, view in (("2", "scan2"), ("full", "full")):
                out = os.path.join(self.tmp, "extract-" + view)
                mu.run([pcrinfo, "--extract", out, "--level", level, self.store], check=0)
                want = walk_store(st, view)
                got = walk_mount(out)
                self.assertEqual(sorted(got), sorted((p[len(view) + 1:], d, n)
                                                     for p, d, n in want), view)
                files = [p for p, d, _ in want if not d]
                for p in files:
                    with open(os.path.join(out, p[len(view) + 1:]), "rb") as f:
                        self.assertEqual(f.read(), st.read(p), p)
                rel = files[0][len(view) + 1:]
                r = subprocess.run([pcrinfo, "--cat", "./" + rel, "--level", level,
                                    self.store], capture_output=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, st.read(files[0]))
                shutil.rmtree(out)

    def test_threads(self):
        """One Store read by 4 threads at once: every file's bytes as read alone."""
        from concurrent.futures import ThreadPoolExecutor
        with pcrfs.Store(self.store) as st:
            paths = [p for p, isdir, _ in walk_store(st) if not isdir]
            want = {p: st.read(p) for p in paths}
            with ThreadPoolExecutor(4) as ex:
                got = list(ex.map(st.read, paths * 8))
            self.assertEqual(got, [want[p] for p in paths * 8])

    def test_readinto_and_scratch(self):
        """Store.readinto() fills a caller's buffer (bytearray, numpy) with the bytes
        read() gives; read() through a scratch buffer far smaller than the files
        (grown per file) gives what a sized read gives; refusals of bad buffers."""
        import numpy as np
        import pcrfs.store as ps
        with pcrfs.Store(self.store) as st:
            paths = [p for p, isdir, _ in walk_store(st) if not isdir]
            self.assertGreater(len(paths), 30)
            for p in paths[:: max(1, len(paths) // 12)]:
                size = st.size(p)
                want = st.read(p, 0, size)
                self.assertEqual(len(want), size, p)
                buf = bytearray(b"\xee" * (size + 9))
                self.assertEqual(st.readinto(p, buf), size, p)
                self.assertEqual(bytes(buf[:size]), want, p)
                self.assertEqual(bytes(buf[size:]), b"\xee" * 9, p)  # nothing past it
                arr = np.zeros(20, dtype=np.uint8)
                self.assertEqual(st.readinto(p, arr, 7), min(20, size - 7), p)
                self.assertEqual(arr.tobytes()[:min(20, size - 7)], want[7:27], p)
                self.assertEqual(st.readinto(p, bytearray(5), size), 0, p)
            with self.assertRaises(TypeError):
                st.readinto(paths[0], b"read-only bytes")
            with self.assertRaises(FileNotFoundError):
                st.readinto("scan1/nope", bytearray(10))
            want = {p: st.read(p, 0, st.size(p)) for p in paths}
            start = ps._SCRATCH_START
            try:
                ps._SCRATCH_START = 64  # every file fills it: the size, then a re-read
                ps._scratch.sc = None
                self.assertEqual({p: st.read(p) for p in paths}, want)
                self.assertGreater(ps._scratch.sc.size, 64)  # it grew, and is kept
            finally:
                ps._SCRATCH_START = start
                ps._scratch.sc = None
            self.assertEqual({p: st.read(p) for p in paths}, want)

    def test_pil_rgb_as_convert(self):
        """The default loader's image equals Image.open(...).convert('RGB') (mode,
        size, pixels, info, class) for RGB, grayscale and CMYK JPEGs and a PNG with a
        transparent palette entry, and can be drawn on."""
        import io
        from PIL import Image
        from pcrfs.store import _pil_rgb
        datas = []
        with pcrfs.Store(self.store) as st:
            ds = pcrfs.ImageFolder(st, view="full")
            datas += [st.read(p) for p, _ in ds.samples[:3]]
            self.assertEqual(ds[0][0].tobytes(), _pil_rgb(datas[0]).tobytes())
        rgb = Image.open(io.BytesIO(datas[0])).convert("RGB")
        for mode in ("L", "CMYK"):
            b = io.BytesIO()
            rgb.convert(mode).save(b, "JPEG")
            datas.append(b.getvalue())
        b = io.BytesIO()
        pal = rgb.convert("P")
        pal.info["transparency"] = 0
        pal.save(b, "PNG", transparency=0)
        datas.append(b.getvalue())
        for d in datas:
            want = Image.open(io.BytesIO(d)).convert("RGB")
            got = _pil_rgb(d)
            self.assertIs(type(got), type(want))
            self.assertEqual((got.mode, got.size, got.info), (want.mode, want.size, want.info))
            self.assertEqual(got.tobytes(), want.tobytes())
        a = _pil_rgb(datas[0])
        a.putpixel((0, 0), (1, 2, 3))  # writable, as convert()'s copy is
        self.assertEqual(a.getpixel((0, 0)), (1, 2, 3))

    def test_unprivileged_no_fuse(self):
        code = (
            "import os, stat, pcrfs\n"
            "assert os.getuid() != 0\n"
            "assert not stat.S_ISCHR(os.stat('/dev/fuse').st_mode) or "
            "os.major(os.stat('/dev/fuse').st_rdev) == 1\n"
            "ds = pcrfs.ImageFolder(pcrfs.Store(%r), view='scan3')\n"
            "n = 0\n"
            "for i in range(len(ds)):\n"
            "    img, t = ds[i]\n"
            "    assert img.mode == 'RGB' and t == ds.targets[i]\n"
            "    n += 1\n"
            "print(n, len(ds.classes))\n" % self.store)
        env = "PCRFS_LIB=%s PYTHONPATH=%s" % (LIB, os.path.join(mu.SRCROOT, "python"))
        # /dev/null over /dev/fuse: no process in the namespace can mount
        sh = ("mount --bind /dev/null /dev/fuse && runuser -u nobody -- env %s "
              "/usr/bin/python3 -c \"$0\"" % env)
        p = subprocess.run(["unshare", "-m", "sh", "-c", sh, code], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertEqual(p.stdout.split(), [b"15", b"3"])

    def test_dataloader_workers(self):
        import torch
        import torchvision.transforms as T
        st = pcrfs.Store(self.store)
        ds = pcrfs.ImageFolder(st, view="scan4", transform=T.Compose([T.Resize((8, 8)),
                                                                      T.ToTensor()]))
        src = __import__("torchvision").datasets.ImageFolder(self.src)
        self.assertEqual(ds.classes, src.classes)
        self.assertEqual(ds.targets, src.targets)
        sampler = pcrfs.RecordSampler(ds, window=1, shuffle=False)
        recs = [st.record(p) for p, _ in ds.samples]
        for ctx in ("fork", "spawn"):
            dl = torch.utils.data.DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2,
                                             multiprocessing_context=ctx)
            targets = torch.cat([t for _, t in dl]).tolist()
            order = list(sampler)
            self.assertEqual(sorted(order), list(range(len(ds))), ctx)
            self.assertEqual(targets, [ds.targets[i] for i in order], ctx)
            # record by record: each record's samples in one run
            seen = [recs[i] for i in order]
            runs = [r for k, r in enumerate(seen) if k == 0 or seen[k - 1] != r]
            self.assertEqual(len(runs), len(set(seen)), ctx)
        # a random_split Subset of it groups by the store's records too
        sub = torch.utils.data.random_split(ds, [9, len(ds) - 9],
                                            generator=torch.Generator().manual_seed(1))[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "each sample is its own record" would fail
            s2 = pcrfs.RecordSampler(sub, window=1, shuffle=False)
        self.assertEqual(sorted(list(s2)), list(range(9)))
        self.assertEqual(len(s2.records), len({recs[i] for i in sub.indices}))
        # by default the sampler names every record it reads to the Store it reads
        # through (prefetch hints), and with prefetch=False none, in the same order
        calls, real = [], st.prefetch
        st.prefetch = lambda r: (calls.append(list(r)), real(r))
        hinted = list(pcrfs.RecordSampler(ds, window=1, shuffle=False))
        self.assertEqual(sorted({r for c in calls for r in c}), sorted(set(recs)), calls)
        del calls[:]
        plain = list(pcrfs.RecordSampler(ds, window=1, shuffle=False, prefetch=False))
        self.assertEqual((calls, hinted), ([], plain))
        del st.prefetch
        st.close()

    def test_c_program_pkgconfig(self):
        dest = os.path.join(self.tmp, "dest")
        mu.run(["meson", "install", "-C", mu.build_dir(), "--no-rebuild", "--quiet",
                "--destdir", dest], check=0, timeout=300)
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs
               if f == "pcrfs.pc"]
        self.assertEqual(len(pcs), 1, pcs)
        hdrs = sorted(f for d, _, fs in os.walk(dest) for f in fs if f.endswith(".h"))
        self.assertEqual(hdrs, ["pcrfs.h"])
        prog = os.path.join(self.tmp, "lsread.c")
        with open(prog, "w") as f:
            f.write(C_PROGRAM)
        # the installed pcrfs.pc, its prefix moved under the staging directory
        pcdir = os.path.join(self.tmp, "pc")
        os.makedirs(pcdir, exist_ok=True)
        with open(pcs[0]) as f:
            pc = f.read().split("\n")
        prefix = [ln for ln in pc if ln.startswith("prefix=")][0][len("prefix="):]
        with open(os.path.join(pcdir, "pcrfs.pc"), "w") as f:
            f.write("\n".join("prefix=" + dest + prefix if ln.startswith("prefix=") else ln
                              for ln in pc))
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
        flags = mu.run(["pkg-config", "--cflags", "--libs", "pcrfs"],
                       check=0, env=env).stdout.decode().split()
        exe = os.path.join(self.tmp, "lsread")
        mu.run(["cc", "-Wall", "-Werror", "-o", exe, prog] + flags, check=0)
        libdir = [f[2:] for f in flags if f.startswith("-L")][0]
        so = [n for n in os.listdir(libdir) if n.startswith("libpcrfs.so")]
        self.assertIn("libpcrfs.so.0", so)
        dyn = mu.run(["nm", "-D", "--defined-only", os.path.join(libdir, "libpcrfs.so.0")],
                     check=0).stdout.decode().split("\n")
        syms = [ln.split()[-1] for ln in dyn if ln.strip() and " T " in ln]
        self.assertTrue(syms and all(s.startswith("pcrfs_") for s in syms), syms)
        out = mu.run([exe, self.store], check=0,
                     env=dict(os.environ, LD_LIBRARY_PATH=libdir)).stdout.decode().split()
        with pcrfs.Store(self.store) as st:
            names = st.listdir("full")
            cls = names[0]
            first = st.listdir("full/" + cls)[0]
            n = len(st.read("full/%s/%s" % (cls, first)))
        self.assertEqual(out, [cls, first, str(n)])
        # the installed module finds the installed library by itself (no PCRFS_LIB)
        pkgs = [d for d, _, fs in os.walk(dest) if d.endswith(os.path.join("pcrfs"))
                and "store.py" in fs]
        self.assertEqual(len(pkgs), 1, pkgs)
        env = {k: v for k, v in os.environ.items() if k != "PCRFS_LIB"}
        env["PYTHONPATH"] = os.path.dirname(pkgs[0])
        p = mu.run(["/usr/bin/python3", "-c", "import pcrfs; s = pcrfs.Store(%r); "
                    "print(pcrfs.__file__, s.listdir('full')[0])" % self.store],
                   check=0, env=env)
        where, got = p.stdout.decode().split()
        self.assertTrue(where.startswith(dest), where)
        self.assertEqual(got, cls)


C_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <pcrfs/pcrfs.h>

int main(int argc, char **argv)
{
    pcrfs_store *s;
    struct pcrfs_stat st;
    char cls[256], file[256], path[1024];
    uint64_t pos = 0;
    int isdir;
    ssize_t n;
    char *buf;

    if (argc < 2 || pcrfs_open(argv[1], NULL, &s) != 0)
        return fprintf(stderr, "open: %s\n", pcrfs_errmsg()), 1;
    if (pcrfs_readdir(s, "full", &pos, cls, sizeof(cls), &isdir) != 1)
        return 1;
    snprintf(path, sizeof(path), "full/%s", cls);
    pos = 0;
    if (pcrfs_readdir(s, path, &pos, file, sizeof(file), &isdir) != 1)
        return 1;
    snprintf(path, sizeof(path), "full/%s/%s", cls, file);
    if (pcrfs_stat(s, path, &st) != 0 || !(buf = malloc(st.size + 1)))
        return 1;
    n = pcrfs_read(s, path, buf, st.size + 1, 0);
    if (n != (ssize_t)st.size)
        return fprintf(stderr, "read: %s\n", pcrfs_errmsg()), 1;
    printf("%s\n%s\n%zd\n", cls, file, n);
    free(buf);
    pcrfs_close(s);
    return 0;
}
"""


if __name__ == "__main__":
    unittest.main(verbosity=2)
