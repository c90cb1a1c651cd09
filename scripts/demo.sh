#!/bin/bash
# A two-minute tour: build pcrfs, make a small sample dataset, build a store from it,
# inspect it, mount it, and look at the views. Everything happens in a temporary
# directory that is removed at the end (PCRFS_DEMO_KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${PCRFS_BUILD_DIR:-$ROOT/build-demo}

run() { printf '\n$ %s\n' "$*"; "$@"; }

[ "${PCRFS_SKIP_DEPS:-0}" = 1 ] || bash scripts/deps.sh demo
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" "$ROOT" >/dev/null
ninja -C "$BUILD" >/dev/null
MKPCRFS=$BUILD/src/tools/mkpcrfs
PCRINFO=$BUILD/src/tools/pcrinfo
PCRFS=$BUILD/src/fuse/pcrfs

WORK=$(mktemp -d /tmp/pcrfs-demo.XXXXXX)
MNT=$WORK/mnt
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then fusermount3 -u "$MNT" || umount -l "$MNT"; fi
    if [ "${PCRFS_DEMO_KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "== a sample ImageNet-like tree: 5 classes x 20 synthetic photos"
run /usr/bin/python3 tests/gen/mkdataset.py --out "$WORK/train" --classes 5 --per-class 20 \
    --seed 1 --size 400 --manifest "$WORK/manifest.json"
run du -sh "$WORK/train"

echo; echo "== build the store (lossless progressive transcode, scan groups per record)"
run "$MKPCRFS" -n 32 "$WORK/train" "$WORK/train.pcr"
run ls -l "$WORK/train.pcr" "$WORK/train.pcr/records"

echo; echo "== inspect it"
run "$PCRINFO" "$WORK/train.pcr"
run "$PCRINFO" --verify "$WORK/train.pcr"

echo; echo "== mount it"
mkdir "$MNT"
# -o logfile: the detached daemon's messages go to a file (machines and containers
# without a syslog socket would otherwise lose them, and pcrfs says so)
run "$PCRFS" "$WORK/train.pcr" "$MNT" -o logfile="$WORK/pcrfs.log"
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.05; done
mountpoint -q "$MNT" || { echo "pcrfs did not mount" >&2; exit 1; }
run ls -v "$MNT"
run ls "$MNT/scan5"
printf '\n$ ls -l %s | head -4\n' "$MNT/scan5/n00000000"
ls -l "$MNT/scan5/n00000000" | head -4

echo; echo "== one copy of the data, every fidelity: du per view"
for v in $(ls -v "$MNT"); do du -sh "$MNT/$v/"; done

IMG=n00000000/n00000000_0.JPEG
echo; echo "== one image ($IMG) at scan 1, scan 5 and full"
for v in scan1 scan5 full; do
    printf '%-6s %8d bytes\n' "$v" "$(stat -c %s "$MNT/$v/$IMG")"
done
echo "full decodes to exactly the source's pixels:"
/usr/bin/python3 -c 'import sys; from PIL import Image
a, b = (Image.open(p) for p in sys.argv[1:])
print("  identical pixels:", a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes())
' "$WORK/train/$IMG" "$MNT/full/$IMG"
echo "scan1 is a valid (blurrier) JPEG too:"
run djpeg -outfile /dev/null "$MNT/scan1/$IMG"

echo; echo "== the control directory"
run cat "$MNT/.pcrfs/info"

echo; echo "== unmount"
run fusermount3 -u "$MNT"
