"""Federated data: per-client train/validation/test splits, one client per objective.

A :class:`FederatedDataset` is a tuple of :class:`ClientData` (each with its own
``train``/``val``/``test`` tensors: ``float32`` features ``[N, *input_shape]`` and
``int64`` labels ``[N]`` in ``0 .. n_classes - 1``) plus the client ids. Every client
has at least one training sample: :meth:`FederatedDataset.from_clients` drops (with a
warning naming them) the clients that do not, and the constructor refuses them.

Data sets:

* :func:`fedprox_synthetic` -- the synthetic(alpha, beta) generator of FedProx (Li et al.,
  "Federated Optimization in Heterogeneous Networks", MLSys 2020), called Syn(rho1, rho2)
  in the MosT paper; generated, nothing to download.
* :func:`load_femnist` -- LEAF FEMNIST JSON (one client per writer; ``MOST_FEMNIST``).
* :func:`load_fashion_mnist` -- Fashion-MNIST idx files split over clients with a
  Dirichlet label skew (:func:`dirichlet_label_split`; ``MOST_FASHION_MNIST``, or
  ``/usr/share/datasets/fashion-mnist`` from Debian's ``dataset-fashion-mnist``).

Example:
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

import gzip
import json
import math
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..._paths import resolve_dir as _resolve_dir
from ..._random import derive_seed
from ..._validation import check_bool, check_positive_int

__all__ = [
    "ClientData",
    "FederatedDataset",
    "dirichlet_label_split",
    "fedprox_synthetic",
    "load_femnist",
    "load_fashion_mnist",
    "FEMNIST_ENV",
    "FASHION_MNIST_ENV",
    "FASHION_MNIST_DEFAULT_DIR",
    "POWER_LAW_MAX_SAMPLES",
]

#: Environment variable read by :func:`load_femnist` when no path is given.
FEMNIST_ENV = "MOST_FEMNIST"
#: Environment variable read by :func:`load_fashion_mnist` when no path is given.
FASHION_MNIST_ENV = "MOST_FASHION_MNIST"
#: Where Debian's ``dataset-fashion-mnist`` package installs the idx files.
FASHION_MNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
#: Default cap on a client's size under ``size_distribution="power_law"``.
POWER_LAW_MAX_SAMPLES = 2000

_SPLITS = ("train", "val", "test")


# ---------------------------------------------------------------------- containers
_LABEL_FIX = (
    "Labels must be integer class indices 0 .. C-1: map yours first, e.g. "
    "`classes, y = np.unique(y, return_inverse=True)` (then n_classes = len(classes))."
)


def _numeric(x, *, what: str, labels: bool) -> Tensor:
    """``x`` as a tensor of numbers; strings, mixed objects and ragged lists get a ValueError."""
    if isinstance(x, Tensor):
        return x
    try:
        arr = np.asarray(x)
    except ValueError:  # ragged nested lists
        raise ValueError(f"{what} must be a rectangular array of numbers; got ragged nested sequences.") from None
    if arr.dtype.kind in "USO":
        shown = ", ".join(repr(v) for v in arr.reshape(-1)[:3].tolist())
        try:
            if arr.dtype.kind != "O":
                raise TypeError
            arr = arr.astype(np.float64)  # an object array of numbers
        except (TypeError, ValueError):
            if labels:
                raise ValueError(f"{what} must hold integer class labels; got non-numeric values ({shown}, ...; "
                                 f"dtype {arr.dtype}). " + _LABEL_FIX) from None
            raise ValueError(f"{what} must hold numbers; got dtype {arr.dtype} (e.g. {shown}). "
                             "Encode the features as numbers first.") from None
    try:
        return torch.as_tensor(arr)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"{what} must be an array of numbers; got dtype {arr.dtype}.") from exc


def _as_features(x, *, what: str) -> Tensor:
    t = _numeric(x, what=what, labels=False)
    if t.is_complex():
        raise ValueError(f"{what} must be real; got dtype {t.dtype}.")
    t = t.to(torch.float32)
    if t.ndim < 2:
        raise ValueError(f"{what} must have shape [N, *input_shape]; got shape {tuple(t.shape)}.")
    # numpy's check is much faster than torch.isfinite on large CPU image tensors.
    finite = np.isfinite(t.detach().cpu().numpy())
    if not finite.all():
        row = int(np.argwhere(~finite)[0][0])
        raise ValueError(f"{what} contains NaN or inf (first in sample {row}). Drop or impute those samples "
                         "first; features must be finite (values beyond float32's range become inf).")
    return t


def _as_labels(y, *, what: str) -> Tensor:
    t = _numeric(y, what=what, labels=True)
    if t.ndim != 1:
        raise ValueError(f"{what} must be a vector [N]; got shape {tuple(t.shape)}.")
    if t.is_floating_point():
        bad = ~torch.isfinite(t) | (t != t.round())
        if bad.any():
            raise ValueError(f"{what} must hold integer class labels; got the non-integer label {float(t[bad][0])!r}. "
                             + _LABEL_FIX)
    elif t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{what} must hold integer class labels; got dtype {t.dtype}. " + _LABEL_FIX)
    return t.to(torch.int64)


@dataclass(frozen=True, eq=False)
class ClientData:
    """One client's data: ``train``, ``val`` and ``test`` splits.

    Attributes:
        x_train, x_val, x_test: ``float32`` features ``[N_split, *input_shape]`` (the same
            ``input_shape`` in all three; a split may be empty).
        y_train, y_val, y_test: ``int64`` labels ``[N_split]``.

    Inputs are converted (features to ``float32``, integral labels to ``int64``); shapes,
    finiteness and integrality are checked. Label ranges are checked by
    :class:`FederatedDataset`, which knows ``n_classes``.
    """

    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor

    def __post_init__(self) -> None:
        shape = None
        for split in _SPLITS:
            x = _as_features(getattr(self, f"x_{split}"), what=f"`x_{split}`")
            y = _as_labels(getattr(self, f"y_{split}"), what=f"`y_{split}`")
            if x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"`x_{split}` has {x.shape[0]} rows but `y_{split}` has {y.shape[0]} labels; they must match."
                )
            if shape is None:
                shape = tuple(x.shape[1:])
            elif tuple(x.shape[1:]) != shape:
                raise ValueError(
                    f"`x_{split}` has samples of shape {tuple(x.shape[1:])} but `x_train` has {shape}; "
                    "all splits must share one input shape."
                )
            object.__setattr__(self, f"x_{split}", x)
            object.__setattr__(self, f"y_{split}", y)

    @property
    def n_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.y_val.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.y_test.shape[0])

    @property
    def n_samples(self) -> int:
        """``n_train + n_val + n_test``."""
        return self.n_train + self.n_val + self.n_test

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:
        return (
            f"ClientData(n_train={self.n_train}, n_val={self.n_val}, n_test={self.n_test}, "
            f"input_shape={self.input_shape})"
        )


def _names_preview(items: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """Clients of a federated task, each with its own ``train``/``val``/``test`` split.

    Attributes:
        name: a label for reports.
        clients: one :class:`ClientData` per client (at least one).
        n_classes: number of classes; every label is in ``0 .. n_classes - 1``.
        input_shape: the shape of one sample, e.g. ``(60,)`` or ``(1, 28, 28)``.
        client_ids: one unique string per client, in the order of ``clients``.

    The constructor checks that every client's features have shape ``input_shape``, that
    every label is in range and that every client has at least one training sample
    (``ValueError`` otherwise). To drop empty clients instead, build the data set with
    :meth:`from_clients`, which warns with the ids of the clients it leaves out.
    """

    name: str
    clients: tuple[ClientData, ...]
    n_classes: int
    input_shape: tuple[int, ...]
    client_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        clients = tuple(self.clients)
        if not clients:
            raise ValueError(f"{self.name!r}: a federated data set needs at least one client; got none.")
        for k, c in enumerate(clients):
            if not isinstance(c, ClientData):
                raise ValueError(f"{self.name!r}: client {k} must be a ClientData; got {type(c).__name__}.")
        n_classes = int(self.n_classes) if isinstance(self.n_classes, np.integer) else self.n_classes
        check_positive_int(n_classes, name="n_classes")
        try:
            shape = tuple(int(s) for s in self.input_shape)
        except TypeError:
            raise ValueError(f"`input_shape` must be a tuple of ints; got {self.input_shape!r}.") from None
        ids = tuple(self.client_ids)
        if not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{self.name!r}: `client_ids` must be strings; got {ids[:5]!r}...")
        if len(ids) != len(clients):
            raise ValueError(
                f"{self.name!r}: {len(ids)} client ids for {len(clients)} clients; give one id per client."
            )
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"{self.name!r}: client ids must be unique; repeated: {_names_preview(dup)}.")
        for cid, c in zip(ids, clients):
            if c.input_shape != shape:
                raise ValueError(
                    f"{self.name!r}: client {cid!r} has samples of shape {c.input_shape}, "
                    f"but `input_shape` is {shape}."
                )
            if c.n_train == 0:
                raise ValueError(
                    f"{self.name!r}: client {cid!r} has no training samples. Build the data set with "
                    "FederatedDataset.from_clients(...) to drop such clients (with a warning)."
                )
            for split in _SPLITS:
                y = getattr(c, f"y_{split}")
                if y.numel() and (int(y.min()) < 0 or int(y.max()) >= n_classes):
                    bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
                    raise ValueError(
                        f"{self.name!r}: client {cid!r} has label {bad} in `y_{split}`; labels must be in "
                        f"0 .. {n_classes - 1} (n_classes = {n_classes})."
                    )
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "n_classes", n_classes)
        object.__setattr__(self, "clients", clients)
        object.__setattr__(self, "input_shape", shape)
        object.__setattr__(self, "client_ids", ids)

    @classmethod
    def from_clients(
        cls,
        clients: Sequence[ClientData],
        *,
        name: str,
        n_classes: int,
        client_ids: Sequence[str] | None = None,
        input_shape: Sequence[int] | None = None,
        min_train: int = 1,
    ) -> "FederatedDataset":
        """Builds a data set, leaving out (with a warning) clients with too little training data.

        Clients with fewer than ``min_train`` training samples are dropped; one
        ``UserWarning`` names them (and their split sizes). ``client_ids`` defaults to
        ``client_0``, ``client_1``, ... (positions in ``clients``); ``input_shape`` to the
        shape of the first client's samples. ``ValueError`` if no client is left.

        >>> import torch, warnings
        >>> full = ClientData(torch.zeros(3, 2), torch.zeros(3), torch.zeros(1, 2), torch.zeros(1),
        ...                   torch.zeros(1, 2), torch.zeros(1))
        >>> empty = ClientData(torch.zeros(0, 2), torch.zeros(0), torch.zeros(0, 2), torch.zeros(0),
        ...                    torch.zeros(1, 2), torch.zeros(1))
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     data = FederatedDataset.from_clients([full, empty], name="toy", n_classes=2)
        >>> data.client_ids
        ('client_0',)
        >>> print(caught[0].message)
        toy: 1 of 2 clients have fewer than 1 training sample(s) and were left out: client_1 (train 0, val 0, test 1).
        """
        check_positive_int(min_train, name="min_train", minimum=1)
        clients = tuple(clients)
        ids = tuple(f"client_{k}" for k in range(len(clients))) if client_ids is None else tuple(client_ids)
        if len(ids) != len(clients):
            raise ValueError(f"{name!r}: {len(ids)} client ids for {len(clients)} clients; give one id per client.")
        for k, c in enumerate(clients):
            if not isinstance(c, ClientData):
                raise ValueError(f"{name!r}: client {ids[k]!r} must be a ClientData; got {type(c).__name__}.")
        keep = [k for k, c in enumerate(clients) if c.n_train >= min_train]
        dropped = [k for k, c in enumerate(clients) if c.n_train < min_train]
        if dropped:
            described = [
                f"{ids[k]} (train {clients[k].n_train}, val {clients[k].n_val}, test {clients[k].n_test})"
                for k in dropped
            ]
            warnings.warn(
                f"{name}: {len(dropped)} of {len(clients)} clients have fewer than {min_train} training "
                f"sample(s) and were left out: {_names_preview(described)}.",
                UserWarning,
                stacklevel=2,
            )
        if not keep and clients:
            raise ValueError(
                f"{name!r}: every one of the {len(clients)} clients has fewer than {min_train} training "
                "sample(s); no client is left."
            )
        kept = tuple(clients[k] for k in keep) if dropped else clients
        kept_ids = tuple(ids[k] for k in keep) if dropped else ids
        if input_shape is None:
            if not kept:
                raise ValueError(f"{name!r}: a federated data set needs at least one client; got none.")
            input_shape = kept[0].input_shape
        return cls(name=name, clients=kept, n_classes=n_classes, input_shape=tuple(input_shape),
                   client_ids=kept_ids)

    # ------------------------------------------------------------------ shape
    @property
    def n_clients(self) -> int:
        return len(self.clients)

    def sizes(self, split: str = "train") -> list[int]:
        """Number of samples of each client in ``split`` (``"train"``, ``"val"``, ``"test"`` or ``"all"``)."""
        if split == "all":
            return [c.n_samples for c in self.clients]
        if split not in _SPLITS:
            raise ValueError(f"`split` must be one of 'train', 'val', 'test', 'all'; got {split!r}.")
        return [getattr(c, f"n_{split}") for c in self.clients]

    def summary(self) -> str:
        """A few lines: clients, classes, input shape, samples per split, client sizes."""
        totals = {s: sum(self.sizes(s)) for s in _SPLITS}
        lines = [
            f"{self.name}: {self.n_clients} clients, {self.n_classes} classes, input shape {self.input_shape}",
            "  samples: " + ", ".join(f"{s} {totals[s]}" for s in _SPLITS)
            + f" (total {sum(totals.values())})",
        ]
        for split in ("all", "train"):
            sizes = np.asarray(self.sizes(split))
            label = "client size (all splits)" if split == "all" else "client size (train)     "
            lines.append(
                f"  {label}: min {sizes.min()}, median {np.median(sizes):g}, max {sizes.max()}"
            )
        return "\n".join(lines)

    def subset(self, indices: Sequence[int]) -> "FederatedDataset":
        """The data set with only the clients at positions ``indices`` (in that order)."""
        idx = [int(i) for i in (indices.tolist() if isinstance(indices, (Tensor, np.ndarray)) else indices)]
        if not idx:
            raise ValueError("`indices` must select at least one client.")
        for i in idx:
            if not 0 <= i < self.n_clients:
                raise ValueError(f"client index {i} is out of range for {self.n_clients} clients.")
        if len(set(idx)) != len(idx):
            raise ValueError(f"`indices` must not repeat a client; got {idx}.")
        return FederatedDataset(
            name=self.name,
            clients=tuple(self.clients[i] for i in idx),
            n_classes=self.n_classes,
            input_shape=self.input_shape,
            client_ids=tuple(self.client_ids[i] for i in idx),
        )

    def __repr__(self) -> str:
        return (
            f"FederatedDataset(name={self.name!r}, n_clients={self.n_clients}, n_classes={self.n_classes}, "
            f"input_shape={self.input_shape}, samples={sum(self.sizes('all'))})"
        )


# ---------------------------------------------------------------------- helpers
def _check_split(split: Sequence[float]) -> tuple[float, float, float]:
    try:
        f = tuple(float(s) for s in split)
    except (TypeError, ValueError):
        raise ValueError(f"`split` must be three numbers (train, val, test); got {split!r}.") from None
    if len(f) != 3 or not all(math.isfinite(s) and s >= 0 for s in f) or f[0] <= 0:
        raise ValueError(
            f"`split` must be three non-negative fractions (train, val, test) with train > 0; got {split!r}."
        )
    if abs(sum(f) - 1.0) > 1e-6:
        raise ValueError(f"`split` fractions must sum to 1; they sum to {sum(f):.8g}.")
    empty = [name for name, frac in zip(("validation", "test"), f[1:]) if frac == 0]
    if empty:
        raise ValueError(
            f"`split` = {tuple(split)} gives no client {' or '.join(empty)} samples, but each client's model is "
            "chosen on its validation samples and scored on its test samples; give both a positive fraction, "
            "e.g. split = (0.6, 0.2, 0.2)."
        )
    return f  # type: ignore[return-value]


def _check_splits_filled(data: "FederatedDataset", split: Sequence[float], sizes: str) -> "FederatedDataset":
    """Refuses a data set where the fractions ``split`` left every client without validation or
    without test samples (fractions too small for the clients' sizes)."""
    for name, k in (("validation", "val"), ("test", "test")):
        if not any(data.sizes(k)):
            raise ValueError(
                f"{data.name}: `split` = {tuple(split)} leaves every client without {name} samples ({sizes}); "
                "each client's model is chosen on its validation samples and scored on its test samples. "
                "Raise the validation and test fractions, or the samples per client."
            )
    return data


def _split_counts(n: int, fractions: Sequence[float]) -> list[int]:
    """``n`` split into parts as close as possible to ``n * fractions`` (largest remainders).

    >>> _split_counts(100, (0.6, 0.2, 0.2)), _split_counts(7, (0.6, 0.2, 0.2)), _split_counts(1, (0.6, 0.2, 0.2))
    ([60, 20, 20], [4, 2, 1], [1, 0, 0])
    """
    exact = [n * f for f in fractions]
    counts = [math.floor(e + 1e-9) for e in exact]
    remainders = [e - c for e, c in zip(exact, counts)]
    for k in sorted(range(len(counts)), key=lambda k: -remainders[k])[: n - sum(counts)]:
        counts[k] += 1
    return counts


def _client_from_arrays(x: np.ndarray, y: np.ndarray, split: Sequence[float], rng: np.random.Generator,
                        *, divisor: float | None = None) -> ClientData:
    """Shuffles one client's samples and cuts them into train/val/test by ``split``."""
    order = rng.permutation(len(y))
    n_train, n_val, _ = _split_counts(len(y), split)
    parts = np.split(order, [n_train, n_train + n_val])

    def feats(idx: np.ndarray) -> Tensor:
        a = x[idx].astype(np.float32)
        if divisor is not None:
            a /= np.float32(divisor)
        return torch.from_numpy(a)

    def labs(idx: np.ndarray) -> Tensor:
        return torch.from_numpy(y[idx].astype(np.int64))

    return ClientData(feats(parts[0]), labs(parts[0]), feats(parts[1]), labs(parts[1]),
                      feats(parts[2]), labs(parts[2]))


def _numpy_rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, torch.Generator):
        return np.random.default_rng(derive_seed(seed))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"`seed` must be an int, a numpy Generator or a torch.Generator; got {seed!r}.")
    return np.random.default_rng(int(seed))


def _check_fraction_number(value, *, name: str, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number; got {value!r}.")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"`{name}` must be {'positive' if positive else 'non-negative'}; got {value!r}.")
    return float(value)


# ---------------------------------------------------------------------- Dirichlet split
def dirichlet_label_split(labels, n_clients: int, concentration: float, seed=0) -> list[np.ndarray]:
    """Partitions sample indices over clients with a Dirichlet label skew.

    The usual recipe (Hsu, Qi & Brown 2019; Yurochkin et al. 2019): for each class ``c``
    (in increasing order) the indices with label ``c`` are shuffled, proportions
    ``p ~ Dirichlet(concentration * 1_n_clients)`` are drawn, and the shuffled indices are
    cut at ``floor(cumsum(p) * n_c)``, client ``k`` taking the ``k``-th piece. Every index
    goes to exactly one client. Small ``concentration`` (e.g. 0.1) gives each client a few
    dominant classes; large (e.g. 100) gives nearly the global label distribution. Client
    sizes are random too, and a client may receive nothing (no resampling is done).

    Args:
        labels: ``[N]`` integer labels (array-like or tensor); a non-integer label is refused
            with a ``ValueError``.
        n_clients: number of parts.
        concentration: the Dirichlet parameter (> 0).
        seed: an int, a ``numpy.random.Generator`` (drawn from, so it advances) or a
            ``torch.Generator`` (a numpy seed is derived from it).

    Returns:
        ``n_clients`` sorted ``int64`` index arrays.

    >>> parts = dirichlet_label_split([0, 0, 0, 1, 1, 1, 2, 2], n_clients=3, concentration=0.5, seed=0)
    >>> len(parts), sorted(int(i) for p in parts for i in p)
    (3, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    check_positive_int(n_clients, name="n_clients")
    concentration = _check_fraction_number(concentration, name="concentration")
    y = _as_labels(labels, what="`labels`").detach().cpu().numpy()  # integer class labels, a vector [N]
    rng = _numpy_rng(seed)
    pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        p = rng.dirichlet(np.full(n_clients, concentration))
        cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
        for k, part in enumerate(np.split(idx, np.clip(cuts, 0, len(idx)))):
            pieces[k].append(part)
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, dtype=np.int64) for p in pieces]


# ---------------------------------------------------------------------- FedProx synthetic
def fedprox_synthetic(
    alpha: float,
    beta: float,
    *,
    n_clients: int = 30,
    dim: int = 60,
    n_classes: int = 10,
    samples_per_client: int = 100,
    size_distribution: str = "equal",
    max_samples_per_client: int = POWER_LAW_MAX_SAMPLES,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> FederatedDataset:
    """FedProx's synthetic(alpha, beta) data: a softmax-regression task per client.

    As in ``data/synthetic_*/generate_synthetic.py`` of ``litian96/FedProx`` (and MosT's
    copy, ``data/synthetic/generate_synthetic.py``), for each client ``k``:

    * ``u_k ~ N(0, alpha^2)``, ``W_k ~ N(u_k, 1)`` (``[dim, n_classes]``, each entry),
      ``b_k ~ N(u_k, 1)`` (``[n_classes]``);
    * ``B_k ~ N(0, beta^2)``, ``v_k ~ N(B_k, 1)`` (``[dim]``, each coordinate);
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
    alpha = _check_fraction_number(alpha, name="alpha", positive=False)
    beta = _check_fraction_number(beta, name="beta", positive=False)
    check_positive_int(n_clients, name="n_clients")
    check_positive_int(dim, name="dim")
    check_positive_int(n_classes, name="n_classes", minimum=2)
    check_positive_int(samples_per_client, name="samples_per_client")
    check_positive_int(max_samples_per_client, name="max_samples_per_client")
    split = _check_split(split)
    rng = _numpy_rng(seed)

    if size_distribution == "equal":
        sizes = np.full(n_clients, samples_per_client, dtype=np.int64)
    elif size_distribution == "power_law":
        if max_samples_per_client < samples_per_client:
            raise ValueError(
                f"`max_samples_per_client` ({max_samples_per_client}) must be >= `samples_per_client` "
                f"({samples_per_client}), the smallest power-law size."
            )
        raw = np.minimum(rng.lognormal(4.0, 2.0, n_clients), float(max_samples_per_client))
        sizes = np.minimum(raw.astype(np.int64) + samples_per_client, max_samples_per_client)
    else:
        raise ValueError(f"`size_distribution` must be 'equal' or 'power_law'; got {size_distribution!r}.")

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
        clients.append(_client_from_arrays(x, y, split, rng))
    width = max(5, len(str(n_clients - 1)))
    data = FederatedDataset.from_clients(
        clients,
        name=f"synthetic({alpha:g}, {beta:g})",
        n_classes=n_classes,
        client_ids=[f"f_{k:0{width}d}" for k in range(n_clients)],
        input_shape=(dim,),
    )
    return _check_splits_filled(data, split, f"clients of {int(sizes.min())} to {int(sizes.max())} samples")


# ---------------------------------------------------------------------- FEMNIST (LEAF)
_FEMNIST_CLASSES = 62
_FEMNIST_PIXELS = 784
_FEMNIST_HOW = (
    "Expected a LEAF FEMNIST directory with subfolders train/ and test/ holding LEAF JSON files "
    "(*.json or *.json.gz: {\"users\": [...], \"num_samples\": [...], \"user_data\": {user: {\"x\": [[784 floats]], "
    "\"y\": [ints]}}}), as written by LEAF's data/femnist/preprocess.sh (https://github.com/TalwalkarLab/leaf). "
    f"Pass that directory as `load_femnist(path)` or set the environment variable {FEMNIST_ENV} to it."
)


def _leaf_files(directory: Path, split: str, source: str) -> list[Path]:
    for part in ("train", "test"):
        if not (directory / part).is_dir():
            raise FileNotFoundError(
                f"FEMNIST: {os.path.abspath(directory / part)} does not exist; {os.path.abspath(directory)}{source} "
                f"must have subfolders train/ and test/. {_FEMNIST_HOW}"
            )
    sub = directory / split
    files = sorted(p for p in sub.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        raise FileNotFoundError(f"FEMNIST: no *.json or *.json.gz files in {os.path.abspath(sub)}. {_FEMNIST_HOW}")
    return files


def _read_leaf_file(file: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{user: (x [n, 784] float32, y [n] int64)}`` of one LEAF JSON file, checked."""
    try:
        if file.name.endswith(".gz"):
            with gzip.open(file, "rt", encoding="utf-8") as handle:
                blob = json.load(handle)
        else:
            with open(file, encoding="utf-8") as handle:
                blob = json.load(handle)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a readable LEAF JSON file ({exc}).") from exc
    if not isinstance(blob, dict):
        raise ValueError(f"{file}: a LEAF JSON file must hold an object; got {type(blob).__name__}.")
    missing = [key for key in ("users", "user_data") if key not in blob]
    if missing:
        raise ValueError(f"{file}: missing key(s) {', '.join(repr(m) for m in missing)}; {_FEMNIST_HOW}")
    users, user_data = blob["users"], blob["user_data"]
    if not isinstance(users, list) or not isinstance(user_data, dict):
        raise ValueError(f"{file}: 'users' must be a list and 'user_data' an object.")
    counts = blob.get("num_samples")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(users)):
        raise ValueError(f"{file}: 'num_samples' must be a list with one count per user ({len(users)} users).")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, user in enumerate(users):
        where = f"{file}, user {user!r}"
        if user in out:
            raise ValueError(f"{where}: listed twice in 'users'.")
        entry = user_data.get(user) if isinstance(user, str) else None
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise ValueError(f"{where}: 'user_data' has no entry with keys 'x' and 'y' for this user.")
        xs, ys = entry["x"], entry["y"]
        if not isinstance(xs, list) or not isinstance(ys, list):
            raise ValueError(f"{where}: 'x' and 'y' must be lists.")
        if len(xs) != len(ys):
            raise ValueError(f"{where}: 'x' has {len(xs)} samples but 'y' has {len(ys)} labels.")
        if counts is not None and counts[i] != len(ys):
            raise ValueError(f"{where}: 'num_samples' says {counts[i]} but 'y' has {len(ys)} labels.")
        try:
            x = (np.asarray(xs, dtype=np.float32).reshape(len(xs), -1) if xs
                 else np.zeros((0, _FEMNIST_PIXELS), np.float32))
            y = np.asarray(ys, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: 'x' must be a list of {_FEMNIST_PIXELS} numbers per sample and 'y' "
                             "a list of integer labels.") from None
        if x.shape[1:] != (_FEMNIST_PIXELS,):
            raise ValueError(f"{where}: each sample of 'x' must have {_FEMNIST_PIXELS} values (28x28); "
                             f"got {x.shape[1]}.")
        if not np.isfinite(x).all():
            raise ValueError(f"{where}: 'x' contains NaN or inf.")
        if y.ndim != 1 or not np.all(y == np.round(y)) or (y.size and (y.min() < 0 or y.max() >= _FEMNIST_CLASSES)):
            raise ValueError(f"{where}: 'y' must hold integer labels in 0 .. {_FEMNIST_CLASSES - 1}.")
        out[user] = (x, y.astype(np.int64))
    return out


def _read_leaf_split(files: list[Path]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    users: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    origin: dict[str, Path] = {}
    for file in files:
        for user, data in _read_leaf_file(file).items():
            if user in users:
                raise ValueError(
                    f"{file}, user {user!r}: this user is also in {origin[user]}; each user must be in one file "
                    "per split (a .json and its .json.gz side by side?)."
                )
            users[user], origin[user] = data, file
    return users


def load_femnist(
    path: str | os.PathLike | None = None,
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
    min_train: int = 1,
    ink: bool = False,
) -> FederatedDataset:
    """LEAF FEMNIST: one client per writer, 62 classes, ``x`` of shape ``(1, 28, 28)``.

    Args:
        path: a directory with subfolders ``train/`` and ``test/``, each holding LEAF JSON
            files (``*.json`` or gzipped ``*.json.gz``). ``None`` reads the environment
            variable ``MOST_FEMNIST``.
        val_fraction: share of each writer's LEAF training samples moved to the validation
            split (``round(val_fraction * n)``, at most ``n - 1``), chosen at random; in (0, 1)
            (a writer with very few samples may still get none).
        seed: seeds the validation split (writers in sorted order, one numpy generator).
        min_train: writers with fewer training samples (after the validation split) are
            left out with a warning naming them.
        ink: return ``1 - pixel`` (ink 1, background 0: MNIST's convention, which models
            train better on; ``most bench federated`` uses it).

    Each writer's LEAF train samples give ``train`` and ``val``; its LEAF test samples are
    ``test``. Only writers present in both ``train/`` and ``test/`` are kept; the others
    are left out with one warning giving their number (the ``femnist_leaf_sf005`` subset
    beside this repository has 105 writers with both and 79 whose train shard is missing).
    Clients are sorted by writer id. Pixels are kept as LEAF stores them (floats in
    [0, 1], background 1.0; with ``ink=True`` inverted to MNIST's convention), as ``float32``.

    Raises ``FileNotFoundError`` naming the path when the directory, a subfolder or its
    JSON files are missing, and ``ValueError`` naming the file and user for malformed
    JSON (missing keys, ``x``/``y`` length mismatch, wrong sample size, bad labels).
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise ValueError(f"`val_fraction` must be a number in (0, 1): each writer's model is chosen on its validation "
                         f"samples; got {val_fraction!r}.")
    check_positive_int(min_train, name="min_train")
    ink = check_bool(ink, name="ink")
    directory, source = _resolve_dir(path, FEMNIST_ENV, "FEMNIST data", _FEMNIST_HOW)
    train_files = _leaf_files(directory, "train", source)
    test_files = _leaf_files(directory, "test", source)
    train = _read_leaf_split(train_files)
    test = _read_leaf_split(test_files)

    writers = sorted(set(train) & set(test))
    only_test = sorted(set(test) - set(train))
    only_train = sorted(set(train) - set(test))
    if only_test or only_train:
        parts = []
        if only_test:
            parts.append(f"{len(only_test)} writer(s) have test data but no training data "
                         f"({_names_preview(only_test, 5)})")
        if only_train:
            parts.append(f"{len(only_train)} writer(s) have training data but no test data "
                         f"({_names_preview(only_train, 5)})")
        warnings.warn(
            f"FEMNIST {os.path.abspath(directory)}: {'; '.join(parts)}; they were left out, "
            f"{len(writers)} writers with both are kept.",
            UserWarning,
            stacklevel=2,
        )
    if not writers:
        raise ValueError(f"FEMNIST {os.path.abspath(directory)}: no writer has both training and test data.")

    rng = _numpy_rng(seed)
    shape = (1, 28, 28)
    clients = []
    for user in writers:
        x, y = train[user]
        n = len(y)
        n_val = min(int(math.floor(val_fraction * n + 0.5)), max(n - 1, 0))
        order = rng.permutation(n)
        tr, va = order[: n - n_val], order[n - n_val :]
        xt, yt = test[user]
        if ink:
            x, xt = 1 - x, 1 - xt
        clients.append(ClientData(
            torch.from_numpy(x[tr].reshape(-1, *shape)), torch.from_numpy(y[tr]),
            torch.from_numpy(x[va].reshape(-1, *shape)), torch.from_numpy(y[va]),
            torch.from_numpy(xt.reshape(-1, *shape)), torch.from_numpy(yt),
        ))
    return FederatedDataset.from_clients(
        clients, name="femnist", n_classes=_FEMNIST_CLASSES, client_ids=writers, input_shape=shape,
        min_train=min_train,
    )


# ---------------------------------------------------------------------- Fashion-MNIST
_FASHION_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
_FASHION_HOW = (
    "Install Debian's package (`apt-get install dataset-fashion-mnist`, files in "
    f"{FASHION_MNIST_DEFAULT_DIR}) or download the four files from "
    "https://github.com/zalandoresearch/fashion-mnist and set the environment variable "
    f"{FASHION_MNIST_ENV} to their directory (or pass it as `load_fashion_mnist(path)`)."
)


def _read_idx(file: Path) -> np.ndarray:
    """An idx file (gzipped or not) of unsigned bytes, as a ``uint8`` array."""
    try:
        opener = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as exc:
        raise ValueError(f"{file}: cannot be read as a{' gzipped' if file.name.endswith('.gz') else 'n'} "
                         f"idx file ({exc}).") from exc
    if len(raw) < 4:
        raise ValueError(f"{file}: too short for an idx header ({len(raw)} bytes).")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code != 0x08 or ndim == 0:
        raise ValueError(f"{file}: not an idx file of unsigned bytes (magic {raw[:4].hex()}; expected 000008xx).")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{file}: truncated idx header.")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        raise ValueError(f"{file}: the header announces {dims} = {expected} bytes of data; the file has "
                         f"{len(raw) - header}.")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _fashion_file(directory: Path, name: str) -> Path | None:
    for candidate in (directory / name, directory / name[: -len(".gz")]):
        if candidate.is_file():
            return candidate
    return None


def load_fashion_mnist(
    path: str | os.PathLike | None = None,
    *,
    n_clients: int = 100,
    concentration: float = 0.3,
    samples_per_client: int | None = None,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    rotations: int = 1,
) -> FederatedDataset:
    """Fashion-MNIST over ``n_clients`` clients with a Dirichlet(``concentration``) label skew.

    Args:
        path: the directory with ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
            ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz`` (uncompressed
            files without ``.gz`` also work). ``None``: the environment variable
            ``MOST_FASHION_MNIST``, else ``/usr/share/datasets/fashion-mnist`` (Debian's
            ``dataset-fashion-mnist``).
        n_clients: number of clients before empty ones are dropped.
        concentration: Dirichlet parameter of :func:`dirichlet_label_split` (smaller: more skew).
        samples_per_client: ``None`` uses all 70000 images; otherwise
            ``n_clients * samples_per_client`` images are first drawn uniformly at random
            (without replacement) from the pool, so clients have that many samples *on
            average* (sizes still vary with the Dirichlet draws) -- small CPU runs.
        split: each client's ``train:val:test`` fractions, all positive (a client with very few
            samples may still get an empty validation or test split, but not every client).
        seed: one ``np.random.default_rng(seed)`` drives the subsample, the label split and
            the per-client shuffles.
        rotations: r in 1..4. Client k's images (all three splits) are turned by
            ``90 * (k mod r)`` degrees, so the clients fall into r equal groups that need
            different models (the rotated-image clusters of IFCA's experiments, Ghosh et al.
            2020). ``1`` (default): no rotation; the data are the same for every r but for
            the turn.

    The official train (60000) and test (10000) images are pooled before splitting, so
    each client's test split follows its own label distribution. Pixels are scaled to
    [0, 1] (``/ 255``), shape ``(1, 28, 28)``, ``float32``; 10 classes. Clients that get no
    training sample are left out with a warning naming them. Client ids: ``client_000``,
    ``client_001``, ... (positions before dropping).

    Raises ``FileNotFoundError`` naming the directory and each missing file (with how to
    get them), and ``ValueError`` naming the file for a malformed idx file.
    """
    check_positive_int(n_clients, name="n_clients")
    concentration = _check_fraction_number(concentration, name="concentration")
    if samples_per_client is not None:
        check_positive_int(samples_per_client, name="samples_per_client")
    split = _check_split(split)
    if isinstance(rotations, bool) or not isinstance(rotations, (int, np.integer)) or not 1 <= rotations <= 4:
        raise ValueError(f"`rotations` must be a whole number from 1 to 4 (quarter turns); got {rotations!r}.")
    directory, source = _resolve_dir(path, FASHION_MNIST_ENV, "Fashion-MNIST data", _FASHION_HOW,
                                     default=FASHION_MNIST_DEFAULT_DIR)
    found = {name: _fashion_file(directory, name) for name in _FASHION_FILES}
    missing = [name for name, f in found.items() if f is None]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST: {os.path.abspath(directory)}{source} lacks {', '.join(missing)}. {_FASHION_HOW}"
        )
    arrays = {name: _read_idx(f) for name, f in found.items()}  # type: ignore[arg-type]
    images, labels = [], []
    for img_name, lab_name in (_FASHION_FILES[:2], _FASHION_FILES[2:]):
        img, lab = arrays[img_name], arrays[lab_name]
        if img.ndim != 3 or img.shape[1:] != (28, 28):
            raise ValueError(f"{found[img_name]}: expected images of shape [N, 28, 28]; got {img.shape}.")
        if lab.ndim != 1 or lab.shape[0] != img.shape[0]:
            raise ValueError(f"{found[lab_name]}: expected {img.shape[0]} labels (one per image in "
                             f"{found[img_name].name}); got shape {lab.shape}.")
        if lab.size and lab.max() > 9:
            raise ValueError(f"{found[lab_name]}: labels must be in 0 .. 9; found {int(lab.max())}.")
        images.append(img)
        labels.append(lab)
    x_all = np.concatenate(images)
    y_all = np.concatenate(labels)

    rng = _numpy_rng(seed)
    if samples_per_client is None:
        pool = np.arange(len(y_all))
    else:
        total = n_clients * samples_per_client
        if total > len(y_all):
            raise ValueError(
                f"`n_clients * samples_per_client` = {total} exceeds the {len(y_all)} Fashion-MNIST images; "
                "lower one of them (or use samples_per_client=None for all images)."
            )
        pool = np.sort(rng.choice(len(y_all), size=total, replace=False))
    parts = dirichlet_label_split(y_all[pool], n_clients, concentration, seed=rng)
    clients = []
    for k, part in enumerate(parts):
        idx = pool[part]
        x = np.rot90(x_all[idx], k % rotations, axes=(1, 2))  # zero turns: the images as they are
        clients.append(_client_from_arrays(x[:, None], y_all[idx], split, rng, divisor=255))
    width = len(str(n_clients - 1))
    data = FederatedDataset.from_clients(
        clients,
        name=f"fashion_mnist(dirichlet {concentration:g}" + (f", {rotations} rotations)" if rotations > 1 else ")"),
        n_classes=10,
        client_ids=[f"client_{k:0{max(width, 3)}d}" for k in range(n_clients)],
        input_shape=(1, 28, 28),
    )
    sizes = data.sizes("all")
    return _check_splits_filled(data, split, f"clients of {min(sizes)} to {max(sizes)} samples")
