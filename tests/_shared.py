"""Where the real data sets live for tests: ``../shared/data`` beside the repository (CI has it;
a user's fresh clone does not, and the tests that need it skip)."""

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
