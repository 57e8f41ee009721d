"""xformers memory-efficient attention with a BlockDiagonalMask over the flat batch (CUDA).
Optional extra: pip install 'wde[xformers]'."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata


@dataclass
class XFormersMetadata(AttentionMetadata):
    attn_bias: Any = None  # xformers BlockDiagonalMask (or its causal variant)


class XFormersBackend(AttentionBackend):
    name = "xformers"
    supported_devices = ("cuda",)

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype, head_size: int) -> tuple[bool, str]:
        available, reason = super().is_available(device_type, dtype, head_size)
        if not available:
            return available, reason
        if importlib.util.find_spec("xformers") is None:
            return False, "xformers is not installed: pip install 'wde[xformers]'"
        return True, ""

    def __init__(self, num_heads: int, head_size: int, causal: bool = False) -> None:
        super().__init__(num_heads, head_size, causal)
        from xformers import ops as xops
        from xformers.ops.fmha.attn_bias import BlockDiagonalMask

        self._attention = xops.memory_efficient_attention_forward
        self._mask_cls = BlockDiagonalMask

    def build_metadata(self, seq_lens: list[int], device: torch.device) -> XFormersMetadata:
        base = super().build_metadata(seq_lens, device)
        attn_bias = self._mask_cls.from_seqlens(seq_lens)
        if self.causal:
            attn_bias = attn_bias.make_causal()
        return XFormersMetadata(base.seq_lens, base.cu_seqlens, base.max_seqlen, attn_bias=attn_bias)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: XFormersMetadata
    ) -> torch.Tensor:
        out = self._attention(
            query.unsqueeze(0),
            key.unsqueeze(0),
            value.unsqueeze(0),
            attn_bias=metadata.attn_bias,
            scale=self.scale,
        )  # [1, num_tokens, num_heads, head_size]
        return out.squeeze(0)
