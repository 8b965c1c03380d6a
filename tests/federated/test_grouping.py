"""MosT's class groups (``most.federated.methods.grouping``): each client's gradient per class,
the count sketch, the similarity, spectral clustering and the warm-up that uses them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from torch import nn
from torch.nn.functional import cross_entropy

import most.federated as fl
from most.federated import methods as F
from most.federated.evaluation import adjusted_rand_index
from most.federated.methods.grouping import (class_gradients, class_similarity, count_sketch, group_margins,
                                             refine_groups, spectral_groups)
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


def _batch_norm_mlp(dim, n_classes):
    """An MLP whose forward needs more than one sample (batch statistics, none kept)."""
    return fl.FlatModel(lambda: nn.Sequential(nn.Linear(dim, 5), nn.BatchNorm1d(5, track_running_stats=False),
                                              nn.Tanh(), nn.Linear(5, n_classes)), name="bn-mlp")


def test_class_gradients_run_a_model_with_batch_statistics_and_take_the_classes_from_its_outputs():
    g = torch.Generator().manual_seed(0)
    model = _batch_norm_mlp(6, 5)  # 5 outputs, labels 0 .. 3 only: C is the model's
    theta = model.init(1, g)[0]
    # every (client, class) pair has 3 samples, so each pair's batch is its own samples alone and
    # the batch statistics are those of the definition's batch
    y = torch.tensor([[0, 1, 0, 1, 0, 1], [2, 0, 2, 0, 2, 0], [3, 3, 1, 1, 3, 1]])
    x, w = torch.randn(3, 6, 6, generator=g), torch.ones(3, 6)
    grads, counts = class_gradients(model, theta, x, y, w, sketch=10_000)
    assert grads.shape == (3, 5, model.dim) and counts.shape == (3, 5)
    torch.testing.assert_close(grads, _per_client_loop(model, theta, x, y, w, 5), rtol=1e-5, atol=1e-6)
    assert torch.equal(counts[:, 4], torch.zeros(3)) and not grads[:, 4].any()
    # no real sample at all: zero gradients and counts, one column per output
    grads, counts = class_gradients(model, theta, x, y, torch.zeros(3, 6), sketch=10_000)
    assert grads.shape == (3, 5, model.dim) and not grads.any() and not counts.any()


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
    # one decomposition serves every k of a search: the same groups as decomposing per call
    vectors = F.affinity_eigenvectors(sim[perm][:, perm])
    for k in (2, 3, 4):
        assert torch.equal(spectral_groups(sim[perm][:, perm], k, eigenvectors=vectors),
                           spectral_groups(sim[perm][:, perm], k))
    own, margins = group_margins(sim, groups, own=True)
    torch.testing.assert_close(own, torch.full((11,), 0.8, dtype=F64))
    torch.testing.assert_close(margins, torch.full((11,), 1.1, dtype=F64))


# a small group (6 clients) close to a large one (32), as two rotations that mirror each other's
# images are, beside two more groups: the block means of a measured class similarity
NEAR = torch.tensor([[0.8, -0.38, 0.4, -0.46], [-0.38, 0.73, -0.39, 0.07],
                     [0.4, -0.39, 0.68, -0.53], [-0.46, 0.07, -0.53, 0.64]], dtype=F64)
NEAR_GROUPS = torch.repeat_interleave(torch.arange(4), torch.tensor((6, 18, 32, 44)))


def _near_similarity(noise: float, seed: int) -> torch.Tensor:
    e = noise * torch.randn(100, 100, generator=torch.Generator().manual_seed(seed), dtype=F64)
    sim = (NEAR[NEAR_GROUPS][:, NEAR_GROUPS] + (e + e.T) / 2 ** 0.5).clamp(-1, 1)
    return sim.fill_diagonal_(1.0)


def test_refine_groups_gives_the_small_group_back_its_clients_and_stops_at_a_fixed_point():
    sim = _near_similarity(0.0, 0)
    cut = NEAR_GROUPS.clone()
    cut[24:31] = 0  # a normalised cut's kind of mistake: 7 of the large group's clients with the small one
    assert adjusted_rand_index(cut.tolist(), NEAR_GROUPS.tolist()) < 0.95
    assert torch.equal(refine_groups(sim, cut), NEAR_GROUPS)
    assert torch.equal(refine_groups(sim, NEAR_GROUPS), NEAR_GROUPS)  # a fixed point stays
    # with noise: what it returns is a fixed point (each client's highest mean similarity is its own
    # group's), never further from the groups than where it started
    for seed in range(6):
        noisy = _near_similarity(0.3, seed)
        start = spectral_groups(noisy, 4)
        refined = refine_groups(noisy, start, min_size=2)
        assert bool((group_margins(noisy, refined) >= 0).all())
        assert (adjusted_rand_index(refined.tolist(), NEAR_GROUPS.tolist())
                >= adjusted_rand_index(start.tolist(), NEAR_GROUPS.tolist()))


def test_refine_groups_stops_where_the_simultaneous_moves_cycle():
    # no groups to find: from this start the clients swap groups every step
    a = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=F64)
    sim = ((a + a.T) / 2).clamp(-1, 1).fill_diagonal_(1.0)
    start = torch.tensor([0, 0, 0, 1, 1, 1])
    found = refine_groups(sim, start)
    # the same grouping however many steps are allowed past the cycle (moving on would alternate)
    for steps in (2, 3, 100, 101):
        assert torch.equal(refine_groups(sim, start, max_steps=steps), found)
    assert not torch.equal(found, start)


def test_refine_groups_keeps_every_group_at_least_min_size():
    sim = _near_similarity(0.0, 0)
    cut = NEAR_GROUPS.clone()
    cut[0:6] = 2  # the small group merged into its close neighbour ...
    cut[60:62] = 0  # ... and its label held by two clients of another group: moving them would empty it
    assert torch.equal(refine_groups(sim, cut), cut)
    assert torch.equal(refine_groups(sim, cut, min_size=2), cut)
    with pytest.raises(ValueError, match="min_size"):
        refine_groups(sim, cut, min_size=0)
    with pytest.raises(ValueError, match="max_steps"):
        refine_groups(sim, cut, max_steps=1.5)
    with pytest.raises(ValueError, match="square"):
        refine_groups(sim[:, :50], cut)
    for bad in (cut[:50], cut.double(), cut - 1):
        with pytest.raises(ValueError, match="group indices"):
            refine_groups(sim, bad)


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
    with pytest.raises(TypeError, match="start_apart"):
        F.ClassGroups(start_apart="yes")
    for bad in ("0.1", float("nan"), 2.0, -2.5, True):
        with pytest.raises(ValueError, match="start_margin"):
            F.ClassGroups(start_margin=bad)
    assert F.ClassGroups(start_margin=-2).start_margin == -2.0 and F.ClassGroups(start_margin=None).start_margin is None
    with pytest.raises(TypeError, match="ClassGroups"):
        F.WarmUp(2, groups="class")
    # the update groups already start GroupedWarmUp's models apart where the class groups find none
    assert F.GroupedWarmUp(2, groups=F.ClassGroups()).groups == F.ClassGroups(start_apart=False)


# ----------------------------------------------------------------------------- the models started apart
def test_start_apart_starts_the_models_near_groups_too_weak_to_stand_apart():
    # four training samples a client: the groups do not stand apart (find returns None), but the
    # spectral groups of the same similarity are close to them
    data = skewed_groups(per=8, dim=40, seed=0)
    model = fl.logistic_regression(40, 10)
    config = fl.FederatedConfig(rounds=12, lr=0.1, eval_every=0, seed=0)
    tie = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_apart=False))),
                           config)
    apart = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), config)  # the default starts apart
    plans = {name: [adjusted_rand_index(log.plan.argmax(1).tolist(), data.groups)
                    for log in run.history if log.plan is not None] for name, run in [("tie", tie), ("apart", apart)]}
    assert max(plans["tie"]) < 0.2  # the tie's split misses the groups and never finds them
    assert min(plans["apart"]) > 0.8
    # the same groups as a run that asks for them whatever they show: deterministic, and they pass
    # the start's test (each group holds together and stands apart, if only a little)
    again = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_margin=None))),
                             config)
    assert torch.equal(again.params, apart.params)


@dataclass(frozen=True)
class _Recorded(F.ClassGroups):
    """ClassGroups that keep the start groups the warm-up's :meth:`split` gives, for the test to read."""

    seen: list = field(default_factory=list, compare=False)

    def split(self, grads, counts, m):
        groups, apart = super().split(grads, counts, m)
        assert not apart and torch.equal(groups, self.start(grads, counts, m))
        self.seen.append(groups)
        return groups, apart


@pytest.mark.filterwarnings("ignore:MosT\\(warmup=WarmUp\\(rounds=2\\)\\) with rounds=2")  # ends in the warm-up, on purpose
def test_start_apart_moves_each_model_by_its_groups_mean_step_and_holds_nothing():
    data = fl.fedprox_synthetic(0.0, 0.0, n_clients=12, samples_per_client=50, seed=0)
    model = fl.logistic_regression(60, 10)
    config = fl.FederatedConfig(rounds=2, eval_every=0, seed=3)
    grouping = _Recorded(start_margin=None)  # these clients have no groups: started apart whatever the groups show
    tie = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_apart=False))), config)
    apart = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=grouping)), config)
    (groups,) = grouping.seen  # asked once, in the warm-up's last round, where find found none
    assert sorted(set(groups.tolist())) == [0, 1, 2]
    # the tie's models are equal after the warm-up; started apart, each took its own group's step
    assert torch.equal(tie.params[0], tie.params[1]) and torch.equal(tie.params[0], tie.params[2])
    assert not torch.allclose(apart.params[0], apart.params[1]) and not torch.allclose(apart.params[1], apart.params[2])
    # ... the mean of its group's updates by samples, so the groups' steps weighted by their samples
    # are the shared step (FedAvg's) the tie took
    samples = torch.tensor([float(len(c.y_train)) for c in data.clients], dtype=apart.params.dtype)
    size = torch.stack([samples[groups == j].sum() for j in range(3)])
    torch.testing.assert_close((apart.params * size[:, None]).sum(0) / size.sum(), tie.params[0], rtol=1e-5, atol=1e-6)
    # nothing is held: the rounds after the warm-up are the plan's, whatever ``hold`` says
    longer = fl.FederatedConfig(rounds=6, eval_every=0, seed=3)
    runs = [fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_margin=None, hold=h))),
                             longer) for h in (0, 5)]
    assert torch.equal(runs[0].params, runs[1].params)
    # the default's start asks each group to hold together and stand apart: these do not, so its
    # models start equal, as without the start
    default = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), config)
    assert torch.equal(default.params, tie.params)


def test_start_apart_changes_nothing_where_the_groups_stand_apart(data):
    model = fl.logistic_regression(20, 10)
    found = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2)), CONFIG)
    apart = fl.run_federated(data, model, F.MosT(3, warmup=F.WarmUp(2, groups=F.ClassGroups(start_apart=True))),
                             CONFIG)
    assert torch.equal(found.params, apart.params)


def test_start_groups_fall_back_to_fewer_groups_only_where_too_few_clients_fit():
    g = torch.Generator().manual_seed(0)
    grads, counts = torch.randn(9, 4, 6, generator=g, dtype=F64), torch.full((9, 4), 5.0, dtype=F64)
    grouping = F.ClassGroups(min_size=2, start_margin=None)  # whatever the groups show
    groups = grouping.start(grads, counts, 3)
    assert groups is not None and groups.shape == (9,) and int(groups.max()) + 1 == 3
    assert int(torch.bincount(groups).min()) >= 1
    assert int(grouping.start(grads[:5], counts[:5], 3).max()) + 1 == 2  # 5 clients: two groups of 2 fit
    assert grouping.start(grads[:3], counts[:3], 3) is None  # fewer than two groups of 2
    with pytest.raises(ValueError, match="do not match"):
        grouping.start(grads, counts[:, :2], 3)
    # the warm-up's split: no groups stand apart here, so the start groups with start_apart, else nothing
    assert grouping.find(grads, counts, 3) is None
    assert F.ClassGroups(min_size=2, start_apart=False, start_margin=None).split(grads, counts, 3) == (None, False)
    apart, stood = grouping.split(grads, counts, 3)
    assert not stood and torch.equal(apart, groups)
    # noise: some group's typical client is not closer to its group than to another, so the
    # default's start (each group's two medians above 0) gives nothing, and the models start equal
    assert _weakest(*F.class_similarity(grads, counts, support=True), groups) <= 0
    assert F.ClassGroups(min_size=2).start(grads, counts, 3) is None
    assert F.ClassGroups(min_size=2).split(grads, counts, 3) == (None, False)


def _weakest(sim, support, groups):
    """The smallest, over the groups, of the median client's mean similarity to its group and of
    its margin over the nearest other group: what ``start_margin`` is compared with."""
    own, margins = F.group_margins(sim, groups, support=support, own=True)
    return min(min(float(own[groups == j].median()), float(margins[groups == j].median()))
               for j in range(int(groups.max()) + 1))


def test_start_margin_is_the_bar_every_start_group_must_clear():
    # three groups of clients with centred per-class gradients near their group's: at 0 they start
    # apart; a bar above the weakest group's median similarity or margin gives nothing
    g = torch.Generator().manual_seed(1)
    truth = torch.arange(12) % 3
    centre = torch.randn(3, 6, 8, generator=g, dtype=F64)
    grads = centre[truth] + 2.0 * torch.randn(12, 6, 8, generator=g, dtype=F64)
    counts = torch.full((12, 6), 3.0, dtype=F64)
    groups = F.ClassGroups(start_margin=None).start(grads, counts, 3)
    weakest = _weakest(*F.class_similarity(grads, counts, support=True), groups)
    assert 0 < weakest < 0.25  # held together, but not standing apart as find asks
    assert F.ClassGroups().find(grads, counts, 3) is None
    assert torch.equal(F.ClassGroups().start(grads, counts, 3), groups)
    assert torch.equal(F.ClassGroups(start_margin=weakest - 1e-6).start(grads, counts, 3), groups)
    assert F.ClassGroups(start_margin=weakest).start(grads, counts, 3) is None  # strictly above


def test_split_gives_the_groups_that_stand_apart_whether_or_not_it_starts_apart(data):
    grads, counts = torch.randn(16, 10, 5, dtype=F64), torch.zeros(16, 10, dtype=F64)
    g = torch.Generator().manual_seed(3)
    centre = torch.randn(3, 10, 5, generator=g, dtype=F64)
    for i, k in enumerate(data.groups):
        counts[i, torch.randperm(10, generator=g)[:5]] = 8.0
        grads[i] = (centre[k] + 0.1 * torch.randn(10, 5, generator=g, dtype=F64)) * (counts[i] > 0)[:, None]
    found = F.ClassGroups().find(grads, counts, 3)
    assert found is not None and adjusted_rand_index(found.tolist(), data.groups) == 1.0
    for start_apart in (False, True):
        groups, stood = F.ClassGroups(start_apart=start_apart).split(grads, counts, 3)
        assert stood and torch.equal(groups, found)


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
