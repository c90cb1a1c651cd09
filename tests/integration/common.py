"""Shared helpers for the pcrfs Python tests (run with /usr/bin/python3).

The programs under test come from the environment (set by tests/integration/
meson.build): MKPCRFS, PCRINFO, PCRFS. A missing program is a test *failure*, never
a skip: a suite that silently checks nothing must not look green.

split_jpeg() is the test suite's own implementation of the chunking rule of
pcrfs(5), written from the format text and independent of src/lib/jpeg/jpeg_split.c,
so that the two can check each other.
"""

import hashlib
import io
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(os.path.dirname(HERE))
MKDATASET = os.path.join(SRCROOT, "tests", "gen", "mkdataset.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
EOI = b"\xff\xd9"


class ProgramMissing(AssertionError):
    pass


def program(var):
    """Path of the program named by environment variable @var (MKPCRFS, PCRINFO,
    PCRFS). Raises (an assertion, so the test fails) if unset or not executable."""
    path = os.environ.get(var)
    if not path:
        raise ProgramMissing("environment variable %s is not set (run through meson test)" % var)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ProgramMissing("%s=%s is not an executable file (not built?)" % (var, path))
    return path


def run(argv, input=None, timeout=600, check=None, **kw):
    """Run @argv, capture stdout/stderr as bytes. If @check is an int, assert the exit
    code equals it and include stderr in the message otherwise."""
    p = subprocess.run([os.fsencode(a) if isinstance(a, (str, bytes)) else str(a) for a in argv],
                       input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, **kw)
    if check is not None and p.returncode != check:
        raise AssertionError("%s exited %d, expected %d\n--- stderr:\n%s\n--- stdout:\n%s" % (
            " ".join(os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv),
            p.returncode, check, p.stderr.decode(errors="replace")[-4000:],
            p.stdout.decode(errors="replace")[-2000:]))
    return p


class TempDir:
    """A temporary directory removed at exit (also when it holds read-only dirs or
    a mounted tmpfs the test forgot)."""

    def __init__(self, prefix="pcrfs-test-"):
        base = os.environ.get("PCRFS_TEST_TMPDIR") or None
        self.path = tempfile.mkdtemp(prefix=prefix, dir=base)

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        self.cleanup()

    def cleanup(self):
        if os.path.isdir(self.path):
            for dirpath, dirnames, _ in os.walk(self.path):
                for d in dirnames:
                    p = os.path.join(dirpath, d)
                    if os.path.ismount(p):
                        subprocess.run(["umount", "-l", p], stderr=subprocess.DEVNULL)
                    try:
                        if not os.path.islink(p):
                            os.chmod(p, 0o755)
                    except OSError:
                        pass
            shutil.rmtree(self.path, ignore_errors=True)

    def __str__(self):
        return self.path


# --------------------------------------------------------------------------------
# Dataset generation


def make_dataset(out, classes, per_class, seed, awkward=False, special=False, size=None):
    """Run tests/gen/mkdataset.py into @out (must not exist); return the manifest."""
    manifest = out.rstrip("/") + ".manifest.json"
    argv = [PYTHON, MKDATASET, "--out", out, "--classes", str(classes), "--per-class",
            str(per_class), "--seed", str(seed), "--manifest", manifest]
    if awkward:
        argv.append("--awkward")
    if special:
        argv.append("--special")
    if size:
        argv += ["--size", str(size)]
    run(argv, check=0)
    with open(manifest) as f:
        doc = json.load(f)
    for e in doc["entries"]:
        e["rel"] = bytes.fromhex(e["path_hex"])
    return doc


# --------------------------------------------------------------------------------
# The chunking rule, independently.


def split_jpeg(data):
    """Split a progressive JPEG per pcrfs(5)'s chunking rule and return its chunks (list of bytes).

    chunk 1: SOI .. end of scan 1's entropy-coded data; chunk i: the byte after scan
    i-1's entropy data .. end of scan i's. Entropy data ends at the first FF followed
    by neither 00 nor D0..D7. The file must end with FF D9 right after the last scan,
    so that b"".join(chunks) + FF D9 == data. Raises ValueError otherwise.
    """
    n = len(data)
    if n < 4 or data[0:2] != b"\xff\xd8":
        raise ValueError("no SOI")
    pos = 2
    start = 0
    chunks = []
    while True:
        if pos >= n:
            raise ValueError("no EOI")
        if data[pos] != 0xFF:
            raise ValueError("expected a marker at offset %d" % pos)
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos >= n:
            raise ValueError("fill bytes at end of file")
        m = data[pos]
        pos += 1
        if m == 0xD9:
            if not chunks:
                raise ValueError("EOI before any scan")
            if pos != n:
                raise ValueError("%d bytes after EOI" % (n - pos))
            if start != n - 2:
                raise ValueError("%d bytes between the last scan and EOI" % (n - 2 - start))
            return chunks
        if m == 0x01 or 0xD0 <= m <= 0xD8:
            raise ValueError("stray marker FF %02X at offset %d" % (m, pos - 2))
        if pos + 2 > n:
            raise ValueError("marker segment past the end")
        seglen = (data[pos] << 8) | data[pos + 1]
        if seglen < 2 or pos + seglen > n:
            raise ValueError("marker FF %02X: bad length %d" % (m, seglen))
        pos += seglen
        if m == 0xDA:
            i = pos
            while True:
                j = data.find(b"\xff", i)
                if j < 0 or j + 1 >= n:
                    raise ValueError("scan %d runs to the end of the file" % (len(chunks) + 1))
                nx = data[j + 1]
                if nx == 0x00 or 0xD0 <= nx <= 0xD7:
                    i = j + 2
                    continue
                break
            chunks.append(data[start:j])
            start = j
            pos = j


def level_bytes(chunks, level, levels):
    """What level @level (1..levels) must serve for a JPEG with @chunks."""
    if level >= levels:
        return b"".join(chunks) + EOI
    return b"".join(chunks[:min(level, len(chunks))]) + EOI


def sof_info(data):
    """(SOF marker, precision, height, width, ncomponents) of a JPEG, or None."""
    pos = 2
    n = len(data)
    while pos + 4 <= n and data[pos] == 0xFF:
        m = data[pos + 1]
        ln = (data[pos + 2] << 8) | data[pos + 3]
        if m in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            p = pos + 4
            return (m, data[p], (data[p + 1] << 8) | data[p + 2],
                    (data[p + 3] << 8) | data[p + 4], data[p + 5])
        if m == 0xDA:
            return None
        pos += 2 + ln
    return None


def marker_list(data):
    """Markers (as ints) before the first SOS."""
    out = []
    pos = 2
    n = len(data)
    while pos + 4 <= n and data[pos] == 0xFF:
        m = data[pos + 1]
        out.append(m)
        if m == 0xDA:
            break
        pos += 2 + ((data[pos + 2] << 8) | data[pos + 3])
    return out


# --------------------------------------------------------------------------------
# Decoders


def djpeg(data):
    """Decode with libjpeg-turbo's djpeg: (exit code, stderr). 0 clean, 2 warning."""
    p = subprocess.run(["djpeg", "-outfile", os.devnull], input=data,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stderr.decode(errors="replace").strip()


def pillow_image(data):
    """Decode fully with Pillow, refusing truncated images; returns the Image."""
    from PIL import Image, ImageFile
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    Image.MAX_IMAGE_PIXELS = None
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def pixels(data):
    """(mode, size, raw pixel bytes) as Pillow decodes them."""
    im = pillow_image(data)
    return im.mode, im.size, im.tobytes()


def same_pixels(a, b):
    """True if the JPEG (or other image) bytes @a and @b decode with Pillow to the
    same mode, size and pixels."""
    return pixels(a) == pixels(b)


# --------------------------------------------------------------------------------
# Trees


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def snapshot(root):
    """Everything observable of a tree without following symlinks: per relative
    path (bytes), type, mode, size, mtime_ns, and sha256 or link target."""
    root = os.fsencode(root)
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                extra = sha256(p)
            elif stat.S_ISLNK(st.st_mode):
                extra = os.readlink(p)
            else:
                extra = None
            out[rel] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_size, st.st_mtime_ns, extra)
    st = os.lstat(root)
    out[b"."] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_size, st.st_mtime_ns, None)
    return out


def source_files(root):
    """What a builder that follows symlinks must store: {relative path (bytes):
    real path} of every regular file reachable from @root, following symlinks to
    directories unless they lead back to an ancestor (a loop), plus the set of
    directories (relative)."""
    root = os.fsencode(os.path.abspath(root))
    files = {}
    dirs = set()

    def walk(real, rel, ancestors):
        for name in sorted(os.listdir(real)):
            p = os.path.join(real, name)
            r = os.path.join(rel, name) if rel else name
            try:
                st = os.stat(p)
            except OSError:
                continue  # dangling link or loop of links
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    continue
                dirs.add(r)
                walk(p, r, ancestors | {key})
            elif stat.S_ISREG(st.st_mode):
                files[r] = p

    st = os.stat(root)
    walk(root, b"", {(st.st_dev, st.st_ino)})
    return files, dirs


def tree_files(root, strict=True):
    """{relative path (bytes): absolute path} of the regular files under @root (no
    symlinks followed), and the set of relative directories. With @strict, anything
    else (symlink, FIFO, ...) raises AssertionError: an extracted tree holds only
    directories and regular files."""
    root = os.fsencode(root)
    files = {}
    dirs = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            mode = os.lstat(p).st_mode
            if stat.S_ISDIR(mode):
                dirs.add(rel)
            elif stat.S_ISREG(mode):
                files[rel] = p
            elif strict:
                raise AssertionError("%s: neither a directory nor a regular file" % p)
    return files, dirs


def read(path):
    with open(path, "rb") as f:
        return f.read()


def sqlite_dump(path, drop=None):
    """index.db as SQL text lines (sqlite3 iterdump), without lines for which
    @drop(line) is true. Opened read-only."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return [l for l in con.iterdump() if not (drop and drop(l))]
    finally:
        con.close()


def unescape(text):
    """Undo the tools' escaping of names in text output (--list, warnings): a
    backslash is written "\\\\", a byte that is not printable ASCII or part of
    printable UTF-8 "\\xHH". Takes and returns bytes."""
    out = bytearray()
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == 0x5C and i + 1 < n and text[i + 1] == 0x5C:
            out.append(0x5C)
            i += 2
        elif c == 0x5C and i + 3 < n and text[i + 1] == 0x78:
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(c)
            i += 1
    return bytes(out)


def fmt_path(rel):
    return os.fsdecode(rel) if isinstance(rel, bytes) else rel
