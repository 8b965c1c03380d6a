"""The few-objective benchmark: the command end to end, its figures, its bad input, and the
recommended MosT-E setting reaching 99 % of the 5-point hypervolume limit on ZDT1 and ZDT2."""

import json
import re
import warnings

import numpy as np
import pytest
import torch
from tests._shared import SHARED_DATA
from typer.testing import CliRunner

import most
from most.bench.few_objective import METHODS, FewObjectiveConfig
from most.cli import app
from most.metrics import best_hypervolume_2d, hypervolume
from most.problems import zdt

runner = CliRunner()


def _flat(output: str) -> str:
    """The CLI's error text without the box drawing and line wrapping of its panel."""
    return re.sub(r"[\s│╭╮╰╯─]+", "", output)


def test_bench_command_writes_results_table_and_figures(tmp_path):
    out = tmp_path / "fo"
    res = runner.invoke(app, ["bench", "few-objective", "--out", str(out), "--problem", "zdt1", "--problem",
                              "synthetic", "--method", "MosT-E (Tchebycheff)", "--method", "MGDA", "--seed", "0",
                              "--seed", "1", "--zdt-rounds", "20", "--fairness-rounds", "10", "--quiet"])
    assert res.exit_code == 0, res.output
    results = json.loads((out / "results.json").read_text())
    assert set(results["problems"]) == {"zdt1", "synthetic"}
    for block in results["problems"].values():
        assert set(block["methods"]) == {"MosT-E (Tchebycheff)", "MGDA"}
        for entry in block["methods"].values():
            assert [r["seed"] for r in entry["runs"]] == [0, 1]
            for r in entry["runs"]:
                pts = np.asarray(r["points"])
                assert pts.shape == (5, 2)
                ref = block["reference_point"]
                assert r["hv"] == pytest.approx(float(hypervolume(pts, ref)), rel=1e-9)
            assert entry["hv_mean"] == pytest.approx(np.mean([r["hv"] for r in entry["runs"]]))
    # fairness: one test reference point shared by all methods and seeds = the upper bounds of their points
    runs = [r for e in results["problems"]["synthetic"]["methods"].values() for r in e["runs"]]
    upper = np.max([np.asarray(r["points"]).max(0) for r in runs], 0)
    np.testing.assert_allclose(results["problems"]["synthetic"]["reference_point"], upper)
    assert all(r["lr"] in (0.01, 0.05) for r in runs)
    table = (out / "table.md").read_text()
    assert "MosT-E (Tchebycheff)" in table and "5.900" in table  # the ZDT1 5-point limit
    for name in ("zdt1", "synthetic"):
        assert (out / f"pareto_{name}.png").stat().st_size > 1000
        assert (out / f"hv_area_{name}.png").stat().st_size > 1000


def _without_seconds(problems: dict) -> dict:
    for block in problems.values():
        for entry in block["methods"].values():
            entry.pop("seconds_mean")
            for run in entry["runs"]:
                run.pop("seconds")
    return problems


def test_batched_runs_give_the_results_of_runs_one_by_one(tmp_path):
    # every method's seeds (and on the fairness data its learning rates and variants) as one
    # most.fit_batch: the same numbers, run by run, as --no-batch
    def call(out, *extra):
        res = runner.invoke(app, ["bench", "few-objective", "--out", str(out), "--problem", "zdt3", "--problem",
                                  "synthetic", "--seed", "0", "--seed", "1", "--zdt-rounds", "12",
                                  "--fairness-rounds", "6", "--quiet", *extra])
        assert res.exit_code == 0, res.output
        return json.loads((out / "results.json").read_text())

    batched, alone = call(tmp_path / "batched"), call(tmp_path / "alone", "--no-batch")
    batched, alone = _without_seconds(batched["problems"]), _without_seconds(alone["problems"])
    assert set(batched["zdt3"]["methods"]) == set(METHODS)  # every method, the plain MosT row too
    assert batched["zdt3"] == alone["zdt3"]  # bit for bit: ZDT computes each model on its own
    # the fairness losses multiply the data by all models' parameters at once, a product the
    # backend blocks by the number of models: the same runs to round-off
    for name, entry in alone["synthetic"]["methods"].items():
        other = batched["synthetic"]["methods"][name]
        assert [r["lr"] for r in other["runs"]] == [r["lr"] for r in entry["runs"]]
        np.testing.assert_allclose([r["points"] for r in other["runs"]], [r["points"] for r in entry["runs"]],
                                   rtol=1e-4, atol=1e-6)


def test_the_table_names_the_limit_by_its_number_of_points(tmp_path):
    out = tmp_path / "fo"
    res = runner.invoke(app, ["bench", "few-objective", "--out", str(out), "--problem", "zdt1", "--method", "MGDA",
                              "--seed", "0", "--zdt-rounds", "2", "--n-models", "2", "--quiet"])
    assert res.exit_code == 0, res.output
    table = (out / "table.md").read_text()
    limit = best_hypervolume_2d(zdt("zdt1").metadata["front"], zdt("zdt1").metadata["reference_point"], 2)
    assert f"| *2-point limit* | {limit:.3f} |" in table and "5-point" not in table


def test_bench_bad_input_is_refused_before_any_work(tmp_path):
    res = runner.invoke(app, ["bench", "few-objective", "--out", str(tmp_path), "--method", "NSGA-II", "--quiet"])
    assert res.exit_code != 0 and "Unknown method" in res.output
    res = runner.invoke(app, ["bench", "few-objective", "--out", str(tmp_path), "--problem", "german",
                              "--german-path", str(tmp_path / "nowhere"), "--quiet"])
    assert res.exit_code != 0 and "german.data" in _flat(res.output)
    assert not (tmp_path / "results.json").exists()
    with pytest.raises(ValueError, match="Unknown problem"):
        FewObjectiveConfig(problems=("zdt4",))
    res = runner.invoke(app, ["bench", "few-objective", "--list-methods"])
    assert res.exit_code == 0 and all(m in res.output for m in METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zdt1", "zdt2"])
def test_recommended_most_e_reaches_99_percent_of_the_five_point_limit(name):
    problem = zdt(name)
    ref = problem.metadata["reference_point"]
    limit = best_hypervolume_2d(problem.metadata["front"], ref, 5)
    method = METHODS["MosT-E (Tchebycheff)"].build(n_models=5, rounds=1000, lr=5e-3, seed=0, ideal=(0.0, 0.0))
    F = problem.loss_matrix(method.fit(problem).params).T
    assert float(hypervolume(F, ref)) >= 0.99 * limit
    # spread along the whole front: both ends and the middle are covered
    f1 = np.sort(F[:, 0].numpy())
    assert f1[0] < 0.01 and f1[-1] > 0.8 and np.diff(f1).min() > 0.1, f1


def test_min_norm_on_float32_nearly_collinear_gradients_converges_without_stalling():
    # MosT-E's linear mixtures give rows g_i = w_i a + (1 - w_i) b: collinear up to float32
    # rounding. The float32 tolerance must stop at the optimum instead of chasing the noise.
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, generator=g), torch.randn(50, generator=g) + 2.0
    w = torch.rand(6, generator=g)
    jac = (w[:, None] * a + (1 - w[:, None]) * b)[None].float()  # [1, 6, 50]
    with warnings.catch_warnings():
        warnings.simplefilter("error", most.ConvergenceWarning)
        direction, lam = most.MinNorm()(jac, torch.ones(1, 6))
    # exact answer: min-norm point of the segment between the extreme rows
    lo, hi = jac[0, w.argmin()].double(), jac[0, w.argmax()].double()
    t = ((lo - hi) @ lo / (lo - hi).square().sum()).clamp(0, 1)
    expected = lo + t * (hi - lo)
    torch.testing.assert_close(direction[0].double(), expected, atol=1e-4 * float(expected.norm()), rtol=0)
    assert float(lam.sum()) == pytest.approx(1.0, abs=1e-6)


def test_the_stored_table_is_what_the_bench_writes_from_its_results_file():
    from pathlib import Path

    from most.bench.few_objective import table_markdown

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "few_objective"
    results = json.loads((folder / "results.json").read_text())
    assert table_markdown(results) + "\n" == (folder / "table.md").read_text()


GERMAN = SHARED_DATA / "german_credit"


@pytest.mark.skipif(not (GERMAN / "german.data").is_file(), reason=f"German credit not found at {GERMAN}")
def test_a_resumed_call_compares_the_german_data_by_its_digest_not_by_its_path(tmp_path, monkeypatch):
    lines = (GERMAN / "german.data").read_text().splitlines(keepends=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "german.data").write_text("".join(lines))
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "shuffled").mkdir()
    (tmp_path / "shuffled" / "german.data").write_text("".join(lines[::-1]))  # the same rows in another order
    out = tmp_path / "out"
    args = ["bench", "few-objective", "--out", str(out), "--problem", "german", "--method", "MGDA", "--seed", "0",
            "--fairness-rounds", "3", "--quiet"]

    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(tmp_path / "a"))
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    results = sorted((out / "runs").rglob("result.json"))
    stored = [(p.read_bytes(), p.stat().st_mtime_ns) for p in results]
    settings = json.loads((results[0].parent / "config.json").read_text())["settings"]
    assert settings["german_path"] is None and settings["german_file"] == str((tmp_path / "a" / "german.data").resolve())
    assert len(settings["data_digest"]) == 16 and "zdt_rounds" not in settings  # a setting of the ZDT runs

    # the same data through a link, from the environment or given
    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(tmp_path / "link"))
    res = runner.invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, [*args, "--resume", "--german-path", str(tmp_path / "link")])
    assert res.exit_code == 0, res.output
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in results] == stored  # reused, not made again

    # other data under the first path
    monkeypatch.setenv("MOST_GERMAN_CREDIT", str(tmp_path / "shuffled"))
    res = runner.invoke(app, [*args, "--resume"])
    assert res.exit_code != 0 and "othersettings:data_digest" in _flat(res.output)
    assert "thedatareadnowisnotthedatatherunsweremadewith" in _flat(res.output)


def test_a_resumed_call_may_add_problems_whose_settings_the_first_did_not_use(tmp_path):
    def args(*problems_and_extra):
        return ["bench", "few-objective", "--out", str(tmp_path), "--method", "MGDA", "--seed", "0",
                "--zdt-rounds", "5", "--quiet", *problems_and_extra]

    res = runner.invoke(app, args("--problem", "zdt1"))
    assert res.exit_code == 0, res.output
    zdt_run = next((tmp_path / "runs" / "zdt1").rglob("result.json"))
    stored = zdt_run.stat().st_mtime_ns
    # the ZDT run does not use the fairness settings: another value does not block adding a fairness problem
    res = runner.invoke(app, args("--problem", "zdt1", "--problem", "synthetic", "--fairness-rounds", "3", "--resume"))
    assert res.exit_code == 0, res.output
    assert set(json.loads((tmp_path / "results.json").read_text())["problems"]) == {"zdt1", "synthetic"}
    assert zdt_run.stat().st_mtime_ns == stored
    # a call without the fairness problem does not judge its runs
    res = runner.invoke(app, args("--problem", "zdt1", "--fairness-rounds", "4", "--resume"))
    assert res.exit_code == 0, res.output
    # a call with it does
    res = runner.invoke(app, args("--problem", "synthetic", "--fairness-rounds", "4", "--resume"))
    assert res.exit_code != 0 and "othersettings:fairness_rounds(3then,4now)" in _flat(res.output)
