#!/bin/bash
# Node throughput from object storage against the number of connections: rewrite
# section 22 of BENCHMARKS.md.
#
#   bench/node_throughput.sh [--build DIR] [bench/node_throughput.py options...]
#
# Installs s3fs-fuse and curl (apt) and s3rver (tests/s3/setup.sh, npm; or
# $PCRFS_S3RVER_DIR) and builds pcrfs (BUILD, default ./build) as bench/s3.sh does,
# then runs bench/node_throughput.py: generates (or reuses) an ImageNet-like tree and
# its store in WORK (default ../bench-node), uploads both to s3rver on 127.0.0.1,
# measures what N parallel curl GETs carry through bench/capproxy.py (each connection
# capped, default 2 MB/s, RTT 2 ms, 5 ms per new connection), then reads full/ and
# scan5/ of fresh s3:// mounts in RecordSampler order at each -o http_connections=N
# the build accepts, next to s3fs-fuse on the original JPEGs, with the CPU each
# process used. Runs as root (FUSE mounts). About 10-12 minutes at the defaults once
# the data exists (making and uploading it, --prepare-only: about 15-20 more);
# bench/node_throughput.py --help lists the knobs (--label, --conns, --cap-mbps,
# --reps, --window, --readers, --prepare-only, --render-only).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "${1:-}" in
-h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
           exec /usr/bin/python3 "$here/node_throughput.py" --help ;;
esac
BENCH_CMDLINE="bench/node_throughput.sh${*:+ $*}" exec "$here/s3.sh" --driver node_throughput.py "$@"
