"""``python -m benchmarks.performance run-axis`` measures what it reports: the run axis and the faster local
training end where the baseline revision and the one-by-one runs end (bit for bit), on a few
rounds. Timings are not asserted (they are the script's output, not a property)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.performance import run_axis

ROOT = Path(__file__).resolve().parents[2]


def _has_baseline() -> bool:
    probe = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{run_axis.DEFAULT_BASELINE}^{{commit}}"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _has_baseline(), reason="the baseline revision is not in this clone's history")
def test_the_loop_ends_where_the_baseline_revision_ends(tmp_path):
    baseline = run_axis._worktree(run_axis.DEFAULT_BASELINE, tmp_path / "baseline")
    try:
        loop = run_axis.measure_loop(baseline / "src", repeats=1, rounds=8)  # 3 rounds past MosT's warm-up
    finally:
        run_axis._remove_worktree(baseline)
    assert loop["same_params"] and loop["seconds"] > 0 and loop["baseline_seconds"] > 0


def test_one_seeds_sweep_as_a_batch_ends_where_its_runs_end_one_by_one():
    batch = run_axis.measure_batch(rounds=7)
    assert batch["runs"] == 52 and batch["same_params"]
    assert set(batch["batch_phases"]) == {"evaluate", "plan", "local_training", "aggregate"}


def test_the_report_states_each_number_and_whether_the_runs_agree():
    results = {"command": "python -m benchmarks.performance run-axis --table", "baseline": "abc1234",
               "machine": {"cores": 2, "torch": "2", "numpy": "2", "scipy": "1", "pot": "0.9", "python": "3.11",
                           "measured": "now"},
               "loop": {"rounds": 100, "repeats": 2, "seconds": 0.5, "baseline_seconds": 1.0, "speedup": 2.0,
                        "same_params": True, "accuracy": 0.84, "all_seconds": [0.5, 0.6],
                        "all_baseline_seconds": [1.0, 1.1]},
               "batch": {"runs": 52, "rounds": 100, "batch_seconds": 40.0, "alone_seconds": 60.0, "speedup": 1.5,
                         "same_params": False, "batch_phases": {"local_training": 20.0},
                         "alone_phases": {"local_training": 30.0}},
               "table": {"command": "most bench federated --rho 0.5 0.5 --jobs 2", "batched_seconds": 110.0,
                         "no_batch_seconds": 200.0, "baseline_seconds": 440.0, "same_runs": True}}
    text = run_axis.markdown(results)
    assert "**2.00× faster**" in text and "bit for bit the same" in text
    assert "**1.50×**" in text and "**other** parameters" in text  # a batch that disagreed is said so
    assert "| batched (the default) | 110 |" in text and "4.0× faster than the baseline" in text
    assert "agree run by run" in text


def test_seeds_of_a_centralised_fit_as_one_batch_end_where_their_fits_end():
    central = run_axis.measure_centralised(rounds=6, repeats=1, seeds=2)
    assert set(central) == set(run_axis._CENTRALISED)
    assert all(r["same_params"] and r["alone_seconds"] > 0 and r["batch_seconds"] > 0 for r in central.values())


def test_the_report_states_the_centralised_numbers_and_a_disagreement():
    results = {"command": "python -m benchmarks.performance run-axis --table", "baseline": "abc1234",
               "machine": {"cores": 2, "torch": "2", "numpy": "2", "scipy": "1", "pot": "0.9", "python": "3.11",
                           "measured": "now"},
               "loop": {"rounds": 100, "repeats": 1, "seconds": 0.5, "baseline_seconds": 1.0, "speedup": 2.0,
                        "same_params": True, "accuracy": 0.84, "all_seconds": [0.5], "all_baseline_seconds": [1.0]},
               "batch": {"runs": 52, "rounds": 100, "batch_seconds": 40.0, "alone_seconds": 60.0, "speedup": 1.5,
                         "same_params": True, "batch_phases": {}, "alone_phases": {}},
               "centralised": {"MGDA, ZDT1": {"rounds": 300, "seeds": 5, "repeats": 3, "alone_seconds": 3.0,
                                              "batch_seconds": 2.0, "speedup": 1.5, "same_params": True},
                               "EPO, ZDT1": {"rounds": 300, "seeds": 5, "repeats": 3, "alone_seconds": 6.0,
                                             "batch_seconds": 5.0, "speedup": 1.2, "same_params": False}},
               "few_objective": {"command": "most bench few-objective --jobs 2", "batched_seconds": 170.0,
                                 "no_batch_seconds": 185.0, "same_points": {"zdt1": True, "german": False},
                                 "largest_difference": 1.6e-5}}
    text = run_axis.markdown(results)
    assert "| MGDA, ZDT1 | 3.00 | 2.00 | 1.50× | bit for bit |" in text
    assert "| EPO, ZDT1 | 6.00 | 5.00 | 1.20× | **no** |" in text
    assert "| batched (the default) | 170 |" in text and "**1.09×**" in text
    assert "bit for bit, on zdt1; on german they differ by at most 1.6e-05" in text
