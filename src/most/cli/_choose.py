"""``most choose-m``: the number of models m of an experiment file's method, picked on validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, cast

import typer

from ._app import Failure, app, out_folder, set_threads


#: the most counts --n-models may ask for (each is a fit of its own)
_MAX_COUNTS = 1000


def _model_counts(text: str) -> list[int]:
    """``--n-models``: ``A:B`` (A to B, both included) or a comma list ``1,2,4,8``."""
    try:
        if ":" in text:
            low, high = (int(part) for part in text.split(":"))
            if high - low + 1 > _MAX_COUNTS:  # each count is a fit: refused before the list is made
                raise Failure(f"--n-models {text!r} asks for {high - low + 1} fits, one per count; give at most "
                              f"{_MAX_COUNTS} counts (e.g. 1:8, or a comma list such as 1,2,4,8,16).")
            counts = list(range(low, high + 1))
        else:
            counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise Failure(f"--n-models {text!r}: give a range A:B (e.g. 1:8, both ends included) or a comma list "
                      "(e.g. 1,2,4,8).") from None
    if not counts or min(counts) < 1:
        raise Failure(f"--n-models {text!r}: give at least one count, each >= 1 (e.g. 1:8).")
    return counts


@app.command("choose-m")
def choose_m_cmd(
    experiment: Path = typer.Argument(..., help="A centralised experiment file (TOML, with a [problem] table).",
                                      show_default=False),
    n_models: str = typer.Option("1:8", "--n-models", help="The counts m to try: A:B (both included) or 1,2,4,8."),
    method: str = typer.Option(None, "--method", help="The method's label in the file (needed when it has several)."),
    rule: str = typer.Option("elbow", help="elbow (the fewest models within --tolerance of the best) or best."),
    tolerance: float = typer.Option(0.05, min=0.0, help="The elbow rule's relative tolerance."),
    out: Path = typer.Option(Path("choose_m_out"), help="Folder for choose_m.md, choose_m.json and choose_m.png."),
    threads: int = typer.Option(1, min=1, help="torch threads (1 gives the same numbers on every machine)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Fit one method of an experiment file for a range of m and pick m on validation.

    The problem and the method come from the file (its first seed and, with a \\[sweep], its
    first configuration; the method's n_models is replaced). Each objective uses its best model
    on train, and a fit scores the mean over objectives of that model's validation loss; with a
    problem without a validation split (quadratic_clusters, the ZDT problems) the training
    losses score the fits instead. Elbow picks the fewest models within --tolerance of the
    lowest score, best the lowest. Prints the table and writes OUT/choose_m.md,
    OUT/choose_m.json and OUT/choose_m.png.

    Examples:

        most choose-m examples/regression.toml --method MosT --n-models 1:8

        most choose-m experiment.toml --method MosT --n-models 2,4,8 --rule best --out choose_m
    """
    from ..checkpoint import atomic_write_text
    from ..experiments import load_experiment
    from ..experiments.spec import CENTRALISED
    from ..problems import MixedRegression
    from ..selection import RULES, choose_n_models

    exp = load_experiment(experiment)
    if exp.kind != CENTRALISED:
        raise Failure(f"{experiment} is a federated experiment; choose-m takes a centralised one (a [problem] "
                      "table and [methods]).")
    if rule not in RULES:
        raise Failure(f"--rule {rule!r}: use {' or '.join(RULES)}.")
    counts = _model_counts(n_models)
    labels = list(dict.fromkeys(run.label for run in exp.runs))
    if method is None and len(labels) > 1:
        raise Failure(f"{experiment} has {len(labels)} methods ({', '.join(labels)}); choose one with --method.")
    label = labels[0] if method is None else method
    if label not in labels:
        raise Failure(f"--method {label!r}: no such method in {experiment}; its methods: {', '.join(labels)}.")
    runs = [run for run in exp.runs if run.label == label]
    out_folder(out)
    set_threads(threads)
    run = runs[0]  # the first seed of the first configuration
    groups = list(dict.fromkeys(r.group for r in runs))
    if len(groups) > 1:
        typer.echo(f"Note: the file's [sweep] gives {len(groups)} configurations of {label}; choose-m fits the "
                   f"first, {run.group}.")
    seeds = list(dict.fromkeys(r.seed for r in runs))
    if len(seeds) > 1:
        typer.echo(f"Note: the file has seeds {seeds}; choose-m uses the first, {run.seed}.")
    source = run.load_data()["problem"]
    splits = isinstance(source, MixedRegression)
    train, validation = (source.problem("train"), source.problem("val")) if splits else (source, None)
    if not splits:
        typer.echo(f"Note: the problem {run.config['problem'].get('name')!r} has no validation split; the "
                   "training losses score the fits (they tend to fall as m grows: read the elbow).")
    checked_rule = cast(Literal["elbow", "best"], rule)  # one of RULES: checked above
    selection = choose_n_models(run.build_without_data()["method"], train, validation, n_models=counts,
                                rule=checked_rule, tolerance=tolerance, progress=not quiet)
    table = selection.table()
    header = f"# Choosing m: {exp.name}, {run.group} (seed {run.seed})\n\n"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "choose_m.md", header + table)
    atomic_write_text(out / "choose_m.json", json.dumps({"experiment": exp.name, "method": label, "seed": run.seed,
                                                          **selection.to_dict()}, indent=2))
    selection.plot(out / "choose_m.png", title=f"{exp.name}: {label}")
    typer.echo(f"\n{table}\nWrote {out}/choose_m.md, choose_m.json and choose_m.png.")
