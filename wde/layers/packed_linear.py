"""``PackedLinear``: a float32 linear layer whose weight oneDNN packed once, at load, into its blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``) and which oneDNN runs (``_linear_pointwise``), where aten's
``linear`` hands the plain weight to MKL's sgemm, which packs it again on every call. On 2 cores of an
AVX2-only EPYC that made all-MiniLM-L6-v2 1.09x as fast on documents and 1.04x on queries
(docs/benchmarks.md); elsewhere (an AVX-512 Xeon, where MKL is at home) it may not pay, so
``chosen_float_gemm`` times both on the model's own layers at load and keeps aten's unless the packed one
wins by ``MIN_SPEEDUP``.

Against aten the results differ by float32 rounding only (all-MiniLM-L6-v2 embeddings: max abs diff 2e-7).
On that EPYC oneDNN also gave a row the same result whatever its batch-mates (aten's sgemm picks other
kernels for other batch sizes).

The choice is measured once per process for a set of layer shapes (and thread count): a second load of
the same model reuses it, so two ``LLM`` of one model compute exactly alike. ``WDE_FLOAT_GEMM=aten`` or
``onednn_packed`` skips the measurement and forces one.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

logger = logging.getLogger(__name__)

GEMM_ENV = "WDE_FLOAT_GEMM"
FLOAT_GEMMS = ("aten", "onednn_packed")
MIN_SPEEDUP = 1.03  # below this the measurement cannot tell the two apart: keep aten's (the reference's)
PROBE_TOKENS = 128  # rows of the timed passes, and oneDNN's batch-size hint for the packed layout
PROBE_FLOPS = 2e9  # per timed pass at most (fewer rows for a large model): the measurement stays under ~1 s
NUM_PROBE_ROUNDS = 5


@dataclass(frozen=True)
class FloatGemm:
    name: str  # one of FLOAT_GEMMS
    why: str  # one line for the load log


class PackedLinear(nn.Module):
    """``x`` [..., in_features] float32 -> [..., out_features]: ``x @ weight.T + bias`` by oneDNN, with the
    weight packed once. Made from an ``nn.Linear`` (``from_linear``); the plain weight is not kept."""

    def __init__(
        self, packed_weight: torch.Tensor, bias: torch.Tensor | None, in_features: int, out_features: int
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("packed_weight", packed_weight)  # oneDNN's layout (an mkldnn tensor)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> PackedLinear:
        weight = linear.weight.detach()
        if weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(
                f"PackedLinear takes a float32 CPU weight, not {weight.dtype} on {weight.device}"
            )
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, PROBE_TOKENS)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls(packed, bias, linear.in_features, linear.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


def _on_x86_with_onednn() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and torch.backends.mkldnn.is_available()


def chosen_float_gemm(linears: Sequence[nn.Linear], packed: Sequence[PackedLinear] = ()) -> FloatGemm:
    """The GEMM for these float32 block linears on this CPU: what ``WDE_FLOAT_GEMM`` names, else the faster
    of the two, timed here on these very layers (``packed``: their ``PackedLinear`` copies, when the caller
    has them already) the first time this process loads layers of their shapes."""
    untimed = _untimed_choice(linears)
    if untimed is not None:
        return untimed
    return _timed_choice(linears, packed or [PackedLinear.from_linear(linear) for linear in linears])


# The measured choice per layer shapes and thread count, for the process's lifetime: a second load of the
# same model (a second LLM, a model reloaded after eviction) computes bit for bit what the first one did,
# where a new measurement near MIN_SPEEDUP could pick the other GEMM (they differ by float32 rounding).
_MEASURED: dict[tuple[object, ...], FloatGemm] = {}


def _shapes_key(linears: Sequence[nn.Linear]) -> tuple[object, ...]:
    shapes = tuple((linear.in_features, linear.out_features, linear.bias is not None) for linear in linears)
    return (torch.get_num_threads(), shapes)


def _remembered_choice(linears: Sequence[nn.Linear]) -> FloatGemm | None:
    remembered = _MEASURED.get(_shapes_key(linears))
    if remembered is None:
        return None
    return FloatGemm(remembered.name, f"{remembered.why} (at this process's first load of these layers)")


def _timed_choice(linears: Sequence[nn.Linear], packed: Sequence[PackedLinear]) -> FloatGemm:
    speedup = measured_speedup(linears, packed)
    if speedup >= MIN_SPEEDUP:
        gemm = FloatGemm("onednn_packed", f"measured here {speedup:.2f}x as fast as aten's on the blocks")
    else:
        gemm = FloatGemm(
            "aten", f"oneDNN's packed GEMM measured {speedup:.2f}x aten's here (< {MIN_SPEEDUP}x)"
        )
    _MEASURED[_shapes_key(linears)] = gemm
    return gemm


def forced_float_gemm() -> str | None:
    """The GEMM ``WDE_FLOAT_GEMM`` forces (one of FLOAT_GEMMS), None when unset; raises for another value."""
    forced = os.environ.get(GEMM_ENV, "").strip().lower()
    if forced and forced not in FLOAT_GEMMS:
        names = ", ".join(FLOAT_GEMMS)
        raise ValueError(f"{GEMM_ENV}={forced!r} is not one of {names}; unset it to choose by measurement")
    return forced or None


def _untimed_choice(linears: Sequence[nn.Linear]) -> FloatGemm | None:
    """The choice that needs no timing (``WDE_FLOAT_GEMM``, a CPU without oneDNN, no linears, layers of these
    shapes measured before in this process); None when the two must be timed. Raises for a value it does
    not know, or oneDNN forced where it cannot run."""
    forced = forced_float_gemm()
    if forced == "aten":
        return FloatGemm("aten", f"{GEMM_ENV}=aten")
    if not _on_x86_with_onednn():
        if forced:
            raise ValueError(f"{GEMM_ENV}=onednn_packed needs an x86 CPU and torch built with oneDNN")
        return FloatGemm("aten", "not an x86 CPU with oneDNN")
    if forced:
        return FloatGemm("onednn_packed", f"{GEMM_ENV}=onednn_packed")
    if not linears:
        return FloatGemm("aten", "the model's blocks have no linear layers")
    return _remembered_choice(linears)


def measured_speedup(linears: Sequence[nn.Linear], packed: Sequence[nn.Module]) -> float:
    """aten's time / oneDNN's over the layers in turn, as a forward runs them (each weight read once per
    pass, mostly from memory: where packing pays), on random rows; the best of ``NUM_PROBE_ROUNDS`` passes,
    the two alternating first (the machine's drift hits both alike). Rows: ``PROBE_TOKENS``, fewer for a
    model with more than ``PROBE_FLOPS`` per pass (at least 16)."""
    flops_per_row = sum(2 * linear.in_features * linear.out_features for linear in linears)
    num_rows = int(max(16, min(PROBE_TOKENS, PROBE_FLOPS // flops_per_row)))
    generator = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(num_rows, n, generator=generator) for n in {x.in_features for x in linears}}
    passes: dict[str, list[tuple[nn.Module, torch.Tensor]]] = {
        "aten": [(linear, inputs[linear.in_features]) for linear in linears],
        "onednn_packed": [
            (layer, inputs[linear.in_features]) for linear, layer in zip(linears, packed, strict=True)
        ],
    }
    best = dict.fromkeys(passes, float("inf"))
    with torch.inference_mode():
        for layers in passes.values():  # the first calls build the kernels
            for layer, x in layers:
                layer(x)
        for round_index in range(NUM_PROBE_ROUNDS):
            for name in FLOAT_GEMMS if round_index % 2 == 0 else reversed(FLOAT_GEMMS):
                start = time.perf_counter()
                for layer, x in passes[name]:
                    layer(x)
                best[name] = min(best[name], time.perf_counter() - start)
    return best["aten"] / best["onednn_packed"]


def pack_float_linears(linears: Sequence[tuple[nn.Module, str, nn.Linear]]) -> FloatGemm:
    """Swap these (parent, attribute name, linear) for ``PackedLinear`` in place when the chosen GEMM is
    oneDNN's; returns the choice (logged by the caller). Each weight is packed once: the timing runs on the
    copies that are then swapped in."""
    plain = [linear for _, _, linear in linears]
    gemm = _untimed_choice(plain)
    packed: list[PackedLinear] = []
    if gemm is None or gemm.name == "onednn_packed":
        packed = [PackedLinear.from_linear(linear) for linear in plain]
    if gemm is None:
        gemm = _timed_choice(plain, packed)
    if gemm.name == "onednn_packed":
        for (parent, name, _), layer in zip(linears, packed, strict=True):
            setattr(parent, name, layer)
    return gemm
