"""MosT's class groups (``most.federated.methods.grouping``): each client's gradient per class,
the count sketch, the similarity, spectral clustering and the warm-up that uses them."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.functional import cross_entropy

import most.federated as fl
from most.federated import methods as F
from most.federated.evaluation import adjusted_rand_index
from most.federated.methods.grouping import (class_gradients, class_similarity, count_sketch, group_margins,
                                             spectral_groups)
from tests.federated._groups import skewed_groups

F64 = torch.float64


@pytest.fixture(scope="module")
def data():
    return skewed_groups(seed=1)


def _per_client_loop(model, theta, x, y, w, C):
    """The definition: client by client and class by class, the gradient of the mean loss on
    that class's real samples."""
    out = torch.zeros(y.shape[0], C, model.dim)
    for i in range(y.shape[0]):
        for c in range(C):
            mask = (y[i] == c) & (w[i] > 0)
            if not mask.any():
                continue
            t = theta.detach().clone().requires_grad_()
            loss = cross_entropy(model.logits(t, x[i][mask]), y[i][mask])
            (out[i, c],) = torch.autograd.grad(loss, t)
    return out


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_class_gradients_are_each_clients_gradient_of_each_class_with_padding_left_out(kind):
    g = torch.Generator().manual_seed(0)
    model = fl.logistic_regression(6, 4) if kind == "linear" else fl.FlatModel(
        lambda: nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4)), name="mlp")
    theta = model.init(1, g)[0]
    x, y = torch.randn(3, 9, 6, generator=g), torch.randint(0, 4, (3, 9), generator=g)
    y[2] = torch.tensor([0, 0, 1, 1, 1, 0, 3, 3, 3])  # client 2 lacks class 2 among its real samples
    w = torch.ones(3, 9)
    w[1, 6:] = 0.0  # client 1 has padding
    w[2, 6:] = 0.0  # ... and client 2's class 3 is all padding
    grads, counts = class_gradients(model, theta, x, y, w, sketch=10_000)
    torch.testing.assert_close(grads, _per_client_loop(model, theta, x, y, w, 4), rtol=1e-5, atol=1e-6)
    expected = torch.stack([torch.stack([((y[i] == c) & (w[i] > 0)).sum() for c in range(4)]) for i in range(3)])
    assert torch.equal(counts, expected.to(counts.dtype))
    assert counts[2, 2] == counts[2, 3] == 0 and not grads[2, 2:].any()
    # sketched: the same numbers through the count sketch
    small, _ = class_gradients(model, theta, x, y, w, sketch=7)
    torch.testing.assert_close(small, count_sketch(grads, 7), rtol=1e-5, atol=1e-6)


def test_count_sketch_is_linear_keeps_short_vectors_and_inner_products_nearly():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 20_000, generator=g, dtype=F64), torch.randn(20_000, generator=g, dtype=F64)
    assert torch.equal(count_sketch(a[:, :50], 64), a[:, :50])  # no longer than the sketch: unchanged
    sa, sb = count_sketch(a, 4096), count_sketch(b, 4096)
    assert sa.shape == (3, 4096)
    torch.testing.assert_close(count_sketch(2 * a - b, 4096), 2 * sa - sb)
    assert torch.equal(count_sketch(a, 4096), sa)  # one fixed hash: every client sketches alike
    # |<Sa, Sa>| within a few sketch errors (sqrt(2 / 4096) ~ 2 %) of |a|^2; <Sa, Sb> near <a, b> = O(sqrt(d))
    torch.testing.assert_close(sa.square().sum(1), a.square().sum(1), rtol=0.1, atol=0)
    cos = (sa[0] @ sa[1]) / (sa[0].norm() * sa[1].norm())
    assert abs(float(cos)) < 0.1


def test_class_similarity_compares_shared_classes_after_centring():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(2, 3, 8, generator=g, dtype=F64)  # two groups' gradients for 3 classes
    grads = torch.stack([base[0], base[0], base[1], base[1]])
    counts = torch.tensor([[5, 5, 0], [5, 0, 5], [5, 5, 5], [0, 0, 5]], dtype=F64)
    grads = grads * (counts > 0)[..., None]
    sim, support = class_similarity(grads, counts, support=True)
    torch.testing.assert_close(sim, sim.T)
    assert sim[0, 1] > 0.99 and sim[2, 3] > 0.99 and sim[0, 2] < 0 and sim[1, 2] < 0
    assert support[0, 3] == 0 and sim[0, 3] == 0  # no class in common: no evidence either way
    assert support[0, 2] == 10 and support[1, 2] == 10  # min counts over the classes shared


def test_spectral_groups_and_margins_on_a_block_similarity():
    sizes = (2, 3, 6)
    groups = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    sim = torch.where(groups[:, None] == groups[None, :], 0.8, -0.3).to(F64)
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(1))
    found = spectral_groups(sim[perm][:, perm], 3)
    assert adjusted_rand_index(found.tolist(), groups[perm].tolist()) == 1.0
    assert torch.equal(found, spectral_groups(sim[perm][:, perm], 3))  # deterministic
    own, margins = group_margins(sim, groups, own=True)
    torch.testing.assert_close(own, torch.full((11,), 0.8, dtype=F64))
    torch.testing.assert_close(margins, torch.full((11,), 1.1, dtype=F64))


# ----------------------------------------------------------------------------- the warm-up that uses them
CONFIG = fl.FederatedConfig(rounds=16, lr=0.1, eval_every=0, seed=0)


def test_default_warm_up_finds_label_skewed_groups_that_the_plain_warm_up_misses(data):
    model = fl.logistic_regression(20, 10)
    found = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), CONFIG)
    plain = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=None)), CONFIG)
    plans = [log.plan.argmax(1).tolist() for log in found.history if log.plan is not None]
    # the held rounds (2 .. 6) train each group's model on its clients alone; the plan keeps them after
    for plan in plans[:5]:
        assert adjusted_rand_index(plan, data.groups) == 1.0
    assert adjusted_rand_index(plans[-1], data.groups) == 1.0
    last = plain.history[-1].plan.argmax(1).tolist()
    assert adjusted_rand_index(last, data.groups) < 0.9


def test_class_groups_leave_a_run_without_groups_as_the_plain_warm_up_leaves_it():
    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=12, samples_per_client=50, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=8, eval_every=0, seed=3)
    grouped = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), config)
    plain = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=None)), config)
    assert torch.equal(grouped.params, plain.params)


def test_groups_set_the_balance_point_and_a_left_over_model_serves_nobody_while_they_hold(data):
    model = fl.logistic_regression(20, 10)
    result = fl.run_federated(data, model, F.MosT(4, warmup=F.WarmUp(2)), CONFIG)  # four models, three groups
    plans = [log.plan for log in result.history if log.plan is not None]
    held = plans[0].argmax(1)
    assert adjusted_rand_index(held.tolist(), data.groups) == 1.0
    assert int((plans[0].sum(0) > 0).sum()) == 3  # the left-over model waits
    # after the hold, the plan serves the groups whole at their own sizes (the balance point moved
    # there; around n/m = 4 each the price would have split the group of 8)
    loads = torch.bincount(plans[-1].argmax(1), minlength=4)
    assert adjusted_rand_index(plans[-1].argmax(1).tolist(), data.groups) == 1.0
    assert sorted(loads.tolist())[-3:] == [3, 5, 8]


def test_class_groups_refuse_bad_settings():
    for bad, match in [(dict(min_margin=0.0), "min_margin"), (dict(min_size=0), "min_size"),
                       (dict(sketch=0), "sketch"), (dict(hold=-1), "hold")]:
        with pytest.raises(ValueError, match=match):
            F.ClassGroups(**bad)
    with pytest.raises(TypeError, match="ClassGroups"):
        F.WarmUp(2, groups="class")


def test_with_partial_participation_the_groups_hold_for_the_clients_the_warm_up_heard(data):
    model = fl.logistic_regression(20, 10)
    config = fl.FederatedConfig(rounds=10, lr=0.1, eval_every=0, seed=0, participation=0.75)
    result = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), config)
    heard = set(result.history[1].clients.tolist())  # the warm-up's last round
    held = result.history[2]
    assert held.plan is not None and len(held.clients) == 12
    # the clients heard in the warm-up's last round train their group's model; each group one model
    pairs = {(data.groups[c], int(j)) for c, j in zip(held.clients.tolist(), held.plan.argmax(1).tolist()) if c in heard}
    assert len({g for g, _ in pairs}) == len(pairs) == 3
    assert torch.isfinite(result.params).all()
