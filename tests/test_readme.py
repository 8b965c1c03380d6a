"""The README's examples run, and the `most` command works as documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch
from typer.testing import CliRunner

from most.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _block(marker: str) -> str:
    """The README's python block that contains ``marker``."""
    found = [b for b in _python_blocks() if marker in b]
    assert len(found) == 1, f"expected one README python block with {marker!r}; found {len(found)}"
    return found[0]


def test_readme_example_runs_and_most_beats_linearization(capsys):
    namespace: dict = {}
    exec(compile(_block("quadratic_clusters"), "README.md", "exec"), namespace)
    result, baseline = namespace["result"], namespace["baseline"]
    assert result.params.shape == (4, 2)
    assert float(result.best_losses().mean()) < 0.2 * float(baseline.best_losses().mean())


def test_readme_variant_snippets_build_methods():
    namespace: dict = {}
    exec(compile(_block("variants.apply"), "README.md", "exec"), namespace)


def test_readme_few_objective_example_runs():
    namespace: dict = {}
    code = _block("problems.zdt").replace("rounds=1000", "rounds=50")  # the API, not the numbers
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["F"].shape == (5, 2)


def test_readme_federated_example_runs():
    code = _block("fedprox_synthetic").replace("rounds=100", "rounds=3")  # the API, not the numbers
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["result"].test_accuracy.shape == (30, 5)


def test_readme_few_for_many_example_runs(capsys):
    namespace: dict = {}
    exec(compile(_block("SumOfMinimum"), "README.md", "exec"), namespace)
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["SumOfMinimum", "STCHSet", "MosT"]


def test_readme_sklearn_example_runs(capsys):
    namespace: dict = {}
    exec(compile(_block("MosTClassifier"), "README.md", "exec"), namespace)
    clf, X, y, groups = (namespace[k] for k in ("clf", "X", "y", "groups"))
    assert clf.score(X, y, groups=groups) > 0.9
    model = clf.group_model_
    assert len(set(model[::3].tolist())) == 1 and set(model[::3].tolist()).isdisjoint(
        set(model[1::3].tolist()) | set(model[2::3].tolist()))  # flipped groups share a model of their own


#: shortened so that the blocks run in seconds (the API, not the numbers: the tests above check those)
_SHORTER = {"rounds=1000": "rounds=30", "rounds=100": "rounds=3"}


@pytest.mark.slow
def test_every_readme_python_block_runs_alone_in_a_fresh_interpreter(tmp_path):
    # as a reader pastes it: its own imports, nothing from another block or from the tests
    blocks = _python_blocks()
    assert len(blocks) >= 6
    for i, block in enumerate(blocks):
        for long, short in _SHORTER.items():
            block = block.replace(long, short)
        out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert out.returncode == 0, f"README python block {i} fails alone:\n{block}\n{out.stderr[-1500:]}"


def test_demo_command_writes_table_results_and_figures(tmp_path):
    out = tmp_path / "demo"
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--rounds", "60", "--quiet"])
    assert res.exit_code == 0, res.output
    assert "MosT" in res.output and "Linearization" in res.output and "MGDA" in res.output
    data = json.loads((out / "results.json").read_text())
    results = data["results"]
    assert results["MosT"]["mean_test_mse"] < results["Linearization"]["mean_test_mse"]
    assert results["MosT"]["mean_test_mse"] < results["MGDA"]["mean_test_mse"]
    for name in ("curves.png", "assignment.png", "per_task.png"):
        assert (out / name).stat().st_size > 1000


def test_demo_rejects_more_models_than_objectives(tmp_path):
    res = CliRunner().invoke(app, ["demo", "--n-objectives", "3", "--n-models", "5", "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "must not exceed" in res.output


def test_help_lists_demo():
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0 and "demo" in res.output


def test_plots_accept_tensors(tmp_path):
    from most import plots

    fig = plots.assignment_heatmap(torch.rand(6, 3), path=tmp_path / "a.png")
    assert (tmp_path / "a.png").exists() and fig is not None
