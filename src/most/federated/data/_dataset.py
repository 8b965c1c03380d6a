"""The containers of federated data (:class:`ClientData`, :class:`FederatedDataset`) and what
the loaders share: argument checks, per-client train/val/test cuts and the Dirichlet label split."""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from ..._digest import add_tensor
from ..._random import derive_seed
from ..._validation import as_number, check_positive, check_positive_int, check_seed

__all__ = ["ClientData", "FederatedDataset", "dirichlet_label_split"]

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
    t = t.detach().to(torch.float32)  # data, not a leaf of a graph: no gradient flows into it
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


def _as_int(value) -> int | None:
    """``value`` as an ``int`` when it is a whole number: a Python or NumPy integer, or an integer
    0-d tensor or array (not a bool, which is a mask entry or a flag, not a position); else ``None``."""
    if isinstance(value, (Tensor, np.ndarray)):
        if value.ndim != 0:
            return None
        if isinstance(value, np.ndarray):
            return int(value) if value.dtype.kind in "iu" else None
        integral = not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool
        return int(value) if integral else None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _is_bool(value) -> bool:
    """Whether ``value`` is a Python or NumPy bool, or a boolean 0-d tensor or array."""
    if isinstance(value, Tensor):
        return value.ndim == 0 and value.dtype == torch.bool
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind == "b"
    return isinstance(value, (bool, np.bool_))


def _split_size(split: str) -> property:
    """The property ``n_<split>`` of :class:`ClientData`: the number of samples in ``split``."""
    return property(lambda self: int(getattr(self, f"y_{split}").shape[0]),
                    doc=f"Number of ``{split}`` samples.")


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

    n_train = _split_size("train")
    n_val = _split_size("val")
    n_test = _split_size("test")

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


def names_preview(items: Sequence[str], limit: int = 20) -> str:
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
        groups: the planted group of each client (``0 .. G-1``), for data made with a known
            cluster structure (rotated or relabelled groups), else ``None``. The methods never
            read it; an oracle baseline (:class:`most.federated.methods.Oracle`) and the
            benchmarks' recovery scores do.
        source: the folder the data was read from (absolute), for data loaded from files
            (:func:`~most.federated.load_femnist`, :func:`~most.federated.load_fashion_mnist`,
            whichever of their ``path`` argument or environment variable gave it), else ``None``.
            Not part of :meth:`digest`: the same files in two folders are the same data.

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
    groups: tuple[int, ...] | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        clients = tuple(self.clients)
        if not clients:
            raise ValueError(f"{self.name!r}: a federated data set needs at least one client; got none.")
        for k, c in enumerate(clients):
            if not isinstance(c, ClientData):
                raise ValueError(f"{self.name!r}: client {k} must be a ClientData; got {type(c).__name__}.")
        n_classes = check_positive_int(self.n_classes, name="n_classes")
        try:
            dims = [_as_int(s) for s in self.input_shape]
        except TypeError:  # not iterable
            dims = [None]
        shape = tuple(d for d in dims if d is not None and d >= 0)
        if len(shape) != len(dims):
            raise ValueError(f"`input_shape` must be a tuple of non-negative ints (the shape of one sample, e.g. "
                             f"(60,) or (1, 28, 28)); got {self.input_shape!r}.")
        ids = tuple(self.client_ids)
        if not all(isinstance(i, str) for i in ids):
            raise ValueError(f"{self.name!r}: `client_ids` must be strings; got {ids[:5]!r}...")
        if len(ids) != len(clients):
            raise ValueError(
                f"{self.name!r}: {len(ids)} client ids for {len(clients)} clients; give one id per client."
            )
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"{self.name!r}: client ids must be unique; repeated: {names_preview(dup)}.")
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
        if self.groups is not None:
            object.__setattr__(self, "groups", check_groups(self.groups, len(clients), self.name))

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
        groups: Sequence[int] | None = None,
        source: str | None = None,
    ) -> "FederatedDataset":
        """Builds a data set, leaving out (with a warning) clients with too little training data.

        Clients with fewer than ``min_train`` training samples are dropped; one
        ``UserWarning`` names them (and their split sizes). ``client_ids`` defaults to
        ``client_0``, ``client_1``, ... (positions in ``clients``); ``input_shape`` to the
        shape of the first client's samples; ``groups`` (one per client in ``clients``) keeps
        the groups of the clients that stay; ``source`` is the folder the clients were read from
        (:attr:`source`). ``ValueError`` if no client is left.

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
                f"sample(s) and were left out: {names_preview(described)}.",
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
        if groups is not None:
            groups = check_groups(groups, len(clients), name)
            groups = tuple(groups[k] for k in keep)
        if input_shape is None:
            if not kept:
                raise ValueError(f"{name!r}: a federated data set needs at least one client; got none.")
            input_shape = kept[0].input_shape
        return cls(name=name, clients=kept, n_classes=n_classes, input_shape=tuple(input_shape),
                   client_ids=kept_ids, groups=groups, source=source)

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

    def subset(self, indices: Sequence[int] | Sequence[bool] | np.ndarray | Tensor) -> "FederatedDataset":
        """The data set with only the clients that ``indices`` selects, either

        * client positions ``0 .. n_clients - 1``, in the order given (a sequence of ints, or an
          integer NumPy array or tensor), each at most once; or
        * a boolean mask with one entry per client (a sequence of bools, or a boolean NumPy array
          or tensor), keeping the clients where it is ``True`` in their order, as NumPy and torch
          index with a mask.

        Anything else is refused with a ``ValueError``: a float (``1.7`` is no position), bools
        mixed with ints, a mask of the wrong length, a position out of range or repeated.

        >>> import torch
        >>> def client():
        ...     return ClientData(torch.zeros(2, 1), torch.zeros(2), torch.zeros(1, 1), torch.zeros(1),
        ...                       torch.zeros(1, 1), torch.zeros(1))
        >>> data = FederatedDataset.from_clients([client(), client(), client()], name="toy", n_classes=2)
        >>> data.subset([2, 0]).client_ids, data.subset([False, True, True]).client_ids
        (('client_2', 'client_0'), ('client_1', 'client_2'))
        """
        idx = self._positions(indices)
        if len(set(idx)) != len(idx):
            raise ValueError(f"`indices` must not repeat a client; got {idx}.")
        return FederatedDataset(
            name=self.name,
            clients=tuple(self.clients[i] for i in idx),
            n_classes=self.n_classes,
            input_shape=self.input_shape,
            client_ids=tuple(self.client_ids[i] for i in idx),
            groups=None if self.groups is None else tuple(self.groups[i] for i in idx),
            source=self.source,
        )

    def _positions(self, indices) -> list[int]:
        """The client positions that ``indices`` (positions or a boolean mask) selects, checked."""
        n = self.n_clients
        if isinstance(indices, (Tensor, np.ndarray)) and indices.ndim != 1:
            raise ValueError(f"`indices` must be a 1-D sequence of client positions or a boolean mask of {n} entries; "
                             f"got {'a tensor' if isinstance(indices, Tensor) else 'an array'} of shape "
                             f"{tuple(indices.shape)}.")
        if isinstance(indices, (str, bytes)) or not hasattr(indices, "__iter__"):
            one = f" For one client, pass a list: [{indices!r}]." if _as_int(indices) is not None else ""
            raise ValueError(f"`indices` must be a sequence of client positions (e.g. [0, 2]) or a boolean mask of {n} "
                             f"entries; got {indices!r}.{one}")
        values = indices.tolist() if isinstance(indices, (Tensor, np.ndarray)) else list(indices)
        if not values:
            raise ValueError("`indices` must select at least one client; got an empty sequence.")
        flags = [_is_bool(v) for v in values]
        if all(flags):  # a boolean mask
            if len(values) != n:
                raise ValueError(f"`indices` is a boolean mask of {len(values)} entries, but the data set has {n} "
                                 "clients; a mask needs one entry per client.")
            idx = [k for k, keep in enumerate(values) if bool(keep)]
            if not idx:
                raise ValueError(f"`indices` is a boolean mask that selects none of the {n} clients; set at least "
                                 "one entry to True.")
            return idx
        if any(flags):
            bad = values[flags.index(True)]
            raise ValueError(f"`indices` mixes booleans (e.g. {bad!r}) with client positions; give either positions "
                             f"(ints) or a boolean mask of {n} entries, not both.")
        idx = []
        for v in values:
            i = _as_int(v)
            if i is None:
                raise ValueError(f"`indices` must hold whole client positions 0 .. {n - 1} (or be a boolean mask); "
                                 f"got {v!r} ({type(v).__name__}). Convert the positions to ints first, e.g. "
                                 "`np.asarray(indices).astype(int)` if they are whole numbers stored as floats.")
            if not 0 <= i < n:
                raise ValueError(f"client index {i} is out of range for {n} clients (positions 0 .. {n - 1}).")
            idx.append(i)
        return idx

    def digest(self) -> str:
        """A short hex digest of the data: the clients' ids, every split's features and labels
        (dtype, shape and bytes), ``n_classes`` and ``groups``; not ``name``, a label. Two data
        sets with the same digest hold the same samples in the same order, however they were
        loaded (e.g. the same files read from two folders); the benchmarks record it with each run
        so that joining results can check their data. Computed once and kept (the data set is
        immutable)."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            h = hashlib.sha256(repr((self.n_classes, self.input_shape, self.client_ids, self.groups)).encode())
            for client in self.clients:
                for split in _SPLITS:
                    for t in (getattr(client, f"x_{split}"), getattr(client, f"y_{split}")):
                        add_tensor(h, t)
            cached = h.hexdigest()[:16]
            object.__setattr__(self, "_digest", cached)
        return cached

    def __repr__(self) -> str:
        return (
            f"FederatedDataset(name={self.name!r}, n_clients={self.n_clients}, n_classes={self.n_classes}, "
            f"input_shape={self.input_shape}, samples={sum(self.sizes('all'))})"
        )


# ---------------------------------------------------------------------- helpers
def check_groups(groups, n_clients: int | None, name: str) -> tuple[int, ...]:
    """``groups`` as a tuple of non-negative ints, one per client: ``n_clients`` of them, or
    (``None``) any number but none."""
    values = groups.tolist() if isinstance(groups, (Tensor, np.ndarray)) else groups
    try:
        out = tuple(values)
    except TypeError:
        raise ValueError(f"{name!r}: `groups` must be one group index per client; got {groups!r}.") from None
    if n_clients is None and not out:
        raise ValueError(f"{name!r}: `groups` is empty: give one group index per client (e.g. dataset.groups).")
    if n_clients is not None and len(out) != n_clients:
        raise ValueError(f"{name!r}: `groups` has {len(out)} entries for {n_clients} clients; give one per client.")
    checked = []
    for g in out:
        k = _as_int(g)
        if k is None or k < 0:
            raise ValueError(f"{name!r}: `groups` must hold non-negative whole numbers (group indices); got {g!r}.")
        checked.append(k)
    return tuple(checked)


def check_split(split: Sequence[float]) -> tuple[float, float, float]:
    """``split`` as three floats (train, val, test): positive fractions summing to 1 (each client
    needs samples of all three). Python and NumPy reals and 0-d real tensors are accepted (so is a
    NumPy array or tensor of three); strings and bools are refused with a ``ValueError``."""
    kind = "three numbers (train, val, test)"
    if isinstance(split, (str, bytes)) or not hasattr(split, "__iter__"):
        raise ValueError(f"`split` must be {kind}; got {split!r}.")
    values = split.tolist() if isinstance(split, (Tensor, np.ndarray)) else list(split)
    if not isinstance(values, list) or len(values) != 3:
        raise ValueError(f"`split` must be {kind}; got {split!r}.")
    train, val, test = (float(as_number(s, name="split", kind=kind)) for s in values)
    f = (train, val, test)
    if not all(math.isfinite(s) and s >= 0 for s in f) or f[0] <= 0:
        raise ValueError(
            f"`split` must be three non-negative fractions (train, val, test) with train > 0; got {split!r}."
        )
    if abs(sum(f) - 1.0) > 1e-6:
        raise ValueError(f"`split` fractions must sum to 1; they sum to {sum(f):.8g}.")
    empty = [name for name, frac in zip(("validation", "test"), f[1:]) if frac == 0]
    if empty:
        raise ValueError(
            f"`split` = {tuple(values)} gives no client {' or '.join(empty)} samples, but each client's model is "
            "chosen on its validation samples and scored on its test samples; give both a positive fraction, "
            "e.g. split = (0.6, 0.2, 0.2)."
        )
    return f


def check_splits_filled(data: "FederatedDataset", split: Sequence[float], sizes: str) -> "FederatedDataset":
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


def split_counts(n: int, fractions: Sequence[float]) -> list[int]:
    """``n`` split into parts as close as possible to ``n * fractions`` (largest remainders).

    >>> split_counts(100, (0.6, 0.2, 0.2)), split_counts(7, (0.6, 0.2, 0.2)), split_counts(1, (0.6, 0.2, 0.2))
    ([60, 20, 20], [4, 2, 1], [1, 0, 0])
    """
    exact = [n * f for f in fractions]
    counts = [math.floor(e + 1e-9) for e in exact]
    remainders = [e - c for e, c in zip(exact, counts)]
    for k in sorted(range(len(counts)), key=lambda k: -remainders[k])[: n - sum(counts)]:
        counts[k] += 1
    return counts


def client_from_arrays(x: np.ndarray, y: np.ndarray, split: Sequence[float], rng: np.random.Generator,
                        *, divisor: float | None = None) -> ClientData:
    """Shuffles one client's samples and cuts them into train/val/test by ``split``."""
    order = rng.permutation(len(y))
    n_train, n_val, _ = split_counts(len(y), split)
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


def numpy_rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, torch.Generator):
        return np.random.default_rng(derive_seed(seed))
    try:
        return np.random.default_rng(check_seed(seed))  # the seeds the rest of the library takes
    except ValueError:
        raise ValueError(f"`seed` must be an int in [0, 2**64), a numpy Generator or a torch.Generator; "
                         f"got {seed!r}.") from None


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
    concentration = check_positive(concentration, name="concentration")
    y = _as_labels(labels, what="`labels`").detach().cpu().numpy()  # integer class labels, a vector [N]
    rng = numpy_rng(seed)
    pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        p = rng.dirichlet(np.full(n_clients, concentration))
        cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
        for k, part in enumerate(np.split(idx, np.clip(cuts, 0, len(idx)))):
            pieces[k].append(part)
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, dtype=np.int64) for p in pieces]
