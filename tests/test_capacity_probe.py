"""The capacity-constrained transport of ``benchmarks/capacity.py`` (a probe of the federated tables)."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
capacity = pytest.importorskip("capacity")


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
    plan = capacity.capacity_plan(torch.tensor(cost), c).numpy()
    n, m = cost.shape
    assert plan.min() >= -1e-12
    np.testing.assert_allclose(plan.sum(1), 1 / n, atol=1e-10)
    assert (plan.sum(0) <= c / m + 1e-10).all()
    assert float((plan * cost).sum()) == pytest.approx(_linprog_capacity(cost, c), abs=1e-9)


def test_capacity_one_is_mosts_balanced_plan_and_m_is_each_rows_best_column():
    from most.methods import TransportAssignment

    cost = torch.tensor(np.random.default_rng(3).uniform(0, 1, size=(12, 3)))
    balanced = TransportAssignment()(cost, 0, 1)
    assert torch.equal(capacity.capacity_plan(cost, 1.0), balanced)  # the same solve, bit for bit
    free = capacity.capacity_plan(cost, 3.0)
    assert torch.equal(free.argmax(1), cost.argmin(1))
    torch.testing.assert_close(free.max(1).values, torch.full((12,), 1 / 12, dtype=torch.float64))


def test_a_missing_comparison_table_is_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        capacity.main(["--dataset", "synthetic", "--seed", "0", "--server-lr", "1", "--out", str(tmp_path / "o"),
                       "--against", str(tmp_path / "nowhere")])
    assert "no results.json there" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_capacity_below_one_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        capacity.capacity_plan(torch.zeros(3, 2), 0.5)
    with pytest.raises(SystemExit):  # on the command line: a usage error before any run
        capacity.main(["--dataset", "synthetic", "--seed", "0", "--server-lr", "1", "--capacity", "0.5",
                       "--out", str(tmp_path / "o")])
    assert "capacity must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_report_on_a_folder_without_the_probe_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        capacity.main(["--report", str(tmp_path)])
    assert "no results.json with 'MosT (capacity)' there" in capsys.readouterr().err


def test_capacity_probe_runs_end_to_end_and_reports_per_capacity(tmp_path):
    out = tmp_path / "cap"
    assert capacity.main(["--dataset", "synthetic", "--seed", "0", "--seed", "1", "--server-lr", "1", "--capacity", "1",
                          "--capacity", "2", "--rounds", "8", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["methods"]) == {"MosT", capacity.NAME}
    # c = 1 solves MosT's problem the same way: its candidate equals MosT's run
    most_val = results["methods"]["MosT"]["runs"][0]["val_accuracy"]
    cands = results["methods"][capacity.NAME]["runs"][0]["candidates_val"]
    assert [c[2] for c in cands if c[1] == 1.0] == [most_val]
    report = (out / "capacity.md").read_text()
    assert "| 1 |" in report and "| 2 |" in report and "chosen on validation" in report
    assert capacity.main(["--report", str(out)]) == 0
    assert (out / "capacity.md").read_text() == report

    # compared seed by seed with a main table: here the probe's own folder, whose MosT is the same
    assert capacity.main(["--report", str(out), "--against", str(out)]) == 0
    compared = (out / "capacity.md").read_text()
    assert re.search(r"\| MosT \| [+-]\d+\.\d\d \[", compared)
    assert f"\n| {capacity.NAME} | " not in compared  # no row for the probe against itself
    other = tmp_path / "other"
    other.mkdir()
    results["methods"]["MosT"]["runs"][0]["mean"] += 0.01  # a table from other code or data
    (other / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match="MosT runs differ"):
        capacity.main(["--report", str(out), "--against", str(other)])
