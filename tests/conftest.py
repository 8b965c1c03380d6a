"""Test-session settings."""

import torch

# The tests use tiny tensors. `make test` runs one pytest worker per core (pytest -n 2); each
# worker's torch would start a thread per core as well, and the oversubscribed OpenMP threads
# spin against each other: tiny operations then run 10-500x slower. One thread per process
# avoids that, with or without xdist.
torch.set_num_threads(1)
