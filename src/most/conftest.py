"""Doctest collection: most.flower needs the optional Flower extra."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("flwr") else ["flower/*"]
