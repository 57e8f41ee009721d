"""Qwen2 decoder (gte-Qwen2, stella, jina-code-embeddings: ``Qwen2Model`` / ``Qwen2ForCausalLM``) on flat,
unpadded batches: Qwen3's decoder (``wde/models/qwen3.py``: RMSNorm, SwiGLU MLP, RoPE, weight names) with
Qwen2's attention: q/k/v projections with a bias, o_proj without, and no q/k RMSNorm. The sliding window
follows the same rule as Qwen3's (``use_sliding_window``, then ``layer_types`` / ``max_window_layers``).

Attention is causal, as transformers runs these checkpoints; a config.json with ``"is_causal": false`` (the
flag transformers' masks read, for checkpoints trained bidirectionally such as gte-Qwen2-7B-instruct) runs it
bidirectionally. Without sentence-transformers metadata, embeddings pool the last token, normalized.
"""

from __future__ import annotations

from typing import Any

from wde.models.qwen3 import Qwen3Attention, Qwen3Model


class Qwen2Attention(Qwen3Attention):
    qk_norm = False

    @classmethod
    def projection_biases(cls, config: dict[str, Any]) -> tuple[bool, bool]:
        return True, False  # transformers' Qwen2Attention: q/k/v biased, o_proj not (no config key)


class Qwen2Model(Qwen3Model):
    """Token embeddings + decoder layers + final norm; returns the last hidden state [num_tokens, hidden]."""

    attention_cls = Qwen2Attention


class Qwen2ForCausalLM(Qwen2Model):
    """A ``Qwen2ForCausalLM`` checkpoint (``model.`` prefixed; gte-Qwen2 and stella ship this one) served for
    embeddings: the lm_head is skipped on load."""
