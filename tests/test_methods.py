"""Components (weightings, marginals, combiners, MosT-E) and the Problem contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import most
from most import transport
from most.methods import (
    Curriculum,
    EqualAssignment,
    GammaWeights,
    MajorityShare,
    MinNorm,
    ModelsSelectObjectives,
    ObjectivesSelectModels,
    RandomAssignment,
    Shares,
    TransportAssignment,
    Uniform,
    WeightedSum,
)


def _uniform(k):
    return torch.full((k,), 1.0 / k, dtype=torch.float64)


# ------------------------------------------------------------------ MajorityShare
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), m=st.integers(1, 6), seed=st.integers(0, 10_000), method=st.sampled_from(["exact", "sinkhorn"]))
def test_majority_share_gives_each_objective_one_owner(n, m, seed, method):
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(n, m, generator=g, dtype=torch.float64)
    a = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    plan = transport.solve(cost, a / a.sum(), _uniform(m), method=method, reg=1e-2 if method == "sinkhorn" else None).plan
    w = MajorityShare()(plan)  # [m, n]
    assert w.shape == (m, n)
    share = plan / plan.sum(1, keepdim=True)
    owner = share.argmax(1)
    for j in range(m):
        if (owner == j).any():  # a model that owns objectives counts exactly those
            assert torch.equal(w[j] > 0, owner == j)
        else:  # an orphan falls back to its shares
            torch.testing.assert_close(w[j], share[:, j])
    # the owner is the model with the largest share, and the weight is that share
    torch.testing.assert_close(w.max(0).values, share.max(1).values)
    assert (w.max(0).values >= 1.0 / m - 1e-12).all()


def test_majority_share_is_independent_of_n_and_of_alpha():
    # A hard assignment gives unit weights whatever n is, and whatever alpha is.
    for n in (4, 40, 400):
        plan = torch.zeros(n, 2, dtype=torch.float64)
        plan[: n // 2, 0] = 1.0 / n
        plan[n // 2 :, 1] = 1.0 / n
        w = MajorityShare()(plan)
        assert set(w.unique().tolist()) == {0.0, 1.0}
    a = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    plan = torch.diag(a)[:, :3]
    assert torch.equal(MajorityShare()(plan), torch.eye(3, dtype=torch.float64))


def test_majority_share_drops_minority_slivers_that_gamma_weights_keep():
    plan = torch.tensor([[0.25, 0.0], [0.24, 0.01], [0.0, 0.25], [0.0, 0.25]], dtype=torch.float64)
    w = MajorityShare()(plan)
    assert w[1, 1] == 0 and w[0, 1] == pytest.approx(0.96)
    assert GammaWeights()(plan)[1, 1] == pytest.approx(0.04)  # the literal sliver


def test_orphan_model_falls_back_to_its_shares():
    plan = torch.tensor([[0.3, 0.2], [0.3, 0.2]], dtype=torch.float64)  # model 1 owns nothing
    w = MajorityShare()(plan)
    torch.testing.assert_close(w[1], torch.tensor([0.4, 0.4], dtype=torch.float64))


def test_shares_keep_every_share_and_agree_with_majority_share_on_one_model_rows():
    plan = torch.tensor([[0.25, 0.0], [0.15, 0.10], [0.0, 0.25], [0.0, 0.0]], dtype=torch.float64)
    w = Shares()(plan)
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.6, 0.0, 0.0], [0.0, 0.4, 1.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(w.sum(0), torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64))  # row 3: no mass
    hard = torch.zeros(6, 3, dtype=torch.float64)
    hard[torch.arange(6), torch.tensor([0, 2, 1, 0, 2, 1])] = 1.0 / 6
    assert torch.equal(Shares()(hard), MajorityShare()(hard))


# ------------------------------------------------------------------ marginals
def test_semi_relaxed_marginals():
    losses = torch.tensor([[1.0, 0.0], [2.0, 0.5], [0.1, 3.0]], dtype=torch.float64)
    a, b = ObjectivesSelectModels()(losses, 0, 1)
    assert b is None and torch.allclose(a, _uniform(3))
    a, b = ModelsSelectObjectives()(losses, 0, 1)
    assert a is None and torch.allclose(b, _uniform(2))
    plan = TransportAssignment(marginals=ObjectivesSelectModels())(losses, 0, 1)
    assert torch.equal(plan.argmax(1), losses.argmin(1))


def test_share_bounds_price_is_relative_to_the_losses_and_keeps_the_balance_for_small_gaps():
    from most.methods import ShareBounds

    g = torch.Generator().manual_seed(3)
    # two groups of 9 and 3 over 3 models: within a group the models differ by little, across by a lot
    base = torch.tensor([[1.0, 1.05, 4.0]] * 9 + [[4.0, 4.0, 1.0]] * 3, dtype=torch.float64)
    losses = base + 0.01 * torch.rand(12, 3, generator=g, dtype=torch.float64)
    priced = TransportAssignment(marginals=ShareBounds(0.5, 2.0, price=0.5))
    loads = (priced(losses, 0, 1) * 12).sum(0)
    # the group of 9 fills models 0 and 1 (a gap of 0.05, below the price), the group of 3 keeps its own model
    # (moving to it would cost 3, above the price) although the balance would give it 4
    torch.testing.assert_close(loads, torch.tensor([5.0, 4.0, 3.0], dtype=torch.float64))
    # without the price, model 0 takes all it can of the group of 9, down to model 1's floor of 2
    free = TransportAssignment(marginals=ShareBounds(0.5, 2.0))
    torch.testing.assert_close((free(losses, 0, 1) * 12).sum(0), torch.tensor([7.0, 2.0, 3.0], dtype=torch.float64))
    # units do not matter: the price follows the losses' scale
    torch.testing.assert_close(priced(10 * losses, 0, 1), priced(losses, 0, 1))
    _, bounds = ShareBounds(price=0.5)(losses, 0, 1)
    assert bounds.price == pytest.approx(0.5 * float(losses.min(1).values.median()))
    assert ShareBounds()(losses, 0, 1)[1].price == 0.0 and ShareBounds()(losses, 0, 1)[1].target is None
    with pytest.raises(ValueError, match="price"):
        ShareBounds(price=-0.1)


def test_share_bounds_moved_balance_point_keeps_its_groups_and_refuses_bad_loads():
    from most.methods import Marginals, ShareBounds, Uniform

    g = torch.Generator().manual_seed(3)
    base = torch.tensor([[1.0, 1.05, 4.0]] * 9 + [[4.0, 4.0, 1.0]] * 3, dtype=torch.float64)
    losses = base + 0.01 * torch.rand(12, 3, generator=g, dtype=torch.float64)
    priced = ShareBounds(0.5, 2.0, price=0.5)
    # the balance point at 2/12, 7/12, 3/12 (given unnormalised): the price now holds model 1 at 7
    moved = priced.at_loads(torch.tensor([2.0, 7.0, 3.0]))
    assert moved.loads == pytest.approx((2 / 12, 7 / 12, 3 / 12)) and moved.has_balance
    loads = (TransportAssignment(marginals=moved)(losses, 0, 1) * 12).sum(0)
    torch.testing.assert_close(loads, torch.tensor([2.0, 7.0, 3.0], dtype=torch.float64))
    # the bounds widen around the moved point: model 0 may go down to 0.5 x 2 objectives
    assert float(moved(losses, 0, 1)[1].lower[0]) == pytest.approx(1 / 12)
    assert not Uniform().has_balance and not Marginals.has_balance
    with pytest.raises(NotImplementedError, match="balance point"):
        Uniform().at_loads([0.5, 0.5])
    for bad, error in (("0.5,0.5", TypeError), (0.5, TypeError), ([0.5, -0.1], ValueError),
                       ([0.5, float("nan")], ValueError), ([0.0, 0.0], ValueError), ([True, 0.5], ValueError)):
        with pytest.raises(error, match="loads"):
            ShareBounds(loads=bad)
    with pytest.raises(ValueError, match="loads for 2 models"):
        ShareBounds(loads=(0.5, 0.5))(losses, 0, 1)


def test_curriculum_moves_from_models_select_to_objectives_select():
    g = torch.Generator().manual_seed(0)
    losses = torch.rand(10, 3, generator=g, dtype=torch.float64)
    cur = Curriculum()
    assert cur.coefficient(0, 5) == 1.0 and cur.coefficient(4, 5) == 0.0
    coeffs = [cur.coefficient(t, 5) for t in range(5)]
    assert all(x > y for x, y in zip(coeffs, coeffs[1:]))
    # outside the run's rounds (a direct call) the coefficient stays in [end, start]
    assert cur.coefficient(5, 0) == 0.0 and cur.coefficient(200, 100) == 0.0 and cur.coefficient(-3, 5) == 1.0
    for t in range(5):
        a, b = cur(losses, t, 5)
        assert a.min() >= 0 and b.min() >= 0
        assert a.sum() == pytest.approx(1.0) and b.sum() == pytest.approx(1.0)
    # first round: beta uniform, and the plan is the "models select objectives" plan
    first = TransportAssignment(marginals=cur)(losses, 0, 5)
    relaxed = transport.solve(losses, None, _uniform(3)).plan
    torch.testing.assert_close(first, relaxed)
    # last round: alpha uniform, and the plan is the "objectives select models" plan
    last = TransportAssignment(marginals=cur)(losses, 4, 5)
    torch.testing.assert_close(last, transport.solve(losses, _uniform(10), None).plan)


def test_curriculum_rejects_out_of_range():
    with pytest.raises(ValueError, match="start"):
        Curriculum(start=1.5)


# ------------------------------------------------------------------ assignments and combiners
def test_random_assignment_is_fixed_per_seed_and_needs_reset():
    ra = RandomAssignment()
    with pytest.raises(RuntimeError, match="reset"):
        ra(torch.zeros(4, 2), 0, 1)
    ra.reset(4, 2, torch.Generator().manual_seed(0))
    p1 = ra(torch.zeros(4, 2, dtype=torch.float64), 0, 1)
    assert torch.allclose(p1.sum(0), torch.full((2,), 0.5, dtype=torch.float64))
    ra.reset(4, 2, torch.Generator().manual_seed(0))
    assert torch.equal(p1, ra(torch.zeros(4, 2, dtype=torch.float64), 3, 5))


def test_equal_assignment_and_weighted_sum():
    plan = EqualAssignment()(torch.zeros(3, 2, dtype=torch.float64), 0, 1)
    assert torch.allclose(plan, torch.full((3, 2), 1 / 6, dtype=torch.float64))
    jac = torch.arange(12, dtype=torch.float64).reshape(2, 3, 2)
    weights = torch.tensor([[1.0, 1.0, 2.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    direction, lam = WeightedSum()(jac, weights)
    torch.testing.assert_close(direction[0], (jac[0] * torch.tensor([[0.25], [0.25], [0.5]], dtype=torch.float64)).sum(0))
    torch.testing.assert_close(direction[1], jac[1, 1])
    torch.testing.assert_close(lam.sum(1), torch.ones(2, dtype=torch.float64))


def test_min_norm_combiner_matches_min_norm_direction():
    g = torch.Generator().manual_seed(1)
    jac = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    weights = torch.rand(3, 5, generator=g, dtype=torch.float64) * (torch.rand(3, 5, generator=g) > 0.3)
    direction, lam = MinNorm()(jac, weights)
    for j in range(3):
        torch.testing.assert_close(direction[j], most.mgda.min_norm_direction(jac[j], weights[j]), atol=1e-9, rtol=1e-7)
        assert (lam[j][weights[j] == 0] == 0).all()


def test_min_norm_on_coordinates_solves_their_qp_and_combines_the_full_gradients():
    g = torch.Generator().manual_seed(2)
    jac = torch.randn(3, 6, 8, generator=g, dtype=torch.float64)
    weights = torch.rand(3, 6, generator=g, dtype=torch.float64) * (torch.rand(3, 6, generator=g) > 0.3)
    direction, lam = MinNorm(coordinates=(5, 8))(jac, weights)
    for j in range(3):
        rows = weights[j, :, None] * jac[j, :, 5:]
        G = rows @ rows.T
        on = weights[j] > 0
        assert (lam[j][~on] == 0).all() and float(lam[j].sum()) == pytest.approx(1.0)
        # KKT of min lam' G lam on the simplex over the objectives the model serves
        Gl, f = G @ lam[j], float(lam[j] @ G @ lam[j])
        assert (Gl[on] >= f - 1e-9 * G.diagonal().max()).all()
        assert ((Gl[lam[j] > 1e-8] - f).abs() <= 1e-9 * G.diagonal().max()).all()
        # ... and the weights combine the full rows (every coordinate), not only those three
        torch.testing.assert_close(direction[j], ((lam[j] * weights[j])[:, None] * jac[j]).sum(0))
    assert direction[:, :5].abs().sum() > 0
    full = MinNorm()(jac, weights)
    for a, b in zip(MinNorm(coordinates=(0, 8))(jac, weights), full):  # all coordinates: the plain solve
        torch.testing.assert_close(a, b)
    for bad in ((3, 3), (-1, 2), (0.0, 2), (2,), "", (True, 2), (0, None), 5, (0, 1, 2), slice(2, None)):
        with pytest.raises(ValueError, match="start, stop"):
            MinNorm(coordinates=bad)
    # what min_norm_direction takes: NumPy and tensor ints, and the slice FlatModel.coordinates gives
    for same in ((np.int64(5), 8), [5, 8], torch.tensor([5, 8]), slice(5, 8)):
        assert MinNorm(coordinates=same) == MinNorm(coordinates=(5, 8))
    # a parameter's name is resolved by the loop; used unresolved it is refused, not misread
    with pytest.raises(RuntimeError, match="resolve it first"):
        MinNorm(coordinates="last")(jac, weights)
    assert MinNorm(coordinates="last").resolve(lambda name: slice(5, 8)) == MinNorm(coordinates=(5, 8))
    with pytest.raises(ValueError, match="outside the 8 parameters"):
        MinNorm(coordinates=(4, 9))(jac, weights)


def test_problem_coordinates_name_a_parameter_of_the_module():
    net = lambda: nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))  # noqa: E731
    problem = most.Problem.from_module(net, [lambda f: f(torch.ones(1, 3)).sum()])
    assert problem.coordinates("0.weight") == (0, 12) and problem.coordinates("2.weight") == (16, 24)
    assert problem.coordinates("last") == problem.coordinates("2.bias") == (24, 26) == (problem.dim - 2, problem.dim)
    theta = problem.initial_params(1, torch.Generator().manual_seed(0))[0]
    start, stop = problem.coordinates("2.bias")
    torch.testing.assert_close(theta[start:stop], problem.unflatten(theta)["2.bias"])
    with pytest.raises(ValueError, match=r"no parameter 'fc.bias'.*'0.weight'"):
        problem.coordinates("fc.bias")
    with pytest.raises(ValueError, match="from_module"):
        _quadratic()[1].coordinates("last")


def test_most_with_the_min_norm_on_one_layer_still_recovers_the_true_models():
    w, xs, ys = _regression_tasks()
    objectives = [lambda f, x=x, y=y: ((f(x).squeeze(-1) - y) ** 2).mean() for x, y in zip(xs, ys)]
    problem = most.Problem.from_module(lambda: nn.Linear(3, 1), objectives)
    combiner = MinNorm(coordinates=problem.coordinates("weight"))
    result = most.MosT(n_models=2, rounds=150, lr=0.05, combiner=combiner).fit(problem)
    trained = torch.stack([m.weight.detach().reshape(-1) for m in problem.to_modules(result.params)])
    assert torch.cdist(w, trained).min(1).values.max() < 0.05


def test_transport_assignment_warm_start_only_when_feasible():
    losses = torch.rand(6, 2, dtype=torch.float64)
    ta = TransportAssignment(method="ipot", warm_start=True)
    bad_previous = torch.full((6, 2), 1.0, dtype=torch.float64)  # not a plan for these marginals
    plan = ta(losses, 0, 1, previous=bad_previous)
    torch.testing.assert_close(plan.sum(1), _uniform(6))


def test_dirichlet_extension_weights():
    ext = most.DirichletExtension(n_extra=15, concentration=0.5)
    w = ext.mixture_weights(3, torch.Generator().manual_seed(0))
    assert w.shape == (18, 3)
    torch.testing.assert_close(w[:3], torch.eye(3, dtype=w.dtype))
    torch.testing.assert_close(w.sum(1), torch.ones(18, dtype=w.dtype))
    with pytest.raises(ValueError, match="n_extra"):
        most.DirichletExtension(n_extra=0)


# ------------------------------------------------------------------ Problem
def _quadratic(n=5, d=3, seed=0):
    c = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return c, most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1) + t.sin().sum(), dim=d, n_objectives=n)


def test_jacobian_matches_autograd_for_every_model_and_objective():
    c, problem = _quadratic()
    params = torch.randn(3, 3, dtype=torch.float64)
    losses, jac = problem.jacobian(params)
    assert losses.shape == (5, 3) and jac.shape == (3, 5, 3)
    for j in range(3):
        for i in range(5):
            theta = params[j].clone().requires_grad_(True)
            value = problem.fn(theta)[i]
            (grad,) = torch.autograd.grad(value, theta)
            torch.testing.assert_close(jac[j, i], grad)
            torch.testing.assert_close(losses[i, j], value.detach())


def test_vectorize_false_gives_the_same_results():
    c, problem = _quadratic()
    looped = most.Problem.from_function(problem.fn, dim=3, n_objectives=5, vectorize=False)
    params = torch.randn(4, 3, dtype=torch.float64)
    for a, b in zip(problem.jacobian(params), looped.jacobian(params)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(problem.loss_matrix(params), looped.loss_matrix(params))


def test_initialisation_options():
    g = torch.Generator().manual_seed(0)
    base = dict(fn=lambda t: t, dim=2, n_objectives=2)
    assert most.Problem.from_function(**base).initial_params(3, g).shape == (3, 2)
    shared = most.Problem.from_function(**base, init=torch.tensor([1.0, 2.0])).initial_params(3, g)
    assert torch.equal(shared, torch.tensor([[1.0, 2.0]] * 3))
    per = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(most.Problem.from_function(**base, init=per).initial_params(3, g), per)
    fn_init = most.Problem.from_function(**base, init=lambda m, gen: torch.ones(m, 2))
    assert torch.equal(fn_init.initial_params(2, g), torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"init\(m, generator\)"):
        most.Problem.from_function(**base, init=lambda m, gen: torch.ones(m, 3)).initial_params(2, g)


def test_names_must_match():
    with pytest.raises(ValueError, match="names"):
        most.Problem.from_function(lambda t: t, dim=2, n_objectives=2, names=["a"])


def _regression_tasks(n=6, groups=2, d=3, samples=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(groups, d, generator=g) * 3
    xs = [torch.randn(samples, d, generator=g) for _ in range(n)]
    ys = [x @ w[i % groups] for i, x in enumerate(xs)]
    return w, xs, ys


def test_module_problem_matches_module_forward_and_trains():
    w, xs, ys = _regression_tasks()
    objectives = [lambda f, x=x, y=y: ((f(x).squeeze(-1) - y) ** 2).mean() for x, y in zip(xs, ys)]
    problem = most.Problem.from_module(lambda: nn.Linear(3, 1, bias=False), objectives)
    assert problem.dim == 3 and problem.n_objectives == 6
    params = problem.initial_params(2, torch.Generator().manual_seed(0))
    modules = problem.to_modules(params)
    for j, module in enumerate(modules):
        with torch.no_grad():
            expected = torch.stack([((module(x).squeeze(-1) - y) ** 2).mean() for x, y in zip(xs, ys)])
        torch.testing.assert_close(problem.loss_matrix(params)[:, j], expected)
    result = most.MosT(n_models=2, rounds=150, lr=0.05).fit(problem)
    trained = torch.stack([m.weight.detach().reshape(-1) for m in problem.to_modules(result.params)])
    # each true model is recovered by one of the two trained models
    assert torch.cdist(w, trained).min(1).values.max() < 0.05


def test_module_problem_with_minibatches_under_vmap():
    w, xs, ys = _regression_tasks(n=4, samples=200)
    gen = torch.Generator().manual_seed(0)

    def make(x, y):
        def objective(f):
            idx = torch.randint(0, len(x), (16,), generator=gen)
            return ((f(x[idx]).squeeze(-1) - y[idx]) ** 2).mean()
        return objective

    problem = most.Problem.from_module(lambda: nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)),
                                       [make(x, y) for x, y in zip(xs, ys)])
    result = most.MosT(n_models=2, rounds=30, lr=0.01).fit(problem)
    assert torch.isfinite(result.params).all() and result.params.shape == (2, problem.dim)


def test_module_problem_errors():
    with pytest.raises(ValueError, match="empty"):
        most.Problem.from_module(lambda: nn.Linear(2, 1), [])
    with pytest.raises(ValueError, match="nn.Module"):
        most.Problem.from_module(lambda: 3, [lambda f: f(torch.zeros(1))])
    with pytest.raises(ValueError, match="from_module"):
        _quadratic()[1].to_modules(torch.zeros(1, 3))


def test_uniform_marginals_repr_and_values():
    a, b = Uniform()(torch.zeros(4, 2, dtype=torch.float64), 0, 1)
    assert torch.allclose(a, _uniform(4)) and torch.allclose(b, _uniform(2))
    assert repr(Uniform()) == "Uniform()"


# ------------------------------------------------------------------ box constraints
def test_bounds_clamp_initialise_inside_and_project_gradients():
    problem = most.Problem.from_function(lambda t: torch.stack([(t**2).sum(), ((t - 2) ** 2).sum()]), dim=3,
                                         n_objectives=2, bounds=(0.5, 1.0))
    params = problem.initial_params(4, torch.Generator().manual_seed(0))
    assert (params >= 0.5).all() and (params <= 1.0).all()
    at_wall = torch.tensor([[0.5, 0.7, 1.0]])
    jac = torch.tensor([[[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]])  # [m=1, n=2, d=3]
    tangent = problem.tangent_jacobian(at_wall, jac)
    # coordinate 0 sits at the lower bound: the positive component (asks to go lower) is dropped
    # coordinate 2 sits at the upper bound: the negative component (asks to go higher) is dropped
    assert torch.equal(tangent, torch.tensor([[[0.0, 1.0, 1.0], [-1.0, -1.0, 0.0]]]))
    assert torch.equal(problem.apply_projection(torch.tensor([[0.0, 0.7, 3.0]])), torch.tensor([[0.5, 0.7, 1.0]]))
    with pytest.raises(ValueError, match="lower <= upper"):
        most.Problem.from_function(lambda t: t, dim=2, n_objectives=2, bounds=(1.0, 0.0))


def test_map_objectives_keeps_bounds_and_applies_transform():
    problem = most.Problem.from_function(lambda t: torch.stack([t.sum(), -t.sum()]), dim=2, n_objectives=2,
                                         bounds=(0.0, 1.0))
    mapped = problem.map_objectives(lambda l: torch.stack([l.max(), l.min(), l.sum()]), 3, names=["a", "b", "c"])
    assert mapped.bounds == (0.0, 1.0) and mapped.names == ("a", "b", "c")
    torch.testing.assert_close(mapped.loss_matrix(torch.tensor([[0.25, 0.5]])).squeeze(1), torch.tensor([0.75, -0.75, 0.0]))


# ------------------------------------------------------------------ SmoothMax (the "worst" variant)
def test_smooth_max_coefficients_ignore_shift_and_scale_of_the_losses():
    g = torch.Generator().manual_seed(0)
    losses = torch.rand(3, 7, generator=g, dtype=torch.float64) * 4
    weights = (torch.rand(3, 7, generator=g, dtype=torch.float64) > 0.4).double()
    weights[:, 0] = 1.0
    c = most.SmoothMax().linear_coefficients(weights, losses)
    assert torch.allclose(most.SmoothMax().linear_coefficients(weights, 5.0 * losses - 2.0), c, atol=1e-12)
    assert torch.allclose(c.sum(1), torch.ones(3, dtype=torch.float64))
    assert bool((c[weights == 0] == 0).all())
    for j in range(3):  # the worst served objective weighs most; the best about exp(-10) of it
        served = weights[j] > 0
        worst = torch.where(served, losses[j], -torch.inf).argmax()
        best = torch.where(served, losses[j], torch.inf).argmin()
        assert int(c[j].argmax()) == int(worst)
        if best != worst:
            assert float(c[j, best] / c[j, worst]) == pytest.approx(math.exp(-10), rel=1e-9)


def test_smooth_max_takes_the_mean_of_equal_losses():
    weights = torch.tensor([[1.0, 3.0, 0.0]], dtype=torch.float64)
    c = most.SmoothMax().linear_coefficients(weights, torch.full((1, 3), 2.0, dtype=torch.float64))
    assert torch.allclose(c, torch.tensor([[0.25, 0.75, 0.0]], dtype=torch.float64))


def test_worst_variant_serves_each_group_at_its_minimax_point():
    # two groups on a line: {0, 1, 5} (mean 2, minimax point 2.5) and {100, 101, 102, 110}
    # (mean 103.25, minimax point 105); the default goes to the means, "worst" to the minimax points
    centres = torch.tensor([0.0, 1.0, 5.0, 100.0, 101.0, 102.0, 110.0])
    problem = most.Problem.from_function(lambda t: (t - centres) ** 2, dim=1, n_objectives=7)
    base = most.MosT(n_models=2, rounds=600, lr=0.02, seed=0)
    mean_fit = base.fit(problem).params.sort(0).values[:, 0]
    worst_fit = most.variants.apply("worst", base).fit(problem).params.sort(0).values[:, 0]
    assert torch.allclose(mean_fit, torch.tensor([2.0, 103.25]), atol=1e-3)
    assert torch.allclose(worst_fit, torch.tensor([2.5, 105.0]), atol=0.05)
    worst = lambda p: most.metrics.worst_objective(problem.loss_matrix(p[:, None]))
    assert worst(worst_fit) < 0.9 * worst(mean_fit)


def test_the_variants_page_lists_every_variant_of_the_registry():
    import most.variants
    from most import registry

    listed = [line.split("``")[1] for line in most.variants.__doc__.splitlines() if line.startswith("* ``")]
    assert listed == list(registry.VARIANTS)


def test_both_most_configurations_share_one_transport_configuration():
    # the centralised and the federated MosT declare the transport fields once (TransportConfig):
    # the same names, checks and assignment; only the default marginals differ
    import dataclasses

    import most.federated as fl

    shared = [f.name for f in dataclasses.fields(most.methods.TransportConfig)]
    assert len(shared) == 8
    for cls in (most.MosT, fl.methods.MosT):
        assert issubclass(cls, most.methods.TransportConfig)
        names = [f.name for f in dataclasses.fields(cls)]
        assert [n for n in names if n in shared] == shared
        with pytest.raises(TypeError, match=r"`weighting` must be a most\.methods\.Weighting"):
            cls(n_models=2, weighting="majority")
        with pytest.raises(ValueError, match="assignment` replaces the transport fields, so diversity"):
            cls(n_models=2, diversity=0.5, assignment=most.methods.CappedTransportAssignment(2))
        plan = cls(n_models=2, transport="sinkhorn", diversity=0.1).transport_assignment()
        assert isinstance(plan, most.methods.TransportAssignment) and plan.method == "sinkhorn"
    assert isinstance(most.MosT(2).marginals, most.methods.LoadBounds)
    assert isinstance(fl.methods.MosT(2).marginals, most.methods.ShareBounds)
