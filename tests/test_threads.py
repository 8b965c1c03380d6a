"""most._threads: one torch thread for small runs, torch's count for large ones."""

from __future__ import annotations

import pytest
import torch

import most
import most.federated as fl
from most import _threads


@pytest.fixture(autouse=True)
def _restore(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    most.set_threads()
    torch.set_num_threads(before)


def _seen_during_fit(problem) -> list[int]:
    seen: list[int] = []
    most.MosT(n_models=2, rounds=2, lr=0.1).fit(problem, callback=lambda record, params: seen.append(
        torch.get_num_threads()))
    return seen


def _small():
    c = torch.tensor([[0.0, 0.0], [5.0, 5.0], [0.2, 0.0]])
    return most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=2, n_objectives=3)


def test_a_small_fit_runs_on_one_thread_and_restores_the_count():
    torch.set_num_threads(2)
    assert _seen_during_fit(_small()) == [1, 1]
    assert torch.get_num_threads() == 2


def test_large_work_keeps_torchs_count(monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setattr(_threads, "SMALL_WORK", 4)  # the small problem counts as large
    assert _seen_during_fit(_small()) == [2, 2]


def test_a_count_applies_to_every_run_and_none_leaves_torch_alone():
    torch.set_num_threads(2)
    most.set_threads(3)
    assert _seen_during_fit(_small()) == [3, 3]
    most.set_threads(None)
    assert _seen_during_fit(_small()) == [2, 2]
    assert most.get_threads() is None


def test_the_environment_thread_count_is_respected_under_auto(monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _seen_during_fit(_small()) == [2, 2]


def test_a_small_federated_run_trains_on_one_thread():
    torch.set_num_threads(2)
    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=6, seed=0)
    seen: list[int] = []
    fl.run_federated(data, fl.logistic_regression(60, 10), fl.methods.FedAvg(2),
                     fl.FederatedConfig(rounds=2, seed=0), callback=lambda log, params: seen.append(
                         torch.get_num_threads()))
    assert seen == [1, 1] and torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "all", True])
def test_set_threads_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError, match="'auto', None or a positive int"):
        most.set_threads(bad)
