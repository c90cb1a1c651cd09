"""Helpers for the pcrfs mount tests and the benchmarks (bench/*.py): stores, and
Mount, the one mount/wait/unmount helper.

Programs under test come from the environment (PCRFS, MKPCRFS, PCRINFO,
PCRFS_MOUNT_HELPER, set by tests/integration/meson.build); when a variable is unset,
the program's place in the build directory is used: PCRFS_BUILD_DIR, else the build
directory that holds $PCRFS, else SRCROOT/build. A program that is missing is a test
failure, never a skip.
"""

import errno
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
FUSERMOUNT = "fusermount3"

_RELPATH = {
    "PCRFS": ("src", "fuse", "pcrfs"),
    "MKPCRFS": ("src", "tools", "mkpcrfs"),
    "PCRINFO": ("src", "tools", "pcrinfo"),
    "PCRFS_MOUNT_HELPER": ("mount-helpers", "mount.fuse.pcrfs"),
}


# The sanitizer stage of scripts/test.sh sets ASAN_OPTIONS: a daemon built with
# AddressSanitizer keeps freed memory in quarantine (256 MiB by default) and maps
# shadow memory, so its RSS says nothing about what the code keeps. Tests that bound a
# daemon's memory check it in the plain stages and say so here.
SANITIZED = "ASAN_OPTIONS" in os.environ


def build_dir():
    """PCRFS_BUILD_DIR, else the build directory PCRFS lives in, else SRCROOT/build."""
    if os.environ.get("PCRFS_BUILD_DIR"):
        return os.environ["PCRFS_BUILD_DIR"]
    if os.environ.get("PCRFS"):
        return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
            os.environ["PCRFS"]))))
    return os.path.join(SRCROOT, "build")


def program(var):
    """Path of the program named by @var (PCRFS, MKPCRFS, PCRINFO, PCRFS_MOUNT_HELPER):
    the environment variable, else its place in the build directory. Raises an
    AssertionError (a failure, not a skip) if it is not an executable file."""
    path = os.environ.get(var)
    if not path:
        path = os.path.join(build_dir(), *_RELPATH[var])
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise AssertionError("%s: %s is not an executable file (not built? set %s)" %
                             (var, path, var))
    return os.path.abspath(path)


def run(argv, check=None, timeout=300, **kw):
    """Run @argv and capture its output (bytes). With @check, assert the exit status."""
    kw.setdefault("stdin", subprocess.DEVNULL)  # never a prompt (rm on a 0444 file)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, **kw)
    if check is not None and p.returncode != check:
        raise AssertionError("%s exited %d, expected %d\n--- stderr:\n%s" % (
            " ".join(os.fsdecode(a) for a in argv), p.returncode, check,
            p.stderr.decode(errors="replace")[-4000:]))
    return p


def build_store(src, store, per_record=None, jobs=2):
    """mkpcrfs SRC STORE; returns its stderr (warnings for verbatim files)."""
    argv = [program("MKPCRFS"), "-q", "-j", str(jobs)]
    if per_record:
        argv += ["-n", str(per_record)]
    return run(argv + [src, store], check=0).stderr


def oracle(store, rel, level):
    """The bytes the store serves for @rel (bytes path) at @level ("full" or 1..L),
    read by pcrinfo through the library, without FUSE."""
    return run([program("PCRINFO"), "--cat", rel, "--level", str(level), store],
               check=0).stdout


def store_levels(store):
    import json
    return json.loads(run([program("PCRINFO"), "--json", store], check=0).stdout)["levels"]


def is_dead_mount(path):
    """A FUSE mount whose daemon is gone answers ENOTCONN. statfs always reaches the
    daemon (stat would not: the root's attributes are cached for a day)."""
    try:
        os.statvfs(path)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


DROP_CACHES = "sync; echo 3 > /proc/sys/vm/drop_caches"  # as the benches' tables give it


def drop_caches():
    """Write dirty pages back and drop the page cache, dentries and inodes (root):
    what the benches call cold (DROP_CACHES)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def wait_for(cond, timeout=10.0, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Mount:
    """pcrfs STORE MNT -f [OPTIONS...] in the background, as libfuse's own tests do:
    the one mount/wait/unmount helper of the tests and the benchmarks (bench/*.py).

    start() waits until MNT is a mount point (and fails if the daemon exits first);
    unmount() runs fusermount3 -u and returns the daemon's exit status. stderr goes
    to a file so a chatty daemon can never block on a full pipe.

    @pcrfs: the daemon to run (default: program("PCRFS"); bench/ab.py compares two);
    @argv: the whole command instead of [pcrfs, STORE, MNT, OPTIONS...] (another FUSE
    file system, e.g. squashfuse_ll, measured the same way); @env: its environment;
    @errpath: where its stdout and stderr go (appended; default MNT.stderr, truncated);
    @session: False starts it in the caller's session (the default is a session of its
    own, as pcrfs gives itself when it detaches; bench/s3.py measures both).
    """

    def __init__(self, store, mnt, *options, foreground=True, pcrfs=None, argv=None,
                 env=None, errpath=None, session=True):
        self.store = store
        self.session = session
        self.mnt = mnt
        self.options = list(options)
        self.foreground = foreground
        self.pcrfs = pcrfs
        self.argv = argv
        self.env = env
        self.proc = None
        self.errfile = None
        self.append = errpath is not None
        self.errpath = errpath or mnt.rstrip("/") + ".stderr"
        self.seconds = None  # from exec to a served mount point (start())

    def command(self):
        """The command start() runs."""
        if self.argv is not None:
            argv = list(self.argv)
        else:
            argv = [self.pcrfs or program("PCRFS"), self.store, self.mnt] + self.options
        return argv + (["-f"] if self.foreground else [])

    def start(self, timeout=15.0, step=0.02):
        os.makedirs(self.mnt, exist_ok=True)
        argv = self.command()
        self.errfile = open(self.errpath, "ab" if self.append else "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=self.errfile if self.append else
                                     subprocess.DEVNULL, stderr=self.errfile, env=self.env,
                                     start_new_session=self.session)
        ok = wait_for(lambda: os.path.ismount(self.mnt) or self.proc.poll() is not None,
                      timeout, step)
        self.seconds = time.monotonic() - t0
        if not ok or not os.path.ismount(self.mnt):
            rc = self.proc.poll()
            if rc is None:
                self.proc.kill()
                self.proc.wait()
            self.errfile.close()
            raise AssertionError("%s did not mount %s (exit %s): %s" % (
                os.path.basename(argv[0]), self.mnt, rc, self.stderr()[-2000:]))
        return self

    def stderr(self):
        try:
            with open(self.errpath, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def unmount(self, timeout=15.0):
        """fusermount3 -u; returns the daemon's exit status (None if it did not end)."""
        if os.path.ismount(self.mnt) or is_dead_mount(self.mnt):
            run([FUSERMOUNT, "-u", self.mnt], check=0)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.errfile.close()
        return rc

    def stop(self, timeout=60.0):
        """unmount(), and should the daemon not end by then, SIGTERM, then SIGKILL, and
        a lazy unmount: nothing stays behind. Returns unmount()'s status."""
        rc = self.unmount(timeout)
        if rc is None:
            self.cleanup()
        return rc

    def signal(self, sig, timeout=15.0):
        """Send @sig to the daemon; return its exit status."""
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.errfile.close()
        return rc

    def cleanup(self):
        """Leave nothing behind whatever happened (for tearDown paths)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if os.path.ismount(self.mnt) or is_dead_mount(self.mnt):
            subprocess.run([FUSERMOUNT, "-u", "-z", self.mnt], stderr=subprocess.DEVNULL)
        if self.errfile is not None:
            self.errfile.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()


def record_of_id(store):
    """{file id: record} from STORE/index.db: the oracle a mount's records are
    checked against."""
    import sqlite3
    db = sqlite3.connect("file:%s/index.db?immutable=1" % store, uri=True)
    try:
        return dict(db.execute("SELECT id, record FROM files"))
    finally:
        db.close()
