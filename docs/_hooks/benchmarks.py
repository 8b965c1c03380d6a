"""MkDocs hook: the benchmark results (``benchmarks/results``) become pages of the site at build time.

Nothing is copied into ``docs/`` by hand, so the pages never go stale: every build reads

* ``benchmarks/results/*.md`` -> ``benchmarks/<name>.md`` (e.g. ``benchmarks/trap.md``), as is;
* every ``*.png`` below ``benchmarks/results`` -> the same relative path below ``benchmarks/``,
  so relative image links inside the results resolve;
* one generated figure page per results folder (``benchmarks/<folder>/index.md``): links to
  its sub-folders' pages, the folder's ``table.md`` (if any), its other reports (``*.md``) and all
  of its figures.

A link to a folder (``[`federated/`](federated/)``) is pointed at that folder's generated page.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
DEST = "benchmarks"

_TITLES = {
    "federated": "Federated: per-setting tables and figures",
    "few_objective": "Few objectives: figures",
}
_FOLDER_LINK = re.compile(r"\]\((?!https?:|/|#)([^)\s]+/)\)")


def _folders() -> list[Path]:
    """Folders below the results that hold figures or tables (directly or further down)."""
    return sorted(
        d for d in RESULTS.rglob("*")
        if d.is_dir() and not d.name.startswith((".", "__")) and any(d.rglob("*.png")) | any(d.rglob("table.md"))
    )


def _label(folder: Path) -> str:
    """The bold first line of the folder's ``table.md`` (e.g. "Syn(0,0)"), else the folder's name."""
    table = folder / "table.md"
    first = table.read_text(encoding="utf-8").strip().splitlines()[0] if table.exists() else ""
    bold = re.fullmatch(r"\*\*(.+)\*\*", first.strip())
    return bold.group(1) if bold else folder.name


def _title(folder: Path) -> str:
    rel = folder.relative_to(RESULTS).as_posix()
    return _TITLES.get(rel, f"{_label(folder)}: table and figures")


def _demote(markdown: str) -> str:
    """Shifts headings down two levels, so that an included table sits under the page's headings."""
    return re.sub(r"^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", markdown, flags=re.M)


def _folder_page(folder: Path) -> str:
    rel = folder.relative_to(RESULTS).as_posix()
    raw = " The raw numbers are in its `results.json`." if (folder / "results.json").exists() else ""
    lines = [f"# {_title(folder)}", "", f"Generated at build time from `benchmarks/results/{rel}/`.{raw}", ""]
    children = [c for c in sorted(folder.iterdir()) if c.is_dir() and c in set(_folders())]
    if children:
        lines += ["## Settings", ""]
        lines += [f"* [{_label(c)}]({c.name}/index.md) (`{c.name}`)" for c in children]
        lines.append("")
    table = folder / "table.md"
    if table.exists():
        lines += ["## Table", "", _demote(table.read_text(encoding="utf-8")).strip(), ""]
    for report in sorted(folder.glob("*.md")):  # a probe's plan or comparison, beside the table
        if report.name != "table.md":
            lines += [f"## `{report.name}`", "", _demote(report.read_text(encoding="utf-8")).strip(), ""]
    figures = sorted(folder.glob("*.png"))
    if figures:
        lines += ["## Figures", ""]
        for fig in figures:
            lines += [f"### {fig.stem.replace('_', ' ')}", "", f"![{fig.stem}]({fig.name})", ""]
    return "\n".join(lines)


def on_files(files: Files, config) -> Files:
    if not RESULTS.is_dir():
        return files
    for md in sorted(RESULTS.glob("*.md")):
        files.append(_file_from_path(md, f"{DEST}/{md.name}", config))
    for png in sorted(RESULTS.rglob("*.png")):
        files.append(_file_from_path(png, f"{DEST}/{png.relative_to(RESULTS).as_posix()}", config))
    for folder in _folders():
        uri = f"{DEST}/{folder.relative_to(RESULTS).as_posix()}/index.md"
        files.append(File.generated(config, uri, content=_folder_page(folder)))
    return files


def _file_from_path(path: Path, uri: str, config) -> File:
    return File.generated(config, uri, abs_src_path=str(path))


def on_page_markdown(markdown: str, page, config, files) -> str:
    uri = page.file.src_uri
    if not uri.startswith(f"{DEST}/"):
        return markdown
    here = RESULTS / Path(uri).relative_to(DEST).parent

    def folder_link(match: re.Match) -> str:
        target = match.group(1)
        return f"]({target}index.md)" if (here / target).is_dir() else match.group(0)

    return _FOLDER_LINK.sub(folder_link, markdown)
