"""MkDocs hook: a code fence's test marker is not shown.

The docs test (tests/test_docs.py) runs every ``python`` block of a page and leaves out those
fenced as ```` ```python skip ```` (a deployment walk-through, a GPU example). The site shows
them as ordinary Python blocks: ``skip`` after the language would make the fence invalid and
the code render as prose.
"""

from __future__ import annotations

import re

_SKIP = re.compile(r"^(\s*)```python skip\s*$", re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return _SKIP.sub(r"\1```python", markdown)
