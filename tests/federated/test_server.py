"""most.federated.server.Server on its own, with hand-made losses and updates: each test prepares a
server, executes one or two steps of a round as an engine would (the in-process runtime, Flower's
strategy), and asserts the numbers the steps must give."""

from __future__ import annotations

import math

import pytest
import torch

import most
import most.federated as fl
import most.federated.methods as F
from most.federated.server import RoundState, Server, choose_models, pair_seed

D = 2 * 2 + 2  # logistic_regression(2, 2): a 2 x 2 weight and 2 biases


def _server(method, *, n=4, counts=None, **config) -> Server:
    counts = torch.tensor([10, 20, 30, 40][:n]) if counts is None else counts
    config = fl.FederatedConfig(**{"rounds": 4, "seed": 0, "eval_every": 2, **config})
    return Server(method, fl.logistic_regression(2, 2), config, counts)


def _losses(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ------------------------------------------------------------------------------- sampling
def test_full_participation_samples_every_client_in_order():
    server = _server(F.FedAvg(n_models=1))
    assert server.sample(0).tolist() == [0, 1, 2, 3]


def test_partial_participation_samples_a_sorted_share_reproducibly_from_the_seed():
    a, b = _server(F.FedAvg(n_models=1), participation=0.5), _server(F.FedAvg(n_models=1), participation=0.5)
    draws = [a.sample(t).tolist() for t in range(5)]
    assert draws == [b.sample(t).tolist() for t in range(5)]  # the seed fixes every round's draw
    assert all(len(d) == 2 and d == sorted(d) for d in draws)
    assert len({tuple(d) for d in draws}) > 1  # and the rounds differ


# ------------------------------------------------------------------------------- planning
def test_fedavg_plans_every_answering_client_on_its_one_model():
    server = _server(F.FedAvg(n_models=1))
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([1.0], [2.0], [3.0], [4.0]))
    assert not state.skipped and state.missing == []
    assert state.pair_model.tolist() == [0, 0, 0, 0] and state.pair_client.tolist() == [0, 1, 2, 3]
    assert state.models_of(2) == [0]


def test_most_plans_each_client_to_its_better_model_by_transport():
    server = _server(F.MosT(n_models=2, warmup=None, marginals=most.Uniform()))
    everyone = torch.arange(4)
    # clients 0, 1 fit model 0; clients 2, 3 fit model 1: the balanced transport pairs them so
    state = server.plan(0, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [5.0, 0.1], [5.0, 0.3]))
    assert state.plan.shape == (4, 2)
    torch.testing.assert_close(state.plan, torch.tensor([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=torch.float64) / 4)
    assert {c: state.models_of(c) for c in range(4)} == {0: [0], 1: [0], 2: [1], 3: [1]}
    assert server.previous is not None  # a full round keeps its plan as the next warm start


def test_a_round_with_fewer_answers_than_models_is_skipped_and_changes_nothing():
    server = _server(F.MosT(n_models=3, warmup=None))
    before = server.params.clone()
    sampled, answered = torch.arange(4), torch.tensor([1, 3])
    state = server.plan(0, sampled, answered, _losses([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]))
    assert state.skipped and state.losses is None and state.pair_model is None
    assert state.missing == [0, 2] and state.models_of(1) == []
    log = server.log(state, None)
    assert math.isnan(log.train_loss) and log.plan is None
    assert torch.equal(server.params, before) and server.previous is None


def test_a_partial_round_plans_its_clients_without_the_previous_plan():
    server = _server(F.MosT(n_models=2, warmup=None, marginals=most.Uniform()))
    everyone = torch.arange(4)
    server.plan(0, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [5.0, 0.1], [5.0, 0.3]))
    state = server.plan(1, everyone, torch.tensor([0, 2, 3]), _losses([0.1, 5.0], [5.0, 0.1], [5.0, 0.3]))
    assert state.missing == [1] and state.clients.tolist() == [0, 2, 3]
    assert server.previous is None  # a warm start needs the same clients
    assert state.models_of(1) == [] and state.models_of(2) == [1]


def test_a_non_finite_loss_is_refused_naming_the_client_and_the_model():
    server = _server(F.FedAvg(n_models=2))
    everyone = torch.arange(4)
    bad = _losses([1.0, 1.0], [1.0, 1.0], [1.0, float("nan")], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"round 3, the training loss of client c2 on model 1 is nan"):
        server.plan(3, everyone, everyone, bad, client_ids=["c0", "c1", "c2", "c3"])


# ------------------------------------------------------------------------------- the server step
def test_fedavg_steps_by_the_sample_weighted_mean_of_the_updates():
    server = _server(F.FedAvg(n_models=1, server_lr=0.5))
    start = server.params.clone()
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([1.0], [1.0], [1.0], [1.0]))
    deltas = torch.arange(4 * D, dtype=torch.float32).reshape(4, D)
    server.update(state, deltas)
    mean = (torch.tensor([10.0, 20.0, 30.0, 40.0])[:, None] * deltas).sum(0) / 100  # counts weigh the clients
    torch.testing.assert_close(server.params, start - 0.5 * mean[None])


def test_only_the_kept_pairs_enter_the_step():
    """An engine that lost some replies (Flower) passes the updates of the pairs it has, and a
    mask of them: the mean is over those pairs alone."""
    server = _server(F.FedAvg(n_models=1))
    start = server.params.clone()
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([1.0], [1.0], [1.0], [1.0]))
    keep = torch.tensor([True, False, True, False])
    deltas = torch.stack([torch.full((D,), 1.0), torch.full((D,), 3.0)])  # clients 0 and 2
    server.update(state, deltas, keep)
    torch.testing.assert_close(server.params, start - (10 * 1.0 + 30 * 3.0) / 40)


def test_a_model_without_pairs_stays_where_it_is():
    server = _server(F.MosT(n_models=2, warmup=None, marginals=most.LoadBounds(min_objectives=0)))
    start = server.params.clone()
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [0.1, 5.0], [0.3, 5.0]))
    assert set(state.pair_model.tolist()) == {0}  # every client prefers model 0
    server.update(state, torch.ones(len(state.pair_model), D))
    assert torch.equal(server.params[1], start[1]) and not torch.equal(server.params[0], start[0])


def test_the_warm_up_trains_one_shared_model_and_moves_every_copy_by_its_step():
    method = F.MosT(n_models=2, warmup=F.WarmUp(rounds=1))
    server = _server(method)
    assert torch.equal(server.params[0], server.params[1])  # one shared start
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [5.0, 0.1], [5.0, 0.3]))
    assert set(state.pair_model.tolist()) == {0} and len(state.pair_model) == 4  # every client trains model 0
    start = server.params.clone()
    deltas = torch.stack([torch.full((D,), float(c)) for c in range(4)])
    server.update(state, deltas)
    step = (10 * 0 + 20 * 1 + 30 * 2 + 40 * 3) / 100  # the sample-weighted mean, server_lr = 1
    torch.testing.assert_close(server.params, start - step)
    assert torch.equal(server.params[0], server.params[1])
    after = server.plan(1, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [5.0, 0.1], [5.0, 0.3]))
    assert set(after.pair_model.tolist()) == {0, 1}  # the warm-up is over: the models part


# ------------------------------------------------------------------------------- schedule, seeds, choice
def test_validation_is_due_every_eval_every_rounds_and_in_the_last():
    server = _server(F.FedAvg(n_models=1), rounds=5, eval_every=2)
    assert [server.evaluate_due(t) for t in range(5)] == [False, True, False, True, True]


def test_pair_seeds_are_a_function_of_the_seed_round_client_and_model():
    server = _server(F.FedAvg(n_models=1), pair_seeds=True, seed=7)
    everyone = torch.arange(4)
    state = server.plan(3, everyone, everyone, _losses([1.0], [1.0], [1.0], [1.0]))
    assert server.pair_seeds(state) == [pair_seed(7, 3, c, 0) for c in range(4)]
    assert _server(F.FedAvg(n_models=1)).pair_seeds(state) is None  # off by default


def test_the_final_choice_is_the_best_on_validation_or_the_method_s_assignment():
    val = torch.tensor([[0.5, 0.9], [0.8, 0.1], [float("nan"), float("nan")]])
    selection = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 0.5]])
    choice, by_loss = _server(F.FedAvg(n_models=2), n=3).choose(val, selection)
    assert choice.tolist() == [1, 0, 1] and by_loss.tolist() == [False, False, True]
    assert torch.equal(choose_models(val, selection)[0], choice)
    oracle = _server(F.Oracle([1, 0, 1]), n=3)
    assert oracle.choose(val, selection)[0].tolist() == [1, 0, 1]  # the groups, not validation


def test_a_checkpoint_state_restores_the_models_the_plan_and_the_history(tmp_path):
    from most.checkpoint import Checkpoint

    server = _server(F.MosT(n_models=2, warmup=None, marginals=most.Uniform()))
    everyone = torch.arange(4)
    state = server.plan(0, everyone, everyone, _losses([0.1, 5.0], [0.2, 5.0], [5.0, 0.1], [5.0, 0.3]))
    server.update(state, torch.ones(len(state.pair_model), D))
    server.log(state, 0.5)
    checkpoint = Checkpoint(tmp_path / "server.pt")
    checkpoint.save(server.state(1), server.generator)
    other = _server(F.MosT(n_models=2, warmup=None, marginals=most.Uniform()))
    assert other.restore(checkpoint.load(other.generator)) == 1
    assert torch.equal(other.params, server.params) and torch.equal(other.previous, server.previous)
    (mine,), (theirs,) = server.history, other.history
    assert (theirs.round, theirs.train_loss, theirs.val_accuracy) == (mine.round, mine.train_loss, mine.val_accuracy)
    assert torch.equal(theirs.clients, mine.clients) and torch.equal(theirs.plan, mine.plan)


def test_round_state_reports_the_pairs_clients_among_all_n():
    state = RoundState(round=0, sampled=torch.arange(5), clients=torch.tensor([1, 3, 4]),
                       weights=torch.ones(1, 3), pair_model=torch.tensor([0, 0]), pair_client=torch.tensor([0, 2]))
    assert state.pair_clients.tolist() == [1, 4] and state.models_of(4) == [0] and state.models_of(3) == []


def test_a_method_assigns_a_model_to_each_client_exactly_when_it_declares_so():
    counts = torch.full((6,), 10)
    groups = (0, 0, 1, 1, 2, 2)
    for method in (F.FedAvg(2), F.MosT(2, warmup=None), F.IFCA(2), F.FedEM(2), F.CFL(2), F.Oracle(groups),
                   F.LocalOnly(), F.FineTuning(1)):
        server = Server(method, fl.logistic_regression(4, 3), fl.FederatedConfig(rounds=2), counts)
        assert (server.assigned() is not None) == type(method).assigns, type(method).__name__
