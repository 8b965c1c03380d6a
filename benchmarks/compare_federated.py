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

With ``--or-most`` the variant is a value of one more setting chosen on validation: per seed, the
variant's run or the main table's MosT run, whichever has the better validation accuracy (MosT
on a tie), as one run over both configurations' grids would choose; the report is that choice's.

    .venv/bin/python benchmarks/compare_federated.py benchmarks/results/federated/sharing/fashion \
        benchmarks/results/federated/fashion_linear --method "MosT (warm-up 15)" --or-most \
        --report compare_warmup_or_most.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from merge_federated import FREE as MERGE_FREE, settings

from most.bench import federated as fb
from most.bench import mean_std
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


def compare(results: dict, main: dict, name: str, *, or_most: bool = False) -> str:
    """``compare.md`` for the variant ``name`` of ``results`` against the main table ``main``; with
    ``or_most``, for the per-seed choice on validation between the variant and the table's MosT."""
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
    lines += paired_rows(name, variant, main["methods"], seeds)
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
    lines += paired_rows(label, chosen, main["methods"], seeds)
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
    p.add_argument("--or-most", action="store_true",
                   help="report the per-seed choice on validation between the variant and the main table's MosT")
    args = p.parse_args(argv)
    if Path(args.report).name != args.report or not args.report.endswith(".md"):
        p.error(f"--report must be a plain file name ending in .md; got {args.report!r}")
    for folder in (args.variant, args.main):
        if not (folder / "results.json").is_file():
            p.error(f"{folder}: no results.json there (a folder written by `most bench federated`)")
    try:
        text = compare(json.loads((args.variant / "results.json").read_text()),
                       json.loads((args.main / "results.json").read_text()), args.method, or_most=args.or_most)
    except CompareError as e:
        p.error(str(e))
    (args.variant / args.report).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
