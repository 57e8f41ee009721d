"""The Triton kernels of ``reference.py``'s functions (same arguments, same results within the kernels'
rounding: they add and rotate in float32 where the reference rounds each product to the model's dtype).

One program per token row (add + norm, q/k norm + rotary: every head of the token in one tile) or per
(token, block of features) (activation-and-mul). Imported only where Triton is: ``ops.py`` on CUDA, the
tests under ``TRITON_INTERPRET=1`` on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from wde.layers.fused.reference import Activation, NormFlavour, QKNorm
from wde.layers.quantization.fp8_activation import Fp8Activation
from wde.layers.quantization.fp8_linear import FP8_DTYPE, FP8_MAX, MIN_SCALE
from wde.layers.quantization.fp8_rows_kernel import fp8_row_scale, to_fp8


@triton.jit
def _rms_norm(x, weight, size, eps, GEMMA: tl.constexpr, DTYPE: tl.constexpr):
    """``x`` float32 [BLOCK] (zeros past ``size``) -> normalized and scaled, in ``DTYPE``."""
    variance = tl.sum(x * x, axis=0) / size
    normed = x * tl.rsqrt(variance + eps)
    if GEMMA:
        return (normed * (1.0 + weight.to(tl.float32))).to(DTYPE)
    # the weight times the normalized value rounded to DTYPE: a 16-bit product, computed in float32 (exact)
    # and rounded once, as the GPU's own 16-bit multiply rounds it
    return (weight.to(tl.float32) * normed.to(DTYPE).to(tl.float32)).to(DTYPE)


@triton.jit
def _add_rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    post_weight_ptr,
    out_ptr,
    summed_ptr,
    x_stride,
    residual_stride,
    size,
    eps,
    scale_ptr,
    fp8_max,
    min_scale,
    GEMMA: tl.constexpr,
    POST_NORM: tl.constexpr,
    QUANTIZE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < size
    dtype = summed_ptr.dtype.element_ty  # the model's 16-bit dtype (out_ptr's too, unless QUANTIZE)
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * residual_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if POST_NORM:
        post_weight = tl.load(post_weight_ptr + cols, mask=mask, other=0.0)
        x = _rms_norm(x, post_weight, size, eps, GEMMA, dtype).to(tl.float32)
    summed = (residual + x).to(dtype)  # the residual stream, rounded as the unfused add rounds it
    tl.store(summed_ptr + row * size + cols, summed, mask=mask)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    out = _rms_norm(summed.to(tl.float32), weight, size, eps, GEMMA, dtype)
    if QUANTIZE:  # the 16-bit output quantized per token for the next fp8 GEMM (columns past size are 0)
        out = out.to(tl.float32)
        scale = fp8_row_scale(tl.max(tl.abs(out), axis=0), fp8_max, min_scale)
        tl.store(scale_ptr + row, scale)
        tl.store(
            out_ptr + row * size + cols, to_fp8(out, scale, fp8_max, out_ptr.dtype.element_ty), mask=mask
        )
    else:
        tl.store(out_ptr + row * size + cols, out, mask=mask)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    flavour: NormFlavour,
    post_weight: torch.Tensor | None = None,
    quantize: bool = False,
) -> tuple[torch.Tensor | Fp8Activation, torch.Tensor]:
    """As ``reference.add_rms_norm``: (normed, summed), each [num_tokens, hidden] contiguous; ``quantize``:
    normed as an ``Fp8Activation`` (the 16-bit values, quantized per token as ``quantize_fp8_rows``)."""
    num_tokens, size = x.shape
    out = torch.empty((num_tokens, size), dtype=FP8_DTYPE if quantize else x.dtype, device=x.device)
    summed = torch.empty((num_tokens, size), dtype=x.dtype, device=x.device)
    scale = torch.empty((num_tokens, 1), dtype=torch.float32, device=x.device) if quantize else None
    if num_tokens:
        _add_rms_norm_kernel[(num_tokens,)](
            x,
            residual,
            weight,
            weight if post_weight is None else post_weight,
            out,
            summed,
            x.stride(0),
            residual.stride(0),
            size,
            eps,
            summed if scale is None else scale,  # unread without QUANTIZE
            FP8_MAX,
            MIN_SCALE,
            GEMMA=flavour == "gemma",
            POST_NORM=post_weight is not None,
            QUANTIZE=quantize,
            BLOCK=triton.next_power_of_2(size),
        )
    return (out if scale is None else Fp8Activation(out, scale, x.dtype)), summed


@triton.jit
def _qk_norm_rotary_kernel(
    qkv_ptr,
    cos_ptr,
    sin_ptr,
    q_weight_ptr,
    k_weight_ptr,
    row_stride,
    angle_stride,
    num_heads,
    num_qk_heads,
    eps,
    HALF: tl.constexpr,
    BLOCK_H: tl.constexpr,
    NORM: tl.constexpr,
    GEMMA: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    heads = tl.arange(0, BLOCK_H)[:, None]  # [BLOCK_H, 1]: q heads, then k heads
    dims = tl.arange(0, HALF)[None, :]  # [1, HALF]: the first half's dimensions
    mask = (heads < num_qk_heads) & (dims < HALF)
    dtype = qkv_ptr.dtype.element_ty
    first = qkv_ptr + token * row_stride + heads * (2 * HALF) + dims
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_H, HALF]
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    if NORM:
        is_q = heads < num_heads
        w1 = tl.where(is_q, tl.load(q_weight_ptr + dims), tl.load(k_weight_ptr + dims))
        w2 = tl.where(is_q, tl.load(q_weight_ptr + HALF + dims), tl.load(k_weight_ptr + HALF + dims))
        variance = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1))[:, None] / (2 * HALF)
        rstd = tl.rsqrt(variance + eps)
        if GEMMA:
            x1 = (x1 * rstd * (1.0 + w1.to(tl.float32))).to(dtype).to(tl.float32)
            x2 = (x2 * rstd * (1.0 + w2.to(tl.float32))).to(dtype).to(tl.float32)
        else:
            x1 = (w1.to(tl.float32) * (x1 * rstd).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
            x2 = (w2.to(tl.float32) * (x2 * rstd).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    # cos / sin [num_tokens, 1, 2 * HALF] hold each frequency twice: the first half is all of them
    cos = tl.load(cos_ptr + token * angle_stride + dims).to(tl.float32)  # [1, HALF]
    sin = tl.load(sin_ptr + token * angle_stride + dims).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(dtype), mask=mask)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(dtype), mask=mask)


def can_rotate(head_size: int, rotary_dim: int) -> bool:
    """The kernel rotates whole heads whose half is a power of two (64, 128, 256-wide heads)."""
    half = head_size // 2
    return rotary_dim == head_size and head_size % 2 == 0 and half == triton.next_power_of_2(half)


def qk_norm_rotary(
    qkv: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    norm: QKNorm | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As ``reference.qk_norm_rotary``, in place: q, k and v are views of ``qkv`` (its rows' last
    dimension contiguous), q and k normalized and rotated where they lie."""
    num_tokens = qkv.shape[0]
    head_size = qkv.shape[1] // (num_heads + 2 * num_kv_heads)
    if qkv.stride(1) != 1 or cos.stride(-1) != 1 or sin.stride(0) != cos.stride(0):
        raise ValueError("qk_norm_rotary needs qkv's rows and cos / sin contiguous in their last dimension")
    if num_tokens:
        q_weight, k_weight, eps, flavour = norm if norm is not None else (cos, cos, 0.0, "llama")
        _qk_norm_rotary_kernel[(num_tokens,)](
            qkv,
            cos,
            sin,
            q_weight,
            k_weight,
            qkv.stride(0),
            cos.stride(0),
            num_heads,
            num_heads + num_kv_heads,
            eps,
            HALF=head_size // 2,
            BLOCK_H=triton.next_power_of_2(num_heads + num_kv_heads),
            NORM=norm is not None,
            GEMMA=flavour == "gemma",
        )
    q_size, kv_size = num_heads * head_size, num_kv_heads * head_size
    q = qkv[:, :q_size].view(num_tokens, num_heads, head_size)
    k = qkv[:, q_size : q_size + kv_size].view(num_tokens, num_kv_heads, head_size)
    v = qkv[:, q_size + kv_size :].view(num_tokens, num_kv_heads, head_size)
    return q, k, v


@triton.jit
def _act_and_mul_block(
    gate_up_ptr, row, row_stride, size, cols, mask, GELU: tl.constexpr, DTYPE: tl.constexpr
):
    """act(gate) * up for one block of a row's columns: float32 holding the 16-bit product."""
    gate = tl.load(gate_up_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * row_stride + size + cols, mask=mask, other=0.0).to(tl.float32)
    if GELU:  # tanh(z) = 2 * sigmoid(2z) - 1
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        activated = 0.5 * gate * (2.0 * tl.sigmoid(2.0 * inner))
    else:
        activated = gate * tl.sigmoid(gate)
    activated = activated.to(DTYPE).to(tl.float32)  # rounded as the unfused activation's output is
    return (activated * up).to(DTYPE).to(tl.float32)


@triton.jit
def _act_and_mul_kernel(gate_up_ptr, out_ptr, row_stride, size, GELU: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < size
    dtype = out_ptr.dtype.element_ty
    product = _act_and_mul_block(gate_up_ptr, row, row_stride, size, cols, mask, GELU, dtype)
    tl.store(out_ptr + row * size + cols, product.to(dtype), mask=mask)


@triton.jit
def _act_and_mul_fp8_kernel(
    gate_up_ptr,
    out_ptr,
    scale_ptr,
    row_stride,
    size,
    fp8_max,
    min_scale,
    GELU: tl.constexpr,
    NUM_BLOCKS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One row a program: its products' largest magnitude, then the products again (gate and up come back
    from cache), quantized per token."""
    row = tl.program_id(0).to(tl.int64)
    dtype = gate_up_ptr.dtype.element_ty
    amax = tl.zeros([BLOCK], dtype=tl.float32)
    for block in range(NUM_BLOCKS):
        cols = block * BLOCK + tl.arange(0, BLOCK)
        product = _act_and_mul_block(gate_up_ptr, row, row_stride, size, cols, cols < size, GELU, dtype)
        amax = tl.maximum(amax, tl.abs(product))  # masked columns hold act(0) * 0 = 0
    scale = fp8_row_scale(tl.max(amax, axis=0), fp8_max, min_scale)
    tl.store(scale_ptr + row, scale)
    for block in range(NUM_BLOCKS):
        cols = block * BLOCK + tl.arange(0, BLOCK)
        mask = cols < size
        product = _act_and_mul_block(gate_up_ptr, row, row_stride, size, cols, mask, GELU, dtype)
        tl.store(
            out_ptr + row * size + cols, to_fp8(product, scale, fp8_max, out_ptr.dtype.element_ty), mask=mask
        )


ACT_BLOCK = 1024


def act_and_mul(
    gate_up: torch.Tensor, activation: Activation, quantize: bool = False
) -> torch.Tensor | Fp8Activation:
    """As ``reference.act_and_mul``: [num_tokens, 2 * intermediate] -> [num_tokens, intermediate];
    ``quantize``: as an ``Fp8Activation`` (the 16-bit products, quantized per token)."""
    num_tokens, double = gate_up.shape
    size = double // 2
    if gate_up.stride(1) != 1:
        raise ValueError("act_and_mul needs gate_up's rows contiguous")
    gelu = activation == "gelu_tanh"
    if quantize:
        out = torch.empty((num_tokens, size), dtype=FP8_DTYPE, device=gate_up.device)
        scale = torch.empty((num_tokens, 1), dtype=torch.float32, device=gate_up.device)
        if num_tokens:
            _act_and_mul_fp8_kernel[(num_tokens,)](
                gate_up,
                out,
                scale,
                gate_up.stride(0),
                size,
                FP8_MAX,
                MIN_SCALE,
                GELU=gelu,
                NUM_BLOCKS=triton.cdiv(size, ACT_BLOCK),
                BLOCK=ACT_BLOCK,
            )
        return Fp8Activation(out, scale, gate_up.dtype)
    out = torch.empty((num_tokens, size), dtype=gate_up.dtype, device=gate_up.device)
    if num_tokens:
        grid = (num_tokens, triton.cdiv(size, ACT_BLOCK))
        _act_and_mul_kernel[grid](gate_up, out, gate_up.stride(0), size, GELU=gelu, BLOCK=ACT_BLOCK)
    return out
