#!/bin/bash
# Run one libFuzzer target for a bounded time, as the meson suite "fuzz" does:
#
#   run_fuzz.sh TARGET CORPUS_DIR [REGRESS_DIR]
#
# 1. Every file in REGRESS_DIR (inputs that once crashed a target: each crash found
#    becomes a regression input there) and in CORPUS_DIR is run once; any crash,
#    leak, timeout or sanitizer report fails.
# 2. Then the target fuzzes for PCRFS_FUZZ_SECONDS seconds (default 30; 0 skips this
#    step) starting from a copy of both directories in a temporary directory, so the
#    source tree is never modified. Inputs it finds that crash are copied to
#    PCRFS_FUZZ_ARTIFACTS (default: findings/ in the build directory of tests/fuzz
#    when run by meson, else /tmp/pcrfs-fuzz-findings)
#    and the script fails, printing how to reproduce.
#
# Environment: PCRFS_FUZZ_SECONDS, PCRFS_FUZZ_ARTIFACTS, PCRFS_FUZZ_KEEP_CORPUS=DIR
# (after a successful run, copy the grown corpus there: for longer campaigns that feed
# new seeds back into the tree by hand), PCRFS_FUZZ_JOBS (parallel fuzzing processes,
# default 1). Exit status: 0 clean, 1 a finding, 2 usage or setup error.
set -uo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: run_fuzz.sh TARGET CORPUS_DIR [REGRESS_DIR]" >&2
    exit 2
fi
target=$1
corpus=$2
regress=${3:-}
name=$(basename "$target")
seconds=${PCRFS_FUZZ_SECONDS:-30}
jobs=${PCRFS_FUZZ_JOBS:-1}

if [ ! -x "$target" ]; then
    echo "run_fuzz: $target is not an executable" >&2
    exit 2
fi
if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
    echo "run_fuzz: $corpus: no seed corpus (an empty corpus fuzzes blind)" >&2
    exit 2
fi
case $seconds in
'' | *[!0-9]*)
    echo "run_fuzz: PCRFS_FUZZ_SECONDS=$seconds is not a whole number of seconds" >&2
    exit 2
    ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pcrfs-fuzz-$name.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus" "$tmp/artifacts"
cp -p "$corpus"/* "$tmp/corpus/"
inputs=("$corpus"/*)
if [ -n "$regress" ] && [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    cp -p "$regress"/* "$tmp/corpus/"
    inputs+=("$regress"/*)
fi

# Options every run gets: a report per finding, a per-input time limit well above
# what any seed takes (a slow input is a bug too: a daemon must not stall on one),
# leaks checked (libFuzzer does with ASan), and memory bounded.
common=(-artifact_prefix="$tmp/artifacts/" -timeout=25 -rss_limit_mb=2560
        -malloc_limit_mb=2048 -detect_leaks=1 -print_final_stats=1)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:print_summary=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:print_summary=1}

keep_findings() {
    local dest=${PCRFS_FUZZ_ARTIFACTS:-${PCRFS_FUZZ_DEFAULT_ARTIFACTS:-/tmp/pcrfs-fuzz-findings}}
    mkdir -p "$dest"
    local f
    for f in "$tmp/artifacts"/*; do
        [ -e "$f" ] || continue
        cp -p "$f" "$dest/$name-$(basename "$f")"
        echo "run_fuzz: finding kept as $dest/$name-$(basename "$f")"
        echo "run_fuzz: reproduce with: $target $dest/$name-$(basename "$f")"
    done
}

echo "run_fuzz: $name: ${#inputs[@]} regression and seed inputs, once each"
if ! "$target" "${common[@]}" -runs=1 "${inputs[@]}" >"$tmp/replay.log" 2>&1; then
    tail -n 60 "$tmp/replay.log"
    keep_findings
    echo "run_fuzz: $name: FAILED on a seed or regression input"
    exit 1
fi
grep -c '^Executed ' "$tmp/replay.log" | sed "s/^/run_fuzz: executed inputs: /"

if [ "$seconds" -eq 0 ]; then
    echo "run_fuzz: $name: PCRFS_FUZZ_SECONDS=0, no fuzzing"
    exit 0
fi
echo "run_fuzz: $name: fuzzing for $seconds s"
status=0
if [ "$jobs" -gt 1 ]; then
    # -fork keeps going past a crash only with -ignore_crashes; we want the first one
    "$target" "${common[@]}" -fork="$jobs" -max_total_time="$seconds" "$tmp/corpus" \
        >"$tmp/fuzz.log" 2>&1 || status=$?
else
    "$target" "${common[@]}" -max_total_time="$seconds" "$tmp/corpus" \
        >"$tmp/fuzz.log" 2>&1 || status=$?
fi
# The last status lines and the final stats (execs, coverage) are the useful part.
grep -E '^#[0-9]+ +(DONE|INITED)|^stat::|^INFO: (Loaded|seed)|cov:' "$tmp/fuzz.log" | tail -n 8
if [ "$status" -eq 0 ] && [ -n "$(ls -A "$tmp/artifacts")" ]; then
    status=1 # a finding written without a failing exit status (e.g. a slow unit)
fi
if [ "$status" -ne 0 ]; then
    tail -n 80 "$tmp/fuzz.log"
    keep_findings
    echo "run_fuzz: $name: FAILED (exit $status) after fuzzing"
    exit 1
fi
if [ -n "${PCRFS_FUZZ_KEEP_CORPUS:-}" ]; then
    mkdir -p "$PCRFS_FUZZ_KEEP_CORPUS"
    cp -p "$tmp/corpus"/* "$PCRFS_FUZZ_KEEP_CORPUS/"
fi
echo "run_fuzz: $name: no crash, leak or timeout in $seconds s" \
    "($(ls "$tmp/corpus" | wc -l) corpus inputs at the end)"
exit 0
