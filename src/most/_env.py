"""Environment variables set for the length of a ``with`` block."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping


@contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """Sets ``values`` in ``os.environ`` inside the block and restores each variable after it
    (removing those that were not set before), also when the block raises.

    >>> import os
    >>> with environ({"MOST_EXAMPLE": "1"}):
    ...     os.environ["MOST_EXAMPLE"]
    '1'
    >>> "MOST_EXAMPLE" in os.environ
    False
    """
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
