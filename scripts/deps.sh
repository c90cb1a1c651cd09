#!/bin/bash
# Install what pcrfs needs on Debian 12, for one purpose:
#   scripts/deps.sh demo   build pcrfs and run scripts/demo.sh: the build
#                          dependencies, fuse3, and what the demo runs (Python with
#                          Pillow and numpy for the sample images, djpeg)
#   scripts/deps.sh test   (the default) everything: also clang and libFuzzer,
#                          clang-format and clang-tidy (scripts/lint.sh),
#                          valgrind, torchvision, the sqlite3 CLI, docutils and attr
#                          (getfattr/setfattr of the docs' examples), the
#                          packaging tools and debootstrap (suite deb), for
#                          scripts/test.sh and CI
# scripts/apt-install.sh installs them: apt-get only when a package is missing (so a
# prepared machine needs no network), sudo when not root, and when another apt-get or
# dpkg holds the package lock (unattended-upgrades on a fresh machine) it waits for it
# up to 10 minutes instead of failing at once.
set -euo pipefail

what=${1:-test}
demo_pkgs=(
    # build
    build-essential pkg-config meson ninja-build
    libfuse3-dev libsqlite3-dev libjpeg62-turbo-dev libzstd-dev zlib1g-dev
    libcurl4-openssl-dev
    # run and mount
    fuse3 util-linux
    # the demo's sample images (tests/gen/mkdataset.py) and its djpeg check
    python3 python3-pil python3-numpy libjpeg-turbo-progs
)
test_pkgs=(
    # tests: torchvision's ImageFolder, sqlite3 CLI
    python3-torchvision sqlite3
    # fuzz targets (libFuzzer) and memory checking
    clang libclang-rt-14-dev valgrind
    # the lint stage (scripts/lint.sh): formatting and static checks
    clang-format clang-tidy
    # man pages from reStructuredText
    python3-docutils
    # getfattr/setfattr, which README and pcrfs(1) use for user.pcrfs.* attributes
    attr
    # ip (network namespaces, veth, a bridge) for the multinode suite
    iproute2
    # suite deb (tests/integration/test_deb.py): scripts/deb.sh's packaging tools
    # and a fresh Debian 12 root to install the packages into
    dpkg-dev debhelper dh-python lintian debootstrap
)
case $what in
    demo) pkgs=("${demo_pkgs[@]}") ;;
    test) pkgs=("${demo_pkgs[@]}" "${test_pkgs[@]}") ;;
    -h | --help)
        sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "usage: scripts/deps.sh [demo|test]" >&2
        exit 2
        ;;
esac

# The s3 test suite: curl (uploads) and Node.js, whose server (s3rver)
# tests/s3/setup.sh installs with npm. NodeSource's nodejs ships npm itself and
# conflicts with Debian's npm package: npm only if missing.
if [ "$what" = test ]; then
    pkgs+=(curl nodejs)
    command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

exec bash "$(dirname "$0")/apt-install.sh" "${pkgs[@]}"
