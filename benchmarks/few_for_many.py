"""Few-for-many benchmark: m = 5 models for n >> m objectives, MosT against the set baselines.

Settings (all convex, m = 5, seeds 0..S-1; the seed draws both the data and the method's start):

* ``quadratic-n100`` / ``quadratic-n1000``: L_i(theta) = ||theta - c_i||^2 in d = 10 with
  c_i = mu_{g(i)} + 0.5 * N(0, I): n centres in 5 equal groups whose means are
  mu_g ~ 3 * N(0, I) (groups of equal size, which suits the transport's uniform marginals).
* ``regression-n1000``: mixed linear regression, ``most.problems.mixed_regression`` with
  n = 1000 objectives from 5 ground-truth models (d = 10, 30 samples each, noise 0.5,
  individual perturbation 0.1), mean squared error plus the SoM ridge term
  (rho / 2) ||theta||^2, rho = 1e-3, for *every* method (so all solve the same problem).

Metrics (on the losses without the ridge term): worst objective max_i min_k L_i(theta_k),
average objective mean_i min_k L_i(theta_k), recovery error (``most.metrics.recovery_error``,
regression only), wall time of one ``fit``.

    python benchmarks/few_for_many.py --seeds 3 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

import most
from most.baselines import STCHSet, SumOfMinimum, TCHSet
from most.metrics import average_objective, recovery_error, worst_objective
from most.problems import mixed_regression


M = 5
DIM = 10
RIDGE = 1e-3
CHECK_FACTOR = 8
FEDERATED_HEADING = "## Federated clients as objectives"
ANALYSIS_HEADING = "## Where MosT wins and where it loses"


def quadratic(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    means = 3.0 * torch.randn(M, DIM, generator=g, dtype=torch.float64)
    groups = torch.arange(n) % M
    centres = means[groups] + 0.5 * torch.randn(n, DIM, generator=g, dtype=torch.float64)

    def fn(theta):
        return ((theta - centres) ** 2).sum(-1)

    def cluster_minimiser(members):  # argmin of sum_{i in members} ||theta - c_i||^2
        return centres[members].mean(0)

    problem = most.Problem.from_function(fn, dim=DIM, n_objectives=n)
    return problem, problem, None, cluster_minimiser


def regression(n: int, seed: int):
    data = mixed_regression(n_objectives=n, n_groups=M, dim=DIM, samples=30, noise=0.5, individual=0.1, seed=seed)
    X, y = data.X["train"].double(), data.y["train"].double()

    def mse(theta):
        return ((X @ theta - y) ** 2).mean(-1)

    def ridge(theta):
        return mse(theta) + 0.5 * RIDGE * theta.pow(2).sum()

    def cluster_minimiser(members):  # pooled least squares of the members (no ridge)
        Xs, ys = X[members].reshape(-1, DIM), y[members].reshape(-1)
        return torch.linalg.lstsq(Xs, ys.unsqueeze(-1)).solution.squeeze(-1)

    plain = most.Problem.from_function(mse, dim=DIM, n_objectives=n)
    solved = most.Problem.from_function(ridge, dim=DIM, n_objectives=n)
    return solved, plain, data.betas.double(), cluster_minimiser


def off_centre(params, losses, cluster_minimiser) -> float:
    """Mean over non-empty models of ||theta_k - argmin sum_{i served by k} L_i||."""
    served = losses.argmin(1)
    gaps = [float((params[k] - cluster_minimiser(served == k)).norm()) for k in range(params.shape[0])
            if bool((served == k).any())]
    return sum(gaps) / len(gaps)


SETTINGS = {
    "quadratic-n100": lambda seed: quadratic(100, seed),
    "quadratic-n1000": lambda seed: quadratic(1000, seed),
    "regression-n1000": lambda seed: regression(1000, seed),
}


def methods(rounds: int, lr: float, seed: int, tau: float, lloyd_steps: int, check: bool):
    common = dict(n_models=M, lr=lr, seed=seed)
    extra = {}
    if check:  # cheap at n = 100: is MosT's gap a matter of budget?
        extra[f"MosT, {CHECK_FACTOR}× rounds (convergence check; not the common budget)"] = most.MosT(
            rounds=CHECK_FACTOR * rounds, **common)
    return {
        "MosT (default)": most.MosT(rounds=rounds, **common),
        f"MosT + R(Γ) (τ = {tau:g})": most.MosT(rounds=rounds, diversity=tau, **common),
        "MosT, worst variant (smooth max)": most.variants.apply("worst", most.MosT(rounds=rounds, **common)),
        "MosT (balanced, min-norm: the earlier default)": most.MosT(
            rounds=rounds, marginals=most.Uniform(), combiner=most.MinNorm(), seeding=None, reseed=None, **common),
        "MosT (paper)": most.variants.apply("paper", most.MosT(rounds=rounds, **common)),
        "TCH-Set": TCHSet(rounds=rounds, **common),
        "STCH-Set (μ = 0.1)": STCHSet(rounds=rounds, smoothing=0.1, **common),
        "SoM (gradient)": SumOfMinimum(rounds=rounds, algorithm="gradient", **common),
        f"SoM (Lloyd, k-means++ seeding, K = {lloyd_steps})": SumOfMinimum(
            rounds=max(1, rounds // lloyd_steps), inner_steps=lloyd_steps, algorithm="lloyd", **common),
        "Linearization": most.Linearization(rounds=rounds, **common),
        "MGDA": most.MGDA(rounds=rounds, **common),
        **extra,
    }


def fmt(values, digits=3):
    if not values:
        return "–"
    mean = statistics.mean(values)
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{mean:.{digits}g} ± {std:.2g}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=50, help="gradient steps per model (same for every method)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--tau", type=float, default=1.0, help="diversity of the 'MosT + R(Γ)' row")
    parser.add_argument("--lloyd-steps", type=int, default=10, help="SoM (Lloyd): gradient steps per Lloyd round")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)

    rows: dict[str, dict[str, dict[str, list[float]]]] = {}
    start = time.perf_counter()
    for setting in args.settings:
        rows[setting] = {}
        for seed in range(args.seeds):
            solved, plain, truth, cluster_minimiser = SETTINGS[setting](seed)
            check = solved.n_objectives <= 100
            for name, method in methods(args.rounds, args.lr, seed, args.tau, args.lloyd_steps, check).items():
                tic = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", most.ConvergenceWarning)
                    result = method.fit(solved)
                secs = time.perf_counter() - tic
                losses = plain.loss_matrix(result.params)
                r = rows[setting].setdefault(
                    name, {"worst": [], "average": [], "recovery": [], "off_centre": [], "seconds": []})
                r["worst"].append(worst_objective(losses))
                r["average"].append(average_objective(losses))
                r["off_centre"].append(off_centre(result.params, losses, cluster_minimiser))
                if truth is not None:
                    r["recovery"].append(recovery_error(result.params, truth))
                r["seconds"].append(secs)
                print(f"{setting:<17} seed {seed} {name:<45} worst {r['worst'][-1]:9.4f}  avg {r['average'][-1]:8.4f}"
                      + (f"  rec {r['recovery'][-1]:.4f}" if truth is not None else "")
                      + f"  off {r['off_centre'][-1]:.3f}  {secs:6.1f}s",
                      file=sys.stderr, flush=True)
    total = time.perf_counter() - start

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": " ".join(["python", "benchmarks/few_for_many.py"] + (argv if argv is not None else sys.argv[1:])),
        "seeds": args.seeds, "rounds": args.rounds, "lr": args.lr, "tau": args.tau, "lloyd_steps": args.lloyd_steps,
        "m": M, "dim": DIM, "ridge": RIDGE, "threads": args.threads, "total_seconds": total,
        "torch": torch.__version__, "python": platform.python_version(),
    }
    (args.out / "few_for_many.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))

    lines = [
        "# Few for many: MosT against TCH-Set, STCH-Set and sum-of-minimum (m = 5 models)",
        "",
        f"Command: `{meta['command']}` ({total / 60:.1f} min in all; raw numbers in `few_for_many.json`).",
        f"Machine: 2 CPU cores shared with other jobs, {args.threads} torch thread(s), torch {torch.__version__}, "
        "float64. Times are wall-clock seconds of one `fit` and include contention from other jobs.",
        "",
        "**Budget.** Every method gets the same number of gradient steps per model, "
        f"{args.rounds} (rounds × inner steps), and the same step size lr = {args.lr} (SGD), "
        "chosen once from the smoothness of the objectives (L = 2 for the quadratics; "
        "≈ 5 for the largest per-objective curvature of the regression) and not tuned on these numbers. "
        f"All methods use K = 1 inner step and {args.rounds} rounds, except SoM (Lloyd): "
        f"{max(1, args.rounds // args.lloyd_steps)} Lloyd rounds × K = {args.lloyd_steps} re-fit steps, "
        "plus its seeding (m × 100 single-objective gradient steps, lr = 0.1, counted in its time). "
        "MosT (default): exact transport with load bounds (each model serves at least one objective), "
        "majority-share weighting, the mean combiner, greedy k-means++ starts (m draws of 2 + ⌊ln m⌋ candidates, "
        f"each {min(30, max(1, int(0.4 * args.rounds / 3)))} single-objective steps: at most 40 % of the run's, "
        "counted in its time) and re-seeding after every 20 rounds up to 60 % "
        f"of them (20 single-objective steps per candidate); τ = 0, and *MosT + R(Γ)* sets τ = {args.tau:g}. "
        "*MosT, worst variant* is `most.variants.apply(\"worst\", ...)` of the default: the `SmoothMax` combiner, "
        "each model descends a smooth maximum of its objectives' losses (temperature 0.1 × their spread, chosen "
        "on seeds 10–14 of these generators, not on the table's seeds 0–2) instead of their mean. "
        "*MosT (balanced, min-norm)* is the earlier default (uniform marginals, min-norm combiner, the "
        "problem's starts); *MosT (paper)* is `most.variants.apply(\"paper\", ...)`: Γ-weighted min-norm with "
        "the α/β curriculum. TCH/STCH-Set: λ = 1, z* = 0. "
        "Linearization: one Dirichlet(1) preference per model. MGDA: m independent runs on all n objectives.",
        "",
        "**Settings.** *quadratic-n{100,1000}*: L_i(θ) = ‖θ − c_i‖² in d = 10, centres c_i = μ_g + 0.5·N(0, I) "
        "in 5 equal groups with means μ_g ~ 3·N(0, I). *regression-n1000*: `most.problems.mixed_regression` "
        "(n = 1000 objectives, 5 ground-truth models, d = 10, 30 samples each, noise 0.5, individual "
        f"perturbation 0.1); every method minimises MSE + (ρ/2)‖θ‖² with the SoM ridge ρ = {RIDGE:g}. "
        "Metrics are computed without the ridge term: *worst* = max_i min_k L_i(θ_k), *average* = "
        "mean_i min_k L_i(θ_k) (both on the training losses that were optimised), *recovery* = "
        "`most.metrics.recovery_error` (mean distance from each true model to its optimally matched "
        "estimate), *off-centre* = mean over models of the distance from θ_k to the minimiser of the "
        "summed loss of the objectives it serves (best-model clusters; the centroid of their centres for the "
        "quadratics, their pooled least-squares fit for the regression), 0 for an exact Lloyd fixed point. "
        "Mean ± std over seeds "
        f"0–{args.seeds - 1} (the seed draws the data and the start).",
        "",
        "`Problem.jacobian` takes forward-mode Jacobians here (d = 10 < n): reverse mode needs n = 1000 "
        "backward passes per model and took ~1 s per Jacobian on the regression problem.",
        "",
        "The federated settings are in the section *Federated clients as objectives* below (`most bench "
        "federated`); they use the federated `MosT` and its own default (share bounds with a price; see "
        "`docs/methods/departures.md`).",
        "",
    ]
    for setting, res in rows.items():
        has_rec = any(r["recovery"] for r in res.values())
        lines += [f"## {setting}", ""]
        header = "| method | worst objective | average objective |" + (" recovery error |" if has_rec else "") + \
            " off-centre | seconds / run |"
        lines += [header, "|---" * (header.count("|") - 1) + "|"]
        for name, r in res.items():
            lines.append(f"| {name} | {fmt(r['worst'])} | {fmt(r['average'])} |"
                         + (f" {fmt(r['recovery'])} |" if has_rec else "")
                         + f" {fmt(r['off_centre'])} | {fmt(r['seconds'], 2)} |")
        lines.append("")
    # The analysis below the tables is written by hand from the numbers; a rerun keeps it
    # (re-read it against the new tables) instead of overwriting it.
    md = args.out / "few_for_many.md"
    analysis = f"{ANALYSIS_HEADING}\n\n(to be written from the numbers above)\n"
    if md.exists():  # the federated rows (most bench federated) and the analysis stay
        text = md.read_text()
        kept = [text.index(h) for h in (FEDERATED_HEADING, ANALYSIS_HEADING) if h in text]
        if kept:
            analysis = text[min(kept):]
    md.write_text("\n".join(lines) + "\n" + analysis)


if __name__ == "__main__":
    main()
