"""Int8Linear (W8A8: per-row int8 weights, per-token int8 activations) against nn.Linear, and which linears
the int8 quantizer swaps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from wde.config import QUANTIZATION_NAMES
from wde.layers.quantization.int8_gemm import WEIGHT_MAX, Int8Gemm
from wde.layers.quantization.int8_linear import INT8_MAX, LINEAR_KERNELS, Int8Linear, quantize_rows
from wde.layers.quantization.quantize import QUANTIZERS, block_linears, quantize_model

# Per-token/per-row symmetric int8 on Gaussian data: ~1% relative error per layer (7-bit weights on
# onednn_u8s8: ~1.5%).
MAX_RELATIVE_ERROR = 0.025
# Every int8 GEMM runs on any x86 CPU (int_mm slowly without VNNI), so both are tested on every machine.
GEMMS = [Int8Gemm(name, "test") for name in WEIGHT_MAX]


def _linear(in_features: int, out_features: int, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(in_features, out_features, bias=bias)


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g.name)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64, 32), (37, 384, 1152), (5, 3, 200, 96)])
def test_int8_linear_close_to_float(shape: tuple[int, ...], bias: bool, gemm: Int8Gemm) -> None:
    linear = _linear(shape[-2], shape[-1], bias)
    x = torch.randn(*shape[:-2], shape[-2])  # any leading dims, as nn.Linear takes
    with torch.inference_mode():
        layer = Int8Linear.from_linear(linear, gemm)
        expected, got = linear(x), layer(x)
    assert layer.weight_q.abs().max() == gemm.weight_max
    assert got.shape == expected.shape and got.dtype == torch.float32
    relative = ((got - expected).norm() / expected.norm()).item()
    assert relative < MAX_RELATIVE_ERROR, f"relative error {relative:.4f}"


def test_quantize_rows_range_and_zero_rows() -> None:
    x = torch.randn(6, 50) * torch.tensor([0.0, 1e-6, 1.0, 10.0, 1e3, 1.0])[:, None]
    q, scale = quantize_rows(x)
    assert q.dtype == torch.int8 and scale.shape == (6, 1)
    assert q.abs().max() <= INT8_MAX
    assert torch.equal(q[0], torch.zeros(50, dtype=torch.int8))  # an all-zero row stays zero, no NaN
    assert (q[1:].abs().amax(dim=1) == INT8_MAX).all()  # every other row uses the full range
    # rounding error at most half a step per element
    assert ((q.float() * scale - x).abs() <= scale / 2 + 1e-12).all()


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g.name)
def test_a_token_does_not_depend_on_its_batch_mates(gemm: Int8Gemm) -> None:
    """Per-token scales + exact int32 accumulation: each row equals its own single-row pass bit for bit."""
    layer = Int8Linear.from_linear(_linear(96, 160), gemm)
    x = torch.randn(23, 96)
    with torch.inference_mode():
        batched = layer(x)
        singles = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        shuffled = layer(x.flip(0)).flip(0)
    assert torch.equal(batched, singles)
    assert torch.equal(batched, shuffled)


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda g: g.name)
def test_compiled_kernel_equals_eager(gemm: Int8Gemm) -> None:
    layer = Int8Linear.from_linear(_linear(128, 64), gemm)
    x = torch.randn(19, 128)
    with torch.inference_mode():
        compiled = layer(x)
        eager = LINEAR_KERNELS[gemm.name](x, layer.weight_q, layer.weight_scale, layer.bias)
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)


def test_only_the_block_linears_are_quantized() -> None:
    """BERT: query/key/value (fused), attention output, intermediate, output per layer; the pooler and the
    classifier head keep float weights."""
    from tests.tiny_models import NUM_HIDDEN_LAYERS
    from wde.models.bert import BertForSequenceClassification

    config = {
        "vocab_size": 100,
        "hidden_size": 32,
        "num_hidden_layers": NUM_HIDDEN_LAYERS,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    model = BertForSequenceClassification(config)
    assert len(block_linears(model)) == 4 * NUM_HIDDEN_LAYERS
    assert quantize_model(model, "int8") == 4 * NUM_HIDDEN_LAYERS
    assert isinstance(model.classifier, nn.Linear) and isinstance(model.bert.pooler.dense, nn.Linear)
    assert all(isinstance(layer.intermediate, Int8Linear) for layer in model.bert.encoder.layer)
    with pytest.raises(ValueError, match="quantization 'int4' is not one of"):
        quantize_model(model, "int4")


def test_config_names_the_methods_the_quantizers_implement() -> None:
    """wde/config.py stays torch-free, so it lists the method names itself: the two lists must agree."""
    assert set(QUANTIZATION_NAMES) == set(QUANTIZERS)
