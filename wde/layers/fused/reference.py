"""The PyTorch reference of each fused kernel: what the families' unfused layers compute, op for op, so
that a model gives the same result with or without the kernels (within the kernels' own rounding).

Two RMSNorm flavours (``NormFlavour``): ``"llama"`` (Qwen2/3, Mistral, Llama, EuroBERT: normalized in
float32, cast to the input's dtype, then scaled by the weight in that dtype) and ``"gemma"`` (Gemma3:
normalized and scaled by ``1 + weight`` in float32, then cast).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

NormFlavour = Literal["llama", "gemma"]
Activation = Literal["silu", "gelu_tanh"]
QKNorm = tuple[torch.Tensor, torch.Tensor, float, NormFlavour]  # q's weight, k's weight, eps, flavour


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, flavour: NormFlavour) -> torch.Tensor:
    """``x`` [..., size] normalized over its last dimension; same shape and dtype."""
    x_float = x.float()
    normed = x_float * torch.rsqrt(x_float.pow(2).mean(-1, keepdim=True) + eps)
    if flavour == "gemma":
        return (normed * (1.0 + weight.float())).to(x.dtype)
    return weight * normed.to(x.dtype)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    flavour: NormFlavour,
    post_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A sublayer's output ``x`` added to the ``residual`` stream, then the next pre-norm: (``rms_norm(s)``,
    ``s``) with ``s = residual + x`` in the input's dtype. ``post_weight`` (Gemma3's post-attention /
    post-feed-forward norm) normalizes ``x`` before the add. ``x``, ``residual`` [num_tokens, hidden]."""
    if post_weight is not None:
        x = rms_norm(x, post_weight, eps, flavour)
    summed = residual + x
    return rms_norm(summed, weight, eps, flavour), summed


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qk_norm_rotary(
    qkv: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    norm: QKNorm | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fused q/k/v projection ``qkv`` [num_tokens, (num_heads + 2 * num_kv_heads) * head_size] -> q
    [num_tokens, num_heads, head_size], k and v [num_tokens, num_kv_heads, head_size]: q and k each
    RMS-normalized per head first when ``norm`` is given (q weight, k weight, eps, flavour: Qwen3's and
    Gemma3's q/k norms), then rotated (``rotate_half`` layout) by ``cos`` / ``sin`` [num_tokens, 1,
    head_size] in the model's dtype."""
    num_tokens = qkv.shape[0]
    head_size = qkv.shape[1] // (num_heads + 2 * num_kv_heads)
    sizes = (num_heads * head_size, num_kv_heads * head_size, num_kv_heads * head_size)
    q, k, v = qkv.split(sizes, dim=-1)
    q = q.view(num_tokens, num_heads, head_size)
    k = k.view(num_tokens, num_kv_heads, head_size)
    if norm is not None:
        q_weight, k_weight, eps, flavour = norm
        q, k = rms_norm(q, q_weight, eps, flavour), rms_norm(k, k_weight, eps, flavour)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return q, k, v.view(num_tokens, num_kv_heads, head_size)


def act_and_mul(gate_up: torch.Tensor, activation: Activation) -> torch.Tensor:
    """A fused gate/up projection ``gate_up`` [num_tokens, 2 * intermediate] -> ``act(gate) * up``
    [num_tokens, intermediate] (SwiGLU with silu; Gemma's GeGLU with gelu_tanh)."""
    gate, up = gate_up.chunk(2, dim=-1)
    if activation == "silu":
        return F.silu(gate) * up
    return F.gelu(gate, approximate="tanh") * up
