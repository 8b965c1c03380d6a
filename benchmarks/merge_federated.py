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
the figures. The joining is :mod:`most.bench._merge` (:func:`~most.bench._merge.merge`); this
script is its command line.

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

When a default changes, the old default's row is kept under a name of its own and the new
default's runs join as ``MosT``, at the top of the table:

    .venv/bin/python benchmarks/merge_federated.py benchmarks/results/federated/syn_0_0 \
        /tmp/new/syn_0_0 --rename "MosT=MosT (balanced)" --first MosT
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from most.bench._merge import MergeError, merge_folders


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dest", type=Path, help="results folder to add the methods to")
    parser.add_argument("sources", type=Path, nargs="+", help="results folders of the same benchmark")
    parser.add_argument("--method", action="append", metavar="NAME",
                        help="keep only this method of the destination and the sources (repeat)")
    parser.add_argument("--out", type=Path, help="write the joined folder here (default: rewrite the destination)")
    parser.add_argument("--rename", action="append", metavar="OLD=NEW", default=[],
                        help="rename a method of the destination before the join (repeat)")
    parser.add_argument("--first", metavar="NAME", help="put this method at the top of the joined table")
    args = parser.parse_args(argv)
    renames = {}
    for item in args.rename:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            sys.exit(f"error: --rename takes OLD=NEW (e.g. --rename 'MosT=MosT (balanced)'); got {item!r}.")
        renames[old] = new
    try:
        added = merge_folders(args.dest, args.sources, methods=args.method, out=args.out, renames=renames,
                              first=args.first)
    except MergeError as exc:
        sys.exit(f"error: {exc}")
    print(f"added {', '.join(added)} to {args.out or args.dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
