#!/usr/bin/env bash
# FEMNIST with the paper's CNN (32, 64 channels) on a GPU: one `most bench federated` call per
# (method, seed), so that a run cut short by a time limit keeps every finished seed; join the
# folders afterwards with benchmarks/merge_federated.py.
#
#   benchmarks/femnist_cnn.sh DATA_DIR OUT_DIR "METHOD" ["METHOD" ...]
#
# Several calls may run at once on one GPU (each with its own methods): the runs are small
# enough that the device is not saturated by one process. LRS="--server-lr 5" sets another grid.
set -euo pipefail
data=$1 out=$2
shift 2
most=${MOST:-"python3 -m most.cli"}
for method in "$@"; do
  slug=$(echo "$method" | tr -c 'A-Za-z0-9\n' '_')
  for seed in ${SEEDS:-0 1 2 3 4}; do
    dest="$out/${slug}_s$seed"
    [ -f "$dest/results.json" ] && continue
    $most bench federated --dataset femnist --data-path "$data" --model cnn --cnn-channels 32 64 \
      --device "${DEVICE:-cuda}" --rounds 50 --batch-size 20 --seed "$seed" \
      ${LRS:---server-lr 1 --server-lr 3} --method "$method" --out "$dest" --quiet --threads 2
  done
done
