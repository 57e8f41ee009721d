"""W8A8 int8 linear layers for CPU: int8 weights (one scale per output row, symmetric) times int8 activations
(one scale per token, symmetric, computed on the fly), accumulated in int32 by ``torch._int_mm`` (oneDNN,
VNNI where the CPU has it), then scaled back to float32 and the bias added.

    y[t, o] ~= (sum_i xq[t, i] * wq[o, i]) * x_scale[t] * w_scale[o] + bias[o]
    x_scale[t] = max_i |x[t, i]| / 127        w_scale[o] = max_i |w[o, i]| / 127

Dynamic per-token scales need no calibration set, and a token's scale never depends on its batch-mates, so
an embedding does not change with what it is batched with. The quantize -> matmul -> dequantize chain runs
through ``torch.compile`` (inductor fuses the row max, division, rounding and cast into one pass, and the
two scales and the bias into another); where no compiler works it runs eagerly, ~1.3x slower.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
from torch import nn

logger = logging.getLogger(__name__)

INT8_MAX = 127
MIN_SCALE = 1e-12  # an all-zero row quantizes to zeros instead of dividing by zero


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] float -> (int8 [rows, cols], float32 scale [rows, 1]), symmetric per row."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp_min(MIN_SCALE) / INT8_MAX
    return (x / scale).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8), scale


def int8_linear(
    x: torch.Tensor, weight_t: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x`` [num_tokens, in] float32, ``weight_t`` [in, out] int8 (a transposed view of [out, in]),
    ``weight_scale`` [out] -> [num_tokens, out] float32."""
    x_q, x_scale = quantize_rows(x)
    accumulated = torch._int_mm(x_q, weight_t)  # [num_tokens, out] int32
    out = accumulated.float() * x_scale * weight_scale
    return out if bias is None else out + bias


@functools.cache
def int8_linear_kernel() -> Callable[..., torch.Tensor]:
    """``int8_linear`` compiled once per process for any token count and layer size (compiled here, on a
    small input, so that a compiler failure shows at load), or eager ``int8_linear`` when compiling fails
    (no C++ compiler, an unsupported platform): the same results, slower."""
    compiled = torch.compile(int8_linear, dynamic=True)
    weight_q, weight_scale = quantize_rows(torch.randn(8, 16))
    try:
        with torch.inference_mode():
            compiled(torch.randn(3, 16), weight_q.t(), weight_scale.view(-1), torch.zeros(8))
    except Exception as e:  # any compiler failure means: run eagerly
        logger.warning("int8 kernels run eagerly (~1.3x slower): torch.compile failed: %s", e)
        return int8_linear
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

    def __init__(self, weight_q: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight_q.shape[1], weight_q.shape[0]
        self.register_buffer("weight_q", weight_q)  # [out, in] int8
        self.register_buffer("weight_scale", weight_scale)  # [out] float32
        self.register_buffer("bias", bias)  # [out] float32 or None
        self.kernel = int8_linear_kernel()

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        weight = linear.weight.detach().float()  # [out, in]
        weight_q, weight_scale = quantize_rows(weight)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        return cls(weight_q, weight_scale.view(-1), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        leading = x.shape[:-1]
        out = self.kernel(x.reshape(-1, self.in_features), self.weight_q.t(), self.weight_scale, self.bias)
        return out.view(*leading, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights + activations"
