"""Combiners: ``(jacobian [m, n, d], W [m, n]) -> (direction [m, d], lambda [m, n])``.

The min-norm (MGDA) direction of the weighted gradients (Eqs. 7-9), their weighted mean, or the
gradient of a smooth maximum of the served losses.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Literal

import torch
from torch import Tensor

from .._validation import check_positive, check_positive_int
from ..mgda import combine_min_norm


class Combiner(ABC):
    """``(jacobian [m, n, d], W [m, n]) -> (direction [m, d], lambda [m, n])``.

    The update is ``theta_j <- theta_j - lr * direction_j``. The loop also passes, as
    keywords, ``losses`` (``[m, n]``, model-major: ``losses[j, i] = L_i(theta_j)``) and
    ``params`` (``[m, d]``), for combiners that need them (EPO, SVGD); others ignore them.

    A combiner with ``active_only = True`` reads only the rows of objectives with a positive
    weight; the loop then passes just those rows, packed: ``jacobian [m, k, d]`` and
    ``weights [m, k]`` (padding rows have weight 0), so a model never holds the gradients
    of objectives it does not serve (memory ``O(m k d)``, ``k`` = most objectives of any
    model, instead of ``O(m n d)``). The one exception is the loop's: where forward mode
    computes every objective's derivatives anyway (``d < n / m``), the round's first Jacobian
    (at most 2^24 values) comes with the loss matrix and the rows are cut from it.

    A combiner with ``linear = True`` has a direction linear in the gradients,
    ``direction_j = sum_i c[j, i] grad L_i(theta_j)``, with coefficients
    ``c = linear_coefficients(weights, losses)`` (``[m, n]``; ``losses`` model-major, at the
    step's parameters). The loop then forms the direction by one reverse pass over the models
    (:meth:`most.Problem.weighted_gradients`) and never builds a Jacobian.

    A combiner with ``centralised_only = True`` reads ``losses`` or ``params``, which the
    federated runtime (it combines the clients' updates) does not have; the federated MosT
    refuses it.
    """

    active_only: ClassVar[bool] = False
    linear: ClassVar[bool] = False
    centralised_only: ClassVar[bool] = False

    @abstractmethod
    def __call__(
        self, jacobian: Tensor, weights: Tensor, *, losses: Tensor | None = None, params: Tensor | None = None
    ) -> tuple[Tensor, Tensor]: ...

    @property
    def reads(self) -> Literal["linear", "served", "all"]:
        """What the centralised loop gives this combiner, from the flags above: ``"linear"``
        (coefficients; the direction by one reverse pass), ``"served"`` (the served objectives'
        rows, packed) or ``"all"`` (every objective's row). The loop chooses its gradient path by
        it, once per run (:mod:`most.engine.paths`)."""
        return "linear" if self.linear else "served" if self.active_only else "all"

    def linear_coefficients(self, weights: Tensor, losses: Tensor) -> Tensor:
        """The coefficients ``c [m, n]`` of a linear combiner (see the class docstring)."""
        raise NotImplementedError(f"{type(self).__name__} is not linear in the gradients.")

    def resolve(self, lookup: Callable[[str], "slice | tuple[int, int]"]) -> "Combiner":
        """This combiner with any parameter named in its settings replaced by its coordinates,
        from ``lookup(name)`` (a problem's or a federated model's ``coordinates``). The loops call
        it once before the first round; a combiner that names no parameter returns itself."""
        return self

    def check_dim(self, dim: int, *, model: str = "the model") -> None:
        """Refuses settings that address parameters past the ``dim`` of ``model`` (called before
        any work, after :meth:`resolve`; no refusal by default)."""


@dataclass(frozen=True)
class MinNorm(Combiner):
    """MGDA: the min-norm element of the hull of the rows ``W[j, i] * grad L_i(theta_j)``.

    Solved to convergence, all m models in one batched solve: by Frank-Wolfe
    (:func:`most.mgda.min_norm`), or exactly by non-negative least squares on the host for
    problems of more than 128 rows (see ``docs/solvers/min-norm.md``). Objectives with zero
    weight are left out, and so are objectives whose gradient is zero (they are stationary and
    cannot change to first order, so they must not stop the others -- e.g. an objective at its
    minimum on the boundary of a box).

    ``tol=None`` matches the tolerance to the precision of the gradients:
    :data:`~most.mgda.FLOAT32_TOL` for float32 Jacobians, :data:`most.mgda.DEFAULT_TOL` otherwise.

    ``coordinates=(start, stop)`` solves for the weights on the Gram matrix of those
    coordinates of the gradients only -- the paper's speed-up, "MGDA on a subset of model
    parameters like the final layer's bias" (Section 6) -- and combines the full gradients with
    them. ``coordinates`` may also name a parameter of the model (``"last"``, e.g. the final
    layer's bias, or a name such as ``"0.bias"``): the loop resolves it before the first round,
    against :meth:`most.Problem.coordinates` (a problem built with ``from_module``) or
    :meth:`most.federated.FlatModel.coordinates`. The direction is then a common descent
    direction for those coordinates, not necessarily for all; the Gram matrix costs
    ``O(n^2 (stop - start))`` instead of ``O(n^2 d)``.

    Eq. 9 itself is formed by :func:`most.mgda.min_norm_direction`, for every caller.
    """

    max_iter: int | None = None
    tol: float | None = None
    coordinates: tuple[int, int] | str | None = None
    active_only: ClassVar[bool] = True

    def __post_init__(self):
        if self.max_iter is not None:
            object.__setattr__(self, "max_iter", check_positive_int(self.max_iter, name="max_iter"))
        if self.tol is not None:
            object.__setattr__(self, "tol", check_positive(self.tol, name="tol"))
        c = self.coordinates
        if c is None or (isinstance(c, str) and c):
            return
        if isinstance(c, slice) and c.step in (None, 1) and c.stop is not None:  # FlatModel.coordinates(name)
            c = (0 if c.start is None else c.start, c.stop)
        try:  # two whole numbers: Python, NumPy or 0-d tensor ints, in a tuple, list, array or tensor
            pair = tuple(check_positive_int(v, name="coordinates", minimum=0) for v in c)
        except (TypeError, ValueError):
            pair = ()
        if len(pair) != 2 or not pair[0] < pair[1]:
            raise ValueError(f"`coordinates` must be (start, stop) with 0 <= start < stop, or the name of a "
                             f"parameter such as 'last'; got {self.coordinates!r}.")
        object.__setattr__(self, "coordinates", pair)

    def resolve(self, lookup) -> "MinNorm":
        """This combiner with a parameter name in ``coordinates`` replaced by its ``(start, stop)``,
        from ``lookup(name)`` (a problem's or a federated model's ``coordinates``)."""
        if not isinstance(self.coordinates, str):
            return self
        found = lookup(self.coordinates)
        found = (found.start, found.stop) if isinstance(found, slice) else tuple(found)
        return dataclasses.replace(self, coordinates=found)

    def check_dim(self, dim, *, model="the model"):
        c = self.coordinates
        if isinstance(c, tuple) and c[1] > dim:
            raise ValueError(f"`coordinates` {c} lie outside the {dim} parameters of {model}; take them from "
                             "model.coordinates(name), or name the parameter (e.g. 'last').")

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if isinstance(self.coordinates, str):
            raise RuntimeError(f"MinNorm(coordinates={self.coordinates!r}) names a parameter: resolve it first "
                               "(combiner.resolve(problem.coordinates)); MosT's loops do so before the first round.")
        return combine_min_norm(jacobian, weights, coordinates=self.coordinates, max_iter=self.max_iter,
                                tol=self.tol)


@dataclass(frozen=True)
class WeightedSum(Combiner):
    """The weighted mean of the gradients, ``sum_i W_ji grad L_i / sum_i W_ji``.

    With :class:`~most.methods.GammaWeights` this is MosT(L); with
    :class:`~most.methods.RandomAssignment` it is linear scalarisation.
    """

    active_only: ClassVar[bool] = True
    linear: ClassVar[bool] = True  # coefficients from the weights alone

    def coefficients(self, weights: Tensor) -> Tensor:
        """``lambda [m, n]``: each model's weights divided by their sum (0 for a model without any)."""
        total = weights.sum(1, keepdim=True)
        return torch.where(total > 0, weights / total.clamp_min(torch.finfo(weights.dtype).tiny),
                           torch.zeros_like(weights))

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        lam = self.coefficients(weights.to(jacobian))
        return torch.einsum("mn,mnd->md", lam, jacobian), lam

    def linear_coefficients(self, weights, losses):
        return self.coefficients(weights.to(losses.dtype))


@dataclass(frozen=True)
class SmoothMax(Combiner):
    r"""Each model descends a smooth maximum of the losses of the objectives it serves.

    For model :math:`j` with served objectives :math:`S_j = \{i : W_{ji} > 0\}` the direction is
    the gradient of :math:`\mu_j \log \sum_{i \in S_j} W_{ji} \exp(L_i(\theta_j) / \mu_j)`,

    .. math::

        \lambda_{ji} = \frac{W_{ji}\, e^{L_i(\theta_j) / \mu_j}}{\sum_{k \in S_j} W_{jk}\, e^{L_k(\theta_j) / \mu_j}},
        \qquad d_j = \sum_i \lambda_{ji} \nabla L_i(\theta_j),

    with the temperature :math:`\mu_j = s\,(\max_{S_j} L - \min_{S_j} L)`, ``s`` =
    ``smoothing``, held fixed within the step: the worst served objective gets weight 1 relative
    to the others, the best about :math:`e^{-1/s}`. As the temperature is a share of the
    losses' spread, the coefficients do not change when the losses are shifted or scaled. A
    model whose served losses are all equal takes their weighted mean.

    Where :class:`WeightedSum` (the default) brings each model to the optimum of its group's
    *average* loss, this brings it towards the point that minimises its group's *worst* loss:
    with the default assignment (each objective to its best model) it is the few-for-many
    goal :math:`\max_i \min_j L_i(\theta_j)` of TCH-Set and STCH-Set. ``most.variants.apply("worst",
    ...)`` sets it. Centralised loop only (the federated runtime combines client updates, not
    gradients at known losses).
    """

    smoothing: float = 0.1

    linear: ClassVar[bool] = True  # coefficients from the weights and the losses
    centralised_only: ClassVar[bool] = True

    def __post_init__(self):
        check_positive(self.smoothing, name="smoothing")

    def linear_coefficients(self, weights: Tensor, losses: Tensor) -> Tensor:
        losses = losses.detach().to(torch.float64)
        w = weights.detach().to(losses)
        served = w > 0
        high = torch.where(served, losses, torch.full_like(losses, -math.inf)).amax(1, keepdim=True)
        low = torch.where(served, losses, torch.full_like(losses, math.inf)).amin(1, keepdim=True)
        spread = torch.where(served.any(1, keepdim=True), high - low, torch.zeros_like(high))
        flat = spread <= 0
        temperature = torch.where(flat, torch.ones_like(spread), self.smoothing * spread)
        shifted = torch.where(served & ~flat, (losses - high) / temperature, torch.zeros_like(losses))
        scores = torch.where(served, w * torch.exp(shifted), torch.zeros_like(w))
        total = scores.sum(1, keepdim=True)
        return torch.where(total > 0, scores / total.clamp_min(torch.finfo(total.dtype).tiny),
                           torch.zeros_like(scores))

    def __call__(self, jacobian, weights, *, losses=None, params=None):
        if losses is None:
            raise ValueError("SmoothMax needs the losses [m, n] (the round loop passes them as `losses=`).")
        coeff = self.linear_coefficients(weights, losses).to(jacobian)
        return torch.einsum("mn,mnd->md", coeff, jacobian), coeff
