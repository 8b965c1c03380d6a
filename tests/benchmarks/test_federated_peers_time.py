"""``benchmarks/federated_peers_time.py`` writes the report it promises: every method timed, its
ratio to FedAvg, the command. Runs its ``--quick`` sizes; times are its output, not asserted."""

from __future__ import annotations

import json

from tests.benchmarks import script_module

peers = script_module("federated_peers_time")


def test_quick_report_times_every_method_against_fedavg(tmp_path):
    out = tmp_path / "peers.json"
    peers.main(["--quick", "--out", str(out)])
    data = json.loads(out.read_text())
    assert set(data["median"]) == set(peers.METHODS)
    assert data["ratio_to_fedavg"]["FedAvg (m = 5)"] == 1.0
    assert all(t > 0 for t in data["median"].values())
    text = out.with_suffix(".md").read_text()
    assert "python benchmarks/federated_peers_time.py --quick" in text
    assert all(f"| {name} |" in text for name in peers.METHODS)
