#!/bin/bash
# Regenerate BENCHMARKS.md end to end: install what the benchmarks need, build pcrfs,
# make the dataset, build the stores, mount them, measure, rewrite the tables.
#
#   bench/run.sh [--work DIR] [--build DIR] [--dataset DIR] [bench.py options...]
#
# --work DIR    datasets, stores, mount points and logs (default: ../bench-data beside
#               the checkout); needs ~3 GB free.
# --build DIR   the meson build directory to use (default: WORK/build).
# Everything else goes to bench/bench.py (see bench/bench.py --help). Runs as root:
# cold-cache figures need to write /proc/sys/vm/drop_caches.
set -euo pipefail

cmdline="bench/run.sh${*:+ $*}"
export BENCH_T0=${EPOCHREALTIME/,/.} # the whole command is timed, build included
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(dirname "$repo")/bench-data
build=
dataset=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --work) work=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --dataset) dataset=$2; args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exec /usr/bin/python3 "$repo/bench/bench.py" --help ;;
    *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$work"
work=$(cd "$work" && pwd)
build=${build:-$work/build}

if [ "$(id -u)" -ne 0 ]; then
    echo "bench: run as root (cold-cache runs drop the page cache; FUSE mounts)" >&2
    exit 1
fi

# ---- packages: the project's own, the peers (squashfuse), the dataset's photos ----
pkgs=(squashfuse squashfs-tools fuse3 python3-torchvision python3-pil python3-numpy
      libjpeg-turbo-progs util-linux procps)
if [ -z "$dataset" ]; then
    pkgs+=(gcompris-qt-data mate-backgrounds lomiri-wallpapers-16.04 lomiri-wallpapers-20.04
           plasma-workspace-wallpapers)
fi
bash "$repo/scripts/deps.sh"
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bench: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" ||
        { apt-get update && DEBIAN_FRONTEND=noninteractive \
              apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

# ---- build (release-like: the project's default debugoptimized = -O2 -g) ----
mkdir -p "$work/logs"
blog=$work/logs/build.log
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$repo" >"$blog" 2>&1 ||
        { tail -n 30 "$blog" >&2; echo "bench: meson setup failed (log: $blog)" >&2; exit 1; }
fi
ninja -C "$build" >"$blog" 2>&1 ||
    { tail -n 30 "$blog" >&2; echo "bench: the build failed (log: $blog)" >&2; exit 1; }

# The helpers are built by meson when bench/ and tests/bench/ are part of the build
# (subdir('bench'), subdir('bench') in tests/); until then, compile them here against
# the same static library.
helpers=$build/bench-helpers
mkdir -p "$helpers"
cflags=(-std=gnu11 -O2 -g -Wall -Wextra -D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE
        -I"$repo/include" -I"$repo/src/lib")
# link exactly as meson links pcrinfo (the library's dependencies change over time)
read -r -a libs < <(awk '/^build src\/tools\/pcrinfo: /{f=1}
    f && /^ LINK_ARGS = /{sub(/^ LINK_ARGS = /, ""); print; exit}' "$build/build.ninja")
helper() { # NAME SOURCE MESON_OUTPUT
    if [ -x "$3" ]; then
        ln -sf "$3" "$helpers/$1"
    elif [ ! -x "$helpers/$1" ] || [ -L "$helpers/$1" ] || [ "$2" -nt "$helpers/$1" ] ||
         [ "$build/src/lib/libpcrfs.a" -nt "$helpers/$1" ]; then
        rm -f "$helpers/$1"
        (cd "$build" && cc "${cflags[@]}" "$2" "${libs[@]}" -o "$helpers/$1")
    fi
}
helper mkmeta "$repo/bench/mkmeta.c" "$build/bench/mkmeta"
helper bench_transform "$repo/tests/bench/bench_transform.c" "$build/tests/bench/bench_transform"

export BENCH_CMDLINE="$cmdline"
exec /usr/bin/python3 "$repo/bench/bench.py" --repo "$repo" --work "$work" --build "$build" \
    --helpers "$helpers" "${args[@]}"
