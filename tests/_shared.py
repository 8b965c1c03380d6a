"""Where the real data sets live for tests: ``../shared/data`` beside the repository (CI has it;
a user's fresh clone does not, and the tests that need it skip)."""

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def stopped_then_resumed(method, problem, path, *, every: int, at: int):
    """``method.fit(problem)`` stopped after round ``at`` (its checkpoint saved every ``every``
    rounds at ``path``), then run again from the checkpoint: the resumed run's result."""
    import pytest

    from most.checkpoint import Checkpoint

    class Stop(Exception):
        pass

    def stop(record, _params):
        if record.round == at:
            raise Stop

    with pytest.raises(Stop):
        method.fit(problem, callback=stop, checkpoint=Checkpoint(path, every=every))
    return method.fit(problem, checkpoint=Checkpoint(path, every=every))
