"""Federated learning with MosT: each client is one objective.

* :mod:`most.federated.data` -- per-client train/validation/test data
  (:class:`FederatedDataset`): FedProx's synthetic(alpha, beta), LEAF FEMNIST and
  Fashion-MNIST with a Dirichlet label skew.
* :mod:`most.federated.models` -- client models as flat parameter vectors
  (:func:`logistic_regression`, the paper's :func:`cnn`).
* :mod:`most.federated.config` -- what a run is given and returns (:class:`FederatedConfig`,
  :class:`RoundLog`, :class:`FederatedResult`).
* :mod:`most.federated.clients` -- the client steps as pure functions of tensors
  (:func:`pad_split`, :func:`evaluate`, :func:`local_train`).
* :mod:`most.federated.server` -- one round of the server (:class:`~most.federated.server.Server`),
  shared by the in-process runtime and Flower.
* :mod:`most.federated.runtime` -- the in-process round loop (:func:`run_federated`,
  :func:`run_batch`); :mod:`most.federated.checks` -- the checks it makes before any work
  (:func:`check_inputs`).
* :mod:`most.federated.methods` -- MosT and the baselines (FedAvg, FedProx, MGDA, w-MGDA,
  linearization, FedMGDA+, IFCA) as server-side objects.
* :mod:`most.federated.evaluation` -- per-client model selection on validation, worst-k %,
  oracle, prediction KL, Gamma sparsity and drift, paired differences over seeds.
* :mod:`most.federated.figures` -- the sorted per-client profile, curves, worst-k % bars,
  assignment stack plot, sparsity/drift.

Examples:
    >>> import most.federated as fl
    >>> data = fl.fedprox_synthetic(0.0, 0.0, n_clients=6, samples_per_client=40, seed=0)
    >>> model = fl.logistic_regression(60, 10)
    >>> result = fl.run_federated(data, model, fl.methods.MosT(n_models=2),
    ...                           fl.FederatedConfig(rounds=3, lr=0.05))
    >>> result.test_accuracy.shape, result.choice.shape
    (torch.Size([6, 2]), torch.Size([6]))
"""

from . import evaluation, methods
from .data import (
    FASHION_MNIST_ENV,
    FEMNIST_ENV,
    ClientData,
    FederatedDataset,
    dirichlet_label_split,
    fedprox_synthetic,
    load_fashion_mnist,
    load_femnist,
    mixture_synthetic,
)
from .models import FlatModel, cnn, logistic_regression
from .checks import check_inputs
from .clients import evaluate, local_train, pad_split
from .config import FederatedConfig, FederatedResult, RoundLog
from .runtime import batch_groups, run_batch, run_federated

__all__ = [
    "ClientData",
    "FederatedDataset",
    "dirichlet_label_split",
    "fedprox_synthetic",
    "load_femnist",
    "load_fashion_mnist",
    "mixture_synthetic",
    "FEMNIST_ENV",
    "FASHION_MNIST_ENV",
    "FlatModel",
    "cnn",
    "logistic_regression",
    "FederatedConfig",
    "FederatedResult",
    "RoundLog",
    "batch_groups",
    "check_inputs",
    "evaluate",
    "local_train",
    "pad_split",
    "run_batch",
    "run_federated",
    "evaluation",
    "figures",
    "methods",
]


def __getattr__(name: str):
    """:mod:`most.federated.figures` is imported when first used (it brings matplotlib), so
    ``import most.federated`` costs little beyond torch."""
    if name == "figures":
        import importlib

        return importlib.import_module(f"{__name__}.figures")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
