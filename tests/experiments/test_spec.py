"""Experiment files (most.experiments.spec): the TOML examples of the module docstrings build,
method labels name folders and rows, and the example files compare what they say."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import most
import most.config
import most.experiments.spec
from most import registry
from most.config import ConfigError
from most.experiments import load_experiment, parse_experiment, run_experiment, summary_table
from most.experiments.spec import tomllib

from tests._tables import CENTRAL, FED, with_

EXAMPLES = Path(__file__).parents[2] / "examples"


def toml_examples(doc: str) -> list[str]:
    """The literal blocks of a docstring (the indented lines after a line ending in ``::``) that
    hold TOML tables: each dedented."""
    blocks, lines, i = [], doc.splitlines(), 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        text = inspect.cleandoc("\n".join(body))
        if re.search(r"^\[[^\]]+\]", text, re.M):
            blocks.append(text)
    return blocks


def test_toml_examples_are_found_in_a_docstring():
    doc = "Text::\n\n    [a]\n    x = 1\n\n    [b.c]\n    y = 2\n\nMore::\n\n    results/\n        x\n"
    assert toml_examples(doc) == ["[a]\nx = 1\n\n[b.c]\ny = 2"]


#: the modules whose docstrings show experiment files or their tables
DOCUMENTED = [most.config, most.experiments.spec]
DOC_EXAMPLES = [pytest.param(module, text, id=f"{module.__name__}:{k}")
                for module in DOCUMENTED for k, text in enumerate(toml_examples(module.__doc__ or ""))]


@pytest.mark.parametrize("module, text", DOC_EXAMPLES)
def test_every_toml_example_of_the_docstrings_builds(module, text):
    """A whole experiment file is read as `most run --dry-run` reads it (every run built, every
    key checked); a fragment of method tables is built in a centralised and a federated file."""
    table = tomllib.loads(text)
    if "problem" in table or "data" in table:
        assert len(parse_experiment(table)) >= 1
        return
    for base in (CENTRAL, FED):
        assert len(parse_experiment(with_(base, seeds=[0], methods=table["methods"]))) >= 1


def test_both_documented_modules_show_an_example():
    assert [module for module, _ in (p.values for p in DOC_EXAMPLES)] == DOCUMENTED


def test_the_docstring_examples_build_the_components_they_name():
    (spec,) = toml_examples(most.experiments.spec.__doc__ or "")
    paper = next(run for run in parse_experiment(tomllib.loads(spec)).runs if run.label == "MosT paper")
    assert type(paper.build_without_data()["method"].combiner).__name__ == "MinNorm"
    (fragment,) = toml_examples(most.config.__doc__ or "")
    method = parse_experiment(with_(CENTRAL, methods=tomllib.loads(fragment)["methods"])).runs[0]
    built = method.build_without_data()["method"]
    assert type(built.marginals).__name__ == "Curriculum" and built.marginals.end == 0.3


@pytest.mark.parametrize("label", ["", " ", "\t"])
def test_an_empty_or_blank_method_label_is_refused(label):
    table = with_(CENTRAL, methods={label: {"type": "MosT", "n_models": 3}})
    with pytest.raises(ConfigError, match=r"methods\..*: a method's label names its runs' folder and its row in the "
                                          r"report, so it may not be empty or blank"):
        parse_experiment(table)


def test_the_regression_example_compares_the_default_most_with_the_paper_variant(tmp_path):
    experiment = load_experiment(EXAMPLES / "regression.toml")
    runs = {run.label: run for run in experiment.runs if run.seed == 0}
    default, paper = (runs[label].build_without_data()["method"] for label in ("MosT", "MosT (paper)"))
    assert paper == registry.variant("paper", most.MosT(n_models=4, rounds=150, lr=0.05))
    assert default == most.MosT(n_models=4, rounds=150, lr=0.05)
    short = load_experiment(EXAMPLES / "regression.toml", overrides=[
        "seeds=[0]", "methods.MosT.rounds=20", 'methods."MosT (paper)".rounds=20',
        "methods.Linearization.rounds=2", "methods.MGDA.rounds=2"])
    root = run_experiment(short, tmp_path, progress=False, echo=lambda s: None)
    groups = summary_table(root)["groups"]
    assert groups["MosT"]["test_loss"][0] != groups["MosT (paper)"]["test_loss"][0]
