"""``WdeModel``: the contract between a model family and the engine. Everything the engine reads from a model
class or instance is declared here, with its default; a family overrides what differs and nothing else.

Adding a family: subclass ``WdeModel``, implement ``forward`` and ``load_weights``, override the class
attributes and methods below that differ from their defaults, and add one line to
``MODEL_REGISTRY`` (``wde/model_folder/registry.py``). The engine never probes a model with ``getattr`` /
``hasattr``: what a family can do beyond the defaults is read from the ``supports_*`` / ``has_*``
attributes, which ``__init_subclass__`` derives from the methods the family overrides (nothing to keep in
step by hand).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch
from torch import nn

from wde.config import PoolingConfig, TaskAdapters
from wde.layers.pooler.methods import PoolingMetadata


class WdeModel(nn.Module):
    """A model the engine can serve: built from its ``config.json`` dict on the meta device, filled by
    ``load_weights``, run on flat batches (``[num_tokens]`` ids -> ``[num_tokens, hidden_size]`` states)."""

    # ---- declared by the family (class attributes) -----------------------------------------------------
    supported_tasks: ClassVar[tuple[str, ...]] = ("embed",)
    """The tasks it serves ("embed", "score"); the first is the default of ``--task auto``."""

    supported_outputs: ClassVar[tuple[str, ...]] = ("dense",)
    """The embed task's output kinds it can produce (``wde.output_kinds``); model-directory files may add
    others (BGE-M3's heads, a ColBERT's modules)."""

    weight_prefixes: ClassVar[tuple[str, ...]] = ()
    """Checkpoint name prefixes of the base model, stripped on load ("bert.encoder..." -> "encoder...")."""

    default_pooling: ClassVar[PoolingConfig | None] = None
    """Pooling without sentence-transformers metadata; None: CLS + normalize (a decoder declares "last")."""

    pair_template: ClassVar[str | None] = None
    """LLM rerankers: the text a (query, document) pair becomes (``str.format`` with instruction=, query=,
    document=); None: the tokenizer's own pair encoding."""

    score_tokens: ClassVar[tuple[str, ...] | None] = None
    """LLM rerankers: the tokens whose last-position logits score a pair (e.g. ("no", "yes"))."""

    default_instruction: ClassVar[str | None] = None
    """LLM rerankers: the ``pair_template``'s {instruction} unless the engine or a request names one."""

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

    @classmethod
    def standard_config(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        """``config.json`` under transformers' names, which the engine reads (hidden_size,
        max_position_embeddings, vocab_size, ...): a family whose published configs spell them otherwise
        (NomicBERT's GPT-2 names) maps them here. Idempotent; by default the config as it is."""
        return hf_config

    @classmethod
    def reserved_positions(cls, hf_config: dict[str, Any]) -> int:
        """Rows of the position table no token can use (RoBERTa-style models number positions from
        padding_idx + 1): ``max_position_embeddings`` minus this is the longest input."""
        return 0

    @classmethod
    def task_adapters(cls, hf_config: dict[str, Any], model_path: str) -> TaskAdapters | None:
        """The LoRA task adapters a request can pick (``ModelConfig.task_adapters``), read from the model
        directory before load so that a request naming one the checkpoint lacks is refused at the door; None
        (the default): the model has none. A family that has them runs each token with its request's adapter
        (``get_forward_context().adapters``, ``wde/layers/lora.py``)."""
        return None

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
