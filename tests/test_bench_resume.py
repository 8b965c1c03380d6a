"""Resuming an interrupted `most bench` call: the runs file, and resumed results equal to an
uninterrupted call's (few-objective, mtl; the federated table's test is in
test_bench_federated.py, the prompts' in test_prompts.py)."""

from __future__ import annotations

import json
import re

import pytest
from _shared import SHARED_DATA
from typer.testing import CliRunner

from most.bench import _runs
from most.bench._runs import RUNS_FILE, RunLog
from most.cli import app

runner = CliRunner()


def _flat(output: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", "", output)


def _without_seconds(value):
    """``value`` with every ``seconds`` entry left out (the one thing a resumed call may change)."""
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k not in ("seconds", "seconds_mean", "figures")}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


@pytest.fixture
def stop_after(monkeypatch):
    """``stop_after(k)``: the next calls record k runs, then are stopped (KeyboardInterrupt) as the
    next run would be recorded; ``made`` counts the runs recorded since the last ``stop_after``."""
    real, state = RunLog.add, {"limit": None, "made": 0}

    def add(self, key, run):
        if state["limit"] is not None and state["made"] == state["limit"]:
            raise KeyboardInterrupt
        state["made"] += 1
        return real(self, key, run)

    monkeypatch.setattr(_runs.RunLog, "add", add)

    def set_limit(k):
        state.update(limit=k, made=0)
        return state

    return set_limit


def test_the_runs_file_keeps_runs_drops_a_cut_line_and_refuses_other_settings(tmp_path):
    log = RunLog(tmp_path, {"rounds": 3}, suite="mtl")
    log.add(("MosT", 0), {"accuracy": 0.5})
    log.add(("fair", "EPO", 1, 0.05, (20, 1.0)), {"accuracy": [0.1, 0.2]})
    assert log.run(("MosT", 0), lambda: pytest.fail("a recorded run is not made again")) == {"accuracy": 0.5}
    with (tmp_path / RUNS_FILE).open("a") as handle:
        handle.write('{"key": ["MGDA", 0], "run": {"accu')  # stopped while writing
    again = RunLog(tmp_path, {"rounds": 3}, suite="mtl", resume=True)
    assert again.get(("fair", "EPO", 1, 0.05, (20, 1.0))) == {"accuracy": [0.1, 0.2]}  # tuples match their lists
    assert again.get(("MGDA", 0)) is None and again.get(("MosT", 1)) is None
    assert len((tmp_path / RUNS_FILE).read_text().splitlines()) == 3  # the cut line is gone
    again.add(("MGDA", 0), {"accuracy": 0.25})  # appended on a line of its own
    assert RunLog(tmp_path, {"rounds": 3}, suite="mtl", resume=True).get(("MGDA", 0)) == {"accuracy": 0.25}

    with pytest.raises(ValueError, match=r"other settings \(lr, rounds differ\).*leave out --resume"):
        RunLog(tmp_path, {"rounds": 4, "lr": 0.1}, suite="mtl", resume=True)
    with pytest.raises(ValueError, match=r"holds 3 finished run\(s\).*--resume.*--restart"):
        RunLog(tmp_path, {"rounds": 4}, suite="mtl")  # a forgotten --resume does not drop the runs
    with pytest.raises(ValueError, match="exclude each other"):
        RunLog(tmp_path, {"rounds": 4}, suite="mtl", resume=True, restart=True)
    RunLog(tmp_path, {"rounds": 4}, suite="mtl", restart=True)  # starts the file again
    assert RunLog(tmp_path, {"rounds": 4}, suite="mtl", resume=True).done == {}
    RunLog(tmp_path, {"rounds": 5}, suite="mtl")  # a file without runs needs neither
    (tmp_path / RUNS_FILE).write_text("rounds = 3\n")
    with pytest.raises(ValueError, match="not a runs file written by `most bench mtl`"):
        RunLog(tmp_path, {"rounds": 3}, suite="mtl", resume=True)
    RunLog(tmp_path, {}, suite="mtl").remove()
    assert not (tmp_path / RUNS_FILE).exists()
    assert RunLog(tmp_path, {}, suite="mtl", resume=True).done == {}  # nothing to resume: starts afresh


def test_an_interrupted_few_objective_call_resumes_to_the_same_results(tmp_path, stop_after):
    def args(out, *extra):
        return ["bench", "few-objective", "--out", str(out), "--problem", "zdt1", "--problem", "synthetic",
                "--method", "MosT-E (paper)", "--method", "MGDA", "--seed", "0", "--seed", "1",
                "--zdt-rounds", "15", "--fairness-rounds", "8", "--quiet", *extra]

    n_runs = 2 * 2 + 2 * (2 * 3 + 2 * 1)  # zdt1: 2 methods x 2 seeds; fairness: 2 lrs x variants, per seed
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "whole"))
    assert res.exit_code == 0, res.output
    assert state["made"] == n_runs and not (tmp_path / "whole" / RUNS_FILE).exists()
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())

    state = stop_after(7)  # inside the fairness search, after the ZDT runs
    res = runner.invoke(app, args(tmp_path / "cut"))
    assert res.exit_code == 130 and "--resume" in res.output and f"{tmp_path / 'cut'}" in _flat(res.output)
    assert len((tmp_path / "cut" / RUNS_FILE).read_text().splitlines()) == 1 + 7
    assert not (tmp_path / "cut" / "results.json").exists()
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "cut", "--resume"))
    assert res.exit_code == 0, res.output
    assert state["made"] == n_runs - 7  # only the missing runs
    cut = json.loads((tmp_path / "cut" / "results.json").read_text())
    assert _without_seconds(cut["problems"]) == _without_seconds(whole["problems"])

    # stopped again, the missing runs made in two worker processes: the same results
    state = stop_after(3)
    res = runner.invoke(app, args(tmp_path / "jobs"))
    assert res.exit_code == 130
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "jobs", "--resume", "--jobs", "2"))
    assert res.exit_code == 0, res.output
    assert state["made"] == n_runs - 3 and not (tmp_path / "jobs" / RUNS_FILE).exists()
    jobs = json.loads((tmp_path / "jobs" / "results.json").read_text())
    assert _without_seconds(jobs["problems"]) == _without_seconds(whole["problems"])

    # a resumed call with other settings is refused before any work
    state = stop_after(2)
    res = runner.invoke(app, args(tmp_path / "cut2"))
    assert res.exit_code == 130
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "cut2", "--resume", "--zdt-rounds", "16"))
    assert res.exit_code != 0 and "zdt_roundsdiffer" in _flat(res.output) and state["made"] == 0


OFFICE = SHARED_DATA / "office_caltech10"


@pytest.mark.skipif(not OFFICE.is_dir(), reason=f"Office-Caltech10 not found at {OFFICE} (../shared/data)")
def test_an_interrupted_mtl_call_resumes_to_the_same_results(tmp_path, stop_after):
    from most.bench import mtl

    def config(out, **kw):
        return mtl.MTLConfig(**{**dict(methods=("MosT", "Linearization"), seeds=(0, 1), rounds=10, batch_size=8,
                                       data_path=OFFICE, out=out, progress=False), **kw})

    def stopped_then_resumed(folder, k, first, jobs=1):
        """``first`` (a config for ``folder``) stopped after k runs, then the whole table resumed."""
        stop_after(k)
        with pytest.raises(KeyboardInterrupt):
            mtl.run_benchmark(first)
        state = stop_after(None)
        runs = mtl.run_benchmark(config(folder), resume=True, jobs=jobs)["runs"]
        return state["made"], runs

    whole = _without_seconds(mtl.run_benchmark(config(tmp_path / "whole"))["runs"])
    made, runs = stopped_then_resumed(tmp_path / "cut", 3, config(tmp_path / "cut"))
    assert made == 1 and _without_seconds(runs) == whole
    # a resumed call may add seeds (or methods): only their runs are made
    made, runs = stopped_then_resumed(tmp_path / "more", 1, config(tmp_path / "more", seeds=(0,)))
    assert made == 3 and _without_seconds(runs) == whole
    # the missing runs in two worker processes: the same results
    made, runs = stopped_then_resumed(tmp_path / "jobs", 1, config(tmp_path / "jobs", seeds=(0,)), jobs=2)
    assert made == 3 and _without_seconds(runs) == whole


def _thread_counts(_job):
    import numpy  # noqa: F401  (loads NumPy's BLAS)
    import scipy.linalg  # noqa: F401  (and SciPy's, which its wheels bring apart)
    import threadpoolctl
    import torch

    return torch.get_num_threads(), sorted({lib["num_threads"] for lib in threadpoolctl.threadpool_info()})


def test_workers_start_their_blas_and_torch_pools_with_the_threads_asked_for(monkeypatch):
    # with the machine's default every worker would start a BLAS thread per core (FedMGDA+'s
    # solver ran 7x slower in two such workers on 2 cores); the caller's environment is restored
    import os

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert list(_runs.in_workers(_thread_counts, [0, 1], processes=2, threads=1)) == [(1, [1])] * 2
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3" and "OMP_NUM_THREADS" not in os.environ
