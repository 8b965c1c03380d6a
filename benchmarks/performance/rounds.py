"""End-to-end rounds and centralised memory (the suite's ``rounds`` part; :data:`ROUNDS_DOC`)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from most._kernels import cpu_kernels

from .harness import ROOT, _current_rss_mib, _maxrss_kib, reset_peak_rss

ROUNDS_DOC = """End-to-end speed of the MosT loop, and its memory on many objectives.

Three measurements, each the median of several runs on this machine:

1. **A 100-round Syn(0,0) run** (FedProx synthetic, 30 clients, logistic regression, the
   federated benchmark's protocol) for MosT, MosT with the min-norm combination, FedAvg with
   m models and IFCA: wall time, and the share of each phase of a round (client evaluation,
   the server's plan = transport, local training, aggregation = min-norm or mean).
2. **FEMNIST rounds** (105 LEAF writers, m = 5) with the logistic model and the paper's CNN
   (channels 8/16): seconds per round and the same shares, MosT against FedAvg-with-m-models
   in the same runtime. Needs ``../shared/data/femnist_leaf_sf005`` (skipped without it).
3. **Centralised memory**: one MosT round on n = 2,000 least-squares objectives, d = 500,
   m = 10, with the packed Jacobian of the served objectives (the default) and with the
   dense ``[m, n, d]`` Jacobian, and the packed one at n = 10,000, d = 1,000, each in a
   fresh process: peak RSS above the inputs.

Run (about 5 minutes; ``--quick``: about one)::

    .venv/bin/python -m benchmarks.performance rounds [--quick] [--out benchmarks/results/performance/rounds.json]
"""

FEMNIST = ROOT.parent / "shared" / "data" / "femnist_leaf_sf005"
PHASES = ("evaluate", "plan", "local_training", "aggregate")


def _methods(m: int, warmup: int | None = None):
    """The methods timed; ``warmup``: MosT's warm-up rounds (default: the library's, 0: none)."""
    from most import MinNorm
    from most.federated import methods as F

    most_kw = {} if warmup is None else {"warmup": F.WarmUp(warmup) if warmup else None}
    return {
        "MosT": lambda: F.MosT(m, server_lr=5.0, **most_kw),
        "MosT (min-norm)": lambda: F.MosT(m, server_lr=5.0, combiner=MinNorm(), **most_kw),
        "MosT (min-norm, last-layer bias)": lambda: F.MosT(m, server_lr=5.0, combiner=MinNorm(coordinates="last"),
                                                           **most_kw),
        "FedAvg (m models)": lambda: F.FedAvg(m, server_lr=1.0),
        "IFCA": lambda: F.IFCA(m, server_lr=5.0),
    }


def _phase_summary(history, skip: int = 0) -> dict:
    rounds = history[skip:]
    per_phase = {p: sum(r.seconds[p] for r in rounds) for p in PHASES}
    total = sum(per_phase.values())
    return {
        "rounds_timed": len(rounds),
        "round_seconds": total / max(1, len(rounds)),
        "share": {p: per_phase[p] / total if total else 0.0 for p in PHASES},
    }


def syn_runs(repeats: int, rounds: int = 100) -> list[dict]:
    """Section 1: 100-round runs on Syn(0,0), seed 0."""
    from most.federated import FederatedConfig, fedprox_synthetic, logistic_regression, run_federated

    data = fedprox_synthetic(0.0, 0.0, seed=0)
    model = logistic_regression(int(data.input_shape[0]), data.n_classes)
    config = FederatedConfig(rounds=rounds, seed=0)
    rows = []
    for name, build in _methods(5).items():
        run_federated(data, model, build(), FederatedConfig(rounds=5, seed=0))  # warm-up
        walls, results = [], []
        for _ in range(repeats):
            tic = time.perf_counter()
            results.append(run_federated(data, model, build(), config))
            walls.append(time.perf_counter() - tic)
        best = results[walls.index(statistics.median_low(walls))]
        warmup = getattr(build(), "warmup_rounds", 0)
        rows.append({
            "method": name,
            "wall_seconds": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
            "accuracy": best.mean_accuracy,
            "all_rounds": _phase_summary(best.history),
            "after_warmup": _phase_summary(best.history, skip=warmup),
        })
    return rows


def femnist_rounds(model_kind: str, rounds: int, repeats: int) -> list[dict]:
    """Section 2: seconds per round on FEMNIST (MosT without warm-up, so every timed round
    is a full MosT round: transport, one owner per client, aggregation)."""
    from most.bench.federated import FederatedBenchConfig, _data
    from most.federated import FederatedConfig, run_federated

    bench = FederatedBenchConfig(dataset="femnist", model=model_kind, cnn_channels=(8, 16), data_path=str(FEMNIST))
    data, model = _data(bench, 0)
    config = FederatedConfig(rounds=rounds, seed=0)
    rows = []
    for name, build in _methods(5, warmup=0).items():
        if name == "IFCA":
            continue
        runs = []
        for _ in range(repeats):
            result = run_federated(data, model, build(), config)
            runs.append(_phase_summary(result.history, skip=1 if rounds > 1 else 0))
        median = sorted(runs, key=lambda r: r["round_seconds"])[len(runs) // 2]
        rows.append({"method": name, "model": model_kind, "n_clients": data.n_clients, **median,
                     "round_seconds_all": [r["round_seconds"] for r in runs]})
    return rows


# ----------------------------------------------------------------------------- plan overhead
def plan_overhead(calls: int = 300) -> dict:
    """Why the plan step costs more inside a run than alone: the server's MosT plan on a
    30 x 5 loss matrix called back to back, and with a 2000 x 2000 x 200 matmul between calls
    (as local training runs between two plan steps), which evicts the caches."""
    from most.federated import methods as F

    method = F.MosT(5, server_lr=5.0)
    state = method.start(30, 5, torch.Generator().manual_seed(0))
    losses = torch.rand(30, 5, generator=torch.Generator().manual_seed(1))
    big = torch.randn(2000, 2000)
    out = {}
    for label, between in (("alone", False), ("after a matmul", True)):
        times = []
        for _ in range(calls):
            if between:
                big @ big[:, :200]
            tic = time.perf_counter()
            method.plan(state, losses, 10, 100, None)
            times.append(time.perf_counter() - tic)
        out[label] = statistics.median(times)
    return out


def op_profile(calls: int = 200) -> dict:
    """What the server's small steps are made of, at Syn(0,0) size: the min-norm combination
    (5 models, 30 clients, d = 610) and the MosT plan step (30 x 5). The median wall time of
    ``calls`` back-to-back calls, and the number of tensor operations one call dispatches
    (top-level ``aten::`` events of ``torch.profiler``; POT's simplex is not one of them)."""
    from torch.profiler import ProfilerActivity, profile

    from most import MinNorm
    from most.federated import methods as F

    gen = torch.Generator().manual_seed(0)
    m, n, d = 5, 30, 610
    params = torch.randn(m, d, generator=gen)
    deltas = 0.1 * torch.randn(n, d, generator=gen) + 0.1 * torch.randn(1, d, generator=gen)
    pair_model = torch.arange(n) % m
    weight = torch.ones(n, dtype=torch.float64)
    method = F.MosT(m, server_lr=5.0)
    state = method.start(n, m, torch.Generator().manual_seed(0))
    losses = torch.rand(n, m, generator=gen)
    cases = {
        "min-norm combination": lambda: params - F.combine_updates(MinNorm(), m, deltas, pair_model, weight),
        "plan step (exact transport + majority share)": lambda: method.plan(state, losses, 10, 100, None),
    }
    out = {}
    for name, fn in cases.items():
        for _ in range(20):
            fn()
        times = []
        for _ in range(calls):
            tic = time.perf_counter()
            fn()
            times.append(time.perf_counter() - tic)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        ops = [e for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
        seconds = statistics.median(times)
        out[name] = {"seconds": seconds, "tensor_ops": len(ops), "us_per_op": 1e6 * seconds / max(1, len(ops))}
    return out


def aggregate_profile(rounds: int = 4) -> dict:
    """Where the min-norm aggregation of a FEMNIST round goes (logistic model, 105 writers,
    m = 5, d = 48,670): ``cProfile`` over ``rounds`` rounds of MosT with the min-norm
    combination, the cumulative time per round of the combination
    (:func:`most.federated.methods.combine_updates`), of the min-norm solve
    (:func:`most.mgda.min_norm`) and of the rest of Eq. 9 (:func:`most.mgda.combine_min_norm`
    less the solve: the float64 Gram matrices of the client updates and the weighted sum)."""
    import cProfile
    import pstats

    from most import MinNorm
    from most.bench.federated import FederatedBenchConfig, _data
    from most.federated import FederatedConfig, run_federated
    from most.federated import methods as F

    bench = FederatedBenchConfig(dataset="femnist", model="linear", data_path=str(FEMNIST))
    data, model = _data(bench, 0)
    build = lambda: F.MosT(5, server_lr=5.0, combiner=MinNorm(), warmup=None)  # noqa: E731
    run_federated(data, model, build(), FederatedConfig(rounds=1, seed=0))  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    result = run_federated(data, model, build(), FederatedConfig(rounds=rounds, seed=0))
    prof.disable()
    stats = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    cum = {}
    for (file, _, name), (_, _, _, cumtime, _) in stats.items():
        if "/most/federated/methods/" in file or "/most/mgda/" in file:
            cum[name] = cum.get(name, 0.0) + cumtime
    per_round = {"min_norm_combination": cum.get("combine_updates", 0.0) / rounds,
                 "gram": (cum.get("combine_min_norm", 0.0) - cum.get("min_norm", 0.0)) / rounds,
                 "min_norm": cum.get("min_norm", 0.0) / rounds}
    return {"rounds": rounds, "dim": int(model.dim),
            "round_seconds": sum(sum(h.seconds.values()) for h in result.history) / rounds,
            "seconds_per_round": per_round}


# ----------------------------------------------------------------------------- memory
def _memory_case(dense: bool, n: int, d: int, m: int) -> dict:
    import most
    from most.methods import MinNorm

    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g) / d**0.5
    y = torch.randn(n, generator=g)
    problem = most.Problem.from_function(lambda t: (X @ t - y) ** 2, dim=d, n_objectives=n)

    class Dense(MinNorm):
        active_only = False

    combiner = Dense() if dense else MinNorm()
    # Warm up on a tiny problem, so that lazy imports and one-time allocations are not counted.
    small = most.Problem.from_function(lambda t: (X[:20] @ t - y[:20]) ** 2, dim=d, n_objectives=20)
    balanced = dict(marginals=most.Uniform(), seeding=None, reseed=None)  # n / m rows per model, as stored
    most.MosT(n_models=2, rounds=1, combiner=combiner, seed=0, **balanced).fit(small)

    reset_peak_rss()
    base = 1024 * _current_rss_mib()
    tic = time.perf_counter()
    result = most.MosT(n_models=m, rounds=1, combiner=combiner, seed=0, **balanced).fit(problem)
    seconds = time.perf_counter() - tic
    peak = _maxrss_kib()
    assert torch.isfinite(result.params).all()
    served = most.methods.MajorityShare()(result.history[0].plan) > 0  # [m, n]: the rows each model kept
    rows_per_model = int(served.sum(1).max())
    return {"jacobian": "dense [m, n, d]" if dense else "served objectives [m, k, d]", "n": n, "d": d, "m": m,
            "seconds": seconds, "timings": result.timings(), "peak_rss_above_inputs_mb": (peak - base) / 1024,
            "jacobian_mb": 4 * m * (n if dense else rows_per_model) * d / 2**20, "max_rows_per_model": rows_per_model,
            "inputs_mb": 4 * n * d / 2**20}


def memory_cases(quick: bool) -> list[dict]:
    """Section 3, each case in a fresh process (peak RSS is per process)."""
    # Both Jacobians at n = 2,000; the packed one also at n = 10,000, where the dense path's
    # float64 Gram matrices alone (m n^2 values) would take 7.5 GB: it is not run there.
    cases = [(False, 2_000, 500, 10), (True, 2_000, 500, 10)] + ([] if quick else [(False, 10_000, 1_000, 10)])
    rows = []
    for dense, n, d, m in cases:
        out = subprocess.run([sys.executable, "-m", "benchmarks.performance", "rounds", "--memory-case",
                              json.dumps([dense, n, d, m])], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if out.returncode == 0:
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        else:  # e.g. SIGKILL: the dense Gram matrices alone need m n^2 floats
            rows.append({"jacobian": "dense [m, n, d]" if dense else "served objectives [m, k, d]", "n": n, "d": d,
                         "m": m, "status": f"failed (exit code {out.returncode}"
                         + (", killed: out of memory" if out.returncode == -9 else "") + ")",
                         "jacobian_mb": 4 * m * n * d / 2**20, "gram_mb": 8 * m * n * n / 2**20,
                         "stderr": out.stderr[-2000:]})
    return rows


# ----------------------------------------------------------------------------- report
def _section(title: str, intro: str, columns: list[str]) -> list[str]:
    return [f"### {title}", "", intro, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def rounds_markdown(results: dict) -> str:
    out = []
    phases = ["evaluate", "plan", "local training", "aggregate"]
    if results.get("syn"):
        out += _section("A 100-round Syn(0,0) run (30 clients, logistic regression, m = 5, seed 0)",
                        "Wall time of `run_federated` (median of the repeats), test accuracy of that run, and the "
                        "share of each phase in a round after MosT's 5 warm-up rounds (plan = transport; aggregate "
                        "= min-norm or mean).",
                        ["method", "wall s (median, min–max)", "accuracy", "s / round", *phases])
        for r in results["syn"]:
            w, s = r["wall_seconds"], r["after_warmup"]
            out.append(f"| {r['method']} | {w['median']:.3f} ({w['min']:.3f}–{w['max']:.3f}) | "
                       f"{100 * r['accuracy']:.2f} | {1e3 * s['round_seconds']:.2f} ms | "
                       + " | ".join(f"{100 * s['share'][p]:.1f} %" for p in PHASES) + " |")
        out.append("")
    for key, title in (("femnist_linear", "logistic regression"), ("femnist_cnn", "CNN, channels 8/16")):
        rows = results.get(key)
        if not rows:
            continue
        out += _section(f"FEMNIST rounds ({rows[0]['n_clients']} writers, m = 5, {title})",
                        "Seconds per round (median over repeats of the mean over the timed rounds) and phase "
                        "shares. MosT without warm-up, so every timed round is a full MosT round.",
                        ["method", "s / round", *phases])
        for r in rows:
            out.append(f"| {r['method']} | {r['round_seconds']:.3f} | "
                       + " | ".join(f"{100 * r['share'][p]:.2f} %" for p in PHASES) + " |")
        out.append("")
    over = results.get("plan_overhead")
    if over:
        out += _section("The plan step alone and between heavier work",
                        "The server's MosT plan (exact transport + majority-share weights) on a 30 × 5 loss "
                        "matrix, median of 300 calls: back to back, and with a matrix product between calls as "
                        "local training comes between two plan steps in a run.", ["calls", "ms per plan"])
        out += [f"| {k} | {1e3 * v:.3f} |" for k, v in over.items()]
        out.append("")
    prof = results.get("op_profile")
    if prof:
        out += _section("What the small server steps are made of (Syn(0,0) size)",
                        "Median of back-to-back calls, and the tensor operations one call dispatches (top-level "
                        "`aten::` events of `torch.profiler`). At these sizes the arithmetic is a few hundred "
                        "thousand floating-point operations; the time is the operations' fixed cost.",
                        ["step", "ms per call", "tensor operations", "µs per operation"])
        out += [f"| {k} | {1e3 * v['seconds']:.3f} | {v['tensor_ops']} | {v['us_per_op']:.1f} |"
                for k, v in prof.items()]
        out.append("")
    agg = results.get("aggregate_profile")
    if agg:
        t = agg["seconds_per_round"]
        out += _section("Where FEMNIST's min-norm aggregation goes (logistic model, m = 5)",
                        f"`cProfile` over {agg['rounds']} rounds of MosT with the min-norm combination (a round: "
                        f"{agg['round_seconds']:.3f} s under the profiler); milliseconds per round.",
                        ["min-norm combination", "of which: float64 Gram matrices", "of which: min-norm solve",
                         "of which: the rest"])
        rest = t["min_norm_combination"] - t["gram"] - t["min_norm"]
        out.append(f"| {1e3 * t['min_norm_combination']:.1f} | {1e3 * t['gram']:.1f} | {1e3 * t['min_norm']:.1f} | "
                   f"{1e3 * rest:.1f} |")
        out.append("")
    mem = results.get("memory")
    if mem:
        out += _section("Centralised memory: one MosT round on n least-squares objectives, m = 10",
                        "Peak RSS above the process's resident size just before the round (after the inputs were "
                        "built and a tiny warm-up run), and the size of the gradients kept for the min-norm step.",
                        ["n", "d", "Jacobian", "rows per model", "Jacobian MB", "peak RSS above inputs MB", "seconds"])
        for r in mem:
            rows_txt = f"{r['n']:,} (all)" if "dense" in r["jacobian"] else f"{r['max_rows_per_model']:,}"
            head = f"| {r['n']:,} | {r['d']:,} | {r['jacobian']} | {rows_txt} | {r['jacobian_mb']:.0f} | "
            if "status" in r:
                out.append(head + f"{r['status']}; its float64 Gram matrices alone are "
                           f"{r['gram_mb'] / 1024:.1f} GB | – |")
            else:
                out.append(head + f"{r['peak_rss_above_inputs_mb']:.0f} | {r['seconds']:.2f} |")
        out.append("")
    return "\n".join(out)


def run_all(quick: bool, threads: int, previous: dict | None = None, save=None) -> dict:
    """Runs the sections missing from ``previous``; ``save(results)`` after each one."""
    from tqdm.auto import tqdm

    torch.set_num_threads(threads)
    have_femnist = FEMNIST.is_dir()
    steps = [("syn", lambda: syn_runs(repeats=3 if quick else 7))]
    if have_femnist:
        steps.append(("femnist_linear", lambda: femnist_rounds("linear", rounds=2 if quick else 6, repeats=1 if quick else 3)))
        if not quick:
            steps.append(("femnist_cnn", lambda: femnist_rounds("cnn", rounds=2, repeats=1)))
        steps.append(("aggregate_profile", lambda: aggregate_profile(rounds=2 if quick else 4)))
    steps.append(("plan_overhead", plan_overhead))
    steps.append(("op_profile", op_profile))
    steps.append(("memory", lambda: memory_cases(quick)))
    results: dict = {"threads": threads, "quick": quick} if previous is None else previous
    if not have_femnist:
        results["skipped"] = f"FEMNIST: {FEMNIST} not found"
    for key, fn in tqdm(steps, desc="end-to-end", file=sys.stderr):
        if key not in results:
            results[key] = fn()
            if previous is not None:  # a resumed run: say when this section was measured
                results.setdefault("remeasured", {})[key] = time.strftime("%Y-%m-%dT%H:%M:%S")
                results.setdefault("remeasured_kernels", {})[key] = cpu_kernels()
            if save is not None:
                save(results)
    return results


def rounds_main(argv=None) -> int:
    """``python -m benchmarks.performance rounds``: the end-to-end measurements alone."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance rounds", description=ROUNDS_DOC)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller problems (about a minute)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the Syn model is tiny)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/performance/rounds.json")
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_case:
        dense, n, d, m = json.loads(args.memory_case)
        torch.set_num_threads(1)
        print(json.dumps(_memory_case(bool(dense), int(n), int(d), int(m))))
        return 0
    results = run_all(args.quick, args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(rounds_markdown(results))
    return 0


