"""The commands on experiment files and results folders: ``most demo``, ``most run``,
``most report``, ``most plot``, and ``most flower credentials``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional, cast

import typer

from ._app import Failure, app, flower_app, out_folder, set_threads


@app.command()
def demo(
    out: Path = typer.Option(Path("demo_out"), help="Folder for results.json and the figures."),
    seed: int = typer.Option(0, min=0, max=2**64 - 1, help="Seed of the data and of the models."),
    n_objectives: int = typer.Option(40, min=2, help="Number of objectives n (regression tasks)."),
    n_models: int = typer.Option(4, min=1, help="Number of models m (also the number of true groups)."),
    rounds: int = typer.Option(150, min=1, help="Rounds T."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Run MosT, linear scalarisation and MGDA on a built-in many-objective problem.

    The problem: n least-squares tasks whose data come from m hidden linear models (plus a
    small per-task perturbation). Each task uses its best model on its validation split;
    the table reports test mean squared error over tasks.

    Example:

        most demo --out demo_out
    """
    import torch

    from .. import plots
    from ..problems import mixed_regression
    from ..solver import MGDA, Linearization, MosT

    from ..checkpoint import atomic_write_text, check_writable_folder

    if n_models > n_objectives:
        raise Failure(f"--n-models ({n_models}) must not exceed --n-objectives ({n_objectives}).")
    out_folder(out)
    check_writable_folder(out)  # a folder the results cannot go to is refused before the fits
    data = mixed_regression(n_objectives=n_objectives, n_groups=n_models, seed=seed)
    train = data.problem("train")
    common: dict[str, Any] = dict(n_models=n_models, rounds=rounds, lr=0.05, seed=seed, progress=not quiet)
    methods = {
        "MosT": MosT(**common),
        "Linearization": Linearization(**common),
        "MGDA": MGDA(**common),
    }
    rows: list[tuple[str, float, float, float, float]] = []
    curves, per_objective, results = {}, {}, {}
    for name, method in methods.items():
        tic = time.perf_counter()
        result = method.fit(train)
        seconds = time.perf_counter() - tic
        test_loss = data.test_losses(result.params)  # each task picks its model on validation
        worst = test_loss.sort(descending=True).values[: max(1, n_objectives // 5)]
        recovery = torch.cdist(data.betas, result.params).min(1).values
        results[name] = {
            "mean_test_mse": float(test_loss.mean()),
            "worst20_test_mse": float(worst.mean()),
            "max_recovery_error": float(recovery.max()),
            "seconds": seconds,
        }
        stats = results[name]
        rows.append((name, stats["mean_test_mse"], stats["worst20_test_mse"], stats["max_recovery_error"],
                     stats["seconds"]))
        # the loop records every round's mean_best_loss (None only in records of older checkpoints)
        curves[name] = cast(list[float], [r.mean_best_loss for r in result.history])
        per_objective[name] = test_loss.tolist()
        if name == "MosT":
            plots.assignment_heatmap(result.assignment, title="MosT: final assignment Γ",
                                     path=out / "assignment.png")

    out.mkdir(parents=True, exist_ok=True)
    plots.training_curves(curves, ylabel="mean over tasks of best-model train MSE",
                          title="training", path=out / "curves.png")
    plots.per_objective_bars(per_objective, ylabel="test MSE (model picked on validation)",
                             title="per-task test error", path=out / "per_task.png")
    atomic_write_text(out / "results.json", json.dumps({"config": {
        "n_objectives": n_objectives, "n_models": n_models, "rounds": rounds, "seed": seed},
        "results": results}, indent=2))

    header = f"{'method':<14} {'mean test MSE':>14} {'worst-20% MSE':>14} {'recovery error':>16} {'seconds':>8}"
    typer.echo(f"\n{n_objectives} regression tasks from {n_models} hidden models, {n_models} models trained:\n")
    typer.echo(header)
    typer.echo("-" * len(header))
    for name, mean, worst, rec, sec in rows:
        typer.echo(f"{name:<14} {mean:>14.3f} {worst:>14.3f} {rec:>16.3f} {sec:>8.1f}")
    typer.echo("\nmean test MSE: over the tasks, each using its model chosen on validation (noise floor ≈ 0.25)\n"
               "worst-20% MSE: the same over the worst fifth of the tasks\n"
               "recovery error: how far the worst-found hidden model is from its nearest trained model")
    typer.echo(f"Wrote {out}/results.json, curves.png, assignment.png, per_task.png")


_EXAMPLE = """
    name = "syn00"
    seeds = [0, 1, 2]

    [data]
    name = "fedprox_synthetic"
    model_shift = 0.0
    feature_shift = 0.0

    [model]
    name = "logistic_regression"

    [federated]
    rounds = 100

    [methods.MosT]
    n_models = 5
    server_lr = 5.0

    [methods.FedAvg]
    n_models = 5
"""


_RUN_HELP = """Run every run of an experiment file: methods x sweep values x seeds.

    Each run writes a folder OUT/NAME/runs/GROUP/seedN/ with its resolved configuration,
    per-round metrics (metrics.jsonl), final models and plan (final.pt) and result.json.
    Finished runs are skipped when the command is repeated; runs are checkpointed every
    `checkpoint_every` rounds, and a killed run continues with --resume, ending with the same
    result as an uninterrupted run. Every value of the file is checked before any run starts.

    An experiment file (federated; a centralised one has a [problem] table instead of [data],
    [model] and [federated]; see docs/experiments.md and examples/):
    """ + _EXAMPLE + """
    Examples:

        most run examples/synthetic.toml

        most run examples/synthetic.toml --resume --quiet

        most run examples/synthetic.toml --dry-run

        most run examples/synthetic.toml --set methods.MosT.server_lr=3 --set 'seeds=[0]' --out /tmp/try
    """


@app.command("run", help=_RUN_HELP.replace("[", "\\["))  # rich markup would eat [tables]
def run_cmd(
    experiment: Path = typer.Argument(..., help="The experiment file (TOML).", show_default=False),
    out: Path = typer.Option(Path("results"), help="Results root; the runs go to OUT/NAME/."),
    resume: bool = typer.Option(False, "--resume", help="Continue interrupted runs from their checkpoints."),
    restart: bool = typer.Option(False, "--restart", help="Start interrupted runs over."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the file and list the runs; run nothing."),
    threads: int = typer.Option(1, min=1, help="torch threads (1 gives the same numbers on every machine)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars (for CI and logs)."),
    batch: bool = typer.Option(True, "--batch/--no-batch", help="Train federated runs that share data, model and "
                               "local protocol (seeds, methods, swept values) as one batched job, and centralised "
                               "runs on one problem in step; the results are those of --no-batch, which makes the "
                               "runs one by one (centralised: to round-off)."),
    overrides: Optional[list[str]] = typer.Option(
        None, "--set", help="KEY=VALUE over the file's value (repeatable), checked as the file is: "
        "--set methods.MosT.server_lr=3 --set 'seeds=[0, 1]' --set federated.device=cuda. The values applied "
        "are recorded in OUT/NAME/experiment.toml."),
) -> None:
    from ..checkpoint import CheckpointError
    from ..config import ConfigError
    from ..experiments import load_experiment, run_experiment
    from ..experiments.spec import check_runs
    from ..experiments.store import BusyFolderError, CorruptFileError

    exp = load_experiment(experiment, overrides or ())
    if resume and restart:
        raise Failure("--resume and --restart exclude each other; choose one.")
    out_folder(out)
    set_threads(threads)
    if dry_run:
        check_runs(exp)  # what the runs check at their start (e.g. clients or objectives vs models), made now
        typer.echo(f"{exp.name} ({exp.kind}): {len(exp)} runs, checked against their data")
        for run in exp.runs:
            typer.echo(f"  {run.folder}")
        return
    try:
        root = run_experiment(exp, out, resume=resume, restart=restart, progress=not quiet, echo=typer.echo,
                              batch=batch)
    except (ConfigError, CorruptFileError, CheckpointError, BusyFolderError):  # the user's to fix: one line, exit 2
        raise
    except ValueError as exc:  # e.g. a run diverged: finished runs and checkpoints are kept
        raise Failure(f"{exc} Finished runs are kept; fix the file and run the command again.", 1) from exc
    except KeyboardInterrupt:
        import shlex

        again = ["most", "run", str(experiment), "--out", str(out), "--resume",
                 *(f"--threads={threads}" for _ in range(threads != 1)), *(["--no-batch"] if not batch else []),
                 *(["--quiet"] if quiet else []), *(arg for item in overrides or () for arg in ("--set", item))]
        typer.echo(f"\nInterrupted. Finished runs are kept; continue the others from their last checkpoint "
                   f"with: {shlex.join(again)}", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"Done. Table: most report {root}   Figures: most plot {root}")


@flower_app.command("credentials")
def flower_credentials(
    out: Path = typer.Argument(..., help="Folder for the certificates and keys.", show_default=False),
    host: list[str] = typer.Option(["127.0.0.1", "localhost"], "--host",
                                   help="Repeat: an IP or DNS name clients use to reach the SuperLink."),
    nodes: int = typer.Option(1, min=0, help="Number of SuperNode key pairs."),
    valid_days: int = typer.Option(365, min=1, help="Validity of the certificates."),
) -> None:
    """Make what a Flower deployment with TLS and SuperNode authentication needs: a CA and the
    SuperLink's certificate (ca.crt, server.pem, server.key) and one key pair per SuperNode
    (supernode_K, supernode_K.pub). Copy ca.crt and supernode_K to SuperNode K's machine; keep
    server.key on the SuperLink's. The docs' Flower page (Deployment) shows the commands.

    Example:

        most flower credentials creds --host 10.0.0.5 --host superlink.lab --nodes 3
    """
    from ..flower.credentials import make_certificates, make_node_keys

    if (out / "server.key").exists():
        raise Failure(f"{out} already holds credentials (server.key); choose another folder.")
    try:
        certs = make_certificates(out, hosts=host, valid_days=valid_days)
    except ValueError as exc:
        raise Failure(f"{'--valid-days' if 'valid_days' in str(exc) else '--host'}: {exc}") from exc
    keys = [make_node_keys(out, k) for k in range(nodes)]
    typer.echo(f"CA: {certs.ca_cert}\nSuperLink: {certs.server_cert}, {certs.server_key} (hosts: {', '.join(host)})")
    for k in keys:
        typer.echo(f"SuperNode: {k.private_key} (register {k.public_key} with `flwr supernode register`)")


@app.command("report")
def report_cmd(
    results: Path = typer.Argument(..., help="A results folder written by `most run` (OUT/NAME).",
                                   show_default=False),
) -> None:
    """Print the table of a results folder (mean ± std over seeds, per method and swept value)
    and write RESULTS/report.md and RESULTS/report.csv. Nothing is re-run. In a folder this user
    may only read, the table is printed and the files are not written (a note says so).

    Example:

        most report results/syn00
    """
    from ..experiments import report

    import errno

    try:
        typer.echo(report(results))
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        typer.echo(report(results, write=False))  # the folder may only be read: the table alone
        typer.echo(f"Note: report.md and report.csv were not written ({exc.strerror}: {exc.filename}); the folder "
                   "may only be read here. The table is above.", err=True)


@app.command("plot")
def plot_cmd(
    results: Path = typer.Argument(..., help="A results folder written by `most run` (OUT/NAME).",
                                   show_default=False),
    out: Path = typer.Option(None, help="Folder for the figures (default RESULTS/figures)."),
    formats: list[str] = typer.Option(["png", "pdf"], "--format", help="Repeat: png, pdf, svg."),
    seed: int = typer.Option(None, help="The seed whose run the one-run figures show (Γ, assignment, sparsity "
                                        "and drift, Pareto front); default: each method's first seed."),
) -> None:
    """Draw the figures of a results folder from the stored files: training curves, the sorted
    per-objective profile, worst-k % bars, the Γ heat map (objectives grouped by model) and, where
    it changes, the assignment stack plot per method, Γ sparsity and drift, Pareto fronts (two
    objectives).

    Example:

        most plot results/syn00
        most plot results/syn00 --seed 2
    """
    from ..experiments import plot

    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        raise Failure(f"--format {bad[0]!r}: use png, pdf or svg.")
    out_folder(out)
    try:
        files = plot(results, out=out, formats=tuple(formats), seed=seed)
    except ValueError as exc:  # a seed with no run names the option; other errors speak for themselves
        if seed is None or "has no finished run of seed" not in str(exc):
            raise
        raise Failure(f"--seed {seed}: {exc}") from None
    typer.echo(f"Wrote {len(files)} files:\n  " + "\n  ".join(files))
