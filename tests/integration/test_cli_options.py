"""Option values at every command line (issue 23, Must 1 and Must 9): one strict
parser (src/util/optparse.c) behind pcrfs -o, mkpcrfs and pcrinfo. Each row is a
command, its exit status, the one line it must print and the promise that it left
nothing behind (tests/integration/clitable.py checks mounts, daemons, files and the
store's bytes after every row).

The rows:
  - every value the issue found silently accepted ("read_ahead_kb=1e3" ... "-o
    bwlimit=zz,bwlimit=2M"), by its wording;
  - for every documented -o option of pcrfs (pcrfs --help, pcrfs(1)) that takes a
    value: an empty, a negative, a huge, a non-numeric and a wrong-unit value
    (options that take a path or a name have only the empty row: "-1" is a file
    name); flags given a value;
  - the same five for mkpcrfs's and pcrinfo's numeric options;
  - values that must still work (the documented forms), checked through
    /.pcrfs/info of a real mount: mix_seed=010 is ten, the last of a repeated
    option counts, 12.5M is 12500000 bytes/s.
"""

import json
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clitable as ct  # noqa: E402

HUGE = "99999999999999999999"  # above 2^64 - 1
FIVE = ("empty", "negative", "huge", "non-numeric", "wrong unit")


def pcrfs(opts):
    """argv of a pcrfs mount with -o @opts (no -f: a success detaches)."""
    return ["{pcrfs}", "{store}", "{mnt}", "-o", opts]


def shown(value):
    """@value as messages show it: cut after 64 bytes (src/util/optparse.c)."""
    return value if len(value) <= 64 else value[:64] + "..."


def bad_pcrfs(name, value, prefix="", msg=None):
    """pcrfs refuses -o NAME=VALUE before mounting: one line naming both, exit 2."""
    opt = "%s=%s" % (name, shown(value))
    return ct.Case("pcrfs %s%s" % (prefix, opt), pcrfs(prefix + "%s=%s" % (name, value)), rc=2,
                   msg=msg or r"^pcrfs: %s: want " % _re(opt))


def five(name, wrong_unit, prefix="", negative="-1", nonnum="abc", huge=HUGE, range_msg=None):
    """The five bad values of option @name. @range_msg: the message of the huge
    value when its range needs the store (checked after it is opened)."""
    rows = []
    for kind, v in zip(FIVE, ("", negative, huge, nonnum, wrong_unit)):
        msg = None
        if kind == "huge" and range_msg:
            msg = r"^pcrfs: %s=%s: %s" % (name, v, range_msg)
        row = bad_pcrfs(name, v, prefix, msg)
        row.name += " (%s)" % kind
        rows.append(row)
    return rows


def _re(s):
    out = ""
    for ch in s:
        out += "\\" + ch if ch in ".^$*+?{}[]\\|()" else ch
    return out


def info_after_mount(opts):
    """argv: mount with @opts, then print /.pcrfs/info (the harness then checks the
    mount serves and unmounts it)."""
    return ["sh", "-c", '"$0" "$1" "$2" -o "$3" && cat "$2/.pcrfs/info"', "{pcrfs}", "{store}",
            "{mnt}", opts]


def info_check(**want):
    """check(): the mount's /.pcrfs/info (printed on stdout) holds @want, where a key
    "a.b" is info["a"]["b"]."""
    def check(ctx, p):
        info = json.loads(p.stdout)
        for key, value in want.items():
            got = info
            for part in key.split("."):
                got = got[part]
            assert got == value, "%s: %r, want %r" % (key, got, value)
    return check


def not_in_stderr(*words):
    def check(ctx, p):
        for w in words:
            assert w.encode() not in p.stderr, "stderr names %r: %r" % (w, p.stderr)
    return check


LEVEL_RANGE = r"want a level of this store: 1\.\.\d+ or full"

# ---- the issue's "Silently accepted" values, by its wording ------------------------

ISSUE = [
    bad_pcrfs("read_ahead_kb", "1e3"),
    bad_pcrfs("read_ahead_kb", "1.5"),
    bad_pcrfs("read_ahead_kb", "+3"),
    bad_pcrfs("read_ahead_kb", "-1"),
    bad_pcrfs("read_ahead_kb", "10Q"),
    bad_pcrfs("read_ahead_kb", "0x10"),
    bad_pcrfs("timeout", "10Q"),
    bad_pcrfs("timeout", "5x"),
    bad_pcrfs("timeout", "0x10"),
    bad_pcrfs("timeout", "1e3"),
    bad_pcrfs("timeout", " 5"),
    # mix_seed=010 was octal 8 while refurb_seed=010 was 10: both are ten now
    ct.Case("pcrfs mix_seed=010 is decimal", info_after_mount("mix=1-2,mix_seed=010"), rc=0,
            mounted=True, check=info_check(**{"mix.seed": 10})),
    ct.Case("pcrfs refurb_seed=010 is decimal",
            info_after_mount("refurb=2,refurb_size=16,refurb_threads=0,refurb_seed=010"), rc=0,
            mounted=True, check=info_check(**{"refurb.seed": 10})),
    bad_pcrfs("bwlimit", "0.0001"),
    bad_pcrfs("bwlimit", "1.5"),
    bad_pcrfs("http_retries", "-1"),
    bad_pcrfs("http_retries", HUGE),
    ct.Case("pcrfs http_retries=1000000 (the cap is 20, documented)",
            pcrfs("http_retries=1000000"), rc=2,
            msg=r"^pcrfs: http_retries=1000000: want a whole number 0\.\.20$"),
    bad_pcrfs("quality", ""),
    bad_pcrfs("quality", "0.95:0.9500001"),
    ct.Case("pcrfs level=bad,level=3 (a later value does not hide a bad one)",
            pcrfs("level=bad,level=3"), rc=2, msg=r"^pcrfs: level=bad: want a level"),
    ct.Case("pcrfs bwlimit=zz,bwlimit=2M", pcrfs("bwlimit=zz,bwlimit=2M"), rc=2,
            msg=r"^pcrfs: bwlimit=zz: want bytes/s"),
    ct.Case("pcrfs level=3 -o level=bad (across -o)",
            ["{pcrfs}", "{store}", "{mnt}", "-o", "level=3", "-o", "level=bad"], rc=2,
            msg=r"^pcrfs: level=bad: want a level"),
    bad_pcrfs("cache_size", "abc"),
] + [
    # the object-storage options with a local store: refused, not ignored
    ct.Case("pcrfs %s with a local store" % opt, pcrfs(opt), rc=2,
            msg=r"^pcrfs: %s=.*: only for a STORE in object storage" % opt.split("=")[0])
    for opt in ("cache_size=1G", "cache={tmp}/cache", "http_timeout=5", "http_retries=2",
                "http_part_size=8M", "http_connections=32", "endpoint=http://127.0.0.1:9", "region=eu-west-1", "profile=default",
                "ca_bundle={tmp}/ca.pem")
]

# ---- the issue's "Unclear" values ---------------------------------------------------

UNCLEAR = [
    # a blank value names its own option, not "refurb_scale/refurb_ratio"
    ct.Case("pcrfs refurb_scale= (blank) names one option", pcrfs("refurb=2,refurb_scale="),
            rc=2, msg=r"^pcrfs: refurb_scale=: want LO:HI", check=not_in_stderr("refurb_ratio")),
    ct.Case("pcrfs refurb_ratio= (blank) names one option", pcrfs("refurb=2,refurb_ratio="),
            rc=2, msg=r"^pcrfs: refurb_ratio=: want LO:HI", check=not_in_stderr("refurb_scale")),
    ct.Case("pcrfs refurb_scale=0.9:0.1 names one option", pcrfs("refurb=2,refurb_scale=0.9:0.1"),
            rc=2, msg=r"^pcrfs: refurb_scale=0\.9:0\.1: want LO:HI",
            check=not_in_stderr("refurb_ratio")),
    ct.Case("pcrfs readdirplus=abc says what it takes", pcrfs("readdirplus=abc"), rc=2,
            msg=r"^pcrfs: readdirplus=abc: want yes, no or auto$",
            check=not_in_stderr("unknown option")),
    ct.Case("pcrinfo --threshold 0.123456789 --threshold 0.1234567891",
            ["{pcrinfo}", "--threshold", "0.123456789", "--threshold", "0.1234567891",
             "{store}"], rc=2, lines=2,
            msg=r"^pcrinfo: --threshold=0\.123456789: want a threshold in \(0, 1\] with at "
                r"most 4 digits after the point"),
    ct.Case("pcrinfo --threshold 0.95 twice", ["{pcrinfo}", "--threshold", "0.95",
                                               "--threshold", "0.95", "{store}"],
            rc=2, lines=2, msg=r"^pcrinfo: --threshold=0\.95: given twice"),
    ct.Case("pcrinfo --threshold on a store without quality data warns",
            ["{pcrinfo}", "--threshold", "0.97", "{store}"], rc=0, lines=1,
            msg=r"^pcrinfo: warning: --threshold: .* has no per-image quality data"),
    ct.Case("pcrinfo --json --threshold on a store without quality data warns",
            ["{pcrinfo}", "--json", "--threshold", "0.97", "{store}"], rc=0, lines=1,
            msg=r"^pcrinfo: warning: --threshold: .* has no per-image quality data",
            check=lambda ctx, p: json.loads(p.stdout)),
]

# ---- pcrfs: every documented -o option with a value, five bad values ---------------

FIVE_ROWS = (
    five("timeout", "5s")
    + five("bwlimit", "5MB")
    + five("bwlimit", "5Mi", negative="-5M", nonnum="fast")[4:]
    + five("quality", "95%", negative="-0.5", huge=HUGE)
    + five("readahead", "yes", nonnum="records")
    + five("read_ahead_kb", "1M")
    + five("level", "3k", range_msg=LEVEL_RANGE)
    + five("mix", "1k-3", negative="-1-3", nonnum="a-b", huge="1-" + HUGE,
           range_msg=r"want LO-HI, two levels of this store")
    + five("mix_mean", "2.5k", prefix="mix=1-3,", huge=HUGE)
    + five("mix_seed", "7k", prefix="mix=1-3,")
    + five("cache_size", "1GiB")
    + five("http_timeout", "5s")
    + five("http_retries", "3x")
    + five("http_part_size", "8MiB")
    + five("http_connections", "32x")
    + five("readdirplus", "on")
    + five("dirahead", "on")
    + five("push", "on")
    + five("max_threads", "4k")
    + five("max_idle_threads", "2k")
    + five("max_readahead", "128k")
    + five("max_background", "12k")
    + five("congestion_threshold", "12k")
    + five("refurb", "2x")
    + five("refurb_size", "224px", prefix="refurb=2,")
    + five("refurb_scale", "8%:100%", prefix="refurb=2,", negative="-0.5:1",
           huge="0.5:" + HUGE)
    + five("refurb_ratio", "3/4in:4/3in", prefix="refurb=2,", negative="-1:2",
           huge="1:" + "9" * 400)
    + five("refurb_flip", "1s", prefix="refurb=2,", nonnum="maybe")
    + five("refurb_level", "3k", prefix="refurb=2,", range_msg=LEVEL_RANGE)
    + five("refurb_seed", "7k", prefix="refurb=2,")
    + five("refurb_threads", "2k", prefix="refurb=2,")
    + five("refurb_cache_size", "1GiB", prefix="refurb=2,")
    # a path or a name: only empty is wrong ("-1" is a file name)
    + [bad_pcrfs("logfile", ""), bad_pcrfs("cache", ""),
       bad_pcrfs("refurb_cache", "", prefix="refurb=2,"),
       bad_pcrfs("fsname", ""), bad_pcrfs("subtype", ""),
       bad_pcrfs("endpoint", ""), bad_pcrfs("region", ""), bad_pcrfs("profile", ""),
       bad_pcrfs("ca_bundle", "")]
)

RANGES = [
    bad_pcrfs("timeout", "31536001"),
    bad_pcrfs("read_ahead_kb", "1048577"),
    bad_pcrfs("bwlimit", "1000000000001"),
    bad_pcrfs("bwlimit", "1.0005k"),
    bad_pcrfs("quality", "0.9::0.95"),
    bad_pcrfs("quality", "0"),
    bad_pcrfs("quality", "1.0001"),
    bad_pcrfs("quality", "0.1:0.2:0.3:0.4:0.5:0.6:0.7:0.8:0.9"),
    ct.Case("pcrfs quality=0.95:0.950 (one view twice)", pcrfs("quality=0.95:0.950"), rc=2,
            msg=r"^pcrfs: quality=0\.95:0\.950: 0\.950 given twice$"),
    bad_pcrfs("http_timeout", "86401"),
    bad_pcrfs("max_threads", "0"),
    bad_pcrfs("max_threads", "100001"),
    bad_pcrfs("max_readahead", "4294967296"),
    bad_pcrfs("max_background", "65536"),
    bad_pcrfs("refurb", "0"),
    bad_pcrfs("refurb", "1001"),
    bad_pcrfs("refurb_size", "4097", prefix="refurb=2,"),
    bad_pcrfs("refurb_threads", "257", prefix="refurb=2,"),
    bad_pcrfs("refurb_cache_size", "0", prefix="refurb=2,"),
    bad_pcrfs("refurb_scale", "0:1", prefix="refurb=2,"),
    bad_pcrfs("refurb_scale", "0.5:1.5", prefix="refurb=2,"),
    bad_pcrfs("refurb_ratio", "1/0:2", prefix="refurb=2,"),
    bad_pcrfs("refurb_ratio", "1:2:3", prefix="refurb=2,"),
    ct.Case("pcrfs level=0 (range, after the store is open)", pcrfs("level=0"), rc=2,
            msg=r"^pcrfs: level=0: " + LEVEL_RANGE),
    ct.Case("pcrfs level=full ", pcrfs("level=full "), rc=2,
            msg=r"^pcrfs: level=full : want a level"),
    ct.Case("pcrfs mix=3-2 (LO > HI)", pcrfs("mix=3-2"), rc=2,
            msg=r"^pcrfs: mix=3-2: want LO-HI, two levels of this store"),
    ct.Case("pcrfs mix_mean=3 outside (LO, HI)", pcrfs("mix=1-3,mix_mean=3"), rc=2,
            msg=r"^pcrfs: mix_mean=3: want a decimal number \(1, 3\)$"),
    ct.Case("pcrfs a control byte in a value stays on one line", pcrfs("timeout=5\n6"), rc=2,
            msg=r"^pcrfs: timeout=5\\x0a6: want a decimal number"),
    # flags take no value (libfuse's own message)
    ct.Case("pcrfs nokeep_cache=1", pcrfs("nokeep_cache=1"), rc=2, msg=r"nokeep_cache=1"),
    ct.Case("pcrfs open=yes", pcrfs("open=yes"), rc=2, msg=r"open=yes"),
    ct.Case("pcrfs rw=1", pcrfs("rw=1"), rc=2, msg=r"rw=1"),
]

# ---- values that must still work ------------------------------------------------------

GOOD = [
    ct.Case("pcrfs documented forms mount",
            info_after_mount("bwlimit=12.5M,timeout=0.5,read_ahead_kb=0,readahead=record,"
                             "quality=none,max_threads=4,max_idle_threads=2,readdirplus=no"),
            rc=0, mounted=True, check=info_check(bwlimit=12500000)),
    # the store has no quality table: the views serve the top level, with a warning
    ct.Case("pcrfs quality=0.95 on a store without quality data warns",
            # lines not counted: a machine without /dev/log adds pcrfs's no-syslog warning
            info_after_mount("quality=0.95"), rc=0, mounted=True, lines=None,
            msg=r"^pcrfs: warning: quality=0\.95: the store has no quality table",
            check=lambda ctx, p: _assert("q95" in json.loads(p.stdout)["views"], p.stdout)),
    ct.Case("pcrfs bwlimit=25K (K as k)", info_after_mount("bwlimit=25K"), rc=0, mounted=True,
            check=info_check(bwlimit=25000)),
    ct.Case("pcrfs the last of a repeated option counts",
            ["sh", "-c", '"$0" "$1" "$2" -o level=3,level=5 -o bwlimit=1M -o bwlimit=2M && '
             'cat "$2/.pcrfs/level" "$2/.pcrfs/info"', "{pcrfs}", "{store}", "{mnt}"],
            rc=0, mounted=True,
            check=lambda ctx, p: (_assert(p.stdout.startswith(b"5\n"), p.stdout[:20]),
                                  info_check(bwlimit=2000000)(ctx, _Tail(p)))),
]


def _assert(cond, what):
    assert cond, what


class _Tail:
    """The process @p with its stdout after the first line (.pcrfs/level)."""

    def __init__(self, p):
        self.stdout = p.stdout.split(b"\n", 1)[1]
        self.stderr = p.stderr


# ---- mkpcrfs and pcrinfo ------------------------------------------------------------

def bad_tool(prog, opt, value, extra=(), msg=None, name=None):
    """@prog refuses @opt @value: one line naming them (and the hint to --help), exit
    2, nothing written."""
    shown = opt if opt.startswith("--") else {"-j": "--jobs", "-n": "--per-record"}[opt]
    argv = ["{%s}" % prog, opt, value] + list(extra)
    return ct.Case(name or "%s %s %s" % (prog, opt, shlex.quote(value)), argv, rc=2, lines=2,
                   msg=msg or r"^%s: %s=%s: want " % (prog, _re(shown), _re(value)))


def tool_five(prog, opt, wrong_unit, extra, range_msg=None):
    rows = []
    for kind, v in zip(FIVE, ("", "-1", HUGE, "abc", wrong_unit)):
        msg = None
        if kind == "huge" and range_msg:
            msg = r"^%s: %s=%s: %s" % (prog, opt, v, range_msg)
        rows.append(bad_tool(prog, opt, v, extra, msg,
                             name="%s %s %s (%s)" % (prog, opt, shlex.quote(v), kind)))
    return rows


MK_ARGS = ("{src}", "{tmp}/new.pcr")  # never created: the harness checks the tree

TOOLS = (
    tool_five("mkpcrfs", "-j", "2k", MK_ARGS)
    + tool_five("mkpcrfs", "-n", "1k", MK_ARGS)
    + tool_five("mkpcrfs", "--tok-per-shard", "4k", ("--tokens", "{tmp}/none") + MK_ARGS)
    + tool_five("mkpcrfs", "--seit-shape", "32x32px", ("--seit", "{tmp}/none") + MK_ARGS)
    + [
        bad_tool("mkpcrfs", "-j", "0", MK_ARGS),
        bad_tool("mkpcrfs", "-j", "1.5", MK_ARGS),
        bad_tool("mkpcrfs", "-j", " 5", MK_ARGS),
        bad_tool("mkpcrfs", "-j", "0x10", MK_ARGS),
        bad_tool("mkpcrfs", "-n", "1048577", MK_ARGS),
        ct.Case("mkpcrfs -j 0 -j 2 (every value checked)",
                ["{mkpcrfs}", "-j", "0", "-j", "2"] + list(MK_ARGS), rc=2, lines=2,
                msg=r"^mkpcrfs: --jobs=0: want a whole number 1\.\.1024"),
        bad_tool("mkpcrfs", "--tok-coder", "", ("--tokens", "{tmp}/none") + MK_ARGS,
                 msg=r"^mkpcrfs: --tok-coder=: want auto, huffman or zstd-dict"),
        bad_tool("mkpcrfs", "--tok-coder", "fast", ("--tokens", "{tmp}/none") + MK_ARGS,
                 msg=r"^mkpcrfs: --tok-coder=fast: want auto, huffman or zstd-dict"),
        ct.Case("mkpcrfs --scans ''", ["{mkpcrfs}", "--scans", ""] + list(MK_ARGS), rc=2,
                lines=2, msg=r"^mkpcrfs: --scans: '' is neither"),
    ]
    + tool_five("pcrinfo", "--level", "3k", ("--cat", "x", "{store}"), range_msg=LEVEL_RANGE)
    + tool_five("pcrinfo", "--sample", "1k", ("--fidelity", "{store}"))
    + tool_five("pcrinfo", "--seed", "7k", ("--fidelity", "{store}"))
    + tool_five("pcrinfo", "-j", "2k", ("--fidelity", "{store}"))
    + [bad_tool("pcrinfo", "--threshold", v, ("{store}",),
                name="pcrinfo --threshold %s (%s)" % (shlex.quote(v), kind))
       for kind, v in zip(FIVE, ("", "-0.5", HUGE, "abc", "95%"))]
    + [
        bad_tool("pcrinfo", "--level", "0", ("--cat", "x", "{store}"),
                 msg=r"^pcrinfo: --level=0: " + LEVEL_RANGE),
        bad_tool("pcrinfo", "--level", "full ", ("--cat", "x", "{store}")),
        bad_tool("pcrinfo", "--sample", "0", ("--fidelity", "{store}")),
        bad_tool("pcrinfo", "--sample", "1e3", ("--fidelity", "{store}")),
        bad_tool("pcrinfo", "--seed", "+1", ("--fidelity", "{store}")),
        bad_tool("pcrinfo", "--threshold", "0", ("{store}",)),
        bad_tool("pcrinfo", "--threshold", "1e-1", ("{store}",)),
        bad_tool("pcrinfo", "--threshold", "0.12345", ("{store}",)),
        ct.Case("pcrinfo --level 2 --cat (a whole number works)",
                ["{pcrinfo}", "--level", "2", "--cat", "nonexistent", "{store}"], rc=1,
                msg=r"nonexistent"),
    ]
)


class OptionValues(ct.CliTable):
    CASES = ISSUE + UNCLEAR + FIVE_ROWS + RANGES + GOOD + TOOLS


if __name__ == "__main__":
    ct.main()
