"""The performance suite: solver micro-benchmarks, end-to-end rounds, and the targets.

Runs :mod:`perf_solvers` (transport and min-norm timings and memory), :mod:`perf_rounds`
(100-round Syn(0,0) runs, FEMNIST rounds, centralised memory) and the two transport
cases named by the targets, then writes

* ``benchmarks/results/performance.md`` -- the targets (met or not, with the measured value),
  the machine, and every table;
* ``benchmarks/results/performance.json`` -- everything measured.

Run it on an otherwise idle machine (torch's OpenMP threads spin while waiting, so a
second busy process can slow small operations down many times)::

    make perf                      # = .venv/bin/python benchmarks/performance.py
    .venv/bin/python benchmarks/performance.py --quick   # a smoke run, about 3 minutes

The full run takes about 20 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import perf_rounds  # noqa: E402
import perf_solvers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python benchmarks/performance.py"

#: The cases the targets name: (n, m, method).
TARGET_CASES = ((10_000, 10, "exact"), (100_000, 50, "newton"), (100_000, 50, "sinkhorn"))


def target_cases(threads: int, timeout: float) -> list[dict]:
    rows = []
    for n, m, method in TARGET_CASES:
        case = {"n": n, "m": m, "method": method, "tau": 0.0, "seed": 0, "repeats": 5, "threads": threads}
        rows.append({"n": n, "m": m, "method": method, **perf_solvers._run_case_in_child(case, timeout)})
    return rows


def _case_seconds(rows, n, m, method):
    for r in rows:
        if (r["n"], r["m"], r["method"]) == (n, m, method) and r.get("status") == "ok":
            return r["median_s"]
    return None


def _row(name, value, goal, met, how):
    mark = "yes" if met else ("**no**" if met is not None else "not measured")
    return f"| {name} | {value} | {goal} | {mark} | {how} |"


def targets_markdown(results: dict) -> str:
    rounds, cases = results.get("rounds", {}), results.get("target_cases", [])
    syn = {r["method"]: r for r in rounds.get("syn", [])}
    lines = ["| target | measured | goal | met | how |", "|---|---|---|---|---|"]
    most = syn.get("MosT")
    if most:
        w = most["wall_seconds"]["median"]
        lines.append(_row("100-round Syn(0,0) MosT run", f"{w:.2f} s (accuracy {100 * most['accuracy']:.2f} %)",
                          "≤ 1.3 s", w <= 1.3, "median of repeats, `run_federated`, 1 thread"))
    for key, label in (("syn", "Syn(0,0)"), ("femnist_linear", "FEMNIST, logistic"), ("femnist_cnn", "FEMNIST, CNN")):
        rows = {r["method"]: r for r in rounds.get(key, [])}
        for name in ("MosT", "MosT (min-norm)"):
            r = rows.get(name)
            if not r:
                continue
            s = r["after_warmup"]["share"] if "after_warmup" in r else r["share"]
            share = s["plan"] + s["aggregate"]
            what = "transport + mean" if name == "MosT" else "transport + min-norm"
            lines.append(_row(f"{what} share of a {name} round, {label}", f"{100 * share:.1f} %", "≤ 5 %",
                              share <= 0.05, "plan + aggregate phases of `RoundLog.seconds`"))
        most_r, avg_r = rows.get("MosT"), rows.get("FedAvg (m models)")
        if most_r and avg_r:
            a = most_r["after_warmup"]["round_seconds"] if "after_warmup" in most_r else most_r["round_seconds"]
            b = avg_r["all_rounds"]["round_seconds"] if "all_rounds" in avg_r else avg_r["round_seconds"]
            lines.append(_row(f"MosT round / FedAvg-with-m-models round, {label}", f"{a / b:.2f}×", "≤ 1.15×",
                              a / b <= 1.15, "mean seconds per round, same runtime"))
    for n, m, method, goal in ((100_000, 50, "newton", "≤ 1 s (iterative)"), (10_000, 10, "exact", "≤ 1 s")):
        sec = _case_seconds(cases, n, m, method)
        value = "timeout" if sec is None else f"{sec:.2f} s ({method})"
        lines.append(_row(f"Γ step n = {n:,}, m = {m}", value, goal, None if sec is None else sec <= 1.0,
                          "median of 5 solves, fresh process"))
    mem = rounds.get("memory")
    if mem:
        packed = next(r for r in mem if "served" in r["jacobian"])
        dense = next(r for r in mem if "dense" in r["jacobian"])
        lines.append(_row("no n×d Jacobian for objectives a model does not serve",
                          f"{packed['jacobian_mb']:.0f} MB of gradients kept (dense: {dense['jacobian_mb']:.0f} MB); "
                          f"peak {packed['peak_rss_above_inputs_mb']:.0f} MB vs {dense['peak_rss_above_inputs_mb']:.0f} MB",
                          "O(m k d), k = objectives served", packed["jacobian_mb"] < dense["jacobian_mb"],
                          "one centralised MosT round, fresh process"))
    return "\n".join(lines)


def machine_line(machine: dict) -> str:
    return (f"{machine.get('processor', '?')}, {machine.get('cpu_count', '?')} cores; torch {machine.get('torch')}, "
            f"POT {machine.get('pot')}, Python {machine.get('python')}; measured {machine.get('date', '?')}")


def render(results: dict) -> str:
    m = results["machine"]
    cases = results.get("target_cases", [])
    out = ["# Performance", "",
           f"Machine: {machine_line(m)}. No GPU was lent to the session that measured this; CUDA timings are not "
           "recorded.", "",
           f"Command: `{COMMAND}{' --quick' if results.get('quick') else ''}` "
           f"(about {results['seconds'] / 60:.0f} minutes). Every figure is a median of several runs on an "
           "otherwise idle machine; the solver tables use "
           f"{results.get('solver_threads')} thread(s), the end-to-end runs {results['rounds'].get('threads')}.", "",
           "## Targets", "", targets_markdown(results), "",
           "### The target transport cases", "",
           "| n | m | method | median s | iterations | converged |", "|---|---|---|---|---|---|"]
    for r in cases:
        if r.get("status") == "ok":
            out.append(f"| {r['n']:,} | {r['m']} | {r['method']} | {r['median_s']:.3f} | {r.get('n_iter')} | "
                       f"{'yes' if r.get('converged') else 'no'} |")
        else:
            out.append(f"| {r['n']:,} | {r['m']} | {r['method']} | {r.get('status')} | – | – |")
    out += ["", "## End to end", "", perf_rounds.markdown(results["rounds"]), "",
            "## Solvers", "", perf_solvers.markdown(results["solvers"]), ""]
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small problems, few repeats")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for the solver tables")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)

    tic = time.perf_counter()
    timeout = perf_solvers.QUICK_TIMEOUT if args.quick else perf_solvers.DEFAULT_TIMEOUT
    results: dict = {"quick": args.quick, "solver_threads": args.threads,
                     "machine": perf_solvers.machine_info(args.threads)}
    results["target_cases"] = target_cases(args.threads, 60.0)
    results["solvers"] = {"machine": results["machine"],
                          "transport": perf_solvers.run_transport(args.quick, args.threads, timeout),
                          "min_norm": perf_solvers.run_min_norm(args.quick, args.threads)}
    results["rounds"] = perf_rounds.run_all(args.quick, threads=1)
    results["seconds"] = time.perf_counter() - tic

    name = "performance_quick" if args.quick else "performance"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{name}.json").write_text(json.dumps(results, indent=1, default=str))
    (args.out_dir / f"{name}.md").write_text(render(results))
    print(f"wrote {args.out_dir / (name + '.md')} and .json in {results['seconds'] / 60:.1f} min", file=sys.stderr)


if __name__ == "__main__":
    main()
