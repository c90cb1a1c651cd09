#!/bin/bash
# Object storage and record order: rewrite sections 12 and 13 of BENCHMARKS.md.
#
#   bench/s3.sh [--data DIR] [--build DIR] [bench/s3.py options...]
#
# Installs s3fs-fuse (apt) and s3rver (tests/s3/setup.sh, npm; or $PCRFS_S3RVER_DIR),
# builds pcrfs (BUILD, default ./build), then runs bench/s3.py: ImageFolder + Pillow
# over an s3:// mount and over s3fs-fuse through a delaying proxy on 127.0.0.1, and
# cold local reads in record order. Needs bench/run.sh's dataset and store (--data
# DIR, default ../bench-data; or --dataset and --store). Runs as root (FUSE mounts,
# drop_caches). About 30 minutes on 2 cores with the defaults; bench/s3.py --help
# lists the knobs (--rtts, --reps, --only s3|local, --render-only); with --only local
# (section 13 alone, about 4 minutes) neither s3fs nor s3rver is installed, and
# only the store is needed (--store of any store): --limit N and --record-only keep
# a large store's run to minutes (write it with --out elsewhere than BENCHMARKS.md
# to keep section 13's standard table).
set -euo pipefail

cmdline=${BENCH_CMDLINE:-"bench/s3.sh${*:+ $*}"}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build
driver=s3.py # bench/node_throughput.sh runs its own with --driver, after the same set-up
args=()
only_local=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --driver) driver=$2; shift 2 ;;
    --only) [ "$2" = local ] && only_local=1; args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
               exec /usr/bin/python3 "$repo/bench/s3.py" --help ;;
    *) args+=("$1"); shift ;;
    esac
done
if [ "$(id -u)" -ne 0 ]; then
    echo "s3bench: run as root (FUSE mounts, drop_caches)" >&2
    exit 1
fi
need=()
pkgs="s3fs curl fuse3 python3-torchvision python3-pil"
[ "$only_local" = 1 ] && pkgs="fuse3 python3-torchvision python3-pil" # no s3fs, no s3rver
for p in $pkgs; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
        need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "s3bench: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" ||
        { apt-get update && DEBIAN_FRONTEND=noninteractive \
              apt-get install -y --no-install-recommends "${need[@]}"; }
fi
s3dir=${PCRFS_S3RVER_DIR:-$repo/tests/s3}
if [ "$only_local" = 0 ] && [ ! -x "$s3dir/node_modules/.bin/s3rver" ]; then
    command -v npm >/dev/null || bash "$repo/scripts/deps.sh" # node and npm
    PCRFS_S3RVER_DIR=$s3dir bash "$repo/tests/s3/setup.sh" >&2
fi
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$repo" >/dev/null
fi
ninja -C "$build" -j2 >/dev/null
export BENCH_CMDLINE="$cmdline"
exec /usr/bin/python3 "$repo/bench/$driver" --build "$build" \
    --s3rver "$s3dir/node_modules/.bin/s3rver" "${args[@]}"
