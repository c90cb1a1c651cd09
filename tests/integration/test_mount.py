#!/usr/bin/python3
"""Mount tests of the FUSE driver pcrfs (GitHub issue #3), with real clients.

Each class builds its own small store from a tree made by tests/gen/mkdataset.py
(make_source(), the one place test trees are made), mounts it with
`pcrfs STORE MNT -f` in the background, waits for the mount, checks, unmounts with
`fusermount3 -u` and asserts the daemon exited 0. The oracle for every byte served is
`pcrinfo --cat PATH --level K STORE`, which reads through the store library without
FUSE; pixels are compared with the source through Pillow; djpeg, Pillow, torchvision's
ImageFolder/DataLoader, cp, ls, du, find and tar are the clients.

Run by hand:  PCRFS=... MKPCRFS=... PCRINFO=... /usr/bin/python3 test_mount.py -v
(or PCRFS_BUILD_DIR=/path/to/build). PCRFS_STRESS_SECONDS sets the length of the
concurrent-readers run (default 10). The mount-helper tests install a symlink to the
built helper as /sbin/mount.fuse.pcrfs (mount(8) looks nowhere else) and remove it
afterwards, so they only run as root; as another user they are reported as skipped.
"""

import errno
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402

EOI = b"\xff\xd9"
STRESS_SECONDS = float(os.environ.get("PCRFS_STRESS_SECONDS", "10"))
C_ENV = dict(os.environ, LC_ALL="C")


def _syslog_answers():
    """Whether a syslog socket answers at /dev/log, as pcrfs checks it."""
    import socket
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as s:
            try:
                s.connect("/dev/log")
                return True
            except OSError:
                pass
    return False


def make_source(path, classes, per_class, seed, awkward):
    """Generate a source tree at @path with the project's generator and return
    (files, dirs): files maps each regular file's relative path (bytes) to its
    manifest entry ("expect": "jpeg" or "verbatim", "decodable": bool), dirs is the
    set of relative directory paths. Symlinks the builder follows count as files."""
    manifest = path.rstrip("/") + ".manifest.json"
    argv = [mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkdataset.py"),
            "--out", path, "--classes", str(classes), "--per-class", str(per_class),
            "--seed", str(seed), "--manifest", manifest]
    if awkward:
        argv.append("--awkward")
    mu.run(argv, check=0)
    with open(manifest) as f:
        entries = json.load(f)["entries"]
    files, dirs = {}, set()
    for e in entries:
        rel = bytes.fromhex(e["path_hex"])
        if e["expect"] in ("jpeg", "verbatim"):
            files[rel] = e
        elif e["expect"] == "dir":
            dirs.add(rel)
    for rel in files:  # the manifest lists leaf directories; add every ancestor
        d = os.path.dirname(rel)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    return files, dirs


def walk_rel(root):
    """(files, dirs) under @root as sets of relative bytes paths; also asserts that
    nothing in a view is a symlink or anything but a file or directory."""
    root = os.fsencode(root)
    files, dirs = set(), set()
    for dp, dns, fns in os.walk(root):
        for name in dns:
            p = os.path.join(dp, name)
            assert stat.S_ISDIR(os.lstat(p).st_mode), p
            dirs.add(os.path.relpath(p, root))
        for name in fns:
            p = os.path.join(dp, name)
            assert stat.S_ISREG(os.lstat(p).st_mode), p
            files.add(os.path.relpath(p, root))
    return files, dirs


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def pixels(path):
    """(mode, size, pixel array) as Pillow decodes the file, truncated images refused."""
    import numpy as np
    from PIL import Image, ImageFile
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    with open(path, "rb") as f, Image.open(f) as im:
        im.load()
        return im.mode, im.size, np.asarray(im).copy()


def expect_errno(test, err, fn, *args):
    with test.assertRaises(OSError, msg="%s%r" % (fn.__name__, args)) as cm:
        fn(*args)
    test.assertEqual(cm.exception.errno, err, "%s%r: %s" % (fn.__name__, args, cm.exception))


class StoreFixture:
    """Source tree + store + mount, shared by the tests of one class."""

    @classmethod
    def make_fixture(cls, classes, per_class, seed, awkward, per_record=None):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-mount-", dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.src = os.path.join(cls.tmp, "src")
        cls.store = os.path.join(cls.tmp, "store.pcr")
        cls.files, cls.dirs = make_source(cls.src, classes, per_class, seed, awkward)
        mu.build_store(cls.src, cls.store, per_record=per_record)
        cls.levels = mu.store_levels(cls.store)
        cls.views = ["scan%d" % k for k in range(1, cls.levels + 1)] + ["full"]
        cls._oracle = {}

    @classmethod
    def remove_fixture(cls):
        for dp, dns, _ in os.walk(cls.tmp):
            for d in dns:
                p = os.path.join(dp, d)
                if os.path.ismount(p) or mu.is_dead_mount(p):
                    subprocess.run([mu.FUSERMOUNT, "-u", "-z", p], stderr=subprocess.DEVNULL)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def level_of(cls, view):
        return cls.levels if view == "full" else int(view[4:])

    @classmethod
    def oracle(cls, rel, view):
        key = (rel, cls.level_of(view))
        if key not in cls._oracle:
            cls._oracle[key] = mu.oracle(cls.store, rel, key[1])
        return cls._oracle[key]


# ---------------------------------------------------------------------------------


class MountedStore(StoreFixture, unittest.TestCase):
    """One store of the awkward tree (verbatim files, deep nesting, odd names),
    mounted once for all the read-side checks."""

    @classmethod
    def setUpClass(cls):
        cls.make_fixture(classes=3, per_class=6, seed=3, awkward=True)
        cls.mnt = os.path.join(cls.tmp, "mnt")
        cls.mount = mu.Mount(cls.store, cls.mnt)
        try:
            cls.mount.start()
        except Exception:
            cls.remove_fixture()
            raise

    @classmethod
    def tearDownClass(cls):
        alive = cls.mount.alive()
        rc = cls.mount.unmount()
        err = cls.mount.stderr()
        cls.mount.cleanup()
        cls.remove_fixture()
        # Checked last, for the whole class: the daemon survived every test above and
        # left cleanly (a failure here is reported as an error of the class).
        assert alive, "the daemon died during the tests: " + err
        assert rc == 0, "daemon exit status %r after fusermount3 -u: %s" % (rc, err)
        assert not mu.is_dead_mount(cls.mnt)

    def v(self, view, rel=b""):
        return os.path.join(os.fsencode(self.mnt), view.encode(), rel) if rel else \
            os.path.join(os.fsencode(self.mnt), view.encode())

    def test_root_layout(self):
        self.assertEqual(sorted(os.listdir(self.mnt)), sorted(self.views + [".pcrfs"]))
        for view in self.views:
            st = os.lstat(self.v(view))
            self.assertTrue(stat.S_ISDIR(st.st_mode), view)
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o555)
        # full/ is a directory of its own, not a link to scanL/: own inode numbers
        top = "scan%d" % self.levels
        self.assertFalse(os.path.islink(self.v("full")))
        self.assertNotEqual(os.stat(self.v("full")).st_ino, os.stat(self.v(top)).st_ino)
        rel = sorted(self.files)[0]
        a, b = os.stat(self.v("full", rel)), os.stat(self.v(top, rel))
        self.assertNotEqual(a.st_ino, b.st_ino)
        self.assertEqual(a.st_size, b.st_size)
        # inode numbers are stable: a second stat gives the same
        self.assertEqual(os.stat(self.v("full", rel)).st_ino, a.st_ino)
        self.assertEqual(os.stat(self.mnt).st_ino, 1)

    def test_every_view_lists_the_source_paths(self):
        for view in self.views:
            files, dirs = walk_rel(self.v(view))
            self.assertEqual(files, set(self.files), view)
            self.assertEqual(dirs, self.dirs, view)

    def test_cp_r_full_gives_source_pixels_and_bytes(self):
        dest = os.path.join(self.tmp, "copy-full")
        mu.run(["cp", "-r", os.path.join(self.mnt, "full"), dest], check=0)
        self.assertFalse(os.path.islink(dest))
        files, dirs = walk_rel(dest)
        self.assertEqual(files, set(self.files))
        self.assertEqual(dirs, self.dirs)
        njpeg = 0
        for rel, e in sorted(self.files.items()):
            src = os.path.join(os.fsencode(self.src), rel)
            cp = os.path.join(os.fsencode(dest), rel)
            if e["expect"] == "verbatim":
                self.assertEqual(read_bytes(cp), read_bytes(src), rel)
                continue
            ms, ss, ps = pixels(src)
            mc, sc, pc = pixels(cp)
            self.assertEqual((mc, sc), (ms, ss), rel)
            self.assertTrue((pc == ps).all(), "%r: pixels differ from the source" % rel)
            njpeg += 1
        self.assertGreater(njpeg, 10)
        shutil.rmtree(dest)

    def check_scan_view(self, view):
        for rel, e in sorted(self.files.items()):
            p = self.v(view, rel)
            data = read_bytes(p)
            self.assertEqual(os.stat(p).st_size, len(data), (view, rel))
            self.assertEqual(data, self.oracle(rel, view), (view, rel))
            if e["expect"] == "verbatim":
                self.assertEqual(data, read_bytes(os.path.join(os.fsencode(self.src), rel)))
                continue
            self.assertEqual(data[:2], b"\xff\xd8", (view, rel))
            self.assertEqual(data[-2:], EOI, (view, rel))
            # djpeg exits 2 on a warning (corrupt or truncated data)
            d = mu.run(["djpeg", "-outfile", os.devnull, p])
            self.assertEqual((d.returncode, d.stderr), (0, b""), (view, rel))
            pixels(p)  # Pillow, LOAD_TRUNCATED_IMAGES = False: raises if incomplete

    def test_scan1_files(self):
        self.check_scan_view("scan1")

    def test_scan2_files(self):
        self.check_scan_view("scan2")

    def test_scan5_files(self):
        self.check_scan_view("scan5")

    def test_top_views_are_complete(self):
        top = "scan%d" % self.levels
        for rel in sorted(self.files):
            full = read_bytes(self.v("full", rel))
            self.assertEqual(full, read_bytes(self.v(top, rel)), rel)
            self.assertEqual(full, self.oracle(rel, "full"), rel)

    def test_imagefolder_and_dataloader(self):
        import torch
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
        ref = datasets.ImageFolder(self.src)
        # ImageFolder follows symlinks, also the tree's symlink loop and dangling link,
        # which the builder skips by design (with a warning): leave those out
        skipped = [os.fsencode(os.path.relpath(p, self.src)) for p, _ in ref.samples
                   if os.fsencode(os.path.relpath(p, self.src)) not in self.files]
        for rel in skipped:
            self.assertTrue(rel.startswith(b"n00000001/loop/") or rel.endswith(b"dangling.JPEG"),
                            rel)
        ref.samples = [(p, t) for p, t in ref.samples
                       if os.fsencode(os.path.relpath(p, self.src)) in self.files]
        ref.targets = [t for _, t in ref.samples]
        ref_samples = [(os.path.relpath(p, self.src), t) for p, t in ref.samples]
        # what the source can decode, every view must decode
        decodable = [i for i, (p, _) in enumerate(ref.samples)
                     if self.files[os.fsencode(os.path.relpath(p, self.src))]["decodable"]]
        self.assertGreater(len(decodable), 20)
        for view in ("scan1", "scan5", "full"):
            root = os.path.join(self.mnt, view)
            ds = datasets.ImageFolder(root, transform=tf)
            self.assertEqual(ds.classes, ref.classes, view)
            self.assertEqual(ds.class_to_idx, ref.class_to_idx, view)
            self.assertEqual([(os.path.relpath(p, root), t) for p, t in ds.samples],
                             ref_samples, view)
            self.assertEqual(ds.targets, ref.targets, view)
            loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, decodable),
                                                 batch_size=8, shuffle=True, num_workers=2)
            seen = 0
            for x, y in loader:
                self.assertEqual(tuple(x.shape[1:]), (3, 224, 224))
                seen += len(y)
            self.assertEqual(seen, len(decodable), view)

    def all_oracles(self, views):
        return {(view, rel): self.oracle(rel, view) for view in views for rel in self.files}

    def test_random_reads_match_oracle(self):
        views = ["scan1", "scan2", "scan5", "scan%d" % self.levels, "full"]
        want = self.all_oracles(views)
        keys = sorted(want)
        rng = random.Random(7)
        fds = {}
        try:
            for i in range(10000):
                view, rel = keys[rng.randrange(len(keys))]
                data = want[(view, rel)]
                # O_DIRECT sends the exact offset and length to the daemon; buffered
                # reads go through the page cache, which reads whole pages
                direct = i % 2 == 0
                fd = fds.get((view, rel, direct))
                if fd is None:
                    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
                    fd = fds[(view, rel, direct)] = os.open(self.v(view, rel), flags)
                off = rng.randrange(len(data) + 64)
                n = rng.choice([1, 2, 3, 511, 4096, 4097, 65536, 200000, len(data) + 10])
                if not direct and i % 7 == 1:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                got = os.pread(fd, n, off)
                self.assertEqual(got, data[off:off + n], (view, rel, off, n, direct))
        finally:
            for fd in fds.values():
                os.close(fd)

    def test_concurrent_threads_and_processes(self):
        views = ["scan1", "scan2", "scan5", "full"]
        want = self.all_oracles(views)
        deadline = time.monotonic() + STRESS_SECONDS
        q = multiprocessing.get_context("fork").Queue()
        procs = [multiprocessing.get_context("fork").Process(
            target=_stress_worker, args=(self.mnt, want, deadline, 100 + i, q))
            for i in range(2)]
        for p in procs:
            p.start()
        results = []
        lock = threading.Lock()

        def thread_main(seed):
            r = _stress_worker(self.mnt, want, deadline, seed, None)
            with lock:
                results.append(r)

        threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in procs:
            results.append(q.get(timeout=STRESS_SECONDS + 120))
        for p in procs:
            p.join()
            self.assertEqual(p.exitcode, 0)
        self.assertEqual(len(results), 10)
        for reads, bad in results:
            self.assertEqual(bad, [], "wrong bytes from concurrent readers")
            self.assertGreater(reads, 10)

    def test_writes_fail_with_erofs(self):
        rel = sorted(self.files)[0]
        f = os.fsdecode(self.v("scan1", rel))
        d = os.path.join(self.mnt, "scan1", os.fsdecode(sorted(self.dirs)[0]))
        cmds = [["touch", f], ["touch", os.path.join(d, "new")], ["mkdir", d + "/x"],
                ["rm", f], ["rm", "-r", d], ["mv", f, f + ".moved"], ["truncate", "-s", "0", f],
                ["chmod", "644", f], ["ln", "-s", "x", d + "/l"], ["cp", "/etc/hostname", d]]
        for argv in cmds:
            p = mu.run(argv, env=C_ENV)
            self.assertNotEqual(p.returncode, 0, argv)
            self.assertIn(b"Read-only file system", p.stderr, argv)
        expect_errno(self, errno.EROFS, os.open, f, os.O_WRONLY)
        expect_errno(self, errno.EROFS, os.open, d + "/n", os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(self, errno.EROFS, os.mkdir, d + "/n")
        expect_errno(self, errno.EROFS, os.unlink, f)
        expect_errno(self, errno.EROFS, os.rmdir, d)
        expect_errno(self, errno.EROFS, os.rename, f, f + "2")
        expect_errno(self, errno.EROFS, os.truncate, f, 0)
        expect_errno(self, errno.EROFS, os.chmod, f, 0o600)
        expect_errno(self, errno.EROFS, os.utime, f, (0, 0))
        # nothing changed
        self.assertEqual(read_bytes(f), self.oracle(rel, "scan1"))
        self.assertEqual(walk_rel(os.path.join(self.mnt, "scan1")), (set(self.files), self.dirs))

    def test_missing_paths_enoent(self):
        L = self.levels
        missing = ["scan0", "scan%d" % (L + 1), "scan01", "Full", "scan1/nope",
                   "scan1/%s/nope.JPEG" % os.fsdecode(sorted(self.dirs)[0]),
                   "full/nope/deeper", ".pcrfs/nope"]
        for m in missing:
            for _ in range(2):  # the second answer comes from the negative cache
                expect_errno(self, errno.ENOENT, os.stat, os.path.join(self.mnt, m))
                expect_errno(self, errno.ENOENT, os.open, os.path.join(self.mnt, m), os.O_RDONLY)
        rel = sorted(self.files)[0]
        expect_errno(self, errno.ENOTDIR, os.stat, self.v("scan1", rel) + b"/x")

    def test_ls_du_find_tar_agree(self):
        for view in ("scan1", "scan5", "full"):
            root = os.path.join(self.mnt, view)
            sizes = {rel: len(self.oracle(rel, view)) for rel in self.files}
            nfiles, total = len(sizes), sum(sizes.values())
            blocks = sum((s + 511) // 512 * 512 for s in sizes.values())

            out = mu.run(["find", root, "-type", "f"], check=0).stdout
            self.assertEqual(out.count(b"\n"), nfiles, view)
            out = mu.run(["find", root, "-type", "d"], check=0).stdout
            self.assertEqual(out.count(b"\n"), len(self.dirs) + 1, view)

            out = mu.run(["du", "-sb", root], check=0).stdout
            self.assertEqual(int(out.split()[0]), total, view)  # directories have size 0
            out = mu.run(["du", "-s", "-B1", root], check=0).stdout
            self.assertEqual(int(out.split()[0]), blocks, view)

            out = mu.run(["ls", "-lRAn", "--time-style=+%s", root], check=0, env=C_ENV).stdout
            lines = [ln for ln in out.split(b"\n") if ln.startswith(b"-")]
            self.assertEqual(len(lines), nfiles, view)
            self.assertEqual(sum(int(ln.split()[4]) for ln in lines), total, view)

            p = mu.run(["tar", "c", "-C", root, "."], check=0)
            self.assertEqual(p.stderr, b"", view)
            with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tf:
                members = [m for m in tf.getmembers() if m.isfile()]
                self.assertEqual(len(members), nfiles, view)
                self.assertEqual(sum(m.size for m in members), total, view)
                for m in members:
                    rel = os.fsencode(os.path.normpath(m.name))
                    self.assertEqual(tf.extractfile(m).read(), self.oracle(rel, view))

    def test_pcrfs_info_and_stats(self):
        info = json.loads(mu.run(["cat", os.path.join(self.mnt, ".pcrfs", "info")],
                                 check=0).stdout)
        summary = json.loads(mu.run([mu.program("PCRINFO"), "--json", self.store],
                                    check=0).stdout)
        self.assertEqual(info["store"], os.path.realpath(self.store))
        self.assertEqual(info["levels"], self.levels)
        for k in ("format_version", "script", "files", "dirs", "records"):
            self.assertEqual(info[k], summary[k], k)
        self.assertEqual(info["files"], len(self.files))
        self.assertEqual(os.stat(os.path.join(self.mnt, ".pcrfs", "info")).st_size,
                         len(read_bytes(os.path.join(self.mnt, ".pcrfs", "info"))))

        stats_path = os.path.join(self.mnt, ".pcrfs", "stats")

        def stats():
            return json.loads(mu.run(["cat", stats_path], check=0).stdout)

        before = stats()
        self.assertEqual(set(before["views"]), set(self.views))
        rel = max(self.files, key=lambda r: len(self.oracle(r, "scan2")))
        fd = os.open(self.v("scan2", rel), os.O_RDONLY | os.O_DIRECT)  # past the page cache
        try:
            n = len(os.pread(fd, 1 << 20, 0))
        finally:
            os.close(fd)
        after = stats()
        b, a = before["views"]["scan2"], after["views"]["scan2"]
        self.assertEqual(a["opens"], b["opens"] + 1)
        self.assertGreaterEqual(a["bytes"] - b["bytes"], n)
        self.assertEqual(after["views"]["scan3"], before["views"]["scan3"])
        lv = {x["level"]: x for x in after["levels"]}
        self.assertGreater(lv[2]["record_bytes"], 0)
        self.assertGreaterEqual(after["files_loaded"], 1)

    def test_rw_mount_still_refuses_writes(self):
        """With -o rw the kernel passes writes to the daemon: its handlers must answer
        EROFS, not ENOSYS (root only: default_permissions stops others first)."""
        if os.geteuid() != 0:
            self.skipTest("needs root: as another user the kernel answers EACCES first")
        mnt = os.path.join(self.tmp, "mnt-rw")
        with mu.Mount(self.store, mnt, "-o", "rw") as m:
            rel = sorted(self.files)[0]
            f = os.path.join(os.fsencode(mnt), b"scan1", rel)
            d = os.path.dirname(f)
            expect_errno(self, errno.EROFS, os.open, f, os.O_WRONLY)
            expect_errno(self, errno.EROFS, os.open, f, os.O_RDWR)
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
            self.assertEqual(read_bytes(f), self.oracle(rel, "scan1"))
            self.assertEqual(m.unmount(), 0, m.stderr())


def _stress_worker(mnt, want, deadline, seed, queue):
    """Read random files (whole, or a random range through O_DIRECT) until @deadline;
    return (reads, mismatches), or put it on @queue from a child process."""
    rng = random.Random(seed)
    keys = sorted(want)
    reads, bad = 0, []
    while time.monotonic() < deadline:
        view, rel = keys[rng.randrange(len(keys))]
        data = want[(view, rel)]
        p = os.path.join(os.fsencode(mnt), view.encode(), rel)
        try:
            if rng.random() < 0.5:
                got, ref = read_bytes(p), data
            else:
                fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
                try:
                    off = rng.randrange(len(data) + 1)
                    n = rng.randrange(1, 300000)
                    got, ref = os.pread(fd, n, off), data[off:off + n]
                finally:
                    os.close(fd)
        except OSError as e:
            got, ref = repr(e), data[:16]
        reads += 1
        if got != ref:
            bad.append((view, rel))
    if queue is not None:
        queue.put((reads, bad[:10]))
        return None
    return reads, bad[:10]


# ---------------------------------------------------------------------------------


class Lifecycle(StoreFixture, unittest.TestCase):
    """Command line, signals, kill -9 and remount, daemon mode, logging."""

    @classmethod
    def setUpClass(cls):
        cls.make_fixture(classes=2, per_class=3, seed=5, awkward=False)
        cls.rel = sorted(cls.files)[0]

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def setUp(self):
        self.mounts = []
        self.mnt = os.path.join(self.tmp, "mnt-" + self._testMethodName)

    def tearDown(self):
        for m in self.mounts:
            m.cleanup()

    def start(self, *options, mnt=None):
        m = mu.Mount(self.store, mnt or self.mnt, *options)
        self.mounts.append(m)
        return m.start()

    def check_serving(self, mnt, view="scan2"):
        got = read_bytes(os.path.join(os.fsencode(mnt), view.encode(), self.rel))
        self.assertEqual(got, self.oracle(self.rel, view))

    def test_fusermount_u_exit_0(self):
        m = self.start()
        self.check_serving(self.mnt)
        self.assertEqual(m.unmount(), 0, m.stderr())
        self.assertFalse(os.path.ismount(self.mnt))

    def test_sigterm_unmounts_and_exits_0(self):
        m = self.start()
        self.check_serving(self.mnt)
        self.assertEqual(m.signal(signal.SIGTERM), 0, m.stderr())
        self.assertFalse(os.path.ismount(self.mnt))
        self.assertFalse(mu.is_dead_mount(self.mnt))

    def test_sigint_unmounts_and_exits_0(self):
        m = self.start()
        self.check_serving(self.mnt)
        self.assertEqual(m.signal(signal.SIGINT), 0, m.stderr())
        self.assertFalse(os.path.ismount(self.mnt))
        self.assertFalse(mu.is_dead_mount(self.mnt))

    def test_kill_9_then_fusermount_and_remount(self):
        m = self.start()
        self.check_serving(self.mnt)
        self.assertEqual(m.signal(signal.SIGKILL), -signal.SIGKILL)
        self.assertTrue(mu.is_dead_mount(self.mnt), "expected a dead mount (ENOTCONN)")
        mu.run([mu.FUSERMOUNT, "-u", self.mnt], check=0)
        self.assertFalse(os.path.ismount(self.mnt))
        m2 = self.start()
        self.check_serving(self.mnt)
        self.check_serving(self.mnt, "full")
        self.assertEqual(m2.unmount(), 0, m2.stderr())

    def test_daemon_mode(self):
        """Without -f the command returns once the mount is up; the detached daemon
        serves until fusermount3 -u and then exits."""
        os.makedirs(self.mnt)
        p = mu.run([mu.program("PCRFS"), self.store, self.mnt], check=0, timeout=30)
        err = p.stderr
        if not _syslog_answers():  # warned once: its messages would be lost (pcrfs(1))
            self.assertTrue(err.startswith(b"pcrfs: warning: no syslog (/dev/log)"), err)
            err = err.split(b"\n", 1)[1]
        self.assertEqual(err, b"")
        try:
            self.assertTrue(os.path.ismount(self.mnt))
            self.check_serving(self.mnt)
            pids = _pids_with_arg(self.mnt)
            self.assertEqual(len(pids), 1, pids)
        finally:
            mu.run([mu.FUSERMOUNT, "-u", self.mnt], check=0)
        self.assertTrue(mu.wait_for(lambda: not _pid_alive(pids[0]), 10), "daemon still running")

    def test_usage_help_version(self):
        pcrfs = mu.program("PCRFS")
        p = mu.run([pcrfs])
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"usage: pcrfs STORE MOUNTPOINT", p.stderr)
        p = mu.run([pcrfs, self.store])
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"MOUNTPOINT", p.stderr)
        p = mu.run([pcrfs, "--help"], check=0)
        for s in (b"timeout=", b"nokeep_cache", b"clone_fd", b"max_idle_threads", b"allow_other"):
            self.assertIn(s, p.stdout)
        p = mu.run([pcrfs, "--version"], check=0)
        self.assertIn(b"pcrfs ", p.stdout)
        self.assertIn(b"FUSE library version", p.stdout)

    def test_missing_mountpoint_fails_cleanly(self):
        p = mu.run([mu.program("PCRFS"), self.store, os.path.join(self.tmp, "no", "such")],
                   timeout=30)
        self.assertEqual(p.returncode, 2)  # a usage error, found by libfuse's parser
        self.assertIn(b"bad mount point", p.stderr)

    def test_unknown_option_refused(self):
        os.makedirs(self.mnt)
        p = mu.run([mu.program("PCRFS"), self.store, self.mnt, "-f", "-o", "bogus_option"],
                   timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"bogus_option", p.stderr)
        self.assertFalse(os.path.ismount(self.mnt))

    def test_options(self):
        for opts in (["-s"], ["-o", "clone_fd", "-o", "max_idle_threads=2"],
                     ["-o", "max_threads=3"], ["-o", "timeout=0,nokeep_cache"],
                     ["-o", "readdirplus=no"], ["-o", "readdirplus=auto"]):
            m = self.start(*opts)
            self.check_serving(self.mnt)
            self.assertEqual(walk_rel(os.path.join(self.mnt, "scan1"))[0], set(self.files))
            self.assertEqual(m.unmount(), 0, (opts, m.stderr()))
        with open("/proc/self/mounts", "rb") as f:
            self.assertNotIn(os.fsencode(self.mnt), f.read())

    def test_readdirplus_policy(self):
        """Listings are plain READDIR by default (names-only walks: pcrfs(1),
        "Listings"); -o readdirplus=yes and auto bring READDIRPLUS back."""
        for opts, plus in (((), False), (("-o", "readdirplus=no"), False),
                           (("-o", "readdirplus=yes"), True),
                           (("-o", "readdirplus=auto"), True)):
            m = self.start("-d", *opts)
            self.assertEqual(walk_rel(os.path.join(self.mnt, "scan1"))[0], set(self.files))
            with os.scandir(os.path.join(self.mnt, "scan2")) as it:
                inos = {e.name: e.inode() for e in it}
            for name, ino in inos.items():  # d_ino is the node's inode number either way
                self.assertEqual(ino, os.lstat(os.path.join(self.mnt, "scan2", name)).st_ino)
            self.assertEqual(m.unmount(), 0, m.stderr())
            log = m.stderr()
            self.assertIn("opcode: READDIR", log, opts)
            self.assertEqual("opcode: READDIRPLUS" in log, plus, opts)

    def test_bwlimit(self):
        """-o bwlimit=RATE caps the bytes read from records per second."""
        rate = 25000
        m = self.start("-o", "bwlimit=25k")
        info = json.loads(read_bytes(os.path.join(self.mnt, ".pcrfs", "info")))
        self.assertEqual(info["bwlimit"], rate)
        before = json.loads(read_bytes(os.path.join(self.mnt, ".pcrfs", "stats")))
        t0 = time.monotonic()
        for rel in sorted(self.files):
            self.assertEqual(read_bytes(os.path.join(os.fsencode(self.mnt), b"full", rel)),
                             self.oracle(rel, "full"))
        elapsed = time.monotonic() - t0
        after = json.loads(read_bytes(os.path.join(self.mnt, ".pcrfs", "stats")))
        nbytes = sum(x["record_bytes"] for x in after["levels"]) - \
            sum(x["record_bytes"] for x in before["levels"])
        self.assertGreater(nbytes, 2 * rate)
        # the token bucket allows a burst of 1/8 s of traffic
        self.assertGreaterEqual(elapsed, nbytes / rate - 0.125 - 0.05, (nbytes, elapsed))
        self.assertEqual(m.unmount(), 0, m.stderr())
        os.makedirs(self.mnt, exist_ok=True)
        p = mu.run([mu.program("PCRFS"), self.store, self.mnt, "-o", "bwlimit=fast"])
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"bwlimit", p.stderr)

    def test_mount_table_and_ro(self):
        m = self.start()
        with open("/proc/self/mounts") as f:
            line = [ln.split() for ln in f if ln.split()[1] == self.mnt]
        self.assertEqual(len(line), 1)
        src, _, fstype, opts = line[0][:4]
        self.assertEqual(src, os.path.realpath(self.store))
        self.assertEqual(fstype, "fuse.pcrfs")
        self.assertIn("ro", opts.split(","))
        self.assertIn("default_permissions", opts.split(","))
        self.assertTrue(os.statvfs(self.mnt).f_flag & os.ST_RDONLY)
        self.assertEqual(m.unmount(), 0)

    def test_debug_only_with_d(self):
        m = self.start()
        self.check_serving(self.mnt)
        self.assertEqual(m.unmount(), 0)
        self.assertEqual(m.stderr(), "", "a quiet daemon printed something")
        m = self.start("-d")
        self.check_serving(self.mnt)
        self.assertEqual(m.unmount(), 0)
        self.assertIn("LOOKUP", m.stderr())


def _pids_with_arg(arg):
    """Processes whose command line holds @arg (our own mount point: unique)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(arg) in args and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def _pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------


class BadStores(StoreFixture, unittest.TestCase):
    """A bad index fails at mount (message, exit 1, no mount); a bad record fails
    only its own files with EIO while the rest keeps serving."""

    PER_RECORD = 4

    @classmethod
    def setUpClass(cls):
        cls.make_fixture(classes=2, per_class=6, seed=9, awkward=False,
                         per_record=cls.PER_RECORD)
        with open(os.path.join(cls.tmp, "dummy"), "w"):
            pass

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def setUp(self):
        self.mounts = []

    def tearDown(self):
        for m in self.mounts:
            m.cleanup()

    def copy(self, name):
        dst = os.path.join(self.tmp, name)
        shutil.copytree(self.store, dst)
        return dst

    def refused(self, store, fragment, foreground=False):
        mnt = os.path.join(self.tmp, "mnt-" + self._testMethodName)
        os.makedirs(mnt, exist_ok=True)
        argv = [mu.program("PCRFS"), store, mnt] + (["-f"] if foreground else [])
        p = mu.run(argv, timeout=30)
        err = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, 1, err)
        self.assertTrue(err.startswith("pcrfs: " + store), err)
        self.assertIn(fragment.lower(), err.lower())
        self.assertEqual(err.count("\n"), 1, "one line: " + err)
        self.assertFalse(os.path.ismount(mnt))
        self.assertFalse(mu.is_dead_mount(mnt))
        self.assertEqual(_pids_with_arg(mnt), [])

    def test_missing_index(self):
        s = self.copy("noindex")
        os.unlink(os.path.join(s, "index.db"))
        self.refused(s, "no index.db")
        self.refused(s, "no index.db", foreground=True)

    def test_missing_store(self):
        self.refused(os.path.join(self.tmp, "nonexistent"), "No such file or directory")

    def test_not_a_directory(self):
        self.refused(os.path.join(self.tmp, "dummy"), "not a directory")

    def test_garbage_index(self):
        s = self.copy("garbage")
        with open(os.path.join(s, "index.db"), "wb") as f:
            f.write(random.Random(1).randbytes(65536))
        self.refused(s, "not a pcrfs index")

    def test_foreign_sqlite(self):
        import sqlite3
        s = self.copy("foreign")
        os.unlink(os.path.join(s, "index.db"))
        db = sqlite3.connect(os.path.join(s, "index.db"))
        db.execute("CREATE TABLE photos (name TEXT, data BLOB)")
        db.execute("INSERT INTO photos VALUES ('a', x'00')")
        db.commit()
        db.close()
        self.refused(s, "not a pcrfs index")

    def test_wrong_format_version(self):
        import sqlite3
        s = self.copy("version")
        db = sqlite3.connect(os.path.join(s, "index.db"))
        db.execute("PRAGMA user_version = 999")
        db.commit()
        db.close()
        self.refused(s, "version")

    def damaged_record(self, name, damage):
        s = self.copy(name)
        recs = sorted(os.listdir(os.path.join(s, "records")))
        self.assertGreaterEqual(len(recs), 3, recs)
        victim = os.path.join(s, "records", recs[1])
        damage(victim)
        mnt = os.path.join(self.tmp, "mnt-" + name)
        m = mu.Mount(s, mnt)
        self.mounts.append(m)
        m.start()
        failed = {}
        for view in ("scan1", "scan5", "full"):
            failed[view] = set()
            for rel in sorted(self.files):
                p = os.path.join(os.fsencode(mnt), view.encode(), rel)
                self.assertEqual(os.stat(p).st_size, len(self.oracle(rel, view)))
                try:
                    data = read_bytes(p)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EIO, (view, rel))
                    failed[view].add(rel)
                    continue
                self.assertEqual(data, self.oracle(rel, view), (view, rel))
        # exactly the files of that record fail, in every view
        self.assertEqual(len(failed["full"]), self.PER_RECORD, failed)
        self.assertEqual(failed["scan1"], failed["full"])
        self.assertEqual(failed["scan5"], failed["full"])
        self.assertTrue(m.alive(), m.stderr())
        st = json.loads(read_bytes(os.path.join(mnt, ".pcrfs", "stats")))
        self.assertGreater(st["errors"], 0)
        self.assertGreater(st["views"]["full"]["errors"], 0)
        self.assertIn(recs[1], m.stderr(), "the damaged record is not named in the log")
        self.assertEqual(m.unmount(), 0, m.stderr())

    def test_truncated_record(self):
        self.damaged_record("truncated", lambda p: os.truncate(p, os.path.getsize(p) // 2))

    def test_deleted_record(self):
        self.damaged_record("deleted", os.unlink)


# ---------------------------------------------------------------------------------


HELPER_LINK = "/sbin/mount.fuse.pcrfs"


class MountHelper(StoreFixture, unittest.TestCase):
    """mount -t fuse.pcrfs and an fstab line, through mount(8) and the helper.

    mount(8) finds helpers only in /sbin, so the test links the built helper there
    for its duration (and removes the link afterwards). That needs root; as another
    user the class is skipped (reported as such, never as a pass). An installed
    helper that is not our link is left alone and the class is skipped as well.
    PCRFS_PROGRAM points the helper at the pcrfs under test."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (links the helper into /sbin)")
        helper = mu.program("PCRFS_MOUNT_HELPER")
        cls.linked = False
        if os.path.lexists(HELPER_LINK):
            if os.path.realpath(HELPER_LINK) != os.path.realpath(helper):
                raise unittest.SkipTest("%s exists and is not the built helper; "
                                        "not replacing it" % HELPER_LINK)
        else:
            os.symlink(helper, HELPER_LINK)
            cls.linked = True
        cls.make_fixture(classes=2, per_class=3, seed=11, awkward=False)
        cls.rel = sorted(cls.files)[0]
        cls.env = dict(os.environ, PCRFS_PROGRAM=mu.program("PCRFS"), LC_ALL="C")

    @classmethod
    def tearDownClass(cls):
        if cls.linked:
            os.unlink(HELPER_LINK)
        cls.remove_fixture()

    def check_mounted(self, mnt):
        self.assertTrue(os.path.ismount(mnt))
        with open("/proc/self/mounts") as f:
            line = [ln.split() for ln in f if ln.split()[1] == mnt][0]
        self.assertEqual(line[2], "fuse.pcrfs")
        self.assertIn("ro", line[3].split(","))
        got = read_bytes(os.path.join(os.fsencode(mnt), b"scan1", self.rel))
        self.assertEqual(got, self.oracle(self.rel, "scan1"))
        self.assertEqual(walk_rel(os.path.join(mnt, "full"))[0], set(self.files))

    def umount(self, mnt):
        pids = _pids_with_arg(mnt)
        self.assertEqual(len(pids), 1, pids)
        mu.run(["umount", mnt], check=0, env=self.env)
        self.assertFalse(os.path.ismount(mnt))
        self.assertTrue(mu.wait_for(lambda: not _pid_alive(pids[0]), 10), "daemon still running")

    def test_mount_t_fuse_pcrfs(self):
        mnt = os.path.join(self.tmp, "mnt-t")
        os.makedirs(mnt)
        mu.run(["mount", "-t", "fuse.pcrfs", self.store, mnt, "-o", "ro"], check=0,
               env=self.env, timeout=30)
        try:
            self.check_mounted(mnt)
        finally:
            self.umount(mnt)

    def test_fstab_line(self):
        mnt = os.path.join(self.tmp, "mnt-fstab")
        os.makedirs(mnt)
        fstab = os.path.join(self.tmp, "fstab")
        with open(fstab, "w") as f:
            f.write("# test fstab\n%s  %s  fuse.pcrfs  ro,noauto,nofail,"
                    "x-systemd.automount,allow_other  0 0\n" % (self.store, mnt))
        mu.run(["mount", "-T", fstab, mnt], check=0, env=self.env, timeout=30)
        try:
            self.check_mounted(mnt)
        finally:
            self.umount(mnt)

    def test_bad_store_through_mount(self):
        mnt = os.path.join(self.tmp, "mnt-bad")
        os.makedirs(mnt)
        p = mu.run(["mount", "-t", "fuse.pcrfs", os.path.join(self.tmp, "nope"), mnt],
                   env=self.env, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"pcrfs: ", p.stderr)
        self.assertFalse(os.path.ismount(mnt))


class Trailers(StoreFixture, unittest.TestCase):
    """Bytes after the source's EOI (tests/gen/mkodd.py) through real mounts, with and
    without -o open (the handle read path and the open-less pread path): full/ ends
    with the source's trailer after the transcoded image's EOI, so Pillow opens the
    second MPO frame from full/ and finds the Ultra HDR gain map at the end; scan1/
    (and every level below the top) ends at FF D9; an ICC APP2 that sat after SOF is
    seen by Pillow on full/ and scan1/."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-mount-odd-",
                                   dir=os.environ.get("PCRFS_TEST_TMPDIR"))
        cls.src = os.path.join(cls.tmp, "src")
        cls.store = os.path.join(cls.tmp, "store.pcr")
        manifest = os.path.join(cls.tmp, "odd.manifest.json")
        mu.run([mu.PYTHON, os.path.join(mu.SRCROOT, "tests", "gen", "mkodd.py"), "--out",
                cls.src, "--manifest", manifest], check=0)
        with open(manifest) as f:
            cls.entries = {bytes.fromhex(e["path_hex"]): e for e in json.load(f)["entries"]
                           if e["type"] == "file"}
        mu.build_store(cls.src, cls.store)
        cls.levels = mu.store_levels(cls.store)

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def each_mount(self, check):
        for opts in ([], ["-o", "open"]):
            mnt = os.path.join(self.tmp, "mnt" + "".join(opts).replace("-o", "-"))
            m = mu.Mount(self.store, mnt, *opts)
            try:
                m.start()
                check(mnt, " ".join(opts) or "default")
                self.assertEqual(m.unmount(), 0, m.stderr())
            finally:
                m.cleanup()

    def test_full_and_scan1_serve_what_the_store_says(self):
        def check(mnt, how):
            for rel, e in sorted(self.entries.items()):
                src = read_bytes(os.path.join(os.fsencode(self.src), rel))
                t = e["trailer"]
                for view, level in (("full", "full"), ("scan1", 1),
                                    ("scan%d" % (self.levels - 1), self.levels - 1)):
                    p = os.path.join(os.fsencode(mnt), view.encode(), rel)
                    got = read_bytes(p)
                    want = mu.oracle(self.store, rel, level)
                    what = "%s %s/%s" % (how, view, os.fsdecode(rel))
                    self.assertTrue(got == want, "%s: %d bytes, pcrinfo --cat says %d" %
                                    (what, len(got), len(want)))
                    self.assertEqual(os.stat(p).st_size, len(got), what)
                    if e["expect"] == "verbatim":
                        self.assertTrue(got == src, what)
                    elif view == "full":
                        self.assertTrue(t == 0 or got[-t:] == src[-t:],
                                        "%s: does not end with the source's trailer" % what)
                        self.assertEqual(got[len(got) - t - 2:len(got) - t], EOI, what)
                    else:
                        self.assertEqual(got[-2:], EOI, "%s: must end at the EOI" % what)
                        self.assertTrue(t == 0 or src[-t:] not in got,
                                        "%s: holds the trailer" % what)
                # reads of odd sizes across the EOI/trailer boundary of full/
                p = os.path.join(os.fsencode(mnt), b"full", rel)
                want = mu.oracle(self.store, rel, "full")
                rng = random.Random(len(want))
                with open(p, "rb", buffering=0) as f:
                    for _ in range(40):
                        off = rng.randrange(max(1, len(want) - t - 8), len(want) + 4)
                        n = rng.randrange(1, 64)
                        self.assertEqual(os.pread(f.fileno(), n, off), want[off:off + n],
                                         "%s pread(%d, %d) of full/%s" %
                                         (how, n, off, os.fsdecode(rel)))
        self.each_mount(check)

    def test_pillow_reads_mpo_frame_2_and_icc_from_full(self):
        from PIL import Image

        def frame(path, k):
            with Image.open(path) as im:
                im.seek(k)
                im.load()
                return im.mode, im.size, im.tobytes()

        def check(mnt, how):
            mpo = os.path.join(self.src, "odd", "mpo.jpg")
            for k in (0, 1):
                self.assertTrue(frame(os.path.join(mnt, "full", "odd", "mpo.jpg"), k) ==
                                frame(mpo, k), "%s: MPO frame %d from full/" % (how, k))
            with self.assertRaises(Exception, msg="scan1/ must not hold frame 2"):
                frame(os.path.join(mnt, "scan1", "odd", "mpo.jpg"), 1)
            icc = bytes.fromhex(self.entries[b"odd/icc_after_sof.jpg"]["icc_hex"])
            for view in ("full", "scan1"):
                with Image.open(os.path.join(mnt, view, "odd", "icc_after_sof.jpg")) as im:
                    self.assertEqual(im.info.get("icc_profile"), icc, "%s %s/" % (how, view))
            gl = self.entries[b"odd/ultrahdr.jpg"]["gainmap_len"]
            uh = read_bytes(os.path.join(mnt, "full", "odd", "ultrahdr.jpg"))
            self.assertTrue(uh[-gl:] == read_bytes(os.path.join(self.src, "odd",
                                                                "ultrahdr.jpg"))[-gl:])
            with Image.open(io.BytesIO(uh[-gl:])) as im:
                im.load()
                self.assertEqual(im.size, (36, 24), how)
        self.each_mount(check)


if __name__ == "__main__":
    unittest.main()
