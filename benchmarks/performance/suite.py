"""The whole suite: every part in turn, one JSON, then ``performance.md``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .harness import ROOT, machine_info
from .render import _write_keeping_growth, render
from .rounds import plan_overhead, run_all
from .solvers import DEFAULT_TIMEOUT, QUICK_TIMEOUT, run_min_norm, run_transport
from .targets import target_cases

DESCRIPTION = "The performance suite: solver micro-benchmarks, end-to-end rounds, the targets, and the CUDA path."


def suite_main(argv=None) -> int:
    """``python -m benchmarks.performance``: the whole suite, then performance.md and .json.

    Args:
        argv: the command line's arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    from .cli import PARTS

    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance", description=DESCRIPTION,
                                     epilog=f"Parts alone: python -m benchmarks.performance {{{','.join(PARTS)}}} --help.")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small problems, few repeats")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for the solver tables")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--resume", action="store_true",
                        help="keep the sections already in the JSON (results are saved after each section)")
    parser.add_argument("--render", action="store_true",
                        help="re-render the markdown from the JSON (running only sections it lacks)")
    args = parser.parse_args(argv)
    name = "performance_quick" if args.quick else "performance"
    if args.render:
        results = json.loads((args.out_dir / f"{name}.json").read_text())
        if "plan_overhead" not in results["rounds"]:
            results["rounds"]["plan_overhead"] = plan_overhead()
            (args.out_dir / f"{name}.json").write_text(json.dumps(results, indent=1, default=str))
        _write_keeping_growth(args.out_dir / f"{name}.md", render(results))
        return 0

    tic = time.perf_counter()
    timeout = QUICK_TIMEOUT if args.quick else DEFAULT_TIMEOUT
    path = args.out_dir / f"{name}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results: dict = json.loads(path.read_text()) if args.resume and path.exists() else {}
    results.update(quick=args.quick, solver_threads=args.threads)
    results.setdefault("machine", machine_info(args.threads))
    elapsed = results.get("seconds", 0.0)

    def save():
        results["seconds"] = elapsed + time.perf_counter() - tic
        path.write_text(json.dumps(results, indent=1, default=str))

    if "target_cases" not in results:
        results["target_cases"] = target_cases(args.threads, 60.0)
        save()
    solvers = results.setdefault("solvers", {"machine": results["machine"]})
    earlier = "transport" in solvers  # a resumed run may re-measure the min-norm table alone
    if not earlier:
        solvers["transport"] = run_transport(args.quick, args.threads, timeout)
        save()
    if "min_norm" not in solvers:
        solvers["min_norm"] = run_min_norm(args.quick, args.threads)
        if earlier:
            solvers.setdefault("remeasured", {})["min_norm"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        save()

    def save_rounds(rounds):
        results["rounds"] = rounds
        save()

    results["rounds"] = run_all(args.quick, threads=1, previous=results.get("rounds"), save=save_rounds)
    save()
    _write_keeping_growth(args.out_dir / f"{name}.md", render(results))
    print(f"wrote {args.out_dir / (name + '.md')} and .json in {results['seconds'] / 60:.1f} min", file=sys.stderr)
    return 0


