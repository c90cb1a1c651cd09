#!/bin/bash
# Build a pcrfs store on many nodes with a Slurm job array: plan once, one array
# task per part, then the merge (mkpcrfs(1), "BUILDING ON MANY MACHINES").
#
#   examples/distributed/slurm-build.sh SRC STORE [PARTS]
#
# SRC and the directory of STORE must be on a file system every node mounts at the
# same path (Lustre, GPFS, NFS, CephFS); the parts are written beside STORE, so the
# merge hard-links their records instead of copying them. Extra build options go in
# MKPCRFS_OPTS (e.g. MKPCRFS_OPTS="-n 1024 --quality"); the Slurm resources in
# SBATCH_OPTS (e.g. SBATCH_OPTS="--partition=cpu --time=04:00:00").
# A failed task can be resubmitted alone (sbatch --array=7 ...): a part run again
# removes what the failed one left and gives the same bytes.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 SRC STORE [PARTS]" >&2
    exit 2
fi
src=$(realpath -- "$1")   # the plan records SRC as given: absolute, for every node
store=$(realpath -m -- "$2")
parts=${3:-16}
work="$store.parts"
plan="$work/plan"
cpus=${CPUS_PER_PART:-32}

mkdir -p -- "$work/logs"
# 1. The plan: one walk of SRC (a few minutes for ImageNet-1k on a parallel file
#    system), on the submitting node. SOURCE_DATE_EPOCH, if set, fixes the store's time.
# shellcheck disable=SC2086  # MKPCRFS_OPTS is a list of options
mkpcrfs -q ${MKPCRFS_OPTS:-} --plan "$plan" "$src"

# 2. The parts: task I builds part I of PARTS into $work/part-I with all its CPUs.
# shellcheck disable=SC2086
array=$(sbatch --parsable ${SBATCH_OPTS:-} --job-name=mkpcrfs-parts \
    --array="1-$parts" --cpus-per-task="$cpus" --output="$work/logs/part-%a.log" \
    --wrap="mkpcrfs -q -j $cpus --plan '$plan' --part \$SLURM_ARRAY_TASK_ID/$parts '$work'/part-\$SLURM_ARRAY_TASK_ID")

# 3. The merge, once every part succeeded: seconds, it links the record files.
# shellcheck disable=SC2086
sbatch --parsable ${SBATCH_OPTS:-} --job-name=mkpcrfs-merge --dependency="afterok:$array" \
    --output="$work/logs/merge.log" \
    --wrap="mkpcrfs --merge '$store' '$work'/part-* && pcrinfo --verify '$store'"
echo "submitted: parts $array (1-$parts), then the merge into $store; logs in $work/logs"
# Afterwards, to serve it from object storage:
#   aws s3 sync "$store" s3://BUCKET/stores/NAME/     (or: rclone copy "$store" REMOTE:BUCKET/stores/NAME)
# and rm -r "$work" once the store is checked (its records are the parts' own files).
