"""A griffe extension: reads the reStructuredText bits of the docstrings in ``src/most`` as Markdown.

The docstrings mix Google-style sections with a few reStructuredText constructs that
Markdown would show literally (or mangle). Before mkdocstrings parses a docstring, this
extension rewrites, in the docstring text only (the source files are not touched):

* roles ``:class:`~most.methods.MajorityShare``` (and ``:func:``, ``:meth:``, ``:mod:``,
  ``:data:``, ``:attr:``, ``:exc:``, ``:obj:``) -> an optional cross-reference (a link
  when the target is rendered somewhere in the site, plain code otherwise);
  ``:math:`x``` -> ``$x$``, a formula (typeset as MathML by ``docs/_hooks/mathml.py``);
* ``.. math::`` blocks -> ``$$ ... $$`` blocks, formulas on a line of their own;
* a paragraph ending in ``::`` -> ``:`` (its indented literal block stays a code block);
* bare doctest blocks (``>>>`` outside an Examples section) -> fenced ``pycon`` blocks;
* simple tables (``=== ===`` borders) -> Markdown tables;
* ``<a, b>`` (an inner product) in prose -> escaped, so that it is not read as an HTML tag;
* grouped names in an Attributes section (``a, b: text``) -> one entry per name, with the text.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")
_GOOGLE_EXAMPLES = re.compile(r"^(\s*)Examples?:\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _role(match: re.Match, module: str) -> str:
    _, short, target = match.groups()
    target = target.strip()
    label = target.split(".")[-1] if short else target
    # Sphinx resolves unqualified names relative to the current module; so do we.
    identifier = target if target.startswith(("most.", "torch.", "numpy.", "scipy.")) else f"{module}.{target}"
    return f'<autoref identifier="{identifier}" optional><code>{label}</code></autoref>'


def _math_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == ".. math::":
            base = _indent(line)
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            inner = min((_indent(b) for b in block if b.strip()), default=0)
            pad = " " * base
            if out and out[-1].strip():
                out.append("")
            out += [pad + "$$", *[pad + b[inner:] for b in block if b.strip()], pad + "$$", ""]
            continue
        out.append(line)
        i += 1
    return out


def _literal_markers(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        stripped = line.rstrip()
        if stripped.endswith("::") and not stripped.lstrip().startswith(".."):
            text = stripped[:-2].rstrip()
            line = text + ":" if text.strip() else ""
        out.append(line)
    return out


def _doctest_blocks(lines: list[str]) -> list[str]:
    out: list[str] = []
    in_examples_at: int | None = None  # indent of a Google "Examples:" header we are under
    numpy_examples = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if in_examples_at is not None and line.strip() and _indent(line) <= in_examples_at:
            in_examples_at = None
        m = _GOOGLE_EXAMPLES.match(line)
        if m:
            in_examples_at = len(m.group(1))
        if i + 1 < len(lines) and re.fullmatch(r"\s*-{3,}\s*", lines[i + 1]) and line.strip():
            numpy_examples = line.strip() in ("Examples", "Example")
        if line.lstrip().startswith(">>>") and in_examples_at is None and not numpy_examples:
            base = _indent(line)
            block = []
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) >= base:
                block.append(lines[i][base:])
                i += 1
            # an indented doctest (an RST literal block) is fenced at its paragraph's indent
            previous = next((o for o in reversed(out) if o.strip()), "")
            pad = " " * min(base, _indent(previous))
            if out and out[-1].strip():
                out.append("")
            out += [pad + "```pycon", *[pad + b for b in block], pad + "```"]
            continue
        out.append(line)
        i += 1
    return out


def _split_row(line: str, starts: list[int]) -> list[str]:
    cells = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(line)
        cells.append((start, end))
    # a cell that overflows its column pushes the next boundary to the next space
    values, pos = [], 0
    for k, (start, end) in enumerate(cells):
        begin = max(start, pos)
        if k + 1 < len(cells):
            stop = end
            while stop < len(line) and stop > 0 and line[stop - 1] != " ":
                stop += 1
        else:
            stop = len(line)
        values.append(line[begin:stop].strip())
        pos = stop
    return values


def _tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _BORDER.match(lines[i]):
            border = lines[i]
            starts = [m.start() for m in re.finditer(r"=+", border)]
            rows: list[list[str]] = []
            header_done = False
            header: list[str] = []
            j = i + 1
            while j < len(lines):
                if _BORDER.match(lines[j]):
                    if not header_done:
                        header, rows, header_done = (rows[0] if rows else []), [], True
                        j += 1
                        continue
                    j += 1
                    break
                cells = _split_row(lines[j], starts)
                if rows and not cells[0] and any(cells[1:]):  # continuation line
                    rows[-1] = [(a + " " + b).strip() for a, b in zip(rows[-1], cells)]
                elif any(cells):
                    rows.append(cells)
                j += 1
            pad = " " * _indent(border)
            esc = lambda c: c.replace("|", "\\|")  # noqa: E731
            out += ["", pad + "| " + " | ".join(map(esc, header)) + " |",
                    pad + "|" + "---|" * len(header),
                    *[pad + "| " + " | ".join(map(esc, r)) + " |" for r in rows], ""]
            i = j
            continue
        out.append(lines[i])
        i += 1
    return out


_ANGLE = re.compile(r"<([^<>\n]*,[^<>\n]*)>")  # an inner product <a, b> in prose, not an HTML tag
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_MATH_SPAN = re.compile(r"(\$[^$\n]+\$)")  # a formula, from :math:


def _escape_prose_angles(text: str) -> str:
    parts = _MATH_SPAN.split(text)  # text, formula, text, ...
    return "".join(part if k % 2 else _ANGLE.sub(r"&lt;\1&gt;", part) for k, part in enumerate(parts))


def _escape_angles(lines: list[str]) -> list[str]:
    """``<L, Gamma>`` in prose would be read as an HTML tag; code (spans, literal blocks) and formulas are
    left alone."""
    out, literal_at = [], None
    for line in lines:
        if literal_at is not None and line.strip() and _indent(line) <= literal_at:
            literal_at = None
        in_code = literal_at is not None or line.lstrip().startswith((">>>", "..."))
        if not in_code:
            parts = _CODE_SPAN.split(line)  # text, ticks, code, text, ...
            line = "".join(
                _escape_prose_angles(part) if k % 3 == 0 else (part + parts[k + 1] + part if k % 3 == 1 else "")
                for k, part in enumerate(parts)
            )
        if line.rstrip().endswith("::"):
            literal_at = _indent(line)
        out.append(line)
    return out


_ATTRIBUTES = re.compile(r"^(\s*)Attributes:\s*$")
_GROUPED = re.compile(r"^(\s+)([A-Za-z_]\w*(?:, [A-Za-z_]\w*)+):(\s|$)")


def _grouped_attributes(lines: list[str]) -> list[str]:
    """``a, b, c: text`` in an Attributes section: one entry per name, each with the text, so that
    each gets its own type (griffe would take ``a,`` as the name and ``b, c`` as its type)."""
    out: list[str] = []
    base = None  # the indent of the Attributes heading while inside that section
    i = 0
    while i < len(lines):
        line = lines[i]
        if base is not None and line.strip() and _indent(line) <= base:
            base = None
        heading = _ATTRIBUTES.match(line)
        m = _GROUPED.match(line) if base is not None and not heading else None
        if heading:
            base = len(heading.group(1))
        if m is None:
            out.append(line)
            i += 1
            continue
        entry = [line[m.end(2):]]  # ": text" and the lines that continue it
        i += 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(m.group(1))):
            entry.append(lines[i])
            i += 1
        while len(entry) > 1 and not entry[-1].strip():
            entry.pop()
            i -= 1
        for name in m.group(2).split(", "):
            out.append(m.group(1) + name + entry[0])
            out.extend(entry[1:])
    return out


def rewrite(text: str, module: str) -> str:
    """The Markdown reading of one docstring (``module``: where unqualified roles resolve)."""
    text = _MATH_ROLE.sub(lambda m: f"${m.group(1).strip()}$", text)
    text = "\n".join(_escape_angles(text.split("\n")))
    text = _ROLE.sub(lambda m: _role(m, module), text)
    lines = text.split("\n")
    lines = _math_blocks(lines)
    lines = _grouped_attributes(lines)
    lines = _tables(lines)
    lines = _doctest_blocks(lines)
    lines = _literal_markers(lines)
    return "\n".join(lines)


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring with :func:`rewrite` as the objects are loaded."""

    def on_instance(self, *, node, obj, agent, **kwargs) -> None:
        if obj.docstring is None:
            return
        module = obj.path if obj.is_module else obj.module.path
        obj.docstring.value = rewrite(obj.docstring.value, module)
