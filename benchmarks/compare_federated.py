"""Compares one method, run on its own, with every method of a main federated table, seed by seed.

A variant of MosT (``MosT (update split)``, say) is run alone with ``most bench federated`` on the
settings and seeds of a main table; this script writes ``compare.md`` (or ``--report NAME``) into the variant's folder:
its validation accuracy against MosT's (what a choice of default may look at) and the paired
difference, with a 95 % t interval, from every method of the main table under the paper's pick
and the loss pick.

    .venv/bin/python benchmarks/compare_federated.py /tmp/us/fashion \\
        benchmarks/results/federated/fashion_linear --method "MosT (update split)"

The two folders must hold the same settings (dataset, model, data, protocol, m), the main table
every seed of the variant, and the variant the server-step grid of the main table's MosT.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from merge_federated import FREE as MERGE_FREE, settings

from most.bench import federated as fb
from most.federated import evaluation as ev

#: Settings that may differ between the variant's folder and the main table: those a merge allows,
#: and the server-step grid (checked against the main table's MosT grid instead).
FREE = MERGE_FREE + ("server_lrs",)


class CompareError(ValueError):
    """Folders that cannot be compared (the message says why)."""


def paired_rows(name: str, variant: dict[int, dict], methods: dict, seeds: list[int]) -> list[str]:
    """Markdown rows ``| method | name − method, paper's pick | loss pick |`` for every method of
    ``methods`` (a results file's ``"methods"``) run on all ``seeds``; ``variant`` maps seed -> run."""
    lines = [f"| {name} − method | paper's pick (95 % CI) | loss pick (95 % CI) |", "|---|---|---|"]
    for other, entry in methods.items():
        runs = {r["seed"]: r for r in entry["runs"]}
        if other == name or not all(s in runs for s in seeds):
            continue
        cells = []
        for key in ("mean", "mean_loss_pick"):
            if len(seeds) < 2 or not all(key in runs[s] and key in variant[s] for s in seeds):
                cells.append("–")  # no interval from one seed, or a run older than the loss pick
                continue
            cells.append(fb._paired_cell(ev.paired_difference([variant[s][key] for s in seeds],
                                                              [runs[s][key] for s in seeds])))
        lines.append(f"| {other} | " + " | ".join(cells) + " |")
    return lines


def compare(results: dict, main: dict, name: str) -> str:
    """``compare.md`` for the variant ``name`` of ``results`` against the main table ``main``."""
    if name not in results["methods"]:
        raise CompareError(f"the variant's folder has no method {name!r}; it has {sorted(results['methods'])}")
    mine, theirs = settings(results["config"], FREE), settings(main["config"], FREE)
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
    lines += paired_rows(name, variant, main["methods"], seeds)
    return "\n".join(lines) + "\n"


def _mean_std(summary: dict, key: str) -> str:
    return f"{100 * summary[key]['mean']:.2f} ± {100 * summary[key]['std']:.2f}" if key in summary else "–"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", type=Path, help="folder of `most bench federated` with the variant alone")
    p.add_argument("main", type=Path, help="the main table's folder (same settings, its seeds)")
    p.add_argument("--method", required=True, help="the variant's name in the benchmark, e.g. 'MosT (update split)'")
    p.add_argument("--report", default="compare.md",
                   help="file name of the report in the variant's folder (one per method when it holds several)")
    args = p.parse_args(argv)
    if Path(args.report).name != args.report or not args.report.endswith(".md"):
        p.error(f"--report must be a plain file name ending in .md; got {args.report!r}")
    for folder in (args.variant, args.main):
        if not (folder / "results.json").is_file():
            p.error(f"{folder}: no results.json there (a folder written by `most bench federated`)")
    try:
        text = compare(json.loads((args.variant / "results.json").read_text()),
                       json.loads((args.main / "results.json").read_text()), args.method)
    except CompareError as e:
        p.error(str(e))
    (args.variant / args.report).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
