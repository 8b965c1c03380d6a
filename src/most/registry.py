"""One registry: the names the library builds things by, each mapped to its factory.

Experiment files (``most run``), the configuration tables (:mod:`most.config`), the bench
suites (``most bench``) and the Flower app look names up here and nowhere else, so a new
method, component, data set or variant is added in one place.

* :func:`components` -- marginals, assignments, weightings, combiners, update rules,
  extensions and warm-ups (a TOML table's ``type = "Curriculum"``);
* :func:`methods` -- the methods of one setting, ``"centralised"`` or ``"federated"``;
* :func:`problems`, :func:`datasets`, :func:`models` -- what experiment files name;
* :data:`VARIANTS` and :func:`variant` -- the ablations of MosT (paper Appendix E, Table 7),
  one table for both settings (see :mod:`most.variants`).

Examples:
    >>> from most import registry
    >>> sorted(registry.methods("federated"))[:3]
    ['CFL', 'FedAvg', 'FedEM']
    >>> registry.variant("paper", registry.methods("federated")["MosT"](n_models=3)).combiner
    MinNorm(max_iter=None, tol=None, coordinates=None)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

__all__ = ["CENTRALISED", "FEDERATED", "components", "methods", "problems", "datasets", "models", "VARIANTS",
           "variant"]

CENTRALISED = "centralised"
FEDERATED = "federated"


@functools.lru_cache(maxsize=None)
def _components() -> dict[str, type]:
    from . import baselines, methods as m, optim, seeding
    from .federated import methods as F

    classes = [
        m.Uniform, m.LoadBounds, m.ShareBounds, m.Curriculum, m.ObjectivesSelectModels, m.ModelsSelectObjectives,
        m.TransportAssignment, m.CappedTransportAssignment, m.RandomAssignment, m.EqualAssignment,
        baselines.BestModelAssignment,
        m.MajorityShare, m.Shares, m.GammaWeights, m.Support, m.RelativeWeights,
        m.MinNorm, m.WeightedSum, m.SmoothMax, F.BoxMinNorm,
        m.DirichletExtension, m.TchebycheffExtension,
        F.WarmUp, F.GroupedWarmUp, F.ClassGroups, F.Resplit, F.SplitByLosses, F.SplitByUpdates, F.CrossEntropy, F.PriorAdjusted,
        optim.SGD, optim.Adam,
        seeding.KMeansSeeding, seeding.Reseed,
        baselines.TCHSetCombiner, baselines.STCHSetCombiner, baselines.SumOfMinimumCombiner,
    ]
    return {c.__name__: c for c in classes}


def components() -> dict[str, type]:
    """The component classes by name (what a table's ``type`` may name)."""
    return dict(_components())


@functools.lru_cache(maxsize=None)
def _methods(setting: str) -> dict[str, type]:
    classes: tuple[type, ...]
    if setting == FEDERATED:
        from .federated import methods as F

        classes = (F.MosT, F.FedAvg, F.FedProx, F.MGDA, F.FedMGDAPlus, F.IFCA, F.Linearization, F.WeightedMGDA,
                   F.SetScalarization, F.CFL, F.Oracle, F.LocalOnly, F.FineTuning, F.FedEM)
    elif setting == CENTRALISED:
        from . import baselines, solver

        classes = (solver.MosT, solver.Linearization, solver.MGDA, solver.WeightedMGDA, baselines.EPO,
                   baselines.MOOSVGD, baselines.TCHSet, baselines.STCHSet, baselines.SumOfMinimum)
    else:
        raise ValueError(f"`setting` must be {CENTRALISED!r} or {FEDERATED!r}; got {setting!r}.")
    return {c.__name__: c for c in classes}


def methods(setting: str) -> dict[str, type]:
    """The method classes of ``setting`` (``"centralised"`` or ``"federated"``) by name."""
    return dict(_methods(setting))


def problems() -> dict[str, Callable]:
    """Centralised problems an experiment file may name."""
    from . import problems as P

    def _zdt(name):
        def make(n_var: int = 30):
            return P.zdt(name, n_var=n_var)

        make.__name__ = name
        return make

    return {"quadratic_clusters": P.quadratic_clusters, "mixed_regression": P.mixed_regression,
            **{name: _zdt(name) for name in ("zdt1", "zdt2", "zdt3")}}


def datasets() -> dict[str, Callable]:
    """Federated data sets an experiment file may name."""
    from . import federated as fl

    return {"fedprox_synthetic": fl.fedprox_synthetic, "femnist": fl.load_femnist,
            "fashion_mnist": fl.load_fashion_mnist}


def models() -> dict[str, Callable]:
    """Federated model architectures an experiment file may name."""
    from . import federated as fl

    return {"logistic_regression": fl.logistic_regression, "cnn": fl.cnn}


def _paper(base):
    """The algorithm as written: Gamma-weighted MGDA (GammaWeights, MinNorm) with the curriculum
    of Section 3.3; in federated learning also m random starts (no warm-up)."""
    from .federated.methods import MosT as FederatedMosT
    from .methods import Curriculum, GammaWeights, MinNorm
    from .solver import MosT

    changes = dict(weighting=GammaWeights(), marginals=Curriculum(), combiner=MinNorm())
    if isinstance(base, FederatedMosT):  # m random starts, no model moved between rounds
        changes.update(warmup=None, resplit=None)
    if isinstance(base, MosT):  # the problem's own starts, never moved
        changes.update(seeding=None, reseed=None)
    return changes


def _changes(**fixed) -> Callable:
    return lambda base: fixed


def _lazy(**fields: str) -> Callable:
    """Changes that set each field to a new component named in the registry, built when applied
    (no import at load time)."""
    return lambda base: {field: components()[name]() for field, name in fields.items()}


#: name -> (changes(base) -> dict of fields, what the variant changes). A variant applies to a
#: centralised :class:`most.MosT` and to a federated :class:`most.federated.methods.MosT` alike.
VARIANTS: dict[str, tuple[Callable, str]] = {
    "paper": (_paper, "the algorithm as written: Gamma-weighted MGDA (GammaWeights, MinNorm) and the curriculum "
                      "of Section 3.3 (federated: no warm-up)"),
    "min-norm": (_lazy(combiner="MinNorm"), "the min-norm (MGDA) direction of the served objectives: a Pareto-"
                                            "stationary point of each group instead of its optimum"),
    "balanced": (_lazy(marginals="Uniform"), "the balanced transport: every model serves n/m objectives"),
    "no-seeding": (_changes(seeding=None, reseed=None), "the problem's own starts, and no model moved between "
                                                      "rounds (centralised)"),
    "no-R": (_changes(diversity=0.0), "tau = 0 (no diversity regulariser)"),
    "no-curriculum": (_lazy(marginals="Uniform"), "uniform marginals throughout"),
    "curriculum": (_lazy(marginals="Curriculum"), "the alpha/beta curriculum of Section 3.3"),
    "O": (_lazy(marginals="ObjectivesSelectModels"), '"objectives select models": the beta constraint dropped'),
    "M": (_lazy(marginals="ModelsSelectObjectives"), '"models select objectives": the alpha constraint dropped'),
    "worst": (_lazy(combiner="SmoothMax"), "each model descends a smooth maximum of its objectives' losses: the "
                                            "few-for-many worst objective instead of the average (centralised)"),
    "L": (_lazy(weighting="GammaWeights", combiner="WeightedSum"),
          "Gamma-weighted mean of gradients (or updates): GammaWeights with WeightedSum (the paper's ablation of "
          "its min-norm direction; on the default, whose combiner is WeightedSum, the same as literal)"),
    "literal": (_lazy(weighting="GammaWeights"), "Gamma-weighting (GammaWeights) instead of the majority share, "
                                                    "every other component of the base unchanged (Gamma-weighted "
                                                    "min-norm on a min-norm base such as paper)"),
    "E": (_lazy(extension="DirichletExtension"), "MosT-E: 20 Dirichlet(1) mixtures of the objectives added "
                                                    "(centralised only)"),
}


def variant(name: str, base, *more: str):
    """The variant ``name`` of ``base`` (a centralised or federated MosT), then each of ``more``
    on the result (``variant("paper", base, "no-R")``)."""
    from .federated.methods import MosT as FederatedMosT
    from .solver import MosT

    if not isinstance(name, str) or name not in VARIANTS:
        raise ValueError(f"Unknown variant {name!r}; choose one of {sorted(VARIANTS)}.")
    if not isinstance(base, (MosT, FederatedMosT)):
        raise TypeError(
            f"variants apply to a MosT configuration, e.g. `apply({name!r}, most.MosT(n_models=5))`; got "
            f"{type(base).__name__}. Linearization, MGDA and WeightedMGDA are separate methods with no variants."
        )
    changes = VARIANTS[name][0](base)
    unknown = [k for k in changes if k not in {f.name for f in dataclasses.fields(base)}]
    if unknown:
        raise ValueError(f"The variant {name!r} changes {', '.join(unknown)}, which a {type(base).__module__}."
                         f"{type(base).__name__} does not have.")
    out = dataclasses.replace(base, **changes)
    return variant(more[0], out, *more[1:]) if more else out
