#!/usr/bin/python3
"""Generate JPEGs that carry data after their EOI, or markers where few expect them.

    mkodd.py --out DIR [--seed S] [--manifest PATH]

DIR/odd/ holds, each deterministic for a seed (same Pillow and libjpeg-turbo):
  mpo.jpg              a 2-frame MPO written by Pillow (MPF APP2, little-endian II):
                       frame 2 lies after the primary's EOI
  ultrahdr.jpg         Ultra-HDR-like: primary with XMP (hdrgm, GContainer Item:Length
                       of the gain map) and an MPF APP2 (big-endian MM), then a small
                       grayscale gain-map JPEG after the EOI, built by hand
  afcp.jpg             an AFCP-like trailer (IPTC record, "AXS!" header) after the EOI
  fotostation.jpg      a FotoStation-style trailer (0xA1B2C3D4 blocks)
  photomechanic.jpg    a PhotoMechanic-style trailer (IPTC, "cbipcbbl" signature)
  gray_trailer.jpg     a grayscale JPEG (6 scans) with a trailer: levels 6..L-1 are
                       complete images without it
  icc_after_sof.jpg    an ICC APP2 spliced in after SOF0 (libjpeg-turbo's and Pillow's
                       "icc-after-SOF" case)
  mpo_primary_only.jpg the MPO cut at the primary's EOI: MPF present, no trailer
  bad_mpf.jpg          the MPO with frame 2's MPF offset pointing into the primary:
                       an index we cannot rewrite, so the builder keeps it verbatim

The manifest (JSON, default DIR/../odd-manifest.json) lists each file with "expect"
("jpeg" or "verbatim"), "trailer" (bytes after the first EOI), "frames" (images a
multi-picture reader should find), and for the ICC case the profile ("icc_hex"), for
Ultra HDR the gain map's length ("gainmap_len").
"""

import argparse
import io
import json
import os
import struct
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mkdataset import Tree, jpeg_bytes, markers, minimal_icc, rng_for, synth  # noqa: E402

XMP_NS = b"http://ns.adobe.com/xap/1.0/\0"


def die(msg):
    sys.stderr.write("mkodd: %s\n" % msg)
    sys.exit(1)


def segment(marker, payload):
    if len(payload) + 2 > 0xFFFF:
        die("segment too long")
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def after_app0(data):
    """Offset just past a leading JFIF APP0 (or 2, past SOI)."""
    ms = markers(data)
    if ms and ms[0][0] == 0xE0:
        return ms[0][2] + ms[0][3]
    return 2


def mpf_payload(order, entries):
    """"MPF\\0" + TIFF: MPFVersion, NumberOfImages and MP Entry, in byte order
    @order ("<" II or ">" MM). @entries: (attribute, size, offset) per image."""
    n = len(entries)
    e = order
    tiff = (b"II*\0" if order == "<" else b"MM\0*") + struct.pack(e + "I", 8)
    ifd = struct.pack(e + "H", 3)
    ifd += struct.pack(e + "HHI", 0xB000, 7, 4) + b"0100"
    ifd += struct.pack(e + "HHII", 0xB001, 4, 1, n)
    ifd += struct.pack(e + "HHII", 0xB002, 7, 16 * n, 8 + 2 + 36 + 4)
    ifd += struct.pack(e + "I", 0)
    body = b"".join(struct.pack(e + "IIIHH", a, s, o, 0, 0) for a, s, o in entries)
    return b"MPF\0" + tiff + ifd + body


def ultrahdr(primary, gainmap):
    """Primary (a JPEG) + XMP + MPF (MM), then @gainmap after its EOI."""
    gl = len(gainmap)
    xmp = ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
           'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
           'xmlns:Container="http://ns.google.com/photos/1.0/container/" '
           'xmlns:Item="http://ns.google.com/photos/1.0/container/item/" '
           'xmlns:hdrgm="http://ns.adobe.com/hdr-gain-map/1.0/" hdrgm:Version="1.0">'
           '<Container:Directory><rdf:Seq>'
           '<rdf:li rdf:parseType="Resource"><Container:Item Item:Semantic="Primary" '
           'Item:Mime="image/jpeg"/></rdf:li>'
           '<rdf:li rdf:parseType="Resource"><Container:Item Item:Semantic="GainMap" '
           'Item:Mime="image/jpeg" Item:Length="%d"/></rdf:li>'
           '</rdf:Seq></Container:Directory></rdf:Description></rdf:RDF></x:xmpmeta>' % gl)
    app1 = segment(0xE1, XMP_NS + xmp.encode())
    # The MPF segment's length does not depend on its values: place it, then fill in.
    at = after_app0(primary)
    dummy = segment(0xE2, mpf_payload(">", [(0, 0, 0), (0, 0, 0)]))
    plen = len(primary) + len(app1) + len(dummy)
    tiff = at + len(app1) + 4 + 4  # FF E2 len "MPF\0"
    mpf = segment(0xE2, mpf_payload(">", [(0x20030000, plen, 0), (0, gl, plen - tiff)]))
    out = primary[:at] + app1 + mpf + primary[at:]
    assert len(out) == plen
    return out + gainmap


def gainmap_jpeg(rng, w, h):
    """A small grayscale JPEG with the gain map's own hdrgm XMP."""
    a = np.clip(rng.normal(128, 40, size=(h, w)), 0, 255).astype(np.uint8)
    g = jpeg_bytes(Image.fromarray(a, "L"), quality=85)
    xmp = ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
           'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
           'xmlns:hdrgm="http://ns.adobe.com/hdr-gain-map/1.0/" hdrgm:Version="1.0" '
           'hdrgm:GainMapMax="2.3" hdrgm:HDRCapacityMax="2.3"/></rdf:RDF></x:xmpmeta>')
    at = after_app0(g)
    return g[:at] + segment(0xE1, XMP_NS + xmp.encode()) + g[at:]


def afcp_trailer():
    """AFCP-like: an IPTC IIM record in an entry, then the "AXS!" header."""
    iptc = b"\x1c\x02\x00\x00\x02\x00\x04" + b"\x1c\x02\x78" + struct.pack(">H", 21) + \
        b"caption kept by pcrfs"
    body = b"IPTC" + struct.pack(">II", len(iptc), 0) + iptc
    return body + b"AXS!" + struct.pack(">HHI", 1, 1, len(body) + 12)


def fotostation_trailer():
    """FotoStation-style: blocks of 0xA1B2C3D4, length, tag, data."""
    out = b""
    for tag, data in ((1, b"\x1c\x02\x05\x00\x0bpcrfs title"), (4, b"\x00" * 16)):
        out += struct.pack(">IIH", 0xA1B2C3D4, 10 + len(data), tag) + data
    return out


def photomechanic_trailer():
    """PhotoMechanic-style: IPTC-like fields, then size and the "cbipcbbl" signature."""
    body = b"".join(struct.pack(">iii", t, 4, v) for t, v in ((209, 2), (210, 1), (221, 5)))
    return body + struct.pack(">I", len(body)) + b"cbipcbbl"


def icc_after_sof(data, profile):
    """@data with an ICC APP2 (one chunk) inserted right after its SOF0 segment."""
    for m, pos, payload, ln in markers(data):
        if m == 0xC0:
            end = payload + ln
            return data[:end] + segment(0xE2, b"ICC_PROFILE\0\x01\x01" + profile) + data[end:]
    die("no SOF0 in generated JPEG")


def primary_end(data):
    """Offset one past the first image's EOI (walks the markers and scan data)."""
    pos = 2
    while True:
        if data[pos] != 0xFF:
            die("bad JPEG structure")
        m = data[pos + 1]
        if m == 0xD9:
            return pos + 2
        ln = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        pos += 2 + ln
        if m == 0xDA:
            while not (data[pos] == 0xFF and data[pos + 1] != 0 and
                       not 0xD0 <= data[pos + 1] <= 0xD7):
                pos += 1


def gen(tree, seed):
    f1 = synth(rng_for(seed, 77, 1), 160, 120)
    f2 = synth(rng_for(seed, 77, 2), 160, 120)
    buf = io.BytesIO()
    f1.save(buf, format="MPO", save_all=True, append_images=[f2], quality=90)
    mpo = buf.getvalue()
    pe = primary_end(mpo)
    if len(mpo) <= pe or mpo[pe:pe + 2] != b"\xff\xd8":
        die("Pillow's MPO has no second frame after the primary")
    tree.write(b"odd/mpo.jpg", mpo, "jpeg", "MPO, 2 frames, MPF II", trailer=len(mpo) - pe,
               frames=2)
    tree.write(b"odd/mpo_primary_only.jpg", mpo[:pe], "jpeg",
               "MPO cut at the primary's EOI: MPF, no trailer", trailer=0, frames=1)

    # frame 2's offset now points into the primary: not rewritable -> verbatim
    bad = bytearray(mpo)
    t = bytes(bad).find(b"MPF\0") + 4
    if bad[t:t + 2] != b"II":
        die("Pillow's MPF is not little-endian as expected")
    ifd = struct.unpack_from("<I", bad, t + 4)[0]
    for i in range(struct.unpack_from("<H", bad, t + ifd)[0]):
        e = t + ifd + 2 + 12 * i
        tag, typ, cnt, off = struct.unpack_from("<HHII", bad, e)
        if tag == 0xB002:
            struct.pack_into("<I", bad, t + off + 16 + 8, 16)
    tree.write(b"odd/bad_mpf.jpg", bytes(bad), "verbatim",
               "MPF offset pointing into the primary", trailer=len(mpo) - pe, frames=2)

    prim = jpeg_bytes(synth(rng_for(seed, 77, 3), 144, 96), quality=90)
    gm = gainmap_jpeg(rng_for(seed, 77, 4), 36, 24)
    uh = ultrahdr(prim, gm)
    tree.write(b"odd/ultrahdr.jpg", uh, "jpeg", "Ultra-HDR-like: MPF MM + GContainer XMP",
               trailer=len(gm), frames=2, gainmap_len=len(gm))

    for name, tr, why in ((b"afcp", afcp_trailer(), "AFCP-like trailer"),
                          (b"fotostation", fotostation_trailer(), "FotoStation-style trailer"),
                          (b"photomechanic", photomechanic_trailer(),
                           "PhotoMechanic-style trailer")):
        base = jpeg_bytes(synth(rng_for(seed, 77, 5, len(name)), 120, 90), quality=88)
        tree.write(b"odd/" + name + b".jpg", base + tr, "jpeg", why, trailer=len(tr), frames=1)

    gray = jpeg_bytes(synth(rng_for(seed, 77, 6), 100, 80).convert("L"), quality=90)
    tr = b"\x00" * 5 + photomechanic_trailer()
    tree.write(b"odd/gray_trailer.jpg", gray + tr, "jpeg", "grayscale with a trailer",
               trailer=len(tr), frames=1, nscans=6)

    icc = minimal_icc()
    base = jpeg_bytes(synth(rng_for(seed, 77, 7), 96, 64), quality=90)
    tree.write(b"odd/icc_after_sof.jpg", icc_after_sof(base, icc), "jpeg",
               "ICC APP2 after SOF0", trailer=0, frames=1, icc_hex=icc.hex())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to create (must not exist)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--manifest", help="default DIR/../odd-manifest.json")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    if os.path.lexists(out):
        die("%s exists" % out)
    os.makedirs(out)
    tree = Tree(out)
    tree.mkdir(b"odd")
    gen(tree, args.seed)
    manifest = args.manifest or os.path.join(os.path.dirname(out), "odd-manifest.json")
    doc = {"generator": "pcrfs tests/gen/mkodd.py", "seed": args.seed,
           "entries": sorted(tree.entries, key=lambda e: bytes.fromhex(e["path_hex"]))}
    with open(manifest, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("mkodd: %d files in %s, manifest %s" % (len(tree.entries) - 1, out, manifest))


if __name__ == "__main__":
    main()
