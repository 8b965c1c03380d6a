"""How a client scores each model for the plan: the losses ``L [n, m]`` the assignment reads.

* :class:`CrossEntropy` -- the mean cross-entropy of the model on the client's training samples
  (the default, and what every method but MosT's option reads).
* :class:`PriorAdjusted` -- the same after adding the log of the client's own class frequencies
  to the model's logits, so a model is judged by how well it tells the client's classes apart,
  not by how much of its output it gives to those classes.

A client with a few classes (label skew) loses least on a model trained on clients with the same
few classes, whatever else differs between them; where clients also differ in how their inputs
map to labels (rotated images, a group's own labelling), the plan then groups the clients by
their classes and not by that difference. Adding ``log p_i(y)`` (client i's class frequencies)
to the logits is the posterior a client with that prior would use (logit adjustment, Menon et
al. 2021), so the part of the fit that only moves probability onto the client's classes no
longer lowers its loss. A client whose classes are balanced gets the plain cross-entropy (a
constant added to every logit changes nothing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import Tensor

from ..._validation import check_positive
from ..clients import sample_cross_entropy


class ClientLoss(ABC):
    """Each model's loss on each client's samples, from the models' logits."""

    #: Whether this is the plain mean cross-entropy (the runtimes then take their shared path).
    plain: bool = False

    @abstractmethod
    def __call__(self, logits: Tensor, y: Tensor, w: Tensor) -> Tensor:
        """``[n, m]`` from ``logits [m, n, N, C]`` (model, client, sample, class), the labels
        ``y [n, N]`` and the sample weights ``w [n, N]`` (1 for a real sample, 0 on padding)."""


def _mean_ce(logits: Tensor, y: Tensor, w: Tensor) -> Tensor:
    return (sample_cross_entropy(logits, y, w).sum(-1) / w.sum(1).clamp_min(1e-12)).T


@dataclass(frozen=True)
class CrossEntropy(ClientLoss):
    """The mean cross-entropy of each model on each client's samples."""

    plain = True

    def __call__(self, logits: Tensor, y: Tensor, w: Tensor) -> Tensor:
        return _mean_ce(logits, y, w)


@dataclass(frozen=True)
class PriorAdjusted(ClientLoss):
    """The mean cross-entropy after adding ``log p_i(c)`` to each model's logit of class c, with
    ``p_i(c) = (n_ic + pseudo_count) / (n_i + C pseudo_count)`` client i's class frequencies
    among its samples (``n_ic`` of class c), smoothed so that a class the client lacks keeps a
    finite weight.

    A client computes it from its own samples alone (nothing more leaves the client than its
    losses). A smaller ``pseudo_count`` discounts the classes a client lacks more."""

    pseudo_count: float = 2.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "pseudo_count", check_positive(self.pseudo_count, name="pseudo_count"))

    def log_prior(self, y: Tensor, w: Tensor, n_classes: int) -> Tensor:
        """``[n, C]``: each client's smoothed log class frequencies."""
        counts = torch.zeros(y.shape[0], n_classes, dtype=w.dtype, device=w.device)
        counts.scatter_add_(1, y, w)
        smoothed = counts + self.pseudo_count
        return (smoothed / smoothed.sum(1, keepdim=True)).log()

    def __call__(self, logits: Tensor, y: Tensor, w: Tensor) -> Tensor:
        prior = self.log_prior(y, w, logits.shape[-1]).to(logits.dtype)
        return _mean_ce(logits + prior[None, :, None, :], y, w)
