"""``python -m most.cli ...``: the ``most`` command."""

from . import app

if __name__ == "__main__":  # pragma: no cover
    app()
