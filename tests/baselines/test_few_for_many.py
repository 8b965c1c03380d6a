"""Few-for-many baselines (TCH-Set, STCH-Set, sum-of-minimum) and the many-objective metrics.

Gradients against autograd, the mu -> 0 limit, Lloyd's monotone descent, recovery of
mixed-regression models by SoM (Lloyd) and MosT, and bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import most
from most.baselines import (
    BestModelAssignment,
    STCHSet,
    STCHSetCombiner,
    SumOfMinimum,
    SumOfMinimumCombiner,
    TCHSet,
    TCHSetCombiner,
    kmeanspp_seeding,
    stch_set,
    sum_of_minimum,
    tch_set,
)
from most.metrics import average_objective, recovery_error, worst_objective
from most.problems import mixed_regression

D64 = torch.float64




def random_problem(seed: int, n: int = 7, d: int = 4) -> most.Problem:
    """n convex quadratics ||A_i theta - b_i||^2 + 0.1 ||theta||^2 with random A_i, b_i."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, 3, d, generator=g, dtype=D64)
    b = 2.0 * torch.randn(n, 3, generator=g, dtype=D64)
    return most.Problem.from_function(
        lambda t: ((A @ t - b) ** 2).sum(-1) + 0.1 * (t**2).sum(), dim=d, n_objectives=n
    )


def autograd_of(problem: most.Problem, params: torch.Tensor, scalarisation) -> torch.Tensor:
    """d scalarisation(L) / d params, with L [n, m] built from the problem by plain autograd."""
    x = params.detach().clone().requires_grad_(True)
    losses = torch.stack([problem.fn(x[k]) for k in range(x.shape[0])]).T  # [n, m]
    (grad,) = torch.autograd.grad(scalarisation(losses), x)
    return grad


def combiner_direction(problem, params, combiner):
    losses, jac = problem.jacobian(params)
    weights = torch.ones(params.shape[0], problem.n_objectives, dtype=D64)
    return combiner(jac, weights, losses=losses.T, params=params)


# ====================================================================== gradients = autograd
@pytest.mark.parametrize("seed", range(6))
def test_tch_set_direction_is_the_autograd_subgradient(seed):
    problem = random_problem(seed)
    g = torch.Generator().manual_seed(100 + seed)
    params = torch.randn(3, 4, generator=g, dtype=D64)
    lam = tuple((0.2 + torch.rand(7, generator=g, dtype=D64)).tolist())
    z = tuple((0.5 * torch.randn(7, generator=g, dtype=D64)).tolist())
    direction, coeff = combiner_direction(problem, params, TCHSetCombiner(lam, z))
    expected = autograd_of(problem, params, lambda L: tch_set(L, lam, z))
    torch.testing.assert_close(direction, expected, rtol=1e-10, atol=1e-10)
    assert int((coeff != 0).sum()) == 1  # one model, one objective
    assert direction.norm(dim=1).gt(0).sum() == 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mu", [0.05, 0.5, 3.0])
def test_stch_set_direction_is_the_autograd_gradient(seed, mu):
    problem = random_problem(seed)
    g = torch.Generator().manual_seed(200 + seed)
    params = torch.randn(3, 4, generator=g, dtype=D64)
    lam = tuple((0.2 + torch.rand(7, generator=g, dtype=D64)).tolist())
    z = tuple((0.5 * torch.randn(7, generator=g, dtype=D64)).tolist())
    direction, coeff = combiner_direction(problem, params, STCHSetCombiner(lam, z, mu))
    expected = autograd_of(problem, params, lambda L: stch_set(L, lam, z, smoothing=mu))
    torch.testing.assert_close(direction, expected, rtol=1e-9, atol=1e-10)
    assert (coeff >= 0).all()


@pytest.mark.parametrize("seed", range(4))
def test_sum_of_minimum_direction_is_the_gradient_of_the_mean_of_minima(seed):
    problem = random_problem(seed, n=9)
    params = torch.randn(3, 4, generator=torch.Generator().manual_seed(300 + seed), dtype=D64)
    direction, coeff = combiner_direction(problem, params, SumOfMinimumCombiner())
    expected = autograd_of(problem, params, lambda L: sum_of_minimum(L) / L.shape[0])
    torch.testing.assert_close(direction, expected, rtol=1e-10, atol=1e-10)
    assert torch.equal((coeff > 0).sum(0), torch.ones(9, dtype=torch.long))  # each objective: its best model


def test_stch_is_numerically_stable_for_large_losses_and_tiny_mu():
    losses = torch.tensor([[1e4, 2e4, 3.0], [5e3, 1.0, 7e4]], dtype=D64)  # [m = 2, n = 3]
    coeff = STCHSetCombiner(smoothing=1e-3).coefficients(losses)
    assert torch.isfinite(coeff).all()
    # The worst objective after taking each one's best model is objective 0 (5e3), served by model 1.
    torch.testing.assert_close(coeff, TCHSetCombiner().coefficients(losses))
    assert math.isfinite(float(stch_set(losses.T, smoothing=1e-3)))


# ====================================================================== STCH -> TCH
@pytest.mark.parametrize("seed", range(5))
def test_stch_tends_to_tch_as_mu_goes_to_zero(seed):
    g = torch.Generator().manual_seed(400 + seed)
    n, m = 8, 3
    L = 5.0 * torch.rand(n, m, generator=g, dtype=D64)
    lam = (0.5 + torch.rand(n, generator=g, dtype=D64)).tolist()
    z = (0.1 * torch.rand(n, generator=g, dtype=D64)).tolist()
    tch = float(tch_set(L, lam, z))
    gaps = []
    for mu in (1.0, 0.1, 1e-2, 1e-3, 1e-5):
        stch = float(stch_set(L, lam, z, smoothing=mu))
        # Bounds from the two log-sum-exps: -mu max(lam) log m <= STCH - TCH <= mu log n.
        assert -mu * max(lam) * math.log(m) - 1e-12 <= stch - tch <= mu * math.log(n) + 1e-12
        gaps.append(abs(stch - tch))
    assert gaps[-1] < 1e-4
    # The gradient coefficients converge too (unique argmax / argmin for continuous draws).
    tch_c = TCHSetCombiner(tuple(lam), tuple(z)).coefficients(L.T)
    stch_c = STCHSetCombiner(tuple(lam), tuple(z), 1e-6).coefficients(L.T)
    torch.testing.assert_close(stch_c, tch_c, atol=1e-6, rtol=0)
    far = STCHSetCombiner(tuple(lam), tuple(z), 1.0).coefficients(L.T)
    assert (far - tch_c).abs().sum() > 0.1  # ... and are really different at mu = 1


# ====================================================================== Lloyd
def quadratic_centres(seed: int, n: int = 40, d: int = 3) -> torch.Tensor:
    return 3.0 * torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=D64)


def quadratic_problem(seed: int, n: int = 40, d: int = 3) -> most.Problem:
    centres = quadratic_centres(seed, n, d)
    return most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=d, n_objectives=n,
                                      init=lambda m, g: 3.0 * torch.randn(m, d, generator=g, dtype=D64))


def som_trace(method, problem):
    values = []
    result = method.fit(problem, callback=lambda record, params: values.append(float(record.losses.min(1).values.sum())))
    values.append(float(result.losses.min(1).values.sum()))
    return values, result


@pytest.mark.parametrize("seed", range(8))
def test_lloyd_rounds_never_increase_the_sum_of_minima(seed):
    # lr <= 1 / L (L = 2 for ||theta - c||^2; ~3 for the regression below).
    problem = quadratic_problem(seed)
    values, result = som_trace(SumOfMinimum(n_models=4, rounds=25, inner_steps=3, lr=0.3, seed=seed), problem)
    assert all(b <= a * (1 + 1e-12) + 1e-12 for a, b in zip(values, values[1:])), values
    assert values[-1] < values[0]
    # ... also from the problem's own start, with the ridge, and on regression objectives.
    values, _ = som_trace(SumOfMinimum(n_models=3, rounds=25, inner_steps=2, lr=0.45, seed=seed, seeding="init",
                                       ridge=0.1), problem)
    assert all(b <= a * (1 + 1e-12) + 1e-12 for a, b in zip(values, values[1:])), values
    data = mixed_regression(n_objectives=30, n_groups=3, dim=4, seed=seed)
    values, _ = som_trace(SumOfMinimum(n_models=3, rounds=15, inner_steps=2, lr=0.1, seed=seed), data.problem())
    assert all(b <= a * (1 + 1e-6) for a, b in zip(values, values[1:])), values  # float32 data


def test_lloyd_is_exactly_the_assign_then_refit_alternation():
    centres, problem = quadratic_centres(0, n=12, d=2), quadratic_problem(0, n=12, d=2)
    result = SumOfMinimum(n_models=3, rounds=4, inner_steps=200, lr=0.25, seed=1).fit(problem)
    # With enough inner steps each model ends at the mean of the centres it serves (k-means):
    # the last round's plan is the hard best-model assignment, and the steps re-fit the means.
    cluster = result.history[-1].plan.argmax(1)
    for k in range(3):
        members = cluster == k
        if members.any():
            torch.testing.assert_close(result.params[k], centres[members].mean(0), atol=1e-8, rtol=0)
    assert torch.equal(result.assignment, BestModelAssignment()(result.history[-1].losses, 0, 1))


def test_kmeanspp_seeding_puts_models_at_objective_minimisers_in_different_groups():
    # Three tight, far-apart groups: after the first seed, the gradient-norm weights make a
    # draw from an already covered group very unlikely (weight ratio ~ (0.1 / 20)^2).
    g = torch.Generator().manual_seed(0)
    means = torch.tensor([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]], dtype=D64)
    centres = means.repeat_interleave(10, 0) + 0.1 * torch.randn(30, 2, generator=g, dtype=D64)
    problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=30,
                                         init=lambda m, g: torch.randn(m, 2, generator=g, dtype=D64))
    for seed in range(5):
        seeds = kmeanspp_seeding(problem, 3, torch.Generator().manual_seed(seed), steps=60, lr=0.25)
        nearest = torch.cdist(seeds, centres).min(1)
        assert (nearest.values < 1e-6).all()  # each seed is (numerically) some centre
        assert sorted((nearest.indices // 10).tolist()) == [0, 1, 2]  # one per group
    # The Lloyd method starts there (the run's generator drives the seeding).
    first = []
    SumOfMinimum(n_models=3, rounds=1, lr=0.25, seed_steps=60, seed=3).fit(
        problem, callback=lambda r, p: first.append(r.losses.min(0).values))
    assert (first[0] < 1e-10).all()  # every model sits on an objective's minimiser at round 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_kmeanspp_seeding_and_sum_of_minimum_run_on_a_gpu_as_on_the_cpu():
    # the run's generator is a CPU generator: the seeding's draws stay on the host wherever the
    # models live, so a problem on the GPU picks the same objectives as on the CPU
    centres = 3.0 * torch.randn(40, 4, generator=torch.Generator().manual_seed(0), dtype=D64)
    results = {}
    for device in ("cpu", "cuda"):
        c = centres.to(device)
        problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=4, n_objectives=40,
                                             init=lambda m, g: torch.randn(m, 4, generator=g, dtype=D64).to(device))
        results[device] = SumOfMinimum(n_models=3, rounds=5, lr=0.1, seed=1).fit(problem)
    torch.testing.assert_close(results["cuda"].params.cpu(), results["cpu"].params, rtol=1e-9, atol=1e-9)


# ====================================================================== recovery
def test_som_lloyd_and_most_recover_well_separated_mixed_regression_models():
    # Noise 0.1, no individual perturbation: 3 ground-truth models in d = 5, pairwise >= 3 apart.
    data = mixed_regression(n_objectives=60, n_groups=3, dim=5, samples=30, noise=0.1, individual=0.0, seed=0)
    assert torch.pdist(data.betas).min() > 3.0
    problem = data.problem()
    tolerance = 0.1  # ~2% of a typical ||beta|| (2 sqrt(5) ~ 4.5)
    som = SumOfMinimum(n_models=3, rounds=15, inner_steps=5, lr=0.1, seed=0).fit(problem)
    most_result = most.MosT(n_models=3, rounds=100, lr=0.1, seed=0).fit(problem)
    som_error = recovery_error(som.params, data.betas)
    most_error = recovery_error(most_result.params, data.betas)
    assert som_error < tolerance, som_error
    assert most_error < tolerance, most_error
    # Each objective is served by the model of its own group, for both methods.
    for result in (som, most_result):
        served = result.best_model()
        for k in range(3):
            assert len(set(served[data.groups == k].tolist())) == 1
    # A method that cannot separate the groups does not pass the same bar.
    mgda = most.MGDA(n_models=3, rounds=20, lr=0.1, seed=0).fit(problem)
    assert recovery_error(mgda.params, data.betas) > 10 * tolerance


# ====================================================================== end to end
def test_methods_run_through_the_solver_and_return_results():
    problem = quadratic_problem(1, n=20)
    for method in (TCHSet(n_models=3, rounds=7, lr=0.1), STCHSet(n_models=3, rounds=7, lr=0.1, smoothing=0.5),
                   SumOfMinimum(n_models=3, rounds=7, lr=0.1, algorithm="gradient"),
                   SumOfMinimum(n_models=3, rounds=7, inner_steps=2, lr=0.1)):
        result = method.fit(problem)
        assert isinstance(result, most.Result) and len(result.history) == 7
        assert result.params.shape == (3, 3) and result.losses.shape == (20, 3)
        torch.testing.assert_close(result.assignment.sum(), torch.tensor(1.0, dtype=D64))


@pytest.mark.parametrize("name", ["tch", "stch", "som"])
def test_the_set_scalarisations_take_the_same_steps_by_one_reverse_pass_as_from_the_jacobian(name):
    # their coefficients depend on the step's losses; the loop forms the direction by one vjp
    # over the models instead of the n-row Jacobian, with the same steps
    import dataclasses

    from most.solver import run
    from most.methods import EqualAssignment, GammaWeights

    combiner = {"tch": TCHSetCombiner(), "stch": STCHSetCombiner(smoothing=0.5), "som": SumOfMinimumCombiner()}[name]

    class FromJacobian(type(combiner)):
        linear = False

    slow = FromJacobian(**{f.name: getattr(combiner, f.name) for f in dataclasses.fields(combiner)})
    problem = quadratic_problem(2, n=24)
    kw = dict(n_models=3, rounds=10, inner_steps=2, lr=0.05, assignment=EqualAssignment(), weighting=GammaWeights())
    fast, ref = run(problem, combiner=combiner, **kw), run(problem, combiner=slow, **kw)
    torch.testing.assert_close(fast.params, ref.params, atol=1e-5, rtol=1e-5)
    for a, b in zip(fast.history, ref.history):
        torch.testing.assert_close(a.weights, b.weights.to(a.weights), atol=1e-6, rtol=1e-6)


def test_stch_set_lowers_the_worst_objective_below_som_and_som_lowers_the_average():
    # Random centres (no clusters): the two scalarisations pull in different directions.
    problem = quadratic_problem(3, n=60, d=2)
    stch = STCHSet(n_models=3, rounds=400, lr=0.05, smoothing=0.5, seed=0).fit(problem)
    som = SumOfMinimum(n_models=3, rounds=40, inner_steps=10, lr=0.25, seed=0).fit(problem)
    assert worst_objective(stch.losses) < worst_objective(som.losses)
    assert average_objective(som.losses) < average_objective(stch.losses)


def test_ridge_is_added_to_every_objective():
    problem = quadratic_problem(2, n=10)
    result = SumOfMinimum(n_models=2, rounds=3, lr=0.1, ridge=0.4).fit(problem)
    plain = problem.loss_matrix(result.params)
    torch.testing.assert_close(result.losses, plain + 0.2 * (result.params**2).sum(1))


# ====================================================================== metrics
def test_many_objective_metrics():
    L = torch.tensor([[3.0, 1.0], [0.5, 4.0], [2.0, 2.5]])
    assert worst_objective(L) == 2.0
    assert average_objective(L) == pytest.approx((1.0 + 0.5 + 2.0) / 3)
    true = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    perm = true[[2, 0, 1]] + torch.tensor([[0.3, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert recovery_error(perm, true) == pytest.approx(0.1)  # labels do not matter
    # Greedy nearest matching would give the first estimate to both; the optimum does not.
    est = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    assert recovery_error(est, true[:2]) == pytest.approx(1.0)
    # Fewer estimates than truths: the unmatched truth pays its nearest distance.
    assert recovery_error(true[:1], true[:2]) == pytest.approx(2.0)


# ====================================================================== bad input
@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: TCHSet(n_models=2, preference=[[1.0, 2.0]]), r"1-D vector .*shape \[n\]"),
        (lambda: TCHSet(n_models=2, preference=[1.0, -0.5]), "non-negative: entry 1"),
        (lambda: TCHSet(n_models=2, preference=[0.0, 0.0]), "all zeros"),
        (lambda: TCHSet(n_models=2, ideal=[0.0, float("nan")]), "NaN or inf"),
        (lambda: STCHSet(n_models=2, smoothing=0.0), "smoothing"),
        (lambda: STCHSet(n_models=2, smoothing=-1.0), "smoothing"),
        (lambda: STCHSetCombiner(smoothing=0), "smoothing"),
        (lambda: SumOfMinimum(n_models=2, algorithm="kmeans"), "'lloyd' or 'gradient'"),
        (lambda: SumOfMinimum(n_models=2, seeding="random"), "seeding"),
        (lambda: SumOfMinimum(n_models=2, ridge=-0.1), "ridge"),
        (lambda: SumOfMinimum(n_models=2, seed_lr=0.0), "seed_lr"),
        (lambda: SumOfMinimum(n_models=0), "n_models"),
        (lambda: stch_set(torch.ones(3, 2), smoothing=-0.1), "smoothing"),
        (lambda: tch_set(torch.ones(3)), r"shape \[n, m\]"),
        (lambda: worst_objective(torch.ones(3)), r"shape \[n, m\]"),
        (lambda: average_objective(torch.tensor([[1.0, float("nan")]])), "NaN"),
        (lambda: recovery_error(torch.ones(2, 3), torch.ones(2, 4)), "same parameter dimension"),
        (lambda: recovery_error(torch.ones(3), torch.ones(2, 3)), "matrix of models"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("method", [TCHSet, STCHSet])
def test_wrong_preference_or_ideal_length_is_rejected_before_the_run(method):
    problem = quadratic_problem(0, n=5)
    with pytest.raises(ValueError, match=r"`preference` has 3 entries but the problem has 5 objectives"):
        method(n_models=2, preference=[1.0, 1.0, 1.0]).fit(problem)
    with pytest.raises(ValueError, match=r"`ideal` has 6 entries but the problem has 5 objectives"):
        method(n_models=2, ideal=[0.0] * 6).fit(problem)
    with pytest.raises(ValueError, match="preference"):
        tch_set(torch.ones(5, 2), preference=[1.0, 2.0])


@pytest.mark.parametrize("method", [TCHSet, STCHSet])
@pytest.mark.parametrize("setting", ["preference", "ideal"])
@pytest.mark.parametrize("value", [[True, False], [0.5, True], np.array([True, False]), torch.tensor([True, True])])
def test_a_bool_in_the_preference_or_ideal_is_refused(method, setting, value):
    # NumPy would read [0.5, True] as [0.5, 1.0]: a bool is a mistake, not a weight or a loss
    with pytest.raises(ValueError, match=f"`{setting}` must be a vector of numbers.*holds a bool"):
        method(n_models=2, **{setting: value})


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_set_values_of_integer_and_bool_losses_equal_those_of_the_same_losses_in_float(dtype):
    # the preference and ideal are fractions: they must not be cast to the losses' dtype
    L = torch.tensor([[1, 3], [4, 2], [0, 0]]).to(dtype)
    for kwargs in (dict(preference=[0.5, 0.5, 0.5]), dict(ideal=[0.5, 0.5, 0.5]),
                   dict(preference=[0.3, 1.0, 0.7], ideal=[0.25, 0.5, -0.5])):
        expected = tch_set(L.double(), **kwargs)
        assert float(tch_set(L, **kwargs)) == pytest.approx(float(expected))
        assert float(stch_set(L, smoothing=0.01, **kwargs)) == pytest.approx(
            float(stch_set(L.double(), smoothing=0.01, **kwargs)))
        assert tch_set(L, **kwargs).is_floating_point()
    assert float(tch_set(L.numpy().tolist(), preference=[0.5, 0.5, 0.5])) == pytest.approx(
        float(tch_set(L.double(), preference=[0.5, 0.5, 0.5])))


@pytest.mark.parametrize("make", [
    lambda: SumOfMinimum(n_models=3, seed_steps=0),
    lambda: SumOfMinimum(n_models=3, seed_steps=0, seeding="kmeans++", algorithm="gradient"),
])
def test_zero_seed_steps_are_refused_with_kmeanspp_seeding(make):
    # with no steps every seeded model is the same start: the models would begin as copies
    with pytest.raises(ValueError, match=r"`seed_steps` must be >= 1 with k-means\+\+ seeding.*seeding='init'"):
        make()


def test_zero_seed_steps_are_accepted_where_nothing_is_seeded():
    problem = quadratic_problem(0, n=6)
    for method in (SumOfMinimum(n_models=3, rounds=2, seed_steps=0, seeding="init"),
                   SumOfMinimum(n_models=3, rounds=2, seed_steps=0, algorithm="gradient")):
        assert method.resolved_seeding == "init"
        assert method.fit(problem).params.shape == (3, 3)


def test_kmeanspp_seeding_refuses_zero_steps():
    problem = quadratic_problem(0, n=6)
    with pytest.raises(ValueError, match=r"`steps` must be an int >= 1"):
        kmeanspp_seeding(problem, 3, torch.Generator().manual_seed(0), steps=0)


def test_preferences_are_stored_as_tuples_and_accept_tensors():
    a = TCHSet(n_models=2, preference=torch.tensor([1.0, 2.0]), ideal=torch.zeros(2))
    b = TCHSet(n_models=2, preference=(1.0, 2.0), ideal=[0.0, 0.0])
    assert a == b and a.preference == (1.0, 2.0)
    assert hash(STCHSet(n_models=2, preference=[1.0, 2.0]))  # immutable, hashable
