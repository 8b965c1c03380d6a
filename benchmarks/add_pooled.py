"""Adds the per-sample accuracy (validation pick) to a federated results folder written before it existed.

``most bench federated`` records ``pooled``, the accuracy over all test samples (FedProx's metric,
where a client counts for its test-set size), beside the mean over clients. For the paper's pick it
is a weighted mean of the stored per-client test accuracies, so for results written earlier this
script computes it without re-running anything: it rebuilds each seed's data (the seed fixes the
split) for the clients' test-set sizes. Runs that already have ``pooled`` are recomputed as a check
and the script stops if they disagree (the data changed). The loss pick's per-sample accuracy needs
the per-client choices, which older results do not keep, so its column stays "–" for them.

    .venv/bin/python benchmarks/add_pooled.py benchmarks/results/federated/femnist_linear
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from add_loss_pick import _config
from most.bench import federated as fb
from most.federated import evaluation as ev


def add_pooled(results: dict) -> int:
    """Fills ``pooled`` in every finished run of ``results`` in place; returns how many were added."""
    config = _config(results["config"])
    added = 0
    for seed in config.seeds:
        data, _ = fb._data(config, seed)
        sizes = [len(c.y_test) for c in data.clients]
        for name, entry in results["methods"].items():
            for run in entry["runs"]:
                if run["seed"] != seed or "failed" in run:
                    continue
                if len(run["per_client"]) != len(sizes):
                    sys.exit(f"{name}, seed {seed}: {len(run['per_client'])} clients stored, the data has "
                             f"{len(sizes)}; the data changed, so re-run the benchmark instead.")
                value = ev.pooled_accuracy(run["per_client"], sizes)
                if "pooled" in run:
                    if not np.isclose(run["pooled"], value, rtol=0, atol=1e-12):
                        sys.exit(f"{name}, seed {seed}: stored per-sample accuracy {run['pooled']!r}, recomputed "
                                 f"{value!r}; the data changed, so re-run the benchmark instead.")
                    continue
                run["pooled"] = value
                added += 1
    fb._summarise(results)
    return added


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    path = args.folder / "results.json"
    if not path.is_file():
        sys.exit(f"error: no results file at {path}; pass a folder written by `most bench federated`.")
    results = json.loads(path.read_text())
    added = add_pooled(results)
    path.write_text(json.dumps(results, indent=1))
    (args.folder / "table.md").write_text(fb.table_markdown(results) + "\n")
    print(f"added the per-sample accuracy to {added} runs in {args.folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
