"""Benchmark suites behind ``most bench NAME`` (each reproduces a table of the paper).

* :mod:`most.bench.few_objective` -- ZDT1-3 and fairness-accuracy trade-offs (n = 2 < m = 5):
  MosT-E against EPO, MOO-SVGD, MGDA and linearization, hypervolume of the final iterate.
* :mod:`most.bench.structure` -- planted groups (quadratics, regressions): MosT and SoM against the oracle.
* :mod:`most.bench.federated` -- federated learning (Table 2): MosT against the FL baselines.
* :mod:`most.bench.mtl` -- multi-task learning on Office-Caltech10 (Table 3).

Every suite takes a typed config dataclass (a :class:`SuiteConfig`), records each finished run
in the results store of ``most run`` (``OUT/runs/``, :mod:`most.bench._runs`), writes
``results.json``, ``table.md`` and its figures to the output folder, and returns the results as a
dict.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Mapping, TypedDict

import numpy as np

from ..checkpoint import atomic_write_text
from ..methods import Combiner, Marginals, MinNorm, Uniform

if TYPE_CHECKING:
    from ..seeding import KMeansSeeding, Reseed

#: the folder of a suite's run folders, in its output folder (:mod:`most.bench._runs`)
RUNS_DIR = "runs"


def check_choices(methods, known, seeds) -> None:
    """The checks every suite's config makes: known method names, at least one seed, none of
    either given twice."""
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; choose from {list(known)}.")
    if not seeds:
        raise ValueError("Give at least one seed.")
    check_unique(methods, "method")
    check_unique(seeds, "seed")


def check_unique(values, what: str) -> None:
    """Refuses a choice given more than once (``what`` names it: ``"method"``, ``"seed"``, ...):
    its runs would be made twice and counted twice in the table (a zero spread, an interval
    that looks significant), or fail when the table is made."""
    values = list(values)
    repeated = list(dict.fromkeys(v for i, v in enumerate(values) if v in values[:i]))
    if repeated:
        raise ValueError(f"Repeated {what}(s) {repeated}; give each {what} once.")


@dataclass(frozen=True)
class SuiteConfig:
    """What the settings of every suite share; a suite's config adds its own fields after these.

    Args:
        methods: names from the suite's methods; empty: its default methods (all, for most suites).
        seeds: one run per seed.
    """

    methods: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)

    #: the suite's methods by name, and the names an empty ``methods`` stands for (default: all)
    _known: ClassVar[Mapping] = {}
    _default_methods: ClassVar[tuple[str, ...] | None] = None
    #: fields a call may change and still reuse the finished runs of an earlier call (it adds runs)
    resume_free: ClassVar[tuple[str, ...]] = ("methods", "seeds", "out", "progress")

    def __post_init__(self):
        if not self.methods:
            object.__setattr__(self, "methods", tuple(self._default_methods or self._known))
        check_choices(self.methods, self._known, self.seeds)

    def plain(self) -> dict:
        """The fields as plain values (paths as strings), as ``results.json`` records them."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}

    def settings(self, **extra) -> dict:
        """What the runs depend on (the fields but those a resumed call may change), with ``extra``."""
        return {**{k: v for k, v in self.plain().items() if k not in self.resume_free}, **extra}


class StoredMosT(TypedDict):
    """The keyword arguments of :class:`most.MosT` that a suite's stored rows fix (``STORED_MOST``)."""

    marginals: Marginals
    combiner: Combiner
    seeding: KMeansSeeding | None
    reseed: Reseed | None


#: The MosT configuration of the suites' first stored tables (few-objective, mtl, prompts): the
#: balanced transport with the min-norm combiner from the problem's own starts, the library
#: default before the structure-finding one (their rows have not been re-run with it); as the
#: settings of a method table (:class:`most.bench.rows.MethodRow`) and as ``most.MosT``'s arguments.
STORED_MOST_SETTINGS: Mapping[str, object] = {"marginals": {"type": "Uniform"}, "combiner": {"type": "MinNorm"},
                                              "seeding": "none", "reseed": "none"}
STORED_MOST = StoredMosT(marginals=Uniform(), combiner=MinNorm(), seeding=None, reseed=None)


def mean_std(values, scale: float = 1.0) -> str:
    """``"mean ± std"`` (sample std, 0 for one value) of ``values * scale``, two decimals."""
    a = scale * np.asarray(values, dtype=float)
    return f"{a.mean():.2f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.2f}"


def write_results(results: dict, out, figures, table, *, json_default=None, split=None) -> dict:
    """Writes a suite's output folder: ``figures(results, out)`` (their paths go into
    ``results["figures"]``), ``results.json`` (``json_default`` converts values json cannot)
    and ``table.md`` (``table(results)``). ``split(results) -> (compact, curves)`` (federated:
    :func:`most.bench._curves.split_curves`) writes ``compact`` as ``results.json`` and ``curves``
    as ``curves.json``; the figures are drawn from the whole results first. A figure that fails
    to draw still leaves the results and the table written (``"figures": []``) before its error
    is raised: the runs are never lost to a plot."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        results["figures"] = figures(results, out)
    except Exception:
        results["figures"] = []
        _write_files(results, out, table, json_default, split)
        raise
    _write_files(results, out, table, json_default, split)
    return results


def _write_files(results: dict, out: Path, table, json_default, split) -> None:
    stored, curves = (results, None) if split is None else split(results)
    # whole files or none: a stopped call never leaves half a results.json
    if curves is not None:
        atomic_write_text(out / "curves.json", json.dumps(curves, default=json_default))
    atomic_write_text(out / "results.json", json.dumps(stored, indent=1, default=json_default))
    atomic_write_text(out / "table.md", table(results) + "\n")
