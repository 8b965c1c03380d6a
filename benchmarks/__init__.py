"""The benchmarks of the library; their results, and the pages made from them, are in ``results/``.

Entry points, run from the repository root: ``python -m benchmarks.performance`` (the performance
suite and its parts), ``benchmarks/federated_tools.py`` (tools over federated results folders) and
the scripts ``trap.py``, ``few_for_many.py``, ``flower.py``, ``front_figure.py``,
``mtl_finetune_cost.py`` and ``femnist_cnn.sh``.
"""
