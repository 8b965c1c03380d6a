"""The performance suite: solver micro-benchmarks, end-to-end rounds, the targets, the CUDA path,
and the measurements that share its report or its harness.

The whole suite (transport and min-norm timings and memory, 100-round Syn(0,0) runs, FEMNIST
rounds, centralised memory, and the two transport cases named by the targets) writes

* ``benchmarks/results/performance.md`` -- the targets (met or not, with the measured value),
  the machine, and every table;
* ``benchmarks/results/performance.json`` -- everything measured.

Run it on an otherwise idle machine (torch's OpenMP threads spin while waiting, so a
second busy process can slow small operations down many times), from the repository root::

    make perf                      # = .venv/bin/python -m benchmarks.performance
    .venv/bin/python -m benchmarks.performance --quick   # a smoke run, about 3 minutes
    .venv/bin/python -m benchmarks.performance --render  # performance.md again from the JSON

The full run takes about 20 minutes on two cores. Its parts also run alone (``PART --help``)::

    .venv/bin/python -m benchmarks.performance solvers [--quick] [--threads T] [--out PATH] [--omp-passive]
    .venv/bin/python -m benchmarks.performance rounds [--quick] [--out PATH]
    python -m benchmarks.performance cuda --femnist ../shared/data/femnist_leaf_sf005   # on a GPU: cuda.md, .json
    python -m benchmarks.performance cuda --render   # cuda.md again from cuda.json
    .venv/bin/python -m benchmarks.performance growth [--quick] [--render]   # make growth: its sections of performance.md
    python -m benchmarks.performance threads     # threads.md, .json
    python -m benchmarks.performance run-axis --table   # make run-axis: run_axis.md, .json
    python -m benchmarks.performance tasks       # tasks.md, .json

Modules, one per part, and the shared pieces:

* :mod:`.harness` -- machine information, thread settings, peak memory, child processes, the
  commands and the markers of the growth sections;
* :mod:`.solvers`, :mod:`.rounds`, :mod:`.cuda` -- the parts of ``performance.json``;
* :mod:`.targets` -- the transport cases the targets name, and the targets' table;
* :mod:`.render` -- ``performance.md`` from ``performance.json``, keeping the growth sections;
* :mod:`.suite` -- every part in turn, then the report; :mod:`.cli` -- the command line;
* :mod:`.growth` -- growth with n and d (``performance/growth*.json`` and its sections of the report);
* :mod:`.threads`, :mod:`.run_axis`, :mod:`.tasks` -- their own JSON and page each.
"""
