#!/usr/bin/env bash
# FEMNIST with the paper's CNN (32, 64 channels) on a GPU: one `most bench federated` call per
# (method, seed), so that a run cut short by a time limit keeps every finished seed; join the
# folders afterwards with benchmarks/federated_tools.py merge.
#
#   benchmarks/femnist_cnn.sh DATA_DIR OUT_DIR "METHOD" ["METHOD" ...]
#
# Environment:
#   SEEDS="0 1 2 3 4"   the seeds, each its own call
#   LRS="--server-lr 1 --server-lr 3"   the server-step grid searched on validation
#   LANES=1             calls run at once, sharing the GPU; the (method, seed) pairs are taken in
#                       order, methods first. Each call holds 11-19 GB of an H200's memory with
#                       the paper's CNN: ten at once ran out of its 140 GB, eight did not
#   TAG=                appended to each output folder's name (e.g. a grid: TAG=lr1)
#   DEVICE=cuda  MOST="python3 -m most.cli"  ROUNDS=50 (fewer only to try the script out)
# A folder that already holds results.json is skipped, and a call that was cut short continues
# from the runs it finished (--resume), so the script can simply be repeated.
set -euo pipefail
data=$1 out=$2
shift 2
export data out
one() {
  local method=$1 seed=$2
  local slug dest
  slug=$(echo "$method" | tr -c 'A-Za-z0-9\n' '_')
  dest="$out/${slug}_s$seed${TAG:+_$TAG}"
  [ -f "$dest/results.json" ] && return 0
  local start=$SECONDS
  if ${MOST:-python3 -m most.cli} bench federated --dataset femnist --data-path "$data" --model cnn \
    --cnn-channels 32 64 --device "${DEVICE:-cuda}" --rounds "${ROUNDS:-50}" --batch-size 20 --seed "$seed" \
    ${LRS:---server-lr 1 --server-lr 3} --method "$method" --out "$dest" --quiet --threads 2 --resume; then
    echo "done: $method seed $seed${TAG:+ ($TAG)} in $((SECONDS - start)) s"
  else
    echo "FAILED: $method seed $seed${TAG:+ ($TAG)} after $((SECONDS - start)) s" >&2
    return 1
  fi
}
export -f one
for method in "$@"; do
  for seed in ${SEEDS:-0 1 2 3 4}; do
    printf '%s\0%s\0' "$method" "$seed"
  done
done | xargs -0 -n 2 -P "${LANES:-1}" bash -c 'one "$0" "$1"'
