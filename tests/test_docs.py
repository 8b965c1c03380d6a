"""The documentation site: its examples run, and `mkdocs build --strict` succeeds offline.

Every ```python block of a page under docs/ runs, the blocks of one page in order in one
namespace (like a notebook). A block that must not run is fenced as ```python skip (or given
another language tag, e.g. ```text); keep those few.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(first line, code, skip)`` for every fenced block whose language is ``python``."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        words = info.replace("{", " ").replace("}", " ").split()
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if close and close.group("fence")[0] == fence[0] and len(close.group("fence")) >= len(fence) \
                    and not close.group("info").strip():
                break
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        if words and words[0] in ("python", "py"):
            blocks.append((start + 1, "\n".join(body) + "\n", "skip" in words[1:]))
    return blocks


def test_block_extraction():
    text = "x\n```python\na = 1\n```\n\n  ```python skip\n  b = 2\n  ```\n```text\nc\n```\n"
    assert python_blocks(text) == [(3, "a = 1\n", False), (7, "b = 2\n", True)]


PAGES_WITH_CODE = [p for p in _pages() if any(not skip for _, _, skip in python_blocks(p.read_text("utf-8")))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_examples_run(page, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    _run_page(page)  # one torch thread (conftest.py): tiny tensors, more threads only spin


def _run_page(page: Path) -> None:
    namespace: dict = {"__name__": "__docs__"}
    for line, code, skip in python_blocks(page.read_text("utf-8")):
        if skip:
            continue
        where = f"{page.relative_to(ROOT)}:{line}"
        try:
            exec(compile(code, where, "exec"), namespace)
        except Exception as exc:  # name the block that failed
            raise AssertionError(f"the example at {where} failed: {type(exc).__name__}: {exc}") from exc


def test_every_page_is_in_the_nav_or_generated():
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    for page in _pages():
        rel = page.relative_to(DOCS).as_posix()
        assert rel in config, f"docs/{rel} is not in mkdocs.yml's nav"


def test_every_test_the_guarantees_page_names_exists():
    """docs/guarantees.md names the test of each promise: a renamed or removed test fails here."""
    text = (DOCS / "guarantees.md").read_text("utf-8")
    named, current = [], None
    for ref in re.findall(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`", text):
        path, test = ref
        current = path or current
        named.append((current, test))
    assert len([t for _, t in named if t]) >= 30
    for path, test in named:
        source = (ROOT / path).read_text("utf-8")
        assert not test or re.search(rf"^def {test}\(", source, re.M), f"{path}::{test} is named in guarantees.md"


# What a reader sees of a built page: no code, no typeset formula, no tag. LaTeX left in it is a
# formula that was not typeset: between dollars (as arithmatex reads them: no space inside), a command
# (\frac), a \( or \[ delimiter, or a braced sub- or superscript.
_NOT_SEEN = re.compile(r"<(pre|code|script|style|math|title)\b.*?</\1>", re.S | re.I)
_LATEX = re.compile(r"\$[^$\s](?:[^$]*?[^$\s])?\$|\\[A-Za-z]{2,}|\\[()\[\]]|[_^]\{")


def untypeset_latex(page: str) -> list[str]:
    """The LaTeX that a built page shows as text, outside code blocks and typeset formulas."""
    seen = unescape(re.sub(r"<[^>]+>", " ", _NOT_SEEN.sub(" ", page)))
    return _LATEX.findall(seen)


def test_untypeset_latex_is_found_outside_code_and_formulas():
    page = (
        "<p>Find $\\theta_j$, then \\frac{a}{b}, R_+^{n} and \\(x\\).</p><pre>$x_{ij}$ \\sum</pre>"
        "<code>$HOME \\alpha</code><math><mi>x</mi></math><p>$5 and $6 are prices; a_i, n^2 stay</p>"
    )
    assert untypeset_latex(page) == ["$\\theta_j$", "\\frac", "^{", "\\(", "\\)"]


def _mathml_hook():
    pytest.importorskip("latex2mathml", reason="pip install -e '.[docs]' (the docs' formulas)")
    spec = importlib.util.spec_from_file_location("docs_mathml_hook", DOCS / "_hooks" / "mathml.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_formulas_become_mathml():
    """docs/_hooks/mathml.py: what arithmatex marks becomes MathML; LaTeX it cannot read is refused."""
    hook = _mathml_hook()
    page = ('<p>Plans in <span class="arithmatex">\\(\\mathbb{R}_+^{n \\times m}\\)</span>:</p>\n'
            '<div class="arithmatex">\\[\n\\lambda^* = \\operatorname{argmin}\\limits_{\\lambda \\in \\Delta^n} '
            'x &lt; \\mathbf{1}\n\\]</div>')
    out = hook.on_page_content(page, page=None, config=None, files=None)
    assert "arithmatex" not in out and out.count("<math") == 2
    assert '<msubsup><mi>&#x0211D;</mi>' in out                      # R_+^{n x m}, double-struck R
    assert '<div class="math-display"><math' in out and 'display="block"' in out
    assert '<mi mathvariant="normal">&#x00394;</mi>' in out          # capital Greek upright
    assert "&#x1D7CF;" in out and "<mo>&#x0003C;</mo>" in out          # \mathbf{1}, and "<" read back
    assert untypeset_latex(out) == []
    for bad in ("\\notacommand x", "x^{", "\\begin{array}{ll} a & b \\\\ c & \\end{array}"):
        with pytest.raises(ValueError):
            hook.to_mathml(bad)


@pytest.mark.slow
def test_mkdocs_build_strict_offline(tmp_path):
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python", "pymdownx", "latex2mathml"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"

    # the benchmark results are pulled in at build time, with their figures
    for name in ("trap", "few_objective", "few_for_many", "federated", "performance"):
        assert (site / "benchmarks" / f"{name}.html").exists(), name
    pages = list(site.rglob("*.html"))
    remote = re.compile(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(?:https?:)?//", re.I)
    images = re.compile(r"<img\b[^>]*src=\"([^\"]+)\"", re.I)
    for html in pages:
        text = html.read_text("utf-8")
        assert not remote.search(text), f"{html.relative_to(site)} loads something from the network"
        for src in images.findall(text):
            assert (html.parent / src).resolve().exists(), f"{html.relative_to(site)}: missing image {src}"
    # code is shown as code: no fence marker or doctest prompt left in the prose of any page
    # (an invalid fence, or an `Example:` section griffe reads as a quote, renders that way)
    code = re.compile(r"<(pre|code)\b.*?</\1>", re.S | re.I)
    for html in pages:
        prose = code.sub("", html.read_text("utf-8"))
        for marker in ("```", "&gt;&gt;&gt; "):
            assert marker not in prose, f"{html.relative_to(site)} shows {marker!r} as prose"
        # `>>>` read as markdown is three nested quotes
        assert not re.search(r"<blockquote>\s*<blockquote>", prose), f"{html.relative_to(site)}: a doctest as quotes"
    assert (site / "benchmarks" / "few_objective" / "index.html").exists()
    assert "<img" in (site / "benchmarks" / "few_objective" / "index.html").read_text("utf-8")

    # formulas are typeset (MathML, made at build time): none is left as LaTeX text on any page
    for page in pages:
        left = untypeset_latex(page.read_text("utf-8"))
        assert not left, f"{page.relative_to(site)} shows LaTeX as text: {left[:5]}"
    most_page = (site / "methods" / "most.html").read_text("utf-8")
    assert most_page.count("<math") >= 10 and 'display="block"' in most_page
    assert "&#x0211D;" in most_page and "R_+^" not in most_page        # the plans' set, typeset


def test_grouped_attributes_become_one_entry_per_name():
    """docs/_hooks/griffe_rst.py: ``a, b: text`` in an Attributes section is not read as ``a,`` of type ``b``."""
    pytest.importorskip("griffe", reason="pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location("docs_griffe_rst", DOCS / "_hooks" / "griffe_rst.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = ("Sizes.\n\nAttributes:\n    x_train, x_val: features,\n        float32.\n\n    y: labels.\n\n"
            "Args:\n    a, b: kept as they are.\n")
    assert hook.rewrite(text, "most") == (
        "Sizes.\n\nAttributes:\n    x_train: features,\n        float32.\n    x_val: features,\n        float32.\n\n"
        "    y: labels.\n\nArgs:\n    a, b: kept as they are.\n")
