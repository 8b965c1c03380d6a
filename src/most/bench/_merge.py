"""Joins results folders of ``most bench federated`` run separately (``benchmarks/federated_tools.py merge``).

A method missing from a table is run later with the same settings, possibly split over seeds
into several folders to use several cores, and joined here; a whole table split over seeds is
joined the same way; and a folder with other server steps extends the grid the step is chosen
from. Every join checks that the folders were run with the same settings first.

* :func:`merge` appends sources (results dicts) to a destination, in place;
* :func:`restrict` keeps only some methods of a results dict;
* :func:`merge_folders` does both on folders and rewrites ``results.json``, ``table.md`` and
  the figures;
* :func:`settings` is what two joined (or compared) runs must share; :func:`same_data` and
  :func:`align_data_path` let two folders that read the same data from two paths be joined.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import write_results
from ._curves import ResultsFileError, load_results, split_curves
from ._federated_report import GROUP_KEYS, KEYS, LOSS_PICK_KEYS, POOLED_KEYS
from . import federated as fb

__all__ = ["FREE", "MergeError", "align_data_path", "merge", "merge_folders", "pick_rule", "rename", "resummarise",
           "restrict", "same_data", "settings"]

#: Settings that may differ between the destination and a source (the per-method grids are
#: recorded by a partial grid extension here, never by the benchmark).
FREE = ("methods", "seeds", "out", "progress", "server_lrs_by_method")


class MergeError(ValueError):
    """A source that cannot be merged into the destination (the message says why)."""


def pick_rule(results: dict) -> str:
    """The pick rule ``results`` were scored under: its top-level ``pick_rule`` (set by
    ``federated_tools.py rescore``), ``"validation"`` (the paper's rule, which the benchmark
    scores under) where it has none, as in every folder the benchmark wrote itself."""
    return results.get("pick_rule") or "validation"


def pick_rule_mismatch(one: dict, other: dict, what: str, against: str) -> str | None:
    """One line saying that ``what`` (results ``other``) and ``against`` (``one``) were scored
    under different pick rules, naming both and how to join them, or ``None`` where they agree.
    Runs scored under two rules are not one table's runs: their means and paired differences
    would mix two protocols."""
    mine, theirs = pick_rule(one), pick_rule(other)
    if mine == theirs:
        return None
    said = {rule: repr(rule) + (" (the paper's)" if rule == "validation" else "") for rule in (mine, theirs)}
    return (f"{what} was scored under the pick rule {said[theirs]}, {against} under {said[mine]}: rescore one to the "
            f"other's rule first (`python benchmarks/federated_tools.py rescore FOLDER --pick {mine} --out DIR`, "
            "from a table made with --keep-matrices).")


#: the paired intervals :func:`most.bench.federated.add_summaries` writes at the top of a results dict
PAIRED = ("paired_vs_most", "paired_vs_most_loss_pick")


def resummarise(results: dict) -> None:
    """Makes every method's summaries over seeds and MosT's paired intervals again from the runs
    alone: drops the summaries and paired intervals ``results`` holds first, since
    :func:`most.bench.federated.add_summaries` only adds the keys every run has and would leave a
    stale one (of the runs before a join) where a joined run lacks the key (results older than
    the loss pick or "groups held"); the table then shows "–" for it."""
    keys = KEYS + LOSS_PICK_KEYS + POOLED_KEYS + GROUP_KEYS + ("seconds",)
    for entry in results["methods"].values():
        for key in keys:
            entry.pop(key, None)
    for key in PAIRED:
        results.pop(key, None)
    fb.add_summaries(results)


def settings(config: dict, free: tuple[str, ...] = FREE) -> dict:
    """The settings two joined runs must share: all but ``free``, the protocol's device ``None``
    read as ``"cpu"`` (the runtime's default, the same computation), a missing ``rotations`` as 1
    (older results), and the server-step grid in ascending order. :func:`most.bench._compare.compare`
    uses it too, with its own ``free``."""
    fixed = {k: v for k, v in config.items() if k not in free}
    fixed.setdefault("rotations", 1)  # results written before the setting existed turned nothing
    fixed["rotation_groups"] = list(fixed.get("rotation_groups") or [])  # left out when empty
    if fixed.get("server_lrs") is not None:  # a grid is a set of steps, whatever order it was given in
        fixed["server_lrs"] = sorted(fixed["server_lrs"])
    if isinstance(fixed.get("protocol"), dict) and fixed["protocol"].get("device") is None:
        fixed["protocol"] = {**fixed["protocol"], "device": "cpu"}
    return fixed


def same_data(a: dict, b: dict) -> bool | None:
    """Whether two results dicts read the same data: ``True`` when every seed both have runs of
    was read with one data digest on each side (``data_digest``, recorded with each run) and the
    two agree, ``False`` when a shared seed's digests differ, ``None`` when no shared seed has
    digests on both sides (results older than the digest, or no seed in common)."""
    shared, differing = _compare_digests(a, b)
    return None if not shared else not differing


def _compare_digests(a: dict, b: dict) -> tuple[list[int], list[int]]:
    """The seeds both results have digests for, and those of them whose digests differ."""
    mine, theirs = _digests(a), _digests(b)
    shared = sorted(mine.keys() & theirs.keys())
    return shared, [s for s in shared if len(mine[s] | theirs[s]) > 1]


def _digests(results: dict) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for entry in results["methods"].values():
        for run in entry["runs"]:
            if run.get("data_digest") is not None:
                out.setdefault(run["seed"], set()).add(run["data_digest"])
    return out


def align_data_path(fixed: dict, other: dict, dest: dict, src: dict, what: str,
                    against: str = "the destination") -> str | None:
    """Reads ``other``'s ``data_path`` (settings of ``src``) as ``fixed``'s (of ``dest``) where the
    two differ but the runs' data digests agree on the seeds both ran (the same files in
    two folders, or named one way and the other): returns a note saying so, else ``None``.
    Raises :class:`ValueError` (the message names the seeds) where the digests of a shared
    seed differ, whatever the paths: the two read other data."""
    shared, differing = _compare_digests(dest, src)
    if differing:
        raise ValueError(f"{what} read other data than {against} for seeds {differing} (their runs' data digests "
                         "differ): joined runs must share their data; check the data path and the files in it.")
    if shared and other.get("data_path") != fixed.get("data_path"):
        note = (f"note: {what} read its data from {other.get('data_path')!r}, {against} from "
                f"{fixed.get('data_path')!r}: the same data (their runs' data digests agree)")
        other["data_path"] = fixed.get("data_path")
        return note
    return None


def merge(dest: dict, sources: list[dict]) -> list[str]:
    """Appends the methods (or seeds, or server steps) of ``sources`` to ``dest`` (results dicts) in
    place; returns what was added: method names, ``"seeds [...]"`` and ``"server steps [...]"``.

    * A source with methods the destination lacks adds them; every new method must have exactly
      the destination's seeds over its sources, each run once.
    * A source with exactly the destination's methods and other seeds adds those seeds.
    * A source with the destination's seeds but other server steps extends the grid of the
      methods it ran: per method and seed the run with the better validation accuracy over both
      grids is kept (the destination's on a tie), as one run over the joined grid would choose.
      Methods left out keep their grid, and ``config["server_lrs_by_method"]`` records each
      method's. Methods new to the destination join with the grid they were tuned over (another
      grid than the destination's, or their own within a source that records per-method grids).

    Raises :class:`MergeError` (the message says why) for settings that differ, seeds run twice
    or missing, methods already there, and steps the destination already has."""
    fixed = settings(dest["config"])
    seeds = list(dest["config"]["seeds"])
    runs: dict[str, list] = {}
    grids: dict[str, list] = {}  # the grid each new method was tuned over
    added_more: list[str] = []
    for i, src in enumerate(sources):
        mismatch = pick_rule_mismatch(dest, src, f"source {i + 1}", "the destination")
        if mismatch:
            raise MergeError(mismatch)
        other = settings(src["config"])
        own_grids = fb.method_grids(src)  # a source's methods may have been tuned over grids of their own
        try:
            note = align_data_path(fixed, other, dest, src, f"source {i + 1}")
        except ValueError as exc:
            raise MergeError(str(exc)) from None
        if note:
            print(note, file=sys.stderr)
        if src.get("torch") != dest.get("torch"):
            print(f"note: source {i + 1} ran on torch {src.get('torch')}, the destination on {dest.get('torch')}",
                  file=sys.stderr)
        if None not in (src.get("cpu_kernels"), dest.get("cpu_kernels")) and src["cpu_kernels"] != dest["cpu_kernels"]:
            print(f"note: source {i + 1} ran with torch's {src['cpu_kernels']} CPU kernels, the destination with "
                  f"{dest['cpu_kernels']}: its runs may differ in the last bits from the destination's kernels' "
                  "(ATEN_CPU_CAPABILITY chooses them)", file=sys.stderr)
        if other.get("server_lrs") != fixed.get("server_lrs") and {**other, "server_lrs": fixed["server_lrs"]} == fixed:
            if not set(src["methods"]) & set(dest["methods"]):  # new methods, tuned over their own grid
                for name in src["methods"]:
                    _add_runs(runs, grids, dest, src, name, own_grids[name], i)
                continue
            _extend_grid(dest, src, i)
            fixed["server_lrs"] = list(dest["config"]["server_lrs"])
            added_more.append(f"server steps {list(src['config']['server_lrs'])}")
            continue
        differ = sorted(k for k in fixed.keys() | other.keys() if fixed.get(k) != other.get(k))
        if differ:
            detail = "; ".join(f"{k}: {fixed.get(k)!r} vs {other.get(k)!r}" for k in differ)
            hint = (" Two data paths are read as one only where both ran a seed and recorded its data's digest "
                    "and the digests agree (results written before the digest existed have none)."
                    if "data_path" in differ else "")
            raise MergeError(f"source {i + 1} was run with other settings than the destination ({detail}).{hint}")
        if set(src["methods"]) == set(dest["methods"]):  # more seeds of the same table
            if dest["config"].get("server_lrs_by_method") and own_grids != fb.method_grids(dest):
                raise MergeError(f"source {i + 1} adds seeds, but the destination's methods were tuned over different "
                                 "server-step grids (a partial extension), which one run over the same grid cannot "
                                 "match; run the destination's missing steps for its other methods first, or add "
                                 "seeds whose methods were tuned over the same grids.")
            again = sorted(set(src["config"]["seeds"]) & set(seeds))
            if again:
                raise MergeError(f"source {i + 1} has seeds {again}, which the destination already has.")
            for name, entry in src["methods"].items():
                dest["methods"][name]["runs"].extend(entry["runs"])
            seeds += list(src["config"]["seeds"])
            dest["config"]["seeds"] = list(seeds)
            added_more.append(f"seeds {list(src['config']['seeds'])}")
            continue
        for name in src["methods"]:
            if name in dest["methods"]:
                hint = ""
                if set(src["config"]["seeds"]) != set(seeds):  # more seeds, but of other methods
                    hint = (f" To add seeds, the source must run the destination's methods ({sorted(dest['methods'])}); "
                            f"it runs {sorted(src['methods'])}: keep the methods both have with --method NAME.")
                raise MergeError(f"{name} is already in the destination; merge only methods it lacks (or replace "
                                 f"the destination's row with --drop {name!r}).{hint}")
            _add_runs(runs, grids, dest, src, name, own_grids[name], i)
    for name, got in runs.items():
        have = sorted(r["seed"] for r in got)
        if have != sorted(seeds):
            raise MergeError(f"{name}: the sources have seeds {have}, the destination {sorted(seeds)}; "
                             "every seed must be run exactly once.")
        dest["methods"][name] = {"runs": sorted(got, key=lambda r: seeds.index(r["seed"]))}
        dest["config"]["methods"].append(name)
    if runs:
        _record_grids(dest["config"], {**fb.method_grids(dest), **{name: grids[name] for name in runs}})
    resummarise(dest)  # not add_summaries alone: a key some joined runs lack must not keep its old summary
    return list(runs) + added_more


def _add_runs(runs: dict[str, list], grids: dict[str, list], dest: dict, src: dict, name: str, grid: list,
              i: int) -> None:
    """Collects the runs of ``src``'s method ``name``, new to ``dest``, and the grid it was tuned
    over (its own where the source recorded one, so a partial extension stays on record), and how
    it picks each client's model; a method whose seeds come from several sources must have been
    tuned over one grid in all of them."""
    if grids.setdefault(name, list(grid)) != list(grid):
        raise MergeError(f"{name}: source {i + 1} was run with server steps {list(grid)}, another source with "
                         f"{grids[name]}; join a method's sources over one grid (a merge of its own first) before "
                         "adding it.")
    runs.setdefault(name, []).extend(src["methods"][name]["runs"])
    if name in (src.get("picks") or {}):  # how the method picks each client's model, for the table
        dest.setdefault("picks", {})[name] = src["picks"][name]


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
    resummarise(out)
    return out


def rename(results: dict, old: str, new: str) -> None:
    """Renames the method ``old`` of ``results`` to ``new`` in place, keeping its place in the
    table (when a default changes, the old default's row keeps its runs under a name of its own,
    and the new default joins as ``MosT``); the summaries and paired intervals are recomputed."""
    if old not in results["methods"]:
        raise MergeError(f"{old!r} is not in the results (they have {sorted(results['methods'])}).")
    if new in results["methods"]:
        raise MergeError(f"{new!r} is already in the results; rename to a name they do not have.")
    grids = fb.method_grids(results)
    results["methods"] = {(new if name == old else name): entry for name, entry in results["methods"].items()}
    results["config"]["methods"] = [new if name == old else name for name in results["config"]["methods"]]
    if results["config"].get("server_lrs_by_method"):
        _record_grids(results["config"], {(new if name == old else name): grid for name, grid in grids.items()})
    if old in (results.get("picks") or {}):
        results["picks"][new] = results["picks"].pop(old)
    resummarise(results)


def merge_folders(dest: Path, sources: list[Path], *, methods: list[str] | None = None,
                  out: Path | None = None, renames: dict[str, str] | None = None,
                  first: str | None = None, drop: list[str] | None = None) -> list[str]:
    """Joins the results folders ``sources`` to ``dest`` (:func:`merge`) and writes the joined
    ``results.json``, ``table.md`` and figures to ``out`` (default: ``dest``, rewritten).
    ``methods``: keep only those methods of the destination and the sources first
    (:func:`restrict`); each source must have one of them. ``drop``: remove those methods of the
    destination first (each must be there), so that a source's re-run of the same name replaces
    the row. ``renames`` (old name -> new name) renames methods of the destination before the
    join (:func:`rename`); ``first`` puts that method at the top of the joined table. Returns what
    was added; raises :class:`MergeError` for a folder without ``results.json`` or sources that
    cannot be joined, or a results file that is cut short or of another suite. Every check, and the
    joined table, is made before any file is written: a refused join leaves every folder as it was."""
    dest, sources = Path(dest), [Path(s) for s in sources]
    missing = [str(f / "results.json") for f in (dest, *sources) if not (f / "results.json").is_file()]
    if missing:
        raise MergeError(f"no results file at {', '.join(missing)}; pass folders written by `most bench federated`.")
    try:
        joined = load_results(dest)
        loaded = [load_results(s) for s in sources]
    except ResultsFileError as exc:
        raise MergeError(str(exc)) from None
    if methods:
        joined = restrict(joined, list(methods))
        kept = [[name for name in methods if name in src["methods"]] for src in loaded]
        empty = [str(path) for path, names in zip(sources, kept) if not names]
        if empty:
            raise MergeError(f"{', '.join(empty)} has none of the methods {list(methods)}.")
        loaded = [restrict(src, names) for src, names in zip(loaded, kept)]
    if drop:
        absent = [name for name in drop if name not in joined["methods"]]
        if absent:
            raise MergeError(f"cannot drop {absent}: the destination has {sorted(joined['methods'])}.")
        joined = restrict(joined, [name for name in joined["methods"] if name not in drop])
    for old, new in (renames or {}).items():
        rename(joined, old, new)
    added = merge(joined, loaded)
    if first is not None:
        if first not in joined["methods"]:
            raise MergeError(f"{first!r} is not in the joined results; `first` must name one of their methods.")
        joined["methods"] = {first: joined["methods"][first],
                             **{k: v for k, v in joined["methods"].items() if k != first}}
        joined["config"]["methods"] = [first] + [k for k in joined["config"]["methods"] if k != first]
    target = dest if out is None else Path(out)
    if out is not None:
        joined["config"]["out"] = str(target)
    table = fb.table_markdown(joined)  # made before any file is written: a table that fails rewrites nothing
    write_results(joined, target, fb.draw_figures, lambda _: table, split=split_curves)
    return added


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
    ``server_lrs_by_method`` where they differ (the entry removed where they are all alike); each
    grid is kept in ascending order, whatever order the joins added its steps in."""
    grids = {name: sorted(set(grid)) for name, grid in grids.items()}
    config["server_lrs"] = sorted({step for grid in grids.values() for step in grid})
    if len({tuple(grid) for grid in grids.values()}) > 1:
        config["server_lrs_by_method"] = grids
    else:
        config.pop("server_lrs_by_method", None)
