"""The performance suite's pieces run and report what they measure (timings are not asserted:
speed targets live in benchmarks/results/performance.md, measured by `make perf`).
``python -m benchmarks.performance`` is run on small inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _perf(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.performance", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)


def _last_json(res: subprocess.CompletedProcess) -> dict:
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("method", ["exact", "newton"])
def test_transport_case_reports_a_feasible_converged_solve(method):
    case = {"n": 300, "m": 5, "method": method, "tau": 0.1, "seed": 0, "repeats": 2, "threads": 1,
            "deadline": time.time() + 60}
    row = _last_json(_perf("solvers", "--case", json.dumps(case)))
    assert row["status"] == "ok" and row["converged"]
    assert row["max_marginal_violation"] < 1e-6
    assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]


def test_memory_case_keeps_only_the_served_gradients():
    row = _last_json(_perf("rounds", "--memory-case", json.dumps([False, 200, 20, 4])))
    assert row["max_rows_per_model"] == 50  # uniform marginals: n / m objectives per model
    assert row["jacobian_mb"] == pytest.approx(4 * 4 * 50 * 20 / 2**20)
    assert row["peak_rss_above_inputs_mb"] >= 0


def test_report_is_the_stored_one_and_marks_met_and_unmet_targets(tmp_path):
    stored = json.loads((RESULTS / "performance.json").read_text())
    (tmp_path / "performance.json").write_text(json.dumps(stored))
    stored_md = (RESULTS / "performance.md").read_text()
    (tmp_path / "performance.md").write_text(stored_md)  # a re-render keeps the growth part's sections
    assert _perf("--render", "--out-dir", tmp_path).returncode == 0
    assert (tmp_path / "performance.md").read_text() == stored_md

    syn = {"wall_seconds": {"median": 0.8, "min": 0.8, "max": 0.9}, "accuracy": 0.84,
           "after_warmup": {"round_seconds": 0.008, "share": {"evaluate": 0.2, "plan": 0.07,
                                                              "local_training": 0.72, "aggregate": 0.01}},
           "all_rounds": {"round_seconds": 0.008, "share": {}}}
    fedavg = dict(syn, all_rounds={"round_seconds": 0.013, "share": {}})
    stored["rounds"]["syn"] = [dict(syn, method="MosT"), dict(fedavg, method="FedAvg (m models)")]
    stored["target_cases"] = [{"n": 100_000, "m": 50, "method": "newton", "status": "ok", "median_s": 0.7},
                              {"n": 10_000, "m": 10, "method": "exact", "status": "timeout"}]
    (tmp_path / "performance.json").write_text(json.dumps(stored))
    assert _perf("--render", "--out-dir", tmp_path).returncode == 0
    table = (tmp_path / "performance.md").read_text()
    assert "| 100-round Syn(0,0) MosT run | 0.80 s (accuracy 84.00 %) | ≤ 1.3 s | yes |" in table
    assert "8.0 % | ≤ 5 % | **no**" in table  # plan + aggregate shares
    assert "0.62× | ≤ 1.15× | yes" in table
    assert "| Γ step n = 10,000, m = 10 | timeout | ≤ 1 s | not measured |" in table


def test_cuda_report_is_the_stored_measurement_and_refuses_a_cpu_only_machine(tmp_path):
    stored = json.loads((RESULTS / "cuda.json").read_text())
    assert {row["device"] for row in stored["rows"]} == {"cpu", "cuda"}
    (tmp_path / "cuda.json").write_text(json.dumps(stored))
    assert _perf("cuda", "--render", "--out-dir", tmp_path).returncode == 0
    assert (tmp_path / "cuda.md").read_text() == (RESULTS / "cuda.md").read_text()
    res = _perf("cuda", "--femnist", "unused", "--out-dir", tmp_path / "new", env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 1 and "needs a CUDA device" in res.stderr and not (tmp_path / "new").exists()


def test_a_render_keeps_the_growth_section_and_replaces_the_rest(tmp_path):
    stored = json.loads((RESULTS / "performance.json").read_text())
    (tmp_path / "performance.json").write_text(json.dumps(stored))
    block = "<!-- growth:start -->\n## Growth with n and d\n\n| n | s |\n<!-- growth:end -->"
    (tmp_path / "performance.md").write_text("an old report\n\n" + block + "\n")
    assert _perf("--render", "--out-dir", tmp_path).returncode == 0
    text = (tmp_path / "performance.md").read_text()
    assert "an old report" not in text and text.startswith("# Performance")
    assert text.endswith("\n\n" + block + "\n") and text.count("growth:start") == 1


def test_the_many_tasks_round_of_the_cuda_suite_runs_on_the_cpu():
    """The suite's ``cuda_tasks_round`` on the CPU alone (its GPU half runs where one is lent): a
    round of the default MosT on many tasks, beside a hand-written pass over the same data."""
    from benchmarks.performance.cuda import cuda_tasks_round

    (row,) = cuda_tasks_round(n=64, rounds=4, devices=("cpu",))
    assert row["device"] == "cpu" and row["case"].startswith("64 tasks x 20 samples")
    assert row["seconds_per_round"] > 0 and row["hand_pass"] > 0
    assert 0 < row["mean_best_loss"] < 10  # 20 features of unit noise, a few rounds in
    assert "max_abs_mean_best_loss_difference" not in row  # one device: nothing to compare


def test_the_profile_of_the_cuda_suite_counts_a_rounds_calls_and_phases_on_the_cpu():
    """The suite's ``cuda_syn_profile`` on the CPU alone (its GPU half runs where one is lent)."""
    from benchmarks.performance.cuda import cuda_syn_profile

    out = cuda_syn_profile(rounds=8, devices=("cpu",))
    assert set(out) == {"cpu"}
    assert out["cpu"]["calls_per_round"]["aten::item"] > 0  # the losses read on the host each round
    assert set(out["cpu"]["phase_seconds_per_round"]) == {"evaluate", "plan", "local_training", "aggregate"}
