"""Issue 23, the tools' part, as rows of the command-line table (clitable.py):

  mkpcrfs   removes only a killed build's own temporary directory (marker, owner,
            name): a user's .x.tmp.N directory and file survive byte for byte;
            -f on a symbolic link to a store replaces the store it points to;
            SRC '-' without --tokens says what '-' means;
  pcrinfo   --extract refuses a DIR inside the store and leaves nothing after a
            failure part-way (a full tmpfs), so a re-run works; --cat says why '..'
            and '' are refused and refuses FILE/; a 0-byte index.db is "empty";
            --list, --cat tokens/... and --extract see the token tree;
  level     a write to MNT/.pcrfs/level (and user.pcrfs.level) is applied whole or
            not at all: each row checks the level after it;
  progress  pcrinfo --fidelity and mkpcrfs --quality draw a progress line with an
            estimate under a pty, and none with -q.

Run by hand: MKPCRFS=... PCRINFO=... PCRFS=... /usr/bin/python3 test_cli_tools.py
"""

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import clitable as ct  # noqa: E402
import mount_util as mu  # noqa: E402

MKTOKENS = os.path.join(mu.SRCROOT, "tests", "gen", "mktokens.py")
MARKER = ".pcrfs-build"
MAGIC = "pcrfs build temporary directory v1"


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def start_time(pid):
    """Field 22 of /proc/PID/stat (after the parenthesised name)."""
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def dead_pid():
    """A PID that just ended (reaped: kill(pid, 0) says ESRCH)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def write_marker(d, pid, start, boot=None):
    """A temporary directory as a killed build of mkpcrfs leaves it (writer.c)."""
    os.makedirs(os.path.join(d, "records"))
    with open(os.path.join(d, "index.db"), "wb") as f:
        f.write(b"half an index")
    with open(os.path.join(d, MARKER), "w") as f:
        f.write("%s\npid %d\nboot %s\nstart %d\n" % (MAGIC, pid, boot or boot_id(), start))


# ---- mkpcrfs: temporary directories ---------------------------------------------------

def setup_users_things(ctx):
    """A user's directory and file that look like mkpcrfs's temporary directories."""
    d = os.path.join(ctx["tmp"], "t_user")
    os.makedirs(os.path.join(d, ".x.tmp.4000000"))
    with open(os.path.join(d, ".x.tmp.4000000", "notes.txt"), "wb") as f:
        f.write(b"a user's file, not mkpcrfs's\n")
    with open(os.path.join(d, ".x.tmp.4000001"), "wb") as f:
        f.write(b"a user's plain file\n")
    # a build directory of another user (not ours to remove) and one without marker
    os.makedirs(os.path.join(d, ".x.tmp.4000003"))
    with open(os.path.join(d, ".x.tmp.4000003", "index.db"), "wb") as f:
        f.write(b"an old build without marker\n")
    ctx["case"].saved = {p: sha(os.path.join(d, p)) for p in (
        ".x.tmp.4000000/notes.txt", ".x.tmp.4000001", ".x.tmp.4000003/index.db")}


def check_users_things(ctx, proc):
    d = os.path.join(ctx["tmp"], "t_user")
    for rel, h in ctx["case"].saved.items():
        assert os.path.isfile(os.path.join(d, rel)), "%s was removed" % rel
        assert sha(os.path.join(d, rel)) == h, "%s changed" % rel
    assert sorted(os.listdir(d)) == [".x.tmp.4000000", ".x.tmp.4000001", ".x.tmp.4000003",
                                     "x"], sorted(os.listdir(d))
    assert sorted(os.listdir(os.path.join(d, ".x.tmp.4000000"))) == ["notes.txt"]


def setup_stale(ctx):
    """Marked directories: a build whose PID ended and one whose PID now belongs to a
    process started at another time (reused), both removed; a live one (this test),
    one whose marker names another PID and one of another user, all kept."""
    d = os.path.join(ctx["tmp"], "t_stale")
    os.makedirs(d)
    pid = dead_pid()
    write_marker(os.path.join(d, ".y.tmp.%d" % pid), pid, 12345)
    me = os.getpid()
    write_marker(os.path.join(d, ".y.tmp.%d" % os.getppid()), os.getppid(),
                 start_time(os.getppid()) + 1)  # the PID is alive but not that build
    write_marker(os.path.join(d, ".y.tmp.%d" % me), me, start_time(me))  # alive: kept
    # a marker naming another PID than the directory's name: not this build's
    write_marker(os.path.join(d, ".y.tmp.4000004"), 4000005, 1)
    # a dead build of another user (uid 65534): not ours to remove
    other = os.path.join(d, ".y.tmp.4000006")
    write_marker(other, 4000006, 1)
    for dp, dns, fns in os.walk(other):
        for n in [dp] + [os.path.join(dp, f) for f in dns + fns]:
            os.lchown(n, 65534, 65534)
    ctx["case"].kept = sorted([".y.tmp.%d" % me, ".y.tmp.4000004", ".y.tmp.4000006", "y"])


def check_stale(ctx, proc):
    d = os.path.join(ctx["tmp"], "t_stale")
    assert sorted(os.listdir(d)) == ctx["case"].kept, sorted(os.listdir(d))
    with open(os.path.join(d, ".y.tmp.%d" % os.getpid(), "index.db"), "rb") as f:
        assert f.read() == b"half an index"


def setup_symlink(ctx):
    d = os.path.join(ctx["tmp"], "t_link")
    os.makedirs(d)
    mu.build_store(ctx["src"], os.path.join(d, "real"), per_record=4)
    os.symlink("real", os.path.join(d, "link"))
    ctx["case"].ino = os.stat(os.path.join(d, "real", "index.db")).st_ino


def check_symlink(ctx, proc):
    d = os.path.join(ctx["tmp"], "t_link")
    assert os.readlink(os.path.join(d, "link")) == "real", "the link was replaced"
    assert os.path.isdir(os.path.join(d, "real")) and not os.path.islink(os.path.join(d, "real"))
    assert os.stat(os.path.join(d, "real", "index.db")).st_ino != ctx["case"].ino, \
        "the store the link points to was not replaced"
    assert sorted(os.listdir(d)) == ["link", "real"], sorted(os.listdir(d))
    # the new store is the one asked for: -n 2 gives 3 records of the 6 files, the old
    # one (-n 4) had 2
    p = mu.run([ctx["pcrinfo"], "--json", os.path.join(d, "link")], check=0)
    assert json.loads(p.stdout)["records"] == 3, p.stdout[:300]


def setup_dangling(ctx):
    d = os.path.join(ctx["tmp"], "t_dangling")
    os.makedirs(d)
    os.symlink("nothing", os.path.join(d, "link"))


# ---- pcrinfo ---------------------------------------------------------------------------

def setup_tiny(ctx):
    """A 16 KiB tmpfs: room for a few of the store's files, not for all of them."""
    d = os.path.join(ctx["tmp"], "t_tiny")
    os.makedirs(d)
    mu.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", d], check=0)


def check_tiny(ctx, proc):
    d = os.path.join(ctx["tmp"], "t_tiny")
    try:
        assert b"No space left" in proc.stderr, proc.stderr
        assert os.listdir(d) == [], "left on the full disk: %s" % os.listdir(d)
    finally:
        mu.run(["umount", d], check=0)
    # the same command again, now with room: it works and writes every file
    p = mu.run([ctx["pcrinfo"], "--extract", os.path.join(d, "out"), ctx["store"]], check=0)
    n = sum(len(fs) for _, _, fs in os.walk(os.path.join(d, "out")))
    listed = mu.run([ctx["pcrinfo"], "--list", ctx["store"]], check=0).stdout.count(b"\n")
    assert n == listed and n > 0, "re-run wrote %d files of %d: %s" % (n, listed, p.stderr)


def setup_empty_index(ctx):
    d = os.path.join(ctx["tmp"], "t_empty")
    os.makedirs(os.path.join(d, "records"), exist_ok=True)
    open(os.path.join(d, "index.db"), "wb").close()


def check_list_tokens(ctx, proc):
    lines = proc.stdout.decode().splitlines()
    tok = [ln for ln in lines if ln.startswith("tokens/")]
    assert len(tok) == ctx["ntok"], "%d token lines, want %d" % (len(tok), ctx["ntok"])
    assert all(ln.split("\t")[0].endswith(".tok") and ln.split("\t")[1] == "tokens"
               for ln in tok), tok[:3]


def check_cat_token(ctx, proc):
    assert proc.stdout == ctx["tokbytes"], "not the bytes the mount serves"


def check_extract_tokens(ctx, proc):
    out = os.path.join(ctx["tmp"], "t_extok")
    got = {}
    for dp, _, fns in os.walk(os.path.join(out, "tokens")):
        for fn in fns:
            with open(os.path.join(dp, fn), "rb") as f:
                got[os.path.relpath(os.path.join(dp, fn), out)] = f.read()
    assert got == ctx["mounted_tokens"], "extracted %d token files; the mount serves %d" % (
        len(got), len(ctx["mounted_tokens"]))


# ---- the level control file --------------------------------------------------------------

# Writes BYTES (hex) to MNT/.pcrfs/level as one write(2) (or sets user.pcrfs.level):
# exit 1 with the errno's name on stderr if the write or the close fails.
WRITE_LEVEL = r"""
import errno, os, sys
mnt, how, value = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
try:
    if how == "xattr":
        os.setxattr(os.path.join(mnt, "dynamic"), "user.pcrfs.level", value)
    else:
        fd = os.open(os.path.join(mnt, ".pcrfs", "level"), os.O_WRONLY | os.O_TRUNC)
        try:
            n = os.write(fd, value)
        finally:
            os.close(fd)
        assert n == len(value), n
except OSError as e:
    sys.exit("level: %s" % errno.errorcode[e.errno])
"""


def setup_level(ctx):
    """The fixture store mounted at MNT with dynamic/ at level 3."""
    mu.run([ctx["pcrfs"], ctx["store"], ctx["mnt"], "-o", "level=3"], check=0, timeout=20)
    assert mu.wait_for(lambda: os.path.ismount(ctx["mnt"]), 10)


def level_check(want):
    def check(ctx, proc):
        try:
            with open(os.path.join(ctx["mnt"], ".pcrfs", "level"), "rb") as f:
                got = f.read()
        finally:
            mu.run([mu.FUSERMOUNT, "-u", ctx["mnt"]], check=0)
        assert got == b"%d\n" % want, "level %r after the write, want %d" % (got, want)
    return check


def level_row(name, value, want, how="write"):
    ok = want != 3
    return ct.Case("level %s: %s %r" % (how, name, value),
                   ["{python}", "-c", WRITE_LEVEL, "{mnt}", how, value.hex()],
                   rc=0 if ok else 1, msg=None if ok else r"^level: EINVAL$",
                   setup=setup_level, check=level_check(want))


# ---- progress lines ------------------------------------------------------------------------

# Runs ARGV with stderr on a pty (stdout to /dev/null), copies what the pty showed to
# stdout, exits with ARGV's status. Bounded: 120 s of silence ends it.
PTY_RUN = r"""
import os, pty, select, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=s)
os.close(s)
out = b""
while select.select([m], [], [], 120)[0]:
    try:
        d = os.read(m, 65536)
    except OSError:
        break
    if not d:
        break
    out += d
sys.stdout.buffer.write(out)
sys.exit(p.wait(timeout=60))
"""


def progress_shown(ctx, proc):
    # "N/N 100% [####] x img/s y MB/s ETA m:ss", redrawn in place with \r
    assert b"\r" in proc.stdout and b"ETA" in proc.stdout, proc.stdout[-300:]
    assert b" 100% " in proc.stdout, proc.stdout[-300:]


def progress_absent(ctx, proc):
    assert proc.stdout == b"", proc.stdout[-300:]


class ToolRows(ct.CliTable):
    PER_RECORD = 4

    @classmethod
    def make_store(cls):
        super().make_store()
        # the same tree with a token grid per image, for the tokens/ rows
        cls.tok = os.path.join(cls.tmp, "tokgrids")
        cls.tokstore = os.path.join(cls.tmp, "tok.pcr")
        mu.run([mu.PYTHON, MKTOKENS, "--seed", "5", "-k", "391", "--grid", "16", "tree",
                cls.src, cls.tok], check=0)
        mu.run([mu.program("MKPCRFS"), "-q", "--tokens", cls.tok, cls.src, cls.tokstore],
               check=0)
        cls.mounted_tokens = {}
        mnt = os.path.join(cls.tmp, "tokmnt")
        os.mkdir(mnt)
        mu.run([mu.program("PCRFS"), cls.tokstore, mnt], check=0, timeout=20)
        try:
            for dp, _, fns in os.walk(os.path.join(mnt, "tokens")):
                for fn in fns:
                    with open(os.path.join(dp, fn), "rb") as f:
                        cls.mounted_tokens[os.path.relpath(os.path.join(dp, fn), mnt)] = f.read()
        finally:
            mu.run([mu.FUSERMOUNT, "-u", mnt], check=0)
            mu.wait_for(lambda: not os.path.ismount(mnt), 10)
            os.rmdir(mnt)
        assert cls.mounted_tokens, "the mount serves no token file"
        cls.file = sorted(mu.run([mu.program("PCRINFO"), "--list", cls.store], check=0)
                          .stdout.decode().splitlines())[0].split("\t")[0]
        cls.tokfile = sorted(cls.mounted_tokens)[0]

    def context(self, i):
        ctx = super().context(i)
        ctx.update(tokstore=self.tokstore, file=self.file, tokfile=self.tokfile,
                   ntok=len(self.mounted_tokens), tokbytes=self.mounted_tokens[self.tokfile],
                   mounted_tokens=self.mounted_tokens)
        return ctx

    CASES = [
        # -- mkpcrfs: what is beside STORE --
        ct.Case("mkpcrfs leaves a user's .x.tmp.N dir and file", [
            "{mkpcrfs}", "-q", "{src}", "{tmp}/t_user/x"], rc=0,
            setup=setup_users_things, check=check_users_things, changes=["{tmp}/t_user/x"]),
        ct.Case("mkpcrfs removes only its own stale temp dirs", [
            "{mkpcrfs}", "-q", "{src}", "{tmp}/t_stale/y"], rc=0,
            setup=setup_stale, check=check_stale, changes=["{tmp}/t_stale/*"]),
        ct.Case("mkpcrfs -f on a symlink replaces its target", [
            "{mkpcrfs}", "-q", "-f", "-n", "2", "{src}", "{tmp}/t_link/link"], rc=0,
            setup=setup_symlink, check=check_symlink, changes=["{tmp}/t_link/real"]),
        ct.Case("mkpcrfs -f on a dangling symlink refused", [
            "{mkpcrfs}", "-q", "-f", "{src}", "{tmp}/t_dangling/link"], rc=1,
            msg=r"t_dangling/link: a symbolic link to nothing; not replacing it$",
            setup=setup_dangling),
        # a usage error: the message, then the usual hint to --help
        ct.Case("mkpcrfs - without --tokens", ["{mkpcrfs}", "-q", "-", "{tmp}/t_dash"], rc=2,
                msg=r"SRC '-' means no images .* needs --tokens or --seit", lines=2),
        # -- pcrinfo --extract --
        ct.Case("extract into the store refused", [
            "{pcrinfo}", "--extract", "{store}/records/out", "{store}"], rc=1,
            msg=r"records/out: inside the store .*; refused"),
        ct.Case("extract into the store via a symlink refused", [
            "{pcrinfo}", "--extract", "{tmp}/t_storelink/out", "{store}"], rc=1,
            msg=r"t_storelink/out: inside the store",
            setup=lambda ctx: os.symlink(ctx["store"], os.path.join(ctx["tmp"], "t_storelink"))),
        ct.Case("extract on a full disk leaves nothing, re-run works", [
            "{pcrinfo}", "--extract", "{tmp}/t_tiny/out", "{store}"], rc=1,
            msg=r"writing .*t_tiny/out/.*: No space left on device",
            setup=setup_tiny, check=check_tiny, changes=["{tmp}/t_tiny"]),
        # -- pcrinfo --cat --
        ct.Case("cat .. refused", ["{pcrinfo}", "--cat", "../store.pcr/index.db", "{store}"],
                rc=1, msg=r"'\.\.' is refused"),
        ct.Case("cat empty path", ["{pcrinfo}", "--cat", "", "{store}"], rc=1,
                msg=r"--cat: an empty PATH"),
        ct.Case("cat FILE/ refused", ["{pcrinfo}", "--cat", "{file}/", "{store}"], rc=1,
                msg=r"/: Not a directory$"),
        ct.Case("cat FILE works", ["{pcrinfo}", "--cat", "{file}", "{store}"], rc=0,
                check=lambda ctx, p: (assert_(p.stdout[:2] == b"\xff\xd8", "not a JPEG"))),
        # -- an empty index.db, through the library (pcrinfo and pcrfs) --
        ct.Case("pcrinfo 0-byte index.db", ["{pcrinfo}", "{tmp}/t_empty"], rc=1,
                msg=r"index\.db: an empty file \(0 bytes\), not a pcrfs index$",
                setup=setup_empty_index),
        ct.Case("pcrfs 0-byte index.db", ["{pcrfs}", "{tmp}/t_empty", "{mnt}"], rc=1,
                msg=r"index\.db: an empty file \(0 bytes\), not a pcrfs index",
                setup=setup_empty_index),
        # -- tokens through pcrinfo --
        ct.Case("list shows token files", ["{pcrinfo}", "--list", "{tokstore}"], rc=0,
                check=check_list_tokens),
        ct.Case("cat a token file", ["{pcrinfo}", "--cat", "{tokfile}", "{tokstore}"], rc=0,
                check=check_cat_token),
        ct.Case("extract writes the token files", [
            "{pcrinfo}", "--extract", "{tmp}/t_extok", "{tokstore}"], rc=0,
            check=check_extract_tokens, changes=["{tmp}/t_extok"]),
        # -- the level: applied whole or not at all --
        level_row("blank lines", b"8\n\n\n", 3),
        level_row("garbage line", b"7\nxyz\n", 3),
        level_row("NULs", b"\0\0\0", 3),
        level_row("value NUL", b"6\0", 3),
        level_row("trailing space", b"6 ", 3),
        level_row("bare newline", b"\n", 3),
        level_row("value", b"6", 6),
        level_row("value newline", b"5\n", 5),
        level_row("full", b"full\n", 10),
        level_row("xattr NUL", b"6\0", 3, how="xattr"),
        level_row("xattr two lines", b"6\n\n", 3, how="xattr"),
        level_row("xattr value newline", b"6\n", 6, how="xattr"),
        # -- progress lines with an estimate, on a terminal only --
        ct.Case("fidelity progress on a pty", [
            "{python}", "-c", PTY_RUN, "{pcrinfo}", "--fidelity", "-j", "2", "{store}"], rc=0,
            check=progress_shown, timeout=120),
        ct.Case("fidelity -q no progress", [
            "{python}", "-c", PTY_RUN, "{pcrinfo}", "-q", "--fidelity", "{store}"], rc=0,
            check=progress_absent, timeout=120),
        ct.Case("quality build progress on a pty", [
            "{python}", "-c", PTY_RUN, "{mkpcrfs}", "--quality", "{src}", "{tmp}/t_q1"], rc=0,
            check=progress_shown, changes=["{tmp}/t_q1"], timeout=120),
        ct.Case("quality build -q no progress", [
            "{python}", "-c", PTY_RUN, "{mkpcrfs}", "-q", "--quality", "{src}", "{tmp}/t_q2"],
            rc=0, check=progress_absent, changes=["{tmp}/t_q2"], timeout=120),
    ]


def assert_(cond, why):
    assert cond, why


if __name__ == "__main__":
    ct.main()
