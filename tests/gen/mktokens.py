#!/usr/bin/python3
"""Generate token-grid test data for pcrfs (SeiT-style tokens, pcrfs(1) tokens).

Real tokenizer output is not available offline, so this makes grids with the
properties that matter to the codec and the importers:

- spatially correlated: each grid is cut into a few Voronoi regions, each with a
  small palette of tokens, and cells often continue their left or upper neighbour
  (flat areas, textures), which is what a dictionary coder can exploit;
- Zipf-like global frequencies over a shuffled codebook (so frequent ids are not
  simply the small ones and the re-indexing has work to do);
- ids >= 255 present (SeiT's two-byte escape); the first grid always holds 255 and
  K-1;
- codebook sizes such as 391 (SeiT) and 8192 (the .npy commands; SeiT's format holds
  ids 0..509 only, so `seit` refuses K > 510), grids 16x16 or 32x32 (any HxW).

Everything is deterministic for a given --seed.

Commands:
  tree SRC OUT        a per-image .npy tree mirroring the image tree SRC
                      (every regular file SRC/a/b.JPEG -> OUT/a/b.npy)
  classes OUT         a standalone tree OUT/cNNN/imgNNNNNN.npy (--classes, --per-class)
  seit OUT            SeiT's release format: PREFIX-token.data.bin[.gz],
                      PREFIX-token.index.npy[.gz], PREFIX-label.txt and, with
                      --names, PREFIX-names.txt; --tree DIR also writes every grid as
                      DIR/<name>.npy (name with its extension replaced), so the two
                      import paths can be checked against each other
  codebook OUT.npy    a [K, D] float32 codebook
  npyref OUT          numpy.save() files of (H, W) uint16 grids for the byte-for-byte
                      test of pcrfs's .npy writer (values: see ref_grid())
"""
import argparse
import gzip
import os
import sys

import numpy as np


def zipf_probs(k, s):
    p = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** s
    return p / p.sum()


def gen_grids(n, h, w, k, rng, zipf=0.75, regions=(3, 9), palette=16, local=1.1,
              copy=0.35, noise=0.08, batch=512):
    """Return an (n, h, w) uint16 array of token ids in [0, k)."""
    perm = rng.permutation(k)              # rank -> token id
    p = zipf_probs(k, zipf)
    q = zipf_probs(palette, local)
    out = np.empty((n, h, w), dtype=np.int64)
    yy, xx = np.mgrid[0:h, 0:w]
    for b0 in range(0, n, batch):
        m = min(batch, n - b0)
        nreg = rng.integers(regions[0], regions[1] + 1, size=m)
        maxr = regions[1]
        cy = rng.uniform(0, h, size=(m, maxr))
        cx = rng.uniform(0, w, size=(m, maxr))
        d = ((yy[None, :, :, None] - cy[:, None, None, :]) ** 2
             + (xx[None, :, :, None] - cx[:, None, None, :]) ** 2)
        d = np.where(np.arange(maxr)[None, None, None, :] >= nreg[:, None, None, None],
                     np.inf, d)
        region = d.argmin(axis=3)                                   # (m, h, w)
        pal = rng.choice(k, size=(m, maxr, palette), p=p)           # ranks
        pick = rng.choice(palette, size=(m, h, w), p=q)
        tok = pal[np.arange(m)[:, None, None], region, pick]
        wild = rng.random((m, h, w)) < noise
        tok[wild] = rng.choice(k, size=int(wild.sum()), p=p)
        # Continue the left or upper neighbour: raster order, vectorised over grids.
        for y in range(h):
            for x in range(w):
                if x == 0 and y == 0:
                    continue
                c = rng.random(m) < copy
                up = rng.random(m) < 0.5
                if x == 0:
                    src = tok[:, y - 1, x]
                elif y == 0:
                    src = tok[:, y, x - 1]
                else:
                    src = np.where(up, tok[:, y - 1, x], tok[:, y, x - 1])
                tok[c, y, x] = src[c]
        out[b0:b0 + m] = perm[tok]
    if n and k > 255:
        out[0, 0, 0] = 255
        out[0, 0, w - 1 if w > 1 else 0] = k - 1
    return out.astype(np.uint16)


def escape_encode(grid):
    """SeiT's escape byte code (its reader knows no form for ids >= 510)."""
    v = grid.reshape(-1).astype(np.int64)
    out = bytearray()
    for x in v.tolist():
        if x < 255:
            out.append(x)
        elif x < 510:
            out += bytes((255, x - 255))
        else:
            raise ValueError(f"id {x}: SeiT's format holds ids 0..509")
    return bytes(out)


def write_npy(path, arr, gz=False):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if gz:
        with gzip.open(path, "wb", compresslevel=6) as f:
            np.save(f, arr)
    else:
        np.save(path, arr)


def parse_shape(s):
    if "x" in s:
        h, w = s.split("x")
        return int(h), int(w)
    return int(s), int(s)


def ref_grid(h, w):
    """Values the C test recomputes: 0 and 65535 included."""
    i = np.arange(h * w, dtype=np.int64)
    v = (i * 7919 + h * 31 + w) % 65536
    v[0] = 65535
    if h * w > 1:
        v[1] = 0
    return v.astype(np.uint16).reshape(h, w)


def knobs(a):
    return dict(zipf=a.zipf, copy=a.copy, noise=a.noise)


def cmd_tree(a, rng):
    files = []
    for root, dirs, names in os.walk(a.src):
        dirs.sort()
        for nm in sorted(names):
            p = os.path.join(root, nm)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append(os.path.relpath(p, a.src))
    h, w = parse_shape(a.grid)
    grids = gen_grids(len(files), h, w, a.codebook_size, rng, **knobs(a))
    for rel, g in zip(files, grids):
        write_npy(os.path.join(a.out, os.path.splitext(rel)[0] + ".npy"), g.astype(a.dtype))
    print(f"{len(files)} grids {h}x{w} (K={a.codebook_size}) under {a.out}")


def cmd_classes(a, rng):
    h, w = parse_shape(a.grid)
    n = a.classes * a.per_class
    grids = gen_grids(n, h, w, a.codebook_size, rng, **knobs(a))
    for i, g in enumerate(grids):
        c, j = divmod(i, a.per_class)
        write_npy(os.path.join(a.out, f"c{c:03d}", f"img{j:06d}.npy"), g.astype(a.dtype))
    print(f"{n} grids {h}x{w} (K={a.codebook_size}) under {a.out}")


def cmd_seit(a, rng):
    if a.codebook_size > 510:
        sys.exit("mktokens.py: seit: -k %d: SeiT's format holds ids 0..509 (-k 510 at most)"
                 % a.codebook_size)
    h, w = parse_shape(a.grid)
    grids = gen_grids(a.n, h, w, a.codebook_size, rng, **knobs(a))
    labels = rng.integers(0, a.classes, size=a.n)
    blobs = [escape_encode(g) for g in grids]
    offs = np.zeros(a.n + 1, dtype=np.int64)
    offs[1:] = np.cumsum([len(b) for b in blobs])
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, a.prefix)
    gz = ".gz" if a.gzip else ""
    data = b"".join(blobs)
    if a.gzip:
        with gzip.open(f"{base}-token.data.bin.gz", "wb", compresslevel=6) as f:
            f.write(data)
    else:
        with open(f"{base}-token.data.bin", "wb") as f:
            f.write(data)
    write_npy(f"{base}-token.index.npy{gz}", offs, gz=a.gzip)
    with open(f"{base}-label.txt", "w") as f:
        f.writelines(f"{int(x)}\n" for x in labels)
    names = [f"c{int(l):03d}/img_{i:06d}.JPEG" for i, l in enumerate(labels)]
    if a.names:
        with open(f"{base}-names.txt", "w") as f:
            f.writelines(nm + "\n" for nm in names)
    if a.tree:
        for nm, g in zip(names, grids):
            write_npy(os.path.join(a.tree, os.path.splitext(nm)[0] + ".npy"), g)
    print(f"{a.n} grids {h}x{w} (K={a.codebook_size}), {len(data)} escape bytes "
          f"({len(data) / max(a.n, 1):.1f} B/image) -> {base}-token.data.bin{gz}")


def cmd_codebook(a, rng):
    cb = rng.standard_normal((a.codebook_size, a.dim)).astype(np.float32)
    write_npy(a.out, cb)
    print(f"codebook [{a.codebook_size}, {a.dim}] float32 -> {a.out}")


REF_SHAPES = [(1, 1), (1, 7), (7, 1), (2, 3), (16, 16), (32, 32), (13, 1000), (999, 9),
              (1000, 1000), (4096, 1), (1, 4096), (4096, 2)]


def cmd_npyref(a, rng):
    os.makedirs(a.out, exist_ok=True)
    for h, w in REF_SHAPES:
        np.save(os.path.join(a.out, f"ref_{h}x{w}.npy"), ref_grid(h, w))
    print(f"{len(REF_SHAPES)} reference files under {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--codebook-size", "-k", type=int, default=391)
    ap.add_argument("--grid", default="32", help="N for NxN, or HxW")
    ap.add_argument("--zipf", type=float, default=0.75, help="global Zipf exponent")
    ap.add_argument("--copy", type=float, default=0.35,
                    help="probability that a cell continues its left/upper neighbour")
    ap.add_argument("--noise", type=float, default=0.08,
                    help="probability of a token drawn from the global distribution "
                         "instead of the region's palette")
    ap.add_argument("--dtype", default="<u2",
                    help="dtype of per-image .npy files (tree, classes)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tree")
    p.add_argument("src")
    p.add_argument("out")
    p = sub.add_parser("classes")
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--per-class", type=int, default=20)
    p = sub.add_parser("seit")
    p.add_argument("out")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--prefix", default="gen-train")
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--names", action="store_true")
    p.add_argument("--tree", help="also write each grid as TREE/<name>.npy")
    p = sub.add_parser("codebook")
    p.add_argument("out")
    p.add_argument("--dim", type=int, default=32)
    p = sub.add_parser("npyref")
    p.add_argument("out")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    {"tree": cmd_tree, "classes": cmd_classes, "seit": cmd_seit, "codebook": cmd_codebook,
     "npyref": cmd_npyref}[a.cmd](a, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
