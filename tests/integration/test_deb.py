#!/usr/bin/python3
"""The Debian packages (debian/, scripts/deb.sh) in a fresh Debian 12 root (issue 21).

Builds pcrfs, libpcrfs0, libpcrfs-dev and python3-pcrfs with scripts/deb.sh (lintian:
no errors, no warnings), installs them with apt into a Debian 12 root made by
debootstrap, and there: builds a store from a few JPEGs with the installed mkpcrfs,
mounts it with the installed pcrfs and once with "mount -t fuse.pcrfs", compares the
pixels of full/ with the sources, opens it with pcrfs.Store from /usr/bin/python3
(the packaged libpcrfs.so.0; PCRFS_LIB still overrides), finds pcrfs(1) with man -w
and pcrfs.pc with pkg-config; then removes the packages (nothing of theirs left but
configuration) and purges them (nothing left at all).

The root: debootstrap --variant=minbase of bookworm from the mirror this machine's
apt uses (deb.debian.org/debian if none), with what the checks themselves need
(PIL, man-db, pkgconf), kept as a tarball in PCRFS_CI_CACHE (default
/var/cache/pcrfs-ci), keyed by mirror and date and remade when older than
PCRFS_DEB_ROOT_DAYS (default 7) days; a lock file there makes concurrent runs take
turns. apt's downloaded packages are kept there too (the root's
/var/cache/apt/archives), so a second run downloads nothing. Each run unpacks the
tarball into a new directory: the packages' dependencies are installed by apt from
the mirror each time, so a Depends missing in debian/control fails here.

Everything mounted (/proc, /dev, the apt cache, the FUSE mounts) lives in a mount
namespace of this process alone and is also unmounted in tearDown; the root is
deleted only when nothing is mounted under it. Skipped (not passed) only when the
mirror cannot be reached. Measured on 2 shared cores: 1 to 3 minutes with the root
cached (mostly scripts/deb.sh's build), 6 minutes on the first run (debootstrap:
3.5 minutes).
"""
import ctypes
import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clitable as ct  # noqa: E402
import mount_util as mu  # noqa: E402

CACHE = os.environ.get("PCRFS_CI_CACHE", "/var/cache/pcrfs-ci")
MAX_DAYS = float(os.environ.get("PCRFS_DEB_ROOT_DAYS", "7"))
SUITE = "bookworm"
# What the checks run inside the root (not what the packages need: apt must find
# that from debian/control alone).
INCLUDE = ["python3-pil", "man-db", "pkgconf"]
OURS = ["pcrfs", "libpcrfs0", "libpcrfs-dev", "python3-pcrfs"]
CLONE_NEWNS = 0x00020000


def mirror():
    """The Debian mirror this machine's apt uses for bookworm (PCRFS_DEB_MIRROR
    overrides), else deb.debian.org. Only http(s) URLs are taken."""
    if os.environ.get("PCRFS_DEB_MIRROR"):
        return os.environ["PCRFS_DEB_MIRROR"].rstrip("/")
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*"))
    for path in files:
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        # one-line style: deb [opts] URL bookworm main ...
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(https?://\S+)\s+bookworm\s", text,
                             re.M):
            if not m.group(1).rstrip("/").endswith("-security"):
                return m.group(1).rstrip("/")
        # deb822 style: a stanza with URIs and Suites: bookworm
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(https?://\S+)", stanza, re.M)
            suites = re.search(r"^Suites:(.*)$", stanza, re.M)
            if uris and suites and "bookworm" in suites.group(1).split() and \
                    not uris.group(1).rstrip("/").endswith("-security"):
                return uris.group(1).rstrip("/")
    return "http://deb.debian.org/debian"


def reachable(url):
    try:
        with urllib.request.urlopen(url + "/dists/%s/InRelease" % SUITE, timeout=20) as r:
            return r.status == 200 and b"Debian" in r.read(4096)
    except Exception:  # noqa: BLE001  any failure to fetch is "not reachable"
        return False


def run(cmd, timeout=600, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s\n%s" % (" ".join(cmd), p.returncode,
                                                       p.stdout[-4000:], p.stderr[-4000:]))
    return p


def mounts_under(path):
    """Mount points at or under @path in this process's namespace, deepest first."""
    return sorted((m[0] for m in ct.mounts_under(path)), key=len, reverse=True)


class CacheLock:
    """The cache's lock file (fcntl.flock), taken within @timeout seconds."""

    def __init__(self, timeout=3600):
        os.makedirs(CACHE, exist_ok=True)
        self.fd = os.open(os.path.join(CACHE, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise AssertionError("%s/lock held for %d s by another run" %
                                         (CACHE, timeout))
                time.sleep(2)

    def release(self):
        os.close(self.fd)


def cached_root(url):
    """The tarball of a debootstrapped root for @url: made now when there is none
    younger than MAX_DAYS (older ones of the same mirror and package list are
    deleted). Call with the cache lock held."""
    key = "%s-%s" % (SUITE, hashlib.sha256(
        (url + " " + ",".join(INCLUDE)).encode()).hexdigest()[:12])
    now = time.time()
    best = None
    for path in sorted(glob.glob(os.path.join(CACHE, key + "-*.tar"))):
        if now - os.path.getmtime(path) < MAX_DAYS * 86400:
            best = path
        else:
            os.unlink(path)
    if best:
        return best, False
    tar = os.path.join(CACHE, "%s-%s.tar" % (key, time.strftime("%Y%m%d", time.gmtime())))
    work = tempfile.mkdtemp(prefix="debootstrap-", dir=CACHE)
    try:
        root = os.path.join(work, "root")
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(INCLUDE), SUITE,
             root, url], timeout=1800)
        # apt in the root: the suite, its updates and (for deb.debian.org-style
        # mirrors) security updates, as on an installed system
        lines = ["deb %s %s main" % (url, SUITE), "deb %s %s-updates main" % (url, SUITE)]
        if url.endswith("/debian"):
            lines.append("deb %s-security %s-security main" % (url, SUITE))
        with open(os.path.join(root, "etc/apt/sources.list"), "w") as f:
            f.write("\n".join(lines) + "\n")
        run(["tar", "-C", root, "--numeric-owner", "-cf", tar + ".part", "."], timeout=600)
        os.rename(tar + ".part", tar)
    finally:
        run(["rm", "-rf", "--one-file-system", work], check=False)
    return tar, True


class Deb(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.fail("test_deb needs root (debootstrap, chroot, mounts)")
        for tool in ("debootstrap", "dpkg-buildpackage", "lintian", "chroot", "unshare"):
            if not shutil.which(tool):
                self.fail("%s not installed (scripts/deps.sh installs it)" % tool)
        self.url = mirror()
        if not reachable(self.url):
            self.skipTest("Debian mirror %s unreachable: no fresh root to install into"
                          % self.url)
        # Mounts made from here on are this process's alone and vanish with it.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNS) != 0:
            self.fail("unshare(CLONE_NEWNS): %s" % os.strerror(ctypes.get_errno()))
        run(["mount", "--make-rprivate", "/"])
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-deb-", dir="/var/tmp")
        self.root = os.path.join(self.tmp, "root")
        self.lock = None
        self.times = {}

    def tearDown(self):
        for mp in mounts_under(self.root):
            if run(["umount", mp], check=False).returncode != 0:
                run(["umount", "-l", mp], check=False)
        if self.lock:
            self.lock.release()
        left = mounts_under(self.root)
        if left:
            self.fail("still mounted, %s kept: %s" % (self.tmp, left))
        run(["rm", "-rf", "--one-file-system", self.tmp], check=False)

    def chroot(self, script, timeout=600, check=True, env=None):
        e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
             "DEBIAN_FRONTEND": "noninteractive"}
        e.update(env or {})
        return run(["chroot", self.root, "/bin/sh", "-ec", script], timeout=timeout,
                   check=check, env=e)

    def step(self, name, t0):
        self.times[name] = round(time.monotonic() - t0)
        print("test_deb: %s %d s" % (name, self.times[name]), flush=True)

    def build_debs(self):
        out = os.path.join(self.tmp, "debs")
        t0 = time.monotonic()
        p = run(["bash", os.path.join(mu.SRCROOT, "scripts", "deb.sh"), out], timeout=1800,
                check=False)
        self.assertEqual(p.returncode, 0, "scripts/deb.sh failed (lintian included):\n" +
                         p.stdout[-6000:] + p.stderr[-6000:])
        self.step("deb.sh", t0)
        debs = [line for line in p.stdout.splitlines() if line.endswith(".deb")]
        byname = {}
        for d in debs:
            self.assertTrue(os.path.isfile(d), d)
            byname[os.path.basename(d).split("_")[0]] = d
        for pkg in OURS:
            self.assertIn(pkg, byname, "deb.sh printed no %s package: %s" % (pkg, debs))
        return [byname[pkg] for pkg in OURS]

    def unpack_root(self):
        t0 = time.monotonic()
        self.lock = CacheLock()
        tar, made = cached_root(self.url)
        os.makedirs(self.root)
        run(["tar", "-C", self.root, "--numeric-owner", "-xpf", tar], timeout=600)
        self.step("root (debootstrap, new)" if made else "root (cached %s)" %
                  os.path.basename(tar), t0)
        r = self.root
        run(["mount", "-t", "proc", "proc", r + "/proc"])
        run(["mount", "--bind", "/dev", r + "/dev"])  # /dev/fuse for the mounts
        archives = os.path.join(CACHE, "apt-archives")
        os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
        run(["mount", "--bind", archives, r + "/var/cache/apt/archives"])
        shutil.copy("/etc/resolv.conf", r + "/etc/resolv.conf")
        # apt keeps what it downloads (the bind-mounted cache) for the next run
        with open(r + "/etc/apt/apt.conf.d/99keep", "w") as f:
            f.write('Binary::apt::APT::Keep-Downloaded-Packages "true";\n')

    def installed(self):
        out = self.chroot("dpkg-query -W -f='${Package} ${db:Status-Status}\\n'").stdout
        return {ln.split()[0] for ln in out.splitlines() if ln.endswith(" installed")}

    def test_packages_in_fresh_root(self):
        debs = self.build_debs()
        self.unpack_root()

        t0 = time.monotonic()
        before = self.installed()
        for p in OURS:
            self.assertNotIn(p, before)
        os.makedirs(self.root + "/tmp/debs")
        for d in debs:
            shutil.copy(d, self.root + "/tmp/debs/")
        names = " ".join("/tmp/debs/" + os.path.basename(d) for d in debs)
        # apt alone, from the packages' own Depends; not the Recommends (torch)
        # (autoclean: the shared download cache keeps only what the mirror still has)
        self.chroot("apt-get -o DPkg::Lock::Timeout=60 update -q && "
                    "apt-get install -y -q --no-install-recommends " + names +
                    " && apt-get autoclean -q", timeout=1200)
        self.step("apt install", t0)
        after = self.installed()
        for p in OURS:
            self.assertIn(p, after)
        # the declared dependencies, not just what came along: fuse3 (fusermount3) for
        # pcrfs; libpcrfs0 under the module (ctypes) and the -dev package
        self.assertIn("fuse3", after - before)
        sim = self.chroot("apt-get -s remove libpcrfs0").stdout
        for p in ("python3-pcrfs", "libpcrfs-dev"):
            self.assertRegex(sim, r"(?m)^Remv %s " % p, "%s does not depend on libpcrfs0" % p)
        lists = {p: self.chroot("dpkg -L " + p).stdout.split("\n") for p in OURS}
        files = {p: [f for f in lists[p] if f.startswith("/")] for p in OURS}
        conffiles = self.chroot("dpkg-query -W -f='${Conffiles}\\n' " + " ".join(OURS)).stdout
        for p, want in (("pcrfs", "/usr/bin/pcrfs"), ("pcrfs", "/sbin/mount.fuse.pcrfs"),
                        ("pcrfs", "/usr/bin/mkpcrfs"), ("pcrfs", "/usr/bin/pcrinfo"),
                        ("libpcrfs-dev", "/usr/include/pcrfs/pcrfs.h")):
            self.assertIn(want, files[p])

        t0 = time.monotonic()
        self.check_store_and_mounts()
        self.check_python_man_pkgconfig()
        self.step("checks in the root", t0)

        t0 = time.monotonic()
        self.chroot("apt-get remove -y -q " + " ".join(OURS))
        for p in OURS:
            self.assertIn(self.status(p), ("config-files", "not-installed"), p)
        self.assert_left(files, keep=set(re.findall(r"^\s*(/\S+)", conffiles, re.M)))
        self.chroot("dpkg --purge " + " ".join(OURS))
        for p in OURS:
            self.assertEqual(self.status(p), "not-installed", p)
        self.assert_left(files, keep=set())
        self.step("remove and purge", t0)
        print("test_deb: times %s" % self.times, flush=True)

    def status(self, pkg):
        """dpkg's status of @pkg in the root; "not-installed" when dpkg knows it no
        more (dpkg-query then finds nothing)."""
        out = self.chroot("dpkg-query -W -f='${db:Status-Status}' %s 2>/dev/null || true"
                          % pkg).stdout.strip()
        return out or "not-installed"

    def assert_left(self, files, keep):
        """No file of @files is left in the root but those in @keep; a directory of
        theirs is left only when another installed package owns it or it holds other
        files (e.g. /usr/bin)."""
        left = []
        for p, paths in files.items():
            for path in paths:
                full = self.root + path
                if path in keep or not os.path.lexists(full):
                    continue
                # a directory, or a link to one in the root (/sbin -> usr/sbin)
                real, root = os.path.realpath(full), os.path.realpath(self.root)
                if os.path.isdir(full) and (real == root or real.startswith(root + "/")):
                    owned = self.chroot("dpkg -S %s" % path, check=False).returncode == 0
                    if owned or os.listdir(full):
                        continue
                left.append("%s (%s)" % (path, p))
        self.assertEqual(left, [], "left behind after removal")
        # py3compile's byte code (made at install, also by our import) goes with
        # the module
        self.assertFalse(os.path.exists(self.root + "/usr/lib/python3/dist-packages/pcrfs"))

    def check_store_and_mounts(self):
        # A few JPEGs (two classes), by PIL in the root: a gradient and noise, baseline
        # and progressive, odd sizes.
        self.chroot("""python3 - <<'EOF'
import os, random
from PIL import Image
random.seed(7)
for i, (w, h) in enumerate([(64, 48), (97, 33), (128, 128), (31, 77), (200, 150)]):
    d = "/tmp/src/%s" % ("cat" if i % 2 else "dog")
    os.makedirs(d, exist_ok=True)
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 255) // w, (y * 255) // h, random.randrange(256))
                for y in range(h) for x in range(w)])
    im.save("%s/img%d.jpg" % (d, i), quality=90, progressive=bool(i % 2))
EOF
mkpcrfs /tmp/src /tmp/store
mkdir -p /tmp/mnt1 /tmp/mnt2""")
        compare = """python3 - "$1" <<'EOF'
import os, sys
from PIL import Image
n = 0
for dirpath, _, names in os.walk("/tmp/src"):
    for name in names:
        src = os.path.join(dirpath, name)
        rel = os.path.relpath(src, "/tmp/src")
        a, b = Image.open(src), Image.open(os.path.join(sys.argv[1], "full", rel))
        assert a.size == b.size, rel
        assert a.convert("RGB").tobytes() == b.convert("RGB").tobytes(), rel
        n += 1
print("same pixels:", n)
EOF"""
        # the installed pcrfs (detaches once the mount serves), then mount(8) through
        # the packaged /sbin/mount.fuse.pcrfs
        for mnt, how in (("/tmp/mnt1", "pcrfs /tmp/store /tmp/mnt1"),
                         ("/tmp/mnt2", "mount -t fuse.pcrfs /tmp/store /tmp/mnt2")):
            try:
                self.chroot(how, timeout=60)
                self.assertIn(mnt, " ".join(mounts_under(self.root + mnt)))
                out = self.chroot("set -- %s\n%s" % (mnt, compare), timeout=120).stdout
                self.assertIn("same pixels: 5", out)
                print("test_deb: %s: %s" % (how, out.strip()), flush=True)
            finally:
                self.chroot("fusermount3 -u %s || umount -l %s" % (mnt, mnt), check=False)
            self.assertEqual(mounts_under(self.root + mnt), [], "%s still mounted" % mnt)

    def check_python_man_pkgconfig(self):
        py = """python3 - <<'EOF'
import os, pcrfs
s = pcrfs.Store("/tmp/store")
print("module:", pcrfs.__file__)
print("views:", " ".join(sorted(s.listdir(""))))
ds = pcrfs.ImageFolder(s, view="full")
print("samples:", len(ds))
EOF"""
        out = self.chroot(py, timeout=120).stdout
        self.assertIn("module: /usr/lib/python3/dist-packages/pcrfs/__init__.py", out)
        self.assertRegex(out, r"views: .*\bfull\b")
        self.assertIn("samples: 5", out)
        print("test_deb: %s" % out.strip().replace("\n", "; "), flush=True)
        # PCRFS_LIB overrides the packaged library: a wrong path is an error naming it
        bad = self.chroot(py, timeout=120, check=False, env={"PCRFS_LIB": "/nonexistent.so"})
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("/nonexistent.so", bad.stderr)
        man = self.chroot("man -w pcrfs; man -w 5 pcrfs; man -w 3 pcrfs; "
                          "man -w mkpcrfs; man -w mount.fuse.pcrfs").stdout.split()
        self.assertEqual(man, ["/usr/share/man/man1/pcrfs.1.gz",
                               "/usr/share/man/man5/pcrfs.5.gz",
                               "/usr/share/man/man3/pcrfs.3.gz",
                               "/usr/share/man/man1/mkpcrfs.1.gz",
                               # mount.fuse.pcrfs(8) is a link to pcrfs(1)
                               "/usr/share/man/man1/pcrfs.1.gz"])
        self.assertTrue(os.path.islink(self.root + "/usr/share/man/man8/mount.fuse.pcrfs.8.gz"))
        # pcrfs.pc with everything its Requires.private names (libpcrfs-dev's Depends)
        pc = self.chroot("pkg-config --cflags --libs pcrfs && "
                         "pkg-config --static --libs pcrfs").stdout
        self.assertIn("-lpcrfs", pc)
        print("test_deb: man -w: %s; pkg-config: %s" % (" ".join(man), pc.split("\n")[0]),
              flush=True)


if __name__ == "__main__":
    # meson counts exit status 77 as a skip: the unreachable mirror's skip is not a pass
    r = unittest.main(exit=False).result
    if r.failures or r.errors or not r.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if r.skipped and not r.testsRun - len(r.skipped) else 0)
