"""Reports on results folders of ``most bench federated`` (``benchmarks/federated_tools.py compare``).

* :func:`compare`: one method (a variant of MosT, say), run alone with the settings and seeds
  of a main table, against every method of that table, seed by seed: its validation accuracy
  against MosT's and the paired difference, with a 95 % t interval, under the paper's pick and
  the loss pick (``or_most``: the per-seed choice on validation between the variant and MosT);
* :func:`paired_rows`: those rows for any per-seed runs (the capacity probe uses them too);
* :func:`groups_report`: how well each method's final plan recovers the known client groups of
  rotated Fashion-MNIST (``--rotations r``), under the best matching of models to groups
  (:func:`recovered`);
* :func:`add_groups_held`: the table's "groups held" (the adjusted Rand index of each method's own
  last assignment against the planted groups) added to results written before it was recorded.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import federated as fb
from . import mean_std
from ..federated import evaluation as ev
from ..federated.methods import FederatedMethod
from ._merge import FREE as MERGE_FREE, align_data_path, pick_rule, pick_rule_mismatch, settings

__all__ = ["CompareError", "FREE", "add_groups_held", "compare", "groups_report", "paired_rows", "planted_groups",
           "recovered"]

#: Settings that may differ between the variant's folder and the main table: those a merge allows,
#: and the server-step grid (checked against the main table's MosT grid instead).
FREE = MERGE_FREE + ("server_lrs",)


class CompareError(ValueError):
    """Folders that cannot be compared (the message says why)."""


def paired_rows(name: str, variant: dict[int, dict], methods: dict, seeds: list[int], *,
                pick: str = "validation") -> list[str]:
    """Markdown rows ``| method | name − method, paper's pick | loss pick |`` for every method of
    ``methods`` (a results file's ``"methods"``) run on all ``seeds``; ``variant`` maps seed -> run.
    ``pick``: the rule the runs' accuracies were scored under (a rescored folder's ``pick_rule``),
    named in the first column's header."""
    scored = "paper's pick" if pick == "validation" else f"pick rule {pick!r}"
    lines = [f"| {name} − method | {scored} (95 % CI) | loss pick (95 % CI) |", "|---|---|---|"]
    for other, entry in methods.items():
        runs = {r["seed"]: r for r in entry["runs"]}
        if other == name or not all(s in runs for s in seeds):
            continue
        cells = []
        for key in ("mean", "mean_loss_pick"):
            if len(seeds) < 2 or not all(key in runs[s] and key in variant[s] for s in seeds):
                cells.append("–")  # no interval from one seed, or a run older than the loss pick
                continue
            cells.append(fb.paired_cell(ev.paired_difference([variant[s][key] for s in seeds],
                                                              [runs[s][key] for s in seeds])))
        lines.append(f"| {other} | " + " | ".join(cells) + " |")
    return lines


def compare(results: dict, main: dict, name: str, *, or_most: bool = False) -> str:
    """``compare.md`` for the variant ``name`` of ``results`` against the main table ``main``; with
    ``or_most``, for the per-seed choice on validation between the variant and the table's MosT."""
    if name not in results["methods"]:
        raise CompareError(f"the variant's folder has no method {name!r}; it has {sorted(results['methods'])}")
    mismatch = pick_rule_mismatch(main, results, "the variant's folder", "the main table")
    if mismatch:  # the paired differences would set one protocol's accuracies against another's
        raise CompareError(mismatch)
    mine, theirs = settings(results["config"], FREE), settings(main["config"], FREE)
    try:
        align_data_path(theirs, mine, main, results, "the variant's folder", "the main table")  # the same data from two paths
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    if mine != theirs:
        diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise CompareError(f"the two folders were run with different settings ({', '.join(diff)}): not comparable")
    grid = main["config"].get("server_lrs_by_method", {}).get("MosT", main["config"]["server_lrs"])
    if "MosT" in main["methods"] and sorted(results["config"]["server_lrs"]) != sorted(grid):
        raise CompareError(f"the variant's server steps {results['config']['server_lrs']} are not the main "
                           f"table's MosT grid {grid}")
    variant = {r["seed"]: r for r in results["methods"][name]["runs"]}
    seeds = sorted(variant)
    missing = [s for s in seeds if all(s not in {r["seed"] for r in e["runs"]} for e in main["methods"].values())]
    if missing:
        raise CompareError(f"the main table has no run for seeds {missing}")
    if or_most:
        return _compare_or_most(results, main, name, variant, seeds)
    lines = [f"# {name} against the main table ({results.get('label', '')}, seeds {seeds})", ""]
    if "MosT" in main["methods"]:
        most = {r["seed"]: r for r in main["methods"]["MosT"]["runs"]}
        if all(s in most for s in seeds):
            v = np.array([variant[s]["val_accuracy"] for s in seeds])
            m = np.array([most[s]["val_accuracy"] for s in seeds])
            lines += ["Validation accuracy at the chosen server step (%):", "",
                      "| seed | " + " | ".join(map(str, seeds)) + " | mean |",
                      "|---|" + "---|" * (len(seeds) + 1),
                      f"| {name} | " + " | ".join(f"{100 * x:.2f}" for x in v) + f" | {100 * v.mean():.2f} |",
                      "| MosT | " + " | ".join(f"{100 * x:.2f}" for x in m) + f" | {100 * m.mean():.2f} |",
                      "", f"Chosen server steps: {name} " + ", ".join(f"{variant[s]['server_lr']:g}" for s in seeds)
                      + "; MosT " + ", ".join(f"{most[s]['server_lr']:g}" for s in seeds) + ".", ""]
    summary = results["methods"][name]  # the benchmark's own mean ± std over these seeds
    lines += [f"Test accuracy: {name} {_mean_std(summary, 'mean')}, "
              f"loss pick {_mean_std(summary, 'mean_loss_pick')}.", ""]
    lines += paired_rows(name, variant, main["methods"], seeds, pick=pick_rule(main))
    return "\n".join(lines) + "\n"


def _compare_or_most(results: dict, main: dict, name: str, variant: dict[int, dict], seeds: list[int]) -> str:
    most = {r["seed"]: r for r in main["methods"].get("MosT", {"runs": []})["runs"]}
    if any(s not in most for s in seeds):
        raise CompareError(f"--or-most chooses between {name} and the main table's MosT, which has no run for "
                           f"seeds {[s for s in seeds if s not in most]}")
    chosen = {s: variant[s] if variant[s]["val_accuracy"] > most[s]["val_accuracy"] else most[s] for s in seeds}
    label = f"{name} or MosT"
    lines = [f"# {label}, chosen on validation, against the main table ({results.get('label', '')}, seeds {seeds})",
             "", "Per seed, the run with the better validation accuracy at its chosen server step (MosT on a tie):", "",
             "| seed | " + " | ".join(map(str, seeds)) + " |", "|---|" + "---|" * len(seeds),
             f"| {name}, validation (%) | " + " | ".join(f"{100 * variant[s]['val_accuracy']:.2f}" for s in seeds) + " |",
             "| MosT, validation (%) | " + " | ".join(f"{100 * most[s]['val_accuracy']:.2f}" for s in seeds) + " |",
             "| chosen | " + " | ".join(name if chosen[s] is variant[s] else "MosT" for s in seeds) + " |", ""]
    test = [chosen[s]["mean"] for s in seeds]
    loss = [chosen[s].get("mean_loss_pick") for s in seeds]
    lines += [f"Test accuracy: {label} {mean_std(test, 100)}, loss pick "
              + (mean_std(loss, 100) if None not in loss else "–") + ".", ""]
    lines += paired_rows(label, chosen, main["methods"], seeds, pick=pick_rule(main))
    return "\n".join(lines) + "\n"


def _mean_std(summary: dict, key: str) -> str:
    return f"{100 * summary[key]['mean']:.2f} ± {100 * summary[key]['std']:.2f}" if key in summary else "–"


def recovered(owner, r: int, sizes: tuple[int, ...] | None = None) -> float:
    """The largest share of clients k with ``owner[k] == match[group(k)]`` over one-to-one maps
    ``match`` from the r groups to models (all clients, the positions of the benchmark's data);
    ``group(k)`` is ``k mod r``, or with ``sizes`` (``--rotation-group``) the block of consecutive
    clients that k falls in."""
    owner = np.asarray(owner)
    if owner.ndim != 1 or not len(owner):
        raise ValueError(f"`owner` must be a non-empty list of model indices; got shape {owner.shape}.")
    m = int(owner.max()) + 1
    group: np.ndarray
    if sizes is None:
        group = np.arange(len(owner)) % r
    else:
        if sum(sizes) != len(owner) or len(sizes) != r:
            raise ValueError(f"The group sizes {tuple(sizes)} do not describe {len(owner)} clients in {r} groups.")
        group = np.repeat(np.arange(r), sizes)
    counts: np.ndarray = np.zeros((r, max(m, r)), dtype=int)
    np.add.at(counts, (group, owner), 1)
    best = max(sum(counts[g, j] for g, j in enumerate(match)) for match in itertools.permutations(range(counts.shape[1]), r))
    return best / len(owner)


def groups_report(results: dict) -> str:
    """``groups.md`` of a ``most bench federated --rotations r`` results folder (Fashion-MNIST):
    per method whose runs store plans (MosT, IFCA, ...) and seed, the share of clients whose final
    model is their rotation group's (:func:`recovered`) and the clients per model. Raises
    ``ValueError`` for results without rotated groups, or with a client left out."""
    sizes = tuple(int(v) for v in results["config"].get("rotation_groups") or ()) or None
    r = len(sizes) if sizes else int(results["config"].get("rotations", 1))
    if r < 2:
        raise ValueError("these results were run without rotated groups (--rotations 2 to 4, or --rotation-group).")
    if results["config"].get("dataset") != "fashion":
        raise ValueError("rotated groups exist only in Fashion-MNIST results.")
    m = int(results["config"]["n_models"])
    lines = [f"# Groups recovered ({results.get('label', '')})", "",
             f"Share of the clients whose final model is their rotation group's (best matching of the {m} models to "
             f"the {r} groups), and the clients per model, by seed, at the server step chosen on validation.", "",
             "| method | seed | server step | groups recovered | clients per model |", "|---|---|---|---|---|"]
    for name, entry in results["methods"].items():
        runs = [run for run in entry["runs"] if run.get("plans")]
        if not runs:
            continue
        shares = []
        for run in runs:
            owner = run["plans"][-1]
            if len(owner) != 100:  # the benchmark's 100 clients; a dropped empty one shifts the groups
                raise ValueError(f"{name}, seed {run['seed']}: {len(owner)} clients, not 100; a client left out "
                                 "for having no data shifts the positions that define the groups.")
            shares.append(recovered(owner, r, sizes))
            per = np.bincount(owner, minlength=m).tolist()
            lines.append(f"| {name} | {run['seed']} | {run['server_lr']:g} | {shares[-1]:.2f} | {per} |")
        lines.append(f"| {name} | mean | | {np.mean(shares):.2f} | |")
    return "\n".join(lines) + "\n"


def planted_groups(config: dict) -> list[int] | None:
    """Each client's planted group in the benchmark's client order, from a results file's
    ``config`` (the loaders put the groups in contiguous blocks of ``--label-group`` or
    ``--rotation-group`` sizes, or ``k mod r`` for Fashion-MNIST's ``--rotations r``); ``None``
    without groups."""
    from ..federated.data import label_groups_of, quarter_turns

    if config.get("dataset") not in ("fashion", "femnist"):
        return None
    if config.get("label_groups"):  # Fashion-MNIST or FEMNIST
        sizes = tuple(int(v) for v in config["label_groups"])
        relabel = label_groups_of(sizes, sum(sizes), 0)  # the loader's blocks (its permutations unused)
        return None if relabel is None else relabel[0]
    if config.get("dataset") != "fashion":
        return None
    if config.get("rotation_groups"):
        sizes = tuple(int(v) for v in config["rotation_groups"])
        return quarter_turns(sizes, sum(sizes))
    r = int(config.get("rotations") or 1)
    return quarter_turns(r, 100) if r > 1 else None


def add_groups_held(results: dict) -> list[str]:
    """Adds ``group_ari_plan`` (the table's "groups held") to each run of ``results`` that was
    recorded without it: for a method scored on its own assignment (a cluster, a group, a mixture's
    largest weight) the groups it was scored on, else its last plan's largest shares (``plans``),
    against :func:`planted_groups`. A method whose runs lack either is left as it is. Recomputes
    the summaries; returns the methods changed. Raises ``ValueError`` for results without planted
    groups, or with a client left out (its plan is shorter than the groups)."""
    groups = planted_groups(results["config"])
    dataset = results["config"].get("dataset")
    recorded = any("group_ari" in r for e in results["methods"].values() for r in e["runs"])
    if groups is None and recorded and dataset not in ("fashion", "femnist"):
        # the runs were scored against planted groups when they ran (the mixture data set's, say),
        # but only the loaders named here can be asked for them again from the settings
        raise ValueError(f"`held` knows the planted client groups only of the fashion and femnist loaders; for the "
                         f"{dataset!r} data set it cannot recompute them, so it cannot add the groups held "
                         "(run the table again with this code to record them).")
    if groups is None:
        raise ValueError("these results have no planted client groups (--label-group on Fashion-MNIST or FEMNIST, "
                         "--rotation-group or --rotations on Fashion-MNIST).")
    picks = results.get("picks") or {}
    changed = []
    for name, entry in results["methods"].items():
        runs = entry["runs"]
        if not runs or all("group_ari_plan" in r for r in runs):
            continue
        if picks.get(name, FederatedMethod.pick) != FederatedMethod.pick:
            if not all("group_ari" in r for r in runs):  # one model per client: no grouping
                continue
            held = [r["group_ari"] for r in runs]
        elif all(r.get("plans") for r in runs):
            held = []
            for r in runs:
                owner = r["plans"][-1]
                if len(owner) != len(groups):
                    raise ValueError(f"{name}, seed {r['seed']}: {len(owner)} clients in the last plan, not "
                                     f"{len(groups)}; a client left out shifts the positions that define the groups.")
                held.append(ev.adjusted_rand_index(owner, groups))
        else:
            continue
        for r, value in zip(runs, held):
            r["group_ari_plan"] = value
        changed.append(name)
    fb.add_summaries(results)
    return changed
