"""Table-driven command-line tests: each row a command, the exit status it must give,
a pattern for its one-line message, and the promise that it left nothing behind.

    import clitable as ct

    class Options(ct.CliTable):
        CASES = [
            ct.Case("read_ahead_kb real", ["{pcrfs}", "{store}", "{mnt}", "-o",
                    "read_ahead_kb=1.5"], rc=2, msg=r"read_ahead_kb=1\\.5"),
            ct.Case("plain mount", ["{pcrfs}", "{store}", "{mnt}"], rc=0, mounted=True),
        ]

    if __name__ == "__main__":
        ct.main()

Placeholders in argv, cwd and `changes` (plain text replacement, so regular
expressions and braces elsewhere are left alone):
    {pcrfs} {mkpcrfs} {pcrinfo} {helper}   the programs under test (mount_util.program)
    {python}                                /usr/bin/python3
    {tmp}    the fixture's directory        {src}    its source tree (JPEGs)
    {store}  its store (absolute)           {mnt}    a new empty directory per row

After every row the harness asserts, whatever the row says:
  - the exit status is `rc`; stderr matches `msg` (re.search); stderr has exactly
    `lines` non-empty lines (default: 1 when rc != 0, not checked when rc == 0;
    None: not checked);
  - no mount is left under {tmp} (read from /proc/self/mountinfo, which never asks a
    FUSE daemon anything, so a hung daemon cannot hang the check) unless `mounted`,
    and then the mount is up at {mnt}, serves /.pcrfs/info, and goes away with
    fusermount3 -u together with its daemon;
  - no pcrfs process that the row started is left (rows carry PCRFS_CLITABLE in
    their environment, so daemons of tests running beside it are not counted);
  - the tree under {tmp} is as it was (paths, types, sizes, mtimes), but for the paths
    matching `changes` (fnmatch patterns); the store's files are byte-identical.
Leftovers are cleaned up after a failing row (aborting a hung FUSE connection
through /sys/fs/fuse/connections, lazy unmount, SIGKILL), so one bad row cannot take
the rows after it down with it.
"""

import fnmatch
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mount_util as mu  # noqa: E402
from test_mount import make_source  # noqa: E402


class Case:
    """One row. See the module docstring for the fields."""

    def __init__(self, name, argv, rc, msg=None, lines="default", setup=None, check=None,
                 mounted=False, changes=(), env=None, cwd=None, stdin=b"", timeout=20,
                 user=None, group=None):
        self.name = name
        self.argv = list(argv)
        self.rc = rc
        self.msg = msg
        self.lines = lines if lines != "default" else (1 if rc != 0 else None)
        self.setup = setup
        self.check = check
        self.mounted = mounted
        self.changes = list(changes)
        self.env = env or {}
        self.cwd = cwd
        self.stdin = stdin
        self.timeout = timeout
        self.user = user
        self.group = group

    def __repr__(self):
        return "Case(%r)" % self.name


def expand(s, ctx):
    """@s with every {name} of @ctx replaced (bytes or str)."""
    if isinstance(s, bytes):
        for k, v in ctx.items():
            if isinstance(v, str):
                s = s.replace(b"{" + k.encode() + b"}", os.fsencode(v))
        return s
    for k, v in ctx.items():
        if isinstance(v, str):
            s = s.replace("{" + k + "}", v)
    return s


# ---- what a row may leave behind ----------------------------------------------------

def mounts_under(root):
    """[(mount point, 'major:minor', fstype)] of the mounts at or below @root."""
    root = os.path.realpath(root)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            mp = parts[4].encode().decode("unicode_escape")
            if mp == root or mp.startswith(root + "/"):
                out.append((mp, parts[2], parts[sep + 1]))
    return out


MARK = "PCRFS_CLITABLE"


def pcrfs_pids(tag=None):
    """PIDs of the processes running the pcrfs under test; with @tag, only those a
    row of the table tagged @tag started: the harness puts PCRFS_CLITABLE=@tag in
    every row's environment, which a daemon keeps when it detaches. Other tests'
    daemons, run in parallel with the same binary, are never counted (nor killed)."""
    exe = os.path.realpath(mu.program("PCRFS"))
    want = ("%s=%s" % (MARK, tag)).encode() + b"\0"
    pids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % d) != exe:
                continue
            if tag is None:
                pids.add(int(d))
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                if want in f.read():
                    pids.add(int(d))
        except OSError:
            pass
    return pids


def tree(root, hash_under=None):
    """{relative path: (type, size, mtime_ns[, sha256])} of everything under @root,
    not descending into mount points; files under @hash_under carry their hash."""
    out = {}
    skip = {m[0] for m in mounts_under(root)}
    for dp, dns, fns in os.walk(root):
        for d in dns:  # a mount point is a directory; lstat would ask its daemon
            if os.path.join(dp, d) in skip:
                out[os.path.relpath(os.path.join(dp, d), root)] = (stat.S_IFDIR, 0, 0)
        dns[:] = [d for d in dns if os.path.join(dp, d) not in skip]
        for name in dns + fns:
            p = os.path.join(dp, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            rec = (stat.S_IFMT(st.st_mode), st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                   st.st_mtime_ns if not stat.S_ISDIR(st.st_mode) else 0)
            if hash_under and stat.S_ISREG(st.st_mode) and p.startswith(hash_under + "/"):
                with open(p, "rb") as f:
                    rec += (hashlib.sha256(f.read()).hexdigest(),)
            out[os.path.relpath(p, root)] = rec
    return out


def _mnt_id(fd):
    """The mount ID of descriptor @fd (/proc/self/fdinfo), or None."""
    with open("/proc/self/fdinfo/%d" % fd) as f:
        for line in f:
            if line.startswith("mnt_id:"):
                return line.split()[1]
    return None


def abort_and_unmount(mp, devno):
    """Take down a mount whose daemon may hang: abort its FUSE connection, then lazy
    unmount (umount -l asks the daemon nothing).

    The connection is named by its device's minor number, which the kernel hands to
    the next new mount as soon as this one is gone: a row's daemon that exits between
    reading /proc/self/mountinfo and the abort would have the abort hit another test's
    new mount (the likely cause of a daemon of test_readahead, run alongside, ending
    once with "reading device: Software caused connection abort" after a clean
    unmount; not reproduced in 900 runs alone). So the mount is held by an O_PATH
    descriptor (which asks the daemon nothing and keeps the device number taken) and
    aborted only if that mount is still the one with @devno."""
    try:
        fd = os.open(mp, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        mnt_id = _mnt_id(fd)
        same = any(line.split()[0] == mnt_id and line.split()[2] == devno
                   for line in open("/proc/self/mountinfo"))
        abort = "/sys/fs/fuse/connections/%s/abort" % devno.split(":")[1]
        if same and os.path.exists(abort):
            try:
                with open(abort, "w") as f:
                    f.write("1")
            except OSError:
                pass
    finally:
        os.close(fd)
    subprocess.run(["umount", "-l", mp], stderr=subprocess.DEVNULL, timeout=10)


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def gone(tag, pids, timeout):
    return mu.wait_for(lambda: not (pcrfs_pids(tag) & pids), timeout)


# ---- the fixture and the runner -----------------------------------------------------

class CliTable(unittest.TestCase):
    """Subclass with CASES (a list of Case); one test runs every row as a subTest.
    The fixture: a small source tree of JPEGs and its store (3 records), built once
    per class. Override make_store() for another fixture."""

    CASES = []
    CLASSES, PER_CLASS, PER_RECORD = 2, 3, 2

    @classmethod
    def setUpClass(cls):
        cls.tmp = os.path.realpath(tempfile.mkdtemp(prefix="pcrfs-cli-",
                                                    dir=os.environ.get("PCRFS_TEST_TMPDIR")))
        os.chmod(cls.tmp, 0o755)  # rows that run as another user must reach it
        cls.src = os.path.join(cls.tmp, "src")
        cls.store = os.path.join(cls.tmp, "store.pcr")
        try:
            cls.make_store()
        except Exception:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def make_store(cls):
        make_source(cls.src, cls.CLASSES, cls.PER_CLASS, seed=23, awkward=False)
        mu.build_store(cls.src, cls.store, per_record=cls.PER_RECORD)

    @classmethod
    def tearDownClass(cls):
        for mp, devno, _ in sorted(mounts_under(cls.tmp), reverse=True):
            abort_and_unmount(mp, devno)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def context(self, i):
        mnt = os.path.join(self.tmp, "mnt%d" % i)
        return {
            "pcrfs": mu.program("PCRFS"), "mkpcrfs": mu.program("MKPCRFS"),
            "pcrinfo": mu.program("PCRINFO"), "helper": mu.program("PCRFS_MOUNT_HELPER"),
            "python": mu.PYTHON, "tmp": self.tmp, "src": self.src, "store": self.store,
            "mnt": mnt,
        }

    def test_rows(self):
        self.assertTrue(self.CASES, "no rows")
        names = [c.name for c in self.CASES]
        self.assertEqual(len(names), len(set(names)), "row names must be unique")
        start = time.monotonic()
        for i, case in enumerate(self.CASES):
            with self.subTest(case.name):
                self.run_row(i, case)
        sys.stderr.write("%s: %d rows run in %.1f s\n" % (type(self).__name__, len(self.CASES),
                                                          time.monotonic() - start))

    def run_row(self, i, case):
        ctx = self.context(i)
        ctx["case"] = case
        os.makedirs(ctx["mnt"], exist_ok=True)
        if case.setup:
            case.setup(ctx)
        before = tree(self.tmp, hash_under=self.store)
        mounts_before = {m[0] for m in mounts_under(self.tmp)}
        pids_before = pcrfs_pids(self.tmp)
        env = dict(os.environ)
        env[MARK] = self.tmp
        for k, v in case.env.items():
            v = expand(v, ctx) if v is not None else None
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        argv = [expand(a, ctx) for a in case.argv]
        shown = " ".join(os.fsdecode(a) for a in argv)
        kw = {k: v for k, v in (("user", case.user), ("group", case.group)) if v is not None}
        timed_out = False
        try:
            p = subprocess.run(argv, input=case.stdin, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, timeout=case.timeout,
                               cwd=expand(case.cwd, ctx) if case.cwd else None,
                               start_new_session=True, **kw)
            rc, err = p.returncode, p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            timed_out, rc, p = True, None, None
            err = (e.stderr or b"").decode(errors="replace")
        problems = []
        try:
            if timed_out:
                problems.append("did not finish within %d s" % case.timeout)
            elif rc != case.rc:
                problems.append("exit status %s, want %d" % (rc, case.rc))
            if case.msg and not re.search(case.msg, err):
                problems.append("stderr does not match /%s/" % case.msg)
            nlines = len([ln for ln in err.splitlines() if ln.strip()])
            if case.lines is not None and not timed_out and nlines != case.lines:
                problems.append("%d lines on stderr, want %d" % (nlines, case.lines))
            if case.mounted and not timed_out:
                problems += self.check_mounted(ctx["mnt"], pids_before)
            if case.check and not problems:
                try:
                    case.check(ctx, p)
                except AssertionError as e:
                    problems.append("check: %s" % e)
            left = [m for m in mounts_under(self.tmp) if m[0] not in mounts_before]
            if left:
                problems.append("left mounted: %s" % ", ".join(m[0] for m in left))
            new_pids = pcrfs_pids(self.tmp) - pids_before
            if new_pids and not gone(self.tmp, new_pids, 5):
                problems.append("pcrfs processes left: %s" % sorted(new_pids))
            after = tree(self.tmp, hash_under=self.store)
            allowed = [expand(c, ctx) for c in case.changes]
            problems += self.tree_diff(before, after, allowed)
        finally:
            self.clean_up(mounts_before, pids_before)
        if problems:
            self.fail("%s\n  $ %s\n  %s\n--- stderr:\n%s" % (
                case.name, shown, "\n  ".join(problems), err[-3000:]))
        if os.path.isdir(ctx["mnt"]) and not os.listdir(ctx["mnt"]):
            os.rmdir(ctx["mnt"])

    def check_mounted(self, mnt, pids_before):
        """The row's mount is up and serving; then unmount it and see its daemon go."""
        if not any(m[0] == mnt for m in mounts_under(self.tmp)):
            return ["nothing mounted at %s" % mnt]
        probe = subprocess.run(["cat", os.path.join(mnt, ".pcrfs", "info")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
        problems = []
        if probe.returncode != 0 or b'"levels"' not in probe.stdout:
            problems.append("the mount does not serve /.pcrfs/info: %s" %
                            probe.stderr.decode(errors="replace").strip())
        u = subprocess.run([mu.FUSERMOUNT, "-u", mnt], stderr=subprocess.PIPE, timeout=10)
        if u.returncode != 0:
            problems.append("fusermount3 -u: %s" % u.stderr.decode(errors="replace").strip())
        new = pcrfs_pids(self.tmp) - pids_before
        if new and not gone(self.tmp, new, 10):
            problems.append("the daemon did not exit after fusermount3 -u")
        return problems

    def tree_diff(self, before, after, allowed):
        """What changed under {tmp} that no pattern of @allowed (absolute) covers."""
        def ok(path):
            return any(fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat.rstrip("/") + "/*")
                       for pat in allowed)

        problems = []
        for rel in sorted(set(before) | set(after)):
            b, a = before.get(rel), after.get(rel)
            if b == a or ok(os.path.join(self.tmp, rel)):
                continue
            problems.append("%s: %s" % ("new" if b is None else "removed" if a is None
                                        else "changed", rel))
        return problems[:20]

    def clean_up(self, mounts_before, pids_before):
        for mp, devno, _ in sorted(mounts_under(self.tmp), reverse=True):
            if mp not in mounts_before:
                abort_and_unmount(mp, devno)
        new = pcrfs_pids(self.tmp) - pids_before
        if new and not gone(self.tmp, new, 3):
            kill_all(new)
            gone(self.tmp, new, 5)


def main():
    unittest.main(verbosity=2)
