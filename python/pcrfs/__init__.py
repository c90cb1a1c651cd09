"""pcrfs — helpers for training on a pcrfs mount (see pcrfs(1)).

Pure Python, standard library only: `import pcrfs` imports neither torch nor PIL.
torch is imported the first time pcrfs.RecordSampler is looked up (the class derives
from torch's Sampler), PIL on the first pil_loader() call.

    import pcrfs
    ds = torchvision.datasets.ImageFolder("/mnt/in1k/scan5", loader=pcrfs.pil_loader)
    sampler = pcrfs.RecordSampler(ds, window=4, seed=0)   # record by record, the
                                                          # next ones fetched ahead
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=256, num_workers=8)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        ...
    pcrfs.set_level("/mnt/in1k", 5)      # what dynamic/ serves to new opens

RecordSampler orders samples record by record: PCR's one sequential read per record
(and one ranged GET per record from object storage) survives an unmodified dataset
class. Which record a file lies in comes from the mount: the inode number of each
file (pcrfs computes it from the file's view and id, see pcrfs(1), "INODE NUMBERS")
and MNT/.pcrfs/records.

How each rank's share is cut (pcrfs(1), "PYTHON MODULE"): each epoch, the records are
put in an order (shuffled by a hash of (seed, epoch); with shuffle=False the order of
their first samples in the dataset, the store's for an ImageFolder) and their samples
laid end to end; that list is padded by repeating its start up to a multiple of
world_size (or cut to one with drop_last=True), exactly the counts of torch's
DistributedSampler, and rank r takes the r-th of world_size contiguous shares. So
every rank yields len() samples, every sample is yielded at least once per epoch (the
only repeats are the padding), drop_last leaves out at most world_size - 1, and each
rank reads a run of whole records: only a record at a share boundary (at most
world_size - 1 of them, plus the padding's) is read by two ranks.
Inside its share a rank shuffles the samples of each window of @window records.
"""

import bisect
import errno
import hashlib
import io
import json
import os
import random
import re
import warnings

from .store import ImageFolder, Store, build

__all__ = ["RecordSampler", "find_mount", "info", "stats", "levels", "level", "set_level",
           "records", "file_id", "inode_parts", "pil_loader", "record_keys", "plan_epoch",
           "rank_indices", "prefetch", "Autotuner", "Store", "ImageFolder", "build"]

_CTL = ".pcrfs"
_INO_VIEW_SHIFT = 56
_INO_FILE_BIT = 1 << 55
_INO_ID_MASK = _INO_FILE_BIT - 1
# inode.h's view numbers: the views whose file inodes carry the image tree's ids.
# scan1..scanL and full/ (L + 1 <= 65), q90/.. (0x70..0x77), refurb/ (0x7E),
# dynamic/'s files (0x80 + K, K >= 1), mix/'s files (0xC1 + K, K >= 1). Not view 0
# (the daemon's own nodes) nor tokens/ (0x7F: the token tree's ids, another
# namespace); a number not listed here is never taken for an image id.
_VIEW_TOKENS = 0x7F


def _image_view(view):
    return (1 <= view <= 65 or 0x70 <= view <= 0x77 or view == 0x7E or
            0x81 <= view <= 0xC0 or 0xC2 <= view <= 0xFF)


def find_mount(path):
    """The root of the pcrfs mount that holds @path (a view, a class directory, a
    file, or a symbolic link to one of these): the nearest ancestor of its real path
    with a .pcrfs/info. Raises ValueError if none."""
    p = os.path.realpath(os.fsdecode(os.fspath(path)) or ".")
    while True:
        if os.path.isfile(os.path.join(p, _CTL, "info")):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            raise ValueError("%s is not inside a pcrfs mount" % os.fsdecode(os.fspath(path)))
        p = parent


def _read(mnt, name):
    with open(os.path.join(find_mount(mnt), _CTL, name), "rb", buffering=0) as f:
        return f.read()


def info(mnt):
    """MNT/.pcrfs/info as a dict (levels, views, files, records, ...)."""
    return json.loads(_read(mnt, "info"))


def stats(mnt):
    """MNT/.pcrfs/stats as a dict: counters taken when it is read."""
    return json.loads(_read(mnt, "stats"))


def levels(mnt):
    """The store's number of levels L: the views are scan1..scanL and full (= scanL)."""
    return int(info(mnt)["levels"])


def _level_file(mnt):
    """MNT/.pcrfs/level, or FileNotFoundError naming the mount and the option that
    creates it (the file exists only on mounts with -o level=K)."""
    root = find_mount(mnt)
    path = os.path.join(root, _CTL, "level")
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "%s has no dynamic view: mount it with "
                                "-o level=K to use pcrfs.level()/set_level()" % root, path)
    return path


def level(mnt):
    """The level dynamic/ serves now (mounts with -o level=K)."""
    with open(_level_file(mnt), "rb", buffering=0) as f:
        return int(f.read().split()[0])


def set_level(mnt, k):
    """Make dynamic/ serve level @k (an int 1..L, or "full") to files opened from now
    on; files already open keep theirs. The value is checked here (ValueError naming
    it and the range) and written in one write(2), so it is applied whole or not at
    all."""
    path = _level_file(mnt)
    top = levels(mnt)
    if isinstance(k, bool) or not isinstance(k, (int, str)):
        raise ValueError("level %r for %s: want an int 1..%d or 'full'" % (k, path, top))
    s = str(k).strip(" \t")
    if not (s == "full" or (re.fullmatch(r"[0-9]{1,3}", s) and 1 <= int(s) <= top)):
        raise ValueError("level %r for %s: want an int 1..%d or 'full'" % (k, path, top))
    data = (s + "\n").encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        try:
            n = os.write(fd, data)
        except OSError as e:
            raise OSError(e.errno, "setting level %s (1..%d or full): %s" %
                          (s, top, os.strerror(e.errno)), path) from None
        if n != len(data):  # the daemon takes the value whole; never seen short
            raise OSError(errno.EIO, "short write of level %s" % s, path)
    finally:
        os.close(fd)


def records(mnt):
    """MNT/.pcrfs/records: a list of (first_file_id, count, record) runs, in file-id
    order, of the store's image tree."""
    runs = []
    for line in _read(mnt, "records").decode().splitlines():
        if line and not line.startswith("#"):
            first, count, rec = (int(x) for x in line.split())
            runs.append((first, count, rec))
    return runs


def inode_parts(ino):
    """(view, is_file, id) of a pcrfs inode number (pcrfs(1), "INODE NUMBERS")."""
    return ino >> _INO_VIEW_SHIFT, bool(ino & _INO_FILE_BIT), ino & _INO_ID_MASK


def file_id(ino):
    """The store's image-tree file id of an inode number from a pcrfs view (the ids
    .pcrfs/records lists), or None for a directory, a node of the daemon's own, or a
    file of tokens/ (whose ids are the token tree's; pcrfs(1), "INODE NUMBERS")."""
    view, is_file, fid = inode_parts(ino)
    if not is_file or not _image_view(view):
        return None
    return fid


def pil_loader(path):
    """torchvision's default loader without its per-file isatty(): a buffered
    open() in CPython asks the file whether it is a terminal, a round trip to the
    daemon on every image (pcrfs(1), "Python loaders"). FileIO does not ask.
    Errors name @path, as torchvision's loader's do."""
    from PIL import Image
    with io.FileIO(path, "r") as f:
        data = f.readall()
    try:
        img = Image.open(io.BytesIO(data))
        return img.convert("RGB")
    except OSError as e:
        if e.errno is not None:
            raise
        msg = "%s: %s" % (os.fsdecode(os.fspath(path)), e)
        try:
            err = type(e)(msg)
        except TypeError:
            err = OSError(msg)
        raise err from e


# ---- grouping samples by record -----------------------------------------------------

def _sample_paths(dataset):
    """The path of each sample of @dataset, None where unknown, and a reason when
    some are unknown: .samples or .imgs ([(path, target), ...] or [path, ...]),
    Subset (.dataset, .indices) and ConcatDataset (.datasets) of such, unwrapped."""
    for attr in ("samples", "imgs"):
        s = getattr(dataset, attr, None)
        if s is not None:
            try:
                out = []
                for x in s:
                    p = x if isinstance(x, (str, bytes, os.PathLike)) else x[0]
                    out.append(os.fsdecode(os.fspath(p)))
                return out, None
            except (TypeError, IndexError, KeyError):
                return [None] * len(s), "its .%s are not (path, target) pairs" % attr
    if hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        inner, why = _sample_paths(dataset.dataset)
        return [inner[int(i)] for i in dataset.indices], why
    if hasattr(dataset, "datasets"):
        out, why = [], None
        for d in dataset.datasets:
            p, w = _sample_paths(d)
            out.extend(p)
            why = why or w
        return out, why
    return [None] * len(dataset), "%s has no .samples, .imgs, or Subset/ConcatDataset " \
        "structure" % type(dataset).__name__


class _Mounts:
    """The mount of each directory and the record runs of each mount, each looked up
    once."""

    def __init__(self):
        self.root_of, self.runs = {}, {}

    def root(self, d):
        if d not in self.root_of:
            try:
                self.root_of[d] = find_mount(d)
            except (ValueError, OSError):
                self.root_of[d] = None
        return self.root_of[d]

    def record(self, root, ino):
        fid = file_id(ino)
        if root is None or fid is None:
            return None
        if root not in self.runs:
            try:
                runs = records(root)
            except (OSError, ValueError):
                runs = []
            self.runs[root] = ([r[0] for r in runs], runs)
        starts, runs = self.runs[root]
        i = bisect.bisect_right(starts, fid) - 1
        if i >= 0 and fid < runs[i][0] + runs[i][1]:
            return (root, runs[i][2])
        return None


def record_keys(paths):
    """For each of @paths (str, bytes or os.PathLike; None for unknown), the record
    that holds it as (mount root, record number), or None when it lies in no record
    (not on a pcrfs mount, a tokens/ file, or unknown). One os.scandir() per directory
    gives the inode numbers (no stat per file); a name that is a symbolic link is
    followed with one stat."""
    out = [None] * len(paths)
    by_dir = {}
    for i, p in enumerate(paths):
        if p is None:
            continue
        d, name = os.path.split(os.fsdecode(os.fspath(p)))
        by_dir.setdefault(d, {}).setdefault(name, []).append(i)
    mounts = _Mounts()
    for d, names in by_dir.items():
        root = mounts.root(d or ".")
        try:
            with os.scandir(d or ".") as it:
                for e in it:
                    idx = names.get(e.name)
                    if idx is None:
                        continue
                    if e.is_symlink():
                        try:
                            key = mounts.record(mounts.root(os.path.dirname(
                                os.path.realpath(e.path))), os.stat(e.path).st_ino)
                        except OSError:
                            key = None
                    else:
                        key = mounts.record(root, e.inode())
                    for i in idx:
                        out[i] = key
        except OSError:
            continue
    return out


def _own_record_keys(dataset):
    """The record keys a dataset over a Store (pcrfs.ImageFolder: record_keys()) gives
    itself, through Subset and ConcatDataset; None when no part of it does. Parts that
    do not are looked up on their mounts (record_keys())."""
    own = getattr(dataset, "record_keys", None)
    if callable(own):
        return own()
    if hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        inner = _own_record_keys(dataset.dataset)
        return None if inner is None else [inner[int(i)] for i in dataset.indices]
    if hasattr(dataset, "datasets"):
        parts = [_own_record_keys(d) for d in dataset.datasets]
        if all(p is None for p in parts):
            return None
        out = []
        for d, p in zip(dataset.datasets, parts):
            out.extend(p if p is not None else record_keys(_sample_paths(d)[0]))
        return out
    return None


def _stores_of(dataset):
    """{store path: pcrfs.Store} of the parts of @dataset over a Store
    (pcrfs.ImageFolder's .store), through Subset and ConcatDataset."""
    st = getattr(dataset, "store", None)
    if st is not None and callable(getattr(st, "prefetch", None)) and hasattr(st, "path"):
        return {st.path: st}
    if hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        return _stores_of(dataset.dataset)
    out = {}
    for d in getattr(dataset, "datasets", None) or ():
        out.update(_stores_of(d))
    return out


def _record_of_paths(paths):
    """{path: record number or None}: record_keys() without the mount (one mount)."""
    return {p: (k[1] if k else None) for p, k in zip(paths, record_keys(paths))}


def _rng(seed, epoch, stream=0):
    """A random generator seeded by a hash of (seed, epoch, stream), so that two
    distinct triples never share an order (bar a 128-bit collision). Stream 0 orders
    the epoch's records (the same on every rank), stream 1 + r is rank r's own."""
    h = hashlib.blake2b(b"pcrfs.RecordSampler %d %d %d" % (seed, epoch, stream),
                        digest_size=16)
    return random.Random(int.from_bytes(h.digest(), "little"))


def plan_epoch(groups, world_size, seed=0, epoch=0, shuffle=True, drop_last=False,
               window=8):
    """The whole epoch, for every rank: a list of world_size shares, each a list of
    (group number, [sample indices]) pieces in the rank's read order, before the
    window shuffle (share_order() does that). @groups: a list of lists of sample
    indices, one per record (a sample in no record is a group of one).

    The groups are ordered (shuffled by (seed, epoch), or kept with shuffle=False),
    their samples laid end to end, the list padded by repeating its start up to a
    multiple of world_size, or cut to one with drop_last (DistributedSampler's
    counts), then cut into world_size contiguous shares of equal length. A group
    that a cut splits has its samples shuffled first, so that which of them go to
    which rank changes with the epoch; the others are shuffled by the window shuffle
    alone (one pass over the samples per epoch, not two)."""
    if window < 1 or world_size < 1:
        raise ValueError("window and world_size must be >= 1")
    rng = _rng(seed, epoch)
    order = [g for g in range(len(groups)) if len(groups[g])]
    if shuffle:
        rng.shuffle(order)
    n = sum(len(groups[g]) for g in order)
    per_rank = n // world_size if drop_last else -(-n // world_size)
    if per_rank == 0:
        return [[] for _ in range(world_size)]
    total = per_rank * world_size
    # where the list is cut, as offsets into the unpadded list
    cuts = sorted({c % n for c in range(per_rank, total + 1, per_rank)} - {0})
    runs, at = [], 0
    for g in order:
        idx = groups[g]
        k = bisect.bisect_right(cuts, at)
        if shuffle and k < len(cuts) and cuts[k] < at + len(idx):
            idx = list(idx)
            rng.shuffle(idx)
        runs.append((g, idx))
        at += len(idx)
    shares, ri, off = [], 0, 0
    for _ in range(world_size):
        need, pieces = per_rank, []
        while need:  # the padding wraps round to the list's start
            g, idx = runs[ri]
            take = idx[off:off + need]
            if pieces and pieces[-1][0] == g:
                pieces[-1][1].extend(take)
            else:
                pieces.append((g, list(take)))
            need -= len(take)
            off += len(take)
            if off == len(idx):
                ri, off = (ri + 1) % len(runs), 0
        shares.append(pieces)
    return shares


def share_windows(pieces, window, shuffle, rng):
    """share_order() window by window: (the window's pieces, its indices)."""
    for w in range(0, len(pieces), window):
        idx = [i for _, ids in pieces[w:w + window] for i in ids]
        if shuffle:
            rng.shuffle(idx)
        yield pieces[w:w + window], idx


def share_order(pieces, window, shuffle, rng):
    """A rank's indices from its pieces: with @shuffle the samples of each @window
    consecutive pieces (records) shuffled together."""
    out = []
    for _, idx in share_windows(pieces, window, shuffle, rng):
        out.extend(idx)
    return out


def prefetch(mnt, records):
    """Tell the mount at @mnt that records @records (numbers as .pcrfs/records gives
    them) are read next: a lookup in MNT/.pcrfs/prefetch/ (pcrfs(1)); the mount
    fetches them ahead. At most 256 at once. Raises OSError (EINVAL) when the mount
    refuses them (a number out of range: nothing is fetched)."""
    recs = [int(r) for r in records]
    if not recs:
        return
    try:
        os.stat(os.path.join(mnt, ".pcrfs", "prefetch", ",".join(map(str, recs))))
    except FileNotFoundError:
        return  # taken


def rank_indices(groups, rank, world_size, seed=0, epoch=0, shuffle=True, drop_last=False,
                 window=8):
    """What RecordSampler(rank=@rank, world_size=@world_size) yields in @epoch for
    the records @groups (see plan_epoch()): the rank's share, window-shuffled."""
    pieces = plan_epoch(groups, world_size, seed, epoch, shuffle, drop_last, window)[rank]
    return share_order(pieces, window, shuffle, _rng(seed, epoch, 1 + rank))


class _RecordSampler:
    """A torch Sampler over a dataset of files on a pcrfs view (ImageFolder,
    DatasetFolder, anything with .samples = [(path, target), ...] or .imgs, and
    Subset or ConcatDataset of those) that yields indices record by record: the
    records in a shuffled order, the samples of a window of @window records shuffled
    together, so that reads go through each record's prefix once while batches still
    mix @window records. Samples not in a record (a file off any pcrfs mount, a file
    of tokens/) are one record each; a dataset whose files cannot be found is one
    warning, and each sample its own record.

    With @rank and @world_size (default: torch.distributed's, if initialised) the
    epoch's record-ordered sample list is padded (or, with @drop_last, cut) to a
    multiple of world_size as DistributedSampler does, and rank r yields the r-th of
    world_size contiguous shares: every rank yields len() samples, every sample is
    yielded at least once per epoch (the only repeats are the padding), drop_last
    leaves out at most world_size - 1, and a record at a share boundary is read by
    two ranks. Call set_epoch() each epoch: the order depends on (seed, epoch) only,
    through a hash of both.

    @prefetch tells the mount which records come next, so that it fetches them while
    the current ones are read (pcrfs(1), .pcrfs/prefetch/). By default (None, or
    True) it is on for every pcrfs mount the samples lie on (a mount root with
    .pcrfs/prefetch/ the caller may look up in) and every pcrfs.Store the dataset
    reads through (pcrfs.ImageFolder), and off when there is none; a mount's path
    or a pcrfs.Store hints that one only; False turns it off. It is on by default
    because without hints the mount does not see this shuffled-within-window order
    as reading a record and fetches each file with GETs of its own (about 5 per
    image at scan5/ from object storage, against a few per record with them). Only
    this rank's records are named. Before the first sample, the records of the first
    window and of the @prefetch_ahead windows after it are named, one hint per
    window, and when a window starts, those of the window @prefetch_ahead after it:
    a window's samples are shuffled, so each of its records is read from the
    window's first sample on and must be on its way well before (named one at a time
    while the window before was read, a record came too late: each was read while
    its parts arrived, about one connection's worth per record). How far ahead the
    mount really fetches is its own bound (parts in flight per connection, the cache:
    pcrfs(1)); a record named beyond it waits its turn and costs nothing until then.
    The order of the indices is the same with or without it. The
    mount reads a record whole only when told so or when it sees files of the record
    read in file-id order; in the sampler's shuffled order a record without a hint
    is read file by file (one request per file from object storage)."""

    def __init__(self, dataset, shuffle=True, window=8, seed=0, rank=None, world_size=None,
                 drop_last=False, prefetch=None, prefetch_ahead=4):
        if window < 1:
            raise ValueError("window must be >= 1")
        if prefetch_ahead < 0:
            raise ValueError("prefetch_ahead must be >= 0")
        if rank is None or world_size is None:
            try:
                import torch.distributed as dist
                ready = dist.is_available() and dist.is_initialized()
            except ImportError:
                ready = False
            world_size = world_size if world_size is not None else (
                dist.get_world_size() if ready else 1)
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError("rank %d not in [0, %d)" % (rank, world_size))
        self.shuffle, self.window, self.seed = shuffle, window, int(seed)
        self.prefetch, self.prefetch_ahead = prefetch, int(prefetch_ahead)
        self._stores = _stores_of(dataset)
        self._hintable = {}  # mount root: whether its .pcrfs/prefetch/ takes hints
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.epoch = 0
        paths, why = _sample_paths(dataset)
        keys = _own_record_keys(dataset)
        if keys is None:
            keys = record_keys(paths)
        groups, self.keys = {}, []
        for i, k in enumerate(keys):
            if k is None:
                k = ("sample", i)
            if k not in groups:
                groups[k] = []
                self.keys.append(k)
            groups[k].append(i)
        # records in dataset order (the order of their first sample)
        self.records = [groups[k] for k in self.keys]
        self.keys = [k if k[0] != "sample" else None for k in self.keys]
        if why:
            warnings.warn("pcrfs.RecordSampler: cannot group by record (%s): each "
                          "sample is its own record" % why, stacklevel=2)
        elif paths and all(k is None for k in keys):
            warnings.warn("pcrfs.RecordSampler: none of the %d samples lies in a pcrfs "
                          "record (not on a mount?): each is its own record" % len(paths),
                          stacklevel=2)
        n = len(paths)
        self._len = n // world_size if drop_last else -(-n // world_size)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def records_for_epoch(self, epoch=None):
        """This rank's records in the order it reads them this epoch (or @epoch's):
        a list of (mount root, record number), one per run of samples of one record;
        samples in no record are left out."""
        pieces = plan_epoch(self.records, self.world_size, self.seed,
                            self.epoch if epoch is None else epoch, self.shuffle,
                            self.drop_last, self.window)[self.rank]
        return [self.keys[g] for g, _ in pieces if self.keys[g] is not None]

    def _target(self, root):
        """Where hints for records of @root go: a pcrfs.Store, the mount root, or
        None (not hinted)."""
        p = self.prefetch
        if p is None or p is True:
            if root in self._stores:
                return self._stores[root]
            if root not in self._hintable:
                self._hintable[root] = os.access(os.path.join(root, ".pcrfs", "prefetch"),
                                                 os.X_OK)
            return root if self._hintable[root] else None
        if callable(getattr(p, "prefetch", None)):  # a pcrfs.Store
            return p if getattr(p, "path", None) == root else None
        return root if os.path.realpath(os.fspath(p)) == os.path.realpath(root) else None

    def _hint(self, keys):
        """Prefetch hints for the records @keys ((root, record) pairs)."""
        by_root = {}
        for k in keys:
            if k is not None:
                by_root.setdefault(k[0], []).append(k[1])
        for root, recs in by_root.items():
            t = self._target(root)
            for i in range(0, len(recs), 256):
                try:
                    if isinstance(t, str):
                        prefetch(t, recs[i:i + 256])
                    elif t is not None:
                        t.prefetch(recs[i:i + 256])
                except OSError:
                    pass  # a hint is no reason to fail the epoch

    def _hinting(self):
        """Whether any record of the dataset gets hints."""
        if self.prefetch is False:
            return False
        return any(self._target(r) is not None for r in {k[0] for k in self.keys if k})

    def __iter__(self):
        if not self._hinting():
            return iter(rank_indices(self.records, self.rank, self.world_size, self.seed,
                                     self.epoch, self.shuffle, self.drop_last,
                                     self.window))
        return self._iter_hinting()

    def _iter_hinting(self):
        """The same indices as without hints; each window's records are named
        @prefetch_ahead windows before it starts (the first ones before the first
        sample), one hint per window, so that the mount fetches a window's records
        side by side and window after window."""
        pieces = plan_epoch(self.records, self.world_size, self.seed, self.epoch,
                            self.shuffle, self.drop_last, self.window)[self.rank]
        wins = list(share_windows(pieces, self.window, self.shuffle,
                                  _rng(self.seed, self.epoch, 1 + self.rank)))
        named = 0  # windows hinted so far
        for w, (_, idx) in enumerate(wins):
            # (a record in two windows is named twice: one fetched or on its way
            # costs the mount nothing)
            while named < len(wins) and named <= w + self.prefetch_ahead:
                self._hint([self.keys[g] for g, _ in wins[named][0]])
                named += 1
            yield from idx

    def __len__(self):
        return self._len


_SAMPLER = None


def __getattr__(name):
    """pcrfs.RecordSampler and pcrfs.Autotuner (autotune.py), made or loaded on first
    use so that `import pcrfs` does not import torch: RecordSampler is _RecordSampler
    with torch's Sampler as a base when torch is there."""
    global _SAMPLER
    if name == "Autotuner":
        from .autotune import Autotuner
        return Autotuner
    if name != "RecordSampler":
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    if _SAMPLER is None:
        try:
            from torch.utils.data import Sampler
            bases = (_RecordSampler, Sampler)
        except ImportError:  # usable without torch, e.g. to plan reads
            bases = (_RecordSampler,)
        _SAMPLER = type("RecordSampler", bases, {"__module__": __name__,
                                                 "__qualname__": "RecordSampler",
                                                 "__doc__": _RecordSampler.__doc__})
        globals()["RecordSampler"] = _SAMPLER
    return _SAMPLER
