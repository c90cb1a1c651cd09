#!/usr/bin/python3
"""Side-by-side table of two or more bench/bench.py results (WORK/results.json copies):
the build, reader and meta sections, each figure per run and the ratios of the runs
paired up as (before, after), (before, after), ...

    compare.py BEFORE1.json AFTER1.json [BEFORE2.json AFTER2.json ...]

Prints Markdown. "higher is better" figures get after/before as is; for times and
sizes the ratio is after/before too (so > 1 is slower or bigger there).
"""
import json
import sys


def rows(r):
    b, rd, m = r["build"], r["reader"], r["meta"]
    out = [("build: mkpcrfs -j1, images/s (wall)", b["j1"]["ips_wall"], "hi"),
           ("build: mkpcrfs -j2, images/s (wall)", b["j2"]["ips_wall"], "hi"),
           ("build: mkpcrfs -j1, images/s per CPU second", b["j1"]["ips_cpu"], "hi"),
           ("build: mkpcrfs -j2, images/s per CPU second", b["j2"]["ips_cpu"], "hi"),
           ("build: bench_transform pcr, images/s per CPU second", b["pcr_cpu"], "hi"),
           ("build: bench_transform bare libjpeg, images/s per CPU second", b["bare_cpu"], "hi")]
    for x in rd["rows"]:
        out.append(("reader %d threads: %s cold, files/s" % (rd["threads"], x["label"]),
                    x["cold_fps"], "hi"))
    for x in rd["rows"]:
        out.append(("reader %d threads: %s warm, files/s" % (rd["threads"], x["label"]),
                    x["warm_fps"], "hi"))
    for x in rd["ls"]:
        out.append(("ls -lR %s cold, s" % x["label"], x["cold"], "lo"))
        out.append(("ls -lR %s warm, s" % x["label"], x["warm"], "lo"))
    out += [("meta: mkmeta (1.28 M files), s", m["build"]["seconds"], "lo"),
            ("meta: store bytes", m["store_bytes"], "lo"),
            ("meta: index.db bytes", m["index_bytes"], "lo"),
            ("meta: mount (command returns), ms", 1e3 * m["mount_cmd_s"], "lo"),
            ("meta: mount (foreground, served), ms", 1e3 * m["mount_s"], "lo"),
            ("meta: RSS after mount, MB", m["rss_mount"] / 1e6, "lo"),
            ("meta: first read of a file (cold), ms", 1e3 * m["first_read_s"], "lo"),
            ("meta: ls -l of a 1,300-file class cold, ms", 1e3 * m["ls_dir"]["cold"], "lo"),
            ("meta: ls -l of a 1,300-file class warm, ms", 1e3 * m["ls_dir"]["warm"], "lo")]
    for k, v in m["find"].items():
        out.append(("meta: find %s, k entries/s" % k, v["rate"] / 1e3, "hi"))
    for k, v in m["stat"].items():
        out.append(("meta: stat %s, k/s" % k, v["rate"] / 1e3, "hi"))
    out += [("meta: RSS after a full find, MB", m["rss_find"] / 1e6, "lo"),
            ("meta: peak RSS (VmHWM), MB", m["hwm_end"] / 1e6, "lo")]
    return out


def fmt(v):
    if v >= 1e6:
        return "{:,.0f}".format(v)
    if v >= 100:
        return "{:,.0f}".format(v)
    if v >= 10:
        return "%.1f" % v
    return "%.3g" % v


def main():
    res = [json.load(open(p)) for p in sys.argv[1:]]
    if len(res) < 2 or len(res) % 2:
        raise SystemExit("compare.py: give results in pairs: before after [before after ...]")
    tabs = [rows(r) for r in res]
    npair = len(res) // 2
    head = ["figure"]
    for k in range(npair):
        head += ["before #%d" % (k + 1), "after #%d" % (k + 1)]
    head += ["after/before #%d" % (k + 1) for k in range(npair)]
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    for i, (name, _, _) in enumerate(tabs[0]):
        vals = [t[i][1] for t in tabs]
        cells = [name] + [fmt(v) for v in vals]
        cells += ["%.3f" % (vals[2 * k + 1] / vals[2 * k]) if vals[2 * k] else "-"
                  for k in range(npair)]
        print("| " + " | ".join(cells) + " |")
    print()
    for k, r in enumerate(res):
        e = r["env"]
        print("- run %d (%s): %s, load %s at the start, %s at the end; build load %s -> %s" % (
            k + 1, "before" if k % 2 == 0 else "after", e["date"],
            " ".join("%.1f" % x for x in e["load_start"]),
            " ".join("%.1f" % x for x in e.get("load_end", [0, 0, 0])),
            " ".join("%.1f" % x for x in r["build"]["load_before"]),
            " ".join("%.1f" % x for x in r["build"]["load_after"])))


if __name__ == "__main__":
    main()
