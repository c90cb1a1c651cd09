#!/bin/bash
# Install the Debian packages named on the command line that are not installed yet,
# with apt-get (through sudo when not root). Used by scripts/deps.sh and
# scripts/deb.sh.
#
#   scripts/apt-install.sh [--quiet] PKG...
#
# Runs apt-get only when a package is missing (so a prepared machine needs no
# network). When another apt-get or dpkg holds the package lock (unattended-upgrades
# on a fresh machine), it waits for it up to 10 minutes instead of failing at once.
# --quiet: no line when everything is installed already.
set -euo pipefail

quiet=0
if [ "${1:-}" = --quiet ]; then
    quiet=1
    shift
fi
[ $# -gt 0 ] || exit 0

missing=()
for p in "$@"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    [ "$quiet" = 1 ] || echo "apt-install: all $# packages installed"
    exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        SUDO=sudo
    else
        echo "apt-install: missing ${missing[*]}; run as root or install sudo" >&2
        exit 1
    fi
fi
echo "apt-install: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# apt 2.6 (Debian 12) waits for the dpkg lock with this option (seconds); older apt
# ignores it.
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update
$SUDO apt-get "${lock[@]}" install -y --no-install-recommends "${missing[@]}"
