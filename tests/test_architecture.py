"""The architecture page (docs/architecture.md) as checks on the source: the layers and what each
may import, no import cycle (imports inside functions and under TYPE_CHECKING count), and no
module importing another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: each top-level module or package of ``most`` and its layer; a module imports only from its own
#: layer and the layers below (the table of docs/architecture.md)
LAYERS = {
    **dict.fromkeys(["_validation", "_random", "_digest", "_host", "_threads", "_warnings", "_paths", "_locks", "_env", "_modules", "_kernels",
                     "_json"], 0),
    **dict.fromkeys(["transport", "mgda"], 1),
    **dict.fromkeys(["evaluators", "problem", "optim", "checkpoint", "metrics", "plots"], 2),
    **dict.fromkeys(["methods", "seeding"], 3),
    **dict.fromkeys(["engine", "solver", "baselines", "selection", "sklearn", "problems", "backbones", "prompts"], 4),
    "federated": 5,
    **dict.fromkeys(["registry", "config", "variants"], 6),
    "__init__": 6.5,  # `import most`: the names of layers 0-6
    "flower": 7,
    **dict.fromkeys(["experiments", "bench", "cli"], 8),
}


def _modules() -> dict[str, tuple[Path, list[str]]]:
    """Every module of the package: dotted name -> (file, the package it is in)."""
    out = {}
    for path in sorted((SRC / "most").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[:-1]
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = parts
        out[".".join(parts)] = (path, package)
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[int, str, str | None]]:
    """``(line, module imported, name imported from it or None)`` for every import of ``most.*``
    anywhere in the module (top level, functions, TYPE_CHECKING blocks)."""
    path, package = MODULES[name]
    out = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "most"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "most":
                out += [(node.lineno, module, a.name) for a in node.names]
    return out


def _target(module: str, imported: str | None) -> str:
    """The module an import loads: ``from pkg import sub`` loads ``pkg.sub`` when that is a module."""
    if imported is not None and f"{module}.{imported}" in MODULES:
        return f"{module}.{imported}"
    while module not in MODULES:
        module = module.rsplit(".", 1)[0]
    return module


GRAPH = {m: {_target(mod, imp) for _, mod, imp in _imports(m)} - {m} for m in MODULES}


def _layer(module: str) -> float:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def test_every_top_level_module_has_a_layer():
    tops = {m.split(".")[1] if "." in m else "__init__" for m in MODULES}
    assert tops == set(LAYERS), f"give these a layer (and a row in docs/architecture.md): {tops ^ set(LAYERS)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_layer_and_those_below(module):
    above = sorted(t for t in GRAPH[module] if _layer(t) > _layer(module))
    assert not above, f"{module} (layer {_layer(module)}) imports {above} from a higher layer"


def test_no_import_cycle():
    """Tarjan's strongly connected components of the module graph: every one is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module(module):
    """A ``_name`` is imported only from the module's own package's private submodules (``from .
    import _exact``), and a private module only by the modules of the package that holds it."""
    wrong = []
    for line, imported_from, name in _imports(module):
        target = _target(imported_from, name)
        owner = target.rsplit(".", 1)[0]
        private_module = any(p.startswith("_") and not p.startswith("__") for p in target.split(".")[1:])
        if private_module and not (module == owner or module.startswith(owner + ".")):
            hidden = next(p for p in target.split(".")[1:] if p.startswith("_") and not p.startswith("__"))
            holder = target.split("." + hidden)[0]
            if not (module == holder or module.startswith(holder + ".")):
                wrong.append(f"line {line}: {target}")
        if name and name.startswith("_") and not name.startswith("__") and target != f"{imported_from}.{name}":
            wrong.append(f"line {line}: {imported_from}.{name}")
    assert not wrong, f"{module} imports private names: {wrong}"


def test_the_checks_find_what_they_look_for():
    """The graph is not empty and sees imports inside functions (e.g. the CLI's deferred ones)."""
    assert "most.solver" in GRAPH["most.baselines"]
    assert "most.flower" in GRAPH["most.experiments.runner"]  # imported inside a function
    assert _layer("most.federated.runtime") == 5 and _layer("most.cli") == 8


def test_docstrings_are_in_one_dialect():
    """Google sections (``Args:``), never NumPy's underlined headers."""
    numpy_sections = []
    for name, (path, _) in MODULES.items():
        lines = path.read_text("utf-8").splitlines()
        for k, (header, rule) in enumerate(zip(lines, lines[1:])):
            if header.strip() in {"Parameters", "Returns", "Raises", "Attributes", "Examples", "Notes", "Yields"} \
                    and set(rule.strip()) == {"-"}:
                numpy_sections.append(f"{name}:{k + 1} {header.strip()}")
    assert not numpy_sections, f"NumPy-style sections (write them as Google's `Args:` etc.): {numpy_sections}"
