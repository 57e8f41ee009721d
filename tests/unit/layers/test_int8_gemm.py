"""The int8 GEMMs (``int8_gemm.py``): oneDNN's u8 x s8 op equals exact integer arithmetic over the whole
activation range with 7-bit weights (no int16 saturation), and the choice follows the CPU's flags."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch

from wde.layers.quantization import int8_gemm
from wde.layers.quantization.int8_gemm import GEMM_ENV, U8_ZERO_POINT, WEIGHT_MAX, chosen_gemm, int8_mm_u8s8

needs_x86 = pytest.mark.skipif(not int8_gemm._on_x86(), reason="onednn_u8s8 needs an x86 CPU with oneDNN")


@pytest.fixture
def fresh_choice(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv(GEMM_ENV, raising=False)
    chosen_gemm.cache_clear()
    yield monkeypatch
    chosen_gemm.cache_clear()


@needs_x86
@pytest.mark.parametrize(("num_tokens", "num_in", "num_out"), [(1, 16, 8), (37, 384, 1152), (5, 1536, 384)])
def test_u8s8_is_exact_over_the_whole_range(num_tokens: int, num_in: int, num_out: int) -> None:
    """Worst case for saturation: every activation at 0 or 255 and every weight at +-63; the float32 output is
    the exact int32 sum times the weight scale (one rounding: relative 6e-8)."""
    torch.manual_seed(0)
    x_u8 = (torch.randint(0, 2, (num_tokens, num_in)) * 255).to(torch.uint8)
    weight_q = ((torch.randint(0, 2, (num_out, num_in)) * 2 - 1) * WEIGHT_MAX["onednn_u8s8"]).to(torch.int8)
    weight_scale = torch.rand(num_out) + 0.5
    expected = ((x_u8.double() - U8_ZERO_POINT) @ weight_q.double().t()) * weight_scale.double()
    got = int8_mm_u8s8(x_u8, weight_q, weight_scale)
    assert got.dtype == torch.float32 and got.shape == (num_tokens, num_out)
    torch.testing.assert_close(got.double(), expected, rtol=1e-7, atol=0)


@needs_x86
def test_packed_weight_leaves_with_its_weight() -> None:
    weight_q = torch.randint(-63, 64, (24, 32), dtype=torch.int8)
    key = (weight_q.data_ptr(), tuple(weight_q.shape))
    int8_gemm.prepack(weight_q)
    assert key in int8_gemm._PACKED
    del weight_q
    gc.collect()
    assert key not in int8_gemm._PACKED


def test_vnni_cpu_runs_int_mm(fresh_choice: pytest.MonkeyPatch) -> None:
    fresh_choice.setattr(int8_gemm, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    gemm = chosen_gemm()
    assert (gemm.name, gemm.weight_max) == ("int_mm", 127)
    assert "avx512_vnni" in gemm.why


@needs_x86
def test_cpu_without_vnni_runs_u8s8_with_7_bit_weights(fresh_choice: pytest.MonkeyPatch) -> None:
    fresh_choice.setattr(int8_gemm, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    gemm = chosen_gemm()
    assert (gemm.name, gemm.weight_max) == ("onednn_u8s8", 63)
    assert "no VNNI" in gemm.why


@needs_x86
def test_environment_forces_either(fresh_choice: pytest.MonkeyPatch) -> None:
    fresh_choice.setattr(int8_gemm, "cpu_flags", lambda: frozenset({"avx512_vnni"}))
    fresh_choice.setenv(GEMM_ENV, "onednn_u8s8")
    assert chosen_gemm().name == "onednn_u8s8"
    chosen_gemm.cache_clear()
    fresh_choice.setattr(int8_gemm, "cpu_flags", lambda: frozenset({"avx2"}))
    fresh_choice.setenv(GEMM_ENV, "INT_MM")
    assert chosen_gemm() == int8_gemm.Int8Gemm("int_mm", f"{GEMM_ENV}=int_mm")


def test_unknown_gemm_names_the_choices(fresh_choice: pytest.MonkeyPatch) -> None:
    fresh_choice.setenv(GEMM_ENV, "vnni")
    with pytest.raises(ValueError, match="WDE_INT8_GEMM='vnni' is not one of int_mm, onednn_u8s8"):
        chosen_gemm()
