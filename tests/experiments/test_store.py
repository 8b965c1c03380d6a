"""The results store under real use: one writer per folder, no writes through links, leftovers of
an interrupted write, folders `most run` did not write (most.experiments.store)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from most.cli import app
from most.config import ConfigError
from most.experiments import parse_experiment, report, run_experiment
from most.experiments.store import BusyFolderError, RunFolder, WriterLock, load_runs
from tests.test_cli import CENTRAL, _one_line_error

LONG = CENTRAL.replace("rounds = 8", "rounds = 200000").replace('name = "central"', 'name = "long"')


def _run(text: str, out: Path, **kwargs):
    return run_experiment(parse_experiment(tomllib.loads(text)), out, progress=False, echo=lambda s: None, **kwargs)


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A `most run` of a long experiment in another process, once it has written its first rounds."""
    experiment = tmp_path / "long.toml"
    experiment.write_text(LONG)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "most.cli", "run", str(experiment), "--out",
                                str(tmp_path / "out"), "--quiet"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "out" / "long" / "runs" / "MosT" / "seed0" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.stat().st_size > 0):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the first process wrote no round in 120 s"
        time.sleep(0.2)
    return process, tmp_path / "out" / "long"


def test_a_second_process_on_the_same_folder_is_refused_naming_the_first_and_a_killed_one_blocks_nothing(tmp_path):
    process, root = _start(tmp_path)
    try:
        before = (root / "runs" / "MosT" / "seed0" / "metrics.jsonl").read_text()
        res = CliRunner().invoke(app, ["run", str(tmp_path / "long.toml"), "--out", str(tmp_path / "out"),
                                       "--resume", "--quiet"])
        _one_line_error(res, f"process {process.pid}", "--resume", code=2)
        with pytest.raises(BusyFolderError, match=f"process {process.pid}"):
            _run(LONG, tmp_path / "out", resume=True)
        assert (root / "runs" / "MosT" / "seed0" / "metrics.jsonl").read_text().startswith(before)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    # the lock went with the process: the run continues from its checkpoint
    with WriterLock(root):
        pass
    assert RunFolder(root / "runs" / "MosT" / "seed0").status in ("interrupted", "new")


_TAKE = ("import sys\nfrom most.experiments.store import WriterLock, BusyFolderError\n"
         "try:\n    WriterLock(sys.argv[1]).__enter__()\nexcept BusyFolderError as e:\n    print(e); sys.exit(3)\n")


def _taken_elsewhere(root: Path) -> bool:
    """Whether another process finds the folder's lock held."""
    res = subprocess.run([sys.executable, "-c", _TAKE, str(root)], capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 3), res.stderr
    return res.returncode == 3


def test_the_lock_is_released_after_a_run_and_after_an_error(tmp_path):
    _run(CENTRAL, tmp_path)
    root = tmp_path / "central"
    with WriterLock(root):
        with WriterLock(root):  # one process is one writer: a nested holder (a suite's store in a run)
            assert _taken_elsewhere(root)
        assert _taken_elsewhere(root)
    assert not _taken_elsewhere(root)
    with pytest.raises(ConfigError):
        _run(CENTRAL.replace("lr = 0.1", "lr = 0.2"), tmp_path)  # a finished run with other settings
    assert not _taken_elsewhere(root)



def test_a_folder_on_a_file_system_without_locks_is_written_with_a_warning(tmp_path, monkeypatch):
    import errno

    import most._locks as locks

    def unsupported(fd):  # what flock answers on a mount that keeps no locks
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(locks, "_take", unsupported)
    monkeypatch.setattr(locks, "_give", unsupported)
    with pytest.warns(UserWarning, match="keeps no file locks"):
        _run(CENTRAL, tmp_path)
    assert (tmp_path / "central" / "runs").is_dir()

def test_a_bench_suite_holds_its_folder_while_its_store_lives(tmp_path):
    from most.bench._runs import RunStore

    store = RunStore(tmp_path, {"a": 1}, suite="mtl", folder=lambda key: "x")
    assert _taken_elsewhere(tmp_path)
    del store
    import gc

    gc.collect()
    assert not _taken_elsewhere(tmp_path)


def test_a_refused_run_leaves_no_folder_behind(tmp_path):
    bad = CENTRAL.replace('name = "quadratic_clusters"', 'name = "mixed_regression"').replace(
        "n_clusters = 3\nper_cluster = 4", "n_objectives = 2")
    with pytest.raises(ValueError):
        _run(bad, tmp_path)  # 3 models for 2 objectives: refused by the checks before any run
    assert not (tmp_path / "central").exists()


_HOLD = ("import sys, time\nfrom pathlib import Path\nfrom most.experiments.store import WriterLock\n"
         "Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)\nWriterLock(Path(sys.argv[1])).__enter__()\n"
         "print('held', flush=True)\ntime.sleep(60)\n")


def test_a_run_refused_by_another_writer_never_removes_its_folder_or_lock(tmp_path, monkeypatch):
    """Two calls that both find the folder missing (a job started twice): the one that gets the
    lock second is refused, and the folder and lock of the first stay as they are."""
    root = tmp_path / "central"
    holder: list[subprocess.Popen] = []
    mkdir = Path.mkdir

    def raced_mkdir(self, *args, **kwargs):
        if self == root and not holder:  # between this call's check and its mkdir, another takes the folder
            process = subprocess.Popen([sys.executable, "-c", _HOLD, str(root)], stdout=subprocess.PIPE, text=True)
            holder.append(process)
            assert process.stdout.readline().strip() == "held"
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", raced_mkdir)
    try:
        with pytest.raises(BusyFolderError, match="being written by another process"):
            _run(CENTRAL, tmp_path)
        assert holder and (root / ".lock").is_file() and _taken_elsewhere(root)
    finally:
        for process in holder:
            process.kill()
            process.wait()


def test_a_link_at_the_experiment_folder_is_refused_and_nothing_lands_at_its_target(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "central").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ConfigError, match=r"central is a symbolic link"):
        _run(CENTRAL, tmp_path / "out")
    assert list(elsewhere.iterdir()) == []
    # --out itself may be a link: the user chose it
    (tmp_path / "linked").symlink_to(tmp_path / "out2", target_is_directory=True)
    (tmp_path / "out2").mkdir()
    _run(CENTRAL, tmp_path / "linked")
    assert (tmp_path / "out2" / "central" / "runs" / "MosT" / "seed0" / "result.json").is_file()


def test_report_and_plot_do_not_write_through_links(tmp_path):
    root = _run(CENTRAL, tmp_path / "out")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "figures").symlink_to(elsewhere, target_is_directory=True)
    res = CliRunner().invoke(app, ["plot", str(root)])
    _one_line_error(res, "figures is a symbolic link", code=2)
    (root / "report.md").symlink_to(elsewhere / "report.md")
    with pytest.raises(ConfigError, match="report.md is a symbolic link"):
        report(root)
    assert list(elsewhere.iterdir()) == []


def test_an_interrupted_finish_leaves_no_stale_checkpoint_or_temporary_file(tmp_path):
    root = _run(CENTRAL, tmp_path)
    folder = root / "runs" / "MosT" / "seed0"
    (folder / "checkpoint.pt").write_bytes(b"stale")
    (folder / ".result.json.123.tmp").write_text("{")
    _run(CENTRAL, tmp_path)
    assert not (folder / "checkpoint.pt").exists() and not (folder / ".result.json.123.tmp").exists()
    assert RunFolder(folder).status == "done"


def test_report_refuses_a_folder_most_run_did_not_write_and_writes_nothing_there(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "config.json").write_text('{"x": 1}')
    (tmp_path / "runs" / "g" / "seed0").mkdir(parents=True)
    (tmp_path / "runs" / "g" / "seed0" / "config.json").write_text('{"kind": "centralised"}')
    with pytest.raises(FileNotFoundError, match="holds no runs written by `most run`"):
        load_runs(tmp_path)
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    _one_line_error(res, "no runs written by `most run`", code=2)
    assert not (tmp_path / "report.md").exists()


def test_two_files_with_one_name_on_different_problems_are_refused(tmp_path):
    _run(CENTRAL, tmp_path)
    other = CENTRAL.replace("per_cluster = 4", "per_cluster = 5").replace("methods.MosT", "methods.MGDA")
    with pytest.raises(ConfigError, match=r"finished runs of 'MosT' made on another problem.*problem.per_cluster"):
        _run(other, tmp_path)
    _run(CENTRAL.replace("methods.MosT", "methods.MGDA"), tmp_path)  # the same problem: one table
    assert "MGDA" in report(tmp_path / "central") and "MosT" in report(tmp_path / "central")


def test_a_refused_resume_changes_no_file(tmp_path):
    experiment = parse_experiment(tomllib.loads(CENTRAL.replace("rounds = 8", "rounds = 30")), source="first")
    root = tmp_path / "central"
    import most.experiments.runner as runner

    real = runner._centralised_round

    def stopping(folder, state):
        inner = real(folder, state)

        def on_round(record, params):
            inner(record, params)
            if record.round == 14:
                raise KeyboardInterrupt
        return on_round

    runner._centralised_round = stopping
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(experiment, tmp_path, progress=False, echo=lambda s: None, batch=False)
    finally:
        runner._centralised_round = real
    files = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    changed = parse_experiment(tomllib.loads(CENTRAL.replace("rounds = 8", "rounds = 30").replace("lr = 0.1",
                                                                                                   "lr = 0.2")),
                               source="second")
    with pytest.raises(ValueError, match="other settings"):
        run_experiment(changed, tmp_path, resume=True, progress=False, echo=lambda s: None)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == files
    # the same file resumes, and its seconds count both segments
    first = RunFolder(root / "runs" / "MosT" / "seed0").elapsed_before(10)
    assert first > 0
    run_experiment(experiment, tmp_path, resume=True, progress=False, echo=lambda s: None)
    result = RunFolder(root / "runs" / "MosT" / "seed0").result()
    assert result["resumed_from_round"] == 10 and result["seconds"] >= first
    elapsed = [line["elapsed"] for line in RunFolder(root / "runs" / "MosT" / "seed0").metrics()]
    assert elapsed == sorted(elapsed) and len(elapsed) == 30


def test_an_experiment_is_not_written_into_a_bench_suites_folder(tmp_path):
    from most.bench._runs import RunStore

    store = RunStore(tmp_path / "central", {"a": 1}, suite="mtl", folder=lambda key: "x")
    folder = RunFolder(tmp_path / "central" / "runs" / "x" / "seed0")
    folder.path.mkdir(parents=True)
    (folder.path / "config.json").write_text(json.dumps({"suite": "mtl", "settings": {"a": 1}}))
    del store
    with pytest.raises(ConfigError, match=r"holds the runs of `most bench mtl`.*another --out"):
        _run(CENTRAL, tmp_path)
    assert sorted(p.name for p in (tmp_path / "central" / "runs").iterdir()) == ["x"]  # nothing added
