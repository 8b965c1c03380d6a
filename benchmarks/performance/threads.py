"""Torch threads by default: small runs on one thread, large ones on torch's count, side by side.

Each measurement runs in a fresh interpreter (import and run, as a user pastes code), the
settings alternating, ``--repeats`` times; medians. Three settings of :func:`most.set_threads`:

* ``auto`` -- the library's default (one thread when a step is small work);
* ``one thread`` -- ``torch.set_num_threads(1)`` and ``most.set_threads(None)`` (what a user who
  knows the trick does);
* ``torch's count`` -- ``most.set_threads(None)``: the library before the default (every core).

Cases:

* **busy**: the README's federated example (100 rounds of MosT on Syn(0,0)) beside one busy
  process (a Python loop spinning on one core). Target: ``auto`` within 1.5x of ``one thread``.
* **idle, large**: on an otherwise idle machine, one round of MosT with the paper's CNN on 20
  FEMNIST writers (``--femnist DIR``; skipped without), and three rounds of the default MosT
  with m = 50 on 10^5 quadratic objectives in R^10 (its transport over 10^5 x 50). Target:
  ``auto`` no slower than ``torch's count`` (within the spread of repeats).

Writes ``benchmarks/results/threads.md`` and ``threads.json``::

    python -m benchmarks.performance threads --femnist ../shared/data/femnist_leaf_sf005
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .harness import respell

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

TORCH = "torch's count"

SETTINGS = {
    "auto": "",
    "one thread": "torch.set_num_threads(1); most.set_threads(None)",
    TORCH: "most.set_threads(None)",
}

README_FEDERATED = """
import most.federated as fl

data = fl.fedprox_synthetic(0.0, 0.0, seed=0)
model = fl.logistic_regression(60, 10)
config = fl.FederatedConfig(rounds=100, local_epochs=1, batch_size=10, lr=0.05, seed=0)
result = fl.run_federated(data, model, fl.methods.MosT(n_models=5, server_lr=5.0), config)
print(result.mean_accuracy)
"""

CNN = """
import dataclasses
import most.federated as fl
full = fl.load_femnist({path!r}, seed=0, ink=True)
data = dataclasses.replace(full, clients=full.clients[:20], client_ids=full.client_ids[:20])
model = fl.cnn(62, channels=(32, 64))
result = fl.run_federated(data, model, fl.methods.MosT(n_models=5, server_lr=3.0, warmup=None),
                          fl.FederatedConfig(rounds=1, batch_size=20, seed=0, eval_every=0))
"""

TRANSPORT = """
c = 3.0 * torch.randn(100_000, 10, generator=torch.Generator().manual_seed(0))
problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=10, n_objectives=100_000)
result = most.MosT(n_models=50, rounds=3, lr=0.05).fit(problem)
"""


def _child(setting: str, body: str) -> float:
    """Seconds of ``body`` in a fresh interpreter under ``setting`` (imports included)."""
    code = ("import time; tic = time.perf_counter()\nimport torch, most, warnings\n"
            "warnings.simplefilter('ignore')\n" + SETTINGS[setting] + "\n" + body
            + "\nprint('SECONDS', time.perf_counter() - tic)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.split("SECONDS")[-1])


def measure(body: str, settings: list[str], repeats: int) -> dict:
    seconds: dict[str, list[float]] = {s: [] for s in settings}
    for _ in range(repeats):
        for s in settings:
            seconds[s].append(_child(s, body))
    return {s: {"median": statistics.median(v), "all": v} for s, v in seconds.items()}


def busy_case(repeats: int) -> dict:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        return measure(README_FEDERATED, list(SETTINGS), repeats)
    finally:
        busy.kill()
        busy.wait()


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = ["# Torch threads by default", "",
             f"Produced by `{respell(results['command'])}` on {m['cores']} cores ({m['processor']}; torch {m['torch']}, "
             f"Python {m['python']}), {results['date']}. Each number is the median of {results['repeats']} fresh "
             "interpreters (import and run), the settings alternating.", "",
             "Settings: **auto** is the library's default (`most.set_threads('auto')`: one torch thread when a "
             "step is small work, torch's count otherwise); **one thread** is `torch.set_num_threads(1)` with "
             "`most.set_threads(None)`; **torch's count** is `most.set_threads(None)` (every core, the "
             "library's behaviour before this default).", "",
             "| case | auto | one thread | torch's count | auto ÷ one thread | auto ÷ torch's count |",
             "|---|---|---|---|---|---|"]
    for name, case in results["cases"].items():
        if case is None:
            lines.append(f"| {name} | not run | | | | |")
            continue
        auto = case["auto"]["median"]
        cells = [f"{case[s]['median']:.2f} s" if s in case else "–" for s in SETTINGS]
        ratio = lambda s: f"{auto / case[s]['median']:.2f}×" if s in case else "–"  # noqa: E731
        lines.append(f"| {name} | {' | '.join(cells)} | {ratio('one thread')} | {ratio(TORCH)} |")
    lines += ["", "Targets: the README's federated example beside one busy process within 1.5× of one thread; the "
              "large cases on an idle machine no slower than torch's count (their work is above "
              "`most._threads.SMALL_WORK`, so auto leaves torch's count: the same code, and the ratio is the "
              "spread of the repeats).", ""]
    busy = results["cases"]["README federated example, beside one busy process"]
    if busy:
        ratio = busy["auto"]["median"] / busy["one thread"]["median"]
        lines.append(f"- Beside a busy process: auto ÷ one thread = {ratio:.2f}× (target ≤ 1.5×: "
                     f"{'met' if ratio <= 1.5 else 'not met'}); torch's count is "
                     f"{busy[TORCH]['median'] / busy['auto']['median']:.1f}× "
                     "slower than auto.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance threads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--femnist", type=Path, help="FEMNIST LEAF directory (the CNN case; skipped without)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    cases: dict[str, dict | None] = {}
    cases["README federated example, beside one busy process"] = busy_case(args.repeats)
    print(json.dumps(cases), flush=True)
    large = ["auto", TORCH]
    cases["FEMNIST CNN(32,64), one MosT round, 20 writers, idle"] = (
        measure(CNN.format(path=str(args.femnist)), large, args.repeats) if args.femnist else None)
    print(json.dumps(cases), flush=True)
    cases["MosT m = 50 on 10^5 objectives (d = 10), 3 rounds, idle"] = measure(TRANSPORT, large, args.repeats)
    command = "python -m benchmarks.performance threads" + (" --femnist ../shared/data/femnist_leaf_sf005" if args.femnist
                                                else "")
    results = {"command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "repeats": args.repeats,
               "machine": {"cores": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                           "torch": torch.__version__, "python": platform.python_version()},
               "cases": cases}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "threads.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "threads.md").write_text(markdown(results))
    print(markdown(results))
    return 0
