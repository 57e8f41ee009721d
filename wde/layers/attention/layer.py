"""The attention op inside a model: reads the batch's metadata from the forward context."""

from __future__ import annotations

import torch
from torch import nn

from wde.layers.attention.backend import AttentionBackend
from wde.layers.forward_context import get_forward_context


class Attention(nn.Module):
    def __init__(self, backend: AttentionBackend) -> None:
        super().__init__()
        self.backend = backend

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        # [num_tokens, num_heads, head_size] x3 -> [num_tokens, num_heads, head_size]
        return self.backend.forward(query, key, value, get_forward_context().attn_metadata)
