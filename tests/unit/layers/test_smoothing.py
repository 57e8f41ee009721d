"""int8 smoothing (SmoothQuant): the factors, the exact float identity they rely on, the error they remove on
inputs with outlier channels, and the calibration pass's hooks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from wde.layers.quantization.int8_gemm import WEIGHT_MAX, Int8Gemm
from wde.layers.quantization.int8_linear import LINEAR_KERNELS, Int8Linear
from wde.layers.quantization.smoothing import (
    ALPHA,
    SMOOTHING_ENV,
    record_input_maxima,
    smoothing_enabled,
    smoothing_scales,
)

GEMMS = [Int8Gemm(name, "test") for name in WEIGHT_MAX]
NUM_OUTLIERS = 4
OUTLIER_SIZE = 60.0  # as LayerNorm outputs of trained BERTs: a few channels tens of times the others


def _outlier_inputs(num_tokens: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """[num_tokens, in] Gaussian, with NUM_OUTLIERS channels OUTLIER_SIZE times larger in every token."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, in_features, generator=generator)
    x[:, :NUM_OUTLIERS] *= OUTLIER_SIZE
    return x


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got - expected).norm() / expected.norm()).item()


def test_scales_follow_the_formula_and_leave_unseen_channels_alone() -> None:
    weight = torch.tensor([[1.0, -4.0, 0.0, 2.0], [-0.5, 1.0, 0.0, 1.0]])  # [out 2, in 4]
    input_max = torch.tensor([9.0, 1.0, 5.0, 0.0])
    scales = smoothing_scales(input_max, weight)
    expected_seen = torch.tensor([9.0, 1.0]) ** ALPHA / torch.tensor([1.0, 4.0]) ** (1 - ALPHA)
    torch.testing.assert_close(scales[:2], expected_seen)
    assert scales[2] == 1.0  # an all-zero weight column
    assert scales[3] == 1.0  # a channel calibration never saw


def test_smoothing_keeps_the_float_product() -> None:
    """The identity it rests on: (x / s) @ (W * s).T == x @ W.T (float rounding only)."""
    linear = nn.Linear(64, 48)
    x = _outlier_inputs(10, 64)
    scales = smoothing_scales(x.abs().amax(dim=0), linear.weight)
    smoothed = (x / scales) @ (linear.weight * scales).T + linear.bias
    torch.testing.assert_close(smoothed, linear(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g.name)
def test_smoothing_removes_most_of_the_outliers_error(gemm: Int8Gemm) -> None:
    """Calibrated on other tokens of the same distribution, the smoothed layer's error is a fraction of the
    plain one's (measured: 0.028 -> 0.0066 with int_mm, 0.029 -> 0.010 with onednn_u8s8's 7-bit weights)."""
    torch.manual_seed(0)
    linear = nn.Linear(256, 192)
    calibration, x = _outlier_inputs(64, 256, seed=1), _outlier_inputs(33, 256, seed=2)
    with torch.inference_mode():
        plain = Int8Linear.from_linear(linear, gemm)
        smoothed = Int8Linear.from_linear(linear, gemm, input_max=calibration.abs().amax(dim=0))
        expected = linear(x)
        plain_error = _relative_error(plain(x), expected)
        smoothed_error = _relative_error(smoothed(x), expected)
    assert smoothed.input_scale is not None and plain.input_scale is None
    assert smoothed_error < plain_error / 2, f"plain {plain_error:.4f}, smoothed {smoothed_error:.4f}"


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g.name)
def test_smoothed_compiled_kernel_equals_eager_and_batch_equals_single(gemm: Int8Gemm) -> None:
    linear = nn.Linear(96, 80)
    x = _outlier_inputs(17, 96)
    layer = Int8Linear.from_linear(linear, gemm, input_max=x.abs().amax(dim=0))
    with torch.inference_mode():
        batched = layer(x)
        singles = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        kernel = LINEAR_KERNELS[gemm.name]
        eager = kernel(x, layer.weight_q, layer.weight_scale, layer.bias, layer.input_scale)
    assert torch.equal(batched, singles)  # fixed per-channel factors: still nothing from the batch-mates
    torch.testing.assert_close(batched, eager, rtol=1e-6, atol=1e-6)


def test_record_input_maxima_keeps_the_largest_per_channel_and_removes_its_hooks() -> None:
    first, second, unused = nn.Linear(3, 2), nn.Linear(2, 2), nn.Linear(2, 2)
    batches = [torch.tensor([[1.0, -5.0, 0.5]]), torch.tensor([[-2.0, 1.0, 0.0], [0.0, 3.0, -4.0]])]

    def run() -> None:
        for batch in batches:
            second(first(batch))

    maxima = record_input_maxima([first, second, unused], run)
    torch.testing.assert_close(maxima[first], torch.tensor([2.0, 5.0, 4.0]))
    assert maxima[second].shape == (2,)
    assert unused not in maxima  # a linear that never ran is not smoothed
    assert not first._forward_pre_hooks and not second._forward_pre_hooks


def test_the_switch_reads_zero_or_one_and_refuses_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SMOOTHING_ENV, raising=False)
    assert smoothing_enabled()
    monkeypatch.setenv(SMOOTHING_ENV, "0")
    assert not smoothing_enabled()
    monkeypatch.setenv(SMOOTHING_ENV, "off")
    with pytest.raises(ValueError, match="WDE_INT8_SMOOTHING='off' is not 0 or 1"):
        smoothing_enabled()
