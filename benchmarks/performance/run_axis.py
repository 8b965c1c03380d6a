"""The run axis and the cost of local training, measured side by side in one call.

Three measurements, each on the CPU with one torch thread per process:

* ``loop`` -- a 100-round Syn(0,0) MosT run (seed 0, ``run_federated``): this checkout against a
  baseline revision (a ``git worktree`` the script makes, ``--baseline``), alternating, each
  repeat in a fresh process; median seconds and whether both end with the same parameters.
* ``batch`` -- one seed's sweep of the Syn(0,0) table (the ten default methods of
  ``most bench federated``, four server steps, FedProx's four mu: 52 runs of 100 rounds) as one
  ``run_batch`` against the same runs one by one (``run_federated``), in this checkout; the phase
  times of each, and whether every run ends with the same parameters.
* ``table`` (``--table``; about ten minutes) -- the wall time of the stored command of the
  Syn(0.5,0.5) table, ``most bench federated --rho 0.5 0.5 --jobs 2``, batched (the default),
  with ``--no-batch``, and at the baseline revision; and whether the three tables agree run by run.
* ``centralised`` -- five seeds of a centralised method (the few-objective suite's methods on
  ZDT1, the default MosT on clustered quadratics) as one ``most.fit_batch`` against five ``fit``
  calls, alternating, in this checkout; median seconds and whether every run ends the same, bit
  for bit.
* ``few_objective`` (``--table``; about six minutes) -- the stored command of the few-objective
  table, ``most bench few-objective ... --jobs 2``, batched (the default) and with ``--no-batch``,
  and how far their runs' final points differ.

Writes ``benchmarks/results/run_axis.md`` and ``run_axis.json``::

    python -m benchmarks.performance run-axis --table          # make run-axis
    python -m benchmarks.performance run-axis --quick          # a smoke run (a few rounds), to a scratch folder
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from .harness import respell

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_BASELINE = "7da3973"  # the commit before the run axis and the faster local training

_LOOP = """
import hashlib, json, time, torch
torch.set_num_threads(1)
import most.federated as fl
from most.federated import methods as F
from most.methods import Uniform
data = fl.fedprox_synthetic(0.0, 0.0, seed=0)
model = fl.logistic_regression(60, 10)
def balanced():  # the balanced MosT, the default of the baseline revision, spelled for either revision
    try:
        return F.MosT(5, server_lr=3.0, marginals=Uniform(), resplit=None)
    except TypeError:  # a revision before the re-split
        return F.MosT(5, server_lr=3.0)
# the steady state of the loop: first the same run for 8 rounds (its warm-up and MosT rounds)
fl.run_federated(data, model, balanced(), fl.FederatedConfig(rounds=8, eval_every=5, seed=0))
config = fl.FederatedConfig(rounds={rounds}, eval_every=5, seed=0)
tic = time.perf_counter()
result = fl.run_federated(data, model, balanced(), config)
seconds = time.perf_counter() - tic
print(json.dumps({{"seconds": seconds, "params": hashlib.sha256(result.params.numpy().tobytes()).hexdigest(),
                  "accuracy": result.mean_accuracy}}))
"""


def _env(src: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1"}


def _child(src: Path, code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env=_env(src), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _worktree(revision: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(where), revision],
                   check=True, capture_output=True)
    return where


def _remove_worktree(where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], capture_output=True)


def measure_loop(baseline_src: Path, repeats: int, rounds: int) -> dict:
    """This checkout's and the baseline's 100-round MosT run, alternating, fresh processes."""
    here, there = [], []
    for _ in range(repeats):
        here.append(_child(ROOT / "src", _LOOP.format(rounds=rounds)))
        there.append(_child(baseline_src, _LOOP.format(rounds=rounds)))
    now, before = (statistics.median(r["seconds"] for r in runs) for runs in (here, there))
    return {"rounds": rounds, "repeats": repeats, "seconds": now, "baseline_seconds": before,
            "speedup": before / now, "same_params": here[0]["params"] == there[0]["params"],
            "accuracy": here[0]["accuracy"], "all_seconds": [r["seconds"] for r in here],
            "all_baseline_seconds": [r["seconds"] for r in there]}


def measure_batch(rounds: int, seed: int = 0) -> dict:
    """One seed's runs of the Syn(0,0) table as one batch and one by one (this checkout)."""
    import torch

    torch.set_num_threads(1)
    import most.federated as fl
    from most.bench.federated import DEFAULT_METHODS, METHODS, FederatedBenchConfig, _data

    config = FederatedBenchConfig()
    data, model = _data(config, seed)
    names = [(n, eta, x) for n in DEFAULT_METHODS for eta in config.server_lrs for x in METHODS[n].extras]
    runs = lambda: [(METHODS[n].build(x, n_models=config.n_models, server_lr=eta),  # noqa: E731
                     dataclasses.replace(config.protocol, seed=seed, rounds=rounds)) for n, eta, x in names]
    tic = time.perf_counter()
    batched = fl.run_batch(data, model, runs())
    batch_s = time.perf_counter() - tic
    tic = time.perf_counter()
    alone = [fl.run_federated(data, model, method, cfg) for method, cfg in runs()]
    alone_s = time.perf_counter() - tic

    def phases(results):
        out: dict[str, float] = {}
        for r in results:
            for k, v in r.timings().items():
                out[k] = out.get(k, 0.0) + v
        return out

    return {"runs": len(names), "rounds": rounds, "batch_seconds": batch_s, "alone_seconds": alone_s,
            "speedup": alone_s / batch_s, "same_params": all(torch.equal(a.params, b.params)
                                                             for a, b in zip(alone, batched)),
            "batch_phases": phases(batched), "alone_phases": phases(alone)}


_CENTRALISED = {
    # name -> (problem, method of a seed): the few-objective suite's ZDT rows (1000 rounds there)
    "MosT-E (Tchebycheff), ZDT1": ("zdt1", "MosT-E (Tchebycheff)"),
    "MosT-E (paper), ZDT1": ("zdt1", "MosT-E (paper)"),
    "Linearization, ZDT1": ("zdt1", "Linearization"),
    "MGDA, ZDT1": ("zdt1", "MGDA"),
    "EPO, ZDT1": ("zdt1", "EPO"),
    "MOO-SVGD, ZDT1": ("zdt1", "MOO-SVGD"),
    "MosT (default), quadratic clusters": ("clusters", None),
}


def measure_centralised(rounds: int, repeats: int, seeds: int = 5) -> dict:
    """Five seeds of each centralised case as one fit_batch and as five fits (this checkout)."""
    import torch

    torch.set_num_threads(1)
    import most
    from most.bench.few_objective import METHODS, _IDEAL
    from most.problems import quadratic_clusters, zdt

    out = {}
    for label, (name, method) in _CENTRALISED.items():
        if name == "clusters":
            problem = quadratic_clusters(n_clusters=4, per_cluster=10, dim=10, seed=0)
            runs = [most.MosT(n_models=6, rounds=rounds, lr=0.05, seed=s) for s in range(seeds)]
        else:
            problem = zdt(name)
            runs = [METHODS[method].build(n_models=5, rounds=rounds, lr=5e-3, seed=s, ideal=_IDEAL[name])
                    for s in range(seeds)]
        most.fit_batch(problem, runs[:2])  # the one-off costs (imports, first calls) before timing
        alone_s, batch_s = [], []
        for _ in range(repeats):
            tic = time.perf_counter()
            alone = [method.fit(problem) for method in runs]
            alone_s.append(time.perf_counter() - tic)
            tic = time.perf_counter()
            batched = most.fit_batch(problem, runs)
            batch_s.append(time.perf_counter() - tic)
        a, b = statistics.median(alone_s), statistics.median(batch_s)
        out[label] = {"rounds": rounds, "seeds": seeds, "repeats": repeats, "alone_seconds": a, "batch_seconds": b,
                      "speedup": a / b, "same_params": all(torch.equal(x.params, y.params)
                                                           for x, y in zip(alone, batched))}
    return out


GERMAN = ROOT.parent / "shared" / "data" / "german_credit"  # the few-objective table's German credit data


def _few_objective(src: Path, out: Path, *extra: str) -> float:
    return _bench(src, "few-objective", "--german-path", str(GERMAN), "--jobs", "2", "--out", str(out), *extra)


def measure_few_objective(scratch: Path) -> dict:
    """The stored command of the few-objective table, batched and with --no-batch."""
    import numpy as np

    batched = _few_objective(ROOT / "src", scratch / "fo_batched")
    alone = _few_objective(ROOT / "src", scratch / "fo_alone", "--no-batch")
    a, b = (json.loads((scratch / d / "results.json").read_text())["problems"] for d in ("fo_alone", "fo_batched"))
    same, largest = {}, 0.0
    for name in a:
        pairs = [(x, y) for m in a[name]["methods"]
                 for x, y in zip(a[name]["methods"][m]["runs"], b[name]["methods"][m]["runs"])]
        same[name] = all(x["points"] == y["points"] for x, y in pairs)
        largest = max([largest] + [float(np.max(np.abs(np.subtract(x["points"], y["points"])))) for x, y in pairs])
    return {"command": "most bench few-objective --german-path ../shared/data/german_credit --jobs 2",
            "batched_seconds": batched, "no_batch_seconds": alone, "same_points": same,
            "largest_difference": largest}


def _bench(src: Path, suite: str, *args: str) -> float:
    """Wall seconds of ``most bench SUITE ARGS --quiet`` with the library at ``src``."""
    most = [sys.executable, "-c", "from most.cli import app; app()"]
    tic = time.perf_counter()
    subprocess.run([*most, "bench", suite, *args, "--quiet"], env=_env(src), check=True, capture_output=True,
                   cwd=src.parent)
    return time.perf_counter() - tic


def _table(src: Path, out: Path, *extra: str) -> float:
    return _bench(src, "federated", "--rho", "0.5", "0.5", "--jobs", "2", "--out", str(out), *extra)


def _runs(out: Path) -> dict:
    results = json.loads((out / "results.json").read_text())
    keys = ("val_accuracy", "mean", "worst20", "oracle", "prediction_kl", "server_lr", "candidates_val")
    return {name: [{k: run.get(k) for k in keys} for run in entry["runs"]] for name, entry in results["methods"].items()}


def measure_table(baseline_src: Path, scratch: Path) -> dict:
    """The stored Syn(0.5,0.5) command: batched, --no-batch, and at the baseline."""
    batched = _table(ROOT / "src", scratch / "batched")
    alone = _table(ROOT / "src", scratch / "alone", "--no-batch")
    before = _table(baseline_src, scratch / "baseline")
    same = _runs(scratch / "batched") == _runs(scratch / "alone") == _runs(scratch / "baseline")
    return {"command": "most bench federated --rho 0.5 0.5 --jobs 2", "batched_seconds": batched,
            "no_batch_seconds": alone, "baseline_seconds": before, "same_runs": same}


def _machine() -> dict:
    import numpy
    import scipy
    import torch

    try:
        import ot
        pot = ot.__version__
    except ImportError:
        pot = None
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "pot": pot, "cores": os.cpu_count(),
            "measured": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def markdown(results: dict) -> str:
    m, loop, batch = results["machine"], results["loop"], results["batch"]
    lines = ["# The run axis: sweeps as one batched job", "",
             f"Machine: {m['cores']} cores, torch {m['torch']}, NumPy {m['numpy']}, SciPy {m['scipy']}, POT {m['pot']}, "
             f"Python {m['python']}; measured {m['measured']}"
             + "".join(f" ({k} measured again at {v}, `--only {k}`)" for k, v in results.get("remeasured", {}).items())
             + f". Command: `{respell(results['command'])}`. One torch thread per "
             "process; the baseline is the revision `" + results["baseline"] + "` (before the run axis and the "
             "faster local training), in a git worktree of this repository.", "",
             "## A single run's loop", "",
             f"A {loop['rounds']}-round Syn(0,0) MosT run (`run_federated`, seed 0), {loop['repeats']} repeats of each "
             "checkout, alternating, each in a fresh process after the same run for 8 rounds (the loop's steady "
             "state); median seconds.", "",
             "| checkout | median s | all s |", "|---|---|---|",
             f"| this one | {loop['seconds']:.3f} | {', '.join(f'{s:.3f}' for s in loop['all_seconds'])} |",
             f"| baseline `{results['baseline']}` | {loop['baseline_seconds']:.3f} | "
             f"{', '.join(f'{s:.3f}' for s in loop['all_baseline_seconds'])} |", "",
             f"**{loop['speedup']:.2f}× faster**; the final parameters are "
             f"{'bit for bit the same' if loop['same_params'] else '**not** the same'} "
             f"(test accuracy {100 * loop['accuracy']:.2f} %).", "",
             "## One seed's sweep as one batch", "",
             f"The runs of seed 0 of the Syn(0,0) table (the ten default methods × four server steps, FedProx's four μ: "
             f"{batch['runs']} runs of {batch['rounds']} rounds) as one `run_batch`, then one by one with "
             "`run_federated`, in this checkout. Phase seconds summed over the runs (a batch's phase time is shared "
             "equally among its runs).", "",
             "| | wall s | evaluate | plan | local training | aggregate |", "|---|---|---|---|---|---|"]
    for label, key, wall in (("one batch", "batch_phases", batch["batch_seconds"]),
                             ("one by one", "alone_phases", batch["alone_seconds"])):
        p = batch[key]
        lines.append(f"| {label} | {wall:.1f} | " + " | ".join(f"{p.get(k, 0.0):.1f}" for k in
                                                              ("evaluate", "plan", "local_training", "aggregate")) + " |")
    lines += ["", f"**{batch['speedup']:.2f}×**; every run ends with "
              f"{'the same parameters, bit for bit' if batch['same_params'] else '**other** parameters'}. What a batch "
              "saves is the per-step cost of launching small tensor operations: the pairs of all runs train in one "
              "step. What it cannot share is each run's server side (plan, combination, update: the min-norm "
              "solves of MGDA, w-MGDA and FedMGDA+ are most of it) and the arithmetic itself, which is what remains "
              "on two cores."]
    table = results.get("table")
    if table:
        lines += ["", "## The Syn(0.5,0.5) table", "",
                  f"`{table['command']}` (10 methods × 5 seeds × 4 server steps, FedProx × 4 μ: 260 runs), wall "
                  "seconds of the whole command, one after the other in this call.", "",
                  "| | wall s |", "|---|---|",
                  f"| batched (the default) | {table['batched_seconds']:.0f} |",
                  f"| `--no-batch` | {table['no_batch_seconds']:.0f} |",
                  f"| baseline `{results['baseline']}` | {table['baseline_seconds']:.0f} |", "",
                  f"Batched: {table['baseline_seconds'] / table['batched_seconds']:.1f}× faster than the baseline; "
                  f"the three tables {'agree run by run (every candidate, every number)' if table['same_runs'] else '**differ**'}."]
    central = results.get("centralised")
    if central:
        first = next(iter(central.values()))
        lines += ["", "## Seeds of a centralised fit", "",
                  f"{first['seeds']} seeds of each method ({first['rounds']} rounds, one torch thread) as one "
                  f"`most.fit_batch` and as {first['seeds']} `fit` calls, alternating, {first['repeats']} repeats; "
                  "median seconds. The ZDT1 rows are the few-objective suite's methods (m = 5, Adam, lr 5e-3); the "
                  "last is the default MosT, m = 6, on 40 quadratics in 4 clusters of 10 (d = 10).", "",
                  "| method, problem | fits s | one batch s | speed-up | same models |", "|---|---|---|---|---|"]
        for label, r in central.items():
            lines.append(f"| {label} | {r['alone_seconds']:.2f} | {r['batch_seconds']:.2f} | {r['speedup']:.2f}× | "
                         f"{'bit for bit' if r['same_params'] else '**no**'} |")
        lines += ["", "A batch evaluates the objectives of all runs' models in one call and keeps each run's plan, "
                  "weights, combination and update its own: the runs gain what the evaluation is of a round. MosT-E "
                  "(paper) draws its Dirichlet mixtures per seed, so its runs go in step with an evaluation each "
                  "and gain nothing; EPO's own step (its linear program per model) is most of its round."]
    fo = results.get("few_objective")
    if fo:
        same = [name for name, ok in fo["same_points"].items() if ok]
        differ = [name for name, ok in fo["same_points"].items() if not ok]
        lines += ["", "## The few-objective table", "",
                  f"`{fo['command']}` (8 methods, 3 seeds, ZDT1–3 and two fairness problems with their learning-rate "
                  "search: 192 runs), wall seconds, one after the other in this call.", "",
                  "| | wall s |", "|---|---|",
                  f"| batched (the default) | {fo['batched_seconds']:.0f} |",
                  f"| `--no-batch` | {fo['no_batch_seconds']:.0f} |", "",
                  f"**{fo['no_batch_seconds'] / fo['batched_seconds']:.2f}×**. Every run's final points are the same, "
                  f"bit for bit, on {', '.join(same) or 'no problem'}"
                  + (f"; on {', '.join(differ)} they differ by at most {fo['largest_difference']:.1e} (the fairness "
                     "losses multiply the data by all models' parameters at once, a product the backend blocks by "
                     "the number of models)" if differ else "") + "."]
    lines += ["", "GPU: not measured here (no device was lent to the session that made this file)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance run-axis",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision to measure against")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--table", action="store_true", help="also time the whole Syn(0.5,0.5) table (minutes)")
    parser.add_argument("--quick", action="store_true", help="a few rounds, to a scratch folder (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--only", choices=("loop", "batch", "table", "centralised", "few_objective"), help="measure this section again and keep the others "
                        "from OUT/run_axis.json")
    args = parser.parse_args(argv)
    rounds = 4 if args.quick else 100
    out = Path(tempfile.mkdtemp()) if args.quick else args.out
    with tempfile.TemporaryDirectory() as scratch:
        baseline = _worktree(args.baseline, Path(scratch) / "baseline")
        try:
            if args.only:
                results = json.loads((out / "run_axis.json").read_text())
                results.setdefault("remeasured", {})[args.only] = _machine()["measured"]
            else:
                results = {"command": "python -m benchmarks.performance run-axis" + (" --table" if args.table else ""),
                           "baseline": args.baseline, "machine": _machine()}
            if args.only in (None, "loop"):
                results["loop"] = measure_loop(baseline / "src", 1 if args.quick else args.repeats, rounds)
            if args.only in (None, "batch"):
                results["batch"] = measure_batch(rounds)
            if args.only in (None, "centralised"):
                results["centralised"] = measure_centralised(30 if args.quick else 300, 1 if args.quick else 3)
            if (args.table and not args.quick and not args.only) or args.only == "table":
                results["table"] = measure_table(baseline / "src", Path(scratch))
            if (args.table and not args.quick and not args.only) or args.only == "few_objective":
                if GERMAN.is_dir():
                    results["few_objective"] = measure_few_objective(Path(scratch))
                else:
                    print(f"The few-objective table is not timed: German credit not found at {GERMAN}.")
        finally:
            _remove_worktree(baseline)
    from most.checkpoint import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "run_axis.json", json.dumps(results, indent=1) + "\n")
    atomic_write_text(out / "run_axis.md", markdown(results))
    print(markdown(results))
    print(f"Wrote {out / 'run_axis.md'} and run_axis.json.")
    return 0
