"""Benchmark suites behind ``most bench NAME`` (each reproduces a table of the paper).

* :mod:`most.bench.few_objective` -- ZDT1-3 and fairness-accuracy trade-offs (n = 2 < m = 5):
  MosT-E against EPO, MOO-SVGD, MGDA and linearization, hypervolume of the final iterate.

Every suite takes a typed config dataclass, writes ``results.json`` and its figures to an
output folder, and returns the results as a dict.
"""
