"""EuroBERT (``EuroBertModel``, ``EuroBertForMaskedLM`` served for embeddings, and
``EuroBertForSequenceClassification``) on flat, unpadded batches: a Llama-style encoder, i.e. Qwen3's decoder
(``wde/models/qwen3.py``: RMSNorm, SwiGLU MLP, grouped-query heads, RoPE, weight names) attending
bidirectionally, with no q/k norms, ``attention_bias`` on q/k/v and o alike (and ``mlp_bias``, which
Qwen3's MLP reads).

Without sentence-transformers metadata, embeddings mean-pool, unnormalized (sentence-transformers' default
for a bare encoder). The classifier pools as ``classifier_pooling`` says: ``bos`` (the first token) or
``mean``, then dense -> GELU -> classifier; ``late`` runs dense -> GELU -> classifier on every token and
averages the logits.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from wde.config import num_labels
from wde.layers.pooler.methods import PoolingMetadata, cls_pool, mean_pool
from wde.models.qwen3 import Qwen3Attention, Qwen3Model
from wde.models.weight_names import WeightTarget

CLASSIFIER_POOLINGS = ("bos", "mean", "late")


def _bidirectional(config: dict[str, Any]) -> dict[str, Any]:
    """EuroBERT attends every token of its sequence whatever config.json says (its attention sets
    ``is_causal = False``)."""
    return {**config, "is_causal": False}


class EuroBertAttention(Qwen3Attention):
    """Qwen3's attention (``attention_bias`` on q/k/v and o alike) without q/k norms or windows."""

    qk_norm = False

    @classmethod
    def sliding_window(cls, config: dict[str, Any], layer_index: int) -> int | None:
        return None


class EuroBertModel(Qwen3Model):
    """Token embeddings + bidirectional layers + final norm; the last hidden state [num_tokens, hidden]."""

    attention_cls: ClassVar[type[Qwen3Attention]] = EuroBertAttention

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(_bidirectional(config))


class EuroBertForMaskedLM(EuroBertModel):
    """The published checkpoints' architecture: the encoder served for embeddings, the MLM head skipped."""

    def weight_target(self, name: str) -> WeightTarget | None:
        if name.startswith("lm_head."):
            return None
        return super().weight_target(name)


class EuroBertForSequenceClassification(EuroBertModel):
    """The encoder (``model.`` prefixed), dense -> GELU -> classifier, pooled as ``classifier_pooling``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        # ``clf_pooling``: the name in the Hub repos' config.json (written for their remote code)
        self.classifier_pooling = config.get("classifier_pooling") or config.get("clf_pooling") or "late"
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"classifier_pooling {self.classifier_pooling!r} in config.json is not one of "
                f"{CLASSIFIER_POOLINGS}"
            )
        hidden_size = config["hidden_size"]
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.classifier = nn.Linear(hidden_size, num_labels(config))

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        if self.classifier_pooling == "late":  # every token's logits, averaged per sequence
            logits = self.classifier(F.gelu(self.dense(hidden_states)))  # [num_tokens, num_labels]
            return mean_pool(logits, meta)  # [num_seqs, num_labels]
        pool = cls_pool if self.classifier_pooling == "bos" else mean_pool
        return self.classifier(F.gelu(self.dense(pool(hidden_states, meta))))  # [num_seqs, num_labels]

    def weight_target(self, name: str) -> WeightTarget | None:
        if name.startswith(("dense.", "classifier.")):
            return name, None
        return super().weight_target(name)
