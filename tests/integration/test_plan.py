#!/usr/bin/python3
"""Builds on many machines (issue 22): mkpcrfs --plan PLAN SRC, --plan PLAN --part I/N
OUT, --merge STORE PART... (tests/integration/meson.build sets MKPCRFS and PCRINFO).

What each class asserts, and would be false if the feature broke:
  Parts        N = 1, 3 and 4 parts (the 3 built at once, as separate processes)
               merge into a store equal to the one-machine build of the same tree and
               options: every index row, every record file's bytes, and every file
               pcrinfo --extract writes at every level; record files are hard links of
               the parts' (copies across file systems); a 6 MB non-JPEG is streamed;
               --quality and --tokens in parts give the one-machine store too; both
               stores mounted serve the same trees, bytes, sizes and mtimes
  Stream       a 256 MiB non-JPEG builds in < 64 MiB of RSS; a file that never reads
               as its stat says is read 3 times then named in a warning, and is an
               error in a part; a streamed file appended to is named in a warning
  Killed       a part killed mid-way leaves no OUT, and run again gives the same
               bytes as a part never interrupted
  PlanRows     (clitable.py) one row per refusal: bad --part values, --part without
               --plan or with a build option, a missing, duplicated or foreign part, a
               store given as a part, an existing STORE or PLAN, an edited plan, a
               source file changed since the plan: each one line on stderr, the right
               exit status, nothing left behind
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clitable as ct  # noqa: E402
import common  # noqa: E402
import mount_util as mu  # noqa: E402
from common import run  # noqa: E402

import numpy as np  # noqa: E402

EPOCH = "1700000000"  # SOURCE_DATE_EPOCH of the one-machine builds and the plans
PER_RECORD = 4


def mkpcrfs():
    return common.program("MKPCRFS")


def pcrinfo():
    return common.program("PCRINFO")


def env_epoch():
    env = dict(os.environ)
    env["SOURCE_DATE_EPOCH"] = EPOCH
    return env


def files_of(root):
    """{relative path: bytes} of the regular files under @root, and its directories."""
    files, dirs = common.tree_files(root)
    return {rel: common.read(p) for rel, p in files.items()}, dirs


class StoreCompare:
    """Helpers to compare two stores in everything a reader sees."""

    def assert_same_store(self, want, got, levels=None):
        self.assertEqual(common.sqlite_dump(os.path.join(want, "index.db")),
                         common.sqlite_dump(os.path.join(got, "index.db")), "index rows")
        for sub in ("records", "tokens"):
            a, b = os.path.join(want, sub), os.path.join(got, sub)
            self.assertEqual(os.path.isdir(a), os.path.isdir(b), sub)
            if os.path.isdir(a):
                fa, fb = files_of(a)[0], files_of(b)[0]
                self.assertEqual(sorted(fa), sorted(fb), sub)
                for k in fa:
                    self.assertTrue(fa[k] == fb[k], "%s/%s differs" % (sub, k))
        self.assertEqual(sorted(os.listdir(want)), sorted(os.listdir(got)), "top level")
        for level in levels or []:
            trees = []
            for store in (want, got):
                out = os.path.join(self.tmp.path, "x-%s-%s" % (os.path.basename(store), level))
                run([pcrinfo(), "--extract", out, "--level", str(level), store], check=0)
                trees.append(files_of(out))
                shutil.rmtree(out)
            self.assertEqual(trees[0][1], trees[1][1], "directories at level %s" % level)
            self.assertEqual(sorted(trees[0][0]), sorted(trees[1][0]), "files at level %s" % level)
            for rel, data in trees[0][0].items():
                self.assertTrue(data == trees[1][0][rel], "%s at level %s" % (rel, level))


def plan(args, plan_path, src):
    return run([mkpcrfs(), "-q"] + args + ["--plan", plan_path, src], env=env_epoch(), check=0)


def part(plan_path, i, n, out, jobs=1, check=0):
    return run([mkpcrfs(), "-q", "-j", str(jobs), "--plan", plan_path, "--part",
                "%d/%d" % (i, n), out], check=check)


def merge(store, parts, check=0):
    return run([mkpcrfs(), "-q", "--merge", store] + parts, check=check)


class PlanTest(unittest.TestCase, StoreCompare):
    """A class with its own temporary directory, filled by prepare()."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = common.TempDir("pcrfs-plan-")
        try:
            cls.prepare()
        except Exception:
            cls.tmp.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class Parts(PlanTest):
    @classmethod
    def prepare(cls):
        cls.src = os.path.join(cls.tmp.path, "src")
        common.make_dataset(cls.src, 3, 8, 31, awkward=True, size=96)
        # a non-JPEG over the streaming threshold (4 MiB): never read whole
        with open(os.path.join(cls.src, "n00000000", "clip.mkv"), "wb") as f:
            f.write(np.random.default_rng(5).integers(0, 256, 6 << 20, dtype=np.uint8)
                    .tobytes())
        cls.whole = os.path.join(cls.tmp.path, "whole")
        run([mkpcrfs(), "-q", "-n", str(PER_RECORD), cls.src, cls.whole], env=env_epoch(),
            check=0)
        cls.plan = os.path.join(cls.tmp.path, "p.plan")
        plan(["-n", str(PER_RECORD)], cls.plan, cls.src)
        cls.levels = json.loads(
            run([pcrinfo(), "--json", cls.whole], check=0).stdout)["levels"]

    def build_parts(self, n, concurrent=False, tag="p"):
        outs = [os.path.join(self.tmp.path, "%s%d-%d" % (tag, n, i)) for i in range(1, n + 1)]
        if concurrent:
            procs = [subprocess.Popen([mkpcrfs(), "-q", "-j", "1", "--plan", self.plan,
                                       "--part", "%d/%d" % (i, n), out],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for i, out in enumerate(outs, 1)]
            for p in procs:
                _, err = p.communicate(timeout=300)
                self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        else:
            for i, out in enumerate(outs, 1):
                part(self.plan, i, n, out)
        return outs

    def test_plan_is_small_text(self):
        with open(self.plan, "rb") as f:
            text = f.read()
        nfiles = int(text.split(b"\nfiles ")[1].split(b"\n")[0])
        self.assertGreater(nfiles, 40)
        self.assertLess(len(text) / nfiles, 100, "bytes per file")
        self.assertTrue(text.startswith(b"pcrfs-plan 1\nmade_by mkpcrfs "))
        self.assertIn(b"\ncreated " + EPOCH.encode() + b"\n", text)

    def test_one_part(self):
        outs = self.build_parts(1)
        store = os.path.join(self.tmp.path, "m1")
        merge(store, outs)
        self.assert_same_store(self.whole, store, levels=[self.levels])

    def test_three_parts_at_once(self):
        outs = self.build_parts(3, concurrent=True)
        store = os.path.join(self.tmp.path, "m3")
        merge(store, list(reversed(outs)))  # any order
        self.assert_same_store(self.whole, store, levels=range(1, self.levels + 1))
        # the record files are the parts' own (hard links), not copies
        for out in outs:
            for name in os.listdir(os.path.join(out, "records")):
                a = os.stat(os.path.join(out, "records", name))
                b = os.stat(os.path.join(store, "records", name))
                self.assertEqual((a.st_dev, a.st_ino), (b.st_dev, b.st_ino), name)
        run([pcrinfo(), "--verify", store], check=0)

    def test_four_parts(self):
        outs = self.build_parts(4)
        store = os.path.join(self.tmp.path, "m4")
        merge(store, outs)
        self.assert_same_store(self.whole, store, levels=[1, self.levels])

    def test_mounts_serve_the_same(self):
        """Both stores mounted: every view of every level (full/, scanK/) and
        /.pcrfs/info (but for the store's path) list, stat (mode, size, mtime) and
        read the same."""
        outs = self.build_parts(2, tag="mount")
        store = os.path.join(self.tmp.path, "mmount")
        merge(store, outs)
        seen = []
        mounts = [mu.Mount(s, os.path.join(self.tmp.path, "mnt-" + os.path.basename(s)))
                  for s in (self.whole, store)]
        try:
            for m in mounts:
                m.start()
                views = sorted(v for v in os.listdir(m.mnt) if v == "full" or
                               (v.startswith("scan") and v[4:].isdigit()))
                self.assertEqual(len(views), self.levels + 1, views)  # scan1..L, full
                tree = {}
                for v in views:
                    for dirpath, dirnames, filenames in os.walk(os.path.join(m.mnt, v)):
                        for name in dirnames + filenames:
                            p = os.path.join(dirpath, name)
                            st = os.lstat(p)
                            data = common.read(p) if name in filenames else None
                            tree[os.path.relpath(p, m.mnt)] = (st.st_mode, st.st_size,
                                                               st.st_mtime_ns, data)
                info = json.loads(common.read(os.path.join(m.mnt, ".pcrfs", "info")))
                self.assertEqual(info.pop("store"), m.store)  # the one difference
                tree[".pcrfs/info"] = info
                seen.append(tree)
        finally:
            for m in mounts:
                m.cleanup()
        self.assertGreater(len(seen[0]), 40 * self.levels)
        self.assertEqual(sorted(seen[0]), sorted(seen[1]))
        for k, v in seen[0].items():
            self.assertTrue(v == seen[1][k], k)

    def test_copy_across_file_systems(self):
        shm = "/dev/shm"
        if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(self.tmp.path).st_dev:
            self.skipTest("no second file system to copy from")
        outs = self.build_parts(2)
        far = os.path.join(shm, "pcrfs-plan-%d" % os.getpid())
        try:
            shutil.copytree(outs[1], far)
            store = os.path.join(self.tmp.path, "mcopy")
            merge(store, [outs[0], far])
            self.assert_same_store(self.whole, store)
            name = sorted(os.listdir(os.path.join(far, "records")))[0]
            self.assertEqual(os.stat(os.path.join(store, "records", name)).st_nlink, 1)
        finally:
            shutil.rmtree(far, ignore_errors=True)

    def test_more_parts_than_records(self):
        # more parts than records: the last ones are empty, and still merge
        outs = self.build_parts(20)
        store = os.path.join(self.tmp.path, "m20")
        merge(store, outs)
        self.assert_same_store(self.whole, store)

    def test_quality_and_tokens(self):
        tok = os.path.join(self.tmp.path, "tok")
        rng = np.random.default_rng(9)
        for c in range(2):
            os.makedirs(os.path.join(tok, "c%d" % c))
            for k in range(5):
                np.save(os.path.join(tok, "c%d" % c, "%d.npy" % k),
                        rng.integers(0, 900, size=(6, 6)).astype(np.uint16))
        opts = ["-n", "3", "--quality", "--tokens", tok, "--tok-per-shard", "4"]
        whole = os.path.join(self.tmp.path, "qwhole")
        run([mkpcrfs(), "-q"] + opts + [self.src, whole], env=env_epoch(), check=0)
        qplan = os.path.join(self.tmp.path, "q.plan")
        plan(opts, qplan, self.src)
        outs = [os.path.join(self.tmp.path, "q-%d" % i) for i in (1, 2)]
        for i, out in enumerate(outs, 1):
            part(qplan, i, 2, out, jobs=2)
        self.assertTrue(os.path.isdir(os.path.join(outs[0], "tokens")))
        self.assertFalse(os.path.exists(os.path.join(outs[1], "tokens")))
        store = os.path.join(self.tmp.path, "qm")
        merge(store, outs)
        self.assert_same_store(whole, store, levels=[2])
        dump = "\n".join(common.sqlite_dump(os.path.join(store, "index.db")))
        self.assertIn("ms-ssim-luma", dump)


class Killed(PlanTest):
    """A part killed mid-way, then run again."""

    @classmethod
    def prepare(cls):
        cls.src = os.path.join(cls.tmp.path, "src")
        common.make_dataset(cls.src, 1, 30, 41, size=640)
        cls.plan = os.path.join(cls.tmp.path, "k.plan")
        plan(["-n", "2"], cls.plan, cls.src)

    def test_rerun_after_kill(self):
        out = os.path.join(self.tmp.path, "part")
        p = subprocess.Popen([mkpcrfs(), "-q", "-j", "1", "--plan", self.plan, "--part", "1/1",
                              out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tmpdir = os.path.join(self.tmp.path, ".part.tmp.%d" % p.pid)
        deadline = time.monotonic() + 60
        while (not os.path.exists(os.path.join(tmpdir, "records", "000002.pcr"))
               and p.poll() is None and time.monotonic() < deadline):
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        self.assertEqual(p.returncode, -signal.SIGKILL, "the part ended before it was killed")
        self.assertFalse(os.path.exists(out))
        self.assertTrue(os.path.isdir(tmpdir), "a killed part leaves its temporary directory")
        part(self.plan, 1, 1, out, jobs=2)
        self.assertFalse(os.path.exists(tmpdir), "the rerun removes what the killed one left")
        clean = os.path.join(self.tmp.path, "clean")
        part(self.plan, 1, 1, clean, jobs=1)
        self.assert_same_store(clean, out)


class Stream(PlanTest):
    """A large non-JPEG (named .JPEG) is streamed: bounded memory, bytes intact; files
    that change while read are read again, named, or (in a part) refused."""

    @classmethod
    def prepare(cls):
        cls.src = os.path.join(cls.tmp.path, "src")
        common.make_dataset(cls.src, 1, 3, 51, size=96)
        cls.big = os.path.join(cls.src, "n00000000", "video.JPEG")
        with open(cls.big, "wb") as f:
            f.truncate(256 << 20)  # sparse: costs no disk to make
            f.seek(100 << 20)
            f.write(b"not zero")

    def test_bounded_memory(self):
        store = os.path.join(self.tmp.path, "store")
        # peak RSS of the builder alone: measured by a fresh process around it
        probe = ("import resource, subprocess, sys\n"
                 "subprocess.run(sys.argv[1:], check=True)\n"
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        out = run([common.PYTHON, "-c", probe, mkpcrfs(), "-q", "-j", "2", self.src, store],
                  check=0).stdout
        self.assertLess(int(out), 64 << 10, "peak RSS in KiB, for a 256 MiB file")
        run([pcrinfo(), "--verify", store], check=0)
        h = subprocess.run([pcrinfo(), "--cat", "n00000000/video.JPEG", store],
                           stdout=subprocess.PIPE, check=True).stdout
        self.assertEqual(len(h), 256 << 20)
        self.assertEqual(h[(100 << 20):(100 << 20) + 8], b"not zero")
        self.assertEqual(h.count(0), (256 << 20) - 8)

    def test_file_never_stable(self):
        """A file whose reads never agree with its stat (/proc/version: size 0, ~100
        bytes read) is read three times, then stored as read with a warning; in a
        part it is the "changed since the plan" error."""
        if not os.path.isfile("/proc/version"):
            self.skipTest("no /proc/version")
        src = os.path.join(self.tmp.path, "unstable")
        os.makedirs(os.path.join(src, "a"))
        os.symlink("/proc/version", os.path.join(src, "a", "version.txt"))
        p = run([mkpcrfs(), "-q", src, os.path.join(self.tmp.path, "ustore")], check=0)
        self.assertIn(b"a/version.txt changed while being read, 3 times: stored as last read",
                      p.stderr)
        with open("/proc/version", "rb") as f:
            want = f.read()
        got = run([pcrinfo(), "--cat", "a/version.txt", os.path.join(self.tmp.path, "ustore")],
                  check=0).stdout
        self.assertEqual(got, want)
        uplan = os.path.join(self.tmp.path, "u.plan")
        plan([], uplan, src)
        p = part(uplan, 1, 1, os.path.join(self.tmp.path, "upart"), check=1)
        self.assertIn(b"a/version.txt: changed since the plan (while being read)", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.path, "upart")))

    def test_growing_file_named(self):
        """A streamed file appended to all through the build: stored as read, with a
        warning naming it (it was silently cut before)."""
        src = os.path.join(self.tmp.path, "growing")
        os.makedirs(os.path.join(src, "a"))
        path = os.path.join(src, "a", "log.bin")
        with open(path, "wb") as f:
            f.write(b"\1" * (20 << 20))
        stop = threading.Event()

        def append():
            deadline = time.monotonic() + 60
            with open(path, "ab", buffering=0) as f:
                while not stop.is_set() and time.monotonic() < deadline:
                    f.write(b"more")
                    time.sleep(0.001)

        t = threading.Thread(target=append)
        t.start()
        try:
            p = run([mkpcrfs(), "-q", "-j", "2", src, os.path.join(self.tmp.path, "gstore")],
                    check=0)
        finally:
            stop.set()
            t.join()
        self.assertIn(b"a/log.bin changed while being read: stored as read", p.stderr)
        run([pcrinfo(), "--verify", os.path.join(self.tmp.path, "gstore")], check=0)


# ---- refusals, one clitable row each -------------------------------------------------

def setup_changed(ctx):
    d = os.path.join(ctx["tmp"], "t_changed")
    shutil.copytree(ctx["src"], os.path.join(d, "src"), symlinks=True)
    run([mkpcrfs(), "-q", "--plan", os.path.join(d, "plan"), os.path.join(d, "src")], check=0)
    victim = sorted(common.tree_files(os.path.join(d, "src"))[0].values())[-1]
    with open(victim, "ab") as f:
        f.write(b"\0")  # a JPEG appended to after the plan


def setup_edited(ctx):
    with open(os.path.join(ctx["tmp"], "a.plan"), "rb") as f:
        text = f.read()
    i = text.index(b"\nf ") + 3  # the first file's size
    text = text[:i] + (b"9" if text[i:i + 1] != b"9" else b"8") + text[i + 1:]
    with open(os.path.join(ctx["tmp"], "t_edited.plan"), "wb") as f:
        f.write(text)


def setup_version(ctx):
    with open(os.path.join(ctx["tmp"], "a.plan"), "rb") as f:
        lines = f.read().split(b"\n")
    assert lines[1].startswith(b"made_by mkpcrfs "), lines[1]
    lines[1] = b"made_by mkpcrfs 0.0.0-other"
    with open(os.path.join(ctx["tmp"], "t_version.plan"), "wb") as f:
        f.write(b"\n".join(lines))


def check_merged(ctx, p):
    store = os.path.join(ctx["tmp"], "m_ok")
    assert os.path.isfile(os.path.join(store, "index.db")), "no store"
    assert not [n for n in os.listdir(ctx["tmp"]) if ".tmp." in n], "temporary left"


def part_row(name, spec, msg, extra=()):
    return ct.Case(name, ["{mkpcrfs}"] + list(extra) + ["--plan", "{tmp}/a.plan", "--part", spec,
                                                        "{tmp}/out"], rc=2, msg=msg, lines=2)


class PlanRows(ct.CliTable):
    CLASSES, PER_CLASS, PER_RECORD = 2, 4, 2

    @classmethod
    def make_store(cls):
        super().make_store()
        t = cls.tmp
        run([mkpcrfs(), "-q", "-n", "2", "--plan", os.path.join(t, "a.plan"), cls.src], check=0)
        run([mkpcrfs(), "-q", "-n", "3", "--plan", os.path.join(t, "b.plan"), cls.src], check=0)
        for i in (1, 2, 3):
            part(os.path.join(t, "a.plan"), i, 3, os.path.join(t, "a%d" % i))
        part(os.path.join(t, "b.plan"), 2, 3, os.path.join(t, "b2"))

    CASES = [
        part_row("part 0 of 3", "0/3", r"--part=0/3: want I/N.*<= 1000000"),
        part_row("part 4 of 3", "4/3", r"part 4 of 3 does not exist"),
        part_row("part 1 of 0", "1/0", r"--part"),
        part_row("part without N", "1", r"want I/N"),
        part_row("part trailing junk", "1/3x", r"--part"),
        part_row("part sign", "+1/3", r"--part"),
        part_row("part hex", "0x1/3", r"--part"),
        part_row("part space", " 1/3", r"--part"),
        part_row("part over the bound", "1/1000001", r"--part=1/1000001"),
        part_row("part empty I", "/3", r"--part"),
        part_row("part with -n", "1/3", r"--per-record: a part takes the build options",
                 extra=["-n", "5"]),
        part_row("part with --quality", "1/3", r"--quality: a part takes the build options",
                 extra=["--quality"]),
        ct.Case("part without plan", ["{mkpcrfs}", "--part", "1/3", "{tmp}/out"], rc=2,
                msg=r"--part needs --plan", lines=2),
        ct.Case("plan with STORE", ["{mkpcrfs}", "--plan", "{tmp}/c.plan", "{src}", "{tmp}/st"],
                rc=2, msg=r"takes no STORE", lines=2),
        ct.Case("merge without parts", ["{mkpcrfs}", "--merge", "{tmp}/m"], rc=2,
                msg=r"missing PART", lines=2),
        ct.Case("merge a missing part", ["{mkpcrfs}", "--merge", "{tmp}/m", "{tmp}/a1",
                                         "{tmp}/a3"], rc=1,
                msg=r"missing part 2 of 3 \(plan [0-9a-f]{16}\)"),
        ct.Case("merge a part twice", ["{mkpcrfs}", "--merge", "{tmp}/m", "{tmp}/a1", "{tmp}/a2",
                                       "{tmp}/a2", "{tmp}/a3"], rc=1,
                msg=r"part 2 of 3 given twice: .*a2 and .*a2"),
        ct.Case("merge a foreign part", ["{mkpcrfs}", "--merge", "{tmp}/m", "{tmp}/a1",
                                         "{tmp}/b2", "{tmp}/a3"], rc=1,
                msg=r"b2: part 2 of 3 of another plan"),
        ct.Case("merge a store", ["{mkpcrfs}", "--merge", "{tmp}/m", "{tmp}/a1", "{tmp}/a2",
                                  "{store}"], rc=1, msg=r"a store, not a part"),
        ct.Case("merge not a part", ["{mkpcrfs}", "--merge", "{tmp}/m", "{tmp}/a1", "{src}"],
                rc=1, msg=r"not a part of a planned build"),
        ct.Case("merge onto a store", ["{mkpcrfs}", "--merge", "{store}", "{tmp}/a1",
                                       "{tmp}/a2", "{tmp}/a3"], rc=1, msg=r"already exists"),
        ct.Case("plan exists", ["{mkpcrfs}", "--plan", "{tmp}/a.plan", "{src}"], rc=1,
                msg=r"a\.plan: already exists"),
        ct.Case("plan edited", ["{mkpcrfs}", "--plan", "{tmp}/t_edited.plan", "--part", "1/1",
                                "{tmp}/out"], rc=1, setup=setup_edited,
                msg=r"t_edited\.plan:\d+: the plan's hash does not match"),
        ct.Case("plan of another version", ["{mkpcrfs}", "--plan", "{tmp}/t_version.plan",
                                            "--part", "1/1", "{tmp}/out"], rc=1,
                setup=setup_version, msg=r"planned by mkpcrfs 0\.0\.0-other; this is mkpcrfs"),
        ct.Case("source changed since the plan",
                ["{mkpcrfs}", "--plan", "{tmp}/t_changed/plan", "--part", "1/1", "{tmp}/out"],
                rc=1, setup=setup_changed,
                msg=r"\.JPEG: changed since the plan \(size \d+, modified"),
        ct.Case("merge", ["{mkpcrfs}", "-q", "--merge", "{tmp}/m_ok", "{tmp}/a2", "{tmp}/a3",
                          "{tmp}/a1"], rc=0, check=check_merged, changes=["{tmp}/m_ok*",
                                                                          "{tmp}/a?/records/*"]),
    ]


if __name__ == "__main__":
    unittest.main(verbosity=2)
