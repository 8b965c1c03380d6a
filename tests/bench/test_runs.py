"""Resuming an interrupted `most bench` call: the run store (``OUT/runs``, the results store of
`most run`), and resumed results equal to an uninterrupted call's (few-objective, mtl; the
federated table's test is in tests/bench/test_federated.py, the prompts' in tests/prompts/test_prompts.py)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
from tests._shared import SHARED_DATA
from typer.testing import CliRunner

from most.bench import _runs
from most._kernels import cpu_kernels
from most.bench._runs import LEGACY_RUNS_FILE, RUNS_DIR, RunStore, folder_name
from most.cli import app
from most.experiments.store import CorruptFileError

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


def _finished(out: Path) -> int:
    """The finished runs kept in ``out``."""
    return len(list((out / RUNS_DIR).rglob("result.json")))


@pytest.fixture
def stop_after(monkeypatch):
    """``stop_after(k)``: the next calls record k runs, then are stopped (KeyboardInterrupt) as the
    next run would be recorded; ``made`` counts the runs recorded since the last ``stop_after``."""
    real, state = RunStore.add, {"limit": None, "made": 0}

    def add(self, key, run):
        if state["limit"] is not None and state["made"] == state["limit"]:
            raise KeyboardInterrupt
        state["made"] += 1
        return real(self, key, run)

    monkeypatch.setattr(_runs.RunStore, "add", add)

    def set_limit(k):
        state.update(limit=k, made=0)
        return state

    return set_limit


def _store(out, settings=None, **kwargs) -> RunStore:
    return RunStore(out, {"rounds": 3} if settings is None else settings, suite="mtl",
                    folder=lambda key: folder_name(*key[:-1], f"seed{key[-1]}"), **kwargs)


def test_every_run_is_a_run_folder_read_back_as_a_resumed_call_reads_it(tmp_path):
    store = _store(tmp_path)
    assert store.missing([("MosT", 0)]) == [("MosT", 0)] and not (tmp_path / RUNS_DIR).exists()  # nothing written yet
    run = {"accuracy": 0.1 + 0.2, "curve": [(0, 0.5)], "val": -math.inf, "mean": math.nan}
    back = store.add(("MosT", 0), run)
    folder = tmp_path / RUNS_DIR / "MosT" / "seed0"
    assert json.loads((folder / "config.json").read_text()) == {"suite": "mtl", "key": ["MosT", 0],
                                                                 "settings": {"rounds": 3, "cpu_kernels": cpu_kernels()}}
    # the numbers exactly (a failed candidate's -inf and NaN too), tuples as the lists JSON keeps
    assert back["accuracy"] == 0.1 + 0.2 and back["curve"] == [[0, 0.5]] and back["val"] == -math.inf
    assert math.isnan(back["mean"]) and store.get(("MosT", 0)) == back | {"mean": back["mean"]}
    store.add(("fair", ("EPO", ("lr", 0.05), ("variant", (20, 1.0))), 1), {"accuracy": [0.1, 0.2]})
    assert (tmp_path / RUNS_DIR / "fair" / "EPO_lr=0.05_variant=20_1.0" / "seed1" / "result.json").is_file()

    again = _store(tmp_path, resume=True)
    assert again.missing([("MosT", 0), ("MosT", 1), ("MGDA", 0)]) == [("MosT", 1), ("MGDA", 0)]
    assert again.get(("fair", ("EPO", ("lr", 0.05), ("variant", (20, 1.0))), 1)) == {"accuracy": [0.1, 0.2]}
    # a run stopped between its two files: its config.json alone does not make it finished
    (tmp_path / RUNS_DIR / "MGDA" / "seed0").mkdir(parents=True)
    (tmp_path / RUNS_DIR / "MGDA" / "seed0" / "config.json").write_text(
        json.dumps({"suite": "mtl", "key": ["MGDA", 0], "settings": {"rounds": 3}}))
    assert _store(tmp_path, resume=True).missing([("MGDA", 0)]) == [("MGDA", 0)]


def test_finished_runs_are_kept_unless_restart_and_other_settings_are_named(tmp_path):
    first = _store(tmp_path)  # a folder without finished runs needs neither flag
    first.add(("MosT", 0), {"accuracy": 0.5})
    first.add(("MosT", 1), {"accuracy": 0.25})
    with pytest.raises(ValueError, match=r"holds 2 finished run\(s\).*--resume.*--restart"):
        _store(tmp_path)  # a forgotten --resume does not drop the runs
    with pytest.raises(ValueError, match=r"other settings: lr \(null then, 0.1 now\); rounds \(3 then, 4 now\)"
                                         r".*--restart"):
        _store(tmp_path, {"rounds": 4, "lr": 0.1}, resume=True)
    with pytest.raises(ValueError, match=r"other settings: rounds"):
        _store(tmp_path, {"rounds": 4})  # named without --resume too
    with pytest.raises(ValueError, match="exclude each other"):
        _store(tmp_path, resume=True, restart=True)
    assert _store(tmp_path, {"rounds": 4}, restart=True).missing([("MosT", 0)]) == [("MosT", 0)]
    assert not (tmp_path / RUNS_DIR).exists()  # the runs of the earlier call are gone
    _store(tmp_path, resume=True)  # nothing to resume: starts afresh


def test_runs_made_with_other_cpu_kernels_are_refused_naming_the_variable_that_chooses_them(tmp_path, monkeypatch):
    _store(tmp_path).add(("MosT", 0), {"accuracy": 0.5})
    assert json.loads((tmp_path / RUNS_DIR / "MosT" / "seed0" / "config.json").read_text())["settings"][
        "cpu_kernels"] == str(torch.backends.cpu.get_cpu_capability())
    monkeypatch.setattr(_runs, "cpu_kernels", lambda: "SOMETHING_ELSE")
    with pytest.raises(ValueError, match=r"cpu_kernels \(\"[A-Z0-9_]+\" then, \"SOMETHING_ELSE\" now\).*"
                                         r"ATEN_CPU_CAPABILITY=[a-z0-9_]+ in the environment"):
        _store(tmp_path, resume=True)


def test_runs_recorded_before_the_kernels_were_are_resumed(tmp_path):
    _store(tmp_path).add(("MosT", 0), {"accuracy": 0.5})
    config = tmp_path / RUNS_DIR / "MosT" / "seed0" / "config.json"
    config.write_text(json.dumps({"suite": "mtl", "key": ["MosT", 0], "settings": {"rounds": 3}}))
    again = _store(tmp_path, resume=True)
    assert again.missing([("MosT", 0), ("MosT", 1)]) == [("MosT", 1)] and again.get(("MosT", 0)) == {"accuracy": 0.5}
    with pytest.raises(ValueError, match=r"other settings: rounds \(3 then, 4 now\)"):
        _store(tmp_path, {"rounds": 4}, resume=True)  # the other settings are still checked


def test_what_is_not_a_run_of_the_suite_is_refused_and_never_removed(tmp_path):
    RunStore(tmp_path, {}, suite="few-objective", folder=lambda key: "a/seed0").add(("a", 0), {"v": 1})
    for flags in ({}, {"resume": True}, {"restart": True}):
        with pytest.raises(ValueError, match=r"not a run of `most bench mtl` \(it is one of `most bench few-objective`"):
            _store(tmp_path, **flags)
    other = tmp_path / "other"  # a folder of `most run` (its config.json names no suite)
    (other / RUNS_DIR / "MosT" / "seed0").mkdir(parents=True)
    (other / RUNS_DIR / "MosT" / "seed0" / "config.json").write_text(json.dumps({"group": "MosT", "seed": 0}))
    with pytest.raises(ValueError, match="it is one of another command"):
        _store(other, restart=True)
    assert (other / RUNS_DIR / "MosT" / "seed0" / "config.json").is_file()
    linked = tmp_path / "linked"  # runs reached through a link would be written, or removed, elsewhere
    linked.mkdir()
    (linked / RUNS_DIR).symlink_to(other / RUNS_DIR)
    with pytest.raises(ValueError, match="is a symbolic link"):
        _store(linked, restart=True)
    assert (other / RUNS_DIR / "MosT" / "seed0" / "config.json").is_file()


def test_a_runs_file_of_an_earlier_version_is_refused_until_restart(tmp_path):
    (tmp_path / LEGACY_RUNS_FILE).write_text(json.dumps({"settings": {"rounds": 3}}) + "\n")
    for flags in ({}, {"resume": True}):
        with pytest.raises(ValueError, match=rf"{re.escape(str(tmp_path / LEGACY_RUNS_FILE))} holds runs in the format "
                                              r"of an earlier version.*--restart"):
            _store(tmp_path, **flags)
    _store(tmp_path, restart=True)
    assert not (tmp_path / LEGACY_RUNS_FILE).exists()


def test_damaged_run_files_are_named(tmp_path):
    store = _store(tmp_path)
    store.add(("MosT", 0), {"v": 1})
    folder = tmp_path / RUNS_DIR / "MosT" / "seed0"
    (folder / "result.json").write_text('{"v": ')  # edited by hand: the writes themselves are atomic
    with pytest.raises(CorruptFileError, match=rf"{re.escape(str(folder / 'result.json'))} is corrupt"):
        _store(tmp_path, resume=True).get(("MosT", 0))
    (folder / "config.json").write_text("not json")
    with pytest.raises(CorruptFileError, match=rf"{re.escape(str(folder / 'config.json'))} is corrupt"):
        _store(tmp_path, resume=True)
    (folder / "config.json").write_text(json.dumps({"suite": "mtl", "key": ["MGDA", 0], "settings": {"rounds": 3}}))
    with pytest.raises(CorruptFileError, match=r"holds the run \['MGDA', 0\], not \['MosT', 0\]"):
        _store(tmp_path, resume=True).missing([("MosT", 0)])
    with pytest.raises(ValueError, match="would share the folder"):
        _store(tmp_path / "new").missing([("MosT (a)", 0), ("MosT a", 0)])


def test_run_files_are_written_atomically(tmp_path, monkeypatch):
    names, real = [], os.replace

    def replace(src, dst, *args, **kwargs):
        names.append(Path(dst).name)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    _store(tmp_path).add(("MosT", 0), {"v": 1})
    assert names == ["config.json", "result.json"]  # the result, which marks the run done, last
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_interrupted_few_objective_call_resumes_to_the_same_results(tmp_path, stop_after):
    def args(out, *extra):
        return ["bench", "few-objective", "--out", str(out), "--problem", "zdt1", "--problem", "synthetic",
                "--method", "MosT-E (paper)", "--method", "MGDA", "--seed", "0", "--seed", "1",
                "--zdt-rounds", "15", "--fairness-rounds", "8", "--quiet", *extra]

    n_runs = 2 * 2 + 2 * (2 * 3 + 2 * 1)  # zdt1: 2 methods x 2 seeds; fairness: 2 lrs x variants, per seed
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "whole"))
    assert res.exit_code == 0, res.output
    assert state["made"] == n_runs == _finished(tmp_path / "whole")  # the runs are kept beside the results
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())

    state = stop_after(7)  # inside the fairness search, after the ZDT runs
    res = runner.invoke(app, args(tmp_path / "cut"))
    assert res.exit_code == 130 and "--resume" in res.output and f"{tmp_path / 'cut' / RUNS_DIR}" in _flat(res.output)
    assert _finished(tmp_path / "cut") == 7 and not (tmp_path / "cut" / "results.json").exists()
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "cut"))  # without --resume the finished runs are not dropped
    assert res.exit_code == 2 and "holds7finishedrun(s)" in _flat(res.output) and state["made"] == 0
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
    assert state["made"] == n_runs - 3 and _finished(tmp_path / "jobs") == n_runs
    jobs = json.loads((tmp_path / "jobs" / "results.json").read_text())
    assert _without_seconds(jobs["problems"]) == _without_seconds(whole["problems"])

    # a resumed call with other settings of the stored runs is refused before any work (the two
    # runs made first are fairness runs: the largest batches go first)
    state = stop_after(2)
    res = runner.invoke(app, args(tmp_path / "cut2"))
    assert res.exit_code == 130
    state = stop_after(None)
    res = runner.invoke(app, args(tmp_path / "cut2", "--resume", "--fairness-rounds", "9"))
    assert res.exit_code != 0 and "othersettings:fairness_rounds(8then,9now)" in _flat(res.output)
    assert state["made"] == 0
    res = runner.invoke(app, args(tmp_path / "cut2", "--restart", "--zdt-rounds", "16"))  # starts over
    assert res.exit_code == 0 and state["made"] == n_runs == _finished(tmp_path / "cut2")


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


def test_at_most_one_worker_per_run_and_per_core(monkeypatch):
    # `--jobs 1000` for one run started 1000 worker processes, each a Python process with torch
    started: list[int] = []

    def in_workers(worker, jobs, processes, threads):  # no process is started: the jobs run here
        started.append(processes)
        return map(worker, jobs)

    def made(tasks, jobs) -> tuple[dict, list[int]]:
        started.clear()
        runs = dict(_runs.make_runs(tasks, jobs, here=lambda task: ("here", task),
                                    worker=lambda job: (job[1], ("worker", job[1])), config=None))
        return runs, list(started)

    monkeypatch.setattr(_runs, "in_workers", in_workers)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert made([0, 1, 2], 1000) == ({t: ("worker", t) for t in range(3)}, [3])  # one per run
    assert made(list(range(10)), 1000)[1] == [4]  # one per core
    assert made(list(range(10)), 2)[1] == [2]
    assert made([7], 1000) == ({7: ("here", 7)}, [])  # one run: made here
    assert made([], 1000) == ({}, [])  # nothing to make: no worker
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert made([0, 1], 8) == ({0: ("here", 0), 1: ("here", 1)}, [])  # one core: made here
    assert _runs.worker_count(1000, 3) == 1


# ----------------------------------------------------------------------------- the data, by its digest
def _data_store(out, path, digest, **kwargs) -> RunStore:
    settings = {"rounds": 3, "data_path": path} | ({_runs.DATA_DIGEST: digest} if digest is not None else {})
    return _store(out, settings, paths=("data_path",), **kwargs)


def test_the_data_digest_follows_the_data_not_where_it_was_read_from():
    x = torch.arange(12.0).reshape(4, 3)
    digest = _runs.data_digest(x, ["a", "b"], {"labels": torch.tensor([0, 1, 0, 1])})
    assert digest == _runs.data_digest(x.clone(), ["a", "b"], {"labels": torch.tensor([0, 1, 0, 1])})
    assert digest == _runs.data_digest(x.numpy(), ("a", "b"), {"labels": torch.tensor([0, 1, 0, 1]).numpy()})
    others = [_runs.data_digest(x[[1, 0, 2, 3]], ["a", "b"], {"labels": torch.tensor([0, 1, 0, 1])}),  # rows shuffled
              _runs.data_digest(x.double(), ["a", "b"], {"labels": torch.tensor([0, 1, 0, 1])}),  # another dtype
              _runs.data_digest(x.reshape(3, 4), ["a", "b"], {"labels": torch.tensor([0, 1, 0, 1])}),
              _runs.data_digest(x, ["ab"], {"labels": torch.tensor([0, 1, 0, 1])})]
    assert len({digest, *others}) == 5


def test_runs_are_resumed_on_the_same_data_under_another_path_and_refused_on_other_data_under_the_same(tmp_path):
    _data_store(tmp_path, "/data/x", "d1").add(("MosT", 0), {"v": 1})
    assert json.loads((tmp_path / RUNS_DIR / "MosT" / "seed0" / "config.json").read_text())["settings"][
        "data_digest"] == "d1"
    again = _data_store(tmp_path, "link/to/x", "d1", resume=True)  # a link, another spelling: the same data
    assert again.missing([("MosT", 0)]) == [] and again.get(("MosT", 0)) == {"v": 1}
    with pytest.raises(ValueError, match=r"other settings: data_digest \(\"d1\" then, \"d2\" now\) \(the data read "
                                         r"now is not the data the runs were made with.*--restart"):
        _data_store(tmp_path, "/data/x", "d2", resume=True)  # other data under the same path


def test_runs_stored_without_a_digest_resume_when_their_path_matches_as_before(tmp_path):
    _store(tmp_path, {"rounds": 3, "data_path": "/data/x"}).add(("MosT", 0), {"v": 1})  # the earlier format
    assert _data_store(tmp_path, "/data/x", "d1", resume=True).get(("MosT", 0)) == {"v": 1}
    with pytest.raises(ValueError, match=r"other settings: data_path \(\"/data/x\" then, \"/data/y\" now\)"):
        _data_store(tmp_path, "/data/y", "d1", resume=True)


def test_a_digest_recorded_with_the_numbers_is_compared_where_the_settings_have_none(tmp_path):
    # the federated runs recorded their data's digest in result.json before their settings did
    _store(tmp_path, {"rounds": 3, "data_path": "/data/x"}).add(("MosT", 0), {"v": 1, "data_digest": "d1"})
    assert _data_store(tmp_path, "/elsewhere/x", "d1", resume=True).get(("MosT", 0)) == {"v": 1, "data_digest": "d1"}
    with pytest.raises(ValueError, match=r"data_digest \(\"d1\" then, \"d2\" now\)"):
        _data_store(tmp_path, "/data/x", "d2", resume=True)


def test_only_the_settings_a_run_uses_are_compared(tmp_path):
    def store(rounds, **kwargs):  # "a" runs use `rounds`, "b" runs do not; "c" is not a run of this call
        return RunStore(tmp_path, lambda key: None if key[0] == "c" else {"lr": 0.1} | (
            {"rounds": rounds} if key[0] == "a" else {}), suite="mtl", scoped=("rounds",),
            folder=lambda key: folder_name(*key[:-1], f"seed{key[-1]}"), **kwargs)

    store(3).add(("b", 0), {"v": 1})
    assert "rounds" not in json.loads((tmp_path / RUNS_DIR / "b" / "seed0" / "config.json").read_text())["settings"]
    store(4, resume=True).add(("a", 0), {"v": 2})  # a resumed call adds runs that use a setting the first did not
    with pytest.raises(ValueError, match=r"other settings: rounds \(4 then, 5 now\)"):
        store(5, resume=True)  # the "a" run uses it
    # a run stored in the earlier format, every setting recorded for every run
    config = tmp_path / RUNS_DIR / "b" / "seed0" / "config.json"
    config.write_text(json.dumps({"suite": "mtl", "key": ["b", 0], "settings": {"lr": 0.1, "rounds": 9}}))
    assert store(4, resume=True).get(("b", 0)) == {"v": 1}
    # a run this call neither makes nor reads is not judged
    other = tmp_path / RUNS_DIR / "c" / "seed0"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"suite": "mtl", "key": ["c", 0], "settings": {"lr": 0.5}}))
    (other / "result.json").write_text(json.dumps({"v": 3}))
    assert store(4, resume=True).missing([("a", 0), ("b", 0)]) == []


def test_a_result_without_the_keys_the_suite_reads_is_named_as_damaged(tmp_path):
    _store(tmp_path).add(("MosT", 0), {"accuracy": 0.5, "seed": 0})
    result = tmp_path / RUNS_DIR / "MosT" / "seed0" / "result.json"
    assert _store(tmp_path, resume=True, required=("accuracy", "seed")).get(("MosT", 0)) == {"accuracy": 0.5, "seed": 0}
    result.write_text(json.dumps({"seed": 0}))  # a JSON object, but not this suite's run
    with pytest.raises(CorruptFileError, match=rf"{re.escape(str(result))} is corrupt \(it lacks 'accuracy', which the "
                                               r"`most bench mtl` table reads\)\. Delete the folder .*seed0 \(its run "
                                               r"is made again with --resume\)"):
        _store(tmp_path, resume=True, required=lambda key: ("accuracy",)).get(("MosT", 0))
