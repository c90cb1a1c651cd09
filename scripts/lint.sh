#!/bin/bash
# The house rules that run (README, "Tests"): each check prints every file or finding
# that breaks it and exits 1; 0 when clean.
#
#   scripts/lint.sh format         every C file and header of src/, include/ and tests/
#                                  (tests/fuzz/corpus/ holds data, not code) that
#                                  clang-format would change (.clang-format; the
#                                  formatter of Debian 12, clang-format 14)
#   scripts/lint.sh tidy BUILD     clang-tidy with .clang-tidy's checks over every C
#                                  file of src/ and tests/ in BUILD's
#                                  compile_commands.json (any meson build directory);
#                                  any finding fails (WarningsAsErrors)
#   scripts/lint.sh all BUILD      both
#
# To fix a format failure: clang-format -i FILE... (the list printed). Environment:
# CLANG_FORMAT, CLANG_TIDY (the programs; default the -14 ones, else the unversioned),
# PCRFS_LINT_JOBS (clang-tidy processes at once; default the number of CPUs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

pick() {
    local p
    for p in "$@"; do
        if command -v "$p" >/dev/null 2>&1; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# The C sources and headers the rules cover, relative to ROOT, one a line: the
# checkout's files (tracked or new, not ignored), else (a tarball) what find sees.
c_files() {
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$ROOT" ls-files --cached --others --exclude-standard -- 'src/*.[ch]' \
            'include/*.[ch]' 'tests/*.[ch]'
    else
        find src include tests -name '*.[ch]' -type f
    fi | grep -v '^tests/fuzz/corpus/' | sort -u | while read -r f; do
        [ -f "$f" ] && echo "$f" # a file deleted but not yet committed is gone
    done
}

check_format() {
    local cf bad=() f n=0
    if ! cf=$(pick "${CLANG_FORMAT:-clang-format-14}" clang-format); then
        echo "lint format: no clang-format (scripts/deps.sh installs it)" >&2
        return 1
    fi
    while read -r f; do
        n=$((n + 1))
        "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || bad+=("$f")
    done < <(c_files)
    if [ "$n" -eq 0 ]; then
        echo "lint format: no C files found" >&2
        return 1
    fi
    if [ ${#bad[@]} -gt 0 ]; then
        echo "lint format: ${#bad[@]} of $n files differ from .clang-format ($("$cf" --version | head -1)):"
        printf '  %s\n' "${bad[@]}"
        echo "fix: $cf -i ${bad[*]}"
        return 1
    fi
    echo "lint format: $n files as .clang-format says"
}

check_tidy() {
    local build=${1:-} ct out files rc
    if [ -z "$build" ] || [ ! -f "$build/compile_commands.json" ]; then
        echo "lint tidy: give a meson build directory (with compile_commands.json)" >&2
        return 1
    fi
    if ! ct=$(pick "${CLANG_TIDY:-clang-tidy-14}" clang-tidy); then
        echo "lint tidy: no clang-tidy (scripts/deps.sh installs it)" >&2
        return 1
    fi
    build=$(cd "$build" && pwd)
    # the project's own C files the build compiles (not generated ones), each once
    files=$(/usr/bin/python3 - "$build/compile_commands.json" "$ROOT" <<'PY'
import json, os, sys
root = os.path.realpath(sys.argv[2])
seen = set()
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(f, root)
    if rel.split(os.sep)[0] in ("src", "tests") and f.endswith(".c") and f not in seen:
        seen.add(f)
        print(f)
PY
    )
    if [ -z "$files" ]; then
        echo "lint tidy: no C file of src/ or tests/ in $build/compile_commands.json" >&2
        return 1
    fi
    out=$(mktemp "${TMPDIR:-/tmp}/pcrfs-tidy.XXXXXX")
    # one process per file; xargs exits non-zero when any of them did
    printf '%s\n' "$files" | xargs -P "${PCRFS_LINT_JOBS:-$(nproc)}" -n 1 \
        "$ct" -p "$build" --quiet >"$out" 2>&1
    rc=$?
    # a finding's first line: FILE:LINE:COL: warning|error: TEXT [CHECK,...]
    local findings
    # one form of path (clang-tidy names a file relative to the build or absolutely)
    findings=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' "$out" |
        sed "s|^$build/\.\./||; s|^$ROOT/||; s|^\.\./||" | sort -u)
    if [ "$rc" -ne 0 ] || [ -n "$findings" ]; then
        cat "$out"
        echo
        echo "lint tidy: $(printf '%s\n' "$findings" | grep -c .) finding(s) in" \
            "$(printf '%s\n' "$files" | wc -l) files ($("$ct" --version | grep -m1 version)):"
        printf '%s\n' "$findings"
        rm -f "$out"
        return 1
    fi
    rm -f "$out"
    echo "lint tidy: $(printf '%s\n' "$files" | wc -l) files, no finding"
}

case ${1:-} in
    format) check_format ;;
    tidy) check_tidy "${2:-}" ;;
    all)
        check_format
        f=$?
        check_tidy "${2:-}"
        t=$?
        [ "$f" -eq 0 ] && [ "$t" -eq 0 ]
        ;;
    -h | --help)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "usage: scripts/lint.sh format | tidy BUILD | all BUILD" >&2
        exit 2
        ;;
esac
