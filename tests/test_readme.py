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


def test_readme_federated_example_runs():
    code = _block("fedprox_synthetic").replace("rounds=100", "rounds=3")  # the API, not the numbers
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["result"].test_accuracy.shape == (30, 5)


#: shortened so that the blocks run in seconds (the API, not the numbers: the tests above check those)
_SHORTER = {"rounds=1000": "rounds=30", "rounds=100": "rounds=3"}


@pytest.mark.slow
def test_every_readme_python_block_runs_alone_in_a_fresh_interpreter(tmp_path):
    # as a reader pastes it: its own imports, nothing from another block or from the tests
    blocks = _python_blocks()
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        for long, short in _SHORTER.items():
            block = block.replace(long, short)
        out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert out.returncode == 0, f"README python block {i} fails alone:\n{block}\n{out.stderr[-1500:]}"


def test_readme_is_a_front_page_whose_links_resolve():
    # a newcomer reads it in five minutes; the depth lives once, in the docs site
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local, "the README links its docs pages"
    missing = [t for t in local if not (README.parent / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


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
