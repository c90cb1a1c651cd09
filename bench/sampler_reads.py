#!/usr/bin/python3
"""Record prefixes read per epoch across ranks by pcrfs.RecordSampler, against the
sampler it replaced (strided records per rank), and what each leaves out or repeats.

    sampler_reads.py --mount MNT [--worlds 1,2,8,...] [--epochs 3] [--window 8]
    sampler_reads.py --layout [-n FILES] [-d DIRS] [-r PER_RECORD] [...]

--mount reads the record layout of a mounted store from MNT/.pcrfs/records (an
ImageFolder of any view lists the files in id order, class by class, as the store
numbers them, so sample i is file id first + i); --layout computes ImageNet's layout
as bench/mkmeta makes it (1,281,167 files in 1,000 classes, records of 1,024 files
cut regardless of class). Nothing is read from the files: the figures count, for
every rank and epoch, the records whose prefix the rank reads (a rank reads a record
once per run of its samples it is given: a record at a share boundary counts for two
ranks; the padding's records count again), and the bytes that costs as a fraction of
one pass over the store (each record's share taken as its file count, i.e. the same
mean file size in every record), which is the byte count whenever a record is read
as one prefix (-o readahead=record, one ranged GET per record from object storage).

Prints one JSON object per line: sampler, world, drop_last, shuffle, records,
prefix_reads, extra_reads (beyond one per record), extra_bytes_pct, left_out,
repeated, empty_ranks (means per epoch), len_per_rank (every rank's length seen).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import pcrfs  # noqa: E402


def class_size(c, ndirs, nfiles):
    """bench/mkmeta.c's class_size(): 1,300 per class where that fits, the rest
    evenly over the last classes (kept at >= 85 % of 1,300 when possible)."""
    full = 1300
    if nfiles >= full * ndirs or nfiles < ndirs:
        return nfiles // ndirs + (c < nfiles % ndirs)
    nfull = min((nfiles - ndirs) // (full - 1), ndirs)
    while nfull > 0 and nfiles - nfull * full < ndirs - nfull:
        nfull -= 1
    while nfull > 0 and (nfiles - nfull * full) // (ndirs - nfull) < full * 85 // 100:
        nfull -= 1
    if c < nfull:
        return full
    rest, nrest = nfiles - nfull * full, ndirs - nfull
    return rest // nrest + (c - nfull < rest % nrest)


def layout_groups(nfiles, ndirs, per_record):
    """mkmeta's records: files in id order (class by class), cut every per_record."""
    assert sum(class_size(c, ndirs, nfiles) for c in range(ndirs)) == nfiles
    return [list(range(i, min(i + per_record, nfiles))) for i in range(0, nfiles, per_record)]


def mount_groups(mnt):
    """The records of a mounted store's image tree, as runs of sample indices."""
    groups = {}
    runs = pcrfs.records(mnt)
    first = runs[0][0] if runs else 1
    for fid, count, rec in runs:
        groups.setdefault(rec, []).extend(range(fid - first, fid - first + count))
    return [groups[r] for r in sorted(groups, key=lambda r: groups[r][0])]


def old_plan(groups, group_of, world, seed, epoch, shuffle, drop_last, window):
    """The replaced sampler's split (python/pcrfs before this change), every rank's:
    rank r took every world-th record of the epoch's order, its samples
    window-shuffled, then cut to, or padded by repeating its own start up to, the
    common length. Returns per rank its list of (record, [indices]) runs in read
    order, the padding's runs after the rest (the same random calls as that code, so
    the padding is the same samples)."""
    import random
    rng = random.Random((seed << 32) ^ epoch)
    recs = list(range(len(groups)))
    if shuffle:
        rng.shuffle(recs)
    total = len(group_of)
    n = total // world if drop_last else -(-total // world)
    shares = []
    for rank in range(world):  # one rank's process: the rng as it was after recs
        r_rng = random.Random()
        r_rng.setstate(rng.getstate())
        mine = recs[rank::world]
        runs, out = [], []
        for w in range(0, len(mine), window):
            if len(out) >= n:
                break
            idx = [i for r in mine[w:w + window] for i in groups[r]]
            if shuffle:
                r_rng.shuffle(idx)
            out.extend(idx)
        out = out[:n]
        while out and len(out) < n:
            out.extend(out[:n - len(out)])
        # runs: the records of each window read once; the padding's again
        base = min(len(out), sum(len(groups[r]) for r in mine))
        seen = set()
        for i in out[:base]:
            if group_of[i] not in seen:
                seen.add(group_of[i])
                runs.append((group_of[i], []))
        pad = set()
        for i in out[base:]:
            if group_of[i] not in pad:
                pad.add(group_of[i])
                runs.append((group_of[i], []))
        by = {}
        for g, ids in runs:
            by.setdefault(g, ids)
        for i in out:
            by[group_of[i]].append(i)
        shares.append(runs)
    return shares


def new_plan(groups, group_of, world, seed, epoch, shuffle, drop_last, window):
    return pcrfs.plan_epoch(groups, world, seed, epoch, shuffle, drop_last, window)


def measure(plan, groups, world, epochs, shuffle, drop_last, window):
    group_of = [0] * sum(len(g) for g in groups)
    for g, ids in enumerate(groups):
        for i in ids:
            group_of[i] = g
    nfiles = len(group_of)
    reads, extra_bytes, left, rep, empty, lens = [], [], [], [], 0, set()
    for epoch in range(epochs):
        counts = [0] * nfiles
        nreads, files_read = 0, 0
        for runs in plan(groups, group_of, world, 0, epoch, shuffle, drop_last, window):
            lens.add(sum(len(ids) for _, ids in runs))
            empty += not runs
            nreads += len(runs)
            files_read += sum(len(groups[g]) for g, _ in runs)
            for _, ids in runs:
                for i in ids:
                    counts[i] += 1
        reads.append(nreads)
        extra_bytes.append(100.0 * (files_read - nfiles) / nfiles)
        left.append(counts.count(0))
        rep.append(sum(c - 1 for c in counts if c > 1))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"records": len(groups), "prefix_reads": mean(reads),
            "extra_reads": mean(reads) - len(groups),
            "extra_bytes_pct": round(mean(extra_bytes), 3), "left_out": mean(left),
            "repeated": mean(rep), "empty_ranks": empty / epochs,
            "len_per_rank": sorted(lens)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--mount", help="a mounted store (reads MNT/.pcrfs/records)")
    src.add_argument("--layout", action="store_true", help="ImageNet's layout, as bench/mkmeta")
    ap.add_argument("-n", type=int, default=1281167, help="files (--layout)")
    ap.add_argument("-d", type=int, default=1000, help="classes (--layout)")
    ap.add_argument("-r", type=int, default=1024, help="files per record (--layout)")
    ap.add_argument("--worlds", default="1,2,3,4,7,8,16,32,64,128")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--window", type=int, default=8)
    a = ap.parse_args()
    groups = mount_groups(a.mount) if a.mount else layout_groups(a.n, a.d, a.r)
    for world in [int(w) for w in a.worlds.split(",")]:
        for shuffle in (True, False):
            for drop_last in (False, True):
                for name, plan in (("old", old_plan), ("new", new_plan)):
                    row = {"sampler": name, "world": world, "shuffle": shuffle,
                           "drop_last": drop_last}
                    row.update(measure(plan, groups, world, a.epochs, shuffle, drop_last,
                                       a.window))
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
