"""How a round gets the gradients its combiner reads (most.engine.paths): the linear path's one
forward and one reverse pass per step, the served rows only, forward-mode rows with the loss matrix."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import most
from most.problems import quadratic_clusters


class _Recording(most.methods.MinNorm):
    """MinNorm that records the shape of every Jacobian it is given."""

    def __call__(self, jacobian, weights, **kw):
        object.__getattribute__(self, "shapes").append(tuple(jacobian.shape))
        return super().__call__(jacobian, weights, **kw)


class _Dense(most.methods.MinNorm):
    active_only = False


def test_models_never_hold_gradients_of_objectives_they_do_not_serve():
    # 4 clusters x 10 objectives, 4 models: with one owner per objective each model's
    # min-norm problem has ~10 rows, not 40, and the run equals the dense-Jacobian run.
    problem = quadratic_clusters(4, 10, dim=3, seed=1)
    recording = _Recording()
    object.__setattr__(recording, "shapes", [])
    packed = most.MosT(n_models=4, rounds=15, inner_steps=2, combiner=recording, seed=3, seeding=None).fit(problem)
    dense = most.MosT(n_models=4, rounds=15, inner_steps=2, combiner=_Dense(), seed=3, seeding=None).fit(problem)
    shapes = recording.shapes
    assert len(shapes) == 30 and all(s[0] == 4 and s[2] == 3 for s in shapes)
    assert max(s[1] for s in shapes[-10:]) <= 12 < 40  # the groups settle to the 4 clusters
    torch.testing.assert_close(packed.params, dense.params, rtol=1e-5, atol=1e-6)
    for a, b in zip(packed.history, dense.history):
        torch.testing.assert_close(a.weights, b.weights, rtol=1e-5, atol=1e-6)


def _counted_quadratics():
    """60 quadratic objectives in d = 4 whose function records each call in ``calls``."""
    c = 3 * torch.randn(60, 4, generator=torch.Generator().manual_seed(0))
    calls = []

    def fn(t):
        calls.append(1)
        return ((t - c) ** 2).sum(-1)

    return most.Problem.from_function(fn, dim=4, n_objectives=60), calls


@pytest.mark.parametrize("inner_steps", [1, 3])
def test_a_round_of_a_linear_combiner_evaluates_the_objectives_once_per_step(inner_steps):
    # the plan's loss matrix and the first step's gradients come from one forward pass; the same
    # steps as a loss matrix followed by weighted_gradients at the same parameters
    problem, calls = _counted_quadratics()
    rounds = 7
    fit = most.MosT(n_models=3, rounds=rounds, inner_steps=inner_steps, lr=0.05, seeding=None, reseed=None)
    result = fit.fit(problem)
    assert len(calls) == rounds * inner_steps + 1  # + the final loss matrix

    generator = torch.Generator().manual_seed(0)
    params = problem.initial_params(3, generator)
    assignment, weighting, combiner = fit.components()
    assignment.reset(60, 3, generator)
    for t in range(rounds):
        weights = weighting(assignment(problem.loss_matrix(params), t, rounds))
        for _ in range(inner_steps):
            _, direction = problem.weighted_gradients(params, lambda L: combiner.linear_coefficients(weights, L))
            params = params - 0.05 * direction
    assert torch.equal(result.params, params)



class _FirstObjectives(most.methods.Assignment):
    """Model j serves objectives ``j * per, ..., (j + 1) * per - 1``, equally; the rest none."""

    def __init__(self, per: int):
        self.per = per

    def __call__(self, losses, round, total, previous=None):
        n, m = losses.shape
        plan = torch.zeros(n, m, dtype=losses.dtype)
        for j in range(m):
            plan[j * self.per:(j + 1) * self.per, j] = 1.0 / (m * self.per)
        return plan


def _min_norm_steps_by_hand(problem, fit, rounds, lr):
    """The rounds of an active_only combiner as separate evaluations: the loss matrix, the plan,
    then the served objectives' gradients at the same parameters (one step per round)."""
    generator = torch.Generator().manual_seed(fit.seed)
    params = problem.initial_params(fit.n_models, generator)
    assignment, weighting, combiner = fit.components()
    assignment.reset(problem.n_objectives, fit.n_models, generator)
    for t in range(rounds):
        losses = problem.loss_matrix(params)
        weights = weighting(assignment(losses, t, rounds))
        rows, valid = most.problem.active_rows(weights > 0)
        jac = problem.active_gradients(params, rows)
        direction, _ = combiner(jac, weights.gather(1, rows) * valid, losses=losses.T, params=params)
        params = params - lr * direction
    return params


@pytest.mark.parametrize("inner_steps", [1, 3])
def test_forward_mode_rows_come_with_the_loss_matrix(inner_steps):
    # d = 4 < n / m = 20: the served rows are computed in forward mode, whose passes give every
    # objective's derivatives, so the round's first gradients come from the loss matrix's evaluation
    # (one call of the function instead of two), value for value those of separate evaluations
    problem, calls = _counted_quadratics()
    assert problem.forward_rows(20) and not problem.forward_rows(4)
    rounds = 6
    fit = most.variants.apply("min-norm", most.MosT(n_models=3, rounds=rounds, inner_steps=inner_steps, lr=0.05,
                                                    seeding=None, reseed=None))
    result = fit.fit(problem)
    assert len(calls) == rounds * inner_steps + 1  # + the final loss matrix
    if inner_steps == 1:
        assert torch.equal(result.params, _min_norm_steps_by_hand(problem, fit, rounds, 0.05))


def test_a_plan_with_few_rows_drops_the_forward_jacobian_and_asks_for_its_rows():
    # n / m = 20 > d = 4 promises forward mode, but this plan gives each model 3 rows (k <= d): the
    # rows are computed as they would be without the up-front Jacobian (reverse mode), value for value
    c = 3 * torch.randn(60, 4, generator=torch.Generator().manual_seed(1))
    problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=4, n_objectives=60)
    fit = most.MosT(n_models=3, rounds=5, lr=0.05, seeding=None, reseed=None, assignment=_FirstObjectives(3),
                    combiner=most.methods.MinNorm())
    result = fit.fit(problem)
    assert torch.equal(result.params, _min_norm_steps_by_hand(problem, fit, 5, 0.05))


def test_an_objective_no_model_serves_may_have_an_undefined_gradient():
    # the up-front Jacobian holds every objective's row; only the served rows are checked
    c = 3 * torch.randn(40, 2, generator=torch.Generator().manual_seed(2))

    def fn(t):
        losses = ((t - c) ** 2).sum(-1)
        return torch.cat([losses[:-1], torch.sqrt(0.0 * t[:1])])  # last objective: value 0, gradient NaN

    problem = most.Problem.from_function(fn, dim=2, n_objectives=40)
    fit = most.MosT(n_models=2, rounds=3, lr=0.05, seeding=None, reseed=None, assignment=_FirstObjectives(15),
                    combiner=most.methods.MinNorm())
    assert bool(torch.isfinite(fit.fit(problem).params).all())
    served = dataclasses.replace(fit, assignment=_FirstObjectives(20))  # model 1 now serves objective 39
    with pytest.raises(ValueError, match="Gradient of objective 39 for model 1 is not finite at round 0"):
        served.fit(problem)


# ------------------------------------------------------------------ the path is chosen by what a combiner reads
@pytest.mark.parametrize("name, kind", sorted((n, k) for n, k in most.registry.components().items()
                                              if issubclass(k, most.methods.Combiner)))
def test_every_registered_combiner_gets_the_path_of_what_it_reads(name, kind):
    from most.engine.paths import PATHS, AllRowsPath, LinearPath, ServedRowsPath, gradient_path

    combiner = kind()
    expected = LinearPath if kind.linear else ServedRowsPath if kind.active_only else AllRowsPath
    assert combiner.reads in PATHS and type(gradient_path(combiner)) is expected
    assert gradient_path(combiner) is not gradient_path(combiner)  # a run's path holds that run's pending pass


def test_a_combiner_reading_every_row_gets_the_full_jacobian_each_step():
    # _Dense reads every row: each round asks for the full Jacobian (the round's and each further
    # step's), and its steps equal the packed run's to round-off
    problem = quadratic_clusters(3, 6, dim=2, seed=4)
    recording = _Recording()
    object.__setattr__(recording, "shapes", [])

    class _DenseRecording(_Recording):
        active_only = False

    dense = _DenseRecording()
    object.__setattr__(dense, "shapes", [])
    assert dense.reads == "all" and recording.reads == "served"
    most.MosT(n_models=3, rounds=4, inner_steps=2, combiner=dense, seed=0, seeding=None).fit(problem)
    assert dense.shapes == [(3, 18, 2)] * 8
