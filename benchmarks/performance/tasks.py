"""Many tasks with their own data: the library's builders against plain PyTorch, side by side.

Three measurements, each in one process with the contenders alternating (one torch thread):

1. ``225 tasks``: 225 linear-regression tasks (8 groups of 5 to 60 tasks, 25 samples each, 20
   features + bias), a 100-round default ``most.MosT(n_models=8)`` fit built three ways:
   ``Problem.from_module`` with one loss callable per task, ``Problem.from_datasets``, and the
   problem written by hand as one vectorised function over the stacked data
   (``Problem.from_function``). Same starts (the module's initialisation), same result.
2. ``growth``: a round's time against the number of tasks (10 ... 10^4 tasks of 20-50 samples;
   and 10^4 tasks of exactly 20), d = 21, m = 8: ``from_module`` (up to 10^3 tasks),
   ``from_datasets``, and one hand-written vectorised forward and backward pass over all tasks'
   data for all models (what a round at least has to do).
3. ``cnn``: a small CNN (three 3x3 conv layers, 16/32/64 channels) on 4 domains of 32x32 images,
   mini-batches of 32, m = 4: a default MosT round (Adam) with ``from_datasets`` and with
   ``from_module``, against a plain PyTorch loop doing the same evaluations (every model on every
   domain's batch) and one Adam step per model.

A round's time is the median of the gaps between the round callbacks of a fit (rounds where
the default re-seeds a model are the slow tail, not the median).

    python -m benchmarks.performance tasks                      # about 10 minutes on 2 cores
    python -m benchmarks.performance tasks --quick              # tiny sizes, a smoke test (about 20 s)

writes ``benchmarks/results/tasks.json`` and ``benchmarks/results/tasks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import most
from most.bench.mtl import CNN
from most.optim import Adam

from .harness import respell

RESULTS = Path(__file__).resolve().parents[1] / "results"


# ----------------------------------------------------------------------------- the problems
def linear_tasks(groups: list[int], lengths: tuple[int, int], seed: int, features: int = 20):
    """Tasks in groups (each group one hidden linear model, noise 0.1); sample counts drawn in
    ``lengths`` (inclusive)."""
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(len(groups), features + 1, generator=g)
    tasks = []
    for k, size in enumerate(groups):
        for _ in range(size):
            rows = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
            x = torch.randn(rows, features, generator=g)
            y = x @ truth[k, :features, None] + truth[k, features] + 0.1 * torch.randn(rows, 1, generator=g)
            tasks.append((x, y))
    return tasks


def squared(out, y):
    return ((out - y) ** 2).sum(-1)


def module_problem(tasks, features=20):
    objectives = [lambda f, x=x, y=y: squared(f(x), y).mean() for x, y in tasks]
    return most.Problem.from_module(lambda: nn.Linear(features, 1), objectives)


def datasets_problem(tasks, features=20):
    return most.Problem.from_datasets(lambda: nn.Linear(features, 1), tasks, squared)


def padded(tasks):
    """The tasks' data padded to the longest: ``x [n, L, f]``, ``y [n, L]``, ``mask [n, L]``."""
    longest = max(len(x) for x, _ in tasks)
    n, f = len(tasks), tasks[0][0].shape[1]
    x, y, mask = torch.zeros(n, longest, f), torch.zeros(n, longest), torch.zeros(n, longest)
    for i, (xi, yi) in enumerate(tasks):
        x[i, :len(xi)], y[i, :len(xi)], mask[i, :len(xi)] = xi, yi[:, 0], 1.0
    return x, y, mask


def hand_problem(tasks, init):
    """The problem as a user would write it by hand: one vectorised function of the stacked data."""
    x, y, mask = padded(tasks)
    counts = mask.sum(1)
    f = x.shape[-1]

    def fn(theta):
        pred = x @ theta[:f] + theta[f]
        return (((pred - y) ** 2) * mask).sum(1) / counts

    return most.Problem.from_function(fn, f + 1, len(tasks), init=init)


def hand_pass(tasks, m: int, device: str | torch.device = "cpu"):
    """One hand-written vectorised forward and backward pass over all tasks' data for all models,
    everything on ``device``."""
    x, y, mask = (t.to(device) for t in padded(tasks))
    counts = mask.sum(1)
    f = x.shape[-1]
    params = torch.randn(m, f + 1, device=device, requires_grad=True)
    weights = torch.rand(m, len(tasks), device=device)

    def step():
        pred = torch.einsum("nlf,mf->mnl", x, params[:, :f]) + params[:, f, None, None]
        losses = (((pred - y) ** 2) * mask).sum(-1) / counts
        (grad,) = torch.autograd.grad((losses * weights).sum(), params)
        return grad

    return step


# ----------------------------------------------------------------------------- timing helpers
def fit_seconds(problem, method) -> tuple[float, float, object]:
    """``(whole fit seconds, median round seconds, result)``."""
    stamps = []
    tic = time.perf_counter()
    result = method.fit(problem, callback=lambda record, params: stamps.append(time.perf_counter()))
    total = time.perf_counter() - tic
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return total, statistics.median(gaps) if gaps else total, result


def best_of(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


# ----------------------------------------------------------------------------- 1. 225 tasks
def many_tasks(repeats: int, rounds: int) -> dict:
    tasks = linear_tasks([5, 10, 15, 20, 30, 40, 45, 60], (25, 25), seed=0)
    slow, fast = module_problem(tasks), datasets_problem(tasks)
    hand = hand_problem(tasks, init=slow.init)
    builds = {"from_module": slow, "from_datasets": fast, "hand-stacked from_function": hand}
    times = {name: [] for name in builds}
    results = {}
    for r in range(repeats):
        order = list(builds)[r % 3:] + list(builds)[:r % 3]
        for name in order:
            if name == "from_module" and r >= 2:  # 40-70 s a fit: two are enough
                continue
            total, _, result = fit_seconds(builds[name], most.MosT(n_models=8, rounds=rounds, seed=0))
            times[name].append(total)
            results[name] = result
    ref = results["from_module"].params
    row = {name: {"seconds": times[name], "median": statistics.median(times[name]),
                  "max_param_difference": float((results[name].params - ref).abs().max()),
                  "mean_best_loss": float(results[name].best_losses().mean())} for name in builds}
    row["speed-up over from_module"] = row["from_module"]["median"] / row["from_datasets"]["median"]
    row["from_datasets / hand"] = row["from_datasets"]["median"] / row["hand-stacked from_function"]["median"]
    return row


# ----------------------------------------------------------------------------- 2. growth
def growth(sizes: list[int], rounds: int, module_up_to: int) -> list[dict]:
    rows = []
    cases = [(n, (20, 50)) for n in sizes] + [(sizes[-1], (20, 20))]
    for n, lengths in cases:
        groups = [n // 8 + (1 if k < n % 8 else 0) for k in range(8)]
        tasks = linear_tasks(groups, lengths, seed=1)
        row = {"tasks": n, "samples": f"{lengths[0]}-{lengths[1]}" if lengths[0] != lengths[1] else str(lengths[0]),
               "rows": sum(len(x) for x, _ in tasks)}
        step = hand_pass(tasks, 8)
        row["hand pass"] = best_of(step, 5)
        _, row["from_datasets"], _ = fit_seconds(datasets_problem(tasks), most.MosT(n_models=8, rounds=rounds, seed=0))
        row["hand pass again"] = best_of(step, 5)
        if n <= module_up_to:
            _, row["from_module"], _ = fit_seconds(module_problem(tasks),
                                                   most.MosT(n_models=8, rounds=max(3, rounds // 3), seed=0))
        hand = min(row["hand pass"], row["hand pass again"])
        row["from_datasets / hand pass"] = row["from_datasets"] / hand
        if "from_module" in row:
            row["from_module / from_datasets"] = row["from_module"] / row["from_datasets"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- 3. CNN on 4 domains
def cnn_model() -> nn.Module:
    """The multi-task benchmark's small CNN (16/32/64 channels) for 10 classes."""
    return CNN(10, (16, 32, 64))


def cross_entropy(out, y):
    return F.cross_entropy(out, y, reduction="none")


def cnn(rounds: int, per_domain: int, batch: int = 32, m: int = 4) -> dict:
    g = torch.Generator().manual_seed(0)
    domains = [(torch.randn(per_domain, 3, 32, 32, generator=g), torch.randint(0, 10, (per_domain,), generator=g))
               for _ in range(4)]
    fast = most.Problem.from_datasets(cnn_model, domains, cross_entropy, batch_size=batch)
    draw = torch.Generator().manual_seed(1)

    def objective(x, y):
        def loss(forward):
            idx = torch.randperm(len(x), generator=draw)[:batch]
            return cross_entropy(forward(x[idx]), y[idx]).mean()
        return loss

    slow = most.Problem.from_module(cnn_model, [objective(x, y) for x, y in domains])

    torch.manual_seed(0)
    models = [cnn_model() for _ in range(m)]
    optimizers = [torch.optim.Adam(net.parameters(), lr=1e-3) for net in models]
    weights = torch.full((m, 4), 0.25)

    def plain_round():
        batches = []
        for x, y in domains:
            idx = torch.randperm(len(x), generator=draw)[:batch]
            batches.append((x[idx], y[idx]))
        for j, (net, opt) in enumerate(zip(models, optimizers)):
            losses = torch.stack([cross_entropy(net(x), y).mean() for x, y in batches])
            opt.zero_grad()
            (losses * weights[j]).sum().backward()
            opt.step()

    row = {"per_domain": per_domain, "batch": batch, "m": m}
    for label in ("first", "second"):
        row[f"plain {label}"] = best_of(plain_round, rounds)
        _, row[f"from_datasets {label}"], _ = fit_seconds(
            fast, most.MosT(n_models=m, rounds=rounds, seed=0, lr=1e-3, optimizer=Adam()))
    _, row["from_module"], _ = fit_seconds(slow, most.MosT(n_models=m, rounds=max(3, rounds // 2), seed=0, lr=1e-3,
                                                            optimizer=Adam()))
    plain = statistics.median([row["plain first"], row["plain second"]])
    datasets = statistics.median([row["from_datasets first"], row["from_datasets second"]])
    row["from_datasets / plain"] = datasets / plain
    row["from_module / plain"] = row["from_module"] / plain
    return row


# ----------------------------------------------------------------------------- 4. vmap or a loop over models
def vectorise_or_loop(repeats: int = 5, quick: bool = False) -> list[dict]:
    """A linear combiner's evaluation (losses and the reverse pass) of m = 8 models, the models in
    one vmap call against one after another, for a few modules and row counts; and which one
    ``DatasetsEvaluator.vectorize`` picks."""
    g = torch.Generator().manual_seed(2)
    modules = {
        "Linear(20, 1)": (lambda: nn.Linear(20, 1), (20,)),
        "MLP 20-32-10": (lambda: nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10)), (20,)),
        "CNN 3x32x32": (cnn_model, (3, 32, 32)),
    }
    sizes = {"Linear(20, 1)": (1000, 5000, 50000), "MLP 20-32-10": (1000, 5000, 50000), "CNN 3x32x32": (32, 128)}
    if quick:
        sizes = {name: rows[:1] for name, rows in sizes.items()}
    rows = []
    for name, (factory, shape) in modules.items():
        for total in sizes[name]:
            n = max(1, total // 20)
            x = torch.randn(total, *shape, generator=g)
            y = torch.randint(0, 10, (total,), generator=g)
            if name == "Linear(20, 1)":
                y, loss = y.float()[:, None], squared
            else:
                loss = cross_entropy
            problem = most.Problem.from_datasets(factory, (x, y), loss, objective_index=torch.arange(total) % n)
            evaluator = problem.evaluation
            params = problem.initial_params(8, torch.Generator().manual_seed(0))
            weights = torch.rand(8, n, generator=g)
            picked = evaluator.vectorize(total)

            def evaluate():
                _, pullback = problem.losses_with_pullback(params)
                pullback(weights)

            affine = evaluator._affine
            row = {"module": name, "rows": total,
                   "rule picks": "one product" if affine is not None else "vmap" if picked else "loop"}
            if affine is not None:
                row["one product"] = best_of(evaluate, repeats)
            evaluator._affine = None  # vmap or the loop over the models, for comparison
            for label, choice in (("vmap", True), ("loop", False), ("vmap again", True), ("loop again", False)):
                evaluator.vectorize = lambda rows, choice=choice: choice
                row[label] = best_of(evaluate, repeats)
            del evaluator.vectorize
            evaluator._affine = affine
            row["vmap"], row["loop"] = min(row.pop("vmap again"), row["vmap"]), min(row.pop("loop again"), row["loop"])
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- output
def markdown(out: dict) -> str:
    t, lines = out["225 tasks"], []
    lines += [
        "# Many tasks with their own data: builders against plain PyTorch",
        "",
        f"Command: `{respell(out['command'])}` ({out['date']}, {out['machine']}, one torch thread; "
        f"{out['seconds']:.0f} s). Each ratio is taken within this one run, the contenders alternating.",
        "",
        "## 225 tasks, a 100-round default MosT fit (m = 8)",
        "",
        "| build | seconds (each fit) | max |params - from_module's| | mean best loss |",
        "|---|---|---|---|",
    ]
    for name in ("from_module", "from_datasets", "hand-stacked from_function"):
        r = t[name]
        lines.append(f"| {name} | {', '.join(f'{s:.2f}' for s in r['seconds'])} | "
                     f"{r['max_param_difference']:.1e} | {r['mean_best_loss']:.5f} |")
    lines += ["", f"`from_datasets` is **{t['speed-up over from_module']:.1f}x** faster than `from_module` and takes "
                  f"**{t['from_datasets / hand']:.2f}x** the hand-stacked function's time (medians).", ""]
    lines += ["## A round against the number of tasks (d = 21, m = 8)", "",
              "Seconds a round (median); the hand pass is one vectorised forward and backward pass over all "
              "tasks' data for all models (best of 5, measured before and after).", "",
              "| tasks | samples each | rows | hand pass | from_datasets | x hand pass | from_module | "
              "from_module / from_datasets |", "|---|---|---|---|---|---|---|---|"]
    for r in out["growth"]:
        hand = min(r["hand pass"], r["hand pass again"])
        module = f"{r['from_module']:.4f}" if "from_module" in r else "not run"
        ratio = f"{r['from_module / from_datasets']:.1f}x" if "from_module" in r else ""
        lines.append(f"| {r['tasks']} | {r['samples']} | {r['rows']} | {hand:.4f} | {r['from_datasets']:.4f} | "
                     f"{r['from_datasets / hand pass']:.2f}x | {module} | {ratio} |")
    lines += ["", "A round is the pass plus the round's own work (the transport plan, the weights, the update): "
                  "with tens of tasks that work is most of it, and the ratio to the hand pass falls as the "
                  "tasks grow."]
    c = out["cnn"]
    lines += ["", f"## A small CNN on 4 domains (batch {c['batch']} per domain, m = {c['m']}, Adam)", "",
              "Seconds a round: the plain loop runs every model on every domain's batch, then one Adam step per "
              "model (best of the rounds, two alternations); MosT's is the median round of a default fit.", "",
              "| | plain loop | from_datasets | from_module |", "|---|---|---|---|",
              f"| first | {c['plain first']:.4f} | {c['from_datasets first']:.4f} | {c['from_module']:.4f} |",
              f"| second | {c['plain second']:.4f} | {c['from_datasets second']:.4f} | |",
              "", f"A round with `from_datasets` takes **{c['from_datasets / plain']:.2f}x** the plain loop's time "
                  f"(`from_module`: {c['from_module / plain']:.2f}x).", ""]
    lines += ["## The m models in one vmap call or one after another", "",
              "One evaluation of a linear combiner (the losses and the reverse pass) of m = 8 models on all rows, "
              "seconds (best of 5, two alternations). `from_datasets` computes a module that is one affine map "
              "(`nn.Linear`) as one matrix product of the shared inputs with all models' weights; otherwise it picks "
              "vmap for passes whose rows hold at most 2^18 values a model (their inputs or the forward's values, "
              "whichever are more), and a loop over the models above.", "",
              "| module | rows | one product | vmap | loop | fastest | the rule picks |", "|---|---|---|---|---|---|---|"]
    for r in out["vectorise"]:
        times = {k: r[k] for k in ("one product", "vmap", "loop") if k in r}
        fastest = min(times, key=times.get)
        second = sorted(times.values())[1]
        product = f"{r['one product']:.4f}" if "one product" in r else ""
        lines.append(f"| {r['module']} | {r['rows']} | {product} | {r['vmap']:.4f} | {r['loop']:.4f} | {fastest} "
                     f"({second / times[fastest]:.2f}x) | {r['rule picks']} |")
    lines.append("")
    return "\n".join(lines)


def write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        handle.write(text)
    os.replace(handle.name, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.performance tasks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS / "tasks.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tic = time.perf_counter()
    if args.quick:
        sizes, fits, rounds, per_domain = [10, 40], 1, 3, 40
    else:
        sizes, fits, rounds, per_domain = [10, 100, 1000, 10000], 3, 10, 300
    out = {"command": "python -m benchmarks.performance tasks" + (" --quick" if args.quick else ""),
           "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "torch": torch.__version__}
    out["225 tasks"] = many_tasks(fits, 3 if args.quick else 100)
    print(json.dumps(out["225 tasks"]), file=sys.stderr)
    out["growth"] = growth(sizes, rounds, module_up_to=1000)
    out["cnn"] = cnn(rounds, per_domain)
    out["vectorise"] = vectorise_or_loop(1 if args.quick else 5, quick=args.quick)
    out["seconds"] = time.perf_counter() - tic
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(out, indent=1) + "\n")
    write_atomic(args.out.with_suffix(".md"), markdown(out))
    print(markdown(out))
    return 0
