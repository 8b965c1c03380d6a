"""most.transport.solve_capped: the transport plan with each share capped (k models per objective);
most.transport.solve_capacity: each model's load capped at capacity times its weight."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from most import transport
from most.transport import solve_capacity, solve_capped


def _brute_force(cost: np.ndarray, k: int) -> float:
    """The cheapest balanced assignment of every objective to k distinct models (each model
    n k / m objectives), each pair carrying 1/(n k): every vertex of the capped polytope."""
    n, m = cost.shape
    per_model = n * k // m
    best = np.inf
    for choice in itertools.product(list(itertools.combinations(range(m), k)), repeat=n):
        load = np.zeros(m, dtype=int)
        for models in choice:
            load[list(models)] += 1
        if (load == per_model).all():
            best = min(best, sum(cost[i, list(models)].sum() for i, models in enumerate(choice)) / (n * k))
    return best


@pytest.mark.parametrize("n,m,k,seed", [(6, 3, 2, 0), (6, 3, 2, 1), (6, 4, 2, 2), (4, 4, 3, 3), (6, 4, 2, 4)])
def test_capped_plan_is_the_cheapest_k_models_per_objective_assignment(n, m, k, seed):
    cost = np.random.default_rng(seed).random((n, m))
    res = solve_capped(torch.from_numpy(cost), torch.full((n,), 1 / n), torch.full((m,), 1 / m), max_share=1 / k)
    units = res.plan.numpy() * n * k
    np.testing.assert_allclose(units, units.round(), atol=1e-9)  # a vertex: whole pairs
    assert (units.round().sum(1) == k).all() and (units.round().sum(0) == n * k // m).all()
    assert res.cost == pytest.approx(_brute_force(cost, k), abs=1e-12)
    assert res.cost == pytest.approx(float((res.plan.numpy() * cost).sum()), abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_marginals_and_cap_hold_and_the_plain_problem_is_the_exact_transport(seed):
    g = torch.Generator().manual_seed(seed)
    n, m = 9, 4
    cost = torch.rand(n, m, generator=g, dtype=torch.float64) * 10 - 3
    a = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    a /= a.sum()
    b = torch.rand(m, generator=g, dtype=torch.float64) + 0.5
    b /= b.sum()
    plain = transport.solve(cost, a, b)
    assert solve_capped(cost, a, b, max_share=1.0).cost == pytest.approx(plain.cost, abs=1e-12)
    previous = plain.cost
    for s in np.linspace(1.0, float(b.max()), 5)[1:]:  # tighter caps: still feasible, never cheaper
        res = solve_capped(cost, a, b, max_share=float(s))
        torch.testing.assert_close(res.plan.sum(1), a, atol=1e-12, rtol=0)
        torch.testing.assert_close(res.plan.sum(0), b, atol=1e-12, rtol=0)
        assert (res.plan >= 0).all() and (res.plan <= s * a[:, None] + 1e-15).all()
        assert res.cost >= previous - 1e-12
        previous = res.cost


def test_a_large_problem_is_solved_to_a_feasible_vertex():
    # 20 000 variables: the equality constraints are passed sparse (a dense matrix would be
    # 2 007 x 20 000 and take seconds to build and factor)
    n, m, k = 2000, 8, 4
    cost = torch.rand(n, m, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    res = solve_capped(cost, torch.full((n,), 1 / n), torch.full((m,), 1 / m), max_share=1 / k)
    units = res.plan.numpy() * n * k
    np.testing.assert_allclose(units, units.round(), atol=1e-6)  # whole pairs: k models per objective
    assert (units.round().sum(1) == k).all() and (units.round().sum(0) == n * k // m).all()
    # the balance can only cost: never below each objective taking its k cheapest models, and
    # within 5 % of it on uniform random costs (optimality on small problems: brute force, above)
    free = float(cost.sort(1).values[:, :k].sum()) / (n * k)
    assert free - 1e-12 <= res.cost <= 1.05 * free


def test_cap_of_one_over_m_with_uniform_models_spreads_every_objective_evenly():
    cost = torch.rand(7, 5, dtype=torch.float64)
    a = torch.rand(7, dtype=torch.float64) + 0.1
    a /= a.sum()
    plan = solve_capped(cost, a, torch.full((5,), 0.2), max_share=0.2).plan
    torch.testing.assert_close(plan, a[:, None].expand(7, 5) / 5, atol=1e-12, rtol=0)


def test_capped_plan_keeps_dtype_and_scale_of_the_cost():
    cost = torch.tensor([[0.0, 1.0, 2.0], [0.0, 2.0, 1.0], [2.0, 0.0, 1.0]], dtype=torch.float32)
    a, b = torch.full((3,), 1 / 3), torch.full((3,), 1 / 3)
    res = solve_capped(cost, a, b, max_share=0.5)
    assert res.plan.dtype == torch.float32
    scaled = solve_capped(cost * 1e6 + 7, a, b, max_share=0.5)  # an affine image has the same plan
    torch.testing.assert_close(scaled.plan, res.plan)
    assert scaled.cost == pytest.approx(res.cost * 1e6 + 7, rel=1e-9)


def test_bad_input_is_refused_with_the_fix():
    cost, a, b = torch.rand(4, 3), torch.full((4,), 0.25), torch.tensor([0.5, 0.25, 0.25])
    with pytest.raises(ValueError, match=r"infeasible: model 0 .* Use max_share >= max\(b\)"):
        solve_capped(cost, a, b, max_share=0.4)
    for bad in (0.0, 1.5, -1, True, "half"):
        with pytest.raises(ValueError, match=r"max_share.*\(0, 1\]"):
            solve_capped(cost, a, b, max_share=bad)
    with pytest.raises(ValueError, match="NaN|finite"):
        solve_capped(torch.tensor([[float("nan"), 0.0], [0.0, 1.0]]), [0.5, 0.5], [0.5, 0.5], max_share=1.0)
    with pytest.raises(ValueError, match="negative"):
        solve_capped(cost, [0.5, 0.5, 0.5, -0.5], b, max_share=1.0)
    with pytest.raises(ValueError, match="length 3"):
        solve_capped(cost, a, [0.5, 0.5], max_share=1.0)


def _linprog_capacity(cost: np.ndarray, a: np.ndarray, b: np.ndarray, c: float) -> float:
    """Optimal value of min <C, G> s.t. G 1 = a, G^T 1 <= c b, G >= 0 (HiGHS, dense)."""
    from scipy.optimize import linprog

    n, m = cost.shape
    rows = np.kron(np.eye(n), np.ones((1, m)))  # sum_j G_ij
    cols = np.kron(np.ones((1, n)), np.eye(m))  # sum_i G_ij
    res = linprog(cost.ravel(), A_ub=cols, b_ub=c * b, A_eq=rows, b_eq=a, bounds=(0, None), method="highs")
    assert res.status == 0
    return res.fun


def _random_problem(seed: int, n: int = 11, m: int = 4):
    rng = np.random.default_rng(seed)
    cost = rng.uniform(-2, 3, size=(n, m))
    a = rng.uniform(0.2, 1.0, size=n)
    b = rng.uniform(0.5, 1.0, size=m)
    return cost, a / a.sum(), b / b.sum()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("c", [1.0, 1.25, 1.5, 2.0, 3.0])
def test_capacity_plan_meets_rows_and_capacities_and_is_optimal_against_linprog(seed, c):
    cost, a, b = _random_problem(seed)
    res = solve_capacity(torch.from_numpy(cost), torch.from_numpy(a), torch.from_numpy(b), capacity=c)
    plan = res.plan.numpy()
    assert res.converged and plan.min() >= -1e-15
    np.testing.assert_allclose(plan.sum(1), a, atol=1e-12, rtol=0)
    assert (plan.sum(0) <= c * b + 1e-12).all()
    assert res.cost == pytest.approx(float((plan * cost).sum()), abs=1e-12)
    assert res.cost == pytest.approx(_linprog_capacity(cost, a, b, c), abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_more_capacity_never_costs_more_and_the_loosest_is_the_cheapest_column(seed):
    cost, a, b = _random_problem(seed, n=15, m=5)
    costs = [solve_capacity(cost, a, b, capacity=c).cost for c in (1.0, 1.1, 1.5, 2.0, 4.0, 1 / b.min())]
    assert all(later <= earlier + 1e-12 for earlier, later in zip(costs, costs[1:]))
    assert costs[-1] == pytest.approx(float((a * cost.min(1)).sum()), abs=1e-12)  # nothing binds any more
    # past 1 / min(b) nothing changes (and a huge value is no numerical hazard)
    huge = solve_capacity(cost, a, b, capacity=1e12)
    np.testing.assert_allclose(huge.plan.numpy().sum(1), a, atol=1e-12, rtol=0)
    assert huge.cost == pytest.approx(costs[-1], abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_capacity_one_is_the_balanced_exact_plan_bit_for_bit(seed):
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(12, 3, generator=g, dtype=torch.float64)
    a = torch.rand(12, generator=g, dtype=torch.float64) + 0.1
    a /= a.sum()
    b = torch.full((3,), 1 / 3, dtype=torch.float64)
    balanced = transport.solve(cost, a, b, method="exact")
    res = solve_capacity(cost, a, b, capacity=1)
    assert torch.equal(res.plan, balanced.plan) and res.cost == balanced.cost
    from most.methods import TransportAssignment  # MosT's plan: the same solve

    u = torch.full((12,), 1 / 12, dtype=torch.float64)
    assert torch.equal(solve_capacity(cost, u, b, capacity=1.0).plan, TransportAssignment()(cost, 0, 1))


@pytest.mark.parametrize("seed", range(4))
def test_capacity_m_with_uniform_models_gives_every_row_its_cheapest_column(seed):
    n, m = 12, 3
    cost = torch.rand(n, m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    a, b = torch.full((n,), 1 / n, dtype=torch.float64), torch.full((m,), 1 / m, dtype=torch.float64)
    plan = solve_capacity(cost, a, b, capacity=m).plan
    assert torch.equal(plan.argmax(1), cost.argmin(1))
    torch.testing.assert_close(plan.max(1).values, a, atol=1e-15, rtol=0)  # all of each row on one column
    balanced = solve_capacity(cost, a, b, capacity=1).plan
    torch.testing.assert_close(balanced.sum(0), b, atol=1e-15, rtol=0)  # c = 1: every model exactly n / m


def test_capacity_plan_keeps_dtype_and_scale_of_the_cost():
    cost = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]], dtype=torch.float32)
    a, b = torch.full((4,), 0.25), torch.full((2,), 0.5)
    res = solve_capacity(cost, a, b, capacity=1.5)
    assert res.plan.dtype == torch.float32
    assert (res.plan * 4).round().int().tolist() == [[0, 1], [1, 0], [1, 0], [1, 0]]
    scaled = solve_capacity(cost * 1e6 + 7, a, b, capacity=1.5)  # an affine image has the same plan
    torch.testing.assert_close(scaled.plan, res.plan)
    assert scaled.cost == pytest.approx(res.cost * 1e6 + 7, rel=1e-9)


def test_bad_capacity_or_input_is_refused():
    cost, a, b = torch.rand(4, 3), torch.full((4,), 0.25), torch.full((3,), 1 / 3)
    for bad in (0.5, 0.0, -1, float("inf"), float("nan"), True, "2"):
        with pytest.raises(ValueError, match="capacity"):
            solve_capacity(cost, a, b, capacity=bad)
    with pytest.raises(ValueError, match="NaN|finite"):
        solve_capacity(torch.tensor([[float("nan"), 0.0], [0.0, 1.0]]), [0.5, 0.5], [0.5, 0.5], capacity=2)
    with pytest.raises(ValueError, match="negative"):
        solve_capacity(cost, [0.5, 0.5, 0.5, -0.5], b, capacity=2)
    with pytest.raises(ValueError, match="length 3"):
        solve_capacity(cost, a, [0.5, 0.5], capacity=2)


def test_an_int_capacity_too_large_for_a_float_is_the_loosest_capacity():
    cost, a, b = _random_problem(0, n=15, m=5)
    loosest = solve_capacity(cost, a, b, capacity=1e300)
    for huge in (10**400, np.int64(2**62), 2**1024):
        res = solve_capacity(cost, a, b, capacity=huge)
        assert torch.equal(res.plan, loosest.plan) and res.cost == loosest.cost
    assert loosest.cost == pytest.approx(float((a * cost.min(1)).sum()), abs=1e-12)  # each row's cheapest column
