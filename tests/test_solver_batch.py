"""``most.fit_batch``: runs in step with shared evaluations, each equal to its own ``fit``."""

import pytest
import torch

import most
from most.baselines import EPO, MOOSVGD
from most.problems import zdt


def _clusters(n=48, dim=4, seed=0):
    c = 3 * torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))
    calls = []

    def fn(theta):
        calls.append(1)
        return ((theta - c) ** 2).sum(-1)

    return most.Problem.from_function(fn, dim=dim, n_objectives=n), calls


def _same(a, b):
    return (torch.equal(a.params, b.params) and torch.equal(a.losses, b.losses)
            and torch.equal(a.assignment, b.assignment)
            and all(torch.equal(x.plan, y.plan) for x, y in zip(a.history, b.history) if x.plan is not None))


@pytest.mark.parametrize("name", sorted(most.registry.methods("centralised")))
def test_every_centralised_method_in_a_batch_ends_as_its_own_fit_bit_for_bit(name):
    problem, _ = _clusters()
    factory = most.registry.methods("centralised")[name]
    # two seeds, two step counts: rounds of one method in step, other methods' in the same batch
    runs = [factory(n_models=3, rounds=6, lr=0.05, seed=s, inner_steps=k) for s, k in ((0, 1), (1, 1), (2, 3))]
    runs.append(most.MosT(n_models=4, rounds=9, lr=0.05, seed=5))
    batch = most.fit_batch(problem, runs)
    for method, result in zip(runs, batch):
        assert _same(result, method.fit(problem)), method


def test_runs_that_share_one_fixed_plan_assignment_object_each_keep_their_own_plan():
    """replace() shares a component object between methods; an assignment that keeps its plan
    from reset (a fixed random plan) is copied per run, so each run's plan is its seed's."""
    problem, _ = _clusters()
    base = most.MosT(n_models=3, rounds=5, lr=0.05, assignment=most.methods.RandomAssignment(1.0))
    runs = [base.replace(seed=s) for s in (0, 1)]
    batch = most.fit_batch(problem, runs)
    for method, result in zip(runs, batch):
        assert _same(result, method.fit(problem)), method
    assert not torch.equal(batch[0].assignment, batch[1].assignment)


def test_runs_on_the_same_objectives_share_their_evaluations():
    problem, calls = _clusters()
    runs = [most.MosT(n_models=3, rounds=20, lr=0.05, seed=s, seeding=None, reseed=None) for s in range(4)]
    runs[0].fit(problem)
    alone = len(calls)
    calls.clear()
    most.fit_batch(problem, runs)
    assert len(calls) == alone  # one evaluation of all four runs' models where one run made one


def test_mostE_with_the_same_grid_shares_its_extended_problem_and_dirichlet_draws_do_not():
    z = zdt("zdt1")
    grid = most.TchebycheffExtension(n_extra=4, spread="grid", smoothing=0.05, augment=0.01, include_original=False)
    runs = [most.MosT(n_models=4, rounds=15, lr=5e-3, seed=s, extension=grid, optimizer=most.optim.Adam())
            for s in range(3)]
    runs += [most.MosT(n_models=4, rounds=15, lr=5e-3, seed=s, extension=most.DirichletExtension(n_extra=8),
                       optimizer=most.optim.Adam()) for s in range(2)]
    results = most.fit_batch(z, runs)
    assert results[0].problem is results[1].problem is results[2].problem
    assert results[3].problem is not results[4].problem
    for method, result in zip(runs, results):
        assert _same(result, method.fit(z))


def test_min_norm_baselines_on_few_objectives_match_their_fits():
    z = zdt("zdt2")
    runs = [EPO(n_models=3, rounds=10, lr=0.01, seed=s) for s in range(2)]
    runs += [MOOSVGD(n_models=3, rounds=10, lr=0.01, seed=s) for s in range(2)]
    runs += [most.MGDA(n_models=5, rounds=10, lr=0.01, seed=s, optimizer=most.optim.Adam()) for s in range(2)]
    for method, result in zip(runs, most.fit_batch(z, runs)):
        assert _same(result, method.fit(z))


def test_a_diverging_run_returns_its_error_and_the_others_finish_as_alone():
    problem, _ = _clusters()
    runs = [most.MosT(n_models=3, rounds=30, lr=lr, seed=s, seeding=None, reseed=None)
            for s, lr in ((0, 0.05), (1, 1e6), (2, 0.05))]
    with pytest.raises(ValueError, match="not finite|is inf|is nan"):
        most.fit_batch(problem, runs)
    results = most.fit_batch(problem, runs, errors="return")
    assert isinstance(results[1], ValueError)
    with pytest.raises(ValueError) as alone:
        runs[1].fit(problem)
    assert str(results[1]) == str(alone.value)
    # the diverging run held its share of a reverse pass when it stopped: the others pulled without it
    assert _same(results[0], runs[0].fit(problem)) and _same(results[2], runs[2].fit(problem))


def test_objectives_that_fail_give_fits_error_for_every_run():
    problem = most.Problem.from_function(lambda t: (t @ torch.ones(5)) * torch.ones(3), dim=2, n_objectives=3)
    runs = [most.Linearization(n_models=2, rounds=3, seed=s) for s in range(2)]
    with pytest.raises(ValueError) as alone:
        runs[0].fit(problem)
    results = most.fit_batch(problem, runs, errors="return")
    # torch's own words inside name the batch's size; the library's message is fit's
    head = str(alone.value).split(":")[0]
    assert head.startswith("The objectives fail on the models' parameters (a tensor of shape [2] each")
    assert all(isinstance(r, ValueError) and str(r).split(":")[0] == head for r in results)


@pytest.mark.parametrize("methods, error, match", [
    ([], ValueError, "non-empty list"),
    (most.MosT(n_models=2), ValueError, "non-empty list"),
    ([most.MosT(n_models=2), "MosT"], TypeError, r"methods\[1\] is a str"),
])
def test_bad_method_lists_are_refused_before_any_work(methods, error, match):
    problem, calls = _clusters()
    with pytest.raises(error, match=match):
        most.fit_batch(problem, methods)
    assert not calls


def test_a_problem_is_required_and_errors_is_checked():
    with pytest.raises(ValueError, match="takes a most.Problem"):
        most.fit_batch(lambda t: t, [most.MosT(n_models=2)])
    problem, _ = _clusters()
    with pytest.raises(ValueError, match="'raise' or 'return'"):
        most.fit_batch(problem, [most.MosT(n_models=2)], errors="ignore")


def test_float32_runs_and_float64_runs_batch_apart_and_keep_their_dtypes():
    c = 3 * torch.randn(30, 3, generator=torch.Generator().manual_seed(1))
    problem = most.Problem.from_function(lambda t: ((t - c.to(t)) ** 2).sum(-1), dim=3, n_objectives=30,
                                         init=torch.zeros(3, dtype=torch.float64))
    runs = [most.MosT(n_models=3, rounds=8, lr=0.05, seed=s) for s in range(2)]
    results = most.fit_batch(problem, runs)
    assert all(r.params.dtype == torch.float64 for r in results)
    for method, result in zip(runs, results):
        assert _same(result, method.fit(problem))


def test_a_stopped_batch_resumes_each_run_from_its_checkpoint(tmp_path):
    problem, _ = _clusters()
    runs = [most.MosT(n_models=3, rounds=20, lr=0.05, seed=s) for s in range(2)] + [
        most.MGDA(n_models=3, rounds=20, lr=0.05)]
    paths = [most.checkpoint.Checkpoint(tmp_path / f"run{k}.pt", every=5) for k in range(len(runs))]

    def stop_at_12(record, params):
        if record.round == 12:
            raise KeyboardInterrupt

    seen = [[] for _ in runs]
    with pytest.raises(KeyboardInterrupt):
        most.fit_batch(problem, runs, checkpoints=paths, callbacks=[stop_at_12, None, None])
    resumed = most.fit_batch(problem, runs, checkpoints=paths,
                             callbacks=[lambda r, p, k=k: seen[k].append(r.round) for k in range(len(runs))])
    # the MosT runs stopped in round 12 and go on from their checkpoint of round 10; MGDA's rounds take
    # fewer evaluations (its gradients come with the loss matrix), so it may have finished before: then
    # its checkpoint holds the result and no round runs again
    assert seen[0][0] == seen[1][0] == 10 and seen[0][-1] == seen[1][-1] == 19
    assert not seen[2] or (seen[2][0] % 5 == 0 and seen[2][-1] == 19)
    for method, result in zip(runs, resumed):
        assert torch.equal(result.params, method.fit(problem).params)


def test_callbacks_and_checkpoints_need_one_entry_per_method():
    problem, calls = _clusters()
    with pytest.raises(ValueError, match="one entry \\(or None\\) per method: 2 methods, got 1"):
        most.fit_batch(problem, [most.MosT(n_models=2), most.MosT(n_models=2, seed=1)], callbacks=[None])
    assert not calls


def test_two_runs_given_one_checkpoint_file_are_refused_before_any_round(tmp_path):
    from most.checkpoint import Checkpoint

    problem = most.problems.quadratic_clusters(n_clusters=2, per_cluster=3, seed=0)
    methods = [most.MosT(2, rounds=3, seed=0), most.MosT(2, rounds=3, seed=1)]
    with pytest.raises(ValueError, match=r"`checkpoints` 0 and 1 are the same file"):
        most.fit_batch(problem, methods, checkpoints=[Checkpoint(tmp_path / "a.ckpt"),
                                                      Checkpoint(tmp_path / "." / "a.ckpt")])
    assert not (tmp_path / "a.ckpt").exists()
