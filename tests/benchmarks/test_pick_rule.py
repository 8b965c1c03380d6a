"""``benchmarks/federated_tools.py pick-rule`` re-runs the methods asked for and keeps the stored
runs of the others only where they were made with the same seeds and server step. The runs
themselves are replaced by fixed rows: what is tested is how a call joins the stored results."""

from __future__ import annotations

import json

from tests.benchmarks import script_module

tools = script_module("federated_tools")


def _rows(value):
    return [{"seed": s, "seconds": 0.0, **{rule: value for rule in tools.RULES}} for s in range(5)]


def _call(monkeypatch, tmp_path, methods, value, server_lr="3"):
    monkeypatch.setattr(tools, "RESULTS", tmp_path)
    monkeypatch.setattr(tools, "pick_rule_run", lambda dataset, names, seeds, lr, path: {n: _rows(value) for n in names})
    argv = ["--dataset", "synthetic", "--server-lr", server_lr]
    for name in methods:
        argv += ["--method", name]
    tools.pick_rule(argv)
    return json.loads((tmp_path / "pick_rule.json").read_text())["Syn(0,0)"]


def test_a_method_run_alone_replaces_its_rows_and_keeps_the_others_in_their_order(monkeypatch, tmp_path):
    _call(monkeypatch, tmp_path, ["MosT", "IFCA"], 0.5)
    stored = _call(monkeypatch, tmp_path, ["MosT"], 0.75)
    assert list(stored["methods"]) == ["MosT", "IFCA"]
    assert stored["methods"]["MosT"][0]["pooled loss"] == 0.75
    assert stored["methods"]["IFCA"][0]["pooled loss"] == 0.5
    assert stored["command"].endswith("(the IFCA runs kept from the call before)")
    assert "| IFCA | 50.00 ± 0.00" in (tmp_path / "pick_rule.md").read_text()


def test_runs_made_with_another_server_step_are_not_kept(monkeypatch, tmp_path):
    _call(monkeypatch, tmp_path, ["MosT", "IFCA"], 0.5)
    stored = _call(monkeypatch, tmp_path, ["MosT"], 0.75, server_lr="5")
    assert list(stored["methods"]) == ["MosT"]
    assert "kept" not in stored["command"]
