"""Batch normalisation in modules: every model keeps its own running statistics (most.evaluators._statistics).

Each property is checked against a plain PyTorch loop over the same batches: one ``nn.Module`` per
model, in training mode, a forward pass over each objective the model serves once per round.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import most
from most.checkpoint import Checkpoint
from tests._shared import stopped_then_resumed

_SQ = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731


def _data(n=4, rows=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 4, generator=g) * (i + 1) + i, torch.randn(rows, 2, generator=g)) for i in range(n)]


def _net():
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3), nn.ReLU(), nn.Linear(6, 2))


def _problem(data, model=_net):
    return most.Problem.from_module(model, [lambda f, x=x, y=y: _SQ(f(x), y) for x, y in data])


def _plain(problem, theta):
    """A plain module holding ``theta`` (the template's buffers), in training mode."""
    net = copy.deepcopy(problem.template)
    with torch.no_grad():
        for name, value in problem.unflatten(theta).items():
            net.get_parameter(name).copy_(value)
    return net.train()


def test_training_passes_normalise_by_each_batch_and_write_nothing():
    data = _data()
    problem = _problem(data)
    params = problem.initial_params(3, torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in problem.template.named_buffers()}
    losses = problem.loss_matrix(params)
    _, jac = problem.jacobian(params)
    for j in range(3):
        for i, (x, y) in enumerate(data):
            net = _plain(problem, params[j])
            loss = _SQ(net(x), y)
            torch.testing.assert_close(losses[i, j], loss.detach())
            grad = torch.autograd.grad(loss, [p for p in net.parameters()])
            torch.testing.assert_close(jac[j, i], torch.cat([g.reshape(-1) for g in grad]))
    for k, v in problem.template.named_buffers():
        assert torch.equal(v, before[k]), k


def test_a_run_keeps_each_models_statistics_as_a_plain_loop_over_the_objectives_it_serves():
    data = _data()
    problem = _problem(data)
    method = most.MosT(n_models=2, rounds=6, lr=0.05, seed=3, seeding=None, reseed=None)
    params = problem.initial_params(2, torch.Generator().manual_seed(3))
    rounds = []
    result = method.fit(problem, callback=lambda record, after: rounds.append((record.plan.clone(), after.clone())))
    nets = [_plain(problem, params[j]) for j in range(2)]
    start = params
    for plan, after in rounds:
        for j, net in enumerate(nets):
            with torch.no_grad():
                for name, value in problem.unflatten(start[j]).items():
                    net.get_parameter(name).copy_(value)
                for i, (x, _) in enumerate(data):
                    if plan[i, j] > 0:
                        net(x)
        start = after
    assert int(result.statistics["1.num_batches_tracked"].sum()) == sum(int((p > 0).sum()) for p, _ in rounds)
    for j, (net, module) in enumerate(zip(nets, result.to_modules())):
        for name, value in net.named_buffers():
            torch.testing.assert_close(result.statistics[name][j], value)
            torch.testing.assert_close(module.get_buffer(name), value)
        # evaluation mode normalises with the model's own statistics, as the plain module does
        x = data[0][0]
        net.eval(), module.eval()
        with torch.no_grad():
            for name, value in problem.unflatten(result.params[j]).items():
                net.get_parameter(name).copy_(value)
            torch.testing.assert_close(module(x), net(x))
    assert not torch.equal(result.statistics["1.running_mean"][0], result.statistics["1.running_mean"][1])


def test_the_cumulative_average_without_momentum_follows_torch():
    data = _data(n=3)
    model = lambda: nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=None), nn.Linear(3, 1))  # noqa: E731
    problem = most.Problem.from_module(model, [lambda f, x=x, y=y: _SQ(f(x), y[:, :1]) for x, y in data])
    params = problem.initial_params(2, torch.Generator().manual_seed(0))
    stats = problem.statistics.update(params, problem.statistics.init(2))
    for j in range(2):
        net = _plain(problem, params[j])
        with torch.no_grad():
            for x, _ in data:
                net(x)
        for name, value in net.named_buffers():
            torch.testing.assert_close(stats[name][j], value)


def test_a_layer_in_evaluation_mode_keeps_its_stored_statistics():
    def model():
        net = _net()
        with torch.no_grad():
            net[1].running_mean.uniform_(-1, 1, generator=torch.Generator().manual_seed(0))
        net[1].eval()
        return net

    problem = _problem(_data(), model)
    assert problem.statistics is None
    result = most.MosT(n_models=2, rounds=3, lr=0.05, seed=0).fit(problem)
    assert result.statistics is None
    for module in result.to_modules():
        assert torch.equal(module[1].running_mean, problem.template[1].running_mean)


def test_resume_and_batch_give_the_same_statistics(tmp_path):
    problem = _problem(_data())
    method = most.MosT(n_models=2, rounds=6, lr=0.05, seed=1)
    whole = method.fit(problem)
    halted = most.MosT(n_models=2, rounds=6, lr=0.05, seed=1)
    checkpoint = Checkpoint(tmp_path / "run", every=2)
    with pytest.raises(KeyboardInterrupt):
        def stop(record, params):
            if record.round == 3:
                raise KeyboardInterrupt
        halted.fit(problem, callback=stop, checkpoint=checkpoint)
    resumed = halted.fit(problem, checkpoint=checkpoint)
    batched = most.fit_batch(problem, [method, most.MosT(n_models=2, rounds=6, lr=0.05, seed=2)])[0]
    for other in (resumed, batched):
        assert torch.equal(other.params, whole.params)
        for name, value in whole.statistics.items():
            assert torch.equal(other.statistics[name], value), name


def test_a_moved_model_starts_its_statistics_afresh():
    problem = _problem(_data())
    statistics = problem.statistics
    params = problem.initial_params(2, torch.Generator().manual_seed(0))
    stats = statistics.update(params, statistics.init(2))
    reset = statistics.reset(stats, 1)
    fresh = statistics.init(1)
    for name in statistics.names:
        assert torch.equal(reset[name][0], stats[name][0])
        assert torch.equal(reset[name][1], fresh[name][0])


def test_mixtures_of_objectives_update_on_every_objective():
    problem = _problem(_data())
    extended = problem.with_objectives(torch.tensor([[0.5, 0.5, 0.0, 0.0]]))
    params = problem.initial_params(1, torch.Generator().manual_seed(0))
    served = torch.zeros(1, 1, dtype=torch.bool)
    stats = extended.statistics.update(params, extended.statistics.init(1), served)
    assert int(stats["1.num_batches_tracked"][0]) == 4


def test_statistics_of_the_wrong_shape_are_refused_with_what_is_wanted():
    problem = _problem(_data())
    params = problem.initial_params(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"`statistics` must hold the running statistics \['1.running_mean'"):
        problem.to_modules(params, {"1.running_mean": torch.zeros(2, 6)})
    stats = problem.statistics.init(3)
    with pytest.raises(ValueError, match=r"statistics\['1.running_mean'\]` must have one row per model \(2\)"):
        problem.to_modules(params, stats)


def test_instance_normalisation_that_tracks_statistics_is_refused_with_the_ways_out():
    model = lambda: nn.Sequential(nn.Linear(4, 6), nn.Unflatten(1, (2, 3)),  # noqa: E731
                                  nn.InstanceNorm1d(2, track_running_stats=True), nn.Flatten(), nn.Linear(6, 2))
    with pytest.raises(ValueError, match=r"layer '2' \(InstanceNorm1d\) updates running statistics.*`layer.eval\(\)`"):
        _problem(_data(), model)


def test_datasets_refuse_batch_statistics_that_would_mix_objectives():
    for norm in (nn.BatchNorm1d(6), nn.BatchNorm1d(6, track_running_stats=False)):
        model = lambda norm=norm: nn.Sequential(nn.Linear(4, 6), copy.deepcopy(norm), nn.Linear(6, 2))  # noqa: E731
        with pytest.raises(ValueError, match=r"layer '1' \(BatchNorm1d\) is batch normalisation in training mode.*"
                                             r"Problem.from_module.*`layer.eval\(\)`"):
            most.Problem.from_datasets(model, _data(), lambda out, y: ((out - y) ** 2).sum(-1))
    # without running statistics a layer normalises by its batch's in evaluation mode too
    model = lambda: nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, track_running_stats=False),  # noqa: E731
                                  nn.Linear(6, 2)).eval()
    with pytest.raises(ValueError, match=r"layer '1' \(BatchNorm1d\) is batch normalisation without running "
                                         r"statistics \(track_running_stats=False: in evaluation mode too\).*"
                                         r"Problem.from_module.*build it with running statistics"):
        most.Problem.from_datasets(model, _data(), lambda out, y: ((out - y) ** 2).sum(-1))
    stored = lambda: nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)).eval()  # noqa: E731
    most.Problem.from_datasets(stored, _data(), lambda out, y: ((out - y) ** 2).sum(-1))  # fixed statistics: taken


def test_dropout_in_from_module_draws_from_the_runs_generator_so_runs_repeat_resume_and_batch(tmp_path):
    """Dropout (with batch normalisation, whose per-round statistics pass runs the dropout too):
    each evaluation's masks come from a seed drawn from the run's generator, so a seeded run
    repeats, a resumed one equals it, a run batched with another equals its fit, and torch's own
    generator is left as it was."""
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(12, 4, generator=g), torch.randn(12, 1, generator=g)) for _ in range(5)]
    net = lambda: nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Dropout(0.5), nn.ReLU(),  # noqa: E731
                                nn.Linear(6, 1))
    problem = most.Problem.from_module(net, [lambda f, x=x, y=y: ((f(x) - y) ** 2).mean() for x, y in data])
    assert problem.stochastic
    method = most.MosT(n_models=2, rounds=6, lr=0.05, seed=0)
    whole = method.fit(problem)
    assert torch.equal(method.fit(problem).params, whole.params)
    assert not torch.equal(most.MosT(n_models=2, rounds=6, lr=0.05, seed=1).fit(problem).params, whole.params)
    resumed = stopped_then_resumed(method, problem, tmp_path / "run.ckpt", every=2, at=3)
    batched = most.fit_batch(problem, [method, method.replace(seed=1)])[0]
    for other in (resumed, batched):
        assert torch.equal(other.params, whole.params)
        for name, value in whole.statistics.items():
            assert torch.equal(other.statistics[name], value), name
    state = torch.get_rng_state()
    assert torch.equal(problem.loss_matrix(whole.params), problem.loss_matrix(whole.params))
    assert torch.equal(torch.get_rng_state(), state)
    # problems made from it keep its seeded evaluations: MosT-E's objectives, sum-of-minimum's
    # ridge and its k-means++ seeding
    for derived in (most.MosT(n_models=2, rounds=4, lr=0.05, extension=most.methods.DirichletExtension(3)),
                    most.baselines.SumOfMinimum(n_models=2, rounds=4, lr=0.05, ridge=0.1, seed_steps=3)):
        assert torch.equal(derived.fit(problem).params, derived.fit(problem).params), derived
    # a module without random layers does not draw from the run's generator
    plain = most.Problem.from_module(lambda: nn.Linear(4, 1), [lambda f, x=x, y=y: ((f(x) - y) ** 2).mean()
                                                              for x, y in data])
    run = torch.Generator().manual_seed(3)
    before = run.get_state()
    plain.loss_matrix(torch.zeros(2, 5), generator=run)
    assert not plain.stochastic and torch.equal(run.get_state(), before)
