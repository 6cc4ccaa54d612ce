#!/bin/bash
# Submits a distributed index build to Slurm: a job array of N sam-build
# --shard I/N tasks, then a join step (sam-build --write-samset) that runs
# only if every task succeeded. Prints the two job ids.
#
#   tools/slurm/submit.sh --shards 25 --tokens 10e9 --out /data/idx/web \
#       [--cpus 4] [--sam-build /opt/sam/bin/sam-build] [--largest-input-bytes B] \
#       [--sbatch-args "--partition=cpu --time=2:00:00"] \
#       -- --tokenizer llama-32k.model --corpus jsonl=/data/web/part-*.jsonl ...
#
# Memory per task: a build peaks at 56 bytes per token (docs/indexer.md), and
# shard I holds about TOKENS / N tokens (documents go round-robin), plus the
# largest corpus input held while it is read and 1 GiB for the process; 15%
# is added for shards above the mean. The shards are written next to --out
# (OUT.I.sam), the manifest as OUT.samset; the output folder must be shared
# by the nodes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards= tokens= out= cpus=2 sam_build=sam-build largest=0 extra=
while [[ $# -gt 0 ]]; do
  case $1 in
    --shards) shards=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --sam-build) sam_build=$2; shift 2 ;;
    --largest-input-bytes) largest=$2; shift 2 ;;
    --sbatch-args) extra=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "submit.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $shards && -n $tokens && -n $out ]] || { echo "submit.sh: --shards, --tokens and --out are required" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "submit.sh: give sam-build's corpus arguments after --" >&2; exit 2; }
mem_mb=$(python3 -c "
t, n, big = float('$tokens'), int('$shards'), float('$largest')
print(int(((t / n) * 56 * 1.15 + big + (1 << 30)) / (1 << 20)) + 1)")
export SAM_SHARDS=$shards SAM_OUT=$out SAM_BUILD=$sam_build
# shellcheck disable=SC2086
array=$(sbatch --parsable --array=0-$((shards - 1)) --mem=${mem_mb}M --cpus-per-task="$cpus" \
  --export=ALL $extra "$here/sam_shard.sbatch" "$@")
array=${array%%;*}
# shellcheck disable=SC2086
join=$(sbatch --parsable --dependency=afterok:"$array" --mem=1G --export=ALL $extra \
  "$here/sam_join.sbatch")
join=${join%%;*}
echo "array job $array ($shards tasks, ${mem_mb} MiB each), join job $join -> $out.samset"
