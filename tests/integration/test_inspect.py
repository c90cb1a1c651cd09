#!/usr/bin/python3
"""The library's inspection calls (pcrfs(3), INSPECTING A STORE), called directly
through ctypes, and pcrinfo(1) as their client. No mount.

What each test asserts, and would be false if the feature broke:
- pcrfs_summary(): the JSON counts what the tree holds (files, JPEGs, verbatim
  files, levels), a threshold adds its row only to a store with a quality table
  (`measured` says which), text and JSON are what pcrinfo prints byte for byte,
  and a threshold out of (0, 1] or a bad flag is refused;
- pcrfs_file_next(): one row per stored file, image files then tokens/, in file-id
  order; each JPEG's level_size[K-1] is the size of scanK/PATH, a token file's the
  size of tokens/PATH; pcrfs_file_facts() by any view's path gives the same facts;
  a short path buffer gives ENAMETOOLONG without moving on; pcrinfo --list is these
  rows;
- pcrfs_verify(): a sound store has no failure and decodes every JPEG; flipping a
  byte in the middle of the first record makes files of that record, and only
  those, fail, with EBADMSG and the first failure in pcrfs_errmsg() as the
  callback heard it, every other file still checked; a callback that returns
  nonzero stops it with ECANCELED; pcrinfo --verify prints a FAILED line for each;
- pcrfs_fidelity(): the JSON's table has one row per level, the top one at MS-SSIM
  1, the sample as asked, the same MS-SSIM and bytes with 1 and 2 threads (one
  seeded sample), a different sample with another seed; the progress callback ends
  with done == total and final; a threshold above 1 is refused (EINVAL).
"""

import ctypes
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# test_library finds the build's libpcrfs.so and the module pcrfs (PCRFS_LIB)
from test_library import make_stores, mu, pcrfs  # noqa: E402
from pcrfs import store as pstore  # noqa: E402

U32, U64, P = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p

PROGRESS_FN = ctypes.CFUNCTYPE(None, U64, U64, U64, U64, ctypes.c_int, P)
FAILURE_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, U64, ctypes.c_uint, ctypes.c_char_p, P)


class FidelityArgs(ctypes.Structure):
    _fields_ = [("size", U32), ("flags", U32), ("sample", U64), ("seed", U64),
                ("threshold", ctypes.c_double), ("jobs", U32), ("reserved", U32),
                ("progress", PROGRESS_FN), ("failure", FAILURE_FN), ("ctx", P),
                ("failures", U64)]


def lib():
    L = pstore._load()
    L.pcrfs_file_next.argtypes = [P, ctypes.POINTER(U64), ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.POINTER(pstore._Facts)]
    L.pcrfs_fidelity.argtypes = [P, ctypes.POINTER(FidelityArgs), ctypes.POINTER(P)]
    L.pcrfs_fidelity.restype = ctypes.c_ssize_t
    return L


def take(p, n):
    try:
        return ctypes.string_at(p, n)
    finally:
        pstore._libc_free(p.value)


def summary(st, flags, thresholds=()):
    t = (ctypes.c_double * max(1, len(thresholds)))(*thresholds)
    a = pstore._SummaryArgs(size=ctypes.sizeof(pstore._SummaryArgs), flags=flags, thresholds=t,
                            nthresholds=len(thresholds))
    p = P()
    n = lib().pcrfs_summary(st._handle(), ctypes.byref(a), ctypes.byref(p))
    return n, (take(p, n) if n >= 0 else None), a.measured


def files(st):
    """[(path bytes, facts)] through pcrfs_file_next()."""
    out, pos = [], U64(0)
    buf = ctypes.create_string_buffer(4096)
    for _ in range(100000):
        f = pstore._Facts(size=ctypes.sizeof(pstore._Facts))
        rc = lib().pcrfs_file_next(st._handle(), ctypes.byref(pos), buf, len(buf), ctypes.byref(f))
        if rc == 0:
            return out
        assert rc == 1, rc
        out.append((buf.value, f))
    raise AssertionError("pcrfs_file_next() never ended")


def fidelity(st, sample, seed, jobs, threshold=0.95):
    calls = []
    a = FidelityArgs(size=ctypes.sizeof(FidelityArgs), flags=1, sample=sample, seed=seed,
                     threshold=threshold, jobs=jobs,
                     progress=PROGRESS_FN(lambda d, t, db, tb, fin, c: calls.append((d, t, fin))),
                     failure=FAILURE_FN(lambda *args: None))
    p = P()
    n = lib().pcrfs_fidelity(st._handle(), ctypes.byref(a), ctypes.byref(p))
    if n < 0:
        return n, None, calls
    return n, json.loads(take(p, n)), calls


def count_files(st, d):
    n = 0
    for name, isdir in st.scandir(d):
        n += count_files(st, d + "/" + name) if isdir else 1
    return n


class InspectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-inspect-")
        make_stores(cls, awkward=True)  # verbatim files beside the JPEGs
        cls.pcrinfo = mu.program("PCRINFO")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def pcrinfo_out(self, *args):
        r = subprocess.run([self.pcrinfo, *args], capture_output=True, timeout=300)
        return r.returncode, r.stdout

    def test_summary(self):
        with pcrfs.Store(self.store) as st:
            nsrc = count_files(st, "full")  # the tree a mount shows, by listing
            n, js, measured = summary(st, 1)
            self.assertGreater(n, 0)
            doc = json.loads(js)
            self.assertEqual(doc["levels"], st.levels())
            self.assertEqual(doc["files"], nsrc)
            self.assertEqual(doc["jpeg"] + doc["verbatim"], nsrc)
            self.assertGreater(doc["verbatim"], 0)  # the awkward files
            self.assertEqual(len(doc["verbatim_files"]), doc["verbatim"])
            self.assertEqual(measured, 0)
            self.assertEqual(st.summary(), doc)
            # pcrinfo prints exactly this, text and JSON
            self.assertEqual(self.pcrinfo_out("--json", self.store), (0, js))
            n, text, _ = summary(st, 0)
            self.assertTrue(text.startswith(b"store         " + self.store.encode()))
            self.assertEqual(self.pcrinfo_out(self.store), (0, text))
            # refused: a threshold out of (0, 1], an unknown flag
            self.assertEqual(summary(st, 1, (1.5,))[0], -errno.EINVAL)
            self.assertEqual(summary(st, 0x80)[0], -errno.EINVAL)
        with pcrfs.Store(self.store_qt) as st:
            n, js, measured = summary(st, 1, (0.97,))
            doc = json.loads(js)
            self.assertEqual(measured, doc["quality"]["measured"])
            self.assertGreater(measured, 0)
            self.assertIn(0.97, [t["threshold"] for t in doc["quality"]["thresholds"]])
            self.assertEqual(doc["tokens"]["grids"], sum(1 for p, _ in files(st)
                                                         if p.startswith(b"tokens/")))
            n, text, _ = summary(st, 0, (0.97,))
            self.assertEqual(self.pcrinfo_out("--threshold", "0.97", self.store_qt), (0, text))

    def test_file_next_and_facts(self):
        for store in (self.store, self.store_qt):
            with pcrfs.Store(store) as st:
                rows = files(st)
                img = [r for r in rows if not r[0].startswith(b"tokens/")]
                tok = [r for r in rows if r[0].startswith(b"tokens/")]
                # image files first, by file id; then the token files
                self.assertEqual(rows, img + tok)
                self.assertEqual([f.file_id for _, f in img], list(range(1, len(img) + 1)))
                self.assertEqual(len(img), st.summary()["files"])
                L = st.levels()
                for path, f in img:
                    self.assertEqual(f.levels, L)
                    if f.kind == 1:  # a JPEG: its dimensions, more bytes per level
                        self.assertGreater(f.width * f.height, 0, path)
                        self.assertLess(f.level_size[0], f.level_size[L - 1], path)
                    else:  # verbatim: one chunk, the same bytes at every level
                        self.assertEqual((f.kind, f.chunks, f.width), (2, 1, 0), path)
                        self.assertEqual(len(set(f.level_size[:L])), 1, path)
                    for k in (1, L):
                        self.assertEqual(f.level_size[k - 1],
                                         st.size(b"scan%d/" % k + path), (path, k))
                    d = st.facts(b"scan2/" + path)
                    self.assertEqual(d["file_id"], f.file_id)
                    self.assertEqual(d["level_size"], list(f.level_size[:L]))
                    self.assertEqual(d["record"], st.record(b"full/" + path))
                for path, f in tok:
                    self.assertEqual(f.kind, 3)
                    self.assertEqual(f.level_size[f.levels - 1], st.size(path))
                    self.assertEqual(st.facts(path)["kind"], "tokens")
                if store == self.store_qt:
                    self.assertGreater(len(tok), 0)
                # a buffer too short: ENAMETOOLONG, the position unchanged
                pos = U64(0)
                f = pstore._Facts(size=ctypes.sizeof(pstore._Facts))
                buf = ctypes.create_string_buffer(3)
                rc = lib().pcrfs_file_next(st._handle(), ctypes.byref(pos), buf, 3,
                                           ctypes.byref(f))
                self.assertEqual((rc, pos.value), (-errno.ENAMETOOLONG, 0))
            # pcrinfo --list is these rows
            rc, out = self.pcrinfo_out("--list", store)
            self.assertEqual(rc, 0)
            lines = out.decode("utf-8", "surrogateescape").splitlines()
            self.assertEqual(len(lines), len(rows))
            for line, (path, f) in zip(lines, rows):
                sizes = " ".join(str(f.level_size[k]) for k in range(f.levels))
                self.assertTrue(line.endswith("\t%u\t%s" % (f.chunks, sizes)), line)

    def test_verify(self):
        with pcrfs.Store(self.store_qt) as st:
            r = st.verify()
            doc = st.summary()
            self.assertEqual((r["failures"], r["failed"]), (0, []))
            self.assertEqual(r["files"], doc["files"])
            self.assertEqual(r["decoded"], doc["jpeg"])
            self.assertEqual(r["token_files"], doc["tokens"]["grids"])
            self.assertTrue(r["tokens"])
            self.assertEqual(r["level"], st.levels())
            # a callback that stops it
            with self.assertRaises(OSError) as cm:
                st.verify(progress=lambda done, total: 1 / 0)
            self.assertEqual(cm.exception.errno, errno.ECANCELED)
            before = r
            recs = {p: f.record for p, f in files(st)}
            kinds = {p: f.kind for p, f in files(st)}
        bad = os.path.join(self.tmp, "bad")
        shutil.copytree(self.store_qt, bad)
        try:
            # flip a byte in the middle of the first record: the files of that record
            # fail, and only those
            rec = os.path.join(bad, "records", sorted(os.listdir(os.path.join(bad, "records")))[0])
            size = os.path.getsize(rec)
            with open(rec, "r+b") as fh:
                fh.seek(size // 2)
                b = fh.read(1)
                fh.seek(size // 2)
                fh.write(bytes([b[0] ^ 0x55]))
            with pcrfs.Store(bad) as st:
                r = st.verify()
                self.assertGreater(r["failures"], 0)
                self.assertEqual(r["files"], before["files"])  # every file still checked
                self.assertEqual(r["decoded"], before["decoded"] -
                                 sum(kinds[p] == 1 for p, _ in r["failed"]))
                self.assertEqual({recs[p] for p, _ in r["failed"]}, {1}, r["failed"])
                first = r["failed"][0]
                rc = pstore._load().pcrfs_verify(st._handle(), pstore._VERIFY_FN(lambda *a: 0),
                                                 None, None)
                self.assertEqual(rc, -errno.EBADMSG)
                self.assertEqual(pstore._load().pcrfs_errmsg(),
                                 first[0] + b": " + first[1].encode())
            rc, out = self.pcrinfo_out("--verify", bad)
            self.assertEqual(rc, 1)
            self.assertEqual(out.count(b"FAILED "), r["failures"])
        finally:
            shutil.rmtree(bad, ignore_errors=True)

    def test_fidelity(self):
        with pcrfs.Store(self.store) as st:
            n1, a, calls = fidelity(st, 6, 3, 1)
            self.assertGreater(n1, 0)
            L = st.levels()
            self.assertEqual(a["levels"], L)
            self.assertEqual(a["sample"], 6)
            self.assertEqual(len(a["table"]), L)
            self.assertEqual(a["table"][-1]["msssim"], 1.0)
            self.assertTrue(1 <= a["recommended"] <= L)
            self.assertEqual(calls[-1][0], calls[-1][1])
            self.assertEqual(calls[-1][2], 1)
            _, b, _ = fidelity(st, 6, 3, 2)
            strip = [(r["msssim"], r["msssim_min"], r["mean_bytes"]) for r in a["table"]]
            self.assertEqual([(r["msssim"], r["msssim_min"], r["mean_bytes"]) for r in b["table"]],
                             strip)
            _, c, _ = fidelity(st, 6, 99, 1)
            self.assertNotEqual([(r["msssim"], r["mean_bytes"]) for r in c["table"]], strip)
            self.assertEqual(fidelity(st, 6, 3, 1, threshold=2.0)[0], -errno.EINVAL)


if __name__ == "__main__":
    unittest.main(verbosity=2)
