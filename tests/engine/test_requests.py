"""The evaluations a round asks for, as typed requests (most.engine.requests): each answered
together for several runs equals each answered alone, and splits back into each run's part."""

from __future__ import annotations

import pytest
import torch

from most.engine.requests import (
    Jacobian,
    Losses,
    LossesWithPullback,
    Pull,
    ServedGradients,
    ServedJacobian,
    SharedPullback,
    answer,
    drive,
)
from most.problems import quadratic_clusters

PROBLEM = quadratic_clusters(3, 4, dim=3, seed=0)  # 12 objectives


def _runs():
    """Two runs' models (2 and 3 models) and served rows (2 each)."""
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(2, 3, generator=g), torch.randn(3, 3, generator=g)]
    rows = [torch.tensor([[0, 5], [7, 7]]), torch.tensor([[1, 2], [11, 3], [4, 4]])]
    return params, rows


@pytest.mark.parametrize("make", [lambda p, r: Losses(p), lambda p, r: Jacobian(p),
                                  lambda p, r: ServedGradients(p, r), lambda p, r: ServedJacobian(p, r)],
                         ids=["losses", "jacobian", "served-gradients", "served-jacobian"])
def test_a_request_answered_together_equals_each_answered_alone(make):
    params, rows = _runs()
    requests = [make(p, r) for p, r in zip(params, rows)]
    assert requests[0].group(("key",)) == requests[1].group(("key",))
    together = requests[0].together(PROBLEM, [0, 1], requests, torch.Generator())
    for request, value in zip(requests, together):
        alone, _ = answer(PROBLEM, request, None)
        for a, b in zip(*(v if isinstance(v, tuple) else (v,) for v in (alone, value))):
            torch.testing.assert_close(a, b)
    if isinstance(together[0], tuple):  # a loss matrix part is each run's own [n, m_run]
        assert [v[0].shape for v in together] == [(12, 2), (12, 3)]


def test_requests_group_by_type_rows_and_objectives():
    params, rows = _runs()
    key = ("objectives",)
    assert Losses(params[0]).group(key) != Jacobian(params[0]).group(key)
    assert Losses(params[0]).group(key) != Losses(params[0], first=True).group(key)
    assert Losses(params[0]).group(key) != Losses(params[0]).group(("other",))
    assert (ServedGradients(params[0], rows[0]).group(key)
            != ServedGradients(params[0], torch.zeros(2, 3, dtype=torch.long)).group(key))


def test_a_shared_reverse_pass_runs_once_and_gives_each_run_its_direction():
    params, _ = _runs()
    requests = [LossesWithPullback(p) for p in params]
    values = requests[0].together(PROBLEM, [0, 1], requests, torch.Generator())
    shared = values[0][1]
    assert isinstance(shared, SharedPullback) and values[1][1] is shared
    weights = [torch.rand(2, 12, generator=torch.Generator().manual_seed(2)),
               torch.rand(3, 12, generator=torch.Generator().manual_seed(3))]
    assert not shared.ready({0})  # run 1 holds the pass too
    pulls = [Pull(shared, w) for w in weights]
    directions = pulls[0].together(PROBLEM, [0, 1], pulls, torch.Generator())
    for p, w, d in zip(params, weights, directions):
        _, expected = PROBLEM.weighted_gradients(p, w)
        torch.testing.assert_close(d, expected)
    with pytest.raises(RuntimeError, match="batch driver"):
        answer(PROBLEM, pulls[0], None)  # a shared pass is never pulled alone


def test_drive_answers_a_runs_requests_in_order_and_returns_its_value():
    params, _ = _runs()

    def steps():
        losses, seconds = yield Losses(params[0])
        (again, jac), _ = yield Jacobian(params[0])
        assert seconds >= 0 and jac.shape == (2, 12, 3)
        return bool(torch.equal(losses, again))

    assert drive(steps(), PROBLEM, None) is True


def test_a_first_evaluation_names_the_users_objectives_as_the_cause():
    import most

    problem = most.Problem.from_function(lambda t: t[:, 0], dim=2, n_objectives=2)  # written for a batch
    with pytest.raises(ValueError, match="The objectives fail on the models' parameters"):
        answer(problem, Losses(torch.zeros(2, 2), first=True), None)
