"""A federated results folder in two files: the split and the join give back the whole results."""

import copy
import json

from most.bench._curves import CURVES, load_results, split_curves


def _results():
    run = {"seed": 0, "mean": 0.8, "per_client": [0.7, 0.9], "val_curve": [[0, 0.5], [4, 0.7]],
           "loss_curve": [2.0, 1.0], "sparsity": [0.1, 0.2], "drift": [0.3], "plans": [[0, 1], [1, 1]]}
    plain = {"seed": 0, "mean": 0.7, "per_client": [0.6, 0.8], "val_curve": [[0, 0.4]], "loss_curve": [2.5],
             "sparsity": [], "drift": [], "plans": []}
    return {"label": "x", "methods": {"MosT": {"runs": [run, {**run, "seed": 1}], "mean": {"mean": 0.8, "std": 0}},
                                      "FedAvg": {"runs": [plain]}}}


def test_split_keeps_scalars_and_final_plan_and_join_gives_the_whole_back(tmp_path):
    whole = _results()
    before = copy.deepcopy(whole)
    compact, curves = split_curves(whole)
    assert whole == before  # the input is not changed
    run = compact["methods"]["MosT"]["runs"][0]
    assert run == {"seed": 0, "mean": 0.8, "per_client": [0.7, 0.9], "plans": [[1, 1]]}
    assert compact["methods"]["FedAvg"]["runs"][0]["plans"] == []
    assert compact["methods"]["MosT"]["mean"] == {"mean": 0.8, "std": 0}
    (tmp_path / "results.json").write_text(json.dumps(compact))
    assert load_results(tmp_path) == compact  # without curves.json: the compact results
    (tmp_path / "curves.json").write_text(json.dumps(curves))
    assert load_results(tmp_path) == before


def test_curves_of_another_call_are_not_joined(tmp_path):
    compact, curves = split_curves(_results())
    curves["methods"]["MosT"] = curves["methods"]["MosT"][:1]  # one run fewer than results.json
    (tmp_path / "results.json").write_text(json.dumps(compact))
    (tmp_path / "curves.json").write_text(json.dumps(curves))
    joined = load_results(tmp_path)
    assert not set(CURVES) - {"plans"} & set(joined["methods"]["MosT"]["runs"][0])
    assert "val_curve" in joined["methods"]["FedAvg"]["runs"][0]
