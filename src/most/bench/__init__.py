"""Benchmark suites behind ``most bench NAME`` (each reproduces a table of the paper).

* :mod:`most.bench.few_objective` -- ZDT1-3 and fairness-accuracy trade-offs (n = 2 < m = 5):
  MosT-E against EPO, MOO-SVGD, MGDA and linearization, hypervolume of the final iterate.
* :mod:`most.bench.federated` -- federated learning (Table 2): MosT against the FL baselines.
* :mod:`most.bench.mtl` -- multi-task learning on Office-Caltech10 (Table 3).

Every suite takes a typed config dataclass, writes ``results.json`` and its figures to an
output folder, and returns the results as a dict.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..checkpoint import atomic_write_text


def check_choices(methods, known, seeds) -> None:
    """The checks every suite's config makes: known method names, at least one seed."""
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; choose from {list(known)}.")
    if not seeds:
        raise ValueError("Give at least one seed.")


def mean_std(values, scale: float = 1.0) -> str:
    """``"mean ± std"`` (sample std, 0 for one value) of ``values * scale``, two decimals."""
    a = scale * np.asarray(values, dtype=float)
    return f"{a.mean():.2f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.2f}"


def write_results(results: dict, out, figures, table, *, json_default=None) -> dict:
    """Writes a suite's output folder: ``figures(results, out)`` (their paths go into
    ``results["figures"]``), ``results.json`` (``json_default`` converts values json cannot)
    and ``table.md`` (``table(results)``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results["figures"] = figures(results, out)
    # whole files or none: a stopped call never leaves half a results.json
    atomic_write_text(out / "results.json", json.dumps(results, indent=1, default=json_default))
    atomic_write_text(out / "table.md", table(results) + "\n")
    return results
