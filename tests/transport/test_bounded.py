"""most.transport.solve_bounded: feasibility, the two limits it generalises, and bad bounds.
(Optimality against linprog runs in tests/test_conformance.py for every solver.)"""

import numpy as np
import pytest
import torch

from most.transport import solve, solve_bounded

F64 = torch.float64


def _cost(n, m, seed):
    return torch.rand(n, m, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("seed", range(3))
def test_equal_bounds_give_the_balanced_plan_and_no_bounds_each_objectives_best_model(seed):
    C = _cost(12, 3, seed)
    a = torch.full((12,), 1 / 12, dtype=F64)
    b = torch.full((3,), 1 / 3, dtype=F64)
    balanced = solve_bounded(C, a, lower=b, upper=b)
    assert balanced.cost == pytest.approx(solve(C, a, b).cost, abs=1e-12)
    free = solve_bounded(C, a)
    expected = torch.nn.functional.one_hot(C.argmin(1), 3).to(F64) / 12
    torch.testing.assert_close(free.plan, expected, atol=1e-12, rtol=0)


def test_a_floor_keeps_every_model_in_use():
    C = torch.tensor([[0.0, 5.0, 5.0]] * 6, dtype=F64)  # model 0 is the best for everything
    a = torch.full((6,), 1 / 6, dtype=F64)
    plan = solve_bounded(C, a, lower=1 / 6).plan
    torch.testing.assert_close(plan.sum(0), torch.tensor([4 / 6, 1 / 6, 1 / 6], dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close(plan.sum(1), a, atol=1e-12, rtol=0)


def test_the_plan_keeps_the_cost_dtype_and_float32_bounds_that_sum_to_one_are_accepted():
    C = _cost(5, 5, 0).float()
    plan = solve_bounded(C, torch.full((5,), 0.2), lower=torch.full((5,), 0.2)).plan
    assert plan.dtype == torch.float32
    torch.testing.assert_close(plan.sum(0), torch.full((5,), 0.2), atol=1e-6, rtol=0)


@pytest.mark.parametrize("lower, upper, match", [
    (0.5, None, "ask for 1.5 of the mass"),
    (None, 0.2, "leave room for only 0.6"),
    (0.3, 0.2, "exceeds `upper` for model 0"),
    ([0.1, 0.1], None, "one per model"),
    (-0.1, None, "non-negative"),
])
def test_bounds_no_plan_can_meet_are_refused_with_the_reason(lower, upper, match):
    with pytest.raises(ValueError, match=match):
        solve_bounded(_cost(6, 3, 0), torch.full((6,), 1 / 6, dtype=F64), lower=lower, upper=upper)


@pytest.mark.parametrize("seed", range(4))
def test_the_shortcut_without_a_solve_has_the_simplex_cost_whether_or_not_the_bounds_bind(seed):
    from scipy.optimize import linprog

    from most.transport import _bounded

    n, m = 40, 4
    C = _cost(n, m, seed)
    C[: n // 2, 0] -= 1.0  # half the objectives prefer model 0, so a cap on it binds
    a = torch.full((n,), 1 / n, dtype=F64)
    for lower, upper, binds in [(1 / n, None, False), (1 / n, 0.3, True)]:
        low = torch.full((m,), lower, dtype=F64)
        up = None if upper is None else torch.full((m,), upper, dtype=F64)
        greedy = _bounded._greedy(C, a, low.numpy(), (torch.ones(m, dtype=F64) if up is None else up).numpy())
        assert (greedy is None) == binds
        res = solve_bounded(C, a, lower=low, upper=up)
        # linprog on the same problem: rows sum to a, column sums within [lower, upper]
        eq = torch.kron(torch.eye(n, dtype=F64), torch.ones(1, m, dtype=F64)).numpy()
        cols = torch.kron(torch.ones(1, n, dtype=F64), torch.eye(m, dtype=F64)).numpy()
        ub = up.numpy() if up is not None else torch.ones(m, dtype=F64).numpy()
        lp = linprog(C.reshape(-1).numpy(), A_eq=eq, b_eq=a.numpy(),
                     A_ub=torch.cat([torch.from_numpy(cols), -torch.from_numpy(cols)]).numpy(),
                     b_ub=torch.cat([torch.from_numpy(ub), -low]).numpy(), bounds=(0, None), method="highs")
        assert res.cost == pytest.approx(lp.fun, abs=1e-10)
        assert bool((res.plan.sum(0) <= torch.from_numpy(ub) + 1e-12).all()) and bool((res.plan.sum(0) >= low - 1e-12).all())


@pytest.mark.parametrize("layout", ["row-major", "column-major"])
def test_the_shortcut_gives_ties_to_the_lowest_model_and_keeps_the_cost_s_layout_and_dtype(layout):
    # rows 0-3 tie between models; the loss matrix of the loop comes column-major (losses.T)
    C = torch.tensor([[1.0, 1.0, 2.0], [3.0, 0.5, 0.5], [0.0, 0.0, 0.0], [2.0, 1.0, 1.0], [0.0, 4.0, 4.0],
                      [5.0, 5.0, 0.0]])
    C = C if layout == "row-major" else C.T.contiguous().T
    a = torch.full((6,), 1 / 6)
    res = solve_bounded(C, a, lower=1 / 6)
    assert res.plan.dtype == torch.float32 and res.plan.stride() == C.stride()
    assert res.plan.argmax(1).tolist() == [0, 1, 0, 1, 0, 2]
    assert torch.equal(res.plan.sum(1), a)
    assert res.cost == pytest.approx(float((C * res.plan).sum()), abs=1e-7)



def _priced_linprog(C, a, lower, upper, target, price):
    """min <C, G> + price * sum_j max(0, load_j - target_j), rows a, lower <= load <= upper, by linprog:
    variables G (n m) then the excess e (m), e_j >= load_j - target_j, e >= 0."""
    import numpy as np
    from scipy.optimize import linprog

    n, m = C.shape
    c = np.concatenate([C.numpy().ravel(), np.full(m, price)])
    rows = np.zeros((n, n * m + m))
    for i in range(n):
        rows[i, i * m:(i + 1) * m] = 1
    load = np.zeros((m, n * m + m))
    for j in range(m):
        load[j, j:n * m:m] = 1
    excess = load.copy()
    excess[:, n * m:] = -np.eye(m)  # load_j - e_j <= target_j
    A_ub = np.vstack([load, -load, excess])
    b_ub = np.concatenate([upper, -lower, target])
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=rows, b_eq=a.numpy(), bounds=(0, None), method="highs")
    assert res.status == 0
    return res.fun


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("price", [0.05, 0.3, 2.0])
def test_a_priced_balance_is_optimal_for_the_tv_penalised_transport(seed, price):
    """The plan minimises <C, G> + price * (load above the target) within the bounds (linprog)."""
    import numpy as np

    n, m = 14, 4
    C = _cost(n, m, seed)
    a = torch.full((n,), 1 / n, dtype=F64)
    lower, upper, target = np.full(m, 0.5 / m), np.full(m, 2 / m), np.full(m, 1 / m)
    res = solve_bounded(C, a, lower=0.5 / m, upper=2 / m, target=1 / m, price=price)
    load = res.plan.sum(0).numpy()
    torch.testing.assert_close(res.plan.sum(1), a, atol=1e-12, rtol=0)
    assert (load >= lower - 1e-12).all() and (load <= upper + 1e-12).all()
    value = res.cost + price * np.clip(load - target, 0, None).sum()
    assert value == pytest.approx(_priced_linprog(C, a, lower, upper, target, price), abs=1e-9)
    assert res.cost == pytest.approx(float((C * res.plan).sum()), abs=1e-12)  # the cost is <C, plan> alone


def test_a_high_price_gives_the_balance_and_a_tiny_one_the_hard_bounds_plan():
    C = _cost(12, 3, 7)
    a = torch.full((12,), 1 / 12, dtype=F64)
    b = torch.full((3,), 1 / 3, dtype=F64)
    high = solve_bounded(C, a, lower=0.0, upper=1.0, target=b, price=10.0)
    assert high.cost == pytest.approx(solve(C, a, b).cost, abs=1e-12)
    tiny = solve_bounded(C, a, lower=0.0, upper=1.0, target=b, price=1e-9)
    assert tiny.cost == pytest.approx(solve_bounded(C, a).cost, abs=1e-7)


def test_an_objective_leaves_the_balance_only_for_a_gap_above_the_price():
    C = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]], dtype=F64)  # model 0 is everyone's best
    a = torch.full((4,), 0.25, dtype=F64)
    moved = [(solve_bounded(C, a, target=0.5, price=p).plan * 4).round()[:, 1].tolist() for p in (0.5, 1.5, 2.5)]
    assert moved == [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]  # gaps 1, 2, 3, 4 against the price


@pytest.mark.parametrize("kw, match", [
    (dict(price=-1.0, target=0.5), r"`price` must be a non-negative number; got -1\.0"),
    (dict(price=float("nan"), target=0.5), "non-negative finite"),
    (dict(price=True, target=0.5), "non-negative finite number; got True"),
    (dict(price="1", target=0.5), "pass a number, not a string"),
    (dict(price=1.0), "give `target` too"),
])
def test_a_bad_price_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        solve_bounded(_cost(4, 2, 0), torch.full((4,), 0.25, dtype=F64), **kw)


@pytest.mark.parametrize("diversity", [-1.0, float("nan"), float("inf"), None, "0.1", True])
def test_a_diversity_that_solve_refuses_is_refused_with_solve_s_message(diversity):
    C, a = _cost(4, 2, 0), torch.full((4,), 0.25, dtype=F64)
    with pytest.raises(ValueError, match="`diversity` must be a non-negative") as bounded:
        solve_bounded(C, a, lower=0.25, diversity=diversity)
    with pytest.raises(ValueError) as balanced:
        solve(C, a, torch.full((2,), 0.5, dtype=F64), diversity=diversity)
    assert str(bounded.value) == str(balanced.value)


def test_a_diversity_given_as_a_numpy_or_tensor_scalar_gives_the_plan_of_the_float():
    C = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 4.0]], dtype=F64)
    a = torch.full((4,), 0.25, dtype=F64)
    plain = solve_bounded(C, a, lower=0.25, diversity=0.5)
    for same in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5)):
        res = solve_bounded(C, a, lower=0.25, diversity=same)
        assert torch.equal(res.plan, plain.plan) and res.cost == plain.cost
