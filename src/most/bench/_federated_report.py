"""The report of ``most bench federated`` (:mod:`most.bench.federated`): the summaries over seeds
(:func:`add_summaries`), the table (:func:`table_markdown`, :func:`paired_cell`, the note on the
server-step grids: :func:`method_grids`, :func:`grid_edge_note`) and the figures
(:func:`draw_figures`), from the results dict the runs make. :mod:`most.bench._merge` and
:mod:`most.bench._compare` use them on stored results folders too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..federated import evaluation as ev
from ..federated import figures
from ..federated import methods as F


#: the main methods, which the per-client and Γ figures draw first (:func:`main_methods`)
_MAIN = ("MosT", "MosT (paper)", "IFCA", "FedAvg", "MGDA", "Linearization")
#: the accuracies of a run's record (``most.bench.federated``'s runs), each client on its best model on validation
KEYS = ("mean", "worst20", "worst40", "worst60", "worst80", "oracle", "prediction_kl")
#: the same accuracies when each client picks the model with the lowest loss on its training and
#: validation data pooled (``FederatedResult.loss_choice``) instead of the best on validation
LOSS_PICK_KEYS = tuple(f"{k}_loss_pick" for k in KEYS[:5])
#: accuracy over all test samples (FedProx's metric), with either pick
POOLED_KEYS = ("pooled", "pooled_loss_pick")
#: where the data has planted groups: the adjusted Rand index of the clients' models against them
#: under either pick, and of the method's own last assignment (``group_ari_plan``: its plan's
#: largest share, its cluster, its mixture's largest weight), where it has one
GROUP_KEYS = ("group_ari", "group_ari_loss_pick", "group_ari_plan")
#: the pick of the methods that leave it to validation (FederatedMethod.pick)
_VALIDATION_PICK = F.FederatedMethod.pick
#: what the table says of each pick rule a table can be scored under (:mod:`most.bench._rescore`)
PICK_RULE_WORDS = {
    "validation": "its most accurate model on validation (the first of equally accurate ones: the paper's protocol; "
                  "a client without validation samples, its lowest loss on its training data)",
    "validation-then-loss": "its most accurate model on validation, equally accurate ones told apart by the lowest "
                            "loss on its training and validation data pooled",
    "loss": "its model with the lowest loss on its training and validation data pooled",
}


def add_summaries(results: dict) -> None:
    """Adds to ``results`` each method's mean and std over seeds of every key its runs hold, and
    MosT's paired difference to every other method (``paired_vs_most``, and
    ``paired_vs_most_loss_pick`` under the loss pick), where MosT's runs have the key.

    Args:
        results: the results dict of :func:`most.bench.federated.run_benchmark`, changed in place.
    """
    for entry in results["methods"].values():
        runs = entry["runs"]
        for k in KEYS + LOSS_PICK_KEYS + POOLED_KEYS + GROUP_KEYS + ("seconds",):
            if not all(k in r for r in runs):  # results written before the loss pick existed
                continue
            v = np.array([r[k] for r in runs], dtype=float)
            entry[k] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}
    if "MosT" in results["methods"]:
        for key, out in (("mean", "paired_vs_most"), ("mean_loss_pick", "paired_vs_most_loss_pick")):
            if not all(key in r for r in results["methods"]["MosT"]["runs"]):
                continue
            most_acc = [r[key] for r in results["methods"]["MosT"]["runs"]]
            results[out] = {}
            for name, entry in results["methods"].items():
                if not all(key in r for r in entry["runs"]):  # not measured for this method
                    continue
                other = [r[key] for r in entry["runs"]]
                if name != "MosT" and len(most_acc) >= 2 and np.isfinite(most_acc + other).all():
                    results[out][name] = ev.paired_difference(most_acc, other)


def table_markdown(results: dict) -> str:
    """Accuracy (%) mean ± std over seeds, each client on its best model on validation (the
    paper's protocol), with MosT minus the method as a paired 95 % interval; then, where the
    results have them, the mean and the paired difference when each client picks its model by
    the lowest loss on its training and validation data (``FederatedResult.loss_choice``); and,
    for clients of unequal sizes, the accuracy over all test samples (FedProx's metric) with either
    pick."""
    loss_pick = any("mean_loss_pick" in e for e in results["methods"].values())
    # Accuracy over all test samples, where it differs from the mean over clients (unequal sizes).
    pooled = any("pooled" in r and abs(r["pooled"] - r["mean"]) > 1e-9
                 for e in results["methods"].values() for r in e["runs"] if math.isfinite(r.get("mean", math.nan)))
    head = ("| method | mean | worst 20 % | worst 40 % | worst 60 % | worst 80 % | oracle | prediction KL | "
            "MosT − method (95 % CI) |")
    if loss_pick:
        head += " mean, loss pick | MosT − method, loss pick |"
    if pooled:
        head += " per sample | per sample, loss pick |"
    groups = any("group_ari" in e for e in results["methods"].values())
    held = any("group_ari_plan" in e for e in results["methods"].values())
    if groups:
        head += " groups found (ARI) | ARI ≥ 0.9 |"
    if held:
        head += " groups held: ARI ≥ 0.9 |"
    lines = [f"**{results['label']}**", "", head + " s / run |", "|---" * head.count("|") + "|"]
    for name, e in results["methods"].items():
        # "–" where a summary is missing too: a join of runs of which only some have the key
        # (most.bench._merge.resummarise) summarises it for none
        cells = [f"{100 * e[k]['mean']:.2f} ± {100 * e[k]['std']:.2f}" if k in e and math.isfinite(e[k]["mean"])
                 else "–" for k in KEYS[:-1]]
        cells.append(f"{e['prediction_kl']['mean']:.3g}"
                     if "prediction_kl" in e and math.isfinite(e["prediction_kl"]["mean"]) else "–")
        cells.append(paired_cell(results.get("paired_vs_most", {}).get(name)))
        if loss_pick:
            cells.append(f"{100 * e['mean_loss_pick']['mean']:.2f} ± {100 * e['mean_loss_pick']['std']:.2f}"
                         if "mean_loss_pick" in e else "–")
            cells.append(paired_cell(results.get("paired_vs_most_loss_pick", {}).get(name)))
        if pooled:
            cells += [f"{100 * e[k]['mean']:.2f} ± {100 * e[k]['std']:.2f}" if k in e else "–" for k in POOLED_KEYS]
        if groups:
            aris = [r["group_ari"] for r in e["runs"] if "group_ari" in r]
            cells.append(f"{e['group_ari']['mean']:.2f} ± {e['group_ari']['std']:.2f}" if "group_ari" in e else "–")
            cells.append(f"{sum(a >= 0.9 for a in aris)} of {len(aris)}" if aris else "–")
        if held:
            kept = [r["group_ari_plan"] for r in e["runs"]] if "group_ari_plan" in e else []
            cells.append(f"{sum(a >= 0.9 for a in kept)} of {len(kept)}" if kept else "–")
        cells.append(f"{e['seconds']['mean']:.1f}" if "seconds" in e else "–")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    picks = results.get("picks") or {}
    other = {name: pick for name, pick in picks.items() if name in results["methods"] and pick != _VALIDATION_PICK}
    rule = results.get("pick_rule", "validation")
    if rule != "validation":  # scored again from the runs' matrices (most.bench._rescore)
        lines += ["", f"Scored again under the pick rule {rule!r} (`federated_tools.py rescore`): each client takes "
                  f"{PICK_RULE_WORDS[rule]}" + (", except: " if other else ".")
                  + "; ".join(f"{name}, {pick}" for name, pick in other.items()) + ("." if other else "")
                  + " The server steps are those chosen on validation accuracy."]
    elif other:
        lines += ["", "Each client is scored on its best model on validation, except: "
                  + "; ".join(f"{name}, {pick}" for name, pick in other.items()) + "."]
    if groups:
        lines += ["", "Groups found: the adjusted Rand index of the clients' picked models against the planted groups "
                  "(mean ± std over seeds, and the seeds at 0.9 or more)."
                  + (" Groups held: the seeds on which the method's own last assignment (each client's "
                     "largest share in the last plan, its cluster, group or largest mixture weight) reaches 0.9, "
                     "whatever model the client then picks." if held else "")]
    lines += grid_edge_note(results)
    failed = [(name, r) for name, e in results["methods"].items() for r in e["runs"] if "failed" in r]
    if failed:  # every candidate of these runs failed: say why their cells are nan
        lines += ["", "Runs where every candidate failed (– above):"]
        lines += [f"- {name}, seed {r['seed']}: {r['failed']}" for name, r in failed]
    return "\n".join(lines)


def method_grids(results: dict) -> dict[str, list[float]]:
    """The server steps each method's runs were chosen from: the table's grid
    (``config["server_lrs"]``), unless a later extension covered only some methods
    (``benchmarks/federated_tools.py merge``), which records each method's grid in
    ``config["server_lrs_by_method"]``. Each grid in ascending order (a set of steps, whatever order
    the runs or joins listed them in)."""
    config = results["config"]
    by_method = config.get("server_lrs_by_method") or {}
    return {name: sorted(by_method.get(name, config.get("server_lrs") or [])) for name in results["methods"]}


def grid_edge_note(results: dict) -> list[str]:
    """A note when the server step chosen on validation is the largest of its method's grid in half
    the runs or more, or in every run of a method: the best step may lie beyond the grid (extend
    it; ``benchmarks/federated_tools.py merge`` joins a later run). Where the methods' grids differ, a
    line first says which method was tuned over which steps."""
    grids = method_grids(results)
    lines = []
    if len({tuple(g) for g in grids.values()}) > 1:
        groups: dict[tuple, list[str]] = {}
        for name, grid in grids.items():
            groups.setdefault(tuple(grid), []).append(name)
        lines += ["", "The server-step grids differ by method (joined later over other steps: "
                  "benchmarks/federated_tools.py merge): "
                  + "; ".join(f"{', '.join(names)} over {', '.join(f'{v:g}' for v in grid)}"
                              for grid, names in groups.items()) + "."]
    chosen = {name: [r["server_lr"] for r in e["runs"] if "failed" not in r] for name, e in results["methods"].items()}
    chosen = {name: steps for name, steps in chosen.items() if steps and len(grids[name]) > 1}
    if not chosen:
        return lines
    tops = {name: max(grids[name]) for name in chosen}
    runs = sum(len(steps) for steps in chosen.values())
    at_edge = sum(steps.count(tops[name]) for name, steps in chosen.items())
    methods = [name for name, steps in chosen.items() if steps.count(tops[name]) == len(steps)]
    if 2 * at_edge < runs and not methods:
        return lines
    if len({tuple(grids[name]) for name in chosen}) == 1:
        grid = grids[next(iter(chosen))]
        where = f"the grid's largest ({max(grid):g} of {', '.join(f'{v:g}' for v in grid)})"
    else:
        where = "the largest of its method's grid"
    return lines + ["", f"The server step chosen on validation is {where} in {at_edge} of {runs} runs"
                    + (f" (every run of {', '.join(methods)})" if methods else "")
                    + ": the best step may lie beyond the grid. Extend it with `--server-lr`; "
                    "`benchmarks/federated_tools.py merge` joins a run over the new steps to these results."]


def paired_cell(p: dict | None) -> str:
    """A table cell of a paired difference (:func:`most.federated.evaluation.paired_difference`):
    the mean and the 95 % interval in points, ✓ where MosT is significantly better, ✗ where worse,
    and – for none."""
    if p is None:
        return "–"
    mark = " ✓" if p["significant"] and p["mean"] > 0 else (" ✗" if p["significant"] else "")
    return f"{100 * p['mean']:+.2f} [{100 * p['low']:+.2f}, {100 * p['high']:+.2f}]{mark}"


def main_methods(names: list[str], k: int = 6) -> list[str]:
    """The at most ``k`` methods the per-client profile (``per_client.png``) and the Γ figure
    (``gamma.png``) draw, so that they stay readable: the main ones (``_MAIN``) first, then the
    table's others in table order, so that a table of mostly other methods (the few-for-many
    ones, say) still compares MosT with them."""
    return ([n for n in names if n in _MAIN] + [n for n in names if n not in _MAIN])[:k]


def draw_figures(results: dict, out: Path) -> list[str]:
    """The figures of a results folder (their file names, in ``out``), from what the runs hold.

    * ``per_client.png`` -- each method's per-client test accuracy (%) sorted worst to best,
      mean over seeds at each rank with a ± std band (:func:`most.federated.figures.profile`);
    * ``accuracy_curves.png``, ``loss_curves.png`` -- validation accuracy (%) and training loss
      per round, seed 0 (where the runs keep their curves), at the rounds as stored (0-based, as
      in ``gamma.png``);
    * ``worst_k.png`` -- worst-k % accuracy, mean ± std over seeds;
    * ``assignment_stack.png`` -- MosT's clients per largest-share model over the rounds, only
      where those counts change (under uniform capacities they are a constant split);
    * ``gamma.png`` -- Γ sparsity, cumulative drift and the share of clients changing model per
      round, for (at most six of) the methods with two or more plans.

    Compact results (runs without the curves, keeping only the last plan) give the first and
    the fourth; a figure the runs lack the data for is left out. A method keeps one colour, line
    style and marker in every figure: its place in the table's full list of methods
    (:func:`most.plots.style_index`), whichever methods a figure leaves out.
    """
    methods = results["methods"]
    first = {name: e["runs"][0] for name, e in methods.items() if "failed" not in e["runs"][0]}
    if not first:  # every method diverged on seed 0: the table says so, there is nothing to draw
        return []
    import matplotlib.pyplot as plt  # after `figures`, which sets the Agg backend

    from ..plots import measured_rows, save_figure

    written = []
    label = results["label"]
    index = {name: i for i, name in enumerate(methods)}  # one colour per method in every figure

    def save(fig, name):
        save_figure(fig, out / name)
        plt.close(fig)  # a long-lived process (a notebook, a merge of many folders) keeps no figure open
        written.append(name)

    per_client: dict[str, Any] = {}  # [seeds, n] per method
    for n in main_methods(list(first)):
        # clients without a test sample have no accuracy (NaN): left out
        rows = measured_rows(r["per_client"] for r in methods[n]["runs"] if "failed" not in r and r.get("per_client"))
        if rows:
            per_client[n] = rows
    if per_client:
        seeds = max(len(v) for v in per_client.values())
        save(figures.profile(per_client, ylabel="test accuracy (%)", percent=True,
                             xlabel="clients ranked worst → best (percentile)",
                             title=f"{label}: per-client test accuracy" + (f", {seeds} seeds" if seeds > 1 else ""),
                             method_index=index),
             "per_client.png")
    val = {n: r["val_curve"] for n, r in first.items() if r.get("val_curve")}
    if val:
        save(figures.curves({n: [100 * v for _, v in c] for n, c in val.items()},
                            x={n: [t for t, _ in c] for n, c in val.items()},  # the rounds as stored
                            ylabel="validation accuracy (%)", method_index=index,
                            title=f"{label}: best-model validation accuracy (seed {_seed(first)})"),
             "accuracy_curves.png")
    loss = {n: r["loss_curve"] for n, r in first.items() if r.get("loss_curve")}
    if loss:
        save(figures.curves(loss, ylabel="best-model training loss", log=True, method_index=index,
                            title=f"{label}: training loss (seed {_seed(first)})"), "loss_curves.png")
    table = {n: {k: e[k] for k in figures.WORST_KEYS} for n, e in methods.items()  # {"mean", "std"}: error bars
             if all(k in e for k in figures.WORST_KEYS) and np.isfinite((e.get("mean") or {}).get("mean", 0.0))}
    if table:
        save(figures.worst_k_bars(table, title=f"{label}: worst-k % clients", method_index=index), "worst_k.png")
    with_plans = {n: r for n, r in first.items() if len(r.get("plans") or []) >= 2}
    # MosT's, else the table's first MosT variant's (a variant run alone, e.g. "MosT (update split)")
    stacked = "MosT" if "MosT" in with_plans else next((n for n in with_plans if n.startswith("MosT")), None)
    if stacked is not None and figures.counts_change(with_plans[stacked]["plans"]):
        m = results["config"]["n_models"]
        one_hot = [np.eye(m)[np.asarray(p)] for p in with_plans[stacked]["plans"]]
        save(figures.assignment_stack(one_hot, rounds=with_plans[stacked].get("plan_rounds"),  # kept plans' rounds
                                      title=f"{label}: {stacked}, clients per model (seed {_seed(first)})"),
             "assignment_stack.png")
    gamma = {n: with_plans[n] for n in main_methods(list(with_plans))  # at most six: readable
             if with_plans[n].get("sparsity") and with_plans[n].get("drift") is not None}
    if gamma:
        rounds = (results["config"].get("protocol") or {}).get("rounds")
        # the plans are those of the last rounds (none during a warm-up): line them up on the rounds
        start = {n: max(0, rounds - len(r["plans"])) for n, r in gamma.items()} if isinstance(rounds, int) else None
        save(figures.sparsity_drift({n: r["sparsity"] for n, r in gamma.items()},
                                    {n: r["drift"] for n, r in gamma.items()}, cumulative=True,
                                    switches={n: figures.switch_share(r["plans"])
                                              for n, r in gamma.items()},
                                    start=start, title=f"{label}: Γ over the rounds (seed {_seed(first)})",
                                    method_index=index),
             "gamma.png")
    return written


def _seed(first: dict) -> int:
    """The seed of the runs the per-round figures draw (the first of each method)."""
    return next(iter(first.values())).get("seed", 0)
