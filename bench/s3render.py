"""Render bench/s3.py's results into BENCHMARKS.md: the generated sections "s3" and
"local", between <!-- BEGIN GENERATED: NAME --> and <!-- END GENERATED: NAME -->
markers like bench/render.py's (a section whose markers are missing is appended with
its heading). Medians of the interleaved rounds; MB = 10^6 bytes, kB = 10^3 bytes.
"""
import os
import re
import statistics

from render import n0, n1, n2, status, table

GETS_TARGET = 0.02
BYTES_TOL = 0.01
S3FS_TARGET = 5.0
LOCAL_TARGET = 0.9
SAME = "pcrfs -o readahead=record, reader's session"  # bench/s3.py's label
# bench/s3.py's labels of the reads after an ImageFolder-style listing
READDIRPLUS = ("no", "auto", "yes")
LISTED = "pcrfs -o readahead=record,readdirplus=%s, after a listing"
LISTED_PLAIN = "plain files, after a listing"
# bench/s3.py's label of the order drawn from RecordSampler(prefetch=True) on the mount
HINTED = "pcrfs -o readahead=record, RecordSampler's hints"
SEEN = "pcrfs -o readahead=record"  # bench/s3.py's label of the same without hints


def med(xs):
    return statistics.median(xs) if xs else 0.0


def cmds_block(cmds, work="bench/s3.py's work directory"):
    if not cmds:
        return ""
    # ports are picked at random each run: one line per command
    out = []
    for c in cmds:
        c = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", c)
        c = re.sub(r"--(listen|upstream|control|p) \d+", r"--\1 PORT", c)
        c = re.sub(r"-p \d+", "-p S3PORT", c)
        c = re.sub(r"\S*/node_modules/\.bin/s3rver", "s3rver", c)
        if c.startswith("pcrfs s3://"):
            c = ("AWS_ENDPOINT_URL=http://127.0.0.1:PORT AWS_ACCESS_KEY_ID=S3RVER "
                 "AWS_SECRET_ACCESS_KEY=S3RVER " + c)
        if c not in out:
            out.append(c)
    cmds = out
    return ("\n\n<details><summary>Commands (as run; $WORK = %s, " % work +
            "$STORE and $DATASET = the store and the original JPEGs it was built from)"
            "</summary>\n\n```\n" + "\n".join(cmds) + "\n```\n</details>")


def header(res, sec):
    e = res["env"]
    s = res[sec]
    la = s.get("load_start") or e["load_start"]
    lb = s.get("load_end") or e.get("load_end") or ["?"] * 3
    return ("Measured %s at commit %s with `%s` (this section %.1f min); load average "
            "%s at the start, %s at the end (1/5/15 min, %d cores shared with other jobs)."
            % (e["date"], e["commit"], e["cmdline"], s["seconds"] / 60,
               " ".join("%.1f" % x for x in la),
               " ".join("%.1f" % x if isinstance(x, float) else x for x in lb), e["cores"]))


# ---- s3 --------------------------------------------------------------------------------

def row_figures(row, exp):
    """Medians over a row's runs: images/s, requests and bytes per image, hit rate."""
    runs = row["runs"]
    level = 5 if row["view"] == "scan5" else exp["levels"]
    out = {"ips": med([r["images_per_s"] for r in runs]),
           "ips_all": [r["images_per_s"] for r in runs],
           "first": med([r["first_batch_s"] or 0 for r in runs]),
           "images": med([r["images"] for r in runs])}
    if row["kind"] == "pcrfs":
        h = [r["http"] for r in runs]
        n = [r["images"] for r in runs]
        out["gets"] = med([x["gets"] / i for x, i in zip(h, n)])
        out["heads"] = med([(x["requests"] - x["gets"]) / i for x, i in zip(h, n)])
        out["bytes"] = med([x["bytes"] / i for x, i in zip(h, n)])
        out["proxy_bytes"] = med([r["proxy"]["bytes_down"] / r["images"] for r in runs])
        out["hit"] = med([x["cache_hits"] / max(1, x["cache_hits"] + x["cache_misses"])
                          for x in h])
        out["expect"] = exp["scans"][str(level)]
        out["cache_limit"] = h[0].get("cache_limit")
    else:
        out["gets"] = med([r["proxy"]["gets"] / r["images"] for r in runs])
        out["heads"] = med([r["proxy"]["heads"] / r["images"] for r in runs])
        out["lists"] = med([r["proxy"]["lists"] for r in runs])
        out["bytes"] = med([r["proxy"]["bytes_down"] / r["images"] for r in runs])
        out["walk"] = med([r.get("walk_s", 0) for r in runs])
        out["expect"] = None
        out["hit"] = None
    return out


def s3_analysis(res):
    s = res["s3"]
    exp = s["expected"]
    by = {}
    for row in s["rows"]:
        by[(row["rtt"], row["label"])] = dict(row, f=row_figures(row, exp))
    return by


def r_s3(res):
    if "s3" not in res:
        return "_Not measured in the run that produced this file._"
    s = res["s3"]
    exp = s["expected"]
    by = s3_analysis(res)
    labels = []
    for row in s["rows"]:
        if row["label"] not in labels:
            labels.append(row["label"])
    out = [header(res, "s3"), ""]
    out.append("Store: %s files in %d records (%s images per record); header + K scans = "
               "%s kB per image at scan5, %s kB at full (`pcrinfo --list`); record prefixes "
               "%s kB and %s kB per image (index.db's group offsets). s3fs-fuse %s mounts "
               "the %s original JPEGs; each s3fs run reads the first %d images of the random "
               "order, after a walk that lists and stats the tree (s3fs keeps a stat cache)."
               " DataLoader: %d workers, batch %d, decode + ToTensor; %d interleaved rounds, "
               "medians (every run's figure in `$WORK/s3-results.json`)." % (
                   n0(exp["files"]), exp["records"], n0(exp["files"] / exp["records"]),
                   n1(exp["scans"]["5"] / 1e3), n1(exp["scans"][str(exp["levels"])] / 1e3),
                   n1(exp["prefix"]["5"] / 1e3),
                   n1(exp["prefix"][str(exp["levels"])] / 1e3),
                   res["env"].get("s3fs", "?"), n0(exp["files"]), s["s3fs_limit"],
                   s["workers"], s["batch"], s["reps"]))
    for rtt in s["rtts"]:
        s3fs = max((by[(rtt, l)]["f"]["ips"] for l in labels if l.startswith("s3fs")),
                   default=0)
        rows = []
        for l in labels:
            f = by[(rtt, l)]["f"]
            rows.append([
                l, n1(f["ips"]), n2(f["ips"] / s3fs) + "x" if s3fs else "-",
                "%.4f" % f["gets"], "%.3f" % f["heads"], n1(f["bytes"] / 1e3),
                ("%.4f" % (f["bytes"] / f["expect"])) if f["expect"] else "-",
                ("%.1f %%" % (100 * f["hit"])) if f["hit"] is not None else "-",
                "%.2f s" % f["first"], " ".join(n0(x) for x in f["ips_all"])])
        out += ["", "**RTT %g ms**" % rtt, "",
                table(["", "images/s", "vs best s3fs", "GETs/image", "HEADs/image",
                       "kB fetched/image", "fetched / (header + K scans)", "cache hits",
                       "first batch", "runs (images/s)"], rows)]
    # random order with a cache smaller than the data
    if s.get("small_cache"):
        rows = []
        for r in s["small_cache"]:
            level = 5 if r["view"] == "scan5" else exp["levels"]
            h = r["http"]
            rows.append(["%s/, %s" % (r["view"], "RecordSampler" if r["sampler"] == "record"
                                      else "random order"),
                         "%.1f MB" % (r["cache_size"] / 1e6), n0(r["images"]),
                         n1(r["images_per_s"]), "%.3f" % (h["gets"] / r["images"]),
                         n1(h["bytes"] / r["images"] / 1e3),
                         n2(h["bytes"] / r["images"] / exp["scans"][str(level)]),
                         n0(h.get("evictions", 0))])
        out += ["", "**A cache smaller than the data (1.5 record prefixes), RTT %g ms**" %
                max(s["rtts"]), "",
                table(["", "cache_size", "images", "images/s", "GETs/image",
                       "kB fetched/image", "x (header + K scans)", "evictions"], rows)]
    # targets
    rec = [by[k] for k in by if by[k]["sampler"] == "record" and by[k]["kind"] == "pcrfs"]
    worst_gets = max(r["f"]["gets"] for r in rec)
    tgt = [["GETs per image with RecordSampler <= %.2f" % GETS_TARGET,
            "worst median %.4f (%s)" % (worst_gets, ", ".join(
                "%s %g ms: %.4f" % (r["view"], r["rtt"], r["f"]["gets"]) for r in rec
                if r["loader"] == "pcrfs")), status(worst_gets <= GETS_TARGET)]]
    for v in ("scan5", "full"):
        devs = [r["f"]["bytes"] / r["f"]["expect"] - 1 for r in rec if r["view"] == v]
        worst = max(devs, key=abs)
        tgt.append(["bytes fetched per image within %d %% of header + K scans, %s/" %
                    (100 * BYTES_TOL, v), "worst %+.3f %%" % (100 * worst),
                    status(abs(worst) <= BYTES_TOL)])
    rtt = max(s["rtts"])
    s5 = by[(rtt, "pcrfs scan5/, RecordSampler")]["f"]["ips"]
    s3fs = max(by[(rtt, l)]["f"]["ips"] for l in labels if l.startswith("s3fs"))
    # the same ratio within each round (the runs of a round ran minutes apart, under
    # about the same load)
    s5_runs = by[(rtt, "pcrfs scan5/, RecordSampler")]["runs"]
    fs_runs = [by[(rtt, l)]["runs"] for l in labels if l.startswith("s3fs")]
    per_round = [r["images_per_s"] / max(f[i]["images_per_s"] for f in fs_runs)
                 for i, r in enumerate(s5_runs)]
    tgt.append(["at %g ms, scan5/ with RecordSampler >= %gx s3fs-fuse on the originals" %
                (rtt, S3FS_TARGET), "%.2fx (%s vs %s images/s, medians, best s3fs loader); "
                "per round %s" % (s5 / s3fs, n1(s5), n1(s3fs),
                                  ", ".join("%.1fx" % x for x in per_round)),
                status(s5 / s3fs >= S3FS_TARGET)])
    out += ["", "**Targets**", "", table(["target", "measured", ""], tgt)]
    return "\n".join(out) + cmds_block(s.get("cmds"))


# ---- local -------------------------------------------------------------------------------

def r_local(res):
    if "local" not in res:
        return "_Not measured in the run that produced this file._"
    s = res["local"]
    out = [header(res, "local"), ""]
    rows, tgt = [], []
    groups = {}
    for row in s["rows"]:
        key = (row["view"], row["order"], row["decode"])
        groups.setdefault(key, {})[row["label"]] = row
    for (view, order, decode), g in groups.items():
        f = {l: med([r["files_per_s"] for r in row["runs"]]) for l, row in g.items()}
        mbs = {l: med([r["mb_per_s"] for r in row["runs"]]) for l, row in g.items()}
        if "pcrfs" not in f:
            continue  # (old results: a group without the kernel-readahead row)
        plain = f["plain files"]
        ra, no = f["pcrfs -o readahead=record"], f["pcrfs"]
        rows.append(["%s/" % view, "RecordSampler" if order == "record" else "random",
                     "read + decode" if decode else "read",
                     "%s (%s MB/s)" % (n0(ra), n1(mbs["pcrfs -o readahead=record"])),
                     "%s (%s MB/s)" % (n0(no), n1(mbs["pcrfs"])),
                     "%s (%s MB/s)" % (n0(plain), n1(mbs["plain files"])),
                     n2(ra / plain), n2(no / plain)])
        if order == "record" and not decode:
            tgt.append(["%s/ cold, record order + readahead >= %.1fx plain files" %
                        (view, LOCAL_TARGET), "%.2fx" % (ra / plain),
                        status(ra / plain >= LOCAL_TARGET)])
    out.append(table(["view", "order", "pass", "pcrfs readahead=record, files/s",
                      "pcrfs (kernel readahead), files/s", "plain files, files/s",
                      "readahead=record / plain", "kernel / plain"], rows))
    out += ["", "Medians of %d interleaved rounds, each cold (fresh mount, "
            "`sync; echo 3 > /proc/sys/vm/drop_caches` right before); one Python thread, "
            "`open(p, 'rb', buffering=0).read()` per file; the decode pass adds Pillow's "
            "`Image.open(...).convert('RGB')`.%s%s" % (
                s["reps"],
                " Each run reads the first %d files of its order (`--limit`), not all."
                % s["limit"] if s.get("limit") else "",
                " The record order's read pass only (`--record-only`): no random order, "
                "no decode pass." if s.get("record_only") else "")]
    out += local_rounds(groups)
    out += local_listed(groups)
    out += local_hinted(groups, tgt)
    out += ["", "**Targets** (judged on the first table's record-order read pass: the "
            "issue's definition, a fresh mount read without a listing)", "",
            table(["target", "measured", ""], tgt)]
    return "\n".join(out) + cmds_block(s.get("cmds"))


def local_rounds(groups):
    """Record order, read pass, round by round: the daemon in a session of its own (as
    it detaches; the table above) and started with -f in the reader's session (pcrfs(1),
    "Cold reads and the daemon's session"), each against the round's plain files."""
    rows = []
    for (view, order, decode), g in groups.items():
        if order != "record" or decode or SAME not in g:
            continue
        own, same, plain = (g[l]["runs"] for l in ("pcrfs -o readahead=record", SAME,
                                                   "plain files"))
        for i, (o, m, p) in enumerate(zip(own, same, plain)):
            rows.append(["%s/" % view, str(i + 1), "%.1f" % o["load"][0],
                         n0(o["files_per_s"]), n0(m["files_per_s"]), n0(p["files_per_s"]),
                         n2(o["files_per_s"] / p["files_per_s"]),
                         n2(m["files_per_s"] / p["files_per_s"])])
    if not rows:
        return []
    return ["", "Record order, read pass, `-o readahead=record`, round by round: the "
            "daemon in a session of its own (as it detaches, and as in the table above) "
            "and started with `-f` in the reader's session:", "",
            table(["view", "round", "load (1 min)", "own session, files/s",
                   "reader's session, files/s", "plain files, files/s", "own / plain",
                   "reader's / plain"], rows)]


def local_listed(groups):
    """Record order, read pass, after an ImageFolder-style listing in the same process
    (untimed, its time shown apart): -o readdirplus=no|auto|yes, and plain files after
    the same listing; the reads and the whole epoch (listing + reads) against plain."""
    rows = []
    for (view, order, decode), g in groups.items():
        if order != "record" or decode or LISTED_PLAIN not in g:
            continue
        p = g[LISTED_PLAIN]["runs"]
        pf = med([r["files_per_s"] for r in p])
        pe = med([r["seconds"] + r.get("list_seconds", 0) for r in p])
        pl = med([r.get("list_seconds", 0) for r in p])
        rows.append(["%s/" % view, "plain files", "%.3f" % pl, n0(pf), "", "",
                     ", ".join(n0(r["files_per_s"]) for r in p)])
        for rdp in READDIRPLUS:
            runs = g.get(LISTED % rdp, {}).get("runs")
            if not runs:
                continue
            f = med([r["files_per_s"] for r in runs])
            e = med([r["seconds"] + r.get("list_seconds", 0) for r in runs])
            rows.append(["%s/" % view, "pcrfs, readdirplus=%s" % rdp,
                         "%.3f" % med([r.get("list_seconds", 0) for r in runs]), n0(f),
                         n2(f / pf), n2(pe / e),
                         ", ".join(n0(r["files_per_s"]) for r in runs)])
    if not rows:
        return []
    return ["", "Record order, read pass, `-o readahead=record`, after an ImageFolder-style "
            "listing of the view in the same process (`bench/order_read.py --list`: "
            "`os.scandir` of the root, `os.walk` of each class directory; untimed, its "
            "seconds apart), with `-o readdirplus=no` (the default), `auto` and `yes`; "
            "plain files after the same listing. Reads / plain: files/s against plain "
            "files' (medians); epoch / plain: plain files' listing + reads time over "
            "pcrfs' (medians):", "",
            table(["view", "reader", "listing, s", "reads, files/s", "reads / plain",
                   "epoch / plain", "files/s by round"], rows)]


def local_hinted(groups, tgt):
    """Record order, read pass, the order drawn on the timed mount from
    RecordSampler(ImageFolder(view), prefetch=True), which hints the records it comes
    to (its listing untimed), against plain files read in the same order (after the
    same kind of listing, and fresh); adds its line to the targets @tgt."""
    rows = []
    for (view, order, decode), g in groups.items():
        if order != "record" or decode or HINTED not in g:
            continue
        h = g[HINTED]["runs"]
        hf = med([r["files_per_s"] for r in h])
        adv = ("%s; %s" % (adv_runs(h), adv_runs(g[SEEN]["runs"]))
               if SEEN in g else "")
        plains = [(l, g[l]["runs"]) for l in (LISTED_PLAIN, "plain files") if l in g]
        for l, p in plains:
            pf = med([r["files_per_s"] for r in p])
            rows.append(["%s/" % view, l, n0(pf), n0(hf), n2(hf / pf),
                         ", ".join(n2(a["files_per_s"] / b["files_per_s"])
                                   for a, b in zip(h, p)), adv])
        l, p = plains[0]
        pf = med([r["files_per_s"] for r in p])
        tgt.append(["%s/ cold, record order + the sampler's hints >= %.1fx %s" %
                    (view, LOCAL_TARGET, l), "%.2fx" % (hf / pf),
                    status(hf / pf >= LOCAL_TARGET)])
    if not rows:
        return []
    return ["", "Record order, read pass, `-o readahead=record`, the order drawn on the "
            "timed mount from `pcrfs.RecordSampler(ImageFolder(MNT/view), seed=0, "
            "prefetch=True)` as it is read (`bench/order_read.py --sampler`): the sampler "
            "names the records coming next through `MNT/.pcrfs/prefetch/` as a training "
            "job's does; ImageFolder's listing and the sampler's grouping untimed. The "
            "same order as the order file's (checked: SHA-1 of the paths read), against "
            "plain files read in it after a listing and fresh (medians; by round: each "
            "round's ratio). Advice: `records_advised` of `/.pcrfs/stats` after the "
            "reads (advice calls to the backend, a record advised again counted again), "
            "by round, with the hints and without them (the first table's "
            "readahead=record row, which advises the records it sees read record by "
            "record):", "",
            table(["view", "plain files", "plain, files/s", "with hints, files/s",
                   "hints / plain", "by round", "advice: hints; without"], rows)]


def adv_runs(runs):
    """records_advised of each of @runs ('?' where not counted)."""
    return "/".join("?" if r.get("records_advised") is None else str(r["records_advised"])
                    for r in runs)


RENDER = {"s3": r_s3, "local": r_local}
HEADINGS = {
    "s3": "## 12. Object storage: s3:// with a round-trip time, against s3fs-fuse\n\n"
          "`bench/s3.sh` (not part of `bench/run.sh`). One s3rver on 127.0.0.1 holds the "
          "store and the original JPEGs; `bench/delayproxy.py` sits in front of it and "
          "delays every chunk by half the round-trip time in each direction (and a new "
          "connection by one RTT), and counts requests and bytes. ImageFolder + Pillow "
          "reads an `s3://` mount (fresh mount and cache per run) and an s3fs-fuse mount "
          "of the originals through it.",
    "local": "## 13. Cold local reads in record order\n\n"
             "`bench/s3.sh` too. Whole-file reads of a local store's views in the order "
             "`pcrfs.RecordSampler` yields and in a random order, with and without "
             "`-o readahead=record`, against plain files holding the same bytes "
             "(`pcrinfo --extract`) read in the same order.",
}


def rewrite(path, res, render=None, headings=None):
    """Replace the generated sections @render (name -> function of @res; default this
    module's) in the file @path, appending a missing one under its @headings[name]."""
    render = render or RENDER
    headings = headings or HEADINGS
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# pcrfs benchmarks\n"
    for name, fn in render.items():
        begin = "<!-- BEGIN GENERATED: %s -->" % name
        end = "<!-- END GENERATED: %s -->" % name
        pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        if name not in res and pat.search(text):
            continue  # keep what an earlier run wrote
        block = "%s\n%s\n%s" % (begin, fn(res).strip(), end)
        if pat.search(text):
            text = pat.sub(lambda _: block, text, count=1)
        else:
            text = text.rstrip("\n") + "\n\n" + headings[name] + "\n\n" + block + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
