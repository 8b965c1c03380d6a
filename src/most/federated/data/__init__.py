"""Federated data: per-client train/validation/test splits, one client per objective.

A :class:`FederatedDataset` is a tuple of :class:`ClientData` (each with its own
``train``/``val``/``test`` tensors: ``float32`` features ``[N, *input_shape]`` and
``int64`` labels ``[N]`` in ``0 .. n_classes - 1``) plus the client ids. Every client
has at least one training sample: :meth:`FederatedDataset.from_clients` drops (with a
warning naming them) the clients that do not, and the constructor refuses them.

Data sets (one module each; the containers and the helpers they share are in ``_dataset``):

* :func:`fedprox_synthetic` -- the synthetic(alpha, beta) generator of FedProx (Li et al.,
  "Federated Optimization in Heterogeneous Networks", MLSys 2020), called Syn(rho1, rho2)
  in the MosT paper; generated, nothing to download.
* :func:`mixture_synthetic` -- FedEM's synthetic data (Marfoq et al. 2021): each client's
  samples from its own mixture of a few linear tasks; generated.
* :func:`load_femnist` -- LEAF FEMNIST JSON (one client per writer; ``MOST_FEMNIST``).
* :func:`load_fashion_mnist` -- Fashion-MNIST idx files split over clients with a
  Dirichlet label skew (:func:`dirichlet_label_split`; ``MOST_FASHION_MNIST``, or
  ``/usr/share/datasets/fashion-mnist`` from Debian's ``dataset-fashion-mnist``).

Examples:
    >>> from most.federated import fedprox_synthetic
    >>> data = fedprox_synthetic(0.5, 0.5, n_clients=4, samples_per_client=50, seed=1)
    >>> data.n_clients, data.n_classes, data.input_shape
    (4, 10, (60,))
    >>> c = data.clients[0]
    >>> (c.n_train, c.n_val, c.n_test), c.x_train.dtype, c.y_train.dtype
    ((30, 10, 10), torch.float32, torch.int64)
    >>> data.subset([2, 0]).client_ids
    ('f_00002', 'f_00000')
"""

from __future__ import annotations

from __future__ import annotations

from . import _dataset, _fashion_mnist, _femnist, _mixture, _synthetic
# check_groups, split_counts, quarter_turns, label_groups_of: the loaders' checks and splits, for the
# library's other packages (federated methods, bench) and tests; not in __all__
from ._dataset import ClientData, FederatedDataset, check_groups, dirichlet_label_split, split_counts  # noqa: F401
from ._fashion_mnist import (FASHION_MNIST_DEFAULT_DIR, FASHION_MNIST_ENV, label_groups_of,  # noqa: F401
                             load_fashion_mnist, quarter_turns)
from ._femnist import FEMNIST_ENV, load_femnist
from ._mixture import mixture_synthetic
from ._synthetic import POWER_LAW_MAX_SAMPLES, fedprox_synthetic

__all__ = [*_dataset.__all__, *_synthetic.__all__, *_mixture.__all__, *_femnist.__all__, *_fashion_mnist.__all__]
