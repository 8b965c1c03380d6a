"""Problem.from_instances: every objective one training instance (paper Section 6.4)."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import most


def _data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5]) > 0).long()
    return x, y


def _both(x, y):
    def loss(theta, xi, yi):
        return F.cross_entropy((theta.view(2, 3) @ xi)[None], yi[None])

    instances = most.Problem.from_instances(loss, (x, y), dim=6)
    batch = most.Problem.from_function(
        lambda theta: F.cross_entropy(x @ theta.view(2, 3).T, y, reduction="none"), dim=6, n_objectives=len(y))
    return instances, batch


def test_losses_and_jacobian_equal_the_batched_problem():
    instances, batch = _both(*_data())
    params = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(instances.loss_matrix(params), batch.loss_matrix(params))
    (l1, j1), (l2, j2) = instances.jacobian(params), batch.jacobian(params)
    torch.testing.assert_close(l1, l2)
    torch.testing.assert_close(j1, j2)


def test_active_gradients_are_the_selected_rows_for_both_kinds_of_problem():
    instances, batch = _both(*_data())
    params = torch.randn(3, 6, generator=torch.Generator().manual_seed(2))
    rows = torch.tensor([[0, 5, 7], [1, 2, 3], [39, 0, 0]])
    _, full = batch.jacobian(params)
    expected = torch.stack([full[j, rows[j]] for j in range(3)])
    torch.testing.assert_close(instances.active_gradients(params, rows), expected)
    torch.testing.assert_close(batch.active_gradients(params, rows), expected)
    torch.testing.assert_close(instances.active_jacobian(params, rows)[1], expected)


@pytest.mark.parametrize("vectorize", [True, False])
def test_weighted_gradients_and_the_pullback_are_the_weighted_sums_of_the_jacobian_rows(vectorize):
    instances, batch = _both(*_data())
    problem = most.Problem.from_function(batch.fn, dim=6, n_objectives=40, vectorize=vectorize)
    params = torch.randn(3, 6, generator=torch.Generator().manual_seed(3))
    weights = torch.rand(3, 40, generator=torch.Generator().manual_seed(4))
    weights[1] = 0.0  # a model that serves nothing gets no direction
    weights[0, ::2] = 0.0  # models serve different numbers of objectives (padded rows must count 0)
    losses, full = batch.jacobian(params)
    for form in (problem, instances):
        values, grads = form.weighted_gradients(params, weights)
        torch.testing.assert_close(values, losses)
        torch.testing.assert_close(grads, torch.einsum("mn,mnd->md", weights, full))
        values, pullback = form.losses_with_pullback(params)  # the reverse pass of one forward pass
        torch.testing.assert_close(values, losses)
        torch.testing.assert_close(pullback(weights), torch.einsum("mn,mnd->md", weights, full))
    with pytest.raises(ValueError, match=r"weights must have shape \[m=3, n=40\]"):
        problem.weighted_gradients(params, weights[:, :5])
    with pytest.raises(ValueError, match=r"weights must have shape \[m=3, n=40\]"):
        problem.losses_with_pullback(params)[1](weights.T)


@pytest.mark.parametrize("large", [False, True])
def test_a_per_instance_pullback_is_the_weighted_sum_of_the_rows_whatever_its_form(large, monkeypatch):
    # small blocks: the served instances' gradients, padded to the longest row; large ones (here forced):
    # one reverse pass per model through its weighted losses, with no per-instance gradient at all
    from most.evaluators import InstancesEvaluator, _instances

    if large:
        monkeypatch.setattr(_instances, "PULLBACK_LOOP_VALUES", 1)
        monkeypatch.setattr(InstancesEvaluator, "_instance_gradients", lambda *a: pytest.fail("per-instance gradients"))
    instances, batch = _both(*_data())
    params = torch.randn(4, 6, generator=torch.Generator().manual_seed(3))
    weights = torch.rand(4, 40, generator=torch.Generator().manual_seed(4))
    weights[1] = 0.0  # a model that serves nothing gets a zero direction
    weights[0, ::2] = 0.0  # 20, 0, 40 and 1 rows
    weights[3, 1:] = 0.0
    losses, full = batch.jacobian(params)
    values, pullback = instances.losses_with_pullback(params)
    torch.testing.assert_close(values, losses)
    grads = pullback(weights)
    torch.testing.assert_close(grads, torch.einsum("mn,mnd->md", weights, full))
    assert grads.dtype == params.dtype and not bool(grads[1].any())
    torch.testing.assert_close(instances.weighted_gradients(params, weights.double())[1],
                               torch.einsum("mn,mnd->md", weights, full))


@pytest.mark.parametrize("vectorize", [True, False])
def test_weighted_gradients_take_weights_computed_from_the_losses_of_the_same_pass(vectorize):
    instances, batch = _both(*_data())
    problem = most.Problem.from_function(batch.fn, dim=6, n_objectives=40, vectorize=vectorize)
    params = torch.randn(3, 6, generator=torch.Generator().manual_seed(3))
    losses, full = batch.jacobian(params)
    seen = []

    def worst_per_model(model_major):  # coefficients that depend on the losses, as TCH-Set's
        seen.append(model_major)
        return torch.nn.functional.one_hot(model_major.argmax(1), 40).to(model_major)

    for form in (problem, instances):
        values, grads, used = form.weighted_gradients(params, worst_per_model, return_weights=True)
        torch.testing.assert_close(seen[-1], losses.T)
        torch.testing.assert_close(used, worst_per_model(losses.T))
        torch.testing.assert_close(grads, torch.einsum("mn,mnd->md", used, full))
    with pytest.raises(ValueError, match=r"weights must have shape \[m=3, n=40\]"):
        problem.weighted_gradients(params, lambda model_major: model_major[:, :5])


@pytest.mark.parametrize("dim,k", [(3, 30), (30, 10)])  # forward mode (dim < k) and reverse mode
def test_served_rows_by_either_mode_are_the_jacobian_rows(dim, k):
    g = torch.Generator().manual_seed(0)
    c, a = torch.randn(60, dim, generator=g), torch.randn(60, dim, generator=g)
    problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1) + torch.sin(a @ t), dim=dim,
                                         n_objectives=60)
    params = torch.randn(4, dim, generator=g)
    rows = torch.stack([torch.randperm(60, generator=g)[:k] for _ in range(4)])
    values, jac = problem.active_jacobian(params, rows)
    losses, full = problem.jacobian(params)
    torch.testing.assert_close(values, losses)
    torch.testing.assert_close(jac, torch.stack([full[j, rows[j]] for j in range(4)]))


def test_the_mean_combiner_takes_the_same_steps_by_weighted_gradients_as_by_served_rows():
    # WeightedSum's direction formed by one reverse pass per model equals the packed-rows path
    _, batch = _both(*_data())

    class Rows(most.WeightedSum):
        linear = False

    fast = most.MosT(n_models=3, rounds=12, inner_steps=2, lr=0.2, seed=0).fit(batch)
    rows = most.MosT(n_models=3, rounds=12, inner_steps=2, lr=0.2, seed=0, combiner=Rows()).fit(batch)
    torch.testing.assert_close(fast.params, rows.params)
    for a, b in zip(fast.history, rows.history):
        torch.testing.assert_close(a.weights, b.weights)


def test_most_takes_the_same_steps_on_either_form():
    instances, batch = _both(*_data())
    fit = most.MosT(n_models=3, rounds=15, lr=0.2, seed=0)
    a, b = fit.fit(instances), fit.fit(batch)
    torch.testing.assert_close(a.params, b.params)
    torch.testing.assert_close(a.assignment, b.assignment)
    assert a.losses.min(1).values.mean() < instances.loss_matrix(instances.initial_params(
        3, torch.Generator().manual_seed(0))).min(1).values.mean()


def test_bad_instances_are_explained():
    x, y = _data()
    with pytest.raises(ValueError, match="same leading dimension"):
        most.Problem.from_instances(lambda t, a, b: a.sum(), (x, y[:-1]), dim=6)
    with pytest.raises(ValueError, match="tensor or a sequence of tensors"):
        most.Problem.from_instances(lambda t, a: a.sum(), [x.tolist()], dim=6)
    problem = most.Problem.from_instances(lambda t, a, b: t[:3] * a, (x, y), dim=6)
    with pytest.raises(ValueError, match="must return a scalar"):
        problem.loss_matrix(torch.zeros(2, 6))


@pytest.mark.parametrize("vectorize", [True, False])
def test_module_objectives_give_their_rows_one_objective_at_a_time(vectorize):
    # from_module objectives are evaluated one at a time for the served rows (each objective
    # called once per evaluation, as by the loss function), equal to the Jacobian's rows
    import dataclasses

    from torch import nn

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(6, 3, generator=g) for _ in range(7)]
    ys = [x @ torch.randn(3, 2, generator=g) for x in xs]
    calls = []

    def objective(i):
        def loss(forward):
            calls.append(i)
            return ((forward(xs[i]) - ys[i]) ** 2).mean()
        return loss

    torch.manual_seed(0)
    problem = most.Problem.from_module(lambda: nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
                                       [objective(i) for i in range(7)])
    problem = dataclasses.replace(problem, vectorize=vectorize)
    params = problem.initial_params(3, torch.Generator().manual_seed(1))
    rows = torch.tensor([[0, 2, 5], [1, 1, 1], [6, 3, 4]])
    calls.clear()
    values, jac = problem.active_jacobian(params, rows)
    assert sorted(set(calls)) == list(range(7)) and calls == sorted(calls)  # in order, every objective
    losses, full = problem.jacobian(params)
    torch.testing.assert_close(values, losses)
    torch.testing.assert_close(jac, torch.stack([full[j, rows[j]] for j in range(3)]))
    torch.testing.assert_close(problem.active_gradients(params, rows), jac)
