#!/bin/bash
# Build and run every test suite the way CI does; the last line of output is
#   N passed, N failed[, N skipped]
# counted from meson's testlog of every run. Exit status 0 only if nothing failed.
#
#   1. gcc, -Dwerror=true: all suites (unit, build, mount, reliability, valgrind, deb,
#      ...); suite valgrind runs one mount session (and mkpcrfs, pcrinfo) under
#      memcheck; suite deb builds the Debian packages and tries them in a fresh
#      Debian 12 root (debootstrap, cached in /var/cache/pcrfs-ci)
#   2. the unit suite of that build again, each test under valgrind memcheck
#      (--leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1);
#      skip with PCRFS_VALGRIND=0
#   3. gcc, -Db_sanitize=address,undefined: all suites but deb (it builds its own
#      packages), valgrind (ASan and valgrind cannot watch one process), lint (no C
#      of ours runs in it) and library (an ASan-built libpcrfs.so
#      cannot be loaded into Python: its Store tests in suite s3 are skipped there
#      too, saying so) and multinode (three training processes and the deadlines
#      it measures: the plain build runs it), mount tests included; a sanitizer report
#      from any process, also a detached daemon whose stderr is gone, fails the run
#      (skip with PCRFS_SANITIZE=0)
#   4. gcc, -Dfuse=disabled -Dwerror=true: the library and the tools without
#      libfuse (what a user without /dev/fuse builds), suite unit (skip with
#      PCRFS_NOFUSE=0)
#   5. clang, -Dfuzz=true: suite unit, and suite fuzz: every fuzz target replays its
#      seeds and regression inputs, then fuzzes for PCRFS_FUZZ_SECONDS (default 30)
#      (skip with PCRFS_CLANG=0)
#   6. lint (scripts/lint.sh), two tests: clang-format (a C file or header of src/,
#      include/, tests/ that .clang-format would change fails) and clang-tidy
#      (.clang-tidy's checks over stage 1's compile_commands.json; any finding
#      fails) (skip with PCRFS_LINT=0)
#
# Environment: PCRFS_BUILD_DIR (default build-ci; the other builds go to
# ${PCRFS_BUILD_DIR}-asan, -nofuse and -clang), PCRFS_SANITIZE, PCRFS_VALGRIND,
# PCRFS_NOFUSE, PCRFS_CLANG, PCRFS_LINT (default 1 each), PCRFS_FUZZ_SECONDS, PCRFS_LOAD_SECONDS
# (the reliability suite's load run, default 20), PCRFS_SKIP_DEPS=1 to skip
# scripts/deps.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${PCRFS_BUILD_DIR:-$ROOT/build-ci}
SANITIZE=${PCRFS_SANITIZE:-1}
VALGRIND=${PCRFS_VALGRIND:-1}
NOFUSE=${PCRFS_NOFUSE:-1}
CLANG=${PCRFS_CLANG:-1}
LINT=${PCRFS_LINT:-1}

passed=0
failed=0
skipped=0
notes=()

section() { printf '\n=== %s ===\n' "$*"; }

# Add one run's results from its testlog to the totals:
#   count BUILD_DIR LABEL [LOG_NAME (default testlog; meson names a --wrapper run's log
#   after the wrapper, e.g. testlog-valgrind)]
count() {
    local log=$1/meson-logs/${3:-testlog}.json
    if [ ! -s "$log" ]; then
        notes+=("$2: no test results (no tests ran)")
        failed=$((failed + 1))
        return
    fi
    local p f s
    read -r p f s < <(/usr/bin/python3 - "$log" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif r == "SKIP":
        skip += 1
    else:
        bad += 1
print(ok, bad, skip)
PY
    )
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    echo "$2: $p passed, $f failed, $s skipped"
}

# The suites a configured build defines (meson names them "project:suite").
suites_of() {
    meson introspect --tests "$1" | /usr/bin/python3 -c '
import json, sys
print(" ".join(sorted({s.split(":")[-1] for t in json.load(sys.stdin) for s in t["suite"]})))'
}

# build_and_test DIR LABEL [meson setup options...] -- [meson test options...]
# A "--suite X" or "--no-suite X" option is dropped when the build defines no suite X.
build_and_test() {
    local dir=$1 label=$2
    shift 2
    local setup=() tests=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do setup+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    section "$label: meson setup ${setup[*]}"
    rm -rf "$dir"
    if ! meson setup "$dir" "$ROOT" -Dwerror=true "${setup[@]}"; then
        notes+=("$label: meson setup failed"); failed=$((failed + 1)); return
    fi
    local have asked=0 kept=0
    have=" $(suites_of "$dir") "
    while [ $# -gt 0 ]; do
        if [ "$1" = --suite ]; then
            asked=1
            if [[ "$have" == *" $2 "* ]]; then tests+=(--suite "$2"); kept=1; fi
            shift 2
        elif [ "$1" = --no-suite ]; then
            if [[ "$have" == *" $2 "* ]]; then tests+=(--no-suite "$2"); fi
            shift 2
        else
            tests+=("$1"); shift
        fi
    done
    if [ "$asked" = 1 ] && [ "$kept" = 0 ]; then
        notes+=("$label: none of the requested suites is defined (have:$have)")
        return
    fi
    section "$label: build"
    if ! ninja -C "$dir"; then
        notes+=("$label: build failed"); failed=$((failed + 1)); return
    fi
    section "$label: meson test ${tests[*]} (suites defined:$have)"
    meson test -C "$dir" --print-errorlogs "${tests[@]}"
    count "$dir" "$label"
}

if [ "${PCRFS_SKIP_DEPS:-0}" != 1 ]; then
    section "dependencies"
    if ! bash scripts/deps.sh; then
        echo "scripts/deps.sh failed"
        echo "0 passed, 1 failed"
        exit 1
    fi
    bash tests/s3/setup.sh || notes+=("tests/s3/setup.sh failed: suite s3 will fail")
fi

start=$(date +%s)
build_and_test "$BUILD" "werror" -- --num-processes 2

if [ "$VALGRIND" != 0 ]; then
    section "valgrind: meson test --suite unit under memcheck"
    if [ -f "$BUILD/build.ninja" ] && command -v valgrind >/dev/null; then
        # A definite leak or any memory error makes valgrind exit 1: a failed test.
        meson test -C "$BUILD" --suite unit --print-errorlogs --num-processes 2 \
            --timeout-multiplier 10 --wrapper "valgrind -q --leak-check=full \
            --errors-for-leak-kinds=definite --show-leak-kinds=definite --error-exitcode=1"
        count "$BUILD" "valgrind" testlog-valgrind
    else
        notes+=("valgrind: no build or no valgrind"); failed=$((failed + 1))
    fi
fi

if [ "$SANITIZE" != 0 ]; then
    # Make any sanitizer report fatal, also in the programs the Python tests start.
    # Reports go to files (log_path) as well as failing the process: a detached
    # daemon's stderr is /dev/null, and a test that only checks an exit status would
    # not show the report. Any such file fails the run and is printed.
    reports=$(mktemp -d "${TMPDIR:-/tmp}/pcrfs-sanitizer.XXXXXX")
    export ASAN_OPTIONS=abort_on_error=1:halt_on_error=1:detect_leaks=1:print_summary=1:log_path=$reports/asan
    export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1:log_path=$reports/ubsan
    build_and_test "$BUILD-asan" "asan+ubsan" -Db_sanitize=address,undefined \
        -Db_lundef=false -- --no-suite valgrind --no-suite library --no-suite multinode \
        --no-suite deb --no-suite lint \
        --timeout-multiplier 3 \
        --num-processes 2
    if [ -n "$(ls -A "$reports")" ]; then
        for f in "$reports"/*; do
            printf '\n--- sanitizer report %s ---\n' "$f"
            head -c 20000 "$f"
        done
        notes+=("asan+ubsan: $(ls "$reports" | wc -l) sanitizer report(s), printed above")
        failed=$((failed + 1))
    fi
    rm -rf "$reports"
    unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if [ "$NOFUSE" != 0 ]; then
    # the build squashfuse also keeps: no FUSE driver, nothing may need libfuse
    build_and_test "$BUILD-nofuse" "nofuse" -Dfuse=disabled -- --suite unit --num-processes 2
fi

if [ "$CLANG" != 0 ]; then
    CC=clang build_and_test "$BUILD-clang" "clang+fuzz" -Dfuzz=true -- \
        --suite unit --suite fuzz --num-processes 2
fi

if [ "$LINT" != 0 ]; then
    # one test each: passed or failed, what breaks the rule printed above
    for check in format tidy; do
        section "lint: scripts/lint.sh $check"
        if bash scripts/lint.sh "$check" "$BUILD"; then
            passed=$((passed + 1)); echo "lint $check: passed"
        else
            failed=$((failed + 1)); notes+=("lint $check: failed (the list is above)")
        fi
    done
fi

section "summary ($(( $(date +%s) - start )) s)"
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n"; done
line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
