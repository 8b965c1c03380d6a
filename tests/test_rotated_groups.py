"""``benchmarks/rotated_groups.py``: the share of clients a plan puts on their rotation group's model."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
rotated_groups = pytest.importorskip("rotated_groups")


def test_groups_recovered_under_the_best_matching_of_models_to_groups():
    r = 4
    perfect = [(3 - k % r) for k in range(100)]  # group g on model 3 - g: a relabelling
    assert rotated_groups.recovered(perfect, r) == 1.0
    collapsed = [0] * 100  # one model for everyone: one group right
    assert rotated_groups.recovered(collapsed, r) == 0.25
    merged = [min(k % r, 2) for k in range(100)]  # groups 2 and 3 share model 2, model 3 unused
    assert rotated_groups.recovered(merged, r) == 0.75
    five = [k % r if k < 80 else 4 for k in range(100)]  # m = 5 > r: the last 20 on the fifth model
    assert rotated_groups.recovered(five, r) == 0.8
    with pytest.raises(ValueError, match="non-empty"):
        rotated_groups.recovered([], r)


def test_report_refuses_results_without_rotated_groups():
    plain = {"config": {"dataset": "fashion", "rotations": 1, "n_models": 4}, "methods": {}}
    with pytest.raises(ValueError, match="without rotated groups"):
        rotated_groups.report(plain)
    older = {"config": {"dataset": "fashion", "n_models": 4}, "methods": {}}  # before the setting existed
    with pytest.raises(ValueError, match="without rotated groups"):
        rotated_groups.report(older)
    run = {"seed": 0, "server_lr": 3.0, "plans": [[k % 4 for k in range(100)]]}
    table = rotated_groups.report({"config": {"dataset": "fashion", "rotations": 4, "n_models": 4},
                                   "methods": {"MosT": {"runs": [run]}, "FedAvg": {"runs": [{"plans": []}]}}})
    assert "| MosT | 0 | 3 | 1.00 | [25, 25, 25, 25] |" in table and "FedAvg" not in table
    with pytest.raises(ValueError, match="99 clients, not 100"):
        rotated_groups.report({"config": {"dataset": "fashion", "rotations": 4, "n_models": 4},
                               "methods": {"MosT": {"runs": [{**run, "plans": [[0] * 99]}]}}})
