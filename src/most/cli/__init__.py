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

The modules: ``_app`` (the application, its groups, and how a command reports a user's error),
``_run`` (demo, run, report, plot, flower credentials), ``_bench`` (the benchmark suites) and
``_choose`` (choose-m).
"""

from __future__ import annotations

# The modules register their commands on `app` as they are imported, in the order `most --help`
# lists them: demo, run, report, plot (and flower credentials), the bench suites, choose-m.
from ._app import app, bench_app, flower_app
from ._run import demo, flower_credentials, plot_cmd, report_cmd, run_cmd
from ._bench import bench_federated, bench_few_objective, bench_mtl, bench_prompts, bench_structure
from ._choose import choose_m_cmd

__all__ = ["app", "bench_app", "flower_app", "demo", "run_cmd", "flower_credentials", "report_cmd", "plot_cmd",
           "bench_few_objective", "bench_structure", "bench_mtl", "bench_prompts", "bench_federated", "choose_m_cmd"]
