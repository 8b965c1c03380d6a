"""Growth curves: how the cost of a round of MosT grows with n and d, next to scalarised methods.

What it measures, in one run and on one machine, side by side:

* **Problem.** Quadratic objectives ``L_i(θ) = ‖θ − c_i‖²`` with centres ``c_i ~ N(0, 3²)`` in
  ``R^d`` (float32, seeded), built as users build them::

      most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=d, n_objectives=n)

* **Methods** (``m = 5`` models, ``lr = 0.05``, ``seed = 0``): ``MosT (default)`` =
  ``most.MosT(...)``; ``MosT (min-norm)`` = ``most.variants.apply("min-norm", most.MosT(...))``
  (the paper's min-norm combination); ``TCH-Set`` = ``most.baselines.TCHSet(...)``; ``SoM`` =
  ``most.baselines.SumOfMinimum(...)`` (its default algorithm); ``MGDA`` = ``most.MGDA(...)``.
* **Grid.** ``n ∈ {1e2, 1e3, 1e4, 1e5}`` at ``d = 10``, and ``d ∈ {10, 1e2, 1e3, 1e4, 1e5}`` at
  ``n = 1000`` (the case ``n = 1000, d = 10`` is shared by both axes and run once); plus one
  extra case, the default MosT at ``n = 1e5, d = 10, m = 50`` (target: one round ≤ 1 s).
* **Per case and method**, in a fresh child process (forked from a server that has imported
  torch and the library; one torch thread): build the problem, an untimed 2-round ``fit``
  (warm-up), then a timed ``fit(problem, callback=...)`` of ``R`` rounds (default 20). The
  callback timestamps the end of every round:

  - *s/round*: the median duration of rounds 2..R (the first round is excluded);
  - *setup s*: the first round's duration (measured from the start of ``fit``, so it contains
    the one-off costs such as the seeding of the models) minus the median round;
  - *total s*: the whole ``fit`` call;
  - *phase shares* of rounds 2..R from ``result.history``: ``gradient_seconds``,
    ``transport_seconds``, ``min_norm_seconds``, and *other* = the rest of the rounds' time
    (updates, bookkeeping, re-seeding), in % of the summed round time;
  - *peak MiB*: the peak RSS of the child process (``VmHWM``, reset when the child starts:
    it includes the memory of torch and the library, ``rss_start_mib`` in the JSON).

  A case that runs longer than ``--timeout`` seconds (default 120) is recorded as ``timeout``
  (with how far it got: ``reached`` = the build, the warm-up or the timed run), and the
  method's larger sizes along the same axis are skipped. A case whose warm-up shows
  that ``R`` rounds would not fit in the timeout runs fewer rounds (at least 3; ``rounds`` in
  its row, marked next to its s/round). The methods' order is rotated from case to case, so that
  none always runs first.
* **Passes.** A case whose methods took at most ``--pass-budget`` seconds together (default 60)
  runs ``--passes`` times (default 3), the order rotated again each pass. Its row is the pass with
  the median s/round, and its ratio to TCH-Set the median of the passes' ratios, each taken
  within one pass: on a shared machine a slow spell then moves one pass of every method, not
  one method's only run (rounds of a millisecond moved a ratio from 4.6× to 7× between runs).
* **Import time**: fresh interpreters ``python -c "import torch"``, ``"import most"`` and
  ``"import most, most.federated"``, alternating, 5 repeats each; medians (target:
  ``import most`` ≤ torch's + 0.3 s).

Writes ``benchmarks/results/performance/growth.json`` (machine, command, date, every raw
number), the figure ``growth.png`` next to it (seconds per round against n and against d,
log-log), and the section "Growth with n and d" of ``benchmarks/results/performance.md``
between the lines ``<!-- growth:start -->`` and ``<!-- growth:end -->`` (appended if absent;
only what lies between them is replaced). Usage, from the repository root::

    .venv/bin/python -m benchmarks.performance growth                 # the full grid (long: run on an idle machine)
    .venv/bin/python -m benchmarks.performance growth --quick --out /tmp/growth_quick.json --no-markdown
    .venv/bin/python -m benchmarks.performance growth --render        # growth.png and the section again from the JSON

``--device cuda`` puts each case's problem and models on the GPU (round times synchronised, peak
memory the GPU's) and writes the section "Growth with n and d on a GPU" between
``<!-- growth-cuda:start -->`` and ``<!-- growth-cuda:end -->`` instead::

    python -m benchmarks.performance growth --device cuda --rounds 5 --timeout 25 --import-repeats 0 \
        --out benchmarks/results/performance/growth_cuda.json --no-markdown
    python -m benchmarks.performance growth --render --out benchmarks/results/performance/growth_cuda.json

``--problem instances`` builds the same objectives with ``most.Problem.from_instances`` (one loss
per instance, so a min-norm combiner's rows are single instances' gradients) and writes the section
"Growth with n and d, one loss per instance" between ``<!-- growth-instances:start -->`` and
``<!-- growth-instances:end -->`` (its command is stored in that section).

``--quick`` runs n ≤ 1000, d ≤ 1000, R = 3, a 20 s timeout, 2 import repeats and the extra case at
n = 1000 (a smoke test: the targets at larger sizes then read "not measured").
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkServerContext

from . import harness
from .harness import (
    END_MARK,
    GPU_END_MARK,
    GPU_START_MARK,
    INSTANCES_END_MARK,
    INSTANCES_START_MARK,
    ROOT,
    START_MARK,
    finish_child,
    machine_info,
    respell,
)

COMMAND = ".venv/bin/python -m benchmarks.performance growth"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "performance" / "growth.json"
DEFAULT_MARKDOWN = ROOT / "benchmarks" / "results" / "performance.md"

#: Short keys (for ``--methods``) -> the names in the tables.
METHODS = {
    "default": "MosT (default)",
    "min-norm": "MosT (min-norm)",
    "tch-set": "TCH-Set",
    "som": "SoM",
    "mgda": "MGDA",
}
REFERENCE = "TCH-Set"
N_AXIS = (100, 1_000, 10_000, 100_000)
D_AXIS = (10, 100, 1_000, 10_000, 100_000)
BASE_N = 1_000  # n of the d axis
BASE_D = 10  # d of the n axis
M = 5
LR = 0.05
EXTRA = (100_000, 10, 50)  # (n, d, m) of the default MosT's one-round target
QUICK_EXTRA = (1_000, 10, 50)
QUICK_MAX = 1_000
DEFAULT_ROUNDS = 20
QUICK_ROUNDS = 3
PASSES = 3  # passes of a case whose first pass is short (--passes)
PASS_BUDGET = 60.0  # seconds: a case whose first pass took longer runs once (--pass-budget)
MIN_ROUNDS = 3  # a case cut short to fit in the timeout still runs this many (unless R is smaller)
DEFAULT_TIMEOUT = 120.0
QUICK_TIMEOUT = 20.0
IMPORT_REPEATS = 5
QUICK_IMPORT_REPEATS = 2
IMPORTS = {
    "torch": "import torch",
    "most": "import most",
    "most_federated": "import most, most.federated",
}
#: In a fresh interpreter that has imported torch, the seconds ``import most`` adds (printed by the
#: child): the target's gap without the run-to-run noise of two separate interpreters' start-up.
AFTER_TORCH = "import time, torch; tic = time.perf_counter(); import most; print(time.perf_counter() - tic)"
WARMUP_ROUNDS = 2


# --------------------------------------------------------------------------- one case (child process)


def make_method(name: str, rounds: int, m: int, seed: int = 0):
    """The method called ``name`` (a value of :data:`METHODS`) with ``rounds`` rounds and ``m`` models."""
    import most
    import most.baselines
    import most.variants

    kw = dict(n_models=m, rounds=rounds, lr=LR, seed=seed)
    if name == "MosT (default)":
        return most.MosT(**kw)
    if name == "MosT (min-norm)":
        return most.variants.apply("min-norm", most.MosT(**kw))
    if name == "TCH-Set":
        return most.baselines.TCHSet(**kw)
    if name == "SoM":
        return most.baselines.SumOfMinimum(**kw)
    if name == "MGDA":
        return most.MGDA(**kw)
    raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS.values())}")


def round_stats(start: float, ends: list[float], history: list[Any], end: float) -> dict[str, Any]:
    """Seconds per round, setup, total and phase shares from the callback's timestamps.

    ``start``: ``perf_counter`` before ``fit``; ``ends``: after each round; ``history``: the
    :class:`~most.RoundRecord` list; ``end``: after ``fit`` returned.
    """
    durations = [ends[0] - start] + [b - a for a, b in zip(ends, ends[1:])]
    later = durations[1:] or durations  # one round only: that round
    records = history[1:] if len(durations) > 1 else history
    per_round = statistics.median(later)
    summed = sum(later)
    phases = {
        "gradients": sum(r.gradient_seconds for r in records),
        "transport": sum(r.transport_seconds for r in records),
        "min_norm": sum(r.min_norm_seconds for r in records),
    }
    shares = {k: 100.0 * v / summed for k, v in phases.items()}
    shares["other"] = max(0.0, 100.0 - sum(shares.values()))
    return {
        "s_per_round": per_round,
        "round_seconds": durations,
        "setup_s": durations[0] - per_round,
        "total_s": end - start,
        "phase_seconds": phases,
        "share_pct": shares,
    }


def growth_case(case: dict[str, Any], report=None) -> dict[str, Any]:
    """Runs one (n, d, m, method) case in *this* process (meant to be a fresh child).

    ``case`` holds ``n, d, m, method, rounds, seed`` and ``deadline`` (a ``time.time()``):
    when the warm-up shows that ``rounds`` rounds would end after 90 % of the time left, the
    timed run has fewer rounds (at least :data:`MIN_ROUNDS`). ``report(dict)``, if given, gets
    the progress so far (``reached``, ``build_s``, ``warmup_s``): what a timeout row keeps.
    """
    import torch

    import most

    torch.set_num_threads(1)
    harness.reset_peak_rss()
    rss_start = harness._current_rss_mib()
    n, d, m, name = int(case["n"]), int(case["d"]), int(case["m"]), str(case["method"])
    seed, rounds, deadline = int(case.get("seed", 0)), int(case["rounds"]), float(case["deadline"])
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tic = time.perf_counter()
        device = torch.device(case.get("device", "cpu"))
        c = (3.0 * torch.randn(n, d, generator=torch.Generator().manual_seed(seed))).to(device)
        # on a GPU the models start where they would on the CPU (the default init's draws) and live there
        init = None if device.type == "cpu" else (lambda k, g: torch.randn(k, d, generator=g).to(device))
        if case.get("problem", "function") == "instances":  # the same objectives (and starts), one loss per instance
            problem = most.Problem.from_instances(lambda t, ci: ((t - ci) ** 2).sum(), c, dim=d, init=init)
        else:
            problem = most.Problem.from_function(lambda t: ((t - c) ** 2).sum(-1), dim=d, n_objectives=n,
                                                 init=init)
        build_s = time.perf_counter() - tic
        if report is not None:
            report({"reached": "warm-up", "build_s": build_s})

        tic = time.perf_counter()
        make_method(name, WARMUP_ROUNDS, m, seed).fit(problem)
        warmup_s = time.perf_counter() - tic
        estimate = warmup_s / WARMUP_ROUNDS  # per round, setup included: on the safe side
        left = 0.9 * (deadline - time.time())
        used = rounds
        if estimate * rounds > left:
            used = min(rounds, max(MIN_ROUNDS, int(left / max(estimate, 1e-9))))
        if report is not None:
            report({"reached": "timed run", "build_s": build_s, "warmup_s": warmup_s, "rounds": used})

        ends: list[float] = []
        method = make_method(name, used, m, seed)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        result = method.fit(problem, callback=lambda record, params: (sync(), ends.append(time.perf_counter())))
        sync()
        end = time.perf_counter()
        caught = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in seen})
    row = round_stats(start, ends, result.history, end)
    peak_mib = harness._maxrss_kib() / 1024
    row.update(
        status="ok",
        rounds=used,
        rounds_requested=rounds,
        build_s=build_s,
        warmup_s=warmup_s,
        peak_mib=peak_mib,
        rss_start_mib=rss_start,
        peak_above_start_mib=None if rss_start is None else max(0.0, peak_mib - rss_start),
        mean_best_loss=float(result.best_losses().double().mean()),
        device=str(device),
        device_peak_mib=torch.cuda.max_memory_allocated() / 2 ** 20 if device.type == "cuda" else None,
        warnings=caught,
    )
    return row


def _case_child(case: dict[str, Any], conn: "Connection") -> None:
    """Forkserver child: runs one case and sends its row (or the error) through ``conn``."""
    try:
        conn.send(growth_case(case, lambda progress: conn.send({"progress": progress})))
    except BaseException as exc:  # noqa: BLE001 - reported as an error row
        import traceback

        conn.send({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500],
                   "traceback": traceback.format_exc()[-2000:]})
    finally:
        conn.close()


_CTX: "ForkServerContext | None" = None


def _context() -> "ForkServerContext":
    """A forkserver context whose server has imported torch and the library, one thread."""
    global _CTX
    if _CTX is None:
        import multiprocessing as mp

        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = "1"
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["torch", "most", "most.variants", "most.baselines"])
    return _CTX


#: where the cases' problems and models live (``--device``)
DEVICE = "cpu"
PROBLEM = "function"


def run_case(case: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs :func:`growth_case` in a fresh child process with a wall-clock ``timeout`` (seconds)."""
    ctx = _context()
    start = time.time()
    case = dict(case, deadline=start + timeout, device=DEVICE, problem=PROBLEM)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_case_child, args=(case, send), daemon=True)
    proc.start()
    send.close()
    out: dict[str, Any] | None = None
    progress: dict[str, Any] = {"reached": "start"}
    while out is None and recv.poll(max(0.0, start + timeout - time.time())):
        try:
            msg = recv.recv()
        except EOFError:  # the child died without reporting (e.g. killed for memory)
            break
        if "progress" in msg:
            progress = msg["progress"]
        else:
            out = msg
    return finish_child(proc, recv, out, start, timeout, **progress)


# --------------------------------------------------------------------------- the grid


def grid_cases(ns, ds, base_n: int, base_d: int) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(n, d, axes)`` in run order: the n axis ascending, then the d axis ascending; a case on
    both axes appears once, with both axes."""
    cases: dict[tuple[int, int], list[str]] = {}
    for n in sorted(ns):
        cases.setdefault((n, base_d), []).append("n")
    for d in sorted(ds):
        cases.setdefault((base_n, d), []).append("d")
    return [(n, d, tuple(axes)) for (n, d), axes in cases.items()]


def run_grid(ns, ds, methods, *, base_n: int = BASE_N, base_d: int = BASE_D, m: int = M,
             rounds: int = DEFAULT_ROUNDS, timeout: float = DEFAULT_TIMEOUT, seed: int = 0,
             passes: int = 1, pass_budget: float = PASS_BUDGET, log=None) -> list[dict[str, Any]]:
    """Every (case, method) of the grid, one child process each; rows in run order.

    After a timeout (or an error, or a skip) of a method, its larger sizes on the same axis
    are skipped. The methods' order is rotated by one from case to case. A case whose first
    pass took at most ``pass_budget`` seconds (all its methods together) runs up to ``passes``
    passes, the order rotated again each pass, so that a slow spell of the shared machine falls
    on one pass of every method rather than on one method: see :func:`_merge_passes`.
    """
    methods = list(methods)
    stopped: dict[tuple[str, str], str] = {}  # (method, axis) -> why
    rows: list[dict[str, Any]] = []
    for k, (n, d, axes) in enumerate(grid_cases(ns, ds, base_n, base_d)):
        runs: dict[str, list[dict[str, Any]]] = {}  # method -> its row of each pass
        first = {name: i for i, name in enumerate(methods[k % len(methods):] + methods[:k % len(methods)])}
        for p in range(max(1, passes)):
            if p > 0:
                ok = [name for name in methods if runs[name][0]["status"] == "ok"]
                if not ok or sum(runs[name][0].get("wall_s", 0.0) for name in methods) > pass_budget:
                    break
            order = methods[(k + p) % len(methods):] + methods[:(k + p) % len(methods)]
            for name in order:
                if p > 0 and runs[name][0]["status"] != "ok":
                    continue
                row: dict[str, Any] = {"n": n, "d": d, "m": m, "method": name, "axes": list(axes),
                                       "order": first[name], "pass": p}
                why = next((stopped[(name, a)] for a in axes if (name, a) in stopped), None)
                if why is not None:
                    row.update(status="skipped", reason=why)
                else:
                    row.update(run_case({"n": n, "d": d, "m": m, "method": name, "rounds": rounds, "seed": seed},
                                        timeout))
                if p == 0 and row["status"] != "ok":
                    for a in axes:
                        size = n if a == "n" else d
                        stopped.setdefault((name, a), f"{a} = {size:,} {row['status']}")
                runs.setdefault(name, []).append(row)
                if log is not None:
                    log(_describe(row) + (f" [pass {p + 1}]" if p else ""))
        rows += _merge_passes(runs, methods)
    add_ratios(rows)
    return rows


def _merge_passes(runs: dict[str, list[dict[str, Any]]], methods: list[str]) -> list[dict[str, Any]]:
    """One row per method of a case from its passes' rows: the row of the pass with the median
    s/round (the lower middle of an even count), with every ok pass's ``pass_s_per_round`` and
    ``pass_ratio_tch`` (its s/round over TCH-Set's in the same pass, where TCH-Set ran it), from
    which :func:`add_ratios` takes the median ratio. A pass that failed after an ok first pass
    is left out (``passes_failed``)."""
    ref = {r["pass"]: r["s_per_round"] for r in runs.get(REFERENCE, []) if r["status"] == "ok"}
    out = []
    for name in methods:
        if name not in runs:
            continue
        ok = [r for r in runs[name] if r["status"] == "ok"]
        if len(runs[name]) == 1 or not ok:
            out.append(runs[name][0])
            continue
        ranked = sorted(ok, key=lambda r: r["s_per_round"])
        row = dict(ranked[(len(ranked) - 1) // 2])
        row.update(passes=len(ok), passes_failed=len(runs[name]) - len(ok),
                   pass_s_per_round=[r["s_per_round"] for r in ok],
                   pass_ratio_tch=[r["s_per_round"] / ref[r["pass"]] for r in ok if r["pass"] in ref])
        out.append(row)
    return out


def _describe(row: dict[str, Any]) -> str:
    head = f"n={row['n']:>7,} d={row['d']:>7,} m={row['m']:>2} {row['method']:<16}"
    if row["status"] == "ok":
        return (f"{head} {row['s_per_round']:.4g} s/round, setup {row['setup_s']:.3g} s, "
                f"peak {row['peak_mib']:.0f} MiB ({row['rounds']} rounds, {row['wall_s']:.1f} s wall)")
    where = f"in the {row['reached']}" if row.get("reached") else ""
    return f"{head} {row['status']} {row.get('reason') or row.get('error') or ''} {where}".rstrip()


def case_ratio(row: dict[str, Any], ref: dict[str, Any] | None) -> float | None:
    """``row``'s time over TCH-Set's (``ref``) in the same case: the median of the per-pass
    ratios when the case ran several passes, else the ratio of the two s/round; ``None`` unless
    both rows are ok."""
    if ref is None or row.get("status") != "ok" or ref.get("status") != "ok":
        return None
    if row.get("pass_ratio_tch"):
        return statistics.median(row["pass_ratio_tch"])
    return row["s_per_round"] / ref["s_per_round"]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Sets ``ratio_tch`` of every row (:func:`case_ratio`; ``None`` where it has none)."""
    ref = {(r["n"], r["d"], r["m"]): r for r in rows if r["method"] == REFERENCE}
    for r in rows:
        r["ratio_tch"] = case_ratio(r, ref.get((r["n"], r["d"], r["m"])))


def measure_imports(repeats: int) -> dict[str, Any]:
    """Wall seconds of fresh interpreters that only import (alternating; median of ``repeats``)."""
    env = dict(os.environ)
    samples: dict[str, list[float]] = {k: [] for k in IMPORTS}
    after: list[float] = []
    keys = list(IMPORTS) + ["after_torch"]
    for r in range(repeats):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            statement = IMPORTS.get(key, AFTER_TORCH)
            tic = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", statement], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=300)
            sec = time.perf_counter() - tic
            if proc.returncode != 0:
                raise RuntimeError(f"`{statement}` failed: {proc.stderr[-500:]}")
            if key == "after_torch":
                after.append(float(proc.stdout.split()[-1]))
            else:
                samples[key].append(sec)
    return {"repeats": repeats, "statements": dict(IMPORTS), "samples_s": samples,
            "median_s": {k: statistics.median(v) for k, v in samples.items()} if repeats else {},
            "after_torch_statement": AFTER_TORCH, "after_torch_s": after,
            "after_torch_median_s": statistics.median(after) if after else None}


# --------------------------------------------------------------------------- report


def sig3(x: float | None) -> str:
    """``x`` to 3 significant digits, without an exponent (``1230``, ``12.3``, ``0.0123``)."""
    if x is None or not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    v = float(f"{x:.3g}")
    if abs(v) >= 100:
        return str(int(round(v)))
    digits = 2 - math.floor(math.log10(abs(v)))
    return f"{v:.{digits}f}"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def _table(rows: list[dict[str, Any]], axis: str) -> list[str]:
    label = "n" if axis == "n" else "d"
    out = [f"| {label} | method | s/round | × TCH-Set | setup s | gradients % | transport % | min-norm % | other % "
           "| peak MiB |",
           "|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted((r for r in rows if axis in r.get("axes", [])),
                    key=lambda r: (r["n"] if axis == "n" else r["d"], list(METHODS.values()).index(r["method"])
                                   if r["method"] in METHODS.values() else 99)):
        size = f"{(r['n'] if axis == 'n' else r['d']):,}"
        st = r.get("status")
        if st == "ok":
            s = r["share_pct"]
            mark = "" if r.get("rounds") == r.get("rounds_requested") else f" ({r['rounds']} rounds)"
            ratio = "–" if r.get("ratio_tch") is None else f"{sig3(r['ratio_tch'])}×"
            if r["method"] != REFERENCE and r.get("ratio_tch") is not None and len(r.get("pass_ratio_tch") or []) > 1:
                ratio += f" ({sig3(min(r['pass_ratio_tch']))}–{sig3(max(r['pass_ratio_tch']))})"
            out.append(f"| {size} | {r['method']} | {sig3(r['s_per_round'])}{mark} | {ratio} | {sig3(r['setup_s'])} | "
                       f"{pct(s['gradients'])} | {pct(s['transport'])} | {pct(s['min_norm'])} | {pct(s['other'])} | "
                       f"{sig3(r['peak_mib'])} |")
        else:
            what = {"timeout": f"timeout (> {sig3(r.get('timeout_s'))} s, in the {r.get('reached', '?')})",
                    "skipped": f"skipped ({r.get('reason')})"}.get(st, f"error: {str(r.get('error'))[:80]}")
            out.append(f"| {size} | {r['method']} | {what} | – | – | – | – | – | – | – |")
    return out


def _find(rows: list[dict[str, Any]], n: int, d: int, method: str, m: int = M) -> dict[str, Any] | None:
    return next((r for r in rows if r["n"] == n and r["d"] == d and r["m"] == m and r["method"] == method), None)


def targets(results: dict[str, Any]) -> list[dict[str, str]]:
    """The target rows: ``{"target", "measured", "limit", "met"}``; met is ``yes``, ``no`` or
    ``not measured``, computed from ``results``."""
    rows = results.get("cases", [])
    out: list[dict[str, str]] = []
    sizes = [(1_000, 10, "n = 10³, d = 10"), (10_000, 10, "n = 10⁴, d = 10"), (1_000, 100_000, "n = 10³, d = 10⁵")]
    for name, limit in (("MosT (default)", 2.0), ("MosT (min-norm)", 5.0)):
        for n, d, where in sizes:
            mine, ref = _find(rows, n, d, name), _find(rows, n, d, REFERENCE)
            target = f"{name} s/round ÷ TCH-Set's, {where}"
            if mine is None or ref is None:
                measured, met = "not run", "not measured"
            elif mine.get("status") == "ok" and ref.get("status") == "ok":
                ratio = case_ratio(mine, ref)
                measured, met = f"{sig3(ratio)}×", "yes" if ratio <= limit else "no"
            elif ref.get("status") == "ok":  # TCH-Set finished; this method timed out here or at a smaller size
                measured = str(mine.get("status"))
                met = "no" if mine.get("status") in ("timeout", "skipped") else "not measured"
            else:
                measured, met = f"TCH-Set {ref.get('status')}", "not measured"
            out.append({"target": target, "measured": measured, "limit": f"≤ {limit:g}×", "met": met})
    for name in ("MosT (default)", "MosT (min-norm)"):
        target = f"transport + min-norm share of a {name} round, n ≥ 10³"
        cands = [r for r in rows if r["method"] == name and r["m"] == M and r["n"] >= 1_000]
        ok = [r for r in cands if r.get("status") == "ok"]
        if not ok:
            out.append({"target": target, "measured": "not run", "limit": "≤ 5 %", "met": "not measured"})
            continue
        worst = max(ok, key=lambda r: r["share_pct"]["transport"] + r["share_pct"]["min_norm"])
        share = worst["share_pct"]["transport"] + worst["share_pct"]["min_norm"]
        measured = f"max {pct(share)} % (n = {worst['n']:,}, d = {worst['d']:,}; {len(ok)} of {len(cands)} cases)"
        met = "yes" if share <= 5.0 else "no"
        if met == "yes" and len(ok) < len(cands):
            met = "yes (measured cases)"
        out.append({"target": target, "measured": measured, "limit": "≤ 5 %", "met": met})
    extra = next((r for r in results.get("extra", []) if (r["n"], r["d"], r["m"]) == EXTRA), None)
    target = "one default MosT round, n = 10⁵, d = 10, m = 50"
    if extra is None:
        out.append({"target": target, "measured": "not run", "limit": "≤ 1 s", "met": "not measured"})
    elif extra.get("status") != "ok":
        out.append({"target": target, "measured": extra.get("status", "?"), "limit": "≤ 1 s",
                    "met": "no" if extra.get("status") == "timeout" else "not measured"})
    else:
        sec = extra["s_per_round"]
        out.append({"target": target, "measured": f"{sig3(sec)} s", "limit": "≤ 1 s", "met": "yes" if sec <= 1 else "no"})
    imports = results.get("imports") or {}
    med, after = imports.get("median_s") or {}, imports.get("after_torch_median_s")
    target = "import most − import torch"
    if after is not None:  # what `import most` adds in an interpreter that has torch (median)
        measured = f"{sig3(after)} s (`import most` after `import torch`, in one interpreter; median)"
        out.append({"target": target, "measured": measured, "limit": "≤ 0.3 s", "met": "yes" if after <= 0.3 else "no"})
    elif "most" in med and "torch" in med:  # results of older runs: the difference of two medians
        gap = med["most"] - med["torch"]
        out.append({"target": target + " (fresh interpreters, medians)",
                    "measured": f"{sig3(gap)} s ({sig3(med['most'])} s vs {sig3(med['torch'])} s)",
                    "limit": "≤ 0.3 s", "met": "yes" if gap <= 0.3 else "no"})
    else:
        out.append({"target": target, "measured": "not run", "limit": "≤ 0.3 s", "met": "not measured"})
    return out


def machine_line(mach: dict[str, Any]) -> str:
    if not mach:
        return "Machine: not recorded."
    load = ", ".join(f"{x:.1f}" for x in mach.get("load_average") or [])
    return (f"Machine: {mach.get('processor')}, {mach.get('cpu_count')} CPUs, {mach.get('threads')} torch thread; "
            f"torch {mach.get('torch')}, Python {mach.get('python')}; {mach.get('date')}; load average at start {load}.")


def _on_gpu(results: dict[str, Any]) -> bool:
    return str(results.get("settings", {}).get("device", "cpu")).startswith("cuda")


def _instances(results: dict[str, Any]) -> bool:
    return results.get("settings", {}).get("problem", "function") == "instances"


def markers(results: dict[str, Any]) -> tuple[str, str]:
    """The section's markers: the CPU grid's, the GPU columns' (``--device cuda``), or the
    per-instance problem's (``--problem instances``)."""
    if _instances(results):
        return INSTANCES_START_MARK, INSTANCES_END_MARK
    return (GPU_START_MARK, GPU_END_MARK) if _on_gpu(results) else (START_MARK, END_MARK)


def render_section(results: dict[str, Any]) -> str:
    """The markdown section (without the markers)."""
    rows = [dict(r) for r in results.get("cases", [])]
    gpu = _on_gpu(results)
    if gpu:  # the memory that matters is the GPU's
        for r in rows:
            r["peak_mib"] = r.get("device_peak_mib")
    add_ratios(rows)
    s = results.get("settings", {})
    m, base_n, base_d = s.get("m", M), s.get("base_n", BASE_N), s.get("base_d", BASE_D)
    starts = [r["rss_start_mib"] for r in rows if r.get("status") == "ok" and r.get("rss_start_mib")]
    per_instance = _instances(results)
    out = ["## Growth with n and d" + (" on a GPU" if gpu else "") + (", one loss per instance" if per_instance else ""),
           "",
           f"Command: `{respell(results.get('command', COMMAND))}`" + (" (quick mode: a smoke test)" if s.get("quick") else ""),
           "", machine_line(results.get("machine", {})), "",
           "Quadratic objectives ‖θ − c_i‖², c_i ~ N(0, 3²) in R^d, from "
           + ("`most.Problem.from_instances(lambda t, c: ((t - c) ** 2).sum(), C, dim=d)` (the same objectives as "
              "the `from_function` grid, given one per instance: a served objective's gradient is one "
              "instance's)" if per_instance else "`most.Problem.from_function`")
           + f"; m = {m} "
           f"models, lr = {LR}, one torch thread; each (case, method) in a fresh child process after a 2-round "
           f"warm-up, then {s.get('rounds', DEFAULT_ROUNDS)} timed rounds. s/round = median of rounds 2..R; "
           "× TCH-Set = s/round over TCH-Set's in the same case; "
           + (f"a case whose first pass (all its methods) took at most {sig3(s.get('pass_budget_s'))} s runs "
              f"{s['passes']} passes, the methods' order rotated each pass: its s/round is the median pass's "
              "(whose other columns are shown) and its × TCH-Set the median of the passes' ratios, each over "
              "TCH-Set's time in the same pass (their range in brackets); " if s.get("passes", 1) > 1 else "")
           + "setup s = first round (from the start of `fit`: "
           "seeding and other one-off costs) minus the median round; phase shares of rounds 2..R from "
           "`RoundRecord` (other = updates, re-seeding, bookkeeping); "
           + ("peak MiB = the GPU memory allocated at the peak of the timed run (`torch.cuda.max_memory_allocated`)"
              if gpu else "peak MiB = peak RSS of the child"
              + (f" (about {sig3(statistics.median(starts))} MiB of it is torch and the library at start)" if starts
                 else "")) + f"; timeout {sig3(s.get('timeout_s'))} s per case, larger sizes of a method skipped "
           "after it. Raw numbers: `" + results.get("out", "benchmarks/results/performance/growth.json")
           + "`; figure: the `.png` next to it.", "",
           f"### By n (d = {base_d:,})", "", *_table(rows, "n"), "",
           f"### By d (n = {base_n:,})", "", *_table(rows, "d"), ""]
    for r in results.get("extra", []):
        what = (f"{sig3(r['s_per_round'])} s/round, setup {sig3(r['setup_s'])} s, transport "
                f"{pct(r['share_pct']['transport'])} %, peak {sig3(r['peak_mib'])} MiB" if r.get("status") == "ok"
                else r.get("status"))
        out += [f"Extra case: {r['method']} at n = {r['n']:,}, d = {r['d']:,}, m = {r['m']}: {what}.", ""]
    imp = results.get("imports") or {}
    if imp.get("median_s"):
        med = imp["median_s"]
        line = ("Import (fresh interpreter, median of " + str(imp.get("repeats")) + "): "
                + "; ".join(f"`{imp['statements'][k]}` {sig3(v)} s" for k, v in med.items()) + ".")
        if imp.get("after_torch_median_s") is not None:
            line += (f" In an interpreter that has imported torch, `import most` takes {sig3(imp['after_torch_median_s'])} s"
                     " (median; the separate interpreters' times above differ by their start-up noise).")
        out += [line, ""]
    out += ["### Targets", "", "| target | measured | limit | met |", "|:---|---:|---:|:---:|"]
    for t in targets(results):
        met = t["met"] if t["met"] != "no" else "**no**"
        out.append(f"| {t['target']} | {t['measured']} | {t['limit']} | {met} |")
    out += ["", READING_INSTANCES if per_instance else READING] + (["", results["note"]] if results.get("note") else [])
    return "\n".join(out) + "\n"


#: How to read the tables (what bounds the costs; independent of the numbers measured)
READING = """**Reading the tables.** The default MosT, TCH-Set and SoM combine the gradients with coefficients, so a
round is one forward and one reverse pass over the models (`Combiner.linear`; the plan's loss matrix and
the step's gradients come from the same pass): their rounds cost about the same at every n and d, and the
default's one-off setup is its seeding, capped at 40 % of the run's steps. Min-norm combiners (MosT
(min-norm), MGDA) need one gradient per objective a model serves. A `from_function` problem computes all
n losses in one call, so a model's k rows cost min(d, k) passes through the whole function (forward mode
when d < k, reverse mode otherwise): about d times a scalarised step at d = 10 and k times at large d,
which is why those rows time out at d ≥ 10⁴; a problem built with `Problem.from_instances` pays one
instance's gradient per row instead (the section "one loss per instance" below: the paper's min-norm
variant within 5× TCH-Set at every target size). The min-norm solve is exact (NNLS on working sets of
rows when there are more rows than coordinates, NNLS on the Gramian's Cholesky factor otherwise). When
forward mode is sure (d < n / m), the rows' forward passes also give the round's loss matrix: one
evaluation of the objectives a round instead of two (since d709c8f). At n = 10³, d = 10 the variant's
round is about 2.2 ms against TCH-Set's 0.52 ms: the d forward passes take about 0.8 ms (torch's cost
per operation under forward mode; an operation between the parameters and a constant, such as `t - c`,
runs a Python decomposition), the min-norm phase about 0.75 ms (the rows checked and rescaled in NumPy
after one copy, the exact solve of five problems of ~290 rows: 2.2 working-set cycles each, a few dozen
NumPy and SciPy calls of microseconds), the plan step about 0.2 ms. At n = 10⁴ the forward passes are
most of the round (d tangents through the function's [n, d] intermediates) and the exact solve of five
problems of ~2000 rows about 1.8 ms (3 ms before the working sets took the smallest scores by
partition instead of a full sort). The short cases run three passes: one run per method let a slow
spell move a ratio by half. Across grid runs some sizes still change mode as a whole: TCH-Set's round at
n = 10⁴ took 3.3 ms in every pass of this grid and 2.2 ms in every pass of the one before it (the
variant then 10.3 ms, 4.70×), so the variant is 2.8–4.2× TCH-Set there with today's code; at d = 10³
(one pass: MGDA takes minutes) TCH-Set's round was 7.9 ms here and 21–25 ms in the two grids before, which
moves the default's ratio there between 0.6× and 1.9×. At d = 10³ the Gramian's exact solve took MGDA's round from 30.2 s to
10–14 s (1000 rows per model; the 1000 reverse passes are the rest). The shares: at d = 10 the default's
plan step (the load-bounded plan and its checks, a dozen tensor operations of 10–30 µs) is 0.2–0.3 ms, a fifth to a third of a
millisecond round at any n ≥ 10³, and TCH-Set's own assignment (each objective's best model) is about a
tenth of its round; the 5 % share is out of reach there without fusing the round into one kernel. The
shares fall with d: about 3 % at d = 10³ and 0.1 % at d ≥ 10⁴."""


READING_INSTANCES = """**Reading the table.** The same objectives given one per instance: a min-norm combiner's rows are
the served instances' own gradients (one vectorised backward pass per instance, `torch.func.grad`), not
passes through a function of all n losses, so the paper's min-norm variant keeps within a small factor of
TCH-Set where the `from_function` grid times out. The scalarised rows pay the per-instance form too (one
vectorised call for the losses; for the direction, the served instances' gradients in one vectorised call
when they are few, else one reverse pass per model through its weighted losses: at d = 10⁴ that took the
default from 1.85× TCH-Set to 1.26×). The default's direction weighs every objective and TCH-Set's only
each model's worst, which is the default's remaining 1.3–1.7× at d ≥ 10⁴. What the
min-norm rows still spend above TCH-Set is the min-norm problem itself: at d ≥ 10³, k ≈ 200 rows per model
in more coordinates than rows, the k × k Gramian over all d coordinates (float64, k² d products per model:
most of the min-norm share at d ≥ 10⁴) and its exact solve (NNLS on the Cholesky factor, about 8 ms for the
five problems; Frank–Wolfe took 46 ms and the round 0.12 s, 22.5× TCH-Set, before 30037b9); with fewer
coordinates than rows it is NNLS on working sets (about 40 % of a round at d = 10). At d = 10 the plan
step's fixed per-call costs weigh on millisecond rounds, as in the grid above. The cases are 5 rounds
each: ratios of rounds of a few milliseconds move by up to several times between runs on this shared
machine (six runs of this grid within a week on it: TCH-Set at n = 10³, d = 10³ took 26, 7.5, 5.5, 23, 4.2
and 22 ms, the default 17, 17, 20, 10, 14 and 15 ms); the short cases now run three passes."""


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_section(path: Path, section: str, marks: tuple[str, str] = (START_MARK, END_MARK)) -> None:
    """Puts ``section`` between the growth markers ``marks`` of ``path`` (appended with the
    markers if absent)."""
    START_MARK, END_MARK = marks  # noqa: N806 (the module's names, for this section)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{START_MARK}\n{section.rstrip()}\n{END_MARK}"
    i, j = text.find(START_MARK), text.find(END_MARK)
    if i >= 0 and j > i:
        text = text[:i] + block + text[j + len(END_MARK):]
    else:
        if i >= 0 or j >= 0:
            raise ValueError(f"{path}: only one of {START_MARK} / {END_MARK}, or in the wrong order")
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + block + "\n"
    _atomic_write(path, text)


def plot(results: dict[str, Any], path: Path) -> None:
    """Two log-log panels: seconds per round against n (d fixed) and against d (n fixed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results.get("cases", [])
    s = results.get("settings", {})
    styles = {"MosT (default)": ("tab:blue", "o"), "MosT (min-norm)": ("tab:orange", "s"),
              "TCH-Set": ("tab:green", "^"), "SoM": ("tab:red", "D"), "MGDA": ("tab:purple", "v")}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    for ax, axis in zip(axes, ("n", "d")):
        for k, (name, (colour, marker)) in enumerate(styles.items()):
            pts = sorted((r[axis], r["s_per_round"]) for r in rows
                         if r["method"] == name and axis in r.get("axes", []) and r.get("status") == "ok")
            if pts:
                ax.plot(*zip(*pts), color=colour, marker=marker, label=name)
            gone = [r for r in rows if r["method"] == name and axis in r.get("axes", []) and r.get("status") == "timeout"]
            for r in gone:  # a cross at the timeout over all the rounds (shifted apart along x)
                ax.plot(r[axis] * 1.07 ** (k - 2), r["timeout_s"] / max(1, s.get("rounds", DEFAULT_ROUNDS) + WARMUP_ROUNDS),
                        color=colour, marker="x", markersize=10, linestyle="none")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
    for r in results.get("extra", []):
        if r.get("status") == "ok":
            axes[0].plot(r["n"], r["s_per_round"], color="black", marker="*", markersize=13, linestyle="none",
                         label=f"{r['method']}, m = {r['m']}")
    axes[0].set_xlabel("number of objectives n")
    axes[0].set_ylabel("seconds per round (s, median)")
    axes[0].set_title(f"d = {s.get('base_d', BASE_D):,}, m = {s.get('m', M)}")
    axes[1].set_xlabel("dimension d")
    axes[1].set_title(f"n = {s.get('base_n', BASE_N):,}, m = {s.get('m', M)}")
    handles, labels = {}, []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if any(r.get("status") == "timeout" for r in rows):
        from matplotlib.lines import Line2D

        label = "timed out (×: timeout ÷ (R + 2 warm-up rounds))"
        handles[label] = Line2D([], [], color="grey", marker="x", linestyle="none")
        labels.append(label)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center", ncol=min(4, len(labels)),
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("Growth of the cost of a round (quadratic objectives, one CPU thread)")
    fig.tight_layout(rect=(0, 0.12 if len(labels) <= 4 else 0.17, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=130)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


# --------------------------------------------------------------------------- CLI


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def _extra(text: str) -> tuple[int, int, int] | str | None:
    if text.lower() in ("none", "default"):
        return None if text.lower() == "none" else "default"
    n, d, m = _ints(text)
    return n, d, m


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance growth", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="See the module docstring for what is measured and written.")
    parser.add_argument("--quick", action="store_true",
                        help=f"n, d <= {QUICK_MAX:,}, R = {QUICK_ROUNDS}, timeout {QUICK_TIMEOUT:g} s, "
                        f"{QUICK_IMPORT_REPEATS} import repeats, the extra case at n = {QUICK_EXTRA[0]:,}")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"timed rounds per case (default {DEFAULT_ROUNDS}; {QUICK_ROUNDS} with --quick)")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds per case (default {DEFAULT_TIMEOUT:g}; {QUICK_TIMEOUT:g} with --quick)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (the figure goes next to it, .png)")
    parser.add_argument("--figure", type=Path, default=None, help="figure path (default: --out with .png)")
    parser.add_argument("--markdown", type=Path, default=DEFAULT_MARKDOWN,
                        help="the markdown file whose growth section is written")
    parser.add_argument("--no-markdown", action="store_true", help="do not write the markdown section")
    parser.add_argument("--render", action="store_true", help="only the figure and the section again, from --out")
    parser.add_argument("--ns", type=_ints, default=None, help="n axis, comma-separated (default 100,...,100000)")
    parser.add_argument("--ds", type=_ints, default=None, help="d axis, comma-separated (default 10,...,100000)")
    parser.add_argument("--base-n", type=int, default=BASE_N, help="n of the d axis")
    parser.add_argument("--base-d", type=int, default=BASE_D, help="d of the n axis")
    parser.add_argument("--m", type=int, default=M, help="models of the grid")
    parser.add_argument("--methods", type=lambda t: [x.strip() for x in t.split(",")], default=list(METHODS),
                        help=f"comma-separated keys among {', '.join(METHODS)}")
    parser.add_argument("--extra", type=_extra, default="default",
                        help="the extra default-MosT case N,D,M (default 100000,10,50) or none")
    parser.add_argument("--import-repeats", type=int, default=None,
                        help=f"fresh interpreters per import (default {IMPORT_REPEATS}; {QUICK_IMPORT_REPEATS} "
                        "with --quick; 0: skip)")
    parser.add_argument("--passes", type=int, default=None,
                        help=f"passes of each case whose first pass takes at most --pass-budget seconds, the methods' "
                        f"order rotated each pass; s/round and the ratios are medians over them (default {PASSES}; 1 "
                        "with --quick)")
    parser.add_argument("--pass-budget", type=float, default=PASS_BUDGET,
                        help=f"seconds (default {PASS_BUDGET:g}): a case whose first pass took longer runs once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--problem", choices=("function", "instances"), default="function",
                        help="how the quadratic objectives are built: from_function (the grid of the issue) or "
                        "from_instances (one loss per instance; its own section of the markdown)")
    parser.add_argument("--device", default="cpu",
                        help="where the problems and models live (cuda: the GPU columns; write them to another --out "
                        "with --no-markdown)")
    args = parser.parse_args(argv)
    global DEVICE, PROBLEM
    DEVICE, PROBLEM = args.device, args.problem
    figure = args.figure or args.out.with_suffix(".png")

    if args.render:
        results = json.loads(args.out.read_text())
        add_ratios(results.get("cases", []))
        plot(results, figure)
        if not args.no_markdown:
            write_section(args.markdown, render_section(results), markers(results))
        return 0

    unknown = [k for k in args.methods if k not in METHODS]
    if unknown:
        parser.error(f"unknown method key(s) {unknown}; known: {', '.join(METHODS)}")
    q = args.quick
    ns = args.ns or [n for n in N_AXIS if not q or n <= QUICK_MAX]
    ds = args.ds or [d for d in D_AXIS if not q or d <= QUICK_MAX]
    rounds = args.rounds or (QUICK_ROUNDS if q else DEFAULT_ROUNDS)
    timeout = args.timeout if args.timeout is not None else (QUICK_TIMEOUT if q else DEFAULT_TIMEOUT)
    extra = (QUICK_EXTRA if q else EXTRA) if args.extra == "default" else args.extra
    repeats = args.import_repeats if args.import_repeats is not None else (QUICK_IMPORT_REPEATS if q else IMPORT_REPEATS)
    methods = [METHODS[k] for k in args.methods]
    passes = args.passes if args.passes is not None else (1 if q else PASSES)
    if passes < 1:
        parser.error(f"--passes must be at least 1; got {passes}")

    import torch

    torch.set_num_threads(1)
    tic = time.perf_counter()
    out = args.out.resolve()
    results: dict[str, Any] = {
        "command": " ".join([COMMAND, *argv]),
        "out": str(out.relative_to(ROOT)) if out.is_relative_to(ROOT) else str(out),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine_info(1),
        "settings": {"quick": q, "ns": ns, "ds": ds, "base_n": args.base_n, "base_d": args.base_d, "m": args.m,
                     "lr": LR, "seed": args.seed, "rounds": rounds, "warmup_rounds": WARMUP_ROUNDS,
                     "min_rounds": MIN_ROUNDS, "timeout_s": timeout, "methods": methods, "extra": extra,
                     "device": args.device, "problem": args.problem,
                     "import_repeats": repeats, "passes": passes, "pass_budget_s": args.pass_budget},
    }
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    results["cases"] = run_grid(ns, ds, methods, base_n=args.base_n, base_d=args.base_d, m=args.m, rounds=rounds,
                                timeout=timeout, seed=args.seed, passes=passes, pass_budget=args.pass_budget,
                                log=log)
    results["extra"] = []
    if extra is not None:
        n, d, m = extra
        row = {"n": n, "d": d, "m": m, "method": METHODS["default"], "axes": []}
        row.update(run_case({"n": n, "d": d, "m": m, "method": row["method"], "rounds": rounds, "seed": args.seed},
                            timeout))
        log(_describe(row))
        results["extra"].append(row)
    add_ratios(results["cases"] + results["extra"])
    results["imports"] = measure_imports(repeats) if repeats > 0 else {"repeats": 0, "median_s": {}}
    results["seconds"] = time.perf_counter() - tic
    _atomic_write(args.out, json.dumps(results, indent=1) + "\n")
    plot(results, figure)
    section = render_section(results)
    if not args.no_markdown:
        write_section(args.markdown, section, markers(results))
    print(section)
    log(f"wrote {args.out} and {figure}" + ("" if args.no_markdown else f" and {args.markdown}")
        + f" in {results['seconds']:.1f} s")
    return 0

