"""MosT on Flower: the strategy and client app against the in-process runtime.

Fast tests deliver messages in this process (``tests/flower/_grid.py``: ``LocalGrid``); the simulation test
runs Flower's Ray engine with 30 virtual clients. The multi-process deployment (TLS, SuperNode
authentication, a killed SuperNode) is in ``tests/flower/test_app.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
import torch

pytest.importorskip("flwr", reason="Flower is an optional extra: pip install 'most-transport[flower]'")

import most  # noqa: E402
import most.federated as fl  # noqa: E402
from most.federated import methods as F  # noqa: E402
from most.flower import ClientSpec, MostStrategy, client_losses, client_train, make_client_app  # noqa: E402
from most.flower import protocol  # noqa: E402

from tests.flower._grid import LocalGrid, client_app as _app  # noqa: E402

N = 12


@pytest.fixture(scope="module")
def data():
    return fl.fedprox_synthetic(0.0, 0.0, n_clients=N, samples_per_client=50, seed=0)


@pytest.fixture(scope="module")
def model():
    return fl.logistic_regression(60, 10)


def _config(**kw):
    base = dict(rounds=6, eval_every=3, seed=5, pair_seeds=True)
    base.update(kw)
    return fl.FederatedConfig(**base)


BUILDERS = {
    "MosT": lambda: F.MosT(3, server_lr=3.0, warmup=F.WarmUp(2)),
    "MosT (update split)": lambda: F.MosT(3, server_lr=3.0, warmup=F.GroupedWarmUp(2)),
    "MosT (2 shares)": lambda: F.MosT(3, server_lr=3.0, warmup=F.WarmUp(2),
                                      assignment=most.methods.CappedTransportAssignment(2),
                                      weighting=most.methods.Shares()),
    "MosT (paper)": lambda: F.MosT(3, server_lr=2.0, warmup=None, combiner=most.MinNorm(), diversity=0.1),
    "MosT (prior-adjusted)": lambda: F.MosT(3, server_lr=3.0, warmup=F.WarmUp(2), client_loss=F.PriorAdjusted(1.0)),
    "MosT (Adam server step)": lambda: F.MosT(3, server_lr=0.05, warmup=F.WarmUp(1), optimizer=most.optim.Adam()),
    "FedAvg": lambda: F.FedAvg(2, server_lr=2.0),
    "FedProx": lambda: F.FedProx(2, mu=0.1),
    "MGDA": lambda: F.MGDA(2),
    "IFCA": lambda: F.IFCA(3),
    "CFL": lambda: F.CFL(3, eps1=5.0, eps2=0.01, min_rounds=2),  # thresholds that split at round 2
    "Oracle": lambda: F.Oracle([k % 3 for k in range(N)], server_lr=2.0),
    "LocalOnly": lambda: F.LocalOnly(),
    "FedEM": lambda: F.FedEM(3),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_strategy_equals_in_process_runtime(name, data, model):
    """Same data, seed and settings: the same Gamma every round and the same final models."""
    config = _config()
    strategy = MostStrategy(BUILDERS[name](), model, config, n_clients=N, client_ids=data.client_ids)
    result = strategy.run(LocalGrid(_app(data, model), N))
    reference = fl.run_federated(data, model, BUILDERS[name](), config)
    torch.testing.assert_close(result.params, reference.params, rtol=0, atol=1e-6)
    assert len(result.history) == len(reference.history) == config.rounds
    for ours, theirs in zip(result.history, reference.history):
        assert (ours.plan is None) == (theirs.plan is None)
        if ours.plan is not None:
            torch.testing.assert_close(ours.plan, theirs.plan, rtol=0, atol=1e-9)
    assert result.missing == {}
    assert result.assigned == reference.assigned  # whether loss_choice is the method's own assignment
    if strategy.method.own_model_losses:
        # one model per client: each client evaluates its own (no client is sent another's), so the
        # results hold the diagonal of the runtime's client x model tables
        assert all(models == (c,) for _, kind, c, models in strategy.messages if kind in ("query", "evaluate"))
        for ours, theirs in ((result.test_accuracy, reference.test_accuracy),
                             (result.selection_loss, reference.selection_loss)):
            torch.testing.assert_close(ours.diagonal(), theirs.diagonal())
            assert ours.isnan().sum() == N * (N - 1)
        assert torch.equal(result.choice, reference.choice)
        assert result.mean_accuracy == pytest.approx(reference.mean_accuracy, abs=1e-6)
        return
    if reference.mixture is not None:  # each client ran its own E-steps: the same weights, and its mixture scored
        torch.testing.assert_close(result.mixture, reference.mixture, rtol=0, atol=1e-5)
        assert result.test_accuracy.shape == (N, 1) and torch.equal(result.choice, reference.choice)
    torch.testing.assert_close(result.test_accuracy, reference.test_accuracy)
    torch.testing.assert_close(result.selection_loss, reference.selection_loss)
    assert torch.equal(result.loss_choice, reference.loss_choice)
    assert result.mean_accuracy == pytest.approx(reference.mean_accuracy, abs=1e-6)
    assert result.prediction_diversity() == pytest.approx(reference.prediction_diversity(), rel=1e-6)


@pytest.mark.parametrize("name", ["FedEM", "FineTuning", "MosT"])
def test_every_rounds_logged_validation_accuracy_equals_the_in_process_runtimes(name, data, model):
    """Each round's log is the mean over the clients of their best of the m models on validation,
    on Flower as in process, also in the last round, where a FedEM client scores its mixture and
    a fine-tuning client its fine-tuned model (MosT: a method without such a predictor)."""
    make = {"FedEM": lambda: F.FedEM(3), "FineTuning": lambda: F.FineTuning(2, server_lr=1.0, epochs=3),
            "MosT": lambda: F.MosT(3, server_lr=3.0, warmup=F.WarmUp(1))}[name]
    config = _config(rounds=3, eval_every=1)
    result = MostStrategy(make(), model, config, n_clients=N).run(LocalGrid(_app(data, model), N))
    reference = fl.run_federated(data, model, make(), config)
    ours, theirs = [log.val_accuracy for log in result.history], [log.val_accuracy for log in reference.history]
    assert len(ours) == config.rounds and None not in ours
    assert ours == pytest.approx(theirs, rel=0, abs=1e-9)
    if name != "MosT":  # the clients' own predictors score otherwise: the log is not made of them
        assert theirs[-1] != pytest.approx(float(result.val_accuracy[:, 0].nanmean()), abs=1e-9)


def test_the_loss_choice_of_a_method_that_assigns_the_models_is_its_assignment(data, model):
    """The oracle gives each client its group's model; after one short round the lowest loss
    would pick others, and loss_choice keeps the assignment, as run_federated's does."""
    config = _config(rounds=1, lr=1e-4)
    result = MostStrategy(BUILDERS["Oracle"](), model, config, n_clients=N).run(LocalGrid(_app(data, model), N))
    reference = fl.run_federated(data, model, BUILDERS["Oracle"](), config)
    assigned = torch.tensor([k % 3 for k in range(N)])
    assert not torch.equal(fl.evaluation.select_by_loss(result.selection_loss), assigned)
    assert torch.equal(result.loss_choice, assigned) and torch.equal(reference.loss_choice, assigned)


def _flower_and_in_process(data, model, make, config):
    """The run of ``make()`` on a Flower grid of ``data``'s clients and in process; the params
    equal (to 1e-6) and the plans (to 1e-9). Returns ``(flower, in_process)``."""
    n = data.n_clients
    app = make_client_app(lambda ctx: ClientSpec(model, data.clients[int(ctx.node_config["partition-id"])],
                                                 int(ctx.node_config["partition-id"])))
    result = MostStrategy(make(), model, config, n_clients=n).run(LocalGrid(app, n))
    reference = fl.run_federated(data, model, make(), config)
    torch.testing.assert_close(result.params, reference.params, rtol=0, atol=1e-6)
    for ours, theirs in zip(result.history, reference.history):
        if ours.plan is not None:
            torch.testing.assert_close(ours.plan, theirs.plan, rtol=0, atol=1e-9)
    return result, reference


def test_class_groups_found_on_flower_equal_the_in_process_runtime():
    """The warm-up's last round asks the clients for their gradients per class with the losses;
    where they show groups (label-skewed clients in groups), the models start apart and the held
    rounds train each group's model, bit for bit as in process."""
    from tests.federated._groups import skewed_groups

    data = skewed_groups(sizes=(3, 4, 5), seed=1)
    result, _ = _flower_and_in_process(data, fl.logistic_regression(20, 10), lambda: F.MosT(3, warmup=F.WarmUp(2)),
                                       _config(rounds=8, lr=0.1))
    first = next(log.plan for log in result.history if log.plan is not None)
    assert fl.evaluation.adjusted_rand_index(first.argmax(1).tolist(), data.groups) == 1.0


def test_models_started_apart_on_flower_equal_the_in_process_runtime():
    """Where the class groups do not stand apart (four training samples a client), the models
    start along the spectral groups, on Flower as in process."""
    from tests.federated._groups import skewed_groups

    data = skewed_groups(per=8, dim=40, seed=0)
    model, config = fl.logistic_regression(40, 10), _config(rounds=6, lr=0.1)
    _, reference = _flower_and_in_process(
        data, model, lambda: F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_margin=None))), config)
    tie = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_apart=False))), config)
    assert not torch.allclose(tie.params, reference.params)  # the start apart changed the run


def test_a_client_loss_the_clients_cannot_compute_is_refused_before_any_round(model):
    class Squared(F.ClientLoss):
        def __call__(self, logits, y, w):
            return logits.pow(2).mean((2, 3)).T

    with pytest.raises(ValueError, match="in-process runtime only"):
        MostStrategy(F.MosT(3, client_loss=Squared()), model, _config(), n_clients=N)


def test_cfl_splits_on_flower_as_in_process(data, model):
    strategy = MostStrategy(BUILDERS["CFL"](), model, _config(), n_clients=N)
    result = strategy.run(LocalGrid(_app(data, model), N))
    assert len(set(result.choice.tolist())) == 3  # it split twice: three clusters, each client scored on its own
    assert torch.equal(result.choice, strategy.server.assigned())


def test_fine_tuning_on_flower_scores_what_the_in_process_runtime_scores(data, model):
    """Each client fine-tunes its best model itself: the same accuracies and losses as the
    in-process runtime's fine-tuned models (its diagonal), the FedAvg models left on the server."""
    config = _config()
    strategy = MostStrategy(F.FineTuning(2, server_lr=1.0, epochs=3), model, config, n_clients=N)
    result = strategy.run(LocalGrid(_app(data, model), N))
    reference = fl.run_federated(data, model, F.FineTuning(2, server_lr=1.0, epochs=3), config)
    fedavg = fl.run_federated(data, model, F.FedAvg(2, server_lr=1.0), config)
    torch.testing.assert_close(result.params, fedavg.params, rtol=0, atol=1e-6)  # the fine-tuned stay on the clients
    assert result.test_accuracy.shape == (N, 1) and torch.equal(result.choice, torch.zeros(N, dtype=torch.long))
    torch.testing.assert_close(result.client_accuracy, reference.client_accuracy)
    torch.testing.assert_close(result.selection_loss[:, 0], reference.selection_loss.diagonal())
    torch.testing.assert_close(result.test_loss[:, 0], reference.test_loss.diagonal())
    assert torch.equal(result.fine_tuned_from, fedavg.choice)  # each started from its best FedAvg model
    assert len(set(fedavg.choice.tolist())) == 2  # the two FedAvg models are both someone's best
    assert result.mean_accuracy != pytest.approx(fedavg.mean_accuracy)  # the fine-tuning changed the scores
    evaluations = [cfg for _, kind, _, cfg in strategy.messages if kind == "evaluate"]
    assert evaluations and all(models == (0, 1) for models in evaluations)  # every client is sent both models


def test_fine_tuning_batches_come_from_the_pair_seed_without_pair_seeds_the_run_generator(data, model):
    """Under pair_seeds the fine-tuning draws from pair_seed(seed, rounds, client, j); without,
    from the run's generator: the two differ, and each repeats."""
    method = F.FineTuning(1, epochs=2)
    paired = fl.run_federated(data, model, method, _config())
    unpaired = fl.run_federated(data, model, method, _config(pair_seeds=False))
    again = fl.run_federated(data, model, method, _config())
    assert torch.equal(paired.params, again.params)
    assert not torch.equal(paired.params, unpaired.params)


def test_pair_seeds_make_batches_independent_of_the_other_pairs(data, model):
    """client_train alone draws the batches the runtime draws for the same pair among others."""
    params = model.init(3, torch.Generator().manual_seed(0))
    deltas = client_train(model, params[[0, 2]], [0, 2], data.clients[4], seed=7, round=3, client=4, epochs=2,
                          batch_size=8, lr=0.1)
    train = fl.pad_split(data, "train")
    cidx = torch.tensor([1, 4, 4, 9])
    pm = torch.tensor([1, 0, 2, 1])
    seeds = [fl.server.pair_seed(7, 3, int(c), int(j)) for c, j in zip(cidx, pm)]
    local = fl.local_train(model, params[pm], train.x[cidx], train.y[cidx], train.w[cidx], epochs=2, batch_size=8,
                           lr=0.1, seeds=seeds)
    torch.testing.assert_close(deltas, params[pm][1:3] - local[1:3], rtol=0, atol=1e-6)
    other = client_train(model, params[[0, 2]], [0, 2], data.clients[4], seed=8, round=3, client=4, epochs=2,
                         batch_size=8, lr=0.1)
    assert not torch.allclose(deltas, other)  # the seed matters


def test_clients_receive_only_the_models_they_are_assigned(data, model):
    grid = LocalGrid(_app(data, model), N)
    strategy = MostStrategy(F.MosT(3, server_lr=3.0, warmup=F.WarmUp(1)), model, _config(rounds=4), n_clients=N)
    result = strategy.run(grid)
    trained = [(node, msg) for node, msg in grid.delivered if msg.metadata.message_type == "train"]
    assert trained
    node_client = {node: k for k, node in enumerate(grid.nodes)}
    for node, msg in trained:
        keys = set(msg.content["models"].keys())
        models = [int(j) for j in msg.content["config"]["models"]]
        assert keys == {f"model.{j}" for j in models}
        # nothing of another client: no updates, no data, only the global models it trains
        assert set(msg.content.keys()) == {"config", "models"}
        t = int(msg.content["config"]["round"])
        log = result.history[t]
        row = log.clients.tolist().index(node_client[node])
        if log.plan is not None:  # MosT's default weighting: only the model of the largest share
            assert models == [int(log.plan[row].argmax())]
    for node, msg in grid.delivered:
        assert "updates" not in msg.content
    assert {m[1] for m in strategy.messages} == {"query", "train", "evaluate"}


def test_a_client_that_stops_answering_is_left_out_and_reported(data, model):
    grid = LocalGrid(_app(data, model), N)
    lost = grid.nodes[5]

    def crash_at_round_2(g, msg):
        if msg.content["config"].get("round") == 2:
            g.down.add(lost)

    grid.on_round = crash_at_round_2
    strategy = MostStrategy(F.MosT(3, server_lr=3.0, warmup=F.WarmUp(1)), model, _config(rounds=5), n_clients=N,
                            client_ids=data.client_ids)
    result = strategy.run(grid)
    assert len(result.history) == 5
    name = data.client_ids[5]
    assert result.missing[2] == [name] and result.missing[4] == [name] and result.missing["final"] == [name]
    assert 0 not in result.missing and 1 not in result.missing
    for log in result.history[2:]:
        assert 5 not in log.clients.tolist() and len(log.clients) == N - 1
        # Gamma over the clients that answered, alpha renormalised: rows sum to 1 / (n - 1)
        torch.testing.assert_close(log.plan.sum(1), torch.full((N - 1,), 1.0 / (N - 1), dtype=log.plan.dtype))
    assert torch.isnan(result.test_accuracy[5]).all() and torch.isfinite(result.test_accuracy[:5]).all()
    # the loss pick has no loss for the lost client (model 0, as its accuracy pick) and one for the rest
    assert torch.isnan(result.selection_loss[5]).all() and torch.isfinite(result.selection_loss[:5]).all()
    assert int(result.loss_choice[5]) == 0
    assert torch.isfinite(result.params).all()


def test_a_client_whose_training_fails_is_dropped_from_that_aggregation(data, model):
    grid = LocalGrid(_app(data, model), N)
    bad = grid.nodes[3]
    original = grid.client_app

    def flaky(message, context):
        if context.node_id == bad and message.metadata.message_type == "train":
            raise RuntimeError("out of memory")
        return original(message, context)

    grid.client_app = flaky
    strategy = MostStrategy(F.FedAvg(2), model, _config(rounds=3), n_clients=N, client_ids=data.client_ids)
    result = strategy.run(grid)
    assert result.missing == {0: [data.client_ids[3]], 1: [data.client_ids[3]], 2: [data.client_ids[3]]}
    assert torch.isfinite(result.test_accuracy).all()  # it still evaluates


def test_too_few_clients_leave_the_models_unchanged(data, model):
    grid = LocalGrid(_app(data, model), N)
    grid.on_round = lambda g, msg: g.down.update(g.nodes[2:]) if msg.content["config"].get("round") == 1 else None
    strategy = MostStrategy(F.MosT(3, warmup=None), model, _config(rounds=3), n_clients=N)
    before = []
    result = strategy.run(grid, callback=lambda log, params: before.append(params.clone()))
    torch.testing.assert_close(before[1], before[0])  # round 1: 2 clients < 3 models
    assert len(result.missing[1]) == N - 2


def test_bad_nodes_are_reported_clearly(data, model):
    same = LocalGrid(_app(data, model), 3, node_config=lambda k: {"partition-id": 0})
    with pytest.raises(ValueError, match="Two nodes hold client 0"):
        MostStrategy(F.FedAvg(1), model, _config(), n_clients=3).run(same)
    outside = LocalGrid(_app(data, model), 3, node_config=lambda k: {"partition-id": k + 5})
    with pytest.raises(ValueError, match="outside 0..2"):
        MostStrategy(F.FedAvg(1), model, _config(), n_clients=3).run(outside)
    other = fl.logistic_regression(60, 12)  # outputs for every label, but not the server's model
    wrong = LocalGrid(make_client_app(lambda ctx: ClientSpec(other, data.clients[0], int(ctx.node_config["partition-id"]))), 2)
    with pytest.raises(ValueError, match="model of 732 parameters"):
        MostStrategy(F.FedAvg(1), model, _config(), n_clients=2).run(wrong)
    # a frozen layer drawn at random in the factory: each node's template holds other values
    def drawn():
        net = torch.nn.Sequential(torch.nn.Linear(60, 8), torch.nn.Tanh(), torch.nn.Linear(8, 10))
        net[0].requires_grad_(False)
        return net

    server, node = fl.FlatModel(drawn), fl.FlatModel(drawn)
    assert server.fixed_digest() != node.fixed_digest()
    # batch normalisation in evaluation mode: its buffers (a 0-d count among them) digest alike on every node
    normed = lambda: torch.nn.Sequential(torch.nn.Linear(60, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 10)).eval()  # noqa: E731
    assert fl.FlatModel(normed).fixed_digest() == fl.FlatModel(normed).fixed_digest()
    assert server.fixed_digest() == fl.FlatModel(lambda: server.to_module(server.init(1, torch.Generator())[0])
                                                 ).fixed_digest()  # the same values: the same digest
    apart = LocalGrid(make_client_app(lambda ctx: ClientSpec(node, data.clients[0], int(ctx.node_config["partition-id"]))), 2)
    with pytest.raises(ValueError, match="Client 0 \\(node 1000\\) builds its model with other frozen parameters or "
                                         "buffers than the server's"):
        MostStrategy(F.FedAvg(1), server, _config(), n_clients=2).run(apart)
    with pytest.raises(ValueError, match="at least as many clients as models"):
        MostStrategy(F.MosT(5), model, _config(), n_clients=3)
    with pytest.raises(ValueError, match="FederatedConfig"):
        MostStrategy(F.FedAvg(1), model, {"rounds": 3}, n_clients=3)
    with pytest.raises(ValueError, match="shape"):
        client_losses(model, torch.zeros(2, 7), data.clients[0])
    with pytest.raises(ValueError, match="must be a most.federated.ClientData"):
        ClientSpec(model, data, 0)


def test_clients_that_all_fail_to_start_stop_the_run_with_the_first_ones_reason(data, model):
    """Every node's load fails (as on a setting all clients read): the error says so and gives
    the first node's reason, not that no client answered."""
    def load(ctx):
        raise ValueError(f"client {ctx.node_config['partition-id']} cannot read its data")

    grid = LocalGrid(make_client_app(load), 3)
    strategy = MostStrategy(F.FedAvg(1), model, _config(), n_clients=3, wait_for_clients=0.0)
    with pytest.raises(RuntimeError, match=r"(?s)3 of 3 connected nodes answered with an error.*node 1000.*"
                                           r"client 0 cannot read its data"):
        strategy.run(grid)
    grid.down.update(grid.nodes)  # no node at all: nothing to report but the wait
    with pytest.raises(RuntimeError, match="No client answered within 0 s"):
        MostStrategy(F.FedAvg(1), model, _config(), n_clients=3, wait_for_clients=0.0).run(grid)


def test_a_nan_loss_stops_the_run_with_advice(data, model):
    grid = LocalGrid(_app(data, model), N)
    original = grid.client_app

    def diverged(message, context):
        reply = original(message, context)
        if message.metadata.message_type == protocol.LOSSES and context.node_id == grid.nodes[7]:
            reply.content["metrics"]["loss"] = [float("nan")] * 2
        return reply

    grid.client_app = diverged
    strategy = MostStrategy(F.FedAvg(2), model, _config(), n_clients=N, client_ids=data.client_ids)
    with pytest.raises(ValueError, match=f"client {data.client_ids[7]} on model 0 is nan: training diverged"):
        strategy.run(grid)


def test_app_settings_from_run_config():
    from most.flower.app import AppSettings

    s = AppSettings.from_run_config({"method": "FedProx", "num-clients": 4, "server-lr": 2, "rounds": 3})
    method, model, config = s.build()
    assert type(method).__name__ == "FedProx" and method.server_lr == 2.0 and config.rounds == 3
    assert len(s.data().clients) == 4
    with pytest.raises(ValueError, match="did you mean 'num-clients'|num_clients"):
        AppSettings.from_run_config({"num-client": 4})
    with pytest.raises(ValueError, match="Unknown method 'MOST'"):
        AppSettings.from_run_config({"method": "MOST"})
    with pytest.raises(ValueError, match="run-config.rounds: expected an integer; got 'many'"):
        AppSettings.from_run_config({"rounds": "many"})


def test_the_core_library_does_not_import_flower():
    code = ("import sys, most, most.federated, most.experiments, most.cli, most.bench.federated; "
            "assert 'flwr' not in sys.modules, 'flwr imported'; assert 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_flower_simulation_matches_the_in_process_runtime(tmp_path, monkeypatch):
    """30 virtual SuperNodes on Flower's Ray engine: the same Gamma and accuracy as in process.

    From m random starts: after a warm-up the m models are equal, every assignment is optimal
    and the solver's choice among them turns on the last bits of the losses, which a client
    training one model and the in-process runtime training all pairs at once need not share.
    """
    from most.flower import run_simulation

    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    temp = tempfile.mkdtemp(prefix="t", dir="/tmp")  # short: Ray's socket paths live below it
    monkeypatch.setattr(tempfile, "tempdir", temp)
    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=30, seed=1)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=6, eval_every=3, seed=1, pair_seeds=True)
    result = run_simulation(data, model, F.MosT(5, server_lr=5.0, warmup=None), config, num_cpus=2)
    assert os.listdir(temp) == []  # Ray's session folder went with the run
    reference = fl.run_federated(data, model, F.MosT(5, server_lr=5.0, warmup=None), config)
    plans = [(a.plan, b.plan) for a, b in zip(result.history, reference.history) if a.plan is not None]
    assert len(plans) == 6
    for ours, theirs in plans:
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)
    assert result.mean_accuracy == pytest.approx(reference.mean_accuracy, abs=1e-6)
    torch.testing.assert_close(result.params, reference.params, rtol=0, atol=1e-6)
    assert result.missing == {}


@pytest.mark.parametrize("num_cpus", [-1, 0, 2.5, True, "2"])
def test_a_bad_num_cpus_is_refused_before_ray_starts(num_cpus, data, model, monkeypatch):
    import flwr.simulation

    from most.flower import run_simulation

    def engine(*args, **kwargs):
        raise AssertionError("Flower's simulation engine started")

    monkeypatch.setattr(flwr.simulation, "run_simulation", engine)
    with pytest.raises(ValueError, match=r"`num_cpus` must be an int >= 1; got .*Pass None to give Ray all"):
        run_simulation(data, model, F.FedAvg(1), _config(rounds=1), num_cpus=num_cpus)


@pytest.mark.parametrize("num_cpus, given", [(None, os.cpu_count()), (1, 1), (3, 3)])
def test_ray_is_given_num_cpus_or_every_cpu(num_cpus, given, data, model, monkeypatch):
    import flwr.simulation

    from most.flower import run_simulation

    seen = {}
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda *a, backend_config, **kw: seen.update(backend_config))
    with pytest.raises(RuntimeError, match="ended without a result"):  # the stand-in engine ran no round
        run_simulation(data, model, F.FedAvg(1), _config(rounds=1), num_cpus=num_cpus)
    assert seen["init_args"]["num_cpus"] == given


TINY = """
name = "tiny"
seeds = [0]
engine = "flower"
[data]
name = "fedprox_synthetic"
model_shift = 0.0
feature_shift = 0.0
n_clients = 6
samples_per_client = 40
[model]
name = "logistic_regression"
[federated]
rounds = 3
eval_every = 3
[methods.MosT]
n_models = 2
warmup = { type = "WarmUp", rounds = 1 }
"""


def test_experiment_files_choose_the_engine():
    import tomllib

    from most.config import ConfigError
    from most.experiments import parse_experiment

    experiment = parse_experiment(tomllib.loads(TINY))
    assert experiment.runs[0].config["engine"] == "flower"
    with pytest.raises(ConfigError, match="unknown engine 'flwr'"):
        parse_experiment(tomllib.loads(TINY.replace('engine = "flower"', 'engine = "flwr"')))
    with pytest.raises(ConfigError, match="only a federated experiment"):
        parse_experiment({"engine": "flower", "problem": {"name": "mixed_regression"},
                          "methods": {"MosT": {"n_models": 2}}})


@pytest.mark.slow
def test_most_run_on_the_flower_engine(tmp_path, monkeypatch):
    """`most run` with engine = "flower": the runs go through Flower's simulation engine."""
    import json

    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    out = tmp_path / "results"
    subprocess.run([sys.executable, "-m", "most.cli", "run", str(spec), "--out", str(out), "--quiet"], check=True,
                   env={**os.environ, "RAY_TMPDIR": os.environ["RAY_TMPDIR"]})
    result = json.loads(next(out.rglob("result.json")).read_text())
    assert result["status"] == "done" and result["rounds"] == 3
    config = json.loads(next(out.rglob("config.json")).read_text())
    assert config["engine"] == "flower"
    lines = next(out.rglob("metrics.jsonl")).read_text().splitlines()
    assert len(lines) == 3


def test_credentials_command_makes_a_ca_a_server_certificate_and_node_keys(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key
    from typer.testing import CliRunner

    from most.cli import app

    out = tmp_path / "creds"
    res = CliRunner().invoke(app, ["flower", "credentials", str(out), "--host", "10.0.0.5", "--host", "lab.example",
                                   "--nodes", "2"])
    assert res.exit_code == 0, res.output
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((out / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"10.0.0.5"}
    assert sans.get_values_for_type(x509.DNSName) == ["lab.example"]
    for k in range(2):  # the formats Flower reads (load_ssh_private_key / load_ssh_public_key)
        private = load_ssh_private_key((out / f"supernode_{k}").read_bytes(), password=None)
        public = load_ssh_public_key((out / f"supernode_{k}.pub").read_bytes())
        assert private.public_key().public_numbers() == public.public_numbers()
    again = CliRunner().invoke(app, ["flower", "credentials", str(out)])
    assert again.exit_code == 2 and "already holds credentials" in again.output
    from most.flower.credentials import make_certificates

    with pytest.raises(ValueError, match="at least one IP or DNS name"):
        make_certificates(tmp_path / "none", hosts=[])


def test_partial_participation_samples_the_same_clients_as_in_process(data, model):
    config = _config(participation=0.5, rounds=5)
    strategy = MostStrategy(BUILDERS["MosT"](), model, config, n_clients=N, client_ids=data.client_ids)
    grid = LocalGrid(_app(data, model), N)
    result = strategy.run(grid)
    reference = fl.run_federated(data, model, BUILDERS["MosT"](), config)
    for ours, theirs in zip(result.history, reference.history):
        assert ours.clients.tolist() == theirs.clients.tolist() and len(ours.clients) == N // 2
    torch.testing.assert_close(result.params, reference.params, rtol=0, atol=1e-6)
    asked = {(t, c) for t, kind, c, _ in strategy.messages if kind == "query"}
    assert asked == {(log.round, c) for log in result.history for c in log.clients.tolist()}  # nobody else


def test_a_client_that_connects_late_joins_the_next_round(data, model):
    grid = LocalGrid(_app(data, model), N)
    late = grid.nodes[4]
    grid.down.add(late)  # not connected at the start
    grid.on_round = lambda g, msg: g.down.discard(late) if msg.content["config"].get("round") == 1 else None
    strategy = MostStrategy(F.FedAvg(2), model, _config(rounds=4), n_clients=N, client_ids=data.client_ids,
                            wait_for_clients=0.0)
    result = strategy.run(grid)
    name = data.client_ids[4]
    assert result.missing["start"] == [name] and result.missing[0] == [name] and result.missing[1] == [name]
    assert 2 not in result.missing and 3 not in result.missing and "final" not in result.missing
    assert 4 in result.history[2].clients.tolist()
    # a client whose node came back under a new id is re-mapped, not refused as a duplicate
    grid.nodes[4] = 2000
    grid.contexts[2000] = grid.contexts.pop(late)
    strategy.configure_train(5, None, None, grid)
    assert strategy.nodes.node_of[4] == 2000 and late not in strategy.nodes.client_at


def test_credentials_command_reports_a_bad_host_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from most.cli import app

    res = CliRunner().invoke(app, ["flower", "credentials", str(tmp_path / "c"), "--host", ""])
    assert res.exit_code == 2 and "at least one IP or DNS name" in res.output


def test_a_client_whose_labels_the_model_cannot_score_stops_the_server_naming_it(data, model):
    """Bad labels are a fault of the deployment, not a client that dropped out: the client refuses
    its data when first asked, and the server stops with the reason (the in-process runtime
    refuses the same before any round)."""
    def load(ctx):
        k = int(ctx.node_config["partition-id"])
        c = data.clients[k]
        if k == 2:
            c = fl.ClientData(c.x_train, c.y_train + 5, c.x_val, c.y_val, c.x_test, c.y_test)
        return ClientSpec(model, c, k)

    top = int(data.clients[2].y_train.max()) + 5
    with pytest.raises(ValueError, match=rf"client 2 has the class label {top}, but the model .* has 10 outputs"):
        ClientSpec(model, fl.ClientData(*(t + 5 if i == 1 else t for i, t in enumerate(
            (data.clients[2].x_train, data.clients[2].y_train, data.clients[2].x_val, data.clients[2].y_val,
             data.clients[2].x_test, data.clients[2].y_test)))), 2)
    strategy = MostStrategy(F.FedAvg(2), model, _config(rounds=2), n_clients=N)
    with pytest.raises(ValueError, match=rf"^Node \d+: client 2 has the class label {top}"):
        strategy.run(LocalGrid(make_client_app(load), N))


def test_a_client_whose_evaluation_fails_is_missing_in_that_round(data, model):
    """Client 3 fails its round-1 evaluation alone: it is missing in round 1, that round's
    validation accuracy is the mean over the other clients' best models (not a mean that looks
    like all n), and every other round is the run without the fault's."""
    config = _config(rounds=3, eval_every=1)
    grid = LocalGrid(_app(data, model), N)
    original = grid.client_app

    def flaky(message, context):
        if (context.node_id == grid.nodes[3] and message.metadata.message_type == "evaluate"
                and int(message.content["config"]["round"]) == 1):
            raise RuntimeError("out of memory")
        return original(message, context)

    grid.client_app = flaky
    params = []
    result = MostStrategy(BUILDERS["MosT"](), model, config, n_clients=N, client_ids=data.client_ids).run(
        grid, callback=lambda log, p: params.append(p.clone()))
    clean = MostStrategy(BUILDERS["MosT"](), model, config, n_clients=N).run(LocalGrid(_app(data, model), N))
    assert result.missing == {1: [data.client_ids[3]]}
    from most.flower.client import client_val_accuracy

    best = [max(client_val_accuracy(model, params[1], data.clients[c])) for c in range(N) if c != 3]
    assert result.history[1].val_accuracy == pytest.approx(sum(best) / len(best), abs=1e-6)
    assert result.history[1].val_accuracy != pytest.approx(clean.history[1].val_accuracy, abs=1e-9)
    for t in (0, 2):
        assert result.history[t].val_accuracy == clean.history[t].val_accuracy
    torch.testing.assert_close(result.params, clean.params, rtol=0, atol=0)  # training did not see the fault


def test_a_client_that_fails_the_last_evaluation_is_missing_at_the_end(data, model):
    grid = LocalGrid(_app(data, model), N)
    original = grid.client_app

    def flaky(message, context):
        if context.node_id == grid.nodes[4] and message.metadata.message_type == "evaluate":
            raise RuntimeError("out of memory")
        return original(message, context)

    grid.client_app = flaky
    result = MostStrategy(F.FedAvg(2), model, _config(rounds=2, eval_every=2), n_clients=N,
                          client_ids=data.client_ids).run(grid)
    assert result.missing == {"final": [data.client_ids[4]]}
    assert torch.isnan(result.test_accuracy[4]).all() and torch.isfinite(result.test_accuracy[:4]).all()


@pytest.mark.parametrize("name", ["LocalOnly", "FineTuning"])
def test_the_prediction_kl_of_a_personal_method_is_not_measured_on_flower(name, data, model):
    """In process it compares the n clients' own models on every client's test inputs; on Flower
    no client holds another's model: NaN, not the 0 of one model alone."""
    make = {"LocalOnly": F.LocalOnly, "FineTuning": lambda: F.FineTuning(2, server_lr=1.0, epochs=1)}[name]
    config = _config(rounds=2, eval_every=2)
    result = MostStrategy(make(), model, config, n_clients=N).run(LocalGrid(_app(data, model), N))
    reference = fl.run_federated(data, model, make(), config)
    assert reference.prediction_diversity() > 0
    assert result.prediction_diversity() != result.prediction_diversity()  # NaN


@pytest.mark.parametrize("key, value, message", [
    ("timeout", "5", r"`timeout` must be a positive number; got '5'.*or None"),
    ("timeout", -1, r"`timeout` must be a positive number; got -1.*or None"),
    ("timeout", 0, r"`timeout` must be a positive number"),
    ("timeout", float("nan"), r"`timeout` must be a positive number; got nan"),
    ("timeout", True, r"`timeout` must be a positive number; got True"),
    ("wait_for_clients", "30", r"`wait_for_clients` must be a non-negative number; got '30'"),
    ("wait_for_clients", -1, r"`wait_for_clients` must be a non-negative number; got -1"),
    ("wait_for_clients", None, r"`wait_for_clients` must be a non-negative number; got None"),
])
def test_a_bad_timeout_or_wait_is_refused_when_the_strategy_is_made(key, value, message, model):
    with pytest.raises(ValueError, match=message):
        MostStrategy(F.FedAvg(1), model, _config(), n_clients=3, **{key: value})


def test_an_infinite_timeout_or_wait_is_accepted(model):
    # waiting for ever is a choice (as timeout=None is), not a mistake
    strategy = MostStrategy(F.FedAvg(1), model, _config(), n_clients=3, timeout=float("inf"),
                            wait_for_clients=float("inf"))
    assert strategy.timeout == float("inf") and strategy.wait_for_clients == float("inf")


def test_run_simulation_refuses_a_bad_timeout_before_ray_starts(data, model, monkeypatch):
    import flwr.simulation

    from most.flower import run_simulation

    def engine(*args, **kwargs):
        raise AssertionError("Flower's simulation engine started")

    monkeypatch.setattr(flwr.simulation, "run_simulation", engine)
    with pytest.raises(ValueError, match=r"`timeout` must be a positive number; got '5'"):
        run_simulation(data, model, F.FedAvg(1), _config(rounds=1), timeout="5")
