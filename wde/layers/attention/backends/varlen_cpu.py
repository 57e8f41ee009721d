"""wde's own CPU attention kernel over the flat batch: every sequence attended in place (no padding, no
gather / scatter copies; 2-4x faster than grouped SDPA at head size 32).

It runs where ``varlen_kernel`` has a kernel for the CPU (AVX-512F, else AVX2 + FMA) and a C compiler
built it, on float32 layers (bfloat16 ones where the CPU has AVX512-BF16: the bf16-products kernel on
bfloat16 tensors): bidirectional, no sliding window, every token a key, a head size the kernel's
vectors divide (16 on AVX-512, 8 on AVX2; at most 128). Grouped-query heads are read in place; a position
bias (MPNet's) is added to the scores in the kernel. The selector says which of these failed when it passes
the backend over; the CPU platform then takes ``torch_sdpa``. ``WDE_VARLEN_ATTENTION=0`` switches it off
(the platform order skips it); ``WDE_VARLEN_ISA=avx2`` forces the AVX2 kernel on an AVX-512 CPU. A layer
that allows bf16 products (an int8 model's) runs the bf16-products kernel where the CPU has AVX512-BF16
(``varlen_kernel.bf16_products_reason()``; ``WDE_VARLEN_BF16=0`` keeps it on the float32 kernel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata
from wde.layers.attention.backends import varlen_kernel
from wde.layers.attention.spec import AttentionSpec

SWITCH_ENV = "WDE_VARLEN_ATTENTION"  # "0": never use the kernel


@dataclass
class VarlenCpuMetadata(AttentionMetadata):
    seq_starts: torch.Tensor | None = None  # [num_seqs + 1] int64: cu_seqlens as the kernel reads them
    work_order: torch.Tensor | None = None  # [num_seqs] int64: sequence indices, longest first


class VarlenCpuBackend(AttentionBackend):
    name = "varlen_cpu"
    supports_key_limits = False
    supported_devices = ("cpu",)
    supported_dtypes = (torch.float32, torch.bfloat16)

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        # the layer allows bf16 products and this CPU has the kernel for them
        self.bf16_products = spec.bf16_products and not varlen_kernel.bf16_products_reason()

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
        available, reason = super().is_available(device_type, dtype)
        if not available:
            return False, reason
        if os.environ.get(SWITCH_ENV, "1") == "0":
            return False, f"switched off by {SWITCH_ENV}=0"
        reason = varlen_kernel.unavailable_reason()  # builds the kernel on first use
        if not reason and dtype == torch.bfloat16:
            reason = varlen_kernel.bf16_io_reason()
            reason = reason and f"no bfloat16 kernel: {reason}"
        return not reason, reason

    @classmethod
    def supports(cls, spec: AttentionSpec) -> tuple[bool, str]:
        if spec.causal:
            return False, "the kernel attends bidirectionally (no causal mask); torch_sdpa runs causal layers"
        if spec.sliding_window is not None:
            return False, "the kernel has no sliding window; torch_sdpa runs windowed layers"
        reason = varlen_kernel.head_size_reason(spec.head_size)
        return not reason, reason

    @classmethod
    def build_metadata(
        cls, seq_lens: list[int], device: torch.device, num_keys: list[int] | None = None
    ) -> VarlenCpuMetadata:
        base = super().build_metadata(seq_lens, device, num_keys)  # refuses key limits
        return VarlenCpuMetadata(
            base.seq_lens,
            base.cu_seqlens,
            base.max_seqlen,
            num_keys,
            base.cu_seqlens.to(torch.int64),
            varlen_kernel.work_order(seq_lens),
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        metadata: AttentionMetadata,
        position_bias: torch.Tensor | None = None,  # [num_heads, max_seqlen, max_seqlen]
    ) -> torch.Tensor:
        """[num_tokens, num_heads | num_kv_heads, head_size] x3 (strided views are read in place) ->
        [num_tokens, num_heads, head_size]; ``position_bias`` (MPNet's) added to the scores in the kernel"""
        assert isinstance(metadata, VarlenCpuMetadata) and metadata.seq_starts is not None
        assert metadata.work_order is not None
        query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
        if position_bias is not None:
            position_bias = position_bias.float()  # the kernel adds a float32 bias (no copy if it is one)
            if position_bias.stride(-1) != 1:
                position_bias = position_bias.contiguous()
        return varlen_kernel.varlen_attention(
            query,
            key,
            value,
            metadata.seq_starts,
            metadata.work_order,
            self.scale,
            position_bias,
            bf16_products=self.bf16_products,
        )
