"""The share of clients a plan puts on their rotation group's model: :func:`most.bench._compare.recovered`
and ``groups.md`` (:func:`~most.bench._compare.groups_report`), written by
``benchmarks/federated_tools.py groups FOLDER``, run as a script."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from most.bench import _compare

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks" / "results" / "federated" / "rotated" / "fashion_4"


def test_groups_recovered_under_the_best_matching_of_models_to_groups():
    r = 4
    perfect = [(3 - k % r) for k in range(100)]  # group g on model 3 - g: a relabelling
    assert _compare.recovered(perfect, r) == 1.0
    collapsed = [0] * 100  # one model for everyone: one group right
    assert _compare.recovered(collapsed, r) == 0.25
    merged = [min(k % r, 2) for k in range(100)]  # groups 2 and 3 share model 2, model 3 unused
    assert _compare.recovered(merged, r) == 0.75
    five = [k % r if k < 80 else 4 for k in range(100)]  # m = 5 > r: the last 20 on the fifth model
    assert _compare.recovered(five, r) == 0.8
    with pytest.raises(ValueError, match="non-empty"):
        _compare.recovered([], r)
    # groups of unequal size (--rotation-group 10 20 30 40): consecutive blocks of clients
    sizes = (10, 20, 30, 40)
    blocks = [g for g, size in enumerate(sizes) for _ in range(size)]
    assert _compare.recovered([3 - g for g in blocks], r, sizes) == 1.0
    assert _compare.recovered([0] * 100, r, sizes) == 0.4  # one model: the largest group right
    assert _compare.recovered([min(g, 2) for g in blocks], r, sizes) == 0.7  # groups 2, 3 share: 10 + 20 + 40
    with pytest.raises(ValueError, match="do not describe"):
        _compare.recovered(blocks, r, (10, 20, 30))
    table = _compare.groups_report({"config": {"dataset": "fashion", "rotations": 1, "rotation_groups": list(sizes),
                                               "n_models": 4},
                                    "methods": {"MosT": {"runs": [{"seed": 0, "server_lr": 1.0, "plans": [blocks]}]}}})
    assert "| MosT | 0 | 1 | 1.00 | [10, 20, 30, 40] |" in table


def test_report_refuses_results_without_rotated_groups():
    plain = {"config": {"dataset": "fashion", "rotations": 1, "n_models": 4}, "methods": {}}
    with pytest.raises(ValueError, match="without rotated groups"):
        _compare.groups_report(plain)
    older = {"config": {"dataset": "fashion", "n_models": 4}, "methods": {}}  # before the setting existed
    with pytest.raises(ValueError, match="without rotated groups"):
        _compare.groups_report(older)
    run = {"seed": 0, "server_lr": 3.0, "plans": [[k % 4 for k in range(100)]]}
    table = _compare.groups_report({"config": {"dataset": "fashion", "rotations": 4, "n_models": 4},
                                   "methods": {"MosT": {"runs": [run]}, "FedAvg": {"runs": [{"plans": []}]}}})
    assert "| MosT | 0 | 3 | 1.00 | [25, 25, 25, 25] |" in table and "FedAvg" not in table
    with pytest.raises(ValueError, match="99 clients, not 100"):
        _compare.groups_report({"config": {"dataset": "fashion", "rotations": 4, "n_models": 4},
                               "methods": {"MosT": {"runs": [{**run, "plans": [[0] * 99]}]}}})


def test_the_command_writes_groups_md_and_it_is_the_stored_report(tmp_path):
    folder = tmp_path / "fashion_4"
    folder.mkdir()
    shutil.copy(STORED / "results.json", folder)
    script = [sys.executable, str(ROOT / "benchmarks" / "federated_tools.py"), "groups"]
    res = subprocess.run([*script, str(folder)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    assert (folder / "groups.md").read_text() == (STORED / "groups.md").read_text()  # the table, reproduced
    assert _compare.groups_report(json.loads((STORED / "results.json").read_text())) == (
        STORED / "groups.md").read_text()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "results.json").write_text(json.dumps({"config": {"dataset": "fashion", "rotations": 1, "n_models": 4},
                                                    "methods": {}}))
    res = subprocess.run([*script, str(plain)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 2 and "without rotated groups" in res.stderr and not (plain / "groups.md").exists()
