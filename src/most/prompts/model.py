"""Soft prompts with a linear head on a frozen encoder, as a MosT problem over instances.

One model ``theta`` is ``n_tokens`` prompt vectors and a linear head, flattened. For an
instance (hidden states ``h [T, D]`` of its text at the insertion layer, from
:meth:`~most.prompts.FrozenEncoder.encode`), the prompt vectors are inserted right after the
``[CLS]`` token, the upper encoder layers run on ``[h_cls, p_1..p_P, h_1..]``, the outputs of
the text's own tokens are averaged (the encoder's sentence pooling), and the head maps the
average to label logits. The encoder stays frozen: only prompts and head train.

:func:`prompt_problem` makes every training instance one objective
(``L_i(theta) = cross-entropy of instance i``, paper Section 6.4) through
:meth:`most.Problem.from_instances`.

Example (a random stand-in for the encoder's hidden states; see :mod:`most.prompts`):
    >>> import torch
    >>> from most.prompts import SoftPromptModel
    >>> class Identity:            # an "encoder" with no upper layers
    ...     hidden_size, n_layers = 8, 1
    ...     def check_layer(self, layer): return layer
    ...     def top(self, h, mask, layer): return h
    >>> model = SoftPromptModel(Identity(), layer=0, n_tokens=2, n_labels=2)
    >>> model.dim                  # 2 prompt vectors of 8 + an 8 -> 2 head
    34
    >>> h, mask = torch.randn(5, 8), torch.ones(5)
    >>> model.logits(torch.zeros(model.dim), h, mask).shape
    torch.Size([2])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.func import vmap
from torch.nn import functional as F

from .._validation import check_positive_int
from ..problem import Problem
from ._checks import class_indices
from .encoder import EncodedTexts

__all__ = ["SoftPromptModel", "prompt_problem"]


@dataclass(frozen=True)
class SoftPromptModel:
    """The parameter layout and forward pass of one soft-prompt model.

    Args:
        encoder: a :class:`~most.prompts.FrozenEncoder` (anything with ``hidden_size``,
            ``check_layer`` and ``top(hidden, mask, layer)``).
        layer: the insertion layer (the one the hidden states were encoded at).
        n_tokens: P, prompt vectors per model.
        n_labels: classes of the head.
    """

    encoder: Any
    layer: int
    n_tokens: int = 4
    n_labels: int = 2

    def __post_init__(self) -> None:
        self.encoder.check_layer(self.layer)
        check_positive_int(self.n_tokens, name="n_tokens")
        if isinstance(self.n_labels, bool) or not isinstance(self.n_labels, int) or self.n_labels < 2:
            raise ValueError(f"`n_labels` must be an int >= 2; got {self.n_labels!r}.")

    @property
    def width(self) -> int:
        return int(self.encoder.hidden_size)

    @property
    def dim(self) -> int:
        d = self.width
        return self.n_tokens * d + self.n_labels * d + self.n_labels

    def split(self, theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``theta [dim]`` -> ``(prompt [P, D], weight [C, D], bias [C])``."""
        d, p, c = self.width, self.n_tokens, self.n_labels
        prompt, weight, bias = torch.split(theta, [p * d, c * d, c])
        return prompt.view(p, d), weight.view(c, d), bias

    def logits(self, theta: Tensor, hidden: Tensor, mask: Tensor) -> Tensor:
        """Label logits ``[C]`` of one instance (``hidden [T, D]``, ``mask [T]``)."""
        prompt, weight, bias = self.split(theta)
        p = prompt.shape[0]
        x = torch.cat([hidden[:1], prompt.to(hidden), hidden[1:]])
        ones = torch.ones(p, dtype=mask.dtype, device=mask.device)
        x = self.encoder.top(x, torch.cat([mask[:1], ones, mask[1:]]), self.layer)
        keep = torch.cat([mask[:1], torch.zeros_like(ones), mask[1:]])  # pool the text's own tokens
        pooled = (x * keep[:, None]).sum(0) / keep.sum()
        return F.linear(pooled, weight, bias)

    def loss(self, theta: Tensor, hidden: Tensor, mask: Tensor, label: Tensor) -> Tensor:
        """Cross-entropy of one instance."""
        return F.cross_entropy(self.logits(theta, hidden, mask)[None], label.reshape(1))

    def init(self, n_models: int, generator: torch.Generator, token_pool: Tensor) -> Tensor:
        """``[n_models, dim]`` starting models.

        Each prompt vector is a copy of a random real token's hidden state from ``token_pool``
        ``[K, D]`` (prompts start on the data's own scale, as prompt tuning starts from
        vocabulary embeddings); the head is drawn like ``nn.Linear``'s.
        """
        if token_pool.ndim != 2 or token_pool.shape[1] != self.width or token_pool.shape[0] == 0:
            raise ValueError(f"`token_pool` must be [K >= 1, {self.width}]; got {tuple(token_pool.shape)}.")
        pick = torch.randint(0, token_pool.shape[0], (n_models, self.n_tokens), generator=generator)
        prompts = token_pool[pick].reshape(n_models, -1)
        bound = 1.0 / self.width ** 0.5
        head = (torch.rand(n_models, self.n_labels * (self.width + 1), generator=generator) * 2 - 1) * bound
        return torch.cat([prompts.to(head), head], dim=1)

    @torch.no_grad()
    def predict_logits(self, params: Tensor, texts: EncodedTexts, batch_size: int = 256) -> Tensor:
        """``[m, N, C]`` logits of every model (``params [m, dim]``) on every instance, ``batch_size``
        instances at a time. ``texts`` must be encoded at ``self.layer``."""
        batch_size = check_positive_int(batch_size, name="batch_size")
        _check_layer_of(texts, self)
        if not isinstance(params, Tensor) or params.ndim != 2 or params.shape[1] != self.dim:
            shape = tuple(params.shape) if isinstance(params, Tensor) else type(params).__name__
            raise ValueError(f"`params` must be a tensor [m, {self.dim}] (one model per row); got {shape}.")
        per_instance = vmap(self.logits, in_dims=(None, 0, 0))
        per_model = vmap(per_instance, in_dims=(0, None, None))
        chunks = [per_model(params, texts.hidden[s:s + batch_size], texts.mask[s:s + batch_size])
                  for s in range(0, len(texts), batch_size)]
        if not chunks:  # no texts (an empty subset)
            return params.new_zeros(params.shape[0], 0, self.n_labels)
        return torch.cat(chunks, dim=1)


def _check_layer_of(texts: EncodedTexts, model: SoftPromptModel) -> None:
    """Refuses texts encoded at another layer than the one the model inserts its prompts at (the
    upper layers would run on hidden states of the wrong depth without an error)."""
    if texts.layer != model.layer:
        raise ValueError(
            f"The texts were encoded at layer {texts.layer} but the model inserts its prompts at layer "
            f"{model.layer}; encode with `layer={model.layer}`."
        )


def prompt_problem(model: SoftPromptModel, texts: EncodedTexts, labels: Tensor, *, seed_pool: int = 2048) -> Problem:
    """The MosT problem of Section 6.4: one objective per training instance.

    ``texts`` must be encoded at ``model.layer``; ``labels [N]`` are integer class labels in
    ``0..n_labels-1`` (floating labels are refused, not truncated). The initial prompts copy token
    states of these training texts (the first ``seed_pool`` real tokens are the candidates).
    """
    seed_pool = check_positive_int(seed_pool, name="seed_pool")
    _check_layer_of(texts, model)
    labels = class_indices(labels, name="labels", size=len(texts), classes=model.n_labels, what="class labels")
    pool = texts.hidden[texts.mask > 0][:seed_pool]

    def init(m: int, generator: torch.Generator) -> Tensor:
        return model.init(m, generator, pool)

    return Problem.from_instances(
        model.loss, (texts.hidden, texts.mask, labels), dim=model.dim, init=init,
        metadata={"application": "soft prompts", "layer": model.layer, "n_tokens": model.n_tokens},
    )
