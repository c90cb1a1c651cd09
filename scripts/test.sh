#!/bin/bash
# Build and run every test suite the way CI does; the last line of output is
#   N passed, N failed[, N skipped]
# counted from meson's testlog.json of every run. Exit status 0 only if nothing failed.
#
#   1. gcc, -Dwerror=true: all suites (unit, build, mount, ...)
#   2. gcc, -Db_sanitize=address,undefined: suites unit and build
#      (skip with PCRFS_SANITIZE=0; it costs a few minutes on 2 cores)
#   3. clang, -Dfuzz=true: suite unit, and suite fuzz if tests/fuzz registers one
#      (skip with PCRFS_CLANG=0); proves the fuzz targets and the code build with clang
#
# Environment: PCRFS_BUILD_DIR (default build-ci; the other builds go to
# ${PCRFS_BUILD_DIR}-asan and -clang), PCRFS_SANITIZE, PCRFS_CLANG (default 1),
# PCRFS_SKIP_DEPS=1 to skip scripts/deps.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=${PCRFS_BUILD_DIR:-$ROOT/build-ci}
SANITIZE=${PCRFS_SANITIZE:-1}
CLANG=${PCRFS_CLANG:-1}

passed=0
failed=0
skipped=0
notes=()

section() { printf '\n=== %s ===\n' "$*"; }

# Add one run's results from its testlog.json to the totals.
count() {
    local log=$1/meson-logs/testlog.json
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
# A "--suite X" option is dropped when the build defines no suite X.
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
fi

start=$(date +%s)
build_and_test "$BUILD" "werror" -- --num-processes 2

if [ "$SANITIZE" != 0 ]; then
    # Make any sanitizer report fatal and visible in the test log, also in the
    # programs the Python tests start.
    export ASAN_OPTIONS=abort_on_error=1:halt_on_error=1:detect_leaks=1:print_summary=1
    export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1
    build_and_test "$BUILD-asan" "asan+ubsan" -Db_sanitize=address,undefined \
        -Db_lundef=false -- --suite unit --suite build --timeout-multiplier 3 \
        --num-processes 2
fi

if [ "$CLANG" != 0 ]; then
    unset ASAN_OPTIONS UBSAN_OPTIONS
    CC=clang build_and_test "$BUILD-clang" "clang+fuzz" -Dfuzz=true -- \
        --suite unit --suite fuzz --num-processes 2
fi

section "summary ($(( $(date +%s) - start )) s)"
for n in "${notes[@]+"${notes[@]}"}"; do echo "$n"; done
line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
