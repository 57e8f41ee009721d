"""The attention op inside a model: built from the layer's ``AttentionSpec``; its backend is bound after
the runner picked one that honours every layer's spec, and reads the batch's metadata from the forward
context."""

from __future__ import annotations

import torch
from torch import nn

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import get_forward_context


class Attention(nn.Module):
    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        self.backend: AttentionBackend | None = None

    def bind(self, backend_cls: type[AttentionBackend]) -> None:
        self.backend = backend_cls(self.spec)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        # [num_tokens, num_heads | num_kv_heads, head_size] x3 -> [num_tokens, num_heads, head_size]
        if self.backend is None:
            raise RuntimeError("attention layer without a backend: bind_attention_backend(model, cls) first")
        return self.backend.forward(query, key, value, get_forward_context().attn_metadata)


def attention_specs(model: nn.Module) -> list[AttentionSpec]:
    """Every attention layer's spec, in module order."""
    return [module.spec for module in model.modules() if isinstance(module, Attention)]


def bind_attention_backend(model: nn.Module, backend_cls: type[AttentionBackend]) -> None:
    """One backend instance per attention layer, each from that layer's spec."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.bind(backend_cls)
