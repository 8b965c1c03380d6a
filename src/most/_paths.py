"""Locating a data directory from an argument or an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

from ._validation import check_path


def resolve_dir(path, env: str, what: str, how: str, default: str | None = None) -> tuple[Path, str]:
    """``(directory, source)``: ``path``, else ``$env``, else ``default``; ``source`` says which
    (for messages). ``FileNotFoundError`` naming the directory, the variable and ``how`` to get
    the data when there is none or it does not exist."""
    if path is None:
        value = os.environ.get(env, "")
        if value:
            path, source = value, f" (from {env})"
        elif default is not None:
            path, source = default, " (the default location)"
        else:
            raise FileNotFoundError(f"{what}: no `path` given and {env} is not set. {how}")
    else:
        check_path(path, what=f"the directory of the {what}")
        source = " (the `path` argument)"
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"{what} not found: the directory {os.path.abspath(p)}{source} does not exist. {how}")
    return p, source
