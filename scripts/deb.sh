#!/bin/bash
# Build the Debian packages pcrfs, libpcrfs0, libpcrfs-dev and python3-pcrfs (debian/)
# on Debian 12 and check them with lintian:
#
#   scripts/deb.sh [OUTDIR]    (default: deb/ in the source tree)
#
# Installs the packaging tools and the Build-Depends of debian/control that are
# missing (scripts/apt-install.sh: waits for the apt lock), builds from a copy of the
# source (dpkg-buildpackage writes beside the source directory), with
# "dpkg-buildpackage -us -uc -b", copies the packages (with .changes and .buildinfo) to OUTDIR,
# then runs lintian on them: any error or warning fails (PCRFS_LINTIAN=0 skips it).
# Prints the path of each .deb, one a line, last. Install them with
#   apt install ./OUTDIR/pcrfs_*.deb ./OUTDIR/libpcrfs0_*.deb ...
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
out=${1:-$src/deb}
mkdir -p "$out"
out=$(cd "$out" && pwd)

bash "$here/apt-install.sh" --quiet dpkg-dev debhelper dh-python build-essential fakeroot
[ "${PCRFS_LINTIAN:-1}" = 0 ] || bash "$here/apt-install.sh" --quiet lintian

# The Build-Depends that are missing, as dpkg-checkbuilddeps names them ("a (>= 1) |
# b" -> a: the first of alternatives, without its version, which apt resolves).
unmet=$(cd "$src" && dpkg-checkbuilddeps 2>&1 >/dev/null |
    sed -n 's/.*Unmet build dependencies: //p' |
    sed -e 's/([^)]*)//g' -e 's/|[^ ]*//g' -e 's/:any//g') || true
if [ -n "$unmet" ]; then
    # shellcheck disable=SC2086  # one word per package
    bash "$here/apt-install.sh" $unmet
fi

version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
# The packages' version is the project's (meson.build); debian/changelog says it.
project=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$src/meson.build" | head -1)
if [ "$version" != "$project" ]; then
    echo "deb.sh: debian/changelog is at $version, meson.build at $project:" \
        "add a debian/changelog entry (dch -v $project)" >&2
    exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/pcrfs-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/pcrfs-$version
mkdir "$tree"
# The files of the source tree, without build directories or earlier packages: git's
# list (tracked and new files, .gitignore respected) in a checkout, else everything
# but build*/ and deb/.
if git -C "$src" rev-parse --show-toplevel >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do
            # a tracked file deleted in the work tree is left out
            if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
        done | tar --null -T - -cf -) | tar -C "$tree" -xf -
else
    (cd "$src" && tar --exclude='./build*' --exclude=./deb --exclude=./.git -cf - .) |
        tar -C "$tree" -xf -
fi

(cd "$tree" && dpkg-buildpackage -us -uc -b)

changes=$(ls "$work"/pcrfs_"${version}"_*.changes)
# The work directory holds this build's packages only.
debs=()
for f in "$work"/*.deb; do
    [ -e "$f" ] || continue
    cp "$f" "$changes" "${changes%.changes}.buildinfo" "$out/"
    debs+=("$out/$(basename "$f")")
done
[ ${#debs[@]} -gt 0 ] || { echo "deb.sh: no .deb built" >&2; exit 1; }
if [ "${PCRFS_LINTIAN:-1}" != 0 ]; then
    # --fail-on: errors and warnings fail; what is overridden (debian/*.lintian-
    # overrides, each with its reason) does not.
    lintian --fail-on error,warning --tag-display-limit 0 "$out/$(basename "$changes")"
fi

printf '%s\n' "${debs[@]}"
