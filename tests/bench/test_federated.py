"""`most bench federated` end to end (tiny budget): files, selection on validation, table."""

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import most.federated as fl
from most.bench import federated as fb
from most.bench._curves import CURVES, load_results
from most.bench._runs import RUNS_DIR
from most.cli import app

runner = CliRunner()


def _flat(output: str) -> str:
    """The CLI's error text without the box drawing and line wrapping of its panel."""
    return re.sub(r"[\s│╭╮╰╯─]+", "", output)


def test_federated_bench_command_writes_results_and_figures(tmp_path):
    out = tmp_path / "fed"
    res = runner.invoke(app, ["bench", "federated", "--rho", "0.5", "0.5", "--seed", "0", "--seed", "1",
                              "--rounds", "7", "--server-lr", "1", "--server-lr", "3", "--method", "MosT",
                              "--method", "IFCA", "--method", "FedProx", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    results = load_results(out)  # results.json joined with curves.json
    assert results["label"] == "Syn(0.5,0.5)"
    # results.json holds the scalars, per-client accuracies and the final assignment; curves.json the series
    stored = json.loads((out / "results.json").read_text())
    for entry in stored["methods"].values():
        for r in entry["runs"]:
            assert not set(CURVES) - {"plans"} & set(r) and len(r.get("plans", [])) <= 1
    assert stored["methods"]["MosT"]["runs"][0]["plans"] == results["methods"]["MosT"]["runs"][0]["plans"][-1:]
    assert (out / "curves.json").is_file()
    # no --device: the protocol of every stored table (device None), so later runs still merge into them
    assert results["config"]["protocol"]["device"] is None and results["device_name"] == "cpu"
    for name, entry in results["methods"].items():
        assert [r["seed"] for r in entry["runs"]] == [0, 1]
        for r in entry["runs"]:
            # the reported run is the candidate with the best validation accuracy
            assert r["val_accuracy"] == max(v for _, _, v in r["candidates_val"])
            assert len(r["candidates_val"]) == (8 if name == "FedProx" else 2)
            assert 0.0 <= r["worst20"] <= r["worst40"] <= r["worst80"] <= r["mean"] + 1e-12
            assert r["mean"] <= r["oracle"] + 1e-12
            assert np.isclose(np.mean(r["per_client"]), r["mean"])
            # the loss pick is another choice of the same models: never above the oracle
            assert 0.0 <= r["worst20_loss_pick"] <= r["mean_loss_pick"] <= r["oracle"] + 1e-12
            assert sum(r["choice_counts_loss_pick"]) == 30
            # equal client sizes: the accuracy over all test samples is the mean over clients
            assert np.isclose(r["pooled"], r["mean"]) and np.isclose(r["pooled_loss_pick"], r["mean_loss_pick"])
    assert "per sample" not in (out / "table.md").read_text()
    most_runs = results["methods"]["MosT"]["runs"]
    assert all(len(r["sparsity"]) == 7 - 5 and len(r["drift"]) == 1 for r in most_runs)  # plans after the 5-round warm-up
    assert "IFCA" in results["paired_vs_most"] and "IFCA" in results["paired_vs_most_loss_pick"]
    assert "MosT − method" in (out / "table.md").read_text()
    assert "MosT − method, loss pick" in (out / "table.md").read_text()
    for fig in ("per_client.png", "accuracy_curves.png", "loss_curves.png", "worst_k.png", "gamma.png"):
        assert (out / fig).stat().st_size > 1000, fig
    assert results["figures"] == sorted((p.name for p in out.glob("*.png")), key=results["figures"].index)
    assert not (out / "radar.png").exists()


def test_federated_bench_bad_input(tmp_path):
    res = runner.invoke(app, ["bench", "federated", "--method", "FedNova", "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "Unknown method" in res.output
    res = runner.invoke(app, ["bench", "federated", "--dataset", "femnist", "--data-path",
                              str(tmp_path / "missing"), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "missing" in _flat(res.output)
    assert not (tmp_path / "results.json").exists()
    res = runner.invoke(app, ["bench", "federated", "--sizes", "lognormal", "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "Unknown sizes" in res.output
    res = runner.invoke(app, ["bench", "federated", "--device", "gpu please", "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "mustnameatorchdevice" in _flat(res.output)
    res = runner.invoke(app, ["bench", "federated", "--model", "cnn", "--cnn-channels", "0", "16",
                              "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "twopositivewidths" in _flat(res.output)
    res = runner.invoke(app, ["bench", "federated", "--rotations", "4", "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "itdoesnotapplyto'synthetic'" in _flat(res.output)
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--rotations", "5", "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code != 0 and "wholenumberfrom1to4" in _flat(res.output)
    groups = ["--rotation-group", "10", "--rotation-group", "20", "--rotation-group", "30"]
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", *groups, "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "hold60clients,butn_clientsis100" in _flat(res.output)
    res = runner.invoke(app, ["bench", "federated", *groups, "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "`rotation_groups`turnsFashion-MNIST" in _flat(res.output)
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--rotations", "2", *groups,
                              "--out", str(tmp_path), "--quiet"])
    assert res.exit_code != 0 and "notboth" in _flat(res.output)
    if not torch.cuda.is_available():
        res = runner.invoke(app, ["bench", "federated", "--device", "cuda", "--out", str(tmp_path), "--quiet"])
        assert res.exit_code != 0 and "CUDAisnotavailablehere" in _flat(res.output)
    assert not (tmp_path / "results.json").exists()


def test_concept_shift_table_runs_the_peers_says_their_picks_and_scores_group_recovery(tmp_path):
    from tests.federated.test_data import _tiny_fashion

    (tmp_path / "fashion").mkdir()
    _tiny_fashion(tmp_path / "fashion", n_train=400, n_test=80)
    out = tmp_path / "concept"
    res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--data-path", str(tmp_path / "fashion"),
                              "--model", "linear", "--label-group", "2", "--label-group", "4", "--concentration", "100",
                              "--samples-per-client", "20", "--n-models", "2", "--rounds", "3", "--seed", "0",
                              "--seed", "1", "--server-lr", "1", "--server-lr", "2", "--method", "MosT", "--method", "IFCA",
                              "--method", "Oracle", "--method", "CFL", "--method", "Local only", "--method",
                              "FedAvg + fine-tuning", "--method", "FedEM", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    results = json.loads((out / "results.json").read_text())
    assert results["label"] == "Fashion-MNIST, concept shift in groups of 2/4 clients"
    assert results["config"]["label_groups"] == [2, 4] and results["config"]["concentration"] == 100
    assert results["picks"]["MosT"] == "best on validation" and results["picks"]["CFL"] == "its cluster's model"
    runs = {name: e["runs"] for name, e in results["methods"].items()}
    assert [len(r["candidates_val"]) for r in runs["Local only"]] == [1, 1]  # no server step to tune
    assert [len(r["candidates_val"]) for r in runs["CFL"]] == [6, 6]  # 2 steps x 3 threshold scales
    assert [len(r["candidates_val"]) for r in runs["FedAvg + fine-tuning"]] == [4, 4]  # 2 steps x 2 epochs
    for r in runs["Oracle"]:
        assert r["group_ari"] == 1.0 and r["group_ari_plan"] == 1.0 and r["choice_counts"] == [2, 4]
    for name in ("CFL", "FedEM"):  # scored on their assignment: the groups held are the groups found
        assert all(r["group_ari_plan"] == r["group_ari"] for r in runs[name])
    for r in runs["MosT"]:  # 3 rounds, all in the warm-up: no plan yet, so no grouping of its own to score
        assert r["plans"] == [] and "group_ari_plan" not in r and "group_ari" in r
    for r in runs["IFCA"]:  # held: its last plan's clusters, whatever each client then picks on validation
        assert len(r["plans"][-1]) == 6
        assert r["group_ari_plan"] == pytest.approx(fl.evaluation.adjusted_rand_index(r["plans"][-1], [0] * 2 + [1] * 4))
    for name in ("Local only", "FedAvg + fine-tuning"):  # one model per client: no recovery, no best-on-test
        assert all("group_ari" not in r and r["oracle"] != r["oracle"] for r in runs[name])
        assert all(r["choice_counts"] == [1] * 6 for r in runs[name])
    for r in runs["FedEM"]:  # scored on its mixture; its groups are the clients' largest weights
        assert -1.0 <= r["group_ari"] <= 1.0 and r["oracle"] != r["oracle"] and r["choice_counts"] == [6]
    assert results["picks"]["FedEM"] == "its mixture of the models (weights by EM)"
    table = (out / "table.md").read_text()
    assert "groups found (ARI)" in table and "| Oracle |" in table and "| FedEM |" in table
    assert "groups held: ARI ≥ 0.9 |" in table and "Groups held: the seeds on which" in table
    assert "except: Oracle, its group's model; CFL, its cluster's model; Local only, its own model" in table
    bad = runner.invoke(app, ["bench", "federated", "--method", "Oracle", "--rounds", "1", "--seed", "0",
                              "--out", str(tmp_path / "syn"), "--quiet"])
    assert bad.exit_code != 0 and "plantedgroups" in _flat(bad.output)
    for args, match in ((["--dataset", "fashion", "--label-group", "3"], "2ormore"),
                        (["--label-group", "3", "--label-group", "3"],
                                                               "doesnotapplyto'synthetic'"),
                        (["--dataset", "fashion", "--concentration", "0"], "positivenumber")):
        bad = runner.invoke(app, ["bench", "federated", *args, "--out", str(tmp_path / "bad"), "--quiet"])
        assert bad.exit_code != 0 and match in _flat(bad.output), bad.output


def test_femnist_concept_shift_runs_with_its_writers_in_label_groups(tmp_path):
    from tests.federated.test_data import _leaf_blob, _write

    users = {f"w{k}": (8, [k % 3, 1, 2, 3, 4, 5, 6, 7]) for k in range(6)}
    _write(tmp_path / "leaf" / "train" / "a.json", _leaf_blob(users), False)
    _write(tmp_path / "leaf" / "test" / "a.json", _leaf_blob({u: (4, [0, 1, 2, 3]) for u in users}), False)
    out = tmp_path / "femnist_concept"
    res = runner.invoke(app, ["bench", "federated", "--dataset", "femnist", "--data-path", str(tmp_path / "leaf"),
                              "--model", "linear", "--label-group", "2", "--label-group", "4", "--n-models", "2",
                              "--rounds", "2", "--seed", "0", "--server-lr", "1", "--method", "Oracle",
                              "--method", "IFCA", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    results = json.loads((out / "results.json").read_text())
    assert results["label"] == "FEMNIST, concept shift in groups of 2/4 writers"
    oracle = results["methods"]["Oracle"]["runs"][0]
    assert oracle["group_ari"] == 1.0 and oracle["choice_counts"] == [2, 4]
    assert "group_ari_plan" in results["methods"]["IFCA"]["runs"][0]
    bad = runner.invoke(app, ["bench", "federated", "--dataset", "femnist", "--data-path", str(tmp_path / "leaf"),
                              "--model", "linear", "--label-group", "2", "--label-group", "2", "--rounds", "1",
                              "--seed", "0", "--method", "Oracle", "--out", str(tmp_path / "bad"), "--quiet"])
    assert bad.exit_code != 0 and "has6writerswithbothsplits" in _flat(bad.output), bad.output


def test_the_groups_held_are_each_clients_largest_share_in_the_last_plan_it_took_part_in():
    from most.bench.federated import _last_plan_owner
    from most.federated.config import RoundLog

    def log(t, clients, plan):
        return RoundLog(round=t, clients=torch.tensor(clients), plan=None if plan is None else torch.tensor(plan),
                        train_loss=0.0, val_accuracy=None, seconds={})

    history = [log(1, [0, 1, 2], [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]),
               log(2, [1, 2], [[0.7, 0.3], [0.1, 0.9]]),  # partial participation: client 0 keeps round 1's model
               log(3, [0, 1, 2], None)]  # a round without a plan (a warm-up, say) changes nothing
    assert _last_plan_owner(history, 3).tolist() == [0, 0, 1]
    assert _last_plan_owner(history[1:], 3) is None  # client 0 never took part in a plan
    assert _last_plan_owner([], 3) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_federated_bench_on_cuda_matches_the_cpu_and_records_the_device(tmp_path):
    args = ["bench", "federated", "--seed", "0", "--rounds", "6", "--server-lr", "3", "--method", "MosT",
            "--method", "IFCA", "--quiet"]
    runs = {}
    for device in ("cpu", "cuda"):
        res = runner.invoke(app, [*args, "--device", device, "--out", str(tmp_path / device)])
        assert res.exit_code == 0, res.output
        runs[device] = json.loads((tmp_path / device / "results.json").read_text())
    assert runs["cuda"]["device_name"] == torch.cuda.get_device_name() and runs["cpu"]["device_name"] == "cpu"
    for name in ("MosT", "IFCA"):
        cpu, gpu = runs["cpu"]["methods"][name]["runs"][0], runs["cuda"]["methods"][name]["runs"][0]
        # float32 on two devices: the same run up to rounding, which a transport plan can amplify
        assert abs(cpu["mean"] - gpu["mean"]) < 0.05, (name, cpu["mean"], gpu["mean"])
        assert len(gpu["per_client"]) == 30 and len(gpu["plans"]) == len(cpu["plans"])


def test_a_diverging_candidate_is_recorded_and_never_chosen(tmp_path):
    out = tmp_path / "div"
    res = runner.invoke(app, ["bench", "federated", "--seed", "0", "--rounds", "3", "--server-lr", "1",
                              "--server-lr", "1e38", "--method", "FedAvg", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    run = json.loads((out / "results.json").read_text())["methods"]["FedAvg"]["runs"][0]
    assert run["server_lr"] == 1.0 and "failed" not in run
    assert [c[0] for c in run["candidates_val"]] == [1.0, 1e38] and run["candidates_val"][1][2] == float("-inf")

    # a run whose every candidate failed: nan cells, the reason under the table, no figures to draw
    res = runner.invoke(app, ["bench", "federated", "--seed", "0", "--rounds", "3", "--server-lr", "1e38",
                              "--method", "FedAvg", "--out", str(tmp_path / "all"), "--quiet"])
    assert res.exit_code == 0, res.output
    table = (tmp_path / "all" / "table.md").read_text()
    assert "| FedAvg | –" in table and "- FedAvg, seed 0: At round 1" in table and "diverged" in table
    assert not list((tmp_path / "all").glob("*.png"))


def test_a_merge_reads_two_data_paths_as_one_where_the_data_digests_agree(tmp_path):
    """Runs of the same files read from two folders join (a note says so); other files under the
    same path, or another path without digests to compare, are refused."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from most.bench import _merge
    from tests.federated.test_data import _tiny_fashion

    for name in ("a", "c"):
        (tmp_path / name).mkdir()
    _tiny_fashion(tmp_path / "a", n_train=1500, n_test=500)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    _tiny_fashion(tmp_path / "c", n_train=1500, n_test=501)  # other images

    def bench(out, data, *args):
        res = runner.invoke(app, ["bench", "federated", "--dataset", "fashion", "--data-path", str(tmp_path / data),
                                  "--model", "linear", "--samples-per-client", "20", "--rounds", "2", "--server-lr",
                                  "3", "--n-models", "2", "--seed", "0", "--seed", "1", "--out", str(out), "--quiet",
                                  *args])
        assert res.exit_code == 0, res.output
        return json.loads((out / "results.json").read_text())

    dest = bench(tmp_path / "dest", "a", "--method", "FedAvg")
    # some clients of 20 images have no test image (no accuracy): the per-client figure leaves them out
    assert any(math.isnan(x) for r in dest["methods"]["FedAvg"]["runs"] for x in r["per_client"])
    assert "per_client.png" in dest["figures"] and (tmp_path / "dest" / "per_client.png").stat().st_size > 1000
    bench(tmp_path / "peer", "b", "--method", "IFCA")
    other = bench(tmp_path / "other", "c", "--method", "IFCA")
    digests = {r["seed"]: r["data_digest"] for r in dest["methods"]["FedAvg"]["runs"]}
    assert len(set(digests.values())) == 2  # one per seed: each seed splits the images its own way
    assert _merge.same_data(dest, other) is False

    script = [sys.executable, str(Path(__file__).resolve().parents[2] / "benchmarks" / "federated_tools.py"), "merge"]
    res = subprocess.run([*script, str(tmp_path / "dest"), str(tmp_path / "peer"), "--out", str(tmp_path / "joined")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "the same data (their runs' data digests agree)" in res.stderr and str(tmp_path / "b") in res.stderr
    joined = json.loads((tmp_path / "joined" / "results.json").read_text())
    assert list(joined["methods"]) == ["FedAvg", "IFCA"] and joined["config"]["data_path"] == str(tmp_path / "a")

    with pytest.raises(_merge.MergeError, match=r"read other data than the destination for seeds \[0, 1\]"):
        _merge.merge_folders(tmp_path / "dest", [tmp_path / "other"], out=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    # the same path but other files behind it: refused as well
    moved = json.loads(json.dumps(other))
    moved["config"]["data_path"] = dest["config"]["data_path"]
    with pytest.raises(_merge.MergeError, match="read other data"):
        _merge.merge(json.loads(json.dumps(dest)), [moved])
    # results older than the digest: two paths cannot be told apart, so they stay refused
    older = json.loads(json.dumps(dest))
    for run in older["methods"]["FedAvg"]["runs"]:
        del run["data_digest"]
    peer = json.loads((tmp_path / "peer" / "results.json").read_text())
    assert _merge.same_data(older, peer) is None
    with pytest.raises(_merge.MergeError, match="other settings.*data_path.*recorded its data's digest"):
        _merge.merge(older, [peer])


def test_methods_run_later_merge_into_a_results_folder(tmp_path):
    """most.bench._merge, and its command line benchmarks/federated_tools.py merge run as a script."""
    import subprocess
    import sys
    from pathlib import Path

    from most.bench import _merge

    script = [sys.executable, str(Path(__file__).resolve().parents[2] / "benchmarks" / "federated_tools.py"), "merge"]

    def bench(out, *args):
        res = runner.invoke(app, ["bench", "federated", "--rounds", "6", "--server-lr", "3", "--out", str(out),
                                  "--quiet", *args])
        assert res.exit_code == 0, res.output
        return json.loads((out / "results.json").read_text())

    dest = bench(tmp_path / "dest", "--seed", "0", "--seed", "1", "--method", "MosT", "--method", "FedAvg")
    # IFCA run later, its seeds split over two folders (two cores); "--device cpu" is the default's
    # computation, so it joins a table made without --device
    parts = [bench(tmp_path / f"part{s}", "--seed", str(s), "--method", "IFCA", *(["--device", "cpu"] if s else []))
             for s in (1, 0)]
    alone = bench(tmp_path / "alone", "--seed", "0", "--seed", "1", "--method", "MosT", "--method", "IFCA")

    res = subprocess.run([*script, str(tmp_path / "dest"), str(tmp_path / "part1"), str(tmp_path / "part0")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and f"added IFCA to {tmp_path / 'dest'}" in res.stderr, res.stderr
    merged = json.loads((tmp_path / "dest" / "results.json").read_text())
    assert merged["config"]["methods"] == ["MosT", "FedAvg", "IFCA"]
    assert [r["seed"] for r in merged["methods"]["IFCA"]["runs"]] == [0, 1]
    # the same runs as when IFCA is run with the table: the same summary and paired interval
    assert merged["methods"]["IFCA"]["mean"] == alone["methods"]["IFCA"]["mean"]
    assert merged["paired_vs_most"]["IFCA"] == alone["paired_vs_most"]["IFCA"]
    assert "| IFCA |" in (tmp_path / "dest" / "table.md").read_text()
    assert (tmp_path / "dest" / "per_client.png").stat().st_size > 1000

    # a whole table split over seeds: the second half adds its seeds
    bench(tmp_path / "first", "--seed", "0", "--method", "MosT", "--method", "IFCA")
    second = bench(tmp_path / "second", "--seed", "1", "--method", "MosT", "--method", "IFCA")
    assert _merge.merge_folders(tmp_path / "first", [tmp_path / "second"]) == ["seeds [1]"]
    joined = json.loads((tmp_path / "first" / "results.json").read_text())
    assert joined["config"]["seeds"] == [0, 1]
    assert joined["methods"]["IFCA"]["mean"] == alone["methods"]["IFCA"]["mean"]
    assert joined["paired_vs_most"]["IFCA"] == alone["paired_vs_most"]["IFCA"]
    with pytest.raises(_merge.MergeError, match=r"seeds \[1\], which the destination already has"):
        _merge.merge(json.loads(json.dumps(joined)), [second])
    # some methods of a table pooled with a later seed set, into another folder
    bench(tmp_path / "seed0", "--seed", "0", "--method", "MosT", "--method", "FedAvg", "--method", "IFCA")
    before = (tmp_path / "seed0" / "results.json").read_text()
    _merge.merge_folders(tmp_path / "seed0", [tmp_path / "second"], methods=["MosT", "IFCA"], out=tmp_path / "pooled")
    assert (tmp_path / "seed0" / "results.json").read_text() == before
    pooled = json.loads((tmp_path / "pooled" / "results.json").read_text())
    assert pooled["config"]["methods"] == ["MosT", "IFCA"] and pooled["config"]["seeds"] == [0, 1]
    assert pooled["methods"]["IFCA"]["mean"] == alone["methods"]["IFCA"]["mean"]
    assert pooled["paired_vs_most"] == alone["paired_vs_most"]
    with pytest.raises(_merge.MergeError, match="part0 has none of the methods"):
        _merge.merge_folders(tmp_path / "seed0", [tmp_path / "part0"], methods=["MosT"], out=tmp_path / "none")
    assert not (tmp_path / "none").exists()
    with pytest.raises(_merge.MergeError, match=r"\['FedProx'\] not in the results"):
        _merge.restrict(pooled, ["FedProx"])

    bad = [
        (dict(dest, config={**dest["config"], "protocol": {**dest["config"]["protocol"], "rounds": 7}}), [parts[0]],
         "other settings.*protocol"),
        (dest, [parts[0]], r"seeds \[1\], the destination \[0, 1\]"),
        (dest, [dict(parts[0], config={**parts[0]["config"], "protocol": {**parts[0]["config"]["protocol"],
                                                                          "device": "cuda"}})],
         "other settings.*'device': 'cuda'"),
        (dest, [bench(tmp_path / "again", "--seed", "0", "--seed", "1", "--method", "FedAvg")], "already in"),
    ]
    with pytest.raises(_merge.MergeError, match="no results file at .*nowhere"):
        _merge.merge_folders(tmp_path / "dest", [tmp_path / "nowhere"])
    res = subprocess.run([*script, str(tmp_path / "dest"), str(tmp_path / "nowhere")], capture_output=True, text=True,
                         timeout=600)  # the command line: the reason, and a failed exit
    assert res.returncode == 1 and "error: no results file at" in res.stderr and "nowhere" in res.stderr
    for target, sources, match in bad:
        with pytest.raises(_merge.MergeError, match=match):
            _merge.merge(json.loads(json.dumps(target)), sources)
    # results written before --rotations existed have no such setting: they turned nothing
    older = json.loads(json.dumps(dest))
    del older["config"]["rotations"]
    assert _merge.merge(older, [parts[0], parts[1]]) == ["IFCA"]
    turned = dict(parts[0], config={**parts[0]["config"], "rotations": 4})
    with pytest.raises(_merge.MergeError, match="other settings.*rotations"):
        _merge.merge(json.loads(json.dumps(dest)), [turned])
    # a changed default: the old default's row keeps its runs under a new name, the new default joins as MosT
    fresh = bench(tmp_path / "fresh", "--seed", "0", "--seed", "1", "--method", "MosT")
    res = subprocess.run([*script, str(tmp_path / "alone"), str(tmp_path / "fresh"), "--rename", "MosT=MosT (old)",
                          "--first", "MosT", "--out", str(tmp_path / "redefault")], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    redefault = json.loads((tmp_path / "redefault" / "results.json").read_text())
    assert redefault["config"]["methods"] == list(redefault["methods"]) == ["MosT", "MosT (old)", "IFCA"]
    assert redefault["methods"]["MosT (old)"]["runs"] == alone["methods"]["MosT"]["runs"]
    assert redefault["methods"]["MosT"]["runs"] == fresh["methods"]["MosT"]["runs"]
    assert set(redefault["paired_vs_most"]) == {"MosT (old)", "IFCA"}
    assert redefault["paired_vs_most"]["MosT (old)"]["mean"] == pytest.approx(0.0, abs=1e-12)  # the same runs
    with pytest.raises(_merge.MergeError, match="'FedProx' is not in the results"):
        _merge.rename(json.loads(json.dumps(alone)), "FedProx", "x")
    with pytest.raises(_merge.MergeError, match="already in the results"):
        _merge.rename(json.loads(json.dumps(alone)), "MosT", "IFCA")
    res = subprocess.run([*script, str(tmp_path / "alone"), str(tmp_path / "fresh"), "--rename", "MosT"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1 and "--rename takes OLD=NEW" in res.stderr
    # a re-run replaces the destination's row of the same name (runs told apart by a marked accuracy)
    rerun = json.loads(json.dumps(fresh))
    for run in rerun["methods"]["MosT"]["runs"]:
        run["mean"] += 1.0
    (tmp_path / "rerun").mkdir()
    (tmp_path / "rerun" / "results.json").write_text(json.dumps(rerun))
    res = subprocess.run([*script, str(tmp_path / "alone"), str(tmp_path / "rerun")], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 1 and "--drop 'MosT'" in res.stderr, res.stderr
    res = subprocess.run([*script, str(tmp_path / "alone"), str(tmp_path / "rerun"), "--drop", "MosT", "--first", "MosT",
                          "--out", str(tmp_path / "replaced")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    replaced = json.loads((tmp_path / "replaced" / "results.json").read_text())
    assert replaced["config"]["methods"] == list(replaced["methods"]) == ["MosT", "IFCA"]
    assert replaced["methods"]["MosT"]["runs"] == rerun["methods"]["MosT"]["runs"]
    assert replaced["methods"]["IFCA"]["runs"] == alone["methods"]["IFCA"]["runs"]
    assert replaced["methods"]["MosT"]["mean"]["mean"] == pytest.approx(alone["methods"]["MosT"]["mean"]["mean"] + 1.0)
    assert replaced["paired_vs_most"]["IFCA"]["mean"] == pytest.approx(alone["paired_vs_most"]["IFCA"]["mean"] + 1.0)
    with pytest.raises(_merge.MergeError, match=r"cannot drop \['FedProx'\]"):
        _merge.merge_folders(tmp_path / "alone", [tmp_path / "rerun"], drop=["FedProx"], out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_server_step_grid_extended_later_chooses_as_one_run_over_the_joined_grid(tmp_path):
    from most.bench import _merge
    from most.bench import federated as fb

    def bench(out, *lrs, methods=("MosT", "FedProx"), seeds=(0, 1)):
        args = [a for lr in lrs for a in ("--server-lr", str(lr))] + [a for m in methods for a in ("--method", m)]
        args += [a for s in seeds for a in ("--seed", str(s))]
        res = runner.invoke(app, ["bench", "federated", "--rounds", "6", "--out", str(out), "--quiet", *args])
        assert res.exit_code == 0, res.output
        return json.loads((out / "results.json").read_text())

    bench(tmp_path / "dest", 1)
    extra = bench(tmp_path / "extra", 5)  # wins over 1 in these short runs
    bench(tmp_path / "diverging", 1e38)  # loses to the destination's grid
    alone = bench(tmp_path / "alone", 1, 5, 1e38)
    _merge.merge_folders(tmp_path / "dest", [tmp_path / "extra", tmp_path / "diverging"])
    merged = json.loads((tmp_path / "dest" / "results.json").read_text())
    assert merged["config"]["server_lrs"] == [1.0, 5.0, 1e38]
    assert {r["server_lr"] for e in merged["methods"].values() for r in e["runs"]} == {5.0}
    for name in ("MosT", "FedProx"):
        for got, want in zip(merged["methods"][name]["runs"], alone["methods"][name]["runs"]):
            assert [tuple(c) for c in got["candidates_val"]] == [tuple(c) for c in want["candidates_val"]]
            for k in ("server_lr", "extra", "val_accuracy", "mean", "mean_loss_pick", "per_client"):
                assert got[k] == want[k], (name, k)
    assert merged["paired_vs_most"] == alone["paired_vs_most"]
    assert "| FedProx |" in (tmp_path / "dest" / "table.md").read_text()

    again = json.loads((tmp_path / "dest" / "results.json").read_text())
    with pytest.raises(_merge.MergeError, match=r"steps \[5.0\] for MosT, which the destination already"):
        _merge.merge(again, [extra])
    # new seeds of only some of the methods: the error says how to add them
    with pytest.raises(_merge.MergeError, match=r"To add seeds, the source must run the destination's methods "
                                                r"\(\['FedProx', 'MosT'\]\); it runs \['MosT'\]: keep the methods both have"):
        _merge.merge(json.loads(json.dumps(again)), [bench(tmp_path / "most_seed_2", 1, 5, 1e38, methods=("MosT",),
                                                           seeds=(2,))])
    # a method new to the table joins with its own grid; a source mixing new and known methods does not
    own = json.loads(json.dumps(again))
    ifca_3 = bench(tmp_path / "ifca_3", 3, methods=("IFCA",))
    assert _merge.merge(own, [ifca_3]) == ["IFCA"]
    assert own["config"]["server_lrs_by_method"] == {"MosT": [1.0, 5.0, 1e38], "FedProx": [1.0, 5.0, 1e38],
                                                     "IFCA": [3.0]}
    assert own["config"]["server_lrs"] == [1.0, 3.0, 5.0, 1e38]  # the union, ascending
    assert [r["per_client"] for r in own["methods"]["IFCA"]["runs"]] == [
        r["per_client"] for r in ifca_3["methods"]["IFCA"]["runs"]]
    assert own["methods"]["MosT"] == again["methods"]["MosT"]
    assert own["picks"]["IFCA"] == ifca_3["picks"]["IFCA"] == "best on validation"  # the table's note on picks
    assert "IFCA over 3" in fb.table_markdown(own)
    with pytest.raises(_merge.MergeError, match="only with methods it has"):
        _merge.merge(json.loads(json.dumps(again)), [bench(tmp_path / "mixed", 3, methods=("MosT", "IFCA"))])
    split = [bench(tmp_path / f"ifca_s{s}", lr, methods=("IFCA",), seeds=(s,)) for s, lr in ((0, 3), (1, 7))]
    with pytest.raises(_merge.MergeError, match=r"IFCA: source 2 was run with server steps \[7.0\]"):
        _merge.merge(json.loads(json.dumps(again)), split)

    # an extension of some methods only: theirs choose over the joined grid, the others keep theirs
    most_3 = bench(tmp_path / "most_3", 3, methods=("MosT",))
    partial = json.loads(json.dumps(again))
    assert _merge.merge(partial, [most_3]) == ["server steps [3.0]"]
    assert partial["config"]["server_lrs_by_method"] == {"MosT": [1.0, 3.0, 5.0, 1e38], "FedProx": [1.0, 5.0, 1e38]}
    assert partial["config"]["server_lrs"] == [1.0, 3.0, 5.0, 1e38]
    assert partial["methods"]["FedProx"] == again["methods"]["FedProx"]
    for got, old, new in zip(partial["methods"]["MosT"]["runs"], again["methods"]["MosT"]["runs"],
                             most_3["methods"]["MosT"]["runs"]):
        assert [c[0] for c in got["candidates_val"]] == [1.0, 5.0, 1e38, 3.0]
        want = new if new["val_accuracy"] > old["val_accuracy"] else old
        assert got["server_lr"] == want["server_lr"] and got["per_client"] == want["per_client"]
    note = fb.table_markdown(partial)
    assert "MosT over 1, 3, 5, 1e+38; FedProx over 1, 5, 1e+38" in note
    with pytest.raises(_merge.MergeError, match="server steps \\[3.0\\] for MosT"):
        _merge.merge(json.loads(json.dumps(partial)), [most_3])
    with pytest.raises(_merge.MergeError, match="tuned over different server-step grids"):
        _merge.merge(json.loads(json.dumps(partial)), [bench(tmp_path / "seed_2", 1, 5, 1e38, 3, seeds=(2,))])
    # seeds whose methods were tuned over the same per-method grids join (in whatever order the steps came)
    seed_2 = bench(tmp_path / "seed_2b", 1e38, 5, 1, seeds=(2,))
    assert _merge.merge(seed_2, [bench(tmp_path / "seed_2c", 3, methods=("MosT",), seeds=(2,))]) == [
        "server steps [3.0]"]
    more = json.loads(json.dumps(partial))
    assert _merge.merge(more, [seed_2]) == ["seeds [2]"]
    assert more["config"]["seeds"] == [0, 1, 2] and more["config"]["server_lrs_by_method"] == partial["config"][
        "server_lrs_by_method"]
    assert [r["seed"] for r in more["methods"]["MosT"]["runs"]] == [0, 1, 2]
    # methods joined from a source whose methods were tuned over grids of their own keep them
    ifca = bench(tmp_path / "ifca_all", 1, 3, 5, 1e38, methods=("IFCA",))
    assert _merge.merge(ifca, [json.loads(json.dumps(partial))]) == ["MosT", "FedProx"]
    assert ifca["config"]["server_lrs_by_method"] == {"IFCA": [1.0, 3.0, 5.0, 1e38], "MosT": [1.0, 3.0, 5.0, 1e38],
                                                      "FedProx": [1.0, 5.0, 1e38]}
    assert "FedProx over 1, 5, 1e+38" in fb.table_markdown(ifca)
    # the other methods' missing steps make the grids equal again
    _merge.merge(partial, [bench(tmp_path / "fedprox_3", 3, methods=("FedProx",))])
    assert "server_lrs_by_method" not in partial["config"]
    assert "grids differ" not in fb.table_markdown(partial)


def test_the_table_says_when_the_chosen_server_step_is_the_grids_edge():
    from most.bench.federated import _grid_edge_note

    def results(chosen, grid=(1.0, 3.0, 5.0)):
        return {"config": {"server_lrs": list(grid)},
                "methods": {name: {"runs": [{"seed": s, "server_lr": lr} for s, lr in enumerate(lrs)]}
                            for name, lrs in chosen.items()}}

    inside = {"MosT": [3.0, 5.0, 1.0], "FedAvg": [3.0, 3.0, 5.0]}
    assert _grid_edge_note(results(inside)) == []
    note = " ".join(_grid_edge_note(results({"MosT": [3.0, 5.0, 1.0], "FedAvg": [5.0, 5.0, 5.0]})))
    assert "largest (5 of 1, 3, 5) in 4 of 6 runs (every run of FedAvg)" in note and "--server-lr" in note
    # a method always at the edge is named even when most runs are inside the grid
    note = " ".join(_grid_edge_note(results({**inside, "IFCA": [1.0, 1.0, 1.0], "FedProx": [5.0, 5.0, 5.0]})))
    assert "in 5 of 12 runs (every run of FedProx)" in note
    # a run whose candidates all failed does not count; one server step is not a grid
    failed = results({"MosT": [5.0, 5.0], "FedAvg": [1.0, 1.0]})
    failed["methods"]["FedAvg"]["runs"] = [{**r, "failed": "diverged"} for r in failed["methods"]["FedAvg"]["runs"]]
    assert "in 2 of 2 runs (every run of MosT)" in " ".join(_grid_edge_note(failed))
    assert _grid_edge_note(results({"MosT": [5.0]}, grid=(5.0,))) == []

    # per-method grids (a partial extension): each run is measured against its own method's grid
    partial = results({"MosT": [10.0, 10.0, 5.0], "FedAvg": [5.0, 5.0, 3.0]})
    partial["config"]["server_lrs_by_method"] = {"MosT": [1.0, 3.0, 5.0, 10.0], "FedAvg": [1.0, 3.0, 5.0]}
    note = " ".join(_grid_edge_note(partial))
    assert "MosT over 1, 3, 5, 10; FedAvg over 1, 3, 5." in note
    assert "the largest of its method's grid in 4 of 6 runs:" in note
    partial["methods"]["FedAvg"]["runs"][1]["server_lr"] = 1.0
    partial["methods"]["MosT"]["runs"][1]["server_lr"] = 3.0
    note = _grid_edge_note(partial)
    assert len(note) == 2 and "grids differ" in note[1]  # 2 of 6 at the edge: only the grids are named


def _fake_results(compact: bool = False, constant_counts: bool = True) -> dict:
    """A results.json of two methods, three seeds, 12 clients, 6 rounds (3 plans for MosT after a
    warm-up of 3, 6 for IFCA); ``compact``: the runs keep no curves and only their last plan."""
    rng = np.random.default_rng(0)
    keys = ("mean", "worst20", "worst40", "worst60", "worst80")
    methods = {}
    for name, n_plans in (("MosT", 3), ("IFCA", 6), ("FedAvg", 0)):
        runs = []
        for seed in range(3):
            owners = [list(rng.permutation(np.arange(12) % 3)) for _ in range(n_plans)]
            if not constant_counts and owners:
                owners[0] = [0] * 12
            run = {"seed": seed, **{k: float(rng.uniform(0.3, 0.8)) for k in keys},
                   "per_client": rng.uniform(0.2, 1.0, 12).tolist(), "plans": [list(map(int, o)) for o in owners]}
            if not compact:
                run.update(val_curve=[[t, float(rng.uniform(0.4, 0.9))] for t in (2, 5)],
                           loss_curve=rng.uniform(0.1, 1.0, 6).tolist(),
                           sparsity=[2 / 3] * n_plans, drift=rng.uniform(0, 1, max(0, n_plans - 1)).tolist())
            else:
                run["plans"] = run["plans"][-1:]
            runs.append(run)
        methods[name] = {"runs": runs, **{k: {"mean": float(np.mean([r[k] for r in runs])),
                                              "std": float(np.std([r[k] for r in runs], ddof=1))} for k in keys}}
    return {"label": "Syn(0,0)", "config": {"n_models": 3, "protocol": {"rounds": 6}}, "methods": methods}


def test_figures_of_full_results_draw_the_profile_bars_with_errors_and_gamma(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    from most.bench.federated import draw_figures

    results = _fake_results()
    figs = []
    real_close = plt.close
    plt.close = lambda fig=None: figs.append(fig) or real_close(fig)  # the figures as they are closed
    try:
        written = draw_figures(results, tmp_path)
    finally:
        plt.close = real_close
    # the counts per model never change (4 clients on each of 3 models): no assignment stack
    assert written == ["per_client.png", "accuracy_curves.png", "loss_curves.png", "worst_k.png", "gamma.png"]
    assert all((tmp_path / f).stat().st_size > 3000 and "=" not in f for f in written)
    profile, _, _, bars, gamma = figs
    lines = profile.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["MosT", "IFCA", "FedAvg"]
    for line, name in zip(lines, ("MosT", "IFCA", "FedAvg")):  # mean over the seeds of the sorted values, in %
        rows = np.sort([r["per_client"] for r in results["methods"][name]["runs"]], 1)
        assert line.get_ydata() == pytest.approx(100 * rows.mean(0))
        assert np.all(np.diff(line.get_ydata()) >= 0)
    assert "%" in profile.axes[0].get_ylabel() and profile.axes[0].get_legend() is not None
    containers = [c for c in bars.axes[0].containers if isinstance(c, BarContainer)]
    assert len(containers) == 3 and all(c.errorbar is not None for c in containers)
    assert containers[0][0].get_height() == pytest.approx(100 * results["methods"]["MosT"]["worst20"]["mean"])
    ax_s, ax_d, ax_w = gamma.axes
    assert [ln.get_label() for ln in ax_s.get_lines()] == ["MosT", "IFCA"]  # the methods with plans
    assert list(ax_s.get_lines()[0].get_xdata()) == [3, 4, 5]  # MosT's plans after its warm-up
    assert ax_d.get_ylim()[0] == 0 and np.all(np.diff(ax_d.get_lines()[1].get_ydata()) >= 0)

    varying = _fake_results(constant_counts=False)
    assert "assignment_stack.png" in draw_figures(varying, tmp_path / "varying")


def test_figures_of_compact_results_draw_what_the_runs_keep(tmp_path):
    """Runs without curves, keeping only their last plan: the per-client profile and the worst-k
    bars (from the runs' summaries), the rest left out without an error."""
    from most.bench.federated import draw_figures

    results = _fake_results(compact=True)
    assert draw_figures(results, tmp_path) == ["per_client.png", "worst_k.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["per_client.png", "worst_k.png"]
    for run in results["methods"]["MosT"]["runs"]:
        del run["plans"]  # older compact files: no plans at all
    assert draw_figures(results, tmp_path / "older") == ["per_client.png", "worst_k.png"]


def test_figures_draw_the_main_methods_first_then_the_tables_others():
    from most.bench.federated import _main_methods

    # a table of mostly non-main methods still compares MosT with them (not MosT alone)
    assert _main_methods(["MosT", "TCH-Set", "STCH-Set"]) == ["MosT", "TCH-Set", "STCH-Set"]
    # the main methods come first and the total stays at six
    names = ["MosT", "MosT (min-norm)", "IFCA", "FedAvg", "FedProx", "MGDA", "Linearization", "FedMGDA+"]
    assert _main_methods(names) == ["MosT", "IFCA", "FedAvg", "MGDA", "Linearization", "MosT (min-norm)"]


def test_femnist_cnn_script_runs_pairs_in_lanes_names_folders_and_reports_failures(tmp_path):
    """benchmarks/femnist_cnn.sh on a tiny LEAF folder, one round on the CPU: a folder per
    (method, seed) named with TAG, a failed call reported as FAILED with a non-zero exit, and a
    second call skipping the folders that already hold results."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "femnist_cnn.sh"
    data = tmp_path / "leaf"
    for split, n in (("train", 10), ("test", 3)):
        (data / split).mkdir(parents=True)
        users = [f"w{k}" for k in range(4)]
        blob = {"users": users, "num_samples": [n] * 4,
                "user_data": {u: {"x": [[(i + k) / 20] * 784 for i in range(n)], "y": [(i + k) % 62 for i in range(n)]}
                              for k, u in enumerate(users)}}
        (data / split / "all.json").write_text(json.dumps(blob))
    env = dict(os.environ, ROUNDS="1", DEVICE="cpu", LANES="2", SEEDS="0 1", LRS="--server-lr 3", TAG="t",
               MOST=f"{sys.executable} -m most.cli")

    def call(*methods):
        return subprocess.run(["bash", str(script), str(data), str(tmp_path / "out"), *methods], env=env,
                              capture_output=True, text=True, timeout=600)

    first = call("IFCA", "FedNova")
    assert first.returncode != 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if (p / "results.json").is_file()) == [
        "IFCA_s0_t", "IFCA_s1_t"]
    assert "done: IFCA seed 0 (t)" in first.stdout and "done: IFCA seed 1 (t)" in first.stdout
    assert "FAILED: FedNova seed 0 (t)" in first.stderr and "FAILED: FedNova seed 1 (t)" in first.stderr
    assert "done: FedNova" not in first.stdout
    results = json.loads((tmp_path / "out" / "IFCA_s1_t" / "results.json").read_text())
    assert results["config"]["model"] == "cnn" and results["config"]["cnn_channels"] == [32, 64]
    assert results["config"]["seeds"] == [1] and results["config"]["server_lrs"] == [3.0]
    again = call("IFCA")
    assert again.returncode == 0 and "done" not in again.stdout  # both seeds were there already


def test_an_interrupted_table_resumes_to_the_same_results(tmp_path, monkeypatch):
    from most.bench import federated as fb

    def args(out, *extra):
        return ["bench", "federated", "--rounds", "4", "--seed", "0", "--seed", "1", "--server-lr", "1",
                "--server-lr", "3", "--method", "MosT", "--method", "FedProx", "--out", str(out), "--quiet",
                "--no-batch", *extra]  # run by run (the batched path: the next test)

    def finished(out):
        return sorted(p.parent for p in (out / RUNS_DIR).rglob("result.json"))

    n_runs = 2 * (2 + 2 * 4)  # seeds x (MosT's 2 server steps + FedProx's 2 steps x 4 mu)
    res = runner.invoke(app, args(tmp_path / "whole"))
    assert res.exit_code == 0, res.output
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert len(finished(tmp_path / "whole")) == n_runs  # one run folder per candidate, kept with the results
    assert tmp_path / "whole" / "runs" / "FedProx_server_lr=3.0_extra=0.01" / "seed1" in finished(tmp_path / "whole")

    real, made, limit = fb._run_one, [], [5]

    def stopped_after_the_limit(*a):
        if len(made) == limit[0]:
            raise KeyboardInterrupt
        made.append(a[3:])
        return real(*a)

    monkeypatch.setattr(fb, "_run_one", stopped_after_the_limit)
    res = runner.invoke(app, args(tmp_path / "cut"))
    assert res.exit_code == 130 and "--resume" in res.output and f"{tmp_path / 'cut' / 'runs'}" in _flat(res.output)
    runs = tmp_path / "cut" / RUNS_DIR
    assert len(finished(tmp_path / "cut")) == 5 and not (tmp_path / "cut" / "results.json").exists()
    # a run stopped between its two files: a config.json without result.json, and a temporary file
    cut_short = runs / "FedProx_server_lr=3.0_extra=1.0" / "seed1"
    cut_short.mkdir(parents=True)
    stored = json.loads((finished(tmp_path / "cut")[0] / "config.json").read_text())
    (cut_short / "config.json").write_text(json.dumps({**stored, "key": [1, "FedProx", 3.0, 1.0]}))
    (cut_short / ".result.json.123.tmp").write_text('{"seed"')
    made.clear()
    limit[0] = 3
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))  # stopped again, three runs later
    assert res.exit_code == 130 and len(made) == 3 and len(finished(tmp_path / "cut")) == 8
    monkeypatch.setattr(fb, "_run_one", lambda *a: made.append(a[3:]) or real(*a))
    made.clear()
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))
    assert res.exit_code == 0, res.output
    assert len(made) == n_runs - 8  # only the missing candidates ran
    cut = json.loads((tmp_path / "cut" / "results.json").read_text())
    for name in ("MosT", "FedProx"):
        for a, b in zip(whole["methods"][name]["runs"], cut["methods"][name]["runs"]):
            assert {k: v for k, v in a.items() if k not in ("seconds", "timing")} == {
                k: v for k, v in b.items() if k not in ("seconds", "timing")}
    assert cut["paired_vs_most"] == whole["paired_vs_most"]

    # finished runs made with other settings are refused before any work, naming what differs
    config_file = finished(tmp_path / "cut")[0] / "config.json"
    kept = config_file.read_text()
    stored = json.loads(kept)
    stored["settings"]["protocol"]["rounds"] = 5
    config_file.write_text(json.dumps(stored))
    made.clear()
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))
    assert res.exit_code == 2 and "othersettings:protocol.rounds(5then,4now)" in _flat(res.output) and made == []
    config_file.write_text("not json")
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))
    assert res.exit_code == 2 and f"{config_file}iscorrupt" in _flat(res.output) and made == []
    config_file.write_text(kept)
    res = runner.invoke(app, args(tmp_path / "cut"))  # without --resume finished runs are refused ...
    assert res.exit_code == 2 and f"holds{n_runs}finishedrun(s)" in _flat(res.output) and made == []
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))  # ... reused with it (the results again) ...
    assert res.exit_code == 0 and made == []
    assert json.loads((tmp_path / "cut" / "results.json").read_text())["methods"] == cut["methods"]
    res = runner.invoke(app, args(tmp_path / "cut", "--restart"))  # ... and made again with --restart
    assert res.exit_code == 0 and len(made) == n_runs and len(finished(tmp_path / "cut")) == n_runs


def test_batched_runs_equal_runs_one_by_one_and_a_stopped_batch_keeps_the_finished_ones(tmp_path, monkeypatch):
    """The default makes each seed's runs as one batch (most.federated.run_batch): every number
    of every candidate equals the run-by-run table's (logistic regression: bit for bit), a batch
    stopped midway loses only its own runs, and --resume makes only those."""
    from most.bench import federated as fb

    def args(out, *extra):
        return ["bench", "federated", "--rounds", "6", "--seed", "0", "--seed", "1", "--server-lr", "1",
                "--server-lr", "3", "--method", "MosT", "--method", "FedProx", "--method", "MGDA",
                "--out", str(out), "--quiet", *extra]

    def numbers(results):
        return {name: [{k: v for k, v in run.items() if k not in ("seconds", "timing")} for run in entry["runs"]]
                for name, entry in results["methods"].items()}

    res = runner.invoke(app, args(tmp_path / "alone", "--no-batch"))
    assert res.exit_code == 0, res.output
    alone = json.loads((tmp_path / "alone" / "results.json").read_text())
    real, batches = fb._run_batch, []

    def counted(config, data, model, tasks):
        batches.append(list(tasks))
        return real(config, data, model, tasks)

    monkeypatch.setattr(fb, "_run_batch", counted)
    res = runner.invoke(app, args(tmp_path / "batched"))
    assert res.exit_code == 0, res.output
    assert [len(b) for b in batches] == [12, 12] and {t[0] for t in batches[0]} == {0}  # one batch per seed
    batched = json.loads((tmp_path / "batched" / "results.json").read_text())
    assert numbers(batched) == numbers(alone)
    assert batched["paired_vs_most"] == alone["paired_vs_most"]

    def stopped_in_the_second_batch(config, data, model, tasks):
        if batches:
            raise KeyboardInterrupt
        return counted(config, data, model, tasks)

    batches.clear()
    monkeypatch.setattr(fb, "_run_batch", stopped_in_the_second_batch)
    res = runner.invoke(app, args(tmp_path / "cut"))
    assert res.exit_code == 130 and "--resume" in res.output
    kept = sorted((tmp_path / "cut" / RUNS_DIR).rglob("result.json"))
    assert len(kept) == 12 and all(p.parent.name == "seed0" for p in kept)  # the finished batch, whole
    batches.clear()
    monkeypatch.setattr(fb, "_run_batch", counted)
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))
    assert res.exit_code == 0, res.output
    assert len(batches) == 1 and {t[0] for t in batches[0]} == {1}  # only the missing seed's runs
    assert numbers(json.loads((tmp_path / "cut" / "results.json").read_text())) == numbers(alone)


def test_runs_in_worker_processes_give_the_results_of_one_process(tmp_path):
    def args(out, *extra):
        return ["bench", "federated", "--rounds", "4", "--seed", "0", "--seed", "1", "--server-lr", "1",
                "--server-lr", "3", "--method", "MosT", "--method", "FedProx", "--out", str(out), "--quiet", *extra]

    res = runner.invoke(app, args(tmp_path / "one"))
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, args(tmp_path / "two", "--jobs", "2"))
    assert res.exit_code == 0, res.output
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    for name in ("MosT", "FedProx"):
        assert [r["seed"] for r in two["methods"][name]["runs"]] == [0, 1]
        for a, b in zip(one["methods"][name]["runs"], two["methods"][name]["runs"]):
            assert {k: v for k, v in a.items() if k not in ("seconds", "timing")} == {
                k: v for k, v in b.items() if k not in ("seconds", "timing")}
    assert two["paired_vs_most"] == one["paired_vs_most"]


def test_jobs_are_checked_and_methods_added_at_run_time_stay_in_one_process(tmp_path, monkeypatch):
    from most.bench import federated as fb

    config = fb.FederatedBenchConfig(methods=("FedAvg",), seeds=(0,), out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="jobs"):
        fb.run_benchmark(config, jobs=0)
    monkeypatch.setitem(fb.METHODS, "FedAvg (late)", fb.METHODS["FedAvg"])
    late = dataclasses.replace(config, methods=("FedAvg (late)",))
    with pytest.raises(ValueError, match=r"added to METHODS at run time.*jobs=1"):
        fb.run_benchmark(late, jobs=2)
    assert not (tmp_path / RUNS_DIR).exists()  # refused before any work


def test_the_mixture_data_sets_are_fedems_synthetic_data_with_a_binary_logistic_model():
    from most.bench.federated import FederatedBenchConfig, _data

    for name, labels in (("mixture", False), ("mixture-reference", True)):
        config = FederatedBenchConfig(dataset=name, n_models=3, methods=("FedEM",), seeds=(0,))
        data, model = _data(config, 0)
        expected = fl.mixture_synthetic(seed=0, reference_labels=labels)
        assert data.n_clients == 300 and data.groups == expected.groups
        assert torch.equal(data.clients[7].y_train, expected.clients[7].y_train)
        assert model.dim == 151 * 2 and config.label.startswith("FedEM's synthetic mixture")
    with pytest.raises(ValueError, match="choose one of.*'mixture'"):
        FederatedBenchConfig(dataset="mixtures")


def test_a_join_of_runs_made_with_other_cpu_kernels_says_so(tmp_path, capsys):
    from most.bench import _merge
    from most._kernels import cpu_kernels, software

    def bench(out, method):
        res = runner.invoke(app, ["bench", "federated", "--rounds", "3", "--server-lr", "3", "--seed", "0",
                                  "--method", method, "--out", str(out), "--quiet"])
        assert res.exit_code == 0, res.output
        return json.loads((out / "results.json").read_text())

    dest, source = bench(tmp_path / "dest", "MosT"), bench(tmp_path / "source", "IFCA")
    assert dest["cpu_kernels"] == cpu_kernels() and dest["torch"] == torch.__version__
    assert {key: dest[key] for key in software()} == software()
    _merge.merge(json.loads(json.dumps(dest)), [source])
    assert "CPU kernels" not in capsys.readouterr().err
    assert _merge.merge(dest, [dict(source, cpu_kernels="ELSEWHERE")]) == ["IFCA"]
    assert f"source 1 ran with torch's ELSEWHERE CPU kernels, the destination with {cpu_kernels()}" in \
        capsys.readouterr().err


STORED_TABLES = sorted(p.parent for p in (Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "federated")
                       .glob("**/table.md") if (p.parent / "results.json").is_file())


@pytest.mark.parametrize("folder", STORED_TABLES, ids=lambda p: p.relative_to(p.parents[2]).as_posix())
def test_a_stored_table_is_what_the_bench_writes_from_its_results_file(folder):
    """Each stored ``table.md`` is regenerated from its ``results.json``, not edited by hand, so a
    merge or a re-run of the stored command changes only what the runs change."""
    assert fb.table_markdown(load_results(folder)) + "\n" == (folder / "table.md").read_text()


def test_the_stored_tables_are_found():
    assert len(STORED_TABLES) >= 60


def _drawn_figures(results: dict, out) -> dict:
    """The figures of :func:`draw_figures` by file name, kept open to be read."""
    import matplotlib.pyplot as plt

    from most.bench.federated import draw_figures

    figs: list = []
    real_close = plt.close
    plt.close = lambda fig=None: figs.append(fig)
    try:
        written = draw_figures(results, out)
    finally:
        plt.close = real_close
    return dict(zip(written, figs))


def test_a_method_keeps_its_colour_in_every_figure_of_the_report(tmp_path):
    from matplotlib.colors import to_rgb

    from most.plots import method_style

    results = _fake_results()
    del results["methods"]["MosT"]["runs"][0]["val_curve"]  # MosT left out of the accuracy curves
    figs = _drawn_figures(results, tmp_path)
    assert "MosT" not in [ln.get_label() for ln in figs["accuracy_curves.png"].axes[0].get_lines()]
    want = {name: to_rgb(method_style(k)["color"]) for k, name in enumerate(results["methods"])}
    seen = 0
    for fig in figs.values():
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_label() in want:
                    assert to_rgb(line.get_color()) == want[line.get_label()], line.get_label()
                    seen += 1
            for bars in ax.containers:
                if bars.get_label() in want:
                    assert to_rgb(bars.patches[0].get_facecolor()) == want[bars.get_label()]
                    seen += 1
    assert seen >= 10
    _close_all(figs)


def _close_all(figs: dict) -> None:
    import matplotlib.pyplot as plt

    for fig in figs.values():
        plt.close(fig)


def test_the_accuracy_curves_are_drawn_at_the_rounds_as_stored_with_whole_ticks(tmp_path):
    results = _fake_results()
    figs = _drawn_figures(results, tmp_path)
    ax = figs["accuracy_curves.png"].axes[0]
    stored = [t for t, _ in results["methods"]["MosT"]["runs"][0]["val_curve"]]
    assert list(ax.get_lines()[0].get_xdata()) == stored
    figs["accuracy_curves.png"].canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    _close_all(figs)


def test_a_resumed_table_compares_the_data_by_its_digest_not_by_its_path(tmp_path):
    from tests.federated.test_data import _leaf_blob, _write

    users = {f"w{k}": (8, [k % 3, 1, 2, 3, 4, 5, 6, 7]) for k in range(4)}
    _write(tmp_path / "leaf" / "train" / "a.json", _leaf_blob(users), False)
    _write(tmp_path / "leaf" / "test" / "a.json", _leaf_blob({u: (4, [0, 1, 2, 3]) for u in users}), False)
    (tmp_path / "link").symlink_to(tmp_path / "leaf")
    out = tmp_path / "out"

    def call(path, *extra):
        return runner.invoke(app, ["bench", "federated", "--dataset", "femnist", "--data-path", str(path), "--model",
                                   "linear", "--n-models", "2", "--rounds", "1", "--seed", "0", "--server-lr", "1",
                                   "--method", "FedAvg", "--out", str(out), "--quiet", *extra])

    res = call(tmp_path / "leaf")
    assert res.exit_code == 0, res.output
    run = out / RUNS_DIR / "FedAvg_server_lr=1.0" / "seed0"
    stored = (run / "result.json").stat().st_mtime_ns
    digest = json.loads((run / "result.json").read_text())["data_digest"]
    assert json.loads((run / "config.json").read_text())["settings"]["data_digest"] == digest
    res = call(tmp_path / "link", "--resume")  # the same files through a link
    assert res.exit_code == 0, res.output
    assert (run / "result.json").stat().st_mtime_ns == stored  # reused, not made again
    # a run stored before its settings held the digest: the digest of its result.json is compared
    config = json.loads((run / "config.json").read_text())
    del config["settings"]["data_digest"]
    config["settings"]["data_path"] = "/where/it/was/then"
    (run / "config.json").write_text(json.dumps(config))
    res = call(tmp_path / "link", "--resume")
    assert res.exit_code == 0, res.output
    # other data under the same path
    _write(tmp_path / "leaf" / "train" / "a.json", _leaf_blob({u: (8, [7] * 8) for u in users}), False)
    res = call(tmp_path / "leaf", "--resume")
    assert res.exit_code != 0 and f"othersettings:data_digest(\"{digest}\"then" in _flat(res.output), res.output


def test_a_thinned_history_records_its_plans_rounds_and_no_drift_across_them(monkeypatch):
    """A long run's history keeps every k-th plan: the record says at which rounds, and leaves
    out the drift, which would span several rounds between kept plans."""
    import most.federated.server as server
    from most.bench import federated as bench

    data = fl.fedprox_synthetic(0.5, 0.5, n_clients=6, samples_per_client=30, seed=0)
    config = fl.FederatedConfig(rounds=7, seed=0)
    method = fl.methods.MosT(n_models=2, warmup=None)
    full = bench._record(data, fl.run_federated(data, fl.logistic_regression(60, 10), method, config), 0, 1.0, {}, 0.0,
                         method)
    assert full["plan_rounds"] == list(range(7)) and len(full["drift"]) == 6
    monkeypatch.setattr(server, "HISTORY_NUMBERS", 2 * 6 * 2)  # every 4th plan and the last
    thin = bench._record(data, fl.run_federated(data, fl.logistic_regression(60, 10), method, config), 0, 1.0, {}, 0.0,
                         method)
    assert thin["plan_rounds"] == [0, 4, 6] and thin["drift"] is None and len(thin["plans"]) == 3
    assert thin["mean"] == full["mean"]
