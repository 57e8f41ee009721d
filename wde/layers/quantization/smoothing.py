"""Activation smoothing for int8 linears (SmoothQuant, Xiao et al. 2023): move the size of the inputs' outlier
channels into the weights, where per-row weight scales absorb it.

A transformer's activations have a few channels far larger than the rest (after LayerNorm, in every token);
one int8 scale per token must cover them, so the other channels keep only a few levels. With a per-channel
factor ``s`` the product is unchanged, ``x @ W.T == (x / s) @ (W * s).T``, and

    s[i] = max |x[:, i]| ** alpha / max |W[:, i]| ** (1 - alpha)        (alpha = 0.5)

evens out the ranges of both sides. ``max |x[:, i]|`` comes from a few calibration texts run through the
float model at load (``record_input_maxima``); the division by ``s`` is one multiply fused into the
quantization pass, so a token's result still depends on nothing but the token. On all-mpnet-base-v2 over 200
documents of real text the int8 embeddings' mean cosine to float32 went 0.99670 -> 0.99817 and the minimum
0.98988 -> 0.99450; on all-MiniLM-L6-v2 (400 documents) 0.99810 -> 0.99901 and 0.99612 -> 0.99723.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

ALPHA = 0.5  # the paper's default; 0.3 and 0.7 were worse or no better on all-mpnet-base-v2
MIN_MAX = 1e-5  # a channel never seen (or an all-zero weight column) keeps s = 1
SMOOTHING_ENV = "WDE_INT8_SMOOTHING"  # "0": per-token scales alone, no calibration pass (to compare)


def smoothing_enabled() -> bool:
    """Whether an int8 load smooths (``WDE_INT8_SMOOTHING``: 1, the default, or 0)."""
    value = os.environ.get(SMOOTHING_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{SMOOTHING_ENV}={value!r} is not 0 or 1; unset it to smooth (the default)")
    return value == "1"


def smoothing_scales(input_max: torch.Tensor, weight: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """``input_max`` [in] (max |x| per input channel over calibration), ``weight`` [out, in] -> ``s`` [in]
    float32, to quantize ``weight * s`` and feed ``x / s``. A channel that calibration left at zero, or whose
    weight column is zero, gets 1."""
    weight_max = weight.detach().abs().amax(dim=0).float()  # [in]
    input_max = input_max.float().to(weight_max.device)
    scales = input_max.clamp_min(MIN_MAX) ** alpha / weight_max.clamp_min(MIN_MAX) ** (1 - alpha)
    seen = (input_max > MIN_MAX) & (weight_max > MIN_MAX)
    return torch.where(seen, scales, torch.ones_like(scales))


def record_input_maxima(linears: list[nn.Linear], run: Callable[[], None]) -> dict[nn.Linear, torch.Tensor]:
    """Call ``run()`` (the float model over calibration texts) with every one of ``linears`` watched;
    returns, for each that ran, the largest |input| each input channel saw: [in_features] float32."""
    maxima: dict[nn.Linear, torch.Tensor] = {}

    def record(linear: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        assert isinstance(linear, nn.Linear)
        x = inputs[0].detach()
        seen = x.reshape(-1, x.shape[-1]).abs().amax(dim=0).float()  # [in]
        maxima[linear] = torch.maximum(maxima[linear], seen) if linear in maxima else seen

    handles = [linear.register_forward_pre_hook(record) for linear in linears]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return maxima
