"""Federated data layer (most.federated.data)."""

from __future__ import annotations

import gzip
import json
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from tests._shared import SHARED_DATA
import torch

from most.federated import (
    ClientData,
    FederatedDataset,
    dirichlet_label_split,
    fedprox_synthetic,
    load_fashion_mnist,
    load_femnist,
    mixture_synthetic,
)
from most._paths import resolve_dir
from most.federated.data import FASHION_MNIST_DEFAULT_DIR, FASHION_MNIST_ENV, split_counts

FEMNIST_DIR = SHARED_DATA / "femnist_leaf_sf005"
needs_femnist = pytest.mark.skipif(
    not (FEMNIST_DIR / "train").is_dir(), reason=f"needs the LEAF FEMNIST subset at {FEMNIST_DIR}"
)


_FASHION_HOW = "apt-get install dataset-fashion-mnist, or `make data` and MOST_FASHION_MNIST"
try:  # the loader's own lookup: MOST_FASHION_MNIST, then the default directory
    _FASHION_DIR = resolve_dir(None, FASHION_MNIST_ENV, "Fashion-MNIST data", _FASHION_HOW,
                               default=FASHION_MNIST_DEFAULT_DIR)[0]
    _FASHION_MISSING = (None if (_FASHION_DIR / "train-images-idx3-ubyte.gz").is_file()
                        else f"needs Fashion-MNIST in {_FASHION_DIR} ({_FASHION_HOW})")
except FileNotFoundError as exc:
    _FASHION_MISSING = str(exc)
needs_fashion = pytest.mark.skipif(_FASHION_MISSING is not None, reason=str(_FASHION_MISSING))


def _all_y(client: ClientData) -> torch.Tensor:
    return torch.cat([client.y_train, client.y_val, client.y_test])


def _all_x(client: ClientData) -> torch.Tensor:
    return torch.cat([client.x_train, client.x_val, client.x_test])


def _label_entropy(data: FederatedDataset) -> float:
    """Mean over clients of the entropy of the client's label distribution."""
    out = []
    for c in data.clients:
        p = np.bincount(_all_y(c).numpy(), minlength=data.n_classes) / c.n_samples
        p = p[p > 0]
        out.append(-(p * np.log(p)).sum())
    return float(np.mean(out))


def _client(n_train: int, n_val: int = 1, n_test: int = 1, shape=(2,), label: int = 0) -> ClientData:
    def part(n):
        return torch.randn(n, *shape), torch.full((n,), label)

    return ClientData(*part(n_train), *part(n_val), *part(n_test))


# ---------------------------------------------------------------------- containers
def test_client_data_converts_and_checks():
    c = ClientData(np.zeros((3, 2)), [0, 1, 2], torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0]),
                   torch.zeros(0, 2), torch.zeros(0, dtype=torch.int32))
    assert c.x_train.dtype == c.x_val.dtype == c.x_test.dtype == torch.float32
    assert c.y_train.dtype == c.y_val.dtype == c.y_test.dtype == torch.int64
    assert (c.n_train, c.n_val, c.n_test, c.n_samples) == (3, 1, 0, 4)
    with pytest.raises(ValueError, match="`x_val` has 2 rows but `y_val` has 1"):
        ClientData(torch.zeros(1, 2), [0], torch.zeros(2, 2), [0], torch.zeros(1, 2), [0])
    with pytest.raises(ValueError, match="input shape"):
        ClientData(torch.zeros(1, 2), [0], torch.zeros(1, 3), [0], torch.zeros(1, 2), [0])
    with pytest.raises(ValueError, match="integer class labels"):
        ClientData(torch.zeros(1, 2), [0.5], torch.zeros(1, 2), [0], torch.zeros(1, 2), [0])
    with pytest.raises(ValueError, match="NaN or inf"):
        ClientData(torch.full((1, 2), float("nan")), [0], torch.zeros(1, 2), [0], torch.zeros(1, 2), [0])


def test_dataset_validation():
    good = _client(3)
    with pytest.raises(ValueError, match=r"client 'b' has label 5 in `y_train`; labels must be in 0 \.\. 2"):
        FederatedDataset("toy", (good, _client(2, label=5)), 3, (2,), ("a", "b"))
    with pytest.raises(ValueError, match="client 'b' has samples of shape"):
        FederatedDataset("toy", (good, _client(2, shape=(3,))), 3, (2,), ("a", "b"))
    with pytest.raises(ValueError, match="unique"):
        FederatedDataset("toy", (good, good), 3, (2,), ("a", "a"))
    with pytest.raises(ValueError, match="one id per client"):
        FederatedDataset("toy", (good, good), 3, (2,), ("a",))
    with pytest.raises(ValueError, match="client 'b' has no training samples.*from_clients"):
        FederatedDataset("toy", (good, _client(0)), 3, (2,), ("a", "b"))


def test_empty_client_warns_and_is_excluded():
    clients = [_client(3), _client(0, n_val=2, n_test=2), _client(1), _client(0, n_val=0, n_test=0)]
    with pytest.warns(UserWarning, match=r"2 of 4 clients .* left out: w1 \(train 0, val 2, test 2\), w3 "):
        data = FederatedDataset.from_clients(clients, name="toy", n_classes=2, client_ids=["w0", "w1", "w2", "w3"])
    assert data.client_ids == ("w0", "w2")
    assert data.clients[0] is clients[0] and data.clients[1] is clients[2]
    assert data.input_shape == (2,)
    with pytest.warns(UserWarning, match="fewer than 2 training"):
        assert FederatedDataset.from_clients(clients, name="toy", n_classes=2, min_train=2).client_ids == ("client_0",)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="no client is left"):
        FederatedDataset.from_clients([_client(0)], name="toy", n_classes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when nothing is dropped
        FederatedDataset.from_clients(clients[:1], name="toy", n_classes=2)


def test_subset_and_summary():
    data = fedprox_synthetic(0, 0, n_clients=5, samples_per_client=20)
    sub = data.subset([3, 1])
    assert sub.client_ids == ("f_00003", "f_00001")
    assert sub.clients[0] is data.clients[3]
    assert (sub.n_classes, sub.input_shape, sub.name) == (data.n_classes, data.input_shape, data.name)
    with pytest.raises(ValueError, match="out of range"):
        data.subset([5])
    with pytest.raises(ValueError, match="repeat"):
        data.subset([1, 1])
    text = data.summary()
    assert "5 clients" in text and "10 classes" in text
    assert "train 60, val 20, test 20 (total 100)" in text
    assert "min 20, median 20, max 20" in text


def test_subset_takes_a_boolean_mask_as_numpy_and_torch_do():
    data = fedprox_synthetic(0, 0, n_clients=5, samples_per_client=20)
    keep = [True, False, True, False, True]
    for mask in (keep, np.array(keep), torch.tensor(keep), [np.bool_(k) for k in keep],
                 [torch.tensor(k) for k in keep]):
        sub = data.subset(mask)
        assert sub.client_ids == ("f_00000", "f_00002", "f_00004")  # the kept clients, in their order
        assert [c is data.clients[k] for c, k in zip(sub.clients, (0, 2, 4))] == [True] * 3
    # a mask of two clients is a mask, not the positions 1 and 0
    two = data.subset([0, 1])
    assert two.subset(np.array([True, False])).client_ids == ("f_00000",)
    assert two.subset(torch.tensor([False, True])).client_ids == ("f_00001",)
    with pytest.raises(ValueError, match="boolean mask of 4 entries, but the data set has 5 clients"):
        data.subset(np.array([True, False, True, False]))
    with pytest.raises(ValueError, match="selects none of the 5 clients"):
        data.subset(torch.zeros(5, dtype=torch.bool))


def test_subset_takes_integer_positions_of_any_kind_and_refuses_anything_else():
    data = fedprox_synthetic(0, 0, n_clients=5, samples_per_client=20)
    for positions in ([3, 1], np.array([3, 1]), torch.tensor([3, 1]), [np.int64(3), torch.tensor(1)], (3, 1)):
        assert data.subset(positions).client_ids == ("f_00003", "f_00001")
    for bad, match in [([1.7], r"whole client positions 0 \.\. 4 .*got 1\.7 \(float\)"),
                       (np.array([1.0, 2.0]), r"got 1\.0 \(float\)"),
                       (torch.tensor([0.0]), r"got 0\.0 \(float\)"),
                       ([1, True], r"mixes booleans \(e\.g\. True\) with client positions"),
                       ([np.bool_(False), 2], "mixes booleans"),
                       (["1"], r"got '1' \(str\)"),
                       ([], "at least one client"),
                       (3, r"a sequence of client positions .*got 3\. For one client, pass a list: \[3\]"),
                       ("01", "a sequence of client positions"),
                       (np.array([[0, 1]]), r"1-D .*array of shape \(1, 2\)"),
                       ([-1], "out of range for 5 clients"),
                       ([1, 1], "must not repeat a client")]:
        with pytest.raises(ValueError, match=match):
            data.subset(bad)


def test_dataset_refuses_non_integer_sizes_and_takes_numpy_and_tensor_integers():
    good = _client(3)
    data = FederatedDataset("toy", (good,), torch.tensor(3), (np.int64(2),), ("a",), groups=[torch.tensor(1)])
    assert (data.n_classes, data.input_shape, data.groups) == (3, (2,), (1,))
    assert type(data.n_classes) is int and type(data.input_shape[0]) is int
    for shape in ((2.0,), (True,), ("2",), 2, (-2,)):
        with pytest.raises(ValueError, match="`input_shape` must be a tuple of non-negative ints"):
            FederatedDataset("toy", (good,), 3, shape, ("a",))
    for n_classes in (3.0, True, torch.tensor(3.0)):
        with pytest.raises(ValueError, match="`n_classes` must be an int >= 1"):
            FederatedDataset("toy", (good,), n_classes, (2,), ("a",))
    with pytest.raises(ValueError, match="non-negative whole numbers"):
        FederatedDataset("toy", (good,), 3, (2,), ("a",), groups=[0.5])


def test_split_counts():
    assert split_counts(100, (0.6, 0.2, 0.2)) == [60, 20, 20]
    for n in range(0, 40):
        counts = split_counts(n, (0.6, 0.2, 0.2))
        assert sum(counts) == n
        assert all(abs(c - n * f) < 1 for c, f in zip(counts, (0.6, 0.2, 0.2)))


# ---------------------------------------------------------------------- synthetic
def test_synthetic_shapes_classes_split():
    data = fedprox_synthetic(0.5, 0.5)
    assert (data.n_clients, data.n_classes, data.input_shape) == (30, 10, (60,))
    assert data.client_ids[0] == "f_00000" and len(set(data.client_ids)) == 30
    for c in data.clients:
        assert (c.n_train, c.n_val, c.n_test) == (60, 20, 20)
        assert c.x_train.shape == (60, 60) and c.x_train.dtype == torch.float32
        assert c.y_test.dtype == torch.int64
        y = _all_y(c)
        assert 0 <= int(y.min()) and int(y.max()) < 10
    small = fedprox_synthetic(0, 0, n_clients=3, dim=5, n_classes=3, samples_per_client=10, split=(0.5, 0.3, 0.2))
    assert small.input_shape == (5,) and small.n_classes == 3
    assert [(c.n_train, c.n_val, c.n_test) for c in small.clients] == [(5, 3, 2)] * 3


def test_synthetic_deterministic_per_seed():
    a, b, c = fedprox_synthetic(1, 1, seed=3), fedprox_synthetic(1, 1, seed=3), fedprox_synthetic(1, 1, seed=4)
    for ca, cb in zip(a.clients, b.clients):
        for field in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test"):
            assert torch.equal(getattr(ca, field), getattr(cb, field))
    assert not torch.equal(a.clients[0].x_train, c.clients[0].x_train)
    assert not all(torch.equal(_all_y(ca), _all_y(cc)) for ca, cc in zip(a.clients, c.clients))


def test_synthetic_alpha_does_not_change_labels():
    """u_k shifts every logit equally (as in FedProx's code): same seed and beta, same data."""
    a, b = fedprox_synthetic(0, 1, seed=2), fedprox_synthetic(2, 1, seed=2)
    for ca, cb in zip(a.clients, b.clients):
        assert torch.equal(ca.x_train, cb.x_train) and torch.equal(ca.y_train, cb.y_train)


def test_synthetic_heterogeneity_grows_with_alpha_beta():
    iid_ish = fedprox_synthetic(0, 0, n_clients=200)
    hetero = fedprox_synthetic(1, 1, n_clients=200)
    # Feature shift: the spread over clients of a client's mean feature value is ~ sqrt(1/60) at
    # beta = 0 and ~ beta at beta = 1.
    spread0 = np.std([float(_all_x(c).mean()) for c in iid_ish.clients])
    spread1 = np.std([float(_all_x(c).mean()) for c in hetero.clients])
    assert spread0 < 0.25 and spread1 > 0.6, (spread0, spread1)
    # Label skew: clients' label distributions are more concentrated (lower entropy).
    h0, h1 = _label_entropy(iid_ish), _label_entropy(hetero)
    assert h1 < h0 - 0.05, (h0, h1)


def test_synthetic_covariance_scaling():
    """Within-client variance of coordinate j is Sigma_jj = j^-1.2 (x ~ N(v_k, Sigma))."""
    data = fedprox_synthetic(0, 0, n_clients=30, samples_per_client=200, seed=5)
    resid = torch.cat([_all_x(c) - _all_x(c).mean(0) for c in data.clients]).double()
    dof = sum(c.n_samples - 1 for c in data.clients)
    var = (resid**2).sum(0).numpy() / dof
    j = np.arange(1, 61)
    ratio = var / j**-1.2
    assert np.all(np.abs(ratio - 1) < 0.12), ratio
    slope = np.polyfit(np.log(j), np.log(var), 1)[0]
    assert abs(slope + 1.2) < 0.05, slope


def test_synthetic_power_law_sizes():
    data = fedprox_synthetic(1, 1, n_clients=50, size_distribution="power_law", samples_per_client=50, seed=1)
    sizes = np.array(data.sizes("all"))
    assert sizes.min() >= 50 and sizes.max() <= 2000
    assert len(np.unique(sizes)) > 20 and sizes.max() > 3 * np.median(sizes)
    capped = fedprox_synthetic(1, 1, n_clients=50, size_distribution="power_law", max_samples_per_client=120)
    assert max(capped.sizes("all")) == 120
    equal = fedprox_synthetic(1, 1, n_clients=5)
    assert equal.sizes("all") == [100] * 5


def test_synthetic_bad_arguments():
    with pytest.raises(ValueError, match="size_distribution"):
        fedprox_synthetic(0, 0, size_distribution="zipf")
    with pytest.raises(ValueError, match="model_shift"):
        fedprox_synthetic(-1, 0)
    with pytest.raises(ValueError, match="sum to 1"):
        fedprox_synthetic(0, 0, split=(0.6, 0.2, 0.1))


# ---------------------------------------------------------------------- Dirichlet split
def test_dirichlet_split_partitions_every_index_once():
    labels = np.repeat(np.arange(10), 100)
    parts = dirichlet_label_split(labels, 7, 0.5, seed=1)
    assert len(parts) == 7
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(1000))
    again = dirichlet_label_split(torch.as_tensor(labels), 7, 0.5, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert all(np.all(np.diff(p) > 0) for p in parts)
    from_torch = [dirichlet_label_split(labels, 7, 0.5, seed=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*from_torch))
    with pytest.raises(ValueError, match="concentration"):
        dirichlet_label_split(labels, 7, 0.0)


def test_dirichlet_split_takes_numpy_and_tensor_scalars_and_refuses_what_is_no_positive_number():
    labels = np.repeat(np.arange(4), 25)
    reference = dirichlet_label_split(labels, 5, 0.5, seed=1)
    for concentration in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5)):
        parts = dirichlet_label_split(labels, np.int64(5), concentration, seed=1)
        assert all(np.array_equal(a, b) for a, b in zip(parts, reference))
    assert len(dirichlet_label_split(labels, torch.tensor(5), np.int64(1), seed=1)) == 5
    seeded = dirichlet_label_split(labels, 5, 0.5, seed=torch.tensor(1))  # the seed as a 0-d integer tensor
    assert all(np.array_equal(a, b) for a, b in zip(seeded, reference))
    for bad, match in [(True, "got True"), (np.bool_(True), "got np.True_"), (float("nan"), "got nan"),
                       (np.float32("inf"), "got inf"), ("0.5", r"got '0\.5' \(a str"), (None, "got None"),
                       (torch.tensor(True), "got a tensor .* dtype torch.bool"),
                       (torch.tensor([0.5, 1.0]), r"got a tensor of shape \(2,\)")]:
        with pytest.raises(ValueError, match="`concentration` must be a positive finite number; " + match):
            dirichlet_label_split(labels, 5, bad)
    for bad in (0, np.float32(0.0), torch.tensor(-1.0)):
        with pytest.raises(ValueError, match="`concentration` must be a positive number"):
            dirichlet_label_split(labels, 5, bad)
    for seed in (1.5, True, -1, "3"):
        with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\), a numpy Generator"):
            dirichlet_label_split(labels, 5, 0.5, seed=seed)


def test_loaders_take_numpy_and_tensor_scalars_for_their_shifts_and_split():
    reference = fedprox_synthetic(0.5, 0.5, n_clients=3, samples_per_client=20, seed=0)
    same = fedprox_synthetic(np.float32(0.5), torch.tensor(0.5), n_clients=3, samples_per_client=20, seed=0,
                             split=np.array([0.6, 0.2, 0.2]))
    assert same.digest() == reference.digest()
    for split, match in [(("0.6", "0.2", "0.2"), "a str"), ((True, 0, 0), "got True"), ((0.6, 0.4), "three numbers"),
                         (0.6, "three numbers")]:
        with pytest.raises(ValueError, match="`split` must be three numbers"):
            fedprox_synthetic(0, 0, n_clients=3, split=split)
        with pytest.raises(ValueError, match=match):
            fedprox_synthetic(0, 0, n_clients=3, split=split)
    with pytest.raises(ValueError, match="`model_shift` must be a non-negative finite number; got True"):
        fedprox_synthetic(True, 0, n_clients=3)


def test_dirichlet_smaller_concentration_more_skew():
    labels = np.repeat(np.arange(10), 500)
    global_p = np.full(10, 0.1)

    def skew(concentration: float) -> float:
        parts = dirichlet_label_split(labels, 20, concentration, seed=0)
        tv = [0.5 * np.abs(np.bincount(labels[p], minlength=10) / len(p) - global_p).sum() for p in parts if len(p)]
        return float(np.mean(tv))

    s_small, s_mid, s_large = skew(0.1), skew(1.0), skew(100.0)
    assert s_small > s_mid > s_large
    assert s_small > 0.5 and s_large < 0.1


# ---------------------------------------------------------------------- FEMNIST
def _leaf_blob(users: dict[str, tuple[int, list[int]]]) -> dict:
    """LEAF JSON with ``users[name] = (n_samples, labels)``; x[i] is filled with i / 100."""
    return {
        "users": list(users),
        "num_samples": [n for n, _ in users.values()],
        "user_data": {u: {"x": [[i / 100] * 784 for i in range(n)], "y": y} for u, (n, y) in users.items()},
    }


def _write(path: Path, blob: dict, gz: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(blob)
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)


@pytest.mark.parametrize("gz", [False, True])
def test_femnist_tiny_leaf_round_trip(tmp_path, gz):
    _write(tmp_path / "train" / "a.json", _leaf_blob({"w1": (5, [0, 1, 2, 3, 61]), "w2": (3, [4, 4, 4])}), gz)
    _write(tmp_path / "train" / "b.json", _leaf_blob({"w3": (2, [7, 7]), "w4": (1, [9])}), gz)
    _write(tmp_path / "test" / "a.json", _leaf_blob({"w1": (2, [5, 6]), "w2": (1, [8]), "w3": (1, [1])}), gz)
    with pytest.warns(UserWarning, match=r"1 writer\(s\) have training data but no test data \(w4\)"):
        data = load_femnist(tmp_path, val_fraction=0.4, seed=0)
    assert data.client_ids == ("w1", "w2", "w3")
    assert (data.n_classes, data.input_shape) == (62, (1, 28, 28))
    w1 = data.clients[0]
    assert (w1.n_train, w1.n_val, w1.n_test) == (3, 2, 2)
    assert w1.x_train.shape == (3, 1, 28, 28) and w1.x_train.dtype == torch.float32
    # train + val are w1's LEAF training samples (x[i] == i / 100 everywhere, label list order)
    idx = torch.cat([w1.x_train, w1.x_val])[:, 0, 0, 0].mul(100).round().long()
    assert sorted(idx.tolist()) == [0, 1, 2, 3, 4]
    assert torch.equal(torch.cat([w1.y_train, w1.y_val]), torch.tensor([0, 1, 2, 3, 61])[idx])
    assert w1.y_test.tolist() == [5, 6]
    assert [(c.n_train, c.n_val) for c in data.clients[1:]] == [(2, 1), (1, 1)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_femnist(tmp_path, val_fraction=0.4, min_train=2).client_ids == ("w1", "w2")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "no test data (w4)" in messages[0]
    assert "fewer than 2 training sample(s) and were left out: w3 (train 1, val 1, test 1)" in messages[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inked = load_femnist(tmp_path, val_fraction=0.4, seed=0, ink=True)
    for split in ("train", "val", "test"):  # the same samples in the same order, as 1 - pixel
        assert torch.equal(getattr(inked.clients[0], f"x_{split}"), 1 - getattr(w1, f"x_{split}"))


def test_femnist_label_groups_relabel_each_block_of_writers_by_its_own_permutation(tmp_path):
    labels = [0, 1, 2, 3, 61, 4, 5]
    users = {f"w{k}": (7, labels) for k in range(5)}
    _write(tmp_path / "train" / "a.json", _leaf_blob(users), False)
    _write(tmp_path / "test" / "a.json", _leaf_blob({u: (3, [61, 9, 0]) for u in users}), False)
    plain = load_femnist(tmp_path, seed=3)
    shifted = load_femnist(tmp_path, seed=3, label_groups=(2, 3))
    assert plain.groups is None and shifted.groups == (0, 0, 1, 1, 1)
    assert shifted.name == "femnist (label groups 2/3)" and shifted.n_classes == 62
    perm = None
    for g, a, b in zip(shifted.groups, plain.clients, shifted.clients):
        for split in ("train", "val", "test"):
            x, y, y2 = (getattr(a, f"x_{split}"), getattr(a, f"y_{split}"), getattr(b, f"y_{split}"))
            assert torch.equal(x, getattr(b, f"x_{split}"))  # the same images, in the same splits
            if g == 0:
                assert torch.equal(y, y2)  # group 0 keeps its labels
            else:
                assert not torch.equal(y, y2)
                perm = {} if perm is None else perm
                for old, new in zip(y.tolist(), y2.tolist()):
                    assert perm.setdefault(old, new) == new  # one map for the whole group, every split
    assert perm is not None and len(set(perm.values())) == len(perm) and max(perm.values()) < 62
    again = load_femnist(tmp_path, seed=3, label_groups=(2, 3))
    assert all(torch.equal(a.y_test, b.y_test) for a, b in zip(again.clients, shifted.clients))
    with pytest.raises(ValueError, match="has 5 writers with both splits: The label groups \\(2, 2\\) hold 4 clients"):
        load_femnist(tmp_path, label_groups=(2, 2))
    with pytest.raises(ValueError, match="2 or more"):
        load_femnist(tmp_path, label_groups=(5,))


def test_femnist_env_variable(tmp_path, monkeypatch):
    _write(tmp_path / "train" / "a.json", _leaf_blob({"w1": (2, [0, 1])}), True)
    _write(tmp_path / "test" / "a.json", _leaf_blob({"w1": (1, [2])}), True)
    monkeypatch.setenv("MOST_FEMNIST", str(tmp_path))
    data = load_femnist()
    assert data.client_ids == ("w1",)
    assert data.source == str(tmp_path.resolve())  # the folder the variable gave, whoever asks
    assert data.subset([0]).source == data.source
    monkeypatch.delenv("MOST_FEMNIST")
    with pytest.raises(FileNotFoundError, match="MOST_FEMNIST is not set"):
        load_femnist()


def test_femnist_missing_directory_names_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_femnist(missing)
    (tmp_path / "train").mkdir()
    expected = re.escape(f"{tmp_path / 'test'} does not exist") + ".*train/ and test/"
    with pytest.raises(FileNotFoundError, match=expected):
        load_femnist(tmp_path)
    (tmp_path / "test").mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(f"no *.json or *.json.gz files in {tmp_path / 'train'}")):
        load_femnist(tmp_path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b.pop("user_data"), "missing key.*'user_data'"),
        (lambda b: b["user_data"]["w1"]["y"].pop(), "user 'w1'.*'x' has 2 samples but 'y' has 1"),
        (lambda b: b["user_data"]["w1"]["x"][0].pop(), "user 'w1'.*784 numbers"),
        (lambda b: b["user_data"]["w1"].pop("x"), "user 'w1'.*keys 'x' and 'y'"),
        (lambda b: b["user_data"]["w1"]["y"].__setitem__(0, 62), "user 'w1'.*labels in 0 .. 61"),
        (lambda b: b["num_samples"].__setitem__(0, 7), "user 'w1'.*'num_samples' says 7"),
    ],
)
def test_femnist_malformed_json_names_file_and_user(tmp_path, mutate, message):
    blob = _leaf_blob({"w1": (2, [0, 1])})
    mutate(blob)
    _write(tmp_path / "train" / "bad.json", blob, False)
    _write(tmp_path / "test" / "t.json", _leaf_blob({"w1": (1, [2])}), False)
    with pytest.raises(ValueError, match=message) as info:
        load_femnist(tmp_path)
    assert str(tmp_path / "train" / "bad.json") in str(info.value)


def test_femnist_not_json(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    (tmp_path / "train" / "x.json").write_text("{not json")
    (tmp_path / "test" / "x.json").write_text("{}")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'train' / 'x.json'}: not a readable LEAF JSON")):
        load_femnist(tmp_path)


@pytest.fixture(scope="module")
def femnist():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_femnist(FEMNIST_DIR)
    return data, [str(w.message) for w in caught]


@needs_femnist
def test_femnist_real_subset(femnist):
    data, caught = femnist
    assert data.n_clients == 105 and data.n_classes == 62 and data.input_shape == (1, 28, 28)
    assert len(caught) == 1 and "79 writer(s) have test data but no training data" in caught[0]
    assert list(data.client_ids) == sorted(data.client_ids)
    assert sum(c.n_train + c.n_val for c in data.clients) == 14708  # SOURCE.txt: train samples
    assert sum(c.n_test for c in data.clients) == 1685
    assert all(c.n_train >= 1 and c.n_test >= 1 for c in data.clients)
    c = data.clients[0]
    assert c.x_train.shape[1:] == (1, 28, 28) and c.x_train.dtype == torch.float32
    assert 0 <= float(c.x_train.min()) and float(c.x_train.max()) <= 1
    labels = torch.cat([_all_y(c) for c in data.clients])
    assert int(labels.min()) == 0 and int(labels.max()) == 61
    # val_fraction = 0.2 of each writer's training samples
    assert all(abs(c.n_val - 0.2 * (c.n_train + c.n_val)) <= 1 for c in data.clients)


# ---------------------------------------------------------------------- Fashion-MNIST
def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def _tiny_fashion(directory: Path, n_train: int = 60, n_test: int = 20) -> None:
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 256, size=(n, 28, 28))
        images[:, 0, 0] = 255
        images[:, 1, 1] = 20 * labels + (prefix == "t10k")  # each image names its label (and its file)
        _write_idx(directory / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(directory / f"{prefix}-labels-idx1-ubyte.gz", labels)


def test_fashion_tiny_idx_round_trip(tmp_path):
    _tiny_fashion(tmp_path)
    data = load_fashion_mnist(tmp_path, n_clients=3, concentration=100.0, seed=1)
    assert data.n_clients == 3 and data.n_classes == 10 and data.input_shape == (1, 28, 28)
    assert sum(data.sizes("all")) == 80
    x = torch.cat([_all_x(c) for c in data.clients])
    assert x.dtype == torch.float32 and float(x.min()) >= 0 and float(x.max()) == 1.0
    assert torch.all(x[:, 0, 0, 0] == 1.0)
    y = torch.cat([_all_y(c) for c in data.clients])
    code = (x[:, 0, 1, 1] * 255).round().long()
    assert torch.equal(code // 20, y)  # images keep their labels
    assert int((code % 20).sum()) == 20  # the 20 t10k images are pooled in
    for c in data.clients:
        assert [c.n_train, c.n_val, c.n_test] == split_counts(c.n_samples, (0.6, 0.2, 0.2))
    sub = load_fashion_mnist(tmp_path, n_clients=4, samples_per_client=5, concentration=100.0)
    assert sum(sub.sizes("all")) == 20
    with pytest.raises(ValueError, match="exceeds the 80"):
        load_fashion_mnist(tmp_path, n_clients=10, samples_per_client=9)


def test_digest_names_the_data_not_where_it_was_read_from(tmp_path):
    import shutil

    (tmp_path / "a").mkdir()
    _tiny_fashion(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    one = load_fashion_mnist(tmp_path / "a", n_clients=3, concentration=100.0, seed=1)
    other = load_fashion_mnist(tmp_path / "b", n_clients=3, concentration=100.0, seed=1)
    assert other.digest() == one.digest()
    assert (one.source, other.source) == (str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve()))
    assert re.fullmatch(r"[0-9a-f]{16}", one.digest())
    # another seed, another split, another label, another client set: another digest
    assert load_fashion_mnist(tmp_path / "a", n_clients=3, concentration=100.0, seed=2).digest() != one.digest()
    assert load_fashion_mnist(tmp_path / "a", n_clients=3, seed=1).digest() != one.digest()
    assert one.subset([0, 1]).digest() != one.digest() and one.subset([0, 1, 2]).digest() == one.digest()
    client = one.clients[0]
    y = client.y_test.clone()
    y[0] = (y[0] + 1) % 10
    relabelled = FederatedDataset(name="other name", clients=(ClientData(
        client.x_train, client.y_train, client.x_val, client.y_val, client.x_test, y), *one.clients[1:]),
        n_classes=10, input_shape=one.input_shape, client_ids=one.client_ids)
    assert relabelled.digest() != one.digest()
    renamed = FederatedDataset(name="other name", clients=one.clients, n_classes=10, input_shape=one.input_shape,
                               client_ids=one.client_ids)
    assert renamed.digest() == one.digest()  # the name is a label, not data
    # the same data turned another way (rotated groups) is other data
    turned = load_fashion_mnist(tmp_path / "b", n_clients=4, concentration=100.0, seed=1, rotations=2)
    assert turned.digest() != load_fashion_mnist(tmp_path / "b", n_clients=4, concentration=100.0, seed=1).digest()


def test_fashion_rotations_turn_each_group_of_clients_and_change_nothing_else(tmp_path):
    _tiny_fashion(tmp_path)
    plain = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2)
    turned = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2, rotations=4)
    assert plain.client_ids == turned.client_ids and turned.name.endswith("4 rotations)")
    for cid, a, b in zip(plain.client_ids, plain.clients, turned.clients):
        k = int(cid.split("_")[1]) % 4  # position before empty clients are dropped
        for split in ("train", "val", "test"):
            xa, xb = getattr(a, f"x_{split}"), getattr(b, f"x_{split}")
            assert torch.equal(torch.rot90(xa, k, dims=(-2, -1)), xb)  # k quarter turns counter-clockwise
            assert torch.equal(getattr(a, f"y_{split}"), getattr(b, f"y_{split}"))
    assert any(not torch.equal(a.x_train, b.x_train) for a, b in zip(plain.clients, turned.clients))
    same = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2, rotations=1)
    assert all(torch.equal(a.x_train, b.x_train) for a, b in zip(plain.clients, same.clients))
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="`rotations` must be a whole number from 1 to 4"):
            load_fashion_mnist(tmp_path, n_clients=8, rotations=bad)


def test_fashion_rotation_groups_of_unequal_size_turn_consecutive_blocks_of_clients(tmp_path):
    _tiny_fashion(tmp_path)
    plain = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2)
    turned = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2, rotations=(1, 2, 5))
    assert turned.name.endswith("rotated groups 1/2/5)")
    group = [0, 1, 1, 2, 2, 2, 2, 2]  # clients 0 | 1-2 | 3-7
    for cid, a, b in zip(plain.client_ids, plain.clients, turned.clients):
        k = group[int(cid.split("_")[1])]
        for split in ("train", "val", "test"):
            assert torch.equal(torch.rot90(getattr(a, f"x_{split}"), k, dims=(-2, -1)), getattr(b, f"x_{split}"))
            assert torch.equal(getattr(a, f"y_{split}"), getattr(b, f"y_{split}"))
    for bad, match in (((4, 3), "hold 7 clients, but n_clients is 8"), ((1, 1, 1, 1, 4), "1 to 4 positive"),
                       ((0, 8), "1 to 4 positive"), ((4.0, 4), "1 to 4 positive"), ("44", "sequence of 1 to 4")):
        with pytest.raises(ValueError, match=match):
            load_fashion_mnist(tmp_path, n_clients=8, rotations=bad)


def test_fashion_label_groups_relabel_each_group_by_its_own_permutation(tmp_path):
    _tiny_fashion(tmp_path)
    plain = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2)
    shifted = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2, label_groups=(1, 3, 4))
    assert shifted.name.endswith("label groups 1/3/4)") and plain.groups is None
    assert shifted.groups == (0, 1, 1, 1, 2, 2, 2, 2)
    maps: dict[int, dict[int, int]] = {0: {}, 1: {}, 2: {}}
    for g, a, b in zip(shifted.groups, plain.clients, shifted.clients):
        for split in ("train", "val", "test"):
            assert torch.equal(getattr(a, f"x_{split}"), getattr(b, f"x_{split}"))  # the same images
            for old, new in zip(getattr(a, f"y_{split}").tolist(), getattr(b, f"y_{split}").tolist()):
                assert maps[g].setdefault(old, new) == new  # one map per group, for every client and split
    assert all(k == v for k, v in maps[0].items())  # group 0 keeps its labels
    for g in (1, 2):
        assert sorted(maps[g].values()) == sorted(set(maps[g].values()))  # a permutation
        assert any(k != v for k, v in maps[g].items())
    again = load_fashion_mnist(tmp_path, n_clients=8, concentration=100.0, seed=2, label_groups=(1, 3, 4))
    assert all(torch.equal(a.y_train, b.y_train) for a, b in zip(again.clients, shifted.clients))
    for bad, match in (((4, 3), "hold 7 clients, but n_clients is 8"), ((8,), "2 or more"), ((0, 8), "2 or more"),
                       ((4.0, 4), "2 or more"), ("44", "sequence of group sizes")):
        with pytest.raises(ValueError, match=match):
            load_fashion_mnist(tmp_path, n_clients=8, label_groups=bad)
    with pytest.raises(ValueError, match="not both"):
        load_fashion_mnist(tmp_path, n_clients=8, label_groups=(4, 4), rotations=2)


def test_dataset_groups_follow_the_clients_that_stay(tmp_path):
    c = ClientData(torch.zeros(2, 3), torch.zeros(2), torch.zeros(1, 3), torch.zeros(1), torch.zeros(1, 3),
                      torch.zeros(1))
    empty = ClientData(torch.zeros(0, 3), torch.zeros(0), torch.zeros(1, 3), torch.zeros(1), torch.zeros(1, 3),
                          torch.zeros(1))
    with pytest.warns(UserWarning, match="left out"):
        data = FederatedDataset.from_clients([c, empty, c], name="g", n_classes=2, groups=[0, 1, 2])
    assert data.groups == (0, 2)
    assert data.subset([1]).groups == (2,)
    for bad, match in (([0], "1 entries for 2 clients"), ([0, -1], "non-negative"), ([0, 0.5], "non-negative"),
                       (3, "one group index per client")):
        with pytest.raises(ValueError, match=match):
            FederatedDataset(name="g", clients=(c, c), n_classes=2, input_shape=(3,), client_ids=("a", "b"),
                                groups=bad)


def test_fashion_missing_files_name_them(tmp_path, monkeypatch):
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((2, 28, 28)))
    with pytest.raises(FileNotFoundError) as info:
        load_fashion_mnist(tmp_path)
    text = str(info.value)
    assert str(tmp_path) in text and "train-labels-idx1-ubyte.gz" in text and "t10k-images-idx3-ubyte.gz" in text
    assert "train-images-idx3-ubyte.gz," not in text  # present, so not listed as missing
    assert "apt-get install dataset-fashion-mnist" in text and "MOST_FASHION_MNIST" in text
    monkeypatch.setenv("MOST_FASHION_MNIST", str(tmp_path / "nowhere"))
    expected = re.escape(f"{tmp_path / 'nowhere'} (from MOST_FASHION_MNIST) does not exist")
    with pytest.raises(FileNotFoundError, match=expected):
        load_fashion_mnist()


def test_fashion_malformed_idx(tmp_path):
    _tiny_fashion(tmp_path)
    with gzip.open(tmp_path / "t10k-labels-idx1-ubyte.gz", "wb") as handle:
        handle.write(struct.pack(">HBBI", 0, 0x08, 1, 30) + bytes(10))
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte.gz: the header announces"):
        load_fashion_mnist(tmp_path)


@needs_fashion
def test_fashion_real_small():
    data = load_fashion_mnist(n_clients=10, samples_per_client=50, concentration=0.3, seed=0)
    assert data.n_classes == 10 and data.input_shape == (1, 28, 28)
    assert data.n_clients <= 10
    assert sum(data.sizes("all")) == 500
    x = torch.cat([_all_x(c) for c in data.clients])
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    # Dirichlet(0.3) skew: clients are dominated by few classes
    assert _label_entropy(data) < 0.8 * np.log(10)
    again = load_fashion_mnist(n_clients=10, samples_per_client=50, concentration=0.3, seed=0)
    assert all(torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
               for a, b in zip(data.clients, again.clients))


def test_fedprox_synthetic_names_its_heterogeneity_apart_from_the_marginals():
    # model_shift / feature_shift are FedProx's alpha / beta; the old keywords still work, with a warning
    new = fedprox_synthetic(model_shift=0.5, feature_shift=1.0, n_clients=4, seed=3)
    assert torch.equal(new.clients[2].x_train, fedprox_synthetic(0.5, 1.0, n_clients=4, seed=3).clients[2].x_train)
    with pytest.warns(DeprecationWarning, match="now `feature_shift`"):
        old = fedprox_synthetic(alpha=0.5, beta=1.0, n_clients=4, seed=3)
    assert torch.equal(old.clients[2].x_train, new.clients[2].x_train)
    with pytest.raises(TypeError, match="needs `model_shift`"):
        fedprox_synthetic(feature_shift=1.0)
    with pytest.raises(TypeError, match="not both"):
        fedprox_synthetic(0.5, 1.0, beta=1.0)


# ----------------------------------------------------------------------------- FedEM's synthetic mixture
def test_mixture_synthetic_sizes_splits_groups_and_determinism():
    data = mixture_synthetic(n_clients=40, dim=8, test_samples=30, seed=3)
    assert data.n_clients == 40 and data.n_classes == 2 and data.input_shape == (8,)
    for c in data.clients:
        n = c.n_train + c.n_val
        assert 50 <= n <= 1000 and c.n_val == min(max(1, round(0.2 * n)), n - 1) and c.n_test == 30
        assert set(c.y_train.unique().tolist()) <= {0, 1}
    assert data.client_ids[:2] == ("task_000", "task_001") and len(set(data.groups)) == 3
    again = mixture_synthetic(n_clients=40, dim=8, test_samples=30, seed=3)
    assert all(torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
               for a, b in zip(data.clients, again.clients))
    assert data.groups == again.groups


def test_mixture_synthetic_labels_are_linear_in_each_component():
    """One component and no noise: every label of every client is the side of one hyperplane
    through the origin, so a w with (2y - 1) x.w >= 1 exists (a linear program)."""
    from scipy.optimize import linprog

    data = mixture_synthetic(n_clients=5, n_components=1, dim=6, noise=0.0, test_samples=20, seed=0)
    x = torch.cat([torch.cat([c.x_train, c.x_test]) for c in data.clients]).double().numpy()
    y = torch.cat([torch.cat([c.y_train, c.y_test]) for c in data.clients]).double().numpy() * 2 - 1
    feasible = linprog([0.0] * 6, A_ub=-(y[:, None] * x), b_ub=-1e-6 * np.ones(len(y)), bounds=[(None, None)] * 6)
    assert feasible.status == 0
    noisy = mixture_synthetic(n_clients=5, n_components=2, dim=6, noise=0.0, concentration=5.0, test_samples=20,
                                 seed=0)  # two hyperplanes mixed in every client: no single one separates
    x = torch.cat([torch.cat([c.x_train, c.x_test]) for c in noisy.clients]).double().numpy()
    y = torch.cat([torch.cat([c.y_train, c.y_test]) for c in noisy.clients]).double().numpy() * 2 - 1
    assert linprog([0.0] * 6, A_ub=-(y[:, None] * x), b_ub=-1e-6 * np.ones(len(y)),
                   bounds=[(None, None)] * 6).status == 2


def test_mixture_synthetic_reference_labels_leave_the_samples_beyond_the_largest_block_at_0():
    described = mixture_synthetic(n_clients=60, dim=5, test_samples=10, seed=1)
    reference = mixture_synthetic(n_clients=60, dim=5, test_samples=10, seed=1, reference_labels=True)
    share = [float(torch.cat([c.y_train for c in d.clients]).float().mean()) for d in (described, reference)]
    assert abs(share[0] - 0.5) < 0.03 and share[1] < 0.42  # about (1 - E max pi) of the data is 0 besides
    assert described.name != reference.name


def test_mixture_synthetic_refuses_bad_settings():
    with pytest.raises(ValueError, match="max_samples.*at least `min_samples`"):
        mixture_synthetic(min_samples=60, max_samples=55)
    with pytest.raises(ValueError, match="val_fraction"):
        mixture_synthetic(val_fraction=1.0)
    with pytest.raises(ValueError, match="concentration"):
        mixture_synthetic(concentration=0)
