"""Test-session settings."""

import os

import torch

# `make test` runs one pytest worker per core (pytest -n 2). Each worker's torch would start
# a thread per core as well, and the oversubscribed OpenMP threads spin against each other:
# tiny tensor operations then run many times slower. One thread per worker avoids that.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
