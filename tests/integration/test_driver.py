#!/usr/bin/python3
"""Driver tests of pcrfs beyond the read path: /.pcrfs/stats under many descriptors,
the mount point check, writing the level in pieces, usage exit codes, -o logfile and
the user.pcrfs.level attribute. Each test mounts its own store with `pcrfs -f` (or
detached) and leaves no mount or daemon behind.

Run by hand:  PCRFS_BUILD_DIR=/path/to/build /usr/bin/python3 test_driver.py -v
"""

import errno
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from test_mount import StoreFixture, read_bytes, _pids_with_arg  # noqa: E402


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


class Driver(StoreFixture, unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.make_fixture(classes=2, per_class=3, seed=11, awkward=False)
        cls.rel = sorted(cls.files)[0]

    @classmethod
    def tearDownClass(cls):
        cls.remove_fixture()

    def setUp(self):
        self.mounts = []
        self.mnt = os.path.join(self.tmp, "mnt-" + self._testMethodName)
        os.makedirs(self.mnt, exist_ok=True)

    def tearDown(self):
        for m in self.mounts:
            m.cleanup()

    def start(self, *options):
        m = mu.Mount(self.store, self.mnt, *options)
        self.mounts.append(m)
        return m.start()

    def p(self, *parts):
        return os.path.join(self.mnt, *parts)

    def refused(self, argv, status, fragment, mnt=None):
        """pcrfs ARGV exits @status with one line naming @fragment and mounts nothing."""
        p = mu.run([mu.program("PCRFS")] + argv, timeout=30)
        err = p.stderr.decode(errors="replace")
        self.assertEqual(p.returncode, status, (argv, err))
        self.assertIn(fragment, err)
        self.assertFalse(os.path.ismount(mnt or self.mnt))
        self.assertEqual(_pids_with_arg(mnt or self.mnt), [])
        return err

    # ---- /.pcrfs/stats ----------------------------------------------------------

    def test_stats_inode_is_stable_and_cp_copies_it(self):
        m = self.start()
        stats = self.p(".pcrfs", "stats")
        a, b = os.stat(stats), os.stat(stats)
        self.assertEqual(a.st_ino, b.st_ino)
        with open(stats, "rb") as f:
            self.assertEqual(os.fstat(f.fileno()).st_ino, a.st_ino)
        ls_i = {e.name: e.inode() for e in os.scandir(self.p(".pcrfs"))}
        self.assertEqual(ls_i["stats"], a.st_ino)
        dst = os.path.join(self.tmp, "stats-copy.json")
        mu.run(["cp", stats, dst], check=0)
        copied = json.loads(read_bytes(dst))
        self.assertIn("views", copied)
        # still a fresh snapshot per open: a read between two cats shows in the second
        before = json.loads(read_bytes(stats))
        fd = os.open(self.p("scan2", os.fsdecode(self.rel)), os.O_RDONLY | os.O_DIRECT)
        try:
            os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
        after = json.loads(read_bytes(stats))
        self.assertEqual(after["views"]["scan2"]["opens"], before["views"]["scan2"]["opens"] + 1)
        self.assertEqual(m.unmount(), 0, m.stderr())

    def test_stats_descriptors_do_not_grow_the_daemon(self):
        """Each held descriptor pinned a snapshot (5000 held: +10 MB); now at most 256
        are kept and older descriptors answer ESTALE."""
        warm, n = 1000, 4000
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.assertGreaterEqual(hard, warm + n + 100, "the test needs %d descriptors" % (warm + n))
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, warm + n + 100), hard))
        # One thread (-s): libfuse starts workers as requests pile up, each with a
        # 1 MiB request buffer (touched whole under meson's MALLOC_PERTURB_), which
        # would blur what the held snapshots cost; the snapshot code is the same.
        m = self.start("-s")
        stats = self.p(".pcrfs", "stats")
        fds = []
        try:
            for _ in range(warm):
                fds.append(os.open(stats, os.O_RDONLY))
            before = vm_rss_kb(m.proc.pid)
            for _ in range(n):
                fds.append(os.open(stats, os.O_RDONLY))
            grown = vm_rss_kb(m.proc.pid) - before
            if mu.SANITIZED:  # asserted in the plain stages (mount_util.SANITIZED)
                print("\n[stats descriptors] RSS +%d kB under ASan: bound not checked in "
                      "this stage" % grown, file=sys.stderr)
            else:
                self.assertLess(grown, 2 * 1024, "daemon grew by %d kB for %d more "
                                "descriptors" % (grown, n))
            self.assertIn("views", json.loads(os.pread(fds[-1], 1 << 20, 0)))
            self.assertIn("views", json.loads(read_bytes(stats)))
            with self.assertRaises(OSError) as cm:
                os.pread(fds[0], 1 << 20, 0)
            self.assertEqual(cm.exception.errno, errno.ESTALE)
        finally:
            for fd in fds:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        self.assertIn("views", json.loads(read_bytes(stats)))
        self.assertEqual(m.unmount(), 0, m.stderr())

    # ---- the command line -------------------------------------------------------

    def test_mountpoint_must_be_a_directory(self):
        target = os.path.join(self.tmp, "a-regular-file")
        with open(target, "w") as f:
            f.write("x")
        # should the refusal fail and mount on the file, unmount it whatever happens
        self.addCleanup(lambda: os.path.ismount(target) and subprocess.run(
            [mu.FUSERMOUNT, "-u", "-z", target], stderr=subprocess.DEVNULL))
        err = self.refused([self.store, target], 1, "not a directory", mnt=target)
        self.assertEqual(err, "pcrfs: %s: not a directory\n" % os.path.realpath(target))
        err = self.refused([self.store, target, "-f"], 1, "not a directory", mnt=target)
        self.assertEqual(err.count("\n"), 1)
        self.assertEqual(read_bytes(target), b"x")

    def test_unknown_options_and_flags_exit_2(self):
        for argv in (["-o", "bogus_option"], ["-o", "ro,bogus_option=1"], ["--bogus-flag"],
                     ["-x"]):
            self.refused([self.store, self.mnt, "-f"] + argv, 2, argv[-1].split(",")[-1])
            self.refused(argv + [self.store, self.mnt], 2, argv[-1].split(",")[-1])

    def test_read_ahead_one_read_per_file(self):
        """-o read_ahead_kb (default 1024): a 600 kB file is one READ, not five (the
        kernel's 128 kB readahead); =0 leaves the kernel's; bad values exit 2."""
        src = os.path.join(self.tmp, "ra-src")
        os.makedirs(os.path.join(src, "c"), exist_ok=True)
        with open(os.path.join(src, "c", "big.bin"), "wb") as f:
            f.write(os.urandom(600 * 1000))
        store = os.path.join(self.tmp, "ra.pcr")
        if not os.path.exists(store):
            mu.run([mu.program("MKPCRFS"), "-q", src, store], check=0)

        def reads(*opts):
            m = mu.Mount(store, self.mnt, *opts)
            self.mounts.append(m)
            m.start()
            try:
                with open(self.p("full", "c", "big.bin"), "rb", buffering=0) as f:
                    self.assertEqual(len(f.read()), 600 * 1000)
                st = json.loads(read_bytes(self.p(".pcrfs", "stats")))
                dev = os.stat(self.mnt).st_dev
                with open("/sys/class/bdi/%d:%d/read_ahead_kb" %
                          (os.major(dev), os.minor(dev))) as f:
                    kb = int(f.read())
                return st["views"]["full"]["reads"], kb
            finally:
                m.cleanup()
                self.mounts.remove(m)

        self.assertEqual(reads(), (1, 1024))
        n, kb = reads("-o", "read_ahead_kb=0")
        self.assertGreaterEqual(n, (600 * 1000 + kb * 1024 - 1) // (kb * 1024))
        self.assertGreater(n, 1)
        self.assertEqual(reads("-o", "read_ahead_kb=256")[1], 256)
        self.refused([store, self.mnt, "-f", "-o", "read_ahead_kb=-3"], 2, "read_ahead_kb")

    def test_logfile(self):
        bad = os.path.join(self.tmp, "bad-logfile.pcr")
        shutil.copytree(self.store, bad)
        for name in os.listdir(os.path.join(bad, "records")):
            os.truncate(os.path.join(bad, "records", name), 64)
        log = os.path.join(self.tmp, "pcrfs.log")
        with open(log, "w") as f:
            f.write("earlier line\n")
        # detached: without the option its messages would go to syslog only
        p = mu.run([mu.program("PCRFS"), bad, self.mnt, "-o", "logfile=" + log], timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, b"")
        try:
            with self.assertRaises(OSError) as cm:
                read_bytes(os.path.join(os.fsencode(self.mnt), b"full", self.rel))
            self.assertEqual(cm.exception.errno, errno.EIO)
            pids = _pids_with_arg(self.mnt)
        finally:
            mu.run([mu.FUSERMOUNT, "-u", self.mnt], check=0)
        self.assertTrue(mu.wait_for(lambda: not _pids_with_arg(self.mnt), 10))
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "earlier line")  # appended, not truncated
        # the damaged records are found when the store is opened (every record is
        # held open from mount, pcrfs(1)), before the daemon detaches: that line
        # carries the mounting process's pid, later ones the daemon's
        self.assertTrue(pids)
        pat = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pcrfs\[\d+\]: error: "
                         r"record \S+: .*EIO$")
        self.assertTrue(any(pat.match(ln) for ln in lines[1:]), lines)
        # a log that cannot be opened fails the mount, on the terminal
        err = self.refused([self.store, self.mnt, "-o", "logfile=" +
                            os.path.join(self.tmp, "no", "such", "dir", "x.log")], 1, "logfile=")
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("No such file or directory", err)

    # ---- the level -----------------------------------------------------------------

    def level(self):
        return read_bytes(self.p(".pcrfs", "level")).decode().strip()

    def test_level_written_in_pieces(self):
        self.assertGreaterEqual(self.levels, 10)
        m = self.start("-o", "level=3")
        path = self.p(".pcrfs", "level")
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"1")
        self.assertEqual(self.level(), "3")  # no half value is applied
        os.write(fd, b"0")
        os.close(fd)
        self.assertEqual(self.level(), "10")
        size = len(self.oracle(self.rel, "scan10"))
        self.assertEqual(os.stat(os.path.join(os.fsencode(self.mnt), b"dynamic", self.rel)).st_size,
                         size)
        # a value applies at its newline, the rest at close; O_APPEND offsets do not matter
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"2\n")
        self.assertEqual(self.level(), "2")
        os.write(fd, b"7\n")
        self.assertEqual(self.level(), "7")
        # a write holding more than one value is refused whole (pcrfs(1))
        with self.assertRaises(OSError) as cm:
            os.write(fd, b"3\nfu")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertEqual(self.level(), "7")
        os.write(fd, b"fu")
        os.write(fd, b"ll")
        os.close(fd)
        self.assertEqual(self.level(), str(self.levels))
        mu.run(["sh", "-c", "printf 4 > '%s'" % path], check=0)
        self.assertEqual(self.level(), "4")
        # what cannot become a level fails at the write; a stump fails close
        fd = os.open(path, os.O_WRONLY)
        with self.assertRaises(OSError) as cm:
            os.write(fd, b"x")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        os.write(fd, b"f")
        with self.assertRaises(OSError) as cm:
            os.close(fd)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertEqual(self.level(), "4")
        self.assertEqual(json.loads(read_bytes(self.p(".pcrfs", "stats")))
                         ["views"]["dynamic"]["switches"], 5)
        self.assertEqual(m.unmount(), 0, m.stderr())

    def test_level_xattr_reads_back(self):
        m = self.start("-o", "level=3")
        dyn, ctl = self.p("dynamic"), self.p(".pcrfs", "level")
        for node in (dyn, ctl):
            self.assertEqual(os.getxattr(node, "user.pcrfs.level"), b"3")
            self.assertEqual(os.listxattr(node), ["user.pcrfs.level"])
        os.setxattr(dyn, "user.pcrfs.level", b"6")
        self.assertEqual(os.getxattr(ctl, "user.pcrfs.level"), b"6")
        os.setxattr(ctl, "user.pcrfs.level", b"full")
        self.assertEqual(os.getxattr(dyn, "user.pcrfs.level"), str(self.levels).encode())
        other = self.p("scan2", os.fsdecode(self.rel))
        self.assertEqual(os.listxattr(other), [])
        for node in (other, self.p("scan2"), self.p("dynamic", os.fsdecode(self.rel))):
            with self.assertRaises(OSError) as cm:
                os.getxattr(node, "user.pcrfs.level")
            self.assertEqual(cm.exception.errno, errno.ENODATA, node)
        with self.assertRaises(OSError) as cm:
            os.getxattr(other, "security.selinux")
        self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
        self.assertEqual(m.unmount(), 0, m.stderr())
        # without -o level no node has one: the kernel's own EOPNOTSUPP
        m = self.start()
        for node in (self.p("scan2"), self.p("scan2", os.fsdecode(self.rel))):
            for _ in range(2):
                with self.assertRaises(OSError) as cm:
                    os.getxattr(node, "user.pcrfs.level")
                self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
            with self.assertRaises(OSError) as cm:
                os.listxattr(node)
            self.assertEqual(cm.exception.errno, errno.EOPNOTSUPP)
        self.assertEqual(m.unmount(), 0, m.stderr())


if __name__ == "__main__":
    unittest.main(verbosity=2)
