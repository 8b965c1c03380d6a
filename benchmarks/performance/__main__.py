"""``python -m benchmarks.performance [PART] ...``: the suite, or one of its parts."""

import os
import sys

if "--omp-passive" in sys.argv:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # read when torch loads OpenMP: before any part imports it

from .cli import main  # noqa: E402

sys.exit(main())
