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

``groups FOLDER`` reports instead on one folder of ``most bench federated --dataset fashion
--rotations r``, which turns client k's images by 90 * (k mod r) degrees so that the clients
fall into r known groups: for each transport or clustering method (those whose runs store plans:
MosT, IFCA, ...), the share of clients whose final model (largest share of the last plan) is
their group's, under the best one-to-one matching of models to groups, and how many clients
each model serves. It writes ``groups.md`` into the folder::

    .venv/bin/python benchmarks/compare_federated.py groups benchmarks/results/federated/rotated/fashion_4

The reports are :mod:`most.bench._compare`; this script is their command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from most.bench._compare import CompareError, compare, groups_report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["groups"]:
        return groups(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="`compare_federated.py groups FOLDER`: the rotated groups' report instead.")
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


def groups(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="compare_federated.py groups",
                                description="How well each method's final plan recovers the rotated Fashion-MNIST "
                                            "groups; writes FOLDER/groups.md.")
    p.add_argument("folder", type=Path, help="a `most bench federated --rotations r` results folder")
    args = p.parse_args(argv)
    if not (args.folder / "results.json").is_file():
        p.error(f"{args.folder}: no results.json there (a folder written by `most bench federated`)")
    try:
        text = groups_report(json.loads((args.folder / "results.json").read_text()))
    except ValueError as exc:
        p.error(f"{args.folder}: {exc}")
    (args.folder / "groups.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
