"""The capacity probe of the federated tables: :mod:`most.bench._capacity` (MosT whose models serve
at most c n / m clients each, :func:`most.transport.solve_capacity`) and its command line,
``benchmarks/federated_tools.py capacity``, run as a script."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from most.bench import _capacity as cap
from most.methods import TransportAssignment

ROOT = Path(__file__).resolve().parents[2]


def _probe(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "federated_tools.py"), "capacity", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def _linprog_capacity(cost: np.ndarray, c: float) -> float:
    """Optimal value of min <C, G> s.t. rows = 1/n, columns <= c/m, G >= 0."""
    n, m = cost.shape
    rows = np.kron(np.eye(n), np.ones((1, m)))  # sum_j G_ij
    cols = np.kron(np.ones((1, n)), np.eye(m))  # sum_i G_ij
    res = linprog(cost.ravel(), A_ub=cols, b_ub=np.full(m, c / m), A_eq=rows, b_eq=np.full(n, 1 / n),
                  bounds=(0, None), method="highs")
    assert res.status == 0
    return res.fun


@pytest.mark.parametrize("c", [1.0, 1.5, 2.0, 3.0])
def test_capacity_plan_is_feasible_and_optimal_against_linprog(c):
    rng = np.random.default_rng(int(10 * c))
    cost = rng.uniform(0, 3, size=(17, 4))
    plan = cap.CapacityAssignment(c)(torch.tensor(cost), 0, 1).numpy()
    n, m = cost.shape
    assert plan.min() >= -1e-12
    np.testing.assert_allclose(plan.sum(1), 1 / n, atol=1e-10)
    assert (plan.sum(0) <= c / m + 1e-10).all()
    assert float((plan * cost).sum()) == pytest.approx(_linprog_capacity(cost, c), abs=1e-9)


def test_capacity_one_is_mosts_balanced_plan_and_m_is_each_rows_best_column():
    cost = torch.tensor(np.random.default_rng(3).uniform(0, 1, size=(12, 3)))
    balanced = TransportAssignment()(cost, 0, 1)
    assert torch.equal(cap.CapacityAssignment(1.0)(cost, 0, 1), balanced)  # the same solve, bit for bit
    free = cap.CapacityAssignment(3.0)(cost, 0, 1)
    assert torch.equal(free.argmax(1), cost.argmin(1))
    torch.testing.assert_close(free.max(1).values, torch.full((12,), 1 / 12, dtype=torch.float64))


def test_capacity_below_one_is_refused(monkeypatch):
    for bad in (0.5, float("nan"), float("inf"), True, "x"):
        with pytest.raises(ValueError, match="capacity must be >= 1"):
            cap.CapacityAssignment(bad)
    monkeypatch.setitem(cap.fb.METHODS, cap.NAME, None)  # removed again after the test
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        cap.register((1.0, 0.5))


@pytest.mark.parametrize("args, message", [
    (["--dataset", "synthetic", "--seed", "0", "--server-lr", "1", "--against", "{tmp}/nowhere"], "no results.json there"),
    (["--dataset", "synthetic", "--seed", "0", "--server-lr", "1", "--capacity", "0.5"], "capacity must be >= 1"),
    (["--report", "{tmp}"], "no results.json with 'MosT (capacity)' there"),
])
def test_the_command_line_refuses_bad_arguments_before_any_run(tmp_path, args, message):
    res = _probe(*[a.format(tmp=tmp_path) for a in args], "--out", tmp_path / "o")
    assert res.returncode == 2 and message in res.stderr
    assert not (tmp_path / "o").exists()


def test_capacity_probe_runs_end_to_end_and_reports_per_capacity(tmp_path):
    out = tmp_path / "cap"
    res = _probe("--dataset", "synthetic", "--seed", "0", "--seed", "1", "--server-lr", "1", "--capacity", "1",
                 "--capacity", "2", "--rounds", "8", "--out", out)
    assert res.returncode == 0, res.stderr
    results = json.loads((out / "results.json").read_text())
    assert set(results["methods"]) == {cap.BASE, cap.NAME}
    # c = 1 solves the balanced MosT's problem the same way: its candidate equals that run
    most_val = results["methods"][cap.BASE]["runs"][0]["val_accuracy"]
    cands = results["methods"][cap.NAME]["runs"][0]["candidates_val"]
    assert [c[2] for c in cands if c[1] == 1.0] == [most_val]
    report = (out / "capacity.md").read_text()
    assert "| 1 |" in report and "| 2 |" in report and "chosen on validation" in report
    assert report in res.stdout
    assert cap.write_report(results, out) == report  # --report rewrites the same file
    res = _probe("--report", out)
    assert res.returncode == 0 and (out / "capacity.md").read_text() == report

    # compared seed by seed with a main table: here the probe's own folder, whose base is the same
    compared = cap.write_report(results, out, out)
    assert re.search(r"\| MosT \(balanced\) \| [+-]\d+\.\d\d \[", compared)
    assert f"\n| {cap.NAME} | " not in compared  # no row for the probe against itself
    other = tmp_path / "other"
    other.mkdir()
    results["methods"][cap.BASE]["runs"][0]["mean"] += 0.01  # a table from other code or data
    (other / "results.json").write_text(json.dumps(results))
    with pytest.raises(ValueError, match=r"MosT \(balanced\) runs differ"):
        cap.against(json.loads((out / "results.json").read_text()), results)
    res = _probe("--report", out, "--against", other)
    assert res.returncode == 1 and "MosT (balanced) runs differ" in res.stderr
