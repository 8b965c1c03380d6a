"""Adds the loss-pick columns to a federated results folder written before they existed.

``most bench federated`` now also scores each client's lowest-loss model on its training and
validation data (``FederatedResult.loss_choice``). For results written earlier, this script
re-runs only the *reported* run of every method and seed (the candidate chosen on validation:
same seed, server step and extra setting), checks that it reproduces the stored test accuracy
bit for bit (else it stops: the code or the data changed), and adds the ``*_loss_pick`` keys,
the paired intervals and the table. Methods are re-run one at a time, all seeds each, in the
order of ``--method`` (default: the results file's); progress is saved after every run, and a
second call skips what is done. Methods left out get "–" in the loss-pick columns.

    .venv/bin/python benchmarks/add_loss_pick.py benchmarks/results/federated/femnist_linear \
        --method MosT --method IFCA
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from most.bench import federated as fb
from most.federated.runtime import FederatedConfig


def _config(stored: dict) -> fb.FederatedBenchConfig:
    keys = {f.name for f in dataclasses.fields(fb.FederatedBenchConfig)}
    c = {k: v for k, v in stored.items() if k in keys}
    c["protocol"] = FederatedConfig(**c["protocol"])
    for k in ("rho", "methods", "seeds", "server_lrs", "cnn_channels"):
        if k in c:
            c[k] = tuple(c[k])
    c["data_path"] = None if c.get("data_path") is None else Path(c["data_path"])
    c["out"] = Path(c["out"])
    c["progress"] = False
    return fb.FederatedBenchConfig(**c)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--method", action="append", help="methods to re-run, in this order (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    path = args.folder / "results.json"
    results = json.loads(path.read_text())
    config = _config(results["config"])
    unknown = set(args.method or ()) - set(results["methods"])
    if unknown:
        sys.exit(f"{', '.join(sorted(unknown))}: not in {path} (it has {', '.join(results['methods'])}).")
    data_of = {}
    for name in args.method or list(results["methods"]):
        entry = results["methods"][name]
        for seed in config.seeds:
            if seed not in data_of:
                data_of[seed] = fb._data(config, seed)
            data, model = data_of[seed]
            i, run = next((i, r) for i, r in enumerate(entry["runs"]) if r["seed"] == seed)
            if "mean_loss_pick" in run:
                continue
            tic = time.perf_counter()
            new = fb._run_one(config, data, model, name, seed, run["server_lr"], run["extra"])
            if new["mean"] != run["mean"] or new["per_client"] != run["per_client"]:
                sys.exit(f"{name}, seed {seed}: the re-run gives test accuracy {new['mean']!r}, the stored run "
                         f"{run['mean']!r}; the code or the data changed, so re-run the whole benchmark instead.")
            for k in fb._LOSS_PICK_KEYS + ("choice_counts_loss_pick",):
                run[k] = new[k]
            entry["runs"][i] = run
            print(f"{name} seed {seed}: validation pick {100 * run['mean']:.2f} (reproduced), loss pick "
                  f"{100 * run['mean_loss_pick']:.2f} ({time.perf_counter() - tic:.0f} s)", file=sys.stderr, flush=True)
            path.write_text(json.dumps(results, indent=1))  # progress survives an interruption
    fb._summarise(results)
    path.write_text(json.dumps(results, indent=1))
    (args.folder / "table.md").write_text(fb.table_markdown(results) + "\n")


if __name__ == "__main__":
    main()
