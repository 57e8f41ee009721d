"""W8A8 int8 linear layers for CPU: int8 weights (one scale per output row, symmetric) times int8 activations
(one scale per token, symmetric, computed on the fly), accumulated in int32 by the int8 GEMM this CPU runs
fastest (``int8_gemm.py``: ``torch._int_mm`` with VNNI, oneDNN's u8 x s8 kernels without), then scaled back
to float32 and the bias added.

    y[t, o] ~= (sum_i xq[t, i] * wq[o, i]) * x_scale[t] * w_scale[o] + bias[o]
    x_scale[t] = max_i |x[t, i]| / 127        w_scale[o] = max_i |w[o, i]| / weight_max (127, or 63 on u8s8)

Dynamic per-token scales need no calibration set, and a token's scale never depends on its batch-mates, so
an embedding does not change with what it is batched with. Where the model ran a few calibration texts at
load, each layer's inputs are first divided by fixed per-channel factors that its weights were multiplied by
(``input_scale`` = 1 / s, ``smoothing.py``): the outlier channels no longer take a token's int8 range.
The quantize -> matmul -> dequantize chain runs through ``torch.compile`` (inductor fuses the smoothing
multiply, row max, division, rounding and cast into one pass, and the two scales and the bias into another);
where no compiler works it runs eagerly, ~1.3x slower.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
from torch import nn

from wde.layers.quantization.int8_gemm import (
    U8_ZERO_POINT,
    WEIGHT_MAX,
    Int8Gemm,
    chosen_gemm,
    int8_mm_u8s8,
    prepack,
)
from wde.layers.quantization.smoothing import smoothing_scales

logger = logging.getLogger(__name__)

INT8_MAX = 127
MIN_SCALE = 1e-12  # an all-zero row quantizes to zeros instead of dividing by zero


def quantize_rows(x: torch.Tensor, max_value: int = INT8_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] float -> (int8 [rows, cols] in [-max_value, max_value], float32 scale [rows, 1]),
    symmetric per row."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp_min(MIN_SCALE) / max_value
    return (x / scale).round().clamp(-max_value, max_value).to(torch.int8), scale


def int8_linear(
    x: torch.Tensor,
    weight_q: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    input_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch._int_mm``: ``x`` [num_tokens, in] float32, ``weight_q`` [out, in] int8, ``weight_scale`` [out],
    ``input_scale`` [in] (smoothing's 1 / s, or None) -> [num_tokens, out] float32."""
    if input_scale is not None:
        x = x * input_scale
    x_q, x_scale = quantize_rows(x)
    accumulated = torch._int_mm(x_q, weight_q.t())  # [num_tokens, out] int32
    out = accumulated.float() * x_scale * weight_scale
    return out if bias is None else out + bias


def int8_linear_u8s8(
    x: torch.Tensor,
    weight_q: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    input_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """oneDNN u8 x s8 (CPUs without VNNI): the same arguments, ``weight_q`` within [-63, 63]."""
    if input_scale is not None:
        x = x * input_scale
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp_min(MIN_SCALE) / INT8_MAX  # [num_tokens, 1]
    x_u8 = (x / scale).round().clamp(-INT8_MAX, INT8_MAX).add(U8_ZERO_POINT).to(torch.uint8)
    out = int8_mm_u8s8(x_u8, weight_q, weight_scale) * scale  # [num_tokens, out]
    return out if bias is None else out + bias


LINEAR_KERNELS: dict[str, Callable[..., torch.Tensor]] = {
    "int_mm": int8_linear,
    "onednn_u8s8": int8_linear_u8s8,
}


@functools.cache
def int8_linear_kernel(gemm_name: str) -> Callable[..., torch.Tensor]:
    """The linear of ``gemm_name`` compiled once per process for any token count and layer size (compiled
    here, on a small input, so that a compiler failure shows at load), or eager when compiling fails (no C++
    compiler, an unsupported platform): the same results, slower."""
    eager = LINEAR_KERNELS[gemm_name]
    compiled = torch.compile(eager, dynamic=True)
    weight_q, weight_scale = quantize_rows(torch.randn(8, 16), WEIGHT_MAX[gemm_name])
    try:
        with torch.inference_mode():
            compiled(torch.randn(3, 16), weight_q, weight_scale.view(-1), torch.zeros(8), torch.ones(16))
    except Exception as e:  # any compiler failure means: run eagerly
        logger.warning("int8 kernels run eagerly (~1.3x slower): torch.compile failed: %s", e)
        return eager
    return compiled


# Inductor inlines a cheap pointwise chain into every consumer; after an int8 linear the chain that feeds the
# next one (dequantize + bias + GELU's erf) has two consumers, the row max and the quantization, and was
# computed twice. A lower threshold makes it a buffer written once (-35% on that kernel, ~5% of an int8 pass).
INT8_COMPILE_OPTIONS = {"realize_opcount_threshold": 8}


def compile_options(module: nn.Module) -> dict[str, int]:
    """``torch.compile`` options for a block of a model: the int8 ones where it holds int8 linears."""
    return dict(INT8_COMPILE_OPTIONS) if any(isinstance(m, Int8Linear) for m in module.modules()) else {}


class Int8Linear(nn.Module):
    """A drop-in for ``nn.Linear`` (same in/out features, any leading dims) holding int8 weights."""

    kernel: Callable[..., torch.Tensor]  # the (compiled) int8 matmul + dequantize
    weight_q: torch.Tensor  # buffers, declared for the type checker
    weight_scale: torch.Tensor
    bias: torch.Tensor | None
    input_scale: torch.Tensor | None

    def __init__(
        self,
        weight_q: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        gemm_name: str,
        input_scale: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = weight_q.shape[1], weight_q.shape[0]
        self.gemm_name = gemm_name
        self.register_buffer("weight_q", weight_q)  # [out, in] int8
        self.register_buffer("weight_scale", weight_scale)  # [out] float32
        self.register_buffer("bias", bias)  # [out] float32 or None
        self.register_buffer("input_scale", input_scale)  # [in] float32 (smoothing's 1 / s) or None
        if gemm_name == "onednn_u8s8":
            prepack(self.weight_q)  # once, at load, not in the first request
        self.kernel = int8_linear_kernel(gemm_name)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, gemm: Int8Gemm | None = None, input_max: torch.Tensor | None = None
    ) -> Int8Linear:
        """``gemm``: the int8 GEMM to run (default: the one this CPU runs fastest, ``chosen_gemm()``).
        ``input_max`` [in]: the largest |input| per channel over calibration texts, to smooth by
        (``smoothing.py``); None: no smoothing."""
        gemm = gemm or chosen_gemm()
        weight = linear.weight.detach().float()  # [out, in]
        input_scale = None
        if input_max is not None:
            scales = smoothing_scales(input_max, weight)  # [in]
            weight, input_scale = weight * scales, 1.0 / scales
        weight_q, weight_scale = quantize_rows(weight, gemm.weight_max)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        return cls(weight_q, weight_scale.view(-1), bias, gemm.name, input_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        leading = x.shape[:-1]
        out = self.kernel(
            x.reshape(-1, self.in_features), self.weight_q, self.weight_scale, self.bias, self.input_scale
        )
        return out.view(*leading, self.out_features)

    def extra_repr(self) -> str:
        smoothed = ", smoothed" if self.input_scale is not None else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 ({self.gemm_name})"
            f"{smoothed}"
        )
