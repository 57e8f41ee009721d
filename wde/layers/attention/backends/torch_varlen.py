"""PyTorch's own varlen attention (``torch.nn.attention.varlen.varlen_attn``, torch >= 2.9) on the flat batch.

It calls the FlashAttention-2 kernels compiled into torch's CUDA build, so a CUDA machine gets an unpadded
varlen kernel (and CUDA graphs) with no extra package: the backend the CUDA platform picks when flash-attn is
not installed. Its keywords grew with torch (2.9: ``is_causal``; 2.11: ``scale``, ``window_size``; 2.13:
``enable_gqa``), so the call is built from the signature this torch has: without ``scale`` the query is
pre-scaled, without ``enable_gqa`` grouped k / v are repeated to one per query head, and without
``window_size`` only plain or causal layers are accepted (``supports`` says so).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, cast

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata
from wde.layers.attention.spec import AttentionSpec

MAX_HEAD_SIZE = 256  # FlashAttention-2's largest head
MIN_COMPUTE_CAPABILITY = 8  # torch builds its FlashAttention-2 kernels for Ampere (sm_80) and newer
# varlen_attn logs "Using Flash Attention backend for varlen_attn" at INFO on every call: every layer of
# every batch in a server that logs at INFO
TORCH_VARLEN_LOGGER = "torch.nn.attention.varlen"


@functools.cache
def varlen_parameters() -> frozenset[str] | None:
    """The keyword names this torch's ``varlen_attn`` takes; None where torch has no varlen_attn (< 2.9)."""
    try:
        from torch.nn.attention import varlen
    except ImportError:
        return None
    if not hasattr(varlen, "varlen_attn"):
        return None
    return frozenset(inspect.signature(varlen.varlen_attn).parameters)


class TorchVarlenBackend(AttentionBackend):
    name = "torch_varlen"
    supported_devices = ("cuda",)
    supported_dtypes = (torch.float16, torch.bfloat16)
    supports_cuda_graphs = True  # reads only cu_seqlens (a tensor) and max_seqlen
    supports_key_limits = False  # a varlen kernel attends to every token of a sequence

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
        available, reason = super().is_available(device_type, dtype)
        if not available:
            dtype_only = device_type in cls.supported_devices
            return False, reason + ("; pass --dtype float16 or bfloat16" if dtype_only else "")
        if varlen_parameters() is None:
            return False, f"needs torch >= 2.9 (torch.nn.attention.varlen), this is torch {torch.__version__}"
        if not torch.cuda.is_available():
            return False, "torch sees no CUDA device"
        if not torch.backends.cuda.is_flash_attention_available():
            return False, f"this torch build ({torch.__version__}) has no FlashAttention kernels"
        major, minor = torch.cuda.get_device_capability()
        if major < MIN_COMPUTE_CAPABILITY:
            return False, f"needs compute capability >= 8.0 (Ampere), this GPU has {major}.{minor}"
        return True, ""

    @classmethod
    def supports(cls, spec: AttentionSpec) -> tuple[bool, str]:
        if spec.position_bias:
            return False, "varlen_attn takes no additive position bias (MPNet); use torch_sdpa"
        if spec.head_size % 8 != 0 or spec.head_size > MAX_HEAD_SIZE:
            return False, f"head size {spec.head_size} is not a multiple of 8 up to {MAX_HEAD_SIZE}"
        parameters = varlen_parameters() or frozenset()
        if spec.sliding_window is not None and "window_size" not in parameters:
            return False, (
                f"this torch's ({torch.__version__}) varlen_attn has no window_size: sliding windows need "
                "torch >= 2.11 (or flash_attn / torch_sdpa)"
            )
        if spec.causal and not {"window_size", "is_causal"} & parameters:
            return False, f"this torch's ({torch.__version__}) varlen_attn has no causal mode"
        return True, ""

    def __init__(self, spec: AttentionSpec) -> None:
        super().__init__(spec)
        from torch.nn.attention.varlen import varlen_attn

        # returns one tensor: no return_aux is asked for
        self._varlen_attn = cast("Callable[..., torch.Tensor]", varlen_attn)
        logging.getLogger(TORCH_VARLEN_LOGGER).setLevel(logging.WARNING)
        parameters = varlen_parameters() or frozenset()
        self._kwargs: dict[str, Any] = {}
        # 1. mask: (left, right) as flash-attn counts it; (-1, 0) is plain causal, (-1, -1) no mask
        if "window_size" in parameters:
            left, right = spec.sliding_window or (-1, -1)
            self._kwargs["window_size"] = (left, 0 if spec.causal else right)  # a tuple: (-1, 0) means causal
        elif spec.causal:
            self._kwargs["is_causal"] = True  # the first varlen_attn (torch 2.9)
        # 2. scale: the kernel's default is head_size ** -0.5
        self._query_scale = 1.0
        if "scale" in parameters:
            self._kwargs["scale"] = spec.scale
        elif spec.scale != spec.head_size**-0.5:
            self._query_scale = spec.scale / spec.head_size**-0.5
        # 3. grouped-query heads: natively where the keyword exists, else k / v repeated
        self._native_gqa = "enable_gqa" in parameters
        if self._native_gqa and spec.num_kv_heads != spec.num_heads:
            self._kwargs["enable_gqa"] = True

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        # [num_tokens, num_heads | num_kv_heads, head_size] x3 -> [num_tokens, num_heads, head_size]
        if not self._native_gqa:
            key, value = self.expand_kv(key, value)
        if self._query_scale != 1.0:
            query = query * self._query_scale
        return self._varlen_attn(
            query,
            key,
            value,
            metadata.cu_seqlens,
            metadata.cu_seqlens,
            metadata.max_seqlen,
            metadata.max_seqlen,
            **self._kwargs,
        )
