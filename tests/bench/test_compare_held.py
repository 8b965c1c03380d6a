"""The table's "groups held" added to older results: :func:`most.bench._compare.planted_groups`,
:func:`~most.bench._compare.add_groups_held` and ``benchmarks/federated_tools.py held FOLDER``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from most.bench import _compare
from most.federated.evaluation import adjusted_rand_index

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks" / "results" / "federated" / "concept_shift"


def test_planted_groups_are_the_loaders_blocks_or_rotations():
    assert _compare.planted_groups({"dataset": "fashion", "label_groups": [2, 3]}) == [0, 0, 1, 1, 1]
    assert _compare.planted_groups({"dataset": "fashion", "rotation_groups": [1, 2], "rotations": 1}) == [0, 1, 1]
    assert _compare.planted_groups({"dataset": "fashion", "rotations": 4})[:6] == [0, 1, 2, 3, 0, 1]
    assert _compare.planted_groups({"dataset": "fashion", "rotations": 1}) is None
    assert _compare.planted_groups({"dataset": "synthetic", "rho": [0, 0]}) is None


def _results(runs_by_method, picks=None):
    return {"config": {"dataset": "fashion", "label_groups": [2, 4]},
            "picks": picks or {name: "best on validation" for name in runs_by_method},
            "methods": {name: {"runs": runs} for name, runs in runs_by_method.items()}}


def test_held_is_the_last_plan_or_the_assignment_the_method_is_scored_on():
    groups = [0, 0, 1, 1, 1, 1]
    late = [0, 0, 1, 1, 1, 0]  # one client of group 1 on group 0's model at the end
    results = _results(
        {"MosT": [{"seed": 0, "mean": 0.7, "group_ari": 0.5, "plans": [[0] * 6, late]},
                  {"seed": 1, "mean": 0.8, "group_ari": 0.5, "plans": [[1, 1, 0, 0, 0, 0]]}],
         "CFL": [{"seed": s, "mean": 0.6, "group_ari": 0.25, "plans": []} for s in (0, 1)],
         "FedAvg": [{"seed": s, "mean": 0.5, "group_ari": 0.0, "plans": []} for s in (0, 1)],
         "Local only": [{"seed": s, "mean": 0.5, "plans": []} for s in (0, 1)]},
        picks={"MosT": "best on validation", "CFL": "its cluster's model", "FedAvg": "best on validation",
               "Local only": "its own model"})
    assert _compare.add_groups_held(results) == ["MosT", "CFL"]
    most = results["methods"]["MosT"]
    assert [r["group_ari_plan"] for r in most["runs"]] == [pytest.approx(adjusted_rand_index(late, groups)), 1.0]
    assert most["group_ari_plan"]["mean"] == pytest.approx((adjusted_rand_index(late, groups) + 1.0) / 2)
    assert results["methods"]["CFL"]["runs"][0]["group_ari_plan"] == 0.25  # its clusters are its picks
    assert "group_ari_plan" not in results["methods"]["FedAvg"]["runs"][0]  # no plan, picks on validation
    assert "group_ari_plan" not in results["methods"]["Local only"]["runs"][0]  # one model per client
    assert _compare.add_groups_held(results) == []  # already there: left as it is
    short = _results({"MosT": [{"seed": 3, "group_ari": 1.0, "plans": [[0] * 5]}]})
    with pytest.raises(ValueError, match="seed 3: 5 clients in the last plan, not 6"):
        _compare.add_groups_held(short)
    with pytest.raises(ValueError, match="no planted client groups"):
        _compare.add_groups_held({"config": {"dataset": "synthetic"}, "methods": {}})


def test_the_command_reproduces_the_stored_concept_shift_table(tmp_path):
    folder = tmp_path / "concept_shift"
    folder.mkdir()
    results = json.loads((STORED / "results.json").read_text())
    for entry in results["methods"].values():  # as written before the bench recorded the groups held
        entry.pop("group_ari_plan", None)
        for run in entry["runs"]:
            run.pop("group_ari_plan", None)
    (folder / "results.json").write_text(json.dumps(results))  # the compact results a clone holds
    script = [sys.executable, str(ROOT / "benchmarks" / "federated_tools.py"), "held"]
    res = subprocess.run([*script, str(folder)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "groups held added for MosT," in res.stdout
    assert (folder / "table.md").read_text() == (STORED / "table.md").read_text()
    written = json.loads((folder / "results.json").read_text())
    assert written["figures"] == results["figures"] and not list(folder.glob("*.png"))  # figures not redrawn
    assert [r["group_ari_plan"] for r in written["methods"]["MosT"]["runs"]] == [1.0] * 5
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "results.json").write_text(json.dumps({"config": {"dataset": "synthetic"}, "methods": {}}))
    res = subprocess.run([*script, str(plain)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 2 and "no planted client groups" in res.stderr and not (plain / "table.md").exists()
