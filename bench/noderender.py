"""Render bench/node_throughput.py's results into BENCHMARKS.md: the generated section
"node" (markers as bench/s3render.py's). One subsection per --label, every invocation
of that label pooled (medians, with every run's figure kept). MB = 10^6 bytes.
"""

import s3render
from render import n0, n1, n2, status, table

LIMIT_TARGET = 0.8
S3FS_TARGET = 5.0
CPU_BOUND = 0.1  # the machine idle below this share of its cores: CPU-bound


def mb(x):
    return n1(x / 1e6)


def cpu_cores(cpu, mine):
    """From bench/cpustat.py's figures of one run: cores used on average by each of
    the names in @mine (CPU seconds / wall seconds; "self" and "children" name the
    measuring process and its children), the machine's idle cores, and the cores
    the rest of the machine used (other jobs: busy minus ours); None without figures
    (runs before they were taken)."""
    if not cpu or cpu["seconds"] <= 0:
        return None
    t = cpu["seconds"]
    got = {k: (cpu[k] if k in ("self", "children") else cpu["procs"].get(k, 0.0)) / t
           for k in mine}
    got["idle"] = cpu["idle"] / t
    got["others"] = max(0.0, cpu["busy"] / t - sum(got[k] for k in mine))
    got["cores"] = cpu["cores"]
    return got


NODE_CPU = ("daemon", "proxy", "s3rver", "self")  # self: order_read.py's reader threads


def run_figures(r, kind):
    """MB/s, images/s, GETs per image, bytes fetched / served, connections opened,
    whether the window (not the end of the order) ended the run, CPU cores."""
    p = r.get("proxy", {})
    if kind == "pcrfs":
        gets, fetched = r["http"].get("gets", 0), r["http"].get("bytes", 0)
    else:
        gets, fetched = p.get("gets", 0), p.get("bytes_down", 0)
    files = max(r["files"], 1)
    late = r.get("after")
    return {"mbs": r["mb_per_s"], "ips": r["files_per_s"], "gpi": gets / files,
            "late": late["mb_per_s"] if late else None, "first": r.get("first_s"),
            "amp": fetched / r["bytes"] if r["bytes"] else 0.0,
            "conns": p.get("connections", 0), "peak": p.get("peak_connections", 0),
            "window": 1.0 if r.get("timed_out", True) else 0.0, "secs": r["seconds"],
            "cpu": cpu_cores(r.get("cpu"), NODE_CPU)}


def med_cpu(cpus, names):
    """Medians per name of cpu_cores() figures, as "a / b / c" cores, and the median
    idle and others; dashes without figures."""
    cpus = [c for c in cpus if c]
    if not cpus:
        return "—", "—", None
    m = {k: s3render.med([c[k] for c in cpus]) for k in cpus[0]}
    return (" / ".join(n2(m[k]) for k in names), "%s / %s" % (n2(m["idle"]), n2(m["others"])),
            m)


def bound_by(m, ratio):
    """What bound a row: the CPU when the machine was (nearly) never idle (saying
    whether this run's processes or other jobs kept it busy), the cap when the row got
    nearly all of its limit."""
    if m is None:
        return "—"
    if m["idle"] < CPU_BOUND * m["cores"]:
        ours = m["cores"] - m["idle"] - m["others"]
        return "CPU (this run's)" if ours >= m["others"] else "CPU (other jobs')"
    return "cap" if ratio >= 0.9 else "neither"


def ceiling_of(invs):
    """Median over the invocations of the uncapped proxy ceiling and of s3rver alone."""
    unc = [i["ceiling"]["uncapped"]["mb_per_s"] for i in invs if i.get("ceiling")]
    direct = [i["ceiling"]["direct"]["mb_per_s"] for i in invs if i.get("ceiling")]
    return s3render.med(unc) * 1e6, s3render.med(direct) * 1e6


def limit(n, cap, ceil):
    return min(n * cap, ceil)


# What became of a label's change, said under its heading (the runs stay as measured).
NOTES = {
    "ramp: a mount's first parts a quarter of the size":
        "Tried and reverted (33cefe3): the first file came sooner, no rate moved, and GETs "
        "per image rose past 0.02 at the default 32 connections.",
    "try: prefetch_ahead=16":
        "RecordSampler(prefetch_ahead=16) against the default 4, on the ramp-up daemon "
        "(c5b3f6d, reverted): no rate moved against the 'ramp' runs (one run; why was not "
        "measured).",
    "epoch: each run reads the whole view from a fresh mount (at most 90 s)":
        "The daemon of 9714c70: each record prefix in parts of 8 MiB (a `scan5/` prefix "
        "of 14 MB in 2, a `full/` one of 43 MB in 6).",
    "epoch, parts of 2 MiB (-o http_part_size=2M)":
        "The same daemon (9714c70) with smaller parts: `scan5/` at 64 connections from "
        "0.68x to 0.82x. A view of ~110 parts of 8 MiB is two rounds of 4.2 s over 64 "
        "connections, the second 70% full; this led to 59da2fa (a prefix in 8 parts).",
    "epoch, 8 parts per prefix: each run reads the whole view from a fresh mount (at most 90 s)":
        "59da2fa on: a record prefix is fetched in 8 parts (of at most 8 MiB, at least "
        "1 MiB): 1.75 MB at `scan5/`, 5.4 MB at `full/` (pcrfs(1), `http_part_size`).",
    "try: timeline":
        "One run to read its timeline (bench/node_throughput.py's Timeline, in the results "
        "file), on the ramp-up daemon (c5b3f6d, reverted; 39 records in parts of 2 MiB, "
        "the rest of 8 MiB): nothing was fetched in the first 1.5 s (the listing), 8 MB by "
        "2.7 s, all 879 MB by 11.2 s (103 MB/s from 2.7 s, 0.81 of the limit), served by "
        "12.2 s; the fetch came in steps as parts ended.",
}


def r_label(label, invs):
    last = invs[-1]
    cap = last["cap_mbps"] * 1e6
    out = []
    acc = ", ".join("`-o %s` %s" % (k, "accepted" if v else "**not accepted**")
                    for k, v in sorted(last["accepted"].items()))
    out.append("**%s**: %d invocation(s): %s. Settings: each connection capped at %s MB/s, "
               "RTT %g ms, %g ms per new connection, %d reader threads, %g s per run%s; %s; "
               "s3fs %s with `-o %s`." % (
                   label, len(invs),
                   "; ".join("%s at %s, load %s → %s, %.1f min" % (
                       i["date"], i["commit"], " ".join("%.1f" % x for x in i["load_start"]),
                       " ".join("%.1f" % x for x in i["load_end"]), i["seconds"] / 60)
                       for i in invs),
                   n1(last["cap_mbps"]), last["rtt_ms"], last["connect_ms"], last["readers"],
                   last["window"], "" if last.get("prefetch_ahead") is None else
                   ", `RecordSampler(prefetch_ahead=%d)`" % last["prefetch_ahead"],
                   acc, last["s3fs"], last["s3fs_opts"]))
    e = last["expected"]
    out.append("")
    out.append("Store: %s images in %d record objects of %s MB on average; %s kB per image "
               "at scan5, %s kB at full (record prefixes); the originals %s kB per image."
               % (n0(e["files"]), e["record_objects"], mb(e["record_bytes_mean"]),
                  n1(e["prefix"]["5"] / 1e3), n1(e["prefix"][str(e["levels"])] / 1e3),
                  n1(e["originals_bytes"] / e["files"] / 1e3)))
    ceil, direct = ceiling_of(invs)
    # the ceiling: curl through the capped proxy at each N
    rows = []
    ns = sorted({int(n) for i in invs for n in i["ceiling"]["capped"]})
    curl_cpu = ("proxy", "s3rver", "children")  # children: curl
    for n in ns:
        got = [i["ceiling"]["capped"][str(n)] for i in invs if str(n) in i["ceiling"]["capped"]]
        xs = [g["mb_per_s"] for g in got]
        lim = limit(n, cap, ceil)
        used, idle, m = med_cpu([cpu_cores(g.get("cpu"), curl_cpu) for g in got], curl_cpu)
        ratio = s3render.med(xs) * 1e6 / lim
        rows.append([n, mb(n * cap), n1(s3render.med(xs)), n2(ratio), mb(lim), used, idle,
                     bound_by(m, ratio), " / ".join(n1(x) for x in xs)])
    unc = [i["ceiling"]["uncapped"] for i in invs if i.get("ceiling")]
    used, idle, m = med_cpu([cpu_cores(g.get("cpu"), curl_cpu) for g in unc], curl_cpu)
    rows.append(["%d, no cap" % max(ns), "—", n1(ceil / 1e6), "—", "—", used, idle,
                 bound_by(m, 0.0), " / ".join(n1(g["mb_per_s"]) for g in unc)])
    out += ["", "What the set-up carries: curl, 2N ranged GETs of 4 MiB with at most N at once.",
            "With no cap, %s connections through the proxy carry **%s MB/s** (the ceiling), "
            "straight from s3rver %s MB/s (every invocation: %s; %s)." % (
                max(ns), mb(ceil), mb(direct),
                " / ".join(n1(i["ceiling"]["uncapped"]["mb_per_s"]) for i in invs),
                " / ".join(n1(i["ceiling"]["direct"]["mb_per_s"]) for i in invs)), "",
            table(["N", "N × cap (MB/s)", "curl through the proxy (MB/s)", "÷ limit",
                   "limit: min(N × cap, ceiling)", "CPU cores: proxy / s3rver / curl",
                   "idle / other jobs (cores)", "bound by", "every invocation"], rows)]
    # the node
    rows, late_rows, best5, s3fs_ips, limit5 = [], [], None, None, []
    cpu_bound = {}  # reader -> the settings at which it was CPU-bound
    by = {}
    for inv in invs:
        for row in inv["rows"]:
            key = (row["kind"], row["view"], row["conns"])
            by.setdefault(key, []).extend(row["runs"])
    for (kind, view, n), runs in by.items():
        f = [run_figures(r, kind) for r in runs]
        med = {k: s3render.med([x[k] for x in f]) for k in f[0]
               if k not in ("cpu", "late", "first")}
        n_eff = n or med["peak"]  # no option: the connections it had open at most
        lim = limit(n_eff, cap, ceil)
        name = "pcrfs %s/" % view if kind == "pcrfs" else "s3fs originals"
        setting = ("`http_connections=%d`" % n if n else
                   ("(no option: %d at most)" % med["peak"]))
        used, idle, m = med_cpu([x["cpu"] for x in f], NODE_CPU)
        ratio = med["mbs"] * 1e6 / lim
        if bound_by(m, ratio).startswith("CPU"):
            cpu_bound.setdefault(name, []).append(str(n) if n else "its default")
        ended = sum(1 for x in f if not x["window"])
        ended = ("window" if not ended else
                 "order: %d of %d, in %s s" % (ended, len(f), n0(s3render.med(
                     [x["secs"] for x in f if not x["window"]]))))
        lates = [x["late"] for x in f if x["late"] is not None]
        # a run that read the whole view also read, after the first window, what
        # was fetched ahead during the start: its rate there is an upper bound
        late = ("—" if len(lates) < len(f) else "%s (%s): %s" % (
            n1(s3render.med(lates)), n2(s3render.med(lates) * 1e6 / lim),
            " / ".join(n1(x["late"]) + ("" if x["window"] else "*") for x in f)))
        firsts = [x["first"] for x in f if x["first"] is not None]
        late_rows.append([name, setting, "%s s" % n1(s3render.med(firsts)) if firsts else "—",
                          late])
        rows.append([name, setting, "%s / %s" % (n0(med["conns"]), n0(med["peak"])),
                     "**%s**" % n1(med["mbs"]), n1(med["ips"]), mb(lim), n2(ratio),
                     "%.4f" % med["gpi"], n2(med["amp"]), ended, used, idle,
                     bound_by(m, ratio), " / ".join(n1(x["mbs"]) for x in f)])
        if kind == "pcrfs":
            each = [x["mbs"] * 1e6 / lim for x in f]
            limit5.append((view, n, lim, min(each), max(each), len(each)))
        if kind == "pcrfs" and view == "scan5":
            if best5 is None or med["mbs"] > best5[0]:
                best5 = (med["mbs"], med["ips"], lim, n)
        if kind == "s3fs":
            s3fs_ips = med["ips"]
    out += ["", "The node: fresh mount and cache, RecordSampler order, medians of every run.", "",
            table(["reader", "connections", "opened / most at once (proxy)", "MB/s", "images/s",
                   "limit (MB/s)", "÷ limit", "GETs/image", "fetched ÷ served", "run ended by",
                   "CPU cores: daemon / proxy / s3rver / readers", "idle / other jobs (cores)",
                   "bound by", "every run (MB/s)"], rows)]
    if any(x[3] != "—" or x[2] != "—" for x in late_rows):
        out += ["", "After the start: the time to the first file read, and the rate from the "
                "moment the sampler's first window (8 records) was read to the last byte "
                "(median, its ÷ limit, and every run; — where a run read less than a "
                "window and 2 s more): what a long run gets once a fresh mount's first "
                "parts are in. * a run that read the whole view: it also read after the "
                "first window what was fetched ahead during the start and nothing was "
                "left ahead at its end, so its rate there is an upper bound (it can pass "
                "the limit).", "",
                table(["reader", "connections", "first file", "MB/s after the first window "
                       "(÷ limit): every run"], late_rows)]
    if any(r.get("cpu") for rs in by.values() for r in rs):
        out += ["", "CPU-bound (the machine idle below %d%% of its cores, medians): %s." % (
            CPU_BOUND * 100, "; ".join("%s at N = %s" % (k, ", ".join(v))
                                       for k, v in cpu_bound.items()) or "no row")]
    if best5:
        # one line per N: met only when every run held it (issue 19: three runs)
        t = [["%s/ ≥ %.1f× the physical limit, %s" % (
                  view, LIMIT_TARGET, "N = %d" % n if n else "no option"),
              "%s× of %s MB/s in %d run(s)" % (n2(lo) if n2(lo) == n2(hi) else
                                                 "%s-%s" % (n2(lo), n2(hi)), mb(lim), k),
              status(lo >= LIMIT_TARGET) if k >= 3 or lo < LIMIT_TARGET else
              "held, in fewer than 3 runs"] for view, n, lim, lo, hi, k in sorted(
                  limit5, key=lambda x: (x[0] != "scan5", x[1]))]
        if s3fs_ips:
            t.append(["scan5/ ≥ %g× s3fs-fuse on the originals (images/s)" % S3FS_TARGET,
                      "%s× (%s against %s images/s)" % (n2(best5[1] / s3fs_ips),
                                                        n0(best5[1]), n0(s3fs_ips)),
                      status(best5[1] / s3fs_ips >= S3FS_TARGET)])
        out += ["", table(["target (issue 19)", "measured (every run; s3fs: best scan5/ row)", "status"], t,
                          ["l", "r", "l"])]
    cmds = [c for c in last.get("cmds", []) if c != "curl --parallel --parallel-max N -K CFG"]
    out.append(s3render.cmds_block(cmds, "bench/node_throughput.py's work directory"))
    return "\n".join(out)


def r_node(res):
    labels = sorted(res, key=lambda k: res[k][0]["date"])
    return "\n\n".join("### %s\n\n%s%s" % (lab, NOTES[lab] + "\n\n" if lab in NOTES else "",
                                            r_label(lab, res[lab])) for lab in labels)


# the results file holds the labels at its top: the section "node" is all of it
RENDER = {"node": lambda res: r_node(res["node"])}
HEADINGS = {"node": "## 22. Node throughput from object storage: connections, a capped "
                    "proxy, s3fs-fuse"}


def rewrite(path, res):
    s3render.rewrite(path, {"node": res}, RENDER, HEADINGS)
