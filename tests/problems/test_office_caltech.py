"""Office-Caltech10 loader (most.problems._office_caltech).

Tests marked ``needs_data`` read the real data set at ``../shared/data/office_caltech10``
(relative to the repository root) on small slices (``max_per_domain``); the error paths
and the split helpers run on tiny fake layouts in ``tmp_path`` and need no data.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tests._shared import SHARED_DATA
import torch

from most.problems import OFFICE_CALTECH10_ENV, OfficeCaltech10, load_office_caltech10
from most.problems._office_caltech import (
    OFFICE_CALTECH10_CLASSES,
    OFFICE_CALTECH10_DOMAINS,
    _stratified_split,
    _subsample,
)

DATA = SHARED_DATA / "office_caltech10"
needs_data = pytest.mark.skipif(
    not (DATA / "features" / "surf").is_dir() or not (DATA / "images").is_dir(),
    reason=f"needs the Office-Caltech10 data at {DATA} (features/surf/*.mat and images/); not shipped with the repo",
)

# Per-class image counts of the real data (alphabetical class order), from the folders.
COUNTS = {
    "amazon": [92, 82, 94, 99, 100, 100, 99, 100, 94, 98],
    "caltech10": [151, 110, 100, 138, 85, 128, 133, 94, 87, 97],
    "dslr": [12, 21, 12, 13, 10, 24, 22, 12, 8, 23],
    "webcam": [29, 21, 31, 27, 27, 30, 43, 30, 27, 30],
}
SPLITS = ("train", "val", "test")


def _fake_surf(root: Path, domains=OFFICE_CALTECH10_DOMAINS, n: int = 30, **override) -> Path:
    """A tiny ``features/surf/<domain>.mat`` layout (n rows, 800-d counts, labels 1..10)."""
    from scipy.io import savemat

    folder = root / "features" / "surf"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for d in domains:
        content = {
            "fts": rng.integers(0, 5, size=(n, 800)).astype(np.uint8),
            "labels": (np.arange(n) % 10 + 1).reshape(-1, 1).astype(np.uint8),
        }
        content.update(override)
        savemat(folder / f"{d}.mat", content)
    return root


def _ys(data: OfficeCaltech10, d: str) -> list[torch.Tensor]:
    return [getattr(data, f"y_{s}")[d] for s in SPLITS]


def _xs(data: OfficeCaltech10, d: str) -> list[torch.Tensor]:
    return [getattr(data, f"x_{s}")[d] for s in SPLITS]


# ---------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def surf60() -> OfficeCaltech10:
    return load_office_caltech10(DATA, features="surf", max_per_domain=60, seed=3)


@pytest.fixture(scope="module")
def images60() -> OfficeCaltech10:
    return load_office_caltech10(DATA, features="images", image_size=16, max_per_domain=60, seed=3)


@needs_data
def test_surf_shapes_dtypes_labels(surf60):
    data = surf60
    assert data.domains == OFFICE_CALTECH10_DOMAINS
    assert data.classes == OFFICE_CALTECH10_CLASSES and data.n_classes == 10
    assert data.features == "surf" and data.input_shape == (800,)
    for d in data.domains:
        sizes = [y.shape[0] for y in _ys(data, d)]
        assert sizes == [36, 12, 12]  # 60 * (0.6, 0.2, 0.2)
        for x, y in zip(_xs(data, d), _ys(data, d)):
            assert x.dtype == torch.float32 and x.shape == (y.shape[0], 800)
            assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) <= 9
            assert torch.isfinite(x).all()
        # Stratified subsample of 60: every class kept, roughly in proportion.
        assert torch.cat(_ys(data, d)).unique().tolist() == list(range(10))
    text = data.summary()
    assert "surf" in text and "(800,)" in text
    assert all(re.search(rf"{d}\s+36\s+12\s+12\s+60", text) for d in data.domains)
    assert re.search(r"total\s+144\s+48\s+48\s+240", text)
    assert data.n_samples("val") == {d: 12 for d in data.domains}


@needs_data
def test_images_shapes_dtypes_and_domain_order():
    data = load_office_caltech10(
        DATA, features="images", image_size=12, max_per_domain=20, domains=["webcam", "caltech10"]
    )
    assert data.domains == ("caltech10", "webcam")  # canonical order, whatever the argument's
    assert data.input_shape == (3, 12, 12) and data.features == "images"
    for d in data.domains:
        for x, y in zip(_xs(data, d), _ys(data, d)):
            assert x.dtype == torch.float32 and x.shape == (y.shape[0], 3, 12, 12)
            assert y.dtype == torch.int64 and 0 <= int(y.min()) and int(y.max()) <= 9
            assert torch.isfinite(x).all()
        assert data.mean[d].shape == data.std[d].shape == (3,)
        # Unnormalised pixels are in [0, 1].
        raw = data.x_test[d] * data.std[d].view(1, 3, 1, 1) + data.mean[d].view(1, 3, 1, 1)
        assert float(raw.min()) >= -1e-5 and float(raw.max()) <= 1 + 1e-5
    assert "images" in data.summary() and "(3, 12, 12)" in data.summary()


@needs_data
def test_class_order_matches_folders_and_mat_labels():
    # Folder names, sorted, are the classes of every domain.
    for d in OFFICE_CALTECH10_DOMAINS:
        folders = sorted(p.name for p in (DATA / "images" / d).iterdir() if p.is_dir())
        assert tuple(folders) == OFFICE_CALTECH10_CLASSES
        assert [len(list((DATA / "images" / d / c).glob("*.jpg"))) for c in folders] == COUNTS[d]
    # .mat label k + 1 has exactly as many rows as folder classes[k]: same class order.
    surf = load_office_caltech10(DATA, features="surf")
    for d in surf.domains:
        y = torch.cat(_ys(surf, d))
        assert torch.bincount(y, minlength=10).tolist() == COUNTS[d]


@needs_data
def test_labels_identical_between_surf_and_images(surf60, images60):
    assert surf60.classes == images60.classes
    for d in OFFICE_CALTECH10_DOMAINS:
        for ys, yi in zip(_ys(surf60, d), _ys(images60, d)):
            assert torch.equal(ys, yi)


@needs_data
def test_split_sizes_fractions_and_stratification():
    data = load_office_caltech10(DATA, features="surf", split=(0.5, 0.3, 0.2), seed=1)
    for d in data.domains:
        n = sum(COUNTS[d])
        ys = _ys(data, d)
        for y, f in zip(ys, (0.5, 0.3, 0.2)):
            assert abs(y.shape[0] - n * f) <= 1
            per_class = torch.bincount(y, minlength=10).numpy()
            assert np.all(np.abs(per_class - np.asarray(COUNTS[d]) * f) <= 2)
        assert sum(y.shape[0] for y in ys) == n


@needs_data
def test_split_is_a_partition_of_the_rows():
    # Unnormalise dslr and match every row to the L1-normalised .mat rows: the three
    # parts together are exactly the domain's rows, each once.
    from scipy.io import loadmat

    data = load_office_caltech10(DATA, features="surf", domains="dslr", seed=5)
    fts = loadmat(DATA / "features" / "surf" / "dslr.mat")["fts"].astype(np.float64)
    orig = fts / fts.sum(1, keepdims=True)
    recon = torch.cat(_xs(data, "dslr")).double() * data.std["dslr"].double() + data.mean["dslr"].double()
    dist = torch.cdist(recon, torch.from_numpy(orig))
    best = dist.min(1)
    assert float(best.values.max()) < 1e-5
    # Exact duplicate rows in the file are one class for the count comparison.
    _, canon = np.unique(orig, axis=0, return_inverse=True)
    canon = canon.reshape(-1)
    got = np.bincount(canon[best.indices.numpy()], minlength=canon.max() + 1)
    assert np.array_equal(got, np.bincount(canon))
    # And the labels go with their rows.
    lab = loadmat(DATA / "features" / "surf" / "dslr.mat")["labels"].reshape(-1).astype(np.int64) - 1
    assert np.array_equal(lab[best.indices.numpy()], torch.cat(_ys(data, "dslr")).numpy())


@needs_data
def test_deterministic_by_seed_and_independent_of_other_domains(surf60):
    again = load_office_caltech10(DATA, features="surf", max_per_domain=60, seed=3)
    other = load_office_caltech10(DATA, features="surf", max_per_domain=60, seed=4)
    alone = load_office_caltech10(DATA, features="surf", max_per_domain=60, seed=3, domains=["dslr"])
    for d in OFFICE_CALTECH10_DOMAINS:
        for a, b in zip(_xs(surf60, d) + _ys(surf60, d), _xs(again, d) + _ys(again, d)):
            assert torch.equal(a, b)
        assert not torch.equal(surf60.x_train[d], other.x_train[d])
    assert alone.domains == ("dslr",)
    for a, b in zip(_xs(surf60, "dslr") + _ys(surf60, "dslr"), _xs(alone, "dslr") + _ys(alone, "dslr")):
        assert torch.equal(a, b)


@needs_data
def test_surf_statistics_from_training_split_only(surf60):
    from scipy.io import loadmat

    for d in ("amazon", "dslr"):
        x_tr, x_va = surf60.x_train[d].double(), surf60.x_val[d].double()
        mean, std = surf60.mean[d].double(), surf60.std[d].double()
        assert torch.allclose(x_tr.mean(0), torch.zeros(800, dtype=torch.float64), atol=1e-5)
        pop = x_tr.std(0, unbiased=False)
        constant = std == 1
        assert torch.allclose(pop[~constant], torch.ones(int((~constant).sum()), dtype=torch.float64), atol=1e-4)
        # Unnormalised rows are L1-normalised histograms: non-negative, summing to 1.
        raw_tr, raw_va = x_tr * std + mean, x_va * std + mean
        assert torch.allclose(raw_tr.sum(1), torch.ones(len(raw_tr), dtype=torch.float64), atol=1e-4)
        assert torch.allclose(raw_va.sum(1), torch.ones(len(raw_va), dtype=torch.float64), atol=1e-4)
        assert float(raw_va.min()) > -1e-6
        # The stored statistics are those of the training rows, not of all rows or of val.
        assert torch.allclose(raw_tr.mean(0), mean, atol=1e-6)
        assert torch.allclose(raw_tr.std(0, unbiased=False)[~constant], std[~constant], rtol=1e-4)
        assert not torch.allclose(raw_va.mean(0), mean, atol=1e-4)
        assert not torch.allclose(x_va.mean(0), torch.zeros(800, dtype=torch.float64), atol=1e-2)
        fts = loadmat(DATA / "features" / "surf" / f"{d}.mat")["fts"].astype(np.float64)
        all_mean = torch.from_numpy((fts / fts.sum(1, keepdims=True)).mean(0))
        assert not torch.allclose(all_mean, mean, atol=1e-5)


@needs_data
def test_image_statistics_from_training_split_only(images60):
    for d in images60.domains:
        x_tr, x_va = images60.x_train[d].double(), images60.x_val[d].double()
        assert torch.allclose(x_tr.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(x_tr.transpose(0, 1).reshape(3, -1).std(1, unbiased=False),
                              torch.ones(3, dtype=torch.float64), atol=1e-4)
        assert not torch.allclose(x_va.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-3)
        raw = x_tr * images60.std[d].double().view(1, 3, 1, 1) + images60.mean[d].double().view(1, 3, 1, 1)
        assert torch.allclose(raw.mean((0, 2, 3)), images60.mean[d].double(), atol=1e-5)


@needs_data
def test_env_var_real(monkeypatch):
    monkeypatch.setenv(OFFICE_CALTECH10_ENV, str(DATA))
    data = load_office_caltech10(domains="webcam", max_per_domain=10)
    assert data.domains == ("webcam",) and data.root == str(DATA)


# ---------------------------------------------------------------------- helpers, no data
def test_stratified_split_partition_and_proportions():
    labels = np.repeat(np.arange(10), COUNTS["dslr"])
    for seed in range(5):
        for fractions in ((0.6, 0.2, 0.2), (0.7, 0.15, 0.15), (1 / 3, 1 / 3, 1 / 3)):
            parts = _stratified_split(labels, fractions, np.random.default_rng(seed))
            together = np.concatenate(parts)
            assert np.array_equal(np.sort(together), np.arange(len(labels)))  # disjoint, covering
            for p, f in zip(parts, fractions):
                assert abs(len(p) - len(labels) * f) <= 1
                assert np.all(np.abs(np.bincount(labels[p], minlength=10) - np.asarray(COUNTS["dslr"]) * f) <= 2)
    a = _stratified_split(labels, (0.6, 0.2, 0.2), np.random.default_rng(0))
    b = _stratified_split(labels, (0.6, 0.2, 0.2), np.random.default_rng(0))
    c = _stratified_split(labels, (0.6, 0.2, 0.2), np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_subsample_exact_size_and_stratified():
    labels = np.repeat(np.arange(10), COUNTS["caltech10"])
    for cap in (3, 17, 100, 1000):
        keep = _subsample(labels, cap, np.random.default_rng(0))
        assert len(keep) == cap and len(np.unique(keep)) == cap
        share = np.asarray(COUNTS["caltech10"]) * cap / len(labels)
        assert np.all(np.abs(np.bincount(labels[keep], minlength=10) - share) < 1)
    assert np.array_equal(_subsample(labels, 5000, np.random.default_rng(0)), np.arange(len(labels)))


def test_fake_surf_layout_loads(tmp_path):
    root = _fake_surf(tmp_path, n=30)
    data = load_office_caltech10(root, split=(0.6, 0.2, 0.2))
    assert data.domains == OFFICE_CALTECH10_DOMAINS and data.input_shape == (800,)
    assert [y.shape[0] for y in _ys(data, "amazon")] == [18, 6, 6]


# ---------------------------------------------------------------------- errors, no data
def test_no_path_and_no_env_var(monkeypatch):
    monkeypatch.delenv(OFFICE_CALTECH10_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=rf"no `path` given and {OFFICE_CALTECH10_ENV} is not set") as err:
        load_office_caltech10()
    assert "load_office_caltech10(path)" in str(err.value)


def test_missing_directory_names_path_argument_and_env_var(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    pattern = re.escape(str(missing)) + r" \(the `path` argument\) does not exist"
    with pytest.raises(FileNotFoundError, match=pattern) as err:
        load_office_caltech10(missing)
    assert OFFICE_CALTECH10_ENV in str(err.value) and "load_office_caltech10(path)" in str(err.value)
    monkeypatch.setenv(OFFICE_CALTECH10_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing)) + rf" \(from {OFFICE_CALTECH10_ENV}\)"):
        load_office_caltech10()


def test_missing_surf_file_names_exact_path_before_reading(tmp_path):
    root = _fake_surf(tmp_path, domains=("amazon",))
    # A corrupt file for a domain checked first: the missing file is reported, not the
    # corrupt one, because every path is checked before anything is read.
    (root / "features" / "surf" / "dslr.mat").write_bytes(b"not a mat file")
    missing = root / "features" / "surf" / "caltech10.mat"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing)) + " does not exist"):
        load_office_caltech10(root)
    with pytest.raises(ValueError, match=re.escape(str(root / "features" / "surf" / "dslr.mat"))):
        load_office_caltech10(root, domains=["amazon", "dslr"])
    assert load_office_caltech10(root, domains="amazon").domains == ("amazon",)


def test_missing_image_folders_name_exact_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "images" / "amazon")) + " does not exist"):
        load_office_caltech10(tmp_path, features="images")
    for c in OFFICE_CALTECH10_CLASSES[:-1]:
        (tmp_path / "images" / "dslr" / c).mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "images" / "dslr" / "projector"))):
        load_office_caltech10(tmp_path, features="images", domains="dslr")
    (tmp_path / "images" / "dslr" / "projector").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no image files .* in .*backpack"):
        load_office_caltech10(tmp_path, features="images", domains="dslr")


def test_bad_features(tmp_path):
    with pytest.raises(ValueError, match=r"`features` must be 'surf'.*'images'.*did you mean 'surf'"):
        load_office_caltech10(tmp_path / "nowhere", features="surff")
    with pytest.raises(ValueError, match=r"did you mean 'images'"):
        load_office_caltech10(tmp_path, features="image")
    with pytest.raises(ValueError, match=r"`features` must be"):
        load_office_caltech10(tmp_path, features="GoogleNet1024")


@pytest.mark.parametrize(
    "split, message",
    [
        ((0.5, 0.5), "three positive numbers"),
        ((0.6, 0.2, 0.1, 0.1), "three positive numbers"),
        ((0.8, 0.2, 0.0), "three positive numbers"),
        ((1.0, -0.5, 0.5), "three positive numbers"),
        ((0.6, float("nan"), 0.2), "three positive numbers"),
        ("abc", "three positive numbers"),
        (0.6, "three positive numbers"),
        ((0.6, 0.3, 0.2), "must sum to 1.*1.1"),
    ],
)
def test_bad_split(tmp_path, split, message):
    # Argument errors come first, even with a directory that does not exist.
    with pytest.raises(ValueError, match=rf"`split` .*{message}"):
        load_office_caltech10(tmp_path / "nowhere", split=split)


def test_bad_domains(tmp_path):
    with pytest.raises(ValueError, match=r"unknown domain 'caltech' \(did you mean 'caltech10'\?\)"):
        load_office_caltech10(tmp_path, domains=["amazon", "caltech"])
    with pytest.raises(ValueError, match=r"unknown domain 'Webcam' \(did you mean 'webcam'\?\).*Known domains: amazon"):
        load_office_caltech10(tmp_path, domains="Webcam")
    with pytest.raises(ValueError, match=r"unknown domain 'x'\. Known domains"):
        load_office_caltech10(tmp_path, domains=["x"])
    with pytest.raises(ValueError, match=r"`domains` is empty"):
        load_office_caltech10(tmp_path, domains=[])
    with pytest.raises(ValueError, match=r"'dslr' more than once"):
        load_office_caltech10(tmp_path, domains=["dslr", "amazon", "dslr"])


@pytest.mark.parametrize("size", [0, -3, 2.5, True, "32"])
def test_bad_image_size(tmp_path, size):
    with pytest.raises(ValueError, match=r"`image_size` must be an int >= 1"):
        load_office_caltech10(tmp_path / "nowhere", features="images", image_size=size)


def test_bad_seed_and_max_per_domain(tmp_path):
    with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
        load_office_caltech10(tmp_path, seed=-1)
    with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
        load_office_caltech10(tmp_path, seed=1.5)
    for cap in (0, 2, 10.0):
        with pytest.raises(ValueError, match=r"`max_per_domain` must be an int >= 3"):
            load_office_caltech10(tmp_path, max_per_domain=cap)


def test_split_leaving_a_part_empty(tmp_path):
    root = _fake_surf(tmp_path, domains=("dslr",), n=30)
    with pytest.raises(ValueError, match=r"'dslr' has 4 samples.*leaves its val part empty.*max_per_domain"):
        load_office_caltech10(root, domains="dslr", max_per_domain=4, split=(0.9, 0.05, 0.05))
    data = load_office_caltech10(root, domains="dslr", max_per_domain=5)
    assert [y.shape[0] for y in _ys(data, "dslr")] == [3, 1, 1]


def test_malformed_mat_files(tmp_path):
    root = _fake_surf(tmp_path / "a", domains=("webcam",), labels=np.full((30, 1), 11, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"webcam\.mat: 'labels' must be integers in 1\.\.10"):
        load_office_caltech10(root, domains="webcam")
    from scipy.io import savemat

    folder = tmp_path / "b" / "features" / "surf"
    folder.mkdir(parents=True)
    savemat(folder / "webcam.mat", {"X": np.zeros((3, 800))})
    with pytest.raises(ValueError, match=r"webcam\.mat: expected the keys 'fts' and 'labels'"):
        load_office_caltech10(tmp_path / "b", domains="webcam")
    root = _fake_surf(tmp_path / "c", domains=("webcam",), labels=np.ones((29, 1), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"one row per entry of 'labels'"):
        load_office_caltech10(root, domains="webcam")
