"""Fairness--accuracy data and problems (most.problems._fairness)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tests._shared import SHARED_DATA
import torch

from most.problems._fairness import FairnessData, load_german_credit, zafar_synthetic

GERMAN_DIR = SHARED_DATA / "german_credit"
needs_german = pytest.mark.skipif(
    not (GERMAN_DIR / "german.data").is_file(), reason="needs ../shared/data/german_credit"
)

# One valid german.data line (the first line of the UCI file).
GERMAN_LINE = "A11 6 A34 A43 1169 A65 A75 4 A93 A101 4 A121 67 A143 A152 2 A173 1 A192 A201 1"
NUMERIC_ATTRIBUTES = ("duration_months", "credit_amount", "installment_rate", "residence_since", "age",
                      "existing_credits", "people_liable")


@pytest.fixture(scope="module")
def synthetic() -> FairnessData:
    return zafar_synthetic()


def _tiny_german(tmp_path: Path, extra: str | None = None) -> Path:
    lines = [
        GERMAN_LINE,
        "A12 48 A32 A43 5951 A61 A73 2 A92 A101 2 A121 22 A143 A152 1 A173 1 A191 A201 2",
        "A14 12 A34 A46 2096 A61 A74 2 A95 A101 3 A121 49 A143 A152 1 A172 2 A191 A201 1",
    ]
    if extra is not None:
        lines.insert(1, extra)
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    return tmp_path


def _rows(data: FairnessData) -> set[tuple[float, ...]]:
    full = torch.cat([data.X, data.y[:, None], data.z[:, None]], 1).double()
    return {tuple(r) for r in full.tolist()}


# ---------------------------------------------------------------------- synthetic
def test_synthetic_shape_balance_dtype(synthetic):
    assert synthetic.X.shape == (2000, 2)
    assert synthetic.y.shape == synthetic.z.shape == (2000,)
    assert synthetic.X.dtype == synthetic.y.dtype == synthetic.z.dtype == torch.get_default_dtype()
    assert int(synthetic.y.sum()) == 1000
    assert set(synthetic.y.unique().tolist()) == {0.0, 1.0}
    assert set(synthetic.z.unique().tolist()) == {0.0, 1.0}
    assert torch.allclose(synthetic.X.mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(synthetic.X.std(0, unbiased=False), torch.ones(2), atol=1e-5)
    assert synthetic.feature_names == ("x1", "x2")


def test_synthetic_deterministic_per_seed(synthetic):
    again = zafar_synthetic(seed=0)
    assert torch.equal(again.X, synthetic.X) and torch.equal(again.y, synthetic.y)
    assert torch.equal(again.z, synthetic.z)
    other = zafar_synthetic(seed=1)
    assert not torch.equal(other.X, synthetic.X)
    assert not torch.equal(other.z, synthetic.z)


def test_synthetic_z_correlated_with_y(synthetic):
    y, z = synthetic.y, synthetic.z
    assert float(z[y == 1].mean()) > float(z[y == 0].mean()) + 0.2
    # A smaller rotation means more discrimination; the features are unchanged.
    zero = zafar_synthetic(disc_factor=0.0)
    assert torch.equal(zero.X, synthetic.X) and torch.equal(zero.y, synthetic.y)
    assert not torch.equal(zero.z, synthetic.z)
    gap = lambda d: float(d.z[d.y == 1].mean() - d.z[d.y == 0].mean())  # noqa: E731
    assert gap(zero) > gap(synthetic) + 0.1


def test_synthetic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="even"):
        zafar_synthetic(11)
    with pytest.raises(ValueError, match="n_samples"):
        zafar_synthetic(0)
    with pytest.raises(ValueError, match="disc_factor"):
        zafar_synthetic(10, disc_factor=float("nan"))


# ---------------------------------------------------------------------- splits
def test_split_disjoint_covering_sizes_deterministic(synthetic):
    idx = synthetic.split_indices(seed=3)
    allidx = torch.cat(list(idx.values()))
    assert sorted(allidx.tolist()) == list(range(2000))  # disjoint and covering
    for name, frac in zip(("train", "val", "test"), (0.6, 0.2, 0.2)):
        assert abs(len(idx[name]) - 2000 * frac) <= 1
    again = synthetic.split_indices(seed=3)
    assert all(torch.equal(idx[k], again[k]) for k in idx)
    assert not torch.equal(idx["train"], synthetic.split_indices(seed=4)["train"])

    parts = synthetic.split(seed=3)
    assert set(parts) == {"train", "val", "test"}
    rows = [_rows(p) for p in parts.values()]
    assert sum(len(r) for r in rows) == 2000
    assert set().union(*rows) == _rows(synthetic)
    assert torch.equal(parts["val"].X, synthetic.X[idx["val"]])
    assert parts["train"].name == "zafar_synthetic[train]"
    # Stratified by (y, z): every part has nearly the same group rates.
    for part in parts.values():
        assert abs(float(part.y.mean()) - float(synthetic.y.mean())) < 0.01
        assert abs(float(part.z.mean()) - float(synthetic.z.mean())) < 0.01


def test_split_odd_sizes_and_bad_fractions():
    data = zafar_synthetic(202, seed=2)
    idx = data.split_indices(seed=0, fractions=(0.5, 0.3, 0.2))
    assert sorted(torch.cat(list(idx.values())).tolist()) == list(range(202))
    for name, frac in zip(("train", "val", "test"), (0.5, 0.3, 0.2)):
        assert abs(len(idx[name]) - 202 * frac) <= 1
    with pytest.raises(ValueError, match="sum to 1"):
        data.split(fractions=(0.6, 0.2, 0.3))
    with pytest.raises(ValueError, match="three positive"):
        data.split(fractions=(0.8, 0.2))


# ---------------------------------------------------------------------- problem
def _numpy_objectives(data: FairnessData, theta: np.ndarray) -> tuple[float, float]:
    X = data.X.double().numpy()
    y = data.y.double().numpy()
    z = data.z.double().numpy()
    s = X @ theta[:-1] + theta[-1]
    prob = 1.0 / (1.0 + np.exp(-s))
    bce = -np.mean(y * np.log(prob) + (1 - y) * np.log(1 - prob))
    cov = abs(np.mean((z - z.mean()) * s))
    return bce, cov


def test_problem_values_match_numpy(synthetic):
    problem = synthetic.problem()
    assert problem.n_objectives == 2 and problem.dim == 3
    assert problem.names == ("logistic_loss", "covariance_proxy")
    assert problem.metadata["data"] is synthetic
    thetas = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    losses = problem.loss_matrix(thetas)  # [n, m], vmapped
    assert losses.shape == (2, 5)
    for j, theta in enumerate(thetas):
        bce, cov = _numpy_objectives(synthetic, theta.double().numpy())
        assert float(losses[0, j]) == pytest.approx(bce, rel=1e-4)
        assert float(losses[1, j]) == pytest.approx(cov, rel=1e-4, abs=1e-6)


def test_problem_at_zero_and_gradients_finite(synthetic):
    problem = synthetic.problem()
    at_zero = problem.fn(torch.zeros(3))
    assert float(at_zero[0]) == pytest.approx(math.log(2), rel=1e-6)
    assert float(at_zero[1]) == 0.0
    # Finite everywhere, including huge parameters (stable BCE).
    thetas = torch.cat([torch.randn(4, 3), 1e4 * torch.randn(2, 3)])
    values = problem.loss_matrix(thetas)
    assert torch.isfinite(values).all()
    for theta in thetas:
        jac = torch.func.jacrev(problem.fn)(theta)
        assert jac.shape == (2, 3) and torch.isfinite(jac).all()


def test_logistic_steps_learn_synthetic(synthetic):
    problem = synthetic.problem()
    theta = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=1.0)
    for _ in range(30):
        opt.zero_grad()
        problem.fn(theta)[0].backward()
        opt.step()
    acc = synthetic.accuracy(theta.detach().unsqueeze(0))
    assert float(acc[0]) > 0.8
    assert float(problem.fn(theta.detach())[0]) < math.log(2) - 0.2


def test_accuracy_and_disparate_impact(synthetic):
    params = torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    params[0] = 0.0  # predicts 0 for everyone: accuracy 1/2, no disparity
    acc = synthetic.accuracy(params)
    di = synthetic.disparate_impact(params)
    pr = synthetic.p_rule(params)
    for t in (acc, di, pr):
        assert t.shape == (7,)
        assert ((t >= 0) & (t <= 1)).all()
    assert float(acc[0]) == pytest.approx(0.5)
    assert float(di[0]) == 0.0 and float(pr[0]) == 1.0
    # Direct check of the definition for one model.
    pred = (synthetic.X @ params[3, :2] + params[3, 2] > 0).double()
    z = synthetic.z.double()
    want = abs(pred[z == 0].mean() - pred[z == 1].mean())
    assert float(di[3]) == pytest.approx(float(want), abs=1e-6)
    assert synthetic.accuracy(params[3]).shape == (1,)
    with pytest.raises(ValueError, match=r"\[m, 3\]"):
        synthetic.accuracy(torch.zeros(2, 4))


# ---------------------------------------------------------------------- German credit
@needs_german
def test_german_credit_real_data():
    data = load_german_credit(GERMAN_DIR)
    assert data.X.shape[0] == 1000 and data.y.shape == data.z.shape == (1000,)
    assert int(data.y.sum()) == 700 and int((data.y == 0).sum()) == 300
    assert int(data.z.sum()) == 310
    assert data.X.dtype == torch.get_default_dtype() and torch.isfinite(data.X).all()
    names = data.feature_names
    assert len(names) == data.X.shape[1] == 58
    assert not any(n.startswith("personal_status") or "=A9" in n for n in names)
    for i, name in enumerate(names):
        col = data.X[:, i]
        if name in NUMERIC_ATTRIBUTES:
            assert abs(float(col.mean())) < 1e-5 and float(col.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
        else:
            assert "=" in name and ((col == 0) | (col == 1)).all()
    assert set(NUMERIC_ATTRIBUTES) <= set(names)
    # Every categorical attribute is one-hot: the columns of one attribute sum to 1 per row.
    for attr in {n.split("=")[0] for n in names if "=" in n}:
        cols = [i for i, n in enumerate(names) if n.startswith(attr + "=")]
        assert torch.equal(data.X[:, cols].sum(1), torch.ones(1000))
    parts = data.split(seed=0)
    assert [parts[k].n_samples for k in ("train", "val", "test")] == [600, 200, 200]
    problem = parts["train"].problem()
    assert problem.dim == 59
    assert torch.isfinite(problem.loss_matrix(torch.randn(3, 59))).all()


@needs_german
def test_german_credit_env_var_real(monkeypatch):
    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(GERMAN_DIR))
    assert load_german_credit().X.shape[0] == 1000


def test_german_credit_env_var_and_parsing(tmp_path, monkeypatch):
    folder = _tiny_german(tmp_path)
    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(folder))
    data = load_german_credit()
    assert data.X.shape == (3, 58)
    assert data.y.tolist() == [1.0, 0.0, 1.0]
    assert data.z.tolist() == [0.0, 1.0, 1.0]  # A93 male, A92 and A95 female
    assert torch.equal(load_german_credit(folder / "german.data").X, data.X)  # the file itself works too


def test_german_credit_missing(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as err:
        load_german_credit(missing)
    msg = str(err.value)
    assert str(missing / "german.data") in msg and "MOST_GERMAN_CREDIT" in msg
    monkeypatch.delenv("MOST_GERMAN_CREDIT", raising=False)
    with pytest.raises(FileNotFoundError, match="german.data.*MOST_GERMAN_CREDIT"):
        load_german_credit()
    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(missing))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_german_credit()


def test_german_credit_malformed(tmp_path):
    folder = _tiny_german(tmp_path, extra="A11 6 A34 A43 1169")
    with pytest.raises(ValueError, match="line 2") as err:
        load_german_credit(folder)
    assert "21" in str(err.value)
    _tiny_german(tmp_path, extra=GERMAN_LINE.replace("A93", "A99"))
    with pytest.raises(ValueError, match="line 2.*attribute 9"):
        load_german_credit(folder)
    _tiny_german(tmp_path, extra=GERMAN_LINE[:-1] + "3")
    with pytest.raises(ValueError, match="line 2.*label"):
        load_german_credit(folder)
    for amount in ("nan", "inf", "1e400", "abc"):  # float() reads the first three: no amount either
        _tiny_german(tmp_path, extra=GERMAN_LINE.replace(" 1169 ", f" {amount} "))
        with pytest.raises(ValueError, match=r"line 2: attribute 5 \(credit_amount\) must be a finite number"):
            load_german_credit(folder)


@needs_german
def test_german_credit_malformed_copy(tmp_path):
    lines = (GERMAN_DIR / "german.data").read_text().splitlines()
    lines[41] = " ".join(lines[41].split()[:-3])
    (tmp_path / "german.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 42"):
        load_german_credit(tmp_path)
