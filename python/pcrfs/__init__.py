"""pcrfs — helpers for training on a pcrfs mount (see pcrfs(1)).

Pure Python, standard library only; torch is imported only by RecordSampler.

    import pcrfs
    ds = torchvision.datasets.ImageFolder("/mnt/in1k/scan5", loader=pcrfs.pil_loader)
    sampler = pcrfs.RecordSampler(ds, window=4, seed=0)   # record by record
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=256, num_workers=8)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        ...
    pcrfs.set_level("/mnt/in1k", 5)      # what dynamic/ serves to new opens

RecordSampler orders samples record by record: PCR's one sequential read per record
(and one ranged GET per record from object storage) survives an unmodified dataset
class. Which record a file lies in comes from the mount: the inode number of each
file (pcrfs computes it from the file's id, see pcrfs(1)) and MNT/.pcrfs/records.
"""

import io
import json
import os
import random

__all__ = ["RecordSampler", "find_mount", "info", "stats", "levels", "level", "set_level",
           "records", "file_id", "pil_loader", "Autotuner"]


def __getattr__(name):
    # pcrfs.Autotuner (autotune.py) is loaded on first use: `import pcrfs` stays
    # standard library only.
    if name == "Autotuner":
        from .autotune import Autotuner
        return Autotuner
    raise AttributeError("module 'pcrfs' has no attribute %r" % name)

_CTL = ".pcrfs"
_INO_FILE_BIT = 1 << 55
_INO_ID_MASK = _INO_FILE_BIT - 1


def find_mount(path):
    """The root of the pcrfs mount that holds @path (a view, a class directory or a
    file): the nearest ancestor with a .pcrfs/info. Raises ValueError if none."""
    p = os.path.abspath(os.fsdecode(path))
    while True:
        if os.path.isfile(os.path.join(p, _CTL, "info")):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            raise ValueError("%s is not inside a pcrfs mount" % path)
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


def level(mnt):
    """The level dynamic/ serves now (mounts with -o level=K)."""
    return int(_read(mnt, "level").split()[0])


def set_level(mnt, k):
    """Make dynamic/ serve level @k (1..L, or "full") to files opened from now on;
    files already open keep theirs."""
    k = str(k).strip()
    with open(os.path.join(find_mount(mnt), _CTL, "level"), "w") as f:
        f.write(k + "\n")


def records(mnt):
    """MNT/.pcrfs/records: a list of (first_file_id, count, record) runs, in file-id
    order, of the store's image tree."""
    runs = []
    for line in _read(mnt, "records").decode().splitlines():
        if line and not line.startswith("#"):
            first, count, rec = (int(x) for x in line.split())
            runs.append((first, count, rec))
    return runs


def file_id(ino):
    """The store's file id of an inode number from a pcrfs view, or None if it is a
    directory or a node of the daemon's own (see pcrfs(1), "Inode numbers")."""
    if not ino & _INO_FILE_BIT or ino >> 56 == 0:
        return None
    return ino & _INO_ID_MASK


def pil_loader(path):
    """torchvision's default loader without its per-file isatty(): a buffered
    open() in CPython asks the file whether it is a terminal, a round trip to the
    daemon on every image (pcrfs(1), "Python loaders"). FileIO does not ask."""
    from PIL import Image
    with io.FileIO(path, "r") as f:
        data = f.readall()
    img = Image.open(io.BytesIO(data))
    return img.convert("RGB")


def _record_of_paths(paths):
    """{path: record} for the files of @paths, from one os.scandir() per directory
    (the inode numbers come with the directory listing: no stat per file)."""
    if not paths:
        return {}
    mnt = find_mount(os.path.dirname(paths[0]))
    runs = records(mnt)
    starts = [r[0] for r in runs]
    by_dir = {}
    for p in paths:
        by_dir.setdefault(os.path.dirname(p), []).append(p)
    import bisect
    out = {}
    for d, ps in by_dir.items():
        want = set(os.path.basename(p) for p in ps)
        with os.scandir(d) as it:
            for e in it:
                if e.name not in want:
                    continue
                fid = file_id(e.inode())
                rec = None
                if fid is not None:
                    i = bisect.bisect_right(starts, fid) - 1
                    if i >= 0 and fid < runs[i][0] + runs[i][1]:
                        rec = runs[i][2]
                out[os.path.join(d, e.name)] = rec
    return out


def _sampler_base():
    try:
        from torch.utils.data import Sampler
        return Sampler
    except ImportError:  # usable without torch, e.g. to plan reads
        return object


class RecordSampler(_sampler_base()):
    """A torch Sampler over an ImageFolder or DatasetFolder of a pcrfs view (or any
    dataset with .samples = [(path, target), ...]) that yields indices record by
    record: the records in a shuffled order, the samples of a window of @window
    records shuffled together, so that reads go through each record's prefix once
    while batches still mix @window records.

    With @rank and @world_size (default: torch.distributed's, if initialised) the
    records are split across ranks like DistributedSampler splits samples: each rank
    gets every world_size-th record of the epoch's order, and every rank yields
    ceil(N / world_size) samples (repeating some of its own when its records hold
    fewer, leaving the last few out when they hold more), or floor(N / world_size)
    with @drop_last. Call set_epoch() each epoch: the
    order depends on (seed, epoch) only. Samples whose record cannot be found (not
    on a pcrfs mount, or tokens) are treated as one record each."""

    def __init__(self, dataset, shuffle=True, window=8, seed=0, rank=None, world_size=None,
                 drop_last=False):
        if window < 1:
            raise ValueError("window must be >= 1")
        if rank is None or world_size is None:
            try:
                import torch.distributed as dist
                ready = dist.is_available() and dist.is_initialized()
            except ImportError:
                ready = False
            world_size = world_size if world_size is not None else (
                dist.get_world_size() if ready else 1)
            rank = rank if rank is not None else (dist.get_rank() if ready else 0)
        if not 0 <= rank < world_size:
            raise ValueError("rank %d not in [0, %d)" % (rank, world_size))
        self.shuffle, self.window, self.seed = shuffle, window, seed
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.epoch = 0
        paths = [s[0] for s in dataset.samples]
        rec_of = _record_of_paths(paths)
        groups = {}
        for i, p in enumerate(paths):
            r = rec_of.get(p)
            groups.setdefault(("r", r) if r is not None else ("s", i), []).append(i)
        # records in store order (the order of their first file)
        self.records = sorted(groups.values(), key=lambda idx: idx[0])
        self._len = self._rank_length()

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _order(self):
        rng = random.Random((self.seed << 32) ^ self.epoch)
        recs = list(range(len(self.records)))
        if self.shuffle:
            rng.shuffle(recs)
        return rng, recs

    def _rank_length(self):
        # Every rank yields the same number of samples, as DDP needs: the total
        # split evenly (DistributedSampler's rule). Records differ in size, so a
        # rank whose records hold fewer samples repeats some of its own, and one
        # whose records hold more leaves the last few out this epoch.
        total = sum(len(r) for r in self.records)
        if self.drop_last:
            return total // self.world_size
        return -(-total // self.world_size)

    def __iter__(self):
        rng, recs = self._order()
        mine = recs[self.rank::self.world_size]
        out = []
        for w in range(0, len(mine), self.window):
            idx = [i for r in mine[w:w + self.window] for i in self.records[r]]
            if self.shuffle:
                rng.shuffle(idx)
            out.extend(idx)
        n = self._len
        while out and len(out) < n:
            out.extend(out[:n - len(out)])
        return iter(out[:n])

    def __len__(self):
        return self._len
