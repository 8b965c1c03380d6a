r"""Clustered federated learning: methods that give each client one model of a few.

* :class:`CFL` -- Clustered Federated Learning (Sattler, Müller and Samek 2020): FedAvg
  within each cluster of clients until the cluster's updates stop agreeing, then the
  cluster is split in two by the cosine similarity of its clients' updates.
* :class:`Oracle` -- a reference that knows the true groups of the clients: model g is
  FedAvg over group g.

Both assign each client to one model for the run, and each client is scored on the model
it is assigned (:meth:`~most.federated.methods.FederatedMethod.assigned`), not on its best
model on validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, cast

import numpy as np
import torch
from torch import Tensor

from ..._host import to_device
from ..._validation import check_positive, check_positive_int
from ...methods import Assignment, Support, WeightedSum
from ...optim import SGD, UpdateRule
from ..data import check_groups
from .base import FederatedMethod, MethodState

__all__ = ["CFL", "Oracle", "GroupAssignment", "ClusterAssignment", "bipartition"]


class GroupAssignment(Assignment):
    """A fixed hard plan from known groups: client i goes, whole, to model ``groups[i]``
    (``Gamma[i, groups[i]] = 1/n``)."""

    fixed: ClassVar[bool] = True

    def __init__(self, groups):
        self.groups = check_groups(groups, None, "Oracle")

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        if n != len(self.groups):
            raise ValueError(f"GroupAssignment has groups for {len(self.groups)} clients; the round has {n}.")
        return self.rows(torch.arange(n)).to(losses)

    def rows(self, objectives: Tensor) -> Tensor:
        """The plan's rows of ``objectives`` (indices among all n)."""
        g = torch.tensor(self.groups)[objectives.cpu()]
        return torch.nn.functional.one_hot(g, max(self.groups) + 1).double() / len(self.groups)

    def __repr__(self):
        return f"GroupAssignment(groups=<{len(self.groups)} clients, {len(set(self.groups))} groups>)"


@dataclass(frozen=True, init=False)
class Oracle(FederatedMethod):
    """The clients' true groups known: model g is FedAvg over the clients of group g (sample-size
    weighted), and each client is scored on its group's model.

    A reference for data with planted groups (:attr:`most.federated.FederatedDataset.groups`):
    what a clustering method could reach if it found the groups from the first round.
    ``n_models`` is the number of groups (``max(groups) + 1``).

    Args:
        groups: the group of each client, ``0 .. G-1`` (e.g. ``dataset.groups``).
        server_lr, optimizer: as for every method.
    """

    groups: tuple[int, ...] = ()
    n_models: int = field(default=0, init=False)  # the number of groups

    by_samples: ClassVar[bool] = True
    logs_plan: ClassVar[bool] = False
    pick: ClassVar[str] = "its group's model"
    assigns: ClassVar[bool] = True

    def __init__(self, groups, server_lr: float = 1.0, optimizer: UpdateRule | None = None):
        checked = check_groups(groups, None, "GroupAssignment")
        object.__setattr__(self, "groups", checked)
        object.__setattr__(self, "n_models", max(checked) + 1)
        object.__setattr__(self, "server_lr", server_lr)
        object.__setattr__(self, "optimizer", SGD() if optimizer is None else optimizer)
        self.__post_init__()

    def components(self):
        return GroupAssignment(self.groups), Support(), WeightedSum()

    def check(self, n_clients):
        if n_clients != len(self.groups):
            raise ValueError(f"Oracle has groups for {len(self.groups)} clients, but the data has {n_clients}: "
                             "give one group per client (dataset.groups).")

    def assigned(self, state, n_clients):
        return torch.tensor(self.groups)


class ClusterAssignment(Assignment):
    """Each client, whole, to its cluster's model (``Gamma[i, c_i] = 1/n``). Every client starts
    in cluster 0; :class:`CFL` changes :attr:`labels` when it splits a cluster."""

    fixed: ClassVar[bool] = True

    def __init__(self) -> None:
        self.labels: Tensor | None = None
        self._m = 0

    def reset(self, n, m, generator):
        self.labels = torch.zeros(n, dtype=torch.long)
        self._m = m

    def __call__(self, losses, round, total, previous=None):
        return self.rows(torch.arange(losses.shape[0])).to(losses)

    def rows(self, objectives: Tensor) -> Tensor:
        """The plan's rows of ``objectives`` (indices among all n)."""
        if self.labels is None:
            raise RuntimeError("ClusterAssignment.reset(n, m, generator) must be called before the first round.")
        plan = torch.nn.functional.one_hot(self.labels[objectives.cpu()], self._m).double() / len(self.labels)
        return plan.to(objectives.device)

    def __repr__(self):
        return "ClusterAssignment()"


def bipartition(updates: Tensor) -> Tensor:
    """CFL's split of a cluster: ``[k]`` labels 0/1 of the rows of ``updates [k, d]``.

    The two groups are those of complete-linkage agglomerative clustering on the cosine
    distance of the updates (SciPy's :func:`~scipy.cluster.hierarchy.linkage`), as in the
    paper's reference code: the split that keeps the largest similarity across the two groups
    small. Row 0 is always in group 0. A zero update (a client whose model fits its data so well
    that its gradients vanish) has no direction: its distance to every other update is 1, as for
    an orthogonal one."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    u = updates.detach().double().cpu().numpy()
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    u = u / np.maximum(norms, 1e-300)
    if len(u) < 2:
        return torch.zeros(len(u), dtype=torch.long)
    zero = norms[:, 0] == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = pdist(u, "cosine")
    if zero.any():  # pairs with a zero update: NaN from pdist, distance 1
        i, j = np.triu_indices(len(u), 1)
        distance[zero[i] | zero[j]] = 1.0
    distance = np.clip(distance, 0.0, 2.0)
    labels = fcluster(linkage(distance, method="complete"), t=2, criterion="maxclust") - 1
    labels = labels if labels[0] == 0 else 1 - labels
    return torch.as_tensor(labels, dtype=torch.long)


@dataclass(frozen=True)
class CFL(FederatedMethod):
    r"""Clustered Federated Learning (Sattler, Müller and Samek, IEEE TNNLS 2020).

    All clients start in one cluster around one model. Each round, each client trains its
    cluster's model and the cluster takes the sample-weighted mean of its clients' updates
    (FedAvg within clusters). After ``min_rounds`` rounds, a cluster ``c`` of more than
    ``min_size`` clients whose updates nearly cancel while some client still moves far,

    .. math::

        \left\|\sum_{i\in c} \frac{n_i}{n_c} \Delta_i\right\| < \varepsilon_1
        \quad\text{and}\quad \max_{i\in c} \|\Delta_i\| > \varepsilon_2,

    (a stationary point of the cluster's FedAvg objective that is not one of its clients') is
    split in two by :func:`bipartition` of the updates' cosine similarities, and the new
    cluster starts from a copy of the cluster's model. At most ``n_models`` clusters are made
    (the models the run holds); a model whose cluster was never made keeps its start and
    serves no client.

    Args:
        n_models: m, the most clusters.
        server_lr: the server step on the mean update (1: FedAvg's mean).
        eps1, eps2: the thresholds on the norm of the mean update and the largest update. The
            defaults are those of the paper's reference code (0.4 and 1.6): update norms scale
            with the local learning rate and epochs, so choose them for the problem (the
            benchmark picks a scale of them on validation).
        min_rounds: rounds before the first split (the reference code's 20).
        min_size: the smallest cluster that may split has ``min_size + 1`` clients (the
            reference code splits clusters of more than 2).

    With partial participation a cluster is split among its clients that took part in the
    round; the others stay in the cluster, with the part that keeps its model.
    Each client is scored on its cluster's model.
    """

    eps1: float = field(default=0.4, metadata={"check": check_positive})
    eps2: float = field(default=1.6, metadata={"check": check_positive})
    min_rounds: int = 20
    min_size: int = 2

    by_samples: ClassVar[bool] = True
    logs_plan: ClassVar[bool] = False
    pick: ClassVar[str] = "its cluster's model"
    assigns: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        for name in ("eps1", "eps2"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"`{name}` must be a finite positive number; got {getattr(self, name)!r}.")
        object.__setattr__(self, "min_rounds", check_positive_int(self.min_rounds, name="min_rounds", minimum=0))
        object.__setattr__(self, "min_size", check_positive_int(self.min_size, name="min_size", minimum=1))

    def components(self):
        return ClusterAssignment(), Support(), WeightedSum()

    def initial_params(self, model, m, generator):
        return model.init(1, generator).repeat(m, 1)  # one cluster, one model, at the start

    def start(self, n, m, generator, model=None):
        base = super().start(n, m, generator, model)
        return CFLState(base.components)

    def assigned(self, state, n_clients):
        return cast(CFLState, state).labels.clone()

    def aggregate(self, state, params, deltas, pair_model, pair_weight, *, round, clients=None):
        if clients is None:
            raise ValueError("CFL needs the client of each update (Server.update passes it).")
        state = cast(CFLState, state)
        if round >= self.min_rounds and state.clusters < self.n_models:
            params = self._split(state, params, deltas, pair_model.cpu(), pair_weight.cpu(), clients.cpu())
        return super().aggregate(state, params, deltas, state.labels[clients.cpu()].to(pair_model.device), pair_weight,
                                 round=round)

    def _split(self, state: "CFLState", params: Tensor, deltas: Tensor, pair_model: Tensor, pair_weight: Tensor,
               clients: Tensor) -> Tensor:
        """Splits every cluster that meets the criterion (while models are left); returns the
        models with each new cluster's model a copy of its parent's."""
        norms = deltas.double().norm(dim=1).cpu()
        params = params.clone()
        for c in range(state.clusters):
            if state.clusters >= self.n_models:
                break
            mine = (pair_model == c).nonzero().squeeze(1)
            if len(mine) <= self.min_size:
                continue
            share = pair_weight[mine].double() / pair_weight[mine].double().sum()
            mean = (to_device(share, deltas.device).to(deltas)[:, None] * deltas[to_device(mine, deltas.device)]).sum(0)
            if not (float(mean.double().norm()) < self.eps1 and float(norms[mine].max()) > self.eps2):
                continue
            halves = bipartition(deltas[to_device(mine, deltas.device)])
            if bool(halves.all()) or not bool(halves.any()):
                continue
            new = state.clusters
            state.labels[clients[mine[halves == 1]]] = new
            params[new] = params[c]
            state.clusters += 1
        return params


class CFLState(MethodState):
    """A CFL run's state: the base's (the cluster assignment holds each client's cluster) and
    the number of clusters made so far."""

    def __init__(self, components):
        super().__init__(components)
        self.clusters = 1

    @property
    def labels(self) -> Tensor:
        """``[n]`` each client's cluster (its model) so far."""
        return cast(Tensor, cast(ClusterAssignment, self.components[0]).labels)
