"""One core: a federated run whose clients take one full-batch gradient step is the centralised
loop on the clients' losses, to float tolerance, for the same components.

With one local epoch, a batch as large as every client and local step eta, client i's update of
model j is ``Delta_ij = eta * grad L_i(theta_j)`` (L_i its mean cross-entropy); every combiner
here is linear in a common scale of its rows (WeightedSum) or gives weights that do not depend
on it (MinNorm), so the server step ``theta_j - eta_s d_j`` is the centralised step with
``lr = eta * eta_s``. The plan is solved on the same losses in both loops.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import cross_entropy

import most
import most.federated as fl
from most.federated import methods as F
from most.methods import Curriculum, GammaWeights, MajorityShare, MinNorm, Uniform, WeightedSum

ETA, SERVER_LR, ROUNDS, M = 0.5, 0.6, 6, 3


@pytest.fixture(scope="module")
def setting():
    data = fl.fedprox_synthetic(1.0, 1.0, n_clients=9, samples_per_client=24, seed=4)
    model = fl.logistic_regression(60, 10)
    xs = [c.x_train for c in data.clients]
    ys = [c.y_train for c in data.clients]

    def losses(theta):
        return torch.stack([cross_entropy(model.logits(theta, x), y) for x, y in zip(xs, ys)])

    problem = most.Problem.from_function(losses, dim=model.dim, n_objectives=data.n_clients,
                                         init=lambda m, generator: model.init(m, generator))
    batch = max(len(y) for y in ys)
    config = fl.FederatedConfig(rounds=ROUNDS, local_epochs=1, batch_size=batch, lr=ETA, seed=3, eval_every=0)
    return data, model, problem, config


PAIRS = [
    pytest.param(dict(combiner=WeightedSum()), id="MosT-mean"),
    pytest.param(dict(combiner=MinNorm()), id="MosT-min-norm"),
    pytest.param(dict(combiner=MinNorm(), weighting=GammaWeights()), id="MosT-literal"),
    pytest.param(dict(combiner=WeightedSum(), marginals=Curriculum()), id="MosT-curriculum"),
    pytest.param(dict(combiner=MinNorm(), weighting=MajorityShare(), marginals=Uniform(), diversity=0.05),
                 id="MosT-diversity"),
]


@pytest.mark.parametrize("components", PAIRS)
def test_federated_most_equals_the_centralised_loop(setting, components):
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, F.MosT(M, server_lr=SERVER_LR, warmup=None, **components), config)
    centralised = most.MosT(n_models=M, rounds=ROUNDS, lr=ETA * SERVER_LR, seed=config.seed, **components).fit(problem)
    for log, record in zip(federated.history, centralised.history):
        torch.testing.assert_close(log.plan.float(), record.plan.float(), atol=1e-6, rtol=0)
    torch.testing.assert_close(federated.params, centralised.params, atol=2e-5, rtol=1e-4)
    assert not torch.allclose(federated.params, model.init(M, torch.Generator().manual_seed(config.seed)))


def test_federated_linearization_equals_the_centralised_one(setting):
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, F.Linearization(M, server_lr=SERVER_LR), config)
    centralised = most.Linearization(n_models=M, rounds=ROUNDS, lr=ETA * SERVER_LR, seed=config.seed).fit(problem)
    torch.testing.assert_close(federated.params, centralised.params, atol=2e-5, rtol=1e-4)


def test_the_server_step_is_the_update_rule(setting):
    # Adam on the server: the same rule object as the centralised loop's optimizer
    data, model, problem, config = setting
    federated = fl.run_federated(data, model, F.MosT(M, server_lr=0.05, warmup=None, optimizer=most.optim.Adam()),
                                 config)
    centralised = most.MosT(n_models=M, rounds=ROUNDS, lr=0.05, seed=config.seed, combiner=WeightedSum(),
                            optimizer=most.optim.Adam()).fit(problem)
    # Adam divides by the running scale of the direction, so the local step eta cancels (up to eps)
    torch.testing.assert_close(federated.params, centralised.params, atol=1e-4, rtol=1e-3)
