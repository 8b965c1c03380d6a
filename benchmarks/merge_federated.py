"""Adds methods, or seeds, run separately to a federated results folder.

A method missing from a table (FedProx on FEMNIST, say) is run later with the same settings,
possibly split over seeds into several folders to use several cores, then merged here. A whole
table can also be split over seeds: a source with exactly the destination's methods and other
seeds adds those seeds. The script checks that every source was run with the destination's
settings (dataset, model, data, protocol, server steps, m; only the methods, seeds and output
folder may differ; a device of None and "cpu" are alike), that the sources' seeds of each new
method are exactly the destination's, that a method is not already in the destination (unless
the source adds seeds) and that no seed is run twice; it then appends the runs, recomputes the
summaries and the paired intervals against MosT, and rewrites ``results.json``, ``table.md`` and
the figures.

    .venv/bin/python benchmarks/merge_federated.py benchmarks/results/federated/femnist_linear \
        /tmp/fedprox/seeds_0_2 /tmp/fedprox/seeds_3_4

A source with the destination's seeds but other server steps extends the grid the server step is
chosen from (``--server-lr``), when the chosen value sat at the grid's edge: for every method and
seed the run with the best validation accuracy over both grids is kept, the destination's on a
tie, exactly as a single run over the joined grid would choose. The source may run only some of
the destination's methods (where the others cost too much to extend); their grids then differ,
``config["server_lrs_by_method"]`` records each method's, and the table says so. A later source
with the missing steps for the other methods makes the grids equal again. Likewise a source of
methods new to the destination may have been tuned over another grid (a costly method over the
steps the others chose, say): they join with their own grid, recorded the same way.

    .venv/bin/python benchmarks/merge_federated.py benchmarks/results/federated/femnist_linear \
        /tmp/femnist_server_lr_5

``--method NAME`` (repeat) keeps only those methods of the destination and the sources before
joining, and ``--out DIR`` writes the joined folder there instead of rewriting the destination:
together they pool a few methods of a table with a later seed set of the same methods, the
destination left as it is.

    .venv/bin/python benchmarks/merge_federated.py benchmarks/results/federated/syn_0_0 \
        benchmarks/results/federated/syn_seeds_5_9/syn_0_0 --method MosT --method IFCA \
        --method Linearization --out /tmp/syn_0_0_seeds_0_9
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from most.bench import write_results
from most.bench import federated as fb

#: Settings that may differ between the destination and a source (the per-method grids are
#: recorded by a partial grid extension here, never by the benchmark).
FREE = ("methods", "seeds", "out", "progress", "server_lrs_by_method")


class MergeError(ValueError):
    """A source that cannot be merged into the destination (the message says why)."""


def settings(config: dict, free: tuple[str, ...] = FREE) -> dict:
    """The settings two joined runs must share: all but ``free``, the protocol's device ``None``
    read as ``"cpu"`` (the runtime's default, the same computation), and a missing ``rotations``
    as 1 (older results). ``compare_federated.py`` uses it too, with its own ``free``."""
    fixed = {k: v for k, v in config.items() if k not in free}
    fixed.setdefault("rotations", 1)  # results written before the setting existed turned nothing
    if isinstance(fixed.get("protocol"), dict) and fixed["protocol"].get("device") is None:
        fixed["protocol"] = {**fixed["protocol"], "device": "cpu"}
    return fixed


def merge(dest: dict, sources: list[dict]) -> list[str]:
    """Appends the methods (or seeds, or server steps) of ``sources`` to ``dest`` (results dicts) in
    place; returns what was added: method names, ``"seeds [...]"`` and ``"server steps [...]"``."""
    fixed = settings(dest["config"])
    seeds = list(dest["config"]["seeds"])
    runs: dict[str, list] = {}
    grids: dict[str, list] = {}  # the new methods run over another grid than the destination's
    added_more: list[str] = []
    for i, src in enumerate(sources):
        other = settings(src["config"])
        if src.get("torch") != dest.get("torch"):
            print(f"note: source {i + 1} ran on torch {src.get('torch')}, the destination on {dest.get('torch')}",
                  file=sys.stderr)
        if other.get("server_lrs") != fixed.get("server_lrs") and {**other, "server_lrs": fixed["server_lrs"]} == fixed:
            if not set(src["methods"]) & set(dest["methods"]):  # new methods, tuned over their own grid
                for name, entry in src["methods"].items():
                    if grids.setdefault(name, list(other["server_lrs"])) != list(other["server_lrs"]):
                        raise MergeError(f"{name}: source {i + 1} was run with server steps {other['server_lrs']}, "
                                         f"another source with {grids[name]}; join a method's sources over one "
                                         "grid (a merge of its own first) before adding it.")
                    runs.setdefault(name, []).extend(entry["runs"])
                continue
            _extend_grid(dest, src, i)
            fixed["server_lrs"] = list(dest["config"]["server_lrs"])
            added_more.append(f"server steps {list(src['config']['server_lrs'])}")
            continue
        differ = sorted(k for k in fixed.keys() | other.keys() if fixed.get(k) != other.get(k))
        if differ:
            detail = "; ".join(f"{k}: {fixed.get(k)!r} vs {other.get(k)!r}" for k in differ)
            raise MergeError(f"source {i + 1} was run with other settings than the destination ({detail}).")
        if set(src["methods"]) == set(dest["methods"]):  # more seeds of the same table
            if dest["config"].get("server_lrs_by_method"):
                raise MergeError(f"source {i + 1} adds seeds, but the destination's methods were tuned over different "
                                 "server-step grids (a partial extension), which one run over the same grid cannot "
                                 "match; run the destination's missing steps for its other methods first.")
            again = sorted(set(src["config"]["seeds"]) & set(seeds))
            if again:
                raise MergeError(f"source {i + 1} has seeds {again}, which the destination already has.")
            for name, entry in src["methods"].items():
                dest["methods"][name]["runs"].extend(entry["runs"])
            seeds += list(src["config"]["seeds"])
            dest["config"]["seeds"] = list(seeds)
            added_more.append(f"seeds {list(src['config']['seeds'])}")
            continue
        for name, entry in src["methods"].items():
            if name in dest["methods"]:
                raise MergeError(f"{name} is already in the destination; merge only methods it lacks.")
            runs.setdefault(name, []).extend(entry["runs"])
    for name, got in runs.items():
        have = sorted(r["seed"] for r in got)
        if have != sorted(seeds):
            raise MergeError(f"{name}: the sources have seeds {have}, the destination {sorted(seeds)}; "
                             "every seed must be run exactly once.")
        dest["methods"][name] = {"runs": sorted(got, key=lambda r: seeds.index(r["seed"]))}
        dest["config"]["methods"].append(name)
        if dest["config"].get("server_lrs_by_method") or name in grids:
            _record_grids(dest["config"], {**fb.method_grids(dest),
                                           name: grids.get(name, list(dest["config"]["server_lrs"]))})
    fb._summarise(dest)
    return list(runs) + added_more


def restrict(results: dict, methods: list[str]) -> dict:
    """A copy of ``results`` with only ``methods`` (each must be there), their grids and runs; the
    summaries and paired intervals are recomputed."""
    missing = [name for name in methods if name not in results["methods"]]
    if missing:
        raise MergeError(f"{missing} not in the results (they have {sorted(results['methods'])}).")
    out = json.loads(json.dumps(results))
    grids = fb.method_grids(out)
    out["methods"] = {name: {"runs": out["methods"][name]["runs"]} for name in methods}
    out["config"]["methods"] = list(methods)
    _record_grids(out["config"], {name: grids[name] for name in methods})
    for key in ("paired_vs_most", "paired_vs_most_loss_pick"):
        out.pop(key, None)
    fb._summarise(out)
    return out


def _extend_grid(dest: dict, src: dict, i: int) -> None:
    """Joins ``src``'s server steps to the grids of ``dest``'s methods that ``src`` ran (all of
    them, or some, with the destination's seeds): per method and seed, the better run on
    validation (``dest``'s on a tie, as its steps come first in the joined grid). Methods left
    out keep their grid, and ``config["server_lrs_by_method"]`` then records every method's."""
    grids = fb.method_grids(dest)
    new_steps = list(src["config"]["server_lrs"])
    unknown = sorted(set(src["methods"]) - set(dest["methods"]))
    if unknown or sorted(src["config"]["seeds"]) != sorted(dest["config"]["seeds"]):
        raise MergeError(f"source {i + 1} was run with other server steps ({new_steps}), which extends the "
                         "destination's grid only with methods it has "
                         f"({sorted(dest['methods'])}) and its seeds ({sorted(dest['config']['seeds'])}); it has "
                         f"{sorted(src['methods'])} and {sorted(src['config']['seeds'])}.")
    for name in src["methods"]:
        again = sorted(set(new_steps) & set(grids[name]))
        if again:
            raise MergeError(f"source {i + 1} has server steps {again} for {name}, which the destination already "
                             "has; a grid extension needs new values only.")
    for name, entry in dest["methods"].items():
        if name not in src["methods"]:
            continue
        new = {r["seed"]: r for r in src["methods"][name]["runs"]}
        for k, old in enumerate(entry["runs"]):
            run = new[old["seed"]]
            joined = [tuple(c) for c in old["candidates_val"]] + [tuple(c) for c in run["candidates_val"]]
            best = run if run["val_accuracy"] > old["val_accuracy"] else old
            entry["runs"][k] = {**best, "candidates_val": joined}
        grids[name] = grids[name] + new_steps
    _record_grids(dest["config"], grids)


def _record_grids(config: dict, grids: dict[str, list]) -> None:
    """Sets ``config``'s grid to the union of the methods' ``grids``, and records each method's in
    ``server_lrs_by_method`` where they differ (the entry removed where they are all alike)."""
    config["server_lrs"] = list(dict.fromkeys(step for grid in grids.values() for step in grid))
    if len({tuple(grid) for grid in grids.values()}) > 1:
        config["server_lrs_by_method"] = grids
    else:
        config.pop("server_lrs_by_method", None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path, help="results folder to add the methods to")
    parser.add_argument("sources", type=Path, nargs="+", help="results folders of the same benchmark")
    parser.add_argument("--method", action="append", metavar="NAME",
                        help="keep only this method of the destination and the sources (repeat)")
    parser.add_argument("--out", type=Path, help="write the joined folder here (default: rewrite the destination)")
    args = parser.parse_args(argv)
    missing = [str(f / "results.json") for f in (args.dest, *args.sources) if not (f / "results.json").is_file()]
    if missing:
        sys.exit(f"error: no results file at {', '.join(missing)}; pass folders written by `most bench federated`.")
    dest = json.loads((args.dest / "results.json").read_text())
    sources = [json.loads((s / "results.json").read_text()) for s in args.sources]
    try:
        if args.method:
            dest = restrict(dest, args.method)
            kept = [[name for name in args.method if name in src["methods"]] for src in sources]
            empty = [str(path) for path, names in zip(args.sources, kept) if not names]
            if empty:
                raise MergeError(f"{', '.join(empty)} has none of the methods {args.method}.")
            sources = [restrict(src, names) for src, names in zip(sources, kept)]
        added = merge(dest, sources)
    except MergeError as exc:
        sys.exit(f"error: {exc}")
    out = args.out or args.dest
    if args.out is not None:
        dest["config"]["out"] = str(out)
    write_results(dest, out, fb._figures, fb.table_markdown)
    print(f"added {', '.join(added)} to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
