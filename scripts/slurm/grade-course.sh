#!/usr/bin/env bash
# Grade a folder of notebooks on a Slurm cluster: N shards as a job array, then their merge.
#
#   scripts/slurm/grade-course.sh SUBMISSIONS OUT N [sbatch options for the grading tasks]
#   scripts/slurm/grade-course.sh submissions/ grades/ 10 --partition=gpu --gres=gpu:1
#
# The checkout this script is in grades (its .venv, from `make install`). The merged gradebook lands in OUT/final (grades.csv, feedback/); each
# shard's own output, with the notebooks that ran (work/), stays in OUT/shard-K.
# GRADE_OPTIONS (in the environment) reaches every shard's gradebook: GRADE_OPTIONS="--lab 02-fuse-it".
set -euo pipefail
if [ $# -lt 3 ]; then sed -n '2,9p' "$0" >&2; exit 2; fi
here=$(cd "$(dirname "$0")" && pwd)
SUBMISSIONS=$(realpath "$1")
OUT=$(realpath -m "$2")
SHARDS=$3
shift 3
BRRR_CHECKOUT=$(cd "$here/../.." && pwd)
export SUBMISSIONS OUT SHARDS BRRR_CHECKOUT GRADE_OPTIONS="${GRADE_OPTIONS:-}"
mkdir -p "$OUT"
grade=$(sbatch --parsable --export=ALL --array=1-"$SHARDS" --output="$OUT/slurm-grade-%A_%a.out" "$@" \
    "$here/grade-array.sbatch")
grade=${grade%%;*}
merge=$(sbatch --parsable --export=ALL --dependency=afterok:"$grade" --output="$OUT/slurm-merge-%j.out" \
    "$here/merge.sbatch")
echo "grading: job array $grade, $SHARDS shard(s) into $OUT/shard-K"
echo "merge: job ${merge%%;*}, into $OUT/final once every shard has succeeded (squeue -u $(id -un))"
