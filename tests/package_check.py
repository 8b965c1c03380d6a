"""Checks of the built package (``make package``), also used by tests/test_package.py.

    python tests/package_check.py dist       # the wheel and sdist in dist/: what they hold
    python tests/package_check.py --smoke    # in an environment with the wheel installed
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

#: the distribution's name on the package index (the import name is ``most``)
DIST_NAME = "most-transport"


def wheel_problems(wheel: Path) -> list[str]:
    """What is wrong with a built wheel: test files inside, a missing marker, licence or metadata."""
    names = zipfile.ZipFile(wheel).namelist()
    problems = [f"ships a test file: {n}" for n in names
                if Path(n).name == "conftest.py" or Path(n).name.startswith("test_") or n.startswith("tests/")]
    if "most/py.typed" not in names:
        problems.append("no most/py.typed")
    meta = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
    if meta is None:
        return problems + ["no METADATA"]
    text = zipfile.ZipFile(wheel).read(meta).decode()
    from most import __version__

    for line in (f"Name: {DIST_NAME}", f"Version: {__version__}", "License: MIT"):
        if line not in text:
            problems.append(f"METADATA lacks {line!r}")
    if not any(n.endswith("licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names):
        problems.append("no LICENSE in the wheel")
    return problems


def sdist_problems(sdist: Path) -> list[str]:
    names = tarfile.open(sdist).getnames()
    return [f"the sdist lacks {want}" for want in ("LICENSE", "README.md", "pyproject.toml", "src/most/__init__.py")
            if not any(n.endswith("/" + want) for n in names)]


def smoke() -> None:
    """The README's first example, in an installed environment (not the checkout)."""
    import torch

    import most

    assert "site-packages" in most.__file__, f"most imported from {most.__file__}, not the installed wheel"
    centres = torch.tensor([[0.0, 0.0], [0.3, 0.0], [9.0, 9.0], [9.0, 9.3]])
    problem = most.Problem.from_function(lambda t: ((t - centres) ** 2).sum(-1), dim=2, n_objectives=4)
    result = most.MosT(n_models=2, rounds=60, lr=0.2).fit(problem)
    assert result.assignment.shape == (4, 2)
    print(f"most {most.__version__} from {most.__file__}: the smoke example ran")


def main(argv: list[str]) -> int:
    if argv == ["--smoke"]:
        smoke()
        return 0
    (folder,) = argv
    wheels, sdists = sorted(Path(folder).glob("*.whl")), sorted(Path(folder).glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"{folder}: expected one wheel and one sdist, found {len(wheels)} and {len(sdists)}")
        return 1
    problems = wheel_problems(wheels[0]) + sdist_problems(sdists[0])
    for p in problems:
        print(p)
    if not problems:
        print(f"{wheels[0].name} and {sdists[0].name}: no test files, py.typed, LICENSE and metadata present")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
