"""The attention op inside a model: built from the layer's ``AttentionSpec``; its backend is bound after
the runner picked one that honours every layer's spec, and reads the batch's metadata from the forward
context."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from wde.layers.attention.backend import AttentionBackend, PositionBiasForward
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import get_forward_context


class Attention(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        self.backend: AttentionBackend | None = None

    def bind(self, backend_cls: type[AttentionBackend]) -> None:
        self.backend = backend_cls(self.spec)

    @torch.compiler.disable  # a model that compiles a whole layer compiles around this op
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # [num_tokens, num_heads | num_kv_heads, head_size] x3 -> [num_tokens, num_heads, head_size];
        # position_bias [num_heads, max_seqlen, max_seqlen], only for a spec with position_bias
        if self.backend is None:
            raise RuntimeError("attention layer without a backend: bind_attention_backend(model, cls) first")
        metadata = get_forward_context().attn_metadata
        if self.spec.position_bias != (position_bias is not None):
            raise ValueError(
                f"an attention layer with spec position_bias={self.spec.position_bias} was called "
                f"{'without' if position_bias is None else 'with'} a position_bias tensor"
            )
        if position_bias is None:
            return self.backend.forward(query, key, value, metadata)
        biased_forward = cast(PositionBiasForward, self.backend.forward)  # supports() let only these bind
        return biased_forward(query, key, value, metadata, position_bias=position_bias)


def attention_specs(model: nn.Module) -> list[AttentionSpec]:
    """Every attention layer's spec, in module order."""
    return [module.spec for module in model.modules() if isinstance(module, Attention)]


def bind_attention_backend(model: nn.Module, backend_cls: type[AttentionBackend]) -> None:
    """One backend instance per attention layer, each from that layer's spec."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.bind(backend_cls)
