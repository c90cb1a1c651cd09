#!/usr/bin/python3
"""mkpcrfs --seit at the command line (issue 23, "SeiT import"), as rows of the
clitable harness: each row writes a small SeiT release (2x2 grids) in its setup, runs
mkpcrfs, and is checked for its exit status, its one-line message and, through the
harness, that nothing but the row's output store is left behind.

The oracle for the grids is SeiT's own reader (get_data_index_of() in SeiT's
datasets.py), restated in seit_decode() below: a row that imports reads the store
back through a mount and compares every grid with it. What each row would catch:
  - a repeated 255 ([255, 255, 1, 255, 7, 0] is 256, 262, 0 for SeiT; pcrfs's
    four-byte extension would read 1021, 7, 0 and refuse the image), a trailing 255
    (dropped) and a redundant [255, 255, 45] (300): imported as SeiT reads them, with
    one warning naming the first such image;
  - label files with CR-only and CRLF line ends: imported, no message; a label count
    that differs names both counts;
  - names under train/<class>/: no warning when each class holds one label, and the
    warning for a mixed class names the class under tokens/train (escaped: a name
    from the file never reaches the terminal raw);
  - SeiT's codebook.ckpt (a torch.save file) and an .npz: refused in one line saying
    what they are; the conversion the message prints works (its output is accepted);
  - the index file: found by pcrfs's rule (the last "data.bin" of the file name),
    also when a directory is named data.bin.d; when it is only where SeiT's rule
    would look, the message names both files tried and --seit-index;
  - an image of the wrong size: named with its byte range and token count.
"""
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import clitable as ct  # noqa: E402
import mount_util as mu  # noqa: E402


def seit_decode(data):
    """SeiT's reader on one image's bytes (datasets.py, get_data_index_of())."""
    out, add = [], 0
    for b in data:
        if b == 255:
            add = 255
            continue
        out.append(b + add)
        add = 0
    return out


def write_seit(d, images, labels, names=None, eol="\n", index_dir=None):
    """A SeiT release in @d: x-token.data.bin (the byte strings @images), its
    x-token.index.npy (in @index_dir if given), x-label.txt with @eol line ends, and
    x-names.txt when @names."""
    os.makedirs(d, exist_ok=True)
    off = np.cumsum([0] + [len(b) for b in images]).astype("<i8")
    with open(os.path.join(d, "x-token.data.bin"), "wb") as f:
        f.write(b"".join(bytes(b) for b in images))
    idir = index_dir or d
    os.makedirs(idir, exist_ok=True)
    with open(os.path.join(idir, "x-token.index.npy"), "wb") as f:
        np.save(f, off)
    with open(os.path.join(d, "x-label.txt"), "w", newline="") as f:
        f.write("".join("%d%s" % (lab, eol) for lab in labels))
    if names:
        with open(os.path.join(d, "x-names.txt"), "w") as f:
            f.write("".join(n + "\n" for n in names))


def rowdir(ctx, sub=""):
    return os.path.join(ctx["tmp"], "seit-" + re.sub(r"\W+", "-", ctx["case"].name), sub)


def args(d, *extra, names=False):
    a = ["{mkpcrfs}", "-q", "--seit", d + "/x-token.data.bin", "--seit-labels",
         d + "/x-label.txt", "--seit-shape", "2x2"]
    return a + (["--seit-names", d + "/x-names.txt"] if names else []) + list(extra)


# The row directories by name: argv placeholders are plain text, so each row's paths
# are spelled out with {tmp}.
def D(name):
    return "{tmp}/seit-" + re.sub(r"\W+", "-", name)


def setup_release(images, labels, **kw):
    def setup(ctx):
        write_seit(rowdir(ctx), images, labels, **kw)
    return setup


def grids_are(want):
    """check: the row's store serves {rel: SeiT-decoded bytes} as 2x2 grids."""
    def check(ctx, proc):
        store = rowdir(ctx, "out")
        m = mu.Mount(store, ctx["mnt"]).start()
        try:
            for rel, data in want.items():
                got = np.load(os.path.join(ctx["mnt"], "tokens", rel))
                ref = np.array(seit_decode(data), dtype="<u2").reshape(2, 2)
                assert got.dtype == np.dtype("<u2") and np.array_equal(got, ref), \
                    "%s: %s, SeiT reads %s" % (rel, got.tolist(), ref.tolist())
        finally:
            rc = m.unmount()
            m.cleanup()
        assert rc == 0, "pcrfs exited %r: %s" % (rc, m.stderr())
    return check


def torch_ckpt(ctx):
    """SeiT's codebook.ckpt: torch.save() of a [K, D] float tensor."""
    d = rowdir(ctx)
    write_seit(d, [b"\x01\x02\x03\x04"], [0])
    subprocess.run(["/usr/bin/python3", "-c", "import sys, torch; torch.manual_seed(1); "
                    "torch.save(torch.randn(8, 4), sys.argv[1])", d + "/codebook.ckpt"],
                   check=True, timeout=120)


def conversion_works(ctx, proc):
    """The command the message prints turns the checkpoint into a codebook mkpcrfs takes."""
    d = rowdir(ctx)
    err = proc.stderr.decode()
    cmd = err.split("convert it with: ", 1)[1].strip()
    env = dict(os.environ, PATH="/usr/bin:/bin")  # Debian's python3, with torch and numpy
    p = subprocess.run(["sh", "-c", cmd], cwd=d, env=env, capture_output=True, timeout=120)
    assert p.returncode == 0, "the printed conversion failed: %s" % p.stderr.decode()[-500:]
    cb = np.load(os.path.join(d, "codebook.npy"))
    assert cb.shape == (8, 4) and cb.dtype == np.float32 and cb.flags.c_contiguous
    p = subprocess.run([mu.program("MKPCRFS"), "-q", "--seit", d + "/x-token.data.bin",
                        "--seit-labels", d + "/x-label.txt", "--seit-shape", "2x2",
                        "--codebook", d + "/codebook.npy", d + "/out2"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, "the converted codebook is refused: %s" % p.stderr.decode()


def npz_codebook(ctx):
    d = rowdir(ctx)
    write_seit(d, [b"\x01\x02\x03\x04"], [0])
    np.savez(os.path.join(d, "codebook.npz"), np.zeros((8, 4), np.float32))


REPEATED = bytes([255, 255, 1, 255, 7, 0, 9])  # SeiT: 256, 262, 0, 9
TRAILING = bytes([1, 2, 3, 4, 255])  # SeiT: 1, 2, 3, 4
REDUNDANT = bytes([255, 255, 45, 1, 2, 3])  # SeiT: 300, 1, 2, 3
PLAIN = bytes([255, 0, 5, 255, 254, 6])  # SeiT's own two-byte form: 255, 5, 509, 6
TRAIN = ["train/a/x.JPEG", "train/a/y.JPEG", "train/b/z.JPEG"]
FOUR = bytes([1, 2, 3, 4])


def case(name, argv_extra, rc, msg=None, names=False, changes=(), **kw):
    d = D(name)
    return ct.Case(name, args(d, *argv_extra, names=names), rc, msg=msg,
                   changes=[d + "/*"] + list(changes), **kw)


def imported(name, images, labels, want, msg=None, lines=0, **kw):
    """A row that imports (rc 0) and checks the grids against SeiT's reader."""
    setup = setup_release(images, labels, **{k: v for k, v in kw.items()
                                             if k in ("names", "eol")})
    return case(name, [D(name) + "/out"], 0, msg=msg, lines=lines, setup=setup,
                names=bool(kw.get("names")), check=grids_are(want),
                changes=["{mnt}.stderr"])


class SeitImport(ct.CliTable):
    @classmethod
    def make_store(cls):
        pass  # every row writes its own SeiT files; no image store is needed

    CASES = [
        imported("repeated escape read as SeiT does", [REPEATED, PLAIN], [0, 1],
                 {"0/0.tok": REPEATED, "1/0.tok": PLAIN},
                 msg=r"warning: .*x-token\.data\.bin: 1 image \(the first: image 0\) holds a "
                     r"255 byte after a 255; read as SeiT's reader reads them", lines=1),
        imported("trailing 255 dropped as SeiT does", [PLAIN, TRAILING], [0, 1],
                 {"0/0.tok": PLAIN, "1/0.tok": TRAILING},
                 msg=r"1 image \(the first: image 1\) holds a 255 byte at the end", lines=1),
        imported("redundant escape read as SeiT does", [REDUNDANT, TRAILING, FOUR],
                 [0, 0, 1], {"0/0.tok": REDUNDANT, "0/1.tok": TRAILING, "1/0.tok": FOUR},
                 msg=r"2 images \(the first: image 0\) hold a 255 byte after a 255 or a 255 "
                     r"byte at the end", lines=1),
        imported("SeiT's own bytes: no warning", [PLAIN, FOUR], [1, 0],
                 {"1/0.tok": PLAIN, "0/0.tok": FOUR}),
        imported("labels with CR line ends", [PLAIN, FOUR], [1, 0],
                 {"1/0.tok": PLAIN, "0/0.tok": FOUR}, eol="\r"),
        imported("labels with CRLF line ends", [PLAIN, FOUR], [1, 0],
                 {"1/0.tok": PLAIN, "0/0.tok": FOUR}, eol="\r\n"),
        case("label count names both counts", ["{tmp}/nothing"], 1,
             msg=r"x-label\.txt has 3 labels but .*x-token\.index\.npy has 2 images",
             setup=setup_release([FOUR, FOUR], [0, 1, 1])),
        case("label count of a CR file", ["{tmp}/nothing"], 1,
             msg=r"x-label\.txt has 1 label but .*x-token\.index\.npy has 2 images",
             setup=setup_release([FOUR, FOUR], [0], eol="\r")),
        imported("train/ names, a label per class: no warning", [FOUR, PLAIN, FOUR],
                 [0, 0, 1], {"train/a/x.tok": FOUR, "train/a/y.tok": PLAIN,
                             "train/b/z.tok": FOUR}, names=TRAIN),
        imported("train/ names, a mixed class is named", [FOUR, PLAIN, FOUR], [0, 1, 1],
                 {"train/a/x.tok": FOUR, "train/a/y.tok": PLAIN, "train/b/z.tok": FOUR},
                 names=TRAIN, lines=1,
                 msg=r"x-names\.txt: 1 class directory under tokens/train holds images of "
                     r"several labels \(the first: 'a'\)"),
        imported("train/ names, classes out of label order", [FOUR, PLAIN, FOUR], [1, 1, 0],
                 {"train/a/x.tok": FOUR, "train/a/y.tok": PLAIN, "train/b/z.tok": FOUR},
                 names=TRAIN, lines=1,
                 msg=r"numbers classes by directory name under tokens/train: 'a' is class 0 "
                     r"but has SeiT label 1 \(2 classes differ\)"),
        imported("a class name with an escape sequence is escaped", [FOUR, PLAIN, FOUR],
                 [0, 1, 1], {"train/\x1b[31m/x.tok": FOUR, "train/\x1b[31m/y.tok": PLAIN,
                             "train/b/z.tok": FOUR},
                 names=["train/\x1b[31m/x.JPEG", "train/\x1b[31m/y.JPEG", "train/b/z.JPEG"],
                 lines=1, msg=r"under tokens/train holds images of several labels \(the "
                              r"first: '\\x1b\[31m'\)"),
        case("SeiT's codebook.ckpt refused with the conversion",
             ["--codebook", D("SeiT's codebook.ckpt refused with the conversion") +
              "/codebook.ckpt", "{tmp}/nothing"], 1,
             msg=r"--codebook .*codebook\.ckpt: a PyTorch file \(torch\.save\), not a \.npy "
                 r"file; convert it with: python3 -c '.*numpy\.save.*' .*codebook\.ckpt "
                 r"codebook\.npy$", setup=torch_ckpt, check=conversion_works, timeout=60),
        case("an .npz codebook refused",
             ["--codebook", D("an .npz codebook refused") + "/codebook.npz", "{tmp}/nothing"],
             1, msg=r"codebook\.npz: a NumPy \.npz archive, not a \.npy file",
             setup=npz_codebook),
        ct.Case("index beside DATA in a data.bin.d directory",
                ["{mkpcrfs}", "-q", "--seit", D("idx1") + "/data.bin.d/x-token.data.bin",
                 "--seit-labels", D("idx1") + "/data.bin.d/x-label.txt", "--seit-shape",
                 "2x2", D("idx1") + "/out"], 0, lines=0,
                setup=lambda ctx: write_seit(os.path.join(ctx["tmp"], "seit-idx1",
                                                          "data.bin.d"), [FOUR], [0]),
                changes=[D("idx1") + "/*"]),
        ct.Case("index only where SeiT's rule looks",
                ["{mkpcrfs}", "-q", "--seit", D("idx2") + "/data.bin.d/x-token.data.bin",
                 "--seit-labels", D("idx2") + "/data.bin.d/x-label.txt", "--seit-shape",
                 "2x2", "{tmp}/nothing"], 1,
                msg=r"no index file beside .*/data\.bin\.d/x-token\.data\.bin \(tried "
                    r".*/data\.bin\.d/x-token\.index\.npy and .*\.gz\); name it with "
                    r"--seit-index$",
                setup=lambda ctx: write_seit(
                    os.path.join(ctx["tmp"], "seit-idx2", "data.bin.d"), [FOUR], [0],
                    index_dir=os.path.join(ctx["tmp"], "seit-idx2", "index.npy.d"))),
        ct.Case("no data.bin in DATA's name: --seit-index named",
                ["{mkpcrfs}", "-q", "--seit", D("idx3") + "/tokens.bin", "--seit-labels",
                 D("idx3") + "/x-label.txt", "--seit-shape", "2x2", "{tmp}/nothing"], 1,
                msg=r"tokens\.bin: no 'data\.bin' in the name to derive the index file from; "
                    r"name it with --seit-index$",
                setup=lambda ctx: (write_seit(os.path.join(ctx["tmp"], "seit-idx3"), [FOUR], [0]),
                                   os.rename(os.path.join(ctx["tmp"], "seit-idx3",
                                                          "x-token.data.bin"),
                                             os.path.join(ctx["tmp"], "seit-idx3", "tokens.bin")))),
        case("an image of the wrong size is named", ["{tmp}/nothing"], 1, lines=2,
             msg=r"image 0 \(label 0, bytes 0\.\.5\): decodes to 5 tokens, expected 2x2 = 4",
             setup=setup_release([bytes([1, 2, 3, 4, 5]), FOUR], [0, 1])),
    ]


if __name__ == "__main__":
    ct.main()
