"""MkDocs hook: the formulas of the site are typeset at build time, as MathML.

A page writes LaTeX between dollars, ``$\\mathbb{R}_+^{n\\times m}$`` inline and ``$$ ... $$`` as a
block of its own; so can a docstring (mkdocstrings renders it with the same extensions).
``pymdownx.arithmatex`` (generic mode, mkdocs.yml) marks them, untouched, as
``<span class="arithmatex">\\(...\\)</span>`` and ``<div class="arithmatex">\\[...\\]</div>``; this
hook replaces each with the MathML that ``latex2mathml`` (pure Python, from PyPI) makes of it.
Browsers render MathML natively (Chromium 109+, Firefox, Safari), so the pages load no script and
no font from anywhere: the site stays offline, opened from disk.

A formula that ``latex2mathml`` cannot read, or that it passes through with a command it does not
know (``\\foo`` left as text), is a warning, which ``mkdocs build --strict`` turns into a failed
build; the literal LaTeX is then left on the page.

The MathML is mended where browsers (MathML Core) would draw it unlike LaTeX: capital Greek upright,
``\\mathbf`` as bold characters, thin spaces around ``\\log`` and ``\\max``, unary signs, and
parentheses without space of their own. ``docs/css/extra.css`` picks the math font and aligns arrays.
"""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.mathml")

_MARKED = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*'
    r"(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<block>.*?)\\\])"
    r"\s*</(?P=tag)>",
    re.S,
)
# MathML that still shows a LaTeX command or escape ("\foo", "\{"), or a bare "&" (an alignment that
# latex2mathml does not read): MathML made from LaTeX never holds a literal backslash
_UNREAD = re.compile(r">[^<]*(?:\\|&(?!#?\w+;))[^<]*<")
# a capital Greek letter (U+0391 to U+03A9) upright, as LaTeX sets it (MathML slants every one-letter <mi>)
_CAPITAL_GREEK = re.compile(r"<mi>(&#x003(?:9[1-9A-F]|A[0-9]);|[\u0391-\u03A9])</mi>")
# a function or operator name (\log, \max, \operatorname{argmin}): latex2mathml leaves its spacing to
# the browser, which sets "log" against its argument ("logm") and a thick space around "max"; as in
# LaTeX, a thin space on each side, none next to a parenthesis or bracket
_OPEN = r"(?:\(|\[|&#x00028;|&#x0005B;)"
_NAME = re.compile(
    rf"(?P<open>{_OPEN}</mo>)?(?P<script><m(?:sub|sup|subsup|under|underover)>)?"
    rf"<(?P<tag>mi|mo)>(?P<name>[A-Za-z]{{2,}})</(?P=tag)>(?P<fence>(?=<mo[^>]*>{_OPEN}))?"
)


def _name(m: re.Match) -> str:
    lspace = "0" if m["open"] else "0.167em"
    rspace = "0" if m["fence"] is not None else "0.167em"
    return f'{m["open"] or ""}{m["script"] or ""}<mo lspace="{lspace}" rspace="{rspace}">{m["name"]}</mo>'


# a sized parenthesis (\bigl( ... \bigr)) carries no form, so the browser spaces it as an unknown infix
# operator, "exp ( x )": parentheses and brackets never get space of their own
_FENCE = re.compile(r'<mo (?![^>]*lspace)([^>]*)>(\(|\)|\[|\]|&#x0002[89];|&#x0005[BD];)</mo>')

# a sign after an operator, a comma or an opening parenthesis ("= -x", "(-F") is unary, as in LaTeX:
# MathML reads it as binary, with space on both sides, unless it opens its row
_CLOSE = r"(?:\)|\]|\||&#x0002[9];|&#x0005D;|&#x0007[CD];|&#x02016;)"
_SIGN = re.compile(rf"(<mo[^>]*>(?!{_CLOSE}</mo>)[^<]*</mo>)<mo>(&#x02212;|&#x0002B;)</mo>")

# browsers draw mathvariant="normal" only (MathML Core): \mathbf{1} becomes the bold character itself
_BOLD = re.compile(r'<(?P<tag>mi|mn) mathvariant="bold">(?P<text>[A-Za-z0-9]+)</(?P=tag)>')
_BOLD_START = {"0": 0x1D7CE, "A": 0x1D400, "a": 0x1D41A}  # MATHEMATICAL BOLD DIGIT ZERO, CAPITAL A, SMALL A


def _bold(m: re.Match) -> str:
    def char(c: str) -> str:
        first = "0" if c.isdigit() else "A" if c.isupper() else "a"
        return f"&#x{_BOLD_START[first] + ord(c) - ord(first):X};"

    return f"<{m['tag']}>{''.join(char(c) for c in m['text'])}</{m['tag']}>"


# LaTeX that latex2mathml does not know, in the spelling it does: \operatorname*{arg\,min} (amsmath's
# limits form, in the docstrings) and \arg\min
_SPELLINGS = [
    (re.compile(r"\\operatorname\*\{([^{}]*)\}"),
     lambda m: r"\operatorname{%s}\limits" % m[1].replace(r"\,", "")),
    (re.compile(r"\\arg\s*\\(min|max)(?![A-Za-z])"), lambda m: r"\operatorname{arg%s}" % m[1]),
]


def to_mathml(latex: str, display: bool = False) -> str:
    """``latex`` as one ``<math>`` element; ``ValueError`` if ``latex2mathml`` cannot read all of it."""
    for spelling, known in _SPELLINGS:
        latex = spelling.sub(known, latex)
    try:
        mathml = convert(latex.strip(), display="block" if display else "inline")
    except Exception as exc:  # latex2mathml raises its own exception types, and IndexError
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc
    unread = _UNREAD.search(mathml)
    if unread:
        raise ValueError(f"not understood: {unread.group(0)[1:-1]!r}")
    # latex2mathml drops a row of an array or cases that ends in an empty cell ("a & \\\\")
    rows = latex.count("\\\\") + latex.count("\\begin{")
    if "\\begin{" in latex and mathml.count("<mtr") < rows:
        raise ValueError("a row was lost: leave out the '&' before an empty last cell")
    mathml = mathml.replace("<mi>&#x0007E;</mi>", "<mo>&#x0223C;</mo>")  # \sim: a relation, not "~"
    mathml = _SIGN.sub(r'\1<mo form="prefix">\2</mo>', mathml)
    mathml = _FENCE.sub(r'<mo lspace="0" rspace="0" \1>\2</mo>', mathml)
    mathml = _NAME.sub(_name, _BOLD.sub(_bold, mathml))
    return _CAPITAL_GREEK.sub(r'<mi mathvariant="normal">\1</mi>', mathml)


def on_page_content(html_text: str, page, config, files) -> str:
    def typeset(m: re.Match) -> str:
        display = m.group("block") is not None
        latex = html.unescape(m.group("block") if display else m.group("inline"))
        try:
            mathml = to_mathml(latex, display)
        except ValueError as exc:
            log.warning("%s: the formula $%s$ is not typeset (%s)", page.file.src_uri, latex.strip(), exc)
            return m.group(0)
        if display:
            return f'<div class="math-display">{mathml}</div>'
        return mathml

    return _MARKED.sub(typeset, html_text)
