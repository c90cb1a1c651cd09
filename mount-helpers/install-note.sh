#!/bin/sh
# Run by "meson install" (mount-helpers/meson.build) once mount.fuse.pcrfs is in
# place: mount(8) runs the helpers of "mount -t fuse.TYPE" and of fstab lines only
# from /sbin, /sbin/fs.d and /sbin/fs. Installed anywhere else (a prefix other than
# /, /usr or /usr/local, without -Dmount_helper_dir=/sbin), the helper is never run:
# mount(8) falls back to fuse3's generic mount.fuse, which looks for "pcrfs" in PATH
# and fails with "/bin/sh: 1: pcrfs: not found". So say where to link it.
#
#   install-note.sh DIR BINDIR   DIR: where the helper went, BINDIR: where pcrfs went
#                                (both without DESTDIR)
# Prints nothing when DIR is one mount(8) searches (also through a merged /usr, where
# /sbin is a link to /usr/sbin). Exit status 0 always: a note, not a failure.
dir=$1
bindir=$2
helper=$dir/mount.fuse.pcrfs

for d in /sbin /sbin/fs.d /sbin/fs; do
    [ "$dir" = "$d" ] && exit 0
    if [ -d "$d" ] && [ -d "$dir" ] &&
        [ "$(cd "$d" && pwd -P)" = "$(cd "$dir" && pwd -P)" ]; then
        exit 0
    fi
done

echo "Note: mount.fuse.pcrfs is installed in $dir, where mount(8) does not look"
echo "  (it runs helpers from /sbin only). For 'mount -t fuse.pcrfs' and fstab lines"
echo "  of type fuse.pcrfs, link it as root:"
echo "    ln -sf $helper /sbin/mount.fuse.pcrfs"
echo "  or install with -Dmount_helper_dir=/sbin. The helper runs $bindir/pcrfs."
if [ -e /sbin/mount.fuse.pcrfs ] && ! [ /sbin/mount.fuse.pcrfs -ef "$helper" ]; then
    echo "  /sbin/mount.fuse.pcrfs exists and is another install's helper: ln -sf replaces it."
fi
exit 0
