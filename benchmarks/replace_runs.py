"""Replaces one method's runs in a stored ``most bench mtl`` or ``most bench prompts`` folder by
those of a re-run of that method alone with the same settings, and rewrites ``results.json``,
``table.md`` and the figures from the joined runs with the suite's own writer. Used when a change
moves one method only (e.g. ``most.MGDA``'s step), so that the other rows keep their measured runs:

    most bench mtl --features surf --method MGDA --data-path ../shared/data/office_caltech10 \\
        --out /tmp/mtl_surf_mgda --quiet
    python benchmarks/replace_runs.py mtl benchmarks/results/mtl_surf /tmp/mtl_surf_mgda MGDA

The settings that make a run (features or tasks, rounds, step, seeds, ...) must be equal in the
two folders, and the re-run must hold the same seeds (and tasks) as the stored method; anything
else is refused before a file is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from most.bench import mtl, prompts, write_results

#: per suite: its module, the settings two folders must share, and what names a run of a method
SUITES = {
    "mtl": (mtl, ("features", "rounds", "lr", "batch_size", "image_size", "n_models", "seeds"),
            lambda run: run["seed"]),
    "prompts": (prompts, ("tasks", "seeds", "n_models", "n_train", "n_tokens", "layer", "max_length", "rounds",
                          "lr", "dispatcher_epochs"), lambda run: (run["task"], run["seed"])),
}


def replace_runs(suite: str, stored: Path, rerun: Path, method: str) -> str:
    """Joins ``rerun``'s runs of ``method`` into ``stored`` in place of its own; returns the new table."""
    module, same, key = SUITES[suite]
    old, new = (json.loads((folder / "results.json").read_text()) for folder in (stored, rerun))
    differ = [k for k in same if old["config"].get(k) != new["config"].get(k)]
    if differ:
        raise SystemExit(f"{stored} and {rerun} differ in {', '.join(differ)}: not runs of one table.")
    runs = {key(r): r for r in new["runs"] if r["method"] == method}
    kept = sorted(key(r) for r in old["runs"] if r["method"] == method)
    if not kept or sorted(runs) != kept:
        raise SystemExit(f"{rerun} must hold {method!r}'s runs {kept} of {stored}; it holds {sorted(runs)}.")
    old["runs"] = [runs[key(r)] if r["method"] == method else r for r in old["runs"]]
    write_results(old, stored, module._figures, module.table_markdown)
    return module.table_markdown(old)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite", choices=sorted(SUITES))
    p.add_argument("stored", type=Path, help="the stored results folder, rewritten in place")
    p.add_argument("rerun", type=Path, help="the folder of the re-run of the method alone")
    p.add_argument("method", help="the method whose runs are replaced, e.g. MGDA")
    args = p.parse_args(argv)
    for folder in (args.stored, args.rerun):
        if not (folder / "results.json").is_file():
            p.error(f"no results.json in {folder}")
    print(replace_runs(args.suite, args.stored, args.rerun, args.method))


if __name__ == "__main__":
    sys.exit(main())
