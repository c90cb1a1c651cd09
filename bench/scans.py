#!/usr/bin/python3
"""Scan-script search: full-fidelity decode rate against the baseline, and the ladder.

    bench/scans.py --dataset DIR --build BUILD [--work DIR] [--images N] [--rounds R]
                   [--sample S] [--seed S] [--only a,b,...] [--full-only] [--json OUT]

README (BENCHMARKS.md section 9, "Searching for a faster script"). It needs the build's
mkpcrfs and pcrinfo (BUILD/src/tools), Pillow (/usr/bin/python3) and a source tree
(the benchmark dataset). It picks N colour, baseline (sequential, YCbCr) JPEGs of
DIR, evenly spread over its sorted file list, and links them into a small tree. For
each candidate below (a preset name, or a script in jpegtran -scans syntax that it
writes to a file) it builds a store of that tree (mkpcrfs -q --scans), reads the
bytes of each level (pcrinfo --json), the mean luma MS-SSIM of each level against
full fidelity (pcrinfo --fidelity --sample S --seed S) and extracts every level
(pcrinfo --extract). Then it times Pillow's Image.open(...).load() of every file in
every variant (each level of each candidate, and the source files: the baseline),
CPU time of this one thread (time.process_time_ns), the variants interleaved file
by file in a shuffled order, so that other load on the machine falls on all of them
alike; R rounds. A variant's rate is the median over the rounds of N / its CPU time,
its "x baseline" the median over the rounds of (baseline CPU time / its CPU time)
in the same round. Targets checked (the issue's): full level >= 0.85 x baseline,
>= 4 levels, and a level of mean MS-SSIM >= 0.95 at <= 45% of the full bytes.
With --perf it also runs each full level (and the baseline) under perf record and
attributes the CPU samples to libjpeg's parts (Huffman decoding sequential or
progressive, the coefficient buffer, the SIMD IDCT/colour code, ...), found from the
library's exported symbols; it needs perf. It prints Markdown tables for
BENCHMARKS.md and the load average before and after the decode rounds.
Runtime on 2 shared cores with N = 500, all candidates, 7 rounds: ~15 minutes.
"""

import argparse
import glob
import io
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fidelity import run  # noqa: E402  (same directory)

DC = "0,1,2: 0-0, 0, 0;\n"


def ac(c, s, e):
    return "%d: %d-%d, 0, 0;\n" % (c, s, e)


# name -> (what it is, script text or None for a preset of that name). Only spectral
# selection (Ah = Al = 0: no refinement scans, the slow part of the default script),
# DC first and interleaved (one scan), AC scans one component each (the JPEG rule).
CANDIDATES = {
    "default": ("libjpeg's script (preset)", None),
    "fast": ("9 scans (preset)", None),
    "s4": ("DC; Y 1-63; Cb 1-63; Cr 1-63 (the fewest progressive scans)",
           DC + ac(0, 1, 63) + ac(1, 1, 63) + ac(2, 1, 63)),
    "s5-y5": ("DC; Y 1-5; Cb 1-63; Cr 1-63; Y 6-63",
              DC + ac(0, 1, 5) + ac(1, 1, 63) + ac(2, 1, 63) + ac(0, 6, 63)),
    "s5-y9": ("DC; Y 1-9; Cb 1-63; Cr 1-63; Y 10-63",
              DC + ac(0, 1, 9) + ac(1, 1, 63) + ac(2, 1, 63) + ac(0, 10, 63)),
    "s5-y14": ("DC; Y 1-14; Cb 1-63; Cr 1-63; Y 15-63",
               DC + ac(0, 1, 14) + ac(1, 1, 63) + ac(2, 1, 63) + ac(0, 15, 63)),
    "s5-y9-late": ("DC; Y 1-9; Y 10-63; Cb 1-63; Cr 1-63",
                   DC + ac(0, 1, 9) + ac(0, 10, 63) + ac(1, 1, 63) + ac(2, 1, 63)),
    "s6-y2-9": ("DC; Y 1-2; Y 3-9; Cb 1-63; Cr 1-63; Y 10-63",
                DC + ac(0, 1, 2) + ac(0, 3, 9) + ac(1, 1, 63) + ac(2, 1, 63) + ac(0, 10, 63)),
    "s6-y9-27": ("DC; Y 1-9; Cb 1-63; Cr 1-63; Y 10-27; Y 28-63",
                 DC + ac(0, 1, 9) + ac(1, 1, 63) + ac(2, 1, 63) + ac(0, 10, 27) + ac(0, 28, 63)),
    "seq3": ("Y; Cb; Cr, sequential (not progressive: reference, 3 levels)",
             "0;\n1;\n2;\n"),
}
TARGET_X, TARGET_LEVELS, TARGET_SSIM, TARGET_BYTES = 0.85, 4, 0.95, 0.45


def baseline_jpegs(root, n):
    """n relative paths of sequential YCbCr JPEGs, evenly spread over the sorted tree."""
    ok = []
    for p in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
        if not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            head = f.read(2)
        if head != b"\xff\xd8":
            continue
        try:
            im = Image.open(p)
            if im.mode != "RGB" or im.info.get("progressive") or im.info.get("progression"):
                continue
        except Exception:
            continue
        ok.append(os.path.relpath(p, root))
    step = max(1, len(ok) // n)
    return ok[::step][:n], len(ok)


def load(root, rels):
    out = []
    for r in rels:
        with open(os.path.join(root, r), "rb") as f:
            out.append(f.read())
    return out


def time_rounds(variants, rounds):
    """{variant: [CPU ns of decoding all its files, per round]}, interleaved per file."""
    names = list(variants)
    nfiles = len(variants[names[0]])
    out = {k: [] for k in names}
    rng = random.Random(1)
    for _ in range(rounds):
        acc = dict.fromkeys(names, 0)
        for i in range(nfiles):
            rng.shuffle(names)
            for k in names:
                d = variants[k][i]
                t = time.process_time_ns()
                Image.open(io.BytesIO(d)).load()
                acc[k] += time.process_time_ns() - t
        for k in names:
            out[k].append(acc[k])
    return out


def build_candidate(name, text, a, mk, info, tree, work, rels):
    """Store of the tree with this script: its summary, fidelity and level files."""
    arg = name
    if text is not None:
        arg = os.path.join(work, name + ".scans")
        with open(arg, "w") as f:
            f.write(text)
    store = os.path.join(work, name + ".pcr")
    shutil.rmtree(store, ignore_errors=True)
    run([mk, "-q", "--scans", arg, tree, store])
    summ = json.loads(run([info, "--json", store]))
    fid = json.loads(run([info, "--fidelity", "--json", "--sample", str(a.sample),
                          "--seed", str(a.seed), store]))
    L = summ["levels"]
    levels = {}
    for k in ([L] if a.full_only else range(1, L + 1)):
        d = os.path.join(work, "%s-L%d" % (name, k))
        shutil.rmtree(d, ignore_errors=True)
        run([info, "--extract", d, "--level", str(k), store])
        levels[k] = load(d, rels)
        shutil.rmtree(d)
    shutil.rmtree(store)
    return summ, fid, levels


def ladder_ok(r):
    """The cheapest level reaching TARGET_SSIM (its ratio to full), or None."""
    for t in r["levels_table"]:
        if t["msssim"] is not None and t["msssim"] >= TARGET_SSIM:
            return t
    return None


# ---- --perf: where a decode's CPU time goes ------------------------------------------

PERF_LOOP = """
import glob, io, sys
from PIL import Image
ds = [open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/*.jpg"))]
for _ in range(int(sys.argv[2])):
    for d in ds:
        Image.open(io.BytesIO(d)).load()
"""
PARTS = ["Huffman decoding, sequential (jdhuff.c)", "Huffman decoding, progressive (jdphuff.c)",
         "bit-buffer refill and slow Huffman path (jpeg_fill_bit_buffer, jpeg_huff_decode)",
         "coefficient buffer (jdcoefct.c)", "IDCT, upsampling, colour conversion (SIMD code)",
         "rest of libjpeg", "memcpy, memset (libc)", "kernel (page faults, reads)",
         "Python, Pillow, rest"]


def libjpeg_ranges():
    """(path, [(lo, hi, part)]) of the libjpeg Pillow uses. Its static functions have no
    symbols, but a source file's statics sit just before its exported jinit_*, so a
    file spans from the end of the exported function before it to the end of its own.
    The SIMD code comes after every exported function."""
    im = Image.new("RGB", (8, 8))
    buf = io.BytesIO()
    im.save(buf, "JPEG")
    Image.open(io.BytesIO(buf.getvalue())).load()
    with open("/proc/self/maps") as f:
        lib = next(ln.split()[-1] for ln in f if "libjpeg" in ln)
    syms = []
    for ln in run(["nm", "-D", "-S", "--defined-only", lib]).decode().splitlines():
        f = ln.split()
        if len(f) == 4 and f[2] in "Tt":
            syms.append((int(f[0], 16), int(f[0], 16) + int(f[1], 16), f[3].split("@")[0]))
    syms.sort()
    end = {n: e for _, e, n in syms}

    def span(before, own):
        return (end[before], end[own])

    return lib, [
        span("jinit_inverse_dct", "jinit_huff_decoder") + (PARTS[0],),
        span("jinit_merged_upsampler", "jinit_phuff_decoder") + (PARTS[1],),
        span("jpeg_mem_src", "jinit_d_coef_controller") + (PARTS[3],),
        (max(e for _, e, _ in syms), 1 << 62, PARTS[4]),
    ]


def perf_part(dso, sym, lib, ranges):
    if sym in ("irqentry_exit_to_user_mode",) or sym.startswith("finish_task_switch"):
        return None  # preempted by other jobs: not this decode's cost
    if os.path.basename(lib) in dso:
        if sym.split("@")[0] in ("jpeg_fill_bit_buffer", "jpeg_huff_decode"):
            return PARTS[2]
        if sym.startswith("0x"):
            a = int(sym, 16)
            for lo, hi, part in ranges:
                if lo <= a < hi:
                    return part
        return PARTS[5]
    if "libc" in dso and sym.startswith("__mem"):
        return PARTS[6]
    if "kernel" in dso:
        return PARTS[7]
    return PARTS[8]


def perf_profile(variants, names, work, reps):
    """{variant: {part: samples}}: perf record (CPU-clock samples, so CPU time) of a
    Python loop decoding the variant's files, attributed to the parts above."""
    lib, ranges = libjpeg_ranges()
    out = {}
    for n in names:
        d = os.path.join(work, "perf", n)
        os.makedirs(d, exist_ok=True)
        for i, data in enumerate(variants[n]):
            with open(os.path.join(d, "%05d.jpg" % i), "wb") as f:
                f.write(data)
        pd = os.path.join(work, "perf", n + ".data")
        run(["perf", "record", "-q", "-o", pd, sys.executable, "-c", PERF_LOOP, d, str(reps)])
        rep = run(["perf", "report", "-i", pd, "--stdio", "--sort", "dso,sym",
                   "-F", "sample,dso,sym"]).decode(errors="replace")
        parts = dict.fromkeys(PARTS, 0)
        for ln in rep.splitlines():
            f = ln.split()
            if ln.startswith("#") or len(f) < 4 or not f[0].isdigit():
                continue
            part = perf_part(f[1], f[-1], lib, ranges)
            if part:
                parts[part] += int(f[0])
        out[n] = parts
    return out


def report_perf(prof, names):
    base = sum(prof[names[0]].values())
    print("CPU time of the full level by part, as a fraction of the %s's total "
          "(perf record samples; preemption by other jobs left out):\n" % names[0])
    print("| part | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for part in PARTS:
        if any(prof[n][part] for n in names):
            print("| %s | " % part + " | ".join("%.2f" % (prof[n][part] / base)
                                               for n in names) + " |")
    print("| **total** | " + " | ".join("**%.2f**" % (sum(prof[n].values()) / base)
                                       for n in names) + " |")
    print()


def report(results, a):
    print("Pillow %s, %d of the %d sequential colour JPEGs of %s; MS-SSIM: pcrinfo "
          "--fidelity --sample %d --seed %d (luma, against full); decode: CPU time of one "
          "thread, %d rounds interleaved per file, medians. Load average %s before, %s "
          "after (2 cores).\n" % (Image.__version__, results["images"], results["of"],
                                  a.dataset, a.sample, a.seed, a.rounds,
                                  results["load_before"], results["load_after"]))
    print("baseline (the source files): %.0f images/s, %.0f bytes mean\n" % (
        results["baseline"]["images_per_s"], results["baseline"]["mean_bytes"]))
    print("| script | scans | full x baseline (rounds: min-max) | full images/s | "
          "full bytes vs baseline | vs default | cheapest level >= %.2f MS-SSIM | "
          "targets met |" % TARGET_SSIM)
    print("|---|---:|---:|---:|---:|---:|---|---|")
    dflt = results["candidates"].get("default", {}).get("full_mean_bytes")
    for name, r in results["candidates"].items():
        lv = ladder_ok(r)
        okx = r["full_x_baseline"] >= TARGET_X
        okl = r["levels"] >= TARGET_LEVELS
        okb = lv is not None and lv["ratio_to_full"] <= TARGET_BYTES
        r["targets"] = {"rate": okx, "levels": okl, "ladder": okb}
        miss = [w for w, ok in (("rate", okx), ("levels", okl), ("ladder", okb)) if not ok]
        print("| %s | %d | %.3f (%.3f-%.3f) | %.0f | %+.1f%% | %s | %s | %s |" % (
            name, r["levels"], r["full_x_baseline"], min(r["full_x_rounds"]),
            max(r["full_x_rounds"]), r["full_images_per_s"],
            100 * (r["full_mean_bytes"] / results["baseline"]["mean_bytes"] - 1),
            "%+.1f%%" % (100 * (r["full_mean_bytes"] / dflt - 1)) if dflt else "-",
            "level %d: %.4f at %.0f%%" % (lv["level"], lv["msssim"], 100 * lv["ratio_to_full"])
            if lv else "none",
            "all" if not miss else "no (" + ", ".join(miss) + ")"))
    print()
    for name, r in results["candidates"].items():
        print("#### %s: %s\n" % (name, r["what"]))
        print("| level | mean bytes | ratio to full | MS-SSIM | min MS-SSIM | images/s | "
              "x baseline |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for t in r["levels_table"]:
            print("| %d | %.0f | %.3f | %.4f | %.4f | %s | %s |" % (
                t["level"], t["mean_bytes"], t["ratio_to_full"], t["msssim"] or 0,
                t["msssim_min"] or 0,
                "%.0f" % t["images_per_s"] if t["images_per_s"] else "-",
                "%.3f" % t["x_baseline"] if t["x_baseline"] else "-"))
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, help="source tree (ImageFolder-like)")
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--work", help="where stores go (default: a temporary directory)")
    ap.add_argument("--images", type=int, default=500, help="JPEGs to use (default 500)")
    ap.add_argument("--rounds", type=int, default=5, help="decode rounds (default 5)")
    ap.add_argument("--sample", type=int, default=300, help="MS-SSIM sample (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", help="comma-separated candidate names (default: all)")
    ap.add_argument("--full-only", action="store_true", help="time the full level only")
    ap.add_argument("--perf", action="store_true",
                    help="also profile the full levels with perf (where the time goes)")
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()

    mk = os.path.join(a.build, "src", "tools", "mkpcrfs")
    info = os.path.join(a.build, "src", "tools", "pcrinfo")
    work = a.work or tempfile.mkdtemp(prefix="pcrfs-scans-bench-")
    os.makedirs(work, exist_ok=True)
    names = a.only.split(",") if a.only else list(CANDIDATES)
    for n in names:
        if n not in CANDIDATES:
            sys.exit("scans.py: unknown candidate %s (known: %s)" % (n, ", ".join(CANDIDATES)))

    rels, nall = baseline_jpegs(a.dataset, a.images)
    tree = os.path.join(work, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    for r in rels:
        os.makedirs(os.path.dirname(os.path.join(tree, r)), exist_ok=True)
        os.symlink(os.path.abspath(os.path.join(a.dataset, r)), os.path.join(tree, r))
    variants = {"baseline": load(a.dataset, rels)}
    results = {"dataset": os.path.abspath(a.dataset), "images": len(rels), "of": nall,
               "rounds": a.rounds, "sample": a.sample, "seed": a.seed, "candidates": {}}
    built = {}
    for n in names:
        what, text = CANDIDATES[n]
        summ, fid, levels = build_candidate(n, text, a, mk, info, tree, work, rels)
        built[n] = (what, summ, fid)
        for k, datas in levels.items():
            variants["%s/%d" % (n, k)] = datas
        print("scans.py: built %s (%d levels)" % (n, summ["levels"]), file=sys.stderr)

    results["load_before"] = open("/proc/loadavg").read().split()[0]
    ns = time_rounds(variants, a.rounds)
    results["load_after"] = open("/proc/loadavg").read().split()[0]
    N = len(rels)
    rate = {k: statistics.median(N / (t / 1e9) for t in v) for k, v in ns.items()}
    xb = {k: statistics.median(b / t for b, t in zip(ns["baseline"], v)) for k, v in ns.items()}
    mean_bytes = {k: sum(map(len, v)) / N for k, v in variants.items()}
    results["baseline"] = {"images_per_s": rate["baseline"], "mean_bytes": mean_bytes["baseline"]}
    for n, (what, summ, fid) in built.items():
        L = summ["levels"]
        rows = []
        for k in range(1, L + 1):
            t = summ["table"][k - 1]
            f = fid["table"][k - 1] if fid["table"] else {}
            v = "%s/%d" % (n, k)
            rows.append({"level": k, "mean_bytes": t["mean_bytes"],
                         "ratio_to_full": t["ratio_to_full"], "msssim": f.get("msssim"),
                         "msssim_min": f.get("msssim_min"), "images_per_s": rate.get(v),
                         "x_baseline": xb.get(v)})
        full = "%s/%d" % (n, L)
        results["candidates"][n] = {
            "what": what, "script": summ["script"], "scans": summ["scans"], "levels": L,
            "full_x_baseline": xb[full], "full_images_per_s": rate[full],
            "full_x_rounds": [b / t for b, t in zip(ns["baseline"], ns[full])],
            "full_mean_bytes": mean_bytes[full], "levels_table": rows}
    report(results, a)
    if a.perf:
        names = ["baseline"] + ["%s/%d" % (n, built[n][1]["levels"]) for n in built]
        prof = perf_profile(variants, names, work, 3)
        report_perf(prof, names)
        results["perf"] = prof
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
