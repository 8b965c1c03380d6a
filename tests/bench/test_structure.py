"""The structure benchmark: its problem generators, the oracle, the metrics, a small call end to
end (with resume), and the command's listing and bad input."""

import json

import pytest
import torch
from typer.testing import CliRunner

from most.bench import structure as S
from most.cli import app

runner = CliRunner()


@pytest.mark.parametrize("make", [S.clustered_quadratics, S.clustered_regressions])
def test_generators_give_the_group_sizes_and_are_deterministic_under_the_seed(make):
    sizes = (5, 10, 15, 20, 25, 30)
    a, b, c = make(sizes, seed=3), make(sizes, seed=3), make(sizes, seed=4)
    n = sum(sizes)
    assert a.problem.n_objectives == n and a.n_groups == 6
    assert torch.bincount(a.labels).tolist() == list(sizes)
    theta = torch.randn(4, a.problem.dim)
    assert a.problem.loss_matrix(theta).shape == (n, 4)
    torch.testing.assert_close(a.problem.loss_matrix(theta), b.problem.loss_matrix(theta))
    assert not torch.allclose(a.problem.loss_matrix(theta), c.problem.loss_matrix(theta))
    # the float64 losses the scores use are the problem's own
    torch.testing.assert_close(a.losses(theta), a.problem.loss_matrix(theta).double(), rtol=1e-4, atol=1e-4)


def test_generators_shapes_and_separation():
    q = S.clustered_quadratics((4, 6, 8), dim=3, seed=0, separation=8.0)
    assert q.centres.shape == (18, 3) and q.means.shape == (3, 3) and q.centres.dtype == torch.float64
    assert float(torch.pdist(q.means).min()) >= 8.0
    r = S.clustered_regressions((4, 6), dim=7, samples=12, seed=0)
    assert r.X.shape == (10, 12, 7) and r.y.shape == (10, 12) and r.means.shape == (2, 7)
    assert float(torch.pdist(r.means).min()) >= 4.0
    with pytest.raises(ValueError, match="apart"):
        S.clustered_quadratics((2,) * 6, dim=1, seed=0, separation=100.0)


def test_partitions_are_every_partition_once():
    parts = list(S.partitions(list(range(6)), 4))
    assert len(parts) == 65  # S(6, 4)
    assert len({tuple(sorted(tuple(sorted(b)) for b in p)) for p in parts}) == 65
    assert all(sorted(x for b in p for x in b) == list(range(6)) for p in parts)


def test_quadratic_oracle_at_or_above_k_models_is_the_within_group_scatter():
    q = S.clustered_quadratics((5, 10, 15, 20, 25, 30), seed=1)
    scatter = torch.cat([((q.centres[q.labels == g] - q.centres[q.labels == g].mean(0)) ** 2).sum(1)
                         for g in range(6)])
    for m in (6, 8):
        o = S.oracle(q, m)
        assert o.params.shape == (6, 5) and torch.equal(o.units, q.labels)
        torch.testing.assert_close(o.losses.mean(), scatter.mean())
    # the oracle's models score 1 against it, and every group is recovered
    s = S.score(q, S.oracle(q, 6), S.oracle(q, 6).params)
    assert s["ratio"] == pytest.approx(1.0) and s["recovered"] == s["units"] == 6


@pytest.mark.parametrize("make", [S.clustered_quadratics, S.clustered_regressions])
def test_oracle_below_k_models_beats_any_fixed_partition(make):
    st = make((15,) * 6, seed=2)
    o = S.oracle(st, 4)
    assert len(o.partition) == 4 and sorted(g for b in o.partition for g in b) == list(range(6))
    assert int(o.units.max()) == 3
    for fixed in ([[0, 1], [2, 3], [4], [5]], [[0], [1], [2], [3, 4, 5]], [[5, 0], [1, 4], [2], [3]]):
        params = torch.stack([st.pooled_optimum(torch.isin(st.labels, torch.tensor(b))) for b in fixed])
        assert float(o.losses.mean()) <= float(st.losses(params).min(1).values.mean()) + 1e-12


def test_regression_group_optimum_is_the_pooled_least_squares_fit():
    r = S.clustered_regressions((8, 8), dim=4, samples=10, seed=0)
    o = S.oracle(r, 2)
    for g in range(2):
        beta = o.params[g].clone().requires_grad_(True)
        mask = r.labels == g
        loss = ((r.X[mask] @ beta - r.y[mask]) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, beta)
        assert float(grad.abs().max()) < 1e-8


def test_the_pooled_fit_is_the_same_bits_on_every_call_and_the_least_squares_fit():
    r = S.make_problem("regression-unequal", 1)
    for g in range(r.n_groups):
        mask = r.labels == g
        fits = [r.pooled_optimum(mask) for _ in range(20)]
        assert all(torch.equal(fit, fits[0]) for fit in fits)  # torch.linalg.lstsq on MKL is not
        X, y = r.X[mask].reshape(-1, r.X.shape[-1]), r.y[mask].reshape(-1)
        torch.testing.assert_close(fits[0], torch.linalg.lstsq(X, y[:, None]).solution[:, 0], rtol=1e-10, atol=0)
    first = S.oracle(r, 4)
    for _ in range(5):
        again = S.oracle(r, 4)
        assert torch.equal(again.params, first.params) and torch.equal(again.losses, first.losses)


def test_a_pooled_fit_of_too_few_samples_is_the_minimum_norm_one():
    r = S.clustered_regressions((1, 1), dim=10, samples=4, seed=0)  # 4 samples for 10 coefficients
    mask = r.labels == 0
    X, y = r.X[mask].reshape(-1, 10), r.y[mask].reshape(-1)
    torch.testing.assert_close(r.pooled_optimum(mask), torch.linalg.pinv(X) @ y, rtol=1e-10, atol=1e-12)


def test_recovered_counts_a_group_once_one_model_holds_it():
    units = torch.tensor([0] * 10 + [1] * 10)
    assert S.recovered(torch.tensor([0] * 10 + [1] * 10), units) == 2
    assert S.recovered(torch.tensor([0] * 9 + [1] + [1] * 10), units) == 2  # 90 %, 1 of 10 outside
    assert S.recovered(torch.tensor([0] * 8 + [1] * 2 + [1] * 10), units) == 0  # 80 %; model 1 takes 2 of 0's
    assert S.recovered(torch.tensor([0] * 20), units) == 0  # one model for both


def test_config_refuses_unknown_settings_and_methods():
    with pytest.raises(ValueError, match="Unknown setting"):
        S.StructureConfig(cases=("quadratic-huge",))
    with pytest.raises(ValueError, match="Unknown method"):
        S.StructureConfig(methods=("k-means",))
    assert len(S.StructureConfig().seeds) == 20 and len(S.StructureConfig().cases) == 10


def test_a_small_call_end_to_end_and_resumed(tmp_path):
    torch.set_num_threads(1)
    config = S.StructureConfig(out=tmp_path / "s", cases=("quadratic-equal",),
                               methods=("MosT (default)", "SoM (Lloyd)"), seeds=(0,), rounds=20, progress=False)
    results = S.run_benchmark(config)
    block = results["settings"]["quadratic-equal"]
    assert block["m"] == 6 and block["units"] == 6
    for entry in block["methods"].values():
        (run,) = entry["runs"]
        assert run["seed"] == 0 and run["ratio"] >= 1.0 - 1e-9 and 0 <= run["recovered"] <= 6
        assert run["worst"] >= run["average"] and run["oracle_worst"] >= run["oracle_average"] > 0
        assert entry["within"] == int(run["ratio"] <= S.THRESHOLD)
    table = (tmp_path / "s" / "table.md").read_text()
    assert "## quadratic-equal" in table and "| SoM (Lloyd) |" in table and "*oracle*" in table
    assert json.loads((tmp_path / "s" / "results.json").read_text())["settings"]["quadratic-equal"]["k"] == 6
    assert (tmp_path / "s" / "ratio.png").stat().st_size > 1000
    # without --resume the finished runs are refused; with it they are reused and only the new seed is made
    with pytest.raises(ValueError, match="--resume"):
        S.run_benchmark(config)
    folder = tmp_path / "s" / "runs" / "quadratic-equal"
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("result.json")}
    again = S.run_benchmark(S.StructureConfig(**{**config.__dict__, "seeds": (0, 1)}), resume=True)
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())
    assert len(list(folder.rglob("result.json"))) == 4
    first = again["settings"]["quadratic-equal"]["methods"]["SoM (Lloyd)"]["runs"][0]
    assert first == block["methods"]["SoM (Lloyd)"]["runs"][0]


def test_command_lists_methods_and_refuses_a_bad_setting_in_one_line(tmp_path):
    res = runner.invoke(app, ["bench", "structure", "--list-methods"])
    assert res.exit_code == 0 and all(m in res.output for m in S.METHODS)
    res = runner.invoke(app, ["bench", "structure", "--setting", "quadratic-huge", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: Unknown setting") and "Traceback" not in res.output
    assert not (tmp_path / "o" / "results.json").exists()


def test_command_writes_the_table(tmp_path):
    out = tmp_path / "o"
    res = runner.invoke(app, ["bench", "structure", "--out", str(out), "--setting", "regression-below", "--method",
                              "SoM (Lloyd)", "--seed", "0", "--rounds", "10", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "## regression-below" in res.output and "oracle sets recovered out of 4" in res.output
    assert (out / "table.md").exists() and (out / "results.json").exists()


def test_a_stored_run_without_the_numbers_the_table_reads_is_named(tmp_path):
    from most.experiments.store import CorruptFileError

    config = S.StructureConfig(out=tmp_path, cases=("quadratic-equal",), methods=("SoM (Lloyd)",), seeds=(0,),
                               rounds=10, progress=False)
    S.run_benchmark(config)
    result = tmp_path / "runs" / "quadratic-equal" / "SoM_Lloyd" / "seed0" / "result.json"
    run = json.loads(result.read_text())
    del run["ratio"]
    result.write_text(json.dumps(run))
    with pytest.raises(CorruptFileError, match=rf"{result} is corrupt \(it lacks 'ratio'.*Delete the folder "
                                               rf"{result.parent} \(its run is made again with --resume\)"):
        S.run_benchmark(config, resume=True)
