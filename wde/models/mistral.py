"""Mistral decoder (e5-mistral-7b-instruct, SFR-Embedding-Mistral: ``MistralModel`` / ``MistralForCausalLM``)
on flat, unpadded batches: Qwen3's decoder (``wde/models/qwen3.py``: RMSNorm, SwiGLU MLP, RoPE, weight
names) with Mistral's attention: no projection biases, no q/k RMSNorm, and ``sliding_window`` applied to every
layer whenever config.json sets it (transformers' Mistral has no ``use_sliding_window`` switch).

Attention is causal (``"is_causal": false`` in config.json runs it bidirectionally, as transformers' masks
do). Without sentence-transformers metadata, embeddings pool the last token, normalized, as e5-mistral does.
"""

from __future__ import annotations

from typing import Any

from wde.models.qwen3 import Qwen3Attention, Qwen3Model


class MistralAttention(Qwen3Attention):
    qk_norm = False

    @classmethod
    def projection_biases(cls, config: dict[str, Any]) -> tuple[bool, bool]:
        return False, False

    @classmethod
    def sliding_window(cls, config: dict[str, Any], layer_index: int) -> int | None:
        window = config.get("sliding_window")
        return int(window) if window else None


class MistralModel(Qwen3Model):
    """Token embeddings + decoder layers + final norm; returns the last hidden state [num_tokens, hidden]."""

    attention_cls = MistralAttention


class MistralForCausalLM(MistralModel):
    """A ``MistralForCausalLM`` checkpoint (``model.`` prefixed, as SFR-Embedding-Mistral ships) served for
    embeddings: the lm_head is skipped on load."""
