"""``benchmarks/federated_tools.py peers-time`` writes the report it promises: every method timed, its
ratio to FedAvg, the command. Runs its ``--quick`` sizes; times are its output, not asserted."""

from __future__ import annotations

import json

from tests.benchmarks import script_module

tools = script_module("federated_tools")


def test_quick_report_times_every_method_against_fedavg(tmp_path):
    out = tmp_path / "peers.json"
    tools.peers_time(["--quick", "--out", str(out)])
    data = json.loads(out.read_text())
    assert set(data["median"]) == set(tools.PEERS)
    assert data["ratio_to_fedavg"]["FedAvg (m = 5)"] == 1.0
    assert all(t > 0 for t in data["median"].values())
    text = out.with_suffix(".md").read_text()
    assert "python benchmarks/federated_tools.py peers-time --quick" in text
    assert all(f"| {name} |" in text for name in tools.PEERS)
