"""The in-process federated runtime and its methods: client steps against plain loops,
aggregation rules against QP solvers, plans feasible, bad input refused."""

import math

import numpy as np
import pytest
import torch

import most.federated as fl
from most import transport
from most.baselines import STCHSetCombiner, SumOfMinimumCombiner, TCHSetCombiner
from most.methods import CappedTransportAssignment, Curriculum, MinNorm, ObjectivesSelectModels, Shares, Uniform, WeightedSum
from most.federated import methods as F
from most.federated.methods import GroupedWarmUp, WarmUp, balanced_update_groups, combine_updates, min_norm_box
from most.federated.methods.most import WarmUpPhase
from most.federated.clients import Padded, local_train


@pytest.fixture(scope="module")
def small():
    return fl.fedprox_synthetic(0.5, 0.5, n_clients=8, samples_per_client=40, seed=3)


def test_pad_split_stacks_clients_with_zero_weight_padding(small):
    data = small.subset([0, 1])
    uneven = fl.FederatedDataset.from_clients(
        [data.clients[0], fl.ClientData(data.clients[1].x_train[:5], data.clients[1].y_train[:5],
                                        data.clients[1].x_val, data.clients[1].y_val,
                                        data.clients[1].x_test, data.clients[1].y_test)],
        name="uneven", n_classes=10)
    p = fl.pad_split(uneven, "train")
    assert p.x.shape == (2, 24, 60) and p.counts.tolist() == [24, 5]
    assert p.w.sum(1).tolist() == [24.0, 5.0] and (p.x[1, 5:] == 0).all()
    with pytest.raises(ValueError, match="split"):
        fl.pad_split(uneven, "training")


def _loop_sgd(model, theta, x, y, order, batch_size, lr, mu):
    anchor = theta.clone()
    theta = theta.clone().requires_grad_(True)
    for s in range(math.ceil(len(order) / batch_size)):
        b = order[s * batch_size:(s + 1) * batch_size]
        loss = torch.nn.functional.cross_entropy(model.logits(theta, x[b]), y[b])
        loss = loss + 0.5 * mu * (theta - anchor).square().sum()
        (g,) = torch.autograd.grad(loss, theta)
        theta = (theta - lr * g).detach().requires_grad_(True)
    return theta.detach()


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_local_train_matches_a_plain_sgd_loop_and_padding_never_steps(small, mu):
    model = fl.logistic_regression(60, 10)
    theta = model.init(2, torch.Generator().manual_seed(0))
    p = fl.pad_split(small, "train")
    x, y, w = p.x[:2].clone(), p.y[:2].clone(), p.w[:2].clone()
    w[1, 7:] = 0.0  # client 1 has only 7 real samples
    gen = torch.Generator().manual_seed(5)
    out = local_train(model, theta, x, y, w, epochs=1, batch_size=5, lr=0.1, prox_mu=mu, generator=gen)
    # replay the same permutation: real samples first, in the order of the random keys
    keys = torch.rand(w.shape, generator=torch.Generator().manual_seed(5)) + 2.0 * (w == 0)
    order = keys.argsort(1)
    for i, n_real in enumerate([24, 7]):
        expected = _loop_sgd(model, theta[i], x[i], y[i], order[i, :n_real], 5, 0.1, mu)
        torch.testing.assert_close(out[i], expected, atol=1e-5, rtol=1e-5)


def min_norm_combination(params, deltas, pair_model, weight, server_lr, coordinates=None):
    combiner = MinNorm(coordinates=None if coordinates is None else (coordinates.start, coordinates.stop))
    return params - server_lr * combine_updates(combiner, params.shape[0], deltas, pair_model, weight)


def test_weighted_mean_and_min_norm_combination():
    params = torch.zeros(2, 3)
    deltas = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [2.0, 2.0, 2.0]])
    pair_model = torch.tensor([0, 0, 1])
    step = combine_updates(WeightedSum(), 2, deltas, pair_model, torch.tensor([1.0, 3.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(params - 2.0 * step, torch.tensor([[-0.5, -1.5, 0.0], [-4.0, -4.0, -4.0]]))
    # min-norm of {e1, e2} is (1/2, 1/2); a model with one client moves by its update
    new = min_norm_combination(params, deltas, pair_model, torch.ones(3, dtype=torch.float64), 1.0)
    torch.testing.assert_close(new, torch.tensor([[-0.5, -0.5, 0.0], [-2.0, -2.0, -2.0]]), atol=1e-6, rtol=0)
    # a client whose update is zero does not put the origin in the hull and stop its model
    zero = torch.tensor([[1.0, 0, 0], [0.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    new = min_norm_combination(params, zero, pair_model, torch.ones(3, dtype=torch.float64), 1.0)
    torch.testing.assert_close(new, torch.tensor([[-1.0, 0.0, 0.0], [-2.0, -2.0, -2.0]]), atol=1e-6, rtol=0)
    # the deprecated spellings still give the same steps
    with pytest.warns(DeprecationWarning):
        old = F.weighted_mean(params, deltas, pair_model, torch.tensor([1.0, 3.0, 1.0], dtype=torch.float64), 2.0)
    torch.testing.assert_close(old, torch.tensor([[-0.5, -1.5, 0.0], [-4.0, -4.0, -4.0]]))
    with pytest.warns(DeprecationWarning):
        old = F.min_norm_combination(params, deltas, pair_model, torch.ones(3, dtype=torch.float64), 1.0)
    torch.testing.assert_close(old, torch.tensor([[-0.5, -0.5, 0.0], [-2.0, -2.0, -2.0]]), atol=1e-6, rtol=0)


def test_min_norm_combination_on_a_subset_of_coordinates():
    # Coordinate 2 plays the "final layer's bias": the weights come from the min-norm problem on
    # it alone, then combine the full updates.
    params = torch.zeros(2, 3)
    deltas = torch.tensor([[1.0, 0.0, 4.0], [0.0, 3.0, 1.0], [2.0, 2.0, 2.0]])
    pair_model = torch.tensor([0, 0, 1])
    ones = torch.ones(3, dtype=torch.float64)
    # on coordinate 2 alone, {4, 1}: the min-norm point is the vertex 1 (weight 1 on client 1)
    new = min_norm_combination(params, deltas, pair_model, ones, 1.0, coordinates=slice(2, 3))
    torch.testing.assert_close(new, torch.tensor([[0.0, -3.0, -1.0], [-2.0, -2.0, -2.0]]), atol=1e-6, rtol=0)
    # with every coordinate, {(1,0,4), (0,3,1)}: <g_0, g_1> = 4 < |g_1|^2 = 10, so the vertex is
    # not optimal there and the weights mix: λ = (6, 13) / 19
    full = min_norm_combination(params, deltas, pair_model, ones, 1.0)
    torch.testing.assert_close(full[0], -torch.tensor([6.0, 39.0, 37.0]) / 19, atol=1e-5, rtol=0)
    # the whole vector as a slice is exactly the default
    rng = torch.Generator().manual_seed(0)
    p, dl = torch.randn(3, 40, generator=rng), torch.randn(12, 40, generator=rng)
    pm, w = torch.arange(12) % 3, torch.rand(12, generator=rng).double()
    assert torch.equal(min_norm_combination(p, dl, pm, w, 2.0, coordinates=slice(0, 40)),
                       min_norm_combination(p, dl, pm, w, 2.0))
    # KKT on the subset: every client's update on those coordinates has <g_i, u> >= |u|^2
    sub = slice(30, 40)
    step = p - min_norm_combination(p, dl, pm, w, 1.0, coordinates=sub)
    for j in range(3):
        u = step[j, sub].double()
        g = (w[pm == j, None] * dl[pm == j].double())[:, sub]
        assert (g @ u >= u @ u - 1e-5 * (g.norm(dim=1).max() ** 2)).all()


def test_most_gram_on_resolves_the_parameter_before_training(small):
    model = fl.logistic_regression(60, 10)
    assert model.coordinates("bias") == slice(600, 610) == model.coordinates("last")
    assert fl.cnn(62, channels=(8, 16)).coordinates("last") == fl.cnn(62, channels=(8, 16)).coordinates("fc.bias")
    with pytest.raises(ValueError, match="or the name of a parameter"):
        MinNorm(coordinates=3)
    rounds = []
    with pytest.raises(ValueError, match=r"no parameter 'fc.bias'; its parameters are 'weight', 'bias'"):
        fl.run_federated(small, model, F.MosT(2, combiner=MinNorm(coordinates="fc.bias")),
                         fl.FederatedConfig(rounds=3, seed=0), callback=lambda log, params: rounds.append(log))
    assert rounds == []  # refused before any round
    cfg = fl.FederatedConfig(rounds=4, seed=0)
    on_bias = fl.run_federated(small, model, F.MosT(2, combiner=MinNorm(coordinates="bias"), warmup=WarmUp(1)), cfg)
    default = fl.run_federated(small, model, F.MosT(2, combiner=MinNorm(), warmup=WarmUp(1)), cfg)
    assert not torch.equal(on_bias.params, default.params)
    assert torch.isfinite(on_bias.params).all() and on_bias.mean_accuracy > 0.2


@pytest.mark.parametrize("eps", [0.02, 0.05, 0.1, 1.0])
def test_min_norm_box_matches_an_active_set_qp_solver(eps):
    quadprog = pytest.importorskip("quadprog")
    J = torch.randn(8, 20, generator=torch.Generator().manual_seed(1)).double()
    G = J @ J.T
    lam = min_norm_box(G, eps)
    k = 8
    lo, hi = max(0.0, 1 / k - eps), min(1.0, 1 / k + eps)
    # quadprog: min 1/2 x^T P x - q^T x  s.t.  C^T x >= b (first meq rows equalities)
    P = 2 * G.numpy() + 1e-12 * np.eye(k)
    C = np.concatenate([np.ones((k, 1)), np.eye(k), -np.eye(k)], 1)
    b = np.concatenate([[1.0], np.full(k, lo), np.full(k, -hi)])
    ref = quadprog.solve_qp(P, np.zeros(k), C, b, meq=1)[0]
    assert float(lam.sum()) == pytest.approx(1.0, abs=1e-12)
    assert ((lam >= lo - 1e-12) & (lam <= hi + 1e-12)).all()
    f, f_ref = float(lam @ G @ lam), float(ref @ G.numpy() @ ref)
    assert f <= f_ref + 1e-8 * float(G.diagonal().max())


def test_min_norm_box_does_not_depend_on_the_blas_thread_count():
    # SLSQP's weights change in their last bits with the BLAS thread count (here on 30 unit
    # updates, as FedMGDA+ solves each round); the solve pins one thread, so a FedMGDA+ run does
    # not depend on the machine's core count, and the caller's setting is left as it was
    import threadpoolctl

    u = torch.randn(30, 610, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    G = u @ u.T
    with threadpoolctl.threadpool_limits(1):
        one = min_norm_box(G, 0.05)
    with threadpoolctl.threadpool_limits(4):
        many = min_norm_box(G, 0.05)
        assert all(lib["num_threads"] == 4 for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas")
    assert torch.equal(one, many)


def test_most_plans_are_feasible_transport_plans_and_ifca_is_hard(small):
    model = fl.logistic_regression(60, 10)
    cfg = fl.FederatedConfig(rounds=4, lr=0.05, seed=0, eval_every=2)
    balanced = fl.run_federated(small, model, F.MosT(n_models=3, warmup=None, marginals=Uniform()), cfg)
    for log in balanced.history:
        torch.testing.assert_close(log.plan.sum(1), torch.full((8,), 1 / 8, dtype=log.plan.dtype))
        torch.testing.assert_close(log.plan.sum(0), torch.full((3,), 1 / 3, dtype=log.plan.dtype))
    res = fl.run_federated(small, model, F.MosT(n_models=3, warmup=None), cfg)
    for log in res.history:  # the default's share bounds: each model between half and twice n/m of the mass
        torch.testing.assert_close(log.plan.sum(1), torch.full((8,), 1 / 8, dtype=log.plan.dtype))
        assert bool((log.plan.sum(0) >= 0.5 / 3 - 1e-9).all()) and bool((log.plan.sum(0) <= 2 / 3 + 1e-9).all())
    assert res.history[1].val_accuracy is not None and res.history[0].val_accuracy is None
    ifca = fl.run_federated(small, model, F.IFCA(n_models=3), cfg)
    for log in ifca.history:
        hard = log.plan * 8  # a transport plan (rows of mass 1/n), each client whole on one model
        assert set(hard.unique().tolist()) <= {0.0, 1.0} and (hard.sum(1) == 1).all()
    # same seed, same result; partial participation samples a subset of clients
    again = fl.run_federated(small, model, F.MosT(n_models=3, warmup=None), cfg)
    torch.testing.assert_close(res.params, again.params)
    part = fl.run_federated(small, model, F.FedAvg(n_models=2), fl.FederatedConfig(rounds=2, participation=0.5))
    assert all(len(log.clients) == 4 for log in part.history)


def test_loss_choice_picks_the_lowest_loss_on_training_and_validation_data(small):
    from most.federated.clients import evaluate

    model = fl.logistic_regression(60, 10)
    res = fl.run_federated(small, model, F.IFCA(n_models=3), fl.FederatedConfig(rounds=4, seed=1))
    tr_loss, _, _ = evaluate(model, res.params, fl.pad_split(small, "train"))
    va_loss, _, _ = evaluate(model, res.params, fl.pad_split(small, "val"))
    for i, client in enumerate(small.clients):
        nt, nv = len(client.y_train), len(client.y_val)
        expected = (tr_loss[i] * nt + va_loss[i] * nv) / (nt + nv)
        assert torch.allclose(res.selection_loss[i], expected, atol=1e-6)
        assert int(res.loss_choice[i]) == int(expected.argmin())


def test_validation_ties_go_to_the_first_model_or_by_the_selection_loss_when_asked(small):
    from most.federated.evaluation import select_models

    # one validation sample a client: models tie at 0 or 1 on validation
    one = fl.FederatedDataset.from_clients(
        [fl.ClientData(c.x_train, c.y_train, c.x_val[:1], c.y_val[:1], c.x_test, c.y_test) for c in small.clients],
        name="one validation sample", n_classes=10)
    res = fl.run_federated(one, fl.logistic_regression(60, 10), F.FedAvg(n_models=3), fl.FederatedConfig(rounds=3, seed=2))
    val, loss = res.val_accuracy, res.selection_loss
    best = val == val.max(1, keepdim=True).values
    assert (best.sum(1) > 1).sum() >= 6  # one sample: most clients' models are all right or all wrong on it
    assert res.choice.tolist() == val.argmax(1).tolist()  # the protocol's pick: the first of the tied
    by_loss = select_models(val, loss)
    assert by_loss.tolist() == torch.where(best, loss, torch.inf).argmin(1).tolist()
    assert (by_loss != res.choice).any()


def test_warm_up_trains_one_shared_model_then_splits(small):
    model = fl.logistic_regression(60, 10)
    seen = []
    fl.run_federated(small, model, F.MosT(n_models=3, warmup=WarmUp(2)),
                     fl.FederatedConfig(rounds=4, lr=0.05, seed=0, eval_every=0),
                     callback=lambda log, params: seen.append((log.plan, params.clone())))
    for plan, params in seen[:2]:
        assert plan is None and (params == params[0]).all()
    assert seen[2][0] is not None and not (seen[3][1] == seen[3][1][0]).all()


def _planted(sizes, d=40, seed=0):
    """Client updates in len(sizes) directions, of random lengths, with noise; and the true groups."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.cat([torch.full((k,), j) for j, k in enumerate(sizes)])
    directions = torch.randn(len(sizes), d, generator=g)
    x = directions[truth] * (0.2 + 3 * torch.rand(len(truth), 1, generator=g)) + 0.25 * torch.randn(len(truth), d, generator=g)
    perm = torch.randperm(len(truth), generator=g)
    return x[perm], truth[perm]


def _same_partition(a, b):
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balanced_update_groups_recovers_planted_directions_whatever_the_lengths(seed):
    x, truth = _planted([6, 6, 6, 6], seed=seed)
    for draw in range(3):  # any k-means++ seeding finds the same partition
        labels = balanced_update_groups(x, 4, torch.Generator().manual_seed(draw))
        assert _same_partition(labels, truth)
        assert torch.equal(torch.bincount(labels, minlength=4), torch.full((4,), 6))
    again = balanced_update_groups(x, 4, torch.Generator().manual_seed(0))
    assert torch.equal(again, balanced_update_groups(x, 4, torch.Generator().manual_seed(0)))


def test_balanced_update_groups_are_balanced_and_locally_optimal():
    x, truth = _planted([10, 4, 4, 2], seed=5)  # unequal true groups: the transport step still balances
    labels = balanced_update_groups(x, 4, torch.Generator().manual_seed(0))
    assert torch.equal(torch.bincount(labels, minlength=4), torch.full((4,), 5))
    # a fixed point of balanced k-means: no swap of two clients between groups lowers the cost
    u = x.double() / x.double().norm(dim=1, keepdim=True)
    c = torch.stack([u[labels == j].mean(0) for j in range(4)])
    c = c / c.norm(dim=1, keepdim=True)
    d2 = torch.cdist(u, c).square()
    for i in range(len(x)):
        for k in range(len(x)):
            a, b = int(labels[i]), int(labels[k])
            if a != b:
                assert d2[i, a] + d2[k, b] <= d2[i, b] + d2[k, a] + 1e-9
    # the true big group is never split across more than its share needs
    big = labels[truth == 0]
    assert len(set(big.tolist())) == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unbalanced_update_groups_recover_planted_groups_of_unequal_size(seed):
    from most.federated.methods import update_groups

    x, truth = _planted([10, 4, 4, 2], seed=seed)
    labels = update_groups(x, 4, torch.Generator().manual_seed(seed), balanced=False)
    assert _same_partition(labels, truth)  # the sizes the updates show, 10/4/4/2, not 5 each
    assert torch.equal(update_groups(x, 4, torch.Generator().manual_seed(0), balanced=True),
                       balanced_update_groups(x, 4, torch.Generator().manual_seed(0)))
    with pytest.raises(TypeError, match="balanced"):
        GroupedWarmUp(3, balanced="no")


def test_balanced_update_groups_edge_cases_and_bad_input():
    assert balanced_update_groups(torch.randn(2, 5), 3, torch.Generator()).tolist() == [0, 1]
    with pytest.raises(ValueError, match="NaN"):
        balanced_update_groups(torch.tensor([[1.0, float("nan")], [0.0, 1.0], [1.0, 1.0]]), 2, torch.Generator())
    with pytest.raises(ValueError, match="at least one"):
        balanced_update_groups(torch.zeros(0, 3), 2, torch.Generator())


def test_update_split_gives_each_model_its_groups_mean_step():
    x, truth = _planted([5, 5, 5], d=12, seed=7)
    method = F.MosT(3, server_lr=2.0, warmup=GroupedWarmUp(4))
    state = method.start(15, 3, torch.Generator().manual_seed(0))
    theta = torch.randn(12)
    params = theta.repeat(3, 1)
    counts = torch.arange(1, 16)
    pair_model = torch.zeros(15, dtype=torch.long)  # warm-up: every client trains model 0
    assert isinstance(method.phase(3), WarmUpPhase) and method.phase(4) is method
    not_last = method.phase(2).aggregate(state, params, x, pair_model, counts.double(), round=2)
    assert (not_last == not_last[0]).all()  # before the last warm-up round: one shared step
    new = method.phase(3).aggregate(state, params, x, pair_model, counts.double(), round=3)
    for j in range(3):
        rows = [i for i in range(15) if truth[i] == j]
        w = counts[rows].double()
        expected = theta - 2.0 * (w[:, None] * x[rows].double()).sum(0).float() / w.sum().float()
        assert any(torch.allclose(new[k], expected, atol=1e-5) for k in range(3)), j
    assert len({tuple(r.tolist()) for r in new}) == 3


def test_update_split_is_fixed_at_start_so_a_restored_run_splits_the_same_way():
    import pickle

    x = torch.randn(20, 6, generator=torch.Generator().manual_seed(0))  # no structure: the seeding decides
    args = (torch.zeros(4, 6), x, torch.zeros(20, dtype=torch.long), torch.ones(20, dtype=torch.float64))
    method = F.MosT(4, warmup=GroupedWarmUp(1))

    def split(state):
        return method.phase(0).aggregate(state, *args, round=0)

    gen = torch.Generator().manual_seed(0)
    state = method.start(20, 4, gen)
    restored = pickle.loads(pickle.dumps(state))  # a copy of the run's state, as a checkpoint keeps it
    torch.rand(100, generator=gen)  # the run's generator moves on (local training) before the split
    assert torch.equal(split(state), split(restored))
    other = method.start(20, 4, torch.Generator().manual_seed(1))
    assert not torch.equal(split(other), split(state))  # the seed does decide here


def test_update_split_in_a_run_starts_the_models_apart(small):
    model = fl.logistic_regression(60, 10)
    seen = []
    fl.run_federated(small, model, F.MosT(n_models=3, warmup=GroupedWarmUp(2)),
                     fl.FederatedConfig(rounds=3, lr=0.05, seed=0, eval_every=0),
                     callback=lambda log, params: seen.append(params.clone()))
    assert (seen[0] == seen[0][0]).all()
    assert len({tuple(r.tolist()) for r in seen[1]}) == 3  # apart right after the last warm-up round
    with pytest.raises(TypeError, match="warmup"):
        F.MosT(2, warmup="kmeans")
    with pytest.raises(ValueError, match="rounds >= 1"):
        F.MosT(2, warmup=GroupedWarmUp(0))
    with pytest.raises(RuntimeError, match="seed"):  # the grouped step needs the seed the run drew at its start
        GroupedWarmUp(1).direction(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), torch.ones(4), 2, round=0)


def test_shares_train_each_client_on_its_k_best_models_under_the_balance(small):
    model = fl.logistic_regression(60, 10)
    cfg = fl.FederatedConfig(rounds=5, lr=0.05, seed=0, eval_every=0)
    seen = []
    res = fl.run_federated(small, model, F.MosT(n_models=4, warmup=WarmUp(2), assignment=CappedTransportAssignment(2), weighting=Shares()), cfg,
                           callback=lambda log, params: seen.append(log))
    for log in seen[2:]:
        units = log.plan * 8 * 2  # 8 clients, 2 models each, 4 clients per model
        torch.testing.assert_close(units, units.round(), atol=1e-9, rtol=0)
        assert (units.round().sum(1) == 2).all() and (units.round().sum(0) == 4).all()
    assert res.mean_accuracy > 0.3
    # the plan is the capped transport of the round's losses; each pair is weighted by its share
    method = F.MosT(n_models=4, warmup=WarmUp(0), assignment=CappedTransportAssignment(2), weighting=Shares())
    state = method.start(8, 4, torch.Generator().manual_seed(0))
    losses = torch.rand(8, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    gamma, w = method.plan(state, losses, 0, 10, None)
    expected = transport.solve_capped(losses, torch.full((8,), 1 / 8), torch.full((4,), 1 / 4), max_share=0.5)
    torch.testing.assert_close(gamma, expected.plan)
    torch.testing.assert_close(w, (gamma * 8).T)
    # one share is the default method; shares = m gives every client every model equally
    one = F.MosT(n_models=4, warmup=WarmUp(0), assignment=CappedTransportAssignment(1), weighting=Shares())
    plain = F.MosT(n_models=4, warmup=None, marginals=Uniform())  # the capped transport's balance
    for x, y in zip(one.plan(one.start(8, 4, torch.Generator().manual_seed(0)), losses, 0, 10, None),
                    plain.plan(plain.start(8, 4, torch.Generator().manual_seed(0)), losses, 0, 10, None)):
        torch.testing.assert_close(x, y)
    every = F.MosT(n_models=4, warmup=WarmUp(0), assignment=CappedTransportAssignment(4), weighting=Shares())
    torch.testing.assert_close(every.plan(every.start(8, 4, torch.Generator().manual_seed(0)), losses, 0, 10, None)[1],
                               torch.full((4, 8), 0.25, dtype=torch.float64))


def test_shares_under_partial_participation_plan_over_the_sampled_clients(small):
    # half of the 8 clients each round: the capped plan is over those 4, each on 2 models, each
    # model on 2 of them; the clients left out train nothing
    model = fl.logistic_regression(60, 10)
    seen = []
    fl.run_federated(small, model, F.MosT(n_models=4, warmup=WarmUp(1), assignment=CappedTransportAssignment(2), weighting=Shares()),
                     fl.FederatedConfig(rounds=5, lr=0.05, seed=0, eval_every=0, participation=0.5),
                     callback=lambda log, params: seen.append(log))
    assert {tuple(log.clients.tolist()) for log in seen[1:]} != {tuple(seen[1].clients.tolist())}  # resampled
    for log in seen[1:]:
        assert log.plan.shape == (4, 4)
        units = log.plan * 4 * 2
        torch.testing.assert_close(units, units.round(), atol=1e-9, rtol=0)
        assert (units.round().sum(1) == 2).all() and (units.round().sum(0) == 2).all()


def test_shares_bad_input():
    with pytest.raises(ValueError, match="more models than there are"):
        F.MosT(3, assignment=CappedTransportAssignment(4)).check(10)
    with pytest.raises(ValueError, match="shares"):
        CappedTransportAssignment(0)
    for bad in (dict(transport="sinkhorn"), dict(diversity=0.1), dict(marginals=ObjectivesSelectModels()),
                dict(marginals=Curriculum())):
        with pytest.raises(ValueError, match="`assignment` replaces the transport fields"):
            F.MosT(3, assignment=CappedTransportAssignment(2), **bad)


def test_every_method_trains_on_synthetic_data(small):
    model = fl.logistic_regression(60, 10)
    cfg = fl.FederatedConfig(rounds=15, lr=0.05, seed=1, eval_every=0)
    chance = 0.1
    for method in [F.MosT(3), F.MosT(3, combiner=MinNorm(), warmup=None), F.MosT(3, server_lr=2.0), F.FedAvg(3),
                   F.FedProx(3, mu=0.1), F.MGDA(3), F.WeightedMGDA(3), F.Linearization(3), F.FedMGDAPlus(3),
                   F.IFCA(3), F.SetScalarization(3, combiner=STCHSetCombiner()),
                   F.SetScalarization(3, combiner=TCHSetCombiner()),
                   F.SetScalarization(3, combiner=SumOfMinimumCombiner())]:
        res = fl.run_federated(small, model, method, cfg)
        assert res.mean_accuracy > chance + 0.2, (type(method).__name__, res.mean_accuracy)


def test_logistic_regression_on_images_flattens_them_and_keeps_the_one_matrix_path(small):
    from most._modules import affine_shape

    images = fl.FederatedDataset(
        name="images", n_classes=10, input_shape=(1, 6, 10), client_ids=small.client_ids,
        clients=tuple(fl.ClientData(*(t.reshape(-1, 1, 6, 10) if t.dim() == 2 else t for t in (
            c.x_train, c.y_train, c.x_val, c.y_val, c.x_test, c.y_test))) for c in small.clients))
    model = fl.logistic_regression(60, 10, input_shape=(1, 6, 10))
    assert affine_shape(model.factory()) == (10, 60) and model.name == "logreg(1x6x10->10)"
    flat = fl.logistic_regression(60, 10)
    theta = flat.init(2, torch.Generator().manual_seed(0))
    x = images.clients[0].x_train[:5]
    assert torch.equal(model.batched_logits(theta, x, shared_inputs=True),
                       flat.batched_logits(theta, x.reshape(5, 60), shared_inputs=True))
    # the same run as on the flat features: the layout of the parameters is the same
    cfg = fl.FederatedConfig(rounds=3, lr=0.05, seed=1, eval_every=0)
    on_images = fl.run_federated(images, model, F.FedAvg(2), cfg)
    assert on_images.mean_accuracy == fl.run_federated(small, flat, F.FedAvg(2), cfg).mean_accuracy
    assert fl.logistic_regression(60, 10, input_shape=(60,)).factory().__class__ is torch.nn.Linear
    with pytest.raises(ValueError, match=r"takes flat inputs of 60 features.*"
                                         r"fl.logistic_regression\(60, 10, input_shape=\(1, 6, 10\)\), which flattens"):
        fl.run_federated(images, flat, F.FedAvg(2), cfg)  # the model for flat features: the fix is named
    with pytest.raises(ValueError, match=r"`input_shape` \(1, 28, 28\) holds 784 values, but `dim` is 60"):
        fl.logistic_regression(60, 10, input_shape=(1, 28, 28))


def test_frozen_parameters_are_the_templates_never_trained_nor_sent(small):
    """A frozen part (requires_grad=False) stays out of the flat vector: every model uses the
    template's values, training leaves them as they are, and to_module gives them back."""
    from torch import nn

    def net():  # the frozen layer is drawn at random: each call of the factory gives other values
        module = nn.Sequential(nn.Linear(60, 16), nn.ReLU(), nn.Linear(16, 10))
        module[0].requires_grad_(False)
        return module

    model = fl.FlatModel(net)
    assert model.parameter_names == ["2.weight", "2.bias"] and model.dim == 16 * 10 + 10
    assert model.frozen == ["0.weight", "0.bias"] and model.coordinates("last") == slice(160, 170)
    with pytest.raises(ValueError, match="has requires_grad=False"):
        model.coordinates("0.weight")
    result = fl.run_federated(small, model, F.FedAvg(2), fl.FederatedConfig(rounds=3, seed=0, eval_every=0))
    assert result.params.shape == (2, 170)
    first = model.to_module(result.params[0])
    kept = dict(model._template.named_parameters())
    assert torch.equal(first[0].weight, kept["0.weight"]) and not first[0].weight.requires_grad
    assert torch.equal(first[2].bias, result.params[0][160:])
    x = small.clients[0].x_test
    with torch.no_grad():  # the module given back predicts as the runtime scored the model
        assert torch.allclose(first(x), model.logits(result.params[0], x), atol=1e-6)
    # trained: the head moved from its start; the frozen layer is the template's on every model
    start = model.init(2, torch.Generator().manual_seed(0))
    assert not torch.equal(start, result.params)
    with pytest.raises(ValueError, match="no trainable parameter"):
        fl.FlatModel(lambda: nn.Linear(3, 2).requires_grad_(False))


def test_bad_input(small):
    model = fl.logistic_regression(60, 10)
    with pytest.raises(ValueError, match="at least as many clients"):
        fl.run_federated(small.subset([0, 1]), model, F.MosT(n_models=3), fl.FederatedConfig(rounds=1))
    with pytest.raises(ValueError, match="diverged"):
        fl.run_federated(small, model, F.FedAvg(2, server_lr=1e30), fl.FederatedConfig(rounds=5, lr=1e30))
    with pytest.raises(ValueError, match="loss_samples"):
        fl.FederatedConfig(loss_samples=0)
    with pytest.raises(ValueError, match="participation"):
        fl.FederatedConfig(participation=0.0)
    with pytest.raises(TypeError, match="combiner"):
        F.MosT(2, combiner="median")
    with pytest.raises(ValueError, match="FederatedDataset"):
        fl.run_federated([1, 2], model, F.FedAvg(2), fl.FederatedConfig(rounds=1))
    with pytest.raises(ValueError, match="must name a torch device"):
        fl.FederatedConfig(device="gpu please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            fl.FederatedConfig(device="cuda")


ALL_METHODS = [F.MosT(3), F.MosT(3, combiner=MinNorm(), warmup=None), F.MGDA(3), F.Linearization(3),
               F.FedMGDAPlus(3), F.IFCA(3), F.SetScalarization(3, combiner=STCHSetCombiner())]


def test_explicit_cpu_device_changes_nothing(small):
    model = fl.logistic_regression(60, 10)
    for method in ALL_METHODS[:2]:
        a = fl.run_federated(small, model, method, fl.FederatedConfig(rounds=8, seed=2, participation=0.75))
        b = fl.run_federated(small, model, method, fl.FederatedConfig(rounds=8, seed=2, participation=0.75,
                                                                      device="cpu"))
        torch.testing.assert_close(a.params, b.params, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ALL_METHODS, ids=lambda m: type(m).__name__)
def test_cuda_run_matches_the_cpu_run(small, method):
    model = fl.logistic_regression(60, 10)
    cfg = fl.FederatedConfig(rounds=6, seed=2, participation=0.75)
    cpu = fl.run_federated(small, model, method, cfg)
    gpu = fl.run_federated(small, model, method, fl.FederatedConfig(rounds=6, seed=2, participation=0.75,
                                                                    device="cuda"))
    assert gpu.params.device.type == "cpu"  # results come back to the CPU
    torch.testing.assert_close(gpu.params, cpu.params, rtol=1e-3, atol=1e-4)
    assert [h.plan is None for h in gpu.history] == [h.plan is None for h in cpu.history]


def test_loss_probe_on_a_subsample_changes_only_what_the_server_sees(small):
    model = fl.logistic_regression(60, 10)
    seen = {}
    for k in (None, 3):
        res = fl.run_federated(small, model, F.IFCA(3), fl.FederatedConfig(rounds=1, seed=0, loss_samples=k))
        seen[k] = res.history[0].train_loss
    p = fl.pad_split(small, "train")
    init = model.init(3, torch.Generator().manual_seed(0))
    full, _, _ = fl.evaluate(model, init, p)
    part, _, _ = fl.evaluate(model, init, Padded(p.x[:, :3], p.y[:, :3], p.w[:, :3], p.counts.clamp(max=3)))
    assert seen[None] == pytest.approx(float(full.min(1).values.mean()), rel=1e-5)
    assert seen[3] == pytest.approx(float(part.min(1).values.mean()), rel=1e-5)


def test_tch_set_on_clients_moves_only_the_best_model_of_the_worst_client(small):
    model = fl.logistic_regression(60, 10)
    res = fl.run_federated(small, model, F.SetScalarization(3, combiner=TCHSetCombiner()),
                           fl.FederatedConfig(rounds=1, lr=0.05, seed=2, eval_every=0))
    init = model.init(3, torch.Generator().manual_seed(2))
    moved = (res.params - init).abs().sum(1) > 0
    assert int(moved.sum()) == 1
    with pytest.raises(ValueError, match="coefficients"):
        F.SetScalarization(3, combiner=None)


def test_the_old_spelling_of_federated_most_still_builds_the_same_method_with_a_warning():
    from most.methods import MinNorm

    cases = [
        (dict(combine="min_norm"), dict(combiner=MinNorm())),
        (dict(combine="mean", warmup_rounds=0), dict(combiner=WeightedSum(), warmup=None)),
        (dict(gram_on="last", warmup_rounds=2), dict(combiner=MinNorm(coordinates="last"), warmup=WarmUp(2))),
        (dict(split="updates", warmup_rounds=3), dict(warmup=GroupedWarmUp(3))),
        (dict(shares=2), dict(assignment=CappedTransportAssignment(2), weighting=Shares())),
    ]
    for old, new in cases:
        with pytest.warns(DeprecationWarning, match="is deprecated: pass components instead"):
            made = F.MosT(3, server_lr=2.0, **old)
        assert made == F.MosT(3, server_lr=2.0, **new), old
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="'min_norm' or 'mean'"):
        F.MosT(3, combine="median")


def test_values_per_sample_counts_the_forward_pass_of_linear_and_convolutional_models():
    from most.federated.models import cnn

    assert fl.logistic_regression(60, 10).values_per_sample((60,)) == 2 * 10  # the logits, twice
    net = cnn(62, channels=(32, 64))
    # conv1 32x28x28, conv2 64x14x14, the linear layer's 62 (pooling and ReLU are functional here)
    assert net.values_per_sample((1, 28, 28)) == 2 * (32 * 28 * 28 + 64 * 14 * 14 + 62)
    assert net.values_per_sample([1, 28, 28]) == net.values_per_sample((1, 28, 28))


def test_evaluation_and_training_in_memory_sized_chunks_give_the_same_numbers(small, monkeypatch):
    # a budget of a few inputs per chunk splits both the evaluation and the local training of a
    # small CNN into many pieces: every loss and every trained model is the same as in one piece
    import most.federated.clients as rt
    from most.federated.models import cnn

    model = cnn(3, side=8, channels=(2, 3))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, 1, 8, 8, generator=gen)
    y = torch.randint(0, 3, (3, 6), generator=gen)
    w = torch.ones(3, 6)
    w[2, 4:] = 0
    padded = Padded(x, y, w, w.sum(1).long())
    params = model.init(4, gen)
    keys = rt.batch_orders(w.repeat(4, 1), 1, generator=torch.Generator().manual_seed(1))
    rows = torch.arange(3).repeat(4)
    whole_eval = rt.evaluate_unchecked(model, params, padded, None)
    whole_train = rt.train_pairs(model, params.repeat_interleave(3, 0), x, y, w, keys, batch_size=2, lr=0.1, prox_mu=0.0,
                          max_pairs=4096, rows=rows)
    monkeypatch.setattr(rt, "CHUNK_VALUES", 3 * model.values_per_sample((1, 8, 8)))
    torch.testing.assert_close(rt.evaluate_unchecked(model, params, padded, None)[0], whole_eval[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(rt.train_pairs(model, params.repeat_interleave(3, 0), x, y, w, keys, batch_size=2, lr=0.1,
                                       prox_mu=0.0, max_pairs=4096, rows=rows), whole_train, rtol=1e-6, atol=1e-7)


def test_a_batch_trains_in_cache_sized_chunks_on_the_cpu_and_in_one_on_an_accelerator():
    import most.federated.runtime as rt

    assert rt._batch_pairs(torch.device("cpu"), 1) == 4096
    assert rt._batch_pairs(torch.device("cpu"), 3) == rt._BATCH_PAIRS
    assert rt._batch_pairs(torch.device("cuda"), 3) > 100_000  # bounded by memory, not by a cache size


def test_a_federated_result_and_its_rounds_print_as_one_short_line(small):
    res = fl.run_federated(small, fl.logistic_regression(60, 10), F.FedAvg(2),
                           fl.FederatedConfig(rounds=5, seed=0, eval_every=5))
    text = repr(res)
    assert len(text) < 160 and "\n" not in text
    assert f"mean test accuracy {100 * res.mean_accuracy:.1f} %" in text
    assert repr(res.history[-1]).endswith(f"validation accuracy {100 * res.history[-1].val_accuracy:.1f} %)")
    assert "validation" not in repr(res.history[0])  # not evaluated in round 0


def test_most_plans_on_the_client_loss_it_is_given(small):
    """The first round's plan reads each client's prior-adjusted loss of the initial models (the
    round's logged best-model loss is theirs), not the cross-entropy."""
    from most._random import seeded
    from most.federated.clients import plan_losses
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=1, eval_every=1, seed=4)
    adjusted = F.MosT(3, warmup=None, client_loss=F.PriorAdjusted())
    params = adjusted.initial_params(model, 3, seeded(4))
    train = fl.pad_split(small, "train")
    expected = plan_losses(model, params, train, None, F.PriorAdjusted()).min(1).values.mean()
    plain = plan_losses(model, params, train, None, F.CrossEntropy()).min(1).values.mean()
    assert abs(float(expected) - float(plain)) > 0.05  # label skew: the two losses differ
    ours = fl.run_federated(small, model, adjusted, config)
    theirs = fl.run_federated(small, model, F.MosT(3, warmup=None), config)
    assert ours.history[0].train_loss == pytest.approx(float(expected), rel=1e-5)
    assert theirs.history[0].train_loss == pytest.approx(float(plain), rel=1e-5)


def test_a_long_runs_history_keeps_every_kth_plan_and_the_last(monkeypatch, tmp_path):
    """The history (and every checkpoint, which holds it) keeps the plans of every k-th round
    and the last once they would pass HISTORY_NUMBERS; a callback still gets every round's plan,
    and a resumed run's history equals the uninterrupted one's."""
    import most.federated.server as server
    from most.checkpoint import Checkpoint

    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=0)
    model, method = fl.logistic_regression(60, 10), F.MosT(n_models=2, warmup=None)
    config = fl.FederatedConfig(rounds=7, seed=0)
    whole = fl.run_federated(data, model, method, config)
    assert all(log.plan is not None for log in whole.history)
    monkeypatch.setattr(server, "HISTORY_NUMBERS", 2 * 6 * 2)  # k = ceil(7 * 12 / 24) = 4
    seen = []
    thinned = fl.run_federated(data, model, method, config, callback=lambda log, params: seen.append(log.plan))
    assert [log.round for log in thinned.history if log.plan is not None] == [0, 4, 6]
    assert all(p is not None for p in seen) and len(seen) == 7
    for a, b in zip(whole.history, thinned.history):
        assert b.plan is None or torch.equal(a.plan, b.plan)
    assert torch.equal(thinned.params, whole.params)

    class Stop(Exception):
        pass

    def stop(log, params):
        if log.round == 4:
            raise Stop

    ck = Checkpoint(tmp_path / "c", every=2)
    with pytest.raises(Stop):
        fl.run_federated(data, model, method, config, checkpoint=ck, callback=stop)
    resumed = fl.run_federated(data, model, method, config, checkpoint=ck)
    assert [log.round for log in resumed.history if log.plan is not None] == [0, 4, 6]
    assert torch.equal(resumed.params, whole.params)
