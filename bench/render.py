"""Render bench.py's results into the generated sections of BENCHMARKS.md.

Each generated section sits between
    <!-- BEGIN GENERATED: NAME -->  and  <!-- END GENERATED: NAME -->
and only that text is replaced; everything else in the file is hand-written and kept.
A section whose markers are missing is appended at the end. Units: MB = 10^6 bytes,
kB = 10^3 bytes.
"""
import os
import re

import loaders

PAPER = {1: 16.0, 2: 7.0, 5: 2.0}
THEOREM_TOL = 0.15
IO_BOUND = 0.85  # a run read the records at >= this share of the limit: I/O set its pace


def n0(x):
    return "{:,.0f}".format(x)


def n1(x):
    return "{:,.1f}".format(x)


def n2(x):
    return "{:.2f}".format(x)


def secs(x):
    if x < 1e-3:
        return "%.0f µs" % (x * 1e6)
    if x < 1:
        return "%.1f ms" % (x * 1e3)
    if x < 120:
        return "%.2f s" % x
    return "%.1f min" % (x / 60)


def mb(x):
    return "%.1f MB" % (x / 1e6)


def status(ok):
    return "met" if ok else "**missed**"


def table(head, rows, align=None):
    align = align or ["l"] + ["r"] * (len(head) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(sep) + " |"]
    # a '|' inside a cell, even in `code`, would end the cell
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def commands(res, *sections):
    cmds = []
    for s in sections:
        for c in res.get("cmds", {}).get(s, []):
            if c not in cmds:
                cmds.append(c)
    if not cmds:
        return ""
    return ("\n\n<details><summary>Commands (as run; $WORK = the work directory, "
            "$BUILD = the build directory)</summary>\n\n```\n" + "\n".join(cmds) +
            "\n```\n</details>")


def missing(res, s):
    return s not in res


NOT_MEASURED = "_Not measured in the run that produced this file._"


# ---- derived figures shared by the sections and the target table ------------------------

def reader_rows(res):
    return {r["label"]: r for r in res["reader"]["rows"]}


def bw_analysis(res):
    """Per rate: rows by view with prediction and bound, and the scan5/full check."""
    ceil = {}
    if "imagefolder" in res:
        cores = res["env"]["cores"]
        for r in res["imagefolder"]["rows"]:
            if r["label"].startswith("pcrfs ") and r.get("cpu_ms_per_image"):
                ceil[r["label"][6:]] = cores * 1e3 / r["cpu_ms_per_image"]
    out = []
    rates = []
    for r in res["bwlimit"]["rows"]:
        if r["rate"] not in rates:
            rates.append(r["rate"])
    for rate in rates:
        rows = {r["view"]: dict(r) for r in res["bwlimit"]["rows"] if r["rate"] == rate}
        for v, r in rows.items():
            r["predicted"] = rate / r["bytes_per_image"] if r["bytes_per_image"] else 0
            r["ceiling"] = ceil.get(v)
            # empirical: did the daemon read the records at (nearly) the limit?
            r["record_rate"] = r["bytes_per_image"] * r["images_per_s"]
            r["cpu_bound"] = r["record_rate"] < IO_BOUND * rate
        checks = {}
        for v in ("scan5", "scan2", "scan1"):
            if v in rows and "full" in rows:
                sp = rows[v]["images_per_s"] / rows["full"]["images_per_s"]
                br = rows["full"]["bytes_per_image"] / rows[v]["bytes_per_image"]
                io = not rows[v]["cpu_bound"] and not rows["full"]["cpu_bound"]
                checks[v] = {"speedup": sp, "byte_ratio": br, "rel": sp / br, "io_bound": io,
                             "ok": abs(sp / br - 1) <= THEOREM_TOL}
        out.append({"rate": rate, "rows": rows, "checks": checks})
    return out


# ---- sections ----------------------------------------------------------------------------

def r_env(res):
    e = res["env"]
    rows = [
        ("Date", e["date"]),
        ("Command", "`%s` (%s in all, measuring %s; %s)" % (
            e["cmdline"], secs(e.get("total_s", 0)), secs(e.get("measure_s", 0)),
                                       "every section" if e.get("complete") else
                                       "**some sections only**; the others are from an "
                                       "earlier run")),
        ("Machine", "%s, %d cores, %.1f GiB RAM" % (e["cpu"], e["cores"], e["mem"] / 2**30)),
        ("System", "%s, Linux %s; work directory on %s" % (e["os"], e["kernel"], e["disk"])),
        ("Software", "libfuse %s, libjpeg-turbo %s, SQLite %s, squashfuse %s, squashfs-tools "
                     "%s, Python %s, Pillow %s, torch %s, torchvision %s" % (
                         e["libfuse"], e["libjpeg_turbo"], e["sqlite"], e["squashfuse"],
                         e["squashfs_tools"], e["python"], e["pillow"], e["torch"],
                         e["torchvision"])),
        ("pcrfs", "commit %s" % e["commit"]),
        ("Load average", "%s at the start, %s at the end (1/5/15 min; %d cores: other jobs "
                         "share the machine, so compare ratios)" % (
                             " ".join("%.1f" % x for x in e["load_start"]),
                             " ".join("%.1f" % x for x in e.get("load_end", [0, 0, 0])),
                             e["cores"])),
    ]
    if "dataset" in res:
        d = res["dataset"]
        how = {"given": "given with --dataset",
               "generated": "generated by `make_dataset.py` in %s" % secs(d.get("seconds", 0))}
        rows.append(("Dataset", "%s images, %s (mean %.1f kB), %s%s" % (
            n0(d["files"]), mb(d["bytes"]), d["bytes"] / d["files"] / 1e3,
            how.get(d["kind"], d["kind"]),
            " (reused from an earlier run)" if d.get("reused") else "")))
    fd = res.get("foreign_drops", {})
    if fd:
        rows.append(("Cache drops by other jobs", "%d during this run (%s): a warm figure may "
                     "then include cold reads, and the kernel's dentry cache is emptied" % (
                         sum(fd.values()), ", ".join("%s %d" % kv for kv in fd.items()))))
    t = res.get("timing", {})
    if t:
        rows.append(("Time per section", ", ".join("%s %s" % (k, secs(v)) for k, v in t.items())))
    return table(["", ""], rows, ["l", "l"]) + commands(res, "dataset")


def r_targets(res):
    rows = []
    e = res["env"]
    if e.get("complete"):
        rows.append(("whole command < 30 min", secs(e["total_s"]), status(e["total_s"] < 1800),
                     ""))
    if "bwlimit" in res and "missing" not in res["bwlimit"]:
        for a in bw_analysis(res):
            c = a["checks"].get("scan5")
            if not c:
                continue
            note = "I/O-bound" if c["io_bound"] else (
                "not I/O-bound: records read at %s of the limit (CPU: decoding, other jobs); "
                "see §2" % " and ".join("%.0f %%" % (100 * a["rows"][v]["record_rate"] / a["rate"])
                                       for v in ("scan5", "full")))
            rows.append(("Theorem 4.1 at %s MB/s: scan5/full speed-up within 15 %% of the byte "
                         "ratio" % n0(a["rate"] / 1e6),
                         "%s× vs %s× (%+.0f %%)" % (n2(c["speedup"]), n2(c["byte_ratio"]),
                                                    (c["rel"] - 1) * 100),
                         status(c["ok"]), note))
    if "meta" in res:
        m = res["meta"]
        f = m["find"]["scan5 cold"]
        rows += [
            ("mount of 1.28 M files < 1 s", secs(m["mount_cmd_s"]), status(m["mount_cmd_s"] < 1),
             ""),
            ("RSS after mount < 300 MB", mb(m["rss_mount"]), status(m["rss_mount"] < 300e6), ""),
            ("RSS after a full `find` < 300 MB", mb(m["rss_find2"]),
             status(m["rss_find2"] < 300e6), "peak %s" % mb(m["hwm_end"])),
            ("`find MNT/scan5 | wc -l` ≥ 200 k entries/s (cold)", "%s k/s" % n0(f["rate"] / 1e3),
             status(f["rate"] >= 200e3),
             "warm %s k/s; %s; see §3" % (
                 n0(m["find"]["scan5 warm"]["rate"] / 1e3),
                 "; ".join("%s %s k/s" % (k.split(", -o ")[1], n0(v["rate"] / 1e3))
                           for k, v in m["find"].items() if ", -o " in k))),
        ]
    if "reader" in res:
        rr = reader_rows(res)
        p, s = rr["pcrfs full"], rr["squashfuse_ll full"]
        for k in ("cold", "warm"):
            ratio = p[k + "_fps"] / s[k + "_fps"]
            rows.append(("pcrfs full ≥ 1.0× squashfuse_ll (%s)" % k, "%.3f×" % ratio,
                         status(ratio >= 1.0), ""))
        for v in ("scan1", "scan5", "full"):
            ratio = rr["pcrfs " + v]["warm_fps"] / rr["plain " + v]["warm_fps"]
            rows.append(("reader warm ≥ 0.8× plain files (%s)" % v, "%.3f×" % ratio,
                         status(ratio >= 0.8),
                         "" if ratio >= 0.8 else "FUSE's per-file cost (OPEN round trip); see §5"))
    if "build" in res:
        b = res["build"]
        pc_cpu = b["j1"]["ips_cpu"] / b["bare_cpu"]
        pc_wall = b["j1"]["ips_wall"] / b["bare_wall"]
        sc = b["j2"]["ips_wall"] / b["j1"]["ips_wall"]
        rows += [
            ("build per core ≥ 90 % of the bare transform", "%.0f %% (CPU time), %.0f %% (wall)" % (
                pc_cpu * 100, pc_wall * 100), status(pc_cpu >= 0.9),
             "CPU time: wall time depends on the other jobs"),
            ("mkpcrfs -j2 ≥ 1.8× -j1", "%.3f×" % sc, status(sc >= 1.8),
             "-j2 got %.2f cores of CPU time per wall second; load average %s after the "
             "build; see §8" % (b["j2"]["cpu"] / b["j2"]["wall"],
                               " ".join("%.1f" % x for x in b["load_after"]))),
        ]
    if tok_ok(res):
        t = res["tokens"]
        for c, name in TOK_CODERS.items():
            us = t["decode"][c]["us"]
            rows.append(("token grid decode ≤ %g µs (%s)" % (TOK_DECODE_US, c), "%.2f µs" % us,
                         status(us <= TOK_DECODE_US),
                         ("auto choice; " if c == t.get("auto") else "") +
                         "SeiT: 0.7 ms; see §10"))
        rr = tok_reads(res)
        p, q = rr["pcrfs tokens/ (.tok)"], rr["plain .npy tree"]
        for k in ("cold", "warm"):
            ratio = p[k + "_fps"] / q[k + "_fps"]
            rows.append((".tok reads ≥ %g× the .npy files on disk (%s)" % (TOK_READ_RATIO, k),
                         "%.3f×" % ratio, status(ratio >= TOK_READ_RATIO), "see §10"))
    if "bytes" in res:
        worst = max(abs(r["measured"] / r["expected"] - 1) for r in res["bytes"]["rows"])
        rows.append(("bytes read from records per image = header + scans 1..K",
                     "within %.2f %% at every level" % (worst * 100), status(worst <= 0.01), ""))
    if not rows:  # no section with a target ran: keep the table already there (rewrite)
        return NOT_MEASURED
    return table(["target", "measured", "status", "note"], rows, ["l", "r", "l", "l"])


def r_pcr(res):
    if missing(res, "pcr"):
        return NOT_MEASURED
    info = res["pcr"]["info"]
    full = info["table"][-1]["mean_bytes"]
    rows = [("source (as given)", n0(res["pcr"]["source_mean"]),
             n2(res["pcr"]["source_mean"] / full), "", "")]
    for t in info["table"]:
        k = t["level"]
        rows.append(("scan%d" % k + (" = full" if k == info["levels"] else ""),
                     n0(t["mean_bytes"]), "%.3f" % t["ratio_to_full"],
                     "%s×" % n1(full / t["mean_bytes"]),
                     "%g×" % PAPER[k] if k in PAPER else ""))
    txt = table(["level", "mean bytes/JPEG", "ratio to full", "full ÷ level",
                 "paper (ImageNet): full ÷ level"], rows)
    txt += ("\n\n%s files: %s JPEGs transcoded, %s stored verbatim; store %s for %s of source "
            "(%.1f %%)." % (n0(info["files"]), n0(info["jpeg"]), n0(info["verbatim"]),
                           mb(info["store_bytes"]), mb(info["source_bytes"]),
                           100 * info["store_bytes"] / info["source_bytes"]))
    return txt + commands(res, "pcr")


def r_build(res):
    if missing(res, "build"):
        return NOT_MEASURED
    b = res["build"]
    n = b["files"]
    rows = [
        ("bare libjpeg transform (bench_transform, 1 thread, in memory)", n1(b["bare_wall"]),
         n1(b["bare_cpu"]), "1.00", "1.00"),
        ("pcr_jpeg_transcode + pcr_jpeg_split (same, 1 thread)", n1(b["pcr_wall"]),
         n1(b["pcr_cpu"]), n2(b["pcr_wall"] / b["bare_wall"]), n2(b["pcr_cpu"] / b["bare_cpu"])),
    ]
    for j in (1, 2):
        r = b["j%d" % j]
        rows.append(("`mkpcrfs -j%d` (files on disk → store, fsync)" % j, n1(r["ips_wall"]),
                     n1(r["ips_cpu"]), n2(r["ips_wall"] / b["bare_wall"]),
                     n2(r["ips_cpu"] / b["bare_cpu"])))
    txt = table(["", "images/s (wall)", "images per CPU-second", "÷ bare (wall)",
                 "÷ bare (CPU)"], rows)
    txt += ("\n\n%s images. `-j2` ÷ `-j1` (wall): **%s×**; CPU time ÷ wall time: %s cores "
            "busy with -j1, %s with -j2. mkpcrfs: best of %d runs each, "
            "alternating -j1 and -j2; wall times %s (-j1) and %s (-j2). The -j1 and -j2 stores "
            "are %s. Load average %s before, %s after." % (
                n0(n), n2(b["j2"]["ips_wall"] / b["j1"]["ips_wall"]),
                n2(b["j1"]["cpu"] / b["j1"]["wall"]), n2(b["j2"]["cpu"] / b["j2"]["wall"]),
                len(b["j1"]["runs"]),
                ", ".join(secs(r["wall"]) for r in b["j1"]["runs"]),
                ", ".join(secs(r["wall"]) for r in b["j2"]["runs"]),
                "byte-identical" if b["same_records"] else "**different**",
                " ".join("%.1f" % x for x in b["load_before"]),
                " ".join("%.1f" % x for x in b["load_after"])))
    return txt + commands(res, "build")


def r_bytes(res):
    if missing(res, "bytes"):
        return NOT_MEASURED
    rows = []
    for r in res["bytes"]["rows"]:
        rows.append(("scan%d" % r["level"], n0(r["served"]), n0(r["read_served"]),
                     n0(r["expected"]), n0(r["measured"]), "%.4f" % (r["measured"] / r["expected"])))
    txt = table(["view", "mean bytes served (index)", "mean bytes read by the reader",
                 "expected from records (served − EOI)", "read from records (/.pcrfs/stats)",
                 "read ÷ expected"], rows)
    return (txt + "\n\n%s files per view, each read once on a fresh mount." %
            n0(res["bytes"]["files"]) + commands(res, "bytes"))


def r_reader(res):
    if missing(res, "reader"):
        return NOT_MEASURED
    r = res["reader"]
    rr = reader_rows(res)
    rows = []
    for x in r["rows"]:
        rows.append((x["label"], n0(x["files"]), mb(x["bytes"]), n0(x["cold_fps"]),
                     n1(x["cold_mbps"]), n0(x["warm_fps"]), n1(x["warm_mbps"])))
    txt = table(["tree", "files", "bytes", "cold files/s", "cold MB/s", "warm files/s",
                 "warm MB/s"], rows)
    rows = []
    for v in ("scan1", "scan5", "full"):
        p, q = rr["pcrfs " + v], rr["plain " + v]
        rows.append((v, "%.3f" % (p["cold_fps"] / q["cold_fps"]),
                     "%.3f" % (p["warm_fps"] / q["warm_fps"])))
    txt += "\n\npcrfs ÷ plain files holding the same bytes (`pcrinfo --extract`):\n\n"
    txt += table(["view", "cold", "warm (target ≥ 0.8)"], rows)
    txt += ("\n\n%d reader threads; cold = fresh mount and `drop_caches` before the run, "
            "best of %d; warm = the same again with the data in the page cache (each run "
            "reads the tree %d times), best of %d; runs interleaved. Every run's files/s: "
            "%s." % (
                r["threads"], len(r["rows"][0]["cold_all"]), r.get("warm_passes", 1),
                len(r["rows"][0]["warm_all"]),
                "; ".join("%s cold %s, warm %s" % (
                    x["label"], "/".join(n0(y) for y in x["cold_all"]),
                    "/".join(n0(y) for y in x["warm_all"])) for x in r["rows"])))
    return txt + commands(res, "reader")


def r_peers(res):
    if missing(res, "reader"):
        return NOT_MEASURED
    r = res["reader"]
    rr = reader_rows(res)
    p, s, q = rr["pcrfs full"], rr["squashfuse_ll full"], rr["plain full"]
    rows = []
    for x in (p, s, q):
        rows.append((x["label"], n0(x["cold_fps"]), n1(x["cold_mbps"]), n0(x["warm_fps"]),
                     n1(x["warm_mbps"]), n2(x["cold_fps"] / s["cold_fps"]),
                     n2(x["warm_fps"] / s["warm_fps"])))
    txt = table(["same full-fidelity files via", "cold files/s", "cold MB/s", "warm files/s",
                 "warm MB/s", "÷ squashfuse_ll cold", "÷ squashfuse_ll warm"], rows)
    ls = {x["label"]: x for x in r["ls"]}
    rows = []
    for x in r["ls"]:
        rows.append(("`ls -lR` " + x["label"], secs(x["cold"]), secs(x["warm"]),
                     n2(x["cold"] / ls["plain full"]["cold"]),
                     n2(x["warm"] / ls["plain full"]["warm"])))
    txt += "\n\n" + table(["listing", "cold", "warm", "÷ plain cold", "÷ plain warm"], rows)
    build = ""
    if "build" in res:
        build = " (`mkpcrfs -j2` on the source: %s)" % secs(res["build"]["j2"]["wall"])
    txt += ("\n\nThe squashfs image (`mksquashfs` defaults: gzip, 128 KiB blocks) holds the "
            "files of `pcrinfo --extract --level full`: %s, built in %s%s. `ls -lR` times are "
            "the best of the runs (cold: fresh mount + drop_caches)." % (mb(r["sqfs_bytes"]),
                                                           secs(r["mksquashfs_s"]), build))
    return txt


def r_imagefolder(res):
    if missing(res, "imagefolder"):
        return NOT_MEASURED
    rows = res["imagefolder"]["rows"]
    src = rows[0]["images_per_s"]
    pf = rows[1]["images_per_s"]
    cores = res["env"]["cores"]
    out = []
    for r in rows:
        cpu = r.get("cpu_ms_per_image")
        out.append((r["label"], n0(r["images"]), n1(r["images_per_s"]), n2(r["images_per_s"] / src),
                    n2(r["images_per_s"] / pf), "%.0f" % (r["mpixels"] / r["seconds"]),
                    "%.2f" % cpu if cpu else "?", n0(cores * 1e3 / cpu) if cpu else "?"))
    txt = table(["tree", "images timed", "images/s", "÷ source", "÷ plain full",
                 "Mpixel/s decoded", "CPU ms/image", "ceiling on %d cores (img/s)" % cores], out)
    txt += ("\n\nOne epoch each, shuffled, %d DataLoader workers, cold (fresh mount, "
            "drop_caches); best of %d rounds (every run, images/s: %s). CPU ms/image is the "
            "workers' CPU time per image (from the run shown), which other jobs do not "
            "inflate; the ceiling is what the cores could decode if they were free, and is "
            "the decode ceiling of §2." % (
                res["imagefolder"]["workers"], res["imagefolder"].get("reps", 1),
                "; ".join("%s %s" % (r["label"], " / ".join(n0(x) for x in r.get("all", [])))
                          for r in rows)))
    return txt + commands(res, "imagefolder")


def r_bwlimit(res):
    if missing(res, "bwlimit"):
        return NOT_MEASURED
    if "missing" in res["bwlimit"]:
        return "_Not measured: %s._" % res["bwlimit"]["missing"]
    txt = []
    an = bw_analysis(res)
    rows = []
    for a in an:
        for v in ("full", "scan5", "scan2", "scan1"):
            r = a["rows"].get(v)
            if not r:
                continue
            rows.append(("%s MB/s" % n0(a["rate"] / 1e6), v, n0(r["images_all"]),
                         n0(r["bytes_per_image"]),
                         n1(r["predicted"]), n1(r["images_per_s"]),
                         n2(r["images_per_s"] / r["predicted"]) if r["predicted"] else "",
                         n1(r["ceiling"]) if r["ceiling"] else "?",
                         "%.1f" % (r["record_rate"] / 1e6),
                         "CPU" if r["cpu_bound"] else "I/O",
                         " / ".join(n0(x) for x in r.get("all", []))))
    txt.append(table(["limit", "view", "images", "bytes/image read",
                      "I/O-bound prediction (img/s)",
                      "measured img/s", "÷ prediction", "decode ceiling (img/s, §6)",
                      "records read at (MB/s)", "bound by", "every run (img/s)"], rows,
                     ["l", "l", "r", "r", "r", "r", "r", "r", "r", "l", "r"]))
    rows = []
    for a in an:
        for v in ("scan5", "scan2", "scan1"):
            c = a["checks"].get(v)
            if not c:
                continue
            rows.append(("%s MB/s" % n0(a["rate"] / 1e6), "%s ÷ full" % v,
                         "%s×" % n2(c["speedup"]), "%s×" % n2(c["byte_ratio"]),
                         "%+.0f %%" % ((c["rel"] - 1) * 100),
                         status(c["ok"]) + ("" if c["io_bound"] else " (not I/O-bound)")))
    txt.append(table(["limit", "speed-up", "measured", "byte ratio (full ÷ view)",
                      "speed-up ÷ byte ratio − 1", "within 15 %"], rows))
    b = res["bwlimit"]
    txt.append("Random images, the same ones for every view at one limit, as many as "
               "make about %g s of reading the full view at the limit; %d DataLoader "
               "workers; a fresh mount with `-o bwlimit=RATE` per run; best of %d rounds "
               "(all rates and views in each round). Bytes per image are the bytes taken from "
               "record files (from `/.pcrfs/stats`) ÷ images read. A run is I/O-bound when "
               "the records were read at ≥ %d %% of the limit; otherwise the CPU (decoding, "
               "or other jobs on the machine) set the pace and the theorem does not apply." %
               (b.get("seconds", 0), b["workers"], b.get("reps", 1), IO_BOUND * 100))
    return "\n\n".join(txt) + commands(res, "bwlimit")


def r_meta(res):
    if missing(res, "meta"):
        return NOT_MEASURED
    m = res["meta"]
    b = m["build"]
    f = m["find"]
    st = m["stat"]
    ld = m["ls_dir"]
    rows = [
        ("build (`bench/mkmeta`, through the writer API)",
         "%s files in %s directories, %s records, %s (index %s)" % (
             n0(b["files"]), n0(b["dirs"]), n0(b["records"]), mb(m["store_bytes"]),
             mb(m["index_bytes"])), secs(b["seconds"]), ""),
        ("mount: `pcrfs STORE MNT` returns", "", secs(m["mount_cmd_s"]),
         status(m["mount_cmd_s"] < 1) + " (< 1 s)"),
        ("mount: exec to first answer (`-f`)", "", secs(m["mount_s"]), ""),
        ("RSS after mount", mb(m["rss_mount"]), "", status(m["rss_mount"] < 300e6) + " (< 300 MB)"),
        ("first read of a file (directory not loaded, record not open, caches dropped)",
         "%s bytes" % n0(m["first_read_bytes"]), secs(m["first_read_s"]),
         "second read %s" % secs(m["second_read_s"])),
        ("`ls -l` of a %s-file class, cold (directory loaded from the index)" % n0(ld["files"]),
         "", secs(ld["cold"]), "plain directory: %s" % secs(ld["plain_cold"])),
        ("`ls -l` of the same class, warm", "", secs(ld["warm"]),
         "plain directory: %s" % secs(ld["plain_warm"])),
    ]
    for k, v in f.items():
        view, what = k.split(" ", 1)
        note = "%s k entries/s" % n0(v["rate"] / 1e3)
        if k == "scan5 cold":
            note += " — %s (≥ 200 k/s); best of %d fresh mounts: %s k/s" % (
                status(v["rate"] >= 200e3), len(v.get("all", [1])),
                " / ".join(n0(x / 1e3) for x in v.get("all", [v["rate"]])))
        rows.append(("`find MNT/%s | wc -l`%s%s" % (view, " " if what[0] == "(" else ", ", what),
                     "%s entries" % n0(v["entries"]), secs(v["s"]), note))
    rows.append(("RSS after `find` of two views", mb(m["rss_find2"]), "",
                 status(m["rss_find2"] < 300e6) + " (< 300 MB)"))
    for k, v in st.items():
        rows.append(("`stat`, %s" % k, "%s paths" % n0(v["n"]), secs(v["s"]),
                     "%s k stats/s" % n0(v["rate"] / 1e3)))
    rows.append(("RSS at the end; peak (VmHWM)", "%s; %s" % (mb(m["rss_end"]), mb(m["hwm_end"])),
                 "", status(m["hwm_end"] < 300e6) + " (< 300 MB)"))
    txt = table(["", "size", "time", "rate / note"], rows, ["l", "r", "r", "l"])
    txt += ("\n\nEach file is the same %d-byte 16×16 progressive JPEG (%d scans), so every "
            "entry can be read and decoded. `stat` = `os.lstat` from one Python thread over a "
            "random sample of paths; \"scan2 cold\" is a view nothing has listed, so each "
            "`stat` is a FUSE LOOKUP." % (b["image_bytes"], b["nchunks"]))
    return txt + commands(res, "meta")


def r_fidelity(res):
    if missing(res, "fidelity"):
        return NOT_MEASURED
    if "missing" in res["fidelity"]:
        return "_Not measured: %s._" % res["fidelity"]["missing"]
    return res["fidelity"]["markdown"].strip() + commands(res, "fidelity")


SEIT_PUBLISHED, SEIT_RAW, SEIT_DECODE_US = 1110, 2000, 700  # SeiT (ImageNet-1k), per image
TOK_DECODE_US = 5.0   # target: µs to decode one 32x32 grid, one thread
TOK_READ_RATIO = 0.7  # target: .tok files/s through the mount ÷ the same .npy on local disk
TOK_CODERS = {"huffman": "canonical Huffman over re-indexed tokens",
              "zstd-dict": "escape + zstd-dict"}


def tok_reads(res):
    return {r["label"]: r for r in res["tokens"]["reads"]}


def tok_ok(res):
    return "tokens" in res and "missing" not in res["tokens"]


def r_tokens(res):
    if missing(res, "tokens"):
        return NOT_MEASURED
    t = res["tokens"]
    if "missing" in t:
        return "_Not measured: %s._" % t["missing"]
    h, w = t["shape"]
    ntok = h * w
    raw = 2.0 * ntok
    # the coders pcrfs can store, by the prefix of their bench_tokens row
    stored = {"canonical Huffman over re-indexed tokens": "huffman",
              "escape + zstd-dict": "zstd-dict"}
    rows = []
    for r in t["rows"]:
        if r["name"].startswith("SeiT paper"):
            continue
        coder = next((c for k, c in stored.items() if r["name"].startswith(k)), None)
        name = ("  · " + r["name"].strip()) if r["sweep"] else r["name"]
        if coder:
            name = "**%s**%s" % (name, " (auto choice)" if coder == t.get("auto") else "")
        total = r["bytes"] + r["model_amort"]
        rows.append((name, n1(r["bytes"]), "%.3f" % r["bits"],
                     "%.1f" % r["model_amort"] if r["model_bytes"] else "",
                     "%.3f" % (total / SEIT_PUBLISHED), n2(raw / total)))
    for name, b in (("SeiT paper, published (ImageNet-1k)", SEIT_PUBLISHED),
                    ("SeiT paper, raw (ImageNet-1k)", SEIT_RAW)):
        rows.append(("_%s_" % name, n1(b), "%.3f" % (8.0 * b / ntok), "",
                     "%.3f" % (b / SEIT_PUBLISHED), n2(raw / b)))
    txt = table(["encoding (per grid, random access unless noted)", "bytes/image",
                 "bits/token", "+ model bytes/image (amortised)", "÷ SeiT 1.11 kB",
                 "raw uint16 ÷ this"], rows)
    rows = []
    for c, name in TOK_CODERS.items():
        d = t["decode"][c]
        rows.append((name + (" (auto choice)" if c == t.get("auto") else ""), "%.2f" % d["us"],
                     "%.2f" % d["ns_token"], "%.1f" % t["encode_us"][c] if "encode_us" in t
                     else "?", n0(SEIT_DECODE_US / d["us"]) + "×",
                     status(d["us"] <= TOK_DECODE_US)))
    txt += "\n\nDecode of one %d×%d grid, one thread (thread CPU time, best of 5 passes):\n\n" % (
        h, w)
    txt += table(["coder", "decode µs/grid", "ns/token", "encode µs/grid",
                  "faster than SeiT's 0.7 ms", "≤ %g µs" % TOK_DECODE_US], rows,
                 ["l", "r", "r", "r", "r", "l"])
    rr = tok_reads(res)
    p, q = rr["pcrfs tokens/ (.tok)"], rr["plain .npy tree"]
    rows = []
    for x in t["reads"]:
        rows.append((x["label"], n0(x["files"]), mb(x["bytes"]), n0(x["cold_fps"]),
                     n1(x["cold_mbps"]), n0(x["warm_fps"]), n1(x["warm_mbps"])))
    rows.append(("pcrfs ÷ plain", "", "", "**%.3f**" % (p["cold_fps"] / q["cold_fps"]), "",
                 "**%.3f**" % (p["warm_fps"] / q["warm_fps"]), ""))
    txt += "\n\nWhole-file reads of the same grids as `.npy` files (`tests/bench/read_tree.py`):\n\n"
    txt += table(["tree", "files", "bytes", "cold files/s", "cold MB/s", "warm files/s",
                  "warm MB/s"], rows)
    if t.get("npload"):
        nl = {x["label"]: x["fps"] for x in t["npload"]}
        txt += ("\n\n`numpy.load` of every file (1 thread, shuffled, warm, best of 3): "
                "%s files/s through the mount, %s on local disk (%.3f×)." % (
                    n0(nl[p["label"]]), n0(nl[q["label"]]), nl[p["label"]] / nl[q["label"]]))
    st = t["store"]
    txt += ("\n\n%s synthetic grids of %d×%d tokens (`tests/gen/mktokens.py`: %d classes, "
            "codebook 391, %d values used, Zipf-like with spatial runs; not ImageNet's tokens, "
            "so compare the ratios rather than SeiT's absolute sizes). The SeiT files and the "
            ".npy tree are generated separately with the same seed and parameters. "
            "`mkpcrfs --tokens` built a %s store from %s of .npy files in %s; the mount serves "
            "each grid as the same .npy bytes (200 random files compared). Reads: %d threads; "
            "cold = fresh mount and `drop_caches`, best of %d; warm = page cache primed, each "
            "run reads the tree %d times, best of %d. Every run's files/s: %s." % (
                n0(t["images"]), h, w, t["classes"], t.get("symbols", 0), mb(st["bytes"]),
                mb(st["npy_bytes"]), secs(st["seconds"]), t["threads"], len(p["cold_all"]),
                t["warm_passes"], len(p["warm_all"]),
                "; ".join("%s cold %s, warm %s" % (
                    x["label"], "/".join(n0(y) for y in x["cold_all"]),
                    "/".join(n0(y) for y in x["warm_all"])) for x in t["reads"])))
    return txt + commands(res, "tokens")


RENDER = {
    "env": r_env, "targets": r_targets, "pcr": r_pcr, "bwlimit": r_bwlimit, "meta": r_meta,
    "peers": r_peers, "reader": r_reader, "imagefolder": r_imagefolder, "bytes": r_bytes,
    "build": r_build, "fidelity": r_fidelity, "tokens": r_tokens,
    "pyloader": lambda res: loaders.r_pyloader(res, table, n0, n1, n2, status, commands),
    "listing": lambda res: loaders.r_listing(res, table, n0, n1, n2, status, commands),
}

# Written above a section's markers when they are missing (then hand-editable, like the
# other headings).
HEADINGS = {
    "tokens": "## 10. Token grids (SeiT format): bytes, decode time, reads\n\n"
              "Issue #4. Bytes per 32×32 grid for each encoding against the order-0 entropy "
              "and SeiT's published 1.11 kB/image (2.0 kB raw), decode time per grid per "
              "coder (SeiT reported 0.7 ms), and `.tok` files through the mount against the "
              "same `.npy` files on local disk.",
    "pyloader": "## 14. Python loaders per file: buffered reads, isatty, Pillow\n\n"
                "What one Python thread pays per file on the mount that it does not pay on "
                "plain files of the same bytes, warm: CPython's buffered `open()` asks "
                "`isatty()` on every open (Python ≤ 3.13), a TCGETS ioctl that FUSE sends "
                "to the daemon as a round trip (the kernel cannot answer it itself: "
                "fs/fuse/ioctl.c turns the daemon's ENOSYS into ENOTTY on every call and "
                "remembers nothing); an unbuffered open and `pcrfs.pil_loader` do not ask.",
    "listing": "## 15. Listing at ImageNet scale: names-only walks and ImageFolder\n\n"
               "`find` and torchvision's `ImageFolder` constructor (os.walk: names and "
               "d_type, no stat) on the 1.28 M-file store of §3, cold, against the same "
               "tree of empty files on local disk, with each readdirplus policy. The "
               "default is readdirplus off (see pcrfs(1), \"Listings\").",
}


def rewrite(path, res):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = "# pcrfs benchmarks\n"
    for name, fn in RENDER.items():
        body = fn(res)
        begin = "<!-- BEGIN GENERATED: %s -->" % name
        end = "<!-- END GENERATED: %s -->" % name
        block = "%s\n%s\n%s" % (begin, body.strip(), end)
        pat = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        if body.strip() == NOT_MEASURED.strip() and pat.search(text):
            continue  # a run without this section keeps the figures already there
        if pat.search(text):
            text = pat.sub(lambda _: block, text, count=1)
        else:
            head = HEADINGS.get(name)
            text = text.rstrip("\n") + "\n\n" + (head + "\n\n" if head else "") + block + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
