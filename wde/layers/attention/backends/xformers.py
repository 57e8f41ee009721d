"""xformers memory-efficient attention with a BlockDiagonalMask over the flat batch (CUDA).
Optional extra: pip install 'wde[xformers]'."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata
from wde.layers.attention.spec import AttentionSpec


@dataclass
class XFormersMetadata(AttentionMetadata):
    attn_bias: Any = None  # xformers BlockDiagonalMask
    causal_bias: Any = None  # its causal variant, made on first use by a causal layer


class XFormersBackend(AttentionBackend):
    name = "xformers"
    supports_key_limits = False  # varlen kernels attend to every token of a sequence
    supported_devices = ("cuda",)

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
        available, reason = super().is_available(device_type, dtype)
        if not available:
            return available, reason
        if importlib.util.find_spec("xformers") is None:
            return False, "xformers is not installed: pip install 'wde[xformers]'"
        return True, ""

    @classmethod
    def supports(cls, spec: AttentionSpec) -> tuple[bool, str]:
        if spec.position_bias:
            return False, "additive position bias (MPNet) is not wired for xformers; use torch_sdpa"
        if spec.sliding_window is not None:
            return False, "sliding-window layers are not wired for xformers; use flash_attn or torch_sdpa"
        return True, ""

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        from xformers import ops as xops

        self._attention = xops.memory_efficient_attention_forward

    @classmethod
    def build_metadata(
        cls, seq_lens: list[int], device: torch.device, num_keys: list[int] | None = None
    ) -> XFormersMetadata:
        from xformers.ops.fmha.attn_bias import BlockDiagonalMask

        base = super().build_metadata(seq_lens, device, num_keys)
        attn_bias = BlockDiagonalMask.from_seqlens(seq_lens)
        return XFormersMetadata(base.seq_lens, base.cu_seqlens, base.max_seqlen, attn_bias=attn_bias)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        assert isinstance(metadata, XFormersMetadata), "metadata from XFormersBackend.build_metadata"
        key, value = self.expand_kv(key, value)
        attn_bias = metadata.attn_bias
        if self.causal:
            if metadata.causal_bias is None:
                metadata.causal_bias = attn_bias.make_causal()
            attn_bias = metadata.causal_bias
        out = self._attention(
            query.unsqueeze(0),
            key.unsqueeze(0),
            value.unsqueeze(0),
            attn_bias=attn_bias,
            scale=self.scale,
        )  # [1, num_tokens, num_heads, head_size]
        return out.squeeze(0)
