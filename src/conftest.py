"""Doctest collection of src/most (outside the package, so no wheel ships it): most.flower needs
the optional Flower extra."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("flwr") else ["most/flower/*"]
