"""Rotary position embedding (RoPE) on flat batches, in the GPT-NeoX / transformers ``rotate_half`` layout:
the first and second halves of the rotated dimensions form the (x, y) pairs.

``positions`` restart at 0 for every sequence of the flat batch. Nothing is kept in a buffer: models are
built on the meta device and filled from the checkpoint, and a few dozen frequencies are cheaper to
recompute than to re-initialize after ``to_empty``. A model computes ``cos_sin`` once per forward (per RoPE
base) and its layers ``apply_rotary`` with it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, head_size: int, base: float = 10000.0, rotary_dim: int | None = None) -> None:
        super().__init__()
        self.head_size = head_size
        self.rotary_dim = head_size if rotary_dim is None else rotary_dim
        self.base = float(base)
        if self.rotary_dim % 2 or not 0 < self.rotary_dim <= head_size:
            raise ValueError(
                f"rotary_dim ({self.rotary_dim}) must be even and in (0, head_size={head_size}]; "
                "check the config's head_dim and partial_rotary_factor"
            )

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``positions`` [num_tokens] -> cos, sin [num_tokens, 1, rotary_dim] (broadcast over heads), computed
        in float32 as transformers does, then cast to ``dtype``."""
        exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.float, device=positions.device)
        inv_freq = 1.0 / (self.base ** (exponents / self.rotary_dim))  # [rotary_dim / 2]
        freqs = positions.float().unsqueeze(1) * inv_freq  # [num_tokens, rotary_dim / 2]
        angles = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)  # [num_tokens, 1, rotary_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` [num_tokens, heads, head_size] rotated by its tokens' angles (``cos_sin``'s output; a rotary_dim
    below head_size rotates the first dimensions and passes the rest); same shape and dtype."""
    rotary_dim = cos.shape[-1]
    if rotary_dim == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((rotated * cos + rotate_half(rotated) * sin, passed), dim=-1)


def rotary_self_attention(
    qkv: torch.Tensor,
    num_heads: int,
    head_size: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """A packed projection ``qkv`` [num_tokens, 3 * num_heads * head_size] -> queries and keys rotated,
    attended by ``attend`` (the layer's ``Attention``): [num_tokens, num_heads * head_size], before the
    output projection (ModernBERT, GTE, NomicBERT)."""
    num_tokens = qkv.shape[0]
    q, k, v = qkv.view(num_tokens, 3, num_heads, head_size).unbind(1)  # [num_tokens, num_heads, head_size]
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    return attend(q, k, v).reshape(num_tokens, -1)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
