"""``WdeModel``: the contract between a model family and the engine's runtime. What the engine reads from a
model class or instance once it is built is declared here, with its default; a family overrides what differs
and nothing else. What the model folder's readers need before that (tasks, output kinds, default pooling, an
LLM reranker's tokens, the config hooks) is the class's entry in ``wde/model_folder/registry.py``, torch-free,
and nowhere else.

Adding a family:

1. a model file here: subclass ``WdeModel``, implement ``forward`` and ``load_weights``, override the class
   attributes below that differ (``weight_prefixes``, ``supports_cuda_graphs``) and the optional methods it
   has (``compile_blocks``, ``compute_logits`` for the score task, ``compute_mlm_logits`` for SPLADE);
2. one line in ``ENTRIES`` (``wde/model_folder/registry.py``): ``"<Architecture>": ModelEntry(
   "wde.models.<family>:<Class>", <tasks>, ...)`` with the facts that differ from ``ModelEntry``'s defaults;
   a config hook whose published configs need one (NomicBERT's names, Jina v3's adapters) goes in a torch-free
   module beside the registry (``wde/model_folder/nomic_bert_config.py``);
3. tests against ``transformers`` / sentence-transformers on a tiny random checkpoint (``tests/models/``);
   ``tests/unit/models/test_interface.py`` checks that the class and its entry agree.

The engine never probes a model with ``getattr`` / ``hasattr``: what a family can do beyond the defaults is
read from the ``supports_*`` / ``has_*`` attributes, which ``__init_subclass__`` derives from the methods the
family overrides (nothing to keep in step by hand).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import nn

from wde.layers.pooler.methods import PoolingMetadata


class WdeModel(nn.Module):
    """A model the engine can serve: built from its ``config.json`` dict on the meta device, filled by
    ``load_weights``, run on flat batches (``[num_tokens]`` ids -> ``[num_tokens, hidden_size]`` states)."""

    # ---- declared by the family (class attributes) -----------------------------------------------------
    weight_prefixes: ClassVar[tuple[str, ...]] = ()
    """Checkpoint name prefixes of the base model, stripped on load ("bert.encoder..." -> "encoder...")."""

    supports_cuda_graphs: ClassVar[bool] = True
    """False when ``forward`` lays its batch out from host-side lengths (a graph replay would reuse them)."""

    # ---- derived from what the family overrides (see ``__init_subclass__``) ----------------------------
    supports_compile_blocks: ClassVar[bool] = False
    """It overrides ``compile_blocks`` (``--compile-model``; int8 quantization compiles when it can)."""

    has_classifier: ClassVar[bool] = False
    """It overrides ``compute_logits`` (every class serving the score task must)."""

    has_mlm_head: ClassVar[bool] = False
    """It overrides ``compute_mlm_logits`` (SPLADE sparse output needs it)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.supports_compile_blocks = cls.compile_blocks is not WdeModel.compile_blocks
        cls.has_classifier = cls.compute_logits is not WdeModel.compute_logits
        cls.has_mlm_head = cls.compute_mlm_logits is not WdeModel.compute_mlm_logits

    def __init__(self, config: dict[str, Any]) -> None:
        """Build the layers from ``config.json`` (the engine builds on the meta device: no initialization)."""
        super().__init__()
        self.config = config

    # ---- what every family implements -----------------------------------------------------------------
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[num_tokens]`` ids and positions of a flat batch -> the last hidden states
        ``[num_tokens, hidden_size]`` (the attention backend's metadata says where sequences end)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy the checkpoint's HF-named tensors in; returns the parameter names loaded."""
        raise NotImplementedError(f"{type(self).__name__} does not implement load_weights")

    # ---- optional: override to declare the capability ---------------------------------------------------
    def compile_blocks(self) -> None:
        """torch.compile the repeated blocks (dynamic token counts; attention stays eager)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot compile its blocks; leave --compile-model off"
        )

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        """The classifier: ``[num_tokens, hidden_size]`` -> ``[num_seqs, num_labels]`` (it pools as the
        family does: first token, mean, last token)."""
        raise NotImplementedError(f"{type(self).__name__} has no classifier head; serve it with task 'embed'")

    def compute_mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The masked-LM head: ``[num_tokens, hidden_size]`` -> ``[num_tokens, vocab_size]``."""
        raise NotImplementedError(
            f"{type(self).__name__} has no masked-LM head, which SPLADE pooling needs; serve a *ForMaskedLM "
            "checkpoint (BertForMaskedLM, DistilBertForMaskedLM)"
        )
