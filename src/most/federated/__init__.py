"""Federated learning with MosT: each client is one objective.

:mod:`most.federated.data` -- per-client train/validation/test data
(:class:`FederatedDataset`): FedProx's synthetic(alpha, beta), LEAF FEMNIST and
Fashion-MNIST with a Dirichlet label skew.
"""

from .data import (
    FASHION_MNIST_ENV,
    FEMNIST_ENV,
    ClientData,
    FederatedDataset,
    dirichlet_label_split,
    fedprox_synthetic,
    load_fashion_mnist,
    load_femnist,
)

__all__ = [
    "ClientData",
    "FederatedDataset",
    "dirichlet_label_split",
    "fedprox_synthetic",
    "load_femnist",
    "load_fashion_mnist",
    "FEMNIST_ENV",
    "FASHION_MNIST_ENV",
]
