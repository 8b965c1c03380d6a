"""The performance suite's pieces run and report what they measure (timings are not asserted:
speed targets live in benchmarks/results/performance.md, measured by `make perf`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

perf_solvers = pytest.importorskip("perf_solvers")
perf_rounds = pytest.importorskip("perf_rounds")
performance = pytest.importorskip("performance")


@pytest.mark.parametrize("method", ["exact", "newton"])
def test_transport_case_reports_a_feasible_converged_solve(method):
    case = {"n": 300, "m": 5, "method": method, "tau": 0.1, "seed": 0, "repeats": 2, "threads": 1,
            "deadline": time.time() + 60}
    row = perf_solvers.transport_case(case)
    assert row["status"] == "ok" and row["converged"]
    assert row["max_marginal_violation"] < 1e-6
    assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]


def test_memory_case_keeps_only_the_served_gradients():
    row = perf_rounds._memory_case(False, 200, 20, 4)
    assert row["max_rows_per_model"] == 50  # uniform marginals: n / m objectives per model
    assert row["jacobian_mb"] == pytest.approx(4 * 4 * 50 * 20 / 2**20)
    assert row["peak_rss_above_inputs_mb"] >= 0


def test_report_marks_met_and_unmet_targets():
    syn = {"wall_seconds": {"median": 0.8, "min": 0.8, "max": 0.9}, "accuracy": 0.84,
           "after_warmup": {"round_seconds": 0.008, "share": {"evaluate": 0.2, "plan": 0.07,
                                                              "local_training": 0.72, "aggregate": 0.01}},
           "all_rounds": {"round_seconds": 0.008, "share": {}}}
    fedavg = dict(syn, all_rounds={"round_seconds": 0.013, "share": {}})
    results = {"rounds": {"syn": [dict(syn, method="MosT"), dict(fedavg, method="FedAvg (m models)")]},
               "target_cases": [{"n": 100_000, "m": 50, "method": "newton", "status": "ok", "median_s": 0.7},
                                {"n": 10_000, "m": 10, "method": "exact", "status": "timeout"}]}
    table = performance.targets_markdown(results)
    assert "| 100-round Syn(0,0) MosT run | 0.80 s (accuracy 84.00 %) | ≤ 1.3 s | yes |" in table
    assert "8.0 % | ≤ 5 % | **no**" in table  # plan + aggregate shares
    assert "0.62× | ≤ 1.15× | yes" in table
    assert "| Γ step n = 10,000, m = 10 | timeout | ≤ 1 s | not measured |" in table


def test_cuda_report_is_the_stored_measurement_and_refuses_a_cpu_only_machine(monkeypatch):
    import json

    import torch

    cuda = pytest.importorskip("perf_cuda")
    results_dir = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    stored = json.loads((results_dir / "cuda.json").read_text())
    assert cuda.markdown(stored) == (results_dir / "cuda.md").read_text()
    assert {row["device"] for row in stored["rows"]} == {"cpu", "cuda"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        cuda.main(["--femnist", "unused"])
