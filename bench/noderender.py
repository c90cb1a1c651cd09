"""Render bench/node_throughput.py's results into BENCHMARKS.md: the generated section
"node" (markers as bench/s3render.py's). One subsection per --label, every invocation
of that label pooled (medians, with every run's figure kept). MB = 10^6 bytes.
"""

import s3render
from render import n0, n1, n2, status, table

LIMIT_TARGET = 0.8
S3FS_TARGET = 5.0


def mb(x):
    return n1(x / 1e6)


def run_figures(r, kind):
    """MB/s, images/s, GETs per image, bytes fetched / served, connections opened."""
    p = r.get("proxy", {})
    if kind == "pcrfs":
        gets, fetched = r["http"].get("gets", 0), r["http"].get("bytes", 0)
    else:
        gets, fetched = p.get("gets", 0), p.get("bytes_down", 0)
    files = max(r["files"], 1)
    return {"mbs": r["mb_per_s"], "ips": r["files_per_s"], "gpi": gets / files,
            "amp": fetched / r["bytes"] if r["bytes"] else 0.0,
            "conns": p.get("connections", 0), "peak": p.get("peak_connections", 0)}


def ceiling_of(invs):
    """Median over the invocations of the uncapped proxy ceiling and of s3rver alone."""
    unc = [i["ceiling"]["uncapped"]["mb_per_s"] for i in invs if i.get("ceiling")]
    direct = [i["ceiling"]["direct"]["mb_per_s"] for i in invs if i.get("ceiling")]
    return s3render.med(unc) * 1e6, s3render.med(direct) * 1e6


def limit(n, cap, ceil):
    return min(n * cap, ceil)


def r_label(label, invs):
    last = invs[-1]
    cap = last["cap_mbps"] * 1e6
    out = []
    acc = ", ".join("`-o %s` %s" % (k, "accepted" if v else "**not accepted**")
                    for k, v in sorted(last["accepted"].items()))
    out.append("**%s**: %d invocation(s): %s. Settings: each connection capped at %s MB/s, "
               "RTT %g ms, %g ms per new connection, %d reader threads, %g s per run; %s; "
               "s3fs %s with `-o %s`." % (
                   label, len(invs),
                   "; ".join("%s at %s, load %s → %s, %.1f min" % (
                       i["date"], i["commit"], " ".join("%.1f" % x for x in i["load_start"]),
                       " ".join("%.1f" % x for x in i["load_end"]), i["seconds"] / 60)
                       for i in invs),
                   n1(last["cap_mbps"]), last["rtt_ms"], last["connect_ms"], last["readers"],
                   last["window"], acc, last["s3fs"], last["s3fs_opts"]))
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
    for n in ns:
        xs = [i["ceiling"]["capped"][str(n)]["mb_per_s"] for i in invs
              if str(n) in i["ceiling"]["capped"]]
        lim = limit(n, cap, ceil)
        rows.append([n, mb(n * cap), n1(s3render.med(xs)), n2(s3render.med(xs) * 1e6 / lim),
                     mb(lim), " / ".join(n1(x) for x in xs)])
    out += ["", "What the set-up carries: curl, 2N ranged GETs of 4 MiB with at most N at once.",
            "With no cap, %s connections through the proxy carry **%s MB/s** (the ceiling), "
            "straight from s3rver %s MB/s (every invocation: %s; %s)." % (
                max(ns), mb(ceil), mb(direct),
                " / ".join(n1(i["ceiling"]["uncapped"]["mb_per_s"]) for i in invs),
                " / ".join(n1(i["ceiling"]["direct"]["mb_per_s"]) for i in invs)), "",
            table(["N", "N × cap (MB/s)", "curl through the proxy (MB/s)", "÷ limit",
                   "limit: min(N × cap, ceiling)", "every invocation"], rows)]
    # the node
    rows, best5, s3fs_ips = [], None, None
    by = {}
    for inv in invs:
        for row in inv["rows"]:
            key = (row["kind"], row["view"], row["conns"])
            by.setdefault(key, []).extend(row["runs"])
    for (kind, view, n), runs in by.items():
        f = [run_figures(r, kind) for r in runs]
        med = {k: s3render.med([x[k] for x in f]) for k in f[0]}
        n_eff = n or med["peak"]  # no option: the connections it had open at most
        lim = limit(n_eff, cap, ceil)
        name = "pcrfs %s/" % view if kind == "pcrfs" else "s3fs originals"
        setting = ("`http_connections=%d`" % n if n else
                   ("(no option: %d at most)" % med["peak"]))
        rows.append([name, setting, "%s / %s" % (n0(med["conns"]), n0(med["peak"])),
                     "**%s**" % n1(med["mbs"]), n1(med["ips"]), mb(lim),
                     n2(med["mbs"] * 1e6 / lim), "%.4f" % med["gpi"], n2(med["amp"]),
                     " / ".join(n1(x["mbs"]) for x in f)])
        if kind == "pcrfs" and view == "scan5":
            if best5 is None or med["mbs"] > best5[0]:
                best5 = (med["mbs"], med["ips"], lim, n)
        if kind == "s3fs":
            s3fs_ips = med["ips"]
    out += ["", "The node: fresh mount and cache, RecordSampler order, medians of every run.", "",
            table(["reader", "connections", "opened / most at once (proxy)", "MB/s", "images/s",
                   "limit (MB/s)", "÷ limit", "GETs/image", "fetched ÷ served",
                   "every run (MB/s)"], rows)]
    if best5:
        t = [["scan5/ ≥ %.1f× the physical limit" % LIMIT_TARGET,
              "%s× (%s MB/s of %s, %s)" % (n2(best5[0] * 1e6 / best5[2]), n1(best5[0]),
                                          mb(best5[2]), "N = %d" % best5[3] if best5[3]
                                          else "no option"),
              status(best5[0] * 1e6 / best5[2] >= LIMIT_TARGET)]]
        if s3fs_ips:
            t.append(["scan5/ ≥ %g× s3fs-fuse on the originals (images/s)" % S3FS_TARGET,
                      "%s× (%s against %s images/s)" % (n2(best5[1] / s3fs_ips),
                                                        n0(best5[1]), n0(s3fs_ips)),
                      status(best5[1] / s3fs_ips >= S3FS_TARGET)])
        out += ["", table(["target (issue 19)", "measured (best scan5/ row)", "status"], t,
                          ["l", "r", "l"])]
    cmds = [c for c in last.get("cmds", []) if c != "curl --parallel --parallel-max N -K CFG"]
    out.append(s3render.cmds_block(cmds, "bench/node_throughput.py's work directory"))
    return "\n".join(out)


def r_node(res):
    labels = sorted(res, key=lambda k: res[k][0]["date"])
    return "\n\n".join("### %s\n\n%s" % (lab, r_label(lab, res[lab])) for lab in labels)


# the results file holds the labels at its top: the section "node" is all of it
RENDER = {"node": lambda res: r_node(res["node"])}
HEADINGS = {"node": "## 22. Node throughput from object storage: connections, a capped "
                    "proxy, s3fs-fuse"}


def rewrite(path, res):
    s3render.rewrite(path, {"node": res}, RENDER, HEADINGS)
