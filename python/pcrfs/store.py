"""pcrfs.Store and pcrfs.ImageFolder: a store's views without a mount, through
libpcrfs.so (pcrfs(3)) and ctypes; and pcrfs.build(), a store built as mkpcrfs
builds it (pcrfs_build()).

    pcrfs.build("/data/train", "/data/in1k.pcrfs", jobs=8)
    store = pcrfs.Store("/data/in1k.pcrfs")            # or "s3://bucket/in1k"
    ds = pcrfs.ImageFolder(store, view="scan5", transform=...)
    loader = DataLoader(ds, sampler=pcrfs.RecordSampler(ds), num_workers=8)

The library is found through $PCRFS_LIB (a path to libpcrfs.so, for a build tree),
else as the installed libpcrfs.so.0. A Store is safe in forked DataLoader workers
(the library reopens the store in a child) and pickles as (path, options), so
spawned workers open their own.
"""

import ctypes
import errno
import io
import os
import threading

_lib = None


class _Stat(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("file_id", ctypes.c_uint64),
                ("is_dir", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


class _SummaryArgs(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("thresholds", ctypes.POINTER(ctypes.c_double)),
                ("nthresholds", ctypes.c_size_t), ("measured", ctypes.c_uint64)]


class _VerifyResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("level", ctypes.c_uint32),
                ("files", ctypes.c_uint64), ("decoded", ctypes.c_uint64),
                ("token_files", ctypes.c_uint64), ("failures", ctypes.c_uint64),
                ("tokens", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


_VERIFY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                              ctypes.c_uint64, ctypes.c_void_p)


class _Facts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("kind", ctypes.c_uint32),
                ("file_id", ctypes.c_uint64), ("record", ctypes.c_uint64),
                ("source_size", ctypes.c_uint64), ("checksum", ctypes.c_uint64),
                ("chunks", ctypes.c_uint32), ("levels", ctypes.c_uint32),
                ("width", ctypes.c_uint32), ("height", ctypes.c_uint32),
                ("components", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("level_size", ctypes.c_uint64 * 64)]


_KINDS = {1: "jpeg", 2: "verbatim", 3: "tokens"}


def _candidates():
    """$PCRFS_LIB, else the soname (the loader's search), else beside this module's
    install: PREFIX/lib/python3.X/dist-packages/pcrfs -> PREFIX/lib/<multiarch>/ (a
    /usr/local install before ldconfig has run)."""
    if os.environ.get("PCRFS_LIB"):
        return [os.environ["PCRFS_LIB"]]
    import sysconfig
    prefix = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    return ["libpcrfs.so.0"] + [os.path.join(prefix, d, "libpcrfs.so.0")
                                for d in (os.path.join("lib", arch), "lib64", "lib") if d]


def _load():
    global _lib
    if _lib is not None:
        return _lib
    err = None
    for cand in _candidates():
        try:
            lib = ctypes.CDLL(cand)
            break
        except OSError as e:
            err = err or e
    else:
        raise OSError("pcrfs: cannot load libpcrfs.so.0 (set PCRFS_LIB to its path): %s"
                      % err)
    c_p, c_char_p, u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64
    lib.pcrfs_open.argtypes = [c_char_p, ctypes.POINTER(c_char_p), ctypes.POINTER(c_p)]
    lib.pcrfs_close.argtypes = [c_p]
    lib.pcrfs_close.restype = None
    lib.pcrfs_errmsg.restype = c_char_p
    lib.pcrfs_stat.argtypes = [c_p, c_char_p, ctypes.POINTER(_Stat)]
    lib.pcrfs_readdir.argtypes = [c_p, c_char_p, ctypes.POINTER(u64), ctypes.c_char_p,
                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
    lib.pcrfs_read.argtypes = [c_p, c_char_p, c_p, ctypes.c_size_t, u64]
    lib.pcrfs_read.restype = ctypes.c_ssize_t
    lib.pcrfs_features.argtypes = [c_p]
    lib.pcrfs_features.restype = ctypes.c_uint
    lib.pcrfs_file_open.argtypes = [c_p, c_char_p, ctypes.POINTER(c_p)]
    lib.pcrfs_file_size.argtypes = [c_p]
    lib.pcrfs_file_size.restype = ctypes.c_int64
    lib.pcrfs_file_read.argtypes = [c_p, c_p, ctypes.c_size_t, u64]
    lib.pcrfs_file_read.restype = ctypes.c_ssize_t
    lib.pcrfs_file_close.argtypes = [c_p]
    lib.pcrfs_file_close.restype = None
    lib.pcrfs_record.argtypes = [c_p, c_char_p, ctypes.POINTER(u64), ctypes.POINTER(u64)]
    lib.pcrfs_prefetch.argtypes = [c_p, ctypes.POINTER(u64), ctypes.c_size_t]
    lib.pcrfs_levels.argtypes = [c_p]
    lib.pcrfs_levels.restype = ctypes.c_uint
    lib.pcrfs_set_level.argtypes = [c_p, ctypes.c_uint]
    for f in (lib.pcrfs_info_json, lib.pcrfs_stats_json):
        f.argtypes = [c_p, ctypes.POINTER(ctypes.c_void_p)]
        f.restype = ctypes.c_ssize_t
    lib.pcrfs_summary.argtypes = [c_p, ctypes.POINTER(_SummaryArgs),
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.pcrfs_summary.restype = ctypes.c_ssize_t
    lib.pcrfs_verify.argtypes = [c_p, _VERIFY_FN, ctypes.c_void_p, ctypes.POINTER(_VerifyResult)]
    lib.pcrfs_file_facts.argtypes = [c_p, c_char_p, ctypes.POINTER(_Facts)]
    _lib = lib
    return lib


class _BuildProgress(ctypes.Structure):
    _fields_ = [("stage", ctypes.c_uint), ("final", ctypes.c_int), ("done", ctypes.c_uint64),
                ("total", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("total_bytes", ctypes.c_uint64)]


_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_BuildProgress), ctypes.c_void_p)


class _BuildCb(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("progress", _PROGRESS_FN),
                ("result", ctypes.c_void_p)]


# pcrfs.h's PCRFS_BUILD_* stages, by name
BUILD_STAGES = {1: "walk", 2: "tokens_read", 3: "transcode", 4: "tokens", 5: "merge",
                6: "commit"}


def build(src, out, progress=None, **options):
    """Build the store @out from the image tree @src (None: tokens only) with
    pcrfs_build() (pcrfs(3), BUILDING A STORE): what mkpcrfs SRC STORE does.
    @options: the build options, jobs=4, per_record=256, force=1, scans="fast",
    quality=1, tokens="/data/tok", ... (True/False become 1/0). @progress, if
    given, is called as progress(stage, done, total, bytes, total_bytes) with the
    stage's name (BUILD_STAGES); a true return cancels the build, which then leaves
    nothing behind and raises OSError(ECANCELED). The build's warnings go nowhere
    unless the library's log hook is set. Raises OSError on failure."""
    lib = _load()
    opts = ["%s=%s" % (k, int(v) if isinstance(v, bool) else v) for k, v in options.items()]
    arr = (ctypes.c_char_p * (len(opts) + 1))(*[o.encode() for o in opts], None)
    cb = None
    if progress is not None:
        def on_progress(p, _ctx):
            p = p.contents
            try:
                return 1 if progress(BUILD_STAGES.get(p.stage, str(p.stage)), p.done, p.total,
                                     p.bytes, p.total_bytes) else 0
            except BaseException:  # never unwind through C: cancel instead
                return 1
        cb = _BuildCb(ctypes.sizeof(_BuildCb), _PROGRESS_FN(on_progress), None)
    lib.pcrfs_build.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                ctypes.POINTER(_BuildCb), ctypes.c_void_p]
    rc = lib.pcrfs_build(os.fsencode(src) if src is not None else None, os.fsencode(out), arr,
                         ctypes.byref(cb) if cb is not None else None, None)
    if rc:
        _raise(rc, os.fspath(out))


def _libc_free(p):
    ctypes.CDLL(None).free(ctypes.c_void_p(p))


def _raise(rc, what):
    msg = _load().pcrfs_errmsg().decode("utf-8", "replace")
    err = -rc
    raise OSError(err, "%s: %s" % (what, msg or os.strerror(err)))


class Store:
    """A pcrfs store opened without a mount: the tree a mount's root shows.

    @path_or_url: a store directory or an s3:// / http(s):// URL; @options: the -o
    options of pcrfs(1) that are not about the kernel (level=5 -> level=5,
    quality="0.9:0.95", mix="3-8", refurb=2, cache="/tmp/c", ...). Paths are those
    under a mount's root: "scan5/n01440764/x.JPEG"."""

    def __init__(self, path_or_url, **options):
        lib = _load()
        self.path = os.fspath(path_or_url)
        self.options = dict(options)
        opts = ["%s=%s" % (k, v) for k, v in self.options.items()]
        arr = (ctypes.c_char_p * (len(opts) + 1))(*[o.encode() for o in opts], None)
        h = ctypes.c_void_p()
        rc = lib.pcrfs_open(os.fsencode(self.path), arr, ctypes.byref(h))
        if rc:
            _raise(rc, self.path)
        self._h = h
        self._per_open = None  # pcrfs_features() & NEEDS_OPEN, asked at the first read

    def __reduce__(self):  # spawned workers open their own
        return (_reopen, (self.path, self.options))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _load().pcrfs_close(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise ValueError("the store is closed")
        return self._h

    def stat(self, path):
        st = _Stat()
        rc = _load().pcrfs_stat(self._handle(), os.fsencode(path), ctypes.byref(st))
        if rc:
            _raise(rc, path)
        return st

    def size(self, path):
        """The exact size of file @path (what a mount's stat says)."""
        st = self.stat(path)
        if st.is_dir:
            raise IsADirectoryError(errno.EISDIR, "a directory", path)
        return st.size

    def isdir(self, path):
        return bool(self.stat(path).is_dir)

    def listdir(self, path=""):
        """The names in directory @path, in a mount's listing order."""
        return [n for n, _ in self.scandir(path)]

    def scandir(self, path=""):
        """(name, is_dir) of each entry of @path, in listing order."""
        lib, h, p = _load(), self._handle(), os.fsencode(path)
        pos, isdir = ctypes.c_uint64(0), ctypes.c_int(0)
        name = ctypes.create_string_buffer(512)
        out = []
        while True:
            rc = lib.pcrfs_readdir(h, p, ctypes.byref(pos), name, 512, ctypes.byref(isdir))
            if rc < 0:
                _raise(rc, path)
            if rc == 0:
                return out
            out.append((os.fsdecode(name.value), bool(isdir.value)))

    def read(self, path, offset=0, length=None):
        """The bytes of file @path (or @length of them at @offset)."""
        p = os.fsencode(path)
        if length is not None:
            sc = _scratch_get(length)
            return _scratch_bytes(sc, self._readinto(p, sc.buf, length, offset, sc.addr))
        # One call, no stat first: into this thread's scratch buffer, and a short read
        # is the end of the file (pcrfs(3)). Only a file that fills the buffer asks
        # for its size and is read again. A stat (a second walk of the path) and a
        # fresh zero-filled buffer per file cost more than the library's read itself
        # (BENCHMARKS.md, "The library without a mount"); the file's bytes are copied
        # once, into the bytes returned.
        lib, h = _lib or _load(), self._h or self._handle()
        if self._per_open is None:
            self._per_open = bool(lib.pcrfs_features(h) & _FEATURE_NEEDS_OPEN)
        if self._per_open:
            # mix/ or refurb/ is served: each pcrfs_read() of their files is an open
            # that draws a pass or a version, so a file is read through one open here
            # (one version, one draw), whatever its size.
            return self._read_open(lib, h, p, path, offset)
        sc = getattr(_scratch, "sc", None) or _scratch_get(0)
        for _ in range(8):  # a size that keeps growing between calls (mix/, refurb/)
            n = lib.pcrfs_read(h, p, sc.addr, sc.size, offset)
            if n < 0:
                _raise(n, path)
            if n < sc.size:
                return _scratch_bytes(sc, n)
            sc = _scratch_get(max(self.size(path) - offset, 0) + 1)
        raise OSError(errno.EIO, "its size changes at every read", path)

    def _read_open(self, lib, h, p, path, offset):
        """The bytes of @path from @offset through one open handle (one version),
        read into this thread's scratch buffer and copied once, into the bytes
        returned (before: a fresh zero-filled bytearray per file, then copied)."""
        f = ctypes.c_void_p()
        rc = lib.pcrfs_file_open(h, p, ctypes.byref(f))
        if rc < 0:
            _raise(rc, path)
        try:
            size = lib.pcrfs_file_size(f)
            if size < 0:
                _raise(size, path)
            want = max(size - offset, 0)
            sc = _scratch_get(want)
            got = 0
            while got < want:
                n = lib.pcrfs_file_read(f, sc.addr + got, want - got, offset + got)
                if n < 0:
                    _raise(n, path)
                if n == 0:
                    break
                got += n
            return _scratch_bytes(sc, got)
        finally:
            lib.pcrfs_file_close(f)

    def readinto(self, path, buf, offset=0):
        """Reads file @path from @offset into the writable buffer @buf (a bytearray,
        a memoryview, a numpy array, ...) without a copy; returns the number of bytes
        read: len(buf), or fewer at the end of the file."""
        mv = memoryview(buf).cast("B")
        if mv.readonly:
            raise TypeError("readinto() needs a writable buffer")
        if not mv.c_contiguous:
            raise ValueError("readinto() needs a contiguous buffer")
        if not len(mv):
            return 0
        return self._readinto(os.fsencode(path), mv, len(mv), offset)

    def _readinto(self, p, buf, length, offset, addr=None):
        """pcrfs_read() of encoded path @p into @buf (its address @addr if known)."""
        if addr is None:
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        n = _load().pcrfs_read(self._handle(), p, addr, length, offset)
        if n < 0:
            _raise(n, os.fsdecode(p))
        return n

    def record(self, path):
        """The record (1..records) that file @path lies in."""
        rec, fid = ctypes.c_uint64(), ctypes.c_uint64()
        rc = _load().pcrfs_record(self._handle(), os.fsencode(path), ctypes.byref(rec),
                                  ctypes.byref(fid))
        if rc:
            _raise(rc, path)
        return rec.value

    def prefetch(self, records):
        """Records (numbers as record() gives them) read next: fetched ahead at the
        level last read (named before any file was read: at the level of the first
        one read) (object storage: into the cache; a local store opened with
        readahead="record": read ahead). Whole or nothing: a number out of range
        raises OSError (EINVAL) and nothing is fetched."""
        recs = [int(r) for r in records]
        arr = (ctypes.c_uint64 * max(1, len(recs)))(*recs)
        rc = _load().pcrfs_prefetch(self._handle(), arr, len(recs))
        if rc:
            _raise(rc, "prefetch")

    def levels(self):
        return _load().pcrfs_levels(self._handle())

    def set_level(self, k):
        rc = _load().pcrfs_set_level(self._handle(), int(k))
        if rc:
            _raise(rc, "set_level")

    def _json(self, fn):
        import json
        p = ctypes.c_void_p()
        n = fn(self._handle(), ctypes.byref(p))
        if n < 0:
            _raise(n, "json")
        try:
            return json.loads(ctypes.string_at(p, n))
        finally:
            _libc_free(p.value)

    def info(self):
        """What a mount's .pcrfs/info says, as a dict."""
        return self._json(_load().pcrfs_info_json)

    def stats(self):
        """What a mount's .pcrfs/stats says (this process's counters), as a dict."""
        return self._json(_load().pcrfs_stats_json)

    def summary(self, thresholds=()):
        """The store's summary (pcrinfo --json), as a dict; @thresholds add rows
        to the per-image MS-SSIM table of a store built with mkpcrfs --quality."""
        t = (ctypes.c_double * max(1, len(thresholds)))(*thresholds)
        a = _SummaryArgs(size=ctypes.sizeof(_SummaryArgs), flags=1, thresholds=t,
                         nthresholds=len(thresholds))
        return self._json(lambda h, p: _load().pcrfs_summary(h, ctypes.byref(a), p))

    def facts(self, path):
        """What the index says of the stored file at @path of the tree (any view's):
        a dict of kind, file_id, record, source_size, checksum, chunks, width,
        height, components and level_size (bytes at levels 1..L)."""
        f = _Facts(size=ctypes.sizeof(_Facts))
        rc = _load().pcrfs_file_facts(self._handle(), os.fsencode(path), ctypes.byref(f))
        if rc:
            _raise(rc, path)
        d = {k: getattr(f, k) for k in ("file_id", "record", "source_size", "checksum",
                                        "chunks", "width", "height", "components")}
        d["kind"] = _KINDS.get(f.kind, "unknown")
        d["level_size"] = list(f.level_size[:f.levels])
        return d

    def verify(self, progress=None):
        """Read every stored file at its top level, check it against the index's
        checksum and decode every JPEG (pcrinfo --verify). @progress(done, total),
        if given, is called after each file. Returns a dict of the counts (level,
        files, decoded, token_files, failures, tokens) and "failed": [(path bytes,
        why)]; never raises for a damaged file."""
        failed = []

        def on_file(path, failure, done, total, ctx):
            if failure is not None:
                failed.append((path, failure.decode("utf-8", "replace")))
            if progress is not None:
                try:
                    progress(done, total)
                except Exception:  # noqa: BLE001 - an exception must not cross C
                    return 1
            return 0

        r = _VerifyResult(size=ctypes.sizeof(_VerifyResult))
        rc = _load().pcrfs_verify(self._handle(), _VERIFY_FN(on_file), None, ctypes.byref(r))
        if rc and rc != -errno.EBADMSG:
            _raise(rc, "verify")
        d = {k: getattr(r, k) for k in ("level", "files", "decoded", "token_files", "failures")}
        d["tokens"] = bool(r.tokens)
        d["failed"] = failed
        return d


def _reopen(path, options):
    return Store(path, **options)


# Each thread's buffer for Store.read(): reused, so that a read neither allocates nor
# faults in fresh pages; a buffer grown past _SCRATCH_KEEP for one large file is
# dropped after it.
_SCRATCH_START, _SCRATCH_KEEP = 1 << 18, 1 << 24
_FEATURE_NEEDS_OPEN = 0x1  # PCRFS_FEATURE_NEEDS_OPEN (pcrfs.h)
_scratch = threading.local()


class _Scratch:
    def __init__(self, size):
        self.buf, self.size = bytearray(size), size
        # a ctypes array over it holds an export: the bytearray cannot be resized
        # under the address (a new _Scratch replaces a buffer that must grow)
        self.arr = (ctypes.c_char * size).from_buffer(self.buf)
        self.addr = ctypes.addressof(self.arr)
        self.view = memoryview(self.buf)


def _scratch_bytes(sc, n):
    """The first @n bytes of scratch buffer @sc as bytes: the read's one copy. A
    buffer grown past _SCRATCH_KEEP for one large file is dropped after it."""
    out = sc.view[:n].tobytes()
    if sc.size > _SCRATCH_KEEP:
        _scratch.sc = None
    return out


def _scratch_get(need):
    """This thread's buffer, at least @need bytes (a power of two up to
    _SCRATCH_KEEP, @need exactly beyond: a 3 GB file does not take 4 GB)."""
    sc = getattr(_scratch, "sc", None)
    if sc is None or sc.size < need:
        size = _SCRATCH_START
        while size < need and size <= _SCRATCH_KEEP:
            size *= 2
        sc = _scratch.sc = _Scratch(max(size, need))
    return sc


_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_Image = None


def _pil_rgb(data):
    """A PIL image in RGB of the encoded image @data (bytes): what torchvision's
    loader returns (Image.open() then convert('RGB')), without convert()'s copy of
    every pixel when the image is RGB already (most JPEGs): a plain Image over the
    decoded pixels, as convert() would return."""
    global _Image
    if _Image is None:
        from PIL import Image
        _Image = Image
    img = _Image.open(io.BytesIO(data))
    if img.mode != "RGB" or "transparency" in img.info or not hasattr(img, "_new"):
        return img.convert("RGB")
    img.load()
    if getattr(img, "readonly", 0):  # pixels mapped from a file: convert() copies
        return img.convert("RGB")
    return img._new(img.im)


class ImageFolder:
    """torchvision's ImageFolder over a view of a Store, without a mount: classes,
    class_to_idx, samples ([(path, target)], paths as under a mount's root, e.g.
    "scan5/<class>/<file>") and targets; an item is (PIL image in RGB, target) by
    default (_pil_rgb(): torchvision's image, without convert()'s copy of an RGB
    image). @loader, if given, takes the file's bytes. pcrfs.RecordSampler groups
    its samples by record (record_keys())."""

    def __init__(self, store, view="scan5", transform=None, target_transform=None,
                 loader=None, extensions=_IMG_EXTENSIONS):
        self.store, self.view = store, view.strip("/")
        self.root = self.view
        self.transform, self.target_transform = transform, target_transform
        self.loader = loader or _pil_rgb
        self.classes = sorted(n for n, d in store.scandir(self.view) if d)
        if not self.classes:
            raise FileNotFoundError(errno.ENOENT, "no class directories", self.view)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = []
        ext = tuple(e.lower() for e in extensions) if extensions else None
        for c in self.classes:
            self._walk("%s/%s" % (self.view, c), self.class_to_idx[c], ext)
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]

    def _walk(self, d, target, ext):
        for name, isdir in sorted(self.store.scandir(d)):
            p = "%s/%s" % (d, name)
            if isdir:
                self._walk(p, target, ext)
            elif ext is None or name.lower().endswith(ext):
                self.samples.append((p, target))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        sample = self.loader(self.store.read(path))
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def record_keys(self):
        """(store, record) of each sample, None where it lies in no record."""
        out = []
        for p, _ in self.samples:
            try:
                out.append((self.store.path, self.store.record(p)))
            except OSError:
                out.append(None)
        return out
