"""MosT-E's extensions (Section 3.2): a problem of n objectives turned into one of n' > n.

The added objectives are mixtures of the originals: linear (:class:`DirichletExtension`, the
paper's) or Tchebycheff (:class:`TchebycheffExtension`), which also reaches the middle of a
concave front.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .._random import dirichlet
from .._validation import as_number, check_bool, check_non_negative, check_positive, check_positive_int
from ..problem import Problem


@dataclass(frozen=True)
class DirichletExtension:
    r"""MosT-E (Section 3.2): add ``n_extra`` objectives ``sum_l w_il L_l``, ``w_i ~ Dir(c)``.

    The extended problem has the n originals first (if ``include_original``), then the
    mixtures, so that n' = n + n_extra >> m and the transport can spread m models over
    the trade-offs of few objectives.
    """

    n_extra: int = 20
    concentration: float = 1.0
    include_original: bool = True

    def __post_init__(self):
        check_positive_int(self.n_extra, name="n_extra")
        check_positive(self.concentration, name="concentration")
        object.__setattr__(self, "include_original", check_bool(self.include_original, name="include_original"))

    def mixture_weights(self, n: int, generator: torch.Generator) -> Tensor:
        w = dirichlet(generator, self.concentration, n, self.n_extra)
        if self.include_original:
            w = torch.cat([torch.eye(n, dtype=w.dtype), w])
        return w

    def apply(self, problem: Problem, generator: torch.Generator) -> Problem:
        w = self.mixture_weights(problem.n_objectives, generator)
        base_names = problem.names or tuple(f"L{i}" for i in range(problem.n_objectives))
        names = (list(base_names) if self.include_original else []) + [
            f"mix{k}" for k in range(self.n_extra)
        ]
        return problem.with_objectives(w, names=names, extension_weights=w, base_problem=problem)


@dataclass(frozen=True)
class TchebycheffExtension:
    r"""MosT-E with Tchebycheff mixtures: ``max_k w_ik (L_k - z*_k)``, ``w_i ~ Dir(c)``.

    A linear mixture ``w . L`` is minimised only at the ends of a concave front, so the
    paper's :class:`DirichletExtension` cannot spread models along one (ZDT2). The
    Tchebycheff scalarisation reaches every Pareto-optimal point: its minimiser lies where
    the ray ``z* + t / w`` meets the front. With ``smoothing = mu`` the max is replaced by
    ``mu * log sum_k exp(w_ik (L_k - z*_k) / mu)`` (smooth Tchebycheff), which has
    informative gradients in every objective.

    Args:
        n_extra: number of mixtures added.
        concentration: Dirichlet concentration c of the preference weights.
        smoothing: ``None`` for the plain max, or mu > 0 for the smooth version.
        ideal: the ideal point z* (one value per original objective); ``None`` takes the
            problem's ``metadata["ideal"]`` when it has one (the ZDT problems do), else 0, right
            for non-negative losses.
        include_original: keep the n original objectives first.
        spread: ``"dirichlet"`` draws the weights; ``"grid"`` (two objectives only) places
            the rays ``z* + t (1 / w)`` at evenly spaced angles from 0 to 90 degrees, both
            ends included: the end rays minimise one objective each (with ``augment > 0``,
            the two ends of the front), which a hypervolume with a distant reference point
            rewards most.
        augment: rho >= 0 adds ``rho * sum_k (L_k - z*_k)`` (augmented Tchebycheff, Steuer &
            Choo 1983). The plain max is only weakly Pareto: where one term is active the
            others get no gradient, and a model can stop with the inactive objectives far
            from optimal. A small rho makes every minimiser Pareto optimal, including those
            of the end rays, whose weight on the other objective is zero.
    """

    n_extra: int = 20
    concentration: float = 1.0
    smoothing: float | None = None
    ideal: tuple[float, ...] | None = None
    include_original: bool = True
    spread: Literal["dirichlet", "grid"] = "dirichlet"
    augment: float = 0.0

    def __post_init__(self):
        check_positive_int(self.n_extra, name="n_extra")
        check_positive(self.concentration, name="concentration")
        if self.smoothing is not None:
            check_positive(self.smoothing, name="smoothing")
        check_non_negative(self.augment, name="augment")
        if self.spread not in ("dirichlet", "grid"):
            raise ValueError(f"`spread` must be 'dirichlet' or 'grid'; got {self.spread!r}.")
        object.__setattr__(self, "include_original", check_bool(self.include_original, name="include_original"))
        if self.ideal is not None:  # a tuple of finite numbers: compared and hashed as a setting, never NaN or inf
            object.__setattr__(self, "ideal", _ideal_point(self.ideal))

    def preference_weights(self, n: int, generator: torch.Generator) -> Tensor:
        if self.spread == "grid":
            if n != 2:
                raise ValueError("spread='grid' is defined for two objectives; use 'dirichlet' for more.")
            if self.n_extra < 2:
                raise ValueError("spread='grid' needs n_extra >= 2 (its rays include both ends).")
            angle = torch.arange(self.n_extra, dtype=torch.float64) * (math.pi / 2) / (self.n_extra - 1)
            # the ray z* + t (cos a, sin a) is where w1 (L1 - z1) = w2 (L2 - z2): w ∝ (sin a, cos a)
            w = torch.stack([angle.sin(), angle.cos()], 1)
            return (w / w.sum(1, keepdim=True)).to(torch.get_default_dtype())
        return dirichlet(generator, self.concentration, n, self.n_extra)

    def apply(self, problem: Problem, generator: torch.Generator) -> Problem:
        n = problem.n_objectives
        w = self.preference_weights(n, generator)
        ideal = self.ideal if self.ideal is not None else problem.metadata.get("ideal")
        if ideal is not None and len(ideal) != n:
            where = "`ideal`" if self.ideal is not None else "The problem's metadata['ideal']"
            raise ValueError(f"{where} has {len(ideal)} values but the problem has {n} objectives.")
        z = torch.zeros(n) if ideal is None else torch.as_tensor(ideal, dtype=torch.get_default_dtype())
        mu, keep, rho = self.smoothing, self.include_original, self.augment

        def transform(losses: Tensor) -> Tensor:
            scaled = w.to(losses) * (losses - z.to(losses))  # [n_extra, n]
            mixed = scaled.max(1).values if mu is None else mu * torch.logsumexp(scaled / mu, dim=1)
            if rho:
                mixed = mixed + rho * (losses - z.to(losses)).sum()
            return torch.cat([losses, mixed]) if keep else mixed

        base_names = problem.names or tuple(f"L{i}" for i in range(n))
        names = (list(base_names) if keep else []) + [f"tch{k}" for k in range(self.n_extra)]
        return problem.map_objectives(transform, (n if keep else 0) + self.n_extra, names=names,
                                      extension_weights=w, base_problem=problem)


def _ideal_point(ideal) -> tuple[float, ...]:
    """``ideal`` (a sequence, array or tensor of one number per objective) as a tuple of finite floats."""
    usage = ("`ideal` must give one finite number per objective (a list, array or tensor, e.g. (0.0, 0.0)), or be "
             "None (the problem's metadata['ideal'], else 0)")
    if isinstance(ideal, (str, bytes)):
        raise ValueError(f"{usage}; got {ideal!r}.")
    try:
        values = [float(as_number(v, name="ideal")) for v in (ideal.tolist() if hasattr(ideal, "tolist") else ideal)]
    except TypeError:  # a single number, or an iterable of non-numbers
        raise ValueError(f"{usage}; got {ideal!r}.") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"{usage}; got {ideal!r}.")
    return tuple(values)
