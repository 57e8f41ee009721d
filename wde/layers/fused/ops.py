"""What a decoder layer calls: each op runs its Triton kernel where ``fused_kernels_enabled`` says so, else
the PyTorch reference (the CPU path, and inside ``torch.compile``, which fuses the reference itself)."""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

from wde.layers.fused import reference
from wde.layers.fused.reference import Activation, NormFlavour, QKNorm
from wde.layers.quantization.fp8_activation import Fp8Activation

DISABLE_VARIABLE = "WDE_FUSED_KERNELS"  # "0": the reference on every device


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def fused_kernels_enabled(x: torch.Tensor) -> bool:
    """The Triton kernels run on CUDA tensors outside ``torch.compile`` where Triton is installed, unless
    ``WDE_FUSED_KERNELS=0``."""
    return (
        x.is_cuda
        and not torch.compiler.is_compiling()
        and os.environ.get(DISABLE_VARIABLE, "1") != "0"
        and triton_available()
    )


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    flavour: NormFlavour,
    post_weight: torch.Tensor | None = None,
    quantize: bool = False,
) -> tuple[torch.Tensor | Fp8Activation, torch.Tensor]:
    """(rms_norm(residual + x), residual + x); see ``reference.add_rms_norm``. ``quantize`` (the normed
    output's reader is an ``Fp8Linear``: ``fp8_activation.takes_fp8``): where the kernel runs, the normed
    output comes quantized for it, as an ``Fp8Activation``; elsewhere the flag changes nothing."""
    if fused_kernels_enabled(x):
        from wde.layers.fused import triton_kernels

        return triton_kernels.add_rms_norm(x, residual, weight, eps, flavour, post_weight, quantize)
    return reference.add_rms_norm(x, residual, weight, eps, flavour, post_weight)


def qk_norm_rotary(
    qkv: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    norm: QKNorm | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of a fused projection, q and k normalized (``norm``) and rotated; see
    ``reference.qk_norm_rotary``. The kernel works in place on ``qkv``."""
    if fused_kernels_enabled(qkv):
        from wde.layers.fused import triton_kernels

        head_size = qkv.shape[1] // (num_heads + 2 * num_kv_heads)
        if triton_kernels.can_rotate(head_size, cos.shape[-1]):
            return triton_kernels.qk_norm_rotary(qkv, num_heads, num_kv_heads, cos, sin, norm)
    return reference.qk_norm_rotary(qkv, num_heads, num_kv_heads, cos, sin, norm)


def act_and_mul(
    gate_up: torch.Tensor, activation: Activation, quantize: bool = False
) -> torch.Tensor | Fp8Activation:
    """act(gate) * up of a fused gate/up projection; see ``reference.act_and_mul``. ``quantize``: as in
    ``add_rms_norm``."""
    if fused_kernels_enabled(gate_up):
        from wde.layers.fused import triton_kernels

        return triton_kernels.act_and_mul(gate_up, activation, quantize)
    return reference.act_and_mul(gate_up, activation)
