#!/usr/bin/python3
"""Where "meson install" puts the mount helper, and what it says (issue 23).

mount(8) runs the helper of "mount -t fuse.pcrfs" only from /sbin, /sbin/fs.d or
/sbin/fs; elsewhere it falls back to fuse3's mount.fuse, which fails with
"/bin/sh: 1: pcrfs: not found". So:
  - test_destdir_install: "meson install --destdir TMP" of this build puts the helper in
    the directory its options say (mount_helper_dir, else /sbin for the prefixes /,
    /usr, /usr/local, else PREFIX/sbin), executable, running PREFIX/BINDIR/pcrfs, which
    the same install put there; the install prints the link note exactly when that
    directory is not one mount(8) searches;
  - test_note_for_user_prefix: mount-helpers/install-note.sh (the install script)
    prints the "ln -sf" line for a helper under /opt/..., naming the pcrfs it runs,
    and nothing for /sbin or a directory that resolves to /sbin (merged /usr).
And every file "meson install" installs honours the prefix and DESTDIR, as the
Debian packages (debian/) need (issue 21):
  - test_destdir_every_file: "DESTDIR=TMP meson install" of this build puts every
    file meson lists for installation (meson introspect --installed), the Python
    module included, under TMP and nothing else there;
  - test_prefix_every_file: a build configured with --prefix /opt/... (meson setup
    only: where files go is known before building) installs every file under that
    prefix, the module in PREFIX/lib/python3.X/dist-packages/pcrfs.
Fails (not skips) when meson is missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mount_util as mu  # noqa: E402

NOTE = os.path.join(mu.SRCROOT, "mount-helpers", "install-note.sh")
SEARCHED = ("/sbin", "/sbin/fs.d", "/sbin/fs")


def searched(d):
    """Whether mount(8) runs helpers from @d on this machine."""
    return any(d == s or (os.path.isdir(s) and os.path.isdir(d) and
                          os.path.realpath(s) == os.path.realpath(d)) for s in SEARCHED)


class Install(unittest.TestCase):
    def options(self):
        out = subprocess.run(["meson", "introspect", "--buildoptions", mu.build_dir()],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return {o["name"]: o["value"] for o in json.loads(out)}

    def test_destdir_install(self):
        o = self.options()
        prefix = o["prefix"]
        bindir = os.path.join(prefix, o["bindir"])
        want = o.get("mount_helper_dir") or (
            "/sbin" if prefix in ("/", "/usr", "/usr/local")
            else os.path.join(prefix, o["sbindir"]))
        dest = tempfile.mkdtemp(prefix="pcrfs-install-")
        try:
            p = subprocess.run(["meson", "install", "-C", mu.build_dir(), "--no-rebuild",
                                "--destdir", dest], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            helper = dest + os.path.join(want, "mount.fuse.pcrfs")
            self.assertTrue(os.path.isfile(helper), "no helper at %s" % helper)
            self.assertTrue(os.access(helper, os.X_OK))
            with open(helper) as f:
                text = f.read()
            self.assertIn("prog=${PCRFS_PROGRAM:-%s/pcrfs}" % bindir, text)
            self.assertNotIn("@BINDIR@", text)
            self.assertTrue(os.access(dest + os.path.join(bindir, "pcrfs"), os.X_OK))
            note = "ln -sf %s/mount.fuse.pcrfs /sbin/mount.fuse.pcrfs" % want
            if searched(want):
                self.assertNotIn("ln -sf", p.stdout)
            else:
                self.assertIn(note, p.stdout)
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def installed(self, build):
        """{built or source file: where meson install puts it (no DESTDIR)}."""
        out = subprocess.run(["meson", "introspect", "--installed", build],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return json.loads(out)

    def test_destdir_every_file(self):
        want = set(self.installed(mu.build_dir()).values())
        self.assertTrue(any(p.endswith("/pcrfs/store.py") for p in want), want)
        dest = tempfile.mkdtemp(prefix="pcrfs-install-")
        try:
            p = subprocess.run(["meson", "install", "-C", mu.build_dir(), "--no-rebuild"],
                               capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, DESTDIR=dest))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            got = set()
            for d, _, names in os.walk(dest):
                got.update(os.path.join(d, n)[len(dest):] for n in names)
            # the same files, and only those: none went outside DESTDIR (a listed file
            # missing here) and none unlisted appeared (e.g. byte code)
            self.assertEqual(sorted(want - got), [], "listed but not under DESTDIR")
            # (the library's links, libpcrfs.so.0 and libpcrfs.so, are not listed:
            # links to a listed file beside them)
            extra = [f for f in got - want if not (
                os.path.islink(dest + f) and
                os.path.join(os.path.dirname(f), os.readlink(dest + f)) in want)]
            self.assertEqual(sorted(extra), [], "under DESTDIR but not listed")
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def test_prefix_every_file(self):
        prefix = "/opt/pcrfs-prefix-test"
        build = tempfile.mkdtemp(prefix="pcrfs-prefix-")
        try:
            p = subprocess.run(["meson", "setup", build, mu.SRCROOT, "--prefix", prefix,
                                "-Dtests=false"], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            where = list(self.installed(build).values())
            self.assertTrue(where)
            outside = [w for w in where if not w.startswith(prefix + "/")]
            self.assertEqual(outside, [], "installed outside --prefix " + prefix)
            pyver = "%d.%d" % sys.version_info[:2]
            for f in ("__init__.py", "store.py", "autotune.py"):
                self.assertIn("%s/lib/python%s/dist-packages/pcrfs/%s" % (prefix, pyver, f),
                              where)
            for f in ("bin/pcrfs", "bin/mkpcrfs", "sbin/mount.fuse.pcrfs",
                      "include/pcrfs/pcrfs.h", "share/man/man1/pcrfs.1"):
                self.assertIn("%s/%s" % (prefix, f), where)
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def note(self, d, bindir="/opt/pcrfs/bin"):
        p = subprocess.run(["/bin/sh", NOTE, d, bindir], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stderr, "")
        return p.stdout

    def test_note_for_user_prefix(self):
        out = self.note("/opt/pcrfs/sbin")
        self.assertIn("ln -sf /opt/pcrfs/sbin/mount.fuse.pcrfs /sbin/mount.fuse.pcrfs", out)
        self.assertIn("/opt/pcrfs/bin/pcrfs", out)
        self.assertIn("-Dmount_helper_dir=/sbin", out)
        self.assertEqual(self.note("/sbin"), "")
        self.assertEqual(self.note("/sbin/fs.d"), "")
        real = os.path.realpath("/sbin")
        if real != "/sbin":  # merged /usr: /usr/sbin is /sbin
            self.assertEqual(self.note(real), "")


if __name__ == "__main__":
    unittest.main()
