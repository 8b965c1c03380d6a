"""Transport and min-norm micro-benchmarks (the suite's ``solvers`` part; :data:`SOLVERS_DOC`)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkServerContext

    from torch import Tensor

from .harness import ROOT, _current_rss_mib, _maxrss_kib, _set_threads, finish_child, machine_info, reset_peak_rss

SOLVERS_DOC = """Micro-benchmarks of the two solvers of the library: optimal transport and min-norm.

Run it from the repository root::

    .venv/bin/python -m benchmarks.performance solvers [--quick] [--threads T] [--timeout S] [--out PATH] [--omp-passive]

1. **Transport** (:func:`most.transport.solve`): a random cost ``torch.rand(n, m)``
   (float32, seeded) with uniform marginals ``a = 1/n``, ``b = 1/m``, for
   ``n ∈ {100, 1e3, 1e4, 1e5}`` × ``m ∈ {5, 50}`` × every method of
   ``most.transport.METHODS`` × diversity ``τ ∈ {0, 0.1}``. Each case runs in a fresh
   child process (forked from a server that has imported torch, so a case starts fast) so
   that its memory can be measured: *peak RSS above the inputs* is the rise of the peak RSS
   (``VmHWM``, reset once the imports are done and the inputs built) over the RSS then. A case
   that exceeds ``--timeout`` seconds (default 60, 5 with ``--quick``) is recorded as a
   timeout and the larger ``n`` of the same (method, m, τ) are skipped; a slow case runs
   fewer repeats so that it fits in the timeout (``repeats`` in its row).
2. **Min-norm** (:func:`most.mgda.min_norm`): ``k`` gradients of dimension ``d``
   (``shared + noise``, float32): time to form the float64 Gram matrix, time of the
   Frank–Wolfe solve, and their total; plus one batched solve of ``B = 10`` problems of
   ``k = 100`` (as the library does for ``m = 10`` models).

Writes ``{"machine": ..., "transport": [...], "min_norm": [...]}`` as JSON (default
``benchmarks/results/performance/solvers.json``) and prints two markdown tables.

Contention: torch runs on OpenMP threads that spin while waiting. When other processes keep
the cores busy, ``--threads`` equal to the number of cores can make the iterative solvers
orders of magnitude slower (every small op waits for a descheduled thread); ``--omp-passive``
sets ``OMP_WAIT_POLICY=PASSIVE`` for the whole run (recorded in ``machine``), or use
``--threads 1``.
The suite calls :func:`run_transport`, :func:`run_min_norm`, :func:`machine_info` and
:func:`solvers_markdown`.
"""

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "performance" / "solvers.json"

TRANSPORT_N = (100, 1_000, 10_000, 100_000)
TRANSPORT_M = (5, 50)
TRANSPORT_TAU = (0.0, 0.1)
QUICK_MAX_N = 10_000
WARMUP_MAX_N = 10_000  # one untimed warm-up call when n <= this
DEFAULT_TIMEOUT = 60.0
QUICK_TIMEOUT = 5.0

MIN_NORM_K = (10, 100, 1_000)
MIN_NORM_D = (100, 10_000, 100_000)
QUICK_MAX_K = 100
QUICK_MAX_D = 10_000
#: Largest k·d (per problem batch) benchmarked: 1e8 floats = 400 MB float32 + 800 MB float64.
MAX_GRAD_ELEMENTS = 100_000_000
BATCH_M = 10
BATCH_K = 100


# --------------------------------------------------------------------------- transport


def transport_case(case: dict[str, Any]) -> dict[str, Any]:
    """Runs one transport case in *this* process (meant to be a fresh child process).

    ``case`` holds ``n, m, method, tau, seed, repeats, threads`` and ``deadline`` (a
    ``time.time()`` after which no further repeat is started: the number of repeats is cut
    to what fits, and the warm-up call is used as the only sample if nothing else fits).
    """
    _set_threads(int(case["threads"]))

    import most
    from most.transport import solve

    warnings.simplefilter("ignore", most.ConvergenceWarning)
    n, m, method, tau = int(case["n"]), int(case["m"]), str(case["method"]), float(case["tau"])
    cost = torch.rand(n, m, generator=torch.Generator().manual_seed(int(case["seed"])), dtype=torch.float32)
    a = torch.full((n,), 1.0 / n)
    b = torch.full((m,), 1.0 / m)
    # A tiny solve first, so that lazy imports (POT for "exact") are not counted as memory.
    tiny = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.2]])
    solve(tiny, torch.full((3,), 1 / 3), torch.full((2,), 0.5), method=method, diversity=tau)
    reset_peak_rss()
    base_kib = _maxrss_kib()
    base_rss = _current_rss_mib()
    deadline = float(case["deadline"])

    def call() -> tuple[float, dict[str, Any]]:
        tic = time.perf_counter()
        res = solve(cost, a, b, method=method, diversity=tau)
        sec = time.perf_counter() - tic
        plan = res.plan  # sums in float64 without a float64 copy of the plan
        viol = max(
            float((plan.sum(1, dtype=torch.float64) - a.double()).abs().max()),
            float((plan.sum(0, dtype=torch.float64) - b.double()).abs().max()),
        )
        info = {"n_iter": res.n_iter, "converged": res.converged, "cost": res.cost, "max_marginal_violation": viol}
        del res, plan  # no plan is kept alive during the next call (it would inflate the peak)
        return sec, info

    samples: list[float] = []
    warm_sec = None
    if n <= WARMUP_MAX_N:
        warm_sec, info = call()
    repeats = int(case["repeats"])
    used_warmup = False
    for _ in range(repeats):
        last = samples[-1] if samples else warm_sec
        if last is not None and time.time() + 1.2 * last > deadline:
            break  # the next call would not finish in time
        sec, info = call()
        samples.append(sec)
    if not samples:  # only the warm-up fitted in the budget
        samples, used_warmup = [warm_sec], True
    peak_kib = _maxrss_kib()
    return {
        "status": "ok",
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "repeats": len(samples) if not used_warmup else 0,
        "warmup": warm_sec is not None,
        "warmup_s": warm_sec,
        **info,
        "peak_rss_above_inputs_mb": max(0, peak_kib - base_kib) / 1024,
        "rss_after_inputs_mb": base_rss,
    }


def _case_child(case: dict[str, Any], conn: "Connection") -> None:
    """Forkserver child: runs one case and sends its row (or the error) through ``conn``."""
    try:
        conn.send(transport_case(case))
    except BaseException as exc:  # noqa: BLE001 - reported as an error row
        import traceback

        conn.send({
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-2000:],
        })
    finally:
        conn.close()


_CTX: "ForkServerContext | None" = None


def _context(threads: int) -> "ForkServerContext":
    """A forkserver context whose server has imported torch and most (so each case starts in ~0.1 s).

    The thread variables are set before the server starts (it is started once per process:
    later calls reuse it, and each child also calls ``torch.set_num_threads``).
    """
    global _CTX
    if _CTX is None:
        import multiprocessing as mp

        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(threads)
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["torch", "ot", "most", "most.transport"])
    return _CTX


def _run_case_in_child(case: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs :func:`transport_case` in a fresh child process with a wall-clock ``timeout``."""
    ctx = _context(int(case["threads"]))
    start = time.time()
    # Leave a little slack for the child to report after its last repeat.
    case = dict(case, deadline=start + 0.9 * timeout)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_case_child, args=(case, send), daemon=True)
    proc.start()
    send.close()
    out: dict[str, Any] | None = None
    if recv.poll(timeout):
        try:
            out = recv.recv()
        except EOFError:  # the child died without reporting (e.g. killed for memory)
            out = None
    return finish_child(proc, recv, out, start, timeout)


def run_transport(quick: bool = False, threads: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                  *, seed: int = 0, repeats: int | None = None) -> list[dict[str, Any]]:
    """Benchmarks :func:`most.transport.solve`; one child process per case, rows in (n, m, method, τ) order.

    ``repeats`` overrides the default (5 for n <= 10 000, 3 above; 2 with ``quick``).
    """
    from tqdm import tqdm

    from most.transport import METHODS

    threads = threads or os.cpu_count() or 1
    ns = [n for n in TRANSPORT_N if not quick or n <= QUICK_MAX_N]
    cases = [
        (n, m, method, tau)
        for n in ns  # n ascending, so a timeout can skip the larger n of the same configuration
        for m in TRANSPORT_M
        if m <= n
        for method in METHODS
        for tau in TRANSPORT_TAU
    ]
    timed_out: dict[tuple[int, str, float], int] = {}
    rows: list[dict[str, Any]] = []
    bar = tqdm(cases, desc="transport", unit="case", file=sys.stderr)
    for n, m, method, tau in bar:
        bar.set_postfix_str(f"n={n} m={m} {method} tau={tau:g}")
        row: dict[str, Any] = {"n": n, "m": m, "method": method, "tau": tau, "threads": threads,
                               "plan_bytes": n * m * 8, "plan_mb": n * m * 8 / 2**20}
        key = (m, method, tau)
        if key in timed_out:
            row.update(status="skipped", reason=f"n={timed_out[key]} timed out")
        else:
            reps = repeats or (2 if quick else (5 if n <= 10_000 else 3))
            case = {"n": n, "m": m, "method": method, "tau": tau, "seed": seed, "repeats": reps, "threads": threads}
            row.update(_run_case_in_child(case, timeout))
            if row["status"] == "timeout":
                timed_out[key] = n
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- min-norm


def _gradients(batch: int, k: int, d: int, seed: int) -> "Tensor":
    """``[batch, k, d]`` float32 rows ``shared + noise``: a unit mean direction plus noise of norm ≈ 1.

    Every row has a component ≈ 1 ± 1/√d along the shared direction, so the origin is far
    from the convex hull, and the noise makes the min-norm point an interior point of a
    large face (neither a vertex nor the origin).
    """

    gen = torch.Generator().manual_seed(seed)
    shared = torch.randn(batch, 1, d, generator=gen)
    shared /= shared.norm(dim=-1, keepdim=True)
    noise = torch.randn(batch, k, d, generator=gen)
    noise /= d**0.5
    return noise.add_(shared)


def _gram64(rows: "Tensor") -> "Tensor":
    """Float64 Gram matrix of float32 ``[B, k, d]`` rows, as :class:`most.methods.MinNorm` forms it."""

    r64 = rows.to(torch.float64)
    g = r64 @ r64.transpose(-2, -1)
    return 0.5 * (g + g.transpose(-2, -1))


def run_min_norm(quick: bool = False, threads: int | None = None, *, seed: int = 0,
                 repeats: int | None = None) -> list[dict[str, Any]]:
    """Benchmarks Gram formation and :func:`most.mgda.min_norm` in this process.

    Cases: single problems ``k × d`` (``batch = 1``, solved as ``[1, k, k]``) and batched
    problems ``10 × 100 × d`` (one call for all models). Times are medians of ``repeats``
    (default 5, 3 when k·d ≥ 1e7, 2 with ``quick``) after one warm-up solve.
    """
    from tqdm import tqdm

    import most
    from most.mgda import min_norm

    threads = threads or os.cpu_count() or 1
    _set_threads(threads)
    ks = [k for k in MIN_NORM_K if not quick or k <= QUICK_MAX_K]
    ds = [d for d in MIN_NORM_D if not quick or d <= QUICK_MAX_D]
    cases = [(1, k, d) for k in ks for d in ds] + [(BATCH_M, BATCH_K, d) for d in ds]
    cases = [c for c in cases if c[0] * c[1] * c[2] <= MAX_GRAD_ELEMENTS]
    rows: list[dict[str, Any]] = []
    bar = tqdm(cases, desc="min_norm", unit="case", file=sys.stderr)
    for batch, k, d in bar:
        bar.set_postfix_str(f"batch={batch} k={k} d={d}")
        reps = repeats or (2 if quick else (3 if batch * k * d >= 10_000_000 else 5))
        rows_t = _gradients(batch, k, d, seed)
        gram_s, solve_s, total_s = [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", most.ConvergenceWarning)
            res = min_norm(_gram64(rows_t))  # warm-up
            for _ in range(reps):
                tic = time.perf_counter()
                G = _gram64(rows_t)
                mid = time.perf_counter()
                res = min_norm(G)
                end = time.perf_counter()
                gram_s.append(mid - tic)
                solve_s.append(end - mid)
                total_s.append(end - tic)
                del G
        w = res.weights
        rows.append({
            "batch": batch,
            "k": k,
            "d": d,
            "threads": threads,
            "repeats": reps,
            "gram_median_s": statistics.median(gram_s),
            "solve_median_s": statistics.median(solve_s),
            "solve_min_s": min(solve_s),
            "solve_max_s": max(solve_s),
            "total_median_s": statistics.median(total_s),
            "n_iter": res.n_iter,
            "converged": res.converged,
            "norm_sq_mean": float(res.norm_sq.double().mean()),
            "support_mean": float((w > 0).sum(-1).double().mean()),
            "grad_mb_float32": batch * k * d * 4 / 2**20,
        })
        del rows_t, res, w
    return rows


# --------------------------------------------------------------------------- report


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.2f}"
    if x >= 1e-3:
        return f"{x * 1e3:.1f} ms"
    return f"{x * 1e6:.0f} µs"


def _fmt_mb(x: float | None) -> str:
    return "–" if x is None else (f"{x:.0f}" if x >= 10 else f"{x:.1f}")


def solvers_markdown(results: dict[str, Any]) -> str:
    """Renders the transport and min-norm results as two markdown tables."""
    mach = results.get("machine", {})
    out: list[str] = []
    if mach:
        out.append(
            f"Machine: {mach.get('processor')}, {mach.get('cpu_count')} CPUs, {mach.get('threads')} thread(s); "
            f"torch {mach.get('torch')}, POT {mach.get('pot')}, Python {mach.get('python')}; {mach.get('date')}; "
            f"OMP_WAIT_POLICY={mach.get('omp_wait_policy') or 'default'}; load average at start "
            f"{', '.join(f'{x:.1f}' for x in mach.get('load_average') or [])}."
        )
        out.append("")
    if results.get("transport"):
        out.append(
            "Transport `most.transport.solve` on a random float32 cost, uniform marginals; median seconds "
            "over the repeats; iters = solver iterations (τ > 0: linearisation steps); peak MB = peak RSS "
            "above the inputs (VmHWM, reset after the imports and inputs); plan MB = n·m·8 bytes."
        )
        out.append("")
        out.append("| n | m | method | τ | median s | iters | converged | peak MB | plan MB |")
        out.append("|---:|---:|:---|---:|---:|---:|:---:|---:|---:|")
        for r in results["transport"]:
            head = f"| {r['n']} | {r['m']} | {r['method']} | {r['tau']:g} |"
            st = r.get("status")
            if st == "ok":
                conv = "yes" if r["converged"] else "**no**"
                out.append(
                    f"{head} {_fmt_s(r['median_s'])} | {r['n_iter']} | {conv} | "
                    f"{_fmt_mb(r['peak_rss_above_inputs_mb'])} | {_fmt_mb(r['plan_mb'])} |"
                )
            elif st == "timeout":
                out.append(f"{head} timeout (> {r['timeout_s']:g} s) | – | – | – | {_fmt_mb(r['plan_mb'])} |")
            elif st == "skipped":
                out.append(f"{head} skipped ({r['reason']}) | – | – | – | {_fmt_mb(r['plan_mb'])} |")
            else:
                err = str(r.get("error", "")).strip().splitlines()
                msg = (err[-1] if err else "error").replace("|", "/")[:80]
                out.append(f"{head} error: {msg} | – | – | – | {_fmt_mb(r['plan_mb'])} |")
        out.append("")
    if results.get("min_norm"):
        out.append(
            "Min-norm `most.mgda.min_norm` (away-step Frank–Wolfe) on k gradients of dimension d "
            "(float32 shared direction + noise); gram = forming the float64 Gram matrix, solve = the "
            "Frank–Wolfe solve, total = both (medians); batch 10 = one call for 10 problems."
        )
        out.append("")
        out.append("| batch | k | d | gram s | solve s | total s | iters | converged |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|:---:|")
        for r in results["min_norm"]:
            conv = "yes" if r["converged"] else "**no**"
            out.append(
                f"| {r['batch']} | {r['k']} | {r['d']} | {_fmt_s(r['gram_median_s'])} | "
                f"{_fmt_s(r['solve_median_s'])} | {_fmt_s(r['total_median_s'])} | {r['n_iter']} | {conv} |"
            )
        out.append("")
    return "\n".join(out)


def solvers_main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.performance solvers``: the transport and min-norm micro-benchmarks alone."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance solvers", description=SOLVERS_DOC)
    parser.add_argument("--quick", action="store_true", help="n <= 10 000, k <= 100, d <= 10 000, 2 repeats")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads (default: all cores)")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"per transport case, seconds (default {DEFAULT_TIMEOUT:g}; "
                        f"{QUICK_TIMEOUT:g} with --quick)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--omp-passive", action="store_true",
                        help="set OMP_WAIT_POLICY=PASSIVE (robust to other processes using the cores)")
    parser.add_argument("--skip", choices=("transport", "min_norm"), action="append", default=[],
                        help="skip a part (repeatable)")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one transport case (JSON)
    args = parser.parse_args(argv)

    if args.case is not None:
        print(json.dumps(transport_case(json.loads(args.case))), flush=True)
        return 0

    start = time.time()
    if args.omp_passive:  # before torch is imported here or in the forkserver
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    timeout = args.timeout if args.timeout is not None else (QUICK_TIMEOUT if args.quick else DEFAULT_TIMEOUT)
    _set_threads(args.threads)
    results: dict[str, Any] = {"machine": machine_info(args.threads), "transport": [], "min_norm": []}
    if "transport" not in args.skip:
        results["transport"] = run_transport(args.quick, args.threads, timeout, seed=args.seed)
    if "min_norm" not in args.skip:
        results["min_norm"] = run_min_norm(args.quick, args.threads, seed=args.seed)
    results["machine"]["wall_s"] = time.time() - start
    results["machine"]["quick"] = args.quick
    results["machine"]["timeout_s"] = timeout
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(solvers_markdown(results))
    print(f"Total wall time: {results['machine']['wall_s']:.1f} s; results in {args.out}")
    return 0


