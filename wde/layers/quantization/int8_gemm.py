"""The int8 GEMM an ``Int8Linear`` runs, chosen by the CPU found (``chosen_gemm()``).

- ``int_mm``: int8 x int8 -> int32 by ``torch._int_mm`` (oneDNN). Fast where the CPU has VNNI (AVX-512 VNNI,
  AVX-VNNI, AMX): ~700 GOPS on 2 cores of an AVX-512 VNNI EPYC. Without VNNI oneDNN has no fast kernel for
  signed x signed int8 and it runs at 2-5 GOPS (2 cores of an AVX2-only EPYC: 20x slower than float32).
- ``onednn_u8s8``: uint8 activations x int8 weights through oneDNN's quantized linear
  (``onednn::qlinear_pointwise``, each weight packed once into oneDNN's layout), which has AVX2 and AVX-512
  kernels without VNNI: 150-260 GOPS on that AVX2 EPYC, 3-4x its float32 GEMM. Those kernels multiply u8 x s8
  pairs with ``vpmaddubsw``, whose int16 pair sums saturate past 32,767: 2 x 255 x 127 would, so the weights
  keep 7 bits (|w| <= 63: 2 x 255 x 63 = 32,130) and the activations all 8 (symmetric int8 plus 128).

``WDE_INT8_GEMM=int_mm`` or ``onednn_u8s8`` forces one. Both accumulate exactly in int32, so a token's result
never depends on its batch-mates on either.
"""

from __future__ import annotations

import functools
import os
import platform
import weakref
from dataclasses import dataclass

import torch

from wde.platforms.cpu_flags import cpu_flags

GEMM_ENV = "WDE_INT8_GEMM"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
U8_ZERO_POINT = 128  # symmetric int8 activations [-127, 127] shifted to uint8 [1, 255]


# the largest |quantized weight| each takes: 127, or 63 where the kernel would saturate its int16 pair sums
WEIGHT_MAX: dict[str, int] = {"int_mm": 127, "onednn_u8s8": 63}


@dataclass(frozen=True)
class Int8Gemm:
    name: str  # a key of WEIGHT_MAX
    why: str  # one line for the load log

    @property
    def weight_max(self) -> int:
        return WEIGHT_MAX[self.name]


def _on_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and torch.backends.mkldnn.is_available()


@functools.cache
def chosen_gemm() -> Int8Gemm:
    """``int_mm`` with VNNI, ``onednn_u8s8`` on other x86 CPUs, or what ``WDE_INT8_GEMM`` names."""
    forced = os.environ.get(GEMM_ENV, "").strip().lower()
    if forced and forced not in WEIGHT_MAX:
        names = ", ".join(WEIGHT_MAX)
        raise ValueError(f"{GEMM_ENV}={forced!r} is not one of {names}; unset it to choose by the CPU")
    vnni = sorted(set(VNNI_FLAGS) & cpu_flags())
    if forced == "int_mm" or (not forced and (vnni or not _on_x86())):
        why = f"{GEMM_ENV}=int_mm" if forced else (f"CPU has {vnni[0]}" if vnni else "not an x86 CPU")
        return Int8Gemm("int_mm", why)
    if not _on_x86():
        raise ValueError(f"{GEMM_ENV}=onednn_u8s8 needs an x86 CPU and torch built with oneDNN")
    why = f"{GEMM_ENV}=onednn_u8s8" if forced else "CPU has no VNNI (avx512_vnni / avx_vnni / amx_int8)"
    return Int8Gemm("onednn_u8s8", why)


# oneDNN's packed copy of each int8 weight, by the weight's memory; an entry leaves with its weight tensor.
_PACKED: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}


def prepack(weight_q: torch.Tensor) -> torch.Tensor:
    """``weight_q`` [out, in] int8 -> oneDNN's packed copy (made once per weight, kept while it lives)."""
    key = (weight_q.data_ptr(), tuple(weight_q.shape))
    packed = _PACKED.get(key)
    if packed is None:
        packed = torch.ops.onednn.qlinear_prepack(weight_q, None)
        _PACKED[key] = packed
        weakref.finalize(weight_q, _PACKED.pop, key, None)
    return packed


@torch.library.custom_op("wde::int8_mm_u8s8", mutates_args=())
def int8_mm_u8s8(x_u8: torch.Tensor, weight_q: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """``x_u8`` [num_tokens, in] uint8 (int8 + 128), ``weight_q`` [out, in] int8 (|w| <= 63), ``weight_scale``
    [out] -> [num_tokens, out] float32: (sum_i (x_u8 - 128) * w) * weight_scale, accumulated in int32.
    Opaque to inductor (its own lowering of this op wants the packed weight as a frozen graph constant)."""
    num_out = weight_q.shape[0]
    zero_points = torch.zeros(num_out, dtype=torch.long)
    return torch.ops.onednn.qlinear_pointwise(
        x_u8, 1.0, U8_ZERO_POINT, prepack(weight_q), weight_scale, zero_points, None,
        1.0, 0, torch.float32, "none", [], "",
    )  # fmt: skip


@int8_mm_u8s8.register_fake
def _int8_mm_u8s8_shape(x_u8: torch.Tensor, weight_q: torch.Tensor, _scale: torch.Tensor) -> torch.Tensor:
    return x_u8.new_empty((x_u8.shape[0], weight_q.shape[0]), dtype=torch.float32)
