#!/usr/bin/python3
"""Generate a deterministic, ImageNet-like test tree for pcrfs.

    mkdataset.py --out DIR --classes C --per-class M --seed S [--awkward] [--special]
                 [--size MAX] [--manifest PATH]

DIR/n0000000K/n0000000K_N.JPEG holds M synthetic photo-like JPEGs per class: smooth
gradients, blurred shapes and textured noise, so that a progressive transcode has
scan sizes in roughly the proportions of real photographs (scan 1 a small fraction
of the whole). Sizes are drawn from [MAX/5, MAX] (default MAX 320, small for fast
tests; use --size 500 for ImageNet-like sizes).

--awkward adds, each in a fixed place inside the class directories (so torchvision's
ImageFolder still sees only the C classes), the inputs every pcrfs test must survive:
grayscale, CMYK, RGB-not-YCbCr, progressive, restart markers, arithmetic coding,
EXIF+ICC+COM, 1x1, 20000x200, PNG bytes named .JPEG, a truncated JPEG, a corrupt
JPEG, random bytes, a zero-byte file, a 12-bit JPEG, README.txt, names with spaces,
UTF-8 and non-UTF-8 bytes, a leading dot, an empty directory, 12 levels of nesting,
a symlink loop, a dangling symlink and a symlink to a file.
--special adds a FIFO and a unix socket (tarballs and copies cannot hold them).

The manifest (JSON; default DIR/../manifest.json) lists every entry with what a
builder is expected to do with it: "jpeg" (transcoded; "nscans" for libjpeg's default
progressive script), "verbatim" (stored as is), "skip" (not a regular file) or "dir",
and why. Paths are relative to DIR; "path_hex" holds the exact bytes (names need not
be UTF-8), "path" the same name decoded with surrogateescape.

Needs only Pillow and numpy (Debian python3-pil, python3-numpy) and, for the
restart/arithmetic/RGB cases, jpegtran/cjpeg/djpeg (libjpeg-turbo-progs). The same
arguments give the same bytes with the same Pillow and libjpeg-turbo.
"""

import argparse
import io
import json
import os
import socket
import struct
import subprocess
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

# Expected scan counts of libjpeg's default progressive script (jcparam.c,
# jpeg_simple_progression): 10 for YCbCr, 2 + 4*ncomps for anything else.
NSCANS_YCC = 10
NSCANS_GRAY = 6
NSCANS_RGB = 14
NSCANS_CMYK = 18


def die(msg):
    sys.stderr.write("mkdataset: %s\n" % msg)
    sys.exit(1)


def rng_for(seed, *key):
    """An independent, reproducible stream per (seed, key...)."""
    return np.random.default_rng([seed] + [k & 0xFFFFFFFF for k in key])


def upsample(rng, w, h, gw, gh, amp, channels=3):
    """Smooth random field: a coarse random grid resized bicubically."""
    g = rng.uniform(-amp, amp, size=(gh, gw, channels)).astype(np.float32)
    planes = [np.asarray(Image.fromarray(g[:, :, c], mode="F").resize((w, h), Image.BICUBIC))
              for c in range(channels)]
    return np.stack(planes, axis=2)


def synth(rng, w, h):
    """A photo-like RGB image: gradient, soft shapes, mid-frequency texture, grain."""
    # Background: a linear gradient between two colours at a random angle.
    c0 = rng.uniform(0, 255, 3)
    c1 = rng.uniform(0, 255, 3)
    ang = rng.uniform(0, np.pi)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = (xx * np.cos(ang) + yy * np.sin(ang))
    t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    img = c0[None, None, :] * (1 - t[:, :, None]) + c1[None, None, :] * t[:, :, None]
    img = img + upsample(rng, w, h, 4, 4, 40)
    base = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")

    # Objects: ellipses, rectangles and polygons, each with its own fine texture.
    draw = ImageDraw.Draw(base)
    for _ in range(int(rng.integers(3, 9))):
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, x1 = sorted(int(v) for v in rng.integers(-w // 4, w + w // 4, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(-h // 4, h + h // 4, 2))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.ellipse([x0, y0, x1 + 1, y1 + 1], fill=col)
        elif kind == 1:
            draw.rectangle([x0, y0, x1 + 1, y1 + 1], fill=col)
        else:
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h)))
                   for _ in range(int(rng.integers(3, 7)))]
            draw.polygon(pts, fill=col)
    base = base.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.6, 2.0))))

    # Texture (foliage, fabric...) and sensor grain: what makes later AC scans big.
    arr = np.asarray(base).astype(np.float32)
    arr += upsample(rng, w, h, max(2, w // 6), max(2, h // 6), float(rng.uniform(8, 30)))
    arr += upsample(rng, w, h, max(2, w // 2), max(2, h // 2), float(rng.uniform(5, 20)))
    arr += rng.normal(0, float(rng.uniform(3, 9)), size=arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def jpeg_bytes(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def run_tool(argv, data):
    p = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        die("%s failed (exit %d): %s" % (argv[0], p.returncode, p.stderr.decode(errors="replace")))
    return p.stdout


def djpeg_rc(data):
    p = subprocess.run(["djpeg", "-outfile", os.devnull], input=data,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode(errors="replace").strip()


def markers(data):
    """(marker, offset of marker, offset of payload, payload length) up to SOS."""
    out = []
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            die("bad marker layout in generated JPEG")
        m = data[pos + 1]
        ln = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        out.append((m, pos, pos + 4, ln - 2))
        if m == 0xDA:
            break
        pos += 2 + ln
    return out


def minimal_icc():
    """A small, fixed ICC profile (header + empty tag table): deterministic, unlike
    profiles built by lcms, which stamp the creation date."""
    body = bytearray(132)
    struct.pack_into(">I", body, 0, 132)
    body[4:8] = b"pcrf"
    struct.pack_into(">I", body, 8, 0x02100000)
    body[12:16] = b"mntr"
    body[16:20] = b"RGB "
    body[20:24] = b"XYZ "
    struct.pack_into(">6H", body, 24, 2024, 1, 1, 0, 0, 0)
    body[36:40] = b"acsp"
    struct.pack_into(">3I", body, 68, 63190, 65536, 54061)  # D50
    return bytes(body)


class Tree:
    def __init__(self, root):
        self.root = os.fsencode(root)
        self.entries = []

    def path(self, rel):
        return os.path.join(self.root, rel)

    def note(self, rel, typ, expect, why, **extra):
        e = {"path": os.fsdecode(rel), "path_hex": rel.hex(), "type": typ,
             "expect": expect, "why": why}
        e.update(extra)
        self.entries.append(e)

    def mkdir(self, rel, why="directory"):
        os.makedirs(self.path(rel), exist_ok=True)
        self.note(rel, "dir", "dir", why)

    def write(self, rel, data, expect, why, **extra):
        os.makedirs(os.path.dirname(self.path(rel)), exist_ok=True)
        with open(self.path(rel), "wb") as f:
            f.write(data)
        self.note(rel, "file", expect, why, size=len(data), **extra)

    def jpeg(self, rel, data, nscans, why, decodable=True):
        self.write(rel, data, "jpeg", why, nscans=nscans, decodable=decodable)

    def verbatim(self, rel, data, why, decodable=False):
        self.write(rel, data, "verbatim", why, decodable=decodable)


def cls_name(k):
    return b"n%08d" % k


def gen_regular(tree, args):
    for k in range(args.classes):
        c = cls_name(k)
        tree.mkdir(c, "class")
        for n in range(args.per_class):
            rng = rng_for(args.seed, 1, k, n)
            lo = max(16, args.size // 5)
            w = int(rng.integers(lo, args.size + 1))
            aspect = float(rng.choice([0.75, 1.0, 1.333, 1.5, 0.667]))
            h = max(16, min(args.size, int(round(w / aspect))))
            im = synth(rng, w, h)
            q = int(rng.integers(70, 96))
            sub = int(rng.choice([2, 2, 2, 1, 0]))  # mostly 4:2:0, like cameras
            data = jpeg_bytes(im, quality=q, subsampling=sub)
            tree.jpeg(c + b"/" + c + b"_%d.JPEG" % n, data, NSCANS_YCC,
                      "baseline YCbCr q%d subsampling %d" % (q, sub))


def gen_awkward(tree, args):
    C = args.classes
    s = args.seed

    def where(i):
        return cls_name(i % C)

    def photo(i, w, h):
        return synth(rng_for(s, 2, i), w, h)

    i = 0

    def nxt():
        nonlocal i
        i += 1
        return i - 1

    # --- JPEGs that must be transcoded losslessly ---------------------------------
    j = nxt()
    tree.jpeg(where(j) + b"/gray.JPEG", jpeg_bytes(photo(j, 160, 120).convert("L"), quality=88),
              NSCANS_GRAY, "grayscale (1 component)")
    j = nxt()
    tree.jpeg(where(j) + b"/cmyk.JPEG", jpeg_bytes(photo(j, 150, 110).convert("CMYK"), quality=90),
              NSCANS_CMYK, "CMYK (4 components, Adobe marker)")
    j = nxt()
    ppm = io.BytesIO()
    photo(j, 140, 100).save(ppm, "PPM")
    rgb = run_tool(["cjpeg", "-rgb", "-quality", "90"], ppm.getvalue())
    tree.jpeg(where(j) + b"/rgb.JPEG", rgb, NSCANS_RGB, "3-component RGB, not YCbCr")
    j = nxt()
    tree.jpeg(where(j) + b"/progressive.JPEG",
              jpeg_bytes(photo(j, 200, 150), quality=85, progressive=True), NSCANS_YCC,
              "progressive input")
    j = nxt()
    rst = run_tool(["jpegtran", "-restart", "1", "-copy", "all"],
                   jpeg_bytes(photo(j, 180, 140), quality=85))
    tree.jpeg(where(j) + b"/restart.JPEG", rst, NSCANS_YCC, "restart markers (DRI, 1 row)")
    j = nxt()
    ari = run_tool(["jpegtran", "-arithmetic", "-copy", "all"],
                   jpeg_bytes(photo(j, 170, 130), quality=85))
    tree.jpeg(where(j) + b"/arithmetic.JPEG", ari, NSCANS_YCC, "arithmetic-coded (SOF9)")
    j = nxt()
    exif = Image.Exif()
    exif[0x010F] = "pcrfs"              # Make
    exif[0x0110] = "mkdataset"          # Model
    exif[0x0132] = "2024:01:01 00:00:00"  # DateTime
    exif[0x0112] = 1                    # Orientation
    tree.jpeg(where(j) + b"/exif_icc_com.JPEG",
              jpeg_bytes(photo(j, 160, 120), quality=90, exif=exif.tobytes(),
                         icc_profile=minimal_icc(), comment=b"pcrfs test comment"),
              NSCANS_YCC, "EXIF APP1 + ICC APP2 + COM markers")
    j = nxt()
    tree.jpeg(where(j) + b"/1x1.JPEG", jpeg_bytes(Image.new("RGB", (1, 1), (200, 30, 90))),
              NSCANS_YCC, "1x1 pixel")
    j = nxt()
    wide = Image.fromarray(np.clip(upsample(rng_for(s, 3, j), 20000, 200, 200, 4, 100) + 128,
                                   0, 255).astype(np.uint8), "RGB")
    tree.jpeg(where(j) + b"/wide_20000x200.JPEG", jpeg_bytes(wide, quality=80), NSCANS_YCC,
              "20000x200 (very wide)")
    j = nxt()
    tree.jpeg(where(j) + b"/with space 1.JPEG", jpeg_bytes(photo(j, 90, 70)), NSCANS_YCC,
              "name with spaces")
    j = nxt()
    tree.jpeg(where(j) + "/ñandú.JPEG".encode(), jpeg_bytes(photo(j, 90, 70)), NSCANS_YCC,
              "UTF-8 name")
    j = nxt()
    tree.jpeg(where(j) + b"/caf\xe9-\xff\xfe.JPEG", jpeg_bytes(photo(j, 90, 70)), NSCANS_YCC,
              "name that is not UTF-8 (latin-1 and 0xFF 0xFE bytes)")
    j = nxt()
    tree.jpeg(where(j) + b"/.hidden.JPEG", jpeg_bytes(photo(j, 90, 70)), NSCANS_YCC,
              "leading dot")
    j = nxt()
    deep = where(j) + b"".join(b"/d%02d" % d for d in range(1, 13))
    tree.jpeg(deep + b"/deep.JPEG", jpeg_bytes(photo(j, 80, 60)), NSCANS_YCC,
              "12 directory levels below the class")

    # --- files that must be stored verbatim -----------------------------------------
    j = nxt()
    png = io.BytesIO()
    photo(j, 64, 48).save(png, "PNG")
    tree.verbatim(where(j) + b"/png_named.JPEG", png.getvalue(), "PNG bytes under a .JPEG name",
                  decodable=True)
    j = nxt()
    full = jpeg_bytes(photo(j, 160, 120), quality=90)
    tree.verbatim(where(j) + b"/truncated.JPEG", full[: len(full) * 6 // 10],
                  "truncated JPEG (60%, no EOI)")
    j = nxt()
    tree.verbatim(where(j) + b"/corrupt.JPEG", make_corrupt(s, j, photo(j, 160, 120)),
                  "garbage in the entropy-coded data (libjpeg warns)")
    j = nxt()
    tree.verbatim(where(j) + b"/random.JPEG",
                  rng_for(s, 4, j).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
                  "random bytes")
    j = nxt()
    tree.verbatim(where(j) + b"/zero.JPEG", b"", "zero bytes")
    j = nxt()
    tree.verbatim(where(j) + b"/twelve_bit.JPEG", make_12bit(photo(j, 96, 64)),
                  "12-bit precision in SOF (libjpeg-turbo 8-bit cannot read it)")
    j = nxt()
    tree.verbatim(where(j) + b"/README.txt",
                  b"Not an image. pcrfs must store this byte for byte.\n", "not an image")

    # --- tree shapes ------------------------------------------------------------------
    j = nxt()
    tree.mkdir(where(j) + b"/empty_dir", "empty directory")
    j = nxt()
    os.symlink(b"..", tree.path(where(j) + b"/loop"))
    tree.note(where(j) + b"/loop", "symlink", "skip", "symlink loop (-> ..)")
    j = nxt()
    os.symlink(b"does-not-exist.JPEG", tree.path(where(j) + b"/dangling.JPEG"))
    tree.note(where(j) + b"/dangling.JPEG", "symlink", "skip", "dangling symlink")
    j = nxt()
    target = cls_name(0) + b"/gray.JPEG"
    os.symlink(b"../" + target, tree.path(where(j) + b"/alias.JPEG"))
    tree.note(where(j) + b"/alias.JPEG", "symlink", "jpeg",
              "symlink to a file: followed, stored as the target's bytes",
              target=os.fsdecode(target), nscans=NSCANS_GRAY, decodable=True)

    if args.special:
        j = nxt()
        os.mkfifo(tree.path(where(j) + b"/fifo"))
        tree.note(where(j) + b"/fifo", "fifo", "skip", "FIFO")
        j = nxt()
        make_socket(tree.path(where(j)), b"socket")
        tree.note(where(j) + b"/socket", "socket", "skip", "unix socket")


def make_corrupt(seed, j, im):
    """Overwrite a few bytes in the middle of the scan so that libjpeg *warns* (djpeg
    exit 2) rather than fails: e.g. "Corrupt JPEG data: bad Huffman code"."""
    good = jpeg_bytes(im, quality=90)
    sos = [m for m in markers(good) if m[0] == 0xDA][0]
    start = sos[2] + sos[3]
    end = len(good) - 2
    rng = rng_for(seed, 5, j)
    for _ in range(200):
        bad = bytearray(good)
        at = int(rng.integers(start + (end - start) // 4, start + (end - start) // 2))
        for k in range(24):
            bad[at + k] = int(rng.integers(0, 255))  # 0..254: never a new marker
        rc, _ = djpeg_rc(bytes(bad))
        if rc == 2:
            return bytes(bad)
    die("could not make a corrupt JPEG that djpeg warns about")


def make_12bit(im):
    data = bytearray(jpeg_bytes(im, quality=90))
    sof = [m for m in markers(bytes(data)) if m[0] == 0xC0][0]
    assert data[sof[2]] == 8
    data[sof[2]] = 12
    return bytes(data)


def make_socket(dirpath, name):
    # sun_path is limited to ~108 bytes: bind a relative name from inside the directory.
    cwd = os.open(".", os.O_RDONLY)
    try:
        os.chdir(dirpath)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(name)
        s.close()
    finally:
        os.fchdir(cwd)
        os.close(cwd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to create (must not exist)")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--size", type=int, default=320, help="largest side (default 320)")
    ap.add_argument("--awkward", action="store_true", help="add the awkward cases")
    ap.add_argument("--special", action="store_true", help="add a FIFO and a unix socket")
    ap.add_argument("--manifest", help="where to write the manifest (default DIR/../manifest.json)")
    args = ap.parse_args()
    if args.classes < 1 or args.per_class < 0 or args.size < 16:
        ap.error("need --classes >= 1, --per-class >= 0, --size >= 16")
    if args.special and not args.awkward:
        ap.error("--special needs --awkward")
    out = os.path.abspath(args.out)
    if os.path.lexists(out):
        die("%s exists" % out)
    os.makedirs(out)
    tree = Tree(out)
    gen_regular(tree, args)
    if args.awkward:
        gen_awkward(tree, args)
    manifest = args.manifest or os.path.join(os.path.dirname(out), "manifest.json")
    doc = {"generator": "pcrfs tests/gen/mkdataset.py", "classes": args.classes,
           "per_class": args.per_class, "seed": args.seed, "size": args.size,
           "awkward": args.awkward, "special": args.special,
           "entries": sorted(tree.entries, key=lambda e: bytes.fromhex(e["path_hex"]))}
    with open(manifest, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    nfiles = sum(1 for e in tree.entries if e["type"] == "file")
    print("mkdataset: %d files in %s, manifest %s" % (nfiles, out, manifest))


if __name__ == "__main__":
    main()
