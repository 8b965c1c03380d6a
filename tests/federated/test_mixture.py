"""FedEM: the E-step against Bayes' rule, the weighted local loss, recovery of planted concept
groups by the mixture weights, the mixture's evaluation, batching, and bad input."""

import math

import pytest
import torch

import most.federated as fl
from most.federated import methods as F
from most.federated.methods.mixture import responsibilities
from most.federated.clients import batch_orders, pad_split, train_pairs
from tests.federated.test_peers import CONFIG, data  # noqa: F401 (the planted concept groups, a fixture)


def test_responsibilities_are_bayes_posteriors_and_the_weights_their_means():
    g = torch.Generator().manual_seed(0)
    losses = torch.rand(3, 4, 5, generator=g, dtype=torch.float64) * 3
    pi = torch.softmax(torch.randn(3, 4, generator=g, dtype=torch.float64), 1)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.float64)
    q, new = responsibilities(losses, pi, mask)
    for t in range(2):
        for i in range(int(mask[t].sum())):
            joint = [float(pi[t, j]) * math.exp(-float(losses[t, j, i])) for j in range(4)]
            for j in range(4):
                assert math.isclose(float(q[t, j, i]), joint[j] / sum(joint), rel_tol=1e-12)
        n_t = int(mask[t].sum())
        torch.testing.assert_close(new[t], q[t, :, :n_t].mean(1))
    assert torch.equal(q[1, :, 3:], torch.zeros(4, 2)) and torch.equal(q[2], torch.zeros(4, 5))
    torch.testing.assert_close(new[2], pi[2])  # a client without samples keeps its weights
    torch.testing.assert_close(new.sum(1), torch.ones(3, dtype=torch.float64))


def test_responsibilities_stay_finite_when_every_likelihood_underflows():
    losses = torch.tensor([[[1000.0, 1001.0], [1500.0, 2900.0]]], dtype=torch.float64)  # exp(-l) is 0 in float64
    q, new = responsibilities(losses, torch.tensor([[0.5, 0.5]], dtype=torch.float64), torch.ones(1, 2))
    assert torch.isfinite(q).all() and torch.isfinite(new).all()
    torch.testing.assert_close(q[0, :, 0], torch.tensor([1.0, 0.0], dtype=torch.float64))
    # a weight that collapsed to 0 stays 0 (EM's answer), and the others still normalise
    q, new = responsibilities(losses, torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.ones(1, 2))
    assert torch.equal(new, torch.tensor([[1.0, 0.0]], dtype=torch.float64))


def _pairs(data):
    train = pad_split(data, "train")
    model = fl.logistic_regression(20, 10)
    params = model.init(3, torch.Generator().manual_seed(1))
    keys = batch_orders(train.w[:3], 2, generator=torch.Generator().manual_seed(2))
    return model, params, train, keys


def test_sample_weights_of_one_train_bit_for_bit_as_none_and_zero_weights_leave_a_pair_alone(data):
    model, params, train, keys = _pairs(data)
    args = dict(batch_size=7, lr=0.3, prox_mu=0.0, max_pairs=64)
    plain = train_pairs(model, params, train.x[:3], train.y[:3], train.w[:3], keys, **args)
    ones = train_pairs(model, params, train.x[:3], train.y[:3], train.w[:3], keys, sample_weight=torch.ones(3, 36), **args)
    assert torch.equal(plain, ones)
    q = torch.ones(3, 36)
    q[1] = 0.0
    q[2, ::2] = 0.0  # pair 2 learns from its odd samples alone
    out = train_pairs(model, params, train.x[:3], train.y[:3], train.w[:3], keys, sample_weight=q, **args)
    assert torch.equal(out[1], params[1]) and torch.equal(out[0], plain[0])
    assert not torch.equal(out[2], plain[2])


def test_a_sample_weight_scales_the_step_as_a_learning_rate_would(data):
    model, params, train, keys = _pairs(data)
    args = dict(batch_size=7, prox_mu=0.0, max_pairs=64)
    halved = train_pairs(model, params, train.x[:3], train.y[:3], train.w[:3], keys, lr=0.3,
                  sample_weight=torch.full((3, 36), 0.5), **args)
    slower = train_pairs(model, params, train.x[:3], train.y[:3], train.w[:3], keys, lr=0.15, **args)
    torch.testing.assert_close(halved, slower)


def test_local_train_refuses_sample_weights_of_another_shape(data):
    model, params, train, _ = _pairs(data)
    with pytest.raises(ValueError, match=r"sample_weight.*shape of `w`, \(3, 36\)"):
        fl.local_train(model, params, train.x[:3], train.y[:3], train.w[:3], epochs=1, batch_size=5, lr=0.1,
                       sample_weight=torch.ones(3, 35))


def test_fedem_recovers_planted_concept_groups_and_each_client_mixes_its_groups_model(data):
    result = fl.run_federated(data, fl.logistic_regression(20, 10), F.FedEM(2), CONFIG)
    pi = result.mixture
    assert pi.shape == (12, 2)
    torch.testing.assert_close(pi.sum(1), torch.ones(12, dtype=torch.float64))
    found = pi.argmax(1).tolist()
    assert fl.evaluation.adjusted_rand_index(found, data.groups) == 1.0
    assert float(pi.max(1).values.min()) > 0.9  # each client is (nearly) drawn from one model
    # scored on its mixture: one column, chosen for every client
    assert result.test_accuracy.shape == (12, 1) and result.choice.tolist() == [0] * 12
    fedavg = fl.run_federated(data, fl.logistic_regression(20, 10), F.FedAvg(1), CONFIG)
    assert result.mean_accuracy > fedavg.mean_accuracy + 0.2


def test_the_mixture_accuracy_is_that_of_the_mixed_prediction(data):
    model = fl.logistic_regression(20, 10)
    result = fl.run_federated(data, model, F.FedEM(3), fl.FederatedConfig(rounds=3, lr=0.5, eval_every=0))
    test = pad_split(data, "test")
    _, _, probs = fl.evaluate(model, result.params, test, return_probs=True)  # [m, n, N, C]
    mixed = torch.einsum("nk,knsc->nsc", result.mixture.float(), probs)
    acc = ((mixed.argmax(-1) == test.y).float() * test.w).sum(1) / test.w.sum(1)
    torch.testing.assert_close(result.test_accuracy[:, 0], acc)
    assert torch.equal(result.test_probs, probs)


def test_fedem_in_a_batch_equals_fedem_alone(data):
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=4, lr=0.5, eval_every=2, seed=3)
    alone = fl.run_federated(data, model, F.FedEM(2), config)
    batch = fl.run_batch(data, model, [(F.IFCA(2), config), (F.FedEM(2), config), (F.FedAvg(1), config)])
    assert torch.equal(batch[1].params, alone.params) and torch.equal(batch[1].mixture, alone.mixture)
    assert torch.equal(batch[0].params, fl.run_federated(data, model, F.IFCA(2), config).params)


def test_fedem_refuses_more_components_than_clients(data):
    with pytest.raises(ValueError, match=r"n_models=13 components for 12 clients.*n_models <= 12"):
        fl.run_federated(data, fl.logistic_regression(20, 10), F.FedEM(13), CONFIG)


def test_fedem_with_partial_participation_updates_only_the_weights_of_the_clients_that_took_part(data):
    method = F.FedEM(2)
    config = fl.FederatedConfig(rounds=1, lr=0.5, eval_every=0, participation=0.25, seed=0)
    server = fl.server.Server(method, fl.logistic_regression(20, 10), config, torch.full((12,), 36))
    from most.federated.runtime import _round

    train = pad_split(data, "train")
    (log,) = _round([server], 0, server.model, train, train, pad_split(data, "val"), data.client_ids, None, train.w)
    assert len(log.clients) == 3
    changed = (server.mixture() != 0.5).any(1)
    assert changed.nonzero().squeeze(1).tolist() == log.clients.tolist()
