"""most.seeding and the default MosT that uses it: recovery of known groups, determinism,
resume, and the rule that placement waits for two objectives per model."""

import pytest
import torch

import most
from most.checkpoint import Checkpoint
from most.seeding import KMeansSeeding, Reseed, minimise_each

F64 = torch.float64


def groups_of_quadratics(sizes, *, dim=3, seed=0, separation=8.0):
    """Objectives ||theta - c_i||^2 in groups of the given sizes; returns (problem, centres, labels)."""
    g = torch.Generator().manual_seed(seed)
    while True:
        means = 6.0 * torch.randn(len(sizes), dim, generator=g, dtype=F64)
        if torch.pdist(means).min() >= separation:
            break
    labels = torch.cat([torch.full((s,), k) for k, s in enumerate(sizes)])
    centres = means[labels] + 0.5 * torch.randn(len(labels), dim, generator=g, dtype=F64)
    problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=dim, n_objectives=len(labels))
    return problem, centres, labels


def oracle(centres, labels):
    return sum(float(((centres[labels == k] - centres[labels == k].mean(0)) ** 2).sum())
               for k in labels.unique()) / len(labels)


def test_minimise_each_reaches_each_objectives_minimiser():
    problem, centres, _ = groups_of_quadratics([2, 2], seed=0)
    out = minimise_each(problem, torch.zeros(3, 3, dtype=F64), torch.tensor([0, 2, 3]), steps=200, lr=0.1)
    torch.testing.assert_close(out, centres[[0, 2, 3]], atol=1e-8, rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_kmeans_seeding_puts_one_model_in_each_group(seed):
    problem, _, labels = groups_of_quadratics([3, 9, 5, 12], seed=seed)
    start = KMeansSeeding()(problem, 4, torch.Generator().manual_seed(seed), lr=0.1)
    owners = problem.loss_matrix(start).argmin(1)
    assert len(owners.unique()) == 4
    for k in range(4):  # every group is served by one model, and no model by two groups
        assert len(owners[labels == k].unique()) == 1
    assert len(set(int(owners[labels == k][0]) for k in range(4))) == 4


@pytest.mark.parametrize("run_steps, steps", [(300, 30), (1000, 30), (50, 6), (20, 2), (1, 1)])
def test_kmeans_seeding_spends_at_most_its_budget_of_the_runs_steps(run_steps, steps):
    # m = 4: 3 candidates per model; budget 0.4 -> steps = min(30, max(1, floor(0.4 * run_steps / 3)))
    problem, _, _ = groups_of_quadratics([3, 9, 5, 12], seed=0)
    capped = KMeansSeeding()(problem, 4, torch.Generator().manual_seed(0), lr=0.1, run_steps=run_steps)
    same = KMeansSeeding(steps=steps)(problem, 4, torch.Generator().manual_seed(0), lr=0.1)
    torch.testing.assert_close(capped, same, atol=0, rtol=0)
    calls = []
    counted = most.Problem.from_function(lambda t: calls.append(1) or problem.fn(t), dim=3, n_objectives=29)
    KMeansSeeding()(counted, 4, torch.Generator().manual_seed(0), lr=0.1, run_steps=run_steps)
    assert len(calls) == 4 * (steps + 1)  # one pass per step, and one loss matrix per model


def test_reseed_moves_a_model_stranded_between_groups_and_leaves_a_good_placement_alone():
    problem, centres, labels = groups_of_quadratics([6, 6, 6], seed=1)
    means = torch.stack([centres[labels == k].mean(0) for k in range(3)])
    good = means.clone()
    params, moved = Reseed()(problem, good, torch.Generator().manual_seed(0), lr=0.1)
    assert moved is None and torch.equal(params, good)
    # two models share group 0, group 2 is left to the one between groups 1 and 2
    bad = torch.stack([means[0], means[0] + 0.01, (means[1] + means[2]) / 2])
    params, moved = Reseed()(problem, bad, torch.Generator().manual_seed(0), lr=0.1)
    assert moved in (0, 1)
    before = problem.loss_matrix(bad).min(1).values.sum()
    after = problem.loss_matrix(params).min(1).values.sum()
    assert after < 0.99 * before


def test_placement_waits_for_two_objectives_per_model():
    problem, _, _ = groups_of_quadratics([2, 2, 1], seed=0)  # n = 5 < 2m
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    torch.testing.assert_close(KMeansSeeding()(problem, 3, gen(), lr=0.1), problem.initial_params(3, gen()))
    params = torch.randn(3, 3, dtype=F64)
    assert Reseed()(problem, params, gen(), lr=0.1) == (params, None)


@pytest.mark.parametrize("sizes, m", [([4, 8, 12, 16, 24], 5), ([10] * 4, 6), ([5, 30, 30, 30], 4)])
def test_default_most_reaches_the_groups_optimum_for_unequal_groups_and_extra_models(sizes, m):
    # unequal groups, more models than groups, a group 1/6 of the largest: within 1.25x of
    # serving every group at its centroid, on every seed
    for seed in range(3):
        problem, centres, labels = groups_of_quadratics(sizes, seed=seed)
        result = most.MosT(n_models=m, rounds=150, lr=0.1, seed=seed).fit(problem)
        ratio = float(result.best_losses().mean()) / oracle(centres, labels)
        assert ratio <= 1.25, (sizes, m, seed, ratio)
        assert result.history[-1].plan.sum(0).min() > 0  # no model serves nothing


def test_the_paper_variant_is_the_earlier_algorithm_and_fails_where_the_default_succeeds():
    problem, centres, labels = groups_of_quadratics([4, 8, 12, 16, 24], seed=0)
    paper = most.variants.apply("paper", most.MosT(n_models=5, rounds=150, lr=0.1))
    assert (paper.seeding, paper.reseed, type(paper.combiner), type(paper.marginals)) == (
        None, None, most.MinNorm, most.Curriculum)
    ratio = float(paper.fit(problem).best_losses().mean()) / oracle(centres, labels)
    assert ratio > 1.25


def test_the_default_is_deterministic_and_resumes_to_the_same_models(tmp_path):
    problem, _, _ = groups_of_quadratics([3, 6, 9], seed=2)
    method = most.MosT(n_models=4, rounds=60, lr=0.1, seed=5, reseed=Reseed(every=10, until=0.9))
    whole = method.fit(problem)
    torch.testing.assert_close(method.fit(problem).params, whole.params, atol=0, rtol=0)

    class Stop(Exception):
        pass

    def stop_at_35(record, params):
        if record.round == 35:
            raise Stop

    ckpt = Checkpoint(tmp_path / "ckpt", every=10)
    with pytest.raises(Stop):
        method.fit(problem, checkpoint=ckpt, callback=stop_at_35)
    resumed = method.fit(problem, checkpoint=ckpt)
    torch.testing.assert_close(resumed.params, whole.params, atol=0, rtol=0)
    assert [r.moved for r in resumed.history] == [r.moved for r in whole.history]


def test_adam_state_restarts_for_a_moved_model():
    state = most.optim.Adam().init(torch.ones(3, 2))
    state = (state[0] + 1, state[1] + 2, 4)
    m, v, t = most.optim.Adam().restart(state, 1)
    assert m[1].abs().sum() == 0 and v[1].abs().sum() == 0 and m[0].sum() == 2 and t == 4
    assert most.optim.SGD().restart("s", 0) == "s"


@pytest.mark.parametrize("kwargs, match", [
    (dict(every=0), "every"), (dict(until=1.5), "until"), (dict(min_gain=-1.0), "min_gain"),
    (dict(steps=-1), "steps"),
])
def test_bad_reseed_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Reseed(**kwargs)


def test_more_models_than_a_floor_allows_is_refused_before_any_work():
    problem, _, _ = groups_of_quadratics([3, 3], seed=0)
    with pytest.raises(ValueError, match="at least as many objectives as models"):
        most.MosT(n_models=8).fit(problem)
    with pytest.raises(ValueError, match="min_objectives=2"):
        most.MosT(n_models=4, marginals=most.LoadBounds(min_objectives=2), rounds=2).fit(problem)
