"""Adds methods, or seeds, run separately to a federated results folder.

A method missing from a table (FedProx on FEMNIST, say) is run later with the same settings,
possibly split over seeds into several folders to use several cores, then merged here. A whole
table can also be split over seeds: a source with exactly the destination's methods and other
seeds adds those seeds. The script checks that every source was run with the destination's
settings (dataset, model, data, protocol, server steps, m; only the methods, seeds and output
folder may differ), that the sources' seeds of each new method are exactly the destination's,
that a method is not already in the destination (unless the source adds seeds) and that no seed
is run twice; it then appends the runs, recomputes the summaries and the paired intervals
against MosT, and rewrites ``results.json``, ``table.md`` and the figures.

    .venv/bin/python benchmarks/merge_federated.py benchmarks/results/federated/femnist_linear \
        /tmp/fedprox/seeds_0_2 /tmp/fedprox/seeds_3_4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from most.bench import write_results
from most.bench import federated as fb

#: Settings that may differ between the destination and a source.
FREE = ("methods", "seeds", "out", "progress")


class MergeError(ValueError):
    """A source that cannot be merged into the destination (the message says why)."""


def merge(dest: dict, sources: list[dict]) -> list[str]:
    """Appends the methods (or seeds) of ``sources`` to ``dest`` (results dicts) in place; returns
    what was added: method names and ``"seeds [...]"``."""
    fixed = {k: v for k, v in dest["config"].items() if k not in FREE}
    seeds = list(dest["config"]["seeds"])
    runs: dict[str, list] = {}
    added_seeds: list[str] = []
    for i, src in enumerate(sources):
        other = {k: v for k, v in src["config"].items() if k not in FREE}
        differ = sorted(k for k in fixed.keys() | other.keys() if fixed.get(k) != other.get(k))
        if differ:
            detail = "; ".join(f"{k}: {fixed.get(k)!r} vs {other.get(k)!r}" for k in differ)
            raise MergeError(f"source {i + 1} was run with other settings than the destination ({detail}).")
        if src.get("torch") != dest.get("torch"):
            print(f"note: source {i + 1} ran on torch {src.get('torch')}, the destination on {dest.get('torch')}",
                  file=sys.stderr)
        if set(src["methods"]) == set(dest["methods"]):  # more seeds of the same table
            again = sorted(set(src["config"]["seeds"]) & set(seeds))
            if again:
                raise MergeError(f"source {i + 1} has seeds {again}, which the destination already has.")
            for name, entry in src["methods"].items():
                dest["methods"][name]["runs"].extend(entry["runs"])
            seeds += list(src["config"]["seeds"])
            dest["config"]["seeds"] = list(seeds)
            added_seeds.append(f"seeds {list(src['config']['seeds'])}")
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
    fb._summarise(dest)
    return list(runs) + added_seeds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path, help="results folder to add the methods to")
    parser.add_argument("sources", type=Path, nargs="+", help="results folders of the same benchmark")
    args = parser.parse_args(argv)
    missing = [str(f / "results.json") for f in (args.dest, *args.sources) if not (f / "results.json").is_file()]
    if missing:
        sys.exit(f"error: no results file at {', '.join(missing)}; pass folders written by `most bench federated`.")
    dest = json.loads((args.dest / "results.json").read_text())
    sources = [json.loads((s / "results.json").read_text()) for s in args.sources]
    try:
        added = merge(dest, sources)
    except MergeError as exc:
        sys.exit(f"error: {exc}")
    write_results(dest, args.dest, fb._figures, fb.table_markdown)
    print(f"added {', '.join(added)} to {args.dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
