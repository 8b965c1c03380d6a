r"""Federated mixtures: each client predicts with its own mixture of the m models.

* :class:`FedEM` -- Federated Multi-Task Learning under a Mixture of Distributions (Marfoq,
  Neglia, Bellet, Kameni and Vidal, NeurIPS 2021): each client's data is a mixture of m
  underlying distributions; the m component models are shared, each client's mixture
  weights are its own, and both are learned by federated EM.
* :func:`responsibilities` -- the E-step and the M-step of the weights, on one round's
  per-sample losses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

import torch
from torch import Tensor

from ...methods import EqualAssignment, Support, WeightedSum
from .base import FederatedMethod, MethodState

__all__ = ["FedEM", "responsibilities"]


def responsibilities(losses: Tensor, mixture: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    r"""FedEM's E-step and the M-step of the mixture weights for ``k`` clients.

    .. math::

        q_t(z = j \mid i) = \frac{\pi_{tj} \, e^{-\ell_j(x_i, y_i)}}{\sum_l \pi_{tl} \, e^{-\ell_l(x_i, y_i)}},
        \qquad \pi_{tj} \leftarrow \frac{1}{n_t} \sum_i q_t(z = j \mid i),

    with ``l_j`` the cross-entropy of model j, so ``e^{-l_j}`` is its likelihood of the label.
    Computed in log space: a sample that every model gives a tiny likelihood still has finite
    responsibilities, and a model whose weight underflows to 0 for a client keeps 0 (EM's
    answer: the client is not drawn from it).

    Args:
        losses: ``[k, m, N]`` each model's loss on each training sample (padding: any value).
        mixture: ``[k, m]`` the clients' current weights (rows on the simplex).
        mask: ``[k, N]`` 1 for a real sample, 0 for padding.

    Returns:
        ``(q [k, m, N], mixture [k, m])``: the responsibilities (0 on padding), and the new
        weights; a client without samples keeps its weights.
    """
    log_q = mixture.log()[:, :, None] - losses
    q = log_q.softmax(1) * mask[:, None, :]
    count = mask.sum(1)
    new = torch.where(count[:, None] > 0, q.sum(2) / count.clamp_min(1)[:, None], mixture)
    return q, new


@dataclass(frozen=True)
class FedEM(FederatedMethod):
    r"""FedEM (Marfoq et al., NeurIPS 2021): m shared component models, each client's mixture
    weights ``pi_t`` learned by EM; client t predicts with ``sum_j pi_tj p_j(y | x)``.

    Each round, each participating client t

    1. weighs its training samples by each model (the E-step, :func:`responsibilities`):
       ``q_t(j | i)`` proportional to ``pi_tj exp(-l_j(x_i, y_i))``;
    2. sets its weights to their means, ``pi_tj = mean_i q_t(j | i)`` (the M-step of ``pi``);
    3. trains every model j for the protocol's local epochs on the weighted loss
       ``sum_i q_t(j | i) l_j(x_i, y_i) / n_t`` (mini-batch SGD, :func:`~most.federated.local_train`'s
       ``sample_weight``);

    and the server takes the sample-size-weighted mean of each model's updates (FedAvg's, with
    the server step ``server_lr``; 1 is the paper's). The weights start uniform and the models
    from m different initialisations. After the last round one more E-step fits every client's
    weights to the final models, and each client is scored on its mixture
    (:attr:`~most.federated.FederatedResult.mixture`). The weights are held by the server in the
    in-process runtime, and by the strategy on Flower, where each client runs its E-step on its own
    data and sends its weights back (a client's own state in the paper).

    A client's weights that collapse on one model (``pi_tj`` = 1) are EM's answer, kept as they
    are: the client is then served by that model alone.

    Args:
        n_models: m, the components (at most the number of clients).
        server_lr, optimizer: as for every method.
    """

    by_samples: ClassVar[bool] = True
    logs_plan: ClassVar[bool] = False
    sample_weights: ClassVar[bool] = True
    pick: ClassVar[str] = "its mixture of the models (weights by EM)"

    def components(self):
        return EqualAssignment(), Support(), WeightedSum()

    def check(self, n_clients):
        if self.n_models > n_clients:
            raise ValueError(f"FedEM with n_models={self.n_models} components for {n_clients} clients: each "
                             "component is a distribution some clients are drawn from, so use at most as many "
                             f"components as clients (n_models <= {n_clients}).")

    def start(self, n, m, generator, model=None):
        base = super().start(n, m, generator, model)
        return FedEMState(base.components, torch.full((n, m), 1.0 / m, dtype=torch.float64))

    def weigh_samples(self, state, losses, mask, clients):
        at = clients.cpu().long()
        mixture = cast(FedEMState, state).mixture
        q, new = responsibilities(losses.double(), mixture[at].to(losses.device), mask.double())
        self.update_mixture(state, at, new)
        return q

    def update_mixture(self, state, clients, weights):
        mixture = cast(FedEMState, state).mixture
        weights = torch.as_tensor(weights, dtype=torch.float64).cpu()
        if weights.shape != (len(clients), mixture.shape[1]) or not torch.isfinite(weights).all():
            raise ValueError(f"FedEM got mixture weights of shape {tuple(weights.shape)} for {len(clients)} clients "
                             f"and {mixture.shape[1]} models (finite, one row per client expected).")
        mixture[torch.as_tensor(clients).cpu().long()] = weights

    def mixture(self, state, n_clients):
        return cast(FedEMState, state).mixture.clone()


class FedEMState(MethodState):
    """A FedEM run's state: the base's and each client's mixture weights ``[n, m]``."""

    def __init__(self, components, mixture: Tensor):
        super().__init__(components)
        self.mixture = mixture
