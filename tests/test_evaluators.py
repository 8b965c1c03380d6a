"""The Evaluator protocol (most.evaluators): every kind of problem answers it with the same numbers.

One set of objectives, L_i(theta) = (x_i . w + b - y_i)^2 for n instances, is built four ways
(from_function, from_module, from_instances, from_datasets with one row per objective); each
kind's evaluations must agree with the others' and satisfy the protocol's identities: the
pullback of weights w is w @ J, the selected rows are rows of the Jacobian, and the gradients
alone equal those of active_jacobian."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import most
from most.evaluators import (DatasetsEvaluator, Evaluator, FunctionEvaluator, InstancesEvaluator,
                             ModuleEvaluator)

N, FEATURES = 7, 3
_g = torch.Generator().manual_seed(0)
X = torch.randn(N, FEATURES, generator=_g)
Y = torch.randn(N, generator=_g)


def _function():
    def fn(theta):
        return (X @ theta[:FEATURES] + theta[FEATURES] - Y) ** 2

    return most.Problem.from_function(fn, FEATURES + 1, N)


def _module():
    objectives = [lambda f, i=i: ((f(X[i:i + 1])[0, 0] - Y[i]) ** 2) for i in range(N)]
    return most.Problem.from_module(lambda: nn.Linear(FEATURES, 1), objectives)


def _instances():
    return most.Problem.from_instances(lambda theta, x, y: (x @ theta[:FEATURES] + theta[FEATURES] - y) ** 2,
                                       (X, Y), FEATURES + 1)


def _datasets():
    return most.Problem.from_datasets(lambda: nn.Linear(FEATURES, 1), [(X[i:i + 1], Y[i:i + 1]) for i in range(N)],
                                      lambda out, y: (out[:, 0] - y) ** 2)


KINDS = {"function": (_function, FunctionEvaluator), "module": (_module, ModuleEvaluator),
         "instances": (_instances, InstancesEvaluator), "datasets": (_datasets, DatasetsEvaluator)}
PARAMS = torch.randn(3, FEATURES + 1, generator=_g)  # nn.Linear's layout: the weight, then the bias


@pytest.fixture(params=sorted(KINDS))
def problem(request):
    build, kind = KINDS[request.param]
    problem = build()
    assert type(problem.evaluation) is kind and isinstance(problem.evaluation, Evaluator)
    return problem


def test_every_kind_computes_the_same_losses_and_jacobian(problem):
    reference = _function()
    torch.testing.assert_close(problem.loss_matrix(PARAMS), reference.loss_matrix(PARAMS))
    for a, b in zip(problem.jacobian(PARAMS), reference.jacobian(PARAMS)):
        torch.testing.assert_close(a, b)


def test_the_pullback_of_weights_is_the_weighted_sum_of_the_jacobians_rows(problem):
    _, jac = problem.jacobian(PARAMS)
    w = torch.rand(3, N, generator=torch.Generator().manual_seed(1))
    w[1, ::2] = 0.0  # a model that weighs only some objectives
    values, pullback = problem.losses_with_pullback(PARAMS)
    torch.testing.assert_close(values, problem.loss_matrix(PARAMS))
    torch.testing.assert_close(pullback(w), torch.einsum("mn,mnd->md", w, jac))


@pytest.mark.parametrize("k", [1, 2, 6])  # forward mode for a function problem when dim (4) < k
def test_selected_rows_are_rows_of_the_jacobian(problem, k):
    _, jac = problem.jacobian(PARAMS)
    rows = torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(j))[:k] for j in range(3)])
    losses, selected = problem.active_jacobian(PARAMS, rows)
    torch.testing.assert_close(losses, problem.loss_matrix(PARAMS))
    expected = jac.gather(1, rows[..., None].expand(-1, -1, FEATURES + 1))
    torch.testing.assert_close(selected, expected)
    torch.testing.assert_close(problem.active_gradients(PARAMS, rows), selected)
    if problem.forward_rows(k):  # forward-mode rows are the Jacobian's, value for value
        assert torch.equal(selected, expected)


def test_jacobian_first_only_where_rows_come_in_forward_mode(problem):
    for m in (1, 2, 3):
        if problem.jacobian_first(m):
            assert problem.forward_rows(-(-N // m))


def test_an_evaluator_given_to_a_problem_is_checked():
    evaluation = _datasets().evaluation
    with pytest.raises(TypeError, match="`evaluator` must be a most.evaluators.Evaluator; got object"):
        most.Problem(fn=lambda t: t, dim=FEATURES + 1, n_objectives=N, evaluator=object())
    with pytest.raises(ValueError, match=f"`evaluator` evaluates {N} objectives; the problem has 3"):
        most.Problem(fn=lambda t: t, dim=FEATURES + 1, n_objectives=3, evaluator=evaluation)


@pytest.mark.parametrize("smoothing", [None, 0.5])
def test_mapped_objectives_keep_the_base_evaluator_and_follow_the_chain_rule(smoothing):
    """MosT-E's objectives on a from_datasets problem go through its evaluator (MappedEvaluator)
    and equal those the same extension makes of the function problem (the composed function)."""
    from most.evaluators import MappedEvaluator

    extension = most.TchebycheffExtension(n_extra=4, smoothing=smoothing)
    mapped = extension.apply(_datasets(), torch.Generator().manual_seed(2))
    reference = extension.apply(_function(), torch.Generator().manual_seed(2))
    assert type(mapped.evaluation) is MappedEvaluator and type(reference.evaluation) is FunctionEvaluator
    n = mapped.n_objectives
    torch.testing.assert_close(mapped.loss_matrix(PARAMS), reference.loss_matrix(PARAMS))
    _, jac = reference.jacobian(PARAMS)
    torch.testing.assert_close(mapped.jacobian(PARAMS)[1], jac)
    w = torch.rand(3, n, generator=torch.Generator().manual_seed(1))
    values, pullback = mapped.losses_with_pullback(PARAMS)
    torch.testing.assert_close(values, reference.loss_matrix(PARAMS))
    torch.testing.assert_close(pullback(w), torch.einsum("mn,mnd->md", w, jac))
    rows = torch.tensor([[0, n - 1], [n - 2, 3], [1, 1]])
    torch.testing.assert_close(mapped.active_jacobian(PARAMS, rows)[1],
                               jac.gather(1, rows[..., None].expand(-1, -1, FEATURES + 1)))


def test_mapped_objectives_of_mini_batches_draw_them_from_the_runs_generator():
    rows_seen = []

    def loss(out, y):
        rows_seen.append(y.shape[-1])
        return (out[:, 0] - y) ** 2

    g = torch.Generator().manual_seed(3)
    tasks = [(torch.randn(40, FEATURES, generator=g), torch.randn(40, generator=g)) for _ in range(3)]
    base = most.Problem.from_datasets(lambda: nn.Linear(FEATURES, 1), tasks, loss, batch_size=4)
    extended = most.DirichletExtension(n_extra=4).apply(base, torch.Generator().manual_seed(0))
    assert extended.stochastic
    weights = extended.metadata["extension_weights"]
    # the same draws as the base problem's from the same generator state
    torch.testing.assert_close(extended.loss_matrix(PARAMS, generator=torch.Generator().manual_seed(5)),
                               weights @ base.loss_matrix(PARAMS, generator=torch.Generator().manual_seed(5)))
    rows_seen.clear()
    fit = most.MosT(n_models=4, rounds=4, lr=0.05, seed=1, extension=most.DirichletExtension(n_extra=4))
    first = fit.fit(base)
    assert 3 * 4 in rows_seen  # the rounds evaluate mini-batches of 4 rows per objective
    assert torch.equal(first.params, fit.fit(base).params)  # drawn from the run's seed: reproducible


def test_a_ridge_on_a_problem_with_its_own_evaluator_goes_through_that_evaluator():
    """SumOfMinimum's ridge on a from_datasets problem (PenalisedEvaluator) equals the ridge on the
    same objectives as a function: losses, the reverse pass and the selected gradients."""
    from most.baselines._few_for_many import _with_ridge
    from most.evaluators import PenalisedEvaluator

    ridged, reference = _with_ridge(_datasets(), 2.0), _with_ridge(_function(), 2.0)
    assert type(ridged.evaluation) is PenalisedEvaluator
    torch.testing.assert_close(ridged.loss_matrix(PARAMS), reference.loss_matrix(PARAMS))
    _, jac = reference.jacobian(PARAMS)
    w = torch.rand(3, N, generator=torch.Generator().manual_seed(1))
    values, pullback = ridged.losses_with_pullback(PARAMS)
    torch.testing.assert_close(values, reference.loss_matrix(PARAMS))
    torch.testing.assert_close(pullback(w), torch.einsum("mn,mnd->md", w, jac))
    rows = torch.tensor([[0, 2], [1, 1], [N - 1, 3]])
    expected = jac.gather(1, rows[..., None].expand(-1, -1, FEATURES + 1))
    torch.testing.assert_close(ridged.active_jacobian(PARAMS, rows)[1], expected)
    torch.testing.assert_close(ridged.active_gradients(PARAMS, rows), expected)
    fit = most.baselines.SumOfMinimum(n_models=2, rounds=5, lr=0.05, seeding="init")
    plain, penalised = fit.fit(_datasets()), most.baselines.SumOfMinimum(
        n_models=2, rounds=5, lr=0.05, seeding="init", ridge=5.0).fit(_datasets())
    assert penalised.params.norm() < plain.params.norm()  # the ridge pulls the models toward 0
