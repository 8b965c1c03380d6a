"""What a run records (most.engine.records): every round, and the tensors of every k-th round of a large run."""

from __future__ import annotations

import pytest
import torch

import most


def test_a_large_runs_history_keeps_the_tensors_of_every_kth_round_and_the_last(monkeypatch, tmp_path):
    import most.engine.records as records
    from most.checkpoint import Checkpoint

    c = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
    problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=2, n_objectives=4)
    method = most.MosT(n_models=2, rounds=10, lr=0.2)
    full = method.fit(problem)
    seen: list = []
    # 3 * n * m = 24 numbers a round: a budget of 60 over 10 rounds keeps every 4th round
    monkeypatch.setattr(records, "HISTORY_NUMBERS", 60)
    thin = method.fit(problem, callback=lambda record, params: seen.append(record.plan is not None))
    assert seen == [True] * 10  # the callback gets every round in full
    kept = [r.round for r in thin.history if r.plan is not None]
    assert kept == [0, 4, 8, 9]
    for a, b in zip(thin.history, full.history):
        assert a.mean_best_loss == b.mean_best_loss and a.transport_seconds >= 0
        if a.plan is not None:
            assert torch.equal(a.plan, b.plan) and torch.equal(a.losses, b.losses) and torch.equal(a.weights, b.weights)
        else:
            assert a.losses is None and a.weights is None and "objectives x" not in repr(a)
    assert torch.equal(thin.params, full.params)
    # a run stopped after 6 rounds and resumed keeps the same rounds
    path = tmp_path / "ck.pt"
    with pytest.raises(KeyboardInterrupt):
        method.fit(problem, checkpoint=Checkpoint(path, every=1),
                   callback=lambda record, params: (_ for _ in ()).throw(KeyboardInterrupt) if record.round == 5 else 0)
    resumed = method.fit(problem, checkpoint=Checkpoint(path, every=1))
    assert [r.round for r in resumed.history if r.plan is not None] == kept
    assert torch.equal(resumed.params, full.params)
