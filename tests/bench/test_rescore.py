"""most.bench._rescore: a federated table made with --keep-matrices, scored under another pick rule."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from most.bench import _merge
from most.bench import _rescore as rs
from most.bench._curves import load_results
from most.cli import app
from most.federated import evaluation as ev

runner = CliRunner()
SCRIPT = [sys.executable, str(Path(__file__).resolve().parents[2] / "benchmarks" / "federated_tools.py"), "rescore"]


def _concept_shift(tmp_path, out, *args):
    from tests.federated.test_data import _tiny_fashion

    data = tmp_path / "fashion"
    if not data.is_dir():
        data.mkdir()
        _tiny_fashion(data, n_train=400, n_test=80)
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--data-path", str(data), "--model",
                              "linear", "--label-group", "2", "--label-group", "4", "--concentration", "100",
                              "--samples-per-client", "12", "--n-models", "3", "--rounds", "7", "--server-lr", "1",
                              "--server-lr", "2", "--method", "MosT", "--method", "IFCA", "--method", "FedAvg",
                              "--method", "FedEM", "--out", str(out), "--quiet", *args])
    assert res.exit_code == 0, res.output
    return load_results(out)


def _stored_view(results) -> str:
    """The results but for the rule's name and the figures' list, as JSON text (NaN equal to NaN)."""
    return json.dumps({k: v for k, v in results.items() if k not in ("pick_rule", "figures")}, sort_keys=True)


def test_the_paper_rule_reproduces_the_table_and_the_loss_rule_its_loss_pick_columns(tmp_path):
    results = _concept_shift(tmp_path, tmp_path / "a", "--seed", "0", "--seed", "1", "--keep-matrices")
    # the matrices go to curves.json, with the series; results.json stays compact
    assert all("matrices" not in r for e in json.loads((tmp_path / "a" / "results.json").read_text())["methods"].values()
               for r in e["runs"])
    n = 6
    for name, entry in results["methods"].items():
        for r in entry["runs"]:
            mats = r["matrices"]
            assert mats["groups"] == [0, 0, 1, 1, 1, 1] and len(mats["test_sizes"]) == n
            assert mats["assigned"] == (name == "FedEM")  # IFCA picks on validation too
            width = 1 if name == "FedEM" else 3  # a mixture is one column
            for key in ("val_accuracy", "test_accuracy", "selection_loss"):
                assert np.array(mats[key], dtype=float).shape == (n, width), (name, key)
            # the stored choice is the paper's pick of the stored matrix (for the methods that pick)
            if not mats["assigned"]:
                assert mats["choice"] == ev.select_models(np.nan_to_num(np.array(mats["val_accuracy"], dtype=float),
                                                                        nan=-1.0)).tolist()

    same = rs.rescore(results, "validation")
    assert same["pick_rule"] == "validation"
    assert _stored_view(same) == _stored_view(results)  # every number, summary and interval

    by_loss = rs.rescore(results, "loss")
    for name, entry in by_loss["methods"].items():
        for r, before in zip(entry["runs"], results["methods"][name]["runs"]):
            if before["matrices"]["assigned"]:
                assert r == before  # no rule re-picks for a method that assigns
            else:  # the bench's own loss-pick columns, made again from the matrices
                assert r["mean"] == pytest.approx(before["mean_loss_pick"])
                assert r["worst20"] == pytest.approx(before["worst20_loss_pick"])
                assert r["choice_counts"] == before["choice_counts_loss_pick"]
                assert r["group_ari"] == pytest.approx(before["group_ari_loss_pick"])
            assert r["oracle"] == before["oracle"] or name == "FedEM"  # a mixture has no oracle (NaN)
    assert by_loss["paired_vs_most"]["FedAvg"]["mean"] == pytest.approx(
        by_loss["paired_vs_most_loss_pick"]["FedAvg"]["mean"])

    ties = rs.rescore(results, "validation-then-loss")
    for name, entry in ties["methods"].items():
        for r, before in zip(entry["runs"], results["methods"][name]["runs"]):
            mats = before["matrices"]
            if mats["assigned"]:
                continue
            val = np.nan_to_num(np.array(mats["val_accuracy"], dtype=float), nan=-1.0)
            loss = np.array(mats["selection_loss"], dtype=float)
            test = np.array(mats["test_accuracy"], dtype=float)
            choice = ev.select_models(val, loss=loss)
            assert r["matrices"]["choice"] == choice.tolist()
            assert r["mean"] == pytest.approx(test[np.arange(n), choice].mean())
            # a tie-break never changes a client's validation accuracy, only which tied model it takes
            assert (val[np.arange(n), choice] == val.max(1)).all()


def test_a_tie_on_validation_goes_to_the_lower_loss_and_clients_without_samples_are_left_out():
    nan = float("nan")
    run = {"seed": 7, "mean": 0.0, "group_ari": 0.0, "matrices": {
        # client 0: both models wrong on its one validation image (a tie); model 1 is its group's
        # client 1: no validation sample (NaN row); client 2: no test sample
        "val_accuracy": [[0.0, 0.0], [nan, nan], [1.0, 0.0]],
        "test_accuracy": [[0.0, 1.0], [0.5, 0.75], [nan, nan]],
        "selection_loss": [[3.0, 0.5], [0.9, 0.2], [0.1, 2.0]],
        "choice": [0, 0, 0], "assigned": False, "test_sizes": [4, 4, 0], "groups": [1, 1, 0]}}
    paper = rs.repick(run, "validation")
    # as the runtime picks: client 1, without validation samples, takes its lowest loss
    assert paper["matrices"]["choice"] == [0, 1, 0] and paper["mean"] == pytest.approx(0.375)
    tie = rs.repick(run, "validation-then-loss")
    assert tie["matrices"]["choice"] == [1, 1, 0]  # client 1's row is all tied (-1): the loss decides
    assert tie["mean"] == pytest.approx((1.0 + 0.75) / 2)  # client 2 has no test accuracy: left out
    assert np.isnan(tie["per_client"][2]) and tie["choice_counts"] == [0, 2]
    assert tie["group_ari"] == 1.0
    assert run["matrices"]["choice"] == [0, 0, 0]  # the input is not changed
    assert rs.repick(run, "loss")["matrices"]["choice"] == [1, 1, 0]
    assert rs.repick({**run, "failed": "diverged"}, "loss")["mean"] == 0.0  # nothing to pick from

    no_loss = {**run, "matrices": {**run["matrices"], "selection_loss": None}}
    assert rs.repick(no_loss, "validation")["matrices"]["choice"] == [0, 0, 0]
    with pytest.raises(rs.RescoreError, match="no selection loss"):
        rs.repick(no_loss, "validation-then-loss")
    with pytest.raises(rs.RescoreError, match="Unknown pick rule 'first'"):
        rs.repick(run, "first")
    with pytest.raises(rs.RescoreError, match="--keep-matrices"):
        rs.repick({"seed": 7, "mean": 0.5}, "loss")


def test_the_command_writes_another_folder_and_refuses_tables_without_matrices(tmp_path):
    _concept_shift(tmp_path, tmp_path / "a", "--seed", "0", "--keep-matrices")
    res = subprocess.run([*SCRIPT, str(tmp_path / "a"), "--pick", "validation-then-loss", "--out",
                          str(tmp_path / "t")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "t" / "table.md").read_text()
    assert "Scored again under the pick rule 'validation-then-loss'" in table and "except: FedEM" in table
    assert res.stdout.strip() == table.strip()
    assert json.loads((tmp_path / "t" / "results.json").read_text())["pick_rule"] == "validation-then-loss"
    assert (tmp_path / "t" / "per_client.png").is_file()
    assert "pick rule" not in (tmp_path / "a" / "table.md").read_text()  # the measured table is left as it is
    # the rescored folder keeps its matrices: it can be scored again, back to the paper's rule
    back = rs.rescore_folder(tmp_path / "t", tmp_path / "v", "validation")
    assert _stored_view(back) == _stored_view(load_results(tmp_path / "a"))

    for args, match in (([str(tmp_path / "a"), "--pick", "loss", "--out", str(tmp_path / "a")], "--out is the folder"),
                        ([str(tmp_path / "none"), "--pick", "loss", "--out", str(tmp_path / "x")], "holds no results"),
                        ([str(tmp_path / "a"), "--pick", "best", "--out", str(tmp_path / "x")], "invalid choice")):
        res = subprocess.run([*SCRIPT, *args], capture_output=True, text=True)
        assert res.returncode != 0 and match in res.stderr and "Traceback" not in res.stderr, res.stderr

    _concept_shift(tmp_path, tmp_path / "plain", "--seed", "0")  # made without the matrices
    res = subprocess.run([*SCRIPT, str(tmp_path / "plain"), "--pick", "loss", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "--keep-matrices" in res.stderr and not (tmp_path / "x").exists()
    # runs kept without the matrices are not mixed with runs that keep them
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--data-path", str(tmp_path / "fashion"),
                              "--model", "linear", "--label-group", "2", "--label-group", "4", "--concentration", "100",
                              "--samples-per-client", "12", "--n-models", "3", "--rounds", "7", "--server-lr", "1",
                              "--server-lr", "2", "--method", "FedAvg", "--seed", "0", "--out",
                              str(tmp_path / "plain"), "--quiet", "--resume", "--keep-matrices"])
    assert res.exit_code != 0 and "keep_matrices" in res.output


def test_a_merge_of_seeds_keeps_the_matrices(tmp_path):
    _concept_shift(tmp_path, tmp_path / "a", "--seed", "0", "--keep-matrices")
    _concept_shift(tmp_path, tmp_path / "b", "--seed", "1", "--keep-matrices")
    _merge.merge_folders(tmp_path / "a", [tmp_path / "b"], out=tmp_path / "ab")
    joined = load_results(tmp_path / "ab")
    assert [r["seed"] for r in joined["methods"]["MosT"]["runs"]] == [0, 1]
    assert all("matrices" in r for e in joined["methods"].values() for r in e["runs"])
    assert rs.rescore(joined, "validation")["paired_vs_most"] == joined["paired_vs_most"]
