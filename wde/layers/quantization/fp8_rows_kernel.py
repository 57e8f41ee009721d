"""The Triton kernel of ``fp8_linear.quantize_fp8_rows``: a row's largest |x|, its scale and its float8 values
in one program per row, reading the 16-bit row twice (the second time from cache) and writing one byte an
element; the PyTorch ops it replaces on a GPU (abs, amax, casts to float32, clamp, divide, cast) take about
ten kernels and several float32 copies of the activation. Same results as the PyTorch ops: the scale is
max(amax, MIN_SCALE) / 448 in float32, each value divided with IEEE rounding and cast to e4m3 rounding to
nearest even. Imported only where Triton is: ``fp8_linear`` on CUDA, the tests under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from wde.layers.quantization.fp8_linear import FP8_DTYPE, FP8_MAX, MIN_SCALE

BLOCK = 1024  # columns per step of a row's two passes


@triton.jit
def fp8_row_scale(amax, fp8_max, min_scale):
    """A row's scale from its largest magnitude (float32), as ``quantize_fp8_rows_reference`` computes it (an
    IEEE division: the GPU's default one may round differently in the last place)."""
    return tl.math.div_rn(tl.maximum(amax, min_scale), fp8_max)


@triton.jit
def to_fp8(x, scale, fp8_max, FP8: tl.constexpr):
    """float32 ``x`` over its row's scale (IEEE division), clamped, rounded to nearest even in ``FP8``."""
    return tl.clamp(tl.math.div_rn(x, scale), -fp8_max, fp8_max).to(FP8, fp_downcast_rounding="rtne")


@triton.jit
def _quantize_rows_kernel(
    x_ptr,
    out_ptr,
    scale_ptr,
    x_stride,
    size,
    fp8_max,
    min_scale,
    NUM_BLOCKS: tl.constexpr,  # a constant: one compiled kernel per width (a model has 3 or 4)
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row, out_row = x_ptr + row * x_stride, out_ptr + row * size
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for block in range(NUM_BLOCKS):  # 1. the row's largest magnitude
        cols = block * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < size, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = fp8_row_scale(tl.max(amax, axis=0), fp8_max, min_scale)
    tl.store(scale_ptr + row, scale)
    for block in range(NUM_BLOCKS):  # 2. scaled, clamped, rounded to e4m3
        cols = block * BLOCK + tl.arange(0, BLOCK)
        mask = cols < size
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + cols, to_fp8(x, scale, fp8_max, out_ptr.dtype.element_ty), mask=mask)


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] (rows may be strided, columns contiguous) -> (float8 e4m3 [rows, cols] contiguous,
    float32 scale [rows, 1])."""
    num_rows, size = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((num_rows, size), dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty((num_rows, 1), dtype=torch.float32, device=x.device)
    if num_rows:
        num_blocks = triton.cdiv(size, BLOCK)
        _quantize_rows_kernel[(num_rows,)](
            x, out, scale, x.stride(0), size, FP8_MAX, MIN_SCALE, NUM_BLOCKS=num_blocks, BLOCK=BLOCK
        )
    return out, scale
