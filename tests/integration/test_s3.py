#!/usr/bin/python3
"""Stores in object storage: pcrfs s3://BUCKET/PREFIX and http://HOST/PATH against a
real S3-compatible server on 127.0.0.1 (s3rver, installed by tests/s3/setup.sh).

A store built by mkpcrfs (images and tokens) is uploaded with curl --aws-sigv4 and
mounted from the bucket; a local mount of the same store is the oracle.

What each class asserts, and would be false if the feature broke:
  Served        every file of every view (scanK/, full/, q90/ q95/ q99/, tokens/) of the
                s3:// mount equals the local mount's bytes, listings and sizes too;
                every open of mix/ is the local scanK/ of its drawn level; ImageFolder +
                DataLoader (2 workers) yield the local tensors; the library
                (pcrfs.Store on the s3:// URL, no mount) lists, sizes and reads every
                view as the local mount does, and pcrfs.ImageFolder over it in a
                DataLoader with 2 forked workers yields the local bytes' images;
                pcrfs.Store's endpoint=, region=, profile=, ca_bundle= are used
                before the environment (a dead AWS_ENDPOINT_URL, wrong keys in it)
                and bad values give EINVAL;
                http:// (anonymous)
                serves the same bytes; /.pcrfs/info names the URL, stats count HTTP
                requests; the mount helper passes an s3:// source through unchanged
  RecordOrder   a fresh mount read at level 5 makes at most 0.02 GETs per image (one
                prefix fetch per record, the rest from the cache); tokens/ fetches
                each shard whole, not a GET per file
  Faults        a missing record object: EIO for exactly its files; wrong credentials
                and a missing bucket: one-line error, exit 1, nothing mounted; a cache
                directory that is a file or a full tmpfs: still the right bytes;
                s3rver SIGKILLed while a reader loops: EIO within the deadline, no
                hang, cached prefixes still served, reads resume once it is back;
                s3rver SIGSTOPped: EIO after the deadline, not later (the record's
                next file at once), then reads again
Every wait is bounded; nothing but 127.0.0.1 is contacted.
Run by hand: MKPCRFS=... PCRINFO=... PCRFS=... /usr/bin/python3 test_s3.py -v
"""

import errno
import json
import random
import os
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from httpproxy import Proxy  # noqa: E402


def skip_library_if_sanitized(test):
    """pcrfs.Store loads libpcrfs.so into Python: not in the sanitizer stage, whose
    ASan-built library needs its runtime loaded before the interpreter (scripts/test.sh
    leaves suite library out there for the same reason)."""
    if mu.SANITIZED:
        test.skipTest("an ASan-built libpcrfs.so cannot be loaded into Python")

sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
os.environ.setdefault("PCRFS_LIB", os.path.join(mu.build_dir(), "src", "lib", "api",
                                                "libpcrfs.so"))

SETUP = os.path.join(mu.SRCROOT, "tests", "s3", "setup.sh")
S3RVER_DIR = os.environ.get("PCRFS_S3RVER_DIR") or os.path.join(mu.SRCROOT, "tests", "s3")
S3RVER = os.path.join(S3RVER_DIR, "node_modules", ".bin", "s3rver")
MKDATASET = os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py")
MKTOKENS = os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py")
BUCKET = "pcrfs-test"
KEY = "S3RVER"  # s3rver's built-in credentials


def s3rver():
    """The s3rver program, installed on first use (a failure if it cannot be)."""
    if not os.access(S3RVER, os.X_OK):
        mu.run(["bash", SETUP], check=0, timeout=900)
    if not os.access(S3RVER, os.X_OK):
        raise AssertionError("%s missing after %s" % (S3RVER, SETUP))
    return S3RVER


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """s3rver on 127.0.0.1:PORT with its data in DATA; kill() and start() again on
    the same port and data keep the objects."""

    def __init__(self, data, port=None):
        self.data = data
        self.port = port or free_port()
        self.proc = None
        os.makedirs(data, exist_ok=True)

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self, timeout=60):
        self.log = open(self.data.rstrip("/") + ".log", "ab")
        self.proc = subprocess.Popen(
            [s3rver(), "-d", self.data, "-a", "127.0.0.1", "-p", str(self.port),
             "--configure-bucket", BUCKET, "-s"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError("s3rver exited %s (log %s.log)" % (self.proc.returncode,
                                                                       self.data))
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                    return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("s3rver did not answer on port %d" % self.port)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.log.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        try:
            self.log.close()
        except Exception:
            pass

    def curl(self, method, key, path=None, user=KEY):
        argv = ["curl", "-sS", "-f", "--max-time", "60", "-X", method, "--aws-sigv4",
                "aws:amz:us-east-1:s3", "--user", "%s:%s" % (user, user),
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-o", os.devnull]
        if path:
            argv += ["-T", path]
        mu.run(argv + ["%s/%s/%s" % (self.endpoint, BUCKET, key)], check=0, timeout=90)

    def upload(self, store, prefix, skip=()):
        """Every file of the store directory, as `aws s3 cp --recursive` would."""
        for dp, _, fns in os.walk(store):
            for fn in fns:
                p = os.path.join(dp, fn)
                rel = os.path.relpath(p, store)
                if rel not in skip:
                    self.curl("PUT", "%s/%s" % (prefix, rel), p)


def walk(root):
    """{relative path: size} of the files under @root, and the set of directories."""
    files, dirs = {}, set()
    for dp, dns, fns in os.walk(root):
        for d in dns:
            dirs.add(os.path.relpath(os.path.join(dp, d), root))
        for fn in fns:
            p = os.path.join(dp, fn)
            files[os.path.relpath(p, root)] = os.stat(p).st_size
    return files, dirs


def read(path):
    with open(path, "rb") as f:
        return f.read()


def stats(mnt):
    return json.loads(read(os.path.join(mnt, ".pcrfs", "stats")))


def files_of_record(index, record):
    """Relative paths (str) of the image files of record @record, from index.db."""
    con = sqlite3.connect("file:%s?mode=ro" % index, uri=True)
    try:
        dirs = {i: (p, bytes(n).decode()) for i, p, n in con.execute(
            "SELECT id, parent, name FROM dirs")}

        def path(d):
            parts = []
            while d != 1:
                p, n = dirs[d]
                parts.append(n)
                d = p
            return "/".join(reversed(parts))
        return {os.path.join(path(d), bytes(n).decode()) for d, n in con.execute(
            "SELECT dir, name FROM files WHERE record = ?", (record,))}
    finally:
        con.close()


# A reader in its own process (a read stuck in FUSE cannot hang the test): reads
# the files named on the command line in turn, one line each: "OK secs path" or
# "ERR errno secs path".
READER = r"""
import os, sys, time
for p in sys.argv[2:]:
    t = time.monotonic()
    try:
        with open(p, "rb") as f:
            f.read()
        print("OK %.3f %s" % (time.monotonic() - t, p), flush=True)
    except OSError as e:
        print("ERR %d %.3f %s" % (e.errno, time.monotonic() - t, p), flush=True)
    time.sleep(float(sys.argv[1]))
"""


class Fixture:
    """One dataset and store (images in 2 records of 200, and tokens), one s3rver
    with the store uploaded under PREFIX, a local mount as the oracle."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-s3-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.mounts = []
        cls.servers = []
        try:
            cls.make()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def make(cls):
        src, tok = os.path.join(cls.tmp, "src"), os.path.join(cls.tmp, "tok")
        mu.run([mu.PYTHON, MKDATASET, "--out", src, "--classes", "4", "--per-class", "100",
                "--seed", "3", "--size", "64", "--manifest",
                os.path.join(cls.tmp, "manifest.json")], check=0)
        mu.run([mu.PYTHON, MKTOKENS, "--seed", "5", "-k", "391", "--grid", "16", "tree", src,
                tok], check=0)
        cls.store = os.path.join(cls.tmp, "store")
        mu.run([mu.program("MKPCRFS"), "-q", "-n", "200", "--quality", "--tokens", tok, src,
                cls.store], check=0)
        cls.nimages = len(walk(os.path.join(src))[0])
        cls.server = cls.add_server(os.path.join(cls.tmp, "s3data"))
        cls.server.upload(cls.store, "ds")
        os.environ.update({"AWS_ENDPOINT_URL": cls.server.endpoint, "AWS_ACCESS_KEY_ID": KEY,
                           "AWS_SECRET_ACCESS_KEY": KEY, "AWS_REGION": "us-east-1"})
        for v in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3",
                  "AWS_SHARED_CREDENTIALS_FILE"):
            os.environ.pop(v, None)
        cls.local = cls.mount(cls.store, "local")

    @classmethod
    def add_server(cls, data, port=None):
        s = Server(data, port)
        cls.servers.append(s)
        return s.start()

    @classmethod
    def mount(cls, store, name, *opts):
        m = mu.Mount(store, os.path.join(cls.tmp, name), *opts)
        cls.mounts.append(m)
        m.start(timeout=60)
        return m.mnt

    @classmethod
    def url(cls, prefix="ds"):
        return "s3://%s/%s" % (BUCKET, prefix)

    @classmethod
    def cache(cls, name):
        return "cache=" + os.path.join(cls.tmp, "cache-" + name)

    @classmethod
    def tearDownClass(cls):
        for m in cls.mounts:
            m.cleanup()
        for s in cls.servers:
            s.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_same_view(self, mnt, view):
        a, da = walk(os.path.join(self.local, view))
        b, db = walk(os.path.join(mnt, view))
        self.assertEqual(b, a, view)
        self.assertEqual(db, da, view)
        self.assertTrue(a, view)
        for rel in sorted(a):
            self.assertEqual(read(os.path.join(mnt, view, rel)),
                             read(os.path.join(self.local, view, rel)), "%s/%s" % (view, rel))


class Served(Fixture, unittest.TestCase):

    @classmethod
    def make(cls):
        super().make()
        cls.s3 = cls.mount(cls.url(), "s3", "-o", cls.cache("served"))

    def test_every_view_equals_local(self):
        views = sorted(v for v in os.listdir(self.local) if not v.startswith("."))
        self.assertIn("tokens", views)
        self.assertIn("scan5", views)
        self.assertIn("q95", views)  # the store has a quality table
        self.assertEqual(sorted(v for v in os.listdir(self.s3) if not v.startswith(".")), views)
        for view in views:
            self.assert_same_view(self.s3, view)

    def test_info_and_stats(self):
        info = json.loads(read(os.path.join(self.s3, ".pcrfs", "info")))
        self.assertEqual(info["store"], self.url())
        self.assertIsNotNone(info["tokens"])
        read(os.path.join(self.s3, "full", sorted(walk(os.path.join(self.s3, "full"))[0])[-1]))
        st = stats(self.s3)["http"]
        self.assertGreater(st["requests"], 0)
        self.assertGreater(st["gets"], 0)
        self.assertGreater(st["cache_hits"], 0)
        self.assertEqual(st["errors"], 0)
        self.assertNotIn("http", stats(self.local))

    def test_dataloader(self):
        import torch
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms

        def load(root):
            ds = datasets.ImageFolder(root, transform=transforms.ToTensor())
            dl = DataLoader(ds, batch_size=None, num_workers=2, shuffle=False)
            return ds.classes, [(x, y) for x, y in dl]

        classes, want = load(os.path.join(self.local, "scan5"))
        got_classes, got = load(os.path.join(self.s3, "scan5"))
        self.assertEqual(got_classes, classes)
        self.assertEqual(len(got), self.nimages)
        self.assertEqual(len(got), len(want))
        for (x, y), (x2, y2) in zip(got, want):
            self.assertEqual(y, y2)
            self.assertTrue(torch.equal(x, x2))

    def store_walk(self, st, rel):
        files, dirs = {}, set()
        for name, isdir in st.scandir(rel):
            p = rel + "/" + name
            if isdir:
                dirs.add(p.split("/", 1)[1])
                f, d = self.store_walk(st, p)
                files.update(f)
                dirs |= d
            else:
                files[p.split("/", 1)[1]] = st.size(p)
        return files, dirs

    def test_library_equals_local(self):
        skip_library_if_sanitized(self)
        import pcrfs
        views = sorted(v for v in os.listdir(self.local) if not v.startswith("."))
        with pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-lib")) as st:
            self.assertEqual(sorted(st.listdir("")), views)
            for view in views:
                files, dirs = self.store_walk(st, view)
                a, da = walk(os.path.join(self.local, view))
                self.assertEqual(files, a, view)
                self.assertEqual(dirs, da, view)
                # every view's bytes: the library on s3:// as the local mount
                self.assertTrue(a, view)
                for rel in sorted(a):
                    self.assertEqual(st.read(view + "/" + rel),
                                     read(os.path.join(self.local, view, rel)), rel)
            self.assertGreater(st.stats()["levels"][1]["record_bytes"], 0)

    def test_library_dataloader_fork(self):
        skip_library_if_sanitized(self)
        """Forked workers reopen the store (new connections) and read through them."""
        import pcrfs
        import torch
        from torch.utils.data import DataLoader
        st = pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-fork"))
        st.listdir("scan3")  # the parent has connections and a cache before the fork
        ds = pcrfs.ImageFolder(st, view="scan3", loader=lambda b: torch.tensor(list(b[:64])))
        dl = DataLoader(ds, batch_size=None, num_workers=2, shuffle=False,
                        multiprocessing_context="fork")
        got = [(x, y) for x, y in dl]
        self.assertEqual(len(got), self.nimages)
        for (x, y), (p, t) in zip(got, ds.samples):
            self.assertEqual(y, t)
            with open(os.path.join(self.local, p), "rb") as f:
                self.assertEqual(bytes(x.tolist()), f.read(64), p)
        st.close()

    def test_library_endpoint_options(self):
        """pcrfs.Store takes endpoint=, region=, profile=, ca_bundle= as pcrfs(1) does,
        before the environment: with AWS_ENDPOINT_URL at a dead port, endpoint= reaches
        the server; a dead endpoint= fails although the environment is right;
        profile= picks the keys of a shared credentials file over the environment's
        (right keys read, wrong ones denied); an empty value, a bad region, a missing
        CA bundle and these options on a local store fail with EINVAL."""
        skip_library_if_sanitized(self)
        import pcrfs
        dead = "http://127.0.0.1:%d" % free_port()
        rel = sorted(walk(os.path.join(self.local, "scan2"))[0])[0]
        want = read(os.path.join(self.local, "scan2", rel))
        creds = os.path.join(self.tmp, "lib-credentials")
        with open(creds, "w") as f:
            f.write("[good]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                    "[bad]\naws_access_key_id = WRONGKEY\naws_secret_access_key = %s\n"
                    % (KEY, KEY, KEY))
        os.chmod(creds, 0o600)
        saved = os.environ["AWS_ENDPOINT_URL"]
        os.environ["AWS_ENDPOINT_URL"] = dead
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = creds
        try:
            with pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-libopt"),
                             endpoint=self.server.endpoint, region="us-east-1") as st:
                self.assertEqual(st.read("scan2/" + rel), want)
            with pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-libprof"),
                             endpoint=self.server.endpoint, profile="good") as st:
                self.assertEqual(st.read("scan2/" + rel), want)
            with self.assertRaises(OSError) as cm:
                pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-libbad"),
                            endpoint=self.server.endpoint, profile="bad")
            self.assertIn("access denied", str(cm.exception))
        finally:
            os.environ["AWS_ENDPOINT_URL"] = saved
            os.environ.pop("AWS_SHARED_CREDENTIALS_FILE")
        with self.assertRaises(OSError) as cm:
            pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-libdead"), endpoint=dead)
        self.assertIn("cannot connect", str(cm.exception))
        for opts in ({"endpoint": ""}, {"region": "no region"},
                     {"ca_bundle": os.path.join(self.tmp, "no-such-ca.pem")}):
            with self.assertRaises(OSError) as cm:
                pcrfs.Store(self.url(), cache=os.path.join(self.tmp, "cache-libinval"), **opts)
            self.assertEqual(cm.exception.errno, errno.EINVAL, opts)
        with self.assertRaises(OSError) as cm:
            pcrfs.Store(self.store, endpoint=self.server.endpoint)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("only for a store in object storage", str(cm.exception))

    def test_mix_view(self):
        """mix/ over object storage: every open serves the drawn level (pcrfs(1)'s
        formula, test_mix.py) with the local scanK/ bytes of that level."""
        import test_mix as tm
        L = len([v for v in os.listdir(self.local) if v.startswith("scan")])
        mnt = self.mount(self.url(), "s3-mix", "-o", self.cache("mix"), "-o",
                         "mix=3-%d,mix_seed=4" % L)
        probs = tm.probabilities(3, L)
        rels = sorted(walk(os.path.join(mnt, "mix"))[0])[:80]
        self.assertTrue(rels)
        levels = set()
        for n in range(2):
            for rel in rels:
                data, size, fid = tm.read_pieces(os.path.join(mnt, "mix", rel), 65536)
                k = tm.draw(4, fid, n, 3, L, probs)
                self.assertEqual(size, len(data), rel)
                self.assertEqual(data, read(os.path.join(self.local, "scan%d" % k, rel)), rel)
                levels.add(k)
        self.assertGreater(len(levels), 2)

    def test_http_url_anonymous(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        mnt = os.path.join(self.tmp, "http")
        os.makedirs(mnt)
        mu.run([mu.program("PCRFS"), "%s/%s/ds" % (self.server.endpoint, BUCKET), mnt, "-o",
                self.cache("http")], check=0, env=env, timeout=60)
        try:
            self.assert_same_view(mnt, "scan3")
        finally:
            mu.run([mu.FUSERMOUNT, "-u", mnt], check=0)

    def test_mount_helper_passes_url(self):
        mnt = os.path.join(self.tmp, "helper")
        os.makedirs(mnt)
        env = dict(os.environ, PCRFS_PROGRAM=mu.program("PCRFS"))
        mu.run([mu.program("PCRFS_MOUNT_HELPER"), self.url(), mnt, "-o",
                "ro,nofail,_netdev," + self.cache("helper")], check=0, env=env, timeout=60)
        try:
            with open("/proc/self/mounts") as f:
                line = [ln.split() for ln in f if ln.split()[1] == mnt][0]
            self.assertEqual(line[0], self.url())
            self.assertEqual(line[2], "fuse.pcrfs")
            self.assert_same_view(mnt, "scan2")
        finally:
            mu.run([mu.FUSERMOUNT, "-u", mnt], check=0)


class RecordOrder(Fixture, unittest.TestCase):

    def test_gets_per_image_at_level_5(self):
        mnt = self.mount(self.url(), "order", "-o", self.cache("order"))
        names = sorted(walk(os.path.join(mnt, "scan5"))[0])
        self.assertEqual(len(names), self.nimages)
        startup = 3  # files read before the order is seen: the third triggers the fetch
        for i, rel in enumerate(names):
            if i == startup:
                st0 = stats(mnt)["http"]
            self.assertEqual(read(os.path.join(mnt, "scan5", rel)),
                             read(os.path.join(self.local, "scan5", rel)), rel)
        st = stats(mnt)["http"]
        # the start-up: index.db at mount (counted with the GETs), a header and the
        # first two files read directly (a GET per scan group: 5 each, 1 to spare),
        # then the records' parts (one each: these prefixes are under 1 MiB, the
        # smallest part at the default 8M)
        self.assertLessEqual(st0["gets"] - st0["prefix_fetches"], 2 + 1 + 2 * 5, st0)
        # from then on: the records' parts, nothing per image (0.02 per image at most,
        # as on ImageNet-sized records: 6-13 parts per 1,024 images)
        ratio = (st["gets"] - st0["gets"]) / (len(names) - startup)
        self.assertLessEqual(ratio, 0.02, st)
        self.assertLessEqual(st["gets"] - st["prefix_fetches"], 2 + 1 + 2 * 5, st)
        self.assertGreaterEqual(st["prefix_fetches"], 2, st)  # one per record at least
        self.assertGreater(st["cache_hits"], len(names), st)

    def test_token_shards_fetched_whole(self):
        mnt = self.mount(self.url(), "order-tok", "-o", self.cache("order-tok"))
        names = sorted(walk(os.path.join(mnt, "tokens"))[0])
        self.assertEqual(len(names), self.nimages)
        for rel in names:
            self.assertEqual(read(os.path.join(mnt, "tokens", rel)),
                             read(os.path.join(self.local, "tokens", rel)), rel)
        st = stats(mnt)["http"]
        self.assertLess(st["gets"], len(names) / 20, st)  # not one per file


class Faults(Fixture, unittest.TestCase):

    def test_missing_record(self):
        self.server.upload(self.store, "miss", skip={"records/000002.pcr"})
        mnt = self.mount(self.url("miss"), "miss", "-o", self.cache("miss"))
        lost = files_of_record(os.path.join(self.store, "index.db"), 2)
        self.assertTrue(lost)
        failed = set()
        for rel in sorted(walk(os.path.join(self.local, "full"))[0]):
            try:
                got = read(os.path.join(mnt, "full", rel))
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, rel)
                failed.add(rel)
                continue
            self.assertEqual(got, read(os.path.join(self.local, "full", rel)), rel)
        self.assertEqual(failed, lost)

    def mount_fails(self, url, env, expect):
        mnt = os.path.join(self.tmp, "bad-%d" % time.monotonic_ns())
        os.makedirs(mnt)
        p = mu.run([mu.program("PCRFS"), url, mnt, "-o", self.cache("bad") +
                    ",http_timeout=5,http_retries=1"], env=env, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertFalse(os.path.ismount(mnt))
        lines = p.stderr.decode().strip().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith("pcrfs: %s: " % url), lines)
        for e in expect:
            self.assertIn(e, lines[0])

    def test_wrong_credentials(self):
        env = dict(os.environ, AWS_ACCESS_KEY_ID="WRONGKEY")
        self.mount_fails(self.url(), env, ["access denied", "HTTP 403", "AWS_ACCESS_KEY_ID"])

    def test_wrong_bucket(self):
        self.mount_fails("s3://no-such-bucket/ds", dict(os.environ), ["no such bucket"])

    def test_no_store_there(self):
        self.mount_fails(self.url("nothing"), dict(os.environ), ["not a pcrfs store"])

    def test_server_down_at_mount(self):
        env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % free_port())
        t = time.monotonic()
        self.mount_fails(self.url(), env, ["cannot connect"])
        self.assertLess(time.monotonic() - t, 60)

    def test_cache_dir_is_a_file(self):
        path = os.path.join(self.tmp, "cache-file")
        with open(path, "w") as f:
            f.write("not a directory\n")
        mnt = self.mount(self.url(), "cachefile", "-o", "cache=" + path)
        for view in ("full", "scan5", "tokens"):
            self.assert_same_view(mnt, view)
        st = stats(mnt)["http"]
        self.assertEqual(st["cache_limit"], 0)
        self.assertEqual(st["cache_hits"], 0)
        self.assertEqual(os.path.getsize(path), 16)

    def test_cache_fs_full(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (mounts a tmpfs)")
        tiny = os.path.join(self.tmp, "tiny")
        os.makedirs(tiny)
        mu.run(["mount", "-t", "tmpfs", "-o", "size=96k,mode=0700", "tmpfs", tiny], check=0)
        try:
            mnt = self.mount(self.url(), "tinycache", "-o", "cache=%s,cache_size=1G" % tiny)
            for view in ("full", "scan3"):
                self.assert_same_view(mnt, view)
            self.assertEqual(stats(mnt)["http"]["errors"], 0)
            m = self.mounts.pop()
            self.assertEqual(m.unmount(), 0)
        finally:
            mu.run(["umount", "-l", tiny])

    def test_server_killed_mid_read(self):
        """SIGKILL s3rver while a reader loops over full/: reads fail with EIO within
        the deadline (2 s, 1 retry), prefixes already cached keep being served, and
        once s3rver is back on the same port and data the failed files read."""
        data = os.path.join(self.tmp, "s3data-kill")
        srv = self.add_server(data)
        srv.upload(self.store, "ds")
        os.environ["AWS_ENDPOINT_URL"] = srv.endpoint
        try:
            mnt = self.mount(self.url(), "kill", "-o",
                             self.cache("kill") + ",http_timeout=2,http_retries=1")
        finally:
            os.environ["AWS_ENDPOINT_URL"] = self.server.endpoint
        index = os.path.join(self.store, "index.db")
        rec1, rec2 = sorted(files_of_record(index, 1)), sorted(files_of_record(index, 2))
        # every record's header is checked on its first read: do that while it is up
        for rel in (rec1[0], rec2[0]):
            read(os.path.join(mnt, "scan1", rel))
        # record 1 read in order at scan2/: fetched into the cache, and record 2 with
        # it (the mount's first record read in order: the next one is prefetched) at
        # the same level; record 2's full/ files need bytes beyond that prefix
        order = ([os.path.join(mnt, "scan2", r) for r in rec1[:20]] +
                 [os.path.join(mnt, "full", r) for r in rec2[:20]])
        reader = subprocess.Popen([mu.PYTHON, "-c", READER, "0.05"] + order,
                                  stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        results, killed = [], False
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                r, _, _ = select.select([reader.stdout], [], [], 1.0)
                if r:
                    line = reader.stdout.readline()
                    if not line:
                        break
                    results.append(line.decode().split(" ", 3))
                    if len(results) == 5 and not killed:
                        srv.kill()
                        killed = True
            self.assertTrue(killed, results)
            self.assertEqual(reader.wait(30), 0)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait(30)
        self.assertEqual(len(results), len(order), results)
        ok = [r for r in results if r[0] == "OK"]
        err = [r for r in results if r[0] == "ERR"]
        # record 1 was fetched when read in order: served from the cache
        self.assertEqual([r[-1].strip() for r in ok][:20], order[:20])
        self.assertTrue(err, results)
        for r in err:
            self.assertEqual(int(r[1]), errno.EIO, r)
            self.assertLess(float(r[2]), 15.0, r)  # 2 attempts of 2 s, backoff, margin
        # while it is down: a cached prefix still serves another level
        self.assertEqual(read(os.path.join(mnt, "scan1", rec1[30])),
                         read(os.path.join(self.local, "scan1", rec1[30])))
        # back on the same port and data: the failed files read
        srv.start()
        for r in err:
            p = r[-1].strip()
            rel = os.path.relpath(p, os.path.join(mnt, "full"))
            got = None
            for _ in range(10):
                try:
                    got = read(p)
                    break
                except OSError:
                    time.sleep(1)
            self.assertEqual(got, read(os.path.join(self.local, "full", rel)), rel)

    def test_server_hung(self):
        """SIGSTOP s3rver (connections accepted, nothing answered): a read of bytes
        not in the cache fails with EIO after the read's deadline (2 x 2 s), not
        later and never hangs, the next file of the record at once; after SIGCONT
        (and the record's hold) the same file reads."""
        data = os.path.join(self.tmp, "s3data-hang")
        srv = self.add_server(data)
        srv.upload(self.store, "ds")
        os.environ["AWS_ENDPOINT_URL"] = srv.endpoint
        try:
            mnt = self.mount(self.url(), "hang", "-o",
                             self.cache("hang") + ",http_timeout=2,http_retries=1")
        finally:
            os.environ["AWS_ENDPOINT_URL"] = self.server.endpoint
        rec1 = sorted(files_of_record(os.path.join(self.store, "index.db"), 1))
        read(os.path.join(mnt, "scan1", rec1[0]))  # the record's header, checked once
        paths = [os.path.join(mnt, "full", rec1[i]) for i in (1, 2)]
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            reader = subprocess.Popen([mu.PYTHON, "-c", READER, "0"] + paths,
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
            try:
                out, _ = reader.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                reader.kill()
                reader.communicate(timeout=30)
                self.fail("a read hung for 60 s with the server stopped")
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        lines = [ln.split(" ", 3) for ln in out.decode().splitlines()]
        self.assertEqual(len(lines), 2, lines)
        for ln in lines:
            self.assertEqual(ln[:2], ["ERR", str(errno.EIO)], lines)
        # the first waits out the read's deadline (2 x http_timeout), the second
        # file of the same record fails at once: the record is held as failing
        self.assertGreaterEqual(float(lines[0][2]), 1.5, lines)
        self.assertLess(float(lines[0][2]), 4.0 + 1.5, lines)
        self.assertLess(float(lines[1][2]), 0.5, lines)
        self.assertGreaterEqual(stats(mnt)["http"]["timeouts"], 1)
        self.assertGreaterEqual(stats(mnt)["http"]["held_fails"], 1)
        got = None
        for _ in range(10):
            try:
                got = read(paths[0])
                break
            except OSError:
                time.sleep(1)
        self.assertEqual(got, read(os.path.join(self.local, "full", rec1[1])))


def served(st):
    """Bytes the views served (what readers got)."""
    return sum(v["bytes"] for v in st["views"].values())


def fetched(st):
    """Record bytes fetched from the server: parts into the cache and reads' own GETs."""
    return st["http"]["fetch_bytes"] + st["http"]["direct_bytes"]


class Parts(Fixture, unittest.TestCase):
    """Issue 19: prefixes as parts over many connections, no read amplification,
    prefetch hints through /.pcrfs/prefetch/."""

    def test_parts_in_record_order(self):
        """Small parts: a record read in order is fetched as many part GETs, every
        file right, the bytes fetched within 1.2x the bytes served."""
        mnt = self.mount(self.url(), "parts", "-o", self.cache("parts") +
                         ",http_part_size=64k,http_connections=8")
        st0 = stats(mnt)
        self.assertEqual(st0["http"]["fetch_concurrency"], 8, st0)
        names = sorted(walk(os.path.join(mnt, "full"))[0])
        for rel in names:
            self.assertEqual(read(os.path.join(mnt, "full", rel)),
                             read(os.path.join(self.local, "full", rel)), rel)
        st = stats(mnt)
        size = sum(os.path.getsize(os.path.join(self.store, "records", r))
                   for r in os.listdir(os.path.join(self.store, "records")))
        # both records whole (the first read in order, the second prefetched with it)
        self.assertGreaterEqual(st["http"]["prefix_fetches"], size // (64 * 1024), st)
        self.assertGreater(st["http"]["fetch_bytes"], 0.9 * size, st)
        self.assertLessEqual(fetched(st), 1.2 * served(st), st)
        self.assertGreater(st["http"]["cache_hits"], len(names), st)

    def test_shuffle_small_cache_no_amplification(self):
        """A shuffle over the whole store with a cache smaller than one record
        prefix, then the same files again after fadvise DONTNEED: every miss fetches
        just its file's bytes (before issue 19: a whole prefix per image)."""
        mnt = self.mount(self.url(), "shuffle", "-o", self.cache("shuffle") +
                         ",cache_size=200k")
        names = sorted(walk(os.path.join(mnt, "full"))[0])
        random.Random(7).shuffle(names)
        for rel in names[:150]:
            self.assertEqual(read(os.path.join(mnt, "full", rel)),
                             read(os.path.join(self.local, "full", rel)), rel)
        st = stats(mnt)
        self.assertEqual(st["http"]["prefix_fetches"], 0, st)
        self.assertLessEqual(fetched(st), 1.2 * served(st), st)
        # churn: the page cache dropped, the same files read again (3 times)
        for _ in range(3):
            for rel in names[:30]:
                p = os.path.join(mnt, "full", rel)
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    self.assertEqual(len(os.read(fd, 1 << 22)), os.path.getsize(p))
                finally:
                    os.close(fd)
        st = stats(mnt)
        self.assertLessEqual(fetched(st), 1.2 * served(st), st)

    def test_parts_race_stress(self):
        """Issue 19's rare checksum mismatch: tiny parts, a cache of about one
        record (every round evicts the other record and fetches it again), both
        records hinted (every part queued as prefetch) and 16 threads reading in
        record order, so readers move queued parts to the front while workers take
        them. Every byte equals the local mount's, no read fails, and the daemon
        logs no checksum mismatch. Before the fix a part moved to the front in the
        moment its worker took it ran a second time with nothing left to fetch: a
        GET of the whole object written at the part's offset."""
        import threading
        log = os.path.join(self.tmp, "race.log")
        mnt = self.mount(self.url(), "race", "-o", self.cache("race") +
                         ",http_part_size=64k,http_connections=8,cache_size=%d" %
                         (max(os.path.getsize(os.path.join(self.store, "records", r))
                              for r in os.listdir(os.path.join(self.store, "records"))) +
                          128 * 1024), "-o", "logfile=" + log)
        index = os.path.join(self.store, "index.db")
        recs = {k: sorted(files_of_record(index, k)) for k in (1, 2)}
        want = {rel: read(os.path.join(self.local, "full", rel))
                for k in recs for rel in recs[k]}
        bad, lock = [], threading.Lock()
        deadline = time.monotonic() + (60 if mu.SANITIZED else 25)
        rounds = 0
        while time.monotonic() < deadline and rounds < 40 and not bad:
            k = 1 + rounds % 2
            try:
                os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "%d,%d" % (k, 3 - k)))
            except FileNotFoundError:
                pass
            todo = list(recs[k])

            def reader():
                while True:
                    with lock:
                        if not todo or bad:
                            return
                        rel = todo.pop(0)
                    p = os.path.join(mnt, "full", rel)
                    try:
                        fd = os.open(p, os.O_RDONLY)
                        try:
                            # the page cache dropped: every round reads the daemon
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                            got = os.read(fd, 1 << 22)
                        finally:
                            os.close(fd)
                    except OSError as e:
                        got = e
                    if got != want[rel]:
                        with lock:
                            bad.append((rounds, rel, got if isinstance(got, OSError)
                                        else len(got)))
            ts = [threading.Thread(target=reader) for _ in range(16)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            rounds += 1
        st = stats(mnt)["http"]
        with open(log, errors="replace") as f:
            mismatches = [ln for ln in f if "checksum mismatch" in ln]
        self.assertEqual(bad, [], (rounds, st))
        self.assertEqual(mismatches, [], st)
        self.assertGreaterEqual(rounds, 4, st)
        self.assertGreater(st["evictions"], 0, st)  # the rounds fetched again

    def test_prefetch_hint(self):
        """A lookup in /.pcrfs/prefetch/ names the records read next: they are
        fetched before any of their files is read, and then served from the cache;
        a bad hint is refused whole (EINVAL) and fetches nothing."""
        mnt = self.mount(self.url(), "hint", "-o", self.cache("hint"))
        self.assertIn("prefetch", os.listdir(os.path.join(mnt, ".pcrfs")))
        self.assertEqual(os.listdir(os.path.join(mnt, ".pcrfs", "prefetch")), [])
        hint = os.path.join(mnt, ".pcrfs", "prefetch")
        for bad in ("0", "3", "1,x", "2x", "1;2", "-1", "99999999999999999999"):
            with self.assertRaises(OSError) as cm:
                os.stat(os.path.join(hint, bad))
            self.assertEqual(cm.exception.errno, errno.EINVAL, bad)
        self.assertEqual(stats(mnt)["http"]["prefix_fetches"], 0)
        # a file of full/ opened first: the level hints are fetched at (one of
        # record 1, read by itself with a GET of its own: no prefix fetched)
        rel1 = sorted(files_of_record(os.path.join(self.store, "index.db"), 1))[7]
        self.assertEqual(read(os.path.join(mnt, "full", rel1)),
                         read(os.path.join(self.local, "full", rel1)))
        st0 = stats(mnt)["http"]
        self.assertEqual(st0["prefix_fetches"], 0, st0)
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(hint, "2"))  # taken: answered as a name not there
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = stats(mnt)["http"]
            if st["prefix_fetches"] >= 1 and st["cache_bytes"] > 0:
                break
            time.sleep(0.1)
        self.assertGreaterEqual(st["prefix_fetches"], 1, st)
        rec2 = sorted(files_of_record(os.path.join(self.store, "index.db"), 2))
        random.Random(3).shuffle(rec2)
        for rel in rec2[:20]:  # not in order: only the hint fetched the record
            self.assertEqual(read(os.path.join(mnt, "full", rel)),
                             read(os.path.join(self.local, "full", rel)), rel)
        st = stats(mnt)["http"]
        self.assertEqual(st["cache_misses"], st0["cache_misses"], (st0, st))
        self.assertGreaterEqual(st["cache_hits"] - st0["cache_hits"], 20, (st0, st))

    def test_push_from_the_cache(self):
        """-o push (the default with readahead=record): once a hinted record's parts are
        in the cache, the files of a directory opened in it are handed to the kernel
        from the cache, with no request of their own: read afterwards they send no READ
        to the daemon and no GET, and every byte is right."""
        mnt = self.mount(self.url(), "push", "-o", self.cache("push") + ",readahead=record")
        index = os.path.join(self.store, "index.db")
        rec2 = sorted(files_of_record(index, 2))
        d = os.path.dirname(rec2[0])
        in_d = [r for r in rec2 if os.path.dirname(r) == d]
        self.assertGreater(len(in_d), 10)
        rel1 = sorted(files_of_record(index, 1))[0]  # the level hints are fetched at
        self.assertEqual(read(os.path.join(mnt, "full", rel1)),
                         read(os.path.join(self.local, "full", rel1)))
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "2"))
        size = os.path.getsize(os.path.join(self.store, "records",
                                            sorted(os.listdir(os.path.join(self.store,
                                                                           "records")))[1]))
        self.assertTrue(mu.wait_for(lambda: stats(mnt)["http"]["fetch_bytes"] >= size, 30),
                        stats(mnt)["http"])
        fetched0 = stats(mnt)["http"]["direct_bytes"]
        # the kernel knows the directory's files (its listing ahead) before any is handed
        os.stat(os.path.join(mnt, "full", in_d[0]))
        self.assertTrue(mu.wait_for(lambda: stats(mnt)["dirahead"]["listed"] >= 2, 10),
                        stats(mnt)["dirahead"])
        self.assertEqual(read(os.path.join(mnt, "full", in_d[0])),
                         read(os.path.join(self.local, "full", in_d[0])))
        self.assertTrue(mu.wait_for(
            lambda: stats(mnt)["push"]["files"] >= len(in_d) - 1, 10), stats(mnt)["push"])
        st0 = stats(mnt)
        for rel in in_d[1:]:
            self.assertEqual(read(os.path.join(mnt, "full", rel)),
                             read(os.path.join(self.local, "full", rel)), rel)
        st = stats(mnt)
        self.assertEqual(st["views"]["full"]["opens"], st0["views"]["full"]["opens"])
        self.assertEqual((st["http"]["cache_misses"], st["http"]["direct_bytes"]),
                         (st0["http"]["cache_misses"], st0["http"]["direct_bytes"]))
        self.assertEqual((st["push"]["unknown"], st["push"]["failed"]), (0, 0), st["push"])
        # and the thread that handed them asked the server for nothing
        self.assertEqual(st["http"]["direct_bytes"], fetched0, st["http"])

    def test_hint_parts_interleaved(self):
        """The records of one hint (a window of the sampler, read side by side) are
        fetched part by part across them, A0 B0 A1 B1 ..., as the GETs a proxy
        sees show at one connection; before, record after record (A0 A1 ... B0),
        and a window's last record waited behind the others' last parts."""
        proxy = Proxy(self.server.port)
        self.addCleanup(proxy.close)
        env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % proxy.port)
        m = mu.Mount(self.url(), os.path.join(self.tmp, "interleave"), "-o",
                     self.cache("interleave") + ",http_part_size=64k,http_connections=1",
                     env=env)
        self.mounts.append(m)
        m.start(timeout=60)
        mnt = m.mnt
        rel = sorted(files_of_record(os.path.join(self.store, "index.db"), 1))[0]
        read(os.path.join(mnt, "full", rel))  # the level (its own GETs)
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1,2"))
        except FileNotFoundError:
            pass
        sizes = {k: os.path.getsize(os.path.join(self.store, "records", "%06d.pcr" % k))
                 for k in (1, 2)}

        def parts():
            """The records of the part GETs, in the order sent."""
            out = []
            for r in proxy.requests(lambda r: r.method == "GET" and r.range and
                                    "/records/" in r.path):
                k = int(r.path.split("/records/")[1][:6])
                a, b = (int(x) for x in r.range.split("=")[1].split("-"))
                if a % 64000 == 0 and (b + 1 - a == 64000 or b + 1 == sizes[k]):
                    out.append(k)
            return out
        end, seen = time.monotonic() + 60, -1
        while time.monotonic() < end:  # until no part is sent for a second
            time.sleep(1)
            if len(parts()) == seen:
                break
            seen = len(parts())
        got = parts()
        n = min(got.count(1), got.count(2))
        self.assertGreaterEqual(n, 3, (got, proxy.log))  # (records of several parts each)
        # alternating while both have parts left
        self.assertEqual(got[:2 * n], [1, 2] * n, got)

    def test_prefix_in_eight_parts(self):
        """A record prefix is fetched in 8 parts (of at most http_part_size, at least
        an eighth of it), so that its parts run side by side: at 512k, a record of
        ~0.7 MB (100 images of 256 pixels) in 8 part GETs of about 1/8 each. Before,
        in parts of http_part_size: two, 512,000 bytes and the rest."""
        src = os.path.join(self.tmp, "src-256")
        store = os.path.join(self.tmp, "store-256")
        if not os.path.exists(store):
            mu.run([mu.PYTHON, MKDATASET, "--out", src, "--classes", "1", "--per-class",
                    "100", "--seed", "7", "--size", "256"], check=0)
            mu.run([mu.program("MKPCRFS"), "-q", "-n", "100", src, store], check=0)
            self.server.upload(store, "ds256")
        size = os.path.getsize(os.path.join(store, "records", "000001.pcr"))
        self.assertGreater(size, 512000, size)  # (more than one part: else no test)
        proxy = Proxy(self.server.port)
        self.addCleanup(proxy.close)
        env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:%d" % proxy.port)
        m = mu.Mount(self.url("ds256"), os.path.join(self.tmp, "eight"), "-o",
                     self.cache("eight") + ",http_part_size=512k,http_connections=4", env=env)
        self.mounts.append(m)
        m.start(timeout=60)
        mnt = m.mnt
        index = os.path.join(store, "index.db")
        names = sorted(files_of_record(index, 1))
        read(os.path.join(mnt, "full", names[0]))  # the level (its own GETs)
        t0 = time.monotonic()
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1"))
        except FileNotFoundError:
            pass

        def parts():
            """The lengths of the GETs of the record since the hint, in order."""
            out = []
            for r in proxy.requests(lambda r: r.t >= t0 and r.method == "GET" and r.range and
                                    "/records/" in r.path):
                a, b = (int(x) for x in r.range.split("=")[1].split("-"))
                out.append(b + 1 - a)
            return out
        end, seen = time.monotonic() + 60, None
        while time.monotonic() < end:  # until no part is sent for a second
            time.sleep(1)
            if parts() == seen:
                break
            seen = parts()
        got = sorted(parts(), reverse=True)
        self.assertEqual(len(got), 8, got)
        self.assertLessEqual(got[0], (size + 7) // 8, got)
        self.assertEqual(len(set(got[:-1])), 1, got)  # equal parts, the last the rest
        local = self.mount(store, "eight-local")
        for rel in names:  # and the bytes are right
            self.assertEqual(read(os.path.join(mnt, "full", rel)),
                             read(os.path.join(local, "full", rel)), rel)

    def test_prefetch_keeps_unread(self):
        """Prefetch does not evict what it fetched ahead and nobody read yet: with a
        cache of about 1.3 records, record 2 named after record 1 waits for room
        instead of pushing record 1 out before its first file is read, so every file
        of record 1 is then served from the cache. Before, record 2's parts evicted
        record 1 (least recently used) and its files were read with GETs of their own
        (a sampler naming windows ahead would evict the window being read)."""
        index = os.path.join(self.store, "index.db")
        rec1 = sorted(files_of_record(index, 1))
        size1 = os.path.getsize(os.path.join(self.store, "records", "000001.pcr"))
        mnt = self.mount(self.url(), "keep", "-o", self.cache("keep") +
                         ",http_part_size=64k,cache_size=%d" % int(1.3 * size1))
        rel = sorted(files_of_record(index, 2))[0]
        self.assertEqual(read(os.path.join(mnt, "full", rel)),
                         read(os.path.join(self.local, "full", rel)))  # the level
        for k in ("1", "2"):
            try:
                os.stat(os.path.join(mnt, ".pcrfs", "prefetch", k))
            except FileNotFoundError:
                pass
        end, last = time.monotonic() + 30, None
        while time.monotonic() < end:  # until nothing more is fetched for a second
            time.sleep(1)
            st = stats(mnt)["http"]
            if st["fetch_bytes"] == last and st["cache_bytes"] > 0:
                break
            last = st["fetch_bytes"]
        st0 = stats(mnt)["http"]
        for r in rec1:
            self.assertEqual(read(os.path.join(mnt, "full", r)),
                             read(os.path.join(self.local, "full", r)), r)
        st = stats(mnt)["http"]
        self.assertEqual(st["cache_misses"], st0["cache_misses"], (st0, st))
        self.assertGreaterEqual(st["cache_hits"] - st0["cache_hits"], len(rec1), (st0, st))

    def test_hint_waits_for_level(self):
        """A hint names records, not a view: one that comes before any file was
        opened (the sampler hints a window before its first file) is fetched at the
        level of the first file opened, here scan2/'s prefix, not the whole record
        (before: at the top level, the whole record: 3x the bytes at scan5/ in
        BENCHMARKS.md section 22)."""
        mnt = self.mount(self.url(), "hintlevel", "-o", self.cache("hintlevel"))
        size1 = os.path.getsize(os.path.join(self.store, "records", "000001.pcr"))
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1"))
        except FileNotFoundError:
            pass
        time.sleep(0.5)  # (before: the whole record under way by now)
        rel = sorted(files_of_record(os.path.join(self.store, "index.db"), 1))[3]
        self.assertEqual(read(os.path.join(mnt, "scan2", rel)),
                         read(os.path.join(self.local, "scan2", rel)))
        end = time.monotonic() + 20
        while time.monotonic() < end:  # the prefix fetched: no part in flight
            st = stats(mnt)["http"]
            if st["prefix_fetches"] >= 1 and st["cache_bytes"] > 0 and \
                    st["fetch_bytes"] >= st["cache_bytes"]:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        st = stats(mnt)["http"]
        sys.stderr.write("  [hinted before any open, then a file of scan2/: %d bytes fetched "
                         "ahead of a record of %d] " % (st["fetch_bytes"], size1))
        self.assertGreater(st["fetch_bytes"], 0, st)
        self.assertLess(st["fetch_bytes"], 0.6 * size1, st)

    def test_guess_ahead_after_hints(self):
        """Once a hint came, a scan in order still fetches the next record ahead if
        the mount read from it before, and not if it never heard of it (it may be
        another node's share). Before, any hint turned the guess off for good."""
        index = os.path.join(self.store, "index.db")
        r1 = sorted(files_of_record(index, 1))
        r2 = sorted(files_of_record(index, 2))
        size2 = os.path.getsize(os.path.join(self.store, "records", "000002.pcr"))

        def scan(name, read_before, wait):
            mnt = self.mount(self.url(), name, "-o", self.cache(name))
            for rel in read_before:  # far apart, not in order: read file by file
                self.assertEqual(read(os.path.join(mnt, "full", rel)),
                                 read(os.path.join(self.local, "full", rel)), rel)
            try:
                os.stat(os.path.join(mnt, ".pcrfs", "prefetch", "1"))
            except FileNotFoundError:
                pass
            for rel in r1[:10]:  # record 1 in order
                self.assertEqual(read(os.path.join(mnt, "full", rel)),
                                 read(os.path.join(self.local, "full", rel)), rel)
            end = time.monotonic() + wait
            while True:
                st = stats(mnt)["http"]
                if time.monotonic() > end or st["prefix_fetches"] >= 2 and st["cache_bytes"] >= 0.5 * size2 + \
                        os.path.getsize(os.path.join(self.store, "records", "000001.pcr")):
                    break
                time.sleep(0.2)
            return st
        st = scan("guessknown", [r2[150], r2[20], r2[90]], 15)
        size1 = os.path.getsize(os.path.join(self.store, "records", "000001.pcr"))
        self.assertGreaterEqual(st["cache_bytes"], size1 + 0.5 * size2, st)  # 2 fetched
        st = scan("guessunknown", [], 3)  # (time for a fetch to show)
        self.assertLess(st["cache_bytes"], size1 + 0.5 * size2, st)  # 2 not fetched

    def test_sampler_prefetch(self):
        """RecordSampler, by default (its samples lie on a pcrfs mount), names each
        window's records to the mount and yields the same indices as with
        prefetch=False (which names none): in its shuffled order (which the mount
        cannot tell from a shuffle by itself) each record is fetched whole, at most
        0.02 GETs per image, bytes fetched within 1.2x those served."""
        try:
            import torch  # noqa: F401 (RecordSampler derives from torch's Sampler)
        except ImportError:
            self.skipTest("no torch")
        sys.path.insert(0, os.path.join(mu.SRCROOT, "python"))
        import pcrfs
        mnt = self.mount(self.url(), "sampler", "-o", self.cache("sampler"))

        class DS:
            pass
        ds = DS()
        names = sorted(walk(os.path.join(mnt, "full"))[0])
        ds.samples = [(os.path.join(mnt, "full", n), 0) for n in names]
        plain = list(pcrfs.RecordSampler(ds, window=1, seed=4, prefetch=False))
        self.assertEqual(stats(mnt)["http"]["prefix_fetches"], 0)  # False: no hint
        got = []
        for i in pcrfs.RecordSampler(ds, window=1, seed=4):  # the default: hints
            got.append(i)
            self.assertEqual(read(ds.samples[i][0]),
                             read(os.path.join(self.local, "full", names[i])), names[i])
        self.assertEqual(got, plain)
        st = stats(mnt)
        self.assertGreaterEqual(st["http"]["prefix_fetches"], 2, st)  # both records
        self.assertLessEqual(st["http"]["gets"] / len(names), 0.02, st)
        self.assertLessEqual(fetched(st), 1.2 * served(st), st)
        with self.assertRaises(OSError) as cm:
            pcrfs.prefetch(mnt, [3])  # no record 3: refused
        self.assertEqual(cm.exception.errno, errno.EINVAL)


if __name__ == "__main__":
    unittest.main()
