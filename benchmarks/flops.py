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

# families whose MLP is gated (gate and up projections, then down: three h x I matrices, not two)
GATED_MLP_MODEL_TYPES = frozenset({"qwen2", "qwen3", "mistral", "llama", "gemma3", "gemma3_text", "eurobert"})


def encoder_flops(hf_config: dict[str, Any], seq_lens: Iterable[int]) -> int:
    """Multiply-adds x 2 of the linear layers and attention of a transformer encoder (or a decoder run as
    one, as embedders are) over the sequences.

    Per layer and token: the q / o projections ``2 * 2 * h * q`` and k / v ``2 * 2 * h * kv`` (``q`` = heads
    x head_dim, ``kv`` = key/value heads x head_dim: ``4 h^2`` in all for BERT), the MLP ``2 * 2 * h * I``
    (``2 * 3 * h * I`` when gated: ``GATED_MLP_MODEL_TYPES``); attention (``QK^T`` and ``PV``)
    ``2 * 2 * L * q`` for a token in a sequence of length ``L`` (sliding windows not discounted). Embeddings,
    norms, activations and pooling are O(h) per token and left out."""
    hidden = int(hf_config["hidden_size"])
    intermediate = int(hf_config["intermediate_size"])
    num_layers = int(hf_config["num_hidden_layers"])
    num_heads = int(hf_config["num_attention_heads"])
    head_dim = int(hf_config.get("head_dim") or hidden // num_heads)
    num_kv_heads = int(hf_config.get("num_key_value_heads") or num_heads)
    query_width, kv_width = num_heads * head_dim, num_kv_heads * head_dim
    num_mlp_matrices = 3 if hf_config.get("model_type") in GATED_MLP_MODEL_TYPES else 2
    linear_per_token = 2 * (2 * hidden * (query_width + kv_width) + num_mlp_matrices * hidden * intermediate)
    total = 0
    for seq_len in seq_lens:
        total += seq_len * linear_per_token + 4 * seq_len * seq_len * query_width
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
