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


def cuda_tasks_round(n: int = 10_000, rounds: int = 20, devices: tuple[str, ...] = ("cpu", "cuda")) -> list[dict]:
    """A round of the default MosT (m = 8) on ``n`` linear-regression tasks of 20 samples each built
    with ``Problem.from_datasets`` (the many-tasks case of ``benchmarks.performance tasks``), data
    and models on each device: the median round of a ``rounds``-round fit, beside one hand-written
    vectorised forward and backward pass over all tasks' data for all models (best of 10)."""
    import most
    from . import tasks as T

    def sync(device):
        if device == "cuda":
            torch.cuda.synchronize()

    groups = [n // 8 + (1 if k < n % 8 else 0) for k in range(8)]
    base = T.linear_tasks(groups, (20, 20), seed=1)
    rows, losses = [], {}
    for device in devices:
        tasks = [(x.to(device), y.to(device)) for x, y in base]
        problem = most.Problem.from_datasets(lambda: torch.nn.Linear(20, 1).to(device), tasks, T.squared)
        stamps: list[float] = []

        def stamp(record, params):
            sync(device)
            stamps.append(time.perf_counter())

        result = most.MosT(n_models=8, rounds=rounds, seed=0).fit(problem, callback=stamp)
        step = T.hand_pass(base, 8, device)
        step()
        passes = []
        for _ in range(10):
            sync(device)
            tic = time.perf_counter()
            step()
            sync(device)
            passes.append(time.perf_counter() - tic)
        losses[device] = float(result.best_losses().mean())
        rows.append({"case": f"{n} tasks x 20 samples (from_datasets), MosT m = 8", "device": device,
                     "seconds_per_round": statistics.median(b - a for a, b in zip(stamps, stamps[1:])),
                     "hand_pass": min(passes), "mean_best_loss": losses[device]})
    if {"cpu", "cuda"} <= set(losses):
        rows[-1]["max_abs_mean_best_loss_difference"] = abs(losses["cpu"] - losses["cuda"])
    return rows


def cuda_syn_profile(rounds: int = 20, devices: tuple[str, ...] = ("cuda", "cpu")) -> dict:
    """Why a single small Syn(0,0) MosT run is slower on the GPU: the CUDA API calls and scalar
    reads of a round (``torch.profiler`` over a ``rounds``-round run without evaluation, after an
    untimed one), and the mean seconds of each phase of a round after the warm-up, per device."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    from most.federated import FederatedConfig, fedprox_synthetic, logistic_regression, run_federated
    from most.federated import methods as F

    data = fedprox_synthetic(0.0, 0.0, seed=0)
    model = logistic_regression(int(data.input_shape[0]), data.n_classes)
    out = {}
    for device in devices:
        config = FederatedConfig(rounds=rounds, seed=0, device=device, eval_every=0)
        run_federated(data, model, F.MosT(5, server_lr=5.0), config)  # untimed: kernels and caches warm
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            result = run_federated(data, model, F.MosT(5, server_lr=5.0), config)
        if device == "cuda":
            torch.cuda.synchronize()
        counts: Counter = Counter()
        for event in prof.events():
            if event.name.startswith("cuda") or event.name in ("aten::item", "aten::_local_scalar_dense",
                                                                "aten::to", "aten::copy_"):
                counts[event.name] += 1
        after = result.history[5:]  # after MosT's warm-up
        phases: dict[str, float] = {}
        for log in after:
            for phase, seconds in (log.seconds or {}).items():
                phases[phase] = phases.get(phase, 0.0) + seconds / len(after)
        out[device] = {"calls_per_round": {k: v / rounds for k, v in counts.most_common(12)},
                       "phase_seconds_per_round": phases}
    return out


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
             f"{results['date']}. Medians of {results['repeats']} calls after an untimed one."
             + (" The tasks row (the code of `cuda_tasks_round`, run on its own before it joined the suite), "
                "the profile (the code of `cuda_syn_profile`, likewise), the table's time, the fine-tuning "
                "times and the CUDA tests were measured on the "
                "same machine in the same session, by the commands named with them."
                if results.get("finetune") else ""), "",
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
              "before, 1 204 after; measured 2026-11-24)."]
    profile = results.get("profile_syn")
    if profile:
        calls, phases = profile["cuda"]["calls_per_round"], profile["cuda"]["phase_seconds_per_round"]
        launches = calls.get("cudaLaunchKernel", 0) + calls.get("cudaLaunchKernelExC", 0)
        lines.append(
            "- A single small run (Syn's logistic model) stays faster on the CPU. Profiled with `torch.profiler` "
            f"(20 rounds, no evaluation), a round on the GPU launches {launches:.0f} kernels, copies "
            f"{calls.get('cudaMemcpyAsync', 0):.0f} times between host and device, waits for the device "
            f"{calls.get('cudaStreamSynchronize', 0):.0f} times and reads {calls.get('aten::item', 0):.0f} scalars; "
            f"its local training takes {1000 * phases['local_training']:.1f} ms a round against "
            f"{1000 * profile['cpu']['phase_seconds_per_round']['local_training']:.1f} ms on the CPU, and the other "
            "phases about what they take there: each local step is a few dozen kernels on a few thousand "
            "numbers, and the GPU pays a launch for each. The GPU pays when the runs of a sweep train together "
            "(`run_batch`, the default of `most bench federated`).")
    else:
        lines.append("- A single small run (Syn's logistic model) stays faster on the CPU: each local step is a few "
                     "dozen kernels on a few thousand numbers, and the GPU pays a launch for each. The GPU pays "
                     "when the runs of a sweep train together (`run_batch`, the default of `most bench federated`).")
    table = results.get("syn_table")
    if table:
        lines.append(f"- The whole Syn(0,0) table (10 methods, 5 seeds, 4 server steps, FedProx's 4 mu: 260 runs) "
                     f"on this machine: `{table['command']}` took {table['seconds']:.1f} s (`--jobs 16`: "
                     f"{table['seconds_jobs_16']:.1f} s). The processes share one GPU, which runs their kernels "
                     "one context at a time, and each process's host work (per-run plans and min-norm solves) is "
                     "the rest. On an H100 on 2026-11-24 it took 56 s, and its rows agreed with the CPU's within "
                     "half a point (the methods whose plan or min-norm step can tip on float32 rounding differ).")
    tasks = {r["device"]: r for r in results["rows"] if "hand_pass" in r}
    if len(tasks) == 2:
        cpu, gpu = tasks["cpu"], tasks["cuda"]
        lines.append(f"- Many tasks with their own data (`Problem.from_datasets`, the tasks row): a round is "
                     f"{cpu['seconds_per_round'] / gpu['seconds_per_round']:.1f}× faster on the GPU, and "
                     f"{gpu['seconds_per_round'] / gpu['hand_pass']:.1f}× one hand-written vectorised forward and "
                     f"backward pass over all tasks for all models there ({cpu['seconds_per_round'] / cpu['hand_pass']:.1f}× "
                     "on the CPU).")
    tune = results.get("finetune")
    if tune:
        g, c, mins = tune["cuda"], tune["cpu"], tune["minutes_500_rounds"]
        lines.append(f"- Fine-tuning EfficientNet-Lite0's last block on Office-Caltech10's shapes (4 domains × 64 "
                     f"images, m = 4, Adam; `{tune['command']}`: random weights and images, whose arithmetic is the "
                     f"real one's): MosT {g['MosT'][0]:.2f} s a round with the frozen blocks' outputs kept "
                     f"({g['MosT'][1]:.2f} s recomputed), MGDA {g['MGDA'][0]:.2f} ({g['MGDA'][1]:.2f}) s; a 500-round "
                     f"run takes {mins['cuda']['MosT'][0]}-{mins['cuda']['MGDA'][1]} minutes, against "
                     f"{mins['cpu']['MosT'][0]:.0f}-{mins['cpu']['MGDA'][1]:.0f} minutes on the 16 cores "
                     f"(MosT {c['MosT'][0]:.2f} and {c['MosT'][1]:.2f} s a round, MGDA {c['MGDA'][0]:.2f} and "
                     f"{c['MGDA'][1]:.2f}).")
    checks = results.get("cuda_tests")
    if checks:
        lines.append(f"- The CUDA tests that the CPU-only CI skips ({checks['passed']}) pass on this machine with "
                     "this code.")
    lines.append("- The paper's CNN is compute-bound on the GPU: a batch of its runs costs what the runs cost one "
                 "by one (22 FEMNIST runs × 3 rounds: 28.6 s batched, 26.5 s one by one, on an H100).")
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
                 lambda: cuda_min_norm_cases(args.repeats), lambda: cuda_femnist_rounds(args.femnist, args.femnist_rounds),
                 cuda_tasks_round):
        rows += part()
        print(json.dumps(rows[-1]), flush=True)
    results = {"date": time.strftime("%Y-%m-%d"), "repeats": args.repeats, "rows": rows,
               "profile_syn": cuda_syn_profile(),
               "machine": {"gpu": torch.cuda.get_device_name(), "cpu_count": os.cpu_count(),
                           "torch": torch.__version__, "python": platform.python_version()}}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "cuda.json").write_text(json.dumps(results, indent=1) + "\n")
    report = cuda_markdown(results)
    (args.out_dir / "cuda.md").write_text(report)
    print(report)
    return 0


