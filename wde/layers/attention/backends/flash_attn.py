"""flash-attn varlen kernel on the flat batch (CUDA, float16/bfloat16).
Optional extra: pip install 'wde[flash]'."""

from __future__ import annotations

import importlib.util

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata
from wde.layers.attention.spec import AttentionSpec


class FlashAttnBackend(AttentionBackend):
    name = "flash_attn"
    supported_devices = ("cuda",)
    supported_dtypes = (torch.float16, torch.bfloat16)
    supports_cuda_graphs = True
    supports_key_limits = False  # varlen kernels attend to every token of a sequence

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
        available, reason = super().is_available(device_type, dtype)
        if not available:
            return available, reason
        if importlib.util.find_spec("flash_attn") is None:
            return False, "flash-attn is not installed: pip install 'wde[flash]'"
        if not torch.cuda.is_available():  # get_device_capability() would raise
            return False, "torch sees no CUDA device"
        major, _ = torch.cuda.get_device_capability()
        if major < 8:
            return False, f"needs compute capability >= 8.0 (Ampere), this GPU has {major}.x"
        return True, ""

    @classmethod
    def supports(cls, spec: AttentionSpec) -> tuple[bool, str]:
        if spec.position_bias:
            return False, "additive position bias (MPNet) is not wired for flash-attn; use torch_sdpa"
        if spec.head_size % 8 != 0 or spec.head_size > 256:
            return False, f"head size {spec.head_size} is not a multiple of 8 up to 256"
        return True, ""  # causal, sliding windows and grouped-query heads natively

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        from flash_attn import flash_attn_varlen_func

        self._varlen_func = flash_attn_varlen_func
        self._window = spec.sliding_window or (-1, -1)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        return self._varlen_func(
            query,
            key,
            value,
            cu_seqlens_q=metadata.cu_seqlens,
            cu_seqlens_k=metadata.cu_seqlens,
            max_seqlen_q=metadata.max_seqlen,
            max_seqlen_k=metadata.max_seqlen,
            softmax_scale=self.scale,
            causal=self.causal,
            window_size=self._window,
        )
