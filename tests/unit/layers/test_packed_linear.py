"""PackedLinear (oneDNN, the weight packed once) against nn.Linear, and how the float32 GEMM is chosen:
forced by WDE_FLOAT_GEMM, refused where it cannot run, else by the measured speed-up on the model's shapes.
Tolerance: float32 rounding of a differently ordered sum (relative ~1e-6 on these sizes)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from wde.layers import packed_linear
from wde.layers.packed_linear import (
    GEMM_ENV,
    MIN_SPEEDUP,
    PackedLinear,
    chosen_float_gemm,
    pack_float_linears,
)

RTOL, ATOL = 1e-5, 1e-5

needs_onednn = pytest.mark.skipif(
    not packed_linear._on_x86_with_onednn(), reason="oneDNN's packed linear needs an x86 CPU with oneDNN"
)


@pytest.fixture(autouse=True)
def fresh_measurements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test measures anew: the process keeps one choice per layer shapes."""
    monkeypatch.setattr(packed_linear, "_MEASURED", {})


def _linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=bias)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64, 32), (37, 384, 1152), (5, 3, 200, 96), (0, 384, 384)])
def test_packed_linear_equals_linear(shape: tuple[int, ...], bias: bool) -> None:
    linear = _linear(shape[-2], shape[-1], bias)
    x = torch.randn(*shape[:-2], shape[-2])  # any leading dims, as nn.Linear takes
    with torch.inference_mode():
        layer = PackedLinear.from_linear(linear)
        expected, got = linear(x), layer(x)
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_a_row_does_not_depend_on_its_batch_mates() -> None:
    layer = PackedLinear.from_linear(_linear(384, 1536))
    x = torch.randn(300, 384)
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[index : index + 1]) for index in range(len(x))])
    torch.testing.assert_close(together, alone, rtol=RTOL, atol=ATOL)


def test_packing_refuses_other_dtypes() -> None:
    with pytest.raises(ValueError, match="float32 CPU weight"):
        PackedLinear.from_linear(_linear(8, 8).to(torch.bfloat16))


def test_the_environment_forces_a_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packed_linear, "measured_speedup", _not_measured)
    monkeypatch.setenv(GEMM_ENV, "aten")
    assert chosen_float_gemm([_linear(8, 8)]).name == "aten"
    monkeypatch.setenv(GEMM_ENV, "onednn_packed")
    monkeypatch.setattr(packed_linear, "_on_x86_with_onednn", lambda: True)
    assert chosen_float_gemm([_linear(8, 8)]).name == "onednn_packed"
    monkeypatch.setattr(packed_linear, "_on_x86_with_onednn", lambda: False)
    with pytest.raises(ValueError, match="needs an x86 CPU and torch built with oneDNN"):
        chosen_float_gemm([_linear(8, 8)])
    monkeypatch.setenv(GEMM_ENV, "mkl")
    with pytest.raises(ValueError, match="'mkl' is not one of aten, onednn_packed"):
        chosen_float_gemm([_linear(8, 8)])


def test_without_onednn_aten_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GEMM_ENV, raising=False)
    monkeypatch.setattr(packed_linear, "measured_speedup", _not_measured)
    monkeypatch.setattr(packed_linear, "_on_x86_with_onednn", lambda: False)
    assert chosen_float_gemm([_linear(8, 8)]) == packed_linear.FloatGemm("aten", "not an x86 CPU with oneDNN")


@pytest.mark.parametrize(
    ("speedup", "chosen"), [(1.2, "onednn_packed"), (MIN_SPEEDUP, "onednn_packed"), (1.0, "aten")]
)
def test_the_measured_speedup_chooses(monkeypatch: pytest.MonkeyPatch, speedup: float, chosen: str) -> None:
    monkeypatch.delenv(GEMM_ENV, raising=False)
    monkeypatch.setattr(packed_linear, "_on_x86_with_onednn", lambda: True)
    linears = [_linear(384, 1536), _linear(1536, 384)]
    packed = [nn.Identity(), nn.Identity()]
    measured: list[tuple[object, object]] = []

    def measure(timed: list[nn.Linear], timed_packed: list[nn.Module]) -> float:
        measured.append((timed, timed_packed))
        return speedup

    monkeypatch.setattr(packed_linear, "measured_speedup", measure)
    gemm = chosen_float_gemm(linears, packed)  # type: ignore[arg-type]
    assert gemm.name == chosen and f"{speedup:.2f}x" in gemm.why
    assert measured == [(linears, packed)]  # the caller's packed copies, not new ones


@needs_onednn
@pytest.mark.parametrize("num_features", [64, 2048])  # many rows, and few for a large model (>= 16)
def test_the_measurement_times_both(num_features: int) -> None:
    linears = [_linear(num_features, 96), _linear(96, num_features)]
    speedup = packed_linear.measured_speedup(linears, [PackedLinear.from_linear(x) for x in linears])
    assert math.isfinite(speedup) and speedup > 0


@needs_onednn
def test_pack_float_linears_swaps_only_when_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = nn.ModuleList([nn.Sequential(_linear(16, 32), nn.GELU(), _linear(32, 16)) for _ in range(2)])
    x = torch.randn(4, 16)
    with torch.inference_mode():
        expected = blocks[1](blocks[0](x))
    linears = [(block, name, child) for block in blocks for name, child in block.named_children()
               if isinstance(child, nn.Linear)]  # fmt: skip
    monkeypatch.setenv(GEMM_ENV, "aten")
    assert pack_float_linears(linears).name == "aten"
    assert not any(isinstance(m, PackedLinear) for m in blocks.modules())
    monkeypatch.setenv(GEMM_ENV, "onednn_packed")
    assert pack_float_linears(linears).name == "onednn_packed"
    assert sum(isinstance(m, PackedLinear) for m in blocks.modules()) == 4
    with torch.inference_mode():
        torch.testing.assert_close(blocks[1](blocks[0](x)), expected, rtol=RTOL, atol=ATOL)


def test_a_second_load_of_the_same_layers_keeps_the_first_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two loads of one model in a process compute alike: the measurement is made once per layer shapes
    and thread count, even where a second one would come out on the other side of MIN_SPEEDUP."""
    monkeypatch.delenv(GEMM_ENV, raising=False)
    monkeypatch.setattr(packed_linear, "_on_x86_with_onednn", lambda: True)
    speedups = iter([1.2, 1.0, 1.0])
    monkeypatch.setattr(packed_linear, "measured_speedup", lambda linears, packed: next(speedups))
    packed = [nn.Identity(), nn.Identity()]
    first = chosen_float_gemm([_linear(64, 256), _linear(256, 64)], packed)  # type: ignore[arg-type]
    second = chosen_float_gemm([_linear(64, 256), _linear(256, 64)], packed)  # type: ignore[arg-type]
    assert first.name == second.name == "onednn_packed"
    assert "first load" in second.why
    other_shapes = chosen_float_gemm([_linear(64, 128), _linear(128, 64)], packed)  # type: ignore[arg-type]
    assert other_shapes.name == "aten"  # measured anew
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert chosen_float_gemm([_linear(64, 256), _linear(256, 64)], packed).name == "aten"  # type: ignore[arg-type]
    finally:
        torch.set_num_threads(threads)


def _not_measured(linears: list[nn.Linear], packed: list[nn.Module]) -> float:
    raise AssertionError("a forced or refused choice measures nothing")
