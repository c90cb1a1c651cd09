#!/bin/bash
# Install everything pcrfs needs to build, test, fuzz and demo on Debian 12.
# Runs apt-get only when a package is missing (so a prepared machine needs no
# network); uses sudo when not root.
set -euo pipefail

pkgs=(
    # build
    build-essential pkg-config meson ninja-build
    libfuse3-dev libsqlite3-dev libjpeg62-turbo-dev libzstd-dev
    # run and mount
    fuse3 util-linux
    # tests: djpeg/jpegtran/cjpeg, Pillow, numpy, torchvision's ImageFolder, sqlite3 CLI
    libjpeg-turbo-progs python3 python3-pil python3-numpy python3-torchvision sqlite3
    # fuzz targets (libFuzzer) and memory checking
    clang libclang-rt-14-dev valgrind
    # man pages from reStructuredText
    python3-docutils
)

# Stores in object storage: libcurl to build; curl (uploads) and Node.js for the s3
# test suite, whose server (s3rver) tests/s3/setup.sh installs with npm. NodeSource's
# nodejs ships npm itself and conflicts with Debian's npm package: npm only if missing.
pkgs+=(libcurl4-openssl-dev curl nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#pkgs[@]} packages installed"
    exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        SUDO=sudo
    else
        echo "deps: missing ${missing[*]}; run as root or install sudo" >&2
        exit 1
    fi
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${pkgs[@]}"
