"""The package as built: the wheel's contents and the version in one place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import most

from .package_check import wheel_problems

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_has_no_test_files_and_carries_its_marker_licence_and_metadata(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("most_transport-*.whl")
    assert wheel_problems(wheel) == []


def test_the_version_is_written_once_and_the_command_prints_it():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'version = { attr = "most.__version__" }' in text
    out = subprocess.run([sys.executable, "-m", "most.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"most {most.__version__}"


def test_the_package_cites_no_path_of_the_repository_an_installed_copy_lacks():
    # an installed package has no benchmarks/ folder: its docstrings and messages name the docs pages
    cited = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "src" / "most").rglob("*.py"))
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "benchmarks/results" in line or "benchmarks/trap.py" in line]
    assert not cited, f"library files cite the repository's benchmark files: {cited}"


def test_the_committed_benchmark_results_stay_light():
    # tables, compact per-run summaries and a few key figures; per-round series (curves.json) and
    # the probes' figures are redrawn by their commands
    listed = subprocess.run(["git", "ls-files", "-z", "benchmarks"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / p for p in listed.stdout.decode().split("\0") if p and (ROOT / p).is_file()]
    total = sum(f.stat().st_size for f in files)
    assert total <= 10 * 2**20, f"benchmarks/ holds {total / 2**20:.1f} MB in git (at most 10)"
    assert not [f for f in files if f.name == "curves.json"]
