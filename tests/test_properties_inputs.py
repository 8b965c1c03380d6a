"""Property tests of the public entry points on generated inputs, valid and invalid.

Every call either raises a ValueError/TypeError with a non-empty message, or returns a valid
result: transport plans finite, non-negative and meeting the marginals they promise, min-norm
weights on the simplex with a non-negative finite norm, finite directions and parameters, no NaN.
Inputs range over scales 1e-12 .. 1e15, zeros, inf, NaN, negative values, wrong shapes, wrong
dtypes and bools. Regression tests of single findings are in tests/test_input_errors.py.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import most
import most.federated
from most import transport
from most._warnings import ConvergenceWarning
from most.mgda import ZERO_GRADIENT_RTOL, min_norm, min_norm_direction

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALES = [0.0, 1e-12, 1e-6, 1.0, 1e3, 1e15]
BAD_NUMBERS = [0, -1, -0.5, math.inf, -math.inf, math.nan, True, False, "0.1", None, 1j]
GOOD_NUMBERS = [1e-12, 1e-3, 0.1, 1, 2.5, 1e6, 1e15, np.float32(0.1), np.float64(0.3), np.int64(3),
                torch.tensor(0.2)]

numbers = st.sampled_from(GOOD_NUMBERS + BAD_NUMBERS)


def _is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, (ValueError, TypeError)) and bool(str(exc).strip())


def outcome(fn, *args, **kwargs):
    """``(result, None)`` or ``(None, exc)`` for a ValueError/TypeError with a message; any other
    exception (a raw IndexError, RuntimeError, ...) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        try:
            return fn(*args, **kwargs), None
        except Exception as exc:  # noqa: BLE001 - the property is about which exceptions
            assert _is_user_error(exc), f"{type(exc).__name__} is not a clear user error: {exc!r}"
            return None, exc


@st.composite
def matrices(draw, *, min_rows=1, max_rows=5, min_cols=1, max_cols=4, bad=True, dtypes=None):
    n = draw(st.integers(min_rows, max_rows))
    m = draw(st.integers(min_cols, max_cols))
    scale = draw(st.sampled_from(SCALES))
    base = draw(st.lists(st.floats(-1, 1, allow_nan=False), min_size=n * m, max_size=n * m))
    x = np.asarray(base, dtype=np.float64).reshape(n, m) * scale
    if bad and draw(st.integers(0, 5)) == 0:
        x[draw(st.integers(0, n - 1)), draw(st.integers(0, m - 1))] = draw(st.sampled_from([math.nan, math.inf,
                                                                                          -math.inf, 1e308]))
    dtype = draw(st.sampled_from(dtypes or [torch.float64, torch.float32, torch.float32, torch.float16, torch.int64,
                                            torch.bool]))
    with np.errstate(all="ignore"):
        return torch.as_tensor(x).to(dtype) if dtype != torch.bool else torch.as_tensor(x > 0)


@st.composite
def marginals(draw, size: int):
    """A probability vector of length ``size`` (sometimes with zeros), or an invalid one."""
    kind = draw(st.sampled_from(["uniform", "random", "random", "zeros", "bad_sum", "negative", "nan",
                                 "wrong_length", "none", "list"]))
    if kind == "none":
        return None
    if kind == "wrong_length":
        return torch.full((size + 1,), 1.0 / (size + 1))
    w = np.asarray(draw(st.lists(st.floats(0, 1), min_size=size, max_size=size))) + 1e-3
    if kind == "zeros" and size > 1:
        w[draw(st.integers(0, size - 1))] = 0.0
    w = np.full(size, 1.0 / size) if kind == "uniform" else w / w.sum()
    if kind == "bad_sum":
        w = w * 2
    elif kind == "negative" and size > 1:
        w[0] = -w[0]
    elif kind == "nan":
        w[0] = math.nan
    return w.tolist() if kind == "list" else torch.as_tensor(w)


def _float(t) -> torch.Tensor:
    return torch.as_tensor(t, dtype=torch.float64)


# ------------------------------------------------------------------ transport
@FAST
@given(data=st.data(), method=st.sampled_from(transport.METHODS))
def test_transport_solve_gives_a_feasible_plan_or_a_clear_error(data, method):
    cost = data.draw(matrices())
    n, m = cost.shape
    a = data.draw(marginals(n))
    b = data.draw(marginals(m))
    kwargs = {}
    if data.draw(st.booleans()):
        kwargs["diversity"] = data.draw(st.sampled_from([0.0, 1e-12, 0.1, 1.0, 1e15, -1.0, math.inf, math.nan,
                                                         np.float32(0.5), True]))
    if data.draw(st.booleans()):
        kwargs["reg"] = data.draw(st.sampled_from([1e-12, 1e-3, 0.3, 10.0, 1e15, 0.0, -1.0, math.inf, math.nan,
                                                   np.float64(0.01)]))
    if data.draw(st.integers(0, 3)) == 0:
        kwargs["max_iter"] = data.draw(st.sampled_from([1, 5, 0, -1, 2.5, np.int64(3), True]))
    res, err = outcome(transport.solve, cost, a, b, method=method, **kwargs)
    if err is not None:
        return
    plan = res.plan
    assert plan.shape == (n, m) and plan.dtype == (cost.dtype if cost.is_floating_point() else torch.float32)
    p = _float(plan)
    assert torch.isfinite(p).all(), "the plan has NaN or inf"
    assert math.isfinite(res.cost)
    atol = 2e-3 if plan.dtype in (torch.float16, torch.bfloat16) else 1e-5
    assert (p >= -atol).all(), "negative plan entries"
    if a is not None:
        a64 = _float(a)
        assert torch.allclose(p.sum(1), a64 / a64.sum(), atol=atol, rtol=0), "row marginals not met"
    if b is not None:
        b64 = _float(b)
        assert torch.allclose(p.sum(0), b64 / b64.sum(), atol=atol, rtol=0), "column marginals not met"


@FAST
@given(data=st.data())
def test_capped_transport_gives_a_feasible_plan_or_a_clear_error(data):
    cost = data.draw(matrices(min_rows=1, max_rows=4, max_cols=3))
    n, m = cost.shape
    a, b = data.draw(marginals(n)), data.draw(marginals(m))
    share = data.draw(st.sampled_from([1.0, 0.5, 0.34, 1e-12, 0.0, 2.0, math.nan, np.float32(1.0), True]))
    res, err = outcome(transport.solve_capped, cost, a, b, max_share=share)
    if err is None:
        p = _float(res.plan)
        atol = 2e-3 if res.plan.dtype in (torch.float16, torch.bfloat16) else 1e-5
        assert torch.isfinite(p).all() and (p >= -atol).all()
        assert torch.allclose(p.sum(0), _float(b) / _float(b).sum(), atol=atol, rtol=0)
        assert torch.allclose(p.sum(1), _float(a) / _float(a).sum(), atol=atol, rtol=0)


# ------------------------------------------------------------------ min-norm
@FAST
@given(data=st.data())
def test_min_norm_weights_on_the_simplex_and_norm_non_negative(data):
    kind = data.draw(st.sampled_from(["gram", "gram", "raw", "batch"]))
    J = data.draw(matrices(max_rows=5, max_cols=4, dtypes=[torch.float64, torch.float32]))
    if kind == "raw":  # any square matrix: often not a Gramian
        n = J.shape[0]
        gram = data.draw(matrices(min_rows=n, max_rows=n, min_cols=n, max_cols=n))
    else:
        with np.errstate(all="ignore"):
            gram = J @ J.T
        if kind == "batch":
            gram = torch.stack([gram, 2 * gram])
    tol = data.draw(st.sampled_from([None, 1e-6, 0.0, -1.0, math.inf, math.nan]))
    res, err = outcome(min_norm, gram, tol=tol)
    if err is not None:
        return
    w, ns = _float(res.weights), _float(res.norm_sq)
    assert torch.isfinite(w).all() and torch.isfinite(ns).all()
    atol = 2e-3 if res.weights.dtype in (torch.float16, torch.bfloat16) else 1e-5
    assert (w >= 0).all() and torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=atol)
    assert (ns >= 0).all(), f"negative norm {ns}"
    g = _float(gram)
    diag_min = torch.diagonal(g, dim1=-2, dim2=-1).amin(-1)
    assert (ns <= diag_min * (1 + atol) + atol * g.abs().amax((-2, -1))).all(), "worse than the best vertex"


@FAST
@given(data=st.data())
def test_min_norm_direction_finite_and_a_descent_direction(data):
    J = data.draw(matrices(max_rows=5, max_cols=4, dtypes=[torch.float64, torch.float32, torch.int64]))
    n = J.shape[0]
    weights = data.draw(st.sampled_from([None, "ones", "random", "zeros", "negative", "nan", "wrong"]))
    w = {None: None, "ones": torch.ones(n), "random": torch.rand(n, generator=torch.Generator().manual_seed(n)),
         "zeros": torch.zeros(n), "negative": -torch.ones(n), "nan": torch.full((n,), math.nan),
         "wrong": torch.ones(n + 1)}[weights]
    u, err = outcome(min_norm_direction, J, w)
    if err is not None:
        return
    assert u.shape == (J.shape[1],) and torch.isfinite(_float(u)).all()
    if J.dtype == torch.float64 and w is not None and weights == "ones":
        scale = float(_float(J).abs().max()) or 1.0  # checked in units of the largest entry (no overflow)
        u64, J64 = _float(u) / scale, _float(J) / scale
        # every kept row: a zero gradient (below ZERO_GRADIENT_RTOL times the largest) is left out of
        # the hull, as documented, and cannot decrease to first order
        norms = J64.norm(dim=1)
        kept = norms > ZERO_GRADIENT_RTOL * norms.max()
        assert bool(((J64 @ u64)[kept] >= float(u64 @ u64) - 1e-6).all()), "not a common descent direction"


@FAST
@given(data=st.data(), combiner=st.sampled_from(["min_norm", "weighted_sum"]))
def test_combiners_give_finite_directions_and_simplex_weights(data, combiner):
    m = data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 4))
    d = data.draw(st.integers(1, 3))
    scale = data.draw(st.sampled_from(SCALES))
    jac = torch.randn(m, n, d, generator=torch.Generator().manual_seed(m * 7 + n), dtype=torch.float64) * scale
    jac = jac.to(data.draw(st.sampled_from([torch.float64, torch.float32])))
    kind = data.draw(st.sampled_from(["ones", "random", "zeros", "negative", "nan"]))
    weights = {"ones": torch.ones(m, n), "random": torch.rand(m, n, generator=torch.Generator().manual_seed(n)),
               "zeros": torch.zeros(m, n), "negative": -torch.ones(m, n),
               "nan": torch.full((m, n), math.nan)}[kind]
    comb = most.MinNorm() if combiner == "min_norm" else most.WeightedSum()
    out, err = outcome(comb, jac, weights)
    if err is not None:
        return
    direction, lam = out
    assert direction.shape == (m, d) and torch.isfinite(_float(direction)).all()
    lam = _float(lam)
    assert torch.isfinite(lam).all() and (lam >= 0).all()
    sums = lam.sum(1)
    assert bool(((sums - 1).abs() < 1e-5).logical_or(sums == 0).all()), f"weights off the simplex: {sums}"


# ------------------------------------------------------------------ problems and MosT
@SLOW
@given(data=st.data())
def test_most_fit_on_tiny_problems_gives_finite_models_or_a_clear_error(data):
    dim = data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 4))
    scale = data.draw(st.sampled_from([1e-12, 1e-3, 1.0, 1e3, 1e15]))
    centres = torch.randn(n, dim, generator=torch.Generator().manual_seed(n + dim), dtype=torch.float64) * scale
    fn = lambda theta: ((theta - centres.to(theta)) ** 2).sum(-1)  # noqa: E731
    init = data.draw(st.sampled_from([None, "zeros", "int", "nan", "wrong_shape"]))
    init = {None: None, "zeros": torch.zeros(dim), "int": torch.zeros(dim, dtype=torch.int64),
            "nan": torch.full((dim,), math.nan), "wrong_shape": torch.zeros(dim + 1)}[init]
    problem, err = outcome(most.Problem.from_function, fn, dim=dim, n_objectives=n, init=init)
    if err is not None:
        return
    valid = data.draw(st.booleans())  # half the runs with valid settings only, so that fits happen
    pick = (lambda good, bad: st.sampled_from(good)) if valid else (lambda good, bad: st.sampled_from(good + bad))
    kwargs = dict(
        n_models=data.draw(pick([1, 2, np.int64(2)], [3, 0, 2.0, True])),
        rounds=data.draw(pick([1, 2, np.int64(2)], [0, -1])),
        lr=data.draw(pick(GOOD_NUMBERS, BAD_NUMBERS)),
        diversity=data.draw(pick([0.0, 0.1, 1e15, np.float32(0.1)], [-1.0, math.inf, math.nan])),
        transport=data.draw(pick(list(transport.METHODS), ["bogus"])),
    )
    event(f"valid settings: {valid}")
    method, err = outcome(most.MosT, **kwargs)
    if err is not None:
        return
    result, err = outcome(method.fit, problem)
    event(f"fit: {'error' if err is not None else 'ok'}")
    if err is not None:
        return
    assert result.params.shape == (int(kwargs["n_models"]), dim)
    assert torch.isfinite(result.params).all()
    assert torch.isfinite(result.losses).all() if hasattr(result, "losses") else True


# ------------------------------------------------------------------ federated
@FAST
@given(
    lr=numbers,
    rounds=st.sampled_from([1, 10, 0, -1, 2.5, True, np.int64(5), "3"]),
    participation=st.sampled_from([1.0, 0.5, 1e-12, 0.0, 1.5, -0.1, math.nan, math.inf, True, "0.5",
                                   np.float32(0.5)]),
    batch_size=st.sampled_from([1, 10, 0, 3.0, np.int32(4)]),
    eval_every=st.sampled_from([0, 1, 10, -1, 1.5]),
)
def test_federated_config_valid_or_refused(lr, rounds, participation, batch_size, eval_every):
    cfg, err = outcome(most.federated.FederatedConfig, lr=lr, rounds=rounds, participation=participation,
                       batch_size=batch_size, eval_every=eval_every)
    if err is None:
        assert math.isfinite(float(cfg.lr)) and float(cfg.lr) > 0
        assert 0 < float(cfg.participation) <= 1
        assert int(cfg.rounds) >= 1 and int(cfg.batch_size) >= 1 and int(cfg.eval_every) >= 0


@FAST
@given(server_lr=numbers, method=st.sampled_from(["FedAvg", "FedProx", "MGDA", "IFCA", "MosT", "Linearization"]))
def test_federated_methods_refuse_bad_server_lr(server_lr, method):
    cls = getattr(most.federated.methods, method)
    obj, err = outcome(cls, n_models=2, server_lr=server_lr)
    if err is None:
        assert math.isfinite(float(obj.server_lr)) and float(obj.server_lr) > 0


@st.composite
def label_arrays(draw, size: int):
    kind = draw(st.sampled_from(["int", "int", "float_int", "float_frac", "str", "object_str", "object_int",
                                 "bool", "negative", "nan", "large", "2d"]))
    base = np.arange(size) % 3
    return {
        "int": base, "float_int": base.astype(np.float64), "float_frac": base + 0.5,
        "str": np.array(["a", "b", "c"])[base], "object_str": np.array(["a", 1, 2], dtype=object)[base],
        "object_int": base.astype(object), "bool": base > 0, "negative": base - 1,
        "nan": np.where(base == 0, np.nan, base), "large": base + 10, "2d": base[:, None],
    }[kind]


@FAST
@given(data=st.data())
def test_federated_data_valid_or_refused(data):
    size = data.draw(st.integers(1, 6))
    dim = data.draw(st.integers(1, 3))
    scale = data.draw(st.sampled_from(SCALES + [1e39]))  # 1e39 overflows float32
    x = np.linspace(-1, 1, size * dim).reshape(size, dim) * scale
    xkind = data.draw(st.sampled_from(["float", "float", "int", "str", "nan", "1d", "rows"]))
    x = {"float": x, "int": x.astype(np.int64) if scale < 1e18 else x, "str": x.astype(str),
         "nan": np.where(x == x.max(), np.nan, x), "1d": x[:, 0], "rows": x[:-1] if size > 1 else x[:0]}[xkind]
    y = data.draw(label_arrays(size))
    client, err = outcome(most.federated.ClientData, x, y, x, y, x, y)
    if err is not None:
        return
    assert client.x_train.dtype == torch.float32 and torch.isfinite(client.x_train).all()
    assert client.y_train.dtype == torch.int64
    n_classes = data.draw(st.sampled_from([1, 3, 20, 0, 2.5, np.int64(3)]))
    ds, err = outcome(most.federated.FederatedDataset, name="toy", clients=(client,), n_classes=n_classes,
                      input_shape=client.input_shape, client_ids=("c0",))
    if err is None:
        assert int(ds.y_min if hasattr(ds, "y_min") else client.y_train.min()) >= 0
        assert int(client.y_train.max()) < ds.n_classes


# ------------------------------------------------------------------ scikit-learn
sklearn = pytest.importorskip("sklearn")


@SLOW
@given(data=st.data(), estimator=st.sampled_from(["classifier", "regressor"]))
def test_sklearn_estimators_predict_finite_values_or_refuse(data, estimator):
    from most.sklearn import MosTClassifier, MosTRegressor

    rng = np.random.default_rng(data.draw(st.integers(0, 3)))
    n = data.draw(st.sampled_from([6, 12]))
    scale = data.draw(st.sampled_from(SCALES[1:]))
    X = rng.normal(size=(n, 2)) * scale
    valid = data.draw(st.booleans())  # half the runs with valid inputs only, so that fits happen
    pick = (lambda good, bad: st.sampled_from(good)) if valid else (lambda good, bad: st.sampled_from(good + bad))
    xkind = data.draw(pick(["ok"], ["nan", "inf", "1d", "str"]))
    X = {"ok": X, "nan": np.where(X == X.max(), np.nan, X), "inf": np.where(X == X.max(), np.inf, X),
         "1d": X[:, 0], "str": X.astype(str)}[xkind]
    y = (np.arange(n) % 2) if estimator == "classifier" else np.linspace(0, 1, n) * scale
    groups = data.draw(pick([None, "three", "one_each"], ["nan", "wrong_length"]))
    groups = {None: None, "three": np.arange(n) % 3, "one_each": np.arange(n),
              "nan": np.where(np.arange(n) == 0, np.nan, np.arange(n) % 3.0), "wrong_length": np.arange(n + 1)}[groups]
    params = dict(n_models=data.draw(pick([1, 2, np.int64(2)], [0, 2.0])), rounds=2,
                  lr=data.draw(pick([1e-3, 0.1, 1.0, np.float32(0.1)], BAD_NUMBERS)),
                  diversity=data.draw(pick([0.0, 0.1], [-1.0, math.inf, math.nan])), random_state=0)
    est = (MosTClassifier if estimator == "classifier" else MosTRegressor)(**params)
    fitted, err = outcome(est.fit, X, y, groups=groups)
    event(f"fit: {'error' if err is not None else 'ok'}")
    if err is not None:
        return
    pred, err = outcome(fitted.predict, X, groups=groups)
    assert err is None, err
    if estimator == "classifier":
        assert set(np.unique(pred)) <= set(np.unique(y))
    else:
        assert np.isfinite(pred).all()
