"""FedProx's synthetic(alpha, beta) data (called Syn(rho1, rho2) in the MosT paper): generated,
nothing to download."""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from ..._validation import check_non_negative, check_positive_int
from ._dataset import (ClientData, FederatedDataset, check_split, check_splits_filled,
                       client_from_arrays, numpy_rng)

__all__ = ["fedprox_synthetic", "POWER_LAW_MAX_SAMPLES"]

#: Default cap on a client's size under ``size_distribution="power_law"``.
POWER_LAW_MAX_SAMPLES = 2000


def fedprox_synthetic(
    model_shift: float | None = None,
    feature_shift: float | None = None,
    *,
    n_clients: int = 30,
    dim: int = 60,
    n_classes: int = 10,
    samples_per_client: int = 100,
    size_distribution: str = "equal",
    max_samples_per_client: int = POWER_LAW_MAX_SAMPLES,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    alpha: float | None = None,
    beta: float | None = None,
) -> FederatedDataset:
    """FedProx's synthetic(alpha, beta) data: a softmax-regression task per client.

    ``model_shift`` is FedProx's ``alpha`` (how far the clients' models lie apart) and
    ``feature_shift`` its ``beta`` (how far their feature means lie apart): the library keeps
    alpha and beta for the transport marginals. ``alpha=`` and ``beta=`` are still accepted,
    with a ``DeprecationWarning``. ``fedprox_synthetic(0.5, 0.5)`` is Syn(0.5, 0.5).

    As in ``data/synthetic_*/generate_synthetic.py`` of ``litian96/FedProx`` (and MosT's
    copy, ``data/synthetic/generate_synthetic.py``), for each client ``k``:

    * ``u_k ~ N(0, model_shift^2)``, ``W_k ~ N(u_k, 1)`` (``[dim, n_classes]``, each entry),
      ``b_k ~ N(u_k, 1)`` (``[n_classes]``);
    * ``B_k ~ N(0, feature_shift^2)``, ``v_k ~ N(B_k, 1)`` (``[dim]``, each coordinate);
    * ``x ~ N(v_k, Sigma)`` with ``Sigma`` diagonal, ``Sigma_jj = j^(-1.2)`` (``j = 1..dim``);
    * ``y = argmax(softmax(x W_k + b_k))``, computed as the argmax of the logits.

    ``alpha`` and ``beta`` are *standard deviations*, as in the original code
    (``np.random.normal(0, alpha, ...)``); the paper writes ``N(0, alpha)``. Note that
    ``u_k`` shifts every entry of ``W_k`` and ``b_k`` by the same amount, which adds the
    same number to every logit: in this generator (as in the original) ``alpha`` does not
    change the labels, and for a fixed ``seed`` and ``beta`` the data do not depend on
    ``alpha`` at all. The heterogeneity comes from the per-client ``W_k``, ``b_k``, ``v_k``
    and, growing with ``beta``, from the spread of the feature means ``B_k``.

    Client sizes:

    * ``"equal"`` -- every client has ``samples_per_client`` samples (MosT's setting:
      30 clients of 100 samples);
    * ``"power_law"`` -- ``n_k = floor(LogNormal(4, 2)) + samples_per_client``, capped at
      ``max_samples_per_client`` (default 2000: the log-normal tail otherwise gives a
      client tens of thousands of samples now and then). FedProx adds 50
      (``np.random.lognormal(4, 2, n).astype(int) + 50``): pass ``samples_per_client=50``.

    Each client's samples are shuffled and split ``train:val:test`` by ``split`` (sizes
    within 1 of ``n_k * split``, largest remainders; every fraction positive, and a split that
    leaves every client without validation or test samples is refused). All randomness comes from
    ``np.random.default_rng(seed)`` (sizes, ``u``, ``B``, ``v``, then per client ``W_k``,
    ``b_k``, ``x`` and the shuffle), so the result is deterministic per seed (numpy's new
    generator: not the same numbers as FedProx's legacy ``np.random`` calls). Features are
    computed in float64 and stored as float32. Client ids: ``f_00000``, ``f_00001``, ...
    (FedProx's user names).
    """
    model_shift = _renamed(model_shift, alpha, "model_shift", "alpha")
    feature_shift = _renamed(feature_shift, beta, "feature_shift", "beta")
    alpha = check_non_negative(model_shift, name="model_shift")
    beta = check_non_negative(feature_shift, name="feature_shift")
    check_positive_int(n_clients, name="n_clients")
    check_positive_int(dim, name="dim")
    check_positive_int(n_classes, name="n_classes", minimum=2)
    check_positive_int(samples_per_client, name="samples_per_client")
    check_positive_int(max_samples_per_client, name="max_samples_per_client")
    split = check_split(split)
    rng = numpy_rng(seed)
    sizes = _client_sizes(rng, size_distribution, n_clients, samples_per_client, max_samples_per_client)
    clients = _softmax_clients(rng, sizes, alpha, beta, dim=dim, n_classes=n_classes, split=split)
    width = max(5, len(str(n_clients - 1)))
    data = FederatedDataset.from_clients(
        clients,
        name=f"synthetic({alpha:g}, {beta:g})",
        n_classes=n_classes,
        client_ids=[f"f_{k:0{width}d}" for k in range(n_clients)],
        input_shape=(dim,),
    )
    return check_splits_filled(data, split, f"clients of {int(sizes.min())} to {int(sizes.max())} samples")


def _renamed(value, old_value, name: str, old_name: str):
    """``value``, or the deprecated keyword's ``old_value`` (with a warning); one of them is needed."""
    if old_value is not None:
        if value is not None:
            raise TypeError(f"fedprox_synthetic: give `{name}` (the new name of `{old_name}`), not both.")
        warnings.warn(f"fedprox_synthetic({old_name}=...) is deprecated: the argument is now `{name}` (alpha and beta "
                      "name the transport marginals in this library).", DeprecationWarning, stacklevel=3)
        return old_value
    if value is None:
        raise TypeError(f"fedprox_synthetic needs `{name}` (e.g. fedprox_synthetic(0.5, 0.5) for Syn(0.5, 0.5)).")
    return value


def _client_sizes(rng: np.random.Generator, size_distribution: str, n_clients: int, samples_per_client: int,
                  max_samples_per_client: int) -> np.ndarray:
    """Each client's number of samples, ``[n_clients]`` (see :func:`fedprox_synthetic`)."""
    if size_distribution == "equal":
        return np.full(n_clients, samples_per_client, dtype=np.int64)
    if size_distribution != "power_law":
        raise ValueError(f"`size_distribution` must be 'equal' or 'power_law'; got {size_distribution!r}.")
    if max_samples_per_client < samples_per_client:
        raise ValueError(
            f"`max_samples_per_client` ({max_samples_per_client}) must be >= `samples_per_client` "
            f"({samples_per_client}), the smallest power-law size."
        )
    raw = np.minimum(rng.lognormal(4.0, 2.0, n_clients), float(max_samples_per_client))
    return np.minimum(raw.astype(np.int64) + samples_per_client, max_samples_per_client)


def _softmax_clients(rng: np.random.Generator, sizes: np.ndarray, alpha: float, beta: float, *, dim: int,
                     n_classes: int, split: Sequence[float]) -> list[ClientData]:
    """One softmax-regression client per entry of ``sizes``, drawn from ``rng`` in FedProx's order
    (``u``, ``B``, ``v``, then per client ``W_k``, ``b_k``, ``x`` and the shuffle)."""
    n_clients = len(sizes)
    u = alpha * rng.standard_normal(n_clients)
    B = beta * rng.standard_normal(n_clients)
    v = B[:, None] + rng.standard_normal((n_clients, dim))
    sd = np.arange(1, dim + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)

    clients = []
    for k in range(n_clients):
        W = u[k] + rng.standard_normal((dim, n_classes))
        b = u[k] + rng.standard_normal(n_classes)
        x = v[k] + sd * rng.standard_normal((int(sizes[k]), dim))
        y = np.argmax(x @ W + b, axis=1)
        clients.append(client_from_arrays(x, y, split, rng))
    return clients
