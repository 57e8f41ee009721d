"""An activation already quantized for an ``Fp8Linear``: what a fused kernel hands the next fp8 GEMM instead
of its 16-bit output, so that the per-token quantization costs no kernel and no memory pass of its own
(``wde.layers.fused.ops``: ``add_rms_norm`` and ``act_and_mul`` with ``quantize=True``)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Fp8Activation(NamedTuple):
    values: torch.Tensor  # [num_tokens, features] float8 e4m3, contiguous
    scale: torch.Tensor  # [num_tokens, 1] float32: values * scale ~= the 16-bit activation
    dtype: torch.dtype  # the 16-bit dtype it was quantized from (and the GEMM's output dtype)


def takes_fp8(module: torch.nn.Module) -> bool:
    """Whether ``module`` (an ``Fp8Linear``) takes an ``Fp8Activation`` as its input."""
    return bool(getattr(module, "takes_fp8_activation", False))
