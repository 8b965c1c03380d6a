"""most.seeding and the default MosT that uses it: recovery of known groups, determinism,
resume, the rule that placement waits for two objectives per model, and the spread of MosT-E
models (one ray each) over a disconnected front's pieces."""

import numpy as np
import pytest
import torch

import most
from tests._shared import stopped_then_resumed
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


@pytest.mark.parametrize("objectives, match", [
    (torch.tensor([0, 4]), r"`objectives` holds the index 4, outside the problem's 4 objectives: every index must "
                           r"be in \[0, 4\)"),
    (torch.tensor([-1, 2]), r"`objectives` holds the index -1, outside the problem's 4 objectives"),
    (torch.tensor([0.0, 2.0]), r"`objectives` must be integer objective indices .* of dtype torch\.float32"),
    (torch.tensor([True, False]), "`objectives` must be integer objective indices"),
    ("01", "`objectives` must be integer objective indices"),
    (torch.tensor([0, 1, 2]), "`objectives` has 3 indices but `starts` has 2 rows"),
])
def test_minimise_each_refuses_objectives_that_are_not_one_index_of_the_problem_per_start(objectives, match):
    problem, _, _ = groups_of_quadratics([2, 2], seed=0)
    with pytest.raises(ValueError, match=match):
        minimise_each(problem, torch.zeros(2, 3, dtype=F64), objectives, steps=5, lr=0.1)


def test_minimise_each_takes_objective_indices_as_a_list_or_array():
    problem, centres, _ = groups_of_quadratics([2, 2], seed=0)
    starts = torch.zeros(2, 3, dtype=F64)
    expected = minimise_each(problem, starts, torch.tensor([3, 1]), steps=50, lr=0.1)
    for same in ([3, 1], np.array([3, 1])):
        assert torch.equal(minimise_each(problem, starts, same, steps=50, lr=0.1), expected)


def test_minimise_each_takes_objectives_with_data_of_their_own_from_that_data_alone():
    """A problem from datasets (`rows_alone`) descends each objective on its own rows: the same
    steps as the reverse pass of the one-hot weighted losses over every objective, which a
    problem from a module takes."""
    from torch import nn
    from torch.nn.functional import cross_entropy

    g = torch.Generator().manual_seed(0)
    tasks = [(torch.randn(12, 4, generator=g), torch.randint(0, 3, (12,), generator=g)) for _ in range(9)]
    net = lambda: nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))  # noqa: E731
    datasets = most.Problem.from_datasets(net, tasks, lambda o, y: cross_entropy(o, y, reduction="none"))
    module = most.Problem.from_module(net, [lambda f, x=x, y=y: cross_entropy(f(x), y) for x, y in tasks])
    assert datasets.rows_alone and not module.rows_alone
    assert not most.problems.quadratic_clusters(n_clusters=2, per_cluster=2, seed=0).rows_alone
    starts = datasets.initial_params(3, torch.Generator().manual_seed(1))
    picks = torch.tensor([0, 4, 8])
    torch.testing.assert_close(minimise_each(datasets, starts, picks, steps=5, lr=0.3),
                               minimise_each(module, starts, picks, steps=5, lr=0.3), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m", [0, -1, 1.0, True])
def test_kmeans_seeding_refuses_a_model_count_below_one(m):
    problem, _, _ = groups_of_quadratics([2, 2], seed=0)
    with pytest.raises(ValueError, match=r"`m` must be an int >= 1"):
        KMeansSeeding()(problem, m, torch.Generator().manual_seed(0), lr=0.1)


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

    resumed = stopped_then_resumed(method, problem, tmp_path / "ckpt", every=10, at=35)
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


# ------------------------------------------------------------------ the spread (MosT-E, one ray per model)
def recommended_rays():
    """The recommended two-objective extension: one smooth augmented Tchebycheff ray per model."""
    return most.TchebycheffExtension(n_extra=5, spread="grid", smoothing=0.05, augment=0.01, include_original=False)


def zdt_models(name, x1):
    """ZDT ``name`` extended with the recommended rays, and models on the g = 1 curve at ``x1``."""
    base = most.problems.zdt(name)
    params = torch.zeros(len(x1), base.dim)
    params[:, 0] = torch.tensor(x1)
    return base, recommended_rays().apply(base, torch.Generator().manual_seed(0)), params


def ray_values(problem):
    """``(x1, values [rays, points])``: each ray on the g = 1 curve, on a grid of 1e-4 (float64)."""
    x1 = torch.linspace(0.0, 1.0, 10001, dtype=F64)
    grid = torch.zeros(len(x1), problem.dim, dtype=F64)
    grid[:, 0] = x1
    return x1, problem.loss_matrix(grid)


def ray_minimisers(problem):
    """Every local minimiser along x1 of each ray on the g = 1 curve, ``{ray: [x1, ...]}``."""
    x1, values = ray_values(problem)
    padded = torch.nn.functional.pad(values, (1, 1), value=float("inf"))
    low = (values <= padded[:, :-2]) & (values <= padded[:, 2:])
    return {k: x1[low[k]].tolist() for k in range(values.shape[0])}


def percent_of_limit(base, params):
    ref = base.metadata["reference_point"]
    limit = most.metrics.best_hypervolume_2d(base.metadata["front"], ref, len(params))
    return 100 * float(most.metrics.hypervolume(base.loss_matrix(params).T.double().numpy(), ref)) / limit


ONE_RAY_EACH = torch.eye(5) / 5  # ray k served by model k
ADAM = most.optim.Adam()


def test_zdt3_rays_have_local_minimisers_on_several_pieces_and_their_global_ones_share_a_piece():
    # the cause the spread answers: rays 1 and 2 both have their global minimiser on the piece
    # f1 in [0.62, 0.66], and every ray has local minimisers on other pieces
    base, ext, _ = zdt_models("zdt3", [0.0])
    x1, values = ray_values(ext)
    best = x1[values.argmin(1)]
    assert 0.62 < best[1] < 0.66 and 0.62 < best[2] < 0.66
    assert all(len(v) >= 2 for k, v in ray_minimisers(ext).items() if k < 4)
    _, _, params = zdt_models("zdt3", best.tolist())
    assert percent_of_limit(base, params) < 99  # each ray at its global minimiser: 98.75 %


def test_spread_moves_a_model_off_a_shared_piece_to_a_local_minimiser_of_its_own_ray():
    base, ext, params = zdt_models("zdt3", [0.8518, 0.65215, 0.63695, 0.25675, 0.0001])  # global minimisers
    out, moved = Reseed()(ext, params, torch.Generator().manual_seed(0), lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    assert moved in (1, 2)  # one of the two models on the piece near f1 = 0.64
    assert (out != params).any(1).nonzero().flatten().tolist() == [moved]
    new = float(out[moved, 0])
    assert 0.44 < new < 0.46  # the lower end of the next piece ...
    assert min(abs(new - x) for x in ray_minimisers(ext)[moved]) < 2e-3  # ... a local minimiser of its own ray
    assert percent_of_limit(base, params) < 99 < percent_of_limit(base, out)
    again = Reseed()(ext, params, torch.Generator().manual_seed(123), lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    assert again[1] == moved and torch.equal(again[0], out)  # deterministic, no draw from the generator


def test_spread_moves_one_of_two_models_on_the_same_point():
    # ray 0 stuck at a local minimiser on ray 1's point (two models at (0.652, -0.458))
    base, ext, params = zdt_models("zdt3", [0.6525, 0.65215, 0.45355, 0.25675, 0.0001])
    out, moved = Reseed()(ext, params, torch.Generator().manual_seed(0), lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    assert moved in (0, 1)
    points = base.loss_matrix(out).T
    assert torch.cdist(points, points).add(torch.eye(5)).min() > 0.05  # five distinct points now
    assert percent_of_limit(base, out) > percent_of_limit(base, params) + 0.5


def test_spread_moves_a_model_past_the_end_models_to_a_piece_they_leave_out():
    # two models on the piece at f1 = 0.45 and none on the last piece (f1 = 0.65), beyond the
    # models' range: only a start past the end model reaches it, and only a reference point past
    # the models' range lets it count (seeds 48 and 53 of the recommended call ended like this)
    # (each model on a local minimiser of its own ray; rays 0 and 1 both on the piece at 0.45)
    base, ext, params = zdt_models("zdt3", [0.4539, 0.4538, 0.2577, 0.0827, 0.0001])
    out, moved = Reseed()(ext, params, torch.Generator().manual_seed(0), lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    assert moved in (0, 1)
    assert 0.64 < float(out[moved, 0]) < 0.66  # the lower end of the last piece
    assert percent_of_limit(base, out) > 99 > percent_of_limit(base, params)


@pytest.mark.parametrize("name", ["zdt1", "zdt2", "zdt3"])
def test_spread_leaves_models_alone_where_no_local_minimiser_serves_the_set_better(name):
    # zdt1/zdt2 (connected fronts): each model at its ray's minimiser; zdt3: the best five-piece
    # placement that the rays' local minimisers allow
    if name == "zdt3":
        x1 = [0.0829, 0.65215, 0.45355, 0.25675, 0.0001]
    else:
        _, ext, _ = zdt_models(name, [0.0])
        grid, values = ray_values(ext)
        x1 = grid[values.argmin(1)].tolist()
    _, ext, params = zdt_models(name, x1)
    out, moved = Reseed()(ext, params, torch.Generator().manual_seed(0), lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    assert moved is None and torch.equal(out, params)


def test_spread_waits_for_its_start_and_can_be_turned_off():
    _, ext, params = zdt_models("zdt3", [0.6525, 0.65215, 0.45355, 0.25675, 0.0001])
    call = dict(lr=5e-3, optimizer=ADAM, plan=ONE_RAY_EACH)
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    assert Reseed()(ext, params, gen(), round=399, total=1000, **call) == (params, None)  # before 40 % of the run
    assert Reseed()(ext, params, gen(), round=419, total=1000, **call)[1] is not None
    assert Reseed(spread=False)(ext, params, gen(), **call) == (params, None)
    assert Reseed()(ext, params, gen(), lr=5e-3, optimizer=ADAM)[1] is not None  # without a plan: best models
    # without an original problem (not an extension) nothing moves, as before
    plain = most.Problem.from_function(ext.fn, dim=ext.dim, n_objectives=5)
    assert Reseed()(plain, params, gen(), **call) == (params, None)


@pytest.mark.parametrize("kwargs, match", [
    (dict(spread_steps=1), "spread_steps"), (dict(spread_start=-0.1), "spread_start"), (dict(spread="yes"), "spread"),
])
def test_bad_spread_settings_are_refused(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Reseed(**kwargs)


def test_recommended_zdt3_call_reaches_99_percent_on_a_seed_that_missed_and_resumes_to_the_same_models(tmp_path):
    # seed 2 reached 97.9 % of the 5-point limit without the spread (two pairs of models on shared points)
    problem = most.problems.zdt("zdt3")
    method = most.MosT(n_models=5, rounds=1000, lr=5e-3, optimizer=ADAM, extension=recommended_rays(), seed=2)
    whole = method.fit(problem)
    assert percent_of_limit(problem, whole.params) >= 99
    moved = [(r.round, r.moved) for r in whole.history if r.moved is not None]
    assert moved and all(400 <= t < 600 for t, _ in moved)  # within the spread's window

    # saved every 20 rounds (after each attempt, a move included); stopped 15 rounds after the first move
    resumed = stopped_then_resumed(method, problem, tmp_path / "ckpt", every=20, at=moved[0][0] + 15)
    torch.testing.assert_close(resumed.params, whole.params, atol=0, rtol=0)
    assert [(r.round, r.moved) for r in resumed.history if r.moved is not None] == moved
