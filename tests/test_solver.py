"""The MosT round loop: convergence where the answer is known, descent, variants, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.optimize import nnls

import most
from most.problems import quadratic_clusters


def hull_distance(point: torch.Tensor, vertices: torch.Tensor) -> float:
    """Euclidean distance from ``point`` to the convex hull of the rows of ``vertices``."""
    V = vertices.double().numpy().T  # [d, k]
    p = point.double().numpy()
    big = 1e4  # enforces sum(mu) = 1 as a heavily weighted extra equation
    A = np.vstack([V, big * np.ones((1, V.shape[1]))])
    rhs = np.concatenate([p, [big]])
    mu, _ = nnls(A, rhs)
    return float(np.linalg.norm(V @ mu - p))


def assert_each_cluster_has_its_own_model(problem, params, tol=0.05):
    centres, labels = problem.metadata["centres"], problem.metadata["labels"]
    n_clusters = int(labels.max()) + 1
    owners = []
    for k in range(n_clusters):
        hull = centres[labels == k]
        dists = [hull_distance(theta, hull) for theta in params]
        j = int(np.argmin(dists))
        assert dists[j] <= tol, f"cluster {k}: nearest model is {dists[j]:.3f} from the hull"
        owners.append(j)
    assert len(set(owners)) == n_clusters, f"clusters share models: {owners}"


# ------------------------------------------------------------------ convergence (known answer)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_default_most_puts_one_model_inside_each_cluster_hull(seed):
    problem = quadratic_clusters(4, 8, dim=2, separation=10.0, spread=1.0, seed=seed)
    result = most.MosT(n_models=4, rounds=200, lr=0.05, seed=seed).fit(problem)
    assert_each_cluster_has_its_own_model(problem, result.params)


@pytest.mark.parametrize("transport", ["sinkhorn", "ipot"])
def test_default_weighting_survives_dense_plans(transport):
    # Dense plans give every model a sliver of every objective: the literal Gamma-weighted
    # min-norm stalls there (benchmarks/trap.py); the default must not.
    problem = quadratic_clusters(4, 8, dim=2, seed=5)
    result = most.MosT(n_models=4, rounds=200, lr=0.05, transport=transport, seed=5).fit(problem)
    assert_each_cluster_has_its_own_model(problem, result.params)


def test_clusters_in_higher_dimension_with_diversity():
    problem = quadratic_clusters(3, 6, dim=5, separation=8.0, seed=3)
    result = most.MosT(n_models=3, rounds=200, lr=0.05, diversity=0.5, seed=3).fit(problem)
    assert_each_cluster_has_its_own_model(problem, result.params)


def test_final_assignment_matches_clusters():
    problem = quadratic_clusters(4, 5, seed=1)
    result = most.MosT(n_models=4, rounds=150, lr=0.05, seed=1).fit(problem)
    labels = problem.metadata["labels"]
    owner = result.assignment.argmax(1)
    for k in range(4):
        assert len(set(owner[labels == k].tolist())) == 1
    # a hard, balanced assignment: every row has one non-zero of 1/n
    assert torch.allclose(result.assignment.max(1).values, torch.full((20,), 1 / 20, dtype=result.assignment.dtype))


# ------------------------------------------------------------------ pinned values, by hand
def test_first_round_pinned_by_hand():
    centres = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [10.0, 2.0]], dtype=torch.float64)
    init = torch.tensor([[1.0, 1.0], [9.0, 1.0]], dtype=torch.float64)
    problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=4, init=init)
    result = most.MosT(n_models=2, rounds=1, lr=0.1, marginals=most.Uniform(), combiner=most.MinNorm(), seeding=None,
                       reseed=None).fit(problem)
    # OT: {0, 1} -> model 0, {2, 3} -> model 1. Model 0's gradients (2, 2) and (-2, 2) have
    # min-norm point (0, 2); model 1's (-2, 2) and (-2, -2) have (-2, 0).
    expected_plan = torch.tensor([[0.25, 0], [0.25, 0], [0, 0.25], [0, 0.25]], dtype=torch.float64)
    torch.testing.assert_close(result.history[0].plan, expected_plan, atol=1e-12, rtol=0)
    torch.testing.assert_close(result.params, torch.tensor([[1.0, 0.8], [9.2, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(result.history[0].weights, torch.tensor([[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]], dtype=torch.float64))


# ------------------------------------------------------------------ descent
@pytest.mark.parametrize("seed", range(5))
def test_one_round_decreases_every_objective_the_model_owns(seed):
    g = torch.Generator().manual_seed(seed)
    n, m, d = 12, 3, 6
    A = torch.randn(n, d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    H = A @ A.transpose(1, 2) + 0.1 * torch.eye(d, dtype=torch.float64)  # convex quadratics
    c = torch.randn(n, d, generator=g, dtype=torch.float64) * 3

    def fn(t):
        r = t - c
        return 0.5 * torch.einsum("nd,nde,ne->n", r, H, r)

    problem = most.Problem.from_function(fn, dim=d, n_objectives=n)
    params = problem.initial_params(m, g)
    losses, jac = problem.jacobian(params)
    plan = most.transport.solve(losses, torch.full((n,), 1 / n, dtype=torch.float64),
                                torch.full((m,), 1 / m, dtype=torch.float64)).plan
    weights = most.MajorityShare()(plan)
    direction, _ = most.MinNorm()(jac, weights)
    # The descent lemma (paper Lemma A.2, with the default weights): W_ji <g_ji, -d_j> <= -||d_j||^2 / 2
    inner = torch.einsum("mnd,md->mn", jac, -direction) * weights
    bound = -0.5 * (direction**2).sum(1, keepdim=True)
    member = weights > 0
    assert (inner[member] <= bound.expand_as(inner)[member] + 1e-10).all()
    # ... and a small step really decreases every owned objective.
    new_losses = problem.loss_matrix(params - 1e-3 * direction)
    assert (new_losses.T[member] < losses.T[member]).all()


# ------------------------------------------------------------------ variants and baselines
def test_linearization_finds_the_weighted_mean_for_quadratics():
    problem = quadratic_clusters(2, 4, seed=0)
    result = most.Linearization(n_models=3, rounds=300, lr=0.1, seed=0).fit(problem)
    weights = result.assignment * problem.n_objectives  # random preference vectors (scaled)
    w = weights / weights.sum(0, keepdim=True)
    expected = w.T @ problem.metadata["centres"]  # minimiser of sum_i w_i ||theta - c_i||^2
    torch.testing.assert_close(result.params, expected, atol=1e-4, rtol=0)


def test_mgda_ends_pareto_stationary_for_all_objectives():
    problem = quadratic_clusters(2, 3, seed=0)
    result = most.MGDA(n_models=3, rounds=400, lr=0.05, seed=1).fit(problem)
    for theta in result.params:
        assert hull_distance(theta, problem.metadata["centres"]) < 0.05


@pytest.mark.parametrize("m", [1, 2, 5])
def test_mgda_steps_by_lr_times_the_min_norm_direction_whatever_m(m):
    # each of the m runs is MGDA alone: theta <- theta - lr * u(theta), u the min-norm element
    # of all n gradients at theta, so a model's step does not shrink as m grows
    from most.mgda import min_norm_direction

    centres = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    starts = torch.tensor([[5.0, 3.0], [-4.0, -2.0], [2.0, -6.0], [7.0, 7.0], [-3.0, 8.0]], dtype=torch.float64)[:m]
    problem = most.Problem.from_function(lambda theta: ((theta - centres) ** 2).sum(-1), 2, 3, init=starts)
    seen = []
    most.MGDA(n_models=m, rounds=2, lr=0.1, seed=3).fit(problem, callback=lambda record, params: seen.append(
        params.clone()))
    for round_start, round_end in zip([starts, *seen], seen):
        for before, after in zip(round_start, round_end):
            u = min_norm_direction(2 * (before - centres))  # the gradients of ||theta - c_i||^2
            torch.testing.assert_close(before - after, 0.1 * u, rtol=1e-6, atol=1e-9)
            assert float(u.norm()) > 1e-3  # a real step: every start lies outside the centres' hull


def test_weighted_mgda_runs_and_keeps_fixed_plan():
    problem = quadratic_clusters(2, 3, seed=0)
    result = most.WeightedMGDA(n_models=2, rounds=5, lr=0.05).fit(problem)
    assert all(torch.equal(r.plan, result.history[0].plan) for r in result.history)
    assert torch.allclose(result.assignment.sum(0), torch.full((2,), 0.5, dtype=result.assignment.dtype))


@pytest.mark.parametrize("name", sorted(most.variants.VARIANTS))
def test_every_variant_runs_the_same_loop(name):
    problem = quadratic_clusters(3, 4, seed=0)
    method = most.variants.apply(name, most.MosT(n_models=3, rounds=5, lr=0.05, diversity=0.1))
    result = method.fit(problem)
    assert result.params.shape == (3, 2)
    assert len(result.history) == 5
    assert torch.isfinite(result.losses).all()


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="Unknown variant 'Z'"):
        most.variants.apply("Z", most.MosT(n_models=2))


def test_most_e_extends_objectives_and_spreads_models():
    # Two objectives, five models: MosT-E adds Dirichlet mixtures so n' = 22 > m.
    a, b = torch.tensor([0.0, 0.0]), torch.tensor([4.0, 0.0])
    problem = most.Problem.from_function(
        lambda t: torch.stack([((t - a) ** 2).sum(), ((t - b) ** 2).sum()]), dim=2, n_objectives=2)
    result = most.MosT(n_models=5, rounds=300, lr=0.05, extension=most.DirichletExtension(n_extra=20)).fit(problem)
    assert result.problem.n_objectives == 22
    assert result.losses.shape == (22, 5)
    xs = result.params[:, 0].sort().values
    assert xs[0] < 1.0 and xs[-1] > 3.0, "models should spread along the Pareto set [a, b]"
    assert (xs.diff() > 0.2).all(), f"models should be distinct, got {xs}"
    assert result.params[:, 1].abs().max() < 0.05  # on the Pareto set (the segment)


# ------------------------------------------------------------------ history and results
def test_history_records_every_round():
    problem = quadratic_clusters(2, 4, seed=0)
    result = most.MosT(n_models=2, rounds=7, inner_steps=3, lr=0.05).fit(problem)
    assert [r.round for r in result.history] == list(range(7))
    for r in result.history:
        assert r.plan.shape == (8, 2) and r.losses.shape == (8, 2) and r.weights.shape == (2, 8)
        assert torch.allclose(r.weights.sum(1), torch.ones(2, dtype=r.weights.dtype))
        assert min(r.transport_seconds, r.min_norm_seconds, r.gradient_seconds) >= 0
    assert set(result.timings()) == {"transport", "min_norm", "gradients"}
    assert result.best_model().shape == (8,)


def test_same_seed_same_result_and_other_seed_differs():
    problem = quadratic_clusters(2, 4, seed=0)
    r1 = most.MosT(n_models=2, rounds=10, lr=0.05, seed=3).fit(problem)
    r2 = most.MosT(n_models=2, rounds=10, lr=0.05, seed=3).fit(problem)
    r3 = most.MosT(n_models=2, rounds=10, lr=0.05, seed=4).fit(problem)
    assert torch.equal(r1.params, r2.params)
    assert not torch.equal(r1.params, r3.params)


def test_projection_is_applied_after_every_step():
    centres = torch.tensor([[2.0, 2.0], [3.0, -1.0], [-2.0, 0.5]])
    problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=3,
                                         project=lambda p: p.clamp(-1.0, 1.0))
    seen = []
    most.MosT(n_models=2, rounds=20, lr=0.1).fit(problem, callback=lambda rec, params: seen.append(params.abs().max()))
    assert max(float(v) for v in seen) <= 1.0


def test_repr_reproduces_the_configuration():
    method = most.MosT(n_models=3, rounds=5, diversity=0.5, marginals=most.Curriculum(0.5, 0.0))
    assert eval(repr(method), {**vars(most), "SGD": most.optim.SGD}) == method
    default = most.MosT(n_models=3)
    assert eval(repr(default), {**vars(most), "SGD": most.optim.SGD}) == default


# ------------------------------------------------------------------ only the served objectives' gradients
def test_active_jacobian_equals_the_selected_rows_of_the_full_jacobian():
    problem = quadratic_clusters(3, 5, dim=4, seed=2)
    params = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([[0, 4, 9], [14, 14, 1], [7, 2, 3]])
    losses, full = problem.jacobian(params)
    losses2, packed = problem.active_jacobian(params, rows)
    torch.testing.assert_close(losses2, losses)
    torch.testing.assert_close(packed, full.gather(1, rows[..., None].expand(-1, -1, 4)))
    loop = most.Problem.from_function(problem.fn, dim=4, n_objectives=15, vectorize=False)
    torch.testing.assert_close(loop.active_jacobian(params, rows)[1], packed)


def test_nan_loss_error_names_objective_model_and_round():
    def fn(t):
        losses = (t**2).sum() * torch.ones(3)
        return torch.where(torch.arange(3) == 1, losses / (t[0] - t[0]), losses)  # objective 1 is NaN

    problem = most.Problem.from_function(fn, dim=2, n_objectives=3, names=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"objective 1 \('b'\) for model 0 is (nan|inf) at round 0"):
        most.MosT(n_models=2, rounds=3).fit(problem)


def test_divergence_is_caught_with_round_number():
    problem = most.Problem.from_function(lambda t: torch.stack([(t**4).sum(), ((t - 1) ** 4).sum()]), dim=1,
                                         n_objectives=2, init=torch.tensor([3.0]))
    with pytest.raises(ValueError, match=r"round \d+.*smaller `lr`"):
        most.MGDA(n_models=1, rounds=50, lr=10.0).fit(problem)


def test_more_models_than_objectives_suggests_most_e():
    problem = quadratic_clusters(1, 2, seed=0)
    with pytest.raises(ValueError, match="MosT-E.*DirichletExtension"):
        most.MosT(n_models=3).fit(problem)


def test_zero_objectives_and_wrong_shapes():
    with pytest.raises(ValueError, match="at least one objective"):
        most.Problem.from_function(lambda t: t[:0], dim=2, n_objectives=0)
    problem = most.Problem.from_function(lambda t: t.sum().reshape(1), dim=2, n_objectives=3)
    with pytest.raises(ValueError, match=r"returned shape \(1,\).*shape \[3\]"):
        most.MosT(n_models=2).fit(problem)
    with pytest.raises(ValueError, match=r"`init` must have shape \[2\] or \[2, 2\]"):
        most.MosT(n_models=2).fit(most.Problem.from_function(lambda t: t, dim=2, n_objectives=2, init=torch.zeros(5)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_models=0), "n_models"),
        (dict(n_models=2, rounds=0), "rounds"),
        (dict(n_models=2, lr=-1.0), "lr"),
        (dict(n_models=2, diversity=-0.1), "diversity"),
        (dict(n_models=2, transport="greedy"), "transport"),
        (dict(n_models=2, inner_steps=1.5), "inner_steps"),
    ],
)
def test_bad_configuration_is_rejected_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        most.MosT(**kwargs)


def test_fit_rejects_non_problem():
    with pytest.raises(ValueError, match="most.Problem"):
        most.MosT(n_models=2).fit(lambda t: t)


def test_bad_marginals_from_a_custom_schedule_name_the_round():
    class Broken(most.methods.Marginals):
        def __call__(self, losses, round, total):
            n, m = losses.shape
            a = torch.full((n,), 1.0 / n, dtype=losses.dtype)
            if round == 2:
                a = 2 * a  # off the simplex
            return a, torch.full((m,), 1.0 / m, dtype=losses.dtype)

    problem = quadratic_clusters(2, 3, seed=0)
    with pytest.raises(ValueError, match=r"At round 2, in the assignment: `a` must sum to 1"):
        most.MosT(n_models=2, rounds=5, marginals=Broken()).fit(problem)


def test_numpy_and_tensor_settings_are_stored_as_plain_numbers():
    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=2, seed=0)
    method = most.MosT(n_models=np.int64(2), rounds=torch.tensor(3), lr=np.array([0.1]), seed=torch.tensor(3))
    assert (method.n_models, method.rounds, method.lr, method.seed) == (2, 3, 0.1, 3)
    assert all(type(v) in (int, float) for v in (method.n_models, method.rounds, method.lr, method.seed))
    reference = most.MosT(n_models=2, rounds=3, lr=0.1, seed=3).fit(problem)
    assert torch.equal(method.fit(problem).params, reference.params)


@pytest.mark.parametrize("make", [
    lambda: most.Problem.from_function(lambda th: ((th[None, :] - torch.ones(6, 3)) ** 2).sum(1), 4, 6),
    # written for a batch of models (theta [m, d]) instead of one model's parameters
    lambda: most.Problem.from_function(lambda th: ((th[:, None, :] - torch.ones(6, 3)) ** 2).sum(-1), 3, 6),
    lambda: most.Problem.from_module(lambda: torch.nn.Linear(2, 1), [lambda f: f(torch.ones(1, 3)).sum() ** 2]),
    lambda: most.Problem.from_module(lambda: torch.nn.Linear(2, 1).double(),
                                     [lambda f: f(torch.ones(1, 2)).sum() ** 2]),
])
def test_objectives_that_fail_on_the_parameters_are_named_as_the_cause(make):
    with pytest.raises(ValueError, match=r"The objectives fail on the models' parameters .*Check that every "
                                         r"objective takes parameters of that size and dtype"):
        most.MosT(n_models=1, rounds=2).fit(make())


def test_a_result_and_its_rounds_print_as_one_short_line():
    c = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
    problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=2, n_objectives=4)
    result = most.MosT(n_models=2, rounds=50, lr=0.2).fit(problem)
    text = repr(result)
    best = result.best_losses()
    assert len(text) < 160 and "\n" not in text
    assert text.startswith("Result(2 models of 2 parameters, 4 objectives, 50 rounds;")
    assert f"mean {float(best.double().mean()):.3g}" in text and f"worst {float(best.max()):.3g}" in text
    assert repr(result.history[0]).startswith("RoundRecord(round=0, 4 objectives x 2 models, mean best loss ")


@pytest.mark.parametrize("name", sorted(most.registry.methods("centralised")))
def test_models_keep_their_dtype_when_the_objectives_compute_in_another(name):
    # float32 starting points and a loss with float64 constants: the gradients are float64, the
    # models stay float32 for every method (the min-norm ones used to turn them into float64)
    c = 3 * torch.randn(40, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=3, n_objectives=40,
                                         init=torch.zeros(3))
    method = most.registry.methods("centralised")[name](n_models=3, rounds=4, lr=0.05)
    result = method.fit(problem)
    assert result.params.dtype == torch.float32 and bool(torch.isfinite(result.params).all())
    assert all(r.weights.dtype == torch.float32 for r in result.history if r.weights is not None)
    # the same steps as in float64, to float32's precision
    wide = method.fit(dataclasses.replace(problem, init=torch.zeros(3, dtype=torch.float64)))
    assert wide.params.dtype == torch.float64
    torch.testing.assert_close(result.params.double(), wide.params, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cls, name, value", [
    (most.Linearization, "concentration", 0.5), (most.WeightedMGDA, "concentration", 0.5),
    (most.MGDA, "tol", 1e-5), (most.MGDA, "max_iter", 50)])
@pytest.mark.parametrize("wrap", [np.array, lambda v: np.array([v]), torch.tensor])
def test_method_settings_given_as_arrays_are_stored_as_plain_numbers(cls, name, value, wrap):
    """A NumPy scalar or a 0-d or one-element array or tensor is stored as the number it was
    checked as: the method hashes and equals the one built from the number, and fits."""
    if isinstance(value, int) and wrap(value).ndim:
        pytest.skip("a count is given as a scalar, not as a one-element array")
    method = cls(n_models=2, rounds=2, lr=0.01, **{name: wrap(value)})
    stored = getattr(method, name)
    assert type(stored) is type(value) and stored == pytest.approx(value)  # float32 tensors round it
    plain = cls(n_models=2, rounds=2, lr=0.01, **{name: stored})
    assert method == plain and hash(method) == hash(plain)
    problem = most.Problem.from_function(lambda t: torch.stack([(t ** 2).sum(), ((t - 1) ** 2).sum()]), dim=2,
                                         n_objectives=2)
    assert torch.isfinite(method.fit(problem).params).all()
