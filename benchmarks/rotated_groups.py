"""How well each method's final plan recovers the rotated Fashion-MNIST groups.

``most bench federated --dataset fashion --rotations r`` turns client k's images by
90 * (k mod r) degrees, so the clients fall into r known groups. For each transport or
clustering method of a results folder (those whose runs store plans: MosT, IFCA, ...), this
script reads each run's last plan (every client's largest-share model) and reports the share of
clients whose model is their group's, under the best one-to-one matching of models to groups,
and how many clients each model serves. Writes ``groups.md`` into the folder::

    .venv/bin/python benchmarks/rotated_groups.py benchmarks/results/federated/rotated/fashion_4
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np


def recovered(owner, r: int) -> float:
    """The largest share of clients k with ``owner[k] == match[k mod r]`` over one-to-one maps
    ``match`` from the r groups to models (all clients, the positions of the benchmark's data)."""
    owner = np.asarray(owner)
    if owner.ndim != 1 or not len(owner):
        raise ValueError(f"`owner` must be a non-empty list of model indices; got shape {owner.shape}.")
    m = int(owner.max()) + 1
    group = np.arange(len(owner)) % r
    counts = np.zeros((r, max(m, r)), dtype=int)
    np.add.at(counts, (group, owner), 1)
    best = max(sum(counts[g, j] for g, j in enumerate(match)) for match in itertools.permutations(range(counts.shape[1]), r))
    return best / len(owner)


def report(results: dict) -> str:
    r = int(results["config"].get("rotations", 1))
    if r < 2:
        raise ValueError("these results were run without rotated groups (--rotations 2 to 4).")
    if results["config"].get("dataset") != "fashion":
        raise ValueError("rotated groups exist only in Fashion-MNIST results.")
    m = int(results["config"]["n_models"])
    lines = [f"# Groups recovered ({results.get('label', '')})", "",
             f"Share of the clients whose final model is their rotation group's (best matching of the {m} models to "
             f"the {r} groups), and the clients per model, by seed, at the server step chosen on validation.", "",
             "| method | seed | server step | groups recovered | clients per model |", "|---|---|---|---|---|"]
    for name, entry in results["methods"].items():
        runs = [run for run in entry["runs"] if run.get("plans")]
        if not runs:
            continue
        shares = []
        for run in runs:
            owner = run["plans"][-1]
            if len(owner) != 100:  # the benchmark's 100 clients; a dropped empty one shifts the groups
                raise ValueError(f"{name}, seed {run['seed']}: {len(owner)} clients, not 100; a client left out "
                                 "for having no data shifts the positions that define the groups.")
            shares.append(recovered(owner, r))
            per = np.bincount(owner, minlength=m).tolist()
            lines.append(f"| {name} | {run['seed']} | {run['server_lr']:g} | {shares[-1]:.2f} | {per} |")
        lines.append(f"| {name} | mean | | {np.mean(shares):.2f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a `most bench federated --rotations r` results folder")
    args = p.parse_args(argv)
    if not (args.folder / "results.json").is_file():
        p.error(f"{args.folder}: no results.json there (a folder written by `most bench federated`)")
    try:
        text = report(json.loads((args.folder / "results.json").read_text()))
    except ValueError as exc:
        p.error(f"{args.folder}: {exc}")
    (args.folder / "groups.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
