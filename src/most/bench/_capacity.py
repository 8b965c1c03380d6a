"""The capacity probe of the federated tables (``benchmarks/federated_tools.py capacity``).

MosT's uniform beta makes every model serve exactly n/m clients; IFCA sends every client to its
best model, however many that gives a model. A capacity c >= 1 lies between them: each model
serves at most c n / m clients (:func:`most.transport.solve_capacity`). c = 1 is MosT's balance,
c = m drops the constraint (each client goes to its lowest-loss model, IFCA's assignment).

* :class:`CapacityAssignment`: that plan as an assignment of federated (or centralised) MosT;
* :func:`register`: ``"MosT (capacity)"`` in the federated benchmark's methods, the capacity
  chosen on validation with the server step;
* :func:`per_capacity`, :func:`against`, :func:`write_report`: ``capacity.md`` of a results
  folder, optionally compared seed by seed with a main table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import transport
from ..federated import methods as F
from ..methods import Assignment, Marginals, Uniform
from . import federated as fb
from ._compare import paired_rows
from .rows import BuiltRow

__all__ = ["CAPACITIES", "NAME", "CapacityAssignment", "against", "check_capacity", "per_capacity", "register",
           "write_report"]

#: the capacities searched on validation by default
CAPACITIES = (1.0, 1.5, 2.0, 5.0)
#: the probe's name among the benchmark's methods
NAME = "MosT (capacity)"
#: the method the capacity replaces the balance of: the balanced MosT without the re-split (the
#: federated default when the probe was made), run beside it and compared seed by seed
BASE = "MosT (balanced)"


def check_capacity(capacity: float) -> float:
    """``capacity`` as a float, or ``ValueError`` when it is not a finite number >= 1."""
    try:
        c = float(capacity)
    except (TypeError, ValueError):
        c = float("nan")
    if isinstance(capacity, bool) or not (np.isfinite(c) and c >= 1.0):
        raise ValueError(f"capacity must be >= 1 (1 is MosT's balance, m drops the constraint); got {capacity!r}.")
    return c


@dataclass(frozen=True)
class CapacityAssignment(Assignment):
    """Gamma of least cost with rows alpha and columns at most ``capacity`` * beta
    (:func:`most.transport.solve_capacity`, exact), the marginals from ``marginals`` (uniform by
    default: each model serves at most ``capacity`` n / m objectives). ``capacity = 1`` is MosT's
    balanced plan, bit for bit; ``capacity >= m`` puts every objective on its lowest-loss model."""

    capacity: float = 1.0
    marginals: Marginals = field(default_factory=Uniform)

    def __post_init__(self):
        object.__setattr__(self, "capacity", check_capacity(self.capacity))
        if not isinstance(self.marginals, Marginals):
            raise TypeError(f"`marginals` must be a most.methods.Marginals (e.g. Uniform()); got {self.marginals!r}.")

    def __call__(self, losses, round, total, previous=None):
        a, b = self.marginals(losses, round, total)
        if a is None or b is None:
            raise ValueError("CapacityAssignment needs both marginals (alpha and beta); got a semi-relaxed schedule.")
        return transport.solve_capacity(losses, a, b, capacity=self.capacity).plan


def register(capacities=CAPACITIES) -> tuple[float, ...]:
    """Adds :data:`NAME` to :data:`most.bench.federated.METHODS`: federated MosT with a
    :class:`CapacityAssignment`, the capacity one more setting chosen on validation over
    ``capacities`` (each checked first). Methods added at run time run in one process only."""
    caps = tuple(check_capacity(c) for c in capacities)
    fb.METHODS[NAME] = BuiltRow(lambda n_models, server_lr, extra: F.MosT(
        n_models, server_lr=server_lr, assignment=CapacityAssignment(extra), resplit=None), caps)
    return caps


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
    and seeds), seed by seed, under both picks. :data:`BASE` must be the same in both folders: its runs
    are compared bit for bit first, so that a table from other code or data is refused
    (``ValueError``)."""
    cap = {r["seed"]: r for r in results["methods"][NAME]["runs"]}
    mine = {r["seed"]: r for r in results["methods"][BASE]["runs"]}
    if BASE not in main["methods"]:
        raise ValueError(f"the main table has no {BASE!r} row to compare this probe's with seed by seed")
    theirs = {r["seed"]: r for r in main["methods"][BASE]["runs"]}
    if any(s not in theirs or theirs[s]["mean"] != mine[s]["mean"] for s in cap):
        raise ValueError(f"the main table's {BASE} runs differ from this probe's (other code, data or seeds): "
                         "its methods cannot be compared seed by seed")
    return paired_rows(NAME, cap, main["methods"], list(cap))


def write_report(results: dict, out: Path, main: Path | None = None) -> str:
    """Writes ``out/capacity.md`` (:func:`per_capacity`, then :func:`against` the results folder
    ``main`` when given) and returns its text."""
    lines = [f"Best validation accuracy (%) of {NAME} per capacity", ""] + per_capacity(results)
    if main is not None:
        lines += ["", f"Against `{main}` (same seeds):", ""] + against(results, json.loads((Path(main) / "results.json").read_text()))
    text = "\n".join(lines) + "\n"
    (Path(out) / "capacity.md").write_text(text)
    return text
