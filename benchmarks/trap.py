"""Measures the split-objective trap of the literal Gamma-weighted min-norm step.

Problem: 4 well-separated clusters of 8 quadratic objectives ||theta - c_i||^2 (the
Pareto set of a cluster is the convex hull of its centres), m = 4 models, 300 rounds,
lr = 0.05. For each run we report the largest distance, over clusters, from a cluster's
hull to the nearest model ("stuck distance"; 0 when every cluster has a model inside its
hull), and how many clusters end with a model of their own within 0.05 of the hull.

    python benchmarks/trap.py --seeds 5 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls

import most
from most.problems import quadratic_clusters


def hull_distance(point, vertices):
    V = vertices.double().numpy().T
    A = np.vstack([V, 1e4 * np.ones((1, V.shape[1]))])
    mu, _ = nnls(A, np.concatenate([point.double().numpy(), [1e4]]))
    return float(np.linalg.norm(V @ mu - point.double().numpy()))


def evaluate(problem, params):
    centres, labels = problem.metadata["centres"], problem.metadata["labels"]
    dists = np.array([[hull_distance(t, centres[labels == k]) for t in params] for k in range(int(labels.max()) + 1)])
    nearest = dists.min(1)
    owners = dists.argmin(1)
    ok = sum(1 for k in range(len(nearest)) if nearest[k] <= 0.05 and list(owners).count(owners[k]) == 1)
    return float(nearest.max()), ok


CONFIGS = {
    # name: (weighting, transport, diversity, marginals)
    "literal, exact": ("literal", "exact", 0.0, "uniform"),
    "literal, sinkhorn": ("literal", "sinkhorn", 0.0, "uniform"),
    "literal, ipot": ("literal", "ipot", 0.0, "uniform"),
    "literal, ipot, tau=1": ("literal", "ipot", 1.0, "uniform"),
    "literal, ipot, tau=5": ("literal", "ipot", 5.0, "uniform"),
    "paper (literal + curriculum), exact": ("literal", "exact", 0.0, "curriculum"),
    "default, exact": ("default", "exact", 0.0, "uniform"),
    "default, sinkhorn": ("default", "sinkhorn", 0.0, "uniform"),
    "default, ipot": ("default", "ipot", 0.0, "uniform"),
    "default, ipot, tau=5": ("default", "ipot", 5.0, "uniform"),
    "default + curriculum, exact": ("default", "exact", 0.0, "curriculum"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    rows = {}
    for name, (weighting, method, tau, marginals) in CONFIGS.items():
        stuck, ok, secs = [], [], []
        for seed in range(args.seeds):
            problem = quadratic_clusters(4, 8, dim=2, separation=10.0, spread=1.0, seed=seed)
            cfg = most.MosT(
                n_models=4, rounds=args.rounds, lr=0.05, seed=seed, transport=method, diversity=tau,
                weighting=most.GammaWeights() if weighting == "literal" else most.MajorityShare(),
                marginals=most.Curriculum() if marginals == "curriculum" else most.Uniform(),
            )
            tic = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", most.ConvergenceWarning)
                result = cfg.fit(problem)
            secs.append(time.perf_counter() - tic)
            s, k = evaluate(problem, result.params)
            stuck.append(s)
            ok.append(k)
        rows[name] = {"stuck_distance": stuck, "clusters_ok": ok, "seconds": secs}
        print(f"{name:<40} stuck {statistics.mean(stuck):6.2f} ± {statistics.pstdev(stuck):5.2f}   "
              f"clusters ok {statistics.mean(ok):.2f}/4   {statistics.mean(secs):.2f}s", file=sys.stderr)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trap.json").write_text(json.dumps(rows, indent=2))
    cmd = f"python benchmarks/trap.py --seeds {args.seeds} --rounds {args.rounds}"
    lines = [
        "# The split-objective trap: literal Γ-weighting vs. the default majority-share weighting",
        "",
        f"Command: `{cmd}` (results also in `trap.json`). Machine: 2 CPU cores, torch {torch.__version__}.",
        "",
        "4 clusters × 8 quadratic objectives ‖θ − c_i‖² (neighbouring cluster means 10 apart, centres within ±1),",
        f"m = 4 models from N(0, I), {args.rounds} rounds, lr = 0.05, K = 1, seeds 0–{args.seeds - 1}.",
        "*stuck* = max over clusters of the distance from the cluster's convex hull (its Pareto set) to the",
        "nearest model (0 = every cluster has a model in its hull); *clusters ok* = clusters with a model of",
        "their own within 0.05 of the hull. Mean ± std over seeds.",
        "",
        "| configuration | stuck distance | clusters ok (of 4) | seconds / run |",
        "|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {statistics.mean(r['stuck_distance']):.2f} ± {statistics.pstdev(r['stuck_distance']):.2f} "
            f"| {statistics.mean(r['clusters_ok']):.2f} | {statistics.mean(r['seconds']):.2f} |"
        )
    (args.out / "trap.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
