"""W8A8 float8 linear layers for GPUs with FP8 matrix units (compute capability 8.9 and newer: Ada, Hopper,
Blackwell): float8 e4m3 weights with one scale per output row, computed at load, times float8 e4m3
activations with one scale per token, computed on the fly, multiplied by ``torch._scaled_mm`` (the tensor
cores' FP8 GEMM, accumulating in float32 and scaling rows and columns on the way out):

    y[t, o] ~= (sum_i xq[t, i] * wq[o, i]) * x_scale[t] * w_scale[o] + bias[o]
    x_scale[t] = max_i |x[t, i]| / 448        w_scale[o] = max_i |w[o, i]| / 448   (448: e4m3's largest)

As with int8 (``int8_linear.py``), dynamic per-token scales need no calibration set and a token's result
never depends on its batch-mates. On a GPU the activation's row max, division and cast are one Triton kernel
(``fp8_rows_kernel.py``); elsewhere PyTorch ops.
"""

from __future__ import annotations

import torch
from torch import nn

from wde.layers.fused.ops import fused_kernels_enabled
from wde.layers.quantization.fp8_activation import Fp8Activation

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
MIN_SCALE = 1e-12  # an all-zero row quantizes to zeros instead of dividing by zero
GEMM_MULTIPLE = 16  # _scaled_mm needs both of a weight's dimensions divisible by 16
MIN_CAPABILITY = (8, 9)


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] -> (float8 e4m3 [rows, cols], float32 scale [rows, 1]), symmetric per row: one
    Triton kernel where the fused kernels run (CUDA, ``wde.layers.fused.ops``), else PyTorch ops."""
    if fused_kernels_enabled(x):
        from wde.layers.quantization import fp8_rows_kernel

        return fp8_rows_kernel.quantize_fp8_rows(x)
    return quantize_fp8_rows_reference(x)


def quantize_fp8_rows_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_fp8_rows`` in PyTorch ops (the CPU, and the kernel's reference)."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp_min(MIN_SCALE) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def check_fp8_device(device: torch.device) -> None:
    """Refuse a CUDA device without FP8 matrix units, in one line."""
    if device.type != "cuda":
        return
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise ValueError(
            f"quantization 'fp8' needs a GPU with FP8 matrix units (compute capability 8.9 or newer: Ada, "
            f"Hopper, Blackwell); {name} is {capability[0]}.{capability[1]}: serve it without "
            "--quantization (float16 or bfloat16)"
        )


def can_quantize(linear: nn.Linear) -> bool:
    return linear.in_features % GEMM_MULTIPLE == 0 and linear.out_features % GEMM_MULTIPLE == 0


class Fp8Linear(nn.Module):
    """``nn.Linear`` with float8 weights (``weight`` [out, in] e4m3, ``weight_scale`` [1, out] float32); its
    output has the input's dtype (float16 or bfloat16)."""

    # whether _scaled_mm writes float16 with row-wise scales here (some versions write only bfloat16)
    float16_output: bool | None = None
    takes_fp8_activation = True  # a fused kernel may hand it an Fp8Activation (fp8_activation.takes_fp8)
    weight: torch.Tensor  # [out, in] float8 e4m3 (a buffer)
    weight_scale: torch.Tensor  # [1, out] float32 (a buffer)

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Fp8Linear:
        weight, scale = quantize_fp8_rows_reference(linear.weight.detach())  # once, at load: PyTorch ops
        bias = None if linear.bias is None else linear.bias.detach()
        return cls(weight, scale.t().contiguous(), bias)  # scale [1, out]

    def forward(self, x: torch.Tensor | Fp8Activation) -> torch.Tensor:
        if isinstance(x, Fp8Activation):  # quantized by the kernel that produced it: [num_tokens, in]
            x_q, x_scale, dtype, leading = x.values, x.scale, x.dtype, x.values.shape[:-1]
        else:
            x_q, x_scale = quantize_fp8_rows(x.reshape(-1, self.in_features))  # [num_tokens, in]
            dtype, leading = x.dtype, x.shape[:-1]
        out = self._matmul(x_q, x_scale, dtype)  # [num_tokens, out]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*leading, self.out_features)

    def _matmul(self, x_q: torch.Tensor, x_scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        weight_t = self.weight.t()  # [in, out], column-major as _scaled_mm takes it
        if dtype == torch.float16 and Fp8Linear.float16_output is not False:
            try:
                out = torch._scaled_mm(
                    x_q, weight_t, scale_a=x_scale, scale_b=self.weight_scale, out_dtype=dtype
                )
                Fp8Linear.float16_output = True
                return out
            except RuntimeError:
                if Fp8Linear.float16_output:  # it wrote float16 before: a real error
                    raise
                Fp8Linear.float16_output = False
        out_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
        out = torch._scaled_mm(x_q, weight_t, scale_a=x_scale, scale_b=self.weight_scale, out_dtype=out_dtype)
        return out.to(dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8 e4m3"
