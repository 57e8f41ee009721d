"""The float64 attention the CPU attention kernels are measured against (``test_varlen_attention``,
``test_varlen_bf16_attention``)."""

from __future__ import annotations

import torch


def float64_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: list[int],
    scale: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``q`` [num_tokens, num_heads, d], ``k`` / ``v`` [num_tokens, num_kv_heads, d] of sequences back to back
    -> [num_tokens, num_heads, d] float64, each sequence attending to itself alone; grouped kv heads repeated;
    ``bias`` [num_heads, >= L, >= L] added to the scores by position within the sequence."""
    per_kv = q.shape[1] // k.shape[1]
    outputs, start = [], 0
    for n in seq_lens:
        qs = q[start : start + n].double().transpose(0, 1)  # [heads, n, d]
        ks, vs = (t[start : start + n].double().repeat_interleave(per_kv, 1).transpose(0, 1) for t in (k, v))
        mask = None if bias is None else bias[:, :n, :n].double()
        attended = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale)
        outputs.append(attended.transpose(0, 1))
        start += n
    return torch.cat(outputs)
