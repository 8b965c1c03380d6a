r"""Server-side methods for the federated runtimes: MosT and the FL baselines.

A federated method is the same components as a centralised one (:mod:`most.methods`), applied
to clients instead of objectives and to client updates instead of gradients:

1. an **assignment** ``losses [n, m] -> plan Gamma [n, m]`` (which client trains which model;
   MosT: optimal transport, Eq. 6), with its **marginals**;
2. a **weighting** ``Gamma -> W [m, n]`` (a pair (client i, model j) trains when ``W[j, i] > 0``);
3. a **combiner** ``(updates [m, k, d], weights [m, k]) -> direction [m, d]`` applied to the
   pseudo-gradients ``Delta_ij = theta_j - theta_ij`` of each model's clients: the very objects
   of the centralised loop (:class:`~most.methods.MinNorm`, Eqs. 7-9, formed by
   :func:`most.mgda.min_norm_direction`; :class:`~most.methods.WeightedSum`);
4. an **update rule** for the server step, ``theta_j <- rule(theta_j, d_j, lr=server_lr)``
   (:class:`~most.optim.SGD` by default, :class:`~most.optim.Adam` possible);

plus, for MosT, a **warm-up** (:class:`WarmUp`): rounds of one shared model before the m
models split. The round itself (sample, plan, pairs, combine, update, log) is
:class:`most.federated.server.Server`, shared by the in-process runtime and Flower.

* :class:`MosT` -- Gamma by optimal transport on the clients' losses.
* :class:`FedAvg`, :class:`FedProx` -- m independent runs (McMahan et al. 2017; Li et al. 2020).
* :class:`MGDA` -- m independent runs of federated MGDA (min-norm of all client updates).
* :class:`WeightedMGDA` -- MGDA on client updates reweighted by a fixed random plan.
* :class:`Linearization` -- model j averages client updates with fixed random simplex weights.
* :class:`FedMGDAPlus` -- Hu et al. 2022: normalised client updates, min-norm with the box
  ``|lambda_i - 1/n| <= eps`` (:class:`BoxMinNorm`).
* :class:`IFCA` -- Ghosh et al. 2020: each client joins its lowest-loss model, each model
  averages its clients' updates.
* :class:`SetScalarization` -- TCH-Set, STCH-Set and sum-of-minimum on clients.
* :class:`CFL` -- Sattler et al. 2020: FedAvg within clusters, a cluster split in two by its
  updates' cosine similarities when they stop agreeing (:mod:`most.federated.methods.clustered`).
* :class:`Oracle` -- FedAvg within the clients' true groups, where the data has them.
* :class:`LocalOnly`, :class:`FineTuning` -- local training alone, and FedAvg then local
  fine-tuning: one model per client (:mod:`most.federated.methods.personal`).
* :class:`PriorAdjusted` -- MosT's ``client_loss`` for label skew: each client scores the models
  with its own class frequencies added to their logits (:mod:`most.federated.methods.losses`).
* :class:`FedEM` -- Marfoq et al. 2021: m shared models, each client's mixture weights learned
  by EM; a client predicts with its mixture (:mod:`most.federated.methods.mixture`).

A method is frozen configuration: the state a run changes (the components' state, the server
optimiser's, CFL's clusters, FedEM's mixture weights) is a :class:`MethodState` made by
``method.start`` and held by the server, so one method object serves any number of runs.

The package's modules: :mod:`~most.federated.methods.base` (the base class and its hooks),
:mod:`~most.federated.methods.updates` (combining the clients' updates),
:mod:`~most.federated.methods.baselines`, :mod:`~most.federated.methods.most` (with
:mod:`~most.federated.methods.resplit`),
:mod:`~most.federated.methods.clustered`, :mod:`~most.federated.methods.personal` and
:mod:`~most.federated.methods.mixture`; every method is importable from here.
"""

from __future__ import annotations

from .base import FederatedMethod, MethodState
from .baselines import IFCA, MGDA, FedAvg, FedMGDAPlus, FedProx, Linearization, SetScalarization, WeightedMGDA
from .clustered import CFL, Oracle
from .grouping import (ClassGroups, affinity_eigenvectors, class_gradients, class_similarity, count_sketch,
                       group_margins, refine_groups, spectral_groups)
from .losses import ClientLoss, CrossEntropy, PriorAdjusted
from .mixture import FedEM
from .most import GroupedWarmUp, MosT, WarmUp
from .personal import FineTuning, LocalOnly
from .resplit import Proposal, Resplit, SplitByLosses, SplitByUpdates, SplitSignal
from .updates import (BoxMinNorm, balanced_update_groups, combine_updates, min_norm_box, min_norm_combination,
                      update_groups, weighted_mean)

__all__ = ["FederatedMethod", "MethodState", "MosT", "FedAvg", "FedProx", "MGDA", "WeightedMGDA", "Linearization", "FedMGDAPlus",
           "IFCA", "SetScalarization", "Resplit", "Proposal", "SplitSignal", "SplitByLosses", "SplitByUpdates", "CFL", "Oracle", "LocalOnly", "FineTuning", "FedEM", "ClientLoss", "CrossEntropy", "PriorAdjusted", "WarmUp", "GroupedWarmUp", "ClassGroups", "class_gradients", "class_similarity", "count_sketch", "group_margins", "refine_groups", "spectral_groups", "affinity_eigenvectors", "BoxMinNorm", "combine_updates", "min_norm_box",
           "balanced_update_groups", "update_groups", "weighted_mean", "min_norm_combination"]
