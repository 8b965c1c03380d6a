"""Fashion-MNIST idx files split over clients with a Dirichlet label skew."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Sequence

import numpy as np

from ..._paths import resolve_dir as _resolve_dir
from ..._validation import check_positive, check_positive_int
from ._dataset import (FederatedDataset, check_split, check_splits_filled,
                       client_from_arrays, numpy_rng, dirichlet_label_split)

__all__ = ["load_fashion_mnist", "FASHION_MNIST_ENV", "FASHION_MNIST_DEFAULT_DIR"]

#: Environment variable read by :func:`load_fashion_mnist` when no path is given.
FASHION_MNIST_ENV = "MOST_FASHION_MNIST"
#: Where Debian's ``dataset-fashion-mnist`` package installs the idx files.
FASHION_MNIST_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"

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


def quarter_turns(rotations, n_clients: int) -> list[int]:
    """Each client's quarter turns: ``k mod r`` for an int r in 1..4, or the index of the client's
    group for a sequence of group sizes (contiguous blocks of clients)."""
    if isinstance(rotations, (int, np.integer)) and not isinstance(rotations, bool):
        if not 1 <= rotations <= 4:
            raise ValueError(f"`rotations` must be a whole number from 1 to 4 (quarter turns); got {rotations!r}.")
        return [k % int(rotations) for k in range(n_clients)]
    if isinstance(rotations, (str, bytes)) or not isinstance(rotations, Sequence):
        raise ValueError(f"`rotations` must be a whole number from 1 to 4, or a sequence of 1 to 4 group sizes "
                         f"summing to n_clients (e.g. (10, 20, 30, 40)); got {rotations!r}.")
    sizes = list(rotations)
    if not 1 <= len(sizes) <= 4 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
                                       for v in sizes):
        raise ValueError(f"`rotations` as group sizes must be 1 to 4 positive whole numbers (one group per quarter "
                         f"turn); got {rotations!r}.")
    if sum(sizes) != n_clients:
        raise ValueError(f"The rotation groups {tuple(int(v) for v in sizes)} hold {sum(sizes)} clients, but "
                         f"n_clients is {n_clients}: give sizes that sum to n_clients.")
    return [g for g, size in enumerate(sizes) for _ in range(int(size))]


def label_groups_of(sizes, n_clients: int, seed: int, n_classes: int = 10) -> tuple[list[int], np.ndarray] | None:
    """Each client's group and the groups' label permutations ``[G, n_classes]`` (row 0 the
    identity), or ``None`` for no label groups. The permutations come from their own generator
    (the seed and a fixed tag), so the other draws of the loader do not move."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise ValueError(f"`label_groups` must be a sequence of group sizes summing to n_clients (e.g. (4, 8, 12, "
                         f"16)); got {sizes!r}.")
    sizes = list(sizes)
    if not sizes:
        return None
    if len(sizes) < 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in sizes):
        raise ValueError(f"`label_groups` must be 2 or more positive whole numbers (the sizes of the groups); "
                         f"got {tuple(sizes)!r}.")
    if sum(sizes) != n_clients:
        raise ValueError(f"The label groups {tuple(int(v) for v in sizes)} hold {sum(sizes)} clients, but n_clients "
                         f"is {n_clients}: give sizes that sum to n_clients.")
    if len(sizes) > 1000:
        raise ValueError(f"`label_groups` gives {len(sizes)} groups; at most 1000 are supported.")
    rng = np.random.default_rng([int(seed), 0x1ABE1])
    perms = [np.arange(n_classes)]
    while len(perms) < len(sizes):  # distinct permutations, none the identity
        p = rng.permutation(n_classes)
        if not any(np.array_equal(p, q) for q in perms):
            perms.append(p)
    groups = [g for g, size in enumerate(sizes) for _ in range(int(size))]
    return groups, np.stack(perms)


def _rotation_label(rotations) -> str:
    if isinstance(rotations, (int, np.integer)):
        return f", {rotations} rotations)" if rotations > 1 else ")"
    return ", rotated groups " + "/".join(str(int(v)) for v in rotations) + ")"


def load_fashion_mnist(
    path: str | os.PathLike | None = None,
    *,
    n_clients: int = 100,
    concentration: float = 0.3,
    samples_per_client: int | None = None,
    split: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
    rotations: int | Sequence[int] = 1,
    label_groups: Sequence[int] = (),
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
            the turn. A sequence of 1 to 4 group sizes summing to ``n_clients`` makes groups
            of those sizes instead: ``(10, 20, 30, 40)`` leaves clients 0-9 as they are and
            turns clients 10-29 by 90 degrees, 30-59 by 180 and 60-99 by 270 (groups of
            unequal size).
        label_groups: the sizes of 2 or more groups of clients (contiguous blocks, summing to
            ``n_clients``) whose labels are relabelled by a permutation of the 10 classes of
            their own (concept shift: the same images, group-specific labels, the standard
            test of clustered federated learning; Ghosh et al. 2020, Sattler et al. 2020).
            Group 0 keeps the labels; group g > 0 maps class c to ``perm_g[c]``, each
            ``perm_g`` a distinct permutation drawn from ``seed`` apart from the other draws,
            so the images of every client are those of the data set without label groups.
            Empty (default): no relabelling. Not together with rotation groups.

    The dataset's :attr:`~FederatedDataset.groups` records each client's group where the
    data has planted groups (rotations, or label groups), for oracles and recovery scores.

    The official train (60000) and test (10000) images are pooled before splitting, so
    each client's test split follows its own label distribution. Pixels are scaled to
    [0, 1] (``/ 255``), shape ``(1, 28, 28)``, ``float32``; 10 classes. Clients that get no
    training sample are left out with a warning naming them. Client ids: ``client_000``,
    ``client_001``, ... (positions before dropping).

    Raises ``FileNotFoundError`` naming the directory and each missing file (with how to
    get them), and ``ValueError`` naming the file for a malformed idx file.
    """
    check_positive_int(n_clients, name="n_clients")
    concentration = check_positive(concentration, name="concentration")
    if samples_per_client is not None:
        check_positive_int(samples_per_client, name="samples_per_client")
    split = check_split(split)
    turns = quarter_turns(rotations, n_clients)
    relabel = label_groups_of(label_groups, n_clients, seed)
    if relabel is not None and max(turns) > 0:
        raise ValueError("Give `rotations` (image groups) or `label_groups` (concept groups), not both.")
    x_all, y_all, directory = _read_fashion(path)
    rng = numpy_rng(seed)
    pool = _pool(len(y_all), n_clients, samples_per_client, rng)
    parts = dirichlet_label_split(y_all[pool], n_clients, concentration, seed=rng)
    clients = []
    for k, part in enumerate(parts):
        idx = pool[part]
        x = np.rot90(x_all[idx], turns[k], axes=(1, 2))  # zero turns: the images as they are
        y = y_all[idx] if relabel is None else relabel[1][relabel[0][k]][y_all[idx]]
        clients.append(client_from_arrays(x[:, None], y, split, rng, divisor=255))
    width = len(str(n_clients - 1))
    groups = relabel[0] if relabel is not None else (turns if max(turns) > 0 else None)
    label = (", label groups " + "/".join(str(int(v)) for v in label_groups) + ")" if relabel is not None
             else _rotation_label(rotations))
    data = FederatedDataset.from_clients(
        clients,
        name=f"fashion_mnist(dirichlet {concentration:g}" + label,
        n_classes=10,
        client_ids=[f"client_{k:0{max(width, 3)}d}" for k in range(n_clients)],
        input_shape=(1, 28, 28),
        groups=groups,
        source=os.path.realpath(directory),
    )
    sizes = data.sizes("all")
    return check_splits_filled(data, split, f"clients of {min(sizes)} to {max(sizes)} samples")


def _read_fashion(path: str | os.PathLike | None) -> tuple[np.ndarray, np.ndarray, Path]:
    """The official train and test images (``uint8`` ``[N, 28, 28]``) and labels, pooled, and the
    folder they were read from."""
    directory, source = _resolve_dir(path, FASHION_MNIST_ENV, "Fashion-MNIST data", _FASHION_HOW,
                                     default=FASHION_MNIST_DEFAULT_DIR)
    candidates = {name: _fashion_file(directory, name) for name in _FASHION_FILES}
    missing = [name for name, f in candidates.items() if f is None]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST: {os.path.abspath(directory)}{source} lacks {', '.join(missing)}. {_FASHION_HOW}"
        )
    found = {name: f for name, f in candidates.items() if f is not None}  # all of them: none is missing
    arrays = {name: _read_idx(f) for name, f in found.items()}
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
    return np.concatenate(images), np.concatenate(labels), directory


def _pool(n_images: int, n_clients: int, samples_per_client: int | None, rng: np.random.Generator) -> np.ndarray:
    """The sorted indices of the images dealt out to the clients: all, or a uniform subsample of
    ``n_clients * samples_per_client``."""
    if samples_per_client is None:
        return np.arange(n_images)
    total = n_clients * samples_per_client
    if total > n_images:
        raise ValueError(
            f"`n_clients * samples_per_client` = {total} exceeds the {n_images} Fashion-MNIST images; "
            "lower one of them (or use samples_per_client=None for all images)."
        )
    return np.sort(rng.choice(n_images, size=total, replace=False))
