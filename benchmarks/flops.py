"""Useful work of an encoder forward, and the matmul peak it is measured against.

"Useful" FLOPs count what the model needs for the given sequences and nothing a system adds (padding,
recomputation), so every system is divided by the same number: achieved GFLOP/s = useful FLOPs / seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F


def encoder_flops(hf_config: dict[str, Any], seq_lens: Iterable[int]) -> int:
    """Multiply-adds x 2 of the linear layers and attention of a BERT-style encoder over the sequences.

    Per layer and token: QKV + output projections ``2 * 4 * h^2``, MLP ``2 * 2 * h * I``; attention
    (``QK^T`` and ``PV``) ``2 * 2 * L * h`` for a token in a sequence of length ``L``. Embeddings, LayerNorm,
    activations and pooling are O(h) per token and left out."""
    hidden = int(hf_config["hidden_size"])
    intermediate = int(hf_config["intermediate_size"])
    num_layers = int(hf_config["num_hidden_layers"])
    linear_per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    total = 0
    for seq_len in seq_lens:
        total += seq_len * linear_per_token + 4 * seq_len * seq_len * hidden
    return num_layers * total


def matmul_peak_gflops(
    hf_config: dict[str, Any], dtype: torch.dtype, num_tokens: int = 2048, min_seconds: float = 1.0
) -> float:
    """Best GFLOP/s of ``F.linear`` (the op of every nn.Linear) on the model's largest GEMM
    (``[num_tokens, h] x [h, I]``) with the current thread count: the ceiling a forward can approach on this
    machine, measured in the same run. (Not ``torch.mm``: on CPUs without native bfloat16 its bf16 path is
    an order of magnitude slower than linear's.)"""
    hidden = int(hf_config["hidden_size"])
    intermediate = int(hf_config["intermediate_size"])
    x = torch.randn(num_tokens, hidden, dtype=dtype)
    weight = torch.randn(intermediate, hidden, dtype=dtype)
    flops = 2 * num_tokens * hidden * intermediate
    F.linear(x, weight)  # warm-up (kernel selection, packing buffers)
    best = float("inf")
    deadline = time.perf_counter() + min_seconds
    num_runs = 0
    while num_runs < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        F.linear(x, weight)
        best = min(best, time.perf_counter() - start)
        num_runs += 1
    return flops / best / 1e9
