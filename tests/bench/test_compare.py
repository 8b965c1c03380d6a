"""A variant run alone, compared seed by seed with a main table: :func:`most.bench._compare.compare`
and its command line, ``benchmarks/federated_tools.py compare``, run as a script."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from most.bench import _compare as compare_federated
from most.cli import app
from most.federated import evaluation as ev

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
NAME = "MosT (update split)"


def _script(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "federated_tools.py"), "compare", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def _bench(out, *args):
    res = runner.invoke(app, ["bench", "federated", "--rounds", "8", "--server-lr", "1", "--server-lr", "3",
                              "--out", str(out), "--quiet", *args])
    assert res.exit_code == 0, res.output
    return json.loads((out / "results.json").read_text())


def test_a_variant_run_alone_is_compared_as_if_run_with_the_table(tmp_path):
    seeds = ["--seed", "0", "--seed", "1", "--seed", "2"]
    main = _bench(tmp_path / "main", *seeds, "--method", "MosT", "--method", "IFCA")
    variant = _bench(tmp_path / "variant", *seeds, "--method", NAME)
    together = _bench(tmp_path / "together", *seeds, "--method", NAME, "--method", "IFCA")
    assert (tmp_path / "variant" / "gamma.png").stat().st_size > 1000  # the variant's own plans
    res = _script(tmp_path / "variant", tmp_path / "main", "--method", NAME)
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "variant" / "compare.md").read_text()
    assert text == compare_federated.compare(variant, main, NAME) and text in res.stdout

    # the interval is the paired difference of the stored runs, and the same as with both run together
    v = [r["mean"] for r in variant["methods"][NAME]["runs"]]
    for other in ("MosT", "IFCA"):
        o = [r["mean"] for r in main["methods"][other]["runs"]]
        p = ev.paired_difference(v, o)
        row = re.search(rf"\| {re.escape(other)} \| ([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\]", text)
        assert row and float(row.group(1)) == pytest.approx(100 * p["mean"], abs=0.006)
        assert float(row.group(2)) == pytest.approx(100 * p["low"], abs=0.006)
    assert [r["mean"] for r in together["methods"][NAME]["runs"]] == v
    # validation accuracies at the chosen steps, the variant's and MosT's
    val = re.search(rf"\| {re.escape(NAME)} \| (\d+\.\d\d) \| (\d+\.\d\d) \| (\d+\.\d\d) \|", text)
    assert [float(x) for x in val.groups()] == pytest.approx(
        [100 * r["val_accuracy"] for r in variant["methods"][NAME]["runs"]], abs=0.006)


def test_or_most_reports_the_choice_on_validation_between_the_variant_and_most(tmp_path):
    seeds = ["--seed", "0", "--seed", "1", "--seed", "2"]
    main = _bench(tmp_path / "main", *seeds, "--method", "MosT", "--method", "IFCA")
    variant = _bench(tmp_path / "variant", *seeds, "--method", "MosT (warm-up 30)")
    v = variant["methods"]["MosT (warm-up 30)"]["runs"]
    m = main["methods"]["MosT"]["runs"]
    chosen = [a if a["val_accuracy"] > b["val_accuracy"] else b for a, b in zip(v, m)]
    text = compare_federated.compare(variant, main, "MosT (warm-up 30)", or_most=True)
    labels = re.search(r"\| chosen \| (.*) \|", text).group(1).split(" | ")
    assert labels == ["MosT (warm-up 30)" if c is a else "MosT" for c, a in zip(chosen, v)]
    i = [r["mean"] for r in main["methods"]["IFCA"]["runs"]]
    p = ev.paired_difference([c["mean"] for c in chosen], i)
    row = re.search(r"\| IFCA \| ([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\]", text)
    assert float(row.group(1)) == pytest.approx(100 * p["mean"], abs=0.006)
    assert float(row.group(3)) == pytest.approx(100 * p["high"], abs=0.006)
    # the choice needs MosT's runs for every seed of the variant
    no_most = dict(main, methods={"IFCA": main["methods"]["IFCA"]})
    with pytest.raises(compare_federated.CompareError, match="no run for seeds"):
        compare_federated.compare(variant, no_most, "MosT (warm-up 30)", or_most=True)


def test_folders_that_cannot_be_compared_are_refused(tmp_path):
    main = _bench(tmp_path / "main", "--seed", "0", "--seed", "1", "--method", "MosT")
    variant = _bench(tmp_path / "variant", "--seed", "0", "--seed", "1", "--method", NAME)
    bad = [
        (dict(variant, config={**variant["config"], "rho": [1.0, 1.0]}), main, NAME, "different settings.*rho"),
        (dict(variant, config={**variant["config"], "server_lrs": [1.0]}), main, NAME, "not the main table's MosT grid"),
        (variant, main, "MosT (capacity)", "no method 'MosT \\(capacity\\)'"),
        (variant, dict(main, methods={"MosT": {**main["methods"]["MosT"],
                                               "runs": main["methods"]["MosT"]["runs"][:1]}}), NAME,
         r"no run for seeds \[1\]"),
    ]
    for results, against, name, match in bad:
        with pytest.raises(compare_federated.CompareError, match=match):
            compare_federated.compare(results, against, name)
    # a device of None (the benchmark's default) and "cpu" are the same computation; CUDA is not
    assert main["config"]["protocol"]["device"] is None
    on = lambda device: dict(variant, config={**variant["config"],  # noqa: E731
                                              "protocol": {**variant["config"]["protocol"], "device": device}})
    assert compare_federated.compare(on("cpu"), main, NAME) == compare_federated.compare(variant, main, NAME)
    with pytest.raises(compare_federated.CompareError, match="different settings.*protocol"):
        compare_federated.compare(on("cuda"), main, NAME)
    # two data paths: alike where the runs' data digests agree (the same data), refused where they
    # differ or were never recorded
    moved = json.loads(json.dumps(variant))
    moved["config"]["data_path"] = "/elsewhere/same_files"
    assert compare_federated.compare(moved, main, NAME) == compare_federated.compare(variant, main, NAME)
    moved["methods"][NAME]["runs"][1]["data_digest"] = "0" * 16
    with pytest.raises(compare_federated.CompareError, match=r"read other data than the main table for seeds \[1\]"):
        compare_federated.compare(moved, main, NAME)
    for run in moved["methods"][NAME]["runs"]:
        del run["data_digest"]
    with pytest.raises(compare_federated.CompareError, match="different settings.*data_path"):
        compare_federated.compare(moved, main, NAME)
    # on the command line: usage errors, before anything is written
    res = _script(tmp_path / "variant", tmp_path / "nowhere", "--method", NAME)
    assert res.returncode == 2 and "nowhere: no results.json" in res.stderr
    res = _script(tmp_path / "variant", tmp_path / "main", "--method", "MosT (capacity)")
    assert res.returncode == 2 and "no method 'MosT (capacity)'" in res.stderr
    # --report names the file, so a folder with two variants keeps one report per variant
    res = _script(tmp_path / "variant", tmp_path / "main", "--method", NAME, "--report", "compare_split.md")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "variant" / "compare_split.md").read_text().startswith(f"# {NAME} against")
    assert not (tmp_path / "variant" / "compare.md").exists()
    res = _script(tmp_path / "variant", tmp_path / "main", "--method", NAME, "--report", "../x.md")
    assert res.returncode == 2 and "plain file name" in res.stderr
