#!/usr/bin/python3
"""Fidelity benchmark: bytes, MS-SSIM and Pillow decode rate per level, per scan script.

    bench/fidelity.py --dataset DIR --build BUILD [--work DIR] [--scans default,fast,FILE]
                      [--sample N] [--seed S] [--reps R] [--json OUT]

README (for bench/run.sh, which may call this after building): it needs the build's
mkpcrfs and pcrinfo (BUILD/src/tools), Pillow and numpy (/usr/bin/python3), and a
source tree (e.g. the benchmark dataset). For each --scans preset it builds a store
(mkpcrfs -q --scans P), reads the PCR table (pcrinfo --json), the MS-SSIM of each
level (pcrinfo --fidelity --json --sample N --seed S, luma, against full), extracts
every level (pcrinfo --extract) and times a full Pillow decode (Image.open + load) of
every colour JPEG at every level, CPU time of this process (time.process_time: other
load on the machine inflates it less than wall time), best of --reps rounds with the
variants interleaved. The baseline row is the source JPEGs themselves. It prints
Markdown tables (one per preset, and a summary of the full level against the baseline
and the default preset) for BENCHMARKS.md, and with --json the numbers. Stores and
extracted trees go to --work (default: a temporary directory, removed at the end).
Runtime on 2 cores with ds1k (1000 images): ~5 minutes for default,fast.
"""

import argparse
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from PIL import Image


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("fidelity.py: %s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                        p.stderr.decode(errors="replace")))
    return p.stdout


def colour_jpegs(root):
    """{relative path: bytes} of the 3-component JPEGs (what the decode rate is about:
    gray and CMYK are a few % of a photo set and decode at other rates)."""
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
        if not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            d = f.read()
        if not d.startswith(b"\xff\xd8"):
            continue
        try:
            if Image.open(io.BytesIO(d)).mode != "RGB":
                continue
        except Exception:
            continue
        out[os.path.relpath(p, root)] = d
    return out


def decode_seconds(datas):
    t = time.process_time()
    for d in datas:
        Image.open(io.BytesIO(d)).load()
    return time.process_time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, help="source tree (ImageFolder-like)")
    ap.add_argument("--build", required=True, help="meson build directory")
    ap.add_argument("--work", help="where stores go (default: a temporary directory)")
    ap.add_argument("--scans", default="default,fast",
                    help="comma-separated --scans values (presets or files)")
    ap.add_argument("--sample", type=int, default=300, help="MS-SSIM sample (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3, help="decode rounds, best kept")
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()

    mk = os.path.join(a.build, "src", "tools", "mkpcrfs")
    info = os.path.join(a.build, "src", "tools", "pcrinfo")
    work = a.work or tempfile.mkdtemp(prefix="pcrfs-fidelity-bench-")
    os.makedirs(work, exist_ok=True)
    presets = [p for p in a.scans.split(",") if p]

    src = colour_jpegs(a.dataset)
    rels = sorted(src)
    variants = {"baseline": [src[r] for r in rels]}
    results = {"dataset": os.path.abspath(a.dataset), "colour_jpegs": len(rels),
               "sample": a.sample, "seed": a.seed, "reps": a.reps, "presets": {}}
    for p in presets:
        name = os.path.basename(p)
        store = os.path.join(work, name + ".pcr")
        if os.path.exists(store):
            shutil.rmtree(store)
        t = time.time()
        run([mk, "-q", "--scans", p, a.dataset, store])
        build_s = time.time() - t
        summ = json.loads(run([info, "--json", store]))
        fid = json.loads(run([info, "--fidelity", "--json", "--sample", str(a.sample),
                              "--seed", str(a.seed), store]))
        L = summ["levels"]
        for k in range(1, L + 1):
            d = os.path.join(work, "%s-L%d" % (name, k))
            if os.path.exists(d):
                shutil.rmtree(d)
            run([info, "--extract", d, "--level", str(k), store])
            datas = []
            for r in rels:
                with open(os.path.join(d, r), "rb") as f:
                    datas.append(f.read())
            variants["%s/%d" % (name, k)] = datas
            shutil.rmtree(d)
        results["presets"][name] = {"script": summ["script"], "levels": L,
                                    "build_seconds": build_s,
                                    "store_bytes": summ["store_bytes"],
                                    "table": summ["table"], "fidelity": fid}
        shutil.rmtree(store)

    best = {k: float("inf") for k in variants}
    for _ in range(a.reps):
        for k, v in variants.items():
            best[k] = min(best[k], decode_seconds(v))
    rate = {k: len(rels) / best[k] for k in variants}
    mean_bytes = {k: sum(map(len, v)) / len(v) for k, v in variants.items()}
    results["baseline"] = {"images_per_s": rate["baseline"],
                           "mean_bytes": mean_bytes["baseline"]}

    print("Pillow %s, %d colour JPEGs of %s; MS-SSIM: pcrinfo --fidelity --sample %d "
          "--seed %d (luma, against full); decode: CPU time, best of %d.\n" % (
              Image.__version__, len(rels), a.dataset, a.sample, a.seed, a.reps))
    print("baseline (the source files): %.0f images/s, %.0f bytes mean (colour JPEGs)\n" % (
        rate["baseline"], mean_bytes["baseline"]))
    for name, r in results["presets"].items():
        L = r["levels"]
        rows = []
        print("### --scans %s (script %s, %d levels)\n" % (name, r["script"], L))
        print("| level | mean bytes (all JPEGs) | ratio to full | MS-SSIM | min MS-SSIM | "
              "Pillow images/s | x baseline |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for k in range(1, L + 1):
            t = r["table"][k - 1]
            f = r["fidelity"]["table"][k - 1] if r["fidelity"]["table"] else {}
            v = "%s/%d" % (name, k)
            row = {"level": k, "mean_bytes": t["mean_bytes"], "ratio_to_full": t["ratio_to_full"],
                   "msssim": f.get("msssim"), "msssim_min": f.get("msssim_min"),
                   "pillow_images_per_s": rate[v],
                   "x_baseline": rate[v] / rate["baseline"],
                   "colour_mean_bytes": mean_bytes[v]}
            rows.append(row)
            print("| %d | %.0f | %.3f | %.4f | %.4f | %.0f | %.2f |" % (
                k, row["mean_bytes"], row["ratio_to_full"], row["msssim"] or 0,
                row["msssim_min"] or 0, row["pillow_images_per_s"], row["x_baseline"]))
        r["levels_table"] = rows
        print("\nrecommended level (MS-SSIM >= %g): %s\n" % (
            r["fidelity"]["threshold"], r["fidelity"]["recommended"]))

    print("### Full fidelity against the baseline\n")
    print("| scans | levels | full images/s | x baseline | full bytes (colour) | "
          "vs baseline | vs default |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    dflt = None
    for name, r in results["presets"].items():
        if r["script"] == "libjpeg-default":
            dflt = mean_bytes["%s/%d" % (name, r["levels"])]
    for name, r in results["presets"].items():
        v = "%s/%d" % (name, r["levels"])
        r["full"] = {"images_per_s": rate[v], "x_baseline": rate[v] / rate["baseline"],
                     "colour_mean_bytes": mean_bytes[v],
                     "bytes_vs_baseline": mean_bytes[v] / mean_bytes["baseline"] - 1,
                     "bytes_vs_default": mean_bytes[v] / dflt - 1 if dflt else None}
        print("| %s | %d | %.0f | %.2f | %.0f | %+.1f%% | %s |" % (
            name, r["levels"], rate[v], r["full"]["x_baseline"], mean_bytes[v],
            100 * r["full"]["bytes_vs_baseline"],
            "%+.1f%%" % (100 * r["full"]["bytes_vs_default"]) if dflt else "-"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
