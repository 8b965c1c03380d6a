"""The CUDA path against the same machine's CPU (the suite's ``cuda`` part; :data:`CUDA_DOC`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch


from .harness import CUDA_COMMAND, ROOT
from .rounds import _phase_summary

CUDA_DOC = """The CUDA path, checked and timed on a GPU against the CPU of the same machine.

Runs on a machine with a CUDA device (it refuses to start without one) and writes
``benchmarks/results/cuda.json`` and ``benchmarks/results/cuda.md`` (or ``--out-dir``):

1. **Federated runs**: a 100-round MosT run on Syn(0,0), one seed's sweep of the Syn(0,0) table
   as one batch (:func:`most.federated.run_batch`, 52 runs), and rounds of MosT and FedAvg
   (m = 5) on FEMNIST with the paper's CNN (32, 64 channels), on ``cpu`` and ``cuda``; each with
   the final accuracy, so the two devices can be compared.
2. **Transport**: ``transport.solve`` with the entropic solvers at n = 100 000, m = 50 (the
   performance suite's target case) with the tensors on each device, and the plans' difference.
3. **Min-norm**: batched ``mgda.min_norm`` on random Gram matrices, on each device, and the
   weights' difference.

Every time is the median of ``--repeats`` calls after one untimed call (the sweep: one call after
an untimed 3-round batch; CUDA is synchronised before each clock read)::

    python -m benchmarks.performance cuda --femnist ../shared/data/femnist_leaf_sf005

It takes about four minutes on an H100 with 16 cores (most of it the CPU side of the CNN and
of the sweep).
"""

def _timed(fn, repeats: int, device: str, warm=None):
    (warm or fn)()  # untimed: kernels compiled, caches warm
    walls, out = [], None
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        tic = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - tic)
    return statistics.median(walls), out


def cuda_syn_run(repeats: int) -> list[dict]:
    from most.federated import FederatedConfig, fedprox_synthetic, logistic_regression, run_federated
    from most.federated import methods as F

    data = fedprox_synthetic(0.0, 0.0, seed=0)
    model = logistic_regression(int(data.input_shape[0]), data.n_classes)
    rows = []
    for device in ("cpu", "cuda"):
        config = FederatedConfig(rounds=100, seed=0, device=device)
        seconds, result = _timed(lambda: run_federated(data, model, F.MosT(5, server_lr=5.0), config), repeats, device)
        rows.append({"case": "Syn(0,0), MosT, 100 rounds", "device": device, "seconds": seconds,
                     "accuracy": result.mean_accuracy})
    return rows


def cuda_syn_batch() -> list[dict]:
    """One seed's sweep of the Syn(0,0) table (the ten default methods, four server steps,
    FedProx's four mu: 52 runs of 100 rounds) as one ``run_batch``, on each device; once each,
    after a 3-round batch (a minute of CPU per call)."""
    from most.bench.federated import DEFAULT_METHODS, METHODS, FederatedBenchConfig, _data
    from most.federated import run_batch

    config = FederatedBenchConfig()
    data, model = _data(config, 0)
    names = [(n, eta, x) for n in DEFAULT_METHODS for eta in config.server_lrs for x in METHODS[n].extras]
    rows = []
    for device in ("cpu", "cuda"):
        def runs(rounds):
            return [(METHODS[n].build(x, n_models=config.n_models, server_lr=eta),
                     dataclasses.replace(config.protocol, seed=0, rounds=rounds, device=device))
                    for n, eta, x in names]
        seconds, results = _timed(lambda: run_batch(data, model, runs(100)), 1, device, warm=lambda: run_batch(
            data, model, runs(3)))
        rows.append({"case": f"Syn(0,0), one seed's table sweep ({len(names)} runs x 100 rounds, batched)",
                     "device": device, "seconds": seconds,
                     "accuracy": sum(r.mean_accuracy for r in results) / len(results)})
    return rows


def cuda_femnist_rounds(path: Path, rounds: int) -> list[dict]:
    from most.bench.federated import FederatedBenchConfig, _data
    from most.federated import FederatedConfig, run_federated
    from most.federated import methods as F

    data, model = _data(FederatedBenchConfig(dataset="femnist", model="cnn", cnn_channels=(32, 64), data_path=path), 0)
    rows = []
    for name, build in (("MosT", lambda: F.MosT(5, server_lr=3.0, warmup=None)),
                        ("FedAvg (m models)", lambda: F.FedAvg(5, server_lr=1.0))):
        for device in ("cuda", "cpu"):
            n = rounds if device == "cuda" else 2  # a CPU round with this CNN takes minutes
            result = run_federated(data, model, build(), FederatedConfig(rounds=n, seed=0, device=device,
                                                                         eval_every=0))
            timed = _phase_summary(result.history, skip=1)  # the first round pays for compilation and allocation
            rows.append({"case": f"FEMNIST CNN(32,64), {name}", "device": device,
                         "rounds_timed": timed["rounds_timed"], "seconds_per_round": timed["round_seconds"],
                         "train_loss_last": result.history[-1].train_loss})
    return rows


def cuda_transport_cases(repeats: int) -> list[dict]:
    from most import transport

    gen = torch.Generator().manual_seed(0)
    n, m = 100_000, 50
    cost = torch.rand(n, m, generator=gen, dtype=torch.float64)
    rows = []
    for method in ("newton", "sinkhorn"):
        plans = {}
        for device in ("cpu", "cuda"):
            c = cost.to(device)
            a = torch.full((n,), 1 / n, device=device, dtype=torch.float64)
            b = torch.full((m,), 1 / m, device=device, dtype=torch.float64)
            seconds, res = _timed(lambda: transport.solve(c, a, b, method=method), repeats, device)
            plans[device] = res.plan.cpu()
            rows.append({"case": f"transport {method}, n={n}, m={m}", "device": device, "seconds": seconds,
                         "converged": bool(res.converged)})
        rows[-1]["max_abs_plan_difference"] = float((plans["cpu"] - plans["cuda"]).abs().max())
    return rows


def cuda_min_norm_cases(repeats: int) -> list[dict]:
    from most import mgda

    rows = []
    for batch, k, d in ((5, 100, 10_000), (50, 200, 10_000)):
        gen = torch.Generator().manual_seed(1)
        g = torch.randn(batch, k, d, generator=gen, dtype=torch.float64) + 0.3
        gram = g @ g.transpose(1, 2)
        weights = {}
        for device in ("cpu", "cuda"):
            G = gram.to(device)
            seconds, res = _timed(lambda: mgda.min_norm(G), repeats, device)
            weights[device] = res.weights.cpu()
            rows.append({"case": f"min_norm, batch {batch} x {k} objectives", "device": device, "seconds": seconds})
        rows[-1]["max_abs_weight_difference"] = float((weights["cpu"] - weights["cuda"]).abs().max())
    return rows


def cuda_markdown(results: dict) -> str:
    command = CUDA_COMMAND if results["repeats"] == 5 else f"{CUDA_COMMAND} --repeats {results['repeats']}"
    lines = ["# The CUDA path, timed", "",
             f"Produced by `{command}` on {results['machine']['gpu']} with {results['machine']['cpu_count']} CPU "
             f"cores (torch {results['machine']['torch']}, Python {results['machine']['python']}), "
             f"{results['date']}. Medians of {results['repeats']} calls after an untimed one.", "",
             "| case | CPU | CUDA | CPU / CUDA | agreement |", "|---|---|---|---|---|"]
    by_case: dict[str, dict] = {}
    for row in results["rows"]:
        by_case.setdefault(row["case"], {})[row["device"]] = row
    for case, pair in by_case.items():
        key = "seconds_per_round" if "seconds_per_round" in pair["cuda"] else "seconds"
        unit = " / round" if key == "seconds_per_round" else ""
        cpu, gpu = pair["cpu"][key], pair["cuda"][key]
        if "accuracy" in pair["cuda"]:
            agree = f"accuracy {pair['cpu']['accuracy']:.4f} vs {pair['cuda']['accuracy']:.4f}"
        elif "train_loss_last" in pair["cuda"]:
            agree = "–"
        else:
            diff = next(v for k, v in pair["cuda"].items() if k.startswith("max_abs"))
            agree = f"max abs difference {diff:.1e}"
        lines.append(f"| {case} | {cpu:.3g} s{unit} | {gpu:.3g} s{unit} | {cpu / gpu:.1f}× | {agree} |")
    lines += ["", "- CPU is the same machine's cores (torch using all of them); FEMNIST rounds are the mean "
              "after the first round (one CPU round, the rest on CUDA).",
              "- The federated runs agree between the devices up to float32 rounding "
              "(`tests/federated/test_runtime.py` checks 6 rounds to 1e-3), but over 100 rounds such "
              "differences can move a client to another model in the plan, so a run's final accuracy "
              "can differ by a few clients (the sweep's mean over 52 runs agrees to four digits).",
              "- On an accelerator the server's small arithmetic runs on the host (`most._host`): the plans, "
              "the combination weights, min-norm problems of up to 2¹⁸ numbers (hence the 5 × 100 row at "
              "about the CPU's time) and FedMGDA+'s QPs; the losses come to the host in one copy per round. "
              "That took a seed's sweep from 45 s to 25 s on an H100 (13 253 host reads in 8 rounds "
              "before, 1 204 after).",
              "- A single small run (Syn's logistic model) stays faster on the CPU: each local step is a few "
              "dozen kernels on a few thousand numbers, and the GPU pays a launch for each. The GPU pays "
              "when the runs of a sweep train together (`run_batch`, the default of `most bench federated`).",
              "- The whole Syn(0,0) table (10 methods, 5 seeds, 4 server steps, FedProx's 4 mu: 260 runs) on "
              "the same machine: `most bench federated --device cuda --jobs 10 --threads 1` took 56 s "
              "(`--jobs 5`, a process per seed: 59 s); its rows agree with the CPU's re-run on today's code "
              "(`federated/rerun_batched/syn_0_0/table.md`) within half a point: six rows equal, MosT 84.73 "
              "against 85.23, MosT (min-norm) 79.13 / 79.47, MosT (paper) 76.63 / 76.73, FedMGDA+ 79.83 / "
              "79.67 (the methods whose plan or min-norm step can tip on float32 rounding). The processes share one GPU, which runs their kernels one "
              "context at a time, and each process's host work (per-run plans and min-norm solves) is the "
              "rest.",
              "- The paper's CNN is compute-bound on the GPU: a batch of its runs costs what the runs cost one "
              "by one (22 FEMNIST runs × 3 rounds: 28.6 s batched, 26.5 s one by one, on an H100)."]
    return "\n".join(lines) + "\n"


def cuda_main(argv=None) -> int:
    """``python -m benchmarks.performance cuda``: the CUDA path, on a machine with a GPU; ``--render`` rewrites
    cuda.md from cuda.json (anywhere)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance cuda", description=CUDA_DOC.split("\n\n")[0])
    parser.add_argument("--femnist", type=Path, help="the FEMNIST LEAF directory (required to measure)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--femnist-rounds", type=int, default=6)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--render", action="store_true", help="only rewrite cuda.md from OUT_DIR/cuda.json")
    args = parser.parse_args(argv)
    if args.render:
        report = cuda_markdown(json.loads((args.out_dir / "cuda.json").read_text()))
        (args.out_dir / "cuda.md").write_text(report)
        print(report, end="")
        return 0
    if args.femnist is None:
        parser.error("--femnist DIR is required to measure (or --render)")
    if not torch.cuda.is_available():
        sys.exit("python -m benchmarks.performance cuda needs a CUDA device; torch.cuda.is_available() is False here.")
    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for part in (lambda: cuda_syn_run(args.repeats), cuda_syn_batch, lambda: cuda_transport_cases(args.repeats),
                 lambda: cuda_min_norm_cases(args.repeats), lambda: cuda_femnist_rounds(args.femnist, args.femnist_rounds)):
        rows += part()
        print(json.dumps(rows[-1]), flush=True)
    results = {"date": time.strftime("%Y-%m-%d"), "repeats": args.repeats, "rows": rows,
               "machine": {"gpu": torch.cuda.get_device_name(), "cpu_count": os.cpu_count(),
                           "torch": torch.__version__, "python": platform.python_version()}}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "cuda.json").write_text(json.dumps(results, indent=1) + "\n")
    report = cuda_markdown(results)
    (args.out_dir / "cuda.md").write_text(report)
    print(report)
    return 0


