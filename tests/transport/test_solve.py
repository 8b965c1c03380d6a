"""Tests of most.transport: feasibility, optimality, diversity, relaxed variants, inputs."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from most._warnings import ConvergenceWarning
from most.transport import TransportResult, diversity_regularizer, solve

METHODS = ("exact", "sinkhorn", "newton", "ipot")
ITERATIVE = ("sinkhorn", "newton", "ipot")
MARGINAL_TOL = {"exact": 1e-6, "sinkhorn": 1e-4, "newton": 1e-4, "ipot": 1e-4}
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Iterative solvers may legitimately stop at max_iter on the degenerate inputs below; the
# tests then check that the plan is still feasible, so their warning is not an error here.
quiet = pytest.mark.filterwarnings("ignore::most._warnings.ConvergenceWarning")


# ----------------------------------------------------------------------------- helpers
def _simplex(rng: np.random.Generator, k: int, zeros: bool) -> np.ndarray:
    w = rng.random(k) + 0.05
    if zeros and k > 1:
        w[rng.random(k) < 0.3] = 0.0
        if w.sum() == 0:
            w[0] = 1.0
    return w / w.sum()


def _problem(seed: int, n: int, m: int, kind: str, scale: float, zeros: bool):
    """A random or deliberately degenerate problem; returns float64 numpy (C, a, b)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        c = rng.random((n, m))
    elif kind == "constant":
        c = np.full((n, m), 0.7)
    elif kind == "dup_rows":
        c = np.repeat(rng.random((1, m)), n, axis=0)
    elif kind == "dup_cols":
        c = np.repeat(rng.random((n, 1)), m, axis=1)
    elif kind == "integer":  # many ties
        c = rng.integers(0, 3, size=(n, m)).astype(float)
    else:  # pragma: no cover
        raise AssertionError(kind)
    return c * scale, _simplex(rng, n, zeros), _simplex(rng, m, zeros)


problems = st.builds(
    _problem,
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 9),
    m=st.integers(1, 6),
    kind=st.sampled_from(["random", "constant", "dup_rows", "dup_cols", "integer"]),
    scale=st.sampled_from([1e-10, 1.0, 1e10]),
    zeros=st.booleans(),
)


def _check_marginals(plan: torch.Tensor, a, b, atol: float) -> None:
    p = plan.double()
    assert (p >= 0).all()
    if a is not None:
        np.testing.assert_allclose(p.sum(1).numpy(), a, rtol=0, atol=atol)
    if b is not None:
        np.testing.assert_allclose(p.sum(0).numpy(), b, rtol=0, atol=atol)


def _linprog_value(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    n, m = c.shape
    rows = np.kron(np.eye(n), np.ones((1, m)))  # Γ 1_m = a
    cols = np.kron(np.ones((1, n)), np.eye(m))  # Γᵀ 1_n = b
    res = linprog(
        c.ravel(), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([a, b * a.sum() / b.sum()]),
        bounds=(0, None), method="highs",
    )
    assert res.status == 0, res.message
    return float(res.fun)


def _objective(c, plan, tau: float) -> float:
    c = torch.as_tensor(c, dtype=torch.float64)
    plan = plan.double()
    return float((c * plan).sum() + tau * diversity_regularizer(plan))


def _sum_max(plan: torch.Tensor) -> float:
    return float(plan.double().max(dim=1).values.sum())


def _random(n: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.random((n, m)) + 0.1, _simplex(rng, n, False), _simplex(rng, m, False)


# ------------------------------------------------------------------------ feasibility
@FAST
@given(problems)
def test_exact_marginals_and_vertex_support(problem):
    c, a, b = problem
    res = solve(c, a, b)
    assert isinstance(res, TransportResult) and res.converged
    _check_marginals(res.plan, a, b, MARGINAL_TOL["exact"])
    n, m = c.shape
    assert int((res.plan > 0).sum()) <= n + m - 1  # Proposition 1: a vertex


@quiet
@pytest.mark.parametrize("method", ITERATIVE)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems)
def test_iterative_marginals(method, problem):
    c, a, b = problem
    res = solve(c, a, b, method=method)
    _check_marginals(res.plan, a, b, MARGINAL_TOL[method])
    assert np.isfinite(res.cost)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (5, 1), (3, 7), (7, 3)])
def test_small_and_rectangular_shapes(method, shape):
    c, a, b = _random(*shape, seed=1)
    res = solve(c, a, b, method=method)
    _check_marginals(res.plan, a, b, MARGINAL_TOL[method])
    if 1 in shape:  # the marginals determine the plan
        np.testing.assert_allclose(res.plan.numpy(), np.outer(a, b), atol=1e-12)


@quiet
@pytest.mark.parametrize("method", METHODS)
def test_cost_scale_does_not_matter(method):
    c, a, b = _random(12, 4, seed=3)
    plans = [solve(c * s, a, b, method=method).plan for s in (1e-10, 1.0, 1e10)]
    for p in plans:
        _check_marginals(p, a, b, MARGINAL_TOL[method])
    for p in plans[1:]:  # reg is relative to the cost range: the same plan at every scale
        np.testing.assert_allclose(p.numpy(), plans[0].numpy(), atol=1e-6)


@pytest.mark.parametrize("method", ITERATIVE)
def test_constant_cost_gives_independent_coupling(method):
    a = np.array([0.2, 0.3, 0.5])
    b = np.array([0.6, 0.4])
    res = solve(np.full((3, 2), 2.5), a, b, method=method)
    np.testing.assert_allclose(res.plan.numpy(), np.outer(a, b), atol=1e-12)
    assert res.cost == pytest.approx(2.5, rel=1e-12)


def test_zero_mass_rows_and_columns_get_nothing():
    c, _, _ = _random(6, 4, seed=5)
    a = np.array([0.0, 0.3, 0.2, 0.0, 0.5, 0.0])
    b = np.array([0.5, 0.0, 0.5, 0.0])
    for method in METHODS:
        plan = solve(c, a, b, method=method).plan.numpy()
        assert np.all(plan[a == 0] == 0) and np.all(plan[:, b == 0] == 0)
        _check_marginals(torch.as_tensor(plan), a, b, MARGINAL_TOL[method])


@pytest.mark.parametrize("seed", range(10))
def test_exact_host_path_matches_the_general_path(seed):
    # "exact" with tau = 0, both marginals and no init runs its checks and arithmetic in NumPy;
    # an init sends the same problem down the general tensor path (which the diversity loop
    # takes), and both call the same host solver, so the plan must be the same bit for bit (tied columns, float32 costs and zero-mass rows included: a last-bit
    # difference in the marginals is enough to change the simplex's pick among tied optima).
    rng = np.random.default_rng(seed)
    n, m = [(30, 5), (7, 7), (12, 3), (1, 9), (9, 1)][seed % 5] if seed < 9 else (6, 2)
    c = torch.as_tensor(rng.random((n, m)))
    if seed % 2:
        c = c[:, :1].repeat(1, m)  # every column equal: many optimal plans
    if seed >= 3:
        c = c.float()
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    if seed == 5:
        a = torch.as_tensor(rng.random(n))
        a[[0, 3]] = 0.0
        a = a / a.sum()
    b = torch.full((m,), 1.0 / m, dtype=torch.float64) if seed < 8 else torch.as_tensor(rng.dirichlet(np.ones(m)))
    if seed == 9:
        b[1] = 0.0  # one column left: the plan is a column of a
        b = b / b.sum()
    fast = solve(c, a, b)
    general = solve(c, a, b, init=torch.outer(a, b))
    assert torch.equal(fast.plan, general.plan) and fast.plan.dtype == c.dtype
    assert fast.cost == pytest.approx(general.cost, rel=1e-12, abs=1e-15)
    assert fast.converged and fast.n_iter == 1
    # A simplex stopped by the pivot cap is rounded onto the feasible set, alike on both paths.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        capped = solve(c, a, b, max_iter=2)
        capped_general = solve(c, a, b, max_iter=2, init=torch.outer(a, b))
    assert torch.equal(capped.plan, capped_general.plan) and capped.converged == capped_general.converged
    assert capped.converged == (min(n, m) == 1 or seed == 9)  # seed 9 keeps one column


def test_exact_capped_simplex_with_zero_mass_rounds_alike_on_both_paths():
    # A simplex stopped by the pivot cap leaves the zero-mass row out and rounds the sub-plan
    # onto its marginals; the host path and the general path share that code.
    for seed in range(5):
        rng = np.random.default_rng(seed)
        c = torch.as_tensor(rng.random((8, 4)))
        a = torch.as_tensor(rng.random(8))
        a[0] = 0.0
        a = a / a.sum()
        b = torch.as_tensor(rng.dirichlet(np.ones(4)))
        with pytest.warns(ConvergenceWarning):
            host = solve(c, a, b, max_iter=2)
        with pytest.warns(ConvergenceWarning):
            general = solve(c, a, b, max_iter=2, init=torch.outer(a, b))
        assert torch.equal(host.plan, general.plan) and not host.converged
        assert torch.all(host.plan[0] == 0)
        _check_marginals(host.plan, a.numpy(), b.numpy(), 1e-12)


# -------------------------------------------------------------------------- optimality
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 10),
    m=st.integers(1, 6),
    kind=st.sampled_from(["random", "integer", "dup_rows"]),
    zeros=st.booleans(),
)
def test_exact_matches_linprog(seed, n, m, kind, zeros):
    c, a, b = _problem(seed, n, m, kind, 1.0, zeros)
    ref = _linprog_value(c, a, b)
    res = solve(c, a, b)
    assert res.cost == pytest.approx(ref, rel=1e-7, abs=1e-12)
    assert res.cost == pytest.approx(float((res.plan * torch.as_tensor(c)).sum()), rel=1e-12, abs=1e-15)


def test_pinned_example():
    # Column 0 needs mass 0.5 and row 0 fills it at zero cost; rows 1 and 2 go to column 1.
    c = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.2, 0.4]], dtype=torch.float64)
    a = [0.5, 0.25, 0.25]
    b = [0.5, 0.5]
    expected = np.array([[0.5, 0.0], [0.0, 0.25], [0.0, 0.25]])
    res = solve(c, a, b)
    np.testing.assert_allclose(res.plan.numpy(), expected, atol=1e-12)
    assert res.cost == pytest.approx(0.1, abs=1e-12)
    assert res.n_iter == 1 and res.converged
    for method in ITERATIVE:
        approx = solve(c, a, b, method=method)
        np.testing.assert_allclose(approx.plan.numpy(), expected, atol=1e-3)
        assert approx.cost == pytest.approx(0.1, abs=1e-3)


@quiet
@pytest.mark.parametrize("method", ITERATIVE)
@pytest.mark.parametrize("shape,seed", [((30, 5), 0), ((30, 5), 1), ((50, 7), 2), ((50, 7), 3)])
def test_iterative_cost_close_to_exact(method, shape, seed):
    c, a, b = _random(*shape, seed=seed)
    exact = solve(c, a, b).cost
    res = solve(c, a, b, method=method)
    assert abs(res.cost - exact) <= 0.01 * exact
    assert res.cost >= exact - 1e-9  # a feasible plan cannot beat the LP optimum
    _check_marginals(res.plan, a, b, MARGINAL_TOL[method])


@quiet
@pytest.mark.parametrize("reg", [1e-1, 1e-2, 1e-3])
@pytest.mark.parametrize("shape,seed", [((30, 5), 0), ((200, 3), 1), ((500, 12), 2)])
def test_newton_and_sinkhorn_solve_the_same_entropic_problem(reg, shape, seed):
    # Both return the unique minimiser of <C, G> - eps H(G): the plans agree up to the
    # marginal tolerance, though one iterates on the semi-dual and the other on the dual.
    c, a, b = _random(*shape, seed=seed)
    sink = solve(c, a, b, method="sinkhorn", reg=reg, tol=1e-9, max_iter=200_000)
    newt = solve(c, a, b, method="newton", reg=reg, tol=1e-9)
    assert sink.converged and newt.converged
    if reg <= 1e-2:  # where Sinkhorn slows down (its rate degrades as eps shrinks)
        assert newt.n_iter < sink.n_iter / 10
    np.testing.assert_allclose(newt.plan.numpy(), sink.plan.numpy(), atol=1e-8)


def test_newton_is_near_exact_on_a_larger_problem():
    rng = np.random.default_rng(5)
    n, m = 3000, 10
    c = (rng.standard_normal((n, 1, 4)) - rng.standard_normal((1, m, 4))).__pow__(2).sum(-1)
    a, b = np.full(n, 1 / n), rng.dirichlet(np.ones(m))
    exact = solve(c, a, b).cost
    res = solve(c, a, b, method="newton")
    assert res.converged and res.n_iter <= 30
    _check_marginals(res.plan, a, b, 1e-10)
    assert exact - 1e-9 <= res.cost <= exact + 2e-3 * (c.max() - c.min())


@pytest.mark.parametrize("seed", range(6))
def test_newton_converges_where_its_model_is_poor(seed):
    # Integer costs with many ties at a tiny eps: the semi-dual is nearly piecewise linear
    # and some Newton steps fail the line search; the Sinkhorn fallback still converges.
    c, a, b = _problem(seed, 40, 2 + seed % 3, "integer", 1.0, False)
    for reg in (1e-3, 1e-4):
        res = solve(c, a, b, method="newton", reg=reg)
        assert res.converged
        _check_marginals(res.plan, a, b, 1e-10)
        assert res.cost <= solve(c, a, b).cost + 2 * reg * (c.max() - c.min()) * np.log(c.size)


def test_newton_crosses_the_flat_semi_dual_of_a_diversity_step():
    # With R(G) the linearised cost rewards each row's current column by tau >> eps, so at
    # the target eps every row sits on one column and the semi-dual is flat around the
    # optimum (a Hessian ~ exp(-tau/eps)). Newton alone stalled there for its whole budget
    # (20 s, not converged); the doubled Sinkhorn steps cross the flat region.
    rng = np.random.default_rng(0)
    n, m = 10_000, 5  # smaller problems keep a few split rows, hence curvature, at the optimum
    c, a, b = rng.random((n, m)), np.full(n, 1 / n), np.full(m, 1 / m)
    base = solve(c, a, b, method="newton")
    res = solve(c, a, b, method="newton", diversity=0.1)
    assert res.converged
    _check_marginals(res.plan, a, b, 1e-10)
    assert res.cost <= _objective(c, base.plan, 0.1) + 1e-12
    assert _sum_max(res.plan) >= 0.99  # nearly one model per objective


def test_ipot_warm_start_does_not_freeze():
    n, m = 30, 5
    rng = np.random.default_rng(7)
    c = rng.random((n, m))
    a = np.full(n, 1.0 / n)
    b = np.full(m, 1.0 / m)
    # A hard assignment (objective i -> model i mod m) that is far from optimal.
    init = np.zeros((n, m))
    init[np.arange(n), np.arange(n) % m] = 1.0 / n
    exact = solve(c, a, b)
    assert _objective(c, torch.as_tensor(init), 0.0) > 1.2 * exact.cost
    res = solve(c, a, b, method="ipot", init=init)
    _check_marginals(res.plan, a, b, MARGINAL_TOL["ipot"])
    assert abs(res.cost - exact.cost) <= 0.01 * exact.cost
    # ... also from the worst vertex (the optimum of -C)
    worst = solve(-c, a, b).plan
    res = solve(c, a, b, method="ipot", init=worst)
    assert abs(res.cost - exact.cost) <= 0.01 * exact.cost


@quiet
def test_ipot_warm_start_from_optimum_stays_optimal():
    c, a, b = _random(20, 4, seed=11)
    exact = solve(c, a, b)
    res = solve(c, a, b, method="ipot", init=exact.plan)
    # The default stop (L1 plan change <= 1e-6) lands within ~5e-4 of the optimum here.
    assert res.cost == pytest.approx(exact.cost, rel=1e-3)


# --------------------------------------------------------------------------- diversity
def test_diversity_regularizer_value():
    plan = torch.tensor([[0.3, 0.2], [0.1, 0.4]], dtype=torch.float64)
    assert float(diversity_regularizer(plan)) == pytest.approx(-0.7, abs=1e-15)
    with pytest.raises(ValueError, match="2-D"):
        diversity_regularizer(torch.ones(3))


def test_diversity_regularizer_takes_array_likes_and_refuses_a_plan_without_models():
    plan = torch.tensor([[0.3, 0.2], [0.1, 0.4]], dtype=torch.float64)
    for same in (plan.numpy(), plan.tolist(), tuple(map(tuple, plan.tolist()))):
        value = diversity_regularizer(same)
        assert isinstance(value, torch.Tensor) and value.ndim == 0
        assert float(value) == pytest.approx(-0.7, abs=1e-7)  # a list becomes float32, torch's default
    with pytest.raises(ValueError, match="`plan` must be a tensor or array-like of numbers"):
        diversity_regularizer([[0.3, 0.2], [0.1]])
    with pytest.raises(ValueError, match=r"`plan` has shape \(2, 0\): it needs at least one model"):
        diversity_regularizer(torch.ones(2, 0))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tau", [0.01, 0.1, 1.0, 10.0])
def test_exact_diversity_increases_concentration(seed, tau):
    rng = np.random.default_rng(seed)
    n, m = 25, 4
    c = rng.random((n, m))
    a = np.full(n, 1.0 / n)
    b = _simplex(rng, m, False)
    base = solve(c, a, b)
    res = solve(c, a, b, diversity=tau)
    _check_marginals(res.plan, a, b, MARGINAL_TOL["exact"])
    assert _sum_max(res.plan) >= _sum_max(base.plan) - 1e-12
    f_base = _objective(c, base.plan, tau)
    assert res.cost <= f_base + 1e-12
    assert res.cost == pytest.approx(_objective(c, res.plan, tau), rel=1e-12, abs=1e-14)


@quiet
@pytest.mark.parametrize("method", ITERATIVE)
@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_iterative_diversity_never_increases_objective(method, tau):
    c, a, b = _random(20, 4, seed=4)
    base = solve(c, a, b, method=method)
    res = solve(c, a, b, method=method, diversity=tau)
    _check_marginals(res.plan, a, b, MARGINAL_TOL[method])
    assert res.cost <= _objective(c, base.plan, tau) + 1e-10


def test_diversity_can_reach_one_model_per_objective():
    # With a large tau and uniform marginals (n = 2m), every objective goes to one model.
    c, _, _ = _random(8, 4, seed=9)
    a = np.full(8, 1 / 8)
    b = np.full(4, 1 / 4)
    res = solve(c, a, b, diversity=100.0)
    assert _sum_max(res.plan) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_diversity_uses_a_better_init(method):
    c, a, b = _random(10, 3, seed=12)
    tau = 1.0
    init = solve(c, a, b, diversity=tau).plan  # exact MM solution
    res = solve(c, a, b, method=method, diversity=tau, init=init)
    assert res.cost <= _objective(c, init, tau) + 1e-10


@pytest.mark.parametrize("relax", ["a", "b"])
def test_relaxed_with_diversity(relax):
    c, a, b = _random(12, 3, seed=13)
    a_in, b_in = (None, b) if relax == "a" else (a, None)
    base = solve(c, a_in, b_in)
    res = solve(c, a_in, b_in, diversity=0.5)
    _check_marginals(res.plan, a_in, b_in, 1e-12)
    assert res.cost <= _objective(c, base.plan, 0.5) + 1e-12


# ------------------------------------------------------------------------ semi-relaxed
@pytest.mark.parametrize("method", ["exact", "ipot"])
def test_relaxed_rows_is_rowwise_argmin(method):
    c, a, _ = _random(9, 4, seed=21)
    c[0] = [0.5, 0.2, 0.2, 0.9]  # a tie: the first index wins
    res = solve(c, a, None, method=method)
    expected = np.zeros_like(c)
    expected[np.arange(9), c.argmin(1)] = a
    assert c.argmin(1)[0] == 1
    np.testing.assert_allclose(res.plan.numpy(), expected, atol=0)
    np.testing.assert_allclose(res.plan.sum(1).numpy(), a, atol=1e-15)
    assert res.cost == pytest.approx(float((a * c.min(1)).sum()), rel=1e-12)


@pytest.mark.parametrize("method", ["exact", "ipot"])
def test_relaxed_columns_is_columnwise_argmin(method):
    c, _, b = _random(9, 4, seed=22)
    res = solve(c, None, b, method=method)
    expected = np.zeros_like(c)
    expected[c.argmin(0), np.arange(4)] = b
    np.testing.assert_allclose(res.plan.numpy(), expected, atol=0)
    np.testing.assert_allclose(res.plan.sum(0).numpy(), b, atol=1e-15)


@pytest.mark.parametrize("method", ["sinkhorn", "newton"])
def test_relaxed_entropic_is_softmax(method):
    c, a, b = _random(9, 4, seed=23)
    reg = 0.1
    eps = reg * (c.max() - c.min())
    ct = torch.as_tensor(c)
    rows = solve(c, a, None, method=method, reg=reg).plan
    expected = torch.as_tensor(a)[:, None] * torch.softmax(-ct / eps, dim=1)
    torch.testing.assert_close(rows, expected, rtol=1e-12, atol=1e-15)
    cols = solve(c, None, b, method=method, reg=reg).plan
    expected = torch.as_tensor(b)[None, :] * torch.softmax(-ct / eps, dim=0)
    torch.testing.assert_close(cols, expected, rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------- dtype and device
@quiet
@pytest.mark.parametrize("method", METHODS)
def test_float32_in_float32_out(method):
    c, a, b = _random(10, 3, seed=31)
    res = solve(torch.as_tensor(c, dtype=torch.float32), torch.as_tensor(a, dtype=torch.float32), b,
                method=method)
    assert res.plan.dtype == torch.float32
    assert isinstance(res.cost, float) and isinstance(res.n_iter, int) and isinstance(res.converged, bool)
    _check_marginals(res.plan, a, b, max(MARGINAL_TOL[method], 1e-6))


def test_array_like_inputs_and_float64_default():
    res = solve([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.5], (0.5, 0.5))
    np.testing.assert_allclose(res.plan.numpy(), [[0.5, 0.0], [0.0, 0.5]], atol=1e-7)
    res = solve(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([0.5, 0.5]), np.array([0.5, 0.5]))
    assert res.plan.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", METHODS)
def test_cuda_device_is_kept(method):
    c, a, b = _random(10, 3, seed=32)
    ct = torch.as_tensor(c, dtype=torch.float32, device="cuda")
    res = solve(ct, torch.as_tensor(a, device="cuda"), b, method=method, diversity=0.1)
    assert res.plan.device == ct.device and res.plan.dtype == torch.float32
    _check_marginals(res.plan.cpu(), a, b, 1e-4)


def test_result_is_frozen():
    res = solve([[1.0]], [1.0], [1.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.cost = 0.0  # type: ignore[misc]


# ------------------------------------------------------------------------- convergence
def test_sinkhorn_non_convergence_warns_and_stays_feasible():
    c, a, b = _random(20, 5, seed=41)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = solve(c, a, b, method="sinkhorn", max_iter=1)
    assert res.converged is False and res.n_iter == 1
    _check_marginals(res.plan, a, b, 1e-10)


def test_exact_non_convergence_warns_and_stays_feasible():
    c, a, b = _random(20, 20, seed=42)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = solve(c, a, b, max_iter=1)
    assert res.converged is False
    _check_marginals(res.plan, a, b, 1e-10)


def test_converged_runs_do_not_warn():
    c, a, b = _random(10, 3, seed=43)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert solve(c, a, b).converged
        assert solve(c, a, b, method="sinkhorn", reg=1e-2).converged
        assert solve(c, a, b, method="ipot", tol=1e-6, max_iter=20_000).converged


# --------------------------------------------------------------------------- bad input
GOOD_C = np.random.default_rng(0).random((3, 2))
GOOD_A = np.array([0.2, 0.3, 0.5])
GOOD_B = np.array([0.4, 0.6])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"cost": np.array([[0.0, np.nan], [1.0, 1.0], [0.0, 0.0]])}, "non-finite"),
        ({"cost": np.array([[0.0, 1.0], [np.inf, 1.0], [0.0, 0.0]])}, "non-finite.*row 1, column 0"),
        ({"a": np.array([0.2, 0.3, 0.6])}, "must sum to 1"),
        ({"b": np.array([-0.1, 1.1])}, "non-negative"),
        ({"a": np.array([0.5, 0.5])}, "length 3"),
        ({"b": np.array([0.2, 0.3, 0.5])}, "length 2"),
        ({"cost": np.array([0.1, 0.2, 0.3])}, "2-D"),
        ({"cost": np.zeros((0, 2))}, "at least one"),
        ({"method": "emd"}, "must be one of 'exact', 'sinkhorn', 'newton', 'ipot'"),
        ({"diversity": -0.1}, "diversity.*non-negative"),
        ({"init": np.full((3, 2), 1 / 6)}, "init is not a feasible plan"),
        ({"init": np.ones((2, 3)) / 6}, "init is not a feasible plan.*shape"),
        ({"init": np.outer(GOOD_A, GOOD_B) * np.array([[1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])},
         "init is not a feasible plan.*non-negative"),
        ({"a": None, "b": None}, "cannot both be None"),
        ({"reg": 0.0, "method": "sinkhorn"}, "reg"),
        ({"max_iter": 0}, "max_iter"),
    ],
)
def test_bad_input_raises(kwargs, match):
    args = {"cost": GOOD_C, "a": GOOD_A, "b": GOOD_B, **kwargs}
    with pytest.raises(ValueError, match=match):
        solve(args.pop("cost"), args.pop("a"), args.pop("b"), **args)
    if "init" not in kwargs and "method" not in kwargs and kwargs.get("a", GOOD_A) is not None:
        # the same message from the general path ("sinkhorn" takes it) as from the host path
        # that "exact" takes with both marginals and no init
        args = {"cost": GOOD_C, "a": GOOD_A, "b": GOOD_B, "method": "sinkhorn", **kwargs}
        with pytest.raises(ValueError, match=match):
            solve(args.pop("cost"), args.pop("a"), args.pop("b"), **args)


def test_feasible_init_is_accepted_for_every_method():
    init = np.outer(GOOD_A, GOOD_B)
    for method in METHODS:
        res = solve(GOOD_C, GOOD_A, GOOD_B, method=method, init=init)
        _check_marginals(res.plan, GOOD_A, GOOD_B, MARGINAL_TOL[method])
