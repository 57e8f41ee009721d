"""Post-load weight quantization of a model, one entry per method in ``QUANTIZERS``.

What gets quantized is chosen by structure, not by name, so that every family works without a line of its
own: the linear layers inside the model's repeated blocks (any ``nn.ModuleList``: BERT's ``encoder.layer``,
Qwen3's ``layers``), where nearly all of the FLOPs are. Embeddings, poolers, classifier heads and
sentence-transformers Dense heads keep their float weights: they cost little and their outputs are the
answer itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import torch
from torch import nn

from wde.layers.attention.layer import Attention
from wde.layers.quantization.fp8_linear import Fp8Linear, can_quantize, check_fp8_device
from wde.layers.quantization.int8_gemm import chosen_gemm
from wde.layers.quantization.int8_linear import Int8Linear

logger = logging.getLogger(__name__)

InputMaxima = dict[nn.Linear, torch.Tensor]  # per linear: max |input| per channel, [in_features]


def block_linears(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent module, attribute name, linear) for every ``nn.Linear`` inside an ``nn.ModuleList``."""
    found: dict[int, tuple[nn.Module, str, nn.Linear]] = {}
    for block_list in (m for m in model.modules() if isinstance(m, nn.ModuleList)):
        for parent in block_list.modules():
            for name, child in parent.named_children():
                if isinstance(child, nn.Linear):
                    found[id(child)] = (parent, name, child)
    return list(found.values())


def quantize_int8(model: nn.Module, input_maxima: InputMaxima | None = None) -> int:
    """Swap the block linears for ``Int8Linear`` in place; returns how many were swapped. ``input_maxima``:
    per linear, the largest |input| per channel over calibration texts (``smoothing.record_input_maxima``):
    those linears are smoothed."""
    linears = block_linears(model)
    gemm = chosen_gemm()
    input_maxima = input_maxima or {}
    num_smoothed = sum(linear in input_maxima for _, _, linear in linears)
    logger.info("int8 GEMM %s: %s; %d of %d smoothed", gemm.name, gemm.why, num_smoothed, len(linears))
    for parent, name, linear in linears:
        setattr(parent, name, Int8Linear.from_linear(linear, gemm, input_maxima.get(linear)))
    allow_bf16_attention(model)
    return len(linears)


def allow_bf16_attention(model: nn.Module) -> None:
    """Let every attention layer multiply in bfloat16 (``AttentionSpec.bf16_products``), its backend made
    again from the new spec: an int8 GEMM's inputs keep 8 bits, a bf16 product's 8 significant bits and
    float32 sums, so the attention is no longer the precise part (varlen_cpu runs it so where the CPU has
    AVX512-BF16: ~1.4x faster attention at head size 32)."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.spec = dataclasses.replace(module.spec, bf16_products=True)
            if module.backend is not None:
                module.bind(type(module.backend))


def quantize_fp8(model: nn.Module, _input_maxima: InputMaxima | None = None) -> int:
    """Swap the block linears whose sizes the FP8 GEMM takes (multiples of 16) for ``Fp8Linear`` in place;
    returns how many were swapped. Refuses a GPU without FP8 matrix units. (Per-token FP8 keeps 3 mantissa
    bits in every channel: no smoothing.)"""
    check_fp8_device(next(model.parameters()).device)
    linears = [
        (parent, name, linear) for parent, name, linear in block_linears(model) if can_quantize(linear)
    ]
    for parent, name, linear in linears:
        setattr(parent, name, Fp8Linear.from_linear(linear))
    return len(linears)


QUANTIZERS: dict[str, Callable[[nn.Module, InputMaxima | None], int]] = {
    "int8": quantize_int8,
    "fp8": quantize_fp8,
}
# the methods that use calibration texts' activations (``input_maxima``) when given them
SMOOTHED = ("int8",)


def quantize_model(model: nn.Module, method: str, input_maxima: InputMaxima | None = None) -> int:
    """Quantize ``model`` in place with ``method`` (a key of ``QUANTIZERS``); returns the layers changed."""
    if method not in QUANTIZERS:
        raise ValueError(f"quantization {method!r} is not one of {sorted(QUANTIZERS)}")
    return QUANTIZERS[method](model, input_maxima)
