"""``python -m benchmarks.performance threads``: the stored report is its JSON's rendering and meets its targets."""

from __future__ import annotations

import json

from benchmarks.performance import threads

from . import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def test_the_stored_report_renders_from_its_json_and_meets_the_targets():
    results = json.loads((RESULTS / "threads.json").read_text())
    assert threads.markdown(results) == (RESULTS / "threads.md").read_text()
    busy = results["cases"]["README federated example, beside one busy process"]
    assert busy["auto"]["median"] <= 1.5 * busy["one thread"]["median"]
    for name, case in results["cases"].items():
        if case is not None and "idle" in name:  # large work: auto leaves torch's count
            assert case["auto"]["median"] <= 1.1 * case[threads.TORCH]["median"]


def test_the_child_runs_the_setting_before_the_code():
    assert threads._child("one thread", "assert torch.get_num_threads() == 1") > 0
    assert threads._child("auto", "assert most.get_threads() == 'auto'") > 0
