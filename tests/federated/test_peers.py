"""The clustered-FL and personalisation peers: CFL, the oracle, local training and fine-tuning.

Each is checked for what it promises: CFL splits a cluster exactly when its thresholds say and
recovers planted concept groups; the oracle trains FedAvg within the true groups; a local model
depends on its own client's data alone; fine-tuning descends each client's own loss. Plus the
assignments' plans, the picks, resumption and bad input."""

import math

import pytest
import torch

import most.federated as fl
from most.checkpoint import Checkpoint, restore_into
from most.federated import methods as F
from most.federated.methods.clustered import ClusterAssignment, GroupAssignment, bipartition
from most.federated.evaluation import adjusted_rand_index
from most.federated.methods.personal import OwnModelAssignment
from most.methods import Uniform
from most.federated.clients import pad_split


def concept_groups(sizes=(4, 8), per=60, dim=20, seed=0):
    """Clients sharing one labelling rule ``argmax(W x)`` up to a permutation of the labels per
    group (concept shift), with the groups recorded."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(dim, 10, generator=g)
    perms = [torch.roll(torch.arange(10), 3 * k) for k in range(len(sizes))]
    clients, groups = [], []
    for group, size in enumerate(sizes):
        for _ in range(size):
            x = torch.randn(per, dim, generator=g)
            y = perms[group][(x @ W).argmax(1)]
            a, b = int(per * 0.6), int(per * 0.8)
            clients.append(fl.ClientData(x[:a], y[:a], x[a:b], y[a:b], x[b:], y[b:]))
            groups.append(group)
    return fl.FederatedDataset.from_clients(clients, name="concept", n_classes=10, groups=groups)


@pytest.fixture(scope="module")
def data():
    return concept_groups()


CONFIG = fl.FederatedConfig(rounds=20, lr=0.5, eval_every=0, seed=0)


# ----------------------------------------------------------------------------- CFL
def test_bipartition_separates_two_directions_and_keeps_row_0_in_group_0():
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(30, generator=g), torch.randn(30, generator=g)
    rows = [u + 0.05 * torch.randn(30, generator=g) for _ in range(3)] + \
           [v * s + 0.05 * torch.randn(30, generator=g) for s in (1.0, 3.0, 0.2, 2.0)]
    labels = bipartition(torch.stack(rows))
    assert labels.tolist() == [0, 0, 0, 1, 1, 1, 1]  # the direction, not the length, decides
    swapped = bipartition(torch.stack(rows[3:] + rows[:3]))
    assert swapped.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert bipartition(torch.randn(1, 4)).tolist() == [0]


def test_bipartition_takes_a_zero_update_as_orthogonal_to_every_other():
    """A client whose gradients vanish (a saturated model) sends a zero update: no NaN distance
    (SciPy's linkage refuses one), the two directions are still split, and the zero row joins one."""
    g = torch.Generator().manual_seed(1)
    u, v = torch.randn(20, generator=g), torch.randn(20, generator=g)
    rows = torch.stack([u, u * 2, -u, -u * 0.5, torch.zeros(20)])
    labels = bipartition(rows).tolist()
    assert labels[:2] == [0, 0] and labels[2:4] == [1, 1]
    assert bipartition(torch.zeros(3, 5)).tolist() == [0, 0, 0]  # all zero: no direction to split by
    assert len(bipartition(torch.stack([v, torch.zeros(20)])).unique()) == 2


def _cfl_step(eps1, eps2, deltas, counts, *, min_rounds=0, n_models=2):
    """One aggregation of a new CFL run; returns its clusters and the new models."""
    method = F.CFL(n_models, eps1=eps1, eps2=eps2, min_rounds=min_rounds)
    state = method.start(len(counts), n_models, torch.Generator().manual_seed(0))
    params = torch.zeros(n_models, deltas.shape[1])
    pair_model = torch.zeros(len(counts), dtype=torch.long)
    new = method.aggregate(state, params, deltas, pair_model, counts.double(), round=min_rounds,
                           clients=torch.arange(len(counts)))
    return method.assigned(state, len(counts)), new


def test_cfl_splits_a_cluster_exactly_when_its_updates_cancel_but_a_client_still_moves():
    v = torch.tensor([1.0, 0.0, 0.0])
    w = torch.tensor([0.0, 1.0, 0.0])
    deltas = torch.stack([v, v, -v + 0.1 * w, -v - 0.1 * w])  # mean 0, each of norm about 1
    counts = torch.tensor([10, 10, 10, 10])
    clusters, new = _cfl_step(0.1, 0.5, deltas, counts)
    assert clusters.tolist() == [0, 0, 1, 1]
    # each new cluster takes its own clients' mean step from the parent's model (here 0)
    torch.testing.assert_close(new[0], -v)
    torch.testing.assert_close(new[1], v)
    # the mean is too large (the clients still agree): no split, FedAvg's step
    clusters, new = _cfl_step(0.1, 0.5, deltas + v, counts)
    assert clusters.tolist() == [0, 0, 0, 0]
    torch.testing.assert_close(new[0], -(deltas + v).mean(0))
    # every update small (a stationary point of every client): no split
    clusters, _ = _cfl_step(0.1, 2.0, deltas, counts)
    assert clusters.tolist() == [0, 0, 0, 0]
    # before min_rounds, or for a cluster of min_size clients or fewer: no split
    method = F.CFL(2, eps1=0.1, eps2=0.5, min_rounds=5)
    state = method.start(4, 2, torch.Generator())
    method.aggregate(state, torch.zeros(2, 3), deltas, torch.zeros(4, dtype=torch.long), counts.double(), round=4,
                     clients=torch.arange(4))
    assert method.assigned(state, 4).tolist() == [0, 0, 0, 0]
    method = F.CFL(2, eps1=0.1, eps2=0.5, min_rounds=0, min_size=4)
    state = method.start(4, 2, torch.Generator())
    method.aggregate(state, torch.zeros(2, 3), deltas, torch.zeros(4, dtype=torch.long), counts.double(), round=0,
                     clients=torch.arange(4))
    assert method.assigned(state, 4).tolist() == [0, 0, 0, 0]


def test_cfl_never_makes_more_clusters_than_models():
    g = torch.Generator().manual_seed(1)
    deltas = torch.randn(12, 5, generator=g)
    deltas -= deltas.mean(0)
    clusters, _ = _cfl_step(10.0, 0.01, deltas, torch.ones(12, dtype=torch.long), n_models=3)
    assert clusters.max() <= 2
    clusters, _ = _cfl_step(10.0, 0.01, deltas, torch.ones(12, dtype=torch.long), n_models=1)
    assert clusters.tolist() == [0] * 12


def test_cfl_recovers_planted_concept_groups_and_scores_each_client_on_its_cluster(data):
    model = fl.logistic_regression(20, 10)
    method = F.CFL(2, eps1=0.5, eps2=1.0, min_rounds=5)
    result = fl.run_federated(data, model, method, CONFIG)
    assert adjusted_rand_index(result.choice, data.groups) == 1.0  # each client is scored on its cluster's model
    fedavg = fl.run_federated(data, model, F.FedAvg(1), CONFIG)
    assert result.mean_accuracy > fedavg.mean_accuracy + 0.1


def _cfl():
    return F.CFL(2, eps1=0.5, eps2=1.0, min_rounds=5)


def _whole_and_stopped_cfl(data, model, folder, stop_round: int):
    """A whole CFL run, and the checkpoint of the same run stopped after ``stop_round``."""
    whole = fl.run_federated(data, model, _cfl(), CONFIG)

    def stop(log, params):
        if log.round == stop_round:
            raise KeyboardInterrupt

    ckpt = Checkpoint(folder / "cfl", every=3)
    with pytest.raises(KeyboardInterrupt):
        fl.run_federated(data, model, _cfl(), CONFIG, checkpoint=ckpt, callback=stop)
    return whole, ckpt


def test_a_stopped_cfl_run_resumes_to_the_same_clusters_and_models(data, tmp_path):
    model = fl.logistic_regression(20, 10)
    whole, ckpt = _whole_and_stopped_cfl(data, model, tmp_path, 12)
    method = _cfl()
    resumed = fl.run_federated(data, model, method, CONFIG, checkpoint=ckpt)
    assert torch.equal(resumed.params, whole.params) and torch.equal(resumed.choice, whole.choice)


def test_a_checkpoint_whose_method_held_its_run_state_is_refused_saying_to_start_over(data, tmp_path):
    """Checkpoints of the layout in which the method object held its run state (saved under
    ``method``) cannot be resumed into a run whose server holds it (``method_state``): the run
    refuses them with a message before any round."""
    from most.checkpoint import CheckpointError

    model = fl.logistic_regression(20, 10)
    _, ckpt = _whole_and_stopped_cfl(data, model, tmp_path, 9)
    payload = torch.load(ckpt.path, weights_only=True)
    payload["state"]["method"] = payload["state"].pop("method_state")
    torch.save(payload, ckpt.path)
    with pytest.raises(CheckpointError, match="earlier version.*--restart"):
        fl.run_federated(data, model, _cfl(), CONFIG, checkpoint=ckpt)


def test_cfl_refuses_thresholds_outside_their_range():
    for bad in (dict(eps1=0.0), dict(eps1=-1.0), dict(eps2=float("nan")), dict(eps2=float("inf")),
                dict(min_size=0), dict(min_rounds=-1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            F.CFL(2, **bad)


# ----------------------------------------------------------------------------- oracle
def test_oracle_trains_fedavg_within_the_true_groups(data):
    model = fl.logistic_regression(20, 10)
    oracle = F.Oracle(data.groups)
    result = fl.run_federated(data, model, oracle, CONFIG)
    assert oracle.n_models == 2 and result.params.shape[0] == 2
    assert result.choice.tolist() == list(data.groups)
    for log in result.history:  # the plan never mixes the groups
        assert log.plan is None
    # the plan sends each client, whole, to its group's model
    server = fl.server.Server(F.Oracle(data.groups), model, CONFIG, pad_split(data, "train").counts)
    _, w = server.method.plan(server.method_state, torch.zeros(data.n_clients, 2), 0, 1)
    assert w.T.argmax(1).tolist() == list(data.groups)
    assert torch.equal(w.sum(0), torch.ones(data.n_clients, dtype=w.dtype))
    # model 0 is FedAvg over group 0 alone: relabelling a client of group 1 leaves it bit for bit
    c = data.clients[-1]
    other = fl.FederatedDataset.from_clients(
        list(data.clients[:-1]) + [fl.ClientData(c.x_train, (c.y_train + 1) % 10, c.x_val, c.y_val, c.x_test,
                                                 c.y_test)], name="relabelled", n_classes=10)
    changed = fl.run_federated(other, model, F.Oracle(data.groups), CONFIG)
    assert torch.equal(changed.params[0], result.params[0])
    assert not torch.allclose(changed.params[1], result.params[1])


def test_oracle_refuses_groups_that_do_not_fit(data):
    model = fl.logistic_regression(20, 10)
    with pytest.raises(ValueError, match="groups for 3 clients, but the data has 12"):
        fl.run_federated(data, model, F.Oracle([0, 1, 1]), CONFIG)
    for bad in ([], [0, -1], [0, 1.5], "01", None):
        with pytest.raises(ValueError, match="groups"):
            F.Oracle(bad)


# ----------------------------------------------------------------------------- local and fine-tuned
def test_a_local_model_depends_on_its_own_client_alone(data):
    model = fl.logistic_regression(20, 10)
    method = F.LocalOnly()
    result = fl.run_federated(data, model, method, CONFIG)
    assert result.params.shape[0] == data.n_clients  # one model per client (models_for)
    assert result.choice.tolist() == list(range(data.n_clients))
    # relabel client 5: its model changes, every other model stays bit for bit
    c = data.clients[5]
    other = fl.FederatedDataset.from_clients(
        list(data.clients[:5]) + [fl.ClientData(c.x_train, (c.y_train + 1) % 10, c.x_val, c.y_val, c.x_test, c.y_test)]
        + list(data.clients[6:]), name="relabelled", n_classes=10)
    changed = fl.run_federated(other, model, F.LocalOnly(), CONFIG)
    same = torch.ones(data.n_clients, dtype=torch.bool)
    same[5] = False
    assert torch.equal(changed.params[same], result.params[same])
    assert not torch.allclose(changed.params[5], result.params[5])


def test_fine_tuning_descends_each_clients_own_loss_from_its_picked_model(data):
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=5, lr=0.2, eval_every=0, seed=1)
    base = fl.run_federated(data, model, F.FedAvg(1), config)
    tuned = fl.run_federated(data, model, F.FineTuning(1, epochs=3), config)
    assert tuned.params.shape[0] == data.n_clients and tuned.choice.tolist() == list(range(data.n_clients))
    train = pad_split(data, "train")
    before, _, _ = fl.evaluate(model, base.params, train)
    after, _, _ = fl.evaluate(model, tuned.params, train)
    assert bool((after.diagonal() < before[:, 0]).all())  # every client's own training loss went down
    assert tuned.mean_accuracy > base.mean_accuracy
    with pytest.raises(ValueError, match="epochs"):
        F.FineTuning(1, epochs=0)



def test_the_loss_pick_of_a_method_that_assigns_models_is_its_assignment():
    """A client of CFL, local training or fine-tuning is scored on the model its method gives
    it under either pick: the lowest pooled loss of another client's model (or of a model no
    cluster trained) is not a pick such a method makes. A method whose clients pick (MosT)
    keeps the loss pick."""
    g = torch.Generator().manual_seed(0)
    centres, clients = torch.randn(3, 8, generator=g) * 3, []
    for i in range(6):  # three tasks, two clients each: another client's model may fit a client better
        k = i % 3
        x = torch.randn(30, 8, generator=g) + centres[k]
        y = (x[:, k] > centres[k, k]).long()
        clients.append(fl.ClientData(x[:18], y[:18], x[18:24], y[18:24], x[24:], y[24:]))
    data = fl.FederatedDataset.from_clients(clients, name="tasks", n_classes=2)
    model, config = fl.logistic_regression(8, 2), fl.FederatedConfig(rounds=3, seed=0)
    differs = []  # whether the lowest pooled loss would have given another model
    for method in (F.LocalOnly(), F.FineTuning(2, epochs=1), F.CFL(3), F.FedEM(2)):
        result = fl.run_federated(data, model, method, config)
        assert result.assigned and torch.equal(result.loss_choice, result.choice), type(method).__name__
        differs.append(not torch.equal(fl.evaluation.select_by_loss(result.selection_loss), result.choice))
    assert any(differs)
    most_ = fl.run_federated(data, model, F.MosT(2, warmup=None), config)
    assert not most_.assigned
    assert torch.equal(most_.loss_choice, fl.evaluation.select_by_loss(most_.selection_loss))

def test_fixed_assignments_give_each_client_whole_to_one_model():
    gen = torch.Generator()
    for assignment, n, m, expect in ((GroupAssignment([1, 0, 1]), 3, 2, [1, 0, 1]),
                                     (OwnModelAssignment(), 3, 3, [0, 1, 2]),
                                     (ClusterAssignment(), 3, 2, [0, 0, 0])):
        assignment.reset(n, m, gen)
        for dtype in (torch.float32, torch.float64):
            plan = assignment(torch.rand(n, m, dtype=dtype), 0, 1)
            assert plan.dtype == dtype and plan.shape == (n, m)
            torch.testing.assert_close(plan.sum(1), torch.full((n,), 1.0 / n, dtype=dtype))
            assert plan.argmax(1).tolist() == expect and int((plan > 0).sum()) == n
        rows = assignment.rows(torch.tensor([2, 0]))
        torch.testing.assert_close(rows, assignment(torch.rand(n, m), 0, 1)[[2, 0]].double())
    with pytest.raises(ValueError, match="its own model"):
        OwnModelAssignment().reset(3, 2, gen)


def test_partial_participation_plans_the_clients_that_answered(data):
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=6, lr=0.5, eval_every=0, participation=0.5, seed=3)
    for method in (F.Oracle(data.groups), F.LocalOnly(), F.CFL(2, eps1=0.5, eps2=1.0, min_rounds=2)):
        result = fl.run_federated(data, model, method, config)
        assert all(len(log.clients) == 6 for log in result.history)
        assert torch.isfinite(result.params).all()


def test_adjusted_rand_index_matches_its_definition():
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    assert adjusted_rand_index([0, 0, 0], [1, 1, 1]) == 1.0
    assert adjusted_rand_index([0, 1, 2], [0, 1, 2]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)
    # Hubert and Arabie's worked value: contingency [[1, 1, 0], [1, 2, 1], [0, 0, 4]] (10 items)
    a = [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    b = [0, 1, 0, 1, 1, 2, 2, 2, 2, 2]
    sklearn = pytest.importorskip("sklearn.metrics")
    assert adjusted_rand_index(a, b) == pytest.approx(sklearn.adjusted_rand_score(b, a), abs=1e-12)
    with pytest.raises(ValueError, match="one length"):
        adjusted_rand_index([0, 1], [0, 1, 2])


# ----------------------------------------------------------------------------- re-split
def _resplit_case():
    """Two models: model 0 serves two groups whose updates point apart (+a / -a), model 1 a copy
    of model 0's first group (its clients lose almost nothing on model 0)."""
    a = torch.zeros(6)
    a[0] = 1.0
    b = torch.zeros(6)
    b[1] = 0.1
    deltas = torch.stack([a + b, a - b, -a + b, -a - b, a + 2 * b, a - 2 * b])
    pair_model = torch.tensor([0, 0, 0, 0, 1, 1])
    # clients 0-3 on model 0 (two of them badly served), 4-5 on model 1 (model 0 nearly as good)
    losses = torch.tensor([[1.0, 1.5], [1.0, 1.5], [2.0, 2.5], [2.0, 2.5], [0.51, 0.5], [0.51, 0.5]])
    return deltas, pair_model, losses


BY_UPDATES = F.Resplit(every=1, min_clients=4, signals=(F.SplitByUpdates(),))
CLIENTS = torch.arange(6)  # the case's pair p is client p


def test_resplit_moves_the_redundant_model_to_the_half_that_pulls_away():
    deltas, pair_model, losses = _resplit_case()
    split, moved, pairs, moves = BY_UPDATES.propose(0, 10, deltas, pair_model, losses, CLIENTS)
    assert (split, moved, moves) == (0, 1, True) and sorted(pairs.tolist()) == [2, 3]
    # applied in a round: model 1 restarts from model 0 and takes the second half's mean step
    method = F.MosT(2, server_lr=1.0, warmup=None, resplit=BY_UPDATES)
    state = method.start(6, 2, torch.Generator())
    method.plan(state, losses, 0, 10)
    params = torch.stack([torch.ones(6), torch.full((6,), 5.0)])
    new = method.aggregate(state, params, deltas, pair_model, torch.ones(6, dtype=torch.float64), round=0,
                           clients=CLIENTS)
    torch.testing.assert_close(new[0], torch.ones(6) - deltas[:2].mean(0))
    torch.testing.assert_close(new[1], torch.ones(6) - deltas[2:4].mean(0))


def test_resplit_leaves_models_alone_when_nothing_pulls_apart_or_the_move_costs_more():
    deltas, pair_model, losses = _resplit_case()
    rule = BY_UPDATES
    aligned = deltas.abs()  # every client of model 0 pulls the same way
    assert rule.propose(0, 10, aligned, pair_model, losses, CLIENTS) is None
    costly = losses.clone()
    costly[4:, 0] = 9.0  # model 1's clients would lose a lot on model 0: model 1 is not redundant
    # nor is model 0's half handed over to model 1: both halves lose 0.5 more there
    assert rule.propose(0, 10, deltas, pair_model, costly, CLIENTS) is None
    by_updates = F.SplitByUpdates()
    assert F.Resplit(every=1, min_clients=5, signals=(by_updates,)).propose(0, 10, deltas, pair_model, losses,
                                                                       CLIENTS) is None  # too few clients
    assert F.Resplit(every=3, min_clients=4, signals=(by_updates,)).propose(0, 10, deltas, pair_model, losses,
                                                                       CLIENTS) is None  # not its round
    assert F.Resplit(every=1, min_clients=4, until=0.5, signals=(by_updates,)).propose(6, 10, deltas, pair_model,
                                                                                  losses, CLIENTS) is None
    # with sampled clients the method has no full loss matrix: nothing moves
    method = F.MosT(2, server_lr=1.0, warmup=None, resplit=rule)
    state = method.start(6, 2, torch.Generator())
    method.plan(state, losses[:5], 0, 10, clients=torch.arange(5))
    params = torch.stack([torch.ones(6), torch.full((6,), 5.0)])
    new = method.aggregate(state, params, deltas[:4], pair_model[:4], torch.ones(4, dtype=torch.float64), round=0,
                           clients=torch.arange(4))
    torch.testing.assert_close(new[1], params[1])


def _loss_case():
    """Three models: model 0 serves clients of two groups (rows 0-2 do better on model 1 than on
    model 2, rows 3-4 the other way round), models 1 and 2 serve one group each, and model 2's
    clients would lose little on model 1 (model 2 is the redundant one). The clients' updates all
    point the same way: only their losses tell the groups apart."""
    losses = torch.tensor([[1.0, 1.3, 3.0], [1.1, 1.4, 3.2], [0.9, 1.2, 2.9],   # model 0, group A
                           [1.0, 3.1, 1.4], [1.2, 3.0, 1.5],                     # model 0, group B
                           [0.8, 0.4, 0.45], [0.8, 0.4, 0.45],                  # model 1
                           [0.8, 0.42, 0.4], [0.8, 0.42, 0.4]])                  # model 2
    pair_model = torch.tensor([0, 0, 0, 0, 0, 1, 1, 2, 2])
    deltas = torch.ones(9, 4)
    return deltas, pair_model, losses, torch.arange(9)


def test_split_by_losses_parts_the_clients_that_other_models_serve_differently():
    deltas, pair_model, losses, clients = _loss_case()
    rule = F.Resplit(every=1, min_clients=4, signals=(F.SplitByLosses(),))
    assert F.Resplit().signals == (F.SplitByLosses(), F.SplitByUpdates())  # the default: losses, then updates
    split, moved, pairs, moves = rule.propose(0, 10, deltas, pair_model, losses, clients)
    assert (split, moved, moves) == (0, 2, True) and sorted(pairs.tolist()) == [3, 4]  # the smaller half leaves
    # the updates agree, so CFL's split finds nothing to part
    assert F.Resplit(every=1, min_clients=4, signals=(F.SplitByUpdates(),)).propose(
        0, 10, deltas, pair_model, losses, clients) is None
    # pairs are read through their clients: the same pairs listed in another order part the same way
    order = torch.tensor([4, 0, 3, 1, 2, 5, 6, 7, 8])
    split, moved, pairs, _ = rule.propose(0, 10, deltas[order], pair_model[order], losses, clients[order])
    assert (split, moved) == (0, 2) and sorted(clients[order][pairs].tolist()) == [3, 4]


def test_split_by_losses_ignores_clients_that_differ_only_in_difficulty_or_by_less_than_the_gap():
    deltas, pair_model, losses, clients = _loss_case()
    rule = F.Resplit(every=1, min_clients=4, signals=(F.SplitByLosses(),))
    harder = losses.clone()
    harder[:5] = torch.tensor([1.0, 1.3, 3.0]) + torch.tensor([0.0, 0.1, -0.1, 1.5, 1.6])[:, None]
    # the same relative losses, some clients 1.5 nats harder on every model: one group
    assert rule.signals[0].find(deltas, pair_model, clients, harder, 4) is None
    assert rule.propose(0, 10, deltas, pair_model, harder, clients) is None
    # the halves' mean relative losses differ by 1.68 nats at most, the median best loss is 0.9:
    # a gap of 1.87 median losses
    assert F.SplitByLosses(min_gap=1.9).find(deltas, pair_model, clients, losses, 4) is None
    assert F.SplitByLosses(min_gap=1.85).find(deltas, pair_model, clients, losses, 4) is not None
    # the smaller half has 2 clients: not a group when a group needs 3
    assert F.SplitByLosses(min_half=3).find(deltas, pair_model, clients, losses, 4) is None
    lone = losses.clone()
    lone[3] = lone[0]  # client 3 now of group A ...
    lone[4] = torch.tensor([1.0, 3.1, 1.4])  # ... and one alone (client 4) whose losses differ
    assert rule.signals[0].find(deltas, pair_model, clients, lone, 4) is None
    assert F.SplitByLosses(min_half=1).find(deltas, pair_model, clients, lone, 4)[1].tolist() == [4]


def test_split_by_losses_needs_halves_that_stand_apart_not_a_cut_through_a_spread():
    # model 0's ten clients spread evenly over 2 nats of relative loss on model 1: 2-means cuts
    # the spread in two halves 1 nat apart (twice the median best loss) but only about 3.5
    # spreads apart, which a single cloud of clients gives; two tight clusters stand far apart
    spread = torch.linspace(0.0, 2.0, 10, dtype=torch.float64)
    losses = torch.stack([torch.full((10,), 0.5, dtype=torch.float64), 0.5 + spread], 1)
    losses = torch.cat([losses, torch.tensor([[2.0, 0.5]] * 4, dtype=torch.float64)])
    pair_model, clients, deltas = torch.tensor([0] * 10 + [1] * 4), torch.arange(14), torch.ones(14, 3)
    signal = F.SplitByLosses()
    assert signal.find(deltas, pair_model, clients, losses, 4) is None
    assert F.SplitByLosses(min_separation=3.0).find(deltas, pair_model, clients, losses, 4)[0] == 0
    clusters = losses.clone()
    clusters[:10, 1] = 0.5 + torch.tensor([0.0] * 5 + [2.0] * 5, dtype=torch.float64) + 0.01 * spread
    assert signal.find(deltas, pair_model, clients, clusters, 4)[0] == 0


def _shift_case(minority: float = 1.0):
    """Four models: model 0 serves a group of 10 clients and 4 clients of another group, whom it
    serves ``minority`` nats worse; models 1 to 3 (fitted to neither) serve both alike, so the
    relative rows differ by a shift, the halves only about 5 spreads apart. Models 1 and 3 serve
    one group alike (either is free to move)."""
    noise = torch.tensor([0.25, -0.25, 0.15, -0.15, 0.3, -0.3, 0.05, -0.05, 0.2, -0.2, 0.3, -0.3, 0.1, -0.1],
                         dtype=torch.float64)
    rows = [[0.5 + (minority if i >= 10 else 0.0), 2.5 + float(noise[i]), 2.5 + 0.8 * float(noise[i]),
             3.0 + 0.9 * float(noise[i])]
            for i in range(14)]
    rows += [[3.0, 0.5, 3.0, 0.55]] * 4 + [[3.0, 3.0, 0.5, 3.0]] * 4 + [[3.0, 0.55, 3.0, 0.5]] * 4
    pair_model = torch.tensor([0] * 14 + [1] * 4 + [2] * 4 + [3] * 4)
    return torch.ones(26, 3), pair_model, torch.tensor(rows, dtype=torch.float64), torch.arange(26)


def test_split_by_losses_parts_a_group_held_on_a_model_fitted_to_another():
    deltas, pair_model, losses, clients = _shift_case()
    signal = F.SplitByLosses()
    # the four clients lose 1 nat more on model 0 and the same on models 1 and 2: a shift
    split, pairs = signal.find(deltas, pair_model, clients, losses, 4)
    assert split == 0 and pairs.tolist() == [10, 11, 12, 13]
    # not a group by the separation alone (the halves are about 5 spreads apart, not 8) ...
    assert F.SplitByLosses(shift_separation=math.inf).find(deltas, pair_model, clients, losses, 4) is None
    # ... nor when the half is smaller than min_clients, or a model treats the halves differently
    assert signal.find(deltas, pair_model, clients, losses, 5) is None
    crossed = losses.clone()
    crossed[10:14, 2] += 1.0  # model 2 serves the four as much worse as model 0 does: no shift
    assert signal.find(deltas, pair_model, clients, crossed, 4) is None
    # the re-split moves a free model (1 or 3: each duplicates the other) to take them
    split, to, pairs, moves = F.Resplit(every=1, signals=(signal,)).propose(0, 10, deltas, pair_model, losses,
                                                                            clients)
    assert (split, moves) == (0, True) and to in (1, 3) and pairs.tolist() == [10, 11, 12, 13]


def test_resplit_looks_past_a_named_model_that_is_no_clients_best():
    """Model 1 trains clients of groups C and D, whose best models are 2 and 3: the loss signal
    names it first (its halves part most), but it has no group to keep; it is the free model,
    and the next model the signal names (model 0, groups A and B) is split by moving it."""
    a = [[1.0, 3.0, 2.0, 3.0]] * 4
    b = [[1.0, 3.0, 3.0, 2.0]] * 4
    c = [[3.0, 1.5, 0.5, 3.0]] * 4
    d = [[3.0, 1.5, 3.0, 0.5]] * 4
    losses = torch.tensor(a + b + c + d, dtype=torch.float64)
    pair_model, clients = torch.tensor([0] * 8 + [1] * 8), torch.arange(16)
    deltas = torch.ones(16, 3)
    rule = F.Resplit(every=1, signals=(F.SplitByLosses(),))
    assert rule.signals[0].find(deltas, pair_model, clients, losses, 4)[0] == 1
    split, to, pairs, moves = rule.propose(0, 10, deltas, pair_model, losses, clients)
    assert (split, to, moves) == (0, 1, True) and sorted(pairs.tolist()) in ([0, 1, 2, 3], [4, 5, 6, 7])


def test_resplit_recovers_groups_a_model_had_merged():
    """Three groups and three models, where the load bounds alone end with two groups on one
    model and a third group split over two: the re-split frees the duplicate model."""
    from most.methods import LoadBounds

    three = concept_groups(sizes=(2, 4, 8), seed=7)
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=30, lr=0.5, eval_every=0, seed=0)
    # the models start from the tie (the warm-up's start apart would find these groups itself)
    tie = F.WarmUp(groups=F.ClassGroups(start_apart=False))
    plain = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, marginals=LoadBounds(), resplit=None,
                                                  warmup=tie), config)
    resplit = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, marginals=LoadBounds(), warmup=tie,
                                                    resplit=F.Resplit(min_clients=4)), config)
    started = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, marginals=LoadBounds(), resplit=None), config)
    assert adjusted_rand_index(started.choice, three.groups) == 1.0
    assert adjusted_rand_index(plain.choice, three.groups) < 0.7  # two groups share a model
    assert adjusted_rand_index(resplit.choice, three.groups) == 1.0
    assert resplit.mean_accuracy > plain.mean_accuracy + 0.1


def _hand_over_case():
    """Three models, none redundant: model 0 serves group A (clients 0-3, whom no other model
    serves) and five clients of group B (4-8, whom model 1 serves nearly as well); model 1 serves
    the rest of group B (9-12), model 2 group C (13-16). The loss signal parts model 0's clients
    into the groups; group B's clients are the ones another model can take."""
    a = [[1.0, 3.0, 3.2], [1.1, 3.1, 3.3], [1.0, 3.0, 3.1], [1.05, 3.05, 3.2]]
    b = [[1.0, 1.2, 3.0], [0.9, 1.1, 3.1], [1.0, 1.25, 2.9], [1.1, 1.3, 3.0], [0.95, 1.15, 3.0]]
    losses = torch.tensor(a + b + [[2.0, 0.6, 3.0]] * 4 + [[3.0, 3.0, 0.5]] * 4, dtype=torch.float64)
    pair_model = torch.tensor([0] * 9 + [1] * 4 + [2] * 4)
    return torch.ones(17, 3), pair_model, losses, torch.arange(17)


def test_resplit_hands_a_group_to_the_model_that_serves_it_next_best_when_no_model_is_free(tmp_path):
    deltas, pair_model, losses, clients = _hand_over_case()
    rule = F.Resplit(every=1, signals=(F.SplitByLosses(),))
    assert sorted(rule.signals[0].find(deltas, pair_model, clients, losses, 4)[1].tolist()) == [0, 1, 2, 3]
    split, to, pairs, moves = rule.propose(0, 10, deltas, pair_model, losses, clients)
    assert (split, to, moves) == (0, 1, False) and sorted(pairs.tolist()) == [4, 5, 6, 7, 8]
    assert F.Resplit(every=1, signals=(F.SplitByLosses(),), hand_over=False).propose(
        0, 10, deltas, pair_model, losses, clients) is None
    # group B loses 0.21 more on model 1 than on model 0 (group A 2.0 more), the median best loss
    # is 0.9: handed over within 0.5 x 0.9 = 0.45, not within 0.2 x 0.9 = 0.18
    assert F.Resplit(every=1, signals=(F.SplitByLosses(),), hand_over_gap=0.2).propose(
        0, 10, deltas, pair_model, losses, clients) is None
    # nor when model 1 serves group A nearly as well (0.4 above model 0: not 0.45 above group B)
    near = losses.clone()
    near[:4, 1] = near[:4, 0] + 0.4
    assert rule.propose(0, 10, deltas, pair_model, near, clients) is None
    # fewer than min_clients stay on model 0: handed over still, since no other model serves
    # group A (2.0 nats worse on model 1, 2.1 on model 2: over 2 median best losses) ...
    few = F.Resplit(every=1, min_clients=5, signals=(F.SplitByLosses(),))
    assert few.propose(0, 10, deltas, pair_model, losses, clients)[:2] == (0, 1)
    assert F.Resplit(every=1, min_clients=5, signals=(F.SplitByLosses(),), own_group_gap=math.inf).propose(
        0, 10, deltas, pair_model, losses, clients) is None
    # ... but not when the other models serve group A only 0.7 nats (0.78 median best losses)
    # worse: a few clients the other models could serve are not a group worth a model
    served = losses.clone()
    served[:4, 1:] = served[:4, :1] + 0.7
    assert rule.propose(0, 10, deltas, pair_model, served, clients)[:2] == (0, 1)
    assert few.propose(0, 10, deltas, pair_model, served, clients) is None
    # in a round: model 0 steps on group A's updates alone, the balance point moves group B's
    # five clients (5 of 17 shares) from model 0 to model 1, and the next plan follows it
    method = F.MosT(3, server_lr=1.0, warmup=None, resplit=rule)
    state = method.start(17, 3, torch.Generator())
    method.plan(state, losses, 0, 10)
    deltas = torch.arange(51, dtype=torch.float32).reshape(17, 3)
    params = torch.zeros(3, 3)
    new = method.aggregate(state, params, deltas, pair_model, torch.ones(17, dtype=torch.float64), round=0,
                           clients=clients)
    torch.testing.assert_close(new[0], -deltas[:4].mean(0))
    torch.testing.assert_close(state.loads, torch.tensor([4.0, 9.0, 4.0], dtype=torch.float64) / 17)
    plan, _ = method.plan(state, losses, 1, 10)
    assert plan.argmax(1).tolist() == [0] * 4 + [1] * 9 + [2] * 4
    # without the moved balance the plan keeps some of them on model 0, where they lose less
    plain, _ = F.MosT(3, server_lr=1.0, warmup=None, resplit=None).plan(
        F.MosT(3, warmup=None, resplit=None).start(17, 3, torch.Generator()), losses, 1, 10)
    assert (plain.argmax(1)[4:9] == 0).sum() >= 2
    # marginals without a balance point (the paper's balance) get no hand-over: model 0 steps on all
    balanced = F.MosT(3, server_lr=1.0, warmup=None, marginals=Uniform(), resplit=rule)
    kept = balanced.start(17, 3, torch.Generator())
    balanced.plan(kept, losses, 0, 10)
    new = balanced.aggregate(kept, params, deltas, pair_model, torch.ones(17, dtype=torch.float64), round=0,
                             clients=clients)
    assert kept.loads is None and not balanced.hands_over(kept)
    torch.testing.assert_close(new[0], -deltas[:9].mean(0))
    # a run resumed from its saved state keeps the moved balance
    saved = Checkpoint(tmp_path / "run.ckpt")
    saved.save({"method_state": state})
    fresh = method.start(17, 3, torch.Generator())
    restore_into(fresh, saved.load()["method_state"])
    torch.testing.assert_close(fresh.loads, state.loads)


def test_hand_over_recovers_groups_when_there_are_as_many_models_as_groups():
    """Groups of 4, 12 and 20 clients over 3 models: the default's balance keeps part of a group
    in another group's model, and no model is free to move; the hand-over separates them."""
    three = concept_groups(sizes=(4, 12, 20), per=40, seed=2)
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=30, lr=0.5, eval_every=0, seed=0)
    tie = F.WarmUp(groups=F.ClassGroups(start_apart=False))  # the re-split's case: the models start equal
    kept = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, resplit=F.Resplit(hand_over=False), warmup=tie),
                            config)
    handed = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, warmup=tie), config)
    assert adjusted_rand_index(kept.choice, three.groups) < 0.95
    assert adjusted_rand_index(handed.choice, three.groups) == 1.0
    assert handed.mean_accuracy > kept.mean_accuracy + 0.05


def test_resplit_hands_a_group_to_its_model_before_moving_a_free_one():
    """The hand-over case with a fourth model that duplicates group C's (models 2 and 3 serve C's
    clients alike, so either is free to move): group B's five clients on model 0 go to model 1,
    their group's model, rather than to a moved model that would give group B two models."""
    deltas, pair_model, losses, clients = _hand_over_case()
    c = losses[13:17].clone()
    losses = torch.cat([torch.cat([losses, losses[:, 2:3]], 1)[:13],
                        torch.cat([c, c[:, 2:3] + 0.02], 1), torch.cat([c, c[:, 2:3] - 0.02], 1)])
    pair_model = torch.tensor([0] * 9 + [1] * 4 + [2] * 4 + [3] * 4)
    deltas, clients = torch.ones(21, 3), torch.arange(21)
    rule = F.Resplit(every=1, signals=(F.SplitByLosses(),))
    split, to, pairs, moves = rule.propose(0, 10, deltas, pair_model, losses, clients)
    assert (split, to, moves) == (0, 1, False) and sorted(pairs.tolist()) == [4, 5, 6, 7, 8]
    # the re-split that weighs the move first moves a free model; so does it for a caller that
    # cannot hand over (a plan without a balance point)
    split, to, pairs, moves = F.Resplit(every=1, signals=(F.SplitByLosses(),), hand_over_first=False).propose(
        0, 10, deltas, pair_model, losses, clients)
    assert (split, moves) == (0, True) and to in (2, 3) and sorted(pairs.tolist()) in ([0, 1, 2, 3], [4, 5, 6, 7, 8])
    split, to, pairs, moves = rule.propose(0, 10, deltas, pair_model, losses, clients, hand_over=False)
    assert (split, moves) == (0, True) and to in (2, 3)
    # a half smaller than min_clients is handed over only when no model is free: here one moves
    # (group A, four clients no other model serves, stays as a group of its own)
    split, to, pairs, moves = F.Resplit(every=1, min_clients=6, signals=(F.SplitByLosses(),)).propose(
        0, 10, deltas, pair_model, losses, clients)
    assert (split, moves) == (0, True) and to in (2, 3)


def test_hand_over_leaves_a_group_smaller_than_min_clients_a_model_of_its_own():
    """Groups of 3, 12 and 21 clients over 3 models: the share bounds' lower bound (half the fair
    load, 6 clients) holds clients of the group of 21 on the group of 3's model, and refusing to
    leave fewer than ``min_clients`` (4) there keeps them; the group of 3, which no other model
    serves, keeps the model alone."""
    three = concept_groups(sizes=(3, 12, 21), per=40, seed=0)
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=30, lr=0.5, eval_every=0, seed=0)
    held = fl.run_federated(three, model, F.MosT(3, server_lr=1.0, resplit=F.Resplit(own_group_gap=math.inf)),
                            config)
    alone = fl.run_federated(three, model, F.MosT(3, server_lr=1.0), config)
    groups = torch.tensor(three.groups)
    for run, mixed in ((held, True), (alone, False)):
        plan = run.history[-1].plan
        small = int(plan[groups == 0].sum(0).argmax())  # the group of 3's model
        assert bool((plan[groups != 0, small] > 0).any()) == mixed
    assert adjusted_rand_index(held.choice, three.groups) < 0.9
    assert adjusted_rand_index(alone.choice, three.groups) == 1.0
    assert alone.mean_accuracy > held.mean_accuracy + 0.05


def test_resplit_refuses_settings_outside_their_range():
    with pytest.raises(TypeError, match="hand_over_first"):
        F.Resplit(hand_over_first="yes")
    for bad, match in ((dict(every=0), "every"), (dict(until=1.5), "until"), (dict(min_clients=1), "min_clients"),
                       (dict(hand_over_gap=-0.5), "hand_over_gap"), (dict(own_group_gap=-1.0), "own_group_gap"),
                       (dict(own_group_gap="1"), "own_group_gap")):
        with pytest.raises(ValueError, match=match):
            F.Resplit(**bad)
    for make, match in ((lambda: F.SplitByUpdates(max_similarity=-2.0), "max_similarity"),
                        (lambda: F.SplitByLosses(min_gap=-0.1), "min_gap"),
                        (lambda: F.SplitByLosses(min_gap=float("nan")), "min_gap"),
                        (lambda: F.SplitByLosses(min_gap=True), "min_gap"),
                        (lambda: F.SplitByLosses(min_half=0), "min_half"),
                        (lambda: F.SplitByLosses(min_separation=-1.0), "min_separation"),
                        (lambda: F.SplitByLosses(shift_separation=-4.0), "shift_separation"),
                        (lambda: F.SplitByLosses(shift_separation="4"), "shift_separation")):
        with pytest.raises(ValueError, match=match):
            make()
    for bad in ("losses", (), (F.SplitByLosses(), "updates"), F.SplitByLosses()):
        with pytest.raises(TypeError, match="signals"):
            F.Resplit(signals=bad)
    with pytest.raises(TypeError, match="resplit"):
        F.MosT(2, resplit="yes")
    with pytest.raises(TypeError, match="hand_over"):
        F.Resplit(hand_over="yes")


def test_experiment_files_build_the_new_methods_from_their_own_fields():
    from most.config import ConfigError, build

    assert isinstance(build(F.LocalOnly, {}), F.LocalOnly)
    assert build(F.Oracle, {"groups": [0, 1, 1], "server_lr": 2.0}).n_models == 2
    assert build(F.CFL, {"n_models": 3, "eps1": 0.1}).eps2 == 1.6
    assert build(F.FineTuning, {"n_models": 1, "epochs": 2}).fine_tune_epochs == 2
    with pytest.raises(ConfigError, match="n_models"):  # one model per client: not the caller's to set
        build(F.LocalOnly, {"n_models": 3})
    with pytest.raises(ConfigError, match="groups"):
        build(F.Oracle, {"n_models": 2})
