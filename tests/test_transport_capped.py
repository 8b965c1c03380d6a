"""most.transport.solve_capped: the transport plan with each share capped (k models per objective)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from most import transport
from most.transport import solve_capped


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
