"""LEAF FEMNIST (one client per writer) from LEAF's JSON files."""

from __future__ import annotations

import gzip
import json
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..._paths import resolve_dir as _resolve_dir
from ..._validation import check_bool, check_positive_int
from ._dataset import ClientData, FederatedDataset, names_preview, numpy_rng
from ._fashion_mnist import label_groups_of

__all__ = ["load_femnist", "FEMNIST_ENV"]

#: Environment variable read by :func:`load_femnist` when no path is given.
FEMNIST_ENV = "MOST_FEMNIST"

_FEMNIST_CLASSES = 62
_FEMNIST_PIXELS = 784
_FEMNIST_SHAPE = (1, 28, 28)
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
    label_groups: Sequence[int] = (),
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
        label_groups: the sizes of 2 or more groups of writers (contiguous blocks in sorted
            writer order, summing to the number of writers with both splits: 105 in the
            ``femnist_leaf_sf005`` subset) whose labels are relabelled by a permutation of the
            62 classes of their own (concept shift, as
            :func:`~most.federated.data.load_fashion_mnist`'s ``label_groups``): group 0 keeps
            the labels, group g > 0 maps class c to ``perm_g[c]``, drawn from ``seed`` apart
            from the validation split's draws. The dataset's
            :attr:`~FederatedDataset.groups` records each writer's group. Empty (default): no
            relabelling.

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

    writers = _writers_in_both(train, test, directory)
    try:
        relabel = label_groups_of(label_groups, len(writers), seed, n_classes=_FEMNIST_CLASSES)
    except ValueError as exc:
        raise ValueError(f"FEMNIST at {os.path.abspath(directory)} has {len(writers)} writers with both splits: "
                         f"{exc}") from None
    clients = _writer_clients(writers, train, test, val_fraction, numpy_rng(seed), ink)
    name = "femnist"
    if relabel is not None:
        groups, perms = relabel
        clients = [_relabelled(c, torch.from_numpy(perms[g])) for c, g in zip(clients, groups)]
        name += " (label groups " + "/".join(str(int(v)) for v in label_groups) + ")"
    return FederatedDataset.from_clients(
        clients, name=name, n_classes=_FEMNIST_CLASSES, client_ids=writers, input_shape=_FEMNIST_SHAPE,
        min_train=min_train, groups=None if relabel is None else relabel[0], source=os.path.realpath(directory),
    )


def _relabelled(client: ClientData, perm: torch.Tensor) -> ClientData:
    """``client`` with every split's class c called ``perm[c]``."""
    return ClientData(client.x_train, perm[client.y_train], client.x_val, perm[client.y_val],
                      client.x_test, perm[client.y_test])


def _writers_in_both(train: dict, test: dict, directory: Path) -> list[str]:
    """The writers with both training and test data, sorted; one warning (for the caller of
    :func:`load_femnist`) counts those left out."""
    writers = sorted(set(train) & set(test))
    only_test = sorted(set(test) - set(train))
    only_train = sorted(set(train) - set(test))
    if only_test or only_train:
        parts = []
        if only_test:
            parts.append(f"{len(only_test)} writer(s) have test data but no training data "
                         f"({names_preview(only_test, 5)})")
        if only_train:
            parts.append(f"{len(only_train)} writer(s) have training data but no test data "
                         f"({names_preview(only_train, 5)})")
        warnings.warn(
            f"FEMNIST {os.path.abspath(directory)}: {'; '.join(parts)}; they were left out, "
            f"{len(writers)} writers with both are kept.",
            UserWarning,
            stacklevel=3,
        )
    if not writers:
        raise ValueError(f"FEMNIST {os.path.abspath(directory)}: no writer has both training and test data.")
    return writers


def _writer_clients(writers: list[str], train: dict, test: dict, val_fraction: float, rng: np.random.Generator,
                    ink: bool) -> list[ClientData]:
    """One client per writer: a random ``val_fraction`` of its LEAF training samples is ``val``."""
    shape = _FEMNIST_SHAPE
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
    return clients
