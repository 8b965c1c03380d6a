"""Probes one change to MosT on the image sets: a capacity instead of a balance.

MosT's uniform beta makes every model serve exactly n/m clients; IFCA sends every client to its
best model, however many that gives a model. On FEMNIST and Fashion-MNIST the two are level
(``federated.md``), and each MosT model there trains on a fifth of the data. A capacity c >= 1
lies between them: each model serves at most c n / m clients. c = 1 is MosT's balance, c = m
drops the constraint (each client goes to its lowest-loss model, IFCA's assignment).

The transport with column capacities is solved exactly by adding one zero-cost dummy objective
of mass c - 1 (before normalisation) that takes up the unused capacity, and solving the balanced
problem with :func:`most.transport.solve`. The capacity is chosen with the server step on
validation, like every other setting of the federated tables; MosT runs alongside over the same
steps for the paired interval.

    .venv/bin/python benchmarks/capacity.py --dataset femnist --data-path ../shared/data/femnist_leaf_sf005 \\
        --server-lr 10 --server-lr 20 --server-lr 30 --seed 0 --seed 1 --out /tmp/cap/femnist \\
        --against benchmarks/results/federated/femnist_linear
    # seeds run in parts: join them, then rewrite the report of the joined folder
    .venv/bin/python benchmarks/merge_federated.py /tmp/cap/femnist /tmp/cap/femnist_s234
    .venv/bin/python benchmarks/capacity.py --report /tmp/cap/femnist --against benchmarks/results/federated/femnist_linear

``federated.md`` ("A capacity instead of a balance") has the commands and results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from compare_federated import paired_rows

from most import transport
from most.bench import federated as fb
from most.federated import evaluation as ev
from most.federated import methods as F
from most.methods import Uniform

CAPACITIES = (1.0, 1.5, 2.0, 5.0)
NAME = "MosT (capacity)"


def capacity_plan(losses: torch.Tensor, capacity: float) -> torch.Tensor:
    """The plan of least cost with rows summing to 1/n and columns to at most ``capacity``/m.

    ``capacity`` = 1 is the balanced plan (MosT's, solved the same way); ``capacity`` >= m puts
    every row on its lowest-cost column."""
    _check_capacity(capacity)
    n, m = losses.shape
    alpha, beta = Uniform()(losses, 0, 1)  # MosT's marginals
    if capacity == 1.0:
        return transport.solve(losses, alpha, beta, method="exact").plan
    cost = torch.cat([losses, losses.new_zeros(1, m)])  # the dummy objective takes the spare capacity
    a = torch.cat([losses.new_full((n,), 1.0 / (n * capacity)), losses.new_tensor([1.0 - 1.0 / capacity])])
    return transport.solve(cost, a, beta, method="exact").plan[:n] * capacity


def _check_capacity(capacity: float) -> None:
    if not capacity >= 1.0:
        raise ValueError(f"capacity must be >= 1 (1 is MosT's balance, m drops the constraint); got {capacity!r}.")


@dataclass
class CapacityMosT(F.MosT):
    """Federated MosT whose plan gives each model at most ``capacity`` n / m clients."""

    capacity: float = 1.0

    def plan(self, losses, round, total, previous, *, counts, clients=None):
        if round < self.warmup_rounds:
            return super().plan(losses, round, total, previous, counts=counts, clients=clients)
        gamma = capacity_plan(losses.double(), self.capacity)
        return gamma, self.weighting(gamma).double()


def per_capacity(results: dict) -> list[str]:
    """Lines of a table: per capacity, each seed's best validation accuracy over the server steps."""
    runs = results["methods"][NAME]["runs"]
    caps = sorted({c[1] for r in runs for c in r["candidates_val"]})
    lines = ["| capacity | " + " | ".join(f"seed {r['seed']}" for r in runs) + " | mean |",
             "|---" * (len(runs) + 2) + "|"]
    for cap in caps:
        best = [max(c[2] for c in r["candidates_val"] if c[1] == cap) for r in runs]
        lines.append(f"| {cap:g} | " + " | ".join(f"{100 * v:.2f}" for v in best) + f" | {100 * np.mean(best):.2f} |")
    chosen = ", ".join(f"{r['extra']:g}" for r in runs)
    return lines + ["", f"Capacity chosen on validation, by seed: {chosen}."]


def against(results: dict, main: dict) -> list[str]:
    """Lines of a table: MosT (capacity) minus each method of a main federated table (same data
    and seeds), seed by seed, under both picks. MosT must be the same in both folders: its runs
    are compared bit for bit first, so that a table from other code or data is refused."""
    cap = {r["seed"]: r for r in results["methods"][NAME]["runs"]}
    mine = {r["seed"]: r for r in results["methods"]["MosT"]["runs"]}
    theirs = {r["seed"]: r for r in main["methods"]["MosT"]["runs"]}
    if any(s not in theirs or theirs[s]["mean"] != mine[s]["mean"] for s in cap):
        raise SystemExit("the main table's MosT runs differ from this probe's (other code, data or seeds): "
                         "its methods cannot be compared seed by seed")
    return paired_rows(NAME, cap, main["methods"], list(cap))


def _write_report(results: dict, out: Path, main: Path | None = None) -> str:
    lines = [f"Best validation accuracy (%) of {NAME} per capacity", ""] + per_capacity(results)
    if main is not None:
        lines += ["", f"Against `{main}` (same seeds):", ""] + against(results, json.loads((main / "results.json").read_text()))
    text = "\n".join(lines) + "\n"
    (out / "capacity.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=Path, default=None, help="only rewrite capacity.md from DIR/results.json")
    p.add_argument("--against", type=Path, default=None,
                   help="a main federated results folder (same data and seeds) to compare with, seed by seed")
    p.add_argument("--dataset", choices=("femnist", "fashion", "synthetic"))
    p.add_argument("--data-path", type=Path, default=None)
    p.add_argument("--rho", type=float, nargs=2, default=(0.0, 0.0), help="synthetic(rho1, rho2)")
    p.add_argument("--seed", type=int, action="append")
    p.add_argument("--server-lr", type=float, action="append")
    p.add_argument("--capacity", type=float, action="append", default=None,
                   help=f"capacities searched on validation (default {', '.join(map(str, CAPACITIES))})")
    p.add_argument("--model", default="linear", help="as `most bench federated --model` (auto for synthetic)")
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.against is not None and not (args.against / "results.json").is_file():
        p.error(f"--against {args.against}: no results.json there (a folder written by `most bench federated`)")
    if args.report is not None:
        results_file = args.report / "results.json"
        stored = json.loads(results_file.read_text()) if results_file.is_file() else {"methods": {}}
        if NAME not in stored["methods"]:
            p.error(f"--report {args.report}: no results.json with {NAME!r} there (a folder this script wrote)")
        print(_write_report(stored, args.report, args.against))
        return 0
    if not (args.dataset and args.seed and args.server_lr and args.out):
        p.error("--dataset, --seed, --server-lr and --out are required (or --report DIR)")
    caps = tuple(args.capacity or CAPACITIES)
    try:  # a bad capacity fails here, before any training
        for c in caps:
            _check_capacity(c)
    except ValueError as exc:
        p.error(f"--capacity: {exc}")
    fb.METHODS[NAME] = (lambda m, eta, c: CapacityMosT(m, server_lr=eta, capacity=c), caps)
    protocol = dataclasses.replace(fb.FederatedBenchConfig().protocol, rounds=args.rounds, batch_size=args.batch_size)
    config = fb.FederatedBenchConfig(dataset=args.dataset, data_path=args.data_path, model=args.model, rho=tuple(args.rho),
                                     seeds=tuple(args.seed), methods=("MosT", NAME), server_lrs=tuple(args.server_lr),
                                     protocol=protocol, out=args.out, progress=sys.stderr.isatty())
    results = fb.run_benchmark(config)
    print((args.out / "table.md").read_text())
    print(_write_report(results, args.out, args.against))
    print(f"Wrote {args.out}/results.json, table.md, capacity.md and figures.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
