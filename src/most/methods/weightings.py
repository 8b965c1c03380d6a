"""Weightings: ``plan Gamma [n, m] -> W [m, n]``, how much objective i counts in model j's step.

The default, :class:`MajorityShare`, and why it is not the paper's literal :class:`GammaWeights`:
the docstring of :mod:`most.methods`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor


class Weighting(ABC):
    """``plan Gamma [n, m] -> W [m, n]``: weight of objective i in model j's step (0 = left out)."""

    @abstractmethod
    def __call__(self, plan: Tensor) -> Tensor: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class MajorityShare(Weighting):
    """Objective i counts for the model holding its largest share Gamma_ij / alpha_i.

    The library default; see the module docstring for the reason. Returns
    ``W[j, i] = s_ij`` if j owns i, else 0.
    """

    def __call__(self, plan):
        # Kept to a few tensor operations: this runs once per round on the server, where the
        # federated benchmark's rounds take a few milliseconds (performance.md).
        n, m = plan.shape
        mass = plan.sum(1)
        top, owner = plan.max(1)  # the largest share: each row is scaled by its own mass > 0
        own_share = (top / mass).nan_to_num_(0.0)  # a row without mass (0 / 0) gives nothing
        weights = plan.new_zeros(m, n).scatter_(0, owner[None], own_share[None])
        top_weight = weights.amax(1)
        if not bool(top_weight.min() > 0):  # models that own nothing fall back to everything they hold
            owned, held = top_weight > 0, mass > 0  # a held row's owner has a positive share of it
            weights[~owned] = torch.where(held[None, :], Shares()(plan)[~owned], 0.0)
        return weights


@dataclass(frozen=True)
class Shares(Weighting):
    """Objective i counts for every model j by its share Gamma_ij / alpha_i: ``W[j, i] = s_ij``.

    :class:`MajorityShare` keeps each objective's largest share only; with a plan whose rows
    each sit on one model (the exact transport's, mostly) the two agree. Federated
    ``MosT(shares=k)`` caps every share at 1/k and weights each (client, model) pair by this.
    A row without mass gives nothing."""

    def __call__(self, plan):
        mass = plan.sum(1, keepdim=True)
        return (plan / mass.clamp_min(torch.finfo(plan.dtype).tiny)).T.contiguous()


@dataclass(frozen=True)
class GammaWeights(Weighting):
    """The paper as written: W[j, i] = n * Gamma_ij (Eq. 7's Gamma-scaled objectives).

    The factor n only rescales every direction by the same constant (so the learning rate
    keeps its meaning as n changes); the direction itself is the paper's.
    """

    def __call__(self, plan):
        return (plan.shape[0] * plan).T.contiguous()


@dataclass(frozen=True)
class Support(Weighting):
    """Every objective the plan gives mass to counts fully: ``W[j, i] = 1`` where ``Gamma_ij > 0``.

    With :class:`~most.methods.EqualAssignment` every model serves every objective with weight 1
    (federated FedAvg and MGDA); with a hard plan each objective counts for its model."""

    def __call__(self, plan):
        return (plan > 0).T.to(plan.dtype).contiguous()


@dataclass(frozen=True)
class RelativeWeights(Weighting):
    """The plan's proportions with the largest weight 1: ``W[j, i] = Gamma_ij / max Gamma``
    (federated w-MGDA: a fixed random plan reweighting the client updates)."""

    def __call__(self, plan):
        return (plan / plan.max().clamp_min(torch.finfo(plan.dtype).tiny)).T.contiguous()
