"""``python -m benchmarks.performance growth`` measures what it reports, and its report follows its numbers.
The part runs on a tiny grid (two n, one d, two methods, two rounds); the renderer gets
synthetic results. Timings are not asserted (they are the script's output, not a property)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.performance import growth, render

ROOT = Path(__file__).resolve().parents[2]


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.performance", "growth", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _section(text: str) -> str:
    i, j = text.index(growth.START_MARK), text.index(growth.END_MARK)
    return text[i + len(growth.START_MARK):j]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One run of the part on the tiny grid, into a markdown file that has other content."""
    tmp = tmp_path_factory.mktemp("growth")
    md = tmp / "performance.md"
    md.write_text("# Performance\n\nBody of the report.\n")
    res = _run("--quick", "--ns", "50,100", "--ds", "5", "--base-n", "100", "--base-d", "5",
               "--methods", "default,tch-set", "--rounds", "2", "--extra", "100,5,10", "--import-repeats", "1",
               "--out", tmp / "growth.json", "--markdown", md)
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp, json.loads((tmp / "growth.json").read_text()), md


def test_every_case_and_method_has_a_positive_time_and_shares_that_add_up(tiny):
    tmp, results, _ = tiny
    cases = {(r["n"], r["d"], r["method"]): r for r in results["cases"]}
    assert set(cases) == {(n, 5, m) for n in (50, 100) for m in ("MosT (default)", "TCH-Set")}
    assert len(results["cases"]) == 4  # n = 100, d = 5 is on both axes and runs once
    assert cases[(100, 5, "TCH-Set")]["axes"] == ["n", "d"]
    for r in [*results["cases"], *results["extra"]]:
        assert r["status"] == "ok", r
        assert math.isfinite(r["s_per_round"]) and r["s_per_round"] > 0
        assert r["rounds"] == 2 and len(r["round_seconds"]) == 2
        assert r["total_s"] >= sum(r["round_seconds"]) > 0
        shares = r["share_pct"]
        assert set(shares) == {"gradients", "transport", "min_norm", "other"}
        assert all(0.0 <= v <= 100.0 for v in shares.values())
        assert sum(shares.values()) == pytest.approx(100.0, abs=0.5)
        assert r["peak_mib"] >= r["rss_start_mib"] > 0
        assert r["mean_best_loss"] >= 0
    # the first fit of each child comes after its own warm-up: every method runs first in some case
    assert {r["method"] for r in results["cases"] if r["order"] == 0} == {"MosT (default)", "TCH-Set"}
    assert results["extra"][0]["m"] == 10 and results["extra"][0]["n"] == 100
    assert set(results["imports"]["median_s"]) == {"torch", "most", "most_federated"}
    # what `import most` adds to an interpreter that has torch: measured in the child, below its wall time
    after = results["imports"]["after_torch_s"]
    assert len(after) == 1 and 0 < after[0] < results["imports"]["samples_s"]["most"][0]
    assert results["machine"]["threads"] == 1 and results["command"].startswith(growth.COMMAND)
    assert (tmp / "growth.png").stat().st_size > 10_000


def test_ratios_are_s_per_round_over_tch_sets_in_the_same_case(tiny):
    _, results, _ = tiny
    ref = {r["n"]: r["s_per_round"] for r in results["cases"] if r["method"] == "TCH-Set"}
    for r in results["cases"]:
        assert r["ratio_tch"] == pytest.approx(r["s_per_round"] / ref[r["n"]], rel=1e-12)
    assert results["extra"][0]["ratio_tch"] is None  # no TCH-Set at m = 10


def test_the_section_is_replaced_between_the_markers_not_duplicated(tiny, tmp_path):
    _, results, md = tiny
    results = copy.deepcopy(results)
    text = md.read_text()
    assert text.startswith("# Performance\n\nBody of the report.\n")
    assert text.count(growth.START_MARK) == 1 and text.count(growth.END_MARK) == 1
    assert "## Growth with n and d" in _section(text)
    assert "| 100 | TCH-Set | " in _section(text)
    # a later part of the file survives a second write, which replaces only the section
    md.write_text(text + "\n## After\n\nkept\n")
    results["cases"] = [r for r in results["cases"] if r["n"] == 100]
    (tmp_path / "g.json").write_text(json.dumps(results))
    res = _run("--render", "--out", tmp_path / "g.json", "--markdown", md)
    assert res.returncode == 0, res.stderr[-3000:]
    again = md.read_text()
    assert again.count(growth.START_MARK) == 1 and again.count(growth.END_MARK) == 1
    assert again.count("## Growth with n and d") == 1
    assert again.startswith("# Performance\n\nBody of the report.\n") and again.endswith("## After\n\nkept\n")
    assert "| 50 | " not in _section(again) and "| 100 | TCH-Set | " in _section(again)
    assert (tmp_path / "g.png").exists()


def _ok(n, d, method, sec, *, m=5, transport=1.0, min_norm=0.0):
    return {"n": n, "d": d, "m": m, "method": method, "axes": ["n"], "status": "ok", "s_per_round": sec,
            "setup_s": 0.01, "rounds": 20, "rounds_requested": 20, "peak_mib": 300.0,
            "share_pct": {"gradients": 50.0, "transport": transport, "min_norm": min_norm,
                          "other": 50.0 - transport - min_norm}}


def _met(results) -> dict[str, tuple[str, str]]:
    return {t["target"]: (t["measured"], t["met"]) for t in growth.targets(results)}


def test_targets_follow_the_numbers():
    cases = [
        _ok(1_000, 10, "TCH-Set", 0.010), _ok(1_000, 10, "MosT (default)", 0.019),  # 1.9x: met
        _ok(1_000, 10, "MosT (min-norm)", 0.051, transport=2.0, min_norm=3.5),  # 5.1x: not met; 5.5 %
        _ok(10_000, 10, "TCH-Set", 0.10), _ok(10_000, 10, "MosT (default)", 0.21, transport=4.9),  # 2.1x
        _ok(10_000, 10, "MosT (min-norm)", 0.40, transport=1.0, min_norm=1.0),  # 4x: met
        _ok(1_000, 100_000, "TCH-Set", 1.0),
        {"n": 1_000, "d": 100_000, "m": 5, "method": "MosT (default)", "axes": ["d"], "status": "timeout",
         "timeout_s": 120.0},
    ]
    results = {"cases": cases, "extra": [_ok(100_000, 10, "MosT (default)", 0.98, m=50)],
               "imports": {"repeats": 5, "statements": dict(growth.IMPORTS),
                           "median_s": {"torch": 1.20, "most": 1.55, "most_federated": 1.9}}}
    met = _met(results)
    d = "MosT (default) s/round ÷ TCH-Set's, "
    mn = "MosT (min-norm) s/round ÷ TCH-Set's, "
    assert met[d + "n = 10³, d = 10"] == ("1.90×", "yes")
    assert met[d + "n = 10⁴, d = 10"] == ("2.10×", "no")
    assert met[d + "n = 10³, d = 10⁵"] == ("timeout", "no")
    assert met[mn + "n = 10³, d = 10"] == ("5.10×", "no")
    assert met[mn + "n = 10⁴, d = 10"] == ("4.00×", "yes")
    assert met[mn + "n = 10³, d = 10⁵"] == ("not run", "not measured")
    share = {k: v for k, v in met.items() if k.startswith("transport + min-norm")}
    default_share, minnorm_share = share.values()
    assert default_share[0].startswith("max 4.9 % (n = 10,000") and default_share[1] == "yes (measured cases)"
    assert minnorm_share[0].startswith("max 5.5 % (n = 1,000") and minnorm_share[1] == "no"
    assert met["one default MosT round, n = 10⁵, d = 10, m = 50"] == ("0.980 s", "yes")
    gap = next(v for k, v in met.items() if k.startswith("import most"))
    assert gap[1] == "no" and gap[0].startswith("0.350 s")

    results["extra"][0]["s_per_round"] = 1.02
    results["imports"]["median_s"]["most"] = 1.45
    met = _met(results)
    assert met["one default MosT round, n = 10⁵, d = 10, m = 50"] == ("1.02 s", "no")
    assert next(v for k, v in met.items() if k.startswith("import most"))[1] == "yes"
    # the in-process measure, where present, decides (separate interpreters' medians differ by start-up noise)
    results["imports"]["after_torch_median_s"] = 0.31
    assert _met(results)["import most − import torch"] == (
        "0.310 s (`import most` after `import torch`, in one interpreter; median)", "no")
    results["imports"]["after_torch_median_s"] = 0.09
    assert _met(results)["import most − import torch"][1] == "yes"

    section = growth.render_section(results)
    assert "| one default MosT round, n = 10⁵, d = 10, m = 50 | 1.02 s | ≤ 1 s | **no** |" in section
    assert "| 1,000 | MosT (default) | 0.0190 | 1.90× | 0.0100 | 50.0 | 1.0 | 0.0 | 49.0 | 300 |" in section


def test_numbers_have_three_significant_digits():
    assert [growth.sig3(x) for x in (1234.5, 123.4, 12.34, 1.234, 0.01234, 0.0001)] == \
        ["1230", "123", "12.3", "1.23", "0.0123", "0.000100"]
    assert growth.sig3(None) == "–" and growth.sig3(float("nan")) == "–"


def test_a_timeout_skips_the_larger_sizes_of_that_method_on_that_axis_only(monkeypatch):
    ran = []

    def fake(case, timeout):  # MGDA times out from n = 1000 (the case shared by both axes) on
        ran.append((case["n"], case["d"], case["method"]))
        if case["method"] == "MGDA" and case["n"] >= 1_000:
            return {"status": "timeout", "timeout_s": timeout, "reached": "warm-up"}
        if case["method"] == "SoM" and case["d"] == 100:
            return {"status": "timeout", "timeout_s": timeout, "reached": "timed run"}
        return {"status": "ok", "s_per_round": case["n"] * case["d"] * (2.0 if case["method"] == "SoM" else 1.0)}

    monkeypatch.setattr(growth, "run_case", fake)
    rows = growth.run_grid((100, 1_000, 10_000), (10, 100, 1_000), ["TCH-Set", "SoM", "MGDA"], timeout=7.0)
    status = {(r["n"], r["d"], r["method"]): r["status"] for r in rows}
    assert len(rows) == 5 * 3 and len(set(status)) == 15
    assert status[(1_000, 10, "MGDA")] == "timeout"
    assert status[(10_000, 10, "MGDA")] == status[(1_000, 100, "MGDA")] == status[(1_000, 1_000, "MGDA")] == "skipped"
    assert status[(1_000, 100, "SoM")] == "timeout" and status[(1_000, 1_000, "SoM")] == "skipped"
    assert status[(10_000, 10, "SoM")] == "ok"  # the d axis's timeout leaves the n axis alone
    assert (10_000, 10, "MGDA") not in ran and (1_000, 1_000, "SoM") not in ran
    assert next(r for r in rows if (r["n"], r["d"], r["method"]) == (1_000, 1_000, "SoM"))["reason"] == "d = 100 timeout"
    assert {r["method"] for r in rows if r["order"] == 0} == {"TCH-Set", "SoM", "MGDA"}
    som = next(r for r in rows if (r["n"], r["d"], r["method"]) == (10_000, 10, "SoM"))
    assert som["ratio_tch"] == pytest.approx(2.0)


def test_the_per_instance_problem_has_its_own_section_and_the_same_objectives(tmp_path):
    md = tmp_path / "performance.md"
    md.write_text(f"# Performance\n\n{growth.START_MARK}\nthe from_function grid\n{growth.END_MARK}\n")
    common = ["--ns", "60", "--ds", "4", "--base-n", "60", "--base-d", "4", "--methods", "default,min-norm,tch-set",
              "--rounds", "2", "--timeout", "60", "--extra", "none", "--import-repeats", "0"]
    res = _run(*common, "--problem", "instances", "--out", tmp_path / "inst.json", "--markdown", md)
    assert res.returncode == 0, res.stderr[-3000:]
    text = md.read_text()
    assert "the from_function grid" in text  # the from_function section is left as it was
    i, j = text.index(growth.INSTANCES_START_MARK), text.index(growth.INSTANCES_END_MARK)
    assert "one loss per instance" in text[i:j] and "from_instances" in text[i:j]
    res = _run(*common, "--out", tmp_path / "func.json", "--no-markdown")
    assert res.returncode == 0, res.stderr[-3000:]
    inst = {r["method"]: r for r in json.loads((tmp_path / "inst.json").read_text())["cases"]}
    func = {r["method"]: r for r in json.loads((tmp_path / "func.json").read_text())["cases"]}
    assert set(inst) == set(func) == {"MosT (default)", "MosT (min-norm)", "TCH-Set"}
    for name in inst:  # the same objectives from the same starts: the same models, to float error
        assert inst[name]["status"] == func[name]["status"] == "ok"
        assert inst[name]["mean_best_loss"] == pytest.approx(func[name]["mean_best_loss"], rel=1e-4)


def test_performance_re_renders_keep_every_growth_section():
    # the suite's report rewrites performance.md and keeps the sections between these marks
    assert set(render.GROWTH_MARKS) == {(growth.START_MARK, growth.END_MARK),
                                             (growth.GPU_START_MARK, growth.GPU_END_MARK),
                                             (growth.INSTANCES_START_MARK, growth.INSTANCES_END_MARK)}


def test_a_short_case_runs_several_passes_and_its_ratio_is_the_median_of_the_passes_ratios(monkeypatch):
    calls = []
    times = {"TCH-Set": [1.0, 2.0, 1.0], "MosT (default)": [1.5, 2.4, 1.6]}  # ratios per pass 1.5, 1.2, 1.6

    def fake(case, timeout):
        n, name = case["n"], case["method"]
        p = sum(1 for c in calls if (c[0], c[1]) == (n, name))
        calls.append((n, name))
        if name == "MGDA":
            return {"status": "timeout", "timeout_s": timeout, "reached": "warm-up", "wall_s": timeout}
        wall = 100.0 if n == 10_000 else 1.0  # the larger case is over the pass budget: it runs once
        row = _ok(n, 10, name, times[name][p] * n)
        return {k: v for k, v in row.items() if k not in ("n", "d", "m", "method", "axes")} | {"wall_s": wall}

    monkeypatch.setattr(growth, "run_case", fake)
    rows = growth.run_grid((1_000, 10_000), (10,), ["TCH-Set", "MosT (default)", "MGDA"], base_n=1_000,
                           timeout=5.0, passes=3, pass_budget=60.0)
    # the short case: three passes, the order rotated each pass (so TCH-Set runs first in one pass, the
    # default in the next); MGDA, which timed out in the first, is not run again; the long case runs once
    # (and without MGDA, skipped after its timeout at the smaller n)
    assert [name for n, name in calls if n == 1_000] == ["TCH-Set", "MosT (default)", "MGDA",
                                                         "MosT (default)", "TCH-Set", "TCH-Set", "MosT (default)"]
    assert [name for n, name in calls if n == 10_000] == ["MosT (default)", "TCH-Set"]
    by = {(r["n"], r["method"]): r for r in rows}
    assert len(rows) == 6
    mine, ref = by[(1_000, "MosT (default)")], by[(1_000, "TCH-Set")]
    assert mine["passes"] == 3 and mine["pass_s_per_round"] == [1500.0, 2400.0, 1600.0]
    assert mine["s_per_round"] == 1600.0 and mine["pass"] == 2  # the median pass's row
    assert mine["pass_ratio_tch"] == pytest.approx([1.5, 1.2, 1.6])
    assert mine["ratio_tch"] == pytest.approx(1.5)  # not 1600 / 1000 (the medians' ratio)
    assert ref["ratio_tch"] == pytest.approx(1.0) and ref["s_per_round"] == 1000.0
    assert by[(1_000, "MGDA")]["status"] == "timeout" and "passes" not in by[(1_000, "MGDA")]
    assert by[(10_000, "MGDA")]["status"] == "skipped"
    assert by[(10_000, "MosT (default)")]["ratio_tch"] == pytest.approx(1.5) and "passes" not in by[(10_000, "TCH-Set")]
    # the targets and the table take the median ratio, and the table shows the passes' range
    results = {"cases": rows, "extra": [], "imports": {}, "settings": {"passes": 3, "pass_budget_s": 60.0}}
    assert _met(results)["MosT (default) s/round ÷ TCH-Set's, n = 10³, d = 10"] == ("1.50×", "yes")
    section = growth.render_section(results)
    assert "| 1,000 | MosT (default) | 1600 | 1.50× (1.20–1.60) |" in section
    assert "| 1,000 | TCH-Set | 1000 | 1.00× |" in section  # its own ratio is 1 in every pass
    assert "runs 3 passes" in section
