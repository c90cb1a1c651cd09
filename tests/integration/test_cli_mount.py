"""The daemon's life cycle and paths on the command line (issue 23: Must 2, 3 and 6,
Severe 1, 3, 4 and 5, and the operations cases): each row a pcrfs (or mount helper)
command, its exit status and one-line message, and nothing left behind (no mount, no
daemon, no new file or folder, no changed store byte), checked by clitable.py.

Rows that need what this machine may not offer (a pids cgroup for the thread limit,
/dev/fuse closed to ordinary users, a syslog socket) say why on stderr and are left
out, never passed silently.
"""

import json
import os
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import clitable as ct  # noqa: E402
import mount_util as mu  # noqa: E402
from test_mount import _syslog_answers as have_syslog  # noqa: E402

PCRFS = ["{pcrfs}", "{store}", "{mnt}"]
UNREACHABLE = "http://127.0.0.1:9/store"  # the discard port: refused at once


def skip_note(why):
    print("test_cli_mount: row left out: %s" % why, file=sys.stderr)


# ---- helpers for setup/check ---------------------------------------------------------

def unmount(mnt):
    """Unmount the pcrfs a check found mounted at @mnt and wait for its daemon to exit
    (it removes its caches on the way out)."""
    pid = daemon_of(mnt)
    subprocess.run([mu.FUSERMOUNT, "-u", mnt], stderr=subprocess.DEVNULL, timeout=10)
    assert mu.wait_for(lambda: not any(m[0] == mnt and m[2] == "fuse.pcrfs"
                                       for m in ct.mounts_under(mnt)), 10), \
        "still mounted: " + mnt
    if pid:
        assert mu.wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10), \
            "the daemon did not exit"


def info(mnt):
    with open(os.path.join(mnt, ".pcrfs", "info")) as f:
        return json.load(f)


def mount_first(ctx):
    """A pcrfs mount already at {mnt} (left by setup; the row's check removes it)."""
    mu.run([ctx["pcrfs"], ctx["store"], ctx["mnt"], "-o", "logfile=/dev/null"], check=0,
           timeout=30)


def unmount_first(ctx, proc):
    assert any(m[0] == ctx["mnt"] for m in ct.mounts_under(ctx["mnt"])), \
        "the first mount is gone"
    types = [m[2] for m in ct.mounts_under(ctx["mnt"]) if m[0] == ctx["mnt"]]
    assert len(types) == 1, "stacked mounts at %s: %s" % (ctx["mnt"], types)
    unmount(ctx["mnt"])


def tmpfs_first(ctx):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "pcrfs-cli-test", ctx["mnt"]],
                   check=True, timeout=10)


def tmpfs_off(ctx, proc):
    subprocess.run(["umount", ctx["mnt"]], check=True, timeout=10)


AUTOFS = {}


def autofs_first(ctx):
    """An autofs trigger at {mnt}, as x-systemd.automount leaves one: nobody answers
    its pipe, so anything that looks into it (opendir, statfs) would wait for good."""
    r, w = os.pipe()
    AUTOFS["fds"] = (r, w)
    subprocess.run(["mount", "-t", "autofs", "-o",
                    "fd=%d,pgrp=%d,minproto=5,maxproto=5,direct" % (w, os.getpgrp()),
                    "pcrfs-cli-autofs", ctx["mnt"]], pass_fds=(w,), check=True, timeout=10)


def autofs_check(ctx, proc):
    mnt = ctx["mnt"]
    try:
        types = [m[2] for m in ct.mounts_under(mnt) if m[0] == mnt]
        assert types == ["autofs", "fuse.pcrfs"], "mounts at %s: %s" % (mnt, types)
        assert info(mnt)["levels"] >= 1
    finally:
        if any(m[2] == "fuse.pcrfs" for m in ct.mounts_under(mnt) if m[0] == mnt):
            unmount(mnt)
        autofs_off(ctx)


def autofs_off(ctx):
    subprocess.run(["umount", "-l", ctx["mnt"]], stderr=subprocess.DEVNULL, timeout=10)
    for fd in AUTOFS.pop("fds", ()):
        os.close(fd)


def stale_first(ctx):
    """A FUSE mount whose daemon was killed: every access says ENOTCONN."""
    p = subprocess.Popen([ctx["pcrfs"], ctx["store"], ctx["mnt"], "-f"],
                         stderr=subprocess.DEVNULL)
    assert mu.wait_for(lambda: any(m[0] == ctx["mnt"] for m in ct.mounts_under(ctx["mnt"])),
                       10), "setup mount did not come up"
    time.sleep(0.2)
    p.kill()
    p.wait(10)


def stale_off(ctx, proc):
    subprocess.run([mu.FUSERMOUNT, "-u", ctx["mnt"]], check=True, timeout=10)


def in_file(path, text):
    with open(path) as f:
        assert text in f.read(), "%r not in %s" % (text, path)


def one_file(ctx):
    with open(os.path.join(ctx["mnt"], "keep.txt"), "w") as f:
        f.write("hidden while mounted\n")


def make_dir(rel, mode=None):
    def setup(ctx):
        os.makedirs(os.path.join(ctx["tmp"], rel), exist_ok=True)
        if mode is not None:
            os.chmod(os.path.join(ctx["tmp"], rel), mode)
    return setup


def make_link(rel, target):
    """{tmp}/REL, a symbolic link to {tmp}/TARGET (a file that must stay as it is)."""
    def setup(ctx):
        with open(os.path.join(ctx["tmp"], target), "w") as f:
            f.write("untouched\n")
        os.symlink(os.path.join(ctx["tmp"], target), os.path.join(ctx["tmp"], rel))
    return setup


# ---- the refurb cache of a killed daemon --------------------------------------------

def identity():
    """What pcrfs's marker records besides the PID: boot id, PID namespace, host."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().split()[0]
    ns = os.readlink("/proc/self/ns/pid")
    host = "".join("_" if c <= " " else c for c in socket.gethostname())
    return "%s %s %s" % (boot, ns, host)


DEAD_PID = 4194304 + 7  # above the kernel's largest pid_max: never a live process


def stale_refurb(ctx):
    """In {tmp}/rcache: the directory of a daemon that is gone (removed by the row),
    one of another boot, one without a marker and one of a live PID (all kept)."""
    base = os.path.join(ctx["tmp"], "rcache")
    os.makedirs(base, exist_ok=True)
    for name, pid, who in (("dead", DEAD_PID, identity()),
                           ("otherboot", DEAD_PID, "00000000-0000-0000-0000-000000000000 "
                            + identity().split(" ", 1)[1]),
                           ("alive", os.getpid(), identity()),
                           ("nomarker", None, None)):
        d = os.path.join(base, "pcrfs-refurb." + name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "crop-1"), "wb") as f:
            f.write(b"x" * 4096)
        if pid:
            with open(os.path.join(d, ".pcrfs-owner"), "w") as f:
                f.write("pcrfs-refurb %d %s\n" % (pid, who))


def stale_refurb_check(ctx, proc):
    base = os.path.join(ctx["tmp"], "rcache")
    left = sorted(os.listdir(base))
    assert "pcrfs-refurb.dead" not in left, "the dead daemon's cache is still there"
    for keep in ("otherboot", "alive", "nomarker"):
        assert "pcrfs-refurb." + keep in left, "removed what it cannot prove dead: " + keep
    assert len(left) == 3, "the mount's own cache was not removed at unmount: %s" % left


# ---- checks that look at the live mount (mounted=False: they unmount themselves) ------

def refurb_rel_check(ctx, proc):
    mnt = ctx["mnt"]
    try:
        doc = info(mnt)
        cache = doc["refurb"]["cache"]
        want = os.path.join(ctx["tmp"], "rc")
        assert cache == want, "refurb cache %r, want the absolute %r" % (cache, want)
        assert any(n.startswith("pcrfs-refurb.") for n in os.listdir(want)), \
            "no private directory made in " + want
        assert os.listdir(os.path.join(mnt, "refurb")), "refurb/ is empty"
    finally:
        unmount(mnt)
    assert not os.listdir(os.path.join(ctx["tmp"], "rc")), "cache left after unmount"


def daemon_of(mnt):
    for pid in ct.pcrfs_pids():  # any daemon: setups mount too; @mnt is unique
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if os.fsencode(mnt) in f.read().split(b"\0"):
                    return pid
        except OSError:
            pass
    return None


def nofile_raised_check(ctx, proc):
    mnt = ctx["mnt"]
    try:
        pid = daemon_of(mnt)
        assert pid, "no daemon for " + mnt
        with open("/proc/%d/limits" % pid) as f:
            line = next(ln for ln in f if ln.startswith("Max open files"))
        soft, hard = line.split()[3:5]
        assert soft == hard == "4096", "soft limit not raised to the hard one: " + line
        assert "records held open" not in proc.stderr.decode(), "records not all held"
    finally:
        unmount(mnt)


def nofile_low_check(ctx, proc):
    mnt = ctx["mnt"]
    try:
        assert info(mnt)["levels"] >= 1
        assert os.listdir(os.path.join(mnt, "full")), "full/ is empty"
    finally:
        unmount(mnt)


def helper_type_check(ctx, proc):
    mnt = ctx["mnt"]
    try:
        types = [m[2] for m in ct.mounts_under(mnt) if m[0] == mnt]
        assert types == ["fuse.pcrfs"], "mount type %s, want fuse.pcrfs" % types
        again = subprocess.run([ctx["helper"], ctx["store"], mnt, "-o", "drop_privileges"],
                               env=dict(os.environ, PCRFS_PROGRAM=ctx["pcrfs"]),
                               stderr=subprocess.PIPE, timeout=20)
        assert again.returncode != 0, "a second helper mount was accepted"
        assert b"already a mount point" in again.stderr, again.stderr
        types = [m[2] for m in ct.mounts_under(mnt) if m[0] == mnt]
        assert types == ["fuse.pcrfs"], "stacked: %s" % types
    finally:
        for _ in range(3):
            if any(m[0] == mnt for m in ct.mounts_under(mnt)):
                subprocess.run([mu.FUSERMOUNT, "-u", mnt], stderr=subprocess.DEVNULL,
                               timeout=10)


# ---- an object store (s3rver, as test_s3.py runs it; its data outside {tmp}) --------

S3 = {}


def s3_store(ctx):
    """s3rver with the fixture store at s3://BUCKET/ds; AWS_* set for the row."""
    import tempfile
    import test_s3 as ts3
    if not os.access(ts3.S3RVER, os.X_OK):
        skip_note("no s3rver (%s; tests/s3/setup.sh installs it): the relative cache= row"
                  % ts3.S3RVER)
        raise unittest.SkipTest("no s3rver")
    if "srv" not in S3:
        S3["dir"] = tempfile.mkdtemp(prefix="pcrfs-cli-s3-")
        S3["srv"] = srv = ts3.Server(os.path.join(S3["dir"], "data")).start()
        srv.upload(ctx["store"], "ds")
        S3["url"] = "s3://%s/ds" % ts3.BUCKET
        S3["env"] = {"AWS_ENDPOINT_URL": srv.endpoint, "AWS_ACCESS_KEY_ID": ts3.KEY,
                     "AWS_SECRET_ACCESS_KEY": ts3.KEY, "AWS_REGION": "us-east-1"}
    os.environ.update(S3["env"])  # the harness builds the row's environment after setup


def s3_stop():
    if "srv" in S3:
        S3.pop("srv").stop()
        for k in S3.pop("env"):
            os.environ.pop(k, None)
        subprocess.run(["rm", "-rf", S3.pop("dir")], timeout=30)


def find_key(doc, key):
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for v in doc:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def s3_cache_check(ctx, proc):
    """The relative cache= is the caller's directory, also for the detached daemon:
    record prefixes are cached there (before the fix: a GET per range, no bytes).
    The records are hinted first (pcrfs(1), .pcrfs/prefetch/): a mount caches whole
    prefixes only for a reader it knows goes record by record."""
    mnt = ctx["mnt"]
    try:
        with open(os.path.join(mnt, ".pcrfs", "records")) as fh:
            recs = sorted({line.split()[2] for line in fh
                           if line.strip() and not line.startswith("#")})
        assert recs, "no records listed"
        try:
            os.stat(os.path.join(mnt, ".pcrfs", "prefetch", ",".join(recs)))
        except FileNotFoundError:
            pass  # the hint was taken
        full = os.path.join(mnt, "full")
        n = 0
        for d in sorted(os.listdir(full)):
            for f in sorted(os.listdir(os.path.join(full, d))):
                with open(os.path.join(full, d, f), "rb") as fh:
                    fh.read()
                n += 1
        assert n >= 2, "too few files read"
        with open(os.path.join(mnt, ".pcrfs", "stats")) as fh:
            stats = json.load(fh)
        cached = find_key(stats, "cache_bytes")
        assert cached and cached > 0, "nothing cached in cache=s3cache: %s" % cached
        assert os.listdir(os.path.join(ctx["tmp"], "s3cache")), "no store directory in the cache"
    finally:
        unmount(mnt)


# ---- the thread limit (a pids cgroup: root ignores RLIMIT_NPROC) -----------------------

CGROUP = "/sys/fs/cgroup/pids/pcrfs-cli-mount-%d" % os.getpid()


def make_cgroup(ctx):
    """A pids cgroup of 4 tasks for the row (removed in tearDownClass)."""
    try:
        os.makedirs(CGROUP, exist_ok=True)
        with open(os.path.join(CGROUP, "pids.max"), "w") as f:
            f.write("4\n")
    except OSError as e:
        skip_note("no pids cgroup to limit threads (%s): the refurb thread-limit row" % e)
        raise unittest.SkipTest("no pids cgroup")


# ---- ordinary users ------------------------------------------------------------------

NOBODY = 65534


def devfuse_closed():
    st = os.stat("/dev/fuse")
    return (st.st_mode & 0o006) != 0o006


class MountLife(ct.CliTable):
    # one image per record: 6 records, more than the few descriptors rows leave
    CLASSES, PER_CLASS, PER_RECORD = 2, 3, 1

    @classmethod
    def tearDownClass(cls):
        s3_stop()
        if os.path.isdir(CGROUP):
            try:
                os.rmdir(CGROUP)
            except OSError as e:
                print("test_cli_mount: %s: %s" % (CGROUP, e), file=sys.stderr)
        super().tearDownClass()

    CASES = [
        # Severe 1: the daemon would mkdir in its own mount and hang in D state
        ct.Case("refurb_cache in the mount point", PCRFS + [
                "-o", "refurb=2,refurb_cache={mnt}"], rc=2,
                msg=r"^pcrfs: refurb_cache=\S+: inside the mount point ", timeout=20),
        ct.Case("refurb_cache below the mount point", PCRFS + [
                "-o", "refurb=2,refurb_cache={mnt}/a/b"], rc=2,
                msg=r"refurb_cache=\S+/a/b: inside the mount point"),
        ct.Case("refurb_cache inside the store", PCRFS + [
                "-o", "refurb=2,refurb_cache={store}/records"], rc=2,
                msg=r"refurb_cache=\S+: inside the store "),
        # Severe 3: a relative refurb_cache is the caller's directory, also for the daemon
        ct.Case("refurb_cache relative", PCRFS + ["-o", "refurb=2,refurb_cache=rc"], rc=0,
                lines=None, cwd="{tmp}", setup=make_dir("rc"), check=refurb_rel_check,
                changes=["{tmp}/rc/*"]),
        # Severe 4 / Must 6: the records leave the daemon its descriptors
        ct.Case("nofile 12: mounts, records open on use",
                ["prlimit", "--nofile=12:12"] + PCRFS, rc=0, lines=None,
                msg=r"0 of 6 records held open", check=nofile_low_check),
        ct.Case("nofile soft raised to hard",
                ["prlimit", "--nofile=12:4096"] + PCRFS, rc=0, lines=None,
                check=nofile_raised_check),
        ct.Case("nofile too low: one line", ["prlimit", "--nofile=9:9"] + PCRFS, rc=1,
                msg=r"^pcrfs: too few file descriptors: the open-file limit is 9 .*ulimit -n"),
        # Severe 5 and Must 2: log paths
        ct.Case("logfile is the store's index", PCRFS + ["-o", "logfile={store}/index.db"],
                rc=2, msg=r"^pcrfs: logfile=\S+/index\.db: inside the store "),
        ct.Case("logfile inside the mount point", PCRFS + ["-o", "logfile={mnt}/log"], rc=2,
                msg=r"logfile=\S+/log: inside the mount point"),
        ct.Case("logfile relative through ..", PCRFS + [
                "-o", "logfile=../store.pcr/x.log"], rc=2, cwd="{src}",
                msg=r"logfile=\.\./store\.pcr/x\.log: inside the store"),
        # Must 2: object-store cache paths; nothing made for a mount that fails
        ct.Case("cache inside the mount point", ["{pcrfs}", UNREACHABLE, "{mnt}", "-o",
                "cache={mnt}/c"], rc=2, msg=r"cache=\S+/c: inside the mount point"),
        ct.Case("cache new dirs, unreachable URL", ["{pcrfs}", UNREACHABLE, "{mnt}", "-o",
                "cache={tmp}/NEW/a/b,http_retries=0"], rc=1, msg=r"cannot connect"),
        ct.Case("cache relative, unreachable URL", ["{pcrfs}", UNREACHABLE, "{mnt}", "-o",
                "cache=NEW2/x,http_retries=0"], rc=1, cwd="{tmp}", msg=r"cannot connect"),
        ct.Case("cache relative, s3 store", ["{pcrfs}", "s3://pcrfs-test/ds", "{mnt}", "-o",
                "cache=s3cache,logfile={tmp}/s3.log"], rc=0, lines=0, cwd="{tmp}",
                setup=s3_store, check=s3_cache_check,
                changes=["{tmp}/s3cache", "{tmp}/s3cache/*", "{tmp}/s3.log"]),
        ct.Case("cache existing, unreachable URL", ["{pcrfs}", UNREACHABLE, "{mnt}", "-o",
                "cache={tmp}/have,http_retries=0"], rc=1, setup=make_dir("have"),
                msg=r"cannot connect"),
        # issue 25 Must 5: a cache others can write, a log planted as a link
        ct.Case("cache writable by others", ["{pcrfs}", UNREACHABLE, "{mnt}", "-o",
                "cache={tmp}/shared,http_retries=0"], rc=1, setup=make_dir("shared", 0o1777),
                msg=r"^pcrfs: \S+: cache \S+/shared: writable by group or others \(mode 1777\): "
                    r"refused"),
        ct.Case("logfile a symbolic link", PCRFS + ["-o", "logfile={tmp}/link.log"], rc=1,
                setup=make_link("link.log", "victim"),
                msg=r"^pcrfs: logfile=\S+/link\.log: a symbolic link: refused"),
        # Must 3: the mount point
        ct.Case("mount point mounted by pcrfs", PCRFS, rc=1, setup=mount_first,
                check=unmount_first,
                msg=r"^pcrfs: \S+: already a mount point \(fuse\.pcrfs\): unmount it first, "
                    r"or give -o nonempty"),
        ct.Case("mount point mounted by tmpfs", PCRFS, rc=1, setup=tmpfs_first,
                check=tmpfs_off, msg=r"already a mount point \(tmpfs\)"),
        ct.Case("mount point an autofs trigger", PCRFS + ["-o", "logfile=/dev/null"], rc=0,
                lines=0, setup=autofs_first, check=autofs_check, timeout=20),
        ct.Case("mount point not empty", PCRFS, rc=1, setup=one_file,
                msg=r"^pcrfs: \S+: not empty \(1 entries would be hidden\): give -o nonempty"),
        ct.Case("mount point not empty, -o nonempty", PCRFS + ["-o", "nonempty"], rc=0,
                lines=None, setup=one_file, mounted=True),
        ct.Case("mount point is the store", ["{pcrfs}", "{store}", "{store}"], rc=1,
                msg=r"the mount point is the store "),
        ct.Case("mount point inside the store", ["{pcrfs}", "{store}", "{store}/records"],
                rc=1, msg=r"the mount point is inside the store "),
        ct.Case("stale FUSE mount point", PCRFS, rc=1, setup=stale_first, check=stale_off,
                msg=r"^pcrfs: \S+: a stale FUSE mount \(its daemon has exited\): run "
                    r"fusermount3 -u \S+"),
        # Operations: logfile= and a mount that fails: the error on stderr too
        ct.Case("logfile and a failing mount", PCRFS + [
                "-o", "logfile={tmp}/fail.log,blksize=4096"], rc=1,
                msg=r"mount failed: Invalid argument", changes=["{tmp}/fail.log"],
                check=lambda ctx, p: in_file(ctx["tmp"] + "/fail.log", "mount failed")),
        # Operations: the refurb cache of a killed daemon is removed, nothing else
        ct.Case("refurb cache of a dead daemon", PCRFS + [
                "-o", "refurb=2,refurb_cache={tmp}/rcache,logfile={tmp}/r.log"], rc=0,
                setup=stale_refurb, check=stale_refurb_check, mounted=True,
                changes=["{tmp}/rcache/pcrfs-refurb.dead", "{tmp}/rcache/pcrfs-refurb.dead/*",
                         "{tmp}/r.log"]),
        # Operations: drop_privileges through the helper is typed fuse.pcrfs
        ct.Case("helper drop_privileges", ["{helper}", "{store}", "{mnt}", "-o",
                "drop_privileges,logfile=/dev/null"], rc=0, lines=None,
                env={"PCRFS_PROGRAM": "{pcrfs}"}, check=helper_type_check),
    ]
    if have_syslog():
        CASES.append(ct.Case("detached, syslog there: no warning", PCRFS, rc=0, lines=0,
                             mounted=True))
    else:
        CASES.append(ct.Case("detached, no syslog: one warning", PCRFS, rc=0, lines=1,
                             msg=r"^pcrfs: warning: no syslog \(/dev/log\).*-o logfile=PATH",
                             mounted=True))
    if os.getuid() == 0 and os.path.isdir(os.path.dirname(CGROUP)):
        # Must 2 / operations: the refurb workers fail after the fork: exit 1, not 0
        CASES.append(ct.Case(
            "refurb threads over the process limit",
            ["sh", "-c", 'test -d "$1" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
             "sh", CGROUP, "{pcrfs}", "{store}", "{mnt}", "-o",
             "refurb=2,refurb_threads=8,logfile=/dev/null"], rc=1, setup=make_cgroup,
            msg=r"^pcrfs: refurb: cannot start 8 worker threads: .*ulimit -u"))
    else:
        skip_note("not root or no pids cgroup (v1) at %s: the refurb thread-limit row"
                  % os.path.dirname(CGROUP))
    if devfuse_closed():
        CASES.append(ct.Case("/dev/fuse closed to the user", PCRFS, rc=1, user=NOBODY,
                             group=NOBODY, msg=r"^pcrfs: /dev/fuse: Permission denied: "))
        # auto_unmount for an ordinary user without allow_other/allow_root: warned
        CASES.append(ct.Case("auto_unmount, ordinary user", PCRFS + ["-o", "auto_unmount"],
                             rc=1, lines=2, user=NOBODY, group=NOBODY,
                             msg=r"(?m)^pcrfs: warning: auto_unmount: for an ordinary user it "
                                 r"takes effect only with allow_other or allow_root"))
        CASES.append(ct.Case("auto_unmount with allow_other, ordinary user", PCRFS + [
                             "-o", "auto_unmount,allow_other"], rc=1, user=NOBODY,
                             group=NOBODY, msg=r"^pcrfs: /dev/fuse: Permission denied"))
    else:
        skip_note("/dev/fuse is open to every user here: the permission and auto_unmount rows")


if __name__ == "__main__":
    ct.main()
