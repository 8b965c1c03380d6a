"""``python -m benchmarks.performance tasks`` measures what it reports: the builders it times compute the same
problem, and its report holds every section. Runs its tiny ``--quick`` sizes; timings are not
asserted (they are the script's output, not a property)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks.performance import tasks

ROOT = Path(__file__).resolve().parents[2]


def test_the_three_builds_are_one_problem():
    data = tasks.linear_tasks([2, 3], (5, 9), seed=0)
    module, datasets = tasks.module_problem(data), tasks.datasets_problem(data)
    hand = tasks.hand_problem(data, init=module.init)
    params = module.initial_params(3, torch.Generator().manual_seed(0))
    torch.testing.assert_close(datasets.loss_matrix(params), module.loss_matrix(params))
    torch.testing.assert_close(hand.loss_matrix(params), module.loss_matrix(params))
    x, y, mask = tasks.padded(data)
    assert x.shape == (5, 9, 20) and mask.sum() == sum(len(t[0]) for t in data)


def test_the_quick_run_writes_every_section(tmp_path):
    out = tmp_path / "tasks.json"
    res = subprocess.run([sys.executable, "-m", "benchmarks.performance", "tasks", "--quick", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["225 tasks"]["from_datasets"]["max_param_difference"] < 1e-4
    assert {r["tasks"] for r in result["growth"]} == {10, 40}
    assert {r["rule picks"] for r in result["vectorise"]} == {"one product", "vmap", "loop"}
    text = out.with_suffix(".md").read_text()
    for heading in ("## 225 tasks", "## A round against the number of tasks", "## A small CNN on 4 domains",
                    "## The m models in one vmap call"):
        assert heading in text
